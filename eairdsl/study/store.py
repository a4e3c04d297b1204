"""The results store: one SQLite file per study (`runs/NAME/results.sqlite`).

One row per episode attempt in `episodes`; one row per world in `worlds`
(its digest, title and condition order); one row per world × condition in
`conditions` (the condition's `doc` and lever values, for the report); once a
report has found audits of the study, one row per trace × audit arm in `audits`
(verdict, counts, the report's path; the audit folders stay the source of truth); one row
per world × `study measure` in `study_measures` (the declaration as IR JSON and, once a
study or report computed it, its result); one row per world in `world_sources` (the
source file the study compiled it from, absolute, and the digest it had then: `eairc audit
STUDY` finds the world there); a `meta` table that says what the file is.
Only the study's parent process writes, one transaction per attempt, so a crash loses
at most the episodes in flight — which have no row and are run again on resume.

Identification. A store carries `PRAGMA application_id = 0x45414952`
("EAIR"), `PRAGMA user_version = SCHEMA_VERSION` and `meta(app_id,
schema_version)`. Opening checks all of them read-only first: a corrupt file,
a non-SQLite file, another application's database or a newer schema raises
`StoreError` with a message for people, and the file is never written.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from eairdsl.errors import UsageError
from eairdsl.ir import ConditionIR, StudyMeasureIR
from eairdsl.study.grid import Attempt, Cell
from eairdsl.study.sqlite_file import FileKind, connect, is_sqlite
from eairdsl.study.sqlite_file import transaction as _transaction
from eairdsl.vocabulary import MEASUREMENTS

__all__ = [
    "APP_ID",
    "AUDIT_COLUMNS",
    "COLUMNS",
    "MEASUREMENTS",
    "SCHEMA_VERSION",
    "STORE_FILE",
    "Store",
    "StoreError",
    "dump_measure",
    "episodes_frame",
    "export_csv",
    "export_parquet",
    "flat_rows",
    "parse_measure",
]

SCHEMA_VERSION = 1
APP_ID = "eairdsl.study"
SQLITE_APPLICATION_ID = 0x45414952  # "EAIR"
STORE_FILE = "results.sqlite"
KEY = ("world", "model", "condition", "instance", "seed", "rep")
#: export columns, in order (`retained` is derived: the cell's first valid attempt)
COLUMNS = ("world", "digest", "model", "agents", "condition", "instance", "seed", "rep",
           "attempt", "run_seed", "retained", "valid", "validity_reason", *MEASUREMENTS,
           "unassessed", "metrics", "usage", "end_time", "trace_path")
#: each condition's description and lever values; added after schema 1 was released, so a
#: store written before has no such table: `register_world` creates it (IF NOT EXISTS) and
#: `conditions()` reads an absent one as empty (the report then takes the levers from the
#: traces' headers and shows no description)
_CONDITIONS_TABLE = ("conditions (world TEXT NOT NULL, name TEXT NOT NULL, doc TEXT, "
                     "levers TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (world, name))")

#: what the report found in the study's audit folders (eairdsl.study.audits), one row per
#: trace and arm; like `conditions`, created when first written (IF NOT EXISTS), read as
#: empty when absent, and rewritten whole by each report: the audit folders' files are the
#: source of truth, this is their index for SQL
_AUDITS_TABLE = ("audits (trace_path TEXT NOT NULL, arm TEXT NOT NULL, episode TEXT NOT NULL, "
                 "status TEXT NOT NULL, verdict TEXT, findings INTEGER NOT NULL DEFAULT 0, "
                 "leads INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0, "
                 "report TEXT, PRIMARY KEY (trace_path, arm))")
AUDIT_COLUMNS = ("trace_path", "arm", "episode", "status", "verdict", "findings", "leads",
                 "errors", "report")

#: each world's study measures (eairdsl.study.cohort): the declaration (IR JSON, so a report
#: recomputes it from the store alone) and the last computed result; like `conditions`,
#: created when first written and read as empty in a store written before it existed
_STUDY_MEASURES_TABLE = ("study_measures (world TEXT NOT NULL, name TEXT NOT NULL, "
                         "position INTEGER NOT NULL DEFAULT 0, kind TEXT NOT NULL, "
                         "declaration TEXT NOT NULL, result TEXT, PRIMARY KEY (world, name))")

#: where each world came from: the source file the study compiled (absolute) and the digest it
#: had; added after schema 1 was released, so like `conditions` it is created when first
#: written (IF NOT EXISTS) and read as empty in a store written before it existed (then the
#: audit finds the world under generated/ or worlds/, or is given --world)
_WORLD_SOURCES_TABLE = ("world_sources (name TEXT PRIMARY KEY, path TEXT NOT NULL, "
                        "digest TEXT NOT NULL)")

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE worlds (
  name TEXT PRIMARY KEY, digest TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
  risk TEXT NOT NULL DEFAULT '', conditions TEXT NOT NULL DEFAULT '[]');
CREATE TABLE episodes (
  id INTEGER PRIMARY KEY,
  world TEXT NOT NULL, digest TEXT NOT NULL, model TEXT NOT NULL, agents TEXT NOT NULL,
  condition TEXT NOT NULL, instance TEXT NOT NULL, seed INTEGER NOT NULL,
  rep INTEGER NOT NULL, attempt INTEGER NOT NULL, run_seed INTEGER NOT NULL,
  {", ".join(f"{m} INTEGER CHECK ({m} IN (0, 1))" for m in MEASUREMENTS)},
  valid INTEGER NOT NULL CHECK (valid IN (0, 1)), validity_reason TEXT,
  unassessed TEXT NOT NULL DEFAULT '{{}}', metrics TEXT NOT NULL DEFAULT '{{}}', usage TEXT,
  end_time REAL, trace_path TEXT,
  UNIQUE (world, model, condition, instance, seed, rep, attempt));
CREATE TABLE {_CONDITIONS_TABLE};
"""


