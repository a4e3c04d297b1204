"""The results store: resumable, duplicate-free, self-identifying, never overwriting strangers."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.api import resolve_world
from eairdsl.cli import app
from eairdsl.ir import World
from eairdsl.study.executor import StudyProgress, run_study
from eairdsl.study.grid import cells, parse_models, plan_world
from eairdsl.study.store import COLUMNS, STORE_FILE, Store, StoreError, export_csv

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
KEY = ("world", "model", "condition", "instance", "seed", "rep", "attempt")


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(D1)


def _keys(out: Path) -> list[tuple[object, ...]]:
    with Store.open(out / STORE_FILE, create=False) as store:
        return [tuple(r[k] for k in KEY) for r in store.rows()]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _StopAfter(StudyProgress):
    def __init__(self, n: int) -> None:
        self.n = n

    def attempt(self, attempt: object, result: object, cell_done: bool) -> None:
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt


def test_interrupted_study_resumes_to_exactly_the_grid(d1: World, tmp_path: Path) -> None:
    """Stopping after 7 episodes and rerunning leaves every cell once and nothing else."""
    plan = plan_world(d1, ["canonical", "repaired"], ["hr-1", "fin-1"], 3)
    models = parse_models("sim,sim:reckless")
    grid = cells([plan], models)
    with pytest.raises(KeyboardInterrupt):
        run_study([d1], [plan], models, tmp_path, progress=_StopAfter(7))
    assert len(_keys(tmp_path)) == 7
    first = run_study([d1], [plan], models, tmp_path)
    assert (first.skipped, first.attempts) == (7, len(grid) - 7)
    keys = _keys(tmp_path)
    assert len(keys) == len(set(keys)) == len(grid)
    assert {k[:6] for k in keys} == {(c.world, c.model, c.condition, c.instance, c.seed, c.rep)
                                     for c in grid}
    again = run_study([d1], [plan], models, tmp_path)
    assert (again.skipped, again.attempts) == (len(grid), 0)
    assert _keys(tmp_path) == keys


def test_growing_a_study_adds_only_new_cells(d1: World, tmp_path: Path) -> None:
    """Rerunning with more seeds runs only the new cells; earlier rows are untouched."""
    models = parse_models("sim")
    run_study([d1], [plan_world(d1, ["canonical"], ["hr-2"], 2)], models, tmp_path)
    before = _keys(tmp_path)
    summary = run_study([d1], [plan_world(d1, ["canonical"], ["hr-2"], 4)], models, tmp_path)
    assert summary.attempts == 2
    after = _keys(tmp_path)
    assert set(before) < set(after) and len(after) == 4


def test_rows_carry_every_column(d1: World, tmp_path: Path) -> None:
    """A row has the world digest, model, cell, attempt, six measurements, validity and trace."""
    run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], 1)], parse_models("sim"), tmp_path)
    with Store.open(tmp_path / STORE_FILE, create=False) as store:
        (row,) = store.rows()
        assert store.worlds()[0]["digest"] == d1.digest
    assert tuple(row) == COLUMNS
    assert row["digest"] == d1.digest and row["retained"] == 1 and row["valid"] == 1
    assert row["realized"] in (0, 1) and row["utility"] in (0, 1)
    assert (tmp_path / row["trace_path"]).is_file()
    raw = sqlite3.connect(tmp_path / STORE_FILE)
    assert raw.execute("PRAGMA application_id").fetchone()[0] == 0x45414952
    assert dict(raw.execute("SELECT key, value FROM meta"))["app_id"] == "eairdsl.study"


def test_corrupt_store_is_a_clear_error_and_untouched(tmp_path: Path) -> None:
    """Garbage in results.sqlite: exit 1 with a message, no traceback, the bytes unchanged."""
    out = tmp_path / "run"
    out.mkdir()
    bad = out / STORE_FILE
    bad.write_bytes(b"this is not a database\x00" * 50)
    before = _digest(bad)
    result = CliRunner().invoke(app, ["study", str(D1), "--conditions", "canonical",
                                      "--instances", "hr-1", "--seeds", "1", "--workers", "1",
                                      "--out", str(out)])
    assert result.exit_code == 1
    assert "not a SQLite database" in result.output and "Traceback" not in result.output
    assert _digest(bad) == before
    assert sorted(p.name for p in out.iterdir()) == [STORE_FILE]


def test_damaged_sqlite_is_a_clear_error_and_untouched(tmp_path: Path) -> None:
    """A store whose pages were overwritten is refused and left as it was."""
    path = tmp_path / STORE_FILE
    with Store.open(path) as store:
        store.register_world("d1", "x" * 64)
    data = bytearray(path.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)
    path.write_bytes(bytes(data))
    before = _digest(path)
    with pytest.raises(StoreError, match=r"corrupt|not a results store|damaged"):
        Store.open(path)
    assert _digest(path) == before


def test_foreign_sqlite_is_refused_and_untouched(tmp_path: Path) -> None:
    """Another application's SQLite file: study, export and report all refuse it, unchanged."""
    out = tmp_path / "run"
    out.mkdir()
    path = out / STORE_FILE
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.execute("INSERT INTO users VALUES (1, 'ada')")
    conn.commit()
    conn.close()
    before = _digest(path)
    runner = CliRunner()
    for args in (["study", str(D1), "--seeds", "1", "--workers", "1", "--out", str(out)],
                 ["export", str(out)], ["report", str(out)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, args
        assert "another application" in result.output
        assert "Traceback" not in result.output
    assert _digest(path) == before


def test_newer_schema_and_changed_world_are_refused(d1: World, tmp_path: Path) -> None:
    """A store from a newer schema, or one holding another version of the world, is refused."""
    path = tmp_path / STORE_FILE
    with Store.open(path) as store:
        store.register_world("d1", "a" * 64)
    with Store.open(path) as store, pytest.raises(StoreError, match="the world changed"):
        store.register_world("d1", "b" * 64)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema 99"):
        Store.open(path)


def test_missing_store_for_export_and_report(tmp_path: Path) -> None:
    """export/report on a folder without a store say so and exit 1."""
    runner = CliRunner()
    for args in (["export", str(tmp_path)], ["report", str(tmp_path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1 and "no results store" in result.output


def test_export_csv_and_parquet(d1: World, tmp_path: Path) -> None:
    """CSV has one row per attempt with 1/0/empty measurements; parquet needs pyarrow."""
    run_study([d1], [plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 2)], parse_models("sim"),
              tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["export", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "results.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0].split(",")[:4] == ["world", "digest", "model", "agents"]
    assert len(lines) == 1 + 4
    with Store.open(tmp_path / STORE_FILE, create=False) as store:
        assert export_csv(store, tmp_path / "again.csv") == 4
    parquet = runner.invoke(app, ["export", str(tmp_path), "--format", "parquet"])
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert parquet.exit_code == 1 and "needs pyarrow" in parquet.output
    else:
        assert parquet.exit_code == 0 and (tmp_path / "results.parquet").is_file()
    assert runner.invoke(app, ["export", str(tmp_path), "--format", "xlsx"]).exit_code == 2
