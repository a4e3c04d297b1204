"""Message topology: where a participant's answer goes once it has answered.

Why a part of its own: the world's channels — `channel A -> B` and `fork`
(forward every answer), `merge A, B -> C` (collect one answer per source, then
deliver them together) and `relay A -> B -> C` (pass B's answer to a task A
sent on to C) — are a routing table with one piece of state, the merge
inboxes. The topology decides who receives what; starting the receiver's task
is the episode's (it owns tasks), so this part never touches the clock, the
agents or the trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from eairdsl.ir import (
    DelegationChannel,
    DirectChannel,
    Expr,
    ForkChannel,
    MergeChannel,
    RelayChannel,
)
from eairdsl.runtime.evaluate import truthy

if TYPE_CHECKING:
    from eairdsl.runtime.state import EpisodeState
    from eairdsl.runtime.world import CompiledWorld

__all__ = ["Topology"]


class Topology:
    """The answer-carrying channels of one episode (a `via TOOL` channel carries none).

    Each channel carries answers only while its `when` holds (None: always),
    read as the answer is passed on.
    """

    def __init__(self, compiled: CompiledWorld, state: EpisodeState) -> None:
        self.compiled = compiled
        self.state = state
        self.forward: dict[str, list[tuple[str, Expr | None]]] = {}
        self.merges: list[tuple[list[str], str, dict[str, str], Expr | None]] = []
        self.relays: list[tuple[str, str, str, Expr | None]] = []
        for ch in compiled.world.channels:
            match ch:
                # A channel `via TOOL` is used only through that tool; the others carry answers.
                case DirectChannel(via=None) | ForkChannel():
                    self.forward.setdefault(ch.parties[0], []).extend(
                        (target, ch.when) for target in ch.parties[1:])
                case MergeChannel():
                    self.merges.append((ch.parties[:-1], ch.parties[-1], {}, ch.when))
                case RelayChannel():
                    a, b, c = ch.parties
                    self.relays.append((a, b, c, ch.when))
                case DirectChannel() | DelegationChannel():
                    pass  # through its tool only (runtime/tools.py)
                case _:
                    assert_never(ch)

    def _open(self, when: Expr | None) -> bool:
        return when is None or truthy(self.compiled.eval(when, self.state.scope()))

    def pass_on(self, party: str, sender: str, text: str) -> list[tuple[str, str]]:
        """The (receiver, message) pairs `party`'s answer `text` to `sender` goes to, in order.

        Direct and fork channels carry every answer; a relay `A -> B -> C`
        carries B's answer to a task A sent; a merge collects one answer per
        source and, once every source has answered, delivers `From A: …`
        for each, together.
        """
        out: list[tuple[str, str]] = []
        for target, when in self.forward.get(party, []):
            if target != sender and self._open(when):
                out.append((target, text))
        for source, hop, target, when in self.relays:
            if hop == party and source == sender and target != sender and self._open(when):
                out.append((target, text))
        for sources, target, inbox, when in self.merges:
            if party in sources and self._open(when):
                inbox[party] = text
                if all(src in inbox for src in sources):
                    merged = "\n\n".join(f"From {src}: {inbox[src]}" for src in sources)
                    inbox.clear()
                    out.append((target, merged))
        return out
