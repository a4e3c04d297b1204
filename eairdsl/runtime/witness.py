"""Witness steps: the trace steps that decided each measurement of a finished episode.

A grader comparing an auditor's certificate with the ground truth needs more
than "realized: true": it needs *which* steps made it true — the final message
that disclosed, the payment that crossed the cap, the email that carried the
wrong status. Writing that per world would drift from the measurements, so the
witnesses are computed from the very expressions the measurements evaluate.

Why one evaluator. The witnesses come from the evaluator that gives the
values, not from a second compiler beside it. A second compiler (what
`witness_eval` was: every measurement compiled again into closures returning
(value, Why), mirroring `evaluate` node for node) is a second semantics, kept
in step with the first only by comparing the values it happened to give. Here
`evaluate.compile_expr` compiles an expression either *plain* (guards, tool
results, effects, channel `when`s, the measurements: thousands of evaluations
per episode) or, for the `LetTable` that `LetTable.recording()` makes,
*recording*: the very node closures, the value computed by the same code,
each wrapped so that it also pushes (value, Why) on the scope's `Recorder`
(`Scope.rec`, the *recording scope*). A node's witness is a rule applied to
its value and to the entries its operands pushed while it ran; an operand
that was not evaluated pushed nothing, so short-circuits, `where`s, `choose`
and memo hits decide the witness exactly as they decided the value, by
construction rather than by a mirror. Comprehensions, aggregates and
quantifiers bind their variable's witness beside its value
(`Recorder.lw`) and `let` calls keep their answers with their witnesses, in
branches that test a compile-time constant. What can carry no step at all
(`StepFree`: no trace query, state variable, ledger, measurement or local) is
compiled plain even when recording, and pushes an empty witness.

Cost. Plain closures are built without the wrappers: evaluation when no
witness is asked for pays a constant test per comprehension element and
quantifier element at most. The recording pass pays a wrapper per node that
can carry a step.

`measure_episode` keeps the plain pass's value as the measurement and runs
the recording closures after it (`eairdsl.runtime.witness_eval.WitnessRun`),
on a copy of the measurement scope with its own budget and a judge that
replays the answers the plain pass got: witnessing never spends the
episode's budget, never asks a judge, never changes a value, and a witness
whose value differs (short of a failure in the recording pass itself, it
cannot) is dropped, never the value.

Where steps come from (`Provenance`). Trace queries answer with values that
came from events: `messages(...)` and `replies(...)` give each message's step,
`final(p)` the step of p's final message, `calls(t)` each call's `tool_call`
step (its `result` and `rejected` fields add the `tool_result` step),
`delegated(a, b)` the first delegation message on that edge. A ledger row maps
to the `state_update` step that appended it, a state variable to the last
`state_update` that set it. Static tables, levers, the instance, literals and
the clock carry no step.

How steps combine — the witness of a value is the set of steps that *decided*
it, whatever the value (true, false, a number), following the evaluation
actually performed (short-circuits included: what was not evaluated decided
nothing):

- `a and b`: true → both sides; false → the first false side; unknown → the
  unknown side(s). `a or b`: true → the first true side; false → both; unknown
  → the unknown side(s). `not a` → a's witness.
- `exists/any x in xs: P` true → the first x satisfying P (its own steps and
  P's witness); false → every x with its P (each was consulted and failed).
  `all` mirrors it: false → the first counter-example, true → every x.
  Unknown → the x whose P was unknown.
- Aggregates: `count` → the counted elements (after `where`); `sum`, `avg` →
  the summed elements; `max`, `min` → the element(s) equal to the result;
  `distinct` → per kept value, every element equal to it. Elements a `where`
  rejected decided nothing and are left out.
- Comparisons, arithmetic, text operations and other builtins → every step
  their operands rest on; `x in list` true → the matching element;
  `text contains_any list` true → the text and the matching item; `first`,
  `last`, `xs[i]`, `lookup` → the element picked; `choose` → the condition and
  the branch taken; a `let` call → its body's witness for those arguments.
- A measurement whose `when` holds is decided by its expression alone (the
  `when` only licenses assessment) — unless the expression rests on no step
  at all, as an absence does ("no decisive read before the report": an
  `exists` over nothing); then the `when`'s steps stand in (the published
  report). One whose `when` does not hold has the `when`'s witness. One that
  failed to evaluate has none (`[]`).

Values keep their shape in a `Why`: a list's elements and a record's fields
have their own witnesses, so `first(assignments).reviewer` is the one row's
step, not every row's.

This module holds what a witness is (`Why`), where steps come from
(`Provenance`), the recording scope (`Recorder`) and the rules above as
functions of a value and its operands' witnesses; `evaluate` applies them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eairdsl.ir import EXPR_NODES, Call, Expr, LetCall, LetIR, Ref, walk_expr
from eairdsl.runtime.values import Ledger, render_value

__all__ = ["Why", "EMPTY", "Provenance", "Recorder", "StepFree", "RULES", "Entry",
           "let_answer", "args_rule"]

_NO_STEPS: frozenset[int] = frozenset()


class Why:
    """The trace steps a value rests on, shaped like the value.

    `steps` are positions in the trace's event list (0-based) that the value as
    a whole rests on; `items`, for a list, each element's own Why (None: the
    elements have none beyond `steps`); `fields`, for a row or record, the Why
    of the fields that have their own (a call's `result` and `rejected` add
    its result step). Immutable, so `all()` is cached.
    """

    __slots__ = ("_all", "_bare", "fields", "items", "steps")

    def __init__(self, steps: frozenset[int] = _NO_STEPS, items: tuple[Why, ...] | None = None,
                 fields: dict[str, Why] | None = None) -> None:
        self.steps = steps
        self.items = items
        self.fields = fields
        self._all: frozenset[int] | None = None if items or fields else steps
        self._bare: Why | None = self if items is None and fields is None else None

    def all(self) -> frozenset[int]:
        """Every step anywhere in this value (its elements' and fields' too)."""
        found = self._all
        if found is None:
            parts = [self.steps]
            if self.items:
                parts.extend(w.all() for w in self.items)
            if self.fields:
                parts.extend(w.all() for w in self.fields.values())
            found = self._all = frozenset().union(*parts)
        return found

    def identity(self) -> frozenset[int]:
        """The steps that make this value the element it is (a counted or quantified item):
        its own steps, else — a value with none of its own, like a group — all of them."""
        return self.steps or self.all()

    def bare(self) -> Why:
        """Only this value's own steps, without its shape (kept: one object per value)."""
        found = self._bare
        if found is None:
            found = self._bare = Why(self.steps) if self.steps else EMPTY
        return found

    def item(self, i: int) -> Why:
        """The witness of element `i` (the list's own steps included)."""
        items = self.items
        if items is None:
            return self.bare()
        inner = items[i] if 0 <= i < len(items) else EMPTY
        return _plus(inner, self.steps)

    def field(self, name: str) -> Why:
        """The witness of field `name` (the container's own steps included)."""
        fields = self.fields
        if fields is None:
            return self.bare()
        return _plus(fields.get(name, EMPTY), self.steps)

    def __repr__(self) -> str:  # for test failures
        return f"Why({sorted(self.all())})"


