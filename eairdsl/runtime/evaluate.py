"""Compile IR expressions to Python closures — never `eval`.

Each IR node becomes a function `Scope -> value`, built once per world and
reused for every episode. Boolean logic is three-valued (Kleene): `none`
stands for "unknown", so a predicate over missing evidence comes out unknown
and the measurement is unassessed, not false.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, assert_never

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
    Unary,
    walk_expr,
)
from eairdsl.runtime.builtins import BUILTINS, IMPLEMENTATIONS
from eairdsl.runtime.scope import (
    MAX_DEPTH,
    MAX_INT_BITS,
    MAX_ITEMS,
    MAX_STEPS,
    MAX_TEXT,
    AuthorizationMatrix,
    Authorizer,
    Budget,
    BudgetExceeded,
    EvalError,
    Scope,
    TraceView,
    _arith,
    _render_size,
    _text,
    truthy,
)
from eairdsl.runtime.values import (
    FieldSet,
    Row,
    Rows,
    StaticRows,
)
from eairdsl.runtime.witness import (
    EMPTY,
    Entry,
    Recorder,
    StepFree,
    Why,
    agg_why,
    and_why,
    args_rule,
    choose_why,
    contains_any_why,
    contains_why,
    element_why,
    field_why,
    flat_of,
    flat_why,
    group_why,
    index_why,
    let_answer,
    list_why,
    or_why,
    plus_why,
    quant_decided,
    quant_why,
    record_why,
    row_entry,
)

__all__ = ["Scope", "TraceView", "compile_expr", "EvalError", "Authorizer",
           "AuthorizationMatrix", "LetTable", "truthy",
           "is_stable", "reads_trace_or_clock", "Budget", "BudgetExceeded",
           "MAX_STEPS", "MAX_TEXT", "MAX_ITEMS", "MAX_DEPTH", "MAX_INT_BITS"]

Fn = Callable[["Scope"], Any]

class LetTable:
    """`let` definitions, compiled on first use and memoised per evaluation.

    A definition is pure: within one evaluation context (one Scope family,
    sharing `memo`), the same definition with the same arguments gives the same
    value, so repeated calls — `my_ticket(context.caller)` five times in one
    guard — are computed once.

    A table made by `recording()` compiles *recording* closures (the witnesses,
    see `eairdsl.runtime.witness`): `plain` is the table it records for, whose
    closures it uses for step-free expressions, and `free` tells those apart.
    """

    def __init__(self, lets: dict[str, LetIR], mutable_records: set[str] | None = None,
                 plain: LetTable | None = None) -> None:
        self.lets = lets
        self.mutable = mutable_records or set()
        self._fns: dict[str, Fn] = {}
        self.stable = {name for name in lets if self._is_stable(name, self.mutable)}
        self.plain = plain
        self.free = StepFree(lets, self.mutable) if plain is not None else None
        self._recording: LetTable | None = None

    def recording(self) -> LetTable:
        """The table compiling this one's expressions as recording closures (made once)."""
        if self.plain is not None:
            return self
        found = self._recording
        if found is None:
            found = self._recording = LetTable(self.lets, self.mutable, plain=self)
        return found

    def _is_stable(self, name: str, mutable: set[str]) -> bool:
        """Such a definition is computed once per episode for given arguments."""
        return is_stable(self.lets[name].body, self.lets, mutable)

    def caller(self, name: str) -> Callable[[list[Any], Scope], Any]:
        """A function `(args, scope) -> value` for one definition, memoised as it allows.

        Decided once per definition rather than per call: which memo it uses
        (per episode when stable, per evaluation otherwise) and its parameters.
        """
        return self._callers(name)[0]

    def caller1(self, name: str) -> Callable[[Any, Scope], Any]:
        """`caller` for a call with one argument, `(arg, scope) -> value`: a memo hit
        builds no argument list."""
        return self._callers(name)[1]

    def body(self, name: str) -> Callable[[list[Any], list[Why], Scope], Entry]:
        """For a recording table: `(values, whys, scope) -> (value, Why)`, one definition's
        body with its parameters bound to `values` and their witnesses to `whys`
        (not memoised: `witness.let_answer` keeps the answers with their witnesses)."""
        run = self._callers(name)[2]

        def body(values: list[Any], whys: list[Why], s: Scope) -> Entry:
            value = run(values, (), None, s, whys)
            rec = s.rec
            assert rec is not None
            return value, rec.stack.pop()[1]  # the body's entry
        return body

    def _callers(self, name: str) -> tuple[Callable[[list[Any], Scope], Any],
                                           Callable[[Any, Scope], Any],
                                           Callable[..., Any]]:
        let = self.lets[name]
        params = let.params
        episode = name in self.stable
        fns = self._fns
        compiled: list[Fn] = []  # the body, compiled on the first call (lets may recurse)

        bare = (name,)
        single = params[0] if len(params) == 1 else None

        def run(args: list[Any], key: tuple[Any, ...], memo: dict[tuple[Any, ...], Any] | None,
                s: Scope, whys: list[Why] | None = None) -> Any:
            """A memo miss: evaluate the body and keep the value (in `memo`, unless None:
            a recording call keeps it with its witness). `whys`: the parameters' witnesses,
            bound beside them when recording."""
            if not compiled:
                fn = fns.get(name)
                if fn is None:
                    fn = fns[name] = compile_expr(let.body, self)
                compiled.append(fn)
            budget = s.budget
            budget.steps += 1  # Budget.charge(1), inline: this runs for every let call
            if budget.steps > budget.limit:
                budget.charge(0)
            if budget.depth >= MAX_DEPTH:
                raise budget.fail(f"evaluation budget exhausted: `let` calls nested deeper "
                                  f"than {MAX_DEPTH} (at {name})")
            budget.depth += 1
            # The body reads its parameters and nothing else local: it runs in the
            # caller's scope with the parameters as its locals, restored afterwards
            # (evaluation is eager, so nothing keeps the scope past this call).
            outer = s.locals
            s.locals = {single: args[0]} if single else dict(zip(params, args, strict=False))
            rec = s.rec if whys is not None else None
            if rec is not None:
                outer_lw, rec.lw = rec.lw, dict(zip(params, whys or (), strict=False))
            try:
                value = compiled[0](s)
            finally:
                s.locals = outer
                if rec is not None:
                    rec.lw = outer_lw
                budget.depth -= 1
            # The arguments are kept with the value: an identity key stays unique while held.
            if memo is not None:
                memo[key] = (args, value)
            return value

        def call(args: list[Any], s: Scope) -> Any:
            if not args:
                key: tuple[Any, ...] = bare
            elif len(args) == 1:  # the common case, without a call per argument
                a = args[0]
                key = (name, a if type(a) is str else _memo_key(a))
            else:
                key = (name, *map(_memo_key, args))
            memo = s.episode_memo if episode else s.memo
            hit = memo.get(key, _MISSING)
            if hit is not _MISSING:
                return hit[1]
            return run(args, key, memo, s)

        def call1(a: Any, s: Scope) -> Any:
            key = (name, a if type(a) is str else _memo_key(a))
            memo = s.episode_memo if episode else s.memo
            hit = memo.get(key, _MISSING)
            if hit is not _MISSING:
                return hit[1]
            return run([a], key, memo, s)
        return call, call1, run


