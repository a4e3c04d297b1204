"""Does a value fit a type? One answer for data rows and tool arguments.

`misfit(value, type)` is the only place that decides it: the checker asks it
about every cell of a data file (`eairdsl.check.data`), the runtime about every
argument of a tool call (`eairdsl.runtime.tools`). Values are the runtime's
plain ones (`eairdsl.runtime.values`): `none` fits every type (absent values
are legal; predicates test for them); `true` is a bool and never a number;
`1` fits `int` and `number`, `1.0` only `number` (and the other quantities:
money, durations and percentages are numbers in their unit); text, dates,
party, tool and document names are strings.

What else is checked depends on what the caller knows: with `enums`, an enum
value must be a member; with `schemas`, a schema value must be an object whose
fields fit (and, for a `closed` schema, has no others and lacks none without a
default). A text longer than its `max` is a misfit of kind `max`, so a caller
can word it as it likes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from eairdsl.ir import FieldIR, TypeIR

__all__ = ["Misfit", "misfit", "type_name"]

_ANY = TypeIR(kind="any")


@dataclass(frozen=True)
class Misfit:
    """Why a value does not fit: `kind`, where (`path`, dotted below the top value), the
    type it should have had and the value it had; `detail` lists enum members (`member`)
    or the unexpected and missing fields (`shape`)."""

    kind: Literal["type", "max", "member", "shape"]
    path: str
    type: TypeIR
    value: Any
    detail: str = ""


def type_name(t: TypeIR) -> str:
    """A type as messages write it: `list[text]`, the enum's or schema's name, `money`."""
    if t.kind == "list" and t.arg is not None:
        return f"list[{type_name(t.arg)}]"
    if t.kind in ("enum", "record", "schema") and t.name:
        return t.name
    return t.kind


def misfit(value: Any, t: TypeIR, *, enums: Mapping[str, list[str]] | None = None,
           schemas: Mapping[str, list[FieldIR]] | None = None, closed: Collection[str] = (),
           path: str = "") -> Misfit | None:
    """Why `value` does not fit `t`, or None when it does."""
    kind = t.kind
    if value is None or kind in ("any", "row", "record"):
        return None
    bad = Misfit("type", path, t, value)
    if kind == "bool":
        return None if isinstance(value, bool) else bad
    if kind == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else bad
    if kind in ("number", "money", "duration", "percent"):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else bad
    if kind in ("text", "date", "party", "tool", "document"):
        if not isinstance(value, str):
            return bad
        if kind == "text" and t.max is not None and len(value) > t.max:
            return Misfit("max", path, t, value)
        return None
    if kind == "enum":
        if enums is None:
            return None
        members = t.members or enums.get(t.name, [])
        return None if value in members else Misfit("member", path, t, value, ", ".join(members))
    if kind == "list":
        if not isinstance(value, list):
            return bad
        for item in value:
            problem = misfit(item, t.arg or _ANY, enums=enums, schemas=schemas, closed=closed,
                             path=path)
            if problem:
                return problem
        return None
    if kind == "schema" and schemas is not None:
        if not isinstance(value, dict):
            return bad
        fields = {f.name: f for f in schemas.get(t.name, [])}
        if t.name in closed:
            extra = sorted(set(value) - set(fields))
            missing = sorted(n for n in fields if n not in value and fields[n].default is None)
            if extra or missing:
                parts = ([f"unexpected {', '.join(extra)}"] if extra else []) + (
                    [f"missing {', '.join(missing)}"] if missing else [])
                return Misfit("shape", path, t, value, "; ".join(parts))
        for fname, f in fields.items():
            if fname in value:
                problem = misfit(value[fname], f.type, enums=enums, schemas=schemas,
                                 closed=closed, path=f"{path}.{fname}")
                if problem:
                    return problem
        return None
    return None
