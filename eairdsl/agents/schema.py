"""JSON schemas for tool calling, generated from the world's tool signatures.

A tool a participant may call right now arrives as a `ToolSpec`; when the
compiled world is at hand its `ToolIR` gives the exact parameter types (text
length caps, schema fields), otherwise the type string of each `ParamSpec` is
read. The mapping from DSL types:

    text / date / party / tool / document   string (text max N: maxLength N)
    money / number / duration / percent      number
    int                                      integer
    bool                                     boolean
    enum (named or inline)                   string with enum members
    list[T]                                  array of T
    schema S                                 object with S's fields (closed: no extras)
    record / row                             object
    any                                      no constraint

The result is the OpenAI function-tool shape litellm passes to every provider.
Nothing here imports litellm.
"""

from __future__ import annotations

from typing import Any

from eairdsl.agents.protocol import ParamSpec, ToolSpec
from eairdsl.ir import TypeIR, World

__all__ = ["json_schema", "param_schema", "tool_definition", "tool_definitions"]

_STRINGS = ("text", "date", "party", "tool", "document")
_NUMBERS = ("money", "number", "duration", "percent")
_UNIT_NOTES = {"money": "an amount of money", "percent": "a percentage (0-100)",
               "date": "a date (YYYY-MM-DD)"}


def json_schema(t: TypeIR, world: World | None = None, _depth: int = 0) -> dict[str, Any]:
    """The JSON schema of a DSL type."""
    kind = t.kind
    if kind in _STRINGS:
        out: dict[str, Any] = {"type": "string"}
        if kind == "text" and t.max is not None:
            out["maxLength"] = t.max
        return out
    if kind in _NUMBERS:
        return {"type": "number"}
    if kind == "int":
        return {"type": "integer"}
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "enum":
        members = list(t.members) or list((world.enums if world else {}).get(t.name, []))
        return {"type": "string", "enum": members} if members else {"type": "string"}
    if kind == "list":
        item = json_schema(t.arg, world, _depth + 1) if t.arg is not None else {}
        return {"type": "array", "items": item}
    if kind == "schema":
        fields = (world.schemas if world else {}).get(t.name)
        if fields is None or _depth > 8:
            return {"type": "object"}
        props = {f.name: json_schema(f.type, world, _depth + 1) for f in fields}
        out = {"type": "object", "properties": props,
               "required": [f.name for f in fields if f.default is None]}
        if world is not None and t.name in world.closed_schemas:
            out["additionalProperties"] = False
        return out
    if kind in ("record", "row"):
        return {"type": "object"}
    return {}


def _from_string(type_name: str, members: list[str], world: World | None) -> dict[str, Any]:
    """The schema of a `ParamSpec.type` string when no ToolIR is available."""
    if members:
        return {"type": "string", "enum": list(members)}
    if type_name.startswith("list[") and type_name.endswith("]"):
        return {"type": "array", "items": _from_string(type_name[5:-1], [], world)}
    if type_name in _STRINGS:
        return {"type": "string"}
    if type_name in _NUMBERS:
        return {"type": "number"}
    if type_name == "int":
        return {"type": "integer"}
    if type_name == "bool":
        return {"type": "boolean"}
    if world is not None:
        if type_name in world.enums:
            return {"type": "string", "enum": list(world.enums[type_name])}
        if type_name in world.schemas:
            return json_schema(TypeIR(kind="schema", name=type_name), world)
        if any(r.name == type_name for r in world.records):
            return {"type": "object"}
    return {}


def param_schema(param: ParamSpec, t: TypeIR | None = None, world: World | None = None,
                 clock: str = "min") -> dict[str, Any]:
    """One parameter's schema, with a description carrying units and the world's hints."""
    schema = json_schema(t, world) if t is not None else _from_string(param.type,
                                                                       param.members, world)
    kind = t.kind if t is not None else param.type
    notes = []
    if kind == "duration":
        notes.append(f"a duration in {clock}")
    elif kind in _UNIT_NOTES:
        notes.append(_UNIT_NOTES[kind])
    if param.hint:
        notes.append("e.g. " + ", ".join(str(h) for h in param.hint[:5]))
    if notes:
        schema = {**schema, "description": "; ".join(notes)}
    return schema


def tool_definition(spec: ToolSpec, world: World | None = None) -> dict[str, Any]:
    """The function-tool definition of one tool (OpenAI shape, which litellm translates)."""
    tool = next((x for x in world.tools if x.name == spec.name), None) if world else None
    types = {p.name: p.type for p in tool.params} if tool is not None else {}
    clock = world.meta.clock if world is not None else "min"
    props = {p.name: param_schema(p, types.get(p.name), world, clock) for p in spec.params}
    parameters: dict[str, Any] = {"type": "object", "properties": props,
                                  "required": [p.name for p in spec.params if p.required],
                                  "additionalProperties": False}
    description = spec.description or f"The {spec.kind} tool {spec.name}."
    return {"type": "function",
            "function": {"name": spec.name, "description": description,
                         "parameters": parameters}}


def tool_definitions(specs: list[ToolSpec], world: World | None = None) -> list[dict[str, Any]]:
    return [tool_definition(s, world) for s in specs]