_MISSING = object()
#: argument types keyed by identity (rows, tables, lists, records)
_BY_IDENTITY = frozenset({Row, Rows, StaticRows, list, dict})


def is_stable(expr: Expr | None, lets: dict[str, LetIR], mutable: set[str]) -> bool:
    """Does `expr` read only what cannot change during an episode?

    Static tables, the instance, levers, literals and parameters are stable;
    state variables, ledgers some tool appends to, `context`, measurements, the
    clock and trace queries are not.
    """
    for node in walk_expr(expr, lets):
        match node:
            case Ref(kind="state" | "context" | "measure"):
                return False
            case Ref(kind="record", name=name) if name in mutable:
                return False
            case Call(func=func) if func in _VOLATILE:
                return False
    return True


#: builtins whose value changes during an episode (time and trace queries)
_VOLATILE = frozenset({"now", "today", "messages", "calls", "replies", "final", "delegated",
                       "judged"})


def reads_trace_or_clock(expr: Expr | None, lets: dict[str, LetIR]) -> bool:
    """Does `expr` call the clock or a trace query (values that move without a state change)?"""
    return any(isinstance(x, Call) and x.func in _VOLATILE for x in walk_expr(expr, lets))


def _memo_key(value: Any) -> Any:
    """A hashable key for a `let` argument.

    A text is its own key. A number or truth value is keyed with its type: `1`,
    `1.0` and `true` are equal in Python but render differently, so one must not
    find another's value. A short list of texts (`replies(specialist)`,
    `[final(assistant)]`) is keyed by its items: trace queries and list literals
    build a fresh list at every call, which an identity key would never find
    again. Other rows and lists are keyed by identity: values are never mutated
    once an expression or effect has built them, and the memo holds the argument,
    so the identity cannot be reused by another object while the entry lives.
    Equal but distinct values only miss the memo, which costs time, not truth.
    """
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is int or kind is float or kind is bool:
        return (kind, value)
    if kind is list and len(value) <= _TEXTS_BY_VALUE and all(type(v) is str for v in value):
        return (_TEXTS, *value)
    if kind in _BY_IDENTITY:  # never hashable: no failed hash() to pay for
        return (kind, id(value))
    try:
        hash(value)
    except TypeError:
        return (kind, id(value))
    return value


#: the first item of a list-of-texts key (a tuple no other key begins with)
_TEXTS = object()
#: lists of at most this many texts are keyed by value
_TEXTS_BY_VALUE = 64


def _rendered(budget: Budget, value: Any, unit: str | None) -> str:
    """`text(value)`: a list or row is charged per character rendered (about one step
    per 8: rendering costs per item, far more than the per-64 of a text merely built)."""
    out = _text(value, unit)
    if type(value) is not str:
        budget.charge(len(out) >> 3)
    budget.sized(out)
    return out


