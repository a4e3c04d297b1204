"""Tool execution: one call is validated, charged, guarded, executed, filtered and recorded.

Why a part of its own: a tool call is the one place where the episode's clock,
its state and its trace meet, and the order of its steps is a contract
(docs/runtime.md, Tools): the tool being held and the arguments are checked
as the call is made (a malformed call costs nothing); then the cost elapses;
then, at one simulated instant and with no simpy yield in between, the tool
is re-checked as held, the guards are read and the result, ACL and effects
follow — so a call's guards, result and effects commit atomically after its
cost, and overlapping tasks cannot both pass a single-shot guard. Keeping that
sequence in one class, apart from task and message wiring, makes the
atomicity reviewable in one place. The runner also answers which tools a
participant holds now and how agents see them (specs cached per state
version).

The runner needs only two things of the episode it runs in (`ToolHost`): to
run a nested task (a delegation, a `route ROLE`) and to start one (`sends
to`); everything else it reads from the compiled world and the live state.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, assert_never

import simpy

from eairdsl.agents.protocol import Request, ToolCall, ToolSpec
from eairdsl.ir import (
    AppendEffect,
    EffectIR,
    GuardIR,
    Lit,
    PartyIR,
    SetEffect,
    ToolIR,
    TypeIR,
    World,
)
from eairdsl.runtime.conform import misfit, type_name
from eairdsl.runtime.evaluate import EvalError, Scope, truthy
from eairdsl.runtime.trace import Trace, to_json
from eairdsl.runtime.values import Row
from eairdsl.runtime.world import Proc, Task

if TYPE_CHECKING:
    from eairdsl.runtime.inducers import Inducers
    from eairdsl.runtime.state import EpisodeState
    from eairdsl.runtime.world import CompiledWorld

__all__ = ["Proc", "Task", "ToolHost", "ToolRunner"]  # Proc and Task live in runtime.world

class ToolHost(Protocol):
    """What the tool runner needs of its episode: participants' ranks, nested and new tasks."""

    authority: dict[str, int]

    def handle(self, party_name: str, request: Request, principal: str | None,
               root: str | None, delegator: str | None, depth: int) -> Proc:
        """Run a task for `party_name` to its reply (a delegation waits for it)."""
        ...

    def deliver(self, sender: PartyIR, target: str, text: str, root: str | None) -> None:
        """Start a top-level task for `target` and return at once."""
        ...


