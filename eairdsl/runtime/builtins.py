"""The expression language's builtin functions, each declared once.

An entry holds everything about a builtin: its parameters (name, type,
optional), how its result is typed, whether it is *pure* (its value depends on
its arguments alone, so the checker may fold it at compile time), whether it is
*volatile* (it reads the clock or the trace, so its value moves during an
episode), its documentation and its implementation `(scope, *args) -> value`.

The runtime evaluates with the implementations; the checker reads the same
table for signatures (`eairdsl.check.builtins` turns the type names below into
checker types) and the folder reads `pure`. Types are written as the
language's type names (`int`, `text`, `list[row]`, ...) so this module needs
nothing of the front end. Three builtins have no plain implementation because
the evaluator compiles them specially: `choose` (lazy in its branches), and
`text` and `join` (they render with their argument's unit, which lowering
records on the call).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eairdsl.runtime.scope import EvalError, Scope, TraceView, _arith, _text
from eairdsl.runtime.values import FieldSet, Row, StaticRows, add_days, quarter_of

__all__ = ["BuiltinDef", "Param", "BUILTINS", "SPECIAL", "PURE", "VOLATILE", "TRACE_QUERIES",
           "RESULT_RULES"]

#: How a result type is computed from the argument types, besides a fixed type name:
#: `element` (of the first argument, a list), `choose` (the join of the branches),
#: `lookup` (a row of the first argument's record), `same` (the first argument's type).
RESULT_RULES = frozenset({"element", "choose", "lookup", "same"})


@dataclass(frozen=True)
class Param:
    """One positional parameter: its name, its type name, and whether it may be left out."""

    name: str
    type: str
    optional: bool = False


@dataclass(frozen=True)
class BuiltinDef:
    """A builtin: signature, purity and implementation in one place."""

    name: str
    params: tuple[Param, ...]
    result: str  # a type name, or one of RESULT_RULES
    doc: str
    impl: Callable[..., Any] | None  # None: compiled by the evaluator itself (SPECIAL)
    pure: bool = False  # the value depends on the arguments alone: foldable
    volatile: bool = False  # reads the clock or the trace


def _lookup(s: Scope, rows: Any, key: Any) -> Any:
    if rows is None or key is None:
        return None
    key_field = s.authorizer.key_field(getattr(rows, "record", ""))
    # NaN equals nothing, not even itself (a dict would find it by identity): scanned
    if type(rows) is StaticRows and key == key:  # noqa: PLR0124
        index = rows.by_field(key_field)
        if index is not None:
            try:
                group = index.get(key)
            except TypeError:  # an unhashable key (a list or a row): scan
                pass
            else:  # the group holds every row whose key equals `key`, in table order
                return group[0] if group else None
    # a scan (a ledger, an unhashable key): charged by the rows it may read, so a lookup
    # inside a comprehension cannot scan a 100,000-row table per item uncounted
    s.budget.charge(len(rows) >> 2)
    return next((r for r in rows if r.get(key_field) == key), None)


def _pick(s: Scope, row: Any, fields: Any) -> Any:
    if row is None:
        return None
    names = fields.names if isinstance(fields, FieldSet) else list(fields or [])
    return Row(getattr(row, "record", ""), {k: v for k, v in row.items() if k in names})


def _field_meta(s: Scope, record: str) -> dict[str, Any]:
    return s.authorizer.field_meta(record)


def _canary_hits(s: Scope, row: Any, fields: Any, text: Any) -> int:
    if row is None or text is None or not isinstance(fields, FieldSet):
        return 0
    meta = _field_meta(s, fields.record)
    plain = _text(text)
    s.budget.charge(len(fields.names) * (1 + (len(plain) >> 8)))
    folded = s.authorizer.casefold(plain)
    hits = 0
    for name in fields.names:
        f = meta.get(name)
        if f is None or not f.canary or row.get(name) in (None, ""):
            continue
        value = _text(row.get(name))
        if value in plain or value.casefold() in folded:
            hits += 1
    return hits


def _canary_exact(s: Scope, row: Any, fields: Any, text: Any) -> int:
    if row is None or text is None or not isinstance(fields, FieldSet):
        return 0
    meta = _field_meta(s, fields.record)
    plain = _text(text)
    s.budget.charge(len(fields.names) * (1 + (len(plain) >> 8)))
    return sum(1 for name in fields.names
               if (f := meta.get(name)) is not None and f.canary
               and row.get(name) not in (None, "") and _text(row.get(name)) in plain)


def _pattern_hits(s: Scope, row: Any, fields: Any, text: Any) -> int:
    if row is None or text is None or not isinstance(fields, FieldSet):
        return 0
    patterns = s.authorizer.folded_patterns(fields.record)
    folded = s.authorizer.casefold(_text(text))
    s.budget.charge(sum(len(patterns.get(name) or ()) for name in fields.names)
                    * (1 + (len(folded) >> 8)))
    return sum(1 for name in fields.names
               if (phrases := patterns.get(name)) is not None
               and any(p in folded for p in phrases))


def _search(s: Scope, document: Any, query: Any, limit: Any = 5) -> list[str]:
    text = s.documents.get(document or "", "")
    if not query:
        return []
    q = _text(query).casefold()
    lines, folded = _document_lines(text)
    # a scan of every line at every call: charged by the document's size, so a search
    # inside a comprehension cannot scan a long document per item uncounted
    s.budget.charge(1 + (len(lines) >> 4) + (len(text) >> 8))
    return [ln for ln, low in zip(lines, folded, strict=True) if q in low][: int(limit or 5)]


#: a document's lines and their case-folded forms, by the text's identity (the text is
#: kept with them, so the identity stays its own); documents are searched at every call
_LINES: dict[int, tuple[str, list[str], list[str]]] = {}


def _document_lines(text: str) -> tuple[list[str], list[str]]:
    hit = _LINES.get(id(text))
    if hit is None or hit[0] is not text:
        if len(_LINES) >= 64:
            _LINES.clear()
        lines = text.splitlines()
        hit = _LINES[id(text)] = (text, lines, [ln.casefold() for ln in lines])
    return hit[1], hit[2]


_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")


def _sentences(s: Scope, text: Any) -> list[str] | None:
    if text is None:
        return None
    plain = _text(text)
    s.budget.charge(len(plain) >> 4)  # a regular-expression split: dearer than a scan
    parts = [part.strip() for part in _SENTENCE_BREAK.split(plain) if part.strip()]
    s.budget.sized(parts)
    return parts


def _lower(s: Scope, text: Any) -> str | None:
    if text is None:
        return None
    s.budget.charge(len(text) >> 8)
    lowered: str = text.lower()
    return lowered


def _trace(s: Scope) -> TraceView:
    if s.trace is None:
        raise EvalError("trace queries need an episode")
    return s.trace


def _today(s: Scope) -> str:
    return add_days(s.start_date, s.now)


def _days_between(s: Scope, a: Any, b: Any) -> Any:
    return None if None in (a, b) else _arith("-", b, a)


def _judged(s: Scope, rubric: Any, artifact: Any, positive: Any = 2) -> Any:
    if s.judge is None or artifact is None:
        return None
    return s.judge(list(rubric or []), _text(artifact), int(positive))


def _P(name: str, type_: str, optional: bool = False) -> Param:
    return Param(name, type_, optional)


_DEFS = [
    BuiltinDef("lookup", (_P("rows", "list[row]"), _P("key", "any")), "lookup",
               "The row of a record whose key equals `key`, or none.", _lookup),
    BuiltinDef("pick", (_P("row", "row"), _P("fields", "fields")), "row",
               "A copy of `row` holding only `fields` (`record.group` or unauthorized(...)).",
               _pick, pure=True),
    BuiltinDef("first", (_P("items", "list[any]"),), "element", "The first item, or none.",
               lambda s, xs: xs[0] if xs else None, pure=True),
    BuiltinDef("last", (_P("items", "list[any]"),), "element", "The last item, or none.",
               lambda s, xs: xs[-1] if xs else None, pure=True),
    BuiltinDef("len", (_P("value", "any"),), "int", "Length of a list or text.",
               lambda s, x: None if x is None else len(x), pure=True),
    BuiltinDef("join", (_P("items", "list[any]"), _P("sep", "text", True)), "text",
               "Items rendered as text and joined by `sep` (default ', ').", None, pure=True),
    BuiltinDef("text", (_P("value", "any"),), "text",
               "The canonical text of a value ($40, 6 min, 18%).", None, pure=True),
    BuiltinDef("lower", (_P("value", "text"),), "text", "Lower-cased text.",
               _lower, pure=True),
    BuiltinDef("abs", (_P("value", "any"),), "same", "Absolute value of a quantity.",
               lambda s, x: None if x is None else abs(x), pure=True),
    BuiltinDef("round", (_P("value", "any"),), "same", "A quantity rounded to a whole number.",
               lambda s, x: None if x is None else round(x), pure=True),
    BuiltinDef("choose", (_P("cond", "bool"), _P("then", "any"), _P("otherwise", "any")),
               "choose",
               "`then` when `cond` holds, else `otherwise` (both are evaluated lazily).", None,
               pure=True),
    BuiltinDef("authorized", (_P("principal", "party"),), "list[text]",
               "The `record.field` names the authorization matrix lets `principal` see.",
               lambda s, p: [f"{r.name}.{f}" for r in s.world.records
                             for f in s.authorizer.allowed(p, r.name)]),
    BuiltinDef("unauthorized", (_P("principal", "party"), _P("rows", "list[row]")), "fields",
               "The fields of a record that `principal` may not see.",
               lambda s, p, rows: FieldSet(rows.record, s.authorizer.denied(p, rows.record))),
    BuiltinDef("canary_hits", (_P("row", "row"), _P("fields", "fields"), _P("text", "text")),
               "int", "How many of `fields` of `row` have their canary value in `text` (exact,"
               " then case-folded).", _canary_hits),
    BuiltinDef("canary_exact", (_P("row", "row"), _P("fields", "fields"), _P("text", "text")),
               "int", "How many of `fields` of `row` have their canary value in `text` exactly as"
               " written (case-sensitive; `canary_hits` also counts a case-folded match).",
               _canary_exact),
    BuiltinDef("pattern_hits", (_P("row", "row"), _P("fields", "fields"), _P("text", "text")),
               "int", "How many of `fields` of `row` have one of their declared phrases in"
               " `text`.", _pattern_hits),
    BuiltinDef("sentences", (_P("text", "text"),), "list[text]",
               "The sentences of a text (split after `.`, `!` or `?` and at line breaks), for"
               " tests that must hold within one sentence.", _sentences, pure=True),
    BuiltinDef("search", (_P("document", "document"), _P("query", "text"),
                          _P("limit", "int", True)), "list[text]",
               "Lines of a document containing `query` literally (at most `limit`, default 5).",
               _search),
    BuiltinDef("now", (), "duration", "Simulated time since the episode started.",
               lambda s: s.now, volatile=True),
    BuiltinDef("today", (), "date", "The simulated calendar date.", _today, volatile=True),
    BuiltinDef("quarter_of", (_P("date", "date"),), "text",
               "The calendar quarter of a date, like 2026-Q3.",
               lambda s, d: None if d is None else quarter_of(d), pure=True),
    BuiltinDef("days_between", (_P("start", "date"), _P("end", "date")), "duration",
               "The duration from one date to another.", _days_between, pure=True),
    BuiltinDef("judged", (_P("rubric", "list[row]"), _P("artifact", "text"),
                          _P("positive", "int", True)), "bool",
               "Whether the fixed LLM judge scores any axis of `rubric` (rows with `axis` and"
               " `meaning`) at or above `positive` (default 2) in `artifact`, every score backed"
               " by a verbatim quote; unassessed when no judge model is configured.", _judged,
               volatile=True),
    BuiltinDef("model_plays", (_P("party", "party"),), "bool",
               "Whether a model (an LLM, or a replay of one) plays `party` in this run; false"
               " for the offline simulated agents and for scripted actors. A world keeps a"
               " counterpart scripted offline and generative under a model with it.",
               lambda s, party: party in s.models),
    # Trace queries: they read the episode's trace so far.
    BuiltinDef("messages", (_P("sender", "party", True), _P("recipient", "party", True)),
               "list[message]", "Messages, optionally filtered by sender and recipient.",
               lambda s, sender=None, recipient=None: _trace(s).messages(sender, recipient),
               volatile=True),
    BuiltinDef("calls", (_P("tool", "tool"), _P("by", "party", True)), "list[call]",
               "Calls of a tool (including rejected ones), optionally by one participant.",
               lambda s, tool, by=None: _trace(s).calls(tool, by), volatile=True),
    BuiltinDef("replies", (_P("party", "party"),), "list[text]",
               "Every text a participant sent, including delegation replies.",
               lambda s, party: _trace(s).replies(party), volatile=True),
    BuiltinDef("final", (_P("party", "party"),), "text",
               "The participant's final answer (its last message to the one who asked), or"
               " none.", lambda s, party: _trace(s).final(party), volatile=True),
    BuiltinDef("delegated", (_P("caller", "party"), _P("callee", "party")), "bool",
               "Whether `caller` delegated to `callee` in this episode.",
               lambda s, a, b: _trace(s).delegated(a, b), volatile=True),
]

BUILTINS: dict[str, BuiltinDef] = {b.name: b for b in _DEFS}
#: compiled by the evaluator itself rather than called
SPECIAL = frozenset(name for name, b in BUILTINS.items() if b.impl is None)
#: foldable at compile time
PURE = frozenset(name for name, b in BUILTINS.items() if b.pure)
#: their value changes during an episode (the clock, the trace, the judge)
VOLATILE = frozenset(name for name, b in BUILTINS.items() if b.volatile)
TRACE_QUERIES = frozenset({"messages", "calls", "replies", "final", "delegated"})
#: implementations by name, as the evaluator calls them
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    name: b.impl for name, b in BUILTINS.items() if b.impl is not None}
