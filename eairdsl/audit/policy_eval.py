"""A bundle's declared policy rules, evaluated step by step over the state the episode built.

A bundle's policies.json carries each rule as `.eair` expression text (printed
by `rule_text` from the world's IR). The offline auditor evaluates it with the
language's own parser (`eairdsl.syntax`) and the runtime's evaluator
(`eairdsl.runtime.evaluate.compile_expr`), never with Python's `eval`: the
text is untrusted input, and the parser accepts only the expression grammar.

Names in the rule are resolved against the bundle alone: a record the bundle
shows reads its rows; a name bound by a comprehension, aggregate or quantifier
is a local; a lever reads as the literal the bundle printed in its place (the
value the episode's condition gave it, `rule_text`), so a threshold the roles
saw is evaluated like any number; a withheld name (a measurement, or a lever
whose value has no literal, printed `⟨withheld⟩`) is unknown, so it evaluates
to none and the three-valued logic leaves the rule unassessed unless the rest
decides it; any other name is an enum value or a
participant, which the runtime evaluates to its own name. A rule that calls a
definition the bundle does not show (`crosscheck_supports(...)`), or that
fails to parse, is not evaluable: the auditor says so instead of guessing.

The state is rebuilt from the bundle: each record's rows as the episode
started, then every `state_update` diff in step order (`append` adds a row,
`set` replaces a record's rows or a state value). After each update the rule
is evaluated again, which gives the first step at which it fails and the first
later step at which it holds again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eairdsl.audit.evidence import Bundle, RecordView
from eairdsl.ir import (
    Agg,
    Attr,
    Binary,
    Call,
    Comp,
    Expr,
    Index,
    ListExpr,
    Lit,
    Quant,
    RecordExpr,
    RecordIR,
    Ref,
    Unary,
    World,
    WorldMeta,
    walk_expr,
)
from eairdsl.runtime.evaluate import Authorizer, BudgetExceeded, EvalError, Scope, compile_expr
from eairdsl.runtime.values import Row
from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import parse_text

__all__ = ["RuleTrack", "Unevaluable", "parse_rule", "track_rule", "rule_records"]

#: how a withheld name prints in a rule (eairdsl.audit.rule_text.HIDDEN)
_HIDDEN = "⟨withheld⟩"
#: the identifier it is parsed as (a name no world can declare: it is reserved here)
_HIDDEN_ID = "withheld_name_in_rule"
#: a rule longer than this is not parsed (rule_text prints at most 1,200 characters)
_MAX_RULE = 4000


class Unevaluable(ValueError):
    """A rule the bundle alone cannot evaluate (why is the message)."""


@dataclass
class RuleTrack:
    """A policy rule's value after each state change, and where it failed and recovered."""

    policy: str
    #: the records the rule reads
    records: list[str]
    #: step id -> the rule's value after that state update (True, False or None)
    values: dict[str, bool | None] = field(default_factory=dict)
    #: the first state update after which the rule is false
    first_failure: str | None = None
    #: the first later state update after which it holds again
    restored: str | None = None
    #: whether it held (was true) as the episode started
    held_at_start: bool | None = None


def parse_rule(text: str, bundle: Bundle) -> Expr:
    """The rule text as an IR expression, names resolved against the bundle."""
    return _parsed(text, frozenset(bundle.records))


@functools.lru_cache(maxsize=256)
def _parsed(text: str, records: frozenset[str]) -> Expr:
    """`parse_rule` by the rule's text and the bundle's record names, the only things it
    reads (the episodes of a world print the same rules). A rule that does not parse
    raises each time (`_compiled` keeps why)."""
    if len(text) > _MAX_RULE:
        raise Unevaluable("the rule text is too long to parse")
    source = f"let audited_rule() = {text.replace(_HIDDEN, _HIDDEN_ID)}\n"
    module, diagnostics = parse_text(source, "<policy rule>")
    decl = module.decls[0] if module is not None and module.decls else None
    if not isinstance(decl, A.LetDecl) or diagnostics.has_errors:
        raise Unevaluable("the rule text does not parse as an expression")
    return _lower(decl.body, set(records), frozenset())


