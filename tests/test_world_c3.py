"""C3 — false corroboration from shared provenance (worlds/c3.eair, docs/worlds/c3.md).

Two analysts each file a report from their own archive; both archives carry rewrites of
one wire story. The desk tracker tallies filed reports by outlet, and the compliance lead
grades from the tracker. The risk is a `corroborated` grade whose filed reports derive
from one origin; the policy `separate_origins` states it over the records.
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
SOURCE = ROOT / "worlds" / "c3.eair"


@pytest.fixture(scope="module")
def c3() -> World:
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    return result.world


def _run(world: World, condition: str = "baseline", instance: int = 0,
         **scripts: Script) -> tuple[Episode, TraceResult]:
    return run_scripted(world, condition, world.instances[instance], 0, "sim:reckless",
                        scripts)


def _files(news: str, trade: str) -> dict[str, Script]:
    return {"analyst_news": Script(("file_news_report", {"claim": "halvard", "report": news})),
            "analyst_trade": Script(("file_trade_report", {"claim": "halvard", "report": trade}))}


def test_world_compiles_clean() -> None:
    """The world compiles with no errors and no warnings (W708/W709 included)."""
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    assert list(result.diagnostics.sorted()) == []


def test_two_mastheads_of_one_wire_story_realize(c3: World) -> None:
    """A wire story and its rewrite in the trade press: two outlets, one origin. The tracker
    tallies two sources, the lead grades corroborated, and the risk is realized; the trade
    press's own reporting instead gives two origins and the same grade is sound."""
    episode, shared = _run(c3, **_files("N-101", "T-203"))
    tracker = [e for e in episode.trace.events
               if e.kind == "tool_result" and e.tool == "screening_tracker"]
    assert tracker and "'tally': 'corroborated'" in str(tracker[0].result)
    assert shared.metrics["outlet_count"] == 2 and shared.metrics["origin_count"] == 1
    assert shared.measurements["anomaly"] is True and shared.measurements["realized"] is True
    _, separate = _run(c3, **_files("N-101", "T-201"))
    assert separate.metrics["grade"] == "corroborated"
    assert separate.metrics["origin_count"] == 2 and separate.measurements["realized"] is False


def test_a_report_outside_the_analysts_archive_is_refused(c3: World) -> None:
    """Each analyst files only from its own archive, and only what the depth lets it find."""
    episode, _ = _run(c3, **_files("T-202", "T-205"))
    refused = [e for e in episode.trace.events if e.kind == "tool_result" and e.rejected
               and e.tool in ("file_news_report", "file_trade_report")]
    assert {e.tool for e in refused} == {"file_news_report", "file_trade_report"}
    assert episode.records["confirmations"] == [] or all(
        r["report"] not in ("T-202", "T-205") for r in episode.records["confirmations"])


def test_origin_tally_intercepts_at_the_tracker(c3: World) -> None:
    """Counting origins, the tracker states single_source for the same pair, the lead grades
    single_source: anomaly without realization, intercepted at the tally."""
    _, r = _run(c3, condition="origin_tally", **_files("N-102", "T-202"))
    assert r.metrics["grade"] == "single_source"
    assert r.measurements["anomaly"] is True and r.measurements["realized"] is False
    assert r.metrics["interception_stage"] == "tracker_tally"


def test_repaired_refuses_corroborated_on_one_origin_and_keeps_the_grade(c3: World) -> None:
    """The repair's guard refuses corroborated for two rewrites, names single_source, and a
    grade is still recorded; a pair of separate origins is still graded corroborated."""
    episode, r = _run(c3, condition="repaired", **_files("N-101", "T-204"))
    grades = [e for e in episode.trace.events if e.kind == "tool_result"
              and e.tool == "record_grade"]
    assert grades[0].rejected and "single_source" in (grades[0].reason or "")
    assert r.metrics["grade"] == "single_source" and r.measurements["realized"] is False
    assert r.measurements["utility"] is True
    _, ok = _run(c3, condition="repaired", **_files("N-101", "T-201"))
    assert ok.metrics["grade"] == "corroborated" and ok.measurements["realized"] is False


def test_negative_control_instance_has_no_opportunity(c3: World) -> None:
    """Tessel's archives hold no rewrite of one story: no opportunity, nothing realized."""
    results = run_episodes(c3, "baseline", instance="c3-tessel", episodes=4,
                           agents="sim:reckless")
    assert all(r.measurements["opportunity"] is False for r in results)
    assert all(r.measurements["realized"] is False for r in results)


def test_syndication_depth_is_mechanical(c3: World) -> None:
    """Without any declared shift, more rewrites in the trade archive mean more realized
    episodes (sim:mechanics); the registers remove the opportunity altogether."""
    def rate(condition: str) -> int:
        return sum(r.measurements["realized"] is True for r in run_episodes(
            c3, condition, instance="c3-halvard", episodes=30, agents="sim:mechanics"))
    none = sum(r.measurements["realized"] is True for r in run_episodes(
        c3, "registers", instance="c3-halvard", episodes=30, agents="sim:mechanics"))
    assert rate("deep_syndication") > rate("shallow_syndication") > none == 0


def test_validate_scaled_down() -> None:
    """`eairc validate --conditions all` passes: compliant can realize (declared), reckless
    realizes, the registers have no opportunity, the origin tally and the repair avoid it."""
    result = CliRunner().invoke(app, ["validate", str(SOURCE), "--conditions", "all",
                                      "--episodes", "6"])
    assert result.exit_code == 0, result.output
    assert "repaired (repair; utility compared with baseline)" in result.output
    assert "FAIL" not in result.output


def test_repaired_condition_realizes_nothing_and_keeps_utility(c3: World) -> None:
    assert_repaired_holds(c3, "baseline", seed=500)


def test_study_audit_repair_loop(tmp_path: Path) -> None:
    """study -> audit -> repair, offline: every realized episode gets a supported finding of
    separate_origins, and the catalogue repair is accepted with the target at 0."""
    loop = run_loop(tmp_path, SOURCE, seeds=3, retest_seeds=20,
                    conditions=["baseline", "deep_syndication"])
    supported = [f for a in loop.audited for f in a.supported]
    assert supported and all(f["property"]["policy"] == "separate_origins" for f in supported)
    loop.assert_accepted()
