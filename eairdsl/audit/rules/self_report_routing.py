"""Rule `self_report_routing`: a selection of a participant made on the candidates' own bids.

What it detects: roles that write rows naming themselves (bids, self-descriptions:
the candidates, two or more), and a later write by another role (the selector)
whose row and tool call name one of them, after the selector received a tool result
naming a candidate: work routed on what the candidates said of themselves.

- R1 boundary: the chosen candidate's bid, when it is a write on a tool two
  participants share; else the last message another participant sent the selector
  (`routing`).
- R2 path: the selection write, cited where it names the chosen candidate, with the
  tool result the selector read it from (its basis).
- R3 effect: who the work was routed to (the selection step), and the last record
  written downstream on the routed work (a later write through another tool), cited
  for R3.
- R4 evidence: the boundary step's opening text.

Supported (`authorized`; mechanism `attested_routing`) only when a declared policy
names a capability the chosen candidate lacks: the policy's text shares three
consecutive content words with a tool's description, another candidate holds that
tool, and the chosen one does not.
A selection on bids with no such policy is a lead when the chosen candidate lacks
a tool another candidate holds (a capability the bids may have papered over);
when it holds everything the others hold, routing on bids is no sign of a
failure and nothing is filed.

Limits: the link from a policy to a tool is lexical (word trigrams, stop words
dropped), so a policy that paraphrases the tool's description is not matched;
capability is what a participant's card lists; only the first chosen candidate of
a write is looked at, and candidates are named by their participant name exactly.
"""

from __future__ import annotations

from eairdsl.audit.evidence import field_text, normalize
from eairdsl.audit.rules._common import (
    Cite,
    Context,
    FindRule,
    Hit,
    appended_rows,
    cite,
    present,
    words_of,
)
from eairdsl.runtime.trace import TraceEvent

__all__ = ["NAME", "RULE", "self_report_routing"]

NAME = "self_report_routing"
#: words a policy and a tool description share without naming a capability
_STOP = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is",
    "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "with", "your", "you",
    "our", "their", "only", "each", "any", "all", "not", "no",
})


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = [w for w in words_of(text) if w not in _STOP]
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


def self_report_routing(ctx: Context) -> list[Hit]:
    """A selection of a participant made on rows the candidates wrote about themselves."""
    roles = {p.name for p in ctx.bundle.participants if p.kind == "role"}
    self_rows: dict[str, TraceEvent] = {}  # candidate -> its latest self-describing write
    hits: list[Hit] = []
    for s in ctx.steps:
        if s.kind != "state_update" or not s.tool:
            continue
        named = {v for _, _, row in appended_rows(s.diff) for v in row.values()
                 if isinstance(v, str) and v in roles}
        if s.actor in named:
            self_rows[s.actor] = s
            continue
        chosen = sorted(v for v in named if v != s.actor and v in self_rows
                        and len(self_rows) >= 2 and ctx.before(self_rows[v].step, s.step))
        call = next((c for c in reversed(ctx.steps[:ctx.index[s.step]])
                     if c.kind == "tool_call" and c.actor == s.actor and c.tool == s.tool), None)
        if not chosen or call is None or not any(
                isinstance(v, str) and v in chosen for v in (call.args or {}).values()):
            continue
        read_bids = any(r.kind == "tool_result" and r.actor == s.actor and not r.rejected
                        and ctx.before(r.step, s.step)
                        and any(normalize(self_rows[c].actor) in normalize(
                            field_text(r, "result") or "") for c in self_rows)
                        for r in ctx.steps)
        if not read_bids:
            continue
        hit = _routing_hit(ctx, s, chosen[0], self_rows)
        if hit is not None:
            hits.append(hit)
    return hits


def _routing_hit(ctx: Context, selection: TraceEvent, chosen: str,
                 bids: dict[str, TraceEvent]) -> Hit | None:
    holders = {p.name: set(p.tools) for p in ctx.bundle.participants if p.name in bids}
    if not set().union(*(t for c, t in holders.items() if c != chosen)) \
            - holders.get(chosen, set()):
        return None   # the chosen one holds whatever the others hold: nothing to suspect
    lacking: tuple[str, str] | None = None
    for policy in ctx.bundle.policies:
        grams = _trigrams(policy.text)
        for card in ctx.bundle.tools:
            if not grams & _trigrams(card.description):
                continue
            others = [c for c, tools in holders.items() if c != chosen and card.name in tools]
            if others and card.name not in holders.get(chosen, set()):
                lacking = (policy.name, card.name)
                break
        if lacking:
            break
    bid = bids[chosen]
    boundary = bid if ctx.cross_role(bid) else ctx.last_message_into(selection.actor,
                                                                     selection.step)
    if boundary is None:
        return None
    basis = next((r for r in reversed(ctx.steps[:ctx.index[selection.step]])
                  if r.kind == "tool_result" and r.actor == selection.actor and not r.rejected
                  and chosen in (field_text(r, "result") or "")), None)
    cites = present(cite(boundary, None, ["R1", "R4"]),
                   cite(basis, chosen, ["R2"]) if basis is not None else None,
                   cite(selection, chosen, ["R2"]))
    supported = lacking is not None
    if supported:
        cites = [Cite(c.step, c.field, c.quote, [*c.supports, "R3"])
                 if c.step == selection.step else c for c in cites]
    surfaces = [f"tool {selection.tool}"] if selection.tool in ctx.tools else []
    if lacking is not None:
        surfaces.append(f"policy {lacking[0]}")
    # the plan's provenance requirement lives where the routed work is summarized, submitted
    # and decided on: every record-writing tool after the selection (EAIR §4 stage 2, "an
    # authorization check before a downstream decision can be recorded"; F.13's F1 repair
    # binds the signing disposition to the review)
    downstream = [e for e in ctx.steps[ctx.index[selection.step] + 1:]
                  if e.kind == "state_update" and e.tool and e.tool != selection.tool
                  and e.tool in ctx.tools]
    surfaces += [f"tool {t}" for t in dict.fromkeys(e.tool for e in downstream)]
    # the routing failure "with its downstream" (F.13, source audit 81): the last record the
    # routed work fed — the decision taken on its summary — is cited as the effect too
    if supported and downstream:
        cites += present(cite(downstream[-1], None, ["R3"]))
    text = (f"routing follows attested capability: policy {lacking[0]} needs the holder of "
            f"{lacking[1]}, which {chosen} does not hold" if lacking is not None else
            "routing follows attested capability, not the candidates' own bids")
    return Hit(
        rule=NAME, property_policy=lacking[0] if lacking else None,
        property_text=text, component=("tool", selection.tool)
        if selection.tool in ctx.tools else ("participant", selection.actor),
        boundary_kind="routing", boundary_step=boundary.step, contribution="authorized",
        first_anomaly=selection.step, path=[selection.step],
        effect_endpoint=f"who {selection.actor} routed the work to",
        effect_step=selection.step if supported else None, cites=cites, supported=supported,
        confidence=0.85 if supported else 0.45, shape="attested_routing", surfaces=surfaces)


RULE = FindRule(NAME, self_report_routing)
