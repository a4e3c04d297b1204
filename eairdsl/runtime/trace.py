"""The episode trace: one JSONL file per episode, a documented, versioned schema.

Line 1 is a `TraceHeader`, then one `TraceEvent` per step, then one
`TraceResult` with the six measurements. The writer serialises with sorted
keys and no wall-clock time, so the same world, condition, instance, seed and
agent profile give a byte-identical file. docs/trace.md describes every field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from eairdsl.runtime.values import FieldSet

__all__ = ["TRACE_SCHEMA_VERSION", "TraceHeader", "TraceEvent", "TraceResult", "Trace",
           "to_json", "read_trace", "EVENT_KINDS"]

TRACE_SCHEMA_VERSION = 1
EVENT_KINDS = ("message", "tool_call", "tool_result", "state_update", "decision", "judgment")


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


class TraceEvent(BaseModel):
    """One step. `edge` is `sender->receiver` for messages and delegations."""

    type: Literal["event"] = "event"
    step: str
    t: float
    kind: Literal["message", "tool_call", "tool_result", "state_update", "decision",
                  "judgment"]
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


class TraceResult(BaseModel):
    """The episode's measurements (None = unassessed) and execution validity."""

    type: Literal["result"] = "result"
    measurements: dict[str, bool | None]
    unassessed: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    judges: dict[str, str] = {}
    valid: bool
    validity_reason: str | None = None
    end_time: float
    steps: int


def to_json(value: Any) -> Any:
    """Plain JSON data for any runtime value (rows, field sets, nested lists)."""
    if isinstance(value, FieldSet):
        return {"record": value.record, "fields": value.names}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class Trace:
    """Events of one episode in memory, with the queries measurements use."""

    def __init__(self, header: TraceHeader) -> None:
        self.header = header
        self.events: list[TraceEvent] = []
        self.result: TraceResult | None = None

    def add(self, **fields: Any) -> TraceEvent:
        # The runtime builds events from values it already checked: skip re-validation.
        event = TraceEvent.model_construct(step=f"s{len(self.events) + 1:04d}", **fields)
        self.events.append(event)
        return event

    # ------------------------------------------------------------ queries (TraceView)
    def messages(self, sender: str | None, recipient: str | None) -> list[dict[str, Any]]:
        return [{"sender": e.actor, "recipient": e.recipient, "text": e.content or "",
                 "time": e.t, "edge": e.edge}
                for e in self.events if e.kind == "message"
                and (sender is None or e.actor == sender)
                and (recipient is None or e.recipient == recipient)]

    def calls(self, tool: str, by: str | None) -> list[dict[str, Any]]:
        out = []
        results = {e.call: e for e in self.events if e.kind == "tool_result"}
        for e in self.events:
            if e.kind == "tool_call" and e.tool == tool and (by is None or e.actor == by):
                res = results.get(e.step)
                out.append({"tool": tool, "caller": e.actor, "args": e.args or {},
                            "result": res.result if res else None,
                            "rejected": bool(res.rejected) if res else True, "time": e.t})
        return out

    def replies(self, party: str) -> list[str]:
        return [e.content or "" for e in self.events if e.kind == "message" and e.actor == party]

    def final(self, party: str) -> str | None:
        finals = [e.content or "" for e in self.events
                  if e.kind == "message" and e.actor == party and e.final]
        return finals[-1] if finals else None

    def delegated(self, caller: str, callee: str) -> bool:
        return any(e.kind == "message" and e.edge == f"{caller}->{callee}" and e.tool
                   for e in self.events)

    # ------------------------------------------------------------ files
    def lines(self) -> list[str]:
        out = [json.dumps(self.header.model_dump(mode="json"), sort_keys=True,
                          ensure_ascii=False)]
        for e in self.events:
            out.append(json.dumps(e.model_dump(mode="json", exclude_none=True), sort_keys=True,
                                  ensure_ascii=False))
        if self.result is not None:
            out.append(json.dumps(self.result.model_dump(mode="json"), sort_keys=True,
                                  ensure_ascii=False))
        return out

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(self.lines()) + "\n", encoding="utf-8")


def read_trace(path: Path) -> Trace:
    """Read a trace file back into models (raises ValueError on a malformed file)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(f"{path} is empty")
    header = TraceHeader.model_validate_json(lines[0])
    if header.trace_schema != TRACE_SCHEMA_VERSION:
        raise ValueError(f"{path}: trace schema {header.trace_schema}, expected "
                         f"{TRACE_SCHEMA_VERSION}")
    trace = Trace(header)
    for line in lines[1:]:
        data = json.loads(line)
        if data.get("type") == "result":
            trace.result = TraceResult.model_validate(data)
        else:
            trace.events.append(TraceEvent.model_validate(data))
    return trace