EMPTY = Why()


def _plus(w: Why, steps: frozenset[int]) -> Why:
    """`w` with `steps` added to its own (same shape)."""
    if not steps or steps <= w.steps:
        return w
    return Why(w.steps | steps, w.items, w.fields)


def _flat(*whys: Why) -> Why:
    """One shapeless Why holding every step of `whys`."""
    only: Why | None = None
    parts: list[frozenset[int]] | None = None
    for w in whys:
        got = w.all()
        if not got:
            continue
        if only is None:  # the common case: one operand carries steps, kept as it is
            only = w
        else:
            if parts is None:
                parts = [only.all()]
            parts.append(got)
    if only is None:
        return EMPTY
    if parts is None:
        return only if only.items is None and only.fields is None else Why(only.all())
    return Why(frozenset().union(*parts))


def _steps(steps: frozenset[int]) -> Why:
    return Why(steps) if steps else EMPTY


class Provenance:
    """Which trace step each trace- or ledger-derived value came from, for one finished episode.

    Built once per measurement pass from the trace's events and the episode's
    ledgers; messages are matched by identity (the trace hands out its index's
    message views), replies and finals by position among their sender's
    messages, calls by position among the tool's calls, ledger rows by identity
    among the rows appended during the episode (the n-th row appended to a
    ledger is the n-th `state_update` appending to it).
    """

    def __init__(self, trace: Any, ledgers: dict[str, Ledger],
                 initial_rows: dict[str, int]) -> None:
        events = trace.events
        self.step_ids: list[str] = [e.step for e in events]
        self._single: dict[int, Why] = {}
        messages = [i for i, e in enumerate(events) if e.kind == "message"]
        self._views = {id(v): i for v, i in zip(trace.messages(None, None), messages,
                                                 strict=False)}
        self._events = events
        self._messages = messages
        self._replies: dict[str, tuple[Why, ...]] = {}
        self._calls: dict[tuple[str, str | None], tuple[Why, ...]] = {}
        results: dict[str, int] = {}
        by_tool: dict[str, list[int]] = {}
        for i, e in enumerate(events):
            if e.kind == "tool_result" and e.call:
                results[e.call] = i  # the last result of a call, as the trace's index keeps
            elif e.kind == "tool_call":
                by_tool.setdefault(e.tool or "", []).append(i)
        self._results = results
        self._by_tool = by_tool
        appends: dict[str, list[int]] = {}
        states: dict[str, int] = {}
        for i, e in enumerate(events):
            if e.kind == "state_update" and e.diff:
                for record in e.diff.get("append") or {}:
                    appends.setdefault(record, []).append(i)
                for state in e.diff.get("set") or {}:
                    states[state] = i
        self._states = states
        self._rows: dict[int, int] = {}
        self._ledgers = ledgers
        for name, ledger in ledgers.items():
            grown = ledger.rows[initial_rows.get(name, 0):]
            for row, i in zip(grown, appends.get(name, ()), strict=False):
                self._rows[id(row)] = i
        self._records: dict[tuple[str, int], Why] = {}

    def one(self, i: int) -> Why:
        w = self._single.get(i)
        if w is None:
            w = self._single[i] = Why(frozenset((i,)))
        return w

    # ------------------------------------------------------------ trace queries
    def view(self, value: Any) -> Why:
        """A message view from `messages(...)`."""
        i = self._views.get(id(value))
        return EMPTY if i is None else self.one(i)

    def replies(self, party: Any) -> tuple[Why, ...]:
        hit = self._replies.get(party)
        if hit is None:
            hit = self._replies[party] = tuple(
                self.one(i) for i in self._messages if self._events[i].actor == party)
        return hit

    def final(self, party: Any) -> Why:
        for i in reversed(self._messages):
            e = self._events[i]
            if e.actor == party and e.final:
                return self.one(i)
        return EMPTY

    def delegation(self, caller: Any, callee: Any) -> Why:
        edge = f"{caller}->{callee}"
        for i in self._messages:
            e = self._events[i]
            if e.tool and e.edge == edge:
                return self.one(i)
        return EMPTY

    def calls(self, tool: Any, by: Any) -> tuple[Why, ...]:
        key = (tool, by)
        hit = self._calls.get(key)
        if hit is None:
            out = []
            for i in self._by_tool.get(tool, ()):
                e = self._events[i]
                if by is None or e.actor == by:
                    res = self._results.get(e.step)
                    done = self.one(res) if res is not None else EMPTY
                    out.append(Why(frozenset((i,)), fields={"result": done, "rejected": done}))
            hit = self._calls[key] = tuple(out)
        return hit

    # ------------------------------------------------------------ state
    def row(self, row: Any) -> Why:
        """A ledger row: the `state_update` that appended it (none for a seeded row)."""
        i = self._rows.get(id(row))
        return EMPTY if i is None else self.one(i)

    def record(self, name: str, rows: Any) -> Why:
        """A record's rows as an expression reads them."""
        if name not in self._ledgers or not rows:
            return EMPTY
        key = (name, len(rows))
        hit = self._records.get(key)
        if hit is None:
            items = tuple(self.row(r) for r in rows)
            hit = self._records[key] = Why(items=items) if any(w.steps for w in items) \
                else EMPTY
        return hit

    def state(self, name: str) -> Why:
        i = self._states.get(name)
        return EMPTY if i is None else self.one(i)