def _lower(e: A.Expr, records: set[str], bound: frozenset[str]) -> Expr:
    """A syntax-tree expression as IR, the way `eairdsl.lower` does, resolving names
    against what the bundle shows instead of a checked world."""

    def x(sub: A.Expr, inner: frozenset[str] = bound) -> Expr:
        return _lower(sub, records, inner)

    match e:
        case A.LiteralExpr(kind=kind, value=value):
            return Lit(type=kind, value=value)
        case A.NameExpr(id=name):
            if name == _HIDDEN_ID:
                return Lit(type="none", value=None)
            if name in bound:
                return Ref(kind="local", name=name)
            if name in records:
                return Ref(kind="record", name=name)
            return Ref(kind="unknown", name=name)
        case A.AttrExpr(obj=obj, name=name):
            return Attr(obj=x(obj), name=name)
        case A.IndexExpr(obj=obj, index=index):
            return Index(obj=x(obj), index=x(index))
        case A.CallExpr(func=func, args=args):
            return Call(func=func, args=[x(a.value) for a in args],
                        keys=[a.name or "" for a in args])
        case A.UnaryExpr(op=op, operand=operand):
            return Unary(operator=op, operand=x(operand))
        case A.BinaryExpr(op=op, left=left, right=right):
            return Binary(operator=op, left=x(left), right=x(right))
        case A.ListExpr(items=items):
            return ListExpr(items=[x(i) for i in items])
        case A.RecordExpr(fields=fields):
            return RecordExpr(keys=[f.name for f in fields], values=[x(f.value) for f in fields])
        case A.ComprehensionExpr(body=body, tail=tail):
            inner = bound | {tail.var}
            return Comp(var=tail.var, source=x(tail.source), body=x(body, inner),
                        where=x(tail.where, inner) if tail.where else None,
                        group_by=[x(g, inner) for g in tail.group_by])
        case A.AggregateExpr(func=func, body=body, tail=tail):
            if tail is None:
                return Agg(func=func, body=x(body))
            inner = bound | {tail.var}
            return Agg(func=func, var=tail.var, source=x(tail.source), body=x(body, inner),
                       where=x(tail.where, inner) if tail.where else None,
                       group_by=[x(g, inner) for g in tail.group_by])
        case A.QuantifierExpr(kind=kind, var=var, source=source, body=body):
            return Quant(kind=kind, var=var, source=x(source), body=x(body, bound | {var}))
        case _:
            raise Unevaluable(f"the rule uses a construct the auditor does not evaluate "
                              f"({type(e).__name__})")


def rule_records(expr: Expr) -> list[str]:
    """The bundle records a lowered rule reads, in first-mention order."""
    out: dict[str, None] = {}
    for node in walk_expr(expr, {}):
        if isinstance(node, Ref) and node.kind == "record":
            out[node.name] = None
    return list(out)


def _world(bundle: Bundle) -> tuple[World, Authorizer]:
    """A world holding only what the evaluator looks up (the records' names, kinds, keys
    and fields), with its authorizer: made once per such shape (a world's episodes
    share it), never changed by an evaluation."""
    return _shaped(tuple((v.name, v.kind, v.key, tuple(v.fields))
                         for v in bundle.records.values()))


@functools.lru_cache(maxsize=64)
def _shaped(shape: tuple[tuple[str, str, str | None, tuple[str, ...]], ...]
            ) -> tuple[World, Authorizer]:
    from eairdsl.ir import FieldIR, TypeIR

    records = [RecordIR(name=name, kind=kind, key=key,
                        fields=[FieldIR(name=f, type=TypeIR(kind="text")) for f in fields])
               for name, kind, key, fields in shape]
    world = World(meta=WorldMeta(name="audited"), digest="", sources=[], records=records)
    return world, Authorizer(world, {})


def _state(bundle: Bundle) -> dict[str, list[Row]]:
    """Each record's rows as the episode started, as the evaluator reads them: fresh lists
    (an update appends to them) of rows made once per record view (rows are never
    changed by an evaluation; a view is the same object for every episode that shows
    the same record file, `evidence.Bundle.load`)."""
    return {name: list(_rows(name, view)) for name, view in sorted(bundle.records.items())}


def _rows(name: str, view: RecordView) -> tuple[Row, ...]:
    found = _ROWS.get(id(view))
    if found is None or found[0] is not view or found[1] != name:
        if len(_ROWS) >= 256:
            _ROWS.clear()
        found = _ROWS[id(view)] = (view, name, tuple(Row(name, dict(r)) for r in view.rows))
    return found[2]


