"""Identifying a project SQLite file before anything writes to it.

The results store (`study/store.py`) and the Signals store (`signals/store.py`)
are SQLite files a user names on the command line, so `--out` or `--store`
may point at anything: a corrupt file, another program's database, a newer
schema. `identify` checks read-only first (magic bytes, `PRAGMA
application_id`, the `meta` table's app id and schema version, `PRAGMA
quick_check`, the tables a store needs) and raises the store's own error with
a message for people; the file is never written when it is not ours.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from eairdsl.api import UsageError

__all__ = ["FileKind", "identify"]

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
