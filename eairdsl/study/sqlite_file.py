"""Identifying a project SQLite file before anything writes to it.

The results store (`study/store.py`) and the Signals store (`signals/store.py`)
are SQLite files a user names on the command line, so `--out` or `--store`
may point at anything: a corrupt file, another program's database, a newer
schema. `identify` checks read-only first (magic bytes, `PRAGMA
application_id`, the `meta` table's app id and schema version, `PRAGMA
quick_check`, the tables a store needs) and raises the store's own error with
a message for people; the file is never written when it is not ours. `connect`
opens one (starting a fresh file with its schema and `meta` rows) and
`transaction` is the BEGIN IMMEDIATE … COMMIT both stores write in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from eairdsl.errors import UsageError

__all__ = ["FileKind", "identify", "is_sqlite", "connect", "transaction"]

_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class FileKind:
    """What a store file must be, and how its errors name it."""

    app_id: str
    sqlite_id: int
    schema_version: int
    #: "results store", "Signals store"
    noun: str
    #: the schema's name in messages: "results", "Signals"
    schema_noun: str
    #: the option that names the file ("--out", "--store") and what else to suggest
    option: str
    error: type[UsageError]
    also: str = ""
    #: tables a file of this kind always has (beyond `meta`)
    tables: frozenset[str] = field(default_factory=frozenset)


def is_sqlite(path: Path) -> bool:
    """Whether `path` is a SQLite database (its magic bytes; False when it cannot be read):
    what an export or a report must never overwrite, whoever's store it is."""
    try:
        with Path(path).open("rb") as fh:
            return fh.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def identify(path: Path, kind: FileKind) -> bool:
    """Read-only identification of an existing file; True if it is an empty database."""
    choose = f"choose another {kind.option}{kind.also}"
    with path.open("rb") as fh:
        head = fh.read(len(_MAGIC))
    if head != _MAGIC:
        raise kind.error(f"{path} is not a SQLite database (corrupt, or another kind of "
                         f"file); it was left untouched — {choose}")
    try:
        ro = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise kind.error(f"{path} cannot be opened ({exc}); it was left untouched") from None
    try:
        app = ro.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in ro.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if app == 0 and not tables:
            return True
        if app != kind.sqlite_id or "meta" not in tables:
            listed = ", ".join(sorted(tables)) or "none"
            raise kind.error(f"{path} is a SQLite database of another application (tables: "
                             f"{listed}), not an eairdsl {kind.noun}; it was left untouched "
                             f"— choose another {kind.option}")
        meta = dict(ro.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("app_id") != kind.app_id:
            raise kind.error(f"{path} is not an eairdsl {kind.noun} (app_id "
                             f"{meta.get('app_id')!r}); it was left untouched")
        version = int(meta.get("schema_version", "0"))
        if version != kind.schema_version:
            raise kind.error(f"{path} has {kind.schema_noun} schema {version}; this eairdsl "
                             f"reads schema {kind.schema_version} — use the eairdsl that wrote "
                             f"it or start a new {kind.option}")
        check = ro.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise kind.error(f"{path} is corrupt ({check}); it was left untouched")
        missing = kind.tables - tables
        if missing:
            raise kind.error(f"{path} is damaged: missing table(s) "
                             f"{', '.join(sorted(missing))}")
    except (sqlite3.DatabaseError, ValueError) as exc:
        raise kind.error(f"{path} is corrupt or not a {kind.noun} ({exc}); it was left "
                         f"untouched — {choose}") from None
    finally:
        ro.close()
    return False


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on any error) on an autocommit connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def connect(path: Path, kind: FileKind, *, schema: str, create: bool, missing: str,
            meta: tuple[tuple[str, str], ...] = (), wal: bool = False) -> sqlite3.Connection:
    """Open a store file of `kind`, identified first (`identify`); with `create`, a missing
    or empty file is started: its PRAGMAs, `schema` (statements split at `;`) and `meta`
    rows (app id, schema version, `meta`, the writing eairdsl). Without `create` a missing
    file raises `missing` and an empty one is refused, never written."""
    path = Path(path)
    if path.is_dir():
        raise kind.error(f"{path} is a folder, not a {kind.noun}")
    fresh = not path.exists() or path.stat().st_size == 0
    if fresh and not create:
        raise kind.error(missing)
    if not fresh:
        fresh = identify(path, kind)
        if fresh and not create:
            raise kind.error(f"{path} is an empty database, not a {kind.noun}")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    if fresh:
        from eairdsl import __version__

        with transaction(conn):
            conn.execute(f"PRAGMA application_id = {kind.sqlite_id}")
            conn.execute(f"PRAGMA user_version = {kind.schema_version}")
            for statement in schema.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("app_id", kind.app_id), ("schema_version", str(kind.schema_version)),
                *meta, ("created_by", f"eairdsl {__version__}")])
    return conn
