"""The episode trace: one JSONL file per episode, a documented, versioned schema.

Line 1 is a `TraceHeader`, then one `TraceEvent` per step, then one
`TraceResult` with the six measurements. The writer serialises with sorted
keys and no wall-clock time, so the same world, condition, instance, seed and
agent profile give a byte-identical file. docs/trace.md describes every field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError

from eairdsl.runtime.values import FieldSet
from eairdsl.source import write_atomic

__all__ = ["MAX_TRACE_CHARS", "TRACE_SCHEMA_VERSION", "TraceHeader", "TraceEvent", "TraceResult",
           "Trace", "TraceLabel", "Event", "to_json", "read_trace", "read_trace_ends",
           "read_trace_label", "EVENT_KINDS", "EventKind", "encode_line"]

TRACE_SCHEMA_VERSION = 1
#: what a trace event records (docs/trace.md)
EventKind = Literal["message", "tool_call", "tool_result", "state_update", "decision",
                    "judgment"]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)


class TraceHeader(BaseModel):
    """Who ran what: enough to reproduce the episode."""

    type: Literal["header"] = "header"
    trace_schema: int = TRACE_SCHEMA_VERSION
    world: str
    digest: str
    condition: str
    levers: dict[str, Any]
    instance: str
    seed: int
    agents: dict[str, str]
    eairdsl_version: str
    #: LLM tokens and cost: {"total": {...}, "agents": {party: {...}}}; absent for sim agents
    usage: dict[str, Any] | None = None
    #: LLM runs only: the models and the sampling options sent with every request
    #: (model, counterpart_model, judge_model, role_models, temperature, max_tokens, seed;
    #: only those set)
    llm: dict[str, Any] | None = None
    #: LLM runs only: every model call in order (participant, model, task/step or rubric,
    #: messages_sha256, tools offered, reply, tool_calls, finish_reason, tokens, cost,
    #: retries, error); the full messages and latency are in the `.calls.ndjson` sidecar
    model_calls: list[dict[str, Any]] | None = None
    #: Imported traces only (eairdsl/external): where the events came from — format, file,
    #: sha256, importer version and what was withheld (and why); absent for simulated runs
    source: dict[str, Any] | None = None


class TraceEvent(BaseModel):
    """One step. `edge` is `sender->receiver` for messages and delegations."""

    type: Literal["event"] = "event"
    step: str
    t: float
    kind: EventKind
    actor: str
    recipient: str | None = None
    edge: str | None = None
    content: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    result: Any = None
    rejected: bool | None = None
    reason: str | None = None
    diff: dict[str, Any] | None = None
    task: int | None = None
    call: str | None = None
    final: bool | None = None
    #: Imported traces only: the event's index and id (span id, message index) in the source
    src_index: int | None = None
    src_id: str | None = None


class TraceResult(BaseModel):
    """The episode's measurements (None = unassessed) and execution validity."""

    type: Literal["result"] = "result"
    measurements: dict[str, bool | None]
    unassessed: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    judges: dict[str, str] = Field(default_factory=dict)
    valid: bool
    validity_reason: str | None = None
    end_time: float
    steps: int
    #: For graders only (a sanitized bundle drops the result line): per measurement and
    #: metric, the step ids that decided its value, in trace order (eairdsl/runtime/witness.py)
    witnesses: dict[str, list[str]] = Field(default_factory=dict)


_PLAIN = frozenset({str, int, bool, type(None)})


