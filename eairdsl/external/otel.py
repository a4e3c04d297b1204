"""Traces out to OpenTelemetry and back: `export_otel` and the `otel-genai` importer.

Users of this field keep their agent traces in OpenTelemetry backends
(Phoenix, Langfuse) that read OTLP spans with the GenAI semantic conventions
(`gen_ai.*`) or OpenInference's (`openinference.span.kind`, `input.value`, …).
`export_otel` writes an episode trace (docs/trace.md) as OTLP JSON those tools
load, and the `otel-genai` importer reads OTLP JSON back into a project trace
through the input adapter (`core.ImportedTrace`), so other frameworks'
OpenTelemetry traces can be bundled and audited like our own.

Export, one OTel trace per episode (docs/external.md, "OpenTelemetry export"):

- the episode is the root span (`invoke_workflow`, OpenInference `CHAIN`);
- each task — a request and the participant handling it — is an
  `invoke_agent` span (`AGENT`); a delegated task is a child of the delegator's
  open tool call (or of its own task span): delegations are parent–child spans;
  a task opened by an ordinary message hangs under the root with a span link
  to the sender's span;
- each tool call is an `execute_tool` span (`TOOL`) ending at its result;
- each model call of an LLM run's header (`model_calls`) is a `chat` span
  (`LLM`) under the task it was made for;
- every trace event is one span event `eair.<kind>` on the span it belongs to,
  carrying all its fields (`eair.step`, `eair.t`, …): the lossless layer the
  importer reads back, so export then import gives the same event lines;
- an audit's findings (`--audit`) become `gen_ai.evaluation.result` span events
  on the boundary step's span and on the root.

Identifiers are derived, not random: the trace id is a SHA-256 of the
episode's header and event lines, a span id a SHA-256 of the trace id and the
span's role in it, so the same trace exports to the same bytes. Simulated time
(minutes) maps to nanoseconds from a fixed epoch, `EPOCH_NS`
(2026-01-01T00:00:00Z); the step's position is added in nanoseconds so that
steps at the same simulated minute keep their order in a viewer. The result
line (measurements, witnesses) is grader-side: it is exported only with
`include_grader=True`, and the importer withholds it to the grader side file.

Import of foreign OTLP (no `eair.*` events) keeps what the spans state and
invents nothing: an AGENT span's input is a message from the sender its input
messages name (no recipient otherwise), a nested AGENT span is a delegation
whose reply edge is the child's output, a TOOL span is a call and its result
by the enclosing agent, an LLM span's output is the agent's decision; spans of
other kinds carry no event; evaluation events are withheld.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import time_ns
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Protocol

from pydantic import ValidationError

from eairdsl import __version__
from eairdsl.external.annotations import (
    BACKENDS,
    FindingNote,
    annotations_url,
    send_annotations,
)
from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    neutral_name,
    read_records,
    register,
    safe_file_name,
    sha256_file,
)
from eairdsl.external.otel_attrs import (
    backend_provider,
    chat_content,
    openinference_provider,
    split_model,
    study_cell,
)
from eairdsl.external.otlp_transport import (
    HttpSink,
    ProtobufFileSink,
    RetryPolicy,
    TransportError,
    env_headers,
    traces_url,
)
from eairdsl.runtime.trace import TRACE_SCHEMA_VERSION, Event, TraceEvent, TraceHeader
from eairdsl.source import open_atomic

if TYPE_CHECKING:
    from eairdsl.audit.contract import Report

__all__ = ["DEFAULT_MAX_SPANS", "EPOCHS", "EPOCH_NS", "EXPORTER_VERSION", "FORMAT", "FORMATS",
           "ExportSummary",
           "JsonDocumentSink", "JsonLinesSink", "OtelError", "OtlpBatch", "OtlpExport",
           "OtlpSink", "episode_trace_id", "export_otel", "iter_events", "otlp_document",
           "read_otlp", "send_all"]

FORMAT = "otel-genai"
#: the version of the export layout and of the importer (the `eair.*` layer's meaning)
EXPORTER_VERSION = "1"
#: simulated minute 0 of every episode: 2026-01-01T00:00:00Z in Unix nanoseconds
EPOCH_NS = 1_767_225_600 * 1_000_000_000
_NS_PER_MINUTE = 60 * 1_000_000_000
SCOPE = "eairdsl.external.otel"
#: OTLP span kinds (opentelemetry-proto trace.proto `SpanKind`)
SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT = 1, 3
STATUS_ERROR = 2
#: event fields whose values are JSON text in the export (any JSON value, exact types)
_JSON_FIELDS = frozenset({"args", "result", "diff"})
_EVENT_FIELDS = tuple(f for f in TraceEvent.model_fields if f != "type")
_HEX = re.compile(r"^[0-9a-f]+$")
_STEP = re.compile(r"^s(\d+)$")


class OtelError(ValueError):
    """An export that cannot be made (unreadable trace, bad audit folder): a clear message."""


def _canon(value: Any) -> str:
    """JSON text with sorted keys, the project's canonical encoding of trace data."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# ------------------------------------------------------------------ OTLP values
def _any_value(value: Any) -> dict[str, Any]:
    """An OTLP JSON AnyValue: bool before int (a bool is an int in Python), int64 as text."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    raise TypeError(f"no OTLP value for {type(value).__name__}")


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP attributes, sorted by key; None values are left out (absent, not null)."""
    return [{"key": k, "value": _any_value(v)} for k, v in sorted(pairs.items())
            if v is not None]


def _plain(value: Any, where: str, file: str) -> Any:
    """An OTLP JSON AnyValue back to plain data (untrusted input: every shape checked)."""
    if not isinstance(value, dict) or len(value) > 1:
        raise SourceError(file, where, "an attribute value is an object with one of "
                          "stringValue, boolValue, intValue, doubleValue, arrayValue, "
                          "kvlistValue, bytesValue")
    if not value:
        return None
    (kind, v), = value.items()
    match kind:
        case "stringValue" if isinstance(v, str):
            return v
        case "boolValue" if isinstance(v, bool):
            return v
        case "intValue" if isinstance(v, (str, int)) and not isinstance(v, bool):
            try:
                return int(v)
            except ValueError:
                raise SourceError(file, where, f"intValue {v!r} is not an integer") from None
        case "doubleValue" if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        case "arrayValue" if isinstance(v, dict):
            return [_plain(x, f"{where}[{i}]", file)
                    for i, x in enumerate(_values(v, kind, where, file))]
        case "kvlistValue" if isinstance(v, dict):
            pairs = _values(v, kind, where, file)
            if not all(isinstance(kv, dict) for kv in pairs):
                raise SourceError(file, where, "a kvlistValue's values are {key, value} "
                                  "objects")
            return {str(kv.get("key")): _plain(kv.get("value", {}), f"{where}.{kv.get('key')}",
                                               file) for kv in pairs}
        case "bytesValue" if isinstance(v, str):
            try:
                return base64.b64decode(v, validate=True).decode("utf-8", "replace")
            except ValueError:
                raise SourceError(file, where, "bytesValue is not base64") from None
    raise SourceError(file, where, f"{kind} has a value of the wrong type ({type(v).__name__})")


def _values(v: dict[str, Any], kind: str, where: str, file: str) -> list[Any]:
    """An arrayValue's or kvlistValue's `values` list (absent: empty); anything else
    is refused (it was a TypeError)."""
    values = v.get("values", [])
    if not isinstance(values, list):
        raise SourceError(file, where, f"{kind}.values is a list, not "
                          f"{type(values).__name__}")
    return values


def _attr_map(items: Any, where: str, file: str) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise SourceError(file, where, "attributes is a list of {key, value}")
    out: dict[str, Any] = {}
    for i, kv in enumerate(items):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise SourceError(file, f"{where}[{i}]", "an attribute is {key: string, value}")
        out[kv["key"]] = _plain(kv.get("value", {}), f"{where}[{i}] ({kv['key']})", file)
    return out


