"""Witness evaluation: the measurements compiled a second time, into closures that give
each value beside the steps that decided it (the rules are in `eairdsl.runtime.witness`).

The closures mirror `evaluate.compile_expr` node for node and reuse its helpers,
so the values agree (`measure_episode` checks every one against the ordinary
pass); what is free of steps runs as ordinary closures (`_Lets.free`).
"""

from __future__ import annotations

import json
import operator
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

from eairdsl.ir import (
    EXPR_NODES,
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
    MeasureIR,
    Quant,
    RecordExpr,
    Ref,
    Unary,
    walk_expr,
)
from eairdsl.runtime.evaluate import (
    MAX_DEPTH,
    Budget,
    EvalError,
    LetTable,
    Scope,
    _aggregate,
    _arith,
    _attr,
    _check_product,
    _cmp,
    _compile_ref,
    _contains,
    _contains_any,
    _joined,
    _memo_key,
    _rendered,
    _text,
    compile_expr,
)
from eairdsl.runtime.trace import to_json
from eairdsl.runtime.values import Ledger, Row, StaticRows
from eairdsl.runtime.witness import (
    _NO_STEPS,
    EMPTY,
    Provenance,
    Why,
    WScope,
    _flat,
    _plus,
    _steps,
)

if TYPE_CHECKING:
    from eairdsl.runtime.world import CompiledWorld

__all__ = ["WitnessRun", "judge_key", "is_same", "RULES"]

WFn = Callable[[WScope], tuple[Any, Why]]
_NONE: tuple[Any, Why] = (None, EMPTY)


#: trace queries: their values carry steps
_TRACE_QUERIES = frozenset({"messages", "calls", "replies", "final", "delegated"})


class _Lets:
    """`let` bodies compiled for witnessing on first use, and which expressions are *free*.

    A free expression reads no trace query, no state variable, no ledger, no
    measurement and no local or parameter: nothing in it can carry a step, so
    its witness is empty and its value is the ordinary closure's (evaluated on
    the measurement scope, sharing its `let` memo: the ordinary pass has
    usually computed it already). Exact, and most of a world's static
    arithmetic (caps, phrase lists, rubric rows) costs nothing extra.
    """

    def __init__(self, lets: dict[str, LetIR], ordinary: LetTable, mutable: set[str]) -> None:
        self.lets = lets
        self.ordinary = ordinary
        self.mutable = mutable
        self.fns: dict[str, WFn] = {}
        self._free_lets: dict[str, bool] = {}
        self._free: dict[int, bool] = {}  # by node identity: the world's IR lives as long

    def free(self, e: Expr) -> bool:
        """Is `e` free? Decided for `e` and every node under it in one walk, and kept: the
        compiler asks at every node, which must not cost a walk of each subtree."""
        known = self._free
        hit = known.get(id(e))
        if hit is not None:
            return hit
        for node in reversed(_nodes(e)):  # children before their parents
            if id(node) in known:
                continue
            match node:
                case Ref(kind="local" | "param" | "state" | "measure"):
                    ok = False
                case Ref(kind="record", name=name) if name in self.mutable:
                    ok = False
                case Call(func=func) if func in _TRACE_QUERIES:
                    ok = False
                case LetCall(name=name) if not self._free_let(name):
                    ok = False
                case _:
                    ok = all(known[id(c)] for c in _children(node))
            known[id(node)] = ok
        return known[id(e)]

    def _free_let(self, name: str) -> bool:
        """Does the body of `name` read anything but its parameters and static data?"""
        hit = self._free_lets.get(name)
        if hit is None:
            # Its own locals and parameters are its business (the call's arguments are
            # checked by `free`); walk_expr follows the lets it calls, each once.
            hit = self._free_lets[name] = not any(
                (isinstance(x, Ref) and (x.kind in ("state", "measure") or (
                    x.kind == "record" and x.name in self.mutable)))
                or (isinstance(x, Call) and x.func in _TRACE_QUERIES)
                for x in walk_expr(self.lets[name].body, self.lets))
        return hit

    def body(self, name: str) -> WFn:
        fn = self.fns.get(name)
        if fn is None:
            fn = self.fns[name] = _compile(self.lets[name].body, self)
        return fn


