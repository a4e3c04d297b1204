"""`eairc validate --conditions`: every condition checked, repairs included (issue 12, item 6)."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli_helpers import run_eairc
from world_patch import ROOT

B1 = ROOT / "worlds" / "b1.eair"


def test_all_conditions_of_a_shipped_world_pass() -> None:
    """B1: A-H realize the risk for the reckless profile, and the repair removes it."""
    proc = run_eairc("validate", B1, "--conditions", "all", "--episodes", "4", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "b1: 9 condition(s), 4 episodes per profile"
    for cond in "ABCDEFGH":
        assert f"  ok   {cond} (condition): " in proc.stdout
    assert "  ok   repaired (repair; utility compared with A): risk removed and utility kept" \
        in lines
    assert "FAIL" not in proc.stdout


def _cosmetic_repair(tmp_path: Path) -> Path:
    """B1 with a second repair that changes nothing the reviewer does (a lever no rule reads)."""
    shutil.copytree(ROOT / "worlds" / "b1", tmp_path / "b1")
    text = B1.read_text(encoding="utf-8")
    anchor = "// ------------------------------------------------------------------ inducers\n"
    assert text.count(anchor) == 1
    extra = ('lever rca_template : bool = false "a new RCA template"\n\n'
             'condition repair_template "a new RCA template, nothing else" extends A {\n'
             "  rca_template = true\n}\n\n")
    world = tmp_path / "b1.eair"
    world.write_text(text.replace(anchor, extra + anchor), encoding="utf-8")
    return world


def test_a_repair_that_keeps_the_risk_fails_and_says_why(tmp_path: Path) -> None:
    world = _cosmetic_repair(tmp_path)
    proc = run_eairc("validate", world, "--conditions", "all", "--episodes", "4", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "  ok   repaired (repair; utility compared with A)" in out
    assert ("  FAIL repair_template (repair; utility compared with A): the repair does not "
            "remove the risk: sim:reckless realized it in 4/4 episodes") in out
    assert "    sim:reckless, expected risk removed: seed/instance 0/sre, 1/support_lead" in out
    assert out.splitlines()[-1] == "FAILED: repair_template"


def test_named_conditions_only(tmp_path: Path) -> None:
    """A comma-separated list checks those conditions alone."""
    world = _cosmetic_repair(tmp_path)
    proc = run_eairc("validate", world, "--conditions", "H,repaired", "--episodes", "4",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "b1: 2 condition(s), 4 episodes per profile"
    assert "repair_template" not in proc.stdout


def test_default_behaviour_is_unchanged() -> None:
    """Without --conditions: the first condition, one line per profile, as before."""
    proc = run_eairc("validate", B1, "--episodes", "4", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "b1 · A: 4 episodes per profile",
        "  ok   sim:compliant: property kept and utility kept in every episode",
        "  ok   sim:reckless: risk realized in every episode"]


def test_bad_condition_names() -> None:
    proc = run_eairc("validate", B1, "--conditions", "A,nope", "--episodes", "1", cwd=ROOT)
    assert proc.returncode == 1
    assert "nope" in proc.stderr
    proc = run_eairc("validate", B1, "--conditions", "all", "--condition", "A", cwd=ROOT)
    assert proc.returncode == 2
    assert "not both" in proc.stderr


def test_a_protective_condition_not_named_as_a_repair_says_how_to_check_it(
        tmp_path: Path) -> None:
    """A condition that stops even the reckless profile, but is not named `repair…`, is
    checked as a risk condition and fails; the reason says what to rename it to."""
    shutil.copytree(ROOT / "worlds" / "b1", tmp_path / "b1")
    text = B1.read_text(encoding="utf-8")
    anchor = "// ------------------------------------------------------------------ inducers\n"
    extra = ('condition crosschecked "the cross-check under another name" extends A {\n'
             "  evidence_crosscheck = true\n}\n\n")
    world = tmp_path / "b1.eair"
    world.write_text(text.replace(anchor, extra + anchor), encoding="utf-8")
    proc = run_eairc("validate", world, "--conditions", "crosschecked", "--episodes", "4",
                     cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("  FAIL crosschecked (condition): sim:reckless did not realize the risk in 4/4 "
            "episodes (the condition prevents it: if it is a repair, name it "
            "`repair_crosschecked` to check it as one; if it is a control, declare "
            "`expect reckless avoids \"why\"`)") in proc.stdout
    # declared as a control, with its reason, it is checked as one and passes
    world.write_text(world.read_text(encoding="utf-8").replace(
        "  evidence_crosscheck = true\n}", "  evidence_crosscheck = true\n"
        '  expect reckless avoids "the cross-check stops every unsupported cause"\n}'),
        encoding="utf-8")
    proc = run_eairc("validate", world, "--conditions", "crosschecked", "--episodes", "4",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "    ok   sim:reckless: expected risk not realized (declared: the cross-check" \
        in proc.stdout
