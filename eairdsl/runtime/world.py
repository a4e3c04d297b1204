"""The compiled world and the types an episode's parts share.

`CompiledWorld` is a `World` (the IR) with every expression compiled once and what
its episodes read of it worked out once: tools, parties and records by name, the
authorization matrix, which tool lists and hints can change, the inducer plan and
the event budget. Every part of an episode (`EpisodeState`, `ToolRunner`,
`Topology`, `Inducers`, the `Episode` itself) reads it; it lives here, below them
all, so that none of them imports the episode to name its type (it lived in
`engine.py`, which made a five-module circle of type-only imports).

`Task` (one request a participant is handling) and `Proc` (a simpy process) are
shared the same way: the tool runner makes tasks, the episode schedules them and
the inducers run processes.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from eairdsl.agents.protocol import ParamSpec, Request, ToolSpec
from eairdsl.ir import (
    AppendEffect,
    DashboardInducer,
    Expr,
    Ref,
    ToolIR,
    WarningInducer,
    World,
    walk_expr,
)
from eairdsl.runtime.conform import type_name
from eairdsl.runtime.evaluate import (
    AuthorizationMatrix,
    LetTable,
    Scope,
    compile_expr,
    is_stable,
    reads_trace_or_clock,
)
from eairdsl.runtime.values import Row, StaticRows

__all__ = ["CompiledWorld", "InducerPlan", "Proc", "Task", "MAX_STEPS_PER_TASK", "MAX_EVENTS",
           "EVENTS_PER_SCRIPTED", "MAX_EVENTS_CEILING"]

MAX_STEPS_PER_TASK = 16
#: simulated events one episode may process, before the world's own workload: the
#: budget stops a runaway episode (messages passed round a loop), not a long one
MAX_EVENTS = 5000
#: events more per scripted event the world declares (a request's message, steps, tool
#: calls, results and timeouts come to about 10; a task may take 16 steps)
EVENTS_PER_SCRIPTED = 64
#: the budget's ceiling, however many scripted events a world declares
MAX_EVENTS_CEILING = 200_000

Proc = Generator[Any, Any, Any]


@dataclass
class Task:
    """One request a participant is handling: the context its tool calls are made in."""

    id: int
    party: str
    request: Request
    principal: str | None
    root: str | None
    delegator: str | None
    depth: int


class InducerPlan:
    """What a world's inducers need at run time, worked out once per world."""

    def __init__(self, world: World) -> None:
        # Warnings that fire after a tool call (`on TOOL`), by tool.
        self.on_tool: dict[str, list[WarningInducer]] = {}
        for inducer in world.inducers:
            if isinstance(inducer, WarningInducer) and inducer.on is not None:
                self.on_tool.setdefault(inducer.on, []).append(inducer)
        # Dashboards whose text reads the episode: re-read into every observation,
        # cached until something they read changes (never, if one reads the trace or
        # the clock).
        self.live_dashboards = [i for i in world.inducers
                                if isinstance(i, DashboardInducer) and i.text_expr is not None]
        self.volatile_dashboards = any(
            reads_trace_or_clock(e, world.lets) for i in self.live_dashboards
            for e in (i.text_expr, i.when))
        read = [x for i in self.live_dashboards for x in walk_expr(i.text_expr, world.lets)
                if isinstance(x, Ref) and x.kind in ("record", "state")]
        self.dashboard_records = sorted({x.name for x in read if x.kind == "record"})
        self.dashboard_states = sorted({x.name for x in read if x.kind == "state"})
        #: what a change to bumps `EpisodeState.watched_version`
        self.watched = frozenset(self.dashboard_records) | frozenset(self.dashboard_states)


