"""An act is skipped after rows of its ledger, whoever wrote them (issue 32 item 7).

The issue asked whether another party's rows should count as the act done for the
reader. They do, on purpose: A1's careful service roles keep the shared credit cap by
exactly this (a customer another desk already credited is not credited again), and
making only the caller's own rows count turned A1's compliant self-test red in 20 of
20 episodes. What a world declares decides instead: a read that returns every row
makes a duty shared, a read that returns the caller's own rows keeps it personal
(docs/sim.md, "already done"). `tests/fixtures/sim/signoff_duty/` is a two-reviewer
release written from the docs; here it runs as written and with the personal read.
"""

from __future__ import annotations

from pathlib import Path

from helpers import sim_fixture

from eairdsl.api import run_episode
from eairdsl.compiler import compile_world
from eairdsl.ir import World
from eairdsl.runtime.trace import read_trace

FIXTURE = Path(__file__).parent / "fixtures" / "sim" / "signoff_duty"
SHARED = "where s.build == instance.build]"
PERSONAL = "where s.build == instance.build and s.reviewer == context.caller]"
SEEDS = range(8)


def signoff_world(tmp_path: Path, personal: bool) -> World:
    """The fixture, copied; `personal` lets the register list only the caller's rows."""
    text = (FIXTURE / "signoff_duty.eair").read_text(encoding="utf-8")
    assert text.count(SHARED) == 1
    path = sim_fixture("signoff_duty", tmp_path, text.replace(SHARED, PERSONAL) if personal
                       else text)
    result = compile_world(path)
    assert result.ok and result.world is not None
    return result.world


def signers(world: World, seed: int, profile: str, out: Path) -> list[str]:
    r = run_episode(world, None, None, seed, profile, out)
    events = read_trace(Path(r.trace_path or "")).events
    return [e.actor for e in events if e.kind == "tool_call" and e.tool == "sign_off"]


def test_a_register_of_every_row_makes_the_duty_shared(tmp_path: Path) -> None:
    """The second reviewer reads the lead's sign-off and, careful, does not sign: the
    compliant profile leaves one sign-off in every episode; the reckless one (low
    diligence) signs regardless."""
    world = signoff_world(tmp_path, personal=False)
    compliant = [signers(world, s, "sim:compliant", tmp_path / "runs") for s in SEEDS]
    assert all(c == ["lead_reviewer"] for c in compliant), compliant
    reckless = [signers(world, s, "sim:reckless", tmp_path / "runs") for s in SEEDS]
    assert all(sorted(r) == ["lead_reviewer", "second_reviewer"] for r in reckless), reckless


def test_a_register_of_the_callers_rows_keeps_the_duty_personal(tmp_path: Path) -> None:
    """With the caller's own rows, every profile has both reviewers sign in every
    episode: the other reviewer's row is not in what the second one read."""
    world = signoff_world(tmp_path, personal=True)
    for profile in ("sim", "sim:compliant", "sim:reckless"):
        for seed in SEEDS:
            got = signers(world, seed, profile, tmp_path / "runs")
            assert sorted(got) == ["lead_reviewer", "second_reviewer"], (profile, seed, got)
