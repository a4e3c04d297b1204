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
