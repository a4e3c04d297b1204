"""Evaluating values: shortcuts that must never change one, and builtins.

The evaluator answers `[x for x in T where x.f == v]` over a static table from
an index, keys `let` memos of rows and lists by identity, shares static tables
between episodes, and writes trace lines with one C encoder. Each shortcut is
checked here against the plain computation it replaces, on the awkward values
(none, missing fields, 1 vs 1.0, NaN, unhashable values). Also here: the
`sentences` builtin, and rank and display names folded into cards.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from world_patch import mini_world

from eairdsl.api import resolve_world, run_episode
from eairdsl.ir import Agg, Attr, Binary, Call, Comp, Expr, LetIR, Ref, RefKind, World
from eairdsl.runtime.engine import CompiledWorld
from eairdsl.runtime.evaluate import Authorizer, LetTable, Scope, compile_expr
from eairdsl.runtime.trace import Event, TraceEvent
from eairdsl.runtime.values import Row, Rows, StaticRows

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world() -> World:
    return resolve_world(ROOT / "tests" / "fixtures" / "run" / "mini.eair")


def _scope(world: World, table: list[Row], **locals_: Any) -> Scope:
    return Scope(world=world, levers={}, states={}, records={"t": table}, documents={},
                 authorizer=Authorizer(world, {}), locals=dict(locals_))


def _ref(kind: RefKind, name: str) -> Expr:
    return Ref(kind=kind, name=name)


def _field(var: str, name: str) -> Expr:
    return Attr(obj=_ref("local", var), name=name)


def _filter(value: Expr, *, flipped: bool = False) -> Expr:
    """[x.id for x in t where x.k == value] (or value == x.k)."""
    left, right = (value, _field("x", "k")) if flipped else (_field("x", "k"), value)
    return Comp(var="x", source=_ref("record", "t"), body=_field("x", "id"),
                where=Binary(operator="==", left=left, right=right))


ROWS = [{"id": 1, "k": "a"}, {"id": 2, "k": 1}, {"id": 3}, {"id": 4, "k": None},
        {"id": 5, "k": "a"}, {"id": 6, "k": 1.0}, {"id": 7, "k": True}, {"id": 8, "k": math.nan}]


@pytest.mark.parametrize("flipped", [False, True])
@pytest.mark.parametrize("value", ["a", "b", 1, 1.0, None, True, math.nan, ["a"], {"k": 1}])
def test_indexed_filter_equals_a_scan(world: World, value: Any, flipped: bool) -> None:
    """An index over a static table finds exactly what scanning it finds, in table order."""
    fn = compile_expr(_filter(_ref("local", "v"), flipped=flipped))
    rows = [Row("t", r) for r in ROWS]
    scanned = fn(_scope(world, rows, v=value))  # a plain list: always scanned
    indexed = fn(_scope(world, StaticRows("t", rows), v=value))
    assert indexed == scanned
    expected = [r["id"] for r in ROWS if r.get("k") == value]
    assert scanned == expected


def test_filter_whose_value_reads_the_item_is_not_indexed(world: World) -> None:
    """`x.k == x.id` depends on the item: it must be scanned, and still be right."""
    fn = compile_expr(_filter(_field("x", "id")))
    rows = StaticRows("t", [Row("t", {"id": 1, "k": 1}), Row("t", {"id": 2, "k": 3})])
    assert fn(_scope(world, rows)) == [1]


def test_table_with_unhashable_values_falls_back_to_a_scan(world: World) -> None:
    rows = StaticRows("t", [Row("t", {"id": 1, "k": ["a"]}), Row("t", {"id": 2, "k": "a"})])
    fn = compile_expr(_filter(_ref("local", "v")))
    assert rows.by_field("k") is None
    assert fn(_scope(world, rows, v="a")) == [2]
    assert fn(_scope(world, rows, v=["a"])) == [1]


def test_let_memo_keys_rows_and_lists_by_identity_without_mixing_values(world: World) -> None:
    """Equal-looking and distinct arguments each get their own value; repeats hit the memo."""
    body = Agg(func="count", body=_ref("param", "xs"))
    table = LetTable({"size": LetIR(name="size", params=["xs"], body=body)})
    call = table.caller("size")
    scope = _scope(world, [])
    first, second = [1, 2], [1, 2, 3]
    assert call([first], scope) == 2
    assert call([second], scope) == 3
    assert call([first], scope) == 2
    row_a, row_b = Row("t", {"id": 1}), Row("t", {"id": 1, "k": 2})
    read_k = Attr(obj=_ref("param", "r"), name="k")
    k_of = LetTable({"k_of": LetIR(name="k_of", params=["r"], body=read_k)}).caller("k_of")
    assert k_of([row_a], scope) is None
    assert k_of([row_b], scope) == 2
    assert k_of([Row("t", {"id": 1, "k": 3})], scope) == 3
    assert k_of([row_a], scope) is None
    # Both definitions read nothing that moves: memoised for the episode, each
    # entry holding its argument so an identity key cannot be reused meanwhile.
    memo = scope.episode_memo
    assert len(memo) == 5
    assert all(isinstance(args, list) for args, _ in memo.values())


def test_static_tables_are_shared_and_ledgers_copied(world: World) -> None:
    compiled = CompiledWorld(world)
    for record in world.records:
        if record.name in compiled.mutable:
            assert record.name not in compiled.static_rows
        else:
            rows = compiled.static_rows[record.name]
            assert isinstance(rows, Rows) and [dict(r) for r in rows] == record.rows


def test_event_takes_every_trace_field() -> None:
    """The runtime's light Event and the documented TraceEvent name the same fields."""
    params = list(inspect.signature(Event.__init__).parameters)[1:]
    assert params == [name for name in TraceEvent.model_fields if name != "type"]