class CompiledWorld:
    """A World with every expression compiled once, shared by all its episodes."""

    def __init__(self, world: World) -> None:
        self.world = world
        self._fns: dict[int, tuple[Expr, Any]] = {}
        self.tools = {t.name: t for t in world.tools}
        self.parties = {p.name: p for p in world.parties}
        self.records = {r.name: r for r in world.records}
        self.conditions = {c.name: c for c in world.conditions}
        self.mutable = {e.target for t in world.tools for e in t.effects
                        if isinstance(e, AppendEffect)}
        # Tables no tool appends to are built once and shared (rows are never mutated).
        self.static_rows = {r.name: StaticRows(r.name, [Row(r.name, row) for row in r.rows])
                            for r in world.records if r.name not in self.mutable}
        self.lets = LetTable(world.lets, self.mutable)
        #: who may see which fields: a property of the world, read once for its episodes
        self.authorization = AuthorizationMatrix(world)
        # Participants whose tool lists depend on more than the state (trace, clock).
        self.volatile_tool_lists = {
            p.name for p in world.parties
            if any(reads_trace_or_clock(r.when, world.lets) for r in p.tools)}
        # Tools whose argument hints cannot change during an episode: specced once.
        self.stable_hints = {t.name for t in world.tools
                             if all(is_stable(p.hint, world.lets, self.mutable)
                                    for p in t.params)}
        # Participants whose tool lists cannot change during an episode (every `when`
        # reads only levers, the instance, static tables): read once per episode; and
        # of those, the ones whose every tool is specced once too.
        self.fixed_tool_lists = {
            p.name for p in world.parties
            if all(is_stable(r.when, world.lets, self.mutable) for r in p.tools)}
        self.fixed_specs = {
            p.name for p in world.parties if p.name in self.fixed_tool_lists
            and all(r.name in self.stable_hints for r in p.tools)}
        self._tool_specs: dict[tuple[str, str], ToolSpec] = {}
        self._access: dict[str, tuple[list[str], list[str]]] = {}
        self._arg_plans: dict[str, tuple[frozenset[str], list[frozenset[type] | None]]] = {}
        self.inducers = InducerPlan(world)
        #: simulated events one episode may process: MAX_EVENTS, and EVENTS_PER_SCRIPTED
        #: more per scripted event (1,000 scripted requests need about 10,000), capped
        self.event_budget = min(MAX_EVENTS_CEILING, MAX_EVENTS + EVENTS_PER_SCRIPTED * sum(
            len(p.events) for p in world.parties))

    def fn(self, expr: Expr) -> Any:
        """The compiled form of `expr`, made once. Keyed by identity, so the entry keeps
        the expression alive: a freed expression's id could otherwise be reused by a new
        one and find the old one's function."""
        hit = self._fns.get(id(expr))
        if hit is None or hit[0] is not expr:
            hit = self._fns[id(expr)] = (expr, compile_expr(expr, self.lets))
        return hit[1]

    def eval(self, expr: Expr | None, scope: Scope, default: Any = None) -> Any:
        return default if expr is None else self.fn(expr)(scope)

    def tool_spec(self, tool: ToolIR, hints: list[Any]) -> ToolSpec:
        """A tool as agents see it, given its parameters' hints (plain JSON values): made
        once per tool and hints and shared by the world's episodes."""
        key = (tool.name, repr(hints))  # repr tells 1, 1.0 and true apart
        spec = self._tool_specs.get(key)
        if spec is None:
            params = []
            for p, hint in zip(tool.params, hints, strict=True):
                members = list(p.type.members)
                if p.type.kind == "document":
                    members = [d.name for d in self.world.documents]
                elif p.type.kind == "party":
                    members = [q.name for q in self.world.parties if q.kind != "actor"]
                params.append(ParamSpec(name=p.name, type=type_name(p.type),
                                        required=p.default is None, members=members, hint=hint))
            reads, writes = self.access(tool)
            spec = self._tool_specs[key] = ToolSpec(
                name=tool.name, kind=tool.kind, description=tool.description, params=params,
                delegates=bool(tool.delegates_to), reads=reads, writes=writes)
        return spec

    def arg_plan(self, tool: ToolIR) -> tuple[frozenset[str], list[frozenset[type] | None]]:
        """A tool's parameter names, and per parameter the Python types whose values fit
        its type outright (None: ask `conform.misfit`), worked out once per world."""
        plan = self._arg_plans.get(tool.name)
        if plan is None:
            plan = self._arg_plans[tool.name] = (
                frozenset(p.name for p in tool.params),
                [_plain_types(p.type.kind, p.type.max) for p in tool.params])
        return plan

    def access(self, tool: ToolIR) -> tuple[list[str], list[str]]:
        """Records a tool reads (in its result and guards) and ledgers it appends to."""
        if tool.name not in self._access:
            reads: set[str] = set()
            for e in (tool.result, *(g.condition for g in tool.guards)):
                reads |= {x.name for x in walk_expr(e, self.world.lets)
                          if isinstance(x, Ref) and x.kind == "record"}
            writes = sorted({e.target for e in tool.effects if isinstance(e, AppendEffect)})
            self._access[tool.name] = (sorted(reads), writes)
        return self._access[tool.name]


#: Python types whose every value fits a type kind (conform.misfit says so without looking
#: further); a `bool` is never a number, `type(True) is int` is false
_PLAIN_TYPES: dict[str, frozenset[type]] = {
    "bool": frozenset({bool}), "int": frozenset({int}),
    **dict.fromkeys(("number", "money", "duration", "percent"), frozenset({int, float})),
    **dict.fromkeys(("text", "date", "party", "tool", "document"), frozenset({str}))}


def _plain_types(kind: str, max_length: int | None) -> frozenset[type] | None:
    if kind == "text" and max_length is not None:
        return None  # its length is checked too
    return _PLAIN_TYPES.get(kind)
