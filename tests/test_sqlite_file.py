"""`identify`: a store file is checked read-only before anything writes to it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from eairdsl.signals.store import SignalsStore, SignalsStoreError
from eairdsl.study.store import STORE_FILE, Store, StoreError


def _meta_file(path: Path, app: int, meta: dict[str, str]) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {app}")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
    conn.commit()
    conn.close()


def test_a_malformed_schema_version_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILE
    _meta_file(path, 0x45414952, {"app_id": "eairdsl.study", "schema_version": "one"})
    before = path.read_bytes()
    with pytest.raises(StoreError, match="corrupt or not a results store"):
        Store.open(path)
    assert path.read_bytes() == before


def test_each_store_names_itself_and_refuses_the_other(tmp_path: Path) -> None:
    with Store.open(tmp_path / STORE_FILE):
        pass
    with pytest.raises(SignalsStoreError, match=r"another application.*Signals store"):
        SignalsStore.open(tmp_path / STORE_FILE)
    with SignalsStore.open(tmp_path / "signals.sqlite"):
        pass
    with pytest.raises(StoreError, match=r"another application.*results store"):
        Store.open(tmp_path / "signals.sqlite")


def test_a_results_store_missing_its_tables_is_damaged(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILE
    _meta_file(path, 0x45414952, {"app_id": "eairdsl.study", "schema_version": "1"})
    with pytest.raises(StoreError, match=r"missing table\(s\) episodes, worlds"):
        Store.open(path)


@pytest.mark.parametrize(("opener", "error", "noun"), [
    (Store.open, StoreError, "results store"), (SignalsStore.open, SignalsStoreError,
                                                 "Signals store")])
def test_an_empty_database_is_not_started_when_only_reading(tmp_path: Path, opener: object,
                                                            error: type[Exception],
                                                            noun: str) -> None:
    """Both stores open through `sqlite_file.connect`: an empty SQLite file opened without
    `create` is refused and left as it was (the Signals store used to write its schema)."""
    path = tmp_path / "empty.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 0")
    conn.execute("VACUUM")  # a valid, empty database file
    conn.close()
    before = path.read_bytes()
    assert before
    with pytest.raises(error, match=f"an empty database, not a {noun}"):
        opener(path, create=False)  # type: ignore[operator]
    assert path.read_bytes() == before
    with opener(path) as store:  # type: ignore[operator]
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'app_id'").fetchone()
