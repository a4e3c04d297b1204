"""The interaction graph of one episode, read from its trace.

Where `graph.topology_graph` draws what a world allows, this draws what an
episode did: who messaged whom (and in which steps), which tools each
participant called, and which calls were rejected. Edges carry the step ids,
so a diagram points back into the trace — the evidence an auditor cites.
"""

from __future__ import annotations

import networkx as nx

from eairdsl.runtime.trace import Event, Trace, TraceEvent

__all__ = ["episode_graph"]

_MAX_STEPS_IN_LABEL = 4


def _label(steps: list[str]) -> str:
    shown = ", ".join(steps[:_MAX_STEPS_IN_LABEL])
    more = len(steps) - _MAX_STEPS_IN_LABEL
    return f"{len(steps)}× {shown}" + (f", +{more}" if more > 0 else "")


def episode_graph(trace: Trace, kinds: dict[str, str] | None = None) -> nx.MultiDiGraph:
    """Participants and tools as nodes; messages, calls and rejected calls as edges.

    `kinds` maps participant names to role/actor/simulator (by default from the
    trace header's agents); anyone else (a scripted actor, a warning's sender) is
    drawn as an actor.
    """
    h = trace.header
    # Participants with an agent are roles or simulators; the rest are scripted actors.
    kinds = kinds or dict.fromkeys(h.agents, "role")
    g: nx.MultiDiGraph = nx.MultiDiGraph(
        name=f"{h.world}/{h.condition}/{h.instance}/s{h.seed}")
    steps: dict[tuple[str, str, str], list[str]] = {}
    events: list[Event | TraceEvent] = trace.events  # typed: a misspelt kind is an error
    results = {e.call: e for e in events if e.kind == "tool_result" and e.call}
    for e in events:
        if e.kind == "message" and e.recipient:
            kind = "delegation" if e.tool == "delegation" else "message"
            steps.setdefault((e.actor, e.recipient, kind), []).append(e.step)
        elif e.kind == "tool_call" and e.tool:
            result = results.get(e.step)
            kind = "rejected" if result is not None and result.rejected else "call"
            steps.setdefault((e.actor, f"tool:{e.tool}", kind), []).append(e.step)
    for (source, target, kind), ids in sorted(steps.items()):
        for node in (source, target):
            if node not in g:
                if node.startswith("tool:"):
                    g.add_node(node, kind="tool", label=node[5:])
                else:
                    g.add_node(node, kind=kinds.get(node, "actor"))
        g.add_edge(source, target, kind=kind, label=_label(ids), steps=ids)
    return g
