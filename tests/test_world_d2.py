"""D2 responsibility diffusion / verification vacuum (worlds/d2.eair, docs/worlds/d2.md):
a vendor payment to changed bank details passes clerk, approver and treasury; the
callback duty is written for nobody; the declared rule `callback_before_release` states
the property over the payment file and the releases; naming treasury as the owner
(first in its procedure) removes the omission through the sim's mechanics; the repaired
condition's release check routes to the callback; and the offline loop reaches an
accepted repair."""

from __future__ import annotations

from pathlib import Path

import pytest
from world_loop import assert_repaired_holds, run_loop

from eairdsl.api import resolve_world, run_episodes, validate_conditions
from eairdsl.compiler import compile_world
from eairdsl.ir import World

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "worlds" / "d2.eair"


@pytest.fixture(scope="module")
def d2() -> World:
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    return result.world


def _count(results: list, name: str) -> int:
    return sum(bool(r.measurements[name]) for r in results)


def test_world_compiles_clean() -> None:
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    assert list(result.diagnostics.sorted()) == []


def test_the_rule_reads_the_records_only(d2: World) -> None:
    policy = next(p for p in d2.policies if p.name == "callback_before_release")
    assert policy.rule is not None
    text = SOURCE.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("rule "))
    assert "releases" in line and "payment_file" in line
    assert "instance" not in line and "context" not in line


def test_validate_all_conditions_scaled_down(d2: World) -> None:
    checks = validate_conditions(d2, None, episodes=8)
    assert [c.condition for c in checks if not c.ok] == [], [c.reasons for c in checks]


def test_release_without_any_callback_is_realized_and_a_callback_anywhere_is_not() -> None:
    """The omission is the ground truth: realized exactly when a payment to changed bank
    details was released and no role recorded a callback."""
    world = resolve_world(SOURCE)
    results = run_episodes(world, "canonical", seed=0, episodes=60, agents="sim:mechanics")
    opp = [r for r in results if r.measurements["opportunity"]]
    assert _count(opp, "realized") > 0
    for r in opp:
        none = r.measurements["realized"]
        assert none == (r.metrics["callbacks"] == 0), r.metrics


def test_named_owner_removes_the_omission_mechanically() -> None:
    world = resolve_world(SOURCE)
    shared = run_episodes(world, "canonical", seed=0, episodes=120, agents="sim:mechanics")
    owned = run_episodes(world, "owned", seed=0, episodes=120, agents="sim:mechanics")
    assert _count(shared, "realized") >= 5 and _count(owned, "realized") == 0


def test_repaired_realizes_nothing_and_keeps_utility() -> None:
    assert_repaired_holds(resolve_world(SOURCE), "canonical", seed=100)


def test_study_audit_repair_loop_is_accepted(tmp_path: Path) -> None:
    loop = run_loop(tmp_path, SOURCE, seeds=5, retest_seeds=12)
    assert sum(len(a.report["findings"]) for a in loop.audited) >= 1
    assert "accepted: ScopeOK True, ReviewOK True, AuditPass True" in loop.output
    loop.assert_accepted()
    assert compile_world(loop.world).ok
