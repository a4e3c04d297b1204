"""The query API over a sanitized bundle: what an auditor reads, exactly as it is checked.

Every answer is a pydantic model that names the steps it carries (`steps`) and
fits a size budget in characters of its JSON; an answer that had to leave
something out says so (`truncated`, `omitted`) and gives the calls that read the
rest (`more`). Field text comes only from `evidence.field_text`, the rendering
the validator compares quotes with; a search excerpt is a substring of the
field's `normalize`d text, so it can be quoted as it is.

Matching is exact: `search` and `provenance` look for the pattern as a substring
of the normalised text (Unicode NFC, whitespace runs to one space), case and
punctuation included. There are no regular expressions (a pattern from an LLM is
untrusted input, and Python's `re` has no time limit) and no fuzzy matching: an
auditor that finds nothing has learnt that the text is not there.

The same functions are offered to LLM auditors as tools: `query_tools(layer)`
gives their JSON schemas, derived from the signatures and docstrings below, and
`call_tool(bundle, name, args)` runs one, answering bad arguments with an error
object instead of raising. The topology layer (F.16's topology-only arm) offers
no annotations, no `provenance` and no `unconsulted`.
"""

from __future__ import annotations

import inspect
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal, get_type_hints

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from eairdsl.audit.evidence import Bundle, edge_ref, field_names, field_text, normalize
from eairdsl.audit.graph import EDGE_KINDS, LAYERS, Layer, build_graph, step_links
from eairdsl.runtime.trace import EventKind, TraceEvent

__all__ = ["DEFAULT_BUDGET", "MIN_BUDGET", "MAX_BUDGET", "QueryError", "Answer", "FieldText",
           "StepView", "ReadAnswer", "Hit", "SearchAnswer", "EdgeView", "EdgesAnswer",
           "Neighbor", "NeighborsAnswer", "PathStep", "PathAnswer", "RecordSource",
           "ProvenanceAnswer", "Obligation", "UnconsultedAnswer", "search", "read",
           "neighbors", "edges", "path", "provenance", "unconsulted", "query_tools",
           "call_tool", "TOOL_NAMES"]

DEFAULT_BUDGET = 4000
MIN_BUDGET = 1000
MAX_BUDGET = 50000
_EXCERPT = 80  # characters of context either side of a search hit
_READ_RESERVE = 400  # what `read` keeps free for its `more` calls and note

Budget = Annotated[int, Field(ge=MIN_BUDGET, le=MAX_BUDGET,
                              description="Most characters the answer's JSON may take; "
                                          "what does not fit is left out and `more` says "
                                          "how to read it.")]
StepId = Annotated[str, Field(min_length=1, max_length=40,
                              description="A step id as the events name it, e.g. s0007.")]


class QueryError(ValueError):
    """A query that cannot be answered: an unknown step, node or role, a bad budget."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Answer(_Model):
    """What every answer carries."""

    #: the call this answers, as text
    query: str
    #: every step id in the answer, in step order
    steps: list[str] = Field(default_factory=list)
    budget: int
    truncated: bool = False
    #: how many items (hits, edges, steps, repeats) were left out
    omitted: int = 0
    #: calls that read what was left out
    more: list[str] = Field(default_factory=list)
    note: str | None = None


class FieldText(_Model):
    """One field's text as `field_text` renders it, from `offset`, possibly cut."""

    field: str
    text: str
    offset: int = 0
    total_chars: int
    truncated: bool = False


class StepView(_Model):
    step: str
    kind: str
    actor: str
    edge: str | None
    t: float
    task: int | None
    fields: list[FieldText]


class ReadAnswer(Answer):
    items: list[StepView] = Field(default_factory=list)


class Hit(_Model):
    step: str
    kind: str
    actor: str
    edge: str | None
    field: str
    #: where the match starts in the field's normalised text
    at: int
    #: a window of the field's normalised text around the match (quotable as it is)
    excerpt: str
    field_chars: int


class SearchAnswer(Answer):
    pattern: str
    total: int = 0
    hits: list[Hit] = Field(default_factory=list)


