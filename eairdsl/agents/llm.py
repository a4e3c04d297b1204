"""`llm`: agents that decide through `litellm.acompletion`, with faults, costs and a cassette.

One `LLMAgent` per participant bound to a model. Each decision sends:

- the participant's rendered role card as the system prompt;
- its private conversation, rebuilt from `Observation.memory` and the agent's
  own earlier turns: every request it handled is a user message, every tool
  call it made an assistant message with that call, every result (or
  rejection) a tool message, every answer it gave an assistant message;
- the tools it may call right now, as JSON schemas from the world's tool
  signatures (`eairdsl.agents.schema`).

Malformed model output is never an exception: an unknown tool, arguments that
are not a JSON object (passed on as `{"__invalid_json__": raw}`) or arguments
that violate the tool's types all go to the runtime as a `ToolCall`, which
rejects them like any other bad call — a trace event, and a rejected tool
result the model sees on its next turn. An empty reply becomes a call of the
non-existent tool `__empty_reply__`, rejected the same way. A participant
gets at most `max_tool_calls` tool calls per task; after that it is asked to
answer with tools disabled.

Transport faults (rate limits, timeouts, 5xx, dropped connections) are retried
with exponential backoff and seeded jitter (at least the provider's Retry-After)
within a total budget; a per-request timeout bounds every attempt. When the
budget is spent, `decide` raises `LLMUnavailable`, which the runtime records
as execution-invalid with the reason; the other participants of that episode
then fail fast, and the rest of the run carries on.

Requests to one provider and endpoint share an asyncio semaphore
(`max_connections`, one per event loop for every model on that provider), so
episodes run concurrently in one event loop (`eairdsl.api.run_episodes_concurrently`
— the runner lives after the API in the pipeline; nothing under `eairdsl.agents`
imports `eairdsl.api`) use the time spent waiting on the API. Tokens and cost
(litellm's cost map, read offline) are summed per participant and per episode
(`episode_usage`).

litellm is imported on the first live request, or before it on a background
thread (`prefetch_litellm`, which studies and runs of live models call as they
begin); never when this module is imported, and not at all when a cassette is
replayed. Where an (opt-in) litellm transport process runs
(`eairdsl.agents.transport`), each attempt's litellm call is made there
instead and comes back as the same normalised answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, PrivateAttr

from eairdsl.agents import openai_http
from eairdsl.agents.cassette import (
    Cassette,
    CassetteError,
    CassetteMiss,
    canonical_json,
    request_key,
)
from eairdsl.agents.protocol import MemoryItem, Observation, Reply, Request, ToolCall
from eairdsl.agents.provider import (
    _as_text,
    _clean_text,
    _describe,
    _normalise,
    _retry_after,
    _retryable,
    litellm_ready,
    load_litellm,
    prefetch_litellm,
)
from eairdsl.agents.schema import tool_definitions

if TYPE_CHECKING:
    from eairdsl.ir import PartyIR, World


class _CompiledWorld(Protocol):
    """What the wiring reads of a `runtime.world.CompiledWorld`: its IR. A protocol, since
    the agents come before the runtime and may not import it, not even for a type."""

    @property
    def world(self) -> World: ...

__all__ = ["BINDINGS", "EMPTY_REPLY_TOOL", "INVALID_JSON_ARG", "EpisodeLLM", "LLMAgent",
           "alternate",
           "LLMClient", "LLMSettings", "LLMUnavailable", "Usage", "call_record", "episode_calls",
           "episode_usage", "llm_agents",
           "litellm_ready", "load_litellm", "needs_litellm", "prefetch_litellm"]

EMPTY_REPLY_TOOL = "__empty_reply__"
INVALID_JSON_ARG = "__invalid_json__"
#: The model bindings a participant can declare; `fixed` is played like `counterpart`.
BINDINGS = ("under_test", "counterpart", "judge", "fixed")
_BUDGET_NOTE = ("You have used all the tool calls allowed for this request. Answer now in "
                "plain text with what you have.")
_EMPTY_NOTE = ("Your previous turn was empty. Call one of your tools or answer in plain "
               "text.")


class LLMUnavailable(Exception):
    """A model could not answer within the retry budget (or failed for good)."""


# ---------------------------------------------------------------- settings
class LLMSettings(BaseModel):
    """Model bindings, transport limits and the cassette of one run.

    One settings object is one run: its client (cassette, semaphores, retry
    statistics) is created on first use and shared by every episode.
    """

    #: litellm model string for participants bound `under_test`.
    model: str | None = None
    #: Fixed model for counterpart simulators (and `fixed`); defaults to `model`.
    counterpart_model: str | None = None
    #: Fixed model for LLM judges (eairdsl.judges); defaults to `counterpart_model`, `model`.
    judge_model: str | None = None
    #: Per-participant overrides, e.g. {"specialist": "anthropic/claude-3-5-haiku-latest"}.
    role_models: dict[str, str] = {}
    api_base: str | None = None
    #: Sampling temperature sent with every request (None: the provider's default).
    temperature: float | None = None
    #: Cap on the tokens of each answer (None: the provider's default).
    max_tokens: int | None = None
    #: Sampling seed sent with every request; providers that ignore it drop it
    #: (litellm's drop_params).
    seed: int | None = None
    #: Concurrent requests per provider.
    max_connections: int = 8
    #: Episodes in flight in `eairdsl.api.run_episodes_concurrently`
    #: (default max(64, 8 × max_connections)).
    max_episodes: int | None = None
    #: Seconds per request attempt.
    timeout: float = 60.0
    #: Retries after the first attempt, on rate limits, timeouts and 5xx.
    retries: int = 4
    #: Seconds all attempts and backoff sleeps of one request may take together.
    retry_budget: float = 300.0
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    #: Tool calls a participant may make while handling one request.
    max_tool_calls: int = 12
    record: Path | None = None
    replay: Path | None = None
    #: Extra keyword arguments for litellm.acompletion (e.g. api_key, mock_response).
    completion_kwargs: dict[str, Any] = {}
    #: Live requests through litellm transport processes (`eairdsl.agents.transport`),
    #: which studies and runs then start: None as EAIR_LLM_TRANSPORTS says (off unless
    #: set, and only where they answer as this process would), True always, False never.
    transport: bool | None = None

    _client: LLMClient | None = PrivateAttr(default=None)

    @property
    def active(self) -> bool:
        """Whether some participant gets a model: a counterpart model alone is a mixed run
        (the roles under test stay sim), not a sim run that ignores it."""
        return bool(self.model or self.counterpart_model or self.role_models)

    def model_for(self, party: PartyIR) -> str | None:
        """The model that plays `party`, or None to leave it to the sim backend."""
        if party.name in self.role_models:
            return self.role_models[party.name]
        if party.model in ("counterpart", "fixed"):
            return self.counterpart_model or self.model
        if party.model == "judge":
            return self.judge_model or self.counterpart_model or self.model
        return self.model

    def judge(self) -> str | None:
        return self.judge_model or self.counterpart_model or self.model

    def header(self) -> dict[str, Any]:
        """What a trace header records of these settings: models and sampling options.

        Only options that were set; never endpoints, keys or transport limits.
        """
        out: dict[str, Any] = {"model": self.model, "counterpart_model": self.counterpart_model,
                               "judge_model": self.judge_model,
                               "role_models": dict(sorted(self.role_models.items())) or None,
                               "temperature": self.temperature,
                               "max_tokens": self.max_tokens, "seed": self.seed}
        return {k: v for k, v in out.items() if v is not None}

    def client(self) -> LLMClient:
        if self._client is None:
            self._client = LLMClient(self)
        return self._client

    def replay_error(self) -> str | None:
        """The first replay miss of this run (a located message), if any."""
        return self._client.misses[0] if self._client and self._client.misses else None


# ---------------------------------------------------------------- usage
class Usage(BaseModel):
    """Tokens and cost of some calls. Deterministic given the responses (no retry counts)."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    #: Outputs the backend turned into rejected calls (unknown tool, bad JSON, empty reply).
    malformed: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cost = round(self.cost + other.cost, 10)
        self.malformed += other.malformed


