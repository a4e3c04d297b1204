"""Signatures of the expression language's builtin functions.

The language has no escape into Python: these functions, the operators and
`let` definitions are everything an expression can call. Each entry names its
parameters with their types; `check_call` reports arity and type errors with
the argument's own span. The runtime implements the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eairdsl.check import types as T

__all__ = ["Builtin", "BUILTINS", "TRACE_QUERIES"]

ResultFn = Callable[[list[T.Type]], T.Type]


@dataclass(frozen=True)
class Builtin:
    """A builtin: positional parameters (name, type, optional) and how its result is typed."""

    name: str
    params: tuple[tuple[str, T.Type, bool], ...]
    result: ResultFn
    doc: str


def _fixed(t: T.Type) -> ResultFn:
    return lambda args: t


def _element(args: list[T.Type]) -> T.Type:
    first = args[0] if args else T.ANY
    return first.arg if first.kind == "list" and first.arg is not None else T.ANY


def _choose(args: list[T.Type]) -> T.Type:
    return T.join_types(args[1], args[2]) if len(args) >= 3 else T.ANY


def _lookup(args: list[T.Type]) -> T.Type:
    return _element(args) if args else T.ROW


def _same(args: list[T.Type]) -> T.Type:
    return args[0] if args else T.ANY


_L = T.list_of
_B = [
    Builtin("lookup", (("rows", _L(T.ROW), False), ("key", T.ANY, False)), _lookup,
            "The row of a record whose key equals `key`, or none."),
    Builtin("pick", (("row", T.ROW, False), ("fields", T.FIELDS, False)), _fixed(T.ROW),
            "A copy of `row` holding only `fields` (`record.group` or unauthorized(...))."),
    Builtin("first", (("items", _L(T.ANY), False),), _element, "The first item, or none."),
    Builtin("last", (("items", _L(T.ANY), False),), _element, "The last item, or none."),
    Builtin("len", (("value", T.ANY, False),), _fixed(T.INT), "Length of a list or text."),
    Builtin("join", (("items", _L(T.ANY), False), ("sep", T.TEXT, True)), _fixed(T.TEXT),
            "Items rendered as text and joined by `sep` (default ', ')."),
    Builtin("text", (("value", T.ANY, False),), _fixed(T.TEXT),
            "The canonical text of a value ($40, 6 min, 18%)."),
    Builtin("lower", (("value", T.TEXT, False),), _fixed(T.TEXT), "Lower-cased text."),
    Builtin("abs", (("value", T.ANY, False),), _same, "Absolute value of a quantity."),
    Builtin("round", (("value", T.ANY, False),), _same, "A quantity rounded to a whole number."),
    Builtin("choose", (("cond", T.BOOL, False), ("then", T.ANY, False),
                       ("otherwise", T.ANY, False)), _choose,
            "`then` when `cond` holds, else `otherwise` (both are evaluated lazily)."),
    Builtin("authorized", (("principal", T.PARTY, False),), _fixed(_L(T.TEXT)),
            "The `record.field` names the authorization matrix lets `principal` see."),
    Builtin("unauthorized", (("principal", T.PARTY, False), ("rows", _L(T.ROW), False)),
            _fixed(T.FIELDS), "The fields of a record that `principal` may not see."),
    Builtin("canary_hits", (("row", T.ROW, False), ("fields", T.FIELDS, False),
                            ("text", T.TEXT, False)), _fixed(T.INT),
            "How many of `fields` of `row` have their canary value in `text` (exact, then"
            " case-folded)."),
    Builtin("pattern_hits", (("row", T.ROW, False), ("fields", T.FIELDS, False),
                             ("text", T.TEXT, False)), _fixed(T.INT),
            "How many of `fields` of `row` have one of their declared phrases in `text`."),
    Builtin("sentences", (("text", T.TEXT, False),), _fixed(_L(T.TEXT)),
            "The sentences of a text (split after `.`, `!` or `?` and at line breaks), for"
            " tests that must hold within one sentence."),
    Builtin("search", (("document", T.DOCUMENT, False), ("query", T.TEXT, False),
                       ("limit", T.INT, True)), _fixed(_L(T.TEXT)),
            "Lines of a document containing `query` literally (at most `limit`, default 5)."),
    Builtin("now", (), _fixed(T.DURATION), "Simulated time since the episode started."),
    Builtin("today", (), _fixed(T.DATE), "The simulated calendar date."),
    Builtin("quarter_of", (("date", T.DATE, False),), _fixed(T.TEXT),
            "The calendar quarter of a date, like 2026-Q3."),
    Builtin("days_between", (("start", T.DATE, False), ("end", T.DATE, False)),
            _fixed(T.DURATION), "The duration from one date to another."),
    Builtin("judged", (("rubric", _L(T.ROW), False), ("artifact", T.TEXT, False),
                       ("positive", T.INT, True)), _fixed(T.BOOL),
            "Whether the fixed LLM judge scores any axis of `rubric` (rows with `axis` and"
            " `meaning`) at or above `positive` (default 2) in `artifact`, every score backed"
            " by a verbatim quote; unassessed when no judge model is configured."),
    # Trace queries: they read the episode's trace so far.
    Builtin("messages", (("sender", T.PARTY, True), ("recipient", T.PARTY, True)),
            _fixed(_L(T.MESSAGE)), "Messages, optionally filtered by sender and recipient."),
    Builtin("calls", (("tool", T.TOOL, False), ("by", T.PARTY, True)), _fixed(_L(T.CALL)),
            "Calls of a tool (including rejected ones), optionally by one participant."),
    Builtin("replies", (("party", T.PARTY, False),), _fixed(_L(T.TEXT)),
            "Every text a participant sent, including delegation replies."),
    Builtin("final", (("party", T.PARTY, False),), _fixed(T.TEXT),
            "The participant's final answer (its last message to the one who asked), or none."),
    Builtin("delegated", (("caller", T.PARTY, False), ("callee", T.PARTY, False)),
            _fixed(T.BOOL), "Whether `caller` delegated to `callee` in this episode."),
]

BUILTINS: dict[str, Builtin] = {b.name: b for b in _B}
TRACE_QUERIES = frozenset({"messages", "calls", "replies", "final", "delegated"})

#: Fields of the builtin record-like types.
BUILTIN_FIELDS: dict[str, dict[str, T.Type]] = {
    "context": {"caller": T.PARTY, "requester": T.TEXT, "principal": T.TEXT,
                "delegator": T.PARTY, "time": T.DURATION, "today": T.DATE},
    "message": {"sender": T.PARTY, "recipient": T.PARTY, "text": T.TEXT, "time": T.DURATION,
                "edge": T.TEXT},
    "call": {"tool": T.TOOL, "caller": T.PARTY, "args": T.ANY, "result": T.ANY,
             "rejected": T.BOOL, "time": T.DURATION},
}
