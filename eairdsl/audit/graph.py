"""The interaction graph an auditor navigates, built from a sanitized bundle (EAIR F.16).

Two layers, as in the paper's graph ablation:

- **topology**: agent, tool, record, document (and state) nodes; one edge per
  recorded step — a message, a delegation, a tool call, a tool result, a record
  or document read, a record or state write — carrying the simulated time, the
  channel, the step id, the task and the step's edge ref (`evidence.edge_ref`,
  the name a citation gives the edge). The topology is an index over who talked
  to whom and in what order; reading what was said is the query API's job.
- **annotated**: the topology plus, on each edge, a text summary (a prefix of the
  normalised field text, never a paraphrase), the sender's and receiver's
  authority, the record field values that crossed it with whether the
  receiver's principal may see each (the bundle's authorization matrix) and the
  step where each value first appeared (its provenance); and on each role, its
  obligations: the documents it could read through its tools, and the policies
  written in them, that it never read.

Everything is read from the bundle alone, so a bundle made from an external trace
gets the same graph; nothing here looks at a world, a condition or a result.
Where a tool reads or writes a record is taken from what the episode shows (a
result whose rows are the record's rows, a state update naming it), and which
document a tool can reach from its schema's choices and from the calls made.
"""

from __future__ import annotations

import bisect
import hashlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import networkx as nx

from eairdsl.audit.evidence import (
    MANIFEST,
    Authorization,
    Bundle,
    BundleError,
    Manifest,
    Participant,
    canonical_json,
    edge_ref,
    field_text,
    normalize,
)
from eairdsl.runtime.trace import TraceEvent, read_trace

if TYPE_CHECKING:
    from eairdsl.ir import World

__all__ = ["Layer", "LAYERS", "EDGE_KINDS", "build_graph", "step_links", "node_link",
           "summary", "crossing_fields", "MIN_VALUE_CHARS", "SUMMARY_CHARS", "GraphError",
           "open_episode", "trace_bundle", "declares_matrix"]

Layer = Literal["topology", "annotated"]
LAYERS: tuple[Layer, ...] = ("topology", "annotated")
#: one edge per step of these kinds (reads/writes: of records, documents and state)
EDGE_KINDS = ("message", "delegation", "call", "result", "reads", "writes")
#: a record value shorter than this (after normalisation) is not traced through the
#: episode: "East", "5" or "true" occur everywhere and would prove nothing
MIN_VALUE_CHARS = 6
#: the annotated layer's edge summary: at most this many characters of the edge's text
SUMMARY_CHARS = 160
#: the fields that carry what crossed an edge, by step kind
_CROSSING: dict[str, tuple[str, ...]] = {
    "message": ("content",), "tool_call": ("args",), "tool_result": ("result", "reason"),
    "state_update": ("diff",), "decision": ("content",)}
_MIN_LINE_CHARS = 20  # a document line shorter than this does not identify the document


class GraphError(ValueError):
    """A layer that does not exist."""


def crossing_fields(step: TraceEvent) -> tuple[str, ...]:
    """The fields of `step` whose text is what crossed its edge."""
    return _CROSSING.get(step.kind, ())


def _text(step: TraceEvent) -> str:
    parts = [t for f in crossing_fields(step) if (t := field_text(step, f)) is not None]
    return normalize(" ".join(parts))


def _leaves(step: TraceEvent) -> list[str]:
    """The strings that crossed the edge, normalised: a message's text, the string
    values inside arguments, results and diffs (not their JSON keys)."""
    out: list[str] = []
    for f in crossing_fields(step):
        value = getattr(step, f)
        out.extend(t for s in _strings(value) if (t := normalize(s)))
    return out


@dataclass(frozen=True, eq=False)  # each value is made once: identity is equality
class _Value:
    """One field value of one row of a bundle record: what the visibility check traces."""

    record: str
    key: str | None
    field: str
    text: str  # normalised


