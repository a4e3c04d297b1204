"""One episode of a compiled world on a simpy clock.

simpy owns simulated time: tool costs are timeouts, scripted actors and
inducer warnings are timed processes, a synchronous delegation is a nested
process the caller's tool call waits for. Agents are asynchronous
(`await agent.decide(...)`), so the episode is driven from an asyncio loop
that steps simpy and resolves each pending decision in a fixed order — which is
what keeps traces deterministic while letting LLM agents wait on a network.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from eairdsl.agents.protocol import (
    Agent,
    MemoryItem,
    Observation,
    ParamSpec,
    Reply,
    Request,
    ToolCall,
    ToolSpec,
)
from eairdsl.ir import Expr, GuardIR, PartyIR, Ref, ToolIR, TypeIR, World, walk_expr
from eairdsl.runtime.evaluate import (
    Authorizer,
    EvalError,
    LetTable,
    Scope,
    compile_expr,
    is_stable,
    reads_trace_or_clock,
    truthy,
)
from eairdsl.runtime.inducers import InducerPlan, Inducers
from eairdsl.runtime.trace import Trace, to_json
from eairdsl.runtime.values import Row, StaticRows

__all__ = ["CompiledWorld", "Episode", "EpisodeError", "MAX_STEPS_PER_TASK", "MAX_EVENTS"]

MAX_STEPS_PER_TASK = 16
MAX_EVENTS = 5000
Proc = Generator[Any, Any, Any]


class EpisodeError(Exception):
    """The episode cannot continue; it is recorded as execution-invalid."""


class CompiledWorld:
    """A World with every expression compiled once, shared by all its episodes."""

    def __init__(self, world: World) -> None:
        self.world = world
        self._fns: dict[int, Any] = {}
        self.tools = {t.name: t for t in world.tools}
        self.parties = {p.name: p for p in world.parties}
        self.records = {r.name: r for r in world.records}
        self.conditions = {c.name: c for c in world.conditions}
        self.mutable = {e.target for t in world.tools for e in t.effects if e.op == "append"}
        # Tables no tool appends to are built once and shared (rows are never mutated).
        self.static_rows = {r.name: StaticRows(r.name, [Row(r.name, row) for row in r.rows])
                            for r in world.records if r.name not in self.mutable}
        self.lets = LetTable(world.lets, self.mutable)
        # Participants whose tool lists depend on more than the state (trace, clock).
        self.volatile_tool_lists = {
            p.name for p in world.parties
            if any(reads_trace_or_clock(r.when, world.lets) for r in p.tools)}
        # Tools whose argument hints cannot change during an episode: specced once.
        self.stable_hints = {t.name for t in world.tools
                             if all(is_stable(p.hint, world.lets, self.mutable)
                                    for p in t.params)}
        self._access: dict[str, tuple[list[str], list[str]]] = {}
        self.inducers = InducerPlan(world)

    def fn(self, expr: Expr) -> Any:
        key = id(expr)
        if key not in self._fns:
            self._fns[key] = compile_expr(expr, self.lets)
        return self._fns[key]

    def eval(self, expr: Expr | None, scope: Scope, default: Any = None) -> Any:
        return default if expr is None else self.fn(expr)(scope)

    def access(self, tool: ToolIR) -> tuple[list[str], list[str]]:
        """Records a tool reads (in its result and guards) and ledgers it appends to."""
        if tool.name not in self._access:
            reads: set[str] = set()
            for e in (tool.result, *(g.condition for g in tool.guards)):
                reads |= {x.name for x in walk_expr(e, self.world.lets)
                          if isinstance(x, Ref) and x.kind == "record"}
            writes = sorted({e.target for e in tool.effects if e.op == "append"})
            self._access[tool.name] = (sorted(reads), writes)
        return self._access[tool.name]


@dataclass
class _Task:
    id: int
    party: str
    request: Request
    principal: str | None
    root: str | None
    delegator: str | None
    depth: int


@dataclass
class Episode:
    """Runs one (world, condition, instance, seed) with the given agents."""

    compiled: CompiledWorld
    condition: str
    instance: dict[str, Any]
    seed: int
    agents: dict[str, Agent]
    traits: dict[str, dict[str, float]]
    trace: Trace
    invalid: list[str] = field(default_factory=list)
    #: whether inducers shift the sim traits — standing ones as the episode starts,
    #: warnings when they fire (the `sim` profile, not the self-test profiles)
    shift_traits: bool = True

    def __post_init__(self) -> None:
        self.active = 0
        self.scheduled = 0
        self.episode_memo: dict[tuple[Any, ...], Any] = {}
        self._scope_base: dict[str, Any] | None = None
        self.version = 0  # bumped by every state change; keys cached tool specs
        self._specs: dict[tuple[str, int], ToolSpec] = {}
        self._party_specs: dict[tuple[str, int], list[ToolSpec]] = {}
        self.state_changes: dict[str, int] = {}  # `set` effects per state variable
        w = self.compiled.world
        self.env = simpy.Environment()
        self.pending: list[tuple[Agent, Observation, simpy.Event]] = []
        self.memory: dict[str, list[MemoryItem]] = {p.name: [] for p in w.parties}
        self.tasks = 0
        self.levers = dict(self.compiled.conditions[self.condition].levers)
        # Effects only append rows or set state variables: ledgers are copied shallowly,
        # static tables shared.
        static = self.compiled.static_rows
        self.records: dict[str, list[Row]] = {
            r.name: static[r.name] if r.name in static else [Row(r.name, row) for row in r.rows]
            for r in w.records}
        self.documents = {d.name: d.text for d in w.documents}
        self.states: dict[str, Any] = {}
        # The calendar starts at the instance's `start_date`, else the state `start_date`.
        self.start_date = "2026-01-01"
        principals: dict[str, str] = {}
        self.authorizer = Authorizer(w, principals)
        base = self.scope()
        for state in w.states:
            self.states[state.name] = self.compiled.eval(state.value, base)
        start = self.instance.get("start_date") or self.states.get("start_date")
        if isinstance(start, str) and len(start) == 10:
            self.start_date = start
        for party in w.parties:
            value = self.compiled.eval(party.principal, self.scope())
            if isinstance(value, str):
                principals[value] = party.name
        # Rank and display names may depend on the condition and the instance.
        self.authority: dict[str, int] = {}
        self.names: dict[str, str] = {}
        for party in w.parties:
            rank = party.authority
            if party.authority_expr is not None:
                value = self.compiled.eval(party.authority_expr, self.scope())
                rank = int(value) if isinstance(value, (int, float)) else 0
            self.authority[party.name] = rank
            if party.display is not None:
                shown = self.compiled.eval(party.display, self.scope())
                if isinstance(shown, str) and shown:
                    self.names[party.name] = shown
        # Message topology: where a participant's output goes once it answers a request.
        # Each carries answers only while its `when` holds (None: always).
        self.forward: dict[str, list[tuple[str, Expr | None]]] = {}
        self.merges: list[tuple[list[str], str, dict[str, str], Expr | None]] = []
        self.relays: list[tuple[str, str, str, Expr | None]] = []
        for ch in w.channels:
            # A channel `via TOOL` is used only through that tool; the others carry answers.
            if ch.kind in ("direct", "fork") and ch.via is None:
                self.forward.setdefault(ch.parties[0], []).extend(
                    (target, ch.when) for target in ch.parties[1:])
            elif ch.kind == "merge":
                self.merges.append((ch.parties[:-1], ch.parties[-1], {}, ch.when))
            elif ch.kind == "relay":
                a, b, c = ch.parties
                self.relays.append((a, b, c, ch.when))
        self.inducers = Inducers(self)
        self.inducers.shift_at_start()

    # ------------------------------------------------------------ scopes
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
                episode_memo=self.episode_memo).__dict__
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
        p = self.compiled.parties.get(party)
        if p is not None and p.principal is not None:
            value = self.compiled.eval(p.principal, self.scope())
            if isinstance(value, str):
                return value
        return party

    # ------------------------------------------------------------ driving
    async def run(self) -> None:
        for party in self.compiled.world.parties:
            for scheduled in party.events:
                self.env.process(self._scheduled(party, scheduled))
        self.inducers.start()
        processed = 0
        while True:
            if self.pending:
                batch, self.pending = self.pending, []
                for agent, obs, event in batch:
                    try:
                        action = await agent.decide(obs)
                    except Exception as exc:
                        self.invalid.append(f"{obs.party}: agent failed: {exc}")
                        action = Reply(text="")
                    event.succeed(action)
                continue
            if self.env.peek() == float("inf"):
                break
            processed += 1
            if processed > MAX_EVENTS:
                self.invalid.append(f"event budget of {MAX_EVENTS} exhausted")
                break
            self.env.step()

    def _scheduled(self, party: PartyIR, event: Any) -> Proc:
        self.scheduled += 1
        try:
            yield from self._scheduled_event(party, event)
        finally:
            self.scheduled -= 1

    def _scheduled_event(self, party: PartyIR, event: Any) -> Proc:
        at = float(self.compiled.eval(event.at, self.scope()) or 0)
        yield self.env.timeout(max(0.0, at))
        if event.when is not None and not truthy(self.compiled.eval(event.when, self.scope())):
            return
        to = event.to
        if event.to_expr is not None:  # `say … to EXPR`: whoever it names now
            to = self.compiled.eval(event.to_expr, self.scope())
            if not isinstance(to, str) or to not in self.compiled.parties:
                self.invalid.append(f"{party.name}: no participant named {to!r} to address")
                return
        if event.kind == "say":
            text = self.compiled.eval(event.message, self.scope())
            text = "" if text is None else str(text)
        else:
            text = yield from self._opening(party, to)
        yield from self.handle(to, Request(sender=party.name, text=text,
                                           sender_authority=self.authority[party.name],
                                           sender_kind=party.kind),
                               principal=None, root=self.principal_of(party.name),
                               delegator=None, depth=0)

    def _opening(self, party: PartyIR, to: str) -> Proc:
        """A counterpart simulator opens a conversation by deciding its first message."""
        agent = self.agents.get(party.name)
        if agent is None:
            return party.objective or f"Hello, this is {party.name}."
        self.tasks += 1
        obs = Observation(party=party.name, kind=party.kind, card=self._card(party.name),
                          time=float(self.env.now), task=self.tasks, step=0,
                          request=Request(sender=to, text="You are contacting "
                                          f"{self.names.get(to, to)}."),
                          memory=list(self.memory[party.name]), tools=[],
                          traits=self.traits.get(party.name, {}), names=self.names)
        action = yield from self._decide(agent, obs)
        text = action.text if isinstance(action, Reply) else ""
        return text or party.objective or f"Hello, this is {party.name}."

    def _decide(self, agent: Agent, obs: Observation) -> Proc:
        event = self.env.event()
        self.pending.append((agent, obs, event))
        action = yield event
        return action

    # ------------------------------------------------------------ tasks
    def _card(self, party: str) -> str:
        return self.compiled.world.prompts.get(party, {}).get(self.condition, "")

    def _available(self, party: PartyIR) -> list[ToolIR]:
        out = []
        for ref in party.tools:
            tool = self.compiled.tools.get(ref.name)
            if tool is not None and (ref.when is None or truthy(
                    self.compiled.eval(ref.when, self.scope()))):
                out.append(tool)
        return out

    def _specs_for(self, party: PartyIR) -> list[ToolSpec]:
        """The tools a participant holds now, as it sees them.

        Cached until the next state change — unless a `tools … when` reads
        something else that moves (the trace, the clock), then never cached.
        """
        if party.name in self.compiled.volatile_tool_lists:
            return [self._spec(t) for t in self._available(party)]
        key = (f"party:{party.name}", self.version)
        cached = self._party_specs.get(key)
        if cached is None:
            cached = self._party_specs[key] = [self._spec(t) for t in self._available(party)]
        return list(cached)

    def _spec(self, tool: ToolIR) -> ToolSpec:
        """The tool as agents see it. Hints are re-evaluated only after the state changes."""
        key = (tool.name, -1 if tool.name in self.compiled.stable_hints else self.version)
        cached = self._specs.get(key)
        if cached is None:
            cached = self._specs[key] = self._build_spec(tool)
        return cached

    def _build_spec(self, tool: ToolIR) -> ToolSpec:
        params = []
        for p in tool.params:
            hint = self.compiled.eval(p.hint, self.scope()) if p.hint is not None else None
            if hint is not None and not isinstance(hint, list):
                hint = [hint]
            members = list(p.type.members)
            if p.type.kind == "document":
                members = [d.name for d in self.compiled.world.documents]
            elif p.type.kind == "party":
                members = [q.name for q in self.compiled.world.parties if q.kind != "actor"]
            params.append(ParamSpec(name=p.name, type=_type_name(p.type),
                                    required=p.default is None, members=members,
                                    hint=to_json(hint)))
        reads, writes = self.compiled.access(tool)
        return ToolSpec(name=tool.name, kind=tool.kind, description=tool.description,
                        params=params, delegates=bool(tool.delegates_to), reads=reads,
                        writes=writes)

    def handle(self, party_name: str, request: Request, principal: str | None,
               root: str | None, delegator: str | None, depth: int) -> Proc:
        """An agent handles one request: tool calls until it replies. Returns the reply."""
        self.active += 1
        try:
            reply = yield from self._handle(party_name, request, principal, root, delegator,
                                            depth)
        finally:
            self.active -= 1
        return reply

    def _handle(self, party_name: str, request: Request, principal: str | None,
                root: str | None, delegator: str | None, depth: int) -> Proc:
        party = self.compiled.parties.get(party_name)
        self.tasks += 1
        task = _Task(self.tasks, party_name, request, principal, root, delegator, depth)
        via_tool = depth > 0
        self.trace.add(t=float(self.env.now), kind="message", actor=request.sender,
                       recipient=party_name, edge=f"{request.sender}->{party_name}",
                       content=request.text, task=task.id,
                       tool="delegation" if via_tool else None)
        if party is None or party.kind == "actor" or party_name not in self.agents:
            return ""
        self.memory[party_name].append(MemoryItem(
            kind="message", task=task.id, sender=request.sender, text=request.text))
        agent = self.agents[party_name]
        for step in range(MAX_STEPS_PER_TASK):
            obs = Observation(party=party_name, kind=party.kind,
                              card=self._card(party_name),
                              time=float(self.env.now), task=task.id, step=step,
                              request=request, memory=list(self.memory[party_name]),
                              tools=self._specs_for(party),
                              traits=self.traits.get(party_name, {}), principal=principal,
                              authority=self.authority[party_name], names=self.names,
                              dashboard=self.inducers.dashboard(party_name))
            action = yield from self._decide(agent, obs)
            if isinstance(action, Reply):
                self.trace.add(t=float(self.env.now), kind="message", actor=party_name,
                               recipient=request.sender, edge=f"{party_name}->{request.sender}",
                               content=action.text, task=task.id, final=depth == 0 or None)
                if depth == 0:
                    self._pass_on(party, request.sender, action.text, root)
                return action.text
            result, rejected = yield from self.call_tool(task, action)
            self.memory[party_name].append(MemoryItem(
                kind="tool_result", task=task.id, tool=action.tool, args=to_json(action.args),
                result=result, rejected=rejected))
        self.invalid.append(f"{party_name} exceeded {MAX_STEPS_PER_TASK} steps in one task")
        self.trace.add(t=float(self.env.now), kind="decision", actor=party_name,
                       content="step budget exhausted without a reply", task=task.id)
        return ""

    def _pass_on(self, party: PartyIR, sender: str, text: str, root: str | None) -> None:
        """Deliver a participant's answer along its outgoing channels.

        Direct and fork channels carry every answer; a relay `A -> B -> C`
        carries B's answer to a task A sent; a merge collects one answer per
        source and delivers them together. A channel's `when` is read as the
        answer is passed on: while false, the channel carries nothing.
        """
        def open_(when: Expr | None) -> bool:
            return when is None or truthy(self.compiled.eval(when, self.scope()))

        for target, when in self.forward.get(party.name, []):
            if target != sender and open_(when):
                self._deliver(party, target, text, root)
        for source, hop, target, when in self.relays:
            if hop == party.name and source == sender and target != sender and open_(when):
                self._deliver(party, target, text, root)
        for sources, target, inbox, when in self.merges:
            if party.name in sources and open_(when):
                inbox[party.name] = text
                if all(src in inbox for src in sources):
                    merged = "\n\n".join(f"From {src}: {inbox[src]}" for src in sources)
                    inbox.clear()
                    self._deliver(party, target, merged, root)

    def _deliver(self, sender: PartyIR, target: str, text: str, root: str | None) -> None:
        self.env.process(self.handle(target, Request(sender=sender.name, text=text,
                                                     sender_authority=self.authority[sender.name],
                                                     sender_kind=sender.kind),
                                     principal=None, root=root, delegator=None, depth=0))

    # ------------------------------------------------------------ tools
    def call_tool(self, task: _Task, call: ToolCall) -> Proc:
        """Validate, charge, then guard, execute and record one tool call atomically.

        Returns (result, rejected). The tool being held and the arguments are
        checked as the call is made (a malformed call is rejected at once and
        costs nothing); then the cost elapses; then, at one simulated instant and
        with no simpy yield in between, the tool is re-checked as held, the
        guards are read, and the result, ACL and effects follow — so overlapping
        tasks cannot both pass a single-shot guard. A delegating tool is the one
        exception: its callee's task runs between the guards and the effects, so
        the guards are read again, atomically with the effects, when the callee
        answers.
        """
        event = self.trace.add(t=float(self.env.now), kind="tool_call", actor=task.party,
                               tool=call.tool, args=to_json(call.args), task=task.id)
        party = self.compiled.parties[task.party]
        available = {t.name: t for t in self._available(party)}
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
            cost = float(self.compiled.eval(tool.cost, self.scope(context, args), 0) or 0)
        except EvalError as exc:
            return self._reject(task, event.step, tool.name, f"tool failed: {exc}")
        if cost > 0:
            yield self.env.timeout(cost)
        # The commit: nothing below yields to simpy before the effects are applied,
        # except a routed call or a delegation (whose guards are then read again).
        try:
            scope = self.scope(context, args)
            if not self._holds(party, tool):
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
            if tool.delegates_to:
                propagate = tool.propagates is not None and (
                    tool.propagates_when is None
                    or truthy(self.compiled.eval(tool.propagates_when, scope)))
                principal = self.compiled.eval(tool.propagates, scope) if propagate else None
                question = _handoff_text(args)
                callee = tool.delegates_to[0]
                result: Any = yield from self.handle(
                    callee, Request(sender=task.party, text=question,
                                    sender_authority=self.authority[party.name],
                                    via="delegation", sender_kind=party.kind),
                    principal=principal, root=task.root, delegator=task.party,
                    depth=task.depth + 1)
                # The callee's task took time and changed state: the outer call
                # commits only if it still may, at the instant of its effects.
                scope = self.scope(context, args)
                if not self._holds(party, tool):
                    return self._reject(task, event.step, tool.name,
                                        f"tool '{tool.name}' is no longer available "
                                        f"when {callee} answered")
                guard = self._failing_guard(tool, scope)
                if guard is not None:
                    return self._reject(task, event.step, tool.name, guard.message
                                        or f"rejected by a guard when {callee} answered",
                                        guard.at)
            elif tool.sends_to is not None:
                target = self.compiled.eval(tool.sends_to, scope)
                if target not in self.compiled.parties:
                    return self._reject(task, event.step, tool.name,
                                        f"no participant named {target!r} to send to")
                text = _handoff_text({k: v for k, v in args.items() if v != target})
                self._deliver(party, str(target), text, task.root)
                result = self.compiled.eval(tool.result, scope, f"sent to {target}")
            else:
                result = self.compiled.eval(tool.result, scope, "done")
            if tool.acl is not None and (tool.acl_when is None or truthy(
                    self.compiled.eval(tool.acl_when, scope))):
                principal = self.compiled.eval(tool.acl, scope)
                if principal is None:
                    return self._reject(task, event.step, tool.name,
                                        "no trusted principal accompanies this request")
                result = self._filter(result, principal)
            for effect in tool.effects:
                if effect.when is not None and not truthy(self.compiled.eval(effect.when, scope)):
                    continue
                self._apply(task, tool, effect, scope)
                scope = self.scope(context, args)
        except EvalError as exc:
            return self._reject(task, event.step, tool.name, f"tool failed: {exc}")
        recorded = self._result(task, event.step, tool.name, result)
        self.inducers.after_call(tool.name, scope)
        return recorded

    def _holds(self, party: PartyIR, tool: ToolIR) -> bool:
        """Whether the participant holds the tool now (its `tools … when` read again)."""
        return any(t is tool for t in self._available(party))

    def _failing_guard(self, tool: ToolIR, scope: Scope) -> GuardIR | None:
        """The first `require` guard that applies and does not hold (None: all hold)."""
        for guard in tool.guards:
            if guard.when is not None and not truthy(self.compiled.eval(guard.when, scope)):
                continue
            if not truthy(self.compiled.eval(guard.condition, scope)):
                return guard
        return None

    def _route(self, task: _Task, call_step: str, party: PartyIR, tool: ToolIR,
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
            routed_result = yield from self.call_tool(task, routed)
            return routed_result
        reply = yield from self.handle(
            target, Request(sender=task.party, text=_render_args(call),
                            sender_authority=self.authority[party.name],
                            via="delegation", sender_kind=party.kind),
            principal=task.principal, root=task.root, delegator=task.party,
            depth=task.depth + 1)
        return self._result(task, call_step, tool.name, reply)

    def _bind_args(self, tool: ToolIR, given: dict[str, Any]) -> tuple[dict[str, Any],
                                                                        str | None]:
        names = {p.name for p in tool.params}
        extra = sorted(set(given) - names)
        if extra:
            return {}, f"unknown argument{'s' if len(extra) > 1 else ''}: {', '.join(extra)}"
        args: dict[str, Any] = {}
        for p in tool.params:
            if p.name in given:
                value = given[p.name]
                problem = _check_value(value, p.type, self.compiled.world, p.name)
                if problem:
                    return {}, problem
                args[p.name] = value
            elif p.default is not None:
                args[p.name] = self.compiled.eval(p.default, self.scope())
            else:
                return {}, f"missing argument '{p.name}'"
        return args, None

    def _filter(self, result: Any, principal: str) -> Any:
        if isinstance(result, Row):
            allowed = set(self.authorizer.allowed(principal, result.record))
            return Row(result.record, {k: v for k, v in result.items() if k in allowed})
        if isinstance(result, list):
            return [self._filter(r, principal) for r in result]
        return result

    def _apply(self, task: _Task, tool: ToolIR, effect: Any, scope: Scope) -> None:
        value = self.compiled.eval(effect.value, scope)
        if effect.op == "append":
            record = self.compiled.records.get(effect.target)
            row = Row(effect.target, dict(value or {}))
            if record is not None:
                for f in record.fields:
                    if f.name not in row and f.default is not None:
                        row[f.name] = self.compiled.eval(f.default, scope)
            self.records.setdefault(effect.target, []).append(row)
            diff = {"append": {effect.target: to_json(dict(row))}}
        else:
            diff = {"set": {effect.target: {"from": to_json(self.states.get(effect.target)),
                                            "to": to_json(value)}}}
            self.states[effect.target] = value
            self.state_changes[effect.target] = self.state_changes.get(effect.target, 0) + 1
        self.trace.add(t=float(self.env.now), kind="state_update", actor=task.party,
                       tool=tool.name, diff=diff, task=task.id)
        self.version += 1
        self.inducers.after_state_change()

    def _reject(self, task: _Task, call_step: str, tool: str, reason: str,
                at: str | None = None) -> tuple[Any, bool]:
        self.trace.add(t=float(self.env.now), kind="tool_result", actor=task.party, tool=tool,
                       rejected=True, reason=reason, call=call_step, task=task.id,
                       result={"error": reason})
        return {"error": reason}, True

    def _result(self, task: _Task, call_step: str, tool: str, result: Any) -> tuple[Any, bool]:
        """Record a result; the caller gets the same plain-JSON value the trace holds."""
        plain = to_json(result)
        self.trace.add(t=float(self.env.now), kind="tool_result", actor=task.party, tool=tool,
                       result=plain, rejected=False, call=call_step, task=task.id)
        return plain, False


def _type_name(t: TypeIR) -> str:
    if t.kind == "list" and t.arg is not None:
        return f"list[{_type_name(t.arg)}]"
    if t.kind in ("enum", "record", "schema") and t.name:
        return t.name
    return t.kind


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
    """Why `value` does not fit type `t` (None when it does)."""
    kind = t.kind
    bad = f"argument '{name}' must be {_type_name(t)}, got {str(value)[:40]!r}"
    if value is None or kind in ("any", "row", "record"):
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else bad
    if kind == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else bad
    if kind in ("number", "money", "duration", "percent"):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else bad
    if kind in ("text", "date", "party", "tool", "document"):
        if not isinstance(value, str):
            return bad
        if kind == "text" and t.max is not None and len(value) > t.max:
            return f"argument '{name}' is {len(value)} characters; at most {t.max} are allowed"
        return None
    if kind == "enum":
        members = t.members or world.enums.get(t.name, [])
        if value not in members:
            return f"argument '{name}' must be one of {', '.join(members)}, got {value!r}"
        return None
    if kind == "list":
        if not isinstance(value, list):
            return bad
        for item in value:
            problem = _check_value(item, t.arg or TypeIR(kind="any"), world, name)
            if problem:
                return problem
        return None
    if kind == "schema":
        if not isinstance(value, dict):
            return bad
        fields = {f.name: f for f in world.schemas.get(t.name, [])}
        if t.name in world.closed_schemas:
            extra = sorted(set(value) - set(fields))
            missing = sorted(n for n in fields if n not in value and fields[n].default is None)
            if extra or missing:
                parts = ([f"unexpected {', '.join(extra)}"] if extra else []) + (
                    [f"missing {', '.join(missing)}"] if missing else [])
                return f"argument '{name}' does not match {t.name}: " + "; ".join(parts)
        for fname, f in fields.items():
            if fname in value:
                problem = _check_value(value[fname], f.type, world, f"{name}.{fname}")
                if problem:
                    return problem
        return None
    return None
