"""One semantics: the checker folds with the runtime's evaluator, one value-vs-type check,
builtins declared once.

Folding (`eairdsl.check.static`) lowers an expression and runs
`eairdsl.runtime.evaluate.compile_expr` in a levers-only scope, so it must agree
with the evaluator wherever the value is decided by levers; whatever needs an
episode is UNKNOWN. `eairdsl.runtime.conform.misfit` is the one answer to "does
this value fit this type" for data cells (`check/data.py`) and tool arguments
(`runtime/tools.py`). `eairdsl.runtime.builtins` declares every builtin once;
the checker's signatures are read from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from logic_table import MINI, WORDS, build_row, table_rows

from eairdsl.api import resolve_world
from eairdsl.check import builtins as check_builtins
from eairdsl.check import check_world
from eairdsl.check import types as T
from eairdsl.check.data import _conforms
from eairdsl.check.static import FOLD_STEPS, UNKNOWN, fold, fold_ir
from eairdsl.diagnostics import Diagnostics
from eairdsl.ir import (
    Agg,
    Binary,
    Call,
    Expr,
    FieldIR,
    LetCall,
    LetIR,
    ListExpr,
    Lit,
    Quant,
    Ref,
    TypeIR,
    Unary,
    World,
)
from eairdsl.runtime import builtins as runtime_builtins
from eairdsl.runtime import evaluate
from eairdsl.runtime.conform import misfit
from eairdsl.runtime.evaluate import Authorizer, Scope, compile_expr
from eairdsl.runtime.tools import _check_value

# ------------------------------------------------------------------ folding


def _run(e: Expr, world: World, levers: dict[str, Any] | None = None) -> Any:
    scope = Scope(world=world, levers=levers or {}, states={}, records={}, documents={},
                  authorizer=Authorizer(world, {}))
    return compile_expr(e, None)(scope)


@pytest.fixture(scope="module")
def mini() -> World:
    return resolve_world(MINI)


@pytest.mark.parametrize(("number", "text", "expected"), table_rows(),
                         ids=[f"line{n}" for n, _, _ in table_rows()])
def test_folding_agrees_with_the_evaluator_on_the_three_valued_table(
        number: int, text: str, expected: str, mini: World) -> None:
    built = build_row(text)
    if isinstance(built, tuple):
        pytest.skip("truthy is how guards read a value, not an expression")
    want = WORDS[expected]
    assert _run(built, mini) is want
    assert fold_ir(built, {}) is want


def _lever(name: str) -> Ref:
    return Ref(kind="lever", name=name)


def _num(v: Any) -> Lit:
    return Lit(type="int" if isinstance(v, int) else "number", value=v)


LEVER_CASES: list[tuple[Expr, dict[str, Any]]] = [
    (Binary(operator="+", left=_lever("a"), right=_num(2)), {"a": 3}),
    (Binary(operator="*", left=_lever("a"), right=_lever("b")), {"a": 3, "b": 2.5}),
    (Binary(operator="/", left=_lever("a"), right=_num(4)), {"a": 10}),
    (Binary(operator="-", left=_lever("a"), right=_lever("b")), {"a": 1, "b": None}),
    (Binary(operator=">=", left=_lever("a"), right=_num(3)), {"a": 3}),
    (Binary(operator="<", left=_lever("a"), right=_num(3)), {"a": None}),
    (Binary(operator="and", left=Binary(operator=">", left=_lever("a"), right=_num(1)),
            right=_lever("s")), {"a": 2, "s": None}),
    (Unary(operator="-", operand=_lever("a")), {"a": 7}),
    (Call(func="choose", args=[_lever("s"), _num(1), _num(2)], keys=["", "", ""]),
     {"s": True}),
    (Call(func="len", args=[ListExpr(items=[_lever("a"), _num(1)])], keys=[""]), {"a": 0}),
    (Binary(operator="==", left=Ref(kind="enum_value", name="high"), right=_lever("p")),
     {"p": "high"}),
    (Binary(operator="+", left=Lit(type="text", value="a"), right=_lever("t")), {"t": "b"}),
]


@pytest.mark.parametrize(("expr", "levers"), LEVER_CASES)
def test_folding_agrees_with_the_evaluator_on_lever_arithmetic(
        expr: Expr, levers: dict[str, Any], mini: World) -> None:
    assert fold_ir(expr, levers) == _run(expr, mini, levers)


def _trace_query() -> Call:
    return Call(func="final", args=[Ref(kind="party", name="clerk")], keys=[""])


NOT_CONSTANT: list[Expr] = [
    Ref(kind="state", name="balance"),
    Ref(kind="instance", name="instance"),
    Ref(kind="context", name="context"),
    Ref(kind="measure", name="opportunity"),
    Ref(kind="record", name="employee"),
    _trace_query(),
    Call(func="now"),
    Call(func="lookup", args=[Ref(kind="record", name="employee"), _num(1)], keys=["", ""]),
    Binary(operator="+", left=_lever("a"), right=Ref(kind="state", name="balance")),
    Binary(operator="and", left=Lit(type="bool", value=True), right=_trace_query()),
    LetCall(name="reads_state", args=[]),
    # a measurement that would run the compiler out of memory is not folded either
    Binary(operator="*", left=Lit(type="text", value="ab"), right=_num(999_999_999)),
    Binary(operator="/", left=_num(10 ** 400), right=_num(1)),
    Unary(operator="-", operand=Lit(type="text", value="abc")),
]


@pytest.mark.parametrize("expr", NOT_CONSTANT)
def test_what_needs_an_episode_folds_to_unknown(expr: Expr) -> None:
    lets = {"reads_state": LetIR(name="reads_state", params=[],
                                 body=Ref(kind="state", name="balance"))}
    assert fold_ir(expr, {"a": 1}, lets) is UNKNOWN


def test_logic_still_decides_around_what_is_not_constant() -> None:
    q = _trace_query()
    assert fold_ir(Binary(operator="and", left=q, right=Lit(type="bool", value=False)),
                   {}) is False
    assert fold_ir(Binary(operator="or", left=q, right=Unary(operator="not", operand=q)),
                   {}) is True
    assert fold_ir(Binary(operator="==", left=q, right=q), {}) is True
    count = Agg(func="count", body=Ref(kind="local", name="m"), var="m", source=q)
    assert fold_ir(Binary(operator=">=", left=count, right=_num(0)), {}) is True
    assert fold_ir(Quant(kind="all", var="x", source=ListExpr(items=[]), body=q), {}) is True
    assert fold_ir(Call(func="choose", args=[_lever("s"), _num(1), q], keys=["", "", ""]),
                   {"s": True}) == 1


def test_folding_is_bounded_by_a_small_budget() -> None:
    let = LetIR(name="fan", params=["n"], body=Binary(
        operator="+", left=LetCall(name="fan", args=[_num(1)]), right=_num(1)))
    # recursive definitions are errors (E304), never folded
    assert fold_ir(LetCall(name="fan", args=[_num(1)]), {}, {"fan": let}) is UNKNOWN
    n = FOLD_STEPS * 70  # characters cost a step per 64: over the fold's budget, not an episode's
    big = Binary(operator="*", left=Lit(type="text", value="a"), right=_num(n))
    assert fold_ir(big, {}) is UNKNOWN
    assert fold_ir(big, {}, steps=evaluate.MAX_STEPS) == "a" * n


WORLD = """
world w {
  risk A1
  operation "o"
  preserves "p"
}
lever strict : bool = false
lever limit : int = 3
condition tight {
  strict = true
  limit = 5
}
actor a scripted {
  at 0 min say "hello" to a
}
instance i1 {
  amount = $5
}
let doubled(n: int) = n * 2
measure {
  opportunity = len(messages()) > 0
  anomaly = doubled(limit) > 4 or strict
  realized = len(messages()) > 2
  terminal_harm = realized
  interception = anomaly and not realized
  utility = len(messages()) > 0
}
"""


def test_checked_measurements_fold_like_the_runtime(tmp_path: Path) -> None:
    path = tmp_path / "w.eair"
    path.write_text(WORLD, encoding="utf-8")
    diagnostics = Diagnostics()
    world = check_world(path, diagnostics)
    assert world is not None
    codes = [d.code for d in diagnostics]
    assert "W702" in codes  # `anomaly` is decided by the levers in every condition
    items = {item.name: item for item in world.measure_items}
    members = set(world.enum_members)
    for levers in world.condition_values.values():
        assert fold(items["anomaly"].expr, levers, members, world) is True
        assert fold(items["realized"].expr, levers, members, world) is UNKNOWN
    assert world.condition_values["tight"] == {"strict": True, "limit": 5}


# ------------------------------------------------------------ value vs type

_ENUMS = {"level": ["low", "high"]}
_SCHEMAS = {"point": [FieldIR(name="x", type=TypeIR(kind="int"))]}

AWKWARD: list[tuple[Any, TypeIR, bool]] = [
    (1, TypeIR(kind="int"), True), (1.0, TypeIR(kind="int"), False),
    (True, TypeIR(kind="int"), False), (1, TypeIR(kind="number"), True),
    (1.0, TypeIR(kind="number"), True), (True, TypeIR(kind="number"), False),
    (True, TypeIR(kind="bool"), True), (1, TypeIR(kind="bool"), False),
    (None, TypeIR(kind="int"), True), (None, TypeIR(kind="text"), True),
    (40, TypeIR(kind="money"), True), (6.5, TypeIR(kind="duration"), True),
    (False, TypeIR(kind="percent"), False), ("40", TypeIR(kind="money"), False),
    ("2026-01-01", TypeIR(kind="date"), True), (3, TypeIR(kind="text"), False),
    ([1, 2], TypeIR(kind="list", arg=TypeIR(kind="int")), True),
    ([1, True], TypeIR(kind="list", arg=TypeIR(kind="int")), False),
    ("x", TypeIR(kind="list", arg=TypeIR(kind="int")), False),
    ({"a": 1}, TypeIR(kind="row"), True), ("clerk", TypeIR(kind="party"), True),
    (5, TypeIR(kind="party"), False),
]


def _checker_type(t: TypeIR) -> T.Type:
    if t.kind == "list":
        assert t.arg is not None
        return T.list_of(_checker_type(t.arg))
    return T.SCALARS[t.kind]


@pytest.mark.parametrize(("value", "t", "fits"), AWKWARD)
def test_data_cells_and_tool_arguments_get_the_same_answer(
        value: Any, t: TypeIR, fits: bool, mini: World) -> None:
    assert (misfit(value, t) is None) is fits
    assert _conforms(value, _checker_type(t)) is fits
    assert (_check_value(value, t, mini, "arg") is None) is fits


def test_enum_members_schemas_and_text_length() -> None:
    level = TypeIR(kind="enum", name="level")
    assert misfit("high", level, enums=_ENUMS) is None
    problem = misfit("medium", level, enums=_ENUMS)
    assert problem is not None and problem.kind == "member" and problem.detail == "low, high"
    assert misfit("medium", level) is None  # data files: membership is reported separately
    point = TypeIR(kind="schema", name="point")
    assert misfit({"x": 1}, point, schemas=_SCHEMAS) is None
    bad = misfit({"x": 1.5}, point, schemas=_SCHEMAS, path="p")
    assert bad is not None and bad.kind == "type" and bad.path == "p.x"
    shape = misfit({"x": 1, "y": 2}, point, schemas=_SCHEMAS, closed={"point"})
    assert shape is not None and shape.kind == "shape" and "unexpected y" in shape.detail
    short = TypeIR(kind="text", max=3)
    long = misfit("abcd", short)
    assert long is not None and long.kind == "max"
    assert _conforms("abcd", T.Type("text", max=3))  # data reports length in its own words


# ------------------------------------------------------------- builtins once


def test_every_builtin_the_checker_knows_has_an_implementation_and_vice_versa() -> None:
    checked = set(check_builtins.BUILTINS)
    declared = set(runtime_builtins.BUILTINS)
    implemented = set(runtime_builtins.IMPLEMENTATIONS) | runtime_builtins.SPECIAL
    assert checked == declared == implemented
    assert {"choose", "text", "join"} == runtime_builtins.SPECIAL
    for name, b in check_builtins.BUILTINS.items():
        d = runtime_builtins.BUILTINS[name]
        assert b.pure == d.pure and b.doc == d.doc
        assert [p[0] for p in b.params] == [p.name for p in d.params]
    assert check_builtins.TRACE_QUERIES == runtime_builtins.TRACE_QUERIES
    assert runtime_builtins.VOLATILE == evaluate._VOLATILE
    assert not (runtime_builtins.PURE & runtime_builtins.VOLATILE)
