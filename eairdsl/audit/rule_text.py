"""A policy's rule as DSL text, for an auditor: an IR expression printed back as `.eair`.

The IR keeps no source text, and the world's source is withheld from a bundle
(it names levers, conditions and measurements), so a rule is printed from its
IR: the expression is turned back into syntax-tree nodes and printed by the
language's own formatter (`eairdsl.syntax.fmt.format_expr`), so the text is
valid `.eair` with the formatter's minimal parentheses.

Two things differ from the source as written:

- `let` calls are inlined (arguments substituted for parameters, bound
  variables renamed where an argument would be captured): a definition's name
  is a world-source identifier that may be a measurement's name (A1's
  `largest_quarter_total`), and the body is what the rule means;
- a lever the caller gives a value for (`settings`: the value the episode's
  condition set, as a literal) prints as that value, since the roles saw the
  setting while its name says what was manipulated; a `let` call the caller can
  fold to a value for the episode (`fold`: one that reads only levers and
  literals, no state, trace or clock) prints as that value where it would
  otherwise print as a call;
- a field of the task instance the caller gives a value for (`settings` under
  `instance.<field>`: a value the episode showed its participants) prints as that
  value;
- other names of the kinds in `hide` (levers without a printable value,
  measurements, the rest of the instance) print as `HIDDEN`, since their names are
  withheld.

Inlining is bounded: a rule that grows past `max_nodes` nodes or `max_chars`
characters is printed again with its definitions as calls (those whose names
are withheld still inlined); past the bounds again, or printing a name the
caller withholds (a record left out of the bundle), it raises `RuleWithheld`
and the bundle leaves that rule out. The printer never evaluates anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, assert_never

from pydantic import BaseModel

from eairdsl.ir import (
    Agg,
    Attr,
    Binary,
    Call,
    Comp,
    Expr,
    Index,
    LetCall,
    LetIR,
    ListExpr,
    Lit,
    Quant,
    RecordExpr,
    Ref,
    RefKind,
    Unary,
)
from eairdsl.source import Span
from eairdsl.syntax import ast as A
from eairdsl.syntax.fmt import FormatterError, format_expr

__all__ = ["HIDDEN", "RuleWithheld", "rule_text", "setting_literal"]

#: what a hidden name (a lever, a measurement) prints as
HIDDEN = "⟨withheld⟩"
_SPAN = Span(file="<rule>", line=1, col=1, end_line=1, end_col=1)


class RuleWithheld(ValueError):
    """The rule cannot be shown: too large once inlined, or it names withheld material."""


#: lever types whose value prints as a literal that parses back to the same value
_LITERAL_KINDS = frozenset({"bool", "int", "number", "money", "percent", "duration", "text"})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def setting_literal(kind: str, value: Any) -> A.Expr | None:
    """A lever's value as the literal the rule prints (`$20`, `15%`, `true`, an enum
    member's name), or None when its type has no literal that parses back to it."""
    if kind == "enum":
        return A.NameExpr(span=_SPAN, id=value) if isinstance(value, str) and \
            _IDENT.fullmatch(value) else None
    if kind not in _LITERAL_KINDS or value is None:
        return None
    if (kind == "bool") != isinstance(value, bool) or (kind == "text") != isinstance(value, str):
        return None
    if kind != "text" and not isinstance(value, int | float):
        return None
    return A.LiteralExpr(span=_SPAN, kind=kind, value=value, raw="")


def _no_fold(call: LetCall) -> A.Expr | None:
    return None