class ToolRunner:
    """The tool calls of one episode, and the tool lists its participants see."""

    def __init__(self, compiled: CompiledWorld, state: EpisodeState, env: simpy.Environment,
                 trace: Trace, inducers: Inducers, host: ToolHost) -> None:
        self.compiled = compiled
        self.state = state
        self.env = env
        self.trace = trace
        self.inducers = inducers
        self.host = host
        self._specs: dict[tuple[str, int], ToolSpec] = {}
        self._party_specs: dict[tuple[str, int], list[ToolSpec]] = {}
        #: what a participant with a fixed tool list holds (`CompiledWorld.fixed_tool_lists`):
        #: read once (every call checks it twice: as made and at the commit)
        self._fixed: dict[str, dict[str, ToolIR]] = {}

    # ------------------------------------------------------------ what a participant holds
    def available(self, party: PartyIR) -> list[ToolIR]:
        """The tools a participant holds now (each `tools … when` read now, in one scope:
        nothing changes between them)."""
        out = []
        scope: Scope | None = None
        for ref in party.tools:
            tool = self.compiled.tools.get(ref.name)
            if tool is None:
                continue
            if ref.when is not None:
                if scope is None:
                    scope = self.state.scope()
                if not truthy(self.compiled.eval(ref.when, scope)):
                    continue
            out.append(tool)
        return out

    def held(self, party: PartyIR) -> dict[str, ToolIR]:
        """`available(party)` by name. A tool list whose `when`s read only what cannot
        change during an episode (levers, the instance, static tables) is read once."""
        fixed = self._fixed.get(party.name)
        if fixed is not None:
            return fixed
        now = {t.name: t for t in self.available(party)}
        if party.name in self.compiled.fixed_tool_lists:
            self._fixed[party.name] = now
        return now

    def specs_for(self, party: PartyIR) -> list[ToolSpec]:
        """The tools a participant holds now, as it sees them.

        Read once per episode when the tool list is fixed and every hint stable;
        otherwise cached until the next state change — unless a `tools … when`
        reads something else that moves (the trace, the clock), then never cached.
        """
        if party.name in self.compiled.volatile_tool_lists:
            return [self.spec(t) for t in self.available(party)]
        key = (party.name, -1 if party.name in self.compiled.fixed_specs
               else self.state.version)
        cached = self._party_specs.get(key)
        if cached is None:
            cached = self._party_specs[key] = [self.spec(t) for t in self.available(party)]
        return list(cached)

    def spec(self, tool: ToolIR) -> ToolSpec:
        """The tool as agents see it. Hints are re-evaluated only after the state changes."""
        key = (tool.name, -1 if tool.name in self.compiled.stable_hints else self.state.version)
        cached = self._specs.get(key)
        if cached is None:
            cached = self._specs[key] = self._build_spec(tool)
        return cached

    def _build_spec(self, tool: ToolIR) -> ToolSpec:
        hints = []
        for p in tool.params:
            hint = self.compiled.eval(p.hint, self.state.scope()) if p.hint is not None else None
            if hint is not None and not isinstance(hint, list):
                hint = [hint]
            hints.append(to_json(hint))
        # Everything else in a spec is the world's: one spec per tool and hint values,
        # shared by the world's episodes (agents only read their specs).
        return self.compiled.tool_spec(tool, hints)

    # ------------------------------------------------------------ one call
    def call(self, task: Task, call: ToolCall, plain_args: dict[str, Any] | None = None) -> Proc:
        """Validate, charge, then guard, execute and record one tool call atomically.

        Returns (result, rejected). The tool being held and the arguments are
        checked as the call is made (a malformed call is rejected at once and
        costs nothing); then the cost elapses; then, at one simulated instant and
        with no simpy yield in between, the tool is re-checked as held, the
        guards are read, and the result, ACL and effects follow — so overlapping
        tasks cannot both pass a single-shot guard. A delegating tool is the one
        exception: its callee's task runs between the guards and the effects, so
        the guards are read again, atomically with the effects, when the callee
        answers. `plain_args`: `to_json(call.args)` when the caller has it already.

        Helpers refuse by raising `_Refused`; the delegation's `yield from` stays
        here, so a chain of delegations nests no deeper than it did.
        """
        event = self.trace.add(t=float(self.env.now), kind="tool_call", actor=task.party,
                               tool=call.tool, task=task.id,
                               args=to_json(call.args) if plain_args is None else plain_args)
        party = self.compiled.parties[task.party]
        available = self.held(party)
        tool = available.get(call.tool)
        if tool is None:
            known = ", ".join(sorted(available)) or "none"
            return self._reject(task, event.step, call.tool,
                                f"unknown or unavailable tool '{call.tool}' (available: {known})")
        args, problem = self._bind_args(tool, call.args)
        if problem is not None:
            return self._reject(task, event.step, tool.name, problem)
        context = {"caller": task.party, "requester": task.root, "principal": task.principal,
                   "delegator": task.delegator, "time": float(self.env.now)}
        try:
            cost = self._cost(tool, context, args)
        except _Refused as no:
            return self._reject(task, event.step, tool.name, no.reason)
        if cost > 0:
            yield self.env.timeout(cost)
        # The commit: nothing below yields to simpy before the effects are applied,
        # except a routed call or a delegation (whose guards are then read again).
        try:
            scope = self.state.scope(context, args)
            if not self.holds(party, tool):
                return self._reject(task, event.step, tool.name,
                                    f"tool '{tool.name}' is no longer available")
            guard = self._failing_guard(tool, scope)
            if guard is not None:
                if guard.action == "route" and guard.target:
                    routed = yield from self._route(task, event.step, party, tool, call,
                                                    guard.target, guard.at)
                    return routed
                return self._reject(task, event.step, tool.name,
                                    guard.message or "rejected by a guard", guard.at)
            # `ensure`: the policy rules on the state the effects would leave, before
            # anything is sent or applied (for a delegation, once the callee answered)
            ensured = None if tool.delegates_to else self._failing_ensure(tool, context,
                                                                          args, scope)
            if ensured is not None:
                return self._reject(task, event.step, tool.name,
                                    ensured.message or "rejected by a policy check", ensured.at)
            if tool.delegates_to:
                request, principal = self._handoff(task, party, tool, args, scope)
                callee = tool.delegates_to[0]
                result: Any = yield from self.host.handle(
                    callee, request, principal=principal, root=task.root,
                    delegator=task.party, depth=task.depth + 1)
                scope = self._recheck(party, tool, context, args, callee)
            elif tool.sends_to is not None:
                result = self._send(task, party, tool, args, scope)
            else:
                result = self.compiled.eval(tool.result, scope, "done")
            result = self._filtered(tool, scope, result)
            scope = self._apply_effects(task, tool, context, args, scope)
        except EvalError as exc:
            return self._reject(task, event.step, tool.name, f"tool failed: {exc}")
        except _Refused as no:
            return self._reject(task, event.step, tool.name, no.reason, no.at)
        recorded = self._result(task, event.step, tool.name, result)
        self.inducers.after_call(tool.name, scope)
        return recorded

    def _cost(self, tool: ToolIR, context: dict[str, Any], args: dict[str, Any]) -> float:
        """The minutes a call takes, read as it is made: a cost that fails or is not a
        finite duration refuses the call before any time passes."""
        try:
            spent = tool.cost
            # a constant cost (the common case) needs no scope to be read in
            cost = float((spent.value if type(spent) is Lit else self.compiled.eval(
                spent, self.state.scope(context, args), 0)) or 0)
        except EvalError as exc:
            raise _Refused(f"tool failed: {exc}") from None
        if not math.isfinite(cost):  # `inf` left the call waiting for ever, unanswered
            raise _Refused(f"tool failed: its cost is {cost} min, not a finite duration")
        return cost

    def _handoff(self, task: Task, party: PartyIR, tool: ToolIR, args: dict[str, Any],
                 scope: Scope) -> tuple[Request, str | None]:
        """A delegation's request to its callee (the arguments as text) and the principal
        it carries: the tool's `propagates`, where its `when` holds, else none."""
        propagate = tool.propagates is not None and (
            tool.propagates_when is None
            or truthy(self.compiled.eval(tool.propagates_when, scope)))
        principal = self.compiled.eval(tool.propagates, scope) if propagate else None
        question = _handoff_text(args)
        return Request(sender=task.party, text=question,
                       sender_authority=self.host.authority[party.name],
                       via="delegation", sender_kind=party.kind), principal

    def _recheck(self, party: PartyIR, tool: ToolIR, context: dict[str, Any],
                 args: dict[str, Any], callee: str) -> Scope:
        """After a delegation: the callee's task took time and changed state, so the outer
        call commits only if it still may, at the instant of its effects (held, guards,
        `ensure`). The scope the effects are then read in."""
        scope = self.state.scope(context, args)
        if not self.holds(party, tool):
            raise _Refused(f"tool '{tool.name}' is no longer available when {callee} answered")
        guard = self._failing_guard(tool, scope)
        if guard is not None:
            raise _Refused(guard.message or f"rejected by a guard when {callee} answered",
                           guard.at)
        ensured = self._failing_ensure(tool, context, args, scope)
        if ensured is not None:
            raise _Refused(ensured.message
                           or f"rejected by a policy check when {callee} answered", ensured.at)
        return scope

    def _send(self, task: Task, party: PartyIR, tool: ToolIR, args: dict[str, Any],
              scope: Scope) -> Any:
        """A `sends` tool: the arguments (the target's name aside) go to the participant
        it names as a new message; the tool's result, `sent to TARGET` by default."""
        target = self.compiled.eval(tool.sends_to, scope)
        if target not in self.compiled.parties:
            raise _Refused(f"no participant named {target!r} to send to")
        text = _handoff_text({k: v for k, v in args.items() if v != target})
        self.host.deliver(party, str(target), text, task.root)
        return self.compiled.eval(tool.result, scope, f"sent to {target}")

    def _filtered(self, tool: ToolIR, scope: Scope, result: Any) -> Any:
        """The result as the tool's `acl` lets its principal see it (as it is without an
        acl, or when the acl's `when` does not hold); no principal refuses the call."""
        if tool.acl is not None and (tool.acl_when is None or truthy(
                self.compiled.eval(tool.acl_when, scope))):
            principal = self.compiled.eval(tool.acl, scope)
            if principal is None:
                raise _Refused("no trusted principal accompanies this request")
            return self._filter(result, principal)
        return result

    def _apply_effects(self, task: Task, tool: ToolIR, context: dict[str, Any],
                       args: dict[str, Any], scope: Scope) -> Scope:
        """The tool's effects in order, each read in the state the previous one left;
        the scope after the last (what the inducers then see)."""
        for effect in tool.effects:
            if effect.when is not None and not truthy(self.compiled.eval(effect.when, scope)):
                continue
            self._apply(task, tool, effect, scope)
            scope = self.state.scope(context, args)
        return scope

    def holds(self, party: PartyIR, tool: ToolIR) -> bool:
        """Whether the participant holds the tool now (its `tools … when` read again)."""
        return self.held(party).get(tool.name) is tool

    def _failing_guard(self, tool: ToolIR, scope: Scope) -> GuardIR | None:
        """The first `require` guard that applies and does not hold (None: all hold)."""
        for guard in tool.guards:
            if guard.after:
                continue  # an `ensure`: read on the state after the effects (_failing_ensure)
            if guard.when is not None and not truthy(self.compiled.eval(guard.when, scope)):
                continue
            if not truthy(self.compiled.eval(guard.condition, scope)):
                return guard
        return None

    def _failing_ensure(self, tool: ToolIR, context: dict[str, Any], args: dict[str, Any],
                        scope: Scope) -> GuardIR | None:
        """The first `ensure` that applies and whose policy rule fails on the state the
        call's effects would leave (None: all hold, or the tool has none).

        The effects are applied as a trial — no trace event, no inducer — and undone
        before this returns; the caller then applies them for real, at the same instant
        and with no yield in between, so the state checked is the state committed.
        """
        ensures = [g for g in tool.guards if g.after and (
            g.when is None or truthy(self.compiled.eval(g.when, scope)))]
        if not ensures:
            return None
        with self.state.trial():
            trial = scope
            for effect in tool.effects:
                if effect.when is not None and not truthy(self.compiled.eval(effect.when, trial)):
                    continue
                value = self.compiled.eval(effect.value, trial)
                match effect:
                    case AppendEffect():
                        self.state.append(effect.target, self._row(effect.target, value, trial))
                    case SetEffect():
                        self.state.assign(effect.target, value)
                    case _:
                        assert_never(effect)
                trial = self.state.scope(context, args)
            for guard in ensures:
                if not truthy(self.compiled.eval(guard.condition, trial)):
                    return guard
        return None

    def _row(self, target: str, value: Any, scope: Scope) -> Row:
        """The row an `append` adds: the given fields, then the record's defaults."""
        record = self.compiled.records.get(target)
        row = Row(target, dict(value or {}))
        if record is not None:
            for f in record.fields:
                if f.name not in row and f.default is not None:
                    row[f.name] = self.compiled.eval(f.default, scope)
        return row

    def _route(self, task: Task, call_step: str, party: PartyIR, tool: ToolIR,
               call: ToolCall, target: str, at: str | None) -> Proc:
        """`else route TARGET`: call that tool with the matching arguments, or delegate
        the request to that role; the routed call is checked (and charged) on its own."""
        self.trace.add(t=float(self.env.now), kind="decision", actor=task.party,
                       tool=tool.name, content=f"routed to {target}", task=task.id,
                       reason=at)
        if target in self.compiled.tools:
            params = {p.name for p in self.compiled.tools[target].params}
            routed = ToolCall(tool=target,
                              args={k: v for k, v in call.args.items() if k in params})
            routed_result = yield from self.call(task, routed)
            return routed_result
        reply = yield from self.host.handle(
            target, Request(sender=task.party, text=_render_args(call),
                            sender_authority=self.host.authority[party.name],
                            via="delegation", sender_kind=party.kind),
            principal=task.principal, root=task.root, delegator=task.party,
            depth=task.depth + 1)
        return self._result(task, call_step, tool.name, reply)

    def _bind_args(self, tool: ToolIR, given: dict[str, Any]) -> tuple[dict[str, Any],
                                                                        str | None]:
        names, plain = self.compiled.arg_plan(tool)
        if not names.issuperset(given):
            extra = sorted(set(given) - names)
            return {}, f"unknown argument{'s' if len(extra) > 1 else ''}: {', '.join(extra)}"
        args: dict[str, Any] = {}
        for p, fits in zip(tool.params, plain, strict=True):
            if p.name in given:
                value = given[p.name]
                # a value of the parameter's plain type fits it (conform.misfit agrees);
                # anything else is asked of misfit, which also words the rejection
                if value is not None and (fits is None or type(value) not in fits):
                    problem = _check_value(value, p.type, self.compiled.world, p.name)
                    if problem:
                        return {}, problem
                args[p.name] = value
            elif p.default is not None:  # a literal default (the common case) needs no scope
                default = p.default
                args[p.name] = default.value if type(default) is Lit else self.compiled.eval(
                    default, self.state.scope())
            else:
                return {}, f"missing argument '{p.name}'"
        return args, None

    def _filter(self, result: Any, principal: str) -> Any:
        if isinstance(result, Row):
            allowed = set(self.state.authorizer.allowed(principal, result.record))
            return Row(result.record, {k: v for k, v in result.items() if k in allowed})
        if isinstance(result, list):
            return [self._filter(r, principal) for r in result]
        return result

    def _apply(self, task: Task, tool: ToolIR, effect: EffectIR, scope: Scope) -> None:
        value = self.compiled.eval(effect.value, scope)
        diff: dict[str, Any]
        match effect:
            case AppendEffect():
                row = self._row(effect.target, value, scope)
                self.state.append(effect.target, row)
                diff = {"append": {effect.target: to_json(dict(row))}}
            case SetEffect():
                diff = {"set": {effect.target: {
                    "from": to_json(self.state.states.get(effect.target)), "to": to_json(value)}}}
                self.state.assign(effect.target, value)
            case _:
                assert_never(effect)
        self.trace.add(t=float(self.env.now), kind="state_update", actor=task.party,
                       tool=tool.name, diff=diff, task=task.id)
        self.inducers.after_state_change()

    def _reject(self, task: Task, call_step: str, tool: str, reason: str,
                at: str | None = None) -> tuple[Any, bool]:
        self.trace.add(t=float(self.env.now), kind="tool_result", actor=task.party, tool=tool,
                       rejected=True, reason=reason, call=call_step, task=task.id,
                       result={"error": reason})
        return {"error": reason}, True

    def _result(self, task: Task, call_step: str, tool: str, result: Any) -> tuple[Any, bool]:
        """Record a result; the caller gets the same plain-JSON value the trace holds."""
        plain = to_json(result)
        self.trace.add(t=float(self.env.now), kind="tool_result", actor=task.party, tool=tool,
                       result=plain, rejected=False, call=call_step, task=task.id)
        return plain, False



