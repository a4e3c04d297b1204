"""How a world's inducers act during one episode.

Standing inducers (every kind but warnings) shift the sim traits once, as the
episode starts; warnings fire at times, when a condition turns true, or after a
tool call, and reach their recipients' memory; live dashboards are re-read into
every observation. The episode owns one `Inducers` and calls it at those
moments; this module decides what happens then.

Inducers see the episode only through `InducerHost` — the clock, the sim
traits, and three verbs (record a failure, ask whether work is left, leave a
note) — and the live state (`EpisodeState`); they never reach into the
episode's other attributes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import simpy

from eairdsl.ir import DashboardInducer, WarningInducer
from eairdsl.runtime.evaluate import EvalError, Scope, truthy
from eairdsl.runtime.world import InducerPlan, Proc
from eairdsl.vocabulary import TRAITS

if TYPE_CHECKING:
    from eairdsl.runtime.state import EpisodeState
    from eairdsl.runtime.world import CompiledWorld

__all__ = ["InducerHost", "InducerPlan", "Inducers"]  # InducerPlan lives in runtime.world


class InducerHost(Protocol):
    """What inducers may see of their episode and do to it — nothing else."""

    env: simpy.Environment
    #: per participant, the sim traits inducers shift (mutated in place)
    traits: dict[str, dict[str, float]]
    #: whether they shift them at all (the `sim` profile, not the self-test ones)
    shift_traits: bool

    def fail(self, reason: str) -> None:
        """Record why the episode is execution-invalid."""
        ...

    def busy(self) -> bool:
        """Whether a task is running or a scripted event is still to come."""
        ...

    def note(self, sender: str, recipient: str, text: str) -> None:
        """Leave a note from `sender` in the trace and in `recipient`'s memory."""
        ...


