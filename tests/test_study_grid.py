"""Study grids: which cells a study has, in what order, and the seeds their attempts use."""

from __future__ import annotations

from pathlib import Path

import pytest

from eairdsl.api import resolve_world
from eairdsl.ir import World
from eairdsl.study.grid import (
    Attempt,
    Cell,
    GridError,
    cells,
    parse_models,
    parse_names,
    plan_world,
    run_seed,
    slug,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


def test_full_grid_is_the_cartesian_product(d1: World) -> None:
    """models × conditions × instances × seeds × replicates, each cell exactly once."""
    plan = plan_world(d1, ["canonical", "repaired"], None, 3, reps=2)
    grid = cells([plan], parse_models("sim,sim:reckless"))
    assert len(grid) == 2 * 2 * 9 * 3 * 2
    assert len(set(grid)) == len(grid)
    assert grid[0] == Cell("d1", "sim", "canonical", "hr-1", 0, 0)
    assert grid[1] == Cell("d1", "sim", "canonical", "hr-1", 0, 1)
    assert [c.model for c in grid[:1]] + [grid[-1].model] == ["sim", "sim:reckless"]


def test_defaults_come_from_the_world(d1: World) -> None:
    """No conditions/instances/seeds means all conditions, all instances, the world's seeds."""
    plan = plan_world(d1)
    assert plan.conditions == [c.name for c in d1.conditions]
    assert plan.instances == [str(i["id"]) for i in d1.instances]
    assert plan.seeds == list(range(d1.meta.seeds))
    assert len(cells([plan], parse_models(None))) == len(d1.conditions) * 9 * d1.meta.seeds


def test_instances_drawn_per_seed(d1: World) -> None:
    """`--instances seed` gives one instance per seed, instance[seed % count], as `eairc run`."""
    plan = plan_world(d1, ["canonical"], "seed", 11)
    grid = cells([plan], parse_models("sim"))
    assert len(grid) == 11
    ids = [str(i["id"]) for i in d1.instances]
    assert {(c.seed, c.instance) for c in grid} == {(s, ids[s % 9]) for s in range(11)}


def test_unknown_names_are_clear_errors(d1: World) -> None:
    """An unknown condition or instance names what the world has."""
    with pytest.raises(GridError, match="its conditions are canonical"):
        plan_world(d1, ["nope"])
    with pytest.raises(GridError, match="no instance 'x'"):
        plan_world(d1, None, ["x"])
    with pytest.raises(GridError, match="--seeds"):
        plan_world(d1, None, None, 0)


def test_model_specs() -> None:
    """Models are profiles, litellm model strings or NAME=… aliases; the default is the
    --agents value."""
    assert [(m.name, m.agents) for m in parse_models(None, "sim:reckless")] == [
        ("sim:reckless", "sim:reckless")]
    assert [(m.name, m.agents) for m in parse_models("a=sim, b=sim:compliant")] == [
        ("a", "sim"), ("b", "sim:compliant")]
    assert [(m.name, m.agents) for m in parse_models("openai/gpt-4o")] == [
        ("openai/gpt-4o", "llm:openai/gpt-4o")]
    with pytest.raises(GridError, match="neither an offline agent profile"):
        parse_models("gpt-4o")
    with pytest.raises(GridError, match="twice"):
        parse_models("a=sim,a=sim:reckless")
    assert parse_names("all") is None
    assert parse_names("b, a,b") == ["b", "a"]


def test_attempt_seeds_are_fresh_and_stable() -> None:
    """Attempt 0 of replicate 0 runs with the grid seed; retries and replicates never collide."""
    cell = Cell("d1", "sim", "canonical", "hr-1", 2, 0)
    first = Attempt(cell, 0, "sim")
    assert first.run_seed == 2
    assert first.next().run_seed == 1_000_002
    assert run_seed(2, 1, 0) == 1002
    seeds = {run_seed(s, r, a) for s in range(20) for r in range(3) for a in range(3)}
    assert len(seeds) == 20 * 3 * 3


def test_model_folder_names_are_safe() -> None:
    """Model names become folder names without path separators or collisions."""
    assert slug("sim") == "sim"
    assert "/" not in slug("openai/gpt-4o") and ":" not in slug("sim:reckless")
    assert slug("a:b") != slug("a_b")
