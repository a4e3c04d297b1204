"""Rule `evidence_not_sought`: a record written without reading the documents a role could read.

What it detects: a role holds tools that reach documents (a tool card's `documents`;
for a bundle whose cards list none, a document named among a tool's enum choices or
with every word of its name in a reading tool's description), writes records, and
never received a result of those tools first. The role's conclusions are the
closed-vocabulary values its writes record (`enum` parameters, values of four or
more characters).

- R1 boundary: another participant's earlier message to the role that asserts the
  role's final conclusion (the value as a word, and no other value of its
  vocabulary): the claim. A `power` boundary when the claimant outranks the role,
  `review` otherwise.
- R2 path: the role's writes of that value made while documents were unread; the
  first is cited for R2.
- R3 effect: the last of them, the record the role wrote last (cited for R3).
- R4 evidence: the claim, quoted where it names the value.

Supported (`preserved_despite_check`) when the final conclusion adopts a
claim while the documents stayed unread. A role that wrote with documents unread,
adopted no claim, and had policies written in those documents gives a lead: its
first such write, no effect. The mechanism is `evidence_before_write`.

Limits: "read" means a result of a tool that reaches the document came back, not
that its text was used; a claim must state the value word for word; a role with no
document-reaching tool is never looked at.
"""

from __future__ import annotations

from collections.abc import Iterator

from eairdsl.audit.rules._common import (
    Cite,
    Context,
    FindRule,
    Hit,
    appended_rows,
    cite,
    has_word,
    present,
    quote,
    row_field,
    words_of,
)
from eairdsl.runtime.trace import TraceEvent

__all__ = ["NAME", "RULE", "evidence_not_sought"]

NAME = "evidence_not_sought"
#: tool kinds (eairdsl.vocabulary) whose calls read what they reach
_READING = frozenset({"read", "verify"})


def _doc_reach(ctx: Context) -> dict[str, set[str]]:
    """Tool -> the documents it can read: what its card lists (`ToolCard.documents`), or,
    for a bundle whose cards list none, those named in its schema's choices or with every
    word of their name in a reading tool's description."""
    listed = {card.name: {d.split(".", 1)[0] for d in card.documents}
              for card in ctx.bundle.tools if card.documents}
    if listed:
        return listed
    out: dict[str, set[str]] = {}
    docs = {d: d.split(".", 1)[0] for d in ctx.bundle.documents}
    for card in ctx.bundle.tools:
        # a tool that reads (kind read or verify) and names every word of the document
        described = set(words_of(card.description)) if card.kind in _READING else set()
        choices = {v for vocab in ctx.enums(card.name).values() for v in vocab}
        for _doc, name in docs.items():
            parts = [w for w in words_of(name) if w]
            if name in choices or (parts and all(w in described for w in parts)):
                out.setdefault(card.name, set()).add(name)
    return out


def evidence_not_sought(ctx: Context) -> list[Hit]:
    """Record writes by a role that never read the documents its tools could reach.

    Supported when the role's final conclusion (the last value it recorded from a
    closed vocabulary) repeats another participant's claim while the evidence its
    tools could read stayed unread: the claim crossed the boundary and was
    preserved despite the review the role was to make (a `power` boundary when the
    claimant outranks the role, else `review`). A write with governing documents
    unread and no adopted claim is a lead.
    """
    reach = _doc_reach(ctx)
    hits: list[Hit] = []
    for p in ctx.bundle.participants:
        if p.kind != "role":
            continue
        readable = {d: sorted(t for t in p.tools if d in reach.get(t, ())) for t in p.tools
                    for d in reach.get(t, ())}
        if not readable:
            continue
        read: set[str] = set()
        #: vocabulary (frozen) -> [(write, field, value, unread documents then)]
        conclusions: dict[frozenset[str], list[tuple[TraceEvent, str, str, list[str]]]] = {}
        first_write: tuple[TraceEvent, list[str]] | None = None
        for s in ctx.steps:
            if s.actor != p.name:
                continue
            if s.kind == "tool_result" and not s.rejected and s.tool:
                read |= {d for d, tools in readable.items() if s.tool in tools}
            if s.kind != "state_update" or not s.tool:
                continue
            unread = sorted(set(readable) - read)
            if unread and first_write is None:
                first_write = (s, unread)
            for fld, value, vocab in _conclusions(ctx, s):
                family = next((k for k in conclusions if k & vocab), vocab)
                conclusions.setdefault(family, []).append((s, fld, value, unread))
        found = False
        for family, writes in sorted(conclusions.items(), key=lambda kv: sorted(kv[0])):
            final, fld, value, unread = writes[-1]
            claim = _claim(ctx, final, value, family) if unread else None
            if claim is None:
                continue
            chain = [w for w in writes if w[2] == value and w[3]]
            policies = sorted(x.name for x in ctx.bundle.policies if x.document in unread)
            hits.append(_adoption_hit(ctx, p.name, [(w[0], w[1], claim, value) for w in chain],
                                      unread, policies, _governing(ctx, readable)))
            found = True
        if not found and first_write is not None:
            write, unread = first_write
            policies = sorted(x.name for x in ctx.bundle.policies if x.document in unread)
            if policies:
                lead = _unread_lead(ctx, p.name, write, unread, policies)
                if lead is not None:
                    hits.append(lead)
    return hits