class Inducers:
    """The inducers of one episode: trait shifts, warnings and live dashboards."""

    def __init__(self, compiled: CompiledWorld, state: EpisodeState,
                 host: InducerHost) -> None:
        self.compiled = compiled
        self.state = state
        self.host = host
        self.plan = compiled.inducers
        #: warnings that fire when their `when` turns true, and its last value for each
        self.triggered: list[WarningInducer] = []
        self.trigger_state: dict[str, bool] = {}
        # Live dashboards: which are on, what they read last, and the lines per role.
        self._active_dashboards: list[DashboardInducer] | None = None
        self._dash_watched = -1  # EpisodeState.watched_version when last read
        self._dash_texts: list[tuple[list[str], Any]] = []
        self._dash_lines: dict[str, list[str]] = {}

    # ------------------------------------------------------------ standing inducers
    def shift_at_start(self) -> None:
        """Apply the inducers other than warnings to the sim traits, then clamp to [0, 1].

        Their `when` is read as the episode starts — levers, the instance and the
        initial state (a deadline's distance from `today()`, say) — so it can
        key on the world's state, not only on the lever that set it.
        """
        ep, c = self.host, self.compiled
        if ep.shift_traits:
            scope = self.state.scope()
            for inducer in c.world.inducers:
                if isinstance(inducer, WarningInducer) or not inducer.shifts:
                    continue
                try:
                    on = inducer.when is None or truthy(c.eval(inducer.when, scope))
                except EvalError as exc:
                    ep.fail(f"inducer {inducer.name}: {exc}")
                    continue
                if not on:
                    continue
                for party, values in ep.traits.items():
                    if inducer.roles and party not in inducer.roles:
                        continue
                    for trait, delta in inducer.shifts.items():
                        values[trait] = values.get(trait, 0.5) + delta
        for party, values in ep.traits.items():
            ep.traits[party] = {t: min(1.0, max(0.0, values.get(t, 0.5))) for t in TRAITS}

    # ------------------------------------------------------------ warnings
    def start(self) -> None:
        """Schedule timed warnings and register the condition-triggered ones."""
        for inducer in self.compiled.world.inducers:
            if not isinstance(inducer, WarningInducer) or inducer.on is not None:
                continue  # `on TOOL` warnings fire from after_call
            if inducer.at is None and inducer.every is None and inducer.when is not None:
                self.triggered.append(inducer)
            else:
                self.host.env.process(self._timed(inducer))

    def _timed(self, inducer: WarningInducer) -> Proc:
        """A timed warning: from `at`, then every `every`, whenever its `when` holds.

        A periodic warning stops once no participant has work left, so it never
        keeps an otherwise finished episode alive.
        """
        ep, c = self.host, self.compiled
        scope = self.state.scope()
        at = float(c.eval(inducer.at, scope, 0) or 0)
        every = c.eval(inducer.every, scope)
        if every is not None and not (math.isfinite(float(every)) and float(every) >= 0):
            # a negative period was simpy's "ValueError: Negative delay", NaN a clock gone wrong
            ep.fail(f"inducer '{inducer.name}': its `every` is {float(every)} min, not a "
                    "finite duration of at least 0 min")
            return
        yield ep.env.timeout(max(0.0, at))
        while True:
            if inducer.when is None or truthy(c.eval(inducer.when, self.state.scope())):
                self.warn(inducer)
            if not every or not ep.busy():
                return
            yield ep.env.timeout(float(every))

    def after_state_change(self) -> None:
        """Warnings without a time fire each time their `when` turns from false to true."""
        for inducer in self.triggered:
            now = truthy(self.compiled.eval(inducer.when, self.state.scope()))
            if now and not self.trigger_state.get(inducer.name, False):
                self.warn(inducer)
            self.trigger_state[inducer.name] = now

    def after_call(self, tool: str, scope: Scope) -> None:
        """`on TOOL` warnings, after a successful call, read in that call's scope."""
        for inducer in self.plan.on_tool.get(tool, ()):
            try:
                if inducer.when is None or truthy(self.compiled.eval(inducer.when, scope)):
                    self.warn(inducer, scope)
            except EvalError as exc:
                self.host.fail(f"warning {inducer.name} failed: {exc}")

    def warn(self, inducer: WarningInducer, scope: Scope | None = None) -> None:
        """Deliver a warning to its recipients' memory and shift their traits.

        `to EXPR` names the recipients when the warning fires (in `scope`, the
        tool call's for an `on TOOL` warning); otherwise `roles`, else every role.
        """
        ep, c = self.host, self.compiled
        sender = inducer.sender or "manager"
        here = scope if scope is not None else self.state.scope()
        if inducer.to is not None:
            named = c.eval(inducer.to, here)
            named = named if isinstance(named, list) else [named]
            roles = [r for r in named if isinstance(r, str) and r in c.parties]
        else:
            roles = inducer.roles or [p.name for p in c.world.parties if p.kind == "role"]
        text = inducer.text or ""
        if inducer.text_expr is not None:  # worded when it fires
            value = c.eval(inducer.text_expr, here)
            text = "" if value is None else str(value)
        for role in roles:
            ep.note(sender, role, text)
            traits = ep.traits.get(role)
            if traits is not None and ep.shift_traits:
                for trait, delta in inducer.shifts.items():
                    traits[trait] = min(1.0, max(0.0, traits.get(trait, 0.5) + delta))

    # ------------------------------------------------------------ live dashboards
    def dashboard(self, party: str) -> list[str]:
        """The live dashboards this participant sees now, read from the current state.

        A dashboard's `when` is lever-only (E510), so which are on is fixed for the
        episode. Their texts are re-read only when a ledger or state variable they
        read has changed (at every step if one reads the trace or the clock), and
        the lines each role sees are kept until then: this runs at every step.
        """
        st, c, plan = self.state, self.compiled, self.plan
        if not plan.live_dashboards:
            return []
        if plan.volatile_dashboards or self._dash_watched != st.watched_version:
            # something they read changed (ledgers only grow and a trial's changes are
            # undone, so a change is an append or a `set` since they were last read)
            self._dash_watched = st.watched_version
            scope = st.scope()
            if self._active_dashboards is None:
                self._active_dashboards = [
                    i for i in plan.live_dashboards
                    if i.when is None or truthy(c.eval(i.when, scope))]
            self._dash_texts = [(i.roles, c.eval(i.text_expr, scope))
                                for i in self._active_dashboards]
            self._dash_lines = {}
        lines = self._dash_lines.get(party)
        if lines is None:
            lines = self._dash_lines[party] = [
                str(text) for roles, text in self._dash_texts
                if text is not None and (not roles or party in roles)]
        return lines
