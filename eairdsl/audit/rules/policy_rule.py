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

Supported only when the rule is not restored and two or more actors wrote to the
failing state (the interaction's contribution, `amplified`); one actor breaking
the rule alone is a lead (`introduced`). The mechanism is `cumulative` when the
rule aggregates (an aggregate, or a comprehension grouped by a key) and two or
more actors wrote to the failing state, `invariant` otherwise; it chooses the plan
and the Signals types (`eairdsl.audit.repairs`), never a risk id.

Limits: a rule the bundle cannot evaluate (a call to a definition it does not
show, a parse error, a nesting past the evaluator) is recorded in coverage as
`unevaluable` with why, never guessed; a rule that reads withheld names stays
unassessed (no failure is found).
"""

from __future__ import annotations

from eairdsl.audit.contract import QueryRecord
from eairdsl.audit.policy_eval import RuleTrack, Unevaluable, parse_rule, track_rule
from eairdsl.audit.rules._common import Cite, Context, Hit, Outcome, cite, present
from eairdsl.ir import Agg, Comp, walk_expr

__all__ = ["NAME", "RULE", "PolicyRule", "policy_rules"]

NAME = "policy_rule"


def _aggregate_rule(text: str, ctx: Context) -> bool:
    """Whether the rule aggregates (an aggregate, or a comprehension grouped by a key):
    a cumulative property, which two actors can break together."""
    try:
        expr = parse_rule(text, ctx.bundle)
    except Unevaluable:
        return False
    return any(isinstance(n, Agg) or (isinstance(n, Comp) and n.group_by)
               for n in walk_expr(expr, {}))


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
    if boundary is None:
        boundary = ctx.last_message_into(failing.actor, fail)
    if boundary is None:
        return None
    effect = path[-1]
    actors = {ctx.bundle.by_step[s].actor for s in writes}
    prior = [ctx.bundle.by_step[s] for s in writes if s != fail]
    cites = present(cite(boundary, None, ["R1", "R4"]),
                   *[cite(s, None, ["R2"]) for s in prior[-3:]],
                   cite(failing, None, ["R2", "R3"]) if fail != boundary.step else None,
                   cite(ctx.bundle.by_step[effect], None, ["R3"]) if effect != fail else None)
    if fail == boundary.step:
        cites = [Cite(c.step, c.field, c.quote, ["R1", "R3", "R4"]) if c.step == fail else c
                 for c in cites]
    restored = track.restored is not None
    supported = not restored and len(actors) >= 2
    aggregate = _aggregate_rule(rule, ctx)
    tool = failing.tool or boundary.tool
    surfaces = [f"policy {name}"] + ([f"tool {tool}"] if tool in ctx.tools else [])
    return Hit(
        rule=NAME,
        property_policy=name, property_text=text,
        component=("tool", tool) if tool in ctx.tools else ("policy", name),
        boundary_kind="shared_action" if boundary.kind != "message" else "handoff",
        boundary_step=boundary.step,
        contribution="introduced" if len(actors) < 2 else "amplified",
        first_anomaly=fail, path=path,
        effect_endpoint=f"the declared rule of policy {name} at the end of the episode",
        effect_step=None if restored else effect, cites=cites, supported=supported,
        confidence=0.95 if supported else 0.6, resolved_later=track.restored,
        shape="cumulative" if aggregate and len(actors) >= 2 else "invariant",
        surfaces=surfaces)


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
