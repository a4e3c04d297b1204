"""Runtime values that remember where they came from.

A row knows its record and a list of rows knows its record, so builtins such
as `lookup` and `unauthorized` can find the record's key and authorization
rules without the expression naming them twice. Everything else is a plain
Python value: numbers (money in dollars, durations in minutes), strings
(text, enum values, party and tool names, ISO dates), bools, lists, None.
"""

from __future__ import annotations

import datetime as _dt
from bisect import bisect_left
from typing import Any, overload

__all__ = ["Row", "Rows", "StaticRows", "Ledger", "FieldIndex", "FieldSet", "render_value",
           "add_days", "quarter_of"]


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
    """Rows that never change: built once and shared, indexable by a field.

    Either a record no tool appends to (built once, shared by every episode) or
    a snapshot of a ledger as it stood after its last append (`Ledger`). Rows
    are never mutated, so a table can be indexed by a field once and the index
    reused by every `[x for x in R where x.f == v]` and `lookup`; a ledger's
    snapshots share one index that grows with the ledger.
    """

    __slots__ = ("_indexes", "_ledger")

    def __init__(self, record: str, rows: list[Row], ledger: Ledger | None = None) -> None:
        super().__init__(record, rows)
        self._indexes: dict[str, dict[Any, list[Row]] | None] = {}
        self._ledger = ledger

    def by_field(self, name: str) -> FieldIndex | None:
        """Rows by their value of field `name`, in table order (None if unindexable)."""
        if self._ledger is not None:
            return self._ledger.by_field(name, len(self))
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


class _Positions:
    """One field's index over a ledger: row positions by value, for the first `done` rows."""

    __slots__ = ("done", "groups")

    def __init__(self) -> None:
        self.groups: dict[Any, list[int]] = {}
        self.done = 0


class _LedgerGroups:
    """A ledger's field index as one snapshot (its first `length` rows) reads it."""

    __slots__ = ("_length", "_positions", "_rows")

    def __init__(self, rows: list[Row], positions: dict[Any, list[int]], length: int) -> None:
        self._rows = rows
        self._positions = positions
        self._length = length

    @overload
    def get(self, value: Any) -> list[Row] | None: ...
    @overload
    def get(self, value: Any, default: list[Row]) -> list[Row]: ...
    def get(self, value: Any, default: list[Row] | None = None) -> list[Row] | None:
        """The snapshot's rows whose field equals `value`, in ledger order (like `dict.get`,
        TypeError for an unhashable value)."""
        found = self._positions.get(value)
        if found is None:
            return default
        end = len(found) if found[-1] < self._length else bisect_left(found, self._length)
        if end == 0:
            return default
        rows = self._rows
        return [rows[i] for i in found[:end]]


#: what `StaticRows.by_field` answers: groups of rows by a field's value
FieldIndex = dict[Any, list[Row]] | _LedgerGroups


class Ledger:
    """A record some tool appends to, during one episode.

    Tools append to `rows`; what expressions read is `snapshot()`, a
    `StaticRows` of the rows so far (a new one after each append, so a value
    read earlier never sees later rows). Field indexes are kept as positions
    into `rows` and extended by the rows appended since they were last used, so
    a keyed filter or `lookup` over a ledger costs what it returns, not the
    ledger's length.
    """

    __slots__ = ("_indexes", "_snapshot", "record", "rows")

    def __init__(self, record: str, rows: list[Row]) -> None:
        self.record = record
        self.rows: list[Row] = list(rows)
        self._indexes: dict[str, _Positions | None] = {}
        self._snapshot: StaticRows | None = None

    def append(self, row: Row) -> None:
        self.rows.append(row)
        self._snapshot = None

    def truncate(self, length: int) -> None:
        """Drop the rows after the first `length` (an `ensure` trial undone); the field
        indexes are rebuilt on their next use, earlier snapshots keep their rows."""
        if length < len(self.rows):
            del self.rows[length:]
            self._indexes = {}
            self._snapshot = None

    def snapshot(self) -> StaticRows:
        """The rows so far, as a table that will not change."""
        if self._snapshot is None:
            self._snapshot = StaticRows(self.record, self.rows, self)
        return self._snapshot

    def by_field(self, name: str, length: int) -> _LedgerGroups | None:
        """The index of field `name` as the snapshot of the first `length` rows reads it."""
        index = self._indexes.get(name, _MISSING)
        if index is None:
            return None
        if not isinstance(index, _Positions):
            index = self._indexes[name] = _Positions()
        rows = self.rows
        if index.done < len(rows):
            groups = index.groups
            try:
                for i in range(index.done, len(rows)):
                    groups.setdefault(rows[i].get(name), []).append(i)
            except TypeError:  # an unhashable field value: scan instead, from now on
                self._indexes[name] = None
                return None
            index.done = len(rows)
        return _LedgerGroups(rows, index.groups, length)


_MISSING: Any = object()


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
