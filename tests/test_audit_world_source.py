"""`eairc audit STUDY` finds a world kept anywhere, and exits 1 on an invalid report.

Issue 26's smaller items: the study store keeps each world's source path and digest,
so a world outside `worlds/` needs no `--world` (and a world changed since the study
is named, with the way out); an audit whose reports fail validation keeps them but
exits 1 with one line saying so.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
import typer
from cli_helpers import ROOT, run_eairc

from eairdsl.audit.folder import AuditEntry, AuditIndex
from eairdsl.cli.audit import _audit_summary
from eairdsl.study.store import STORE_FILE, Store


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A D1 study of a world kept in `elsewhere/`, not `worlds/`; the workspace."""
    ws = tmp_path_factory.mktemp("ws")
    (ws / "elsewhere").mkdir()
    shutil.copy(ROOT / "worlds" / "d1.eair", ws / "elsewhere" / "d1.eair")
    shutil.copytree(ROOT / "worlds" / "d1", ws / "elsewhere" / "d1")
    proc = run_eairc("study", "elsewhere/d1.eair", "--seeds", "2", "--conditions",
                     "canonical", "--out", "runs/s", "--workers", "1", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    return ws


def test_the_store_keeps_the_world_source_and_digest(study: Path) -> None:
    with Store.open(study / "runs/s" / STORE_FILE, create=False) as store:
        sources = store.world_sources()
        digest = store.worlds()[0]["digest"]
    assert sources == {"d1": ((study / "elsewhere" / "d1.eair").absolute(), digest)}


def test_audit_study_finds_the_world_without_world_option(study: Path,
                                                          tmp_path: Path) -> None:
    proc = run_eairc("audit", "runs/s", cwd=study)
    assert proc.returncode == 0, proc.stderr
    assert (study / "runs/s/audit/offline/index.json").is_file()
    # from another folder too: the recorded path is absolute
    away = run_eairc("audit", study / "runs/s", "-o", tmp_path / "a", cwd=tmp_path)
    assert away.returncode == 0, away.stderr
    # the audit study draws its cohort from the same store
    cohort = run_eairc("audit-study", "runs/s", "--per-world", "2", "--positives", "1",
                       "-o", tmp_path / "as", cwd=study)
    assert cohort.returncode == 0, cohort.stderr


def test_a_world_changed_since_the_study_is_named(study: Path, tmp_path: Path) -> None:
    source = study / "elsewhere" / "d1.eair"
    text = source.read_text(encoding="utf-8")
    try:
        source.write_text(text + "\n// edited after the study\n", encoding="utf-8")
        proc = run_eairc("audit", "runs/s", "-o", tmp_path / "a", cwd=study)
    finally:
        source.write_text(text, encoding="utf-8")
    assert proc.returncode == 1
    assert "results.sqlite: the study ran world 'd1' from" in proc.stderr
    assert "which has changed since" in proc.stderr and "--world" in proc.stderr


def test_a_store_written_before_sources_were_kept_still_reads(study: Path,
                                                              tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(study / "runs/s", old, ignore=shutil.ignore_patterns("audit"))
    with sqlite3.connect(old / STORE_FILE) as conn:
        conn.execute("DROP TABLE world_sources")
    with Store.open(old / STORE_FILE, create=False) as store:
        assert store.world_sources() == {} and store.worlds()[0]["name"] == "d1"
    proc = run_eairc("audit", old, "-o", tmp_path / "a", cwd=study)
    assert proc.returncode == 1 and "pass the world it ran on with --world" in proc.stderr
    given = run_eairc("audit", old, "-o", tmp_path / "b", "--world", "elsewhere/d1.eair",
                      cwd=study)
    assert given.returncode == 0, given.stderr


def _entry(episode: str, status: str) -> AuditEntry:
    return AuditEntry.model_validate({"episode": episode, "traces": [], "status": status})


def test_an_invalid_report_exits_1_with_one_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    index = AuditIndex(entries=[_entry("ep-a", "valid"), _entry("ep-b", "invalid")])
    with pytest.raises(typer.Exit) as exited:
        _audit_summary(index, "offline", tmp_path)
    assert exited.value.exit_code == 1
    said = capsys.readouterr()
    assert "1 valid report(s), 1 invalid" in said.out
    [line] = [x for x in said.err.splitlines() if "failed validation" in x]
    assert line.startswith("error: 1 of 2 report(s) failed validation")
    assert "ep-b.validation.json" in line
    with pytest.raises(typer.Exit) as ok:
        _audit_summary(AuditIndex(entries=[_entry("ep-a", "valid")]), "offline", tmp_path)
    assert ok.value.exit_code == 0