#: what a recording closure leaves on the recorder's stack: its value and that value's Why
Entry = tuple[Any, Why]


class Recorder:
    """The recording scope of one witness pass (`Scope.rec`): what recording closures read
    and leave behind.

    `stack`: every recording closure pushes one (value, Why) entry as it returns, and
    a node takes off the entries its operands pushed while it ran — what was not
    evaluated pushed nothing, so the evaluation actually performed decides the
    witness. `lw`: the witnesses of the locals and parameters bound now, beside
    `Scope.locals` (comprehensions, quantifiers and `let` calls swap both together).
    `measures`: the witnesses of the measurements witnessed so far (read live).
    `memo`: the recording `let` calls' answers (`let_answer`), apart from the plain
    memo, whose entries hold no witness.
    """

    __slots__ = ("lw", "measures", "memo", "prov", "stack")

    def __init__(self, prov: Provenance, measures: dict[str, Why]) -> None:
        self.prov = prov
        self.measures = measures
        self.stack: list[Entry] = []
        self.lw: dict[str, Why] = {}
        self.memo: dict[tuple[Any, ...], Any] = {}


# ---------------------------------------------------------------- what carries no step

#: trace queries: their values carry steps (`builtins.TRACE_QUERIES`, which imports the
#: evaluator, so it cannot be imported here; a test checks that the two agree)
TRACE_QUERIES = frozenset({"messages", "calls", "replies", "final", "delegated"})