def _children(node: Expr) -> list[Expr]:
    """The expressions directly under `node` (not following `let` calls)."""
    out: list[Expr] = []
    for value in node.__dict__.values():
        if isinstance(value, EXPR_NODES):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, EXPR_NODES))
    return out


def _nodes(e: Expr) -> list[Expr]:
    """Every node of `e`, parents before their children."""
    out: list[Expr] = []
    stack = [e]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(_children(node))
    return out


def _compile(e: Expr, lets: _Lets) -> WFn:
    """A witness closure for `e`: the ordinary value and its Why."""
    if not isinstance(e, Lit) and lets.free(e):
        ordinary = compile_expr(e, lets.ordinary)
        return lambda s: (ordinary(s.base), EMPTY)
    return _compile_node(e, lets)


def _compile_node(e: Expr, lets: _Lets) -> WFn:
    match e:
        case Lit(value=value):
            lit = (value, EMPTY)
            return lambda s: lit
        case Ref():
            return _compile_ref_w(e)
        case Attr(obj=obj_expr, name=name):
            obj = _compile(obj_expr, lets)

            def attr(s: WScope) -> tuple[Any, Why]:
                v, w = obj(s)
                kind = type(v)
                value = v.get(name) if kind is Row or kind is dict or isinstance(v, dict) \
                    else _attr(v, name, s.base)
                if w.fields is None:  # a row, a message, a constant: the value's own steps
                    return value, w.bare()
                return value, w.field(name)
            return attr
        case Index():
            obj_i, idx = _compile(e.obj, lets), _compile(e.index, lets)

            def index(s: WScope) -> tuple[Any, Why]:
                (items, wl), (i, wi) = obj_i(s), idx(s)
                if items is None or i is None:
                    return None, _flat(_steps(wl.steps), wi)
                if -len(items) <= i < len(items):
                    return items[i], _plus(wl.item(i % len(items)), wi.all())
                return None, _flat(_steps(wl.steps), wi)
            return index
        case Call():
            return _compile_call(e, lets)
        case Unary(operator=operator):
            operand = _compile(e.operand, lets)
            if operator == "not":
                def not_(s: WScope) -> tuple[Any, Why]:
                    v, w = operand(s)
                    return (None if v is None else not v), w
                return not_

            def neg(s: WScope) -> tuple[Any, Why]:
                v, w = operand(s)
                return (None if v is None else -v), w
            return neg
        case Binary():
            return _compile_binary(e, lets)
        case ListExpr():
            items_l = [_compile(a, lets) for a in e.items]

            def list_(s: WScope) -> tuple[Any, Why]:
                pairs = [f(s) for f in items_l]
                return [v for v, _ in pairs], Why(items=tuple(w for _, w in pairs))
            return list_
        case RecordExpr():
            fields = [(k, _compile(a, lets)) for k, a in zip(e.keys, e.values, strict=True)]

            def record(s: WScope) -> tuple[Any, Why]:
                out: dict[str, Any] = {}
                whys: dict[str, Why] = {}
                for k, f in fields:
                    out[k], whys[k] = f(s)
                return out, Why(fields=whys)
            return record
        case Comp() | Agg():
            return _compile_collection(e, lets)
        case Quant():
            return _compile_quant(e, lets)
        case LetCall():
            return _compile_let(e, lets)
        case _:
            assert_never(e)


def _compile_ref_w(e: Ref) -> WFn:
    name = e.name
    match e.kind:
        case "local" | "param":
            return lambda s: s.locals.get(name, _NONE)
        case "state":
            return lambda s: (s.base.states.get(name), s.prov.state(name))
        case "record":
            plain = _compile_ref(e)

            def record(s: WScope) -> tuple[Any, Why]:
                rows = plain(s.base)
                return rows, s.prov.record(name, rows)
            return record
        case "measure":
            return lambda s: (s.base.measures.get(name), s.measures.get(name, EMPTY))
        case "lever" | "instance" | "context" | "document" | "party" | "tool" | "enum_value" \
                | "enum" | "unknown":
            ordinary = _compile_ref(e)
            return lambda s: (ordinary(s.base), EMPTY)
        case _:
            assert_never(e.kind)


