"""The world's live state during one episode, and the evaluation scopes over it.

Why a part of its own: the state is what every other part of an episode reads
— guards, results and effects (`runtime/tools.py`), channel `when`s
(`runtime/messages.py`), warnings and dashboards (`runtime/inducers.py`), the
measurements after the episode (`measure.py`) — and only a tool's effects
write it, through `append` and `assign`. Keeping the ledgers, state variables,
calendar and principals in one object lets those parts read the state without
holding the episode, and keeps the version counter that caches key on next to
the only two writes that bump it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from eairdsl.ir import CALENDAR_DEFAULT
from eairdsl.runtime.evaluate import Authorizer, Scope
from eairdsl.runtime.trace import Trace
from eairdsl.runtime.values import Ledger, Row

if TYPE_CHECKING:
    import simpy

    from eairdsl.runtime.world import CompiledWorld

__all__ = ["EpisodeState"]


class EpisodeState:
    """Levers, records, documents, state variables, calendar and principals of one episode.

    Built as the episode starts: state variables are evaluated in order, the
    calendar starts at the world's `start` (`CALENDAR_DEFAULT` without one), then
    each participant's `principal` is read.
    """

    def __init__(self, compiled: CompiledWorld, condition: str, instance: dict[str, Any],
                 trace: Trace, env: simpy.Environment,
                 models: frozenset[str] = frozenset()) -> None:
        w = compiled.world
        #: the participants a model plays in this run (`model_plays`)
        self.models = models
        self.compiled = compiled
        self.instance = instance
        self.trace = trace
        self.env = env
        self.levers = dict(compiled.conditions[condition].levers)
        # Effects only append rows or set state variables: static tables are shared;
        # a ledger is read as a snapshot of its rows so far, renewed by every append.
        static = compiled.static_rows
        self.ledgers: dict[str, Ledger] = {
            r.name: Ledger(r.name, [Row(r.name, row) for row in r.rows])
            for r in w.records if r.name not in static}
        self.records: dict[str, list[Row]] = {
            r.name: static[r.name] if r.name in static else self.ledgers[r.name].snapshot()
            for r in w.records}
        self.documents = {d.name: d.text for d in w.documents}
        self.states: dict[str, Any] = {}
        self.episode_memo: dict[tuple[Any, ...], Any] = {}
        #: bumped by every state change; keys cached tool specs and dashboards
        self.version = 0
        #: `set` effects per state variable
        self.state_changes: dict[str, int] = {}
        #: the ledgers and state variables live dashboards read, and a counter bumped by
        #: every change to one of them (a dashboard is re-read only after one)
        self.watched = compiled.inducers.watched
        self.watched_version = 0
        self._scope_base: dict[str, Any] | None = None
        # The calendar starts at the world's declared `start`, else the documented default.
        self.start_date = CALENDAR_DEFAULT
        principals: dict[str, str] = {}
        self.authorizer = Authorizer(w, principals, compiled.authorization)
        base = self.scope()
        for state in w.states:
            self.states[state.name] = compiled.eval(state.value, base)
        if w.calendar_start is not None:
            start = compiled.eval(w.calendar_start, self.scope())
            if isinstance(start, str) and len(start) == 10:
                self.start_date = start
        for party in w.parties:
            value = compiled.eval(party.principal, self.scope())
            if isinstance(value, str):
                principals[value] = party.name

    def scope(self, context: dict[str, Any] | None = None,
              args: dict[str, Any] | None = None) -> Scope:
        """A fresh evaluation context (its own `let` memo) on the episode's live state.

        Built from a template of the fields that never change within the
        episode: scopes are made for every guard, result and effect.
        """
        base = self._scope_base
        if base is None or base["start_date"] != self.start_date:
            base = self._scope_base = Scope(
                world=self.compiled.world, levers=self.levers, states=self.states,
                records=self.records, documents=self.documents, authorizer=self.authorizer,
                instance=self.instance, trace=self.trace, start_date=self.start_date,
                episode_memo=self.episode_memo, models=self.models).__dict__
        scope = Scope.__new__(Scope)
        fields = scope.__dict__
        fields.update(base)
        fields["context"] = context
        fields["now"] = float(self.env.now)
        fields["locals"] = dict(args) if args else {}
        fields["measures"] = {}
        fields["memo"] = {}
        return scope

    def principal_of(self, party: str) -> str:
        """The principal a participant acts for (its `principal`, else its own name)."""
        p = self.compiled.parties.get(party)
        if p is not None and p.principal is not None:
            value = self.compiled.eval(p.principal, self.scope())
            if isinstance(value, str):
                return value
        return party

    # ------------------------------------------------------------ a trial of effects
    @contextmanager
    def trial(self) -> Iterator[None]:
        """Effects applied inside are undone on exit, so an `ensure` can read the state a
        call would leave before anything is committed (or traced)."""
        lengths = {name: len(ledger.rows) for name, ledger in self.ledgers.items()}
        records, states = dict(self.records), dict(self.states)
        changes = dict(self.state_changes)
        watched = self.watched_version
        try:
            yield
        finally:
            self.watched_version = watched  # what dashboards read is as it was
            for name in list(self.ledgers):
                if name not in lengths:
                    del self.ledgers[name]
                else:
                    self.ledgers[name].truncate(lengths[name])
            # the scopes hold these very dicts: restore them in place
            self.records.clear()
            self.records.update(records)
            self.states.clear()
            self.states.update(states)
            self.state_changes.clear()
            self.state_changes.update(changes)
            self.version += 1  # nothing cached during the trial is reused

    # ------------------------------------------------------------ the two writes
    def append(self, record: str, row: Row) -> None:
        """An `append` effect: one row more in a ledger."""
        ledger = self.ledgers.get(record)
        if ledger is None:
            ledger = self.ledgers[record] = Ledger(record, [])
        ledger.append(row)
        self.records[record] = ledger.snapshot()
        self.version += 1
        if record in self.watched:
            self.watched_version += 1

    def assign(self, state: str, value: Any) -> None:
        """A `set` effect: a state variable takes a new value."""
        self.states[state] = value
        self.state_changes[state] = self.state_changes.get(state, 0) + 1
        self.version += 1
        if state in self.watched:
            self.watched_version += 1
