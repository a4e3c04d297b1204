"""A study's steps as tables: one row per trace event (`events`) or per message (`messages`).

`eairdsl.study.episodes()` gives one row per attempt, as Inspect's `samples_df` gives
one per sample; what happened inside an episode was only in its JSONL trace, so an
analysis across episodes ("which role sends the most messages under the `mild`
condition", "how often is a tool call rejected") had to read the traces itself.
These frames are Inspect's `events_df` / `messages_df` for a study: the attempt's
key columns (the same names as `episodes()`: world, model, condition, instance,
seed, rep, attempt, retained) and then the event's own fields as `docs/trace.md`
describes them. Values that are objects (`args`, `result`, `diff`) are JSON text
with sorted keys, so every cell is a scalar and the frame writes to CSV or Parquet
as it is.

Rows are built from the traces the store names, in the store's order (cell, then
attempt) and each trace's step order; a trace path outside the study folder, a
missing trace or a line that is not a trace event is a `StoreError` naming the file
and line, not a silently shorter table.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eairdsl.study.store import STORE_FILE, Store, StoreError

__all__ = ["EVENT_COLUMNS", "KEY_COLUMNS", "MESSAGE_COLUMNS", "event_rows", "events_frame",
           "messages_frame", "open_study"]

#: the attempt's columns, as `episodes()` names them
KEY_COLUMNS = ("world", "model", "condition", "instance", "seed", "rep", "attempt",
               "retained")
#: a trace event's fields (`runtime.trace.TraceEvent`, docs/trace.md) after the key columns
EVENT_COLUMNS = (*KEY_COLUMNS, "step", "t", "kind", "actor", "recipient", "edge", "content",
                 "tool", "args", "result", "rejected", "reason", "diff", "task", "call",
                 "final")
#: a message's columns: who said what to whom, when
MESSAGE_COLUMNS = (*KEY_COLUMNS, "step", "t", "actor", "recipient", "edge", "content",
                   "final")
_JSON_FIELDS = frozenset({"args", "result", "diff"})
_DTYPES = {"seed": "Int64", "rep": "Int64", "attempt": "Int64", "retained": "Int64",
           "task": "Int64", "t": "Float64", "rejected": "boolean", "final": "boolean"}


def open_study(study_dir: str | Path) -> tuple[Path, Store]:
    """The study folder and its store (a `results.sqlite` path is taken as its folder's)."""
    folder = Path(study_dir)
    path = folder if folder.suffix == ".sqlite" else folder / STORE_FILE
    return path.parent, Store.open(path, create=False)


def _trace_file(root: Path, rel: str) -> Path:
    """The trace a store row names, kept inside the study folder (a store is a file a
    user may have been sent: its paths are not followed out of the folder)."""
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise StoreError(f"{root / STORE_FILE}: a trace path leaves the study folder ({rel})")
    return path


def _cell(name: str, value: Any) -> Any:
    if name in _JSON_FIELDS:
        return None if value is None else json.dumps(value, sort_keys=True,
                                                     ensure_ascii=False)
    if name == "t" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def event_rows(root: Path, store: Store, columns: tuple[str, ...] = EVENT_COLUMNS,
               kinds: frozenset[str] | None = None) -> Iterator[dict[str, Any]]:
    """One dict per trace event (of `kinds`, all when None) of every attempt with a trace,
    holding `columns`; read trace by trace, so a caller that streams keeps one trace."""
    for row in store.rows():
        rel = row.get("trace_path")
        if not rel:
            continue  # an attempt that left no trace (an error before the episode ran)
        path = _trace_file(root, str(rel))
        key = {c: row[c] for c in KEY_COLUMNS}
        try:
            fh = path.open(encoding="utf-8")
        except OSError as exc:
            raise StoreError(f"{path}: the trace cannot be read "
                             f"({exc.strerror or exc})") from None
        with fh:
            for n, line in enumerate(fh, 1):
                if n == 1 or not line.strip():
                    continue  # the header: its fields are the key columns
                try:
                    data = json.loads(line)
                except ValueError as exc:
                    raise StoreError(f"{path}:{n}: not a trace line ({exc})") from None
                if not isinstance(data, dict):
                    raise StoreError(f"{path}:{n}: not a trace line (not a JSON object)")
                if data.get("type") != "event":
                    continue  # the result line
                if kinds is not None and data.get("kind") not in kinds:
                    continue
                out = dict(key)
                for c in columns[len(KEY_COLUMNS):]:
                    out[c] = _cell(c, data.get(c))
                yield out


def _frame(rows: Iterator[dict[str, Any]], columns: tuple[str, ...]) -> Any:
    try:
        pd = importlib.import_module("pandas")
    except ImportError:
        raise ImportError("eairdsl.study.events() and messages() need pandas, which is not "
                          "installed: pip install 'eairdsl[pandas]' (or read the JSONL "
                          "traces under STUDY/traces/)") from None
    data: dict[str, list[Any]] = {c: [] for c in columns}
    for r in rows:
        for c in columns:
            data[c].append(r[c])
    return pd.DataFrame({c: pd.array(v, dtype=_DTYPES.get(c, "string"))
                         for c, v in data.items()}, columns=list(columns))


def events_frame(study_dir: str | Path) -> Any:
    """`eairdsl.study.events`: every trace event of the study as a pandas DataFrame."""
    root, store = open_study(study_dir)
    with store:
        return _frame(event_rows(root, store), EVENT_COLUMNS)


def messages_frame(study_dir: str | Path) -> Any:
    """`eairdsl.study.messages`: every message between parties as a pandas DataFrame."""
    root, store = open_study(study_dir)
    with store:
        return _frame(event_rows(root, store, MESSAGE_COLUMNS, frozenset({"message"})),
                      MESSAGE_COLUMNS)
