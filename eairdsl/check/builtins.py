"""Signatures of the expression language's builtin functions, as the checker reads them.

The language has no escape into Python: these functions, the operators and
`let` definitions are everything an expression can call. Each builtin is
declared once, in `eairdsl.runtime.builtins` (signature, purity and
implementation together); this module turns that table's type names into
checker types. `check_call` reports arity and type errors with the argument's
own span.
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
    pure: bool = False  # foldable at compile time (see eairdsl.runtime.builtins)


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


def _type(name: str) -> T.Type:
    """A type name of the runtime's table (`int`, `list[row]`, ...) as a checker type."""
    if name.startswith("list[") and name.endswith("]"):
        return T.list_of(_type(name[5:-1]))
    return T.SCALARS[name]


_RULES: dict[str, ResultFn] = {"element": _element, "choose": _choose, "lookup": _lookup,
                               "same": _same}


def _signatures() -> dict[str, Builtin]:
    # The runtime owns the table (signature, purity, implementation together); the
    # checker only reads it. Imported here: the check stage comes before the runtime.
    from eairdsl.runtime.builtins import BUILTINS as DEFS
    return {d.name: Builtin(d.name, tuple((p.name, _type(p.type), p.optional) for p in d.params),
                            _RULES[d.result] if d.result in _RULES else _fixed(_type(d.result)),
                            d.doc, d.pure)
            for d in DEFS.values()}


BUILTINS: dict[str, Builtin] = _signatures()
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
