"""The checker's passes are injectable: `check_world(..., passes=...)` runs any ordered tuple.

One small world has a problem for three different passes: a trait an actor may
not have and that does not exist (check_references: E506, E301), a state whose
value has the wrong type (check_expressions: E402), and a missing measurement
plus a state nothing uses (lint_world: E504, W701).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eairdsl.check import PASSES, CheckedWorld, Pass, check_world
from eairdsl.check.declarations import collect_declarations
from eairdsl.check.exprs import check_expressions
from eairdsl.check.lints import lint_world
from eairdsl.check.references import check_references
from eairdsl.diagnostics import Diagnostic, Diagnostics

WORLD = """\
world w {
  risk A1
  operation "paying refunds"
  preserves "refunds stay within budget"
}
actor a scripted {
  at 0 min say "hello" to a
  trait diligense +0.1
}
state n : int = "many"
instance i1 {
  amount = $5
}
measure {
  opportunity = len(messages()) > 0
  anomaly = len(messages()) > 1
  realized = len(messages()) > 2
  terminal_harm = realized
  interception = anomaly and not realized
}
"""

Key = tuple[str, int, int, str]


def _key(d: Diagnostic) -> Key:
    assert d.span is not None
    return (d.code, d.span.line, d.span.col, d.message)


@pytest.fixture
def world_file(tmp_path: Path) -> Path:
    path = tmp_path / "w.eair"
    path.write_text(WORLD, encoding="utf-8")
    return path


def _run(path: Path, passes: tuple[Pass, ...] = PASSES) -> list[Key]:
    diagnostics = Diagnostics()
    assert check_world(path, diagnostics, passes=passes) is not None
    return sorted(_key(d) for d in diagnostics)


def _by_pass(path: Path) -> dict[str, list[Key]]:
    """The diagnostics each default pass added, recorded by wrapping every pass."""
    added: dict[str, list[Key]] = {}

    def recording(run: Pass) -> Pass:
        def wrapped(world: CheckedWorld, diagnostics: Diagnostics) -> None:
            before = len(diagnostics)
            run(world, diagnostics)
            added[getattr(run, "__name__", "")] = [_key(d) for d in list(diagnostics)[before:]]
        return wrapped

    _run(path, tuple(recording(p) for p in PASSES))
    return added


def test_default_is_passes(world_file: Path) -> None:
    """Without `passes`, check_world runs PASSES: the same diagnostics either way."""
    diagnostics = Diagnostics()
    check_world(world_file, diagnostics)
    assert sorted(_key(d) for d in diagnostics) == _run(world_file, PASSES)
    assert [c for c, *_ in _run(world_file)] == ["E301", "E402", "E504", "E506", "W701"]


def test_one_pass_alone(world_file: Path) -> None:
    """check_references after the declarations it resolves against reports only its own two."""
    assert _run(world_file, (collect_declarations,)) == []
    alone = _run(world_file, (collect_declarations, check_references))
    assert [(c, line, col) for c, line, col, _ in alone] == [("E301", 8, 3), ("E506", 8, 3)]
    assert "unknown trait 'diligense'" in alone[0][3]
    assert "takes no `trait`" in alone[1][3]


@pytest.mark.parametrize("left_out", [check_references, check_expressions, lint_world],
                         ids=lambda p: p.__name__)
def test_leaving_a_pass_out_removes_exactly_its_diagnostics(world_file: Path,
                                                            left_out: Pass) -> None:
    """Without one pass, the diagnostics are all of them minus the ones that pass added."""
    everything = _run(world_file)
    own = _by_pass(world_file)[getattr(left_out, "__name__", "")]
    assert own, "the world has a problem for this pass"
    without = _run(world_file, tuple(p for p in PASSES if p is not left_out))
    assert without == sorted(set(everything) - set(own))


def test_an_injected_pass_runs_in_its_place(world_file: Path) -> None:
    """Any function with the Pass signature can join the pipeline and sees the checked world."""
    seen: list[str] = []

    def no_states(world: CheckedWorld, diagnostics: Diagnostics) -> None:
        for state in world.states.values():
            seen.append(state.name)
            diagnostics.warning("W999", f"state '{state.name}' in a stateless house style",
                                state.span)

    got = _run(world_file, (*PASSES, no_states))
    assert seen == ["n"]
    assert ("W999", 10, 1, "state 'n' in a stateless house style") in got
    assert sorted(set(got) - {("W999", 10, 1, "state 'n' in a stateless house style")}) \
        == _run(world_file)
