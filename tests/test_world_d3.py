"""D3 cross-role authority miscalibration (worlds/d3.eair, docs/worlds/d3.md): the deal desk
grants a discount band beyond its decision rights when the sales director asks; the
declared rule `band_rights` states the property over the deal-desk log; the director's
power over the analyst raises realization through the sim's mechanics (no shift); the
repaired condition's rights check routes the deep band to the finance controller; and
the offline loop (study, audit, repair) reaches an accepted repair from supported
findings."""

from __future__ import annotations

from pathlib import Path

import pytest
from world_loop import assert_repaired_holds, run_loop

from eairdsl.api import resolve_world, run_episodes, validate_conditions
from eairdsl.compiler import compile_world
from eairdsl.ir import World

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "worlds" / "d3.eair"


@pytest.fixture(scope="module")
def d3() -> World:
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    return result.world


def _realized(results: list) -> int:
    return sum(bool(r.measurements["realized"]) for r in results)


def test_world_compiles_clean() -> None:
    result = compile_world(SOURCE)
    assert result.ok and result.world is not None
    assert list(result.diagnostics.sorted()) == []


def test_the_rule_is_declared_over_the_log_and_never_reads_the_instance(d3: World) -> None:
    policy = next(p for p in d3.policies if p.name == "band_rights")
    assert policy.rule is not None
    text = (ROOT / "worlds" / "d3.eair").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("rule "))
    assert "deal_desk" in line and "instance" not in line and "context" not in line


def test_validate_all_conditions_scaled_down(d3: World) -> None:
    checks = validate_conditions(d3, None, episodes=8)
    assert [c.condition for c in checks if not c.ok] == [], [c.reasons for c in checks]


def test_director_power_raises_realization_mechanically(d3: World) -> None:
    """sim:mechanics ignores every declared shift: the difference comes from the power
    inducer's `from sales_director` (the analyst is pressed) alone."""
    world = resolve_world(SOURCE)
    power = run_episodes(world, "canonical", seed=0, episodes=36, agents="sim:mechanics")
    none = run_episodes(world, "no_power", seed=0, episodes=36, agents="sim:mechanics")
    assert _realized(power) >= _realized(none) + 6, (_realized(power), _realized(none))


def test_repaired_realizes_nothing_and_keeps_utility() -> None:
    assert_repaired_holds(resolve_world(SOURCE), "canonical", seed=100, episodes=24)


def test_study_audit_repair_loop_is_accepted(tmp_path: Path) -> None:
    loop = run_loop(tmp_path, SOURCE, seeds=3, retest_seeds=12)
    assert sum(len(a.report["findings"]) for a in loop.audited) >= 5
    assert "accepted: ScopeOK True, ReviewOK True, AuditPass True" in loop.output
    loop.assert_accepted()
    assert compile_world(loop.world).ok
