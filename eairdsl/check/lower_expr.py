"""Lowering one checked expression to the IR: shared by the compiler and the checker.

`eairdsl.lower` lowers a whole checked world; the checker's constant folder
(`check/static.py`) lowers single expressions so that the runtime's one evaluator
decides their value before any episode (Jinja's `as_const`). Expression lowering
therefore sits in the check stage, below both: it reads the checker's tables
(`CheckedWorld.resolutions`, `expr_types`, `lets`) and builds IR nodes, and imports
neither the world lowering nor any check pass (the folder imported `eairdsl.lower`,
which imported the passes that fold: a four-module import cycle).
"""

from __future__ import annotations

from typing import cast, get_args

from eairdsl.check.world import CheckedWorld
from eairdsl.ir import (
    Agg,
    Attr,
    Binary,
    BinaryOp,
    Call,
    Comp,
    Expr,
    Index,
    LetCall,
    ListExpr,
    Lit,
    Quant,
    RecordExpr,
    Ref,
    RefKind,
    Unary,
)
from eairdsl.syntax import ast as A

__all__ = ["lower_expr"]

_REF_KINDS: frozenset[str] = frozenset(get_args(RefKind))
_BINARY_OPS: frozenset[str] = frozenset(get_args(BinaryOp))


def lower_expr(w: CheckedWorld, e: A.Expr, used_lets: set[str],
               subst: dict[str, Expr] | None = None) -> Expr:
    """Lower one checked expression; `let` calls it makes are added to `used_lets`.

    `subst` maps names bound by an enclosing definition to their lowered values.
    """
    s = subst or {}

    def x(sub: A.Expr, sc: dict[str, Expr]) -> Expr:
        return lower_expr(w, sub, used_lets, sc)

    if isinstance(e, A.LiteralExpr):
        return Lit(type=e.kind, value=e.value)
    if isinstance(e, A.NameExpr):
        if e.id in s:
            return s[e.id]
        res = w.resolutions.get(id(e))
        return Ref(kind=_ref_kind(res.kind) if res else "unknown", name=e.id)
    if isinstance(e, A.AttrExpr):
        return Attr(obj=x(e.obj, s), name=e.name)
    if isinstance(e, A.IndexExpr):
        return Index(obj=x(e.obj, s), index=x(e.index, s))
    if isinstance(e, A.CallExpr):
        if e.func in w.lets:
            let = w.lets[e.func]
            used_lets.add(let.name)
            return LetCall(name=let.name, args=[x(a.value, s) for a in e.args])
        # `text(x)` renders with x's unit ($40, 6 min), which only the checker knows.
        unit = None
        if e.func in ("text", "join") and e.args:
            t = w.expr_types.get(id(e.args[0].value))
            if t is not None:
                unit = t.arg.kind if t.kind == "list" and t.arg is not None else t.kind
        return Call(func=e.func, unit=unit, args=[x(a.value, s) for a in e.args],
                    keys=[a.name or "" for a in e.args])
    if isinstance(e, A.UnaryExpr):
        return Unary(operator=e.op, operand=x(e.operand, s))
    if isinstance(e, A.BinaryExpr):
        return Binary(operator=_binary_op(e.op), left=x(e.left, s), right=x(e.right, s))
    if isinstance(e, A.ListExpr):
        return ListExpr(items=[x(i, s) for i in e.items])
    if isinstance(e, A.RecordExpr):
        return RecordExpr(keys=[f.name for f in e.fields], values=[x(f.value, s) for f in e.fields])
    if isinstance(e, A.ComprehensionExpr):
        inner = {k: v for k, v in s.items() if k != e.tail.var}
        return Comp(var=e.tail.var, source=x(e.tail.source, s), body=x(e.body, inner),
                    where=x(e.tail.where, inner) if e.tail.where else None,
                    group_by=[x(g, inner) for g in e.tail.group_by])
    if isinstance(e, A.AggregateExpr):
        if e.tail is None:
            return Agg(func=e.func, body=x(e.body, s))
        inner = {k: v for k, v in s.items() if k != e.tail.var}
        return Agg(func=e.func, var=e.tail.var, source=x(e.tail.source, s),
                   body=x(e.body, inner),
                   where=x(e.tail.where, inner) if e.tail.where else None,
                   group_by=[x(g, inner) for g in e.tail.group_by])
    assert isinstance(e, A.QuantifierExpr)
    inner = {k: v for k, v in s.items() if k != e.var}
    return Quant(kind=e.kind, var=e.var, source=x(e.source, s), body=x(e.body, inner))


def _ref_kind(kind: str) -> RefKind:
    """The checker's resolution kind as the IR's (every resolution kind is one)."""
    assert kind in _REF_KINDS, kind
    return cast(RefKind, kind)


def _binary_op(op: str) -> BinaryOp:
    """The parser's operator as the IR's (the grammar has no other)."""
    assert op in _BINARY_OPS, op
    return cast(BinaryOp, op)
