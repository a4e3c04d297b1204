"""Tool-calling JSON schemas from the DSL's types (no litellm needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eairdsl.agents.protocol import ParamSpec, ToolSpec
from eairdsl.agents.schema import json_schema, tool_definition
from eairdsl.api import resolve_world
from eairdsl.ir import TypeIR, World

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mini() -> World:
    return resolve_world(ROOT / "tests" / "fixtures" / "run" / "mini.eair")


@pytest.mark.parametrize(("t", "expected"), [
    (TypeIR(kind="text"), {"type": "string"}),
    (TypeIR(kind="text", max=40), {"type": "string", "maxLength": 40}),
    (TypeIR(kind="date"), {"type": "string"}),
    (TypeIR(kind="money"), {"type": "number"}),
    (TypeIR(kind="number"), {"type": "number"}),
    (TypeIR(kind="duration"), {"type": "number"}),
    (TypeIR(kind="percent"), {"type": "number"}),
    (TypeIR(kind="int"), {"type": "integer"}),
    (TypeIR(kind="bool"), {"type": "boolean"}),
    (TypeIR(kind="enum", members=["low", "high"]), {"type": "string", "enum": ["low", "high"]}),
    (TypeIR(kind="list", arg=TypeIR(kind="int")), {"type": "array", "items": {"type": "integer"}}),
    (TypeIR(kind="record", name="employee"), {"type": "object"}),
    (TypeIR(kind="any"), {}),
])
def test_dsl_types_map_to_json_schema(t: TypeIR, expected: dict) -> None:
    assert json_schema(t) == expected


def test_world_tool_uses_exact_types(mini: World) -> None:
    """text max N, named enums and closed schemas come from the compiled tool."""
    spec = ToolSpec(name="file_note", kind="act", params=[
        ParamSpec(name="note", type="text", required=True),
        ParamSpec(name="state", type="status", required=True, members=["open", "pending",
                                                                       "approved"]),
        ParamSpec(name="form", type="handoff", required=True)])
    fn = tool_definition(spec, mini)["function"]
    props = fn["parameters"]["properties"]
    assert props["note"] == {"type": "string", "maxLength": 20}
    assert props["state"] == {"type": "string", "enum": ["open", "pending", "approved"]}
    assert props["form"] == {"type": "object", "additionalProperties": False,
                             "properties": {"customer": {"type": "string"},
                                            "amount": {"type": "number"}},
                             "required": ["customer", "amount"]}
    assert fn["parameters"]["required"] == ["note", "state", "form"]
    assert fn["parameters"]["additionalProperties"] is False


def test_hints_and_units_go_into_descriptions(mini: World) -> None:
    spec = ToolSpec(name="refund", kind="act", params=[
        ParamSpec(name="customer", type="text", required=True, hint=["C-1"]),
        ParamSpec(name="amount", type="money", required=True, hint=[5, 10, 20])])
    props = tool_definition(spec, mini)["function"]["parameters"]["properties"]
    assert props["customer"] == {"type": "string", "description": "e.g. C-1"}
    assert props["amount"]["type"] == "number"
    assert "money" in props["amount"]["description"] and "5, 10, 20" in \
        props["amount"]["description"]


def test_without_a_world_the_type_string_is_read() -> None:
    spec = ToolSpec(name="x", kind="read", description="d", params=[
        ParamSpec(name="ids", type="list[int]", required=False),
        ParamSpec(name="mode", type="mode", required=True, members=["a", "b"])])
    fn = tool_definition(spec)["function"]
    assert fn["description"] == "d"
    assert fn["parameters"]["properties"] == {"ids": {"type": "array",
                                                      "items": {"type": "integer"}},
                                              "mode": {"type": "string", "enum": ["a", "b"]}}
    assert fn["parameters"]["required"] == ["mode"]
