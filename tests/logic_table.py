"""The three-valued logic golden table (`tests/fixtures/logic/three_valued.txt`) read as IR.

Each row is `expression => true|false|unknown`; `build_row` turns a row's expression
into the IR the evaluator runs (or `("truthy", operand)` for a guard's reading of a
value). The evaluator's test (tests/test_three_valued.py) and the folding test
(tests/test_one_semantics.py) run the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from eairdsl.ir import Binary, BinaryOp, Expr, ListExpr, Lit, Quant, QuantKind, Ref, Unary

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TABLE = FIXTURES / "logic" / "three_valued.txt"
#: the small world the rows are evaluated in
MINI = FIXTURES / "run" / "mini.eair"
WORDS: dict[str, Any] = {"true": True, "false": False, "unknown": None}


def table_rows() -> list[tuple[int, str, str]]:
    """The table's rows in order: (line number, expression, expected word)."""
    rows = []
    for number, line in enumerate(TABLE.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            expr, expected = (part.strip() for part in line.split("=>"))
            rows.append((number, expr, expected))
    return rows


def bool_lit(word: str) -> Expr:
    return Lit(type="bool", value=WORDS[word])


def build_row(text: str) -> Expr | tuple[str, Expr]:
    """The IR of one table expression (or ("truthy", operand))."""
    words = text.replace(",", " ").replace("[", " [ ").replace("]", " ] ").split()
    head = words[0]
    if head in ("all", "any", "exists"):
        items = [bool_lit(w) for w in words[2:-1]]
        return Quant(kind=cast(QuantKind, head), var="x", source=ListExpr(items=items),
                     body=Ref(kind="local", name="x"))
    if head == "not":
        return Unary(operator="not", operand=bool_lit(words[1]))
    if head == "truthy":
        return ("truthy", bool_lit(words[1]))
    left, op, right = words
    return Binary(operator=cast(BinaryOp, op), left=bool_lit(left), right=bool_lit(right))
