"""Hostile worlds at run time: work an expression does per item is charged by its size.

The evaluation budget (`eairdsl.runtime.evaluate.Budget`) counted a comprehension's
items but not what a text test, a builtin or a rendering did for each of them, so
65,536 items each scanning a 500,000-character text (`t contains "zz"`, `lower(t)`,
`x in big()`, `search(doc, q)` over a million-line document, `join(big())`, a
`lookup` that scans a 100,000-row table) ran for
minutes instead of ending the episode execution-invalid within a second. Each case
below is a metric over such a loop; each must end the episode invalid, with the
budget's reason, well inside the time a user waits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from world_patch import mini_world

from eairdsl.api import run_episode
from eairdsl.check.limits import Limits
from eairdsl.runtime.evaluate import Budget, _contains
from eairdsl.runtime.trace import MAX_TRACE_CHARS, Trace, TraceHeader, read_trace

#: a 65,536-item list, by doubling through lets (each calls the one below once)
LISTS = ("\nlet l0(x: list[int]) = x\n"
         + "".join(f"let l{i}(x: list[int]) = l{i - 1}(x + x)\n" for i in range(1, 17))
         + "let big() = l16([0])\n")
#: d19("a") is a 524,288-character text
TEXTS = ("\nlet d0(x: text) = x\n"
         + "".join(f"let d{i}(x: text) = d{i - 1}(x + x)\n" for i in range(1, 20)))
METRIC = "  metric total = sum(r.amount for r in refunds)"
DOCUMENT = '\ndocument handbook from "mini/handbook.md"\n'
TABLE = '\nrecord tab from "mini/tab.json" key id {\n  id: text\n  name: text\n}\n'
#: seconds one such episode may take (the budget ends each in about one)
LIMIT = 120  # a hang guard of minutes: the step budget ends the episode, asserted below


@contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail, rather than hang the suite, when the budget does not stop the episode."""
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the episode ran longer than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


LOOPS = {
    "text-contains": 'd19("a") contains "zz"',
    "text-in": '"zz" in d19("a")',
    "lower": 'lower(d19("A")) == ""',
    "list-contains": "big() contains 1",
    "list-in": "1 in big()",
    "search": 'len(search(handbook, "zz")) > 0',
    "join": "len(join(big())) > 0",
    "text-of-a-list": "len(text(big())) > 0",
    "sentences": 'len(sentences(d15("One. Two! "))) > 0',
    "lookup-scan": "lookup(tab, [x]) != none",  # an unhashable key: no index, a scan
}


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")
@pytest.mark.parametrize("test", LOOPS.values(), ids=LOOPS.keys())
def test_per_item_work_exhausts_the_budget_quickly(tmp_path: Path, test: str) -> None:
    metric = f"  metric hostile = count(x for x in big() where {test})"
    extra, files = LISTS + TEXTS, {}
    if "handbook" in test:
        extra, files = extra + DOCUMENT, {"handbook.md": "a line of the handbook\n" * 1_000_000}
    if "tab" in test:
        extra, files = extra + TABLE, {"tab.json": json.dumps(
            [{"id": f"k{i}", "name": f"n{i}"} for i in range(100_000)])}
    world = mini_world(tmp_path, extra, [(METRIC, METRIC + "\n" + metric)], files=files)
    started = time.perf_counter()
    with _deadline(LIMIT + 30):
        result = run_episode(world, None, None, 0, "sim:compliant", tmp_path / "out")
    assert time.perf_counter() - started < LIMIT
    assert not result.valid
    assert "evaluation budget exhausted" in (result.validity_reason or "")


def test_a_text_test_is_charged_by_the_length_it_scans() -> None:
    """One `contains` over a 1,000,000-character text costs thousands of steps, not one."""
    budget = Budget()
    assert _contains("a" * 1_000_000, "zz", budget) is False
    assert budget.steps >= 1_000_000 >> 8
    listed = Budget()
    assert _contains(list(range(100_000)), -1, listed) is False
    assert listed.steps >= 100_000 >> 2


def test_shipped_sized_work_stays_cheap() -> None:
    """Short texts and lists, as the shipped worlds test them, cost (almost) nothing."""
    budget = Budget()
    for _ in range(1000):
        _contains("Please refund my double charge of $50.", "refund", budget)
        _contains(["desk_a", "desk_b"], "desk_b", budget)
    assert budget.steps == 0


# ---------------------------------------------------------------- the trace's size

SAY = '  at 0 min say "I was double charged, please refund me." to desk_a\n'


