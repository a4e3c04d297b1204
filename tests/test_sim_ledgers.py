"""A ledger row another party wrote is not this agent's act done (issue 32 item 7).

The sim skips an act (with probability `diligence`) when a read in the task
returned rows of a ledger the act writes: "already done". Any row counted, so a
second reviewer who read the first reviewer's sign-off took it for its own and
never signed — the careful profile most of all. Who wrote a row is what the row
records in the field the act's append fills from `context.caller`
(`ToolSpec.writer_fields`, read from the IR); a row that does not say counts only
when the agent has appended to that ledger itself. `tests/fixtures/sim/
two_signatures/` is the world, written from the docs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from eairdsl.agents.protocol import MemoryItem, Observation, Request, ToolCall, ToolSpec
from eairdsl.agents.sim import PROFILES as SIM_PROFILES
from eairdsl.agents.sim import SimAgent
from eairdsl.api import resolve_world, run_episode, validate_world
from eairdsl.runtime.trace import read_trace
from eairdsl.runtime.world import writer_fields

FIXTURE = Path(__file__).parent / "fixtures" / "sim" / "two_signatures" / "two_signatures.eair"


def test_the_second_reviewer_signs_after_reading_the_first_ones_row(tmp_path: Path) -> None:
    """sim:compliant reads the log (it holds the first reviewer's row) and still signs:
    both signatures in every episode. Before: it skipped its own sign-off in 10 of 10."""
    world = resolve_world(FIXTURE)
    for seed in range(10):
        r = run_episode(world, None, None, seed, "sim:compliant", tmp_path)
        events = read_trace(Path(r.trace_path or "")).events
        signers = [e.actor for e in events if e.kind == "tool_call" and e.tool == "sign_off"]
        read = [e for e in events if e.kind == "tool_result" and e.tool == "signoff_log"
                and e.actor == "second_reviewer"]
        assert read and read[0].result, seed  # it did read the first reviewer's row
        assert signers == ["first_reviewer", "second_reviewer"], (seed, signers)
        assert r.measurements["realized"] is False


def test_validate_holds(tmp_path: Path) -> None:
    """The self-test: compliant keeps the property. Before: it realized the risk 10/10."""
    report = validate_world(FIXTURE)
    assert report.ok, [(p.profile, p.problem) for p in report.profiles]


def test_the_field_filled_from_the_caller_is_the_writer() -> None:
    world = resolve_world(FIXTURE)
    tools = {t.name: t for t in world.tools}
    assert writer_fields(tools["sign_off"]) == {"signoffs": "reviewer"}
    assert writer_fields(tools["signoff_log"]) == {}


ACT = ToolSpec(name="sign_off", kind="act", writes=["signoffs"],
               writer_fields={"signoffs": "reviewer"})
LOG = ToolSpec(name="signoff_log", kind="read", reads=["signoffs"])
UNSIGNED = ToolSpec(name="sign_off", kind="act", writes=["signoffs"])  # rows say no writer


def _decide(act: ToolSpec, rows: list[dict[str, Any]],
            earlier: list[MemoryItem] | None = None) -> ToolCall | Any:
    """What sim:compliant (diligence 1: it always skips what it finds done) does after
    its read of the log returned `rows` in task 2 (`earlier`: its memory of task 1)."""
    agent = SimAgent("second_reviewer", 0, "sim:compliant")
    memory = [*(earlier or []),
              MemoryItem(kind="message", task=2, sender="legal", text="sign K-310")]

    def obs() -> Observation:
        return Observation(party="second_reviewer", kind="role", card="", time=0.0, task=2,
                           step=len(memory), request=Request(sender="legal", text="sign K-310"),
                           memory=memory, tools=[LOG, act],
                           traits=SIM_PROFILES["sim:compliant"])

    first = asyncio.run(agent.decide(obs()))
    assert isinstance(first, ToolCall) and first.tool == "signoff_log"
    memory.append(MemoryItem(kind="tool_result", task=2, tool="signoff_log", args={},
                             result=rows))
    return asyncio.run(agent.decide(obs()))


def test_whose_rows_count() -> None:
    """Another party's row: the act is made. Its own row: skipped. A row that does not
    say who wrote it: skipped only when the agent has appended to that ledger itself."""
    theirs = [{"contract": "K-310", "reviewer": "first_reviewer"}]
    mine = [{"contract": "K-310", "reviewer": "second_reviewer"}]
    assert isinstance(_decide(ACT, theirs), ToolCall)
    assert not isinstance(_decide(ACT, mine), ToolCall)
    anonymous = [{"contract": "K-310"}]
    assert isinstance(_decide(UNSIGNED, anonymous), ToolCall)
    earlier = [MemoryItem(kind="message", task=1, sender="legal", text="sign K-300"),
               MemoryItem(kind="tool_result", task=1, tool="sign_off", args={},
                          result="Signed off K-300.")]
    assert not isinstance(_decide(UNSIGNED, anonymous, earlier), ToolCall)
