"""Studies: sweeps over world × model × condition × instance × seed, stored and reported.

* `grid`     — the cells of a study and the seeds their attempts run with;
* `store`    — the SQLite results store (`runs/NAME/results.sqlite`) and exports;
* `executor` — running the grid locally (processes) or on Dask, resumably;
* `stats`    — Wilson intervals, exact McNemar, clustered bootstrap, rank correlations;
* `report`   — the static HTML report with its charts and readable traces;
* `frames`   — a study's trace events and messages as tables.

Import the submodule you need: this package root imports nothing heavy.
`episodes(STUDY_DIR)` gives a study's attempts as a pandas DataFrame, `events(STUDY_DIR)`
every step of every attempt, `messages(STUDY_DIR)` the messages between parties (Inspect's
`samples_df`, `events_df` and `messages_df`; they need pandas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["episodes", "events", "executor", "frames", "grid", "messages", "report", "stats",
           "store"]


def episodes(study_dir: str | Path) -> Any:
    """Every episode attempt of a study as a pandas DataFrame, one column per figure.

    The same table as `eairc export --format csv` (columns of `store.flat_rows`):
    measurements as nullable Int64 (1/0/<NA> = unassessed), one `metric.NAME`,
    `usage.…` and `unassessed.NAME` column each, and `retained` (1 for the attempt a
    cell's rates use). Needs pandas (`pip install 'eairdsl[pandas]'`); raises
    ImportError saying so otherwise, and StoreError if the folder holds no study.
    """
    from eairdsl.study.frames import open_study
    from eairdsl.study.store import episodes_frame

    _, store = open_study(study_dir)
    with store:
        return episodes_frame(store)


def events(study_dir: str | Path) -> Any:
    """Every trace event of a study's attempts as a pandas DataFrame (Inspect's
    `events_df`): the attempt's key columns as `episodes()` names them (world, model,
    condition, instance, seed, rep, attempt, retained), then the event's fields (step,
    t, kind, actor, recipient, edge, content, tool, args, result, rejected, reason, diff,
    task, call, final; objects as JSON text). Join with `episodes()` on the key columns.
    Needs pandas; StoreError if the folder holds no study or a trace cannot be read."""
    from eairdsl.study.frames import events_frame

    return events_frame(study_dir)


def messages(study_dir: str | Path) -> Any:
    """The messages between parties of a study's attempts as a pandas DataFrame (Inspect's
    `messages_df`): the key columns, then step, t, actor (the sender), recipient, edge,
    content and final. Needs pandas."""
    from eairdsl.study.frames import messages_frame

    return messages_frame(study_dir)
