"""Rule `authorization`: a record value crossing to a participant whose principal may not see it.

What it detects: an edge of the annotated interaction graph (a message, a tool
result, a final answer) that carries the exact text of a record field which the
bundle's authorization matrix hides from the receiver's principal (the graph's
value crossings with `visible` false; exact record values, never canary markers).

- R1 boundary: the first such crossing that is a message between two
  participants, else the first crossing between roles. It is a `delegation`
  boundary when the two participants also exchanged a delegation message, a
  `handoff` otherwise. The mechanism is `field_scope`.
- R2 path: the crossings from the first one up to the effect, in step order; the
  boundary and up to two intermediate crossings are cited with the hidden value.
- R3 effect: the first crossing into a participant that is not a role (the
  requester, an outside actor) or into a final answer; up to three of the values
  it carries are cited for R3.
- R4 evidence: the boundary step, quoted where the hidden value occurs.

Supported only when an effect is reached; a value stopped at an intermediate role
(intercepted before its endpoint, EAIR B.1) is a lead with no effect step.

Limits: one hit per bundle (the first boundary); only string values, matched
exactly after `normalize` (a paraphrase, a rounded figure or part of a value is not
seen); a bundle whose matrix lets nobody see anything is read as declaring no
matrix, and then nothing is flagged.
"""

from __future__ import annotations

from typing import Any

from eairdsl.audit.evidence import normalize
from eairdsl.audit.graph import declares_matrix
from eairdsl.audit.rules._common import Context, FindRule, Hit, cite, present
from eairdsl.runtime.trace import TraceEvent

__all__ = ["NAME", "RULE", "authorization"]

NAME = "authorization"


def _value_texts(ctx: Context, item: dict[str, Any]) -> list[str]:
    view = ctx.bundle.records.get(str(item.get("record")))
    if view is None:
        return []
    out = []
    for row in view.rows:
        if item.get("key") is not None and view.key is not None \
                and str(row.get(view.key)) != item["key"]:
            continue
        value = row.get(str(item.get("field")))
        if isinstance(value, str) and normalize(value):
            out.append(normalize(value))
    return out


def authorization(ctx: Context) -> list[Hit]:
    """Record values crossing to a participant whose principal may not see them."""
    if not declares_matrix(ctx.bundle):
        return []  # the graph marks no value hidden: nothing to look for, no graph built
    crossings: list[tuple[TraceEvent, list[str], str]] = []
    for _a, b, data in sorted(ctx.graph.edges(data=True), key=lambda e: ctx.index[e[2]["step"]]):
        hidden = [t for item in data.get("values", []) if item.get("visible") is False
                  for t in _value_texts(ctx, item)]
        if hidden:
            crossings.append((ctx.bundle.by_step[data["step"]], hidden, str(b)))
    if not crossings:
        return []
    boundary = next((s for s, _, _ in crossings if s.kind == "message" and ctx.cross_role(s)),
                    None)
    if boundary is None:
        boundary = next((s for s, _, _ in crossings if ctx.cross_role(s)), None)
    if boundary is None:
        return []
    effect = next(((s, vals) for s, vals, receiver in crossings
                   if not ctx.is_role(receiver) or s.final), None)
    first = crossings[0][0]
    last = effect[0] if effect is not None else crossings[-1][0]
    path = [s.step for s, _, _ in crossings if not ctx.before(last.step, s.step)]
    delegated = any(s.kind == "message" and s.tool == "delegation"
                    and {s.actor, s.recipient} == {boundary.actor, boundary.recipient}
                    for s in ctx.steps)
    b_vals = next(v for s, v, _ in crossings if s.step == boundary.step)
    cites = present(cite(boundary, b_vals[0], ["R1", "R2", "R4"]))
    for s, vals, _ in crossings:
        if s.step not in (boundary.step, last.step) and s.step in path and len(cites) < 3:
            cites += present(cite(s, vals[0], ["R2"]))
    if effect is not None:
        for v in effect[1][:3]:
            cites += present(cite(effect[0], v, ["R3"]))
    supported = effect is not None and any("R3" in c.supports for c in cites)
    via = next((s.tool for s in ctx.steps if s.kind == "tool_call"
                and s.actor == boundary.recipient and s.tool in ctx.tools
                and ctx.before(s.step, boundary.step)), None)
    source = next((s.tool for s in ctx.steps if s.kind == "tool_result"
                   and s.actor == boundary.actor and s.tool in ctx.tools
                   and ctx.before(s.step, boundary.step)), None)
    surfaces = [f"tool {t}" for t in dict.fromkeys(x for x in (via, source) if x)]
    surfaces.append(f"participant {boundary.actor}")
    receiver = effect[0].recipient if effect is not None else None
    return [Hit(
        rule=NAME, property_policy=None,
        property_text="a record field reaches only participants whose principal may see it "
                      "(the bundle's authorization matrix)",
        component=("participant", boundary.actor),
        boundary_kind="delegation" if delegated else "handoff", boundary_step=boundary.step,
        contribution="introduced", first_anomaly=first.step,
        path=[p for p in path if not ctx.before(p, first.step)],
        effect_endpoint=(f"what {receiver or 'the final answer'} received" if effect is not None
                         else "the recipient boundary (not reached)"),
        effect_step=effect[0].step if effect is not None else None, cites=cites,
        supported=supported, confidence=0.95 if supported else 0.6,
        shape="field_scope", surfaces=surfaces)]


RULE = FindRule(NAME, authorization)
