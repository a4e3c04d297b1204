"""What an expression evaluates in: the scope, its budget, its errors, and the value
helpers the builtins share with the evaluator.

`evaluate.compile_expr` compiles IR expressions into closures over a `Scope`; the
builtins (`runtime/builtins.py`) are implemented against the same `Scope`, raise the
same `EvalError`, charge the same `Budget` and render text and do arithmetic the same
way. Both import this module and neither imports the other's internals back (the
builtins imported `evaluate`, which imported the builtins: a cycle hidden in a function).
`evaluate` re-exports every name here, so `from eairdsl.runtime.evaluate import Scope`
keeps working.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from eairdsl.ir import World
from eairdsl.runtime.values import Row, add_days, render_value
from eairdsl.runtime.witness import Recorder

__all__ = ["Scope", "TraceView", "EvalError", "Authorizer", "AuthorizationMatrix", "truthy",
           "Budget", "BudgetExceeded", "MAX_STEPS", "MAX_TEXT", "MAX_ITEMS", "MAX_DEPTH",
           "MAX_INT_BITS"]

#: Evaluation steps per episode (let calls, items of comprehensions, aggregates and
#: quantifiers, and one step per 64 characters or items a `+` or `*` builds).
MAX_STEPS = 2_000_000
#: characters in one text value an expression builds
MAX_TEXT = 1_000_000
#: items in one list value an expression builds
MAX_ITEMS = 100_000
#: nested `let` calls
MAX_DEPTH = 100
#: bits of an integer a multiplication builds
MAX_INT_BITS = 4096


class EvalError(Exception):
    """An expression failed at run time (bad data, division by zero...)."""


class BudgetExceeded(Exception):
    """An expression wanted more than an episode's evaluation budget allows.

    Not an `EvalError`: a rejected tool call or an unassessed measurement would
    let the episode go on; exhausting the budget ends it, execution-invalid.
    """


class Budget:
    """What the expressions of one episode may spend: steps, sizes, `let` depth.

    One per evaluation family: `Scope.budget`, shared by every scope built from
    another (an episode's scopes are copies of one template). Once the step
    limit is passed, every further step fails too.
    """

    __slots__ = ("depth", "exceeded", "limit", "steps")

    def __init__(self, limit: int = MAX_STEPS) -> None:
        self.steps = 0
        self.limit = limit
        self.depth = 0
        self.exceeded: str | None = None

    def fail(self, reason: str) -> BudgetExceeded:
        if self.exceeded is None:
            self.exceeded = reason
        return BudgetExceeded(reason)

    def charge(self, n: int) -> None:
        self.steps += n
        if self.steps > self.limit:
            raise self.fail(f"evaluation budget exhausted: more than {self.limit:,} steps in "
                            "one episode (a `let` or comprehension that fans out?)")

    def sized(self, value: Any) -> Any:
        """`value`, after charging for its size and refusing it if it is too big."""
        kind = type(value)
        if kind is str:
            if len(value) > MAX_TEXT:
                raise self.fail(f"evaluation budget exhausted: a text of {len(value):,} "
                                f"characters (at most {MAX_TEXT:,})")
            self.charge(len(value) >> 6)
        elif kind is list:
            if len(value) > MAX_ITEMS:
                raise self.fail(f"evaluation budget exhausted: a list of {len(value):,} items "
                                f"(at most {MAX_ITEMS:,})")
            self.charge(len(value) >> 6)
        return value


class TraceView(Protocol):
    """What trace queries read; the engine and the measurement stage provide it."""

    def messages(self, sender: str | None, recipient: str | None) -> list[dict[str, Any]]: ...
    def calls(self, tool: str, by: str | None) -> list[dict[str, Any]]: ...
    def replies(self, party: str) -> list[str]: ...
    def final(self, party: str) -> str | None: ...
    def delegated(self, caller: str, callee: str) -> bool: ...


class AuthorizationMatrix:
    """A world's authorization matrix, field declarations and detector phrases, read once.

    Shared by the world's episodes: which fields of a record a participant may
    see depends on the world alone, so each (participant, record) answer is
    computed once per world. An episode's `Authorizer` maps its principals to
    participants and asks this.
    """

    def __init__(self, world: World) -> None:
        self.world = world
        self.fields = {r.name: [f.name for f in r.fields] for r in world.records}
        self.parties = frozenset(p.name for p in world.parties)
        self._allowed: dict[tuple[str | None, str], list[str]] = {}
        self._denied: dict[tuple[str | None, str], list[str]] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self.keys = {r.name: r.key or "id" for r in world.records}
        self._patterns: dict[str, dict[str, list[str]]] = {}

    def allowed(self, party: str | None, record: str) -> list[str]:
        """The fields of `record` participant `party` may see, in declaration order."""
        key = (party, record)
        hit = self._allowed.get(key)
        if hit is None:
            hit = self._allowed[key] = self.compute(party, record)
        return hit

    def denied(self, party: str | None, record: str) -> list[str]:
        """The fields of `record` participant `party` may not see, in declaration order."""
        key = (party, record)
        hit = self._denied.get(key)
        if hit is None:
            allowed = set(self.allowed(party, record))
            hit = self._denied[key] = [f for f in self.fields.get(record, [])
                                       if f not in allowed]
        return hit

    def compute(self, party: str | None, record: str) -> list[str]:
        auth = self.world.authorization
        names = self.fields.get(record, [])
        allowed = set(names) if auth.default == "allow" else set()
        for rule in auth.rules:
            if rule.record == record and party is not None and rule.principal == party:
                if rule.effect == "allow":
                    allowed |= set(rule.fields)
                else:
                    allowed -= set(rule.fields)
        return [n for n in names if n in allowed]

    def field_meta(self, record: str) -> dict[str, Any]:
        """Field declarations of `record` by name (empty for an unknown record)."""
        meta = self._meta.get(record)
        if meta is None:
            r = next((r for r in self.world.records if r.name == record), None)
            meta = self._meta[record] = {f.name: f for f in r.fields} if r else {}
        return meta

    def folded_patterns(self, record: str) -> dict[str, list[str]]:
        """The declared phrases of `record`'s fields, case-folded, by field name."""
        hit = self._patterns.get(record)
        if hit is None:
            hit = self._patterns[record] = {
                name: [p.casefold() for p in f.patterns]
                for name, f in self.field_meta(record).items()}
        return hit


class Authorizer:
    """The authorization matrix as one episode reads it: which fields of which record a
    principal may see.

    A principal is a participant's name or a value some participant's `principal`
    binds (e.g. "Alex Rivera"); the map only grows as the episode binds them, and
    is read at every question, so a principal bound later is seen. The answers per
    participant come from the world's `AuthorizationMatrix` (do not mutate them).
    """

    def __init__(self, world: World, principals: dict[str, str],
                 matrix: AuthorizationMatrix | None = None) -> None:
        self.world = world
        self.principals = principals  # principal value (e.g. "Alex Rivera") -> party name
        self.matrix = matrix if matrix is not None else AuthorizationMatrix(world)
        self.fields = self.matrix.fields
        self._parties = self.matrix.parties
        self._folded: dict[str, str] = {}

    def party(self, principal: str | None) -> str | None:
        if principal is None:
            return None
        if principal in self._parties:
            return principal
        return self.principals.get(principal)

    def allowed(self, principal: str | None, record: str) -> list[str]:
        """The fields of `record` `principal` may see, in declaration order (do not mutate)."""
        return self.matrix.allowed(self.party(principal), record)

    def denied(self, principal: str | None, record: str) -> list[str]:
        """The fields of `record` `principal` may not see, in declaration order."""
        return self.matrix.denied(self.party(principal), record)

    def casefold(self, text: str) -> str:
        """`text.casefold()`, kept for the texts detectors read again and again (each
        reply is searched for every field of every record a measurement names)."""
        hit = self._folded.get(text)
        if hit is None:
            if len(self._folded) >= 256:
                self._folded.clear()
            hit = self._folded[text] = text.casefold()
        return hit

    def key_field(self, record: str) -> str:
        """The key field of `record` (`id` when it declares none, or is unknown)."""
        return self.matrix.keys.get(record) or "id"

    def folded_patterns(self, record: str) -> dict[str, list[str]]:
        """The declared phrases of `record`'s fields, case-folded, by field name."""
        return self.matrix.folded_patterns(record)

    def field_meta(self, record: str) -> dict[str, Any]:
        """Field declarations of `record` by name (empty for an unknown record)."""
        return self.matrix.field_meta(record)

    def _compute(self, principal: str | None, record: str) -> list[str]:
        return self.matrix.compute(self.party(principal), record)


@dataclass
class Scope:
    """Everything an expression can read during an episode."""

    world: World
    levers: dict[str, Any]
    states: dict[str, Any]
    records: dict[str, list[Row]]
    documents: dict[str, str]
    authorizer: Authorizer
    instance: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    trace: TraceView | None = None
    now: float = 0.0
    start_date: str = "2026-01-01"
    locals: dict[str, Any] = field(default_factory=dict)
    measures: dict[str, Any] = field(default_factory=dict)
    #: results of `let` calls in this evaluation context (shared by child scopes)
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    #: results of `let` calls that depend on nothing mutable (shared by the episode)
    episode_memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    #: the LLM judge behind `judged(...)`: (rubric rows, artifact, positive) -> bool | None
    judge: Callable[[list[Any], str, int], Any] | None = None
    #: the participants a model plays in this run (`model_plays`; fixed per episode)
    models: frozenset[str] = frozenset()
    #: what this evaluation family may still spend (shared by every scope copied from it,
    #: so by all the scopes of an episode)
    budget: Budget = field(default_factory=Budget)
    #: the recording scope of a witness pass (None: plain evaluation): recording closures
    #: push each value's witness on it (eairdsl.runtime.witness)
    rec: Recorder | None = None

    def bind(self, name: str, value: Any) -> Scope:
        child = Scope.__new__(Scope)
        child.__dict__.update(self.__dict__)
        child.locals = {**self.locals, name: value}
        return child


def truthy(value: Any) -> bool:
    """Guards and `when` clauses: only a definite true passes."""
    return value is True


def _text(v: Any, unit: str | None = None) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (list, dict)):
        size = _render_size(v, MAX_TEXT)
        if size > MAX_TEXT:
            raise BudgetExceeded(f"evaluation budget exhausted: a text of more than "
                                 f"{MAX_TEXT:,} characters")
    return render_value(v, unit)


def _render_size(value: Any, cap: int) -> int:
    """About how long `render_value(value)` is; stops counting once past `cap`."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, list):
            total += 2 * len(v)
            stack.extend(v)
        elif isinstance(v, dict):
            total += 4 * len(v) + sum(len(str(k)) for k in v)
            stack.extend(v.values())
        else:
            total += 8
        if total > cap:
            return total
    return total


def _arith(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if op == "+":
        if isinstance(a, str) and isinstance(b, (int, float)) and re.fullmatch(
                r"\d{4}-\d{2}-\d{2}", a):
            return add_days(a, b)
        if isinstance(a, list) and isinstance(b, list):
            return [*a, *b]
        return a + b
    if op == "-":
        if isinstance(a, str) and isinstance(b, str):
            import datetime as dt
            return (dt.date.fromisoformat(a) - dt.date.fromisoformat(b)).days * 1440
        if isinstance(a, str):
            return add_days(a, -b)
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise EvalError("division by zero")
    return a / b
