"""Pass 8: lints — things that compile but are probably wrong.

Missing measurements are errors (a study would silently report them as never
assessed). A measurement that can never be false, or never be true, is the bug
other benchmarks shipped ("empty criteria pass automatically"); unused
declarations usually mean a lever or tool was forgotten in a role. An inducer
that shifts sim traits but whose text no LLM prompt receives makes an offline
effect that LLM agents are never exposed to (W703). Whether a
measurement is decided before the episode is the static folder's answer
(`eairdsl.check.static`: the runtime evaluator over the condition's levers).
"""

from __future__ import annotations

from typing import Any

from eairdsl.check.exprs import MEASUREMENTS
from eairdsl.check.static import UNKNOWN, FoldPlans
from eairdsl.check.world import DECL_KINDS, CheckedWorld
from eairdsl.diagnostics import Diagnostics
from eairdsl.syntax import ast as A

__all__ = ["lint_world"]

_MAY_BE_UNUSED = {"condition", "inducer", "policy", "instance", "party"}


def lint_world(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    if world.world is not None:
        defined = {item.name for item in world.measure_items if not item.metric}
        missing = [m for m in MEASUREMENTS if m not in defined]
        if missing:
            where = world.measures[0].span if world.measures else world.world.span
            diagnostics.error("E504", "missing measurement"
                              f"{'s' if len(missing) > 1 else ''}: {', '.join(missing)}", where,
                              "every world defines the six measurements; write `NAME = ... when "
                              "...` to make one unassessed when evidence is missing")
        if not world.instances and not world.instances_from and not world.instance_decls:
            diagnostics.error("E504", "the world has no task instances", world.world.span,
                              "add `instances from \"file.json\" { ... }` or `instance NAME {...}`")
    members = set(world.enum_members)
    plans = FoldPlans()
    broken = [d.span for d in diagnostics.errors if d.span is not None]
    for item in world.measure_items:
        span = item.span
        if any(b.file == span.file and span.line <= b.line <= span.end_line for b in broken):
            continue  # already wrong: folding it would only add noise
        outcomes = {repr(v) for v in _folded(world, item.expr, members, plans)}
        if len(outcomes) == 1 and (value := outcomes.pop()) in ("True", "False"):
            never = "false" if value == "True" else "true"
            diagnostics.warning("W702", f"measurement '{item.name}' can never be {never}",
                                item.expr.span, "a predicate that is decided before the episode "
                                "runs measures nothing; test the trace or the final state")
        elif item.when is not None and all(
                v is False for v in _folded(world, item.when, members, plans)):
            diagnostics.warning("W702", f"measurement '{item.name}' is never assessed",
                                item.when.span, "its `when` is false under every condition")
    for name, (kind, decl, module) in world.decls.items():
        if module.is_stdlib or kind in _MAY_BE_UNUSED or name in world.used:
            continue
        diagnostics.warning("W701", f"{DECL_KINDS[kind]} '{name}' is never used", decl.span,
                            "remove it, or reference it where it belongs")
    _lint_silent_shifts(world, diagnostics)


def _lint_silent_shifts(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    """W703: an inducer with a `shift` but no text an LLM prompt receives.

    A warning's text (literal or computed) arrives as a message, and a live
    dashboard's (a computed text) in every observation; any other inducer's literal
    text reaches an LLM only if a card of one of its roles renders it. Without that,
    the shift moves the sim agents on a channel an LLM never sees.
    """
    if any(d.span is not None and d.code.startswith("E6") for d in diagnostics.errors):
        return  # cards did not render: which texts they show is unknown
    for name, inducer in world.inducers.items():
        entry = world.decls.get(name)
        if entry is not None and entry[2].is_stdlib:
            continue
        shifts = [c for c in inducer.clauses if isinstance(c, A.ShiftClause)]
        if not shifts:
            continue
        text = A.first_clause(inducer.clauses, A.TextClause)
        if text is None:
            diagnostics.warning(
                "W703", f"{inducer.kind} '{name}' shifts sim traits but has no `text`: "
                "no LLM prompt receives it", shifts[0].span,
                "give it the `text` an LLM agent would see (rendered by the card, or sent as "
                "a warning), or remove the shift — a channel only the sim feels is a "
                "hypothesis, not a mechanic")
            continue
        if inducer.kind == "warning" or text.constant is None:
            continue  # a message when it fires; a live dashboard in every observation
        if not rendered_by_a_card(world, inducer, text.constant):
            diagnostics.warning(
                "W703", f"{inducer.kind} '{name}' shifts sim traits but no card renders its "
                "text: no LLM prompt receives it", shifts[0].span,
                f"render it in its roles' cards (`inducers.{inducer.kind}`"
                f"{' or `prompt_clauses`' if inducer.kind == 'prompt_clause' else ''}), "
                "or remove the shift")


def _folded(world: CheckedWorld, expr: A.Expr, members: set[str],
            plans: FoldPlans) -> list[Any]:
    """The value of `expr` under each condition, as the runtime evaluator computes it from
    the condition's levers alone (UNKNOWN where it needs the episode). Lowered once; what is
    constant is decided once for all conditions."""
    plan = plans.plan(expr, set(world.levers), members, world)
    if plan is None:  # not lowerable (the checker reported why): decided by nothing
        return [UNKNOWN for _ in world.condition_values]
    return [plan.fold(levers) for levers in world.condition_values.values()]


def rendered_by_a_card(world: CheckedWorld, inducer: A.InducerDecl, text: str) -> bool:
    """Whether a rendered prompt of one of the inducer's roles (any role when it names
    none), under some condition, contains `text` (whitespace runs compared as one space).
    An empty text counts as rendered: there is nothing to miss."""
    roles = [n for c in inducer.clauses if isinstance(c, A.RolesClause) for n in c.names]
    needle = " ".join(text.split())
    cards = [t for party, by_cond in world.prompts.items()
             if not roles or party in roles for t in by_cond.values()]
    return not needle or any(needle in " ".join(t.split()) for t in cards)
