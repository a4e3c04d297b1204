"""`eairc audit` and `eairc audit-study` as a user runs them: the issue's done-when, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import make_workspace, run_eairc


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """worlds/ copied, a D1 run folder and a two-world sim study."""
    ws = make_workspace(tmp_path_factory.mktemp("ws"))
    assert run_eairc("run", "worlds/d1.eair", "--seed", "0", "--out", "runs/x",
                     cwd=ws).returncode == 0
    proc = run_eairc("study", "worlds/d1.eair", "worlds/a1.eair", "--seeds", "4", "--out",
                     "runs/s", "--workers", "1", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    return ws


def test_audit_a_run_folder_offline(workspace: Path) -> None:
    proc = run_eairc("audit", "runs/x", "-o", "runs/x/audit", cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    index = json.loads((workspace / "runs/x/audit/index.json").read_text())
    assert index["auditor"]["kind"] == "offline" and len(index["entries"]) >= 1
    assert all(e["status"] == "valid" for e in index["entries"])
    assert "resolvable findings" in proc.stdout
    # every report passes eairc check-report against its own bundle
    e = index["entries"][0]
    check = run_eairc("check-report", f"runs/x/audit/reports/{e['episode']}.json", "--bundle",
                      f"runs/x/audit/bundles/{e['episode']}", cwd=workspace)
    assert check.returncode == 0, check.stderr
    # rerunning resumes: nothing new is audited, the reports are the same bytes
    before = {p.name: p.read_bytes() for p in (workspace / "runs/x/audit/reports").iterdir()}
    again = run_eairc("audit", "runs/x", "-o", "runs/x/audit", cwd=workspace)
    assert again.returncode == 0
    after = {p.name: p.read_bytes() for p in (workspace / "runs/x/audit/reports").iterdir()}
    assert before == after


def test_audit_study_prints_the_table_and_writes_the_summary(workspace: Path) -> None:
    proc = run_eairc("audit-study", "runs/s", "--per-world", "4", "--positives", "2", "-o",
                     "runs/s/audit-study", cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    assert "Audit study, arm offline" in proc.stdout
    summary = json.loads((workspace / "runs/s/audit-study/summary.json").read_text())
    for world in ("a1", "d1"):
        w = summary["worlds"][world]
        assert w["seeded"] + w["negatives"] == 4
        assert w["resolvable_units"] == w["evidence_units"]
    assert set(summary["arms"]) == {"offline"}


@pytest.mark.parametrize(("args", "code", "says"), [
    (("audit", "runs/x"), 2, "--out is needed"),
    (("audit", "runs/x", "-o", "o1", "--auditor", "llm"), 1, "needs --model"),
    (("audit", "runs/x", "-o", "o2", "--model", "openai/x"), 1, "add --auditor llm"),
    (("audit", "runs/x", "-o", "o3", "--auditor", "nobody"), 1, "unknown auditor"),
    (("audit", "nowhere", "-o", "o4"), 1, "no such trace file or run folder"),
    (("audit-study", "runs/s", "--auditor", "oracle"), 2, "not an arm"),
    (("audit-study", "runs/x"), 1, "not a study folder"),
])
def test_bad_invocations_say_why(workspace: Path, args: tuple[str, ...], code: int,
                                 says: str) -> None:
    proc = run_eairc(*args, cwd=workspace)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert says in proc.stderr
