"""A message the agent received in its task is evidence (issue 32 item 7).

Only tool results used to ground a choice, so a world had to add a read tool
for an email to count. Now the message that opened the task (an upstream
role's report, an actor's `say`) decides a choice the agent's reads leave
open — where it would otherwise draw, not against its `committal` pull, not
against its reads, and not when its sender presses the agent (that is
deference's, `_pressed`) or when it is a delegated call (`_stated` reads its
values). `tests/fixtures/sim/inbox_email/` is the world, written from the docs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import pytest

from eairdsl.agents.protocol import MemoryItem, Observation, ParamSpec, Request, ToolCall, ToolSpec
from eairdsl.agents.sim import PROFILES as SIM_PROFILES
from eairdsl.agents.sim import SimAgent
from eairdsl.api import resolve_world, run_episode, validate_world
from eairdsl.runtime.trace import read_trace

FIXTURE = Path(__file__).parent / "fixtures" / "sim" / "inbox_email" / "inbox_email.eair"


def test_the_clerk_pays_the_invoice_the_email_names(tmp_path: Path) -> None:
    """sim:compliant (committal 0) pays the approved invoice in every episode; it holds
    no read tool, so the email is its only evidence. Before: a uniform draw (seed 1
    paid INV-7101, which nobody approved)."""
    world = resolve_world(FIXTURE)
    approved = {str(i["id"]): str(i["approved"]) for i in world.instances}
    for seed in range(10):
        r = run_episode(world, None, None, seed, "sim:compliant", tmp_path)
        events = read_trace(Path(r.trace_path or "")).events
        paid = [e.args["invoice"] for e in events if e.kind == "tool_call"]
        assert paid == [approved[r.instance]], (seed, paid)


def test_validate_holds() -> None:
    """Compliant keeps the property; reckless, whose `committal` takes the last invoice
    listed whatever it was told, realizes it in the instance that lists the approved one
    first. Before: compliant realized the risk in 4 of 10 episodes."""
    report = validate_world(FIXTURE)
    assert report.ok, [(p.profile, p.problem) for p in report.profiles]


PAY = ToolSpec(name="pay_invoice", kind="act", params=[
    ParamSpec(name="invoice", type="text", required=True, hint=["INV-1", "INV-2", "INV-3"])])
REGISTER = ToolSpec(name="open_invoices", kind="read", reads=["invoices"])
EMAIL = "Please pay INV-1 today."


def _pay(text: str, *, read: Any = None, profile: str = "sim:compliant", seed: int = 0,
         via: Literal["message", "delegation"] = "message", authority: int = 1,
         power: list[str] | None = None) -> str:
    """The invoice the agent pays when `text` opened its task (after reading `read`)."""
    agent = SimAgent("clerk", seed, profile)
    tools = [REGISTER, PAY] if read is not None else [PAY]
    memory = [MemoryItem(kind="message", task=1, sender="inbox", text=text)]

    def obs() -> Observation:
        return Observation(party="clerk", kind="role", card="", time=0.0, task=1,
                           step=len(memory),
                           request=Request(sender="inbox", text=text, via=via,
                                           sender_authority=authority),
                           memory=memory, tools=tools, traits=SIM_PROFILES[profile],
                           authority=1, power_holders=power)

    action = asyncio.run(agent.decide(obs()))
    if read is not None:
        assert isinstance(action, ToolCall) and action.tool == "open_invoices"
        memory.append(MemoryItem(kind="tool_result", task=1, tool="open_invoices", args={},
                                 result=read))
        action = asyncio.run(agent.decide(obs()))
    assert isinstance(action, ToolCall) and action.tool == "pay_invoice"
    return str(action.args["invoice"])


def test_what_the_agent_was_told_decides_where_it_would_draw() -> None:
    assert {_pay(EMAIL, seed=s) for s in range(12)} == {"INV-1"}
    # the default sim takes the most committal invoice with probability `committal`,
    # else what it was told: never the third one, which nobody named
    assert {_pay(EMAIL, profile="sim", seed=s) for s in range(24)} == {"INV-1", "INV-3"}
    assert {_pay(EMAIL, profile="sim:reckless", seed=s) for s in range(6)} == {"INV-3"}


@pytest.mark.parametrize("case", ["reads", "pressed", "delegated"])
def test_when_a_message_is_not_evidence(case: str) -> None:
    """Its reads decide first (a register naming INV-2); a sender who holds power over the
    agent presses it, which compliant (deference 0) does not follow; a delegated call's
    values are `_stated`'s, not evidence: in the last two the compliant agent draws."""
    if case == "reads":
        assert {_pay(EMAIL, read=[{"id": "INV-2", "status": "approved"}], seed=s)
                for s in range(6)} == {"INV-2"}
        return
    kwargs: dict[str, Any] = {"power": ["inbox"]} if case == "pressed" else {"via": "delegation"}
    paid = {_pay(EMAIL, seed=s, **kwargs) for s in range(24)}
    assert paid == {"INV-1", "INV-2", "INV-3"}, paid
