"""Runtime values that remember where they came from.

A row knows its record and a list of rows knows its record, so builtins such
as `lookup` and `unauthorized` can find the record's key and authorization
rules without the expression naming them twice. Everything else is a plain
Python value: numbers (money in dollars, durations in minutes), strings
(text, enum values, party and tool names, ISO dates), bools, lists, None.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

__all__ = ["Row", "Rows", "StaticRows", "FieldSet", "render_value", "add_days", "quarter_of"]


class Row(dict[str, Any]):
    """A record row (a dict) tagged with its record's name."""

    __slots__ = ("record",)

    def __init__(self, record: str, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.record = record


class Rows(list[Row]):
    """All rows of one record, as the record's name evaluates to."""

    __slots__ = ("record",)

    def __init__(self, record: str, rows: list[Row]) -> None:
        super().__init__(rows)
        self.record = record


class StaticRows(Rows):
    """All rows of a record no tool appends to: built once, shared by every episode.

    Rows are never mutated, so a static table can be indexed by a field once and
    the index reused by every `[x for x in R where x.f == v]` of every episode.
    """

    __slots__ = ("_indexes",)

    def __init__(self, record: str, rows: list[Row]) -> None:
        super().__init__(record, rows)
        self._indexes: dict[str, dict[Any, list[Row]] | None] = {}

    def by_field(self, name: str) -> dict[Any, list[Row]] | None:
        """Rows by their value of field `name`, in table order (None if unindexable)."""
        if name not in self._indexes:
            groups: dict[Any, list[Row]] = {}
            try:
                for row in self:
                    groups.setdefault(row.get(name), []).append(row)
            except TypeError:  # an unhashable field value: scan instead
                self._indexes[name] = None
                return None
            self._indexes[name] = groups
        return self._indexes[name]


class FieldSet:
    """A set of fields of one record (a group, `*`, or the unauthorized rest)."""

    __slots__ = ("names", "record")

    def __init__(self, record: str, names: list[str]) -> None:
        self.record = record
        self.names = list(names)

    def __repr__(self) -> str:
        return f"FieldSet({self.record}: {', '.join(self.names)})"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}".rstrip("0")


def render_value(value: Any, kind: str | None = None) -> str:
    """The canonical text of a value; `kind` is the declared type kind when known."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "money" and isinstance(value, (int, float)):
        return f"${_num(value)}"
    if kind == "duration" and isinstance(value, (int, float)):
        return f"{_num(value)} min"
    if kind == "percent" and isinstance(value, (int, float)):
        return f"{_num(value)}%"
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, list):
        return ", ".join(render_value(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {render_value(v)}" for k, v in value.items())
    return str(value)


def add_days(date: str, minutes: float) -> str:
    day = _dt.date.fromisoformat(date) + _dt.timedelta(minutes=minutes)
    return day.isoformat()


def quarter_of(date: str) -> str:
    day = _dt.date.fromisoformat(date)
    return f"{day.year}-Q{(day.month - 1) // 3 + 1}"
