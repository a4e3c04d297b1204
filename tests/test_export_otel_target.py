"""`eairc export-otel -o` never destroys what it names: a study's results store (it was
overwritten with OTLP JSON, exit 0), another SQLite file or a folder is refused before
anything is read, and a failed write leaves an earlier export as it was."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.api import resolve_world, run_episode
from eairdsl.cli import app
from eairdsl.external.otel import OtelError, export_otel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    run_episode(resolve_world(ROOT / "worlds" / "d1.eair"), "canonical", None, 0, "sim", out)
    return out


def _said(result: object) -> str:
    out = getattr(result, "output", "")
    return out + (getattr(result, "stderr", "") if getattr(result, "stderr_bytes", None) else "")


def test_a_results_store_given_as_the_output_is_refused_and_kept(runs: Path,
                                                                 tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("create table t (x)")
    before = store.read_bytes()
    result = CliRunner().invoke(app, ["export-otel", str(runs), "-o", str(store)])
    assert result.exit_code == 1 and "SQLite database" in _said(result)
    assert "Traceback" not in _said(result)
    assert store.read_bytes() == before


def test_a_folder_given_as_the_output_is_refused(runs: Path, tmp_path: Path) -> None:
    with pytest.raises(OtelError, match="is a folder"):
        export_otel(runs, tmp_path)


def test_a_failed_write_keeps_the_earlier_export(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "spans.json"
    export_otel(runs, out)
    first = out.read_bytes()
    export_otel(runs, out)  # the same traces: the same bytes, written through a part file
    assert out.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["spans.json"]  # no part file left
    (tmp_path / f".spans.json.tmp-{os.getpid()}").mkdir()  # the part file cannot be written
    with pytest.raises(OtelError, match="cannot write"):
        export_otel(runs, out)
    assert out.read_bytes() == first
