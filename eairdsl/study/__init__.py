"""Studies: sweeps over world × model × condition × instance × seed, stored and reported.

* `grid`     — the cells of a study and the seeds their attempts run with;
* `store`    — the SQLite results store (`runs/NAME/results.sqlite`) and exports;
* `executor` — running the grid locally (processes) or on Dask, resumably;
* `stats`    — Wilson intervals, exact McNemar, clustered bootstrap, rank correlations;
* `report`   — the static HTML report with its charts and readable traces.

Import the submodule you need: this package root imports nothing heavy.
`episodes(STUDY_DIR)` gives a study's attempts as a pandas DataFrame (needs pandas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["episodes", "executor", "grid", "report", "stats", "store"]


def episodes(study_dir: str | Path) -> Any:
    """Every episode attempt of a study as a pandas DataFrame, one column per figure.

    The same table as `eairc export --format csv` (columns of `store.flat_rows`):
    measurements as nullable Int64 (1/0/<NA> = unassessed), one `metric.NAME`,
    `usage.…` and `unassessed.NAME` column each, and `retained` (1 for the attempt a
    cell's rates use). Needs pandas (`pip install 'eairdsl[pandas]'`); raises
    ImportError saying so otherwise, and StoreError if the folder holds no study.
    """
    from eairdsl.study.store import STORE_FILE, Store, episodes_frame

    folder = Path(study_dir)
    path = folder if folder.suffix == ".sqlite" else folder / STORE_FILE
    with Store.open(path, create=False) as store:
        return episodes_frame(store)