def _joined(budget: Budget, xs: list[Any], between: str, unit: str | None) -> str:
    """`join(xs, between)`: refused before it is built if too long; charged per item."""
    if len(xs) > 1 and _render_size(xs, MAX_TEXT) + len(between) * (len(xs) - 1) > MAX_TEXT:
        raise budget.fail(
            f"evaluation budget exhausted: a text of more than {MAX_TEXT:,} characters")
    budget.charge(len(xs))
    out = between.join(_text(x, unit) for x in xs)
    budget.sized(out)
    return out


def _cmp(op: str, a: Any, b: Any) -> Any:
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if a is None or b is None:
        return None
    try:
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    except TypeError as exc:
        raise EvalError(f"cannot compare {a!r} with {b!r}") from exc


def _contains(a: Any, b: Any, budget: Budget) -> Any:
    """`a contains b`: list membership, or case-insensitive substring. Charged by what
    it scans, so a test inside a comprehension cannot scan a long text or list per item
    uncounted (65,536 scans of a 500,000-character text took minutes)."""
    if a is None or b is None:
        return None
    if isinstance(a, list):
        budget.charge(len(a) >> 2)
        return b in a
    text, part = _text(a), _text(b)
    budget.charge((len(text) + len(part)) >> 8)
    return part.casefold() in text.casefold()


def _contains_any(s: Scope, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    text = _text(a).casefold()
    s.budget.charge(len(b) * (1 + (len(text) >> 8)))
    return any(_text(x).casefold() in text for x in b)


def compile_expr(e: Expr, lets: LetTable | None = None) -> Fn:
    """A closure evaluating `e` in a Scope; a recording one (it also pushes the value's
    witness on `Scope.rec`) when `lets` is a recording table (`LetTable.recording`)."""
    if lets is not None and lets.plain is not None:
        return _compile_recording(e, lets)
    return _compile_node(e, lets)


def _compile_node(e: Expr, lets: LetTable | None) -> Fn:
    """The closure of one node, over its operands compiled as `lets` says (plain or
    recording: the value is computed by this same code either way)."""
    match e:
        case Lit(value=value):
            return lambda s: value
        case Ref():
            return _compile_ref(e)
        case Attr(obj=obj_expr, name=name):
            fused = _compile_field_of_ref(obj_expr, name)
            if fused is not None:
                return fused
            obj = compile_expr(obj_expr, lets)

            def attr(s: Scope) -> Any:
                value = obj(s)
                if type(value) is Row or type(value) is dict:  # the hot path: a field of a row
                    return value.get(name)
                return _attr(value, name, s)
            return attr
        case Index():
            obj, idx = compile_expr(e.obj, lets), compile_expr(e.index, lets)

            def index(s: Scope) -> Any:
                items, i = obj(s), idx(s)
                if items is None or i is None:
                    return None
                return items[i] if -len(items) <= i < len(items) else None
            return index
        case Call():
            return _compile_call(e, lets)
        case Unary(operator=operator):
            operand = compile_expr(e.operand, lets)
            if operator == "not":
                return lambda s: None if (v := operand(s)) is None else not v
            return lambda s: None if (v := operand(s)) is None else -v
        case Binary():
            return _compile_binary(e, lets)
        case ListExpr():
            items = [compile_expr(a, lets) for a in e.items]
            return lambda s: [f(s) for f in items]
        case RecordExpr():
            pairs = [(k, compile_expr(a, lets)) for k, a in zip(e.keys, e.values, strict=True)]
            return lambda s: {k: f(s) for k, f in pairs}
        case Comp() | Agg():
            return _compile_collection(e, lets)
        case Quant():
            return _compile_quant(e, lets)
        case LetCall():
            if lets is None:
                raise ValueError("a `let` call needs the world's let table")
            params = [compile_expr(a, lets) for a in e.args]
            if lets.plain is not None:
                return _recording_let(e.name, lets.body(e.name), params)
            call = lets.caller(e.name)
            if not params:
                return lambda s: call([], s)
            if len(params) == 1:
                only, call1 = params[0], lets.caller1(e.name)
                return lambda s: call1(only(s), s)
            return lambda s: call([f(s) for f in params], s)
        case _:
            assert_never(e)


def _compile_ref(e: Ref) -> Fn:
    name = e.name
    match e.kind:
        case "local" | "param":
            return lambda s: s.locals.get(name)
        case "lever":
            return lambda s: s.levers.get(name)
        case "state":
            return lambda s: s.states.get(name)
        case "record":
            def record(s: Scope) -> Rows:
                rows = s.records.get(name)
                if type(rows) is StaticRows:  # shared and never mutated: no copy needed
                    return rows
                return Rows(name, rows or [])  # a snapshot: ledgers grow during the episode
            return record
        case "measure":
            return lambda s: s.measures.get(name)
        case "instance":
            return lambda s: s.instance
        case "context":
            return lambda s: s.context
        case "document" | "party" | "tool" | "enum_value" | "enum" | "unknown":
            # documents, parties, tools, enum values and enum names evaluate to their names
            return lambda s: name
        case _:
            assert_never(e.kind)


def _compile_field_of_ref(obj: Expr, name: str) -> Fn | None:
    """`x.f` of a local, `context.f` and `instance.f` as one closure (the commonest reads:
    a row's field, the caller, an instance field), the same as Attr over the Ref."""
    match obj:
        case Ref(kind="local" | "param", name=var):
            def local_field(s: Scope) -> Any:
                value = s.locals.get(var)
                if type(value) is Row or type(value) is dict:
                    return value.get(name)
                return _attr(value, name, s)
            return local_field
        case Ref(kind="context"):
            def context_field(s: Scope) -> Any:
                value = s.context
                if type(value) is dict:
                    return value.get(name)
                return _attr(value, name, s)
            return context_field
        case Ref(kind="instance"):
            def instance_field(s: Scope) -> Any:
                value = s.instance
                if type(value) is dict:
                    return value.get(name)
                return _attr(value, name, s)
            return instance_field
    return None


def _attr(obj: Any, name: str, s: Scope) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Rows):
        record = next((r for r in s.world.records if r.name == obj.record), None)
        if record is not None and name in record.groups:
            return FieldSet(obj.record, record.groups[name])
        raise EvalError(f"record {obj.record} has no group {name}")
    if isinstance(obj, dict):
        return obj.get(name)
    if isinstance(obj, str):  # enum.member
        return name
    raise EvalError(f"cannot read .{name} of {obj!r}")


