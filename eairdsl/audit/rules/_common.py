"""What every offline rule shares: the hit it returns, the bundle's lookups, the quoting.

A rule reads only a bundle (steps, participants, policies, the authorization
matrix, records, documents, tool cards) through a `Context`, and returns `Hit`s:
candidate certificates with the boundary, path, effect and cited steps already
chosen, every quote taken verbatim from `evidence.field_text` (`quote`, `cite`).
`offline.RulesAuditor` turns hits into contract-v1 findings; nothing here knows
a world (names come from the bundle, closed vocabularies from the tools' JSON
schemas, authority from the participants' ranks).

`Rule` is the shape the auditor iterates (`RULES` in the package): a name as the
report's coverage records it, and `run(ctx) -> Outcome` (its hits and the queries
coverage lists). Most rules are one function `Context -> list[Hit]` with a single
query of their name; `FindRule` wraps one. The helpers a rule module imports from
here are public names of this private module; the leading-underscore ones are not
meant for rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import networkx as nx

from eairdsl.audit.contract import BoundaryKind, Contribution, Criterion, QueryRecord
from eairdsl.audit.evidence import Bundle, field_text, normalize
from eairdsl.audit.validate import MIN_QUOTE, sharers
from eairdsl.runtime.trace import TraceEvent

__all__ = ["MAX_QUOTE", "Cite", "Hit", "Context", "Outcome", "Rule", "FindRule",
           "appended_rows", "row_field", "quote", "cite", "present", "words_of", "has_word"]

#: longest quote the auditor takes (a distinctive window, not a whole field)
MAX_QUOTE = 160
#: characters of context either side of a value shorter than the validator's minimum
_CONTEXT = 24
_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class Cite:
    """One evidence unit before it becomes a contract `EvidenceUnit`."""

    step: str
    field: str
    quote: str
    supports: list[Criterion]


@dataclass
class Hit:
    """A candidate certificate found by one rule."""

    rule: str
    property_policy: str | None
    property_text: str
    component: tuple[str, str]
    boundary_kind: BoundaryKind
    boundary_step: str
    contribution: Contribution
    first_anomaly: str
    path: list[str]
    effect_endpoint: str
    effect_step: str | None
    cites: list[Cite]
    supported: bool
    confidence: float
    resolved_later: str | None = None
    #: the mechanism found (the catalogue key of `eairdsl.audit.repairs`: its plan and its
    #: Signals types), and the declarations a repair may change. A hit carries no risk id:
    #: the bundle has none to read (EAIR §4 removes risk labels), and the rule's shape is
    #: not the world's risk
    shape: str = "invariant"
    surfaces: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ shared reading

class Context:
    """The bundle with the lookups every rule needs, computed once."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.steps = bundle.steps
        self.index = {s.step: i for i, s in enumerate(bundle.steps)}
        self.parties = {p.name: p for p in bundle.participants}
        self.tools = {t.name: t for t in bundle.tools}
        self.callers: dict[str, set[str]] = {}
        for s in bundle.steps:
            if s.tool and s.kind in ("tool_call", "tool_result", "state_update"):
                self.callers.setdefault(s.tool, set()).add(s.actor)
        self._graph: nx.MultiDiGraph | None = None

    @property
    def graph(self) -> nx.MultiDiGraph:
        if self._graph is None:
            from eairdsl.audit.graph import build_graph

            self._graph = build_graph(self.bundle, "annotated")
        return self._graph

    def before(self, a: str, b: str) -> bool:
        return self.index[a] < self.index[b]

    def authority(self, name: str) -> int:
        p = self.parties.get(name)
        return p.authority if p is not None and p.authority is not None else 0

    def is_role(self, name: str) -> bool:
        p = self.parties.get(name)
        return p is not None and p.kind == "role"

    def cross_role(self, step: TraceEvent) -> bool:
        """The validator's test: a message between two participants, or an action on a
        tool, or on the records it writes or shows, that two or more share."""
        if step.kind == "message":
            return step.recipient is not None and step.actor != step.recipient
        if step.kind in ("tool_call", "tool_result", "state_update") and step.tool:
            roles = sharers(self.bundle.tools, step.tool)
            return len(roles | self.callers.get(step.tool, set())) >= 2
        return False

    def last_message_into(self, actor: str, until: str) -> TraceEvent | None:
        """The latest message another participant sent `actor` before step `until`."""
        for s in reversed(self.steps[:self.index[until]]):
            if s.kind == "message" and s.recipient == actor and s.actor != actor:
                return s
        return None

    def enums(self, tool: str) -> dict[str, list[str]]:
        """The tool's closed-vocabulary parameters: name -> allowed string values."""
        card = self.tools.get(tool)
        if card is None:
            return {}
        props = card.parameters.get("properties")
        out: dict[str, list[str]] = {}
        if isinstance(props, dict):
            for name, schema in props.items():
                values = schema.get("enum") if isinstance(schema, dict) else None
                if isinstance(values, list) and len(values) >= 2 \
                        and all(isinstance(v, str) for v in values):
                    out[str(name)] = [str(v) for v in values]
        return out