# ------------------------------------------------------------------ ids and time
def episode_trace_id(header_line: str, event_lines: Sequence[str]) -> str:
    """The OTel trace id of an episode: 32 hex digits of a SHA-256 over its header and
    event lines (the result line, grader-side, does not count)."""
    h = hashlib.sha256(f"eair-otel/{EXPORTER_VERSION}\n".encode())
    h.update(header_line.encode("utf-8"))
    for line in event_lines:
        h.update(b"\n")
        h.update(line.encode("utf-8"))
    return h.hexdigest()[:32]


def _span_id(trace_id: str, role: str) -> str:
    return hashlib.sha256(f"{trace_id}/{role}".encode()).hexdigest()[:16]


def _ns(t: Any, position: int) -> int:
    minutes = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0
    return EPOCH_NS + round(minutes * _NS_PER_MINUTE) + position


# ------------------------------------------------------------------ export
@dataclass
class _Span:
    role: str
    name: str
    kind: int
    parent: _Span | None
    attributes: dict[str, Any]
    start: int
    end: int
    events: list[dict[str, Any]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # span ids in the same trace
    status: dict[str, Any] | None = None

    def cover(self, ns: int) -> None:
        self.start, self.end = min(self.start, ns), max(self.end, ns)


@dataclass
class _Episode:
    """One trace file, read raw (the exact JSON values the file holds)."""

    path: Path
    header: dict[str, Any]
    events: list[dict[str, Any]]
    result: dict[str, Any] | None
    trace_id: str
    #: the `.calls.ndjson` sidecar's lines, one per header model call (None: no sidecar)
    sidecar: list[dict[str, Any] | None] | None = None


def _calls_file(trace: Path) -> Path:
    """The sidecar beside an LLM episode's trace (`eairdsl.api.calls_file`'s naming)."""
    return trace.with_name(trace.name.removesuffix(".jsonl") + ".calls.ndjson")


def _read_sidecar(path: Path, calls: int) -> list[dict[str, Any] | None] | None:
    """The sidecar of the trace at `path`: every model call with its full messages, tool
    schemas and wall-clock latency, kept out of the byte-identical trace. Absent (a sim
    run, a trace copied without it): None. One that does not match the header's calls
    line for line is refused: its prompts would be attached to the wrong calls."""
    side = _calls_file(path)
    if calls == 0 or not side.is_file():
        return None
    try:
        lines = side.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise OtelError(f"cannot read {side}: {str(exc).splitlines()[0]}") from None
    if len(rows) != calls or not all(isinstance(r, dict) for r in rows):
        raise OtelError(f"{side} holds {len(rows)} model call(s), the trace header {calls}: "
                        "not this trace's sidecar (remove it, or export with --content off "
                        "--epoch fixed)")
    return list(rows)


#: how span times are made: `fixed` (simulated minutes from EPOCH_NS: byte-identical),
#: `recorded` (wall clock, anchored where the trace was written), `now` (wall clock,
#: anchored at the export)
EPOCHS = ("recorded", "now", "fixed")
#: a step's own duration on the wall clock: the runtime's bookkeeping takes microseconds
_STEP_NS = 1_000


def _latency_ns(side: dict[str, Any] | None) -> int:
    value = side.get("latency") if side is not None else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return round(value * 1e9)
    return 0


class _Clock:
    """When each event and model call happened, in Unix nanoseconds.

    `fixed`: simulated minutes from `EPOCH_NS` (the event's position added in
    nanoseconds), model calls as instants at the step they produced — the same
    traces give the same bytes. `recorded` and `now`: a wall clock. What took real
    time in an episode is its model calls (the sidecar's measured latency); the
    simulated minutes of tools and messages took none, so each step lasts a
    microsecond and each model call its latency, placed just before the step it
    produced (a judge's after the last step). The episode ends when its trace file
    was last written (`recorded`; the only wall-clock instant an episode leaves
    outside its byte-identical trace) or at the export (`now`, and `recorded` when
    the file's time cannot be read)."""

    def __init__(self, ep: _Episode, placed: Sequence[str | None],
                 sidecar: Sequence[dict[str, Any] | None], epoch: str,
                 now_ns: int | None) -> None:
        if epoch not in EPOCHS:
            raise OtelError(f"unknown epoch {epoch!r}; use one of {', '.join(EPOCHS)}")
        self.fixed = epoch == "fixed"
        self.kind = "simulated-minutes" if self.fixed else "wall-clock"
        self.latency = [_latency_ns(s) for s in sidecar]
        self.placed = list(placed)
        if self.fixed:
            self.origin = EPOCH_NS
            self.event_ns = [_ns(e["t"], i) for i, e in enumerate(ep.events)]
            return
        at_step: dict[str, int] = {}
        for step, lat in zip(self.placed, self.latency, strict=False):
            if step:
                at_step[step] = at_step.get(step, 0) + lat
        offsets, cursor = [], 0
        for e in ep.events:
            cursor += at_step.get(e["step"], 0) + _STEP_NS
            offsets.append(cursor)
        unplaced = sum(lat for step, lat in zip(self.placed, self.latency, strict=False)
                       if not step)
        total = cursor + unplaced + _STEP_NS
        end = time_ns() if now_ns is None else now_ns
        if epoch == "recorded":
            with contextlib.suppress(OSError):
                end = ep.path.stat().st_mtime_ns
        self.origin = end - total
        self.event_ns = [self.origin + o for o in offsets]
        self._after = (self.origin + cursor + _STEP_NS) if ep.events else self.origin
        self._before: dict[str, int] = {}  # step -> latency of its calls not yet placed

    def call_span(self, i: int, at_ns: int | None, parent: _Span) -> tuple[int, int]:
        """(start, end) of the i-th model call; `at_ns`: the time of the step it produced."""
        if self.fixed:
            ns = at_ns if at_ns is not None else parent.end
            if at_ns is None and self.placed[i] is not None:
                ns = parent.start
            return ns, ns
        lat = self.latency[i] if i < len(self.latency) else 0
        step = self.placed[i]
        if step and at_ns is not None:
            # the calls at one step run back to back and end a microsecond before it
            later = sum(self.latency[j] for j in range(i + 1, len(self.placed))
                        if self.placed[j] == step)
            end = at_ns - _STEP_NS // 2 - later
            return end - lat, end
        start = self._after
        self._after += lat
        return start, start + lat


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: for the command line to print."""

    out: Path
    traces: int
    spans: int
    events: int
    findings: int
    duplicates: int
    #: the requests (batches) written: a line each in the `jsonl` format
    requests: int = 0
    #: findings and verdicts posted to a backend's annotation API
    annotations: int = 0
    #: the OTLP/HTTP URL the requests were posted to (instead of `out`)
    endpoint: str | None = None


def _read_episode(path: Path, *, check: bool = True) -> _Episode:
    """A trace file as raw JSON lines, validated against the trace models on the way
    (`check`; an export validates every trace while planning, then reads each again to
    build it, and its trace id — a hash of the lines validated — says it is unchanged)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise OtelError(f"cannot read {path}: {exc}") from None
    if not lines:
        raise OtelError(f"{path} is empty")
    try:
        header = json.loads(lines[0])
        if check:
            TraceHeader.model_validate(header)
    except (ValueError, ValidationError) as exc:
        raise OtelError(f"{path}:1: not a trace header ({str(exc).splitlines()[0]})") from None
    if header.get("trace_schema") != TRACE_SCHEMA_VERSION:
        raise OtelError(f"{path}: trace schema {header.get('trace_schema')}, expected "
                        f"{TRACE_SCHEMA_VERSION}")
    events: list[dict[str, Any]] = []
    event_lines: list[str] = []
    result: dict[str, Any] | None = None
    for n, line in enumerate(lines[1:], 2):
        try:
            data = json.loads(line)
            if isinstance(data, dict) and data.get("type") == "result":
                result = data
                continue
            if check:
                TraceEvent.model_validate(data)
        except (ValueError, ValidationError) as exc:
            raise OtelError(f"{path}:{n}: not a trace event "
                            f"({str(exc).splitlines()[0]})") from None
        events.append(data)
        event_lines.append(line)
    calls = header.get("model_calls")
    sidecar = _read_sidecar(path, len(calls)) if isinstance(calls, list) else None
    return _Episode(path, header, events, result, episode_trace_id(lines[0], event_lines),
                    sidecar)


def _trace_names(paths: Iterable[Path]) -> list[str]:
    from eairdsl.audit.bundle import trace_file_names
    from eairdsl.errors import UsageError

    found: list[str] = []
    for p in paths:
        try:
            found.extend(trace_file_names(Path(p)))
        except UsageError as exc:
            raise OtelError(str(exc)) from None
    return found


class _Audits:
    """Which audit episode covers each trace, from `eairc audit`'s folder; a report is read
    when its episode is exported (all of a large study's reports at once were most of an
    export's memory)."""

    def __init__(self, audit_dir: Path) -> None:
        from eairdsl.audit.folder import AuditFolder
        from eairdsl.errors import UsageError

        self.folder = AuditFolder(audit_dir)
        try:
            index = self.folder.index()
        except UsageError as exc:
            raise OtelError(str(exc)) from None
        if not self.folder.has_index():
            raise OtelError(f"{audit_dir}: no index.json (not an `eairc audit` folder)")
        self.episodes: dict[str, str] = {}  # trace path (resolved, as text) -> audit episode
        for entry in index.entries:
            if entry.status == "failed" or not self.folder.report_path(entry.episode).is_file():
                continue
            for rel in entry.traces:
                self.episodes[str((audit_dir / rel).resolve())] = entry.episode

    def of(self, trace: Path) -> tuple[str, Report] | None:
        """The audit episode and report of a trace, if the audit covered it."""
        from eairdsl.audit.folder import AuditFolderError

        episode = self.episodes.get(str(trace.resolve()))
        if episode is None:
            return None
        try:
            return episode, self.folder.report(episode)
        except AuditFolderError as exc:
            raise OtelError(f"{exc.path}: not an audit report (contract v1): "
                            f"{exc.why}") from None


class _Builder:
    """The span tree of one episode."""

    def __init__(self, ep: _Episode, include_grader: bool, *, epoch: str = "fixed",
                 content: bool = True, now_ns: int | None = None) -> None:
        self.ep = ep
        self.tid = ep.trace_id
        self.content = content
        self.spans: list[_Span] = []
        self.host: dict[str, _Span] = {}  # step id -> the span its event sits on
        self.ns: dict[str, int] = {}
        #: the annotations a backend takes through its own API (`eairdsl.external.annotations`)
        self.notes: list[FindingNote] = []
        header = ep.header
        calls = header.get("model_calls") or []
        self.calls: list[dict[str, Any]] = [c if isinstance(c, dict) else {} for c in calls]
        self.sidecar = ep.sidecar if ep.sidecar is not None else [None] * len(self.calls)
        from eairdsl.study.viewer import place_calls

        self.placed: list[str | None] = place_calls(ep.events, self.calls) if calls else []
        self.clock = _Clock(ep, self.placed, self.sidecar, epoch, now_ns)
        world = str(header.get("world", "episode"))
        cell = study_cell(header)
        first = self.clock.event_ns[0] if ep.events else self.clock.origin
        self.root = self._span("root", f"invoke_workflow {world}", SPAN_KIND_INTERNAL, None, {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": world,
            "openinference.span.kind": "CHAIN",
            "gen_ai.conversation.id": cell.session,
            "session.id": cell.session,
            "metadata": cell.metadata(),
            "tag.tags": cell.tags(),
            "eair.world": world,
            "eair.clock": self.clock.kind,
        }, first)
        opening = next((e for e in ep.events if e["kind"] == "message"
                        and isinstance(e.get("content"), str)), None)
        final = [e for e in ep.events if e["kind"] == "message" and e.get("final")
                 and isinstance(e.get("content"), str)]
        if opening is not None:
            self.root.attributes["input.value"] = opening["content"]
            self.root.attributes["input.mime_type"] = "text/plain"
        if final:
            self.root.attributes["output.value"] = final[-1]["content"]
            self.root.attributes["output.mime_type"] = "text/plain"
        if include_grader and ep.result is not None:
            self.root.attributes["eair.result_line"] = _canon(ep.result)
        self._build()

    def _span(self, role: str, name: str, kind: int, parent: _Span | None,
              attributes: dict[str, Any], ns: int) -> _Span:
        span = _Span(role, name, kind, parent, attributes, ns, ns)
        self.spans.append(span)
        return span

    def _build(self) -> None:
        ep = self.ep
        tasks: dict[int, _Span] = {}
        calls: dict[str, _Span] = {}  # tool_call step -> its execute_tool span
        open_call: dict[str, str] = {}  # actor -> its unanswered tool call's step
        current: dict[str, _Span] = {}  # actor -> the task span it last acted in as handler
        last_tool_span: dict[tuple[int | None, str, str], _Span] = {}
        backends = ep.header.get("agents") or {}
        for pos, e in enumerate(ep.events):
            step, kind, actor = e["step"], e["kind"], e["actor"]
            ns = self.clock.event_ns[pos]
            self.ns[step] = ns
            task = e.get("task")
            span = self.root
            if isinstance(task, int):
                if task not in tasks:
                    tasks[task] = self._task_span(task, e, ns, current, open_call, calls)
                span = tasks[task]
                handler = span.attributes["gen_ai.agent.name"]
                if actor == handler:
                    current[actor] = span
                if kind == "message" and actor == handler and e.get("content") is not None:
                    span.attributes["output.value"] = e["content"]
                    span.attributes["output.mime_type"] = "text/plain"
                if handler in backends:
                    span.attributes["eair.agent.backend"] = str(backends[handler])
                backend = backends.get(handler)
                span.attributes["gen_ai.provider.name"] = backend_provider(
                    str(backend) if backend is not None else None)
                if isinstance(backend, str) and backend.startswith("llm:"):
                    span.attributes["gen_ai.request.model"] = split_model(
                        backend.removeprefix("llm:"))[1]
            if kind == "tool_call":
                span = self._tool_span(e, span, ns)
                calls[step] = span
                open_call[actor] = step
                last_tool_span[(task, actor, str(e.get("tool")))] = span
            elif kind == "tool_result" and isinstance(e.get("call"), str) and e["call"] in calls:
                span = calls[e["call"]]
                self._tool_result(span, e)
                if open_call.get(actor) == e["call"]:
                    del open_call[actor]
            elif kind == "state_update":
                span = last_tool_span.get((task, actor, str(e.get("tool"))), span)
            self.host[step] = span
            span.events.append(self._event(e, ns))
            self._cover(span, ns)
        self._model_calls(tasks)

    def _cover(self, span: _Span | None, ns: int) -> None:
        while span is not None:
            span.cover(ns)
            span = span.parent

    def _task_span(self, task: int, e: dict[str, Any], ns: int, current: dict[str, _Span],
                   open_call: dict[str, str], calls: dict[str, _Span]) -> _Span:
        """The `invoke_agent` span of a task: its handler is the opening message's recipient."""
        opener = e["actor"]
        handler = e.get("recipient") if e["kind"] == "message" and e.get("recipient") else opener
        parent, link = self.root, None
        sender = current.get(opener)
        if e["kind"] == "message" and e.get("tool") == "delegation":
            # a synchronous delegation: under the delegator's open call (agent as a tool)
            waiting = open_call.get(opener)
            parent = calls.get(waiting or "", sender or self.root)
        elif sender is not None and opener != handler:
            link = sender
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "openinference.span.kind": "AGENT",
            "gen_ai.agent.name": handler,
            "agent.name": handler,
            "eair.task": task,
        }
        if e["kind"] == "message" and e.get("content") is not None:
            attrs["input.value"] = e["content"]
            attrs["input.mime_type"] = "text/plain"
        span = self._span(f"task:{task}", f"invoke_agent {handler}", SPAN_KIND_INTERNAL,
                          parent, attrs, ns)
        if link is not None:
            span.links.append(_span_id(self.tid, link.role))
        return span

    def _tool_span(self, e: dict[str, Any], parent: _Span, ns: int) -> _Span:
        tool = str(e.get("tool"))
        args = e.get("args")
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "openinference.span.kind": "TOOL",
            "gen_ai.tool.name": tool,
            "tool.name": tool,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": e["step"],
            "gen_ai.agent.name": e["actor"],
        }
        if args is not None:
            attrs["gen_ai.tool.call.arguments"] = _canon(args)
            attrs["tool.parameters"] = _canon(args)
            attrs["input.value"] = _canon(args)
            attrs["input.mime_type"] = "application/json"
        return self._span(f"step:{e['step']}", f"execute_tool {tool}", SPAN_KIND_INTERNAL,
                          parent, attrs, ns)

    @staticmethod
    def _tool_result(span: _Span, e: dict[str, Any]) -> None:
        if "result" in e:
            result = e["result"]
            text = result if isinstance(result, str) else _canon(result)
            span.attributes["gen_ai.tool.call.result"] = text
            span.attributes["output.value"] = text
            span.attributes["output.mime_type"] = ("text/plain" if isinstance(result, str)
                                                   else "application/json")
        if e.get("rejected"):
            span.status = {"code": STATUS_ERROR, "message": str(e.get("reason") or "rejected")}
            span.attributes["error.type"] = "rejected"

    @staticmethod
    def _event(e: dict[str, Any], ns: int) -> dict[str, Any]:
        """The lossless span event of one trace event: every field, exact JSON types."""
        attrs = {f"eair.{k}": (_canon(v) if k in _JSON_FIELDS else v)
                 for k, v in e.items() if k != "type" and v is not None}
        return {"name": f"eair.{e['kind']}", "timeUnixNano": str(ns),
                "attributes": _attrs(attrs)}

    def _model_calls(self, tasks: dict[int, _Span]) -> None:
        """`chat` spans for the header's model calls, each under the task it was made for,
        at the step it produced (`viewer.place_calls`), lasting its measured latency on a
        wall clock (`_Clock`), with its prompt and answer unless `content` is off."""
        for i, (call, at) in enumerate(zip(self.calls, self.placed, strict=True)):
            if not call:
                continue
            task = call.get("task")
            parent = tasks.get(task, self.root) if isinstance(task, int) else self.root
            start, end = self.clock.call_span(i, self.ns.get(at) if at else None, parent)
            model = call.get("model")
            provider, native = split_model(model) if isinstance(model, str) else (None, None)
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "openinference.span.kind": "LLM",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": native,
                # what answered is not recorded apart from what was asked: the request's
                "gen_ai.response.model": native,
                "llm.model_name": native,
                "llm.provider": openinference_provider(provider) if provider else None,
                "gen_ai.agent.name": call.get("participant") if isinstance(
                    call.get("participant"), str) else None,
                "eair.model_call": _canon(call),
                "eair.model_call.index": i,
                "eair.model_call.step": at,
            }
            for key, names in (("tokens_in", ("gen_ai.usage.input_tokens",
                                              "llm.token_count.prompt")),
                               ("tokens_out", ("gen_ai.usage.output_tokens",
                                               "llm.token_count.completion"))):
                v = call.get(key)
                if isinstance(v, int) and not isinstance(v, bool):
                    for n in names:
                        attrs[n] = v
            if isinstance(call.get("finish_reason"), str):
                attrs["gen_ai.response.finish_reasons"] = [call["finish_reason"]]
            if isinstance(call.get("reply"), str):
                attrs["output.value"] = call["reply"]
                attrs["output.mime_type"] = "text/plain"
            elif call.get("tool_calls"):  # a call that only requested tools: those are its output
                attrs["output.value"] = _canon(call["tool_calls"])
                attrs["output.mime_type"] = "application/json"
            if self.content:
                attrs.update(chat_content(call, self.sidecar[i]))
            span = self._span(f"model_call:{i}", f"chat {native}", SPAN_KIND_CLIENT, parent,
                              attrs, start)
            span.end = end
            if call.get("error"):
                span.status = {"code": STATUS_ERROR, "message": str(call["error"])}
            self._cover(parent, start)
            self._cover(parent, end)

    # -------------------------------------------------------------- findings
    def findings(self, episode: str, report: Report) -> int:
        """`gen_ai.evaluation.result` events for a report: its verdict on the root, each
        finding and lead on its boundary step's span and on the root."""
        base = {"eair.audit.episode": episode, "eair.audit.report_id": report.report_id,
                "eair.audit.auditor": report.auditor.kind}
        end = self.root.end
        self.root.events.append({
            "name": "gen_ai.evaluation.result", "timeUnixNano": str(end),
            "attributes": _attrs({**base, "gen_ai.evaluation.name": "eair.audit.verdict",
                                  "gen_ai.evaluation.score.label": report.verdict})})
        annotator: Literal["LLM", "CODE"] = "LLM" if report.auditor.kind == "llm" else "CODE"
        meta = {"episode": episode, "report_id": report.report_id,
                "auditor": report.auditor.kind}
        root_id = _span_id(self.tid, self.root.role)
        self.notes.append(FindingNote(
            trace_id=self.tid, span_id=root_id, trace_level=True, name="eair.audit.verdict",
            label=report.verdict, annotator=annotator, metadata=meta,
            identifier=f"{report.report_id}/verdict"))
        n = 0
        for f in [*report.findings, *report.leads]:
            step = f.boundary.step
            attrs = {**base,
                     "gen_ai.evaluation.name": f"eair.audit.finding.{f.risk}",
                     "gen_ai.evaluation.score.label": f.status,
                     "gen_ai.evaluation.score.value": float(f.confidence),
                     "gen_ai.evaluation.explanation": f.property.text or f.property.policy,
                     "eair.finding.id": f.id, "eair.finding.risk": f.risk,
                     "eair.finding.status": f.status,
                     "eair.finding.nature": f.nature,
                     "eair.finding.boundary.kind": f.boundary.kind,
                     "eair.finding.boundary.edge": f.boundary.edge,
                     "eair.finding.boundary.step": step,
                     "eair.finding.evidence.steps": [u.step for u in f.evidence],
                     "eair.finding": _canon(f.model_dump(mode="json"))}
            host = self.host.get(step) if isinstance(step, str) else None
            at = self.ns.get(step, end) if isinstance(step, str) else end
            attrs["eair.finding.on_boundary_span"] = host is not None
            event = {"name": "gen_ai.evaluation.result", "timeUnixNano": str(at),
                     "attributes": _attrs(attrs)}
            if host is not None and host is not self.root:
                host.events.append(event)
            self.root.events.append(dict(event))
            self.notes.append(FindingNote(
                trace_id=self.tid, span_id=_span_id(self.tid, (host or self.root).role),
                name=f"eair.audit.finding.{f.risk}", label=f.status,
                score=float(f.confidence),
                explanation=f.property.text or f.property.policy, annotator=annotator,
                identifier=f"{report.report_id}/{f.id}",
                metadata={**meta, "finding_id": f.id, "risk": f.risk, "nature": f.nature,
                          "boundary": {"kind": f.boundary.kind, "edge": f.boundary.edge,
                                       "step": step},
                          "evidence_steps": [u.step for u in f.evidence]}))
            n += 1
        return n

    # -------------------------------------------------------------- OTLP
    def otlp(self) -> list[dict[str, Any]]:
        ids = {id(s): _span_id(self.tid, s.role) for s in self.spans}
        out = []
        for s in self.spans:
            span: dict[str, Any] = {
                "traceId": self.tid, "spanId": ids[id(s)], "name": s.name, "kind": s.kind,
                "startTimeUnixNano": str(s.start), "endTimeUnixNano": str(s.end),
                "attributes": _attrs(s.attributes),
            }
            if s.parent is not None:
                span["parentSpanId"] = ids[id(s.parent)]
            if s.events:
                span["events"] = sorted(s.events, key=lambda ev: int(ev["timeUnixNano"]))
            if s.links:
                span["links"] = [{"traceId": self.tid, "spanId": sid} for sid in s.links]
            if s.status is not None:
                span["status"] = s.status
            out.append(span)
        return out