def _compile_binary(e: Binary, lets: LetTable | None) -> Fn:
    op = e.operator
    left, right = compile_expr(e.left, lets), compile_expr(e.right, lets)
    if op == "and":
        def and_(s: Scope) -> Any:  # Kleene: false wins, then unknown
            a = left(s)
            if a is False:
                return False
            b = right(s)
            if b is False:
                return False
            return None if a is None or b is None else True
        return and_
    if op == "or":
        def or_(s: Scope) -> Any:  # Kleene: true wins, then unknown
            a = left(s)
            if a is True:
                return True
            b = right(s)
            if b is True:
                return True
            return None if a is None or b is None else False
        return or_
    if op in ("==", "!="):
        return _compile_equality(e, op == "==", left, right)
    if op in _ORDER:
        order = _ORDER[op]

        def compare(s: Scope) -> Any:
            a, b = left(s), right(s)
            if a is None or b is None:
                return None
            try:
                return order(a, b)
            except TypeError:
                return _cmp(op, a, b)  # raises, worded as _cmp words it
        return compare
    if op == "contains":
        return lambda s: _contains(left(s), right(s), s.budget)
    if op == "contains_any":
        return lambda s: _contains_any(s, left(s), right(s))
    if op == "in":
        return lambda s: _contains(right(s), left(s), s.budget)
    if op == "*":
        def times(s: Scope) -> Any:
            a, b = left(s), right(s)
            _check_product(s, a, b)
            return s.budget.sized(_arith("*", a, b))
        return times
    if op == "+":
        def plus(s: Scope) -> Any:
            value = _arith("+", left(s), right(s))
            if type(value) is str or type(value) is list:
                s.budget.sized(value)
            return value
        return plus
    return lambda s: _arith(op, left(s), right(s))


#: the ordering comparisons, one function each (`_cmp` computes all four: for the
#: language's values, one of them raises exactly when all do)
_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _compile_equality(e: Binary, equal: bool, left: Fn, right: Fn) -> Fn:
    """`==` / `!=`, with a literal side read as a constant (operands in their order)."""
    match e.right, e.left:
        case Lit(value=value), _:
            if equal:
                return lambda s: left(s) == value
            return lambda s: left(s) != value
        case _, Lit(value=value):
            if equal:
                return lambda s: value == right(s)
            return lambda s: value != right(s)
    if equal:
        return lambda s: left(s) == right(s)
    return lambda s: left(s) != right(s)


def _check_product(s: Scope, a: Any, b: Any) -> None:
    """Refuse a `*` whose result would be too big before it is built."""
    if type(a) is int and type(b) is int:
        if a.bit_length() + b.bit_length() > MAX_INT_BITS:
            raise s.budget.fail(
                f"evaluation budget exhausted: a product of more than {MAX_INT_BITS} bits")
        return
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, list)) and isinstance(n, int) and n > 0:
            limit = MAX_TEXT if isinstance(seq, str) else MAX_ITEMS
            if len(seq) * n > limit:
                what = "text of" if isinstance(seq, str) else "list of"
                unit = "characters" if isinstance(seq, str) else "items"
                raise s.budget.fail(
                    f"evaluation budget exhausted: a {what} {len(seq) * n:,} {unit} "
                    f"(at most {limit:,})")


