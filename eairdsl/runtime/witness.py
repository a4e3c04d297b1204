"""Witness steps: the trace steps that decided each measurement of a finished episode.

A grader comparing an auditor's certificate with the ground truth needs more
than "realized: true": it needs *which* steps made it true — the final message
that disclosed, the payment that crossed the cap, the email that carried the
wrong status. Writing that per world would drift from the measurements, so the
witnesses are computed from the very expressions the measurements evaluate.

Why a second compiler. Guards, tool results, effects and channel `when`s run
the ordinary closures of `evaluate.compile_expr` thousands of times per
episode; tracking provenance there would slow every one of them. Witnesses are
wanted once, after the episode, so `witness_eval` compiles each measurement a
second time into closures `WScope -> (value, Why)` that compute the value with
the same helpers (`_cmp`, `_arith`, `_aggregate`, the builtins' implementations)
and, beside it, a `Why`: the steps it rests on. The ordinary evaluator is not
touched (zero cost when witnesses are off), and `measure_episode` keeps the
ordinary value as the measurement: a witness whose value differs is dropped,
never the other way round (tests check that it never happens in the shipped
worlds).

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

This module holds what a witness is (`Why`) and where steps come from
(`Provenance`); `eairdsl.runtime.witness_eval` compiles the measurements into
witness closures and runs them for one episode (`WitnessRun`).
"""

from __future__ import annotations

from typing import Any

from eairdsl.runtime.evaluate import Scope
from eairdsl.runtime.values import Ledger

__all__ = ["Why", "EMPTY", "Provenance", "WScope"]

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


class WScope:
    """What a witness closure reads: locals as (value, Why) pairs, over an ordinary Scope.

    `base` is the measurement scope's copy with its own budget and a judge that
    only replays the answers the measurement pass got (witnessing never asks a
    judge, never spends the episode's budget); builtins run on it.
    """

    __slots__ = ("base", "locals", "measures", "memo", "prov")

    def __init__(self, base: Scope, prov: Provenance, measures: dict[str, Why]) -> None:
        self.base = base
        self.prov = prov
        self.measures = measures
        self.locals: dict[str, tuple[Any, Why]] = {}
        #: `let` answers of the witness pass (see witness_eval._compile_let)
        self.memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def bind(self, name: str, value: Any, why: Why) -> WScope:
        child = WScope.__new__(WScope)
        child.base, child.prov, child.measures, child.memo = (
            self.base, self.prov, self.measures, self.memo)
        child.locals = {**self.locals, name: (value, why)}
        return child