def _compile_binary(e: Binary, lets: _Lets) -> WFn:
    op = e.operator
    left, right = _compile(e.left, lets), _compile(e.right, lets)
    if op == "and":
        def and_(s: WScope) -> tuple[Any, Why]:  # Kleene: false wins, then unknown
            a, wa = left(s)
            if a is False:
                return False, wa
            b, wb = right(s)
            if b is False:
                return False, wb
            if a is None or b is None:
                return None, _flat(*(w for v, w in ((a, wa), (b, wb)) if v is None))
            return True, _flat(wa, wb)
        return and_
    if op == "or":
        def or_(s: WScope) -> tuple[Any, Why]:  # Kleene: true wins, then unknown
            a, wa = left(s)
            if a is True:
                return True, wa
            b, wb = right(s)
            if b is True:
                return True, wb
            if a is None or b is None:
                return None, _flat(*(w for v, w in ((a, wa), (b, wb)) if v is None))
            return False, _flat(wa, wb)
        return or_
    if op == "contains":
        return lambda s: _contains_w(s.base.budget, *left(s), *right(s))
    if op == "in":
        return lambda s: _contains_w(s.base.budget, *right(s), *left(s))
    if op == "contains_any":
        def contains_any(s: WScope) -> tuple[Any, Why]:
            (a, wa), (b, wb) = left(s), right(s)
            value = _contains_any(s.base, a, b)
            if value is True:
                text = _text(a).casefold()
                hit = next(i for i, x in enumerate(b) if _text(x).casefold() in text)
                return True, _flat(wa, wb.item(hit))
            return value, _flat(wa, wb)
        return contains_any

    if op in ("==", "!=", "<", "<=", ">", ">="):
        equal = op == "=="

        order = _ORDER.get(op)

        def comparison(s: WScope) -> tuple[Any, Why]:
            (a, wa), (b, wb) = left(s), right(s)
            if order is None:
                value: Any = (a == b) if equal else (a != b)
            elif a is None or b is None:
                value = None
            else:
                try:
                    value = order(a, b)
                except TypeError:  # as `evaluate._cmp` words it
                    value = _cmp(op, a, b)
            if wb is EMPTY:  # the common case: a comparison with a constant
                return value, wa.bare() if wa.items is None and wa.fields is None \
                    else _flat(wa)
            return value, _flat(wa, wb)
        return comparison
    if op == "*":
        def times(s: WScope) -> tuple[Any, Why]:
            (a, wa), (b, wb) = left(s), right(s)
            _check_product(s.base, a, b)
            return s.base.budget.sized(_arith("*", a, b)), _flat(wa, wb)
        return times
    if op == "+":
        def plus(s: WScope) -> tuple[Any, Why]:
            (a, wa), (b, wb) = left(s), right(s)
            value = _arith("+", a, b)
            if type(value) is str or type(value) is list:
                s.base.budget.sized(value)
            if isinstance(a, list) and isinstance(b, list):
                # a concatenation keeps each element's witness
                items = tuple(wa.item(i) for i in range(len(a))) + tuple(
                    wb.item(i) for i in range(len(b)))
                return value, Why(items=items)
            return value, _flat(wa, wb)
        return plus

    def arithmetic(s: WScope) -> tuple[Any, Why]:
        (a, wa), (b, wb) = left(s), right(s)
        return _arith(op, a, b), _flat(wa, wb)
    return arithmetic


#: the ordering comparisons, one function each (`evaluate._cmp` computes all four)
_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _contains_w(budget: Budget, a: Any, wa: Why, b: Any, wb: Why) -> tuple[Any, Why]:
    """`a contains b` (and `b in a`), as `evaluate._contains` (and charged as it is),
    with its witness."""
    if a is None or b is None:
        return None, _flat(wa, wb)
    if isinstance(a, list):
        budget.charge(len(a) >> 2)
        for i, x in enumerate(a):
            if x is b or x == b:
                return True, _flat(wa.item(i), wb)
        return False, _flat(wa, wb)
    return _contains(a, b, budget), _flat(wa, wb)


