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
from eairdsl.ir import Agg, Attr, Binary, Call, Comp, Expr, LetIR, Lit, Ref, RefKind, World
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


@pytest.mark.parametrize("value", ["a", 1, None, math.nan, ["a"]])
@pytest.mark.parametrize("conjunct_first", [False, True])
def test_indexed_filter_with_a_conjunction_equals_a_scan(world: World, value: Any,
                                                         conjunct_first: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`x.k == v and x.id > 2` is answered from the index on k (its leftmost conjunct);
    `x.id > 2 and x.k == v` is scanned. Both give exactly the scan's rows, in order."""
    equality = Binary(operator="==", left=_field("x", "k"), right=_ref("local", "v"))
    other = Binary(operator=">", left=_field("x", "id"), right=Lit(type="int", value=2))
    where = Binary(operator="and", left=other if conjunct_first else equality,
                   right=equality if conjunct_first else other)
    fn = compile_expr(Comp(var="x", source=_ref("record", "t"), body=_field("x", "id"),
                           where=where))
    rows = [Row("t", r) for r in ROWS]
    asked: list[str] = []
    plain = StaticRows.by_field

    def spied(self: StaticRows, name: str) -> Any:
        asked.append(name)
        return plain(self, name)

    monkeypatch.setattr(StaticRows, "by_field", spied)
    scanned = fn(_scope(world, rows, v=value))
    assert fn(_scope(world, StaticRows("t", rows), v=value)) == scanned
    assert scanned == [r["id"] for r in ROWS if r.get("k") == value and r["id"] > 2]
    assert asked == ([] if conjunct_first else ["k"])  # the index was (not) consulted


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


KEYED = [{"id": "a", "n": 1}, {"id": 1, "n": 2}, {"n": 3}, {"id": None, "n": 4},
         {"id": "a", "n": 5}, {"id": 1.0, "n": 6}, {"id": True, "n": 7},
         {"id": math.nan, "n": 8}, {"id": "b", "n": 9}]


def _lookup_of(rows: list[Row], world: World, key: Any) -> Any:
    """lookup(t, v): the record `t` is unknown to the world, so its key is `id`."""
    fn = compile_expr(Call(func="lookup", args=[_ref("record", "t"), _ref("local", "v")]))
    return fn(_scope(world, rows, v=key))


@pytest.mark.parametrize("key", ["a", "b", "c", 1, 1.0, True, False, 0, None, math.nan,
                                 ["a"], {"id": 1}, "nan-of-the-table"])
def test_indexed_lookup_equals_a_scan(world: World, key: Any) -> None:
    """lookup() on a static table answers from the index exactly what the scan finds:
    the first row in table order whose key equals (1 == 1.0 == True), none for none,
    and no row for NaN — not even the table's own NaN object, which a dict would find."""
    rows = [Row("t", r) for r in KEYED]
    if key == "nan-of-the-table":
        key = rows[7]["id"]  # the very object stored in the row
    scanned = _lookup_of(Rows("t", rows), world, key)  # not static: always scanned
    indexed = _lookup_of(StaticRows("t", rows), world, key)
    assert indexed is scanned
    expected = next((r for r in rows if key is not None and r.get("id") == key), None)
    assert scanned is expected


def test_indexed_lookup_on_unhashable_keys_scans(world: World) -> None:
    rows = StaticRows("t", [Row("t", {"id": ["x"], "n": 1}), Row("t", {"id": "x", "n": 2})])
    assert _lookup_of(rows, world, "x") is rows[1]
    assert _lookup_of(rows, world, ["x"]) is rows[0]
    assert rows.by_field("id") is None


def test_authorizer_memo_answers_what_the_matrix_says() -> None:
    """allowed/denied are memoised per principal and record; a principal bound later
    (the principals map grows while an episode starts) is seen, not a stale answer."""
    d1 = resolve_world(ROOT / "worlds" / "d1.eair")
    principals: dict[str, str] = {}
    auth = Authorizer(d1, principals)
    assert auth.allowed("Sam Ortiz", "employee") == []  # unknown principal: default deny
    principals["Sam Ortiz"] = "specialist"
    everything = [f.name for f in next(r for r in d1.records if r.name == "employee").fields]
    assert auth.allowed("Sam Ortiz", "employee") == everything
    assert auth.denied("Sam Ortiz", "employee") == []
    public = ["id", "name", "title", "team", "manager", "location"]
    for _ in range(2):
        assert auth.allowed("requester", "employee") == public
        assert auth.denied("requester", "employee") == [
            "rating", "pip_status", "compensation", "attrition"]
    fresh = Authorizer(d1, dict(principals))
    for who in ("requester", "assistant", "specialist", "Sam Ortiz", None, "nobody"):
        for record in ("employee", "project", "incident", "disclosure_rubric", "missing"):
            assert auth.allowed(who, record) == fresh._compute(who, record)


def _scanned_queries(events: list[Any], party: str, other: str) -> tuple[Any, ...]:
    """The trace queries as plain scans over every event (what the indexes replace)."""
    finals = [e.content or "" for e in events
              if e.kind == "message" and e.actor == party and e.final]
    results = {e.call: e for e in events if e.kind == "tool_result" and e.call}
    calls = {tool: [{"tool": tool, "caller": e.actor, "args": e.args or {},
                     "result": results[e.step].result if e.step in results else None,
                     "rejected": bool(results[e.step].rejected) if e.step in results else True,
                     "time": e.t}
                    for e in events if e.kind == "tool_call" and e.tool == tool
                    and e.actor == party]
             for tool in {e.tool for e in events if e.kind == "tool_call"}}
    sent = [{"sender": e.actor, "recipient": e.recipient, "text": e.content or "",
             "time": e.t, "edge": e.edge} for e in events
            if e.kind == "message" and e.actor == party and e.recipient == other]
    return ([e.content or "" for e in events if e.kind == "message" and e.actor == party],
            finals[-1] if finals else None,
            any(e.kind == "message" and e.edge == f"{party}->{other}" and e.tool
                for e in events),
            calls, sent)


@pytest.mark.parametrize(("name", "condition"), [("d1", "canonical"), ("d1", "repaired"),
                                                 ("a1", "strong")])
def test_trace_queries_from_indexes_equal_a_scan(name: str, condition: str,
                                                 tmp_path: Path) -> None:
    """final/replies/delegated/calls/messages read indexes kept as events arrive; on a
    real trace, for every pair of parties, they answer what scanning every event does."""
    from eairdsl.runtime.trace import read_trace

    w = resolve_world(ROOT / "worlds" / f"{name}.eair")
    result = run_episode(w, condition, None, 1, out=tmp_path)
    trace = read_trace(Path(result.trace_path or ""))
    parties = sorted({p.name for p in w.parties} | {"nobody"})
    assert any(trace.final(p) for p in parties) and any(trace.replies(p) for p in parties)
    for party in parties:
        for other in parties:
            replies, final, delegated, calls, sent = _scanned_queries(trace.events, party,
                                                                      other)
            assert trace.replies(party) == replies
            assert trace.final(party) == final
            assert trace.delegated(party, other) is delegated
            assert trace.messages(party, other) == sent
            for tool, expected in calls.items():
                assert trace.calls(tool, party) == expected


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



def test_let_memo_keys_text_lists_by_value_and_numbers_with_their_type(world: World) -> None:
    """A fresh list of the same texts (what `replies(p)` or `[final(p)]` builds at each
    call) finds the value computed for an equal one, and a longer or different list does
    not; `1`, `1.0` and `true` are equal in Python but never share an entry, so a body
    that renders its argument gives each its own text."""
    from eairdsl.runtime.evaluate import _memo_key

    steps = Agg(func="count", body=_ref("param", "xs"))
    table = LetTable({"size": LetIR(name="size", params=["xs"], body=steps)})
    call = table.caller("size")
    scope = _scope(world, [])
    assert call([["a", "b"]], scope) == 2
    spent = scope.budget.steps
    assert call([["a", "b"]], scope) == 2  # another list, equal: a memo hit, no step
    assert scope.budget.steps == spent
    assert call([["a", "b", "c"]], scope) == 3 and call([["b", "a"]], scope) == 2
    assert scope.budget.steps > spent
    assert len(scope.episode_memo) == 3
    # a list holding anything but texts is keyed by identity, as before
    mixed = ["a", 1]
    assert _memo_key(mixed) == (list, id(mixed)) and _memo_key(["a", 1]) != _memo_key(mixed)
    keys = {_memo_key(1), _memo_key(1.0), _memo_key(True), _memo_key("1"), _memo_key(None)}
    assert len(keys) == 5
    render = Call(func="text", args=[_ref("param", "x")])
    shown = LetTable({"shown": LetIR(name="shown", params=["x"], body=render)}).caller1("shown")
    assert [shown(v, scope) for v in (1, True, 1.5, 1)] == ["1", "true", "1.5", "1"]

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


def test_compiled_world_fn_is_not_fooled_by_a_reused_id(world: World) -> None:
    """CompiledWorld.fn caches by identity; an expression freed and replaced by a new one
    at the same address must get its own function, not the old one's."""
    compiled = CompiledWorld(world)
    scope = _scope(world, [])
    for i in range(300):
        expr = Binary(operator="+", left=Lit(type="int", value=i), right=Lit(type="int", value=0))
        assert compiled.eval(expr, scope) == i
        del expr  # before the fix, the next expression often took this one's address


def test_the_trace_budgets_size_is_render_size() -> None:
    """What every trace event's result and arguments are counted as (the trace budget,
    `MAX_TRACE_CHARS`) is `_render_size`'s count, read faster: on nested lists, rows,
    dicts with text and other keys, texts, numbers, none, truth values."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from eairdsl.runtime.evaluate import _render_size
    from eairdsl.runtime.trace import _container_size

    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.text(max_size=4) | st.integers(), inner, max_size=5) | st.builds(
        lambda d: Row("t", d), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
        max_leaves=30)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(values, max_size=6) | st.dictionaries(st.text(max_size=4), values,
                                                          max_size=6))
    def same(value: Any) -> None:
        assert _container_size(value, 10**9) == _render_size(value, 10**9)

    same()