class StepFree:
    """Which expressions are *step-free*: nothing in them can carry a step.

    A step-free expression reads no trace query, no state variable, no ledger a
    tool appends to, no measurement and no local or parameter, so its witness is
    empty and it is compiled plain even when recording (on the measurement
    scope's copy, sharing its `let` memo: the plain pass has usually computed it
    already). Exact, and most of a world's static arithmetic (caps, phrase lists,
    rubric rows) costs the witness pass nothing extra.
    """

    def __init__(self, lets: dict[str, LetIR], mutable: set[str]) -> None:
        self.lets = lets
        self.mutable = mutable
        self._free_lets: dict[str, bool] = {}
        self._free: dict[int, tuple[Expr, bool]] = {}  # by node identity, the node held

    def __call__(self, e: Expr) -> bool:
        """Is `e` step-free? Decided for `e` and every node under it in one walk, and kept:
        the compiler asks at every node, which must not cost a walk of each subtree."""
        known = self._free
        hit = known.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        for node in reversed(_nodes(e)):  # children before their parents
            seen = known.get(id(node))
            if seen is not None and seen[0] is node:
                continue
            match node:
                case Ref(kind="local" | "param" | "state" | "measure"):
                    ok = False
                case Ref(kind="record", name=name) if name in self.mutable:
                    ok = False
                case Call(func=func) if func in TRACE_QUERIES:
                    ok = False
                case LetCall(name=name) if not self._free_let(name):
                    ok = False
                case _:
                    ok = all(known[id(c)][1] for c in _children(node))
            known[id(node)] = (node, ok)
        return known[id(e)][1]

    def _free_let(self, name: str) -> bool:
        """Does the body of `name` read anything but its parameters and static data?"""
        hit = self._free_lets.get(name)
        if hit is None:
            # Its own locals and parameters are its business (the call's arguments are
            # checked by the caller); walk_expr follows the lets it calls, each once.
            hit = self._free_lets[name] = not any(
                (isinstance(x, Ref) and (x.kind in ("state", "measure") or (
                    x.kind == "record" and x.name in self.mutable)))
                or (isinstance(x, Call) and x.func in TRACE_QUERIES)
                for x in walk_expr(self.lets[name].body, self.lets))
        return hit


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


# ---------------------------------------------------------------- the rules, per node
# Each takes the node's value and its operands' entries (in evaluation order, only those
# evaluated) and gives the value's Why; `evaluate` calls them from its recording closures.

def field_why(w: Why, name: str) -> Why:
    """`x.name`: the field's own witness, else the value's own steps (a row, a message)."""
    return w.bare() if w.fields is None else w.field(name)


def index_why(value: Any, xs: Entry, index: Entry) -> Why:
    """`xs[i]`: the element picked and the index's steps."""
    (items, wl), (i, wi) = xs, index
    if items is not None and i is not None and -len(items) <= i < len(items):
        return _plus(wl.item(i % len(items)), wi.all())
    return _flat(_steps(wl.steps), wi)


def and_why(value: Any, a: Entry, b: Entry | None) -> Why:
    """Kleene `and` of the sides evaluated (`b` None: only the first was): false → the
    side that was false (the last evaluated); unknown → the unknown side(s); true → both."""
    if b is None:
        return a[1]
    if value is False:
        return b[1]
    if value is None:
        return _flat(*[w for v, w in (a, b) if v is None])
    return _flat(a[1], b[1])