class _Printer:
    def __init__(self, lets: dict[str, LetIR], hide: frozenset[RefKind], max_nodes: int,
                 keep: frozenset[str] | None, shown: Callable[[Ref], bool],
                 settings: Mapping[str, A.Expr] | None = None,
                 fold: Callable[[LetCall], A.Expr | None] = _no_fold) -> None:
        self.lets = lets
        self.settings = settings or {}
        self.fold = fold
        self.shown = shown
        self.hide = hide
        #: None: inline every definition; else the definitions printed as calls
        self.keep = keep
        self.budget = max_nodes
        self.depth = 0
        #: the names each node made here prints, by id (the node kept alive with them)
        self._printed: dict[int, tuple[Any, frozenset[str]]] = {}

    def names(self, value: Any) -> frozenset[str]:
        """Every name (`NameExpr`) in `value`, as `A.walk_exprs` finds them: worked out
        once per node, so an argument substituted into nested definitions is not walked
        again at every level (B1's rules spent most of their printing there)."""
        if isinstance(value, list):
            return frozenset().union(*(self.names(v) for v in value))
        if not isinstance(value, BaseModel):
            return frozenset()
        found = self._printed.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        names = frozenset({value.id}) if isinstance(value, A.NameExpr) else frozenset()
        names = names.union(*(self.names(child) for _, child in value))
        self._printed[id(value)] = (value, names)
        return names

    def _tick(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise RuleWithheld("the rule is too large once its definitions are inlined")

    def node(self, e: Expr, params: dict[str, A.Expr], rename: dict[str, str],
             avoid: frozenset[str]) -> A.Expr:
        """`e` as a syntax-tree node; `params` are a let body's arguments, `rename` its
        renamed bound variables, `avoid` the variables its arguments use."""
        self._tick()

        def sub(x: Expr) -> A.Expr:
            return self.node(x, params, rename, avoid)

        match e:
            case Lit(type=kind, value=value):
                return A.LiteralExpr(span=_SPAN, kind=kind, value=value, raw="")
            case Ref(kind=kind, name=name):
                if kind == "lever" and name in self.settings:
                    return self.settings[name]
                if kind in self.hide:
                    return A.NameExpr(span=_SPAN, id=HIDDEN)
                if not self.shown(e):
                    raise RuleWithheld(f"the rule names a {kind} that is withheld")
                if kind == "param" and name in params:
                    return params[name]
                if kind == "local":
                    return A.NameExpr(span=_SPAN, id=rename.get(name, name))
                return A.NameExpr(span=_SPAN, id=name)
            case Attr(obj=Ref(kind="instance"), name=name) \
                    if f"instance.{name}" in self.settings:
                return self.settings[f"instance.{name}"]
            case Attr(obj=obj, name=name):
                return A.AttrExpr(span=_SPAN, obj=sub(obj), name=name)
            case Index(obj=obj, index=index):
                return A.IndexExpr(span=_SPAN, obj=sub(obj), index=sub(index))
            case Call(func=func, args=args, keys=keys):
                names = [*keys, *[""] * (len(args) - len(keys))]
                return A.CallExpr(span=_SPAN, func=func, args=[
                    A.CallArg(span=_SPAN, name=k or None, value=sub(a))
                    for k, a in zip(names, args, strict=False)])
            case Unary(operator=op, operand=operand):
                return A.UnaryExpr(span=_SPAN, op=op, operand=sub(operand))
            case Binary(operator=op, left=left, right=right):
                return A.BinaryExpr(span=_SPAN, op=op, left=sub(left), right=sub(right))
            case ListExpr(items=items):
                return A.ListExpr(span=_SPAN, items=[sub(i) for i in items])
            case RecordExpr(keys=keys, values=values):
                return A.RecordExpr(span=_SPAN, fields=[
                    A.FieldInit(span=_SPAN, name=k, value=sub(v))
                    for k, v in zip(keys, values, strict=False)])
            case Comp(var=var, source=source, body=body, where=where, group_by=group_by):
                inner, name = self._bind(var, rename, avoid)
                return A.ComprehensionExpr(span=_SPAN, body=self.node(body, params, inner, avoid),
                                           tail=self._tail(name, source, where, group_by,
                                                           params, rename, inner, avoid))
            case Agg(func=func, body=body, var=var, source=source, where=where,
                     group_by=group_by):
                if var is None or source is None:
                    return A.AggregateExpr(span=_SPAN, func=func, body=sub(body))
                inner, name = self._bind(var, rename, avoid)
                return A.AggregateExpr(span=_SPAN, func=func,
                                       body=self.node(body, params, inner, avoid),
                                       tail=self._tail(name, source, where, group_by, params,
                                                       rename, inner, avoid))
            case Quant(kind=kind, var=var, source=source, body=body):
                inner, name = self._bind(var, rename, avoid)
                return A.QuantifierExpr(span=_SPAN, kind=kind, var=name,
                                        source=sub(source),
                                        body=self.node(body, params, inner, avoid))
            case LetCall(name=name, args=args):
                return self._inline(name, args, params, rename, avoid)
            case _:
                assert_never(e)

    def _bind(self, var: str, rename: dict[str, str],
              avoid: frozenset[str]) -> tuple[dict[str, str], str]:
        """A bound variable of a let body, renamed if an argument uses that name."""
        if var not in avoid:
            return ({**rename, var: var} if var in rename else rename), var
        n = 2
        while f"{var}{n}" in avoid:
            n += 1
        return {**rename, var: f"{var}{n}"}, f"{var}{n}"

    def _tail(self, var: str, source: Expr, where: Expr | None, group_by: list[Expr],
              params: dict[str, A.Expr], outer: dict[str, str], inner: dict[str, str],
              avoid: frozenset[str]) -> A.CompTail:
        return A.CompTail(span=_SPAN, var=var, source=self.node(source, params, outer, avoid),
                          where=None if where is None else self.node(where, params, inner,
                                                                     avoid),
                          group_by=[self.node(g, params, inner, avoid) for g in group_by])

    def _inline(self, name: str, args: list[Expr], params: dict[str, A.Expr],
                rename: dict[str, str], avoid: frozenset[str]) -> A.Expr:
        let = self.lets.get(name)
        if let is not None and self.keep is not None and name in self.keep and not params:
            value = self.fold(LetCall(name=name, args=args))
            if value is not None:  # constant for the episode: its value, not its name
                return value
        converted = [self.node(a, params, rename, avoid) for a in args]
        if let is None or (self.keep is not None and name in self.keep):
            return A.CallExpr(span=_SPAN, func=name,
                              args=[A.CallArg(span=_SPAN, name=None, value=c) for c in converted])
        self.depth += 1
        if self.depth > 64:
            raise RuleWithheld("the rule's definitions nest too deeply to inline")
        # every name the arguments print (an over-approximation of their variables)
        used = frozenset().union(*(self.names(c) for c in converted))
        body = self.node(let.body, dict(zip(let.params, converted, strict=False)), {}, used)
        self.depth -= 1
        return body


def rule_text(expr: Expr, lets: dict[str, LetIR], hide: frozenset[RefKind] = frozenset(),
              must_inline: frozenset[str] = frozenset(),
              shown: Callable[[Ref], bool] = lambda ref: True, max_nodes: int = 400,
              max_chars: int = 1200, settings: Mapping[str, A.Expr] | None = None,
              fold: Callable[[LetCall], A.Expr | None] = _no_fold) -> str:
    """`expr` as `.eair` text with `let` calls inlined and the names of `hide`'s kinds hidden.

    When the fully inlined rule is past the bounds, the rule is printed with its
    definitions as calls (`crosscheck_supports(r.reviewer, ...)`), except those
    named in `must_inline` (definitions whose names are themselves withheld, such
    as a measurement's). A printed name for which `shown` is false (a record the
    bundle leaves out) withholds the rule too. A lever named in `settings` prints as
    its value there; a definition printed as a call prints as `fold`'s value for it
    where `fold` gives one (a call with arguments from an enclosing definition's
    parameters is never folded). Raises `RuleWithheld` when the rule cannot be
    printed either way.
    """
    try:
        return _print(expr, lets, hide, None, shown, max_nodes, max_chars, settings, fold)
    except RuleWithheld:
        keep = frozenset(lets) - must_inline
        return _print(expr, lets, hide, keep, shown, max_nodes, max_chars, settings, fold)


def _print(expr: Expr, lets: dict[str, LetIR], hide: frozenset[RefKind],
           keep: frozenset[str] | None, shown: Callable[[Ref], bool], max_nodes: int,
           max_chars: int, settings: Mapping[str, A.Expr] | None = None,
           fold: Callable[[LetCall], A.Expr | None] = _no_fold) -> str:
    printer = _Printer(lets, hide, max_nodes, keep, shown, settings, fold)
    try:
        text = format_expr(printer.node(expr, {}, {}, frozenset()))
    except (FormatterError, RecursionError) as exc:
        raise RuleWithheld(f"the rule cannot be printed ({type(exc).__name__})") from None
    if len(text) > max_chars:
        raise RuleWithheld(f"the rule is longer than {max_chars} characters once inlined")
    return text
