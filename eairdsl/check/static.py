"""Static evaluation: what an expression's value is known to be before any episode runs.

Used for two jobs: deciding lever-only conditions per named condition (which
prompt clauses and tools a role has), and the lint that catches predicates
which can never be false or never be true. Anything that depends on the
trace, the instance or the state is UNKNOWN, and unknowns propagate, except
where boolean logic or a tautology decides the result anyway.
"""

from __future__ import annotations

from typing import Any

from eairdsl.syntax import ast as A
from eairdsl.syntax.build import iter_exprs, same_shape

__all__ = ["UNKNOWN", "fold", "uses_only_levers"]


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def _same(a: A.Expr, b: A.Expr) -> bool:
    """`strip_spans(a) == strip_spans(b)`, with an explicit stack instead of recursion."""
    return same_shape(a, b)


def fold(expr: A.Expr, levers: dict[str, Any], enum_members: set[str]) -> Any:
    """The value of `expr` if it is decided by literals and lever values alone."""
    if isinstance(expr, A.LiteralExpr):
        return expr.value
    if isinstance(expr, A.NameExpr):
        if expr.id in levers:
            return levers[expr.id]
        if expr.id in enum_members:
            return expr.id
        return UNKNOWN
    if isinstance(expr, A.ListExpr):
        items = [fold(i, levers, enum_members) for i in expr.items]
        return UNKNOWN if any(i is UNKNOWN for i in items) else items
    if isinstance(expr, A.UnaryExpr):
        value = fold(expr.operand, levers, enum_members)
        if value is UNKNOWN:
            return UNKNOWN
        if expr.op == "not":
            return (not value) if isinstance(value, bool) else UNKNOWN
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
        return UNKNOWN
    if isinstance(expr, A.BinaryExpr):
        return _fold_binary(expr, levers, enum_members)
    if isinstance(expr, A.QuantifierExpr):
        source = fold(expr.source, levers, enum_members)
        if source == []:
            return expr.kind == "all"
        return UNKNOWN
    if isinstance(expr, A.CallExpr) and expr.func == "choose" and len(expr.args) == 3:
        cond = fold(expr.args[0].value, levers, enum_members)
        if cond is UNKNOWN:
            return UNKNOWN
        return fold(expr.args[1 if cond else 2].value, levers, enum_members)
    return UNKNOWN


def _fold_binary(e: A.BinaryExpr, levers: dict[str, Any], members: set[str]) -> Any:
    left = fold(e.left, levers, members)
    right = fold(e.right, levers, members)
    op = e.op
    if op == "and":
        if left is False or right is False:
            return False
        return UNKNOWN if UNKNOWN in (left, right) else bool(left and right)
    if op == "or":
        if left is True or right is True:
            return True
        if isinstance(e.right, A.UnaryExpr) and e.right.op == "not" and _same(e.left,
                                                                               e.right.operand):
            return True
        return UNKNOWN if UNKNOWN in (left, right) else bool(left or right)
    if op in ("==", "<=", ">=") and _same(e.left, e.right):
        return True
    if op in ("!=", "<", ">") and _same(e.left, e.right):
        return False
    # Counts and lengths are never negative.
    if isinstance(e.left, (A.AggregateExpr, A.CallExpr)) and _is_count(e.left) \
            and isinstance(right, (int, float)) and not isinstance(right, bool):
        if op == ">=" and right <= 0:
            return True
        if op == "<" and right <= 0:
            return False
    if op == "contains_any" and right == []:
        return False
    if left is UNKNOWN or right is UNKNOWN:
        return UNKNOWN
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right))
    if op in ("+", "-", "*", "/") and not numbers:
        return UNKNOWN  # never build text or lists at compile time (`"a" * 10**9`)
    try:
        return {
            "==": lambda: left == right, "!=": lambda: left != right,
            "<": lambda: left < right, "<=": lambda: left <= right,
            ">": lambda: left > right, ">=": lambda: left >= right,
            "+": lambda: left + right, "-": lambda: left - right,
            "*": lambda: left * right, "/": lambda: left / right,
        }[op]()
    except (KeyError, TypeError, ZeroDivisionError, OverflowError, ValueError, MemoryError):
        return UNKNOWN


def _is_count(e: A.Expr) -> bool:
    if isinstance(e, A.AggregateExpr):
        return e.func == "count" and not (e.tail and e.tail.group_by)
    return isinstance(e, A.CallExpr) and e.func == "len"


def uses_only_levers(expr: A.Expr, levers: set[str], members: set[str]) -> bool:
    """True when `expr` names nothing but levers, enum values and literals."""
    for node in iter_exprs(expr):
        if isinstance(node, A.NameExpr) and node.id not in levers and node.id not in members:
            return False
        if not isinstance(node, (A.NameExpr, A.LiteralExpr, A.UnaryExpr, A.BinaryExpr,
                                 A.ListExpr)):
            return False
    return True