@dataclass
class _Values:
    """The record values long enough to trace, indexed by their first characters."""

    by_prefix: dict[str, list[_Value]] = field(default_factory=dict)
    _memo: dict[str, list[_Value]] = field(default_factory=dict)

    @classmethod
    def of(cls, bundle: Bundle) -> _Values:
        """The values of a bundle's records, shared by every bundle with the same record
        files (the episodes of one world): their `found_in` answers carry over too."""
        key = tuple(sorted((rel, digest) for rel, digest in bundle.manifest.files.items()
                           if rel.startswith("records/")))
        found = _VALUES.get(key)
        if found is None:
            if len(_VALUES) >= 16:
                _VALUES.clear()
            found = _VALUES[key] = cls._build(bundle)
        if len(found._memo) > _MEMO_MAX:
            found._memo.clear()
        return found

    @classmethod
    def _build(cls, bundle: Bundle) -> _Values:
        out = cls()
        seen: set[tuple[str, str | None, str, str]] = set()
        for name in sorted(bundle.records):
            view = bundle.records[name]
            for row in view.rows:
                key = row.get(view.key) if view.key else None
                for f in view.fields:
                    value = row.get(f)
                    if not isinstance(value, str):
                        continue
                    text = normalize(value)
                    if len(text) < MIN_VALUE_CHARS or not any(c.isalpha() for c in text):
                        continue
                    item = _Value(name, None if key is None else str(key), f, text)
                    ident = (item.record, item.key, item.field, item.text)
                    if ident not in seen:
                        seen.add(ident)
                        out.by_prefix.setdefault(text[:MIN_VALUE_CHARS], []).append(item)
        return out

    def found_in(self, text: str) -> list[_Value]:
        """Every value that occurs in `text` where a word starts, in order of first
        occurrence, once each (episodes repeat long texts, so answers are kept)."""
        known = self._memo.get(text)
        if known is not None:
            return known
        hits: dict[_Value, None] = {}
        n = MIN_VALUE_CHARS
        prefixes = self.by_prefix
        for i in range(len(text) - n + 1):
            if i and text[i - 1].isalnum():
                continue
            for v in prefixes.get(text[i:i + n], ()):
                if v not in hits and text.startswith(v.text, i):
                    hits[v] = None
        found = self._memo[text] = list(hits)
        return found


#: record values by the bundle's record files (sha256s), bounded; and the most texts a
#: value index remembers answers for before it starts again
_VALUES: dict[tuple[tuple[str, str], ...], _Values] = {}
_MEMO_MAX = 50_000


def _participant_kind(p: Participant | None) -> str:
    return p.kind if p is not None else "actor"


