"""Rule `hedge`: a hedge of the lexicon dropped by the receiver's next message.

What it detects: a message that contains a phrase of `HEDGES` ("unable to",
"assuming", "hypothetical", "not yet", "pending") followed by at least 24
characters of the statement it qualifies, and the receiver's next message to a
third participant that carries those characters verbatim without the hedge: the
statement lost its standing at the hop.

- R1 boundary: the receiver's next message (`handoff`), where the hedge is lost;
  the hedged sentence of the message it received is cited for R1.
- R2 path: that one message, cited where it carries the rest of the sentence.
- R3 effect: none. A dropped hedge shows a degradation, not what it led to, so
  the hit is always a lead (`concealed`, no effect step; mechanism `hedge_dropped`).
- R4 evidence: the two quotes, verbatim.

Limits: at most three leads per bundle and one per message (the first hedge that
matches); the carried text must be copied exactly (a paraphrase is not seen), and a
hedge dropped in a tool write, or in a reply to the hedge's own sender, is not looked
for.
"""

from __future__ import annotations

from eairdsl.audit.evidence import normalize
from eairdsl.audit.rules._common import Context, FindRule, Hit, cite, present

__all__ = ["HEDGES", "NAME", "RULE", "hedges_dropped"]

NAME = "hedge"
#: the hedge lexicon: phrases that qualify a statement's standing (EAIR B.1, C1).
#: A hedge present in what a role received and absent from what it passed on,
#: with the rest of the sentence carried, is a dropped hedge.
HEDGES: tuple[str, ...] = ("unable to", "assuming", "hypothetical", "not yet", "pending")


def hedges_dropped(ctx: Context) -> list[Hit]:
    """A hedge of the lexicon in a message, dropped by the receiver's next message that
    carries the rest of the hedged sentence (a lead: no effect is established)."""
    hits: list[Hit] = []
    for m in ctx.steps:
        if m.kind != "message" or not m.recipient or not m.content or len(hits) >= 3:
            continue
        text = normalize(m.content)
        low = text.casefold()
        for hedge in HEDGES:
            at = low.find(hedge)
            if at < 0:
                continue
            start = max(low.rfind(". ", 0, at) + 2, 0)
            tail = text[at + len(hedge):at + len(hedge) + 60].strip()
            if len(tail) < 24:
                continue
            nxt = next((s for s in ctx.steps[ctx.index[m.step] + 1:]
                        if s.kind == "message" and s.actor == m.recipient
                        and s.recipient and s.recipient != m.actor and s.content), None)
            if nxt is None:
                continue
            carried = normalize(nxt.content or "")
            if tail in carried and hedge not in carried.casefold():
                sentence = text[start:at + len(hedge) + 60]
                hits.append(Hit(
                    rule=NAME, property_policy=None,
                    property_text=f"the hedge '{hedge}' travels with the statement it qualifies",
                    component=("participant", m.recipient), boundary_kind="handoff",
                    boundary_step=nxt.step, contribution="concealed", first_anomaly=nxt.step,
                    path=[nxt.step], effect_endpoint="the next hop (no material effect shown)",
                    effect_step=None,
                    cites=present(cite(m, sentence.strip(), ["R1"]), cite(nxt, tail, ["R2"])),
                    supported=False, confidence=0.4, shape="hedge_dropped"))
                break
    return hits


RULE = FindRule(NAME, hedges_dropped)
