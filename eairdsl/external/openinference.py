"""OpenInference span JSON (Phoenix, Arize, Patronus/TRAIL exports) into a project trace.

Two shapes are read: a nested tree (`{"trace_id", "spans": [{..., "child_spans": [...]}]}`,
TRAIL's export) and a flat list of spans with parent ids (Phoenix's
`{"context": {"span_id"}, "parent_id", "span_kind", "attributes"}`); attributes may be
dotted keys (`input.value`) or nested objects (`{"input": {"value": ...}}`).

What becomes an event, in depth-first start-time order (`src_id` = span id,
`src_index` = the span's position in that order):

- the outermost AGENT span: its `input.value` is a message from `user` (the caller
  outside the trace) to the agent, its `output.value` the agent's final reply;
- an AGENT span inside another agent's span is a delegation: the parent agent's
  request (`input.value`) to the child, the child's events as a task of their own,
  and the reply edge from the child's final answer (its `output.value`, else its
  last `final_answer` tool call's argument; with neither, no reply is recorded);
- TOOL (and RETRIEVER, RERANKER, EMBEDDING) spans: a `tool_call` with the parsed
  `input.value` and a `tool_result` with `output.value` (`rejected` on an error
  status), by the enclosing agent;
- LLM spans: the agent's `decision` with the output message's content (none when the
  model answered only with tool calls), then a `tool_call` per requested call, without
  a result (a TOOL span that ran it is its own call and result: the export does not
  link them, so neither does the import); prompts are not repeated;
- CHAIN spans (smolagents' `Step N`) with an `output.value`: a `decision` after what ran
  inside the step (the step's observation as recorded);
- spans outside every AGENT span are the harness, not events (counted in a note),
  unless the trace has no AGENT span at all: then its root span is the one agent, and
  its input and output are messages to no stated recipient.

An agent's name is its `agent.name` attribute; for a nested agent without one, the
one managed agent its parent declares (`smolagents.managed_agents.N.name`) or the
one of them its input names; otherwise the span name's class (`CodeAgent.run` ->
`CodeAgent`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    neutral_name,
    read_json,
    register,
)

__all__ = ["IMPORTER", "Span", "build", "load_spans", "read", "root_user"]

VERSION = "1"
#: the sender of the outermost agent's input: the caller outside the trace
root_user = "user"
_CALL = "llm.output_messages.0.message.tool_calls."
_TOOLISH = frozenset({"TOOL", "RETRIEVER", "RERANKER", "EMBEDDING"})
_DURATION = re.compile(r"^P(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
                       r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")


@dataclass
class Span:
    """One span, normalized from either export shape."""

    span_id: str
    parent: str | None
    name: str
    kind: str | None
    attrs: dict[str, Any]
    start: datetime | None
    end: datetime | None
    error: str | None
    children: list[Span] = field(default_factory=list)


def _flatten(attrs: Any, prefix: str = "") -> dict[str, Any]:
    """Nested attribute objects to dotted keys (OpenInference's flat naming)."""
    out: dict[str, Any] = {}
    if not isinstance(attrs, dict):
        return out
    for k, v in attrs.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and not key.endswith(("parameters", "invocation_parameters")):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(duration: Any) -> float | None:
    if not isinstance(duration, str):
        return None
    m = _DURATION.match(duration)
    if m is None:
        return None
    return sum(float(m.group(u) or 0) * f for u, f in (("h", 3600), ("m", 60), ("s", 1)))


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _span(raw: dict[str, Any], where: str, path: Path) -> Span:
    ctx = _obj(raw.get("context"))
    span_id = raw.get("span_id") or ctx.get("span_id")
    if not isinstance(span_id, str) or not span_id:
        raise SourceError(path, where, "a span without a span id")
    parent = raw.get("parent_span_id", raw.get("parent_id"))
    attrs = _flatten(raw.get("span_attributes", raw.get("attributes", {})))
    kind = attrs.get("openinference.span.kind")
    if not isinstance(kind, str):
        sk = raw.get("span_kind")
        kind = sk if isinstance(sk, str) and sk.isupper() else None
    start = _time(raw.get("timestamp", raw.get("start_time")))
    end = _time(raw.get("end_time"))
    secs = _seconds(raw.get("duration"))
    if end is None and start is not None and secs is not None:
        end = start + timedelta(seconds=secs)
    status = str(raw.get("status_code") or _obj(raw.get("status")).get("status_code") or "")
    error = None
    if status.upper() in ("ERROR", "STATUS_CODE_ERROR"):
        error = str(raw.get("status_message") or "error status")
    name = raw.get("span_name", raw.get("name"))
    return Span(span_id=span_id, parent=parent if isinstance(parent, str) and parent else None,
                name=name if isinstance(name, str) else "", kind=kind, attrs=attrs,
                start=start, end=end, error=error)


def load_spans(data: Any, path: Path) -> tuple[str | None, list[Span]]:
    """(trace id, root spans with their children) from either export shape."""
    trace_id: str | None = None
    if isinstance(data, dict) and isinstance(data.get("spans"), list):
        trace_id = data.get("trace_id") if isinstance(data.get("trace_id"), str) else None
        raws: list[Any] = data["spans"]
    elif isinstance(data, list):
        raws = data
    elif isinstance(data, dict) and isinstance(data.get("data"), list):
        raws = data["data"]
    else:
        raise SourceError(path, "", "not OpenInference span JSON: no `spans` list")
    roots: list[Span] = []
    flat: dict[str, Span] = {}
    order: list[Span] = []

    def take(raw: Any, where: str, parent: Span | None) -> None:
        if not isinstance(raw, dict):
            raise SourceError(path, where, "a span is not an object")
        s = _span(raw, where, path)
        if s.span_id in flat:
            raise SourceError(path, where, f"span id {s.span_id} appears twice")
        flat[s.span_id] = s
        order.append(s)
        if parent is not None:
            s.parent = parent.span_id
            parent.children.append(s)
        nested = raw.get("child_spans")
        for i, c in enumerate(nested if isinstance(nested, list) else []):
            take(c, f"{where}.child_spans[{i}]", s)

    for i, raw in enumerate(raws):
        take(raw, f"spans[{i}]", None)
        ctx = raw.get("context") if isinstance(raw, dict) else None
        if trace_id is None and isinstance(ctx, dict) and isinstance(ctx.get("trace_id"), str):
            trace_id = ctx["trace_id"]
        if trace_id is None and isinstance(raw, dict) and isinstance(raw.get("trace_id"), str):
            trace_id = raw["trace_id"]
    for s in order:  # flat exports: link by parent id
        if s.parent is not None and s.parent in flat and s not in flat[s.parent].children:
            flat[s.parent].children.append(s)
        elif s.parent is None or s.parent not in flat:
            roots.append(s)
    # children in start order (stable: spans without a time keep the file's order)
    for s in order:
        s.children.sort(key=lambda c: (c.start is None, c.start.timestamp() if c.start else 0.0))
    return trace_id, roots


def _walk(s: Span) -> Iterator[Span]:
    yield s
    for c in s.children:
        yield from _walk(c)


def _class_name(span_name: str) -> str:
    head = span_name.split(".", 1)[0].strip()
    return head or span_name or "agent"


def _managed(s: Span) -> list[str]:
    names = []
    for k, v in sorted(s.attrs.items()):
        if re.fullmatch(r"smolagents\.managed_agents\.\d+\.name", k) and isinstance(v, str):
            names.append(v)
    return names


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _args(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return v
    if isinstance(v, str):
        try:
            parsed = json.loads(v)
        except ValueError:
            return {"input.value": v}
        return parsed if isinstance(parsed, dict) else {"input.value": parsed}
    return {"input.value": v}


class _Builder:
    def __init__(self, b: ImportedTrace, roots: list[Span]) -> None:
        self.b = b
        self.index: dict[str, int] = {}
        for s in (x for r in roots for x in _walk(r)):
            self.index[s.span_id] = len(self.index)
        starts = [s.start for r in roots for s in _walk(r) if s.start is not None]
        self.t0 = min(starts, key=lambda d: d.timestamp()) if starts else None
        self.last_t = 0.0
        self.skipped = 0

    def t(self, when: datetime | None) -> float | None:
        """Minutes since the first span started, never going back (an end time can pass
        the next sibling's start); None without times (the builder numbers steps)."""
        if self.t0 is None:
            return None
        if when is not None:
            minutes = (when.timestamp() - self.t0.timestamp()) / 60
            self.last_t = max(self.last_t, round(minutes, 6))
        return self.last_t

    def src(self, s: Span) -> dict[str, Any]:
        return {"src_index": self.index[s.span_id], "src_id": s.span_id}

    def name_of(self, s: Span, parent_agent: Span | None) -> str:
        own = s.attrs.get("agent.name")
        if isinstance(own, str) and own:
            return own
        if parent_agent is not None:
            managed = _managed(parent_agent)
            if len(managed) == 1:
                return managed[0]
            text = str(s.attrs.get("input.value") or "")
            named = [m for m in managed if f"'{m}'" in text or f'"{m}"' in text]
            if len(named) == 1:
                return named[0]
        return _class_name(s.name)

    def run(self, roots: list[Span]) -> None:
        has_agent = any(s.kind == "AGENT" for r in roots for s in _walk(r))
        for r in roots:
            if has_agent:
                self.outside(r)
            else:
                self.b.note("no AGENT span: the root span is the one agent, and its input "
                            "and output address no one the trace states")
                self.agent(r, None, None, stated=False)
        if self.skipped:
            self.b.note(f"{self.skipped} span(s) outside every AGENT span (the harness) are "
                        "not events")

    def outside(self, s: Span) -> None:
        if s.kind == "AGENT":
            self.agent(s, None, None)
            return
        self.skipped += 1
        for c in s.children:
            self.outside(c)

    def agent(self, s: Span, parent: Span | None, parent_name: str | None,
              stated: bool = True) -> None:
        name = self.name_of(s, parent)
        inp, out = _text(s.attrs.get("input.value")), _text(s.attrs.get("output.value"))
        if not stated:  # a root span that is no AGENT span: no edge to or from it is stated
            if inp is not None:
                self.b.message(root_user, inp, t=self.t(s.start), **self.src(s))
            for c in s.children:
                self.inside(c, s, name, [])
            if out is not None:
                self.b.message(name, out, final=True, t=self.t(s.end), **self.src(s))
            return
        if parent_name is None:
            self.b.message(root_user, inp, recipient=name, basis="span-parent",
                           t=self.t(s.start), **self.src(s))
        else:
            self.b.delegate(parent_name, name, inp, t=self.t(s.start), **self.src(s))
        final_args: list[Any] = []
        for c in s.children:
            self.inside(c, s, name, final_args)
        if parent_name is None:
            if out is not None:
                self.b.message(name, out, recipient=root_user, basis="span-parent",
                               final=True, t=self.t(s.end), **self.src(s))
            return
        answer = out if out is not None else (final_args[-1] if final_args else None)
        if answer is None:
            self.b.unanswered()
            return
        self.b.reply(answer, t=self.t(s.end), **self.src(s))

    def inside(self, s: Span, agent: Span, name: str, final_args: list[Any]) -> None:
        kind = s.kind
        if kind == "AGENT":
            self.agent(s, agent, name)
            return
        if kind in _TOOLISH:
            tool = s.attrs.get("tool.name")
            tool = tool if isinstance(tool, str) and tool else s.name
            args = _args(s.attrs.get("input.value"))
            call = self.b.tool_call(name, tool, args, t=self.t(s.start), **self.src(s))
            for c in s.children:
                self.inside(c, agent, name, final_args)
            if tool == "final_answer" and args is not None:
                given = args.get("args", args.get("answer"))
                final_args.append(_text(given[0] if isinstance(given, list) and len(given) == 1
                                        else given))
            self.b.tool_result(name, _text(s.attrs.get("output.value")), call=call,
                               rejected=True if s.error is not None else None,
                               t=self.t(s.end), **self.src(s))
            return
        for c in s.children:
            self.inside(c, agent, name, final_args)
        if kind == "LLM":
            self.llm(s, name)
        elif kind in ("CHAIN", "GUARDRAIL", "EVALUATOR") and "output.value" in s.attrs:
            # the step's recorded output comes at its end, after what ran inside it
            self.b.decision(name, _text(s.attrs.get("output.value")), t=self.t(s.end),
                            **self.src(s))

    def llm(self, s: Span, name: str) -> None:
        """The model's answer: its text as a decision, each requested tool call as a
        `tool_call` (a TOOL span that ran one is its own call and result: the export does
        not link the two, so neither does the import)."""
        content = s.attrs.get("llm.output_messages.0.message.content")
        if content is None and "llm.output_messages.0.message.role" not in s.attrs:
            content = s.attrs.get("output.value")
        calls = []
        n = 0
        while f"{_CALL}{n}.tool_call.function.name" in s.attrs:
            fn = s.attrs[f"{_CALL}{n}.tool_call.function.name"]
            calls.append((str(fn), _args(s.attrs.get(f"{_CALL}{n}.tool_call.function.arguments"))))
            n += 1
        if content is not None or not calls:
            self.b.decision(name, _text(content), t=self.t(s.end), **self.src(s))
        for tool, args in calls:
            self.b.tool_call(name, tool, args, t=self.t(s.end), **self.src(s))


def build(b: ImportedTrace, roots: list[Span]) -> None:
    """Feed the builder the events of a span tree (the rules in the module docstring)."""
    _Builder(b, roots).run(roots)


def read(path: Path) -> list[ImportedTrace]:
    data = read_json(path)
    trace_id, roots = load_spans(data, path)
    b = ImportedTrace(format="openinference", src=path, instance=trace_id or path.stem,
                      world=neutral_name("openinference", path.stem),
                      framework=_framework(roots), importer_version=VERSION)
    if trace_id is None:
        b.note("no trace id in the file: the instance is the file name")
    build(b, roots)
    return [b]


def _framework(roots: list[Span]) -> str:
    for r in roots:
        for s in _walk(r):
            if any(k.startswith("smolagents.") for k in s.attrs):
                return "smolagents"
    return "openinference"


IMPORTER = register(Importer(format="openinference", version=VERSION,
                             summary="OpenInference span JSON (nested or flat)",
                             read=read, accepts=lambda p: p.suffix == ".json"))