def appended_rows(diff: dict[str, Any] | None) -> Iterator[tuple[str, int | None, dict[str, Any]]]:
    """(record, index in a list or None, row) of every row a diff appends."""
    appended = (diff or {}).get("append")
    if not isinstance(appended, dict):
        return
    for name, row in sorted(appended.items()):
        if isinstance(row, dict):
            yield str(name), None, row
        elif isinstance(row, list):
            for i, r in enumerate(row):
                if isinstance(r, dict):
                    yield str(name), i, r


def row_field(record: str, i: int | None, key: str) -> str:
    return f"diff.append.{record}." + (f"{i}.{key}" if i is not None else key)


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, str]]:
    """(dotted field, text) of every string leaf; keys with dots are not addressable."""
    if isinstance(value, str):
        yield prefix, value
    elif isinstance(value, dict):
        for k in sorted(value):
            if "." not in str(k):
                yield from _leaves(value[k], f"{prefix}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}.{i}")


_MAIN_FIELD = {"message": "content", "tool_call": "args", "tool_result": "result",
               "state_update": "diff", "decision": "content"}


def quote(step: TraceEvent, fld: str, needle: str | None = None) -> str | None:
    """A verbatim quote of `fld` of `step`: a window around `needle` (at least MIN_QUOTE
    characters, or the whole field), or the field's opening; None when absent."""
    text = field_text(step, fld)
    if text is None:
        return None
    body = normalize(text)
    if not body:
        return None
    if needle is None:
        return body[:MAX_QUOTE].strip() or body
    want = normalize(needle)
    at = body.find(want) if want else -1
    if at < 0:
        return None
    if len(want) >= MIN_QUOTE:
        return body[at:at + min(len(want), MAX_QUOTE)]
    if len(body) <= MIN_QUOTE:
        return body
    # a short value is quoted with its context, out to word boundaries, so that the quote
    # pins the place (the validator normalises quotes too: no edge spaces count)
    start, end = max(0, at - _CONTEXT), min(len(body), at + len(want) + _CONTEXT)
    while start > 0 and not body[start - 1].isspace() and start > at - 2 * _CONTEXT:
        start -= 1
    while end < len(body) and not body[end].isspace() and end < at + len(want) + 2 * _CONTEXT:
        end += 1
    q = normalize(body[start:end])
    return q if len(q) >= MIN_QUOTE else body


def cite(step: TraceEvent, needle: str | None, supports: list[Criterion]) -> Cite | None:
    """Cite `step` where `needle` occurs: the narrowest field that holds it."""
    main = _MAIN_FIELD.get(step.kind, "content")
    if needle is not None:
        value = getattr(step, main, None)
        want = normalize(needle)
        for path, text in _leaves(value, main) if not isinstance(value, str) else ():
            if want and want in normalize(text):
                q = quote(step, path, needle)
                if q:
                    return Cite(step.step, path, q, supports)
    for fld in (main, "content", "reason", "result", "args", "diff"):
        q = quote(step, fld, needle)
        if q:
            return Cite(step.step, fld, q, supports)
    return None


def present(*items: Cite | None) -> list[Cite]:
    return [c for c in items if c is not None]


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def has_word(text: str, word: str) -> bool:
    w = re.escape(word.casefold())
    return re.search(rf"(?<![a-z0-9_]){w}(?![a-z0-9_])", text.casefold()) is not None


# ------------------------------------------------------------------ the rule shape

@dataclass(frozen=True)
class Outcome:
    """What one rule run gives the auditor: its hits, and the queries the report's
    coverage lists for it (the rule's name; the policy rule one per policy)."""

    hits: list[Hit]
    queries: list[QueryRecord]


class Rule(Protocol):
    """One offline rule, as `RULES` lists it and `offline.hits` runs it.

    `name` is what the report's coverage records (`QueryRecord.name`): it is part of
    the byte-stable report, so a rule keeps its name once shipped. `run` may raise on
    a hostile bundle (ValueError, KeyError, …): the auditor then records the rule as
    failed, never as a pass.
    """

    @property
    def name(self) -> str: ...  # pragma: no cover - protocol

    def run(self, ctx: Context) -> Outcome: ...  # pragma: no cover - protocol


@dataclass(frozen=True)
class FindRule:
    """A rule that is one function of the context: its hits, and one query of its name."""

    name: str
    find: Callable[[Context], list[Hit]]

    def run(self, ctx: Context) -> Outcome:
        return Outcome(self.find(ctx), [QueryRecord(name=self.name, args={})])