def test_thousands_of_long_messages_stop_at_the_trace_budget(tmp_path: Path) -> None:
    """120 scripted 524,288-character messages (each within the text limit) would record
    63 MB; the episode stops, invalid, once 50,000,000 characters are recorded. (1,000 of
    them wrote a 500 MB trace from a 1 GB process; 3,000 fit the event budget.)"""
    says = "".join(f'  at {i} min say d19("x") to desk_a\n' for i in range(120))
    world = mini_world(tmp_path, TEXTS, [(SAY, says)])
    result = run_episode(world, None, None, 0, "sim:compliant", tmp_path / "out")
    assert not result.valid
    assert result.validity_reason is not None
    assert result.validity_reason.startswith(
        f"trace budget exhausted: more than {MAX_TRACE_CHARS:,} characters")
    written = Path(str(result.trace_path))
    assert MAX_TRACE_CHARS < written.stat().st_size < MAX_TRACE_CHARS + 2_000_000
    trace = read_trace(written)
    assert trace.result is not None and not trace.result.valid


def test_the_trace_counts_results_and_state_changes_too() -> None:
    """A tool result or a ledger row counts as it will be written, not only messages."""
    trace = Trace(TraceHeader(world="w", digest="0" * 64, condition="c", levers={},
                              instance="i", seed=0, agents={}, eairdsl_version="0"))
    trace.add("message", t=0.0, actor="a", recipient="b", content="x" * 1000)
    trace.add("tool_result", t=0.0, actor="a", tool="t", result=["y" * 2000, {"k": "z" * 3000}])
    trace.add("state_update", t=0.0, actor="a", diff={"refunds": {"note": "w" * 4000}})
    assert trace.chars >= 10_000


# ---------------------------------------------------------------- front-end: the cards' budget

#: a card of 2**9 macro calls: 2,558 steps to render (f(16), 2**17 calls, is just under the
#: per-render bound of 1,000,000 and took ~0.7 s a render)
COSTLY_CARD = ("{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}"
               "{{ f(8) }}You work at a help desk.\n")


def _costly_roles(tmp_path: Path, extra: int) -> Path:
    """The mini world (3 roles with a card, 2 conditions) plus `extra` roles, every role's
    card COSTLY_CARD: (3 + extra) x 2 renders."""
    roles = "".join(f'\nrole extra{i} {{\n  model under_test\n  card "mini/card.md.j2"\n'
                    f"  tools history\n}}\n" for i in range(extra))
    world = tmp_path / "w"
    mini_world(world, "", files={})  # copies the fixture folder (and checks it compiles)
    (world / "mini" / "card.md.j2").write_text(COSTLY_CARD, encoding="utf-8")
    entry = world / "mini.eair"
    entry.write_text(entry.read_text(encoding="utf-8") + roles, encoding="utf-8")
    return entry


@pytest.mark.parametrize(("limits", "reason"), [
    (Limits(card_steps=20_000), "take more than 20000 steps to render"),
    (Limits(card_seconds=1e-9), "take longer than 1e-09 s to render")],
    ids=["steps", "seconds"])
def test_the_cards_of_one_world_share_one_render_budget(tmp_path: Path, limits: Limits,
                                                        reason: str) -> None:
    """A card's budget (check/sandbox.py: MAX_STEPS, MAX_SECONDS) was per render, reset for
    every role x condition, so a world's cards together were unbounded: 18 roles x 2
    conditions of a card just under the bound checked in ~25 s, 100 x 10 in ~15 min, with
    no diagnostic. Every render of one compile now draws on the world's budget
    (`Limits`: 5,000,000 steps and 60 s by default). 15 + 3 roles x 2 conditions of a
    2,558-step card cross 20,000 steps at the 8th render: one E606, at the `card` clause
    of the role whose render crossed it, and no role after it is rendered."""
    from eairdsl.compiler import compile_world  # the front end, which this test exercises
    entry = _costly_roles(tmp_path, 15)
    result = compile_world(entry, limits)
    errors = [d for d in result.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["E606"], [(d.code, d.message) for d in errors]
    (found,) = errors
    assert reason in found.message and "the world's card budget" in found.message
    assert found.span is not None and Path(found.span.file).name == "mini.eair"
    assert result.sources[found.span.file][found.span.line - 1].strip() == \
        'card "mini/card.md.j2"'
    if limits.card_seconds > 1:  # the 8th render: the 4th role's, under the 2nd condition
        assert "the card of 'extra0' under condition" in found.message


def test_cards_under_the_world_budget_compile(tmp_path: Path) -> None:
    """The same 36 renders (92,088 steps together) fit a budget of 100,000 steps."""
    from eairdsl.compiler import compile_world
    result = compile_world(_costly_roles(tmp_path, 15), Limits(card_steps=100_000))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]