class EdgeView(_Model):
    source: str
    target: str
    kind: str
    step: str
    t: float
    task: int | None
    channel: str | None
    ref: str | None
    #: the annotated layer's labels (summary, authorities, values, visibility, repeats)
    annotations: dict[str, Any] | None = None


class EdgesAnswer(Answer):
    total: int = 0
    edges: list[EdgeView] = Field(default_factory=list)


class Neighbor(_Model):
    direction: Literal["out", "in"]
    node: str
    node_kind: str
    kind: str
    count: int
    steps: list[str]


class NeighborsAnswer(Answer):
    node: str
    node_kind: str
    attributes: dict[str, Any] = Field(default_factory=dict)
    neighbors: list[Neighbor] = Field(default_factory=list)


class PathStep(_Model):
    step: str
    #: how this step follows the previous one (`start` for the first)
    link: Literal["start", "call", "task", "edge"]
    kind: str
    actor: str
    edge: str | None


class PathAnswer(Answer):
    found: bool
    path: list[PathStep] = Field(default_factory=list)


class RecordSource(_Model):
    record: str
    key: str | None
    field: str


class ProvenanceAnswer(Answer):
    text: str
    first: Hit | None = None
    repeats: list[Hit] = Field(default_factory=list)
    records: list[RecordSource] = Field(default_factory=list)


class Obligation(_Model):
    document: str
    tools: list[str]
    policies: list[str]


class UnconsultedAnswer(Answer):
    role: str
    unconsulted: list[Obligation] = Field(default_factory=list)


# ------------------------------------------------------------------ indexes