#: rows by record view (kept alive with them, so an id is never reused while cached)
_ROWS: dict[int, tuple[RecordView, str, tuple[Row, ...]]] = {}


def _apply(records: dict[str, list[Row]], states: dict[str, Any],
           diff: dict[str, Any]) -> set[str]:
    """Apply one state_update diff; the names it changed."""
    changed: set[str] = set()
    appended = diff.get("append")
    if isinstance(appended, dict):
        for name, row in appended.items():
            rows = row if isinstance(row, list) else [row]
            for r in rows:
                if isinstance(r, dict):
                    records.setdefault(name, []).append(Row(name, dict(r)))
                    changed.add(name)
    assigned = diff.get("set")
    if isinstance(assigned, dict):
        for name, value in assigned.items():
            if name in records and isinstance(value, list):
                records[name] = [Row(name, dict(r)) for r in value if isinstance(r, dict)]
            else:
                states[name] = value
            changed.add(name)
    return changed


def _evaluator(policy: str, text: str, bundle: Bundle
               ) -> tuple[Callable[[dict[str, list[Row]], dict[str, Any]], bool | None],
                          list[str]]:
    """The rule compiled once: a function of the rebuilt state (records, states) giving its
    value, and the records it reads. Raises `Unevaluable` as `track_rule` says."""
    found = _compiled(text, frozenset(bundle.records))
    if isinstance(found, str):
        raise Unevaluable(found)
    fn, read = found
    world, authorizer = _world(bundle)

    def value(records: dict[str, list[Row]], states: dict[str, Any]) -> bool | None:
        scope = Scope(world=world, levers={}, states=states, records=records, documents={},
                      authorizer=authorizer)
        try:
            v = fn(scope)
        except (EvalError, BudgetExceeded, ArithmeticError, TypeError, ValueError,
                KeyError, IndexError, AttributeError, RecursionError) as exc:
            raise Unevaluable(f"the rule fails to evaluate ({type(exc).__name__})") from None
        return v if isinstance(v, bool) else None

    return value, list(read)


@functools.lru_cache(maxsize=256)
def _compiled(text: str, records: frozenset[str]
              ) -> tuple[Callable[[Scope], Any], tuple[str, ...]] | str:
    """The rule parsed, checked and compiled (`compile_expr`'s closure reads only the
    scope it is given) with the records it reads, or why it is `Unevaluable`: once per
    rule text and record names, so the parser (lark) runs once per rule of a world, not
    once per episode, for the rules that cannot be evaluated too."""
    try:
        expr = _parsed(text, records)
    except Unevaluable as exc:
        return str(exc)
    except RecursionError:
        return "the rule nests too deeply to evaluate"
    for node in walk_expr(expr, {}):
        if isinstance(node, Call):
            from eairdsl.runtime.builtins import IMPLEMENTATIONS

            if node.func not in IMPLEMENTATIONS and node.func not in ("choose", "text", "join"):
                return f"the rule calls {node.func}(…), a definition the bundle does not show"
    try:
        fn = compile_expr(expr, None)
    except (ValueError, TypeError, RecursionError) as exc:
        return f"the rule does not compile ({exc})"
    return fn, tuple(rule_records(expr))


def track_rule(policy: str, text: str, bundle: Bundle) -> RuleTrack:
    """Evaluate `text` after every state update of the bundle's steps.

    Raises `Unevaluable` when the rule cannot be parsed or names what the
    bundle does not show, or when evaluating it fails.
    """
    value, read = _evaluator(policy, text, bundle)
    records = _state(bundle)
    states: dict[str, Any] = {}
    track = RuleTrack(policy=policy, records=read)
    reads = set(track.records)
    track.held_at_start = value(records, states)
    current = track.held_at_start
    for step in bundle.steps:
        if step.kind != "state_update" or not step.diff:
            continue
        if not (_apply(records, states, step.diff) & reads):
            continue
        v = value(records, states)
        track.values[step.step] = v
        if v is False and current is not False and track.first_failure is None:
            track.first_failure = step.step
        elif v is True and track.first_failure is not None and track.restored is None:
            track.restored = step.step
        current = v
    return track