def _agg_why(func: str, values: list[Any], whys: list[Why], outer: frozenset[int]) -> Why:
    """What decided `func(values)` (see the module docstring)."""
    if func == "distinct":
        kept: list[Any] = []
        groups: list[list[Why]] = []
        for v, w in zip(values, whys, strict=True):
            for k, o in enumerate(kept):
                if o is v or o == v:
                    groups[k].append(w)
                    break
            else:
                kept.append(v)
                groups.append([w])
        return Why(outer, items=tuple(_flat(*g) for g in groups))
    if not whys:
        return _steps(outer)
    if func == "count":
        steps = frozenset().union(*[w.identity() for w in whys])
    elif func in ("max", "min"):
        result = _aggregate(func, values)
        steps = frozenset().union(*(w.all() for v, w in zip(values, whys, strict=True)
                                    if v is not None and v == result))
    else:  # sum, avg: every element summed
        steps = frozenset().union(*(w.all() for v, w in zip(values, whys, strict=True)
                                    if v is not None))
    return _steps(outer | steps)


def _compile_collection(e: Comp | Agg, lets: _Lets) -> WFn:
    func = e.func if isinstance(e, Agg) else ""
    comp = isinstance(e, Comp)
    body = _compile(e.body, lets)
    if not comp and e.source is None:
        def over_list(s: WScope) -> tuple[Any, Why]:
            xs, wl = body(s)
            values = list(xs or [])
            s.base.budget.charge(len(values))
            whys = [wl.item(i) for i in range(len(values))]
            return _aggregate(func, values, s.base.budget), _agg_why(func, values, whys,
                                                                    wl.steps)
        return over_list
    assert e.source is not None
    source = _compile(e.source, lets)
    where = _compile(e.where, lets) if e.where is not None else None
    keys = [_compile(g, lets) for g in e.group_by]
    var = e.var or ""

    equality = _field_equality_w(e.where, var, lets)

    def rows(s: WScope) -> tuple[list[tuple[Any, Why, list[Any]]], frozenset[int]]:
        """(body value, its element's witness, group key) for every item that passes `where`,
        and the source's own steps."""
        items, ws = source(s)
        items = items or []
        by_row = False
        if equality is not None and items and type(items) is StaticRows:
            # As the ordinary evaluator does: the table's index gives the candidates, `where`
            # still decides; a candidate's witness is its row's (found by identity).
            candidates = _candidates_w(items, equality, s)
            by_row = candidates is not items
            items = candidates
        inner = s.bind(var, None, EMPTY)
        out = []
        s.base.budget.charge(len(items))
        prov = s.prov
        for i, item in enumerate(items):
            wi = _plus(prov.row(item), ws.steps) if by_row else ws.item(i)
            inner.locals[var] = (item, wi)
            extra = wi.steps
            if where is not None:
                ok, ww = where(inner)
                if ok is not True:
                    continue
                if ww is not EMPTY:
                    extra = extra | ww.all()
            v, wv = body(inner)
            key = []
            for k in keys:
                kv, kw = k(inner)
                key.append(kv)
                if kw is not EMPTY:
                    extra = extra | kw.all()
            out.append((v, _plus(wv, extra), key))
        return out, ws.steps

    if keys:
        def grouped(s: WScope) -> tuple[Any, Why]:
            groups: dict[str, list[tuple[Any, Why]]] = {}
            found, outer = rows(s)
            budget = s.base.budget
            for value, w, key in found:
                label = repr(key)
                budget.charge(len(label) >> 6)
                groups.setdefault(label, []).append((value, w))
            ordered = [groups[k] for k in sorted(groups)]
            if comp:
                return ([[v for v, _ in g] for g in ordered],
                        Why(outer, items=tuple(Why(items=tuple(w for _, w in g))
                                               for g in ordered)))
            values = [_aggregate(func, [v for v, _ in g], budget) for g in ordered]
            return values, Why(outer, items=tuple(
                _agg_why(func, [v for v, _ in g], [w for _, w in g], _NO_STEPS)
                for g in ordered))
        return grouped
    if comp:
        def listed(s: WScope) -> tuple[Any, Why]:
            found, outer = rows(s)
            return [v for v, _, _ in found], Why(outer, items=tuple(w for _, w, _ in found))
        return listed

    def aggregated(s: WScope) -> tuple[Any, Why]:
        found, outer = rows(s)
        values = [v for v, _, _ in found]
        return (_aggregate(func, values, s.base.budget),
                _agg_why(func, values, [w for _, w, _ in found], outer))
    return aggregated