def _dumps(value: Any) -> bytes:
    """The export's JSON bytes: sorted keys, no spaces, UTF-8 (byte-identical runs)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class OtlpBatch:
    """One OTLP `ExportTraceServiceRequest` in its JSON mapping (`{"resourceSpans": […]}`):
    a resource with one trace per episode, for up to the batch size's episodes, and what
    it holds. The unit a sink receives: a file line now, an OTLP/HTTP request later."""

    request: dict[str, Any]
    traces: int
    spans: int
    events: int
    findings: int
    #: the findings of the batch's episodes as backend annotations (sent after the spans)
    notes: tuple[FindingNote, ...] = ()


class OtlpSink(Protocol):
    """Where an export's batches go, one at a time, in trace-id order. `close` is called
    once after the last batch (not after an error)."""

    def send(self, batch: OtlpBatch) -> None: ...

    def close(self) -> None: ...


class OtlpExport:
    """The episodes under `paths` (traces, run or study folders), planned for export.

    Planning reads and validates every trace for its trace id (its content identity):
    a copy of an episode already found is counted in `duplicates` and exported once,
    and the episodes go in trace-id order, so the same traces give the same bytes
    from any folder. Only the ids and paths are kept; `batches` reads each trace again
    and builds its spans when its turn comes, so an export holds one batch at a time
    whatever the study's size (the whole document in memory was 1.25 GB at 1,050
    episodes). A bad trace, audit folder or audit report raises OtelError here, before
    anything is sent; a trace that changes afterwards, when its batch is built."""

    def __init__(self, paths: Path | Sequence[Path], audits: Path | None = None, *,
                 include_grader: bool = False, epoch: str = "fixed", content: bool = True,
                 now_ns: int | None = None) -> None:
        many = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
        if epoch not in EPOCHS:
            raise OtelError(f"unknown epoch {epoch!r}; use one of {', '.join(EPOCHS)}")
        self.audits = _Audits(Path(audits)) if audits is not None else None
        self.include_grader = include_grader
        self.epoch = epoch
        self.content = content
        #: the export's own time: what `now` (and `recorded` without a file time) anchors to
        self.now_ns = time_ns() if now_ns is None else now_ns
        #: the findings of the episode `resource` built last, as backend annotations
        self.last_notes: list[FindingNote] = []
        found = _trace_names(many)  # as text: see `trace_file_names`
        first: dict[str, str] = {}
        self.duplicates = 0
        for name in found:
            tid = _read_episode(Path(name)).trace_id
            if tid in first:
                self.duplicates += 1  # the same episode content: exported once
                continue
            first[tid] = name
        del found
        #: (trace id, trace file) of every episode exported, in export order
        self.episodes: list[tuple[str, str]] = sorted(first.items())
        if self.audits is not None:  # every report read once now, so a bad one stops
            for _, name in self.episodes:  # the export before anything is sent
                self.audits.of(Path(name))

    @property
    def traces(self) -> int:
        return len(self.episodes)

    def resource(self, tid: str, name: str) -> tuple[dict[str, Any], int, int, int]:
        """One episode's OTLP resource spans, with its span, event and finding counts; its
        findings as backend annotations are left in `last_notes` (the batch takes them)."""
        path = Path(name)
        ep = _read_episode(path, check=False)
        if ep.trace_id != tid:
            raise OtelError(f"{path} changed during the export (its content is not what was "
                            "read when the export began); export again")
        b = _Builder(ep, self.include_grader, epoch=self.epoch, content=self.content,
                     now_ns=self.now_ns)
        self.last_notes = b.notes
        audited = self.audits.of(ep.path) if self.audits is not None else None
        findings = b.findings(*audited) if audited is not None else 0
        otlp_spans = b.otlp()
        header = {k: v for k, v in ep.header.items() if k != "model_calls"}
        return {
            "resource": {"attributes": _attrs({
                "service.name": "eairdsl",
                "service.version": __version__,
                "eair.header": _canon(header),
                "eair.episode": tid,
            })},
            "scopeSpans": [{"scope": {"name": SCOPE, "version": EXPORTER_VERSION},
                            "spans": otlp_spans}],
        }, len(otlp_spans), len(ep.events), findings

    def batches(self, size: int = 1, max_spans: int | None = None) -> Iterator[OtlpBatch]:
        """The export as requests of up to `size` episodes and (with `max_spans`) at most
        that many spans each, built one at a time. An episode with more spans than
        `max_spans` goes in requests of its own, its spans split in order (each request
        repeats its resource); the spans, concatenated, are the same in any batching."""
        if size < 1:
            raise OtelError(f"a batch holds at least one episode, not {size}")
        if max_spans is not None and max_spans < 1:
            raise OtelError(f"a batch holds at least one span, not {max_spans}")
        pending: list[tuple[dict[str, Any], int, int, int, list[FindingNote]]] = []

        def flush() -> OtlpBatch:
            batch = OtlpBatch({"resourceSpans": [p[0] for p in pending]}, len(pending),
                              sum(p[1] for p in pending), sum(p[2] for p in pending),
                              sum(p[3] for p in pending),
                              tuple(n for p in pending for n in p[4]))
            pending.clear()
            return batch

        for tid, name in self.episodes:
            rs, n_spans, n_events, n_findings = self.resource(tid, name)
            one = (rs, n_spans, n_events, n_findings, self.last_notes)
            if pending and (len(pending) >= size or (
                    max_spans is not None
                    and sum(p[1] for p in pending) + n_spans > max_spans)):
                yield flush()
            if max_spans is not None and n_spans > max_spans:
                yield from _split(one, max_spans)
                continue
            pending.append(one)
        if pending:
            yield flush()


def _split(one: tuple[dict[str, Any], int, int, int, list[FindingNote]],
           max_spans: int) -> Iterator[OtlpBatch]:
    """An episode too big for one request: its spans in requests of `max_spans`, each with
    its resource and scope; the episode, its events and findings count in the first."""
    rs, n_spans, n_events, n_findings, notes = one
    scope = rs["scopeSpans"][0]
    spans = scope["spans"]
    for k, start in enumerate(range(0, n_spans, max_spans)):
        part = spans[start:start + max_spans]
        request = {"resourceSpans": [{**rs, "scopeSpans": [{**scope, "spans": part}]}]}
        first = k == 0
        yield OtlpBatch(request, int(first), len(part), n_events if first else 0,
                        n_findings if first else 0, tuple(notes) if first else ())


class JsonDocumentSink:
    """The single OTLP JSON document `{"resourceSpans": […]}` (the `otlp-json` format),
    written a resource at a time: the bytes of `json.dumps` of the whole document with
    sorted keys and no spaces, without the document ever being in memory."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.first = True
        out.write(b'{"resourceSpans":[')

    def send(self, batch: OtlpBatch) -> None:
        for rs in batch.request["resourceSpans"]:
            self.out.write(_dumps(rs) if self.first else b"," + _dumps(rs))
            self.first = False

    def close(self) -> None:
        self.out.write(b"]}\n")


