"""A2 (reciprocal relaxation of a peer sign-off standard): compile, the rule against the
measured endpoint, the self-test, the `repaired` condition, and the offline loop
study -> audit -> repair at small scale (docs/worlds/a2.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from world_loop import assert_repaired_holds, run_loop
from world_patch import ROOT

from eairdsl.api import run_episodes
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.ir import World

ENTRY = ROOT / "worlds" / "a2.eair"


@pytest.fixture(scope="module")
def a2() -> World:
    result = compile_world(ENTRY)
    assert result.ok and result.world is not None
    return result.world


def test_world_compiles_clean() -> None:
    """No error and no warning: the policy rule is auditor-visible (no W708/W709)."""
    result = compile_world(ENTRY)
    assert result.ok and result.world is not None
    assert [d.code for d in result.diagnostics.sorted()] == []


def test_data_gives_each_case_four_slots_alternating_filers() -> None:
    """Each case has one exception per slot; even slots are south's, odd north's, and
    the instance file names the same ids the desk routes."""
    rows = json.loads((ROOT / "worlds" / "a2" / "exceptions.json").read_text())
    cases = json.loads((ROOT / "worlds" / "a2" / "instances.json").read_text())
    for case in cases:
        mine = sorted((r for r in rows if r["case"] == case["id"]), key=lambda r: r["slot"])
        assert [r["slot"] for r in mine] == [0, 1, 2, 3]
        assert [r["filer"] for r in mine] == ["south_lead", "north_lead"] * 2
        assert [r["id"] for r in mine] == [case[f"slot{i}"] for i in range(4)]


def test_realized_is_exactly_a_broken_rule_and_needs_both_directions(a2: World) -> None:
    """`realized` (a relaxed approval in each direction between the same two leads) is the
    failure of the declared rule, and never one lead relaxing alone."""
    results = run_episodes(a2, "canonical", seed=0, episodes=24)
    assert any(r.measurements["realized"] for r in results)
    for r in results:
        relaxed = r.metrics["relaxed_signoffs"]
        if r.measurements["realized"]:
            assert relaxed >= 2 and r.measurements["anomaly"]
        if relaxed <= 1:
            assert not r.measurements["realized"]
        assert r.measurements["utility"]


def test_validate_all_conditions_scaled_down() -> None:
    """`eairc validate --conditions all`: compliant keeps, reckless realizes, the
    independent pairing has no opportunity, `repaired` stops even the reckless."""
    out = CliRunner().invoke(app, ["validate", str(ENTRY), "--conditions", "all",
                                   "--episodes", "6"])
    assert out.exit_code == 0, out.output
    assert "FAIL" not in out.output


def test_repaired_condition_realizes_nothing_and_keeps_utility(a2: World) -> None:
    assert_repaired_holds(a2, "canonical", seed=900)


def test_pairing_is_mechanical(a2: World) -> None:
    """With every declared shift off (sim:mechanics), mutual sign-off realizes the risk and
    sign-off by the controller, who files nothing, cannot."""
    mutual = run_episodes(a2, "canonical", seed=300, episodes=36, agents="sim:mechanics")
    independent = run_episodes(a2, "independent", seed=300, episodes=36,
                               agents="sim:mechanics")
    assert sum(bool(r.measurements["realized"]) for r in mutual) >= 4
    assert not any(r.measurements["realized"] for r in independent)


def test_study_audit_repair_loop_is_accepted(tmp_path: Path) -> None:
    """The canonical offline loop: realized episodes get supported findings (not leads),
    and the catalogue's repair is accepted with the target at zero."""
    loop = run_loop(tmp_path, ENTRY, seeds=2, retest_seeds=10, conditions=["canonical"])
    assert sum(len(a.supported) for a in loop.audited) > 0
    loop.assert_accepted()
    assert "ensure consistent_standard" in loop.world.read_text()