def _doc_name(key: str) -> str:
    """A bundle's document file name (`handbook.md`) as the world names it (`handbook`)."""
    return key.split(".", 1)[0] if "." in key else key


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _rows(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                yield v


class _Episode:
    """The bundle's steps with the links every layer and query needs, computed once.

    Every link is found in one pass over the steps (`_link`), so a graph costs time in
    proportion to steps and edges, not steps times edges: which call a state update or
    a delegation came from, and which step a message's receiver takes next.
    """

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.steps = bundle.steps
        self.index = {s.step: i for i, s in enumerate(self.steps)}
        self.participants = {p.name: p for p in bundle.participants}
        self.calls = {s.step: s for s in self.steps if s.kind == "tool_call"}
        self.result_of = {s.call: s for s in self.steps if s.kind == "tool_result" and s.call}
        self.documents = {_doc_name(k): v for k, v in sorted(bundle.documents.items())}
        self._doc_lines = _doc_lines(bundle.documents)
        self.tool_cards = {t.name: t for t in bundle.tools}
        self._key_cache: dict[str, set[str]] = {}
        self._visible: dict[tuple[frozenset[str], str], set[str]] = {}
        self._read_docs: dict[int, list[str]] = {}
        #: by the step (object): the call a state update came from, the open call that
        #: sent a delegation message
        self.update_call: dict[int, TraceEvent | None] = {}
        self.delegation_call: dict[int, TraceEvent | None] = {}
        #: by position: the next step a message's recipient takes
        self.next_of_recipient: list[TraceEvent | None] = [None] * len(self.steps)
        self._link()

    def _link(self) -> None:
        """`update_call`, `delegation_call` and `next_of_recipient`, in one sweep each way.

        A state update's call is the latest tool call of its tool by its actor in its
        task before it; a delegation's, the latest call of its sender before it that is
        still open there (answered later, or never). "Before it" is before the position
        `index` gives its step id (a hostile bundle may repeat an id: the last one's), so
        the questions are answered in the order of those positions as the calls are
        passed: each call is pushed and popped once, each question answered once."""
        asked = sorted(((self.index[s.step], n, s) for n, s in enumerate(self.steps)
                        if (s.kind == "state_update" and s.tool)
                        or (s.kind == "message" and s.tool == "delegation")),
                       key=lambda q: (q[0], q[1]))
        last_call: dict[tuple[str | None, str, int | None], TraceEvent] = {}
        calls_by: dict[str, list[TraceEvent]] = {}  # each actor's calls, latest last
        q = 0
        for at, s in enumerate(self.steps):
            while q < len(asked) and asked[q][0] == at:  # what is asked before this step
                self._answer(asked[q][2], at, last_call, calls_by)
                q += 1
            if s.kind == "tool_call":
                last_call[(s.tool, s.actor, s.task)] = s
                calls_by.setdefault(s.actor, []).append(s)
        upcoming: dict[str, TraceEvent] = {}  # actor -> its next step, walking backwards
        for at in range(len(self.steps) - 1, -1, -1):
            s = self.steps[at]
            if s.kind == "message" and s.recipient:
                self.next_of_recipient[at] = upcoming.get(s.recipient)
            upcoming[s.actor] = s

    def _answer(self, s: TraceEvent, at: int,
                last_call: dict[tuple[str | None, str, int | None], TraceEvent],
                calls_by: dict[str, list[TraceEvent]]) -> None:
        if s.kind == "state_update":
            self.update_call[id(s)] = last_call.get((s.tool, s.actor, s.task))
            return
        # A call answered before `at` is answered before every later position too, so
        # it is dropped for good
        stack = calls_by.get(s.actor, [])
        self.delegation_call[id(s)] = None
        while stack:
            answer = self.result_of.get(stack[-1].step)
            if answer is None or self.index[answer.step] > at:
                self.delegation_call[id(s)] = stack[-1]
                return
            stack.pop()

    def visible(self, who: set[str], record: str) -> set[str]:
        """`_visible` of the bundle, kept per (principals, record)."""
        key = (frozenset(who), record)
        found = self._visible.get(key)
        if found is None:
            found = self._visible[key] = _visible(self.bundle, who, record)
        return found

    def _keys(self, record: str) -> set[str]:
        """The key values of a record's rows (as canonical JSON: any value is comparable)."""
        found = self._key_cache.get(record)
        if found is None:
            view = self.bundle.records[record]
            found = self._key_cache[record] = {canonical_json(r.get(view.key))
                                               for r in view.rows} if view.key else set()
        return found

    def call_of(self, step: TraceEvent) -> TraceEvent | None:
        """The tool call a result answers, or the one a state update came from (the
        latest earlier call of the same tool by the same actor in the same task)."""
        if step.kind == "tool_result":
            return self.calls.get(step.call or "")
        if step.kind == "state_update" and step.tool:
            return self.update_call.get(id(step))
        return None

    def delegating_call(self, step: TraceEvent) -> TraceEvent | None:
        """The open call (answered later, or never) that sent a delegation message: the
        sender's latest earlier call still open at the message."""
        if step.kind != "message" or step.tool != "delegation":
            return None
        return self.delegation_call.get(id(step))

    def records_read(self, step: TraceEvent) -> list[str]:
        """The records whose rows a tool result returned (keys known, fields a subset)."""
        if step.kind != "tool_result" or step.rejected:
            return []
        found: set[str] = set()
        for row in _rows(step.result):
            names = set(row)
            best: tuple[int, str] | None = None
            for name, view in self.bundle.records.items():
                fields = set(view.fields)
                if not names or not names <= fields or len(names) < 2:
                    continue
                if view.key is not None:
                    if view.key not in row:
                        continue
                    keys = self._keys(name)
                    if keys and canonical_json(row[view.key]) not in keys:
                        continue
                score = (len(names & fields), name)
                if best is None or score[0] > best[0] or (score[0] == best[0]
                                                           and name < best[1]):
                    best = score
            if best is not None:
                found.add(best[1])
        return sorted(found)

    def documents_read(self, step: TraceEvent) -> list[str]:
        """The documents a tool result came from: named by the call, quoted by the result,
        or the one document the tool's card says it reads (a search of it that found
        nothing still consulted it)."""
        if step.kind != "tool_result" or step.rejected or not self.documents:
            return []
        found = self._read_docs.get(id(step))
        if found is not None:
            return found
        call = self.call_of(step)
        named = {v for v in _strings(call.args if call else None) if v in self.documents}
        card = self.tool_cards.get(step.tool or "")
        if card is not None and len(card.documents) == 1 and card.documents[0] in self.documents:
            named.add(card.documents[0])
        said = {normalize(s) for s in _strings(step.result)}
        quoted = {name for name, lines in self._doc_lines.items() if not said.isdisjoint(lines)}
        found = self._read_docs[id(step)] = sorted(named | quoted)
        return found

    def tool_reach(self) -> dict[str, set[str]]:
        """Tool -> the documents it can reach: its card's `documents`, its schema's
        choices, and what any call of it read in the episode."""
        reach: dict[str, set[str]] = {}
        for card in self.bundle.tools:
            choices = set(_strings(_enums(card.parameters))) | set(card.documents)
            if choices & set(self.documents):
                reach.setdefault(card.name, set()).update(choices & set(self.documents))
        for s in self.steps:
            if s.kind == "tool_result" and s.tool:
                for d in self.documents_read(s):
                    reach.setdefault(s.tool, set()).add(d)
        return reach

    def written(self, step: TraceEvent) -> list[str]:
        """The nodes a state update wrote: `record:L` for an append, `state:S` for a set."""
        if step.kind != "state_update" or not step.diff:
            return []
        appended, assigned = step.diff.get("append"), step.diff.get("set")
        out = [f"record:{name}" for name in sorted(appended)] if isinstance(appended,
                                                                            dict) else []
        if isinstance(assigned, dict):
            out += [f"record:{name}" if name in self.bundle.records else f"state:{name}"
                    for name in sorted(assigned)]
        return out


def _doc_lines(documents: dict[str, str]) -> dict[str, set[str]]:
    """Each document's normalised lines long enough to identify it, by the world's name
    for it; kept per document set (every episode of a world shows the same documents)."""
    key = tuple(sorted((k, hashlib.sha256(v.encode("utf-8")).hexdigest())
                       for k, v in documents.items()))
    found = _DOC_LINES.get(key)
    if found is None:
        if len(_DOC_LINES) >= 16:
            _DOC_LINES.clear()
        found = _DOC_LINES[key] = {
            _doc_name(name): {line for raw in text.splitlines()
                              if len(line := normalize(raw)) >= _MIN_LINE_CHARS}
            for name, text in sorted(documents.items())}
    return found


_DOC_LINES: dict[tuple[tuple[str, str], ...], dict[str, set[str]]] = {}


def _enums(schema: Any) -> Iterator[Any]:
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "enum" and isinstance(v, list):
                yield from v
            else:
                yield from _enums(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _enums(v)


def _episode(bundle: Bundle) -> _Episode:
    return _Episode(bundle)


def step_links(bundle: Bundle) -> dict[str, list[tuple[str, str]]]:
    """Step -> the later steps it leads to, each with the link's kind, in step order.

    `call`: a tool call to its result (and to the state updates it made, and to the
    delegation message it sent); `task`: a step to the next step of the same task;
    `edge`: a message to the receiver's next step.
    """
    ep = _episode(bundle)
    links: dict[str, list[tuple[str, str]]] = {s.step: [] for s in ep.steps}
    last_in_task: dict[int, str] = {}
    for i, s in enumerate(ep.steps):
        if s.task is not None:
            prev = last_in_task.get(s.task)
            if prev is not None:
                links[prev].append((s.step, "task"))
            last_in_task[s.task] = s.step
        call = ep.call_of(s) or ep.delegating_call(s)
        if call is not None:
            links[call.step].append((s.step, "call"))
        if s.kind == "message" and s.recipient:
            nxt = ep.next_of_recipient[i]
            if nxt is not None:
                links[s.step].append((nxt.step, "edge"))
    for out in links.values():
        out.sort(key=lambda x: (ep.index[x[0]], x[1]))
    return links


def _add_node(g: nx.MultiDiGraph, node: str, **attrs: Any) -> None:
    if node not in g:
        g.add_node(node, **attrs)


def _summary(text: str) -> tuple[str, bool]:
    if len(text) <= SUMMARY_CHARS:
        return text, False
    return text[:SUMMARY_CHARS].rstrip(), True


def build_graph(bundle: Bundle, layer: Layer = "topology") -> nx.MultiDiGraph:
    """The episode's interaction graph: one edge per step, keyed by step id and kind.

    Node ids are participant names, `tool:NAME`, `record:NAME`, `document:NAME` and
    `state:NAME`; every edge has `kind` (EDGE_KINDS), `step`, `t`, `task`, `channel`
    and `ref` (the step's `edge_ref`, what a citation names). `layer="annotated"`
    adds the annotations described in the module docstring.
    """
    if layer not in LAYERS:
        raise GraphError(f"unknown graph layer {layer!r}; expected one of {', '.join(LAYERS)}")
    ep = _episode(bundle)
    g: nx.MultiDiGraph = nx.MultiDiGraph(layer=layer, episode=bundle.manifest.episode,
                                         steps=len(ep.steps))
    for p in bundle.participants:
        g.add_node(p.name, kind=p.kind, label=p.display or p.name, tools=list(p.tools))
    for card in bundle.tools:
        g.add_node(f"tool:{card.name}", kind="tool", label=card.name)
    for name in sorted(bundle.records):
        g.add_node(f"record:{name}", kind="record", label=name)
    for name in ep.documents:
        g.add_node(f"document:{name}", kind="document", label=name)

    def party(name: str) -> None:
        p = ep.participants.get(name)
        _add_node(g, name, kind=_participant_kind(p), label=name, tools=[])

    def tool(name: str) -> str:
        node = f"tool:{name}"
        _add_node(g, node, kind="tool", label=name)
        return node

    for s in ep.steps:
        ref = edge_ref(s)
        base = {"step": s.step, "t": s.t, "task": s.task, "ref": ref}
        match s.kind:
            case "message" if s.recipient:
                party(s.actor)
                party(s.recipient)
                delegation = s.tool == "delegation"
                via = ep.delegating_call(s)
                g.add_edge(s.actor, s.recipient, key=f"{s.step}:message",
                           kind="delegation" if delegation else "message",
                           channel="delegation" if delegation else "direct",
                           via=via.tool if via is not None else None,
                           final=bool(s.final), **base)
            case "tool_call" if s.tool:
                party(s.actor)
                answer = ep.result_of.get(s.step)
                g.add_edge(s.actor, tool(s.tool), key=f"{s.step}:call", kind="call",
                           channel=s.tool, rejected=bool(answer is not None and answer.rejected),
                           result=answer.step if answer is not None else None, **base)
            case "tool_result" if s.tool:
                party(s.actor)
                node = tool(s.tool)
                g.add_edge(node, s.actor, key=f"{s.step}:result", kind="result",
                           channel=s.tool, rejected=bool(s.rejected), call=s.call, **base)
                for r in ep.records_read(s):
                    _add_node(g, f"record:{r}", kind="record", label=r)
                    g.add_edge(f"record:{r}", node, key=f"{s.step}:reads:record:{r}",
                               kind="reads", channel=s.tool, **base)
                for d in ep.documents_read(s):
                    g.add_edge(f"document:{d}", node, key=f"{s.step}:reads:document:{d}",
                               kind="reads", channel=s.tool, reader=s.actor,
                               empty=s.result in ([], "", None), **base)
            case "state_update":
                source = tool(s.tool) if s.tool else s.actor
                if not s.tool:
                    party(s.actor)
                for target in ep.written(s):
                    kind = target.split(":", 1)[0]
                    _add_node(g, target, kind=kind, label=target.split(":", 1)[1])
                    g.add_edge(source, target, key=f"{s.step}:writes:{target}", kind="writes",
                               channel=s.tool or "state", **base)
            case _:
                pass  # decisions and judgments have no edge
    if layer == "annotated":
        _annotate(g, ep)
    return g


def declares_matrix(bundle: Bundle) -> bool:
    """Whether the bundle's authorization matrix says anything: a matrix that lets no one
    see anything is no matrix (the world declared none), and flagging every value as
    unseeable would drown the edges that matter, so the annotated layer then marks no
    value's visibility (`visible` is None on every edge)."""
    return bundle.authorization.default == "allow" or any(
        e.fields for e in bundle.authorization.visible)


def _principals(p: Participant | None, name: str) -> set[str]:
    return {name} | ({p.principal} if p is not None and p.principal else set())


def _visible(bundle: Bundle, who: set[str], record: str) -> set[str]:
    if bundle.authorization.default == "allow":
        view = bundle.records.get(record)
        base = set(view.fields) if view is not None else set()
    else:
        base = set()
    entries = [e for e in bundle.authorization.visible
               if e.principal in who and e.record == record]
    if not entries:
        return base
    out: set[str] = set()
    for e in entries:
        out |= set(e.fields)
    return out


def _annotate(g: nx.MultiDiGraph, ep: _Episode) -> None:
    bundle = ep.bundle
    values = _Values.of(bundle)
    first_seen: dict[_Value, str] = {}
    crossed: dict[str, list[_Value]] = {}
    texts: dict[str, str] = {}
    for s in ep.steps:
        texts[s.step] = _text(s)
        hits: dict[_Value, None] = {}  # in order of first occurrence, once each
        for leaf in _leaves(s):
            hits.update(dict.fromkeys(values.found_in(leaf)))
        crossed[s.step] = list(hits)
        for v in hits:
            first_seen.setdefault(v, s.step)
    whole_first: dict[str, str] = {}
    declared = declares_matrix(bundle)

    def authority(node: str) -> int | None:
        p = ep.participants.get(node)
        return p.authority if p is not None else None

    earlier = _Texts(ep.steps, texts)
    once: dict[str, list[_Value]] = {}

    def distinct(step: str) -> list[_Value]:
        """The values that crossed at `step`, one per field of a row (the same field of the
        same row under another text is left out), in order of first occurrence."""
        found = once.get(step)
        if found is None:
            shown: set[tuple[str, str | None, str]] = set()
            found = once[step] = []
            for v in crossed[step]:
                if (v.record, v.key, v.field) not in shown:
                    shown.add((v.record, v.key, v.field))
                    found.append(v)
        return found

    for a, b, data in g.edges(data=True):
        s = bundle.by_step[data["step"]]
        text = texts[s.step]
        if data["kind"] in ("reads", "writes"):
            continue
        data["summary"], data["summary_truncated"] = _summary(text)
        data["sender_authority"] = authority(a)
        data["receiver_authority"] = authority(b)
        if text and len(text) >= MIN_VALUE_CHARS:
            origin = whole_first.get(text)
            if origin is None:
                origin = whole_first[text] = earlier.first_containing(text, s.step)
            data["repeats"] = origin if origin != s.step else None
        receiver = b if not b.startswith(("tool:", "record:", "document:", "state:")) else None
        who = _principals(ep.participants.get(receiver), receiver) \
            if receiver is not None and declared else None
        items: list[dict[str, Any]] = []
        for v in distinct(s.step):
            visible = None if who is None else v.field in ep.visible(who, v.record)
            items.append({"record": v.record, "key": v.key, "field": v.field,
                          "visible": visible, "first_step": first_seen[v]})
        data["values"] = items
        flags = [i["visible"] for i in items if i["visible"] is not None]
        data["receiver_may_see"] = (all(flags) if flags else None)
    for node, attrs in g.nodes(data=True):
        if node in ep.participants:
            p = ep.participants[node]
            attrs["authority"] = p.authority
            attrs["principal"] = p.principal
    for role, items in _obligations(g, ep).items():
        g.nodes[role]["unconsulted"] = items


class _Texts:
    """The steps' crossing texts joined in step order, so the first step whose text holds
    a string is one substring search over the episode rather than a test per step."""

    _SEP = "\x00"

    def __init__(self, steps: list[TraceEvent], texts: dict[str, str]) -> None:
        self.steps = [s.step for s in steps]
        self.starts: list[int] = []
        self.ends: list[int] = []
        at = 0
        for s in self.steps:
            self.starts.append(at)
            at += len(texts[s])
            self.ends.append(at)
            at += len(self._SEP)
        self.joined = self._SEP.join(texts[s] for s in self.steps)

    def first_containing(self, text: str, until: str) -> str:
        """The first step whose text contains `text` (`until`, which holds it, at the
        latest). A match that spans two steps' texts (`text` holds the separator) is
        skipped: matches are found in step order, so the first whole one is the answer."""
        at = self.joined.find(text)
        while at >= 0:
            k = bisect.bisect_right(self.starts, at) - 1
            if at + len(text) <= self.ends[k]:
                return self.steps[k]
            at = self.joined.find(text, at + 1)
        return until


def _obligations(g: nx.MultiDiGraph, ep: _Episode) -> dict[str, list[dict[str, Any]]]:
    """Role -> the documents its tools reach that it never read, with their policies."""
    reach = ep.tool_reach()
    read: dict[str, set[str]] = {}
    for a, _b, data in g.edges(data=True):
        if data["kind"] == "reads" and a.startswith("document:") and data.get("reader"):
            read.setdefault(data["reader"], set()).add(a.removeprefix("document:"))
    out: dict[str, list[dict[str, Any]]] = {}
    for p in ep.bundle.participants:
        if p.kind != "role":
            continue
        items = []
        for doc in sorted({d for t in p.tools for d in reach.get(t, ())}):
            if doc in read.get(p.name, set()):
                continue
            items.append({
                "document": doc,
                "tools": sorted(t for t in p.tools if doc in reach.get(t, ())),
                "policies": sorted(x.name for x in ep.bundle.policies if x.document == doc)})
        out[p.name] = items
    return out


def node_link(g: nx.MultiDiGraph) -> dict[str, Any]:
    """The graph as node-link data (`networkx.node_link_graph(..., edges="links")` reads
    it back), nodes by id and links in step order, so the same bundle gives the same bytes."""
    nodes = [{"id": n, **g.nodes[n]} for n in sorted(g.nodes)]
    links = [{"source": a, "target": b, "key": k, **d}
             for a, b, k, d in sorted(g.edges(keys=True, data=True),
                                      key=lambda e: (e[3]["step"], e[2]))]
    return {"directed": True, "multigraph": True, "graph": dict(sorted(g.graph.items())),
            "nodes": nodes, "links": links}


_DRAWN_KIND = {"message": "message", "delegation": "delegation", "call": "call",
               "reads": "reads", "writes": "writes"}
_MAX_STEPS_IN_LABEL = 4


def _label(steps: list[str]) -> str:
    shown = ", ".join(steps[:_MAX_STEPS_IN_LABEL])
    more = len(steps) - _MAX_STEPS_IN_LABEL
    return f"{len(steps)}× {shown}" + (f", +{more}" if more > 0 else "")


def summary(g: nx.MultiDiGraph, title: str = "") -> nx.MultiDiGraph:
    """One drawn edge per (source, target, kind) with its step ids, in the kinds
    `eairdsl.graph.draw` and `to_dot` know (the episode diagram's: message, delegation,
    call, rejected, reads, writes). Results are implied by their calls and not drawn."""
    out: nx.MultiDiGraph = nx.MultiDiGraph(name=g.graph.get("episode", "episode"))
    groups: dict[tuple[str, str, str], list[str]] = {}
    for a, b, d in g.edges(data=True):
        kind = _DRAWN_KIND.get(d["kind"])
        if kind is None:
            continue
        if kind == "call" and d.get("rejected"):
            kind = "rejected"
        groups.setdefault((a, b, kind), []).append(d["step"])
    used = {n for a, b, _ in groups for n in (a, b)}
    for n in sorted(used):
        kind = g.nodes[n].get("kind", "actor")
        out.add_node(n, kind="record" if kind == "state" else kind,
                     label=g.nodes[n].get("label", n))
    for (a, b, kind), ids in sorted(groups.items()):
        out.add_edge(a, b, kind=kind, label=_label(ids), steps=ids)
    return out



def trace_bundle(trace_path: Path) -> Bundle:
    """A bundle in memory holding only a trace's steps and who took part.

    For `eairc graph TRACE` without a world: the topology is complete, but with no
    records, documents, policies or authorization the annotated layer has no
    visibility flags and no obligations. Nothing of the header but the participants'
    names is kept (no condition, levers or seed); judge events are dropped.
    """
    try:
        trace = read_trace(trace_path)
    except (OSError, ValueError) as e:
        raise BundleError(f"{trace_path}: not a readable trace ({e})") from e
    steps: list[TraceEvent] = [e for e in trace.events if e.kind != "judgment"]
    names = dict.fromkeys(trace.header.agents)
    for s in steps:
        names.setdefault(s.actor)
        if s.recipient:
            names.setdefault(s.recipient)
    participants = [Participant(name=n, kind="role" if n in trace.header.agents else "actor")
                    for n in names]
    digest = hashlib.sha256("\n".join(s.model_dump_json() for s in steps).encode()).hexdigest()
    manifest = Manifest(episode=digest[:16], steps=len(steps), files={})
    return Bundle(trace_path.parent, manifest, steps, participants, [],
                  Authorization(default="deny"), {}, {}, [], {})


def open_episode(path: Path, world: World | None = None) -> Bundle:
    """What `eairc graph` draws: a bundle folder, or a trace (bundled with its world
    when one is given and the bundle writer is available, else `trace_bundle`)."""
    path = Path(path)
    if path.is_dir():
        if not (path / MANIFEST).is_file():
            raise BundleError(f"{path}: not a bundle folder (no {MANIFEST})")
        return Bundle.load(path)
    if world is None:
        return trace_bundle(path)
    import importlib

    try:
        write_bundle = importlib.import_module("eairdsl.audit.bundle").write_bundle
    except (ImportError, AttributeError):
        return trace_bundle(path)
    with tempfile.TemporaryDirectory(prefix="eair-bundle-") as tmp:
        manifest = write_bundle(path, world, Path(tmp))
        root = Path(tmp) / getattr(manifest, "episode", "")
        return Bundle.load(root if (root / MANIFEST).is_file() else Path(tmp))
