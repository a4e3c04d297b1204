"""Ties between candidates that rank nothing are broken by the seed (issue 32 item 7).

A `party` parameter without a hint takes the world's participants in the order
they were declared. That order ranks nothing, yet the sim read its last member
as "the most committal", so a dispatcher that read a roster naming two crews
alike sent every episode to whichever crew was declared last: swapping two
role blocks flipped `eairc validate` for sim:reckless from 0/10 to 10/10
realized. `tests/fixtures/sim/routing_tie/` is the world (written from the
docs, not a shipped world); here it runs as written and with its crews
declared the other way round.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers import sim_fixture

from eairdsl.agents.protocol import MemoryItem, Observation, ParamSpec, Request, ToolCall, ToolSpec
from eairdsl.agents.sim import PROFILES as SIM_PROFILES
from eairdsl.agents.sim import SimAgent
from eairdsl.api import run_episode, validate_world
from eairdsl.compiler import compile_world
from eairdsl.ir import World
from eairdsl.runtime.trace import read_trace

FIXTURE = Path(__file__).parent / "fixtures" / "sim" / "routing_tie"
PROFILES = ("sim", "sim:compliant", "sim:reckless")
SEEDS = range(10)


def routing_world(tmp_path: Path, swapped: bool) -> Path:
    """The fixture, copied; `swapped` declares `summit` before `harbor`."""
    text = (FIXTURE / "routing_tie.eair").read_text(encoding="utf-8")
    if swapped:
        harbor, summit = text.index("role harbor {"), text.index("role summit {")
        end = text.index("actor operations")
        text = text[:harbor] + text[summit:end] + text[harbor:summit] + text[end:]
    return sim_fixture("routing_tie", tmp_path, text)


def compiled(path: Path) -> World:
    result = compile_world(path)
    assert result.ok and result.world is not None
    return result.world


def dispatched(world: World, seed: int, profile: str, out: Path) -> list[str]:
    r = run_episode(world, None, None, seed, profile, out)
    events = read_trace(Path(r.trace_path or "")).events
    return [str(e.args["crew"]) for e in events if e.kind == "tool_call" and e.tool == "dispatch"]


def test_the_declaration_order_does_not_pick_the_crew(tmp_path: Path) -> None:
    """Every profile sends the same crew in every episode whichever crew is declared
    first, and the reckless dispatcher, which reads only the roster, sends each crew in
    some episodes: the seed decides the tie. Before: the reckless dispatcher sent the
    crew declared last in all 10 episodes, `summit` as written and `harbor` swapped."""
    worlds = [compiled(routing_world(tmp_path / name, name == "swapped"))
              for name in ("written", "swapped")]
    assert [p.name for p in worlds[0].parties].index("harbor") < \
        [p.name for p in worlds[0].parties].index("summit")
    assert [p.name for p in worlds[1].parties].index("summit") < \
        [p.name for p in worlds[1].parties].index("harbor")
    for profile in PROFILES:
        crews = []
        for seed in SEEDS:
            written, swapped = (dispatched(w, seed, profile, tmp_path / f"runs{i}")
                                for i, w in enumerate(worlds))
            assert written == swapped, (profile, seed, written, swapped)
            crews += written
        if profile == "sim:reckless":
            assert set(crews) == {"harbor", "summit"}, crews  # the seed, not a constant
        if profile == "sim:compliant":  # reads the certifications: evidence, no tie
            assert set(crews) == {"summit"}, crews


@pytest.mark.parametrize("swapped", [False, True], ids=["written", "swapped"])
def test_validate_holds_in_either_order(tmp_path: Path, swapped: bool) -> None:
    """The world's self-test (`expect reckless can_realize`, compliant keeps) holds as
    written and swapped. Before: as written sim:reckless never realized the risk."""
    report = validate_world(routing_world(tmp_path, swapped))
    assert report.ok, [(p.profile, p.problem) for p in report.profiles]
    reckless = next(p for p in report.profiles if p.profile == "sim:reckless")
    assert reckless.with_opportunity == report.episodes


def _observe(tools: list[ToolSpec], memory: list[MemoryItem], profile: str) -> Observation:
    return Observation(party="dispatcher", kind="role", card="", time=0.0, task=1,
                       step=len(memory), request=Request(sender="ops", text="send a crew"),
                       memory=memory, tools=tools, traits=SIM_PROFILES[profile])


def test_a_retry_among_participants_follows_the_seed_not_the_listed_order() -> None:
    """A refusal naming the refused participant (`harbor is not certified`) makes the
    agent try another: which one is the participant's seeded order, the same however the
    members are listed, and it varies with the seed (as does the first pick, a tie)."""
    firsts = set()
    for seed in range(12):
        retried = []
        for members in (["dispatcher", "harbor", "ridge", "summit"],
                        ["summit", "ridge", "harbor", "dispatcher"]):
            tools = [ToolSpec(name="dispatch", kind="act", params=[
                ParamSpec(name="crew", type="party", required=True, members=members)])]
            agent = SimAgent("dispatcher", seed, "sim:compliant")
            msg = MemoryItem(kind="message", task=1, sender="ops", text="send a crew")
            first = asyncio.run(agent.decide(_observe(tools, [msg], "sim:compliant")))
            assert isinstance(first, ToolCall)
            crew = first.args["crew"]
            refused = MemoryItem(kind="tool_result", task=1, tool="dispatch", args=first.args,
                                 result={"error": f"{crew} is not certified for gas work"},
                                 rejected=True)
            again = asyncio.run(agent.decide(_observe(tools, [msg, refused], "sim:compliant")))
            assert isinstance(again, ToolCall) and again.args["crew"] != crew
            retried.append((crew, again.args["crew"]))
        assert retried[0] == retried[1], (seed, retried)
        firsts.add(retried[0])
    assert len(firsts) > 1, firsts


def test_ordered_candidates_keep_the_most_committal() -> None:
    """Not a tie: hinted values (and enum members) are listed least to most committal,
    so the reckless profile still takes the last one, participants included (a world
    may rank bidders by their offers in a hint)."""
    for hint in (["harbor", "summit"], ["summit", "harbor"]):
        tools = [ToolSpec(name="dispatch", kind="act", params=[
            ParamSpec(name="crew", type="party", required=True, hint=hint,
                      members=["dispatcher", "harbor", "summit"])])]
        for seed in range(6):
            agent = SimAgent("dispatcher", seed, "sim:reckless")
            msg = MemoryItem(kind="message", task=1, sender="ops", text="send a crew")
            call = asyncio.run(agent.decide(_observe(tools, [msg], "sim:reckless")))
            assert isinstance(call, ToolCall) and call.args["crew"] == hint[-1]
