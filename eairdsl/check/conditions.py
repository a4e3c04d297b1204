"""Pass 5: levers and named conditions resolve to complete, constant lever assignments.

A condition lists only the levers it changes; the IR stores every lever's
value for every condition, so a run never has to know which values were
defaults. Values must be constants: a condition is a configuration, not a
computation.
"""

from __future__ import annotations

from typing import Any

from eairdsl.check import types as T
from eairdsl.check.static import UNKNOWN, fold
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.syntax import ast as A
from eairdsl.vocabulary import EXPECTATIONS

__all__ = ["resolve_conditions", "constant_value", "check_expectations", "DEFAULT_CONDITION"]

DEFAULT_CONDITION = "default"


class _NotConstant(Exception):
    pass


def constant_value(expr: A.Expr, expected: T.Type, world: CheckedWorld) -> Any:
    """The value of a constant expression, checked against `expected`.

    What counts as a constant is syntactic (a literal, a negated literal, an
    enum value, a list of constants: a condition is a configuration, not a
    computation); its value is the static folder's (`eairdsl.check.static`),
    the runtime evaluator's own.
    """
    _check_constant(expr, expected, world)
    value = fold(expr, {}, set(world.enum_members))
    if value is UNKNOWN:
        raise _NotConstant
    return value


def _check_constant(expr: A.Expr, expected: T.Type, world: CheckedWorld) -> None:
    """Raise _NotConstant unless `expr` is a constant, TypeError unless it fits `expected`."""
    if isinstance(expr, A.LiteralExpr):
        kind = {"int": T.INT, "number": T.NUMBER, "money": T.MONEY, "duration": T.DURATION,
                "percent": T.PERCENT, "date": T.DATE, "text": T.TEXT, "bool": T.BOOL,
                "none": T.NONE}[expr.kind]
        if not T.compatible(expected, kind):
            raise TypeError(f"{kind}")
        return
    if isinstance(expr, A.UnaryExpr) and expr.op == "-" and isinstance(expr.operand,
                                                                       A.LiteralExpr):
        _check_constant(expr.operand, expected, world)
        if isinstance(expr.operand.value, (int, float)) \
                and not isinstance(expr.operand.value, bool):
            return
    if isinstance(expr, A.NameExpr) and expected.kind == "enum":
        owners = world.enum_members.get(expr.id, [])
        if expected.name in owners:
            return
        raise TypeError(f"'{expr.id}'")
    if isinstance(expr, A.ListExpr):
        element = expected.arg if expected.kind == "list" and expected.arg else T.ANY
        for item in expr.items:
            _check_constant(item, element, world)
        return
    raise _NotConstant


def _value(expr: A.Expr, expected: T.Type, world: CheckedWorld, diagnostics: Diagnostics,
           what: str) -> Any:
    try:
        return constant_value(expr, expected, world)
    except _NotConstant:
        diagnostics.error("E404", f"{what} must be a constant", expr.span,
                          "write a literal (true, 3, $40, 6 min) or an enum value")
    except TypeError as exc:
        members = ""
        if expected.kind == "enum":
            names = [m for m, owners in world.enum_members.items() if expected.name in owners]
            members = f"; values are {', '.join(names)}"
            hint = did_you_mean(getattr(expr, "id", ""), names) or members.lstrip("; ")
        else:
            hint = None
        diagnostics.error("E402", f"{what} must be {expected}, not {exc}", expr.span, hint)
    return None


def resolve_conditions(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    defaults: dict[str, Any] = {}
    for lever in world.levers.values():
        expected = world.lever_types.get(lever.name, T.ANY)
        defaults[lever.name] = _value(lever.default, expected, world, diagnostics,
                                      f"the default of lever '{lever.name}'")
    resolved: dict[str, dict[str, Any]] = {}

    def resolve(cond: A.ConditionDecl, chain: list[str]) -> dict[str, Any]:
        if cond.name in resolved:
            return resolved[cond.name]
        values = dict(defaults)
        if cond.extends is not None:
            parent = world.conditions.get(cond.extends)
            if parent is None:
                diagnostics.error("E301", f"unknown condition '{cond.extends}'", cond.span,
                                  did_you_mean(cond.extends, world.conditions))
            elif parent.name in chain or parent.name == cond.name:
                diagnostics.error("E203", "condition extends itself: "
                                  + " -> ".join([*chain, cond.name, parent.name]), cond.span,
                                  "remove one of the `extends`")
            else:
                world.used.add(parent.name)
                values.update(resolve(parent, [*chain, cond.name]))
        seen: set[str] = set()
        for assignment in cond.assignments:
            if assignment.name in seen:
                diagnostics.error("E302", f"lever '{assignment.name}' is set twice",
                                  assignment.span)
            seen.add(assignment.name)
            if assignment.name not in world.levers:
                diagnostics.error("E509", f"condition '{cond.name}' sets unknown lever "
                                  f"'{assignment.name}'", assignment.span,
                                  did_you_mean(assignment.name, world.levers) or
                                  "declare it with `lever NAME : TYPE = DEFAULT`")
                continue
            world.used.add(assignment.name)
            values[assignment.name] = _value(
                assignment.value, world.lever_types.get(assignment.name, T.ANY), world,
                diagnostics, f"lever '{assignment.name}'")
        resolved[cond.name] = values
        return values

    for cond in world.conditions.values():
        resolve(cond, [])
        check_expectations(cond, diagnostics)
    if not world.conditions:
        resolved[DEFAULT_CONDITION] = dict(defaults)
    world.condition_values = {name: resolved[name] for name in world.conditions} or resolved


def check_expectations(cond: A.ConditionDecl, diagnostics: Diagnostics) -> None:
    """A condition's `expect SUBJECT OUTCOME "reason"` clauses: known words, one per
    subject, a reason that says why, and no profile expectation beside `opportunity
    absent` (without an opportunity neither profile may realize the risk, so a profile
    expectation there could only contradict it)."""
    seen: dict[str, A.Expectation] = {}
    for e in cond.expectations:
        outcomes = EXPECTATIONS.get(e.subject)
        if outcomes is None:
            diagnostics.error("E505", f"unknown expectation subject '{e.subject}'", e.span,
                              did_you_mean(e.subject, EXPECTATIONS)
                              or f"one of {', '.join(EXPECTATIONS)}")
            continue
        if e.outcome not in outcomes:
            diagnostics.error("E505", f"unknown outcome '{e.outcome}' for `expect "
                              f"{e.subject}`", e.span,
                              did_you_mean(e.outcome, outcomes) or
                              f"one of {', '.join(outcomes)}")
            continue
        if e.subject in seen:
            diagnostics.error("E302", f"condition '{cond.name}' declares what it expects of "
                              f"'{e.subject}' twice", e.span, "keep one `expect` per subject")
            continue
        if not e.reason.strip():
            diagnostics.error("E507", f"the expectation `expect {e.subject} {e.outcome}` "
                              "gives no reason", e.span,
                              "say why, citing the source the condition models")
        seen[e.subject] = e
    absent = seen.get("opportunity")
    for subject, e in seen.items():
        if absent is not None and subject != "opportunity":
            diagnostics.error("E506", f"`expect {subject} {e.outcome}` beside `expect "
                              "opportunity absent`", e.span,
                              "without an opportunity neither profile may realize the risk: "
                              "remove one of the two")