def _aggregate(func: str, values: list[Any],
               budget: Budget | None = None) -> Any:
    present = [v for v in values if v is not None]
    if func == "count":
        return len(values)
    if func == "distinct":
        out: list[Any] = []
        for v in values:
            if budget is not None:
                budget.charge(1 + (len(out) >> 4))  # `in` scans what is kept so far
            if v not in out:
                out.append(v)
        return out
    if func == "sum":
        return sum(present) if present else 0
    if not present:
        return None
    if func == "max":
        return max(present)
    if func == "min":
        return min(present)
    return sum(present) / len(present)  # avg


def _compile_collection(e: Comp | Agg, lets: LetTable | None) -> Fn:
    func = e.func if isinstance(e, Agg) else ""
    comp = isinstance(e, Comp)
    record = _recording(lets)
    body = compile_expr(e.body, lets)
    if not comp and e.source is None:
        def over_list(s: Scope) -> Any:
            values = list(body(s) or [])
            s.budget.charge(len(values))
            return _aggregate(func, values, s.budget)
        if record:
            return _recorded1(over_list, lambda v, kid: _list_agg_why(func, v, *kid))
        return over_list
    source = compile_expr(e.source, lets) if e.source is not None else (lambda s: [])
    where = compile_expr(e.where, lets) if e.where is not None else None
    keys = [compile_expr(g, lets) for g in e.group_by]
    var = e.var or ""
    equality = _field_equality(e.where, var, lets)
    # `where` is that equality alone, not a conjunction starting with it
    exact = equality is not None and isinstance(e.where, Binary) and e.where.operator == "=="
    n_keys = len(keys)

    def rows(s: Scope) -> list[tuple[Any, list[Any]]]:
        """(body value, group key) for every item that passes `where`.

        The variable is rebound per item: values are computed before the next
        item is bound, so nothing sees a stale binding. Recording, it pushes
        one entry: the kept items' (value, witness) and the source's witness.
        """
        out = []
        rec = s.rec if record else None
        items = source(s) or []
        test = where
        by_row = False
        if rec is not None:
            stack, kept, i, wkey = rec.stack, [], 0, EMPTY
            ws = stack.pop()[1]
        if equality is not None and items and type(items) is StaticRows:
            candidates, matched = _candidates(items, equality, s)
            if rec is not None:  # the equality's value (a candidate's witness if not tested)
                wkey, by_row = stack.pop()[1], candidates is not items
            items = candidates
            if matched and exact:
                test = None  # every candidate passes `where`: it is the very equality
        s.budget.charge(len(items))
        # The variable is bound in the scope's own locals for the loop and unbound after
        # (like a `let` call's parameters): no copy of the scope per evaluation.
        outer = s.locals
        local = s.locals = {**outer, var: None}
        if rec is not None:
            outer_lw = rec.lw
            lw = rec.lw = {**outer_lw, var: EMPTY}
        try:
            for item in items:
                local[var] = item
                if rec is not None:
                    wi = lw[var] = element_why(ws, by_row, rec.prov, i, item)
                    i += 1
                if test is None or test(s) is True:
                    out.append((body(s), [k(s) for k in keys]))
                    if rec is not None:
                        kept.append(row_entry(stack, n_keys, wi, test is not None, wkey))
                elif rec is not None:
                    stack.pop()  # a rejected item's `where` decided nothing
        finally:
            s.locals = outer
            if rec is not None:
                rec.lw = outer_lw
        if rec is not None:
            stack.append((kept, ws))
        return out

    return _collected(rows, comp, func, bool(keys), record)


def _collected(rows: Callable[[Scope], list[tuple[Any, list[Any]]]], comp: bool, func: str,
               keys: bool, record: bool) -> Fn:
    """A comprehension's or aggregate's closure over its `rows` (body value, group key per
    kept item): grouped by the keys, listed, or aggregated; recording, with the witness
    the rows pushed."""
    if keys:
        def grouped(s: Scope) -> Any:
            groups: dict[str, list[Any]] = {}
            budget = s.budget
            found = rows(s)
            rec = s.rec if record else None
            if rec is not None:  # each group's entries, beside its values
                kept, ws = rec.stack.pop()
                entries: dict[str, list[Entry]] = {}
            for n, (value, key) in enumerate(found):
                label = repr(key)
                budget.charge(len(label) >> 6)
                groups.setdefault(label, []).append(value)
                if rec is not None:
                    entries.setdefault(label, []).append(kept[n])
            values = [groups[k] for k in sorted(groups)]
            result = values if comp else [_aggregate(func, v, s.budget) for v in values]
            if rec is not None:
                rec.stack.append((result, group_why(comp, func, [entries[k] for k in sorted(
                    entries)], result, ws.steps)))
            return result
        return grouped
    if comp:
        def listed(s: Scope) -> Any:
            return [value for value, _ in rows(s)]
        if record:
            return _recorded1(listed, lambda v, kid: Why(
                kid[1].steps, items=tuple([w for _, w in kid[0]])))
        return listed

    def aggregated(s: Scope) -> Any:
        return _aggregate(func, [value for value, _ in rows(s)], s.budget)
    if record:
        return _recorded1(aggregated, lambda v, kid: agg_why(
            func, [x for x, _ in kid[0]], [w for _, w in kid[0]], kid[1].steps, v))
    return aggregated