def _field_equality_w(where: Expr | None, var: str, lets: _Lets) -> tuple[str, WFn] | None:
    """`evaluate._field_equality` for witness closures: (field, value) when `where` is, or
    starts with, `var.field == value` with `value` free of `var`."""
    if isinstance(where, Binary) and where.operator == "and":
        return _field_equality_w(where.left, var, lets)
    if not isinstance(where, Binary) or where.operator != "==":
        return None
    for side, other in ((where.left, where.right), (where.right, where.left)):
        match side:
            case Attr(obj=Ref(kind="local" | "param", name=bound), name=field_name) \
                    if bound == var and not any(
                        isinstance(x, Ref) and x.name == var and x.kind in ("local", "param")
                        for x in walk_expr(other, lets.lets)):
                return field_name, _compile(other, lets)
    return None


def _candidates_w(rows: StaticRows, equality: tuple[str, WFn], s: WScope) -> Any:
    field_name, value_of = equality
    value, _ = value_of(s)
    index = rows.by_field(field_name)
    if index is None:
        return rows
    try:
        return index.get(value, [])
    except TypeError:  # an unhashable value (a list or a row): scan
        return rows


def _compile_quant(e: Quant, lets: _Lets) -> WFn:
    source = _compile(e.source, lets)
    body = _compile(e.body, lets)
    var, kind = e.var, e.kind

    def quant(s: WScope) -> tuple[Any, Why]:
        items, ws = source(s)
        items = items or []
        inner = s.bind(var, None, EMPTY)
        consulted: list[frozenset[int]] = [ws.steps]  # every element's steps, as it goes
        unknown: list[frozenset[int]] | None = None  # the elements whose body was unknown
        s.base.budget.charge(len(items))
        for i, item in enumerate(items):
            wi = ws.item(i)
            inner.locals[var] = (item, wi)
            value, wb = body(inner)
            if (value is True and kind != "all") or (value is False and kind == "all"):
                # any/exists: the first witness; all: the first counter-example
                return value, _steps(wb.all() | wi.identity() | ws.steps)
            if value is None:
                if unknown is None:
                    unknown = [ws.steps]
                unknown.append(wb.all())
                unknown.append(wi.identity())
            else:
                consulted.append(wb.all())
                consulted.append(wi.identity())
        if unknown is not None:
            return None, _steps(frozenset().union(*unknown))
        return (kind == "all"), _steps(frozenset().union(*consulted))
    return quant


def _compile_let(e: LetCall, lets: _Lets) -> WFn:
    """A `let` call: its body's witness for these arguments, memoised.

    Arguments whose witnesses have no shape (scalars, rows, messages: a set of
    steps each) are bound to *placeholder* witnesses, one per parameter, and the
    answer is memoised by the argument values alone, as the ordinary memo does;
    each call substitutes its own arguments' steps for the placeholders. Every
    rule treats a shapeless witness as its set of steps and combines sets by
    union, so the substituted answer is the one a direct evaluation would give —
    and the same value from another step shares the computation but not the
    steps. Arguments with shape (lists, records, calls) key the memo by their
    witnesses as well.
    """
    name = e.name
    params = lets.lets[name].params
    args = [_compile(a, lets) for a in e.args]
    placeholders = [(p, _placeholder(k)) for k, p in enumerate(params)]

    def evaluate(s: WScope, locals_: dict[str, tuple[Any, Why]]) -> tuple[Any, Why]:
        inner = WScope.__new__(WScope)
        inner.base, inner.prov, inner.measures, inner.memo = s.base, s.prov, s.measures, s.memo
        inner.locals = locals_
        budget = s.base.budget
        budget.charge(1)
        if budget.depth >= MAX_DEPTH:
            raise budget.fail(f"evaluation budget exhausted: `let` calls nested deeper "
                              f"than {MAX_DEPTH} (at {name})")
        budget.depth += 1
        try:
            return lets.body(name)(inner)
        finally:
            budget.depth -= 1

    def call(s: WScope) -> tuple[Any, Why]:
        pairs = [f(s) for f in args]
        if all(w.items is None and w.fields is None for _, w in pairs):
            key: tuple[Any, ...] = (_BY_VALUE, name, *[_memo_key(v) for v, _ in pairs])
            hit = s.memo.get(key)
            if hit is None:
                bound = {p: (v, ph) for (p, ph), (v, _) in zip(placeholders, pairs,
                                                                strict=False)}
                value, why = evaluate(s, bound)
                # held: identity keys stay unique; the last item says whether to substitute
                hit = s.memo[key] = (pairs, value, why, min(why.all(), default=0) < 0)
            return hit[1], _substitute(hit[2], [w for _, w in pairs]) if hit[3] else hit[2]
        key = (name, *[_memo_key(v) for v, _ in pairs], *[_why_key(w) for _, w in pairs])
        hit = s.memo.get(key)
        if hit is None:
            value, why = evaluate(s, dict(zip(params, pairs, strict=False)))
            hit = s.memo[key] = (pairs, value, why)
        return hit[1], hit[2]
    return call