class StoreError(UsageError):
    """The results file cannot be used (corrupt, foreign, newer, another world version)."""


#: what identifies this store's file (`study.sqlite_file.identify`)
_KIND = FileKind(app_id=APP_ID, sqlite_id=SQLITE_APPLICATION_ID, schema_version=SCHEMA_VERSION,
                 noun="results store", schema_noun="results", option="--out",
                 error=StoreError, also=" or move it", tables=frozenset({"episodes", "worlds"}))


def _bit(value: Any) -> int | None:
    return None if value is None else int(bool(value))


class Store:
    """A study's results file; use `Store.open(path)`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: Path, create: bool = True) -> Store:
        """Open (or, with `create`, start) a store; StoreError if the file is not one of ours."""
        path = Path(path)
        return cls(path, connect(path, _KIND, schema=_SCHEMA, create=create, wal=True,
                                 missing=f"no results store at {path}; run `eairc study … "
                                         f"--out {path.parent}` first"))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ worlds
    def register_world(self, name: str, digest: str, title: str = "", risk: str = "",
                       conditions: list[str] | None = None,
                       details: Sequence[ConditionIR] = (),
                       study_measures: Sequence[StudyMeasureIR] = ()) -> None:
        """Record a world; refuse one whose digest differs from the results already stored.

        `details` are the world's compiled conditions: each one's `doc` and lever values
        are kept (for the report) for those named in `conditions`, or all without it;
        `study_measures` are the world's study measure declarations (kept whole)."""
        row = self.conn.execute("SELECT digest, conditions FROM worlds WHERE name = ?",
                                (name,)).fetchone()
        if row is not None and row["digest"] != digest:
            raise StoreError(
                f"{self.path} holds results of world {name} with digest {row['digest'][:12]}…, "
                f"but this {name} has digest {digest[:12]}… (the world changed); write the new "
                "study to another --out")
        order = list(json.loads(row["conditions"])) if row is not None else []
        order += [c for c in conditions or [] if c not in order]
        with _transaction(self.conn):
            self.conn.execute(
                "INSERT INTO worlds (name, digest, title, risk, conditions) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET conditions = excluded.conditions,"
                " title = excluded.title, risk = excluded.risk",
                (name, digest, title, risk, json.dumps(order)))
            if details:
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS {_CONDITIONS_TABLE}")
                wanted = set(conditions) if conditions else None
                self.conn.executemany(
                    "INSERT INTO conditions (world, name, doc, levers) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(world, name) DO UPDATE SET doc = excluded.doc,"
                    " levers = excluded.levers",
                    [(name, c.name, c.doc, json.dumps(c.levers, sort_keys=True))
                     for c in details if wanted is None or c.name in wanted])
            if study_measures:
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS {_STUDY_MEASURES_TABLE}")
                self.conn.executemany(
                    "INSERT INTO study_measures (world, name, position, kind, declaration)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(world, name) DO UPDATE SET"
                    " position = excluded.position, kind = excluded.kind,"
                    " declaration = excluded.declaration",
                    [(name, m.name, i, m.kind, dump_measure(m))
                     for i, m in enumerate(study_measures)])

    def record_world_source(self, name: str, path: Path, digest: str) -> None:
        """Keep the source file world `name` was compiled from (made absolute) and its
        digest, so an audit of the study can find the world without `--world`."""
        with _transaction(self.conn):
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {_WORLD_SOURCES_TABLE}")
            self.conn.execute(
                "INSERT INTO world_sources (name, path, digest) VALUES (?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET path = excluded.path,"
                " digest = excluded.digest",
                (name, str(Path(path).absolute()), digest))

    def world_sources(self) -> dict[str, tuple[Path, str]]:
        """World name → (the source file the study compiled it from, its digest then); {}
        for a store written before sources were kept, or a study given compiled worlds."""
        try:
            found = self.conn.execute("SELECT * FROM world_sources ORDER BY name").fetchall()
        except sqlite3.OperationalError:  # no such table: an older store
            return {}
        return {str(r["name"]): (Path(r["path"]), str(r["digest"])) for r in found}

    def conditions(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(world, condition) → {"doc": str | None, "levers": {...}}; {} for a store written
        before conditions were kept."""
        try:
            found = self.conn.execute("SELECT * FROM conditions ORDER BY world, name").fetchall()
        except sqlite3.OperationalError:  # no such table: an older store
            return {}
        return {(r["world"], r["name"]): {"doc": r["doc"], "levers": json.loads(r["levers"])}
                for r in found}

    # ------------------------------------------------------------ study measures
    def study_measures(self) -> list[tuple[str, StudyMeasureIR, dict[str, Any] | None]]:
        """(world, declaration, last result or None) by world and declaration order; [] for a
        store without study measures (or written before they existed). StoreError when a
        stored declaration is not one (the store is untrusted input)."""
        try:
            found = self.conn.execute("SELECT * FROM study_measures ORDER BY world, position, "
                                      "name").fetchall()
        except sqlite3.OperationalError:  # no such table: an older store
            return []
        out = []
        for r in found:
            try:
                measure = parse_measure(r["declaration"])
                result = json.loads(r["result"]) if r["result"] else None
            except ValueError:
                raise StoreError(f"{self.path}: the stored study measure {r['world']}."
                                 f"{r['name']} is not readable; rerun the study into another "
                                 "--out") from None
            out.append((str(r["world"]), measure, result if isinstance(result, dict) else None))
        return out

    def record_study_measure_results(self, results: Sequence[dict[str, Any]]) -> None:
        """Store each computed result (`StudyMeasureResult` data with `world` and `name`)
        beside its declaration; results of measures the store does not declare are ignored."""
        if not results:
            return
        with _transaction(self.conn):
            self.conn.executemany(
                "UPDATE study_measures SET result = ? WHERE world = ? AND name = ?",
                [(json.dumps(r, sort_keys=True), r["world"], r["name"]) for r in results])

    # ------------------------------------------------------------ audits
    def record_audits(self, rows: Sequence[dict[str, Any]]) -> None:
        """Replace the `audits` table with `rows` (AUDIT_COLUMNS: the trace as the episodes
        table names it, the arm, the bundle's episode id, the index's status, verdict and
        counts, the report's path relative to the study). No rows and no table: nothing is
        written, so a study never audited keeps its file as it was."""
        exists = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                   "name = 'audits'").fetchone() is not None
        if not rows and not exists:
            return
        with _transaction(self.conn):
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {_AUDITS_TABLE}")
            self.conn.execute("DELETE FROM audits")
            self.conn.executemany(
                f"INSERT OR REPLACE INTO audits ({', '.join(AUDIT_COLUMNS)}) VALUES "
                f"({', '.join('?' for _ in AUDIT_COLUMNS)})",
                [tuple(r.get(c) for c in AUDIT_COLUMNS) for r in rows])

    def audits(self) -> list[dict[str, Any]]:
        """The `audits` table's rows, by trace and arm; [] when no report recorded any."""
        try:
            found = self.conn.execute("SELECT * FROM audits ORDER BY trace_path, arm").fetchall()
        except sqlite3.OperationalError:  # no such table: never audited, or an older store
            return []
        return [{c: r[c] for c in AUDIT_COLUMNS} for r in found]

    def worlds(self) -> list[dict[str, Any]]:
        return [{"name": r["name"], "digest": r["digest"], "title": r["title"],
                 "risk": r["risk"], "conditions": json.loads(r["conditions"])}
                for r in self.conn.execute("SELECT * FROM worlds ORDER BY name")]

    # ------------------------------------------------------------ episodes
    def attempts(self) -> dict[Cell, list[tuple[int, bool]]]:
        """Each cell's recorded attempts as (attempt, valid), in attempt order."""
        out: dict[Cell, list[tuple[int, bool]]] = {}
        for r in self.conn.execute(
                f"SELECT {', '.join(KEY)}, attempt, valid FROM episodes ORDER BY attempt"):
            cell = Cell(r["world"], r["model"], r["condition"], r["instance"], r["seed"],
                        r["rep"])
            out.setdefault(cell, []).append((r["attempt"], bool(r["valid"])))
        return out

    def record(self, attempt: Attempt, digest: str, result: dict[str, Any],
               trace_path: str | None) -> None:
        """Write one finished attempt in its own transaction."""
        c = attempt.cell
        m = result.get("measurements", {})
        usage = result.get("usage") or None
        with _transaction(self.conn):
            self.conn.execute(
                f"INSERT INTO episodes (world, digest, model, agents, condition, instance, seed,"
                f" rep, attempt, run_seed, {', '.join(MEASUREMENTS)}, valid, validity_reason,"
                f" unassessed, metrics, usage, end_time, trace_path)"
                f" VALUES ({', '.join('?' * (17 + len(MEASUREMENTS)))})",
                (c.world, digest, c.model, attempt.agents, c.condition, c.instance, c.seed,
                 c.rep, attempt.attempt, attempt.run_seed, *(_bit(m.get(k)) for k in MEASUREMENTS),
                 int(bool(result.get("valid"))), result.get("validity_reason"),
                 json.dumps(result.get("unassessed") or {}, sort_keys=True),
                 json.dumps(result.get("metrics") or {}, sort_keys=True),
                 json.dumps(usage, sort_keys=True) if usage else None,
                 result.get("end_time"), trace_path))

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])

    def rows(self) -> list[dict[str, Any]]:
        """Every attempt as a dict (export columns), sorted by cell and attempt, with `retained`."""
        raw = [dict(r) for r in self.conn.execute(
            f"SELECT * FROM episodes ORDER BY {', '.join(KEY)}, attempt")]
        first_valid: dict[tuple[Any, ...], int] = {}
        for r in raw:
            key = tuple(r[k] for k in KEY)
            if r["valid"] and key not in first_valid:
                first_valid[key] = r["attempt"]
        out = []
        for r in raw:
            key = tuple(r[k] for k in KEY)
            row = {col: r.get(col) for col in COLUMNS if col != "retained"}
            row["retained"] = int(first_valid.get(key) == r["attempt"])
            out.append({col: row[col] for col in COLUMNS})
        return out