#: The loop attribute holding that loop's semaphore of each provider@endpoint (see
#: `LLMClient.semaphore`). Held by the loop, not by a module table keyed on it: a
#: semaphore that has had waiters refers to its loop, so a WeakKeyDictionary entry kept
#: every such loop (and all it held) alive for the life of the process.
_SEMAPHORES = "_eair_llm_semaphores"


class LLMClient:
    """The transport of one run: cassette, per-provider semaphores, retries, usage."""

    def __init__(self, settings: LLMSettings) -> None:
        if settings.record and settings.replay:
            raise CassetteError("--record and --replay exclude each other")
        self.settings = settings
        self.cassette: Cassette | None = None
        if settings.replay is not None:
            self.cassette = Cassette(settings.replay, "replay")
        elif settings.record is not None:
            self.cassette = Cassette(settings.record, "record")
        self.misses: list[str] = []
        self.retries = 0
        self.requests = 0
        self._routes: dict[str, openai_http.Route | None] = {}

    @property
    def replaying(self) -> bool:
        return self.cassette is not None and self.cassette.mode == "replay"

    def semaphore(self, model: str) -> asyncio.Semaphore:
        """The bound on requests in flight to `model`'s provider and endpoint.

        Shared by every client of this event loop, so the models of a study that
        go to one provider (two `openai/...` models on one `--api-base`) share
        `max_connections` instead of each getting its own.
        """
        loop = asyncio.get_running_loop()
        table: dict[str, asyncio.Semaphore] | None = getattr(loop, _SEMAPHORES, None)
        if table is None:
            table = {}
            setattr(loop, _SEMAPHORES, table)
        provider = model.split("/", 1)[0] if "/" in model else model
        limit = max(1, self.settings.max_connections)
        key = f"{provider}@{self.settings.api_base or ''}#{limit}"
        if key not in table:
            table[key] = asyncio.Semaphore(limit)
        return table[key]

    def request(self, model: str, messages: list[dict[str, Any]],
                tools: list[dict[str, Any]] | None = None,
                tool_choice: str | None = None) -> dict[str, Any]:
        """The canonical request: what decides the answer (the cassette key hashes it)."""
        req: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            req["tools"] = tools
            req["tool_choice"] = tool_choice or "auto"
        if self.settings.temperature is not None:
            req["temperature"] = self.settings.temperature
        if self.settings.max_tokens is not None:
            req["max_tokens"] = self.settings.max_tokens
        if self.settings.seed is not None:
            req["seed"] = self.settings.seed
        return req

    async def complete(self, request: dict[str, Any], scope: str, counters: dict[str, int],
                       rng: random.Random, where: str = "",
                       meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """One answer: from the cassette when replaying, else from litellm with retries.

        `meta`, when given, receives `attempts` (recorded in the cassette, so a
        replay reports the same) and `latency` (wall-clock seconds, None on replay).
        """
        meta = {} if meta is None else meta
        meta.setdefault("attempts", 1)
        meta.setdefault("latency", None)
        if self.misses:
            raise CassetteMiss(f"not asked: the replay already failed ({self.misses[0]})")
        occurrence = 0
        if self.cassette is not None:  # answers are keyed by request and occurrence
            key = request_key(request, scope)
            occurrence = counters.get(key, 0)
            counters[key] = occurrence + 1
        if self.replaying:
            assert self.cassette is not None
            try:
                entry = self.cassette.lookup(request, scope, occurrence, where)
            except CassetteMiss as miss:
                self.misses.append(str(miss))
                raise
            meta["attempts"] = int(entry.get("attempts", 1))
            self.retries += meta["attempts"] - 1  # as recorded: the run's summary agrees
            if "error" in entry:
                raise LLMUnavailable(str(entry["error"]))
            return dict(_clean_text(entry["response"]))
        try:
            response = await self._live(request, rng, meta)
        except LLMUnavailable as exc:
            if self.cassette is not None:
                self.cassette.store(request, scope, occurrence, error=str(exc),
                                    attempts=meta["attempts"])
            raise
        if self.cassette is not None:
            self.cassette.store(request, scope, occurrence, response=response,
                                attempts=meta["attempts"])
        return response

    def route(self, model: str) -> openai_http.Route | None:
        """The native route of `model` (`eairdsl.agents.openai_http`), or None for litellm;
        decided once per model and run."""
        if model not in self._routes:
            s = self.settings
            found = self._routes[model] = openai_http.route(model, s.api_base,
                                                            s.completion_kwargs)
            if found is not None:  # read the cost map's names while the first request waits
                openai_http.warm_prices()
        return self._routes[model]

    async def _live(self, request: dict[str, Any], rng: random.Random,
                    meta: dict[str, Any]) -> dict[str, Any]:
        from eairdsl.agents import transport as transports

        s = self.settings
        model = request["model"]
        native = self.route(model)
        kwargs: dict[str, Any] = {}
        if native is None:
            kwargs = {**request, "timeout": s.timeout, "num_retries": 0, "drop_params": True,
                      **s.completion_kwargs}
            if s.api_base:
                kwargs.setdefault("api_base", s.api_base)
        usable = native is None and s.transport is not False \
            and transports.json_only(s.completion_kwargs)
        semaphore = self.semaphore(model)
        limit = max(1, s.max_connections)
        spent = 0.0
        attempts = 0
        begun = time.monotonic()
        while True:
            attempts += 1
            meta["attempts"] = attempts
            async with semaphore:
                started = time.monotonic()
                try:
                    self.requests += 1
                    if native is not None:  # no litellm: one POST on a pooled connection
                        try:
                            data = await asyncio.wait_for(
                                openai_http.post(native, request, limit), s.timeout)
                        except openai_http.NativeError as failure:
                            if not failure.litellm_words:
                                raise
                            loaded = time.monotonic()  # the import is no part of it
                            litellm = await _litellm_async()
                            started += time.monotonic() - loaded
                            raise openai_http.litellm_error(failure, model, litellm) from None
                        answer = openai_http.plain(data)
                        if answer is None or openai_http.needs_litellm_cost(data, model):
                            # litellm converts or prices this answer; its import is no
                            # part of the attempt (as below)
                            loaded = time.monotonic()
                            litellm = await _litellm_async()
                            started += time.monotonic() - loaded
                            if answer is None:
                                return openai_http.litellm_normalise(data, model, litellm)
                            answer["cost"] = openai_http.cost(data, model, litellm)
                        return answer
                    # each attempt picks its carrier: a transport that died since leaves
                    # the retry to this process
                    carrier = transports.active() if usable else None
                    # litellm's import (here, or in a transport child still starting) is
                    # no part of the attempt: a first request must not time out, or
                    # spend its retry budget, waiting for it
                    if carrier is not None:  # litellm's CPU in the transport's process
                        await carrier.wait_ready()
                        started = time.monotonic()
                        return await asyncio.wait_for(carrier.call(kwargs), s.timeout)
                    litellm = await _litellm()
                    started = time.monotonic()
                    raw = await asyncio.wait_for(litellm.acompletion(**kwargs), s.timeout)
                    return _normalise(raw, model, litellm)
                except Exception as exc:  # classified below
                    error = exc
                finally:
                    spent += time.monotonic() - started
                    meta["latency"] = round(time.monotonic() - begun, 6)
            if not _retryable(error):
                raise LLMUnavailable(f"{model}: {_describe(error)}") from None
            delay = min(s.backoff_max, s.backoff_base * 2 ** (attempts - 1))
            delay *= 0.5 + 0.5 * rng.random()  # "equal jitter", seeded per participant
            asked = _retry_after(error)
            if asked is not None and asked > delay:  # the provider knows its rate window
                delay = asked
            if attempts > s.retries or spent + delay > s.retry_budget:
                wait = "" if asked is None or attempts > s.retries else \
                    f"; the provider asked to wait {asked:g}s, beyond the retry budget"
                raise LLMUnavailable(
                    f"{model}: no answer after {attempts} attempt(s) in {spent:.1f}s "
                    f"(last: {_describe(error)}{wait})") from None
            self.retries += 1
            await asyncio.sleep(delay)
            spent += delay


def needs_litellm(settings: LLMSettings | None, models: Iterable[str] | None = None) -> bool:
    """Whether a live run with `settings` sends any call through litellm, so that importing
    it early (`prefetch_litellm`) or starting a litellm transport is worth its CPU.

    `models` names the run's models where the settings do not (a study's columns); with
    no model known at all, the answer is yes. Runs whose every model goes the native way
    (`openai_http.route`) never import litellm for their requests.
    """
    s = settings if settings is not None else LLMSettings()
    names = [s.model, s.counterpart_model, s.judge_model, *s.role_models.values(),
             *(models or ())]
    known = [n for n in names if n]
    return not known or openai_http.uses_litellm(known, s.api_base, s.completion_kwargs)


async def _litellm() -> Any:
    """litellm for an in-process call. While `prefetch_litellm`'s thread imports it, the
    loop waits (it blocks): episodes that went on setting up meanwhile would share the
    GIL with the import and delay the first request (measured: 6 s instead of 3 at 32
    connections, 200 episodes starting at once)."""
    return load_litellm()


async def _litellm_async() -> Any:
    """litellm for a native answer that needs it (an unusual shape, a priced model): the
    import, when still to come, runs on a thread while the other episodes go on."""
    if "litellm" in sys.modules:
        return load_litellm()
    return await asyncio.to_thread(load_litellm)


def call_record(participant: str, request: dict[str, Any], response: dict[str, Any] | None,
                meta: dict[str, Any], error: str | None = None,
                **where: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """One model call as the trace records it, and as its sidecar keeps it.

    The record is deterministic given the cassette: participant, model, where
    (task, step), the digest of the messages sent, the tools offered, the reply
    text and tool calls, finish reason, tokens, cost, retries and the error.
    The sidecar adds what must stay out of a byte-identical trace or is too
    big for it: the full messages and tool schemas, and the wall-clock latency.
    """
    record: dict[str, Any] = {"participant": participant, "model": request.get("model"),
                              **where,
                              "messages_sha256": hashlib.sha256(
                                  canonical_json(request.get("messages", []))
                                  .encode("utf-8")).hexdigest(),
                              "tools": [t.get("function", {}).get("name")
                                        for t in request.get("tools") or []],
                              "retries": max(0, int(meta.get("attempts", 1)) - 1)}
    if response is not None:
        record["reply"] = response.get("content")
        record["tool_calls"] = [{"name": c.get("name"), "arguments": c.get("arguments")}
                                for c in response.get("tool_calls") or []]
        record["finish_reason"] = response.get("finish_reason")
        record["tokens_in"] = response["usage"]["tokens_in"]
        record["tokens_out"] = response["usage"]["tokens_out"]
        record["cost"] = response["cost"]
    if error is not None:
        record["error"] = error
    record = {k: v for k, v in record.items() if v is not None}
    sidecar = {**{k: record[k] for k in ("participant", "model", *where) if k in record},
               "messages": request.get("messages", []), "tools": request.get("tools") or [],
               "latency": meta.get("latency")}
    return record, sidecar


# ---------------------------------------------------------------- episodes
class EpisodeLLM:
    """What the LLM agents of one episode share: scope, usage, replay counters, failure."""

    def __init__(self, client: LLMClient, scope: str) -> None:
        self.client = client
        self.scope = scope
        self.usage: dict[str, Usage] = {}
        self.counters: dict[str, int] = {}
        self.failed: str | None = None
        #: Every model call in decision order (the runtime asks one agent at a time).
        self.calls: list[dict[str, Any]] = []
        #: The same calls with full messages, tool schemas and latency (the sidecar).
        self.sidecar: list[dict[str, Any]] = []

    def log(self, record: tuple[dict[str, Any], dict[str, Any]]) -> None:
        self.calls.append(record[0])
        self.sidecar.append(record[1])

    def summary(self) -> dict[str, Any]:
        total = Usage()
        for u in self.usage.values():
            total.add(u)
        return {"total": total.model_dump(),
                "agents": {p: u.model_dump() for p, u in sorted(self.usage.items())}}


@dataclass
class _Call:
    id: str
    name: str
    arguments: str
    problem: str | None = None


@dataclass
class _Turn:
    content: str = ""
    calls: list[_Call] = field(default_factory=list)
    empty: bool = False


@dataclass
class _TaskState:
    request: str
    turns: list[_Turn] = field(default_factory=list)
    queue: list[ToolCall] = field(default_factory=list)
    calls: int = 0
    reply: str | None = None


class LLMAgent:
    """One participant played by a litellm model."""

    def __init__(self, party: str, model: str, episode: EpisodeLLM, settings: LLMSettings,
                 world: World | None = None) -> None:
        self.party = party
        self.model = model
        self.episode = episode
        self.settings = settings
        self.world = world
        self.label = f"llm:{model}"
        self.scope = f"{episode.scope}/{party}"
        self.rng = random.Random(f"{self.scope}:backoff")
        self.tasks: dict[int, _TaskState] = {}
        episode.usage.setdefault(party, Usage())

    async def decide(self, observation: Observation) -> ToolCall | Reply:
        obs = observation
        if self.episode.failed:
            raise LLMUnavailable(f"not asked: {self.episode.failed}")
        state = self.tasks.get(obs.task)
        if state is None:
            clock = self.world.meta.clock if self.world is not None else ""
            state = self.tasks[obs.task] = _TaskState(request=_render_request(obs, clock))
        if state.queue:
            return state.queue.pop(0)
        left = self.settings.max_tool_calls - state.calls
        client = self.episode.client
        tools = tool_definitions(obs.tools, self.world) if obs.tools else None
        request = client.request(self.model, self._messages(obs, left <= 0), tools,
                                 "auto" if left > 0 else "none")
        where = f"{self.scope} task {obs.task} step {obs.step}"
        meta: dict[str, Any] = {}
        try:
            response = await client.complete(request, self.scope, self.episode.counters,
                                             self.rng, where, meta)
        except (LLMUnavailable, CassetteMiss) as exc:
            self.episode.failed = f"{self.party}: {exc}"
            if isinstance(exc, LLMUnavailable):
                self.episode.log(call_record(self.party, request, None, meta, str(exc),
                                             task=obs.task, step=obs.step))
            raise
        self.episode.log(call_record(self.party, request, response, meta, task=obs.task,
                                     step=obs.step))
        usage = self.episode.usage[self.party]
        usage.add(Usage(calls=1, tokens_in=response["usage"]["tokens_in"],
                        tokens_out=response["usage"]["tokens_out"], cost=response["cost"]))
        return self._interpret(obs, state, response, left)

    # ------------------------------------------------------------ output
    def _interpret(self, obs: Observation, state: _TaskState, response: dict[str, Any],
                   left: int) -> ToolCall | Reply:
        content = response.get("content") or ""
        raw_calls = response.get("tool_calls") or []
        usage = self.episode.usage[self.party]
        if raw_calls and left > 0:
            available = {t.name for t in obs.tools}
            turn = _Turn(content=content)
            actions: list[ToolCall] = []
            for raw in raw_calls[:left]:
                state.calls += 1
                call_id = f"call_{obs.task}_{state.calls}"
                action, problem, history_args = _parse_call(raw)
                if problem is None and action.tool not in available:
                    problem = f"there is no tool '{action.tool}' available to you"
                if problem is not None:
                    usage.malformed += 1
                turn.calls.append(_Call(call_id, action.tool or "unknown_tool", history_args,
                                        problem))
                actions.append(action)
            state.turns.append(turn)
            state.queue = actions[1:]
            return actions[0]
        if content.strip():
            state.reply = content
            return Reply(text=content)
        usage.malformed += 1
        state.turns.append(_Turn(empty=True))
        return ToolCall(tool=EMPTY_REPLY_TOOL, args={})

    # ------------------------------------------------------------ conversation
    def _messages(self, obs: Observation, budget_spent: bool) -> list[dict[str, Any]]:
        """The private conversation: card, then each task's exchange; the current task last."""
        system = obs.card.strip() or f"You are {obs.party}."
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        by_task: dict[int, list[MemoryItem]] = {}
        blocks: list[tuple[str, Any]] = []
        for item in obs.memory:
            if item.kind == "note" or item.task == 0:
                blocks.append(("note", item))
                continue
            if item.task not in by_task:
                by_task[item.task] = []
                if item.task != obs.task:
                    blocks.append(("task", item.task))
            by_task[item.task].append(item)
        for task in sorted(set(self.tasks) - set(by_task) - {obs.task}):
            # Tasks that left nothing in memory (a simulator's opening line).
            at = next((i for i, (k, v) in enumerate(blocks) if k == "task" and v > task),
                      len(blocks))
            blocks.insert(at, ("task", task))
        blocks.append(("task", obs.task))
        for kind, value in blocks:
            if kind == "note":
                who = obs.names.get(value.sender or "", value.sender or "note")
                messages.append({"role": "user", "content": f"[Note from {who}] {value.text}"})
            else:
                messages.extend(self._task_messages(value, by_task.get(value, []), obs))
        if obs.dashboard:  # a live dashboard reads as it does now, at every step
            messages.append({"role": "user", "content": "[Dashboard, now]\n"
                             + "\n".join(obs.dashboard)})
        if budget_spent:
            messages.append({"role": "user", "content": _BUDGET_NOTE})
        return alternate(messages)

    def _task_messages(self, task: int, items: list[MemoryItem],
                       obs: Observation) -> list[dict[str, Any]]:
        state = self.tasks.get(task)
        out: list[dict[str, Any]] = []
        requests = [i for i in items if i.kind == "message"]
        results = [i for i in items if i.kind == "tool_result"]
        if state is not None:
            out.append({"role": "user", "content": state.request})
        elif requests:
            first = requests[0]
            sender = obs.names.get(first.sender or "", first.sender)
            out.append({"role": "user", "content": f"Message from {sender}:\n{first.text}"})
        k = 0
        for turn in state.turns if state is not None else []:
            if turn.empty:
                k += 1
                out.append({"role": "user", "content": _EMPTY_NOTE})
                continue
            out.append({"role": "assistant", "content": turn.content or None,
                        "tool_calls": [{"id": c.id, "type": "function",
                                        "function": {"name": c.name,
                                                     "arguments": c.arguments}}
                                       for c in turn.calls]})
            for call in turn.calls:
                result = results[k] if k < len(results) else None
                k += 1
                out.append({"role": "tool", "tool_call_id": call.id,
                            "content": _render_result(result, call)})
        for extra in results[k:]:  # results of calls this agent did not make (none expected)
            out.append({"role": "user", "content": f"Result of {extra.tool}: "
                        f"{_json(extra.result)}"})
        if state is not None and state.reply is not None and task != obs.task:
            out.append({"role": "assistant", "content": state.reply})
            for answer in requests[1:]:  # a simulator's turn: what the recipient answered
                who = obs.names.get(answer.sender or "", answer.sender)
                out.append({"role": "user", "content": f"Answer from {who}:\n{answer.text}"})
        return out


def alternate(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with consecutive plain `user` (or plain `assistant`) messages merged.

    Strict chat templates (Gemma's, for one) refuse two messages of one role in
    a row; A1's first request used to send the request and then the live
    dashboard as two `user` messages. Messages with tool calls and tool results
    are never merged; merged texts are joined by a blank line.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        prev = out[-1] if out else None
        if (prev is not None and message["role"] in ("user", "assistant")
                and prev["role"] == message["role"] and set(prev) == {"role", "content"}
                and set(message) == {"role", "content"}
                and isinstance(prev["content"], str) and isinstance(message["content"], str)):
            out[-1] = {"role": prev["role"], "content": f"{prev['content']}\n\n"
                       f"{message['content']}"}
            continue
        out.append(message)
    return out


def _render_request(obs: Observation, clock: str = "") -> str:
    r: Request = obs.request
    when = f"{obs.time:g} {clock}".strip()
    sender = obs.names.get(r.sender, r.sender)  # the world's display name, if it gives one
    if r.via == "delegation":
        return f"Request delegated to you by {sender} (time {when}):\n{r.text}"
    if r.script is not None:  # a simulator's turn: the brief, not a message it received
        return f"(time {when}) {r.text}"
    return f"Message from {sender} (time {when}):\n{r.text}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _render_result(item: MemoryItem | None, call: _Call) -> str:
    if item is None:
        return _json({"pending": "no result yet"})
    if item.rejected:
        reason = item.result.get("error") if isinstance(item.result, dict) else item.result
        out: dict[str, Any] = {"rejected": True, "error": reason}
        if call.problem:
            out["problem"] = call.problem
        return _json(out)
    return item.result if isinstance(item.result, str) else _json(item.result)


#: How deep a model's tool-call arguments may nest. No tool signature needs more; a
#: deeper value would exhaust Python's recursion limit in whatever walks it next.
MAX_ARGUMENT_DEPTH = 32


def _parse_call(raw: dict[str, Any]) -> tuple[ToolCall, str | None, str]:
    """The runtime call for one model tool call, what went wrong, and the history arguments."""
    name = str(raw.get("name") or "")
    text = raw.get("arguments")
    if isinstance(text, dict):  # a cassette from before arguments were always text
        text = _as_text(text)
    if text is None or not str(text).strip():
        return ToolCall(tool=name, args={}), None, "{}"
    text = str(text)
    try:
        args = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError):  # nested past C's limit
        return (ToolCall(tool=name, args={INVALID_JSON_ARG: text}),
                "the arguments were not valid JSON", "{}")
    if not isinstance(args, dict):
        return (ToolCall(tool=name, args={INVALID_JSON_ARG: text}),
                "the arguments were not a JSON object", "{}")
    if _deeper_than(args, MAX_ARGUMENT_DEPTH):
        return (ToolCall(tool=name, args={INVALID_JSON_ARG: text}),
                f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels", "{}")
    # "\\ud800" in the JSON decodes to a lone surrogate, which no file can hold
    return ToolCall(tool=name, args=_clean_text(args)), None, text


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects in `value` nest more than `limit` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


# ---------------------------------------------------------------- wiring
def llm_agents(compiled: _CompiledWorld, condition: str, instance: dict[str, Any], seed: int,
               settings: LLMSettings) -> dict[str, LLMAgent]:
    """LLM agents for every role and simulator that has a model under these settings.

    Parties whose binding gets no model stay with the caller's sim agents.
    Raises ValueError (CassetteError included) on settings a user must fix.
    """
    world = compiled.world
    names = {p.name for p in world.parties if p.kind != "actor"}
    unknown = sorted(set(settings.role_models) - names)
    if unknown:
        raise ValueError(f"--role-model names {', '.join(unknown)}, which "
                         f"{'is' if len(unknown) == 1 else 'are'} not a role or simulator of "
                         f"{world.meta.name} ({', '.join(sorted(names))})")
    if not settings.active:
        raise ValueError("agents llm needs a model: pass --model (a litellm model string, "
                         "e.g. openai/gpt-4o-mini or ollama/llama3.1)")
    scope = f"{world.meta.name}/{condition}/{instance.get('id')}/s{seed}"
    episode = EpisodeLLM(settings.client(), scope)
    agents: dict[str, LLMAgent] = {}
    for party in world.parties:
        if party.kind == "actor":
            continue
        model = settings.model_for(party)
        if model:
            agents[party.name] = LLMAgent(party.name, model, episode, settings, world)
    return agents


def episode_calls(agents: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model calls of an episode's LLM agents: (trace records, sidecar records)."""
    for agent in agents.values():
        if isinstance(agent, LLMAgent):
            return agent.episode.calls, agent.episode.sidecar
    return [], []


def episode_usage(agents: dict[str, Any]) -> dict[str, Any] | None:
    """Tokens and cost of an episode's LLM agents ({"total": ..., "agents": {...}})."""
    for agent in agents.values():
        if isinstance(agent, LLMAgent):
            return agent.episode.summary()
    return None