def _why_key(w: Why) -> Any:
    """A memo key for an argument's witness: its steps when it has no shape (equal steps,
    equal answers); for a short list whose items have no shape (`replies(p)`,
    `[final(p)]`: a new witness at every call), its steps and each item's; else its
    identity (the memo holds it, so the identity stays unique)."""
    items = w.items
    if w.fields is None:
        if items is None:
            return w.steps
        if len(items) <= _ITEMS_BY_VALUE and all(
                i.items is None and i.fields is None for i in items):
            return (_ITEMS, w.steps, *[i.steps for i in items])
    return id(w)


#: the first item of a list witness's key (a tuple no other key begins with)
_ITEMS = object()
#: list witnesses of at most this many shapeless items are keyed by their steps
_ITEMS_BY_VALUE = 64


#: the memo keys of let calls answered by value (placeholders), kept apart from the others
_BY_VALUE = object()
_PLACEHOLDERS: dict[int, Why] = {}


def _placeholder(k: int) -> Why:
    """The witness parameter `k` is bound to in a by-value evaluation: the step -(k+1),
    never a trace position (made once per position; safe to race)."""
    return _PLACEHOLDERS.setdefault(k, Why(frozenset((-(k + 1),))))


def _substitute(why: Why, args: list[Why]) -> Why:
    """`why` with each placeholder step -(k+1) replaced by argument k's steps."""
    if why.items is None and why.fields is None:  # the common case: no shape
        steps = why.steps
        if not steps or min(steps) >= 0:
            return why
        found = frozenset().union([x for x in steps if x >= 0],
                                  *[args[-x - 1].all() for x in steps if x < 0])
        return Why(found) if found else EMPTY
    if min(why.all(), default=0) >= 0:
        return why
    steps = why.steps
    if steps and min(steps) < 0:
        steps = frozenset().union([x for x in steps if x >= 0],
                                  *[args[-x - 1].all() for x in steps if x < 0])
    items = None if why.items is None else tuple(_substitute(w, args) for w in why.items)
    fields = None if why.fields is None else {
        k: _substitute(w, args) for k, w in why.fields.items()}
    return Why(steps, items, fields) if steps or items is not None or fields is not None \
        else EMPTY


# ---------------------------------------------------------------- builtins

#: How a builtin's witness follows from its result, its bound arguments and theirs:
#: `(result, {param: value}, [argument witnesses], provenance) -> Why`.
Rule = Callable[[Any, dict[str, Any], list[Why], Provenance], Why]