def to_json(value: Any) -> Any:
    """Plain JSON data for any runtime value (rows, field sets, nested lists).

    Tool results carry whole tables, so the common case — a scalar field — is
    answered inline without a call per field.
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return int(value) if value.is_integer() else value
    if isinstance(value, FieldSet):
        return {"record": value.record, "fields": value.names}
    if isinstance(value, dict):
        return {k if type(k) is str else str(k): v if type(v) in _PLAIN else to_json(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _PLAIN else to_json(v) for v in value]
    return value


_EVENT_FIELDS = tuple(TraceEvent.model_fields)
#: One line per record, keys sorted: the byte-identical-trace guarantee rests on it.
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False)


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _line_encoder() -> Any:
    """`_ENCODER.encode` without its per-call set-up: the C encoder, made once.

    A trace has a line per event; `JSONEncoder.encode` builds a new C encoder for
    each. Same output (sorted keys, UTF-8 text, no circularity check: trace data
    is plain JSON). Without the C accelerator, the ordinary encoder.
    """
    make = getattr(json.encoder, "c_make_encoder", None)  # CPython's C accelerator
    if make is None:
        return _ENCODER.encode
    iterencode = make(None, _not_json, json.encoder.encode_basestring, None, ": ", ", ",
                      True, False, True)
    return lambda value: "".join(iterencode(value, 0))


_ENCODE_LINE = _line_encoder()


def encode_line(value: Any) -> str:
    """A value as one trace line encodes it (sorted keys, UTF-8 text, `, ` and `: `):
    what `json.dumps(value, sort_keys=True, ensure_ascii=False)` gives, with the C
    encoder made once rather than per call (a sanitized bundle's events are encoded so)."""
    return str(_ENCODE_LINE(value))


class Event:
    """An event as the runtime records it: TraceEvent's fields, without validation.

    The runtime writes thousands of events per second from values it has already
    checked; validating each through pydantic would cost more than the episode.
    `read_trace` gives validated `TraceEvent` models with the same attributes.
    """

    __slots__ = _EVENT_FIELDS
    step: str
    t: float
    kind: EventKind
    actor: str
    recipient: str | None
    edge: str | None
    content: str | None
    tool: str | None
    args: dict[str, Any] | None
    result: Any
    rejected: bool | None
    reason: str | None
    diff: dict[str, Any] | None
    task: int | None
    call: str | None
    final: bool | None
    src_index: int | None
    src_id: str | None

    def __init__(self, step: str, t: float, kind: EventKind, actor: str,
                 recipient: str | None = None, edge: str | None = None,
                 content: str | None = None, tool: str | None = None,
                 args: dict[str, Any] | None = None, result: Any = None,
                 rejected: bool | None = None, reason: str | None = None,
                 diff: dict[str, Any] | None = None, task: int | None = None,
                 call: str | None = None, final: bool | None = None,
                 src_index: int | None = None, src_id: str | None = None) -> None:
        self.type = "event"
        self.step, self.t, self.kind, self.actor = step, t, kind, actor
        self.recipient, self.edge, self.content, self.tool = recipient, edge, content, tool
        self.args, self.result, self.rejected, self.reason = args, result, rejected, reason
        self.diff, self.task, self.call, self.final = diff, task, call, final
        self.src_index, self.src_id = src_index, src_id

    def as_dict(self) -> dict[str, Any]:
        return {n: v for n in _EVENT_FIELDS if (v := getattr(self, n)) is not None}


#: characters of text (messages, tool results, state changes) one episode may record:
#: each piece is bounded (a text of at most 1,000,000 characters), but a world may
#: script thousands of them, and 1,000 scripted 500,000-character messages made a
#: 500 MB trace and a 1 GB process; a real episode records a few hundred kilobytes
MAX_TRACE_CHARS = 50_000_000


def _recorded_size(value: Any) -> int:
    """About how many characters `value` adds to the trace file."""
    if value is None:
        return 0
    if type(value) is str:
        return len(value)
    if isinstance(value, (list, dict)):
        return _container_size(value, MAX_TRACE_CHARS)
    return 8


def _container_size(value: list[Any] | dict[str, Any], cap: int) -> int:
    """`_render_size` of a list or dict (a text its length, a list 2 per item, a dict 4
    per entry and its keys' lengths, anything else 8), counted with the leaves read in
    place rather than stacked one by one: every event's result and arguments pass here,
    and A1's results are whole tables. Stops counting once past `cap`."""
    total = 0
    stack: list[Any] = [value]
    items: Iterable[Any]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            total += 4 * len(v)
            items = v.values()
            for k in v:
                total += len(k) if type(k) is str else len(str(k))
        elif isinstance(v, list):
            total += 2 * len(v)
            items = v
        elif isinstance(v, str):
            total += len(v)
            continue
        else:
            total += 8
            continue
        for x in items:
            kind = type(x)
            if kind is str:
                total += len(x)
            elif kind is dict or kind is list or isinstance(x, (dict, list, str)):
                stack.append(x)
            else:
                total += 8
        if total > cap:
            return total
    return total


class Trace:
    """Events of one episode in memory, with the queries measurements use."""

    def __init__(self, header: TraceHeader) -> None:
        self.header = header
        self.events: list[Any] = []  # Event while running, TraceEvent when read back
        self.result: TraceResult | None = None
        # Indexes for the trace queries, kept as events arrive: a guard or measurement
        # that asks `messages(customer, role)` or `final(party)` on every call must
        # not rescan the trace, so each query costs what it returns, not the trace.
        self._messages: dict[tuple[str | None, str | None], list[dict[str, Any]]] = {}
        self._calls: dict[str, list[Any]] = {}
        self._results: dict[str, Any] = {}
        self._replies: dict[str, list[str]] = {}
        self._finals: dict[str, str] = {}
        self._delegations: set[str | None] = set()
        #: characters of text recorded so far (the engine stops at MAX_TRACE_CHARS)
        self.chars = 0

    def add(self, kind: EventKind, **fields: Any) -> Event:
        event = Event(step=f"s{len(self.events) + 1:04d}", kind=kind, **fields)
        self.chars += (_recorded_size(event.content) + _recorded_size(event.result)
                       + _recorded_size(event.diff) + _recorded_size(event.args))
        self._index(event)
        return event

    def _index(self, e: Event | TraceEvent) -> None:
        self.events.append(e)
        if e.kind == "message":
            view = {"sender": e.actor, "recipient": e.recipient, "text": e.content or "",
                    "time": e.t, "edge": e.edge}
            for key in ((None, None), (e.actor, None), (None, e.recipient),
                        (e.actor, e.recipient)):
                self._messages.setdefault(key, []).append(view)
            self._replies.setdefault(e.actor, []).append(e.content or "")
            if e.final:
                self._finals[e.actor] = e.content or ""
            if e.tool:
                self._delegations.add(e.edge)
        elif e.kind == "tool_call":
            self._calls.setdefault(e.tool or "", []).append(e)
        elif e.kind == "tool_result" and e.call:
            self._results[e.call] = e

    # ------------------------------------------------------------ queries (TraceView)
    def messages(self, sender: str | None, recipient: str | None) -> list[dict[str, Any]]:
        # The index itself: expressions never mutate what they read.
        return self._messages.get((sender, recipient), [])

    def calls(self, tool: str, by: str | None) -> list[dict[str, Any]]:
        out = []
        for e in self._calls.get(tool, ()):
            if by is None or e.actor == by:
                res = self._results.get(e.step)
                out.append({"tool": tool, "caller": e.actor, "args": e.args or {},
                            "result": res.result if res else None,
                            "rejected": bool(res.rejected) if res else True, "time": e.t})
        return out

    def replies(self, party: str) -> list[str]:
        # A copy: a `let` memo keys a list argument by identity, so a list that grows
        # later in the episode must not be handed out twice.
        return list(self._replies.get(party, ()))

    def final(self, party: str) -> str | None:
        return self._finals.get(party)

    def delegated(self, caller: str, callee: str) -> bool:
        return f"{caller}->{callee}" in self._delegations

    # ------------------------------------------------------------ files
    def lines(self) -> list[str]:
        encode = _ENCODE_LINE
        out = [encode(self.header.model_dump(mode="json", exclude_none=True))]
        for e in self.events:
            out.append(encode(e.as_dict() if isinstance(e, Event)
                              else e.model_dump(mode="json", exclude_none=True)))
        if self.result is not None:
            out.append(encode(self.result.model_dump(mode="json")))
        return out

    def write(self, path: Path) -> None:
        """Write the trace file whole or not at all: encoded first, then written beside
        `path` and renamed over it, so an error or a kill mid-write never leaves a
        truncated (or empty) trace where a reader expects a whole one."""
        write_atomic(path, ("\n".join(self.lines()) + "\n").encode("utf-8"))


def read_trace(path: Path) -> Trace:
    """Read a trace file back into models (raises ValueError on a malformed file)."""
    # split on "\n" only: the writer leaves U+2028, U+2029 and U+0085 unescaped inside
    # strings (imported web text has them), and `splitlines` would cut a line there
    lines = [ln.removesuffix("\r") for ln in path.read_text(encoding="utf-8").split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValueError(f"{path} is empty")
    try:
        header = TraceHeader.model_validate_json(lines[0])
    except ValueError as exc:
        raise ValueError(f"{path}:1: not a trace header ({_first_line(exc)})") from None
    if header.trace_schema != TRACE_SCHEMA_VERSION:
        raise ValueError(f"{path}: trace schema {header.trace_schema}, expected "
                         f"{TRACE_SCHEMA_VERSION}")
    trace = Trace(header)
    for number, line in enumerate(lines[1:], 2):
        try:  # located by the file's own line: a cut trace's error is where it was cut
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if data.get("type") == "result":
                trace.result = TraceResult.model_validate(data)
            else:
                trace._index(TraceEvent.model_validate(data))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {_first_line(exc)}") from None
    return trace


#: bytes read at a time from either end of a trace when reading only its ends
_END_CHUNK = 64 * 1024


def read_trace_ends(path: Path) -> tuple[TraceHeader, TraceResult | None]:
    """A trace's header and result lines only (ValueError on a malformed one), without its
    events: what a reader of many traces' labels needs (the repair's retest reads who
    played each audited episode and what it realized; reading every event of 6,000
    traces three times made a repair's cost grow with its audit). The result is the
    last line when it is one (None for a trace without a result, as `read_trace` gives);
    the events between are neither read nor checked."""
    fd = os.open(path, os.O_RDONLY)
    try:
        first, last = _ends(fd)
    finally:
        os.close(fd)
    if not first.strip():
        raise ValueError(f"{path} is empty")
    try:
        header = TraceHeader.model_validate_json(first.removesuffix(b"\r"))
    except ValueError as exc:  # UnicodeDecodeError is one
        raise ValueError(f"{path}:1: not a trace header ({_first_line(exc)})") from None
    if header.trace_schema != TRACE_SCHEMA_VERSION:
        raise ValueError(f"{path}: trace schema {header.trace_schema}, expected "
                         f"{TRACE_SCHEMA_VERSION}")
    if last is None:
        return header, None
    try:
        data = json.loads(last.decode("utf-8").removesuffix("\r"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        result = TraceResult.model_validate(data) if data.get("type") == "result" else None
    except ValueError as exc:
        raise ValueError(f"{path}: last line: {_first_line(exc)}") from None
    return header, result


class TraceLabel(BaseModel):
    """Who played one trace and what it realized: its header's cell and agents and its
    result's labels, without its events. An audit keeps one per trace in its grader
    index (`audit.bundle`), so a reader of many audited episodes' labels (a repair's
    choice of finding and its retest) reads one file instead of every trace: reading
    the ends of 6,000 traces was most of what made a repair's cost grow with its audit.
    Grader-side: `realized` and `utility` are measurements."""

    condition: str
    instance: str
    seed: int
    agents: dict[str, str]
    #: LLM runs: the header's models and sampling options (`TraceHeader.llm`)
    llm: dict[str, Any] | None = None
    #: the digest of the world the episode ran (`TraceHeader.digest`)
    digest: str
    realized: bool | None = None
    utility: bool | None = None

    @classmethod
    def of(cls, header: TraceHeader, result: TraceResult | None) -> TraceLabel:
        m = result.measurements if result is not None else {}
        return cls(condition=header.condition, instance=header.instance, seed=header.seed,
                   agents=dict(header.agents), llm=header.llm or None, digest=header.digest,
                   realized=m.get("realized"), utility=m.get("utility"))


def read_trace_label(path: Path) -> TraceLabel:
    """`TraceLabel` of the trace at `path`, from its ends (`read_trace_ends`)."""
    return TraceLabel.of(*read_trace_ends(path))


def _ends(fd: int) -> tuple[bytes, bytes | None]:
    """The first line of the open file `fd`, and its last non-empty line after the first
    (None when there is none), read in chunks from either end (`pread`: a small trace is
    one read)."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, _END_CHUNK, 0)
    while b"\n" not in head and len(head) < size:  # a long header (an LLM run's calls)
        more = os.pread(fd, _END_CHUNK, len(head))
        if not more:
            break
        head += more
    cut = head.find(b"\n")
    first = head if cut < 0 else head[:cut]
    start = len(first) + 1
    if start >= size:
        return first, None
    tail = head[start:] if len(head) >= size else b""
    pos = size if not tail else start
    while True:
        stripped = tail.rstrip(b"\n")
        cut = stripped.rfind(b"\n")
        if cut >= 0 or pos <= start:
            line = stripped[cut + 1:]
            return first, line or None
        step = min(_END_CHUNK, pos - start)
        pos -= step
        tail = os.pread(fd, step, pos) + tail


def _first_line(exc: Exception) -> str:
    """An exception's message in one line: JSON's with the column in the line, pydantic's
    first error with its field (its text runs to many lines)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg} at column {exc.colno})"
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
