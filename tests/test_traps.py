"""The offline authoring traps of `eairdsl.check.traps` (issue 12, item 5).

Each trap is a one-slot change to the bug-template base world that fires exactly its
code, at the line and column of the construct; a clean variant next to it (the fix the
hint suggests) fires nothing. The shipped worlds fire none of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bug_template import Case, compile_case, expected_where, listing, where

from eairdsl.compiler import compile_world

ROOT = Path(__file__).resolve().parents[1]
CODES = {"W704", "W705", "W706", "W707", "E511"}
MANAGER = 'role manager { model under_test card "clerk.md.j2" tools fix }'
FIX = 'tool fix(id: text) -> text { kind act returns "ok" }'
A1 = 'role a1 { model under_test card "clerk.md.j2" }'
ASK = "tool ask(q: text) -> text { kind communicate delegates }"
TWO_EDGES = f"{ASK} {A1} delegation clerk -> a1 via ask delegation clerk -> customer via ask"


def T(id: str, code: str | None, at: tuple[str, int] | None, **slots: str) -> Case:
    return Case(id, code, at, slots=slots)


TRAPS = [
    T("route-target-not-held", "W704", ("tool", 25),
      tool='require id != "" else route fix', tail=f"{FIX} {MANAGER}"),
    T("list-hint-of-elements", "W705", ("tail", 34), role="tools tag",
      tail='tool tag(labels: list[text] hint ["a", "b"]) -> text { kind act }'),
    T("list-hint-from-the-instance", "W705", ("tail", 34), role="tools tag",
      tail="tool tag(labels: list[text] hint [instance.order]) -> text { kind act }"),
    T("hint-reads-the-trace", "W706", ("tail", 29), role="tools note",
      tail="tool note(n: int hint count(calls(look))) -> text { kind act }"),
    T("hint-reads-the-trace-through-a-let", "W706", ("tail", 23), role="tools note",
      top="let seen() = count(calls(look))",
      tail="tool note(n: int hint seen()) -> text { kind act }"),
    T("hint-reads-the-clock", "W706", ("tail", 29), role="tools note",
      tail="tool note(t: duration hint [now()]) -> text { kind act }"),
    T("two-delegation-callees", "E511", ("tail", TWO_EDGES.index("delegation clerk -> c") + 1),
      role="tools ask", tail=TWO_EDGES),
    T("delegates-names-one-channel-another", "E511",
      ("tail", len(f"{ASK[:-2]}customer }} {A1} ") + 1), role="tools ask",
      tail=f"{ASK[:-2]}customer }} {A1} delegation clerk -> a1 via ask"),
    T("inducer-text-no-card-renders", "W707", ("top", 28),
      top='inducer calm : incentive { text "Stay calm." }'),
]

CLEAN = [
    T("route-target-held", None, None, tool='require id != "" else route fix',
      role="tools fix", tail=FIX),
    T("route-to-a-participant", None, None, tool='require id != "" else route manager',
      tail=f"{FIX} {MANAGER}"),
    T("list-hint-of-whole-lists", None, None, role="tools tag",
      tail='tool tag(labels: list[text] hint [["a", "b"]]) -> text { kind act }'),
    T("hint-from-the-data", None, None, role="tools note",
      tail="tool note(n: int hint [1, 2]) -> text { kind act }"),
    T("hint-of-today", None, None, role="tools note",
      tail="tool note(d: date hint today()) -> text { kind act }"),
    T("one-delegation-callee", None, None, role="tools ask",
      tail=f"{ASK} {A1} delegation clerk -> a1 via ask"),
    T("same-callee-from-two-callers", None, None, role="tools ask",
      tail=f"{ASK} {A1} role a2 {{ model under_test card \"clerk.md.j2\" tools ask }} "
           "delegation clerk -> a1 via ask delegation a2 -> a1 via ask"),
    T("inducer-text-rendered", None, None,
      top='inducer calm : prompt_clause { roles clerk text "Stay calm." }'),
]


@pytest.mark.parametrize("case", TRAPS, ids=[c.id for c in TRAPS])
def test_trap_fires_exactly_its_code(tmp_path: Path, case: Case) -> None:
    result = compile_case(tmp_path, case)
    fired = [d for d in result.diagnostics if d.code in CODES]
    assert [(d.code, where(d)) for d in fired] == [(case.code, expected_where(case))], \
        listing(result)
    assert {d.code for d in result.diagnostics} == {case.code}, listing(result)
    assert all(d.hint for d in fired)


@pytest.mark.parametrize("case", CLEAN, ids=[c.id for c in CLEAN])
def test_clean_variant_fires_nothing(tmp_path: Path, case: Case) -> None:
    result = compile_case(tmp_path, case)
    assert result.ok and not result.diagnostics, listing(result)


def test_delegates_a_parameter_is_rejected_where_written(tmp_path: Path) -> None:
    """`delegates` takes a literal participant: a parameter there is E301, at the clause."""
    case = T("delegates-a-parameter", "E301", ("tail", 58), role="tools ask",
             tail="tool ask(who: party, q: text) -> text { kind communicate delegates who }")
    result = compile_case(tmp_path, case)
    assert not result.ok
    assert [where(d) for d in result.diagnostics if d.code == "E301"] == \
        [expected_where(case)], listing(result)


@pytest.mark.parametrize("path", sorted((ROOT / "worlds").glob("*.eair")), ids=lambda p: p.stem)
def test_shipped_worlds_fire_no_trap(path: Path) -> None:
    result = compile_world(path)
    assert result.ok
    assert not [d for d in result.diagnostics if d.code in CODES], listing(result)
