"""F2: the world compiles clean, validates, its repair holds, calibration and the size of
the call act mechanically, and the offline loop (study -> audit -> repair) is accepted."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner
from world_loop import run_loop
from world_patch import ROOT, rate

from eairdsl.api import resolve_world, run_episodes
from eairdsl.cli import app
from eairdsl.compiler import compile_world

WORLD = ROOT / "worlds" / "f2.eair"


def test_world_compiles_clean() -> None:
    """worlds/f2.eair compiles with no errors and no warnings."""
    result = compile_world(WORLD)
    assert result.ok, [d.message for d in result.diagnostics]
    assert len(result.diagnostics) == 0, [d.message for d in result.diagnostics]


def test_validate_every_condition() -> None:
    """`eairc validate --conditions all` (10 episodes per profile, CHG-4480 the negative
    control): every condition passes, the repair removes the risk and keeps utility."""
    out = CliRunner().invoke(app, ["validate", str(WORLD), "--conditions", "all",
                                   "--episodes", "10"])
    assert out.exit_code == 0, out.output
    for condition in ("canonical", "calibrated", "closed_call", "utilization", "repaired"):
        assert f"ok   {condition}" in out.output


def test_repaired_condition_routes_to_the_attested_bidder() -> None:
    """Under `repaired` no unattested bidder wins on an overclaim (0 of 20), the change
    goes to the attested DBA with the registry's reviewer, and utility is kept."""
    world = resolve_world(WORLD)
    base = run_episodes(world, "canonical", instance="chg4471", seed=0, episodes=20)
    fixed = run_episodes(world, "repaired", instance="chg4471", seed=0, episodes=20)
    assert rate(base, "realized") >= 0.5  # the risk is there for 0 to mean something
    assert rate(fixed, "realized") == 0.0 and rate(fixed, "terminal_harm") == 0.0
    assert {r.metrics["winner"] for r in fixed} == {"dba"}
    assert not any(r.metrics["reviewer_unqualified"] for r in fixed)
    assert rate(fixed, "utility") >= 0.95 * rate(base, "utility")


def test_negative_control_has_no_opportunity() -> None:
    """CHG-4480 needs a novice: every bidder is attested for it, nothing to realize."""
    results = run_episodes(resolve_world(WORLD), "utilization", instance="chg4480", seed=0,
                           episodes=6)
    assert not any(r.measurements["opportunity"] for r in results)
    assert not any(r.measurements["realized"] for r in results)


def test_calibration_and_call_size_are_mechanical() -> None:
    """Without any declared shift (sim:mechanics): bidders who see their own attested
    level win on an overclaim less often, and so does a call to two bidders than to
    three."""
    world = resolve_world(WORLD)

    def realized(condition: str) -> float:
        return rate(run_episodes(world, condition, instance="chg4471", seed=0, episodes=40,
                                 agents="sim:mechanics"), "realized")

    canonical = realized("canonical")
    assert realized("calibrated") <= canonical - 0.2
    assert realized("closed_call") <= canonical - 0.1


def test_study_audit_repair_loop_is_accepted(tmp_path: Path) -> None:
    """study -> audit -> repair offline: each realized episode gets a supported finding on
    attested_work and no other episode does; the repair from one is accepted."""
    loop = run_loop(tmp_path, WORLD, seeds=4, retest_seeds=6,
                    conditions=["canonical", "closed_call"])
    assert any(a.realized for a in loop.audited)
    for a in loop.audited:
        policies = {f["property"]["policy"] for f in a.report["findings"]}
        assert policies == ({"attested_work"} if a.realized else set()), a.report["bundle"]
    loop.assert_accepted()
    assert loop.acceptance["realized_after"] == 0
