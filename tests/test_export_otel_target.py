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


@pytest.mark.parametrize("fmt", ["otlp-json", "jsonl"])
def test_a_trace_changed_during_the_streamed_export_keeps_the_earlier_export(
        runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """The export reads each trace twice (to plan, then to build its spans when its turn
    comes): a trace edited in between stops it with a clear error, and the half-written
    stream is not left behind: the earlier export stays as it was, no part file."""
    import shutil

    from eairdsl.external import otel

    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    out = tmp_path / "out" / "spans.otlp"
    export_otel(copy, out, format=fmt)
    first = out.read_bytes()
    build = otel.OtlpExport.resource

    def edited_first(self: otel.OtlpExport, tid: str, name: str) -> object:
        path = Path(name)
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join([lines[0], lines[1].replace('"t":', '"t": ', 1),
                                   *lines[2:]]) + "\n", encoding="utf-8")
        return build(self, tid, name)

    monkeypatch.setattr(otel.OtlpExport, "resource", edited_first)
    with pytest.raises(OtelError, match="changed during the export"):
        export_otel(copy, out, format=fmt)
    assert out.read_bytes() == first
    assert [p.name for p in out.parent.iterdir()] == ["spans.otlp"]


def test_a_bad_audit_report_stops_the_export_before_anything_is_written(
        runs: Path, tmp_path: Path) -> None:
    """The reports are read when their episode's spans are built, and once while planning,
    so a report that is not one is refused before the first batch, with its path."""
    import json

    from eairdsl.audit.offline import RulesAuditor
    from eairdsl.audit.runner import REPORTS, audit_episodes

    audit = tmp_path / "audit"
    index = audit_episodes(runs, audit, RulesAuditor())
    report = audit / REPORTS / f"{index.entries[0].episode}.json"
    report.write_text(json.dumps({"audit_schema": 1, "verdict": 7}), encoding="utf-8")
    sent: list[object] = []

    class Recording:
        def send(self, batch: object) -> None:
            sent.append(batch)

        def close(self) -> None:
            sent.append("closed")

    from eairdsl.external import otel

    with pytest.raises(OtelError, match="not an audit report"):
        otel.send_all(otel.OtlpExport(runs, audit), Recording())
    assert sent == []
    with pytest.raises(OtelError, match=f"{report.name}: not an audit report"):
        export_otel(runs, tmp_path / "out.json", audit)
    assert not (tmp_path / "out.json").exists()