class JsonLinesSink:
    """OTLP JSON Lines (the `jsonl` format): one `ExportTraceServiceRequest` per line, as
    an OpenTelemetry Collector's file exporter writes them and reads them back."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def send(self, batch: OtlpBatch) -> None:
        self.out.write(_dumps(batch.request) + b"\n")

    def close(self) -> None:
        pass


#: the file formats of `export_otel`: the single document, JSON Lines, length-delimited
#: protobuf requests
FORMATS = ("otlp-json", "otlp-proto", "jsonl")
#: spans per request when none is asked for and requests go to a backend (or a protobuf
#: file): the OpenTelemetry SDK's batch processor sends at most 512 spans a request
DEFAULT_MAX_SPANS = 512


def otlp_document(paths: Sequence[Path], audits: Path | None = None, *,
                  include_grader: bool = False, epoch: str = "fixed", content: bool = True,
                  ) -> tuple[dict[str, Any], ExportSummary]:
    """The OTLP JSON document (`{"resourceSpans": […]}`) of every episode under `paths`,
    in memory: for a few episodes (tests, tools); `export_otel` streams."""
    plan = OtlpExport(paths, audits, include_grader=include_grader, epoch=epoch,
                      content=content)
    resources: list[dict[str, Any]] = []
    spans = events = findings = 0
    for batch in plan.batches():
        resources.extend(batch.request["resourceSpans"])
        spans, events, findings = (spans + batch.spans, events + batch.events,
                                   findings + batch.findings)
    return {"resourceSpans": resources}, ExportSummary(
        out=Path(), traces=plan.traces, spans=spans, events=events, findings=findings,
        duplicates=plan.duplicates)


def send_all(plan: OtlpExport, sink: OtlpSink, batch: int = 1, *,
             max_spans: int | None = None,
             notes: list[FindingNote] | None = None) -> ExportSummary:
    """Every batch of `plan` to `sink`, then its `close`; what was sent. `notes`, when
    given, receives the batches' findings as backend annotations."""
    spans = events = findings = requests = 0
    for b in plan.batches(batch, max_spans):
        sink.send(b)
        spans, events, findings = spans + b.spans, events + b.events, findings + b.findings
        requests += 1
        if notes is not None:
            notes.extend(b.notes)
    sink.close()
    return ExportSummary(out=Path(), traces=plan.traces, spans=spans, events=events,
                         findings=findings, duplicates=plan.duplicates, requests=requests)