def _list_agg_why(func: str, result: Any, xs: Any, wl: Why) -> Why:
    """An aggregate over a list value: each element's witness."""
    values = list(xs or [])
    return agg_why(func, values, [wl.item(i) for i in range(len(values))], wl.steps, result)


def _field_equality(where: Expr | None, var: str,
                    lets: LetTable | None) -> tuple[str, Fn] | None:
    """(field, value) when `where` is `var.field == value` with `value` free of `var`,
    or starts with one: `var.field == value and …`.

    Such a filter over a static table is answered from the table's index
    instead of a scan; `where` is still applied to the candidates, so the index
    only has to be a superset of the matches. Only the leftmost conjunct is
    used: a row it rejects is one on which a scan, evaluating left to right,
    stops at that conjunct too, so even a later conjunct that would fail on
    such a row is never reached either way.
    """
    if isinstance(where, Binary) and where.operator == "and":
        return _field_equality(where.left, var, lets)
    if not isinstance(where, Binary) or where.operator != "==":
        return None
    for side, other in ((where.left, where.right), (where.right, where.left)):
        match side:
            case Attr(obj=Ref(kind="local" | "param", name=bound), name=field_name) \
                    if bound == var and not any(
                        isinstance(x, Ref) and x.name == var and x.kind in ("local", "param")
                        for x in walk_expr(other, lets.lets if lets else {})):
                return field_name, compile_expr(other, lets)
    return None


def _candidates(rows: StaticRows, equality: tuple[str, Fn], s: Scope) -> tuple[list[Row], bool]:
    """The rows that may pass the equality, and whether they all do (`matched`).

    An index group holds the rows whose field value the dict found equal to the
    value, that is, `row.field == value` for each (plain JSON values compare the
    same both ways) — unless the value is NaN, which a dict finds by identity
    although it equals nothing, itself included.
    """
    field_name, value_of = equality
    value = value_of(s)
    index = rows.by_field(field_name)
    if index is None:
        return rows, False
    try:
        return index.get(value, []), value == value  # noqa: PLR0124 -- NaN
    except TypeError:  # an unhashable value (a list or a row): scan
        return rows, False


def _compile_quant(e: Quant, lets: LetTable | None) -> Fn:
    source = compile_expr(e.source, lets)
    body = compile_expr(e.body, lets)
    var = e.var
    # any/exists: decided by the first true; all: by the first false (a counter-example)
    decides = e.kind != "all"
    record = _recording(lets)

    def quant(s: Scope) -> Any:
        unknown = False
        rec = s.rec if record else None
        items = source(s) or []
        if rec is not None:  # recording: the source's witness, the elements' as they go
            stack, i = rec.stack, 0
            ws = stack.pop()[1]
            seen: list[tuple[Any, Why, Why]] = []
            outer_lw = rec.lw
            lw = rec.lw = {**outer_lw, var: EMPTY}
        s.budget.charge(len(items))
        outer = s.locals  # the variable bound for the loop, as in a comprehension
        local = s.locals = {**outer, var: None}
        try:
            for item in items:
                local[var] = item
                if rec is not None:
                    wi = lw[var] = ws.item(i)
                    i += 1
                value = body(s)
                if rec is not None:
                    wb = stack.pop()[1]
                    if value is decides:
                        stack.append((value, quant_decided(ws, wb, wi)))
                    else:
                        seen.append((value, wb, wi))
                if value is decides:
                    return decides
                if value is None:
                    unknown = True
        finally:
            s.locals = outer
            if rec is not None:
                rec.lw = outer_lw
        result = None if unknown else not decides  # Kleene: no decider, then unknown wins
        if rec is not None:
            stack.append((result, quant_why(ws, seen)))
        return result
    return quant


# ---------------------------------------------------------------- builtins

def _compile_call(e: Call, lets: LetTable | None) -> Fn:
    name = e.func
    args = [compile_expr(a, lets) for a in e.args]
    keys = list(e.keys)
    if name == "choose":
        cond, then, other = args[0], args[1], args[2]
        return lambda s: then(s) if cond(s) is True else other(s)
    if name == "text":
        value, unit = args[0], e.unit
        return lambda s: None if (v := value(s)) is None else _rendered(s.budget, v, unit)
    if name == "join":
        items, unit = args[0], e.unit
        sep = args[1] if len(args) > 1 else (lambda s: ", ")

        def join(s: Scope) -> Any:
            xs = items(s)
            if xs is None:
                return None
            return _joined(s.budget, xs, _text(sep(s)), unit)
        return join
    impl = IMPLEMENTATIONS.get(name)
    if impl is None:
        raise ValueError(f"unknown builtin {name!r}")
    if any(keys):
        def keyword_call(s: Scope) -> Any:
            pos = [f(s) for f, k in zip(args, keys, strict=True) if not k]
            kw = {k: f(s) for f, k in zip(args, keys, strict=True) if k}
            return impl(s, *pos, **kw)
        return keyword_call
    if len(args) == 1:
        only = args[0]
        return lambda s: impl(s, only(s))
    if len(args) == 2:
        first, second = args
        return lambda s: impl(s, first(s), second(s))
    return lambda s: impl(s, *[f(s) for f in args])