#: the stored columns the flat export keeps as they are (the JSON ones are spread out)
FLAT_FIXED = tuple(c for c in COLUMNS if c not in ("unassessed", "metrics", "usage"))
#: prefixes of the spread-out columns, in export order
FLAT_PREFIXES = ("metric", "usage", "unassessed")
_INTS = frozenset({"seed", "rep", "attempt", "run_seed", "retained", "valid", *MEASUREMENTS})


def _spread(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """`{"a": {"b": 1}, "c": [2, 3]}` under `p` → p.a.b = 1, p.c.0 = 2, p.c.1 = 3."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _spread(f"{prefix}.{key}", item, out)
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            _spread(f"{prefix}.{i}", item, out)
    elif isinstance(value, (dict, list)):
        out[prefix] = None  # an empty map or list: the column exists, the cell is empty
    else:
        out[prefix] = value


def flat_rows(store: Store) -> tuple[list[str], list[dict[str, Any]]]:
    """Every attempt with no JSON left: the columns and the rows of the flat export.

    The stored columns come first (`COLUMNS` without `unassessed`, `metrics` and
    `usage`); then one column per metric (`metric.NAME`), per usage figure
    (`usage.total.tokens_in`, `usage.agents.PARTICIPANT.cost`, …) and per unassessed
    reason (`unassessed.NAME`), each group sorted by name. Nested maps and lists are
    spread into dotted columns (`metric.NAME.KEY`, `metric.NAME.0`). A cell without a
    value is None (an empty CSV field).
    """
    rows: list[dict[str, Any]] = []
    seen: dict[str, set[str]] = {p: set() for p in FLAT_PREFIXES}
    for r in store.rows():
        row = {c: r[c] for c in FLAT_FIXED}
        extra: dict[str, Any] = {}
        for prefix, col in zip(FLAT_PREFIXES, ("metrics", "usage", "unassessed"), strict=True):
            stored = json.loads(r[col]) if r[col] else {}
            if stored:
                _spread(prefix, stored, extra)
        for key in extra:
            seen[key.split(".", 1)[0]].add(key)
        row.update(extra)
        rows.append(row)
    columns = list(FLAT_FIXED)
    taken = set(columns)
    for prefix in FLAT_PREFIXES:
        columns += [c for c in sorted(seen[prefix]) if c not in taken]
    return columns, [{c: row.get(c) for c in columns} for row in rows]


#: what a spreadsheet reads as the start of a formula (OWASP "CSV injection"): a text cell
#: beginning with one of these gets a leading `'`
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _csv_cell(value: Any) -> Any:
    """A CSV cell: None empty, booleans true/false, numbers as they are, and text that a
    spreadsheet would run as a formula (`=HYPERLINK(…)`, `@SUM(…)`, `-1+cmd|…`) prefixed
    with a single quote, as OWASP advises. Text comes from worlds, instances and agents
    (untrusted); a number, or text that is only a number (`-3`, `+1.5e3`), is no formula
    and stays as it is, so a negative figure still reads as a number."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(_FORMULA_START) \
            and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def export_csv(store: Store, path: Path) -> int:
    """Write every attempt to a flat CSV file (see `flat_rows`); returns the row count.

    Measurements are 1/0/empty (unassessed); metric booleans are true/false; a text cell
    a spreadsheet would read as a formula starts with `'` (`_csv_cell`).
    """
    columns, rows = flat_rows(store)

    def write(part: Path) -> None:
        with part.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _csv_cell(v) for k, v in row.items()})

    _write_export(store, path, write)
    return len(rows)


