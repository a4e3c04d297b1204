"""Rule `policy_rule`: a declared policy rule that fails as the episode's state evolves.

What it detects: a policy of the bundle with a `rule` (a DSL expression over the
records, `policies.json`) is evaluated after every state change
(`policy_eval.track_rule`); the first step after which it fails, and the step
that restores it, if any.

- R1 boundary: the failing step itself when it crosses roles (a message, or an
  action on a tool two participants share: `shared_action`); else the latest
  cross-role write up to the failure; else the last message another participant
  sent the failing actor (`handoff`).
- R2 path: the failing write and the writes after it while the rule stays broken;
  up to three earlier writes that fed the failing state are cited for R2.
- R3 effect: the rule still broken at the end of the episode (the path's last
  step). A rule restored later has no effect: the hit is a lead with
  `resolved_later` set.
- R4 evidence: the boundary step's opening text, with the failing and final
  writes cited verbatim.

Supported only when the rule is not restored and the interaction contributed:
two or more actors wrote to the failing state (`amplified`), or one role wrote
it from what other roles told it (`_relayed`). One actor breaking the rule alone
is a lead (`introduced`). The mechanism is `cumulative` when the rule aggregates
(an aggregate, or a comprehension grouped by a key) and two or more actors wrote
to the failing state, `invariant` otherwise; it chooses the plan and the Signals
types (`eairdsl.audit.repairs`), never a risk id. A single writer that relayed
nothing may still rest on a boundary the steps show (`reliance`: a request
across authority, a report overridden at review, a duty omitted along a
delegation): then the boundary, contribution and mechanism are that one's.

A single writer who records what others told it (evidence aggregation, a
summary, a sign-off) is read from the steps, never from message existence
alone: a value the writer put into the state the rule reads counts as carried
when it is distinctive (a text of at least the validator's minimum quote
length, or a number of two or more characters, matched as a whole number),
the first step of the episode that says it belongs to another role (not the
writer, not the initial records, documents or the writer's own card), and a
message from that or another role to the writer, or a result of a tool two
participants share returned to the writer, quotes it verbatim before the
failing write; so does the result of any tool the writer read it from, the
value having been written by another role first (a record one role fills and
another reads is the boundary, kind `record`). Then R1 is the latest such
carrying step (the handoff edge,
`handoff` for a message, `shared_action` for a tool result), R2 runs from the
first carrying step through the others to the failing write (the path starts
there, so the first anomaly is that step), and each carrying step is cited
with the carried value quoted (R4). The writer inventing the value, or only
receiving messages that do not carry it, stays a lead.

Limits: a rule the bundle cannot evaluate (a call to a definition it does not
show, a parse error, a nesting past the evaluator) is recorded in coverage as
`unevaluable` with why, never guessed; a rule that reads withheld names stays
unassessed (no failure is found).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eairdsl.audit.contract import QueryRecord
from eairdsl.audit.evidence import field_text, normalize
from eairdsl.audit.policy_eval import RuleTrack, Unevaluable, parse_rule, track_rule
from eairdsl.audit.rules._common import Cite, Context, Hit, Outcome, cite, present
from eairdsl.audit.rules.reliance import needles, reliance, step_text
from eairdsl.ir import Agg, Attr, Comp, Ref, walk_expr
from eairdsl.runtime.trace import TraceEvent

__all__ = ["NAME", "RULE", "PolicyRule", "policy_rules"]

NAME = "policy_rule"
#: where a relayed value can be said: a step's text and the state it writes
_SAID_IN = ("content", "args", "result", "diff")


def _aggregate_rule(text: str, ctx: Context) -> bool:
    """Whether the rule aggregates (an aggregate, or a comprehension grouped by a key):
    a cumulative property, which two actors can break together."""
    try:
        expr = parse_rule(text, ctx.bundle)
    except Unevaluable:
        return False
    return any(isinstance(n, Agg) or (isinstance(n, Comp) and n.group_by)
               for n in walk_expr(expr, {}))


@dataclass(frozen=True)
class _Carry:
    """A value the writer recorded, and the step that told it to the writer."""

    step: TraceEvent
    value: str


def _leaf_values(value: Any, reads: frozenset[str], key: str = "") -> list[Any]:
    """Every scalar leaf of a diff (strings, numbers) held under a name the rule reads
    (a field or a state): a value the rule never looks at contributed nothing to it."""
    if isinstance(value, dict):
        return [v for k in sorted(value) for v in _leaf_values(value[k], reads, str(k))]
    if isinstance(value, list):
        return [v for item in value for v in _leaf_values(item, reads, key)]
    scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
    return [value] if scalar and key in reads else []


def _rule_names(rule: str, ctx: Context) -> frozenset[str]:
    """The fields and names the rule reads (`w.litres`: litres)."""
    try:
        expr = parse_rule(rule, ctx.bundle)
    except Unevaluable:
        return frozenset()
    return frozenset(n.name for n in walk_expr(expr, {}) if isinstance(n, Attr | Ref))


def _background(ctx: Context, writer: str) -> str:
    """What the writer could have read without any role telling it: the records as the
    episode started, the documents and its own card."""
    rows = [str(r) for view in ctx.bundle.records.values() for r in view.rows]
    return normalize(" ".join([*rows, *ctx.bundle.documents.values(),
                               ctx.bundle.cards.get(writer, "")]))


def _relayed(ctx: Context, writer: str, writes: list[str], fail: str,
             reads: frozenset[str]) -> list[_Carry]:
    """Steps by which other roles told the single writer a value it then wrote into the
    state the rule reads (see the module's docstring), in trace order."""
    if not ctx.is_role(writer):
        return []
    names = set(ctx.parties)
    written = dict.fromkeys(n for s in writes
                            for v in _leaf_values(ctx.bundle.by_step[s].diff, reads)
                            if v not in names for n in needles(v, identifiers=False))
    background = _background(ctx, writer)
    earlier = [(s, step_text(s, _SAID_IN)) for s in ctx.steps[:ctx.index[fail]]]  # read once
    into = [(s, t) for s, t in earlier
            if (s.kind == "message" and s.recipient == writer and s.actor != writer
                and ctx.is_role(s.actor))
            or (s.kind == "tool_result" and s.actor == writer and not s.rejected)]
    carries: dict[str, _Carry] = {}
    for text, pattern in written:
        if pattern.search(background):
            continue
        first = next((s for s, t in earlier if pattern.search(t)), None)
        if first is None or first.actor == writer or not ctx.is_role(first.actor):
            continue
        for s, t in into:
            if s.step not in carries and pattern.search(t) \
                    and cite(s, text, ["R2"]) is not None:
                carries[s.step] = _Carry(s, text)
    return sorted(carries.values(), key=lambda c: ctx.index[c.step.step])


def _held_alone(ctx: Context, step: TraceEvent) -> bool:
    """A step on a tool only one participant holds: shared, if at all, through a record."""
    card = ctx.tools.get(step.tool or "")
    return card is None or len(set(card.roles)) < 2


def policy_rules(ctx: Context) -> tuple[list[Hit], list[tuple[str, str | None]]]:
    """Declared rules that fail as the state evolves; and each policy with a rule, with
    why it could not be evaluated (None when it was)."""
    hits: list[Hit] = []
    ran: list[tuple[str, str | None]] = []
    for policy in ctx.bundle.policies:
        if not policy.rule:
            continue
        try:
            track = track_rule(policy.name, policy.rule, ctx.bundle)
        except Unevaluable as exc:
            ran.append((policy.name, str(exc)))
            continue
        ran.append((policy.name, None))
        if track.first_failure is None:
            continue
        hit = _rule_hit(ctx, policy.name, policy.text, policy.rule, track)
        if hit is not None:
            hits.append(hit)
    return hits, ran


def _rule_hit(ctx: Context, name: str, text: str, rule: str, track: RuleTrack) -> Hit | None:
    fail = track.first_failure
    assert fail is not None
    writes = [s for s in track.values if not ctx.before(fail, s) or s == fail]
    later = [s for s in track.values if ctx.before(fail, s)
             and (track.restored is None or ctx.before(s, track.restored))]
    path = [fail, *later]
    failing = ctx.bundle.by_step[fail]
    boundary = failing if ctx.cross_role(failing) else next(
        (ctx.bundle.by_step[s] for s in reversed(writes)
         if ctx.cross_role(ctx.bundle.by_step[s])), None)
    actors = {ctx.bundle.by_step[s].actor for s in writes}
    carried = _relayed(ctx, failing.actor, writes, fail, _rule_names(rule, ctx)) \
        if len(actors) == 1 else []
    relied = reliance(ctx, failing, track.records) \
        if len(actors) == 1 and not carried else None
    steps: list[tuple[TraceEvent, str | None]] = \
        [(c.step, c.value) for c in carried] or (relied.carried if relied else [])
    if steps:  # R1 at the latest step that carried it to the writer; R2 from the first
        boundary = steps[-1][0]
        path = [*(s.step for s, _ in steps), *path]
    if boundary is None:
        boundary = ctx.last_message_into(failing.actor, fail)
    if boundary is None:
        return None
    restored = track.restored is not None
    supported = not restored and (len(actors) >= 2 or bool(steps))
    aggregate = _aggregate_rule(rule, ctx)
    tool = failing.tool or boundary.tool
    kind = relied.kind if relied else "handoff" if boundary.kind == "message" else \
        "record" if carried and _held_alone(ctx, boundary) else "shared_action"
    contribution = relied.contribution if relied else \
        "introduced" if len(actors) < 2 and not carried else "amplified"
    shape = relied.shape if relied else \
        "cumulative" if aggregate and len(actors) >= 2 else "invariant"
    return Hit(
        rule=NAME,
        property_policy=name, property_text=text,
        component=("tool", tool) if tool in ctx.tools else ("policy", name),
        boundary_kind=kind, boundary_step=boundary.step, contribution=contribution,
        first_anomaly=path[0], path=path,
        effect_endpoint=f"the declared rule of policy {name} at the end of the episode",
        effect_step=None if restored else path[-1],
        cites=_cites(ctx, failing, boundary, steps, writes, path[-1]),
        supported=supported, confidence=0.95 if supported else 0.6,
        resolved_later=track.restored, shape=shape,
        surfaces=[f"policy {name}"] + ([f"tool {tool}"] if tool in ctx.tools else []))


def _cites(ctx: Context, failing: TraceEvent, boundary: TraceEvent,
           steps: list[tuple[TraceEvent, str | None]], writes: list[str],
           effect: str) -> list[Cite]:
    """R1 and R4 at the boundary, R2 along the steps that carried it and the earlier
    writes, R2 and R3 at the failing write, R3 at the effect."""
    fail = failing.step
    prior = [ctx.bundle.by_step[s] for s in writes if s != fail]
    written = normalize(field_text(failing, "diff") or "")
    needle = next((v for _, v in reversed(steps) if v and v in written), None)
    cites = present(cite(boundary, steps[-1][1] if steps else None, ["R1", "R4"]),
                    *[cite(s, v, ["R2", "R4"]) for s, v in steps],
                    *[cite(s, None, ["R2"]) for s in prior[-3:]],
                    cite(failing, needle, ["R2", "R3"]) if fail != boundary.step else None,
                    cite(ctx.bundle.by_step[effect], None, ["R3"]) if effect != fail else None)
    if fail == boundary.step:
        cites = [Cite(c.step, c.field, c.quote, ["R1", "R3", "R4"]) if c.step == fail else c
                 for c in cites]
    return cites


class PolicyRule:
    """The rule as `RULES` runs it: one coverage query per policy with a rule, naming it
    (and why it could not be evaluated, when it could not)."""

    name = NAME

    def run(self, ctx: Context) -> Outcome:
        hits, ran = policy_rules(ctx)
        return Outcome(hits, [QueryRecord(name=NAME, args={"policy": p} if why is None
                                          else {"policy": p, "unevaluable": why})
                              for p, why in ran])


RULE = PolicyRule()
