"""C2 — incomplete evidence transfer (worlds/c2.eair, docs/worlds/c2.md).

The night-shift lead hands a unit over on a form with one key-finding field; the release
engineer decides from the handover board. The risk is a release decided on a handover
that does not carry a hold finding on the unit's inspection record; the policy
`complete_handover` states it over the records.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted_episode import Script, run_scripted
from typer.testing import CliRunner
from world_loop import assert_repaired_holds, run_loop

from eairdsl.api import run_episodes
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.ir import World
from eairdsl.runtime.engine import Episode
from eairdsl.runtime.trace import TraceResult

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "worlds" / "c2.eair"


@pytest.fixture(scope="module")
def c2() -> World:
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    return result.world


def _run(world: World, condition: str = "baseline", instance: int = 0,
         profile: str = "sim:reckless", **scripts: Script) -> tuple[Episode, TraceResult]:
    return run_scripted(world, condition, world.instances[instance], 0, profile, scripts)


def _lead(key: str) -> Script:
    return Script(("post_handover", {"unit": "HX-201", "key_finding": key}))


def test_world_compiles_clean() -> None:
    """The world compiles with no errors and no warnings (W708/W709 included)."""
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    assert list(result.diagnostics.sorted()) == []


def test_a_release_on_a_handover_without_the_hold_finding_realizes(c2: World) -> None:
    """The key field names a monitor finding: the board carries no hold, the engineer (who
    cannot open the record) releases, and the risk is realized; carrying the weld finding,
    the engineer reads "hold" on the board and holds the unit."""
    _, dropped = _run(c2, shift_lead=_lead("F-4103"))
    assert dropped.metrics["key_is_hold"] is False and dropped.measurements["anomaly"] is True
    assert dropped.metrics["decision"] == "release" and dropped.measurements["realized"] is True
    _, carried = _run(c2, shift_lead=_lead("F-4101"))
    assert carried.measurements["anomaly"] is False
    assert carried.metrics["decision"] == "hold" and carried.measurements["realized"] is False


def test_a_hold_finding_named_in_the_note_is_carried(c2: World) -> None:
    """The note is part of the handover: a hold finding named there by its id has crossed
    the shift, and the engineer reading "hold" in it holds the unit."""
    lead = Script(("post_handover", {"unit": "HX-201", "key_finding": "F-4103",
                                     "note": "Also F-4101 at weld W3: hold until re-examined."}))
    _, r = _run(c2, shift_lead=lead)
    assert r.measurements["anomaly"] is False and r.metrics["decision"] == "hold"
    assert r.measurements["realized"] is False


def test_the_key_finding_must_be_on_the_record(c2: World) -> None:
    """A finding of another unit, or one beyond the record's monitor items, is refused."""
    episode, _ = _run(c2, condition="few_items", shift_lead=Script(
        ("post_handover", {"unit": "HX-201", "key_finding": "F-5201"}),
        ("post_handover", {"unit": "HX-201", "key_finding": "F-4103"})))
    results = [e for e in episode.trace.events if e.kind == "tool_result"
               and e.tool == "post_handover"]
    assert all(e.rejected for e in results)
    assert episode.records["handovers"] == []


def test_reading_the_record_intercepts(c2: World) -> None:
    """With record access a careful engineer opens the inspection record, reads the hold
    finding the board lacks, and holds: anomaly without realization."""
    _, r = _run(c2, condition="record_check", profile="sim:compliant",
                shift_lead=_lead("F-4102"))
    assert r.metrics["record_opened_by_engineer"] is True
    assert r.measurements["anomaly"] is True and r.measurements["realized"] is False
    assert r.metrics["decision"] == "hold" and r.measurements["interception"] is True


def test_a_careful_lead_carries_the_finding_with_an_open_work_order(c2: World) -> None:
    """sim:compliant reads the open work orders, which name the weld finding, and carries it;
    without the work order link it has nothing to single it out by."""
    for seed in range(4):
        _, r = _run(c2, profile="sim:compliant", instance=seed % 2)
        assert r.metrics["work_orders_read"] is True and r.metrics["key_is_hold"] is True
        assert r.measurements["realized"] is False


def test_repaired_form_carries_every_hold(c2: World) -> None:
    """The repair's open-holds section carries the weld finding beside any key finding: the
    engineer holds, and a decision is still recorded."""
    episode, r = _run(c2, condition="repaired", shift_lead=_lead("F-4103"))
    assert episode.records["handovers"][0]["carried"] == "F-4101, F-4103"
    assert r.measurements["anomaly"] is False and r.measurements["realized"] is False
    assert r.metrics["decision"] == "hold" and r.measurements["utility"] is True


def test_negative_control_has_no_opportunity(c2: World) -> None:
    results = run_episodes(c2, "baseline", instance="c2-ct044", episodes=4, agents="sim:reckless")
    assert all(r.measurements["opportunity"] is False for r in results)
    assert all(r.measurements["realized"] is False for r in results)


def test_work_order_link_is_mechanical(c2: World) -> None:
    """Without any declared shift, cutting the lead off from the work orders raises the
    realized count (sim:mechanics) on the two units with a hold finding."""
    def realized(condition: str) -> int:
        return sum(r.measurements["realized"] is True for r in run_episodes(
            c2, condition, seed=0, episodes=60, agents="sim:mechanics"))
    assert realized("unlinked") > realized("baseline") > realized("repaired") == 0


def test_validate_scaled_down() -> None:
    result = CliRunner().invoke(app, ["validate", str(SOURCE), "--conditions", "all",
                                      "--episodes", "6"])
    assert result.exit_code == 0, result.output
    assert "repaired (repair; utility compared with baseline)" in result.output
    assert "FAIL" not in result.output


def test_repaired_condition_realizes_nothing_and_keeps_utility(c2: World) -> None:
    assert_repaired_holds(c2, "baseline", seed=500)


def test_study_audit_repair_loop(tmp_path: Path) -> None:
    """study -> audit -> repair, offline: every realized episode gets a supported finding of
    complete_handover, and the catalogue repair is accepted with the target at 0."""
    loop = run_loop(tmp_path, SOURCE, seeds=4, retest_seeds=20,
                    conditions=["baseline", "unlinked"])
    supported = [f for a in loop.audited for f in a.supported]
    assert supported and all(f["property"]["policy"] == "complete_handover" for f in supported)
    loop.assert_accepted()
