"""Rule `status_drift`: a decision or submission status misstated at a later hop.

What it detects: values of a closed vocabulary (a tool parameter whose JSON schema
is an `enum` of two or more strings) that roles write to records. Vocabularies
sharing a value are one family. Its decision holder is the participant of highest
authority, alone at that rank, among those offered a tool of the family; its
decision values are the ones its own tools (held by it alone) can record. A
later hop by another role misstates the decision state when it

- `contradicted`: states another value than the decision the holder recorded;
- `upgraded`: states a decision the holder never recorded, although an undecided
  value was available;
- `submission_claimed`: says a request is before the holder (a value the world
  declares a `submission`) when none was filed with it (no delegation to it, nothing
  it recorded);
- `submission_dropped`: a request was filed, and the hop states an undecided value
  that does not say so.

- R1 boundary: the last message another participant sent the first misstating
  hop's writer before its write (`handoff`); else that write, when it crosses roles.
- R2 path: the misstating writes in step order, with the holder's contradicted
  decision cited beside the first.
- R3 effect: the status the family's last artifact states, when that artifact is
  one of the misstating writes.
- R4 evidence: the boundary message's opening text; every status quoted from its
  row field (`diff.append.<record>.<param>`).

Supported only when the last artifact states the drifted value and its own row does
not say it was held (a field of the row holds a value the world declares an
`interception`): an artifact stopped before its endpoint is a lead (EAIR B.1).
Mechanism `status_contradicted` or `status_upgraded`; `amplified` when contradicted,
`introduced` otherwise.

What a world declares: the rule names no world's values. Which statuses say a request
is filed, and which say an artifact was stopped, it reads from the bundle's
`vocabularies.json` (`Bundle.vocabularies`), written from the world's `enum`
declarations (`enum E { ... } submission a interception b`, docs/language.md), and a
value counts only when it equals a declared one. With nothing declared (a world that
declares no meanings, an imported trace) no value is a submission and no row says it
was held: `contradicted` and `upgraded` are found as before, `submission_claimed` and
`submission_dropped` never, and every drift that reaches the last artifact is
supported. C1 gets the old behaviour by declaring `submission` on `pending`,
`submitted` and `requested` and `interception` on `hold` and `held`.

Limits: only statuses written to records through tools with closed vocabularies
(a status stated only in a message is the `hedge` rule's business, if at all); no
holder when two participants tie at the top rank; values compared exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from eairdsl.audit.contract import Criterion
from eairdsl.audit.rules._common import (
    Cite,
    Context,
    FindRule,
    Hit,
    appended_rows,
    cite,
    present,
    quote,
    row_field,
)
from eairdsl.runtime.trace import TraceEvent

__all__ = ["NAME", "RULE", "status_drift"]

NAME = "status_drift"


@dataclass
class _Hop:
    step: TraceEvent
    record: str
    index: int | None
    param: str
    value: str
    vocabulary: list[str]


def _hops(ctx: Context) -> list[_Hop]:
    out = []
    for s in ctx.steps:
        if s.kind != "state_update" or not s.tool:
            continue
        enums = ctx.enums(s.tool)
        for record, i, row in appended_rows(s.diff):
            for param, vocabulary in sorted(enums.items()):
                v = row.get(param)
                if isinstance(v, str) and v in vocabulary:
                    out.append(_Hop(s, record, i, param, v, vocabulary))
    return out


def _families(hops: list[_Hop]) -> list[list[_Hop]]:
    """Hops grouped by vocabulary: two vocabularies sharing a value are one family."""
    groups: list[tuple[set[str], list[_Hop]]] = []
    for h in hops:
        values = set(h.vocabulary)
        joined = [g for g in groups if g[0] & values]
        merged_values, merged = set(values), [h]
        for g in joined:
            merged_values |= g[0]
            merged += g[1]
            groups.remove(g)
        groups.append((merged_values, merged))
    return [sorted(g, key=lambda h: h.step.step) for _, g in groups]


def _decision_holder(ctx: Context, values: set[str]) -> tuple[str | None, set[str]]:
    """Who holds the decision over a vocabulary, and its decision values.

    Among the participants offered a tool whose closed vocabulary shares a value
    with `values`, the one of highest authority, when it is alone at that rank;
    its decision values are those its own tools (held by it alone) can record.
    """
    holders: set[str] = set()
    for card in ctx.bundle.tools:
        if any(set(vocab) & values for vocab in ctx.enums(card.name).values()):
            holders |= set(card.roles)
    if not holders:
        return None, set()
    top = max(ctx.authority(h) for h in holders)
    chiefs = [h for h in holders if ctx.authority(h) == top]
    if len(chiefs) != 1:
        return None, set()
    chief = chiefs[0]
    decisions = {v for card in ctx.bundle.tools if set(card.roles) == {chief}
                 for vocab in ctx.enums(card.name).values() if set(vocab) & values
                 for v in vocab}
    return (chief, decisions) if decisions else (None, set())


def status_drift(ctx: Context) -> list[Hit]:
    """A status the decision holder set (or never set), stated otherwise at a later hop."""
    hits = []
    order = ctx.index
    for family in _families(_hops(ctx)):
        family.sort(key=lambda h: order[h.step.step])
        values = {v for h in family for v in h.vocabulary}
        chief, decisions = _decision_holder(ctx, values)
        if chief is None or not {h.step.actor for h in family} - {chief}:
            continue
        authoritative: _Hop | None = None
        drifted: list[tuple[_Hop, _Hop | None, str]] = []
        others = []
        for h in family:
            if h.step.actor == chief:
                authoritative = h
                continue
            others.append(h)
            reason = _drift(ctx, chief, decisions, h, authoritative)
            if reason is not None:
                drifted.append((h, authoritative if reason == "contradicted" else None, reason))
        if not drifted or not others:
            continue
        hit = _drift_hit(ctx, chief, drifted, others[-1])
        if hit is not None:
            hits.append(hit)
    return hits


def _held(ctx: Context, h: _Hop) -> bool:
    """Whether the hop's own row says the artifact was held back: one of its fields holds
    a value the world declares an `interception` (EAIR B.1: an intermediate degradation
    intercepted is not a realization)."""
    row = next((r for rec, i, r in appended_rows(h.step.diff)
                if rec == h.record and i == h.index), {})
    held = set(ctx.bundle.vocabularies.intercepted)
    return any(isinstance(v, str) and v in held for v in row.values())


def _submission(ctx: Context, value: str) -> bool:
    """Whether a vocabulary value says a request is before the decision holder: the world
    declares it a `submission` (submission status, EAIR C.3)."""
    return value in ctx.bundle.vocabularies.submission


def _filed(ctx: Context, chief: str, until: TraceEvent) -> bool:
    """Whether, before `until`, a request reached the decision holder: a delegation to
    it, or anything it recorded."""
    for s in ctx.steps[:ctx.index[until.step]]:
        if s.kind == "message" and s.recipient == chief and s.tool == "delegation":
            return True
        if s.actor == chief and s.kind == "state_update":
            return True
    return False


def _drift(ctx: Context, chief: str, decisions: set[str], h: _Hop,
           authoritative: _Hop | None) -> str | None:
    """How hop `h` misstates the decision state, or None when it states it.

    `contradicted`: the holder recorded a decision this vocabulary can state, and the
    hop states another value; `upgraded`: no decision recorded, and the hop states one
    although an undecided value was available; `submission_claimed`: nothing was filed
    with the holder and the hop says a request is before it; `submission_dropped`: a
    request was filed and the hop states an undecided value that does not say so.
    """
    if authoritative is not None:
        a = authoritative.value
        return "contradicted" if h.value != a and a in h.vocabulary else None
    undecided = set(h.vocabulary) - decisions
    if h.value in decisions:
        return "upgraded" if undecided else None
    pending = {v for v in undecided if _submission(ctx, v)}
    if not pending:
        return None
    filed = _filed(ctx, chief, h.step)
    if h.value in pending and not filed:
        return "submission_claimed"
    if h.value not in pending and filed:
        return "submission_dropped"
    return None


def _hop_cite(h: _Hop, supports: list[Criterion]) -> Cite | None:
    fld = row_field(h.record, h.index, h.param)
    q = quote(h.step, fld)
    return Cite(h.step.step, fld, q, supports) if q else None


def _drift_hit(ctx: Context, chief: str, drifted: list[tuple[_Hop, _Hop | None, str]],
               last: _Hop) -> Hit | None:
    first, against, reason = drifted[0]
    boundary = ctx.last_message_into(first.step.actor, first.step.step)
    if boundary is None:
        boundary = first.step if ctx.cross_role(first.step) else None
    if boundary is None:
        return None
    end = next(((h, a) for h, a, _ in drifted if h is last), None)
    held = _held(ctx, last)
    if held:
        end = None  # the last artifact was stopped before its endpoint: a lead
    path = list(dict.fromkeys(h.step.step for h, _, _ in drifted))
    effect = end[0].step.step if end is not None else None
    cites = present(cite(boundary, None, ["R1", "R4"]) if boundary is not first.step else None,
                   _hop_cite(against, ["R2"]) if against is not None else None,
                   _hop_cite(first, ["R2"] if boundary is not first.step else ["R1", "R2"]))
    if end is not None:
        if end[0] is first:
            cites = [Cite(c.step, c.field, c.quote, [*c.supports, "R3"])
                     if c.step == first.step.step else c for c in cites]
        else:
            if end[1] is not None and end[1] is not against:
                cites += present(_hop_cite(end[1], ["R2"]))
            cites += present(_hop_cite(end[0], ["R3"]))
    supported = end is not None and any("R3" in c.supports for c in cites)
    tool = (end[0] if end is not None else first).step.tool or ""
    # every hop whose artifact drifted is where a reconcile check can sit, and the last one
    surfaces = [f"tool {t}" for t in dict.fromkeys(
        x for x in (tool, first.step.tool, *(h.step.tool for h, _, _ in drifted))
        if x and x in ctx.tools)]
    vocabulary = ", ".join(sorted(set(first.vocabulary)))
    text = {
        "contradicted": f"a decision {chief} recorded (who holds the decision over "
                        f"{vocabulary}) is stated as recorded at every later hop",
        "upgraded": f"no artifact states a decision ({vocabulary}) that {chief}, who holds "
                    "the decision, did not record",
        "submission_claimed": f"no artifact says a request is before {chief} ({vocabulary}) "
                              "when none was filed",
        "submission_dropped": f"an artifact keeps the submission status of a request filed "
                              f"with {chief} ({vocabulary})"}[reason]
    return Hit(
        rule=NAME, property_policy=None, property_text=text,
        component=("tool", tool) if tool in ctx.tools else ("participant", first.step.actor),
        boundary_kind="handoff", boundary_step=boundary.step,
        contribution="amplified" if reason == "contradicted" else "introduced",
        first_anomaly=first.step.step, path=path,
        effect_endpoint=(f"the status the last artifact ({last.record}) states"
                         + (" (held before its endpoint)" if held else "")),
        effect_step=effect, cites=cites, supported=supported,
        confidence=0.9 if supported else 0.55,
        shape="status_contradicted" if reason == "contradicted" else "status_upgraded",
        surfaces=surfaces)


RULE = FindRule(NAME, status_drift)