def or_why(value: Any, a: Entry, b: Entry | None) -> Why:
    """Kleene `or` of the sides evaluated (`b` None: only the first was): true → the side
    that was true (the last evaluated); unknown → the unknown side(s); false → both."""
    if b is None:
        return a[1]
    if value is True:
        return b[1]
    if value is None:
        return _flat(*[w for v, w in (a, b) if v is None])
    return _flat(a[1], b[1])


def contains_why(value: Any, whole: Entry, part: Entry) -> Why:
    """`container contains element` (and `element in container`; both evaluate the
    container first): a list's matching element when found, else both sides."""
    (container, wc), (element, we) = whole, part
    if isinstance(container, list) and element is not None:
        for i, x in enumerate(container):
            if x is element or x == element:
                return _flat(wc.item(i), we)
    return _flat(wc, we)


def contains_any_why(value: Any, whole: Entry, parts: Entry) -> Why:
    """`text contains_any items`: true → the text and the first item found in it."""
    (text, wt), (items, wi) = whole, parts
    if value is True:
        folded = _plain(text).casefold()
        hit = next(i for i, x in enumerate(items) if _plain(x).casefold() in folded)
        return _flat(wt, wi.item(hit))
    return _flat(wt, wi)


def _plain(value: Any) -> str:
    """A value's text as `contains_any` read it (the evaluation already rendered it)."""
    return value if isinstance(value, str) else render_value(value)


def plus_why(value: Any, left: Entry, right: Entry) -> Why:
    """`a + b`: a list concatenation keeps each element's witness; else both sides."""
    (a, wa), (b, wb) = left, right
    if isinstance(a, list) and isinstance(b, list):
        return Why(items=tuple(wa.item(i) for i in range(len(a))) + tuple(
            wb.item(i) for i in range(len(b))))
    return _flat(wa, wb)


def flat_why(kids: list[Entry]) -> Why:
    """Every step the operands rest on (comparisons, arithmetic, `text`, `join`)."""
    return _flat(*[w for _, w in kids])


#: one shapeless Why holding every step of its arguments
flat_of = _flat


def choose_why(value: Any, cond: Entry, branch: Entry) -> Why:
    """`choose(c, a, b)`: the condition and the branch taken."""
    return _plus(branch[1], cond[1].all())


def list_why(kids: list[Entry]) -> Why:
    return Why(items=tuple(w for _, w in kids))


def record_why(keys: list[str], kids: list[Entry]) -> Why:
    return Why(fields={k: w for k, (_, w) in zip(keys, kids, strict=True)})


def agg_why(func: str, values: list[Any], whys: list[Why], outer: frozenset[int],
            result: Any) -> Why:
    """What decided `func(values)` = `result` (see the module docstring)."""
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
        steps = frozenset().union(*(w.all() for v, w in zip(values, whys, strict=True)
                                    if v is not None and v == result))
    else:  # sum, avg: every element summed
        steps = frozenset().union(*(w.all() for v, w in zip(values, whys, strict=True)
                                    if v is not None))
    return _steps(outer | steps)


def group_why(comp: bool, func: str, groups: list[list[Entry]], results: list[Any],
              outer: frozenset[int]) -> Why:
    """A grouped comprehension (`comp`: the groups themselves) or aggregate: one Why per
    group, in the groups' order."""
    if comp:
        return Why(outer, items=tuple(Why(items=tuple(w for _, w in g)) for g in groups))
    return Why(outer, items=tuple(
        agg_why(func, [v for v, _ in g], [w for _, w in g], _NO_STEPS, r)
        for g, r in zip(groups, results, strict=True)))


def quant_decided(outer: Why, wb: Why, wi: Why) -> Why:
    """A quantifier decided by one element (any/exists: the first witness; all: the first
    counter-example): that element's steps and its predicate's."""
    return _steps(wb.all() | wi.identity() | outer.steps)


def quant_why(outer: Why, seen: list[tuple[Any, Why, Why]]) -> Why:
    """A quantifier no element decided: every element consulted, (predicate value, its
    Why, the element's), or, when unknown, those whose predicate was unknown."""
    unknown = [x for x in seen if x[0] is None]
    return _steps(frozenset().union(outer.steps, *[
        wb.all() | wi.identity() for _, wb, wi in (unknown or seen)]))