def _conclusions(ctx: Context, write: TraceEvent) -> Iterator[tuple[str, str, frozenset[str]]]:
    """(field, value, vocabulary) of each closed-vocabulary value a write records."""
    enums = ctx.enums(write.tool or "")
    for record, i, row in appended_rows(write.diff):
        for param, vocab in sorted(enums.items()):
            v = row.get(param)
            if isinstance(v, str) and v in vocab and len(v) >= 4:
                yield row_field(record, i, param), v, frozenset(vocab)


def _claim(ctx: Context, write: TraceEvent, value: str,
           vocab: frozenset[str]) -> TraceEvent | None:
    """Another participant's earlier message to the writer that asserts `value` (and no
    other value of its vocabulary)."""
    for m in ctx.steps[:ctx.index[write.step]]:
        if m.kind == "message" and m.recipient == write.actor and m.actor != write.actor \
                and m.content and has_word(m.content, value) \
                and not any(has_word(m.content, o) for o in vocab if o != value):
            return m
    return None


def _governing(ctx: Context, readable: dict[str, list[str]]) -> str | None:
    """The first policy written in a document the role could read: the property a
    conclusion recorded without the evidence fails, whichever documents stayed unread
    this time (its identity, so that one failure is one property, EAIR B.1)."""
    return next((x.name for x in sorted(ctx.bundle.policies, key=lambda x: x.name)
                 if x.document in readable), None)


def _adoption_hit(ctx: Context, role: str, adopting: list[tuple[TraceEvent, str, TraceEvent, str]],
                  unread: list[str], policies: list[str], governing: str | None) -> Hit:
    first, fld, claim, value = adopting[0]
    last, last_fld, _, _ = adopting[-1]
    power = ctx.authority(claim.actor) > ctx.authority(role)
    cites = present(cite(claim, value, ["R1", "R4"]),
                   Cite(first.step, fld, quote(first, fld) or value, ["R2"]),
                   Cite(last.step, last_fld, quote(last, last_fld) or value, ["R3"]))
    surfaces = [f"tool {last.tool}"] if last.tool in ctx.tools else []
    surfaces += [f"policy {x}" for x in policies]
    return Hit(
        rule=NAME,
        property_policy=policies[0] if policies else governing,
        property_text=(f"a conclusion is recorded on evidence, not on a claim: {role} recorded "
                       f"{claim.actor}'s '{value}' without reading {', '.join(unread)}"),
        component=("participant", role), boundary_kind="power" if power else "review",
        boundary_step=claim.step, contribution="preserved_despite_check",
        first_anomaly=first.step, path=list(dict.fromkeys(s.step for s, *_ in adopting)),
        effect_endpoint=f"the record {role} wrote last", effect_step=last.step, cites=cites,
        supported=True, confidence=0.85, shape="evidence_before_write", surfaces=surfaces)


def _unread_lead(ctx: Context, role: str, write: TraceEvent, unread: list[str],
                 policies: list[str]) -> Hit | None:
    boundary = write if ctx.cross_role(write) else ctx.last_message_into(role, write.step)
    if boundary is None:
        return None
    cites = present(cite(boundary, None, ["R1"]), cite(write, None, ["R2"]))
    return Hit(
        rule=NAME, property_policy=policies[0],
        property_text=f"{role} writes a record without reading {', '.join(unread)}",
        component=("participant", role),
        boundary_kind="shared_action" if boundary is write else "review",
        boundary_step=boundary.step, contribution="preserved_despite_check",
        first_anomaly=write.step, path=[write.step],
        effect_endpoint="no effect established", effect_step=None, cites=cites,
        supported=False, confidence=0.4, shape="evidence_before_write",
        surfaces=[f"policy {x}" for x in policies])


RULE = FindRule(NAME, evidence_not_sought)
