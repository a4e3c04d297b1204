"""Pass 8: lints — things that compile but are probably wrong.

Missing measurements are errors (a study would silently report them as never
assessed). A measurement that can never be false, or never be true, is the bug
other benchmarks shipped ("empty criteria pass automatically"); unused
declarations usually mean a lever or tool was forgotten in a role. Whether a
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


def _folded(world: CheckedWorld, expr: A.Expr, members: set[str],
            plans: FoldPlans) -> list[Any]:
    """The value of `expr` under each condition, as the runtime evaluator computes it from
    the condition's levers alone (UNKNOWN where it needs the episode). Lowered once; what is
    constant is decided once for all conditions."""
    plan = plans.plan(expr, set(world.levers), members, world)
    if plan is None:  # not lowerable (the checker reported why): decided by nothing
        return [UNKNOWN for _ in world.condition_values]
    return [plan.fold(levers) for levers in world.condition_values.values()]