def _write_export(store: Store, path: Path, write: Callable[[Path], None]) -> None:
    """Write an export through a part file beside `path`, renamed over it when complete.

    `-o` is the user's: it may name a folder, the study's own results store (which a
    plain overwrite destroyed) or another SQLite database; those are refused with a
    UsageError, as is a folder that cannot be created or written. An export that fails
    or is interrupted leaves any earlier file at `path` as it was, never a half table."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path} is a folder; -o takes the file to write, not a folder")
    store_file = store.path.resolve()
    sidecars = {store_file, store_file.with_name(store_file.name + "-wal"),
                store_file.with_name(store_file.name + "-shm"),
                store_file.with_name(store_file.name + "-journal")}
    if path.resolve() in sidecars:
        raise UsageError(f"{path} is the study's results store; an export would overwrite "
                         "it — choose another -o (default: STUDY/results.<format>)")
    if path.is_file() and is_sqlite(path):
        raise UsageError(f"{path} is a SQLite database; an export would overwrite it — "
                         "choose another -o")
    part = path.with_name(f".{path.name}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(part)
        os.replace(part, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        part.unlink(missing_ok=True)


def _kind(column: str, rows: list[dict[str, Any]]) -> str:
    """bool, int, float or str: the type of a column's values (None ignored)."""
    if column in _INTS:
        return "int"
    if column == "end_time":
        return "float"
    values = [r[column] for r in rows if r[column] is not None]
    if values and all(isinstance(v, bool) for v in values):
        return "bool"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float"
    return "str"


