"""One episode of a compiled world on a simpy clock.

simpy owns simulated time: tool costs are timeouts, scripted actors and
inducer warnings are timed processes, a synchronous delegation is a nested
process the caller's tool call waits for. Agents are asynchronous
(`await agent.decide(...)`), so the episode is driven from an asyncio loop
that steps simpy and resolves each pending decision in a fixed order — which is
what keeps traces deterministic while letting LLM agents wait on a network.

The episode keeps the tasks and the wiring: the clock, the agents and their
pending decisions, each participant's memory, rank and display name. The rest
are parts it owns, each in its own module with the reason it is one:

- `CompiledWorld` (runtime/world.py): the world with its expressions compiled once,
  shared by all its episodes, and the types the parts share (`Task`, `Proc`);

- `EpisodeState` (runtime/state.py): levers, ledgers, state variables,
  calendar, principals and the evaluation scopes over them;
- `ToolRunner` (runtime/tools.py): validate → charge → guard → execute →
  filter → effects, atomic after the cost, and the tool lists agents see;
- `Topology` (runtime/messages.py): where an answer goes (forward, fork,
  merge, relay);
- `Inducers` (runtime/inducers.py): trait shifts, warnings and live
  dashboards, through the narrow `InducerHost` interface the episode gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import simpy

from eairdsl.agents.protocol import (
    Agent,
    MemoryItem,
    MemoryView,
    Observation,
    Reply,
    Request,
    ToolCall,
    ToolSpec,
)
from eairdsl.ir import EventIR, PartyIR
from eairdsl.runtime.evaluate import (
    EvalError,
    Scope,
    truthy,
)
from eairdsl.runtime.inducers import Inducers
from eairdsl.runtime.messages import Topology
from eairdsl.runtime.state import EpisodeState
from eairdsl.runtime.tools import ToolRunner
from eairdsl.runtime.trace import MAX_TRACE_CHARS, Trace, to_json
from eairdsl.runtime.values import Row
from eairdsl.runtime.world import (
    EVENTS_PER_SCRIPTED,
    MAX_EVENTS,
    MAX_EVENTS_CEILING,
    MAX_STEPS_PER_TASK,
    CompiledWorld,
    Proc,
    Task,
)

__all__ = ["CompiledWorld", "Episode", "EpisodeError", "MAX_STEPS_PER_TASK", "MAX_EVENTS",
           "EVENTS_PER_SCRIPTED", "MAX_EVENTS_CEILING", "AGENT_FAILED"]

#: how an agent whose `decide` raised is worded in `invalid` (stored reasons keep it)
AGENT_FAILED = ": agent failed: "
class EpisodeError(Exception):
    """The episode cannot continue; it is recorded as execution-invalid."""


_OBSERVATION_FIELDS = frozenset(Observation.model_fields)
_OBSERVATION_SET = set(_OBSERVATION_FIELDS)


def _observation(party: str, kind: str, card: str, time: float, task: int, step: int,
                 request: Request, memory: MemoryView, tools: list[ToolSpec],
                 traits: dict[str, float], principal: str | None, authority: int,
                 names: dict[str, str], dashboard: list[str],
                 power_holders: list[str] | None) -> Observation:
    """The `Observation` of one step, without validating what the runtime built itself.

    An observation is made at every step; pydantic's validation of it costs more than
    the step's tool call. Built directly, it is the model validation would give: the
    same request and memory view, and fresh copies of the lists and dicts (validation
    copies them too, so an agent never holds the runtime's own). Anything that is not
    already of its field's exact type — an int trait, say — goes through validation.
    """
    # Checked by the caller, once per episode: `names` (fixed as the episode starts).
    # Exact by construction: the specs (`CompiledWorld.tool_spec`), the dashboard lines
    # (`str(...)`) and the power holders (participant names from the IR).
    if (type(party) is str and type(kind) is str and type(card) is str
            and type(time) is float and type(task) is int and type(step) is int
            and type(request) is Request and type(authority) is int
            and (principal is None or type(principal) is str)
            and all(type(v) is float and type(k) is str for k, v in traits.items())):
        obs = Observation.__new__(Observation)
        object.__setattr__(obs, "__dict__", {
            "party": party, "kind": kind, "card": card, "time": time, "task": task,
            "step": step, "request": request, "memory": memory, "tools": list(tools),
            "traits": dict(traits), "principal": principal, "authority": authority,
            "names": dict(names), "dashboard": list(dashboard),
            "power_holders": None if power_holders is None else list(power_holders)})
        # every field is set, so no assignment can add to it: one set serves them all
        object.__setattr__(obs, "__pydantic_fields_set__", _OBSERVATION_SET)
        object.__setattr__(obs, "__pydantic_extra__", None)
        object.__setattr__(obs, "__pydantic_private__", None)
        return obs
    return _validated_observation(party, kind, card, time, task, step, request, memory, tools,
                                  traits, principal, authority, names, dashboard, power_holders)


def _validated_observation(party: str, kind: str, card: str, time: float, task: int,
                           step: int, request: Request, memory: MemoryView,
                           tools: list[ToolSpec], traits: dict[str, float],
                           principal: str | None, authority: int, names: dict[str, str],
                           dashboard: list[str],
                           power_holders: list[str] | None) -> Observation:
    """The `Observation` of one step, validated by pydantic."""
    return Observation(party=party, kind=kind, card=card, time=time, task=task, step=step,
                       request=request, memory=memory, tools=tools, traits=traits,
                       principal=principal, authority=authority, names=names,
                       dashboard=dashboard, power_holders=power_holders)


_MEMORY_FIELDS = frozenset({"kind", "task", "tool", "args", "result", "rejected"})


def _tool_memory(task: int, tool: str, args: Any, result: Any, rejected: bool) -> MemoryItem:
    """The memory item of a tool result, built directly like `_observation` (the same
    model validation gives: a copy of the arguments, the result as it is), validated
    when a value is not already of its field's exact type."""
    if (type(task) is int and type(tool) is str and type(rejected) is bool
            and type(args) is dict and all(type(k) is str for k in args)):
        item = MemoryItem.__new__(MemoryItem)
        object.__setattr__(item, "__dict__", {
            "kind": "tool_result", "task": task, "sender": None, "text": None, "tool": tool,
            "args": dict(args), "result": result, "rejected": rejected})
        object.__setattr__(item, "__pydantic_fields_set__", set(_MEMORY_FIELDS))
        object.__setattr__(item, "__pydantic_extra__", None)
        object.__setattr__(item, "__pydantic_private__", None)
        return item
    return MemoryItem(kind="tool_result", task=task, tool=tool, args=args, result=result,
                      rejected=rejected)


#: The name tests and older callers import; the task is `runtime.world.Task`.
_Task = Task


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
    #: participants whose `decide` raised (their reasons are in `invalid` too): an
    #: episode nobody played to the end, which is never measured
    failed_decisions: list[str] = field(default_factory=list)
    #: whether inducers shift the sim traits — standing ones as the episode starts,
    #: warnings when they fire (the `sim` profile, not the self-test profiles)
    shift_traits: bool = True

    def __post_init__(self) -> None:
        w = self.compiled.world
        self.env = simpy.Environment()
        self.pending: list[tuple[Agent, Observation, simpy.Event]] = []
        self.active = 0  # tasks running
        self.scheduled = 0  # scripted events not yet done
        self.tasks = 0  # task ids handed out
        self.memory: dict[str, list[MemoryItem]] = {p.name: [] for p in w.parties}
        # A model plays a participant when its agent is labelled `llm:MODEL` (an LLM
        # agent, live or replayed), as the trace header records it.
        models = frozenset(name for name, agent in self.agents.items()
                           if str(getattr(agent, "label", "")).startswith("llm:"))
        self.state = EpisodeState(self.compiled, self.condition, self.instance, self.trace,
                                  self.env, models)
        # Rank and display names may depend on the condition and the instance.
        self.authority: dict[str, int] = {}
        self.names: dict[str, str] = {}
        for party in w.parties:
            rank = party.authority
            if party.authority_expr is not None:
                value = self.compiled.eval(party.authority_expr, self.state.scope())
                rank = int(value) if isinstance(value, (int, float)) else 0
            self.authority[party.name] = rank
            if party.display is not None:
                shown = self.compiled.eval(party.display, self.state.scope())
                if isinstance(shown, str) and shown:
                    self.names[party.name] = shown
        self.power_holders = self._power_holders()
        #: display names are all plain text (observations need not validate them)
        self._plain_names = all(type(k) is str and type(v) is str for k, v in self.names.items())
        self.topology = Topology(self.compiled, self.state)
        self.inducers = Inducers(self.compiled, self.state, self)
        self.tools = ToolRunner(self.compiled, self.state, self.env, self.trace, self.inducers,
                                self)
        self.inducers.shift_at_start()

    def _power_holders(self) -> dict[str, list[str]]:
        """Per role, who holds enacted power over its consequences (`Observation.power_holders`).

        A `power` inducer with `from HOLDER` declares that HOLDER decides the
        consequences of the roles it covers; it holds that power in an episode
        whose start state turns its `when` true. Roles that no such inducer covers
        are absent: the world says nothing about power over them.
        """
        w = self.compiled.world
        roles = [p.name for p in w.parties if p.kind == "role"]
        out: dict[str, list[str]] = {}
        for inducer in w.inducers:
            if inducer.kind != "power" or inducer.sender is None:
                continue
            covered = inducer.roles or roles
            try:
                on = inducer.when is None or truthy(
                    self.compiled.eval(inducer.when, self.state.scope()))
            except EvalError as exc:
                self.invalid.append(f"inducer {inducer.name}: {exc}")
                on = False
            for role in covered:
                holders = out.setdefault(role, [])
                if on and inducer.sender not in holders:
                    holders.append(inducer.sender)
        return {role: sorted(holders) for role, holders in out.items()}

    # ------------------------------------------------------------ what parts may see
    @property
    def records(self) -> dict[str, list[Row]]:
        """The episode's ledgers and tables (the live state's)."""
        return self.state.records

    @property
    def states(self) -> dict[str, Any]:
        """The episode's state variables (the live state's)."""
        return self.state.states

    def scope(self, context: dict[str, Any] | None = None,
              args: dict[str, Any] | None = None) -> Scope:
        """A fresh evaluation context on the live state (`EpisodeState.scope`)."""
        return self.state.scope(context, args)

    def fail(self, reason: str) -> None:
        """Record why the episode is execution-invalid (it carries on)."""
        self.invalid.append(reason)

    def busy(self) -> bool:
        """Whether a task is running or a scripted event is still to come."""
        return self.active > 0 or self.scheduled > 0

    def note(self, sender: str, recipient: str, text: str) -> None:
        """A note (a fired warning) in the trace and in the recipient's memory."""
        self.trace.add(t=float(self.env.now), kind="message", actor=sender,
                       recipient=recipient, edge=f"{sender}->{recipient}", content=text)
        self.memory[recipient].append(MemoryItem(kind="note", task=0, sender=sender, text=text))

    # ------------------------------------------------------------ driving
    async def run(self) -> None:
        for party in self.compiled.world.parties:
            for scheduled in party.events:
                self.env.process(self._scheduled(party, scheduled))
        self.inducers.start()
        processed = 0
        env = self.env
        peek, step, never = env.peek, env.step, float("inf")
        budget = self.compiled.event_budget
        trace = self.trace
        while True:
            if self.pending:
                batch, self.pending = self.pending, []
                for agent, obs, event in batch:
                    try:
                        action = await agent.decide(obs)
                    except Exception as exc:
                        self.invalid.append(f"{obs.party}{AGENT_FAILED}{exc}")
                        self.failed_decisions.append(obs.party)
                        action = Reply(text="")
                    event.succeed(action)
                continue
            if peek() == never:
                break
            processed += 1
            if processed > budget:
                self.invalid.append(f"event budget of {budget} exhausted")
                break
            step()
            if trace.chars > MAX_TRACE_CHARS:
                self.invalid.append(f"trace budget exhausted: more than {MAX_TRACE_CHARS:,} "
                                    "characters of messages and results recorded")
                break

    def _scheduled(self, party: PartyIR, event: EventIR) -> Proc:
        self.scheduled += 1
        try:
            yield from self._scheduled_event(party, event)
        finally:
            self.scheduled -= 1

    def _scheduled_event(self, party: PartyIR, event: EventIR) -> Proc:
        at = float(self.compiled.eval(event.at, self.state.scope()) or 0)
        yield self.env.timeout(max(0.0, at))
        if event.when is not None and not truthy(
                self.compiled.eval(event.when, self.state.scope())):
            return
        to = event.to
        if event.to_expr is not None:  # `say … to EXPR`: whoever it names now
            to = self.compiled.eval(event.to_expr, self.state.scope())
            if not isinstance(to, str) or to not in self.compiled.parties:
                self.invalid.append(f"{party.name}: no participant named {to!r} to address")
                return
        turn: int | None = None
        if event.kind == "say":
            text = self.compiled.eval(event.message, self.state.scope())
            text = "" if text is None else str(text)
            if party.kind == "simulator" and party.name in self.agents and not event.verbatim:
                turn, text = yield from self._turn(party, to, text)
        else:
            text = yield from self._opening(party, to)
        reply = yield from self.handle(to, Request(sender=party.name, text=text,
                                                   sender_authority=self.authority[party.name],
                                                   sender_kind=party.kind),
                                       principal=None, root=self.state.principal_of(party.name),
                                       delegator=None, depth=0)
        if turn is not None and reply:  # what the contact gave it, for its later turns
            self.memory[party.name].append(MemoryItem(kind="message", task=turn, sender=to,
                                                      text=reply))

    def _turn(self, party: PartyIR, to: str, script: str) -> Proc:
        """A simulator's scripted line (`say`), said by its agent: returns (task, text).

        The world's text is the line as scripted. The offline agent says it as it
        is (`Request.script`); a generative one — the fixed counterpart model — is
        briefed with it and words its own message. The recipient's answer comes
        back into the simulator's memory under this task, so a later turn knows
        what earlier contacts gave it.
        """
        self.tasks += 1
        task = self.tasks
        shown = self.names.get(to, to)
        request = Request(sender=to, text=f"You are contacting {shown}. What this contact is "
                          f"about, to say in your own words:\n{script}", script=script)
        self.memory[party.name].append(MemoryItem(kind="message", task=task, sender=to,
                                                  text=request.text))
        obs = Observation(party=party.name, kind=party.kind, card=self.card(party.name),
                          time=float(self.env.now), task=task, step=0, request=request,
                          memory=MemoryView(self.memory[party.name]), tools=[],
                          traits=self.traits.get(party.name, {}), names=self.names)
        action = yield from self._decide(self.agents[party.name], obs)
        text = action.text if isinstance(action, Reply) else ""
        return task, text or script

    def _opening(self, party: PartyIR, to: str) -> Proc:
        """A counterpart simulator opens a conversation by deciding its first message."""
        agent = self.agents.get(party.name)
        if agent is None:
            return party.objective or f"Hello, this is {party.name}."
        self.tasks += 1
        obs = Observation(party=party.name, kind=party.kind, card=self.card(party.name),
                          time=float(self.env.now), task=self.tasks, step=0,
                          request=Request(sender=to, text="You are contacting "
                                          f"{self.names.get(to, to)}."),
                          memory=MemoryView(self.memory[party.name]), tools=[],
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
    def card(self, party: str) -> str:
        """The card `party` sees under this episode's condition (empty when it has none)."""
        return self.compiled.world.prompts.get(party, {}).get(self.condition, "")

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
        task = Task(self.tasks, party_name, request, principal, root, delegator, depth)
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
        card = self.card(party_name)
        power_holders = self.power_holders.get(party_name)
        observe = _observation if self._plain_names else _validated_observation
        for step in range(MAX_STEPS_PER_TASK):
            obs = observe(party_name, party.kind, card, float(self.env.now), task.id,
                          step, request, MemoryView(self.memory[party_name]),
                          self.tools.specs_for(party), self.traits.get(party_name, {}),
                          principal, self.authority[party_name], self.names,
                          self.inducers.dashboard(party_name), power_holders)
            action = yield from self._decide(agent, obs)
            if isinstance(action, Reply):
                self.trace.add(t=float(self.env.now), kind="message", actor=party_name,
                               recipient=request.sender, edge=f"{party_name}->{request.sender}",
                               content=action.text, task=task.id, final=depth == 0 or None)
                if depth == 0:
                    for target, text in self.topology.pass_on(party_name, request.sender,
                                                              action.text):
                        self.deliver(party, target, text, root)
                return action.text
            # the arguments as plain JSON, once: the trace event keeps them, the memory a copy
            plain = to_json(action.args)
            result, rejected = yield from self.tools.call(task, action, plain)
            self.memory[party_name].append(_tool_memory(task.id, action.tool, plain, result,
                                                        rejected))
        self.invalid.append(f"{party_name} exceeded {MAX_STEPS_PER_TASK} steps in one task")
        self.trace.add(t=float(self.env.now), kind="decision", actor=party_name,
                       content="step budget exhausted without a reply", task=task.id)
        return ""

    def deliver(self, sender: PartyIR, target: str, text: str, root: str | None) -> None:
        """Start a top-level task for `target` with `text` from `sender`; returns at once."""
        self.env.process(self.handle(target, Request(sender=sender.name, text=text,
                                                     sender_authority=self.authority[sender.name],
                                                     sender_kind=sender.kind),
                                     principal=None, root=root, delegator=None, depth=0))

    # ------------------------------------------------------------ tools
    def call_tool(self, task: Task, call: ToolCall) -> Proc:
        """One tool call (`ToolRunner.call`): returns (result, rejected)."""
        return self.tools.call(task, call)