class _Index:
    """What the queries need of one bundle, built on first use and kept with it."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.order = {s.step: i for i, s in enumerate(bundle.steps)}
        self._graphs: dict[str, nx.MultiDiGraph] = {}
        self._links: dict[str, list[tuple[str, str]]] | None = None
        self._texts: list[list[tuple[str, str]]] | None = None

    def graph(self, layer: Layer) -> nx.MultiDiGraph:
        if layer not in self._graphs:
            self._graphs[layer] = build_graph(self.bundle, layer)
        return self._graphs[layer]

    @property
    def links(self) -> dict[str, list[tuple[str, str]]]:
        if self._links is None:
            self._links = step_links(self.bundle)
        return self._links

    def texts(self) -> list[list[tuple[str, str]]]:
        """Per step, (field, normalised text) for every field and structured leaf."""
        if self._texts is None:
            self._texts = [list(_searchable(s)) for s in self.bundle.steps]
        return self._texts


_INDEXES: weakref.WeakKeyDictionary[Bundle, _Index] = weakref.WeakKeyDictionary()


def _index(bundle: Bundle) -> _Index:
    found = _INDEXES.get(bundle)
    if found is None:
        found = _INDEXES[bundle] = _Index(bundle)
    return found


def _leaf_paths(value: Any, prefix: str) -> Iterator[str]:
    if isinstance(value, dict):
        for k in sorted(value):
            if isinstance(k, str) and k and "." not in k:
                yield from _leaf_paths(value[k], f"{prefix}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaf_paths(v, f"{prefix}.{i}")
    elif value is not None:
        yield prefix


def _searchable(step: TraceEvent) -> Iterator[tuple[str, str]]:
    """Each top-level field, and for structured ones each leaf, as (field, normalised text).

    Leaves come first so a hit names the narrowest field that holds it; the
    top-level rendering (canonical JSON) is searched for matches spanning leaves.
    """
    for name in field_names(step):
        value = getattr(step, name)
        if isinstance(value, (dict, list)):
            for path in _leaf_paths(value, name):
                text = field_text(step, path)
                if text is not None:
                    yield path, normalize(text)
        text = field_text(step, name)
        if text is not None:
            yield name, normalize(text)


def _check_budget(budget: int) -> None:
    if not isinstance(budget, int) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise QueryError(f"budget must be an integer from {MIN_BUDGET} to {MAX_BUDGET}")


def _step(bundle: Bundle, step: str) -> TraceEvent:
    found = bundle.by_step.get(step)
    if found is None:
        first = bundle.steps[0].step if bundle.steps else None
        last = bundle.steps[-1].step if bundle.steps else None
        raise QueryError(f"unknown step {step!r}: the bundle's steps are {first} to {last}"
                         if first else f"unknown step {step!r}: the bundle has no steps")
    return found


def _call(name: str, **args: Any) -> str:
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items() if v is not None)
    return f"{name}({shown})"


def _size(model: BaseModel) -> int:
    return len(model.model_dump_json())


def _fill(answer: Answer, items: list[Any], attr: str, more: Callable[[int], str],
          steps: Callable[[list[Any]], list[str]]) -> None:
    """Put as many of `items` into `answer.<attr>` as fit the budget, with the steps they
    carry; if some are left out, say how many and how to read them. The final answer's
    compact JSON is at most `answer.budget` characters (unless even the first item is
    larger, when none is kept)."""
    kept: list[Any] = getattr(answer, attr)
    used = _size(answer)
    fit = len(items)
    for n, item in enumerate(items):
        cost = len(item.model_dump_json()) + 1 + 12 * len(steps([item]))
        if used + cost > answer.budget:
            fit = n
            break
        kept.append(item)
        used += cost

    def mark(n: int) -> None:
        answer.truncated = True
        answer.omitted = len(items) - n
        answer.more = [more(n)]
        answer.note = (f"{answer.omitted} of {len(items)} left out to fit the budget of "
                       f"{answer.budget} characters")

    answer.steps = steps(kept)
    if fit < len(items):
        mark(fit)
    while _size(answer) > answer.budget and kept:
        kept.pop()
        fit -= 1
        answer.steps = steps(kept)
        mark(fit)


def _hit(step: TraceEvent, path: str, text: str, at: int, length: int) -> Hit:
    lo = max(0, at - _EXCERPT)
    hi = min(len(text), at + length + _EXCERPT)
    return Hit(step=step.step, kind=step.kind, actor=step.actor, edge=edge_ref(step),
               field=path, at=at, excerpt=text[lo:hi], field_chars=len(text))


def _matches(bundle: Bundle, pattern: str, kind: str | None = None, actor: str | None = None,
             field: str | None = None) -> list[Hit]:
    """One hit per step (its narrowest field holding the pattern), in step order."""
    hits: list[Hit] = []
    texts = _index(bundle).texts()
    for step, fields in zip(bundle.steps, texts, strict=True):
        if (kind is not None and step.kind != kind) or (actor is not None
                                                        and step.actor != actor):
            continue
        if field is not None:
            raw = field_text(step, field)
            candidates = [(field, normalize(raw))] if raw is not None else []
        else:
            candidates = fields
        for path, text in candidates:
            at = text.find(pattern)
            if at >= 0:
                hits.append(_hit(step, path, text, at, len(pattern)))
                break
    return hits


def _pattern(text: str) -> str:
    pattern = normalize(text)
    if not pattern:
        raise QueryError("the pattern is empty once whitespace is normalised")
    return pattern


# ------------------------------------------------------------------ the queries

def search(bundle: Bundle,
           pattern: Annotated[str, Field(min_length=1, max_length=2000,
                                         description="Text to find, exactly (case and "
                                                     "punctuation count; whitespace runs "
                                                     "match one space).")],
           kind: Annotated[EventKind | None, Field(description="Only steps of this kind.")]
           = None,
           actor: Annotated[str | None, Field(description="Only steps by this participant.")]
           = None,
           field: Annotated[str | None, Field(description="Only this field (content, args, "
                                                          "result, result.0.name, ...).")]
           = None,
           budget: Budget = DEFAULT_BUDGET) -> SearchAnswer:
    """Find the steps whose field text contains `pattern` exactly (no regex, no fuzzy
    matching); one hit per step, naming the narrowest field and a quotable excerpt."""
    _check_budget(budget)
    p = _pattern(pattern)
    hits = _matches(bundle, p, kind, actor, field)
    answer = SearchAnswer(query=_call("search", pattern=pattern, kind=kind, actor=actor,
                                      field=field), budget=budget, pattern=p, total=len(hits))

    def more(n: int) -> str:
        return (f"search(pattern={pattern!r}, ...) from step {hits[n].step} on: narrow by "
                f"kind/actor/field, or read(step={hits[n].step!r}, "
                f"through={hits[-1].step!r})")

    _fill(answer, hits, "hits", more, lambda xs: [h.step for h in xs])
    if not hits:
        answer.note = "no step contains this text (exact match after whitespace normalisation)"
    return answer


def read(bundle: Bundle, step: StepId,
         through: Annotated[str | None, Field(description="Read every step from `step` to "
                                                          "this one, inclusive.")] = None,
         fields: Annotated[list[str] | None, Field(description="Only these fields (content, "
                                                               "args, result, args.amount, "
                                                               "...); all when omitted.")]
         = None,
         offset: Annotated[int, Field(ge=0, description="Skip this many characters of each "
                                                        "field's text (to continue a cut "
                                                        "field).")] = 0,
         budget: Budget = DEFAULT_BUDGET) -> ReadAnswer:
    """Read steps' fields exactly as quotes are checked (`field_text`): one step, or a
    range with `through`; a field cut by the budget says where to continue."""
    _check_budget(budget)
    first = _step(bundle, step)
    order = _index(bundle).order
    last = _step(bundle, through) if through is not None else first
    if order[last.step] < order[first.step]:
        raise QueryError(f"`through` {through!r} comes before `step` {step!r}")
    chosen = bundle.steps[order[first.step]:order[last.step] + 1]
    if fields is not None and through is None:
        missing = [f for f in fields if field_text(first, f) is None]
        if missing:
            raise QueryError(f"step {step} has no field {', '.join(missing)}; its fields are "
                             f"{', '.join(field_names(first))}")
    answer = ReadAnswer(query=_call("read", step=step, through=through, fields=fields,
                                    offset=offset or None), budget=budget)
    limit = budget - _READ_RESERVE
    for n, s in enumerate(chosen):
        names = [f for f in (fields if fields is not None else _shown_fields(s))
                 if field_text(s, f) is not None]
        view = StepView(step=s.step, kind=s.kind, actor=s.actor, edge=edge_ref(s), t=s.t,
                        task=s.task, fields=[])
        answer.items.append(view)
        answer.steps.append(s.step)
        if _size(answer) > limit and len(answer.items) > 1:
            answer.items.pop()
            answer.steps.pop()
            _left_out(answer, chosen, n, fields)
            break
        for i, name in enumerate(names):
            text = field_text(s, name) or ""
            piece = text[offset:]
            cell = FieldText(field=name, text="", offset=offset, total_chars=len(text),
                             truncated=bool(piece))
            view.fields.append(cell)
            room = limit - _size(answer)
            if room <= 0 and piece:
                view.fields.pop()
                rest = names[i:]
                answer.truncated = True
                answer.more.append(f"read(step={s.step!r}, fields={rest!r}, offset={offset})")
                break
            shown = piece[:max(room, 0)]
            cell.text, cell.truncated = shown, len(shown) < len(piece)
            while _size(answer) > limit and cell.text:  # JSON escapes take more room
                over = _size(answer) - limit
                cell.text = cell.text[:max(0, len(cell.text) - over)]
                cell.truncated = True
            if cell.truncated:
                answer.truncated = True
                answer.more.append(f"read(step={s.step!r}, fields=[{name!r}], "
                                   f"offset={offset + len(cell.text)})")
                rest = names[i + 1:]
                if rest:
                    at = f", offset={offset}" if offset else ""
                    answer.more.append(f"read(step={s.step!r}, fields={rest!r}{at})")
                break
        if answer.truncated:
            _left_out(answer, chosen, n + 1, fields)
            break
    if answer.truncated and answer.note is None:
        answer.note = f"cut to fit the budget of {budget} characters; `more` continues it"
    return answer


def _shown_fields(step: TraceEvent) -> list[str]:
    """The fields `read` shows by default: all but those the step view's header already
    gives word for word (`actor`, and `edge` when it is the edge ref)."""
    return [f for f in field_names(step)
            if f != "actor" and not (f == "edge" and step.edge == edge_ref(step))]


def _left_out(answer: ReadAnswer, chosen: list[TraceEvent], n: int,
              fields: list[str] | None) -> None:
    rest = chosen[n:]
    if not rest:
        return
    answer.truncated = True
    answer.omitted = len(rest)
    shown = f", fields={fields!r}" if fields is not None else ""
    answer.more.append(f"read(step={rest[0].step!r}, through={rest[-1].step!r}{shown})")
    answer.note = (f"{len(rest)} step(s) left out to fit the budget of {answer.budget} "
                   f"characters; `more` reads them")


def _node(g: nx.MultiDiGraph, node: str) -> None:
    if node not in g:
        names = sorted(g.nodes)
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        raise QueryError(f"unknown node {node!r}; the graph's nodes are {shown}")


def neighbors(bundle: Bundle,
              node: Annotated[str, Field(min_length=1, max_length=200,
                                         description="A participant name, or tool:NAME, "
                                                     "record:NAME, document:NAME.")],
              budget: Budget = DEFAULT_BUDGET, layer: Layer = "annotated") -> NeighborsAnswer:
    """Who and what a node interacted with: one entry per neighbour, direction and edge
    kind, with the step ids of those edges in step order."""
    _check_budget(budget)
    g = _index(bundle).graph(layer)
    _node(g, node)
    order = _index(bundle).order
    groups: dict[tuple[str, str, str], list[str]] = {}
    for _, b, d in g.out_edges(node, data=True):
        groups.setdefault(("out", b, d["kind"]), []).append(d["step"])
    for a, _, d in g.in_edges(node, data=True):
        groups.setdefault(("in", a, d["kind"]), []).append(d["step"])
    items = []
    for (direction, other, kind), found in groups.items():
        ids = sorted(set(found), key=order.__getitem__)
        items.append(Neighbor(direction="out" if direction == "out" else "in", node=other,
                              node_kind=g.nodes[other].get("kind", "actor"), kind=kind,
                              count=len(ids), steps=ids))
    items.sort(key=lambda x: (order[x.steps[0]], x.direction, x.node, x.kind))
    attrs = {k: v for k, v in sorted(g.nodes[node].items()) if k not in ("kind",)}
    answer = NeighborsAnswer(query=_call("neighbors", node=node), budget=budget, node=node,
                             node_kind=g.nodes[node].get("kind", "actor"), attributes=attrs)
    _fill(answer, items, "neighbors",
          lambda n: f"edges(src={node!r}) and edges(dst={node!r}) list them one by one",
          lambda xs: sorted({s for x in xs for s in x.steps}, key=order.__getitem__))
    if _size(answer) > budget:  # a node with many tools or obligations
        answer.attributes = {}
        answer.truncated = True
        answer.more.append(f"unconsulted(role={node!r})")
        answer.note = "the node's attributes were left out to fit the budget"
    return answer


_BASE = {"kind", "step", "t", "task", "channel", "ref"}


def edges(bundle: Bundle,
          src: Annotated[str | None, Field(description="Only edges from this node.")] = None,
          dst: Annotated[str | None, Field(description="Only edges to this node.")] = None,
          kind: Annotated[Literal["message", "delegation", "call", "result", "reads",
                                  "writes"] | None,
                          Field(description="Only edges of this kind.")] = None,
          budget: Budget = DEFAULT_BUDGET, layer: Layer = "annotated") -> EdgesAnswer:
    """The interaction edges (one per step) matching the filters, in step order, with
    time, channel, step id and edge ref; the annotated layer adds its labels."""
    _check_budget(budget)
    if kind is not None and kind not in EDGE_KINDS:
        raise QueryError(f"unknown edge kind {kind!r}; expected one of {', '.join(EDGE_KINDS)}")
    g = _index(bundle).graph(layer)
    for n in (src, dst):
        if n is not None:
            _node(g, n)
    order = _index(bundle).order
    found = []
    for a, b, d in g.edges(data=True):
        if (src is None or a == src) and (dst is None or b == dst) and (kind is None
                                                                      or d["kind"] == kind):
            extra = {k: v for k, v in sorted(d.items()) if k not in _BASE}
            found.append(EdgeView(source=a, target=b, kind=d["kind"], step=d["step"], t=d["t"],
                                  task=d["task"], channel=d.get("channel"), ref=d["ref"],
                                  annotations=extra if layer == "annotated" else None))
    found.sort(key=lambda e: (order[e.step], e.kind, e.source, e.target))
    answer = EdgesAnswer(query=_call("edges", src=src, dst=dst, kind=kind), budget=budget,
                         total=len(found))

    def more(n: int) -> str:
        return (f"edges(...) left out from step {found[n].step}: narrow by src, dst or kind, "
                f"or read(step={found[n].step!r}, through={found[-1].step!r})")

    _fill(answer, found, "edges", more, lambda xs: list(dict.fromkeys(e.step for e in xs)))
    return answer


def path(bundle: Bundle, from_step: StepId, to_step: StepId,
         budget: Budget = DEFAULT_BUDGET) -> PathAnswer:
    """The shortest chain of steps from one step to a later one over call links (a call
    to its result, its writes, its delegation), task links (the next step of the same
    task) and edge links (a message to its receiver's next step)."""
    _check_budget(budget)
    start, goal = _step(bundle, from_step), _step(bundle, to_step)
    idx = _index(bundle)
    query = _call("path", from_step=from_step, to_step=to_step)
    if idx.order[goal.step] < idx.order[start.step]:
        return PathAnswer(query=query, budget=budget, found=False,
                          steps=[start.step, goal.step],
                          note=f"{to_step} comes before {from_step}; links only go forward")
    came: dict[str, tuple[str, str] | None] = {start.step: None}
    queue = deque([start.step])
    while queue:
        here = queue.popleft()
        if here == goal.step:
            break
        for nxt, link in idx.links[here]:
            if nxt not in came and idx.order[nxt] <= idx.order[goal.step]:
                came[nxt] = (here, link)
                queue.append(nxt)
    if goal.step not in came:
        return PathAnswer(query=query, budget=budget, found=False,
                          steps=[start.step, goal.step],
                          note=f"no chain of call, task or edge links leads from {from_step} "
                               f"to {to_step}")
    chain: list[tuple[str, str]] = []
    at: str | None = goal.step
    while at is not None:
        prev = came[at]
        chain.append((at, prev[1] if prev else "start"))
        at = prev[0] if prev else None
    chain.reverse()
    items = []
    for s, link in chain:
        e = bundle.by_step[s]
        items.append(PathStep(step=s, link=link if link in ("call", "task", "edge") else "start",
                              kind=e.kind, actor=e.actor, edge=edge_ref(e)))
    answer = PathAnswer(query=query, budget=budget, found=True)
    _fill(answer, items, "path", lambda n: f"path(from_step={items[n].step!r}, "
                                           f"to_step={to_step!r})",
          lambda xs: [p.step for p in xs])
    return answer


def provenance(bundle: Bundle,
               text: Annotated[str, Field(min_length=1, max_length=2000,
                                          description="An exact string or value to trace.")],
               budget: Budget = DEFAULT_BUDGET) -> ProvenanceAnswer:
    """Where a string or value first appears in the episode (step and field), every later
    step that repeats it, and the record fields that hold it."""
    _check_budget(budget)
    p = _pattern(text)
    hits = _matches(bundle, p)
    records = []
    for name in sorted(bundle.records):
        view = bundle.records[name]
        for row in view.rows:
            key = row.get(view.key) if view.key else None
            for f in view.fields:
                value = row.get(f)
                if value is not None and p in normalize(value if isinstance(value, str)
                                                        else str(value)):
                    records.append(RecordSource(record=name, field=f,
                                                key=None if key is None else str(key)))
    answer = ProvenanceAnswer(query=_call("provenance", text=text), budget=budget, text=p,
                              first=hits[0] if hits else None, records=records[:20])
    rest = hits[1:]
    lead = [answer.first.step] if answer.first else []
    _fill(answer, rest, "repeats",
          lambda n: f"search(pattern={text!r}) lists every step; from {rest[n].step} on, "
                    f"narrow it with kind/actor/field",
          lambda xs: lead + [h.step for h in xs])
    while _size(answer) > budget and answer.records:
        answer.records.pop()
        answer.truncated = True
        answer.note = "; ".join(x for x in (answer.note, "record sources cut to fit the budget")
                                if x)
    if not hits:
        answer.note = "no step contains this text (exact match after whitespace normalisation)"
    return answer


def unconsulted(bundle: Bundle,
                role: Annotated[str, Field(min_length=1, max_length=200,
                                           description="A role's name.")],
                budget: Budget = DEFAULT_BUDGET) -> UnconsultedAnswer:
    """The documents a role could read through its tools but never did in the episode,
    with the policies written in them: obligations it did not consult."""
    _check_budget(budget)
    g = _index(bundle).graph("annotated")
    _node(g, role)
    attrs = g.nodes[role]
    answer = UnconsultedAnswer(query=_call("unconsulted", role=role), budget=budget, role=role)
    if attrs.get("kind") != "role":
        answer.note = f"{role} is a {attrs.get('kind')}, not a role: it has no obligations"
        return answer
    items = [Obligation(**o) for o in attrs.get("unconsulted", [])]
    # the steps where this role did read a document, so the answer can be checked
    reads = [d["step"] for a, _, d in g.edges(data=True)
             if d["kind"] == "reads" and a.startswith("document:") and d.get("reader") == role]
    _fill(answer, items, "unconsulted",
          lambda n: f"unconsulted(role={role!r}, budget={MAX_BUDGET})", lambda xs: reads)
    if not answer.unconsulted:
        answer.note = (f"{role} read every document its tools reach"
                       if reads else f"{role}'s tools reach no document")
    return answer


# ------------------------------------------------------------------ as tools

_TOOLS: dict[str, Callable[..., Answer]] = {
    "search": search, "read": read, "neighbors": neighbors, "edges": edges, "path": path,
    "provenance": provenance, "unconsulted": unconsulted}
TOOL_NAMES = tuple(_TOOLS)
#: what the topology-only arm (F.16) does without: the annotation layer's tools
_ANNOTATED_ONLY = frozenset({"provenance", "unconsulted"})
_HIDDEN = frozenset({"bundle", "layer"})


def _args_model(name: str, fn: Callable[..., Answer]) -> type[BaseModel]:
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name in _HIDDEN:
            continue
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (hints[p.name], default)
    model: type[BaseModel] = create_model(f"{name}_args", __config__=ConfigDict(
        extra="forbid", strict=False), **fields)
    return model


_MODELS = {name: _args_model(name, fn) for name, fn in _TOOLS.items()}


def _description(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _offered(layer: Layer) -> list[str]:
    return [n for n in _TOOLS if layer == "annotated" or n not in _ANNOTATED_ONLY]


def query_tools(layer: Layer = "annotated") -> list[dict[str, Any]]:
    """The query functions as tool definitions: name, description (the docstring's first
    paragraph) and a JSON Schema of the parameters (from the signature)."""
    out = []
    for name in _offered(layer):
        schema = _MODELS[name].model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema["additionalProperties"] = False
        out.append({"name": name, "description": _description(_TOOLS[name]),
                    "parameters": schema})
    return out


def call_tool(bundle: Bundle, name: str, args: Any, layer: Layer = "annotated") -> dict[str, Any]:
    """Run one query tool; bad arguments and unanswerable queries give `{"error": ...}`,
    never an exception, so an LLM auditor can read what went wrong and retry."""
    if layer not in LAYERS:
        return {"error": f"unknown graph layer {layer!r}; expected one of {', '.join(LAYERS)}"}
    if not isinstance(name, str) or name not in _offered(layer):
        return {"error": f"unknown tool {name!r}", "tools": _offered(layer)}
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return {"error": f"arguments of {name} must be a JSON object, not "
                         f"{type(args).__name__}", "tool": name}
    try:
        parsed = _MODELS[name].model_validate(args)
    except ValidationError as e:
        problems = [{"argument": ".".join(str(x) for x in err["loc"]) or "(arguments)",
                     "problem": err["msg"]} for err in e.errors()]
        return {"error": f"invalid arguments for {name}", "tool": name, "problems": problems}
    kwargs = dict(parsed)
    if "layer" in inspect.signature(_TOOLS[name]).parameters:
        kwargs["layer"] = layer
    try:
        answer = _TOOLS[name](bundle, **kwargs)
    except QueryError as e:
        return {"error": str(e), "tool": name}
    return answer.model_dump(mode="json")