def _typed(column: str, kind: str, rows: list[dict[str, Any]]) -> list[Any]:
    values = [r[column] for r in rows]
    if kind == "float":
        return [None if v is None else float(v) for v in values]
    if kind == "str":
        return [None if v is None else v if isinstance(v, str)
                else ("true" if v else "false") if isinstance(v, bool) else str(v)
                for v in values]
    return values


def _pyarrow() -> tuple[Any, Any]:
    try:
        pa = importlib.import_module("pyarrow")
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise UsageError("--format parquet needs pyarrow, which is not installed: "
                         "pip install 'eairdsl[parquet]' (or use --format csv)") from None
    return pa, pq


def export_parquet(store: Store, path: Path) -> int:
    """Write the flat table of `flat_rows` to Parquet (needs pyarrow: the `parquet` extra).

    Typed columns: measurements and counters int64 (null = unassessed), `end_time`
    double, metrics and usage figures bool, int64, double or string as their values are.
    """
    pa, pq = _pyarrow()
    columns, rows = flat_rows(store)
    types = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    arrays, fields = [], []
    for c in columns:
        kind = _kind(c, rows)
        arrays.append(pa.array(_typed(c, kind, rows), type=types[kind]))
        fields.append(pa.field(c, types[kind]))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    _write_export(store, path, lambda part: pq.write_table(table, part))
    return len(rows)


def episodes_frame(store: Store) -> Any:
    """The flat table as a pandas DataFrame (nullable Int64/boolean columns); needs pandas."""
    try:
        pd = importlib.import_module("pandas")
    except ImportError:
        raise ImportError("eairdsl.study.episodes() needs pandas, which is not installed: "
                          "pip install 'eairdsl[pandas]' (or read STUDY/results.csv from "
                          "`eairc export`)") from None
    columns, rows = flat_rows(store)
    dtypes = {"bool": "boolean", "int": "Int64", "float": "Float64", "str": "string"}
    data = {}
    for c in columns:
        kind = _kind(c, rows)
        data[c] = pd.array(_typed(c, kind, rows), dtype=dtypes[kind])
    return pd.DataFrame(data, columns=columns)


#: study measures are stored as their IR declaration's JSON (the store owns the format)
_ADAPTER: TypeAdapter[StudyMeasureIR] = TypeAdapter(StudyMeasureIR)


def parse_measure(text: str) -> StudyMeasureIR:
    """A study measure from its stored JSON (ValueError when it is not one)."""
    return _ADAPTER.validate_json(text)


def dump_measure(measure: StudyMeasureIR) -> str:
    return json.dumps(measure.model_dump(mode="json"), sort_keys=True)
