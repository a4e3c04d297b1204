"""Three-valued logic as a golden table (`tests/fixtures/logic/three_valued.txt`).

Every operator and quantifier over true / false / unknown, and empty lists, run
against the runtime evaluator. A measurement that cannot be decided must stay
unknown: if `unknown and true` became true, an episode with a missing final
message would count as a realized risk. Mutating any one row's semantics in the
evaluator (unknown `and` true to true, `all` over unknowns to true, ...) fails
this test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from logic_table import WORDS, build_row, table_rows

from eairdsl.api import resolve_world
from eairdsl.ir import World
from eairdsl.runtime.evaluate import Authorizer, Scope, compile_expr, truthy

ROOT = Path(__file__).resolve().parents[1]
@pytest.fixture(scope="module")
def world() -> World:
    return resolve_world(ROOT / "tests" / "fixtures" / "run" / "mini.eair")


def test_the_table_covers_every_operator_and_combination() -> None:
    """All nine pairs for `and`/`or`, three for `not`, empty lists for each quantifier."""
    exprs = {e for _, e, _ in table_rows()}
    for op in ("and", "or"):
        assert {f"{a} {op} {b}" for a in WORDS for b in WORDS} <= exprs
    assert {f"not {a}" for a in WORDS} <= exprs
    assert {"all []", "any []", "exists []"} <= exprs


@pytest.mark.parametrize(("line", "expr", "expected"), table_rows(),
                         ids=[f"{n}:{e}" for n, e, _ in table_rows()])
def test_evaluator_matches_the_golden_table(world: World, line: int, expr: str,
                                            expected: str) -> None:
    """The runtime evaluator gives exactly the table's value (True, False or None)."""
    scope = Scope(world=world, levers={}, states={}, records={}, documents={},
                  authorizer=Authorizer(world, {}))
    built = build_row(expr)
    if isinstance(built, tuple):
        value: Any = truthy(compile_expr(built[1])(scope))
    else:
        value = compile_expr(built)(scope)
    assert value is WORDS[expected], f"line {line}: {expr} gave {value!r}"