# ---------------------------------------------------------------- recording (witnesses)
# The same closures as above, each wrapped to push its value's witness on the scope's
# Recorder; the rules are eairdsl.runtime.witness's. Loops and `let` calls record inline.

Rule = Callable[[Any, list[Entry], Recorder], Why]


def _recording(lets: LetTable | None) -> bool:
    """Are closures compiled with `lets` recording ones?"""
    return lets is not None and lets.plain is not None


def _compile_recording(e: Expr, lets: LetTable) -> Fn:
    """A recording closure for `e`: the plain one when nothing in `e` can carry a step
    (it pushes an empty witness), else `e`'s node closure with its witness rule."""
    assert lets.plain is not None and lets.free is not None
    if lets.free(e):
        plain = compile_expr(e, lets.plain)

        def step_free(s: Scope) -> Any:
            value = plain(s)
            rec = s.rec
            assert rec is not None
            rec.stack.append((value, EMPTY))
            return value
        return step_free
    fn = _compile_node(e, lets)
    match e:
        case Ref(kind=kind, name=name):
            return _recorded_ref(fn, kind, name)
        case Attr(obj=Ref(kind="local" | "param", name=var), name=name):
            return _recorded_local(fn, var, name)
        case Attr(name=name):
            return _recorded1(fn, lambda v, kid: field_why(kid[1], name))
        case Index():
            return _recorded2(fn, index_why)
        case Unary():
            return _recorded1(fn, lambda v, kid: kid[1])
        case Binary():
            return _recorded_binary(e, fn)
        case ListExpr():
            return _recorded(fn, lambda v, kids, rec: list_why(kids))
        case RecordExpr(keys=keys):
            return _recorded(fn, lambda v, kids, rec: record_why(keys, kids))
        case Call():
            return _recorded_call(e, fn)
        case Lit():  # step-free, so not reached: for completeness
            return _recorded0(fn, lambda v, rec: EMPTY)
        case Comp() | Agg() | Quant() | LetCall():
            return fn  # they record themselves (their loops bind witnesses as they go)
        case _:
            assert_never(e)


def _recorded(fn: Fn, rule: Rule) -> Fn:
    """`fn`, pushing `rule(value, entries its operands pushed, recorder)` (any number of
    operands: `and`, `or`, lists, records, calls)."""
    def recorded(s: Scope) -> Any:
        rec = s.rec
        assert rec is not None
        stack = rec.stack
        n = len(stack)
        value = fn(s)
        kids = stack[n:]
        del stack[n:]
        stack.append((value, rule(value, kids, rec)))
        return value
    return recorded


def _recorded0(fn: Fn, why: Callable[[Any, Recorder], Why]) -> Fn:
    """`fn`, an operand-less node, pushing `why(value, recorder)`."""
    def recorded(s: Scope) -> Any:
        value = fn(s)
        rec = s.rec
        assert rec is not None
        rec.stack.append((value, why(value, rec)))
        return value
    return recorded


def _recorded1(fn: Fn, rule: Callable[[Any, Entry], Why]) -> Fn:
    """`fn`, a node that always evaluates exactly one operand, whose entry it replaces by
    `(value, rule(value, operand's entry))`."""
    def recorded(s: Scope) -> Any:
        value = fn(s)
        rec = s.rec
        assert rec is not None
        stack = rec.stack
        stack[-1] = (value, rule(value, stack[-1]))
        return value
    return recorded


def _recorded2(fn: Fn, rule: Callable[[Any, Entry, Entry], Why]) -> Fn:
    """`fn`, a node that always evaluates exactly two operands, in order: their entries
    become `(value, rule(value, first's entry, second's))`."""
    def recorded(s: Scope) -> Any:
        value = fn(s)
        rec = s.rec
        assert rec is not None
        stack = rec.stack
        b = stack.pop()
        stack[-1] = (value, rule(value, stack[-1], b))
        return value
    return recorded


def _recorded_logic(fn: Fn, rule: Callable[[Any, Entry, Entry | None], Why]) -> Fn:
    """`and` / `or`: one operand evaluated (the first decided) or two, in order."""
    def recorded(s: Scope) -> Any:
        rec = s.rec
        assert rec is not None
        stack = rec.stack
        n = len(stack)
        value = fn(s)
        b = stack.pop() if len(stack) > n + 1 else None
        stack[-1] = (value, rule(value, stack[-1], b))
        return value
    return recorded