_type_name = type_name


class _Refused(Exception):
    """A step of `ToolRunner.call` refuses the call: `call` records it as rejected with
    this reason (and the guard's `at`, if a guard refused)."""

    def __init__(self, reason: str, at: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.at = reason, at


def _handoff_text(args: dict[str, Any]) -> str:
    """What a delegated or sent request says: one text argument as is, else every argument."""
    present = {k: v for k, v in args.items() if v is not None}
    texts = [v for v in present.values() if isinstance(v, str)]
    if len(present) == 1 and texts:
        return texts[0]
    return "; ".join(f"{k}: {to_json(v)}" for k, v in present.items())


def _render_args(call: ToolCall) -> str:
    return f"{call.tool}: " + "; ".join(f"{k}: {v}" for k, v in sorted(call.args.items()))


def _check_value(value: Any, t: TypeIR, world: World, name: str) -> str | None:
    """Why `value` does not fit type `t` (None when it does), as a rejection reason."""
    problem = misfit(value, t, enums=world.enums, schemas=world.schemas,
                     closed=world.closed_schemas, path=name)
    if problem is None:
        return None
    where = problem.path
    if problem.kind == "max":
        return (f"argument '{where}' is {len(problem.value)} characters; at most "
                f"{problem.type.max} are allowed")
    if problem.kind == "member":
        return f"argument '{where}' must be one of {problem.detail}, got {problem.value!r}"
    if problem.kind == "shape":
        return f"argument '{where}' does not match {problem.type.name}: {problem.detail}"
    return (f"argument '{where}' must be {_type_name(problem.type)}, "
            f"got {str(problem.value)[:40]!r}")