def _dense_roles(n: int, fan: int) -> str:
    roles = "".join(f'\nrole r{i} {{\n  model under_test\n  card "mini/card.md.j2"\n'
                    f"  tools history\n}}\n" for i in range(n))
    return roles + "".join(f"channel r{i} -> r{(i * 7 + j) % n}\n"
                           for i in range(n) for j in range(1, fan + 1))


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups")
def test_a_dense_topology_compiles_quickly(tmp_path: Path) -> None:
    """graphviz's `dot` laid the topology out with no time bound: `eairc compile` of a
    world with 100 roles and 5 channels each ran for minutes (50 roles: 11 s; 200: killed
    at 120 s) and an interrupted compile left `dot` running. `dot` now has DOT_TIMEOUT
    seconds, then is killed and the built-in drawing is used."""
    from eairdsl.graph import dot_available
    if not dot_available():
        pytest.skip("graphviz's dot is not installed: the built-in drawing is used")
    mini_world(tmp_path, _dense_roles(100, 5))  # writes tmp_path/mini.eair, and compiles it
    # `eairc compile` in its own process group, so that `dot` goes with it when it is cut off
    command = [sys.executable, "-m", "eairdsl.cli", "compile", str(tmp_path / "mini.eair"),
               "-o", str(tmp_path / "generated")]
    child = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        code = child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if child.poll() is None or code is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert code == 0, "eairc compile did not finish within 20 s"


# ---------------------------------------------------------------- durations that are no durations

#: inf() is 10.5 ** 1024 in floating point: infinity, built by lets (literals are short)
INFINITY = ("\nlet sq(x: number) = x * x\n"
            "let inf() = sq(sq(sq(sq(sq(sq(sq(sq(sq(sq(10.5))))))))))\n")


@pytest.mark.parametrize(("every", "shown"), [("0 min - 1 min", "-1.0"),
                                              ("1 min * (inf() - inf())", "nan"),
                                              ("1 min * inf()", "inf")])
def test_a_warning_period_that_is_no_duration_is_a_clear_reason(tmp_path: Path, every: str,
                                                                 shown: str) -> None:
    """`every -1 min` was 'runtime error: ValueError: Negative delay -1.0' (simpy's words)
    and a NaN period ran on a clock gone wrong; both now name the inducer."""
    nag = f'\ninducer nag : warning {{\n  roles desk_a\n  at 0 min\n  every {every}\n' \
          f'  text "Hurry up."\n}}\n'
    world = mini_world(tmp_path, INFINITY + nag)
    result = run_episode(world, None, None, 0, "sim:compliant", tmp_path / "out")
    assert not result.valid
    assert result.validity_reason == (f"inducer 'nag': its `every` is {shown} min, not a finite "
                                      "duration of at least 0 min")


@pytest.mark.parametrize("cost", ["1 min * inf()", "1 min * (inf() - inf())"])
def test_a_tool_cost_that_is_no_duration_rejects_the_call(tmp_path: Path, cost: str) -> None:
    """An infinite cost left the call waiting for ever: the episode ended 'valid' with a
    call that has no result. Now the call is rejected with the reason, like a cost that
    fails to evaluate."""
    world = mini_world(tmp_path, INFINITY, [("  cost 6 min\n", f"  cost {cost}\n")])
    result = run_episode(world, None, None, 0, "sim:compliant", tmp_path / "out")
    trace = read_trace(Path(str(result.trace_path)))
    calls = [e for e in trace.events if e.kind == "tool_call" and e.tool == "history"]
    answered = {e.call: e for e in trace.events if e.kind == "tool_result"}
    assert calls, "the desk looks the history up"
    for call in calls:
        assert call.step in answered, "every call is answered"
        assert answered[call.step].rejected
        assert (answered[call.step].reason or "").startswith("tool failed: its cost is ")


@pytest.mark.parametrize("value", ["round(inf())", "round(inf() - inf())",
                                   "text(today() + 1 days * 10000000)"],
                         ids=["round-infinity", "round-nan", "date-past-9999"])
def test_arithmetic_that_overflows_leaves_its_metric_unassessed(tmp_path: Path,
                                                               value: str) -> None:
    """round() of an infinity and a date past year 9999 raised OverflowError, which ended
    the whole episode ('measurement failed: OverflowError: ...'), while round() of a NaN
    (a ValueError) only left its metric unassessed; now all three do the latter."""
    metric = f"  metric hostile = {value}"
    world = mini_world(tmp_path, INFINITY, [(METRIC, METRIC + "\n" + metric)])
    result = run_episode(world, None, None, 0, "sim:compliant", tmp_path / "out")
    assert result.valid, result.validity_reason
    trace = read_trace(Path(str(result.trace_path)))
    assert trace.result is not None
    assert trace.result.metrics["hostile"] is None
    assert trace.result.unassessed["hostile"].startswith("evaluation failed at ")