def _recorded_ref(fn: Fn, kind: str, name: str) -> Fn:
    """A name: a local's witness is bound beside it, a state variable's and a ledger's
    come from the trace, a measurement's from the witnesses so far (anything else is
    step-free)."""
    if kind in ("local", "param"):
        return _recorded_local(fn, name, None)
    if kind == "state":
        return _recorded0(fn, lambda v, rec: rec.prov.state(name))
    if kind == "record":
        return _recorded0(fn, lambda v, rec: rec.prov.record(name, v))
    if kind == "measure":
        return _recorded0(fn, lambda v, rec: rec.measures.get(name, EMPTY))
    return _recorded0(fn, lambda v, rec: EMPTY)


def _recorded_local(fn: Fn, var: str, name: str | None) -> Fn:
    """A local (`name` None) or `x.name` of one (the plain fused closure): the witness
    bound beside the local, or its field's — the commonest reads, kept to one call."""
    if name is None:
        def local(s: Scope) -> Any:
            value = fn(s)
            rec = s.rec
            assert rec is not None
            rec.stack.append((value, rec.lw.get(var, EMPTY)))
            return value
        return local

    def local_field(s: Scope) -> Any:
        value = fn(s)
        rec = s.rec
        assert rec is not None
        w = rec.lw.get(var, EMPTY)
        rec.stack.append((value, w if w.items is None and w.fields is None
                          else field_why(w, name)))
        return value
    return local_field


def _flat1(value: Any, kid: Entry) -> Why:
    return flat_of(kid[1])


def _flat2(value: Any, a: Entry, b: Entry) -> Why:
    return flat_of(a[1], b[1])


def _recorded_binary(e: Binary, fn: Fn) -> Fn:
    """A binary operator's recording closure (`contains` and `in` both evaluate the
    container first: `in` its right side)."""
    op = e.operator
    if op in ("and", "or"):
        return _recorded_logic(fn, and_why if op == "and" else or_why)
    if op in ("contains", "in"):
        return _recorded2(fn, contains_why)
    if op == "contains_any":
        return _recorded2(fn, contains_any_why)
    if op == "+":
        return _recorded2(fn, plus_why)
    if op in ("==", "!=") and (isinstance(e.left, Lit) or isinstance(e.right, Lit)):
        return _recorded1(fn, _flat1)  # the literal side is read as a constant
    return _recorded2(fn, _flat2)


def _recorded_call(e: Call, fn: Fn) -> Fn:
    """A call's recording closure: `choose` the condition and the branch taken, `text`
    and `join` their operands, a builtin its rule in `witness.RULES` (read now: a
    world's recording closures are compiled once), with its arguments bound by name."""
    name = e.func
    if name == "choose":
        return _recorded2(fn, choose_why)
    if name == "text":
        return _recorded1(fn, _flat1)
    if name == "join":  # its separator is not evaluated when the list is none
        return _recorded(fn, lambda v, kids, rec: flat_why(kids))
    rule = args_rule(name)
    params = [p.name for p in BUILTINS[name].params]
    keys = list(e.keys)
    count = len(e.args)
    if any(keys):
        # the plain closure evaluates positional arguments first, then keyword ones
        order = [i for i, k in enumerate(keys) if not k] + [i for i, k in enumerate(keys) if k]

        def keyword_rule(value: Any, kids: list[Entry], rec: Recorder) -> Why:
            if rule is None:
                return flat_why(kids)
            entries: list[Entry] = [(None, EMPTY)] * len(kids)
            for j, i in enumerate(order):
                entries[i] = kids[j]
            pos = [v for (v, _), k in zip(entries, keys, strict=True) if not k]
            bound = dict(zip(params, pos, strict=False)) | {
                k: v for (v, _), k in zip(entries, keys, strict=True) if k}
            return rule(value, bound, [w for _, w in entries], rec.prov)
        return _recorded(fn, keyword_rule)
    if rule is None:
        if count == 1:
            return _recorded1(fn, _flat1)
        if count == 2:
            return _recorded2(fn, _flat2)
        return _recorded(fn, lambda v, kids, rec: flat_why(kids))
    found = rule
    if count == 1:
        first = params[0]

        def call_rule1(s: Scope) -> Any:
            value = fn(s)
            rec = s.rec
            assert rec is not None
            stack = rec.stack
            arg, why = stack[-1]
            stack[-1] = (value, found(value, {first: arg}, [why], rec.prov))
            return value
        return call_rule1

    def call_rule(value: Any, kids: list[Entry], rec: Recorder) -> Why:
        bound = dict(zip(params, [v for v, _ in kids], strict=False))
        return found(value, bound, [w for _, w in kids], rec.prov)
    return _recorded(fn, call_rule)


def _recording_let(name: str, body: Callable[[list[Any], list[Why], Scope], Entry],
                   params: list[Fn]) -> Fn:
    """A recording `let` call: the arguments' entries, then the body's answer for them
    (`LetTable.body`, memoised with its witness by `witness.let_answer`)."""
    def let_call(s: Scope) -> Any:
        rec = s.rec
        assert rec is not None
        stack = rec.stack
        n = len(stack)
        for f in params:
            f(s)
        pairs = stack[n:]
        del stack[n:]
        value, why = let_answer(rec.memo, name, pairs, _memo_key, body, s)
        stack.append((value, why))
        return value
    return let_call
