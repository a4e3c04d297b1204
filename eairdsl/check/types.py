"""The checker's type language: what an expression denotes, with units.

Money, durations and percentages are distinct quantity kinds, so `$40 + 6 min`
is a type error rather than a silent 46. `any` is the escape for data whose
shape the world does not declare; it unifies with everything, so it never
produces a cascade of errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Type", "BOOL", "INT", "NUMBER", "MONEY", "DURATION", "PERCENT", "DATE", "TEXT", "NONE",
    "ANY", "ROW", "FIELDS", "PARTY", "TOOL", "DOCUMENT", "MESSAGE", "CALL", "CONTEXT",
    "list_of", "record_row", "enum_of", "schema_of", "compatible", "is_numeric", "QUANTITIES",
    "SCALARS", "join_types",
]


@dataclass(frozen=True)
class Type:
    """A checker type. `name` names the enum, schema or record; `arg` is a list's element."""

    kind: str
    name: str = ""
    arg: Type | None = None
    max: int | None = field(default=None, compare=False)
    candidates: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list[{self.arg}]"
        if self.kind in ("enum", "schema", "record"):
            if self.kind == "enum" and self.candidates:
                return "enum value (" + " or ".join(self.candidates) + ")"
            return f"{self.kind} {self.name}"
        if self.kind == "fields" and self.name:
            return f"fields of {self.name}"
        return self.kind


BOOL = Type("bool")
INT = Type("int")
NUMBER = Type("number")
MONEY = Type("money")
DURATION = Type("duration")
PERCENT = Type("percent")
DATE = Type("date")
TEXT = Type("text")
NONE = Type("none")
ANY = Type("any")
ROW = Type("row")
FIELDS = Type("fields")
PARTY = Type("party")
TOOL = Type("tool")
DOCUMENT = Type("document")
MESSAGE = Type("message")
CALL = Type("call")
CONTEXT = Type("context")

QUANTITIES = frozenset({"int", "number", "money", "duration", "percent"})
SCALARS: dict[str, Type] = {t.kind: t for t in (BOOL, INT, NUMBER, MONEY, DURATION, PERCENT,
                                                 DATE, TEXT, ROW, FIELDS, ANY, PARTY, TOOL,
                                                 DOCUMENT, MESSAGE, CALL)}


def list_of(t: Type) -> Type:
    return Type("list", arg=t)


def record_row(name: str) -> Type:
    return Type("record", name=name)


def enum_of(name: str, candidates: tuple[str, ...] = ()) -> Type:
    return Type("enum", name=name, candidates=candidates)


def schema_of(name: str) -> Type:
    return Type("schema", name=name)


def is_numeric(t: Type) -> bool:
    return t.kind in ("int", "number", "any")


def compatible(expected: Type, actual: Type) -> bool:
    """Can a value of `actual` stand where `expected` is wanted?"""
    if ANY in (expected, actual) or expected.kind == "any" or actual.kind == "any":
        return True
    if actual.kind == "none":
        return True  # absent values are legal everywhere; predicates test for them
    if expected.kind == "number" and actual.kind == "int":
        return True
    if expected.kind == "enum" and actual.kind == "enum":
        if actual.candidates:
            return expected.name in actual.candidates
        if expected.candidates:
            return actual.name in expected.candidates
        return expected.name == actual.name
    if expected.kind == "enum" and actual.kind == "text":
        return True  # enum values arrive from data files as text
    if expected.kind == "row" and actual.kind in ("record", "schema", "row"):
        return True
    if expected.kind in ("record", "schema") and actual.kind == "row":
        return True  # record literals build rows of records and values of schemas
    if expected.kind == "list" and actual.kind == "list":
        assert expected.arg is not None and actual.arg is not None
        return compatible(expected.arg, actual.arg)
    if {expected.kind, actual.kind} == {"party", "text"}:
        return True  # participants are named by strings; principals are written either way
    return expected.kind == actual.kind and expected.name == actual.name


def join_types(a: Type, b: Type) -> Type:
    """The least type covering both (for list literals, `choose`, list concatenation)."""
    if a.kind == "none":
        return b
    if b.kind == "none":
        return a
    if compatible(a, b) and not (a.kind == "int" and b.kind == "number"):
        return a
    if compatible(b, a):
        return b
    if a.kind in ("record", "row", "schema") and b.kind in ("record", "row", "schema"):
        return ROW
    if a.kind == "list" and b.kind == "list" and a.arg is not None and b.arg is not None:
        return list_of(join_types(a.arg, b.arg))
    return ANY