def _args(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    """Every step the arguments rest on (the default rule)."""
    return _flat(*whys)


def _messages(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    return Why(_flat(*whys).steps, items=tuple(prov.view(v) for v in value or ()))


def _listed(items: tuple[Why, ...], value: Any, whys: list[Why]) -> Why:
    if len(items) != len(value or ()):  # not the trace's answer: no element witnesses
        return _flat(*whys)
    return Why(_flat(*whys).steps, items=items)


def _calls(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    return _listed(prov.calls(bound.get("tool"), bound.get("by")), value, whys)


def _replies(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    return _listed(prov.replies(bound.get("party")), value, whys)


def _final(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    found = prov.final(bound.get("party")) if value is not None else EMPTY
    return _plus(found, _flat(*whys).steps)


def _delegated(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    found = prov.delegation(bound.get("caller"), bound.get("callee")) if value is True \
        else EMPTY
    return _plus(found, _flat(*whys).steps)


def _first(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    items = bound.get("items")
    return whys[0].item(0) if items and isinstance(items, list) else _flat(*whys)


def _last(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    items = bound.get("items")
    return whys[0].item(len(items) - 1) if items and isinstance(items, list) else _flat(*whys)


def _lookup(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    rows_w, key_w = whys[0], _flat(*whys[1:])
    rows = bound.get("rows")
    if value is None or rows is None or (rows_w.items is None and not rows_w.steps):
        return _flat(_steps(rows_w.steps), key_w)
    at = next((i for i, r in enumerate(rows) if r is value), None)
    found = rows_w.item(at) if at is not None else _steps(rows_w.steps)
    return _plus(found, key_w.steps)


def _sentences(value: Any, bound: dict[str, Any], whys: list[Why], prov: Provenance) -> Why:
    if value is None:
        return _flat(*whys)
    each = _flat(*whys)
    return Why(items=(each,) * len(value))


#: Every builtin's witness rule (a test checks that none is missing). `choose`, `text`
#: and `join` are compiled specially, like the ordinary evaluator does.
RULES: dict[str, Rule] = {
    "messages": _messages, "calls": _calls, "replies": _replies, "final": _final,
    "delegated": _delegated, "first": _first, "last": _last, "lookup": _lookup,
    "sentences": _sentences,
    **dict.fromkeys(("pick", "len", "lower", "abs", "round", "authorized", "unauthorized",
                     "canary_hits", "canary_exact", "pattern_hits", "search", "now", "today",
                     "quarter_of", "days_between", "judged", "model_plays"), _args),
}


def _compile_call(e: Call, lets: _Lets) -> WFn:
    name = e.func
    args = [_compile(a, lets) for a in e.args]
    if name == "choose":
        cond, then, other = args[0], args[1], args[2]

        def choose(s: WScope) -> tuple[Any, Why]:
            c, wc = cond(s)
            v, w = then(s) if c is True else other(s)
            return v, _plus(w, wc.all())
        return choose
    if name == "text":
        unit = e.unit

        def text(s: WScope) -> tuple[Any, Why]:
            v, w = args[0](s)
            return (None if v is None else _rendered(s.base.budget, v, unit)), _flat(w)
        return text
    if name == "join":
        unit = e.unit

        def join(s: WScope) -> tuple[Any, Why]:
            xs, wx = args[0](s)
            if xs is None:
                return None, _flat(wx)
            sep, ws = args[1](s) if len(args) > 1 else (", ", EMPTY)
            return _joined(s.base.budget, xs, _text(sep), unit), _flat(wx, ws)
        return join
    from eairdsl.runtime.builtins import BUILTINS, IMPLEMENTATIONS  # it imports evaluate

    impl = IMPLEMENTATIONS.get(name)
    if impl is None:
        raise ValueError(f"unknown builtin {name!r}")
    rule = RULES.get(name, _args)
    params = [p.name for p in BUILTINS[name].params]
    keys = list(e.keys)

    if any(keys):
        def keyword_call(s: WScope) -> tuple[Any, Why]:
            pairs = [f(s) for f in args]
            pos = [v for (v, _), k in zip(pairs, keys, strict=True) if not k]
            kw = {k: v for (v, _), k in zip(pairs, keys, strict=True) if k}
            value = impl(s.base, *pos, **kw)
            bound = dict(zip(params, pos, strict=False)) | kw
            return value, rule(value, bound, [w for _, w in pairs], s.prov)
        return keyword_call
    if rule is _args:  # the default rule reads no argument by name: no binding to build
        def plain_call(s: WScope) -> tuple[Any, Why]:
            pairs = [f(s) for f in args]
            return impl(s.base, *[v for v, _ in pairs]), _flat(*[w for _, w in pairs])
        return plain_call

    def call(s: WScope) -> tuple[Any, Why]:
        pairs = [f(s) for f in args]
        pos = [v for v, _ in pairs]
        value = impl(s.base, *pos)
        return value, rule(value, dict(zip(params, pos, strict=False)), [w for _, w in pairs],
                           s.prov)
    return call


# ---------------------------------------------------------------- one episode

_COMPILED: weakref.WeakKeyDictionary[Any, tuple[_Lets, dict[int, tuple[Expr, WFn]]]] = \
    weakref.WeakKeyDictionary()


def judge_key(rubric: list[Any], artifact: str, positive: int) -> str:
    """The key a judge's answer is replayed under during witnessing."""
    return json.dumps([rubric, artifact, positive], sort_keys=True, default=str)


class WitnessRun:
    """Witness evaluation of one finished episode's measurements, in declaration order.

    `scope` is the measurement scope (its `measures` dict is read live, so a
    measurement referring to an earlier one gets the value the ordinary pass
    gave it); `answers` holds the judge's answers by `judge_key`, replayed
    instead of asking again. The witness closures of a compiled world are
    built once and kept while the world lives.
    """

    def __init__(self, compiled: CompiledWorld, trace: Any, ledgers: dict[str, Ledger],
                 scope: Scope, answers: dict[str, Any]) -> None:
        world = self.world = compiled.world
        #: measurements whose witness was not kept (see measure._witness)
        self.dropped: set[str] = set()
        cached = _COMPILED.get(compiled)
        if cached is None:
            cached = _COMPILED[compiled] = (_Lets(world.lets, compiled.lets, compiled.mutable),
                                            {})
        self._lets, self._fns = cached
        initial = {r.name: len(r.rows) for r in world.records}
        self.prov = Provenance(trace, ledgers, initial)
        base = Scope.__new__(Scope)
        base.__dict__.update(scope.__dict__)
        base.budget = Budget()
        # The measurement pass's `let` memo is shared: values are pure, and the free parts
        # of the measurements (see _Lets) find what the ordinary pass already computed.
        base.judge = lambda rubric, artifact, positive: answers.get(
            judge_key(rubric, artifact, positive)) if answers else None
        self.whys: dict[str, Why] = {}
        self.scope = WScope(base, self.prov, self.whys)

    def _fn(self, expr: Expr) -> WFn:
        # keyed by identity: the entry keeps the expression alive (see CompiledWorld.fn)
        hit = self._fns.get(id(expr))
        if hit is None or hit[0] is not expr:
            hit = self._fns[id(expr)] = (expr, _compile(expr, self._lets))
        return hit[1]

    def measure(self, m: MeasureIR, held: bool | None = None) -> tuple[Any, Why] | None:
        """(value, witness) of one measurement, or None when witnessing itself failed.

        `held`: the ordinary pass's answer to the measurement's `when` (None: no
        `when`, or it failed). A `when` known to hold is witnessed only if its steps
        are needed (the expression rests on none).
        """
        s = self.scope
        try:
            try:
                if m.when is not None and held is not True:
                    ok, licence = self._fn(m.when)(s)
                    if ok is not True:
                        return None, licence
                value, why = self._fn(m.expr)(s)
                steps = why.all()
                if steps and min(steps) < 0:  # a placeholder escaped its let: never a step
                    return None
                if steps or m.when is None:
                    return value, why
                # Nothing to point at (an absence: "no check before the report"): the steps
                # that made the measurement assessable stand in (the published report).
                return value, self._fn(m.when)(s)[1]
            except (EvalError, TypeError, ValueError, KeyError, ArithmeticError):
                return None, EMPTY  # the ordinary pass failed the same way: unassessed
        except Exception:  # the budget, a deep recursion, a bug: witnessing never changes a
            return None    # result, it only loses this measurement's witness

    def keep(self, name: str, why: Why) -> None:
        """Record `name`'s witness, for later measurements that refer to it."""
        self.whys[name] = why

    def step_ids(self, why: Why) -> list[str]:
        """The witness as step ids, in trace order."""
        ids = self.prov.step_ids
        return [ids[i] for i in sorted(why.all())]


def is_same(a: Any, b: Any) -> bool:
    """Do the ordinary and the witness evaluation agree (as the result line would show them)?"""
    return bool(type(a) is type(b) and to_json(a) == to_json(b))