def test_episodes_in_a_row_and_in_a_thread_reuse_no_stale_state(world: World,
                                                                 tmp_path: Path) -> None:
    """run_episode keeps one event loop per thread; results do not depend on it."""
    import threading

    first = run_episode(world, None, None, 3, out=tmp_path / "a")
    again = run_episode(world, None, None, 3, out=tmp_path / "b")
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(
        run_episode(world, None, None, 3, out=tmp_path / "c")))
    thread.start()
    thread.join()
    texts = [Path(r.trace_path or "").read_bytes() for r in (first, again, box[0])]
    assert texts[0] == texts[1] == texts[2]


@pytest.mark.parametrize("value", [
    {"b": 1, "a": [1.5, 2.0, 1e16, -0.0, None, True], "é": "naïve — “quoted”\n"},
    {"nested": {"z": {"y": [{"k": "v"}]}, "a": 3}, "n": 10**20},
    {"row": Row("t", {"id": 2, "name": "x"})}, [], "text", 7,
])
def test_trace_line_encoder_matches_json_dumps(value: Any) -> None:
    """The once-built C encoder writes exactly what json.dumps(sort_keys) writes."""
    import json

    from eairdsl.runtime.trace import _ENCODE_LINE

    assert _ENCODE_LINE(value) == json.dumps(value, sort_keys=True, ensure_ascii=False)


def test_trace_line_encoder_refuses_runtime_objects() -> None:
    from eairdsl.runtime.trace import _ENCODE_LINE
    from eairdsl.runtime.values import FieldSet

    with pytest.raises(TypeError):
        _ENCODE_LINE({"fields": FieldSet("t", ["a"])})


@pytest.mark.parametrize("text,expected", [
    ("The renewal auto-extends. Flag it as a risk!  Is it capped?\nNo.",
     ["The renewal auto-extends.", "Flag it as a risk!", "Is it capped?", "No."]),
    ("One sentence without an end", ["One sentence without an end"]),
    ("", []),
    (None, None),
])
def test_sentences_split_text_for_within_sentence_tests(world: World, text: Any,
                                                        expected: Any) -> None:
    fn = compile_expr(Call(func="sentences", args=[_ref("local", "t")]))
    assert fn(_scope(world, [], t=text)) == expected


def test_sentences_in_a_quantifier_type_check_and_run(tmp_path: Path) -> None:
    """`exists s in sentences(...) where ...` is a valid measurement over a reply."""
    import re

    from eairdsl.runtime.trace import read_trace

    total = "  metric total = sum(r.amount for r in refunds)"
    world = mini_world(tmp_path, edits=[(total, total + (
        "\n  metric refund_sentence = exists s in sentences(final(desk_a)) where "
        's contains "refund" and s contains_any ["$5", "$10", "$20"] '
        "when final(desk_a) != none"))])
    for seed in range(4):
        result = run_episode(world, "baseline", None, seed, agents="sim:reckless",
                             out=tmp_path / "out")
        final = read_trace(Path(result.trace_path or "")).final("desk_a") or ""
        expected = any("refund" in part and any(a in part for a in ("$5", "$10", "$20"))
                       for part in re.split(r"(?<=[.!?])\s+|\n+", final))
        assert result.metrics["refund_sentence"] is expected


def test_cards_see_rank_and_display_name_per_condition(tmp_path: Path) -> None:
    """`role.authority` and `role.display` are folded per condition when cards render."""
    world = mini_world(
        tmp_path, files={"card.md.j2": "You are {{ role.display }} (rank {{ role.authority }}).\n"},
        edits=[("role desk_a {\n  model under_test",
                'role desk_a {\n  model under_test\n  authority choose(budget_check, 3, 1)\n'
                '  display choose(budget_check, "the senior desk", "desk A")')])
    cards = world.prompts["desk_a"]
    assert cards["baseline"].strip() == "You are desk A (rank 1)."
    assert cards["checked"].strip() == "You are the senior desk (rank 3)."
    assert world.prompts["desk_b"]["checked"].strip() == "You are desk_b (rank 0)."