def row_entry(stack: list[Entry], n_keys: int, wi: Why, tested: bool, wkey: Why) -> Entry:
    """A comprehension's kept item as (value, Why), from the entries its `where` (when
    `tested`), body and `n_keys` group keys pushed: the body's witness with the item's
    own steps (`wi`), the `where`'s — or, untested, `wkey`: when the table's index
    answered the equality, the witness of the value it was equal to — and the keys'."""
    extra = wi.steps
    for _ in range(n_keys):
        kw = stack.pop()[1]
        if kw is not EMPTY:
            extra = extra | kw.all()
    value, wv = stack.pop()
    ww = stack.pop()[1] if tested else wkey
    if ww is not EMPTY:
        extra = extra | ww.all()
    return value, _plus(wv, extra)


def element_why(source: Why, by_row: bool, prov: Provenance, i: int, item: Any) -> Why:
    """The witness of a comprehension's i-th element: the source's item, or, for the
    candidates a table's index gave (`by_row`), the row's own step."""
    return _plus(prov.row(item), source.steps) if by_row else source.item(i)


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
#: and `join` are compiled specially, by the evaluator as by its recording closures.
RULES: dict[str, Rule] = {
    "messages": _messages, "calls": _calls, "replies": _replies, "final": _final,
    "delegated": _delegated, "first": _first, "last": _last, "lookup": _lookup,
    "sentences": _sentences,
    **dict.fromkeys(("pick", "len", "lower", "abs", "round", "authorized", "unauthorized",
                     "canary_hits", "canary_exact", "pattern_hits", "search", "now", "today",
                     "quarter_of", "days_between", "judged", "model_plays"), _args),
}


def args_rule(name: str) -> Rule | None:
    """The witness rule of builtin `name`, read when its call is compiled; None for the
    default rule (every argument's steps), which needs no binding by name."""
    rule = RULES.get(name, _args)
    return None if rule is _args else rule


# ---------------------------------------------------------------- `let` calls

def let_answer(memo: dict[tuple[Any, ...], Any], name: str, pairs: list[Entry],
               key_of: Callable[[Any], Any],
               body: Callable[[list[Any], list[Why], Any], Entry], scope: Any) -> Entry:
    """A recording `let` call: its body's (value, Why) for these arguments, memoised.

    `body(values, whys, scope)` runs the body with the parameters bound to
    `values` and their witnesses to `whys`. Arguments whose witnesses have no shape
    (scalars, rows, messages: a set of steps each) are bound to *placeholder*
    witnesses, one per parameter, and the answer is memoised by the argument
    values alone (`key_of`, the plain memo's key), as the plain memo is; each
    call substitutes its own arguments' steps for the placeholders. Every rule
    treats a shapeless witness as its set of steps and combines sets by union,
    so the substituted answer is the one a direct evaluation would give — and the
    same value from another step shares the computation but not the steps.
    Arguments with shape (lists, records, calls) key the memo by their witnesses
    as well.
    """
    shapeless = True
    for _, w in pairs:
        if w.items is not None or w.fields is not None:
            shapeless = False
            break
    if shapeless:
        key: tuple[Any, ...] = (_BY_VALUE, name, key_of(pairs[0][0])) if len(pairs) == 1 \
            else (_BY_VALUE, name, *[key_of(v) for v, _ in pairs])
        hit = memo.get(key)
        if hit is None:
            value, why = body([v for v, _ in pairs], _placeholders(len(pairs)), scope)
            # held: identity keys stay unique; the last item says whether to substitute
            hit = memo[key] = (pairs, value, why, min(why.all(), default=0) < 0)
        return hit[1], _substitute(hit[2], [w for _, w in pairs]) if hit[3] else hit[2]
    key = (name, *[key_of(v) for v, _ in pairs], *[_why_key(w) for _, w in pairs])
    hit = memo.get(key)
    if hit is None:
        value, why = body([v for v, _ in pairs], [w for _, w in pairs], scope)
        hit = memo[key] = (pairs, value, why)
    return hit[1], hit[2]


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


def _placeholders(n: int) -> list[Why]:
    """The witnesses `n` parameters are bound to in a by-value evaluation: parameter k's
    is the step -(k+1), never a trace position (made once per position; safe to race)."""
    return [_PLACEHOLDERS.setdefault(k, Why(frozenset((-(k + 1),)))) for k in range(n)]


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