def export_otel(paths: Path | Sequence[Path], out: Path | None,
                audits: Path | None = None, *, include_grader: bool = False,
                format: str = "otlp-json", batch: int | None = None,
                max_spans: int | None = None, epoch: str = "fixed", content: bool = True,
                endpoint: str | None = None, headers: Mapping[str, str] | None = None,
                annotations: str | None = None, annotations_endpoint: str | None = None,
                policy: RetryPolicy | None = None, now_ns: int | None = None,
                sleep: Callable[[float], None] | None = None) -> ExportSummary:
    """Export every episode under `paths` (traces, run or study folders), episode by
    episode in bounded memory, to the file `out` or to the OTLP/HTTP `endpoint`.

    A file is one OTLP JSON document (`otlp-json`, the default), one
    `ExportTraceServiceRequest` per line (`jsonl`) or length-delimited binary requests
    (`otlp-proto`); an endpoint takes binary requests POSTed to `/v1/traces`. Requests
    hold up to `batch` episodes and `max_spans` spans (defaults: one episode a line in
    `jsonl`; 512 spans a request for protobuf). `epoch` picks the time base (`fixed`:
    simulated minutes, byte-identical; `recorded`/`now`: wall clock, see `_Clock`),
    `content` whether model calls carry their prompts and answers. `annotations`
    (`phoenix` or `langfuse`) also posts the audit's findings to the backend's
    annotation API, after the spans (`eairdsl.external.annotations`)."""
    if format not in FORMATS:
        raise OtelError(f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    if (out is None) == (endpoint is None):
        raise OtelError("give either an output file or an endpoint")
    if annotations is not None and annotations not in BACKENDS:
        raise OtelError(f"unknown annotation backend {annotations!r}; use one of "
                        f"{', '.join(BACKENDS)}")
    if annotations is not None and audits is None:
        raise OtelError("annotations are an audit's findings: give the audit folder too")
    binary = endpoint is not None or format == "otlp-proto"
    if batch is None:
        batch = 1 if format == "jsonl" and endpoint is None else sys.maxsize
    if max_spans is None and binary:
        max_spans = DEFAULT_MAX_SPANS
    if batch < 1:
        raise OtelError(f"a batch holds at least one episode, not {batch}")
    if max_spans is not None and max_spans < 1:
        raise OtelError(f"a batch holds at least one span, not {max_spans}")
    sent_headers = dict(env_headers() if headers is None else headers)
    retry = policy or RetryPolicy()
    try:
        url = traces_url(endpoint) if endpoint is not None else None
        notes_url = annotations_url(annotations, annotations_endpoint or endpoint or "") \
            if annotations is not None else None
    except ValueError as exc:
        raise OtelError(str(exc) if annotations_endpoint or endpoint else
                        "annotations need --endpoint or --annotations-endpoint") from None
    if out is not None:
        out = Path(out)
        _refuse_target(out)
    plan = OtlpExport(paths, audits, include_grader=include_grader, epoch=epoch,
                      content=content, now_ns=now_ns)
    notes: list[FindingNote] = []
    extra: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    try:
        if url is not None:
            done = send_all(plan, HttpSink(url, sent_headers, retry, **extra), batch,
                            max_spans=max_spans, notes=notes)
        else:
            assert out is not None
            # through a part file renamed over `out` when whole: an export that fails or
            # is interrupted leaves an earlier file as it was, never half a document
            try:
                with open_atomic(out) as fh:
                    sink: OtlpSink = (JsonDocumentSink(fh) if format == "otlp-json" else
                                      JsonLinesSink(fh) if format == "jsonl" else
                                      ProtobufFileSink(fh))
                    done = send_all(plan, sink, batch, max_spans=max_spans, notes=notes)
            except OSError as exc:
                raise OtelError(f"cannot write {out}: {exc.strerror or exc}") from None
        sent = 0
        if notes_url is not None and annotations is not None:
            send_annotations(annotations, notes_url, notes, sent_headers, retry, **extra)
            sent = len(notes)
    except TransportError as exc:
        raise OtelError(str(exc)) from None
    return dataclasses.replace(done, out=out or Path(), annotations=sent, endpoint=url)


def _refuse_target(out: Path) -> None:
    """`-o` is the user's: a folder, or a SQLite database (a study's `results.sqlite`,
    which a plain overwrite replaced with JSON), is refused before anything is read."""
    if out.is_dir():
        raise OtelError(f"{out} is a folder; -o takes the OTLP JSON file to write")
    if out.is_file():
        from eairdsl.study.sqlite_file import is_sqlite

        if is_sqlite(out):
            raise OtelError(f"{out} is a SQLite database (a study's results store?); the "
                            "export would overwrite it — choose another -o")


# ------------------------------------------------------------------ import
@dataclass
class _InSpan:
    index: int  # position in the file
    trace_id: str
    span_id: str
    parent: str | None
    name: str
    start: int
    end: int
    attrs: dict[str, Any]
    resource: dict[str, Any]
    events: list[tuple[int, str, dict[str, Any]]]  # (time, name, attributes)
    status: dict[str, Any]
    children: list[_InSpan] = field(default_factory=list)


def _documents(path: Path) -> Iterator[Any]:
    """The OTLP JSON objects of a file, one at a time: one document, or one per line (a
    collector's file exporter writes JSON Lines), each read whole but never the file."""
    return read_records(path, lines=True)


def _hex_id(value: Any, digits: int, where: str, file: str, *, optional: bool) -> str | None:
    if optional and (value is None or value == ""):
        return None
    if not isinstance(value, str) or len(value) != digits or not _HEX.match(value.lower()):
        raise SourceError(file, where, f"expected {digits} hex digits, found {value!r}")
    return value.lower()


def _nanos(value: Any, where: str, file: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SourceError(file, where, "a time is Unix nanoseconds (a string or integer)")
    try:
        return int(value)
    except ValueError:
        raise SourceError(file, where, f"time {value!r} is not an integer") from None


def read_otlp(path: Path) -> list[_InSpan]:
    """Every span of an OTLP JSON file, in file order, checked for shape."""
    file = str(path)
    spans: list[_InSpan] = []
    for d, doc in enumerate(_documents(path)):
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
            raise SourceError(file, f"document {d}", "an OTLP JSON trace document has "
                              "resourceSpans (a list)")
        for r, rs in enumerate(doc["resourceSpans"]):
            where_r = f"resourceSpans[{r}]"
            if not isinstance(rs, dict):
                raise SourceError(file, where_r, "not an object")
            resource = _attr_map((rs.get("resource") or {}).get("attributes"),
                                 f"{where_r}.resource.attributes", file)
            scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", []))
            if not isinstance(scopes, list):
                raise SourceError(file, f"{where_r}.scopeSpans", "not a list")
            for s, ss in enumerate(scopes):
                for i, sp in enumerate((ss or {}).get("spans") or []):
                    spans.append(_in_span(sp, f"{where_r}.scopeSpans[{s}].spans[{i}]", file,
                                          len(spans), resource))
    return spans


def _in_span(sp: Any, where: str, file: str, index: int,
             resource: dict[str, Any]) -> _InSpan:
    if not isinstance(sp, dict):
        raise SourceError(file, where, "a span is an object")
    trace_id = _hex_id(sp.get("traceId"), 32, f"{where}.traceId", file, optional=False)
    span_id = _hex_id(sp.get("spanId"), 16, f"{where}.spanId", file, optional=False)
    parent = _hex_id(sp.get("parentSpanId"), 16, f"{where}.parentSpanId", file, optional=True)
    start = _nanos(sp.get("startTimeUnixNano", 0), f"{where}.startTimeUnixNano", file)
    end = _nanos(sp.get("endTimeUnixNano", start), f"{where}.endTimeUnixNano", file)
    events = []
    for j, ev in enumerate(sp.get("events") or []):
        w = f"{where}.events[{j}]"
        if not isinstance(ev, dict):
            raise SourceError(file, w, "a span event is an object")
        events.append((_nanos(ev.get("timeUnixNano", start), f"{w}.timeUnixNano", file),
                       str(ev.get("name", "")), _attr_map(ev.get("attributes"),
                                                          f"{w}.attributes", file)))
    status = sp.get("status") or {}
    assert trace_id is not None and span_id is not None
    return _InSpan(index, trace_id, span_id, parent, str(sp.get("name", "")), start, end,
                   _attr_map(sp.get("attributes"), f"{where}.attributes", file), resource,
                   events, status if isinstance(status, dict) else {})


def _by_trace(spans: list[_InSpan]) -> dict[str, list[_InSpan]]:
    out: dict[str, list[_InSpan]] = {}
    for s in spans:
        out.setdefault(s.trace_id, []).append(s)
    return out


class _Exact(ImportedTrace):
    """A trace exported by `export_otel`: its own header comes back, with the source block,
    and the file goes where `eairc run` put it: OUT/<world>/<condition>/<instance>-s<seed>."""

    original: dict[str, Any]

    def header(self) -> TraceHeader:
        data = dict(self.original)
        data["source"] = self.source.model_dump(mode="json")
        return TraceHeader.model_validate(data)

    def write(self, out: Path) -> list[Path]:
        # the builder writes OUT/<its world>/…: here the run's world is one folder up
        return super().write(out / safe_file_name(str(self.original.get("world"))))


def _eair_events(spans: list[_InSpan], file: str) -> list[tuple[int, dict[str, Any]]]:
    """The `eair.*` span events of a trace, as (order, event fields)."""
    out: list[tuple[int, dict[str, Any]]] = []
    for s in spans:
        for j, (_, name, attrs) in enumerate(s.events):
            if not name.startswith("eair.") or "eair.step" not in attrs:
                continue
            where = f"span {s.span_id} event {j}"
            fields: dict[str, Any] = {}
            for key, value in attrs.items():
                if not key.startswith("eair."):
                    continue
                k = key.removeprefix("eair.")
                if k not in _EVENT_FIELDS:
                    raise SourceError(file, where, f"unknown event field {key!r}")
                if k not in _JSON_FIELDS:
                    fields[k] = value
                    continue
                if not isinstance(value, str):
                    raise SourceError(file, where, f"{key} is JSON text")
                try:
                    fields[k] = json.loads(value)
                except ValueError:
                    raise SourceError(file, where, f"{key} is not JSON") from None
            try:
                TraceEvent.model_validate(fields)
            except ValidationError as exc:
                raise SourceError(file, where, f"not a trace event: "
                                  f"{str(exc).splitlines()[0]}: "
                                  f"{str(exc).splitlines()[1].strip()}") from None
            m = _STEP.match(fields["step"])
            order = int(m.group(1)) if m else len(out)
            out.append((order, fields))
    return sorted(out, key=lambda x: x[0])


def _read_exact(path: Path, spans: list[_InSpan], digest: str,
                clash: set[str]) -> ImportedTrace:
    """An `export_otel` trace; `clash`: names that two traces of the file share (their
    files get the trace id's first digits, so neither overwrites the other)."""
    file = str(path)
    resource = spans[0].resource
    raw = resource.get("eair.header")
    try:
        header = json.loads(raw) if isinstance(raw, str) else None
        TraceHeader.model_validate(header)
    except (ValueError, ValidationError):
        raise SourceError(file, f"trace {spans[0].trace_id}", "eair.header is not a trace "
                          "header") from None
    assert isinstance(header, dict)
    header.pop("source", None)
    calls = sorted(((s.attrs.get("eair.model_call.index", 0), s.attrs["eair.model_call"])
                    for s in spans if isinstance(s.attrs.get("eair.model_call"), str)),
                   key=lambda c: c[0])
    if calls:
        header["model_calls"] = [json.loads(c) for _, c in calls]
    instance = f"{header.get('instance')}-s{header.get('seed')}"
    if f"{header.get('world')}/{header.get('condition')}/{instance}" in clash:
        instance = f"{instance}-{spans[0].trace_id[:8]}"
    built = _Exact(format=FORMAT, src=path, instance=instance,
                   world=str(header.get("condition")),
                   framework="eairdsl", importer_version=EXPORTER_VERSION, sha256=digest)
    built.original = header
    built.note(f"an eairdsl export (trace {spans[0].trace_id}): events read from the "
               "lossless eair.* span events")
    for _, fields in _eair_events(spans, file):
        built.events.append(Event(**fields))
        for name in (fields.get("actor"), fields.get("recipient")):
            if isinstance(name, str):
                built.participant(name)
    for s in spans:
        result = s.attrs.get("eair.result_line")
        if isinstance(result, str):
            built.withhold("result", json.loads(result), "the episode's measurements and "
                           "witness steps are grader-side")
    _withhold_evaluations(built, spans)
    return built


def _exact_name(span: _InSpan) -> str:
    """world/condition/instance-sSEED of an exported trace, from its resource's header."""
    try:
        h = json.loads(str(span.resource.get("eair.header")))
    except ValueError:
        return ""
    if not isinstance(h, dict):
        return ""
    return f"{h.get('world')}/{h.get('condition')}/{h.get('instance')}-s{h.get('seed')}"


def _withhold_evaluations(built: ImportedTrace, spans: list[_InSpan]) -> None:
    evaluations = [{"span": s.span_id, "time": t, **attrs} for s in spans
                   for t, name, attrs in s.events if name == "gen_ai.evaluation.result"]
    if evaluations:
        built.withhold("evaluations", evaluations, "evaluation results are labels, kept "
                       "from the auditor")


_AGENT_OPS = {"invoke_agent": "AGENT", "create_agent": "AGENT", "execute_tool": "TOOL",
              "chat": "LLM", "text_completion": "LLM", "generate_content": "LLM"}


def _kind(s: _InSpan) -> str:
    kind = s.attrs.get("openinference.span.kind")
    if isinstance(kind, str) and kind:
        return kind.upper()
    op = s.attrs.get("gen_ai.operation.name")
    return _AGENT_OPS.get(op, "") if isinstance(op, str) else ""


def _name_after(s: _InSpan, prefix: str, *keys: str) -> str | None:
    for k in keys:
        v = s.attrs.get(k)
        if isinstance(v, str) and v:
            return v
    if s.name.startswith(prefix + " ") and s.name[len(prefix) + 1:]:
        return s.name[len(prefix) + 1:]
    return s.name or None


def _messages(value: Any) -> list[dict[str, Any]]:
    """gen_ai.input.messages / gen_ai.output.messages (JSON text of a list) -> messages."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _text(message: dict[str, Any]) -> str | None:
    """A message's text: `content` (a string) or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts", content)
    if isinstance(parts, list):
        texts = [p.get("content", p.get("text")) for p in parts if isinstance(p, dict)]
        joined = [t for t in texts if isinstance(t, str)]
        return "\n".join(joined) if joined else None
    return None


#: flattened message lists: OpenInference `llm.input_messages.N.message.role|content` and
#: the older GenAI `gen_ai.prompt.N.role|content` / `gen_ai.completion.N.role|content`
_FLAT = {"input": (("llm.input_messages.", ".message."), ("gen_ai.prompt.", ".")),
         "output": (("llm.output_messages.", ".message."), ("gen_ai.completion.", "."))}


def _flat_last(s: _InSpan, side: str) -> dict[str, Any] | None:
    """The last message of a flattened list (highest index), as {role, content}."""
    for prefix, middle in _FLAT[side]:
        found: dict[int, dict[str, Any]] = {}
        for key, value in s.attrs.items():
            if not key.startswith(prefix):
                continue
            index, _, rest = key[len(prefix):].partition(middle)
            if index.isdigit() and rest in ("role", "content"):
                found.setdefault(int(index), {})[rest] = value
        if found:
            return found[max(found)]
    return None


def _io(s: _InSpan, side: str) -> tuple[str | None, str | None]:
    """(sender role the source states, text) of a span's input or output: the GenAI
    message list, else `input.value`/`output.value`, else a flattened message list."""
    msgs = _messages(s.attrs.get(f"gen_ai.{side}.messages"))
    if msgs:
        last = msgs[-1]
        role = last.get("role")
        return (role if isinstance(role, str) and role else None), _text(last)
    value = s.attrs.get(f"{side}.value")
    if isinstance(value, str):
        return None, value
    flat = _flat_last(s, side)
    if flat is None:
        return None, None
    role, content = flat.get("role"), flat.get("content")
    return (role if isinstance(role, str) and role else None,
            content if isinstance(content, str) else None)


def _value(s: _InSpan, keys: Sequence[str], mime_key: str) -> Any:
    for k in keys:
        if k in s.attrs:
            v = s.attrs[k]
            if isinstance(v, str) and s.attrs.get(mime_key) == "application/json":
                try:
                    return json.loads(v)
                except ValueError:
                    return v
            return v
    return None


class _Foreign:
    """Walk a foreign span tree in time order into the builder, inventing nothing."""

    def __init__(self, built: ImportedTrace, spans: list[_InSpan]) -> None:
        self.b = built
        self.t0 = min(s.start for s in spans)
        ids = {s.span_id: s for s in spans}
        roots: list[_InSpan] = []
        for s in spans:
            parent = ids.get(s.parent) if s.parent else None
            (parent.children if parent is not None else roots).append(s)
            if s.parent and parent is None:
                built.note(f"span {s.span_id}'s parent {s.parent} is not in the file: read "
                           "as a root")
        for s in spans:
            s.children.sort(key=lambda c: (c.start, c.index))
        self.skipped = 0
        for r in sorted(roots, key=lambda c: (c.start, c.index)):
            self.walk(r, None)
        if self.skipped:
            built.note(f"{self.skipped} span(s) of no agent, tool or model kind carry no "
                       "event (their children were read)")

    def t(self, ns: int) -> float:
        return (ns - self.t0) / _NS_PER_MINUTE

    def walk(self, s: _InSpan, agent: str | None) -> None:
        kind = _kind(s)
        if kind == "AGENT":
            self.agent(s, agent)
        elif kind == "TOOL":
            self.tool(s, agent)
        elif kind == "LLM":
            _, text = _io(s, "output")
            if text is not None:
                self.b.decision(agent or self.emitter(s), text, src_index=s.index,
                                src_id=s.span_id, t=self.t(s.end))
            for c in s.children:
                self.walk(c, agent)
        else:
            self.skipped += 1
            for c in s.children:
                self.walk(c, agent)

    @staticmethod
    def emitter(s: _InSpan) -> str:
        """Who acted when no agent span encloses a span: the service the resource names."""
        name = s.resource.get("service.name")
        return name if isinstance(name, str) and name else "unknown"

    def agent(self, s: _InSpan, parent: str | None) -> None:
        name = _name_after(s, "invoke_agent", "gen_ai.agent.name", "agent.name") or "agent"
        role, text = _io(s, "input")
        delegated = parent is not None and parent != name
        if delegated:
            assert parent is not None
            self.b.delegate(parent, name, text, src_index=s.index, src_id=s.span_id,
                            t=self.t(s.start))
        elif text is not None:
            if role is not None and role != name:
                self.b.message(role, text, recipient=name, basis="source-field",
                               src_index=s.index, src_id=s.span_id, t=self.t(s.start))
            else:  # the sender is not stated: no one is named, no edge
                self.b.participant(name)
                self.b.message("unknown" if role is None else role, text, src_index=s.index,
                               src_id=s.span_id, t=self.t(s.start))
        self.b.participant(name)
        for c in s.children:
            self.walk(c, name)
        _, out = _io(s, "output")
        if delegated:
            if out is not None:
                self.b.reply(out, src_index=s.index, src_id=s.span_id, t=self.t(s.end))
            else:
                self.b.unanswered()
        elif out is not None:
            self.b.message(name, out, src_index=s.index, src_id=s.span_id, t=self.t(s.end),
                           final=True)

    def tool(self, s: _InSpan, agent: str | None) -> None:
        tool = _name_after(s, "execute_tool", "gen_ai.tool.name", "tool.name") or "tool"
        actor = agent or self.emitter(s)
        raw = _value(s, ("gen_ai.tool.call.arguments", "tool.parameters", "input.value"),
                     "input.mime_type")
        if isinstance(raw, str):
            with contextlib.suppress(ValueError):
                raw = json.loads(raw)
        args = raw if isinstance(raw, dict) else None
        call = self.b.tool_call(actor, tool, args, src_index=s.index, src_id=s.span_id,
                                t=self.t(s.start))
        if raw is not None and args is None:  # arguments that are not an object stay as text
            self.b.events[-1].content = raw if isinstance(raw, str) else _canon(raw)
        for c in s.children:
            self.walk(c, agent)
        result = _value(s, ("gen_ai.tool.call.result", "output.value"), "output.mime_type")
        rejected = True if s.status.get("code") in (2, "STATUS_CODE_ERROR") else None
        self.b.tool_result(actor, result, call=call, rejected=rejected, src_index=s.index,
                           src_id=s.span_id, t=self.t(s.end))
        if rejected and isinstance(s.status.get("message"), str):
            self.b.events[-1].reason = s.status["message"]


def _read_file(path: Path) -> list[ImportedTrace]:
    digest = sha256_file(path)
    traces = _by_trace(read_otlp(path))
    if not traces:
        raise SourceError(path, "", "no spans in this OTLP file")
    built_all = []
    exact = {tid for tid, spans in traces.items()
             if any(name.startswith("eair.") and "eair.step" in attrs
                    for s in spans for _, name, attrs in s.events)}
    names = Counter(_exact_name(traces[tid][0]) for tid in exact)
    clash = {name for name, k in names.items() if k > 1}
    for n, (trace_id, spans) in enumerate(traces.items()):
        if trace_id in exact:
            built_all.append(_read_exact(path, spans, digest, clash))
            continue
        service = _Foreign.emitter(spans[0])
        instance = path.stem if len(traces) == 1 else f"{path.stem}-{n + 1:03d}-{trace_id[:8]}"
        built = ImportedTrace(format=FORMAT, src=path, instance=instance,
                              world=neutral_name(path.stem), framework=service,
                              importer_version=EXPORTER_VERSION, sha256=digest)
        built.note(f"OTel trace {trace_id}: {len(spans)} span(s); times are minutes since "
                   "its first span started")
        _withhold_evaluations(built, spans)
        _Foreign(built, spans)
        built_all.append(built)
    return built_all


def _accepts(path: Path) -> bool:
    if path.suffix not in (".json", ".jsonl"):
        return False
    try:
        with path.open("rb") as f:
            return b"resourceSpans" in f.read(4096)
    except OSError:
        return False


IMPORTER = register(Importer(
    format=FORMAT, version=EXPORTER_VERSION,
    summary="OTLP JSON with OpenTelemetry GenAI / OpenInference spans (and eairc "
            "export-otel files, read back losslessly)",
    read=_read_file, accepts=_accepts))


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """The event fields of every trace in an OTLP file as the importer reads them (tests)."""
    for built in _read_file(path):
        for e in built.events:
            yield e.as_dict()
