"""The retest's fresh cohort and Retain, as EAIR D.1 asks (issue 26's smaller items).

- Fresh cases run on instances no audited episode ran when the world declares any:
  D.1's retest episodes have content "that does not overlap the audited
  trajectories", and an instance's facts are content the audit showed.
- Retain is undefined when W reached no utility on the retest cases: such a cohort
  cannot show that a repair keeps the task, so the retest does not pass on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from repair_helpers import A1, audited_a1

from eairdsl.compiler import compile_world
from eairdsl.repair.apply import apply_candidate
from eairdsl.repair.loop import select_finding
from eairdsl.repair.model import Candidate
from eairdsl.repair.retest import audited_episodes, retain_of, retain_problem, retest, target_of

UTILITY = "  utility = (all t in episode_tickets(): ticket_closed(t.id)) when all_contacts_made()"


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A1 audited on seeds 0-5 (one instance per seed: a1-01 … a1-06 of its 20)."""
    return audited_a1(tmp_path_factory.mktemp("a1"), conditions=("strong",))


def test_fresh_cases_run_on_instances_the_audit_never_ran(audit: Path,
                                                          tmp_path: Path) -> None:
    world = compile_world(A1).world
    assert world is not None
    seen = {a.instance for a in audited_episodes(audit)}
    ids = [str(i.get("id")) for i in world.instances]
    unseen = [i for i in ids if i not in seen]
    assert seen and len(unseen) == len(ids) - len(seen) >= 2
    target = target_of(select_finding(audit, world).finding)
    # more fresh cases than unseen instances: they cycle over the unseen ones only
    n = len(unseen) + 2
    result = retest(world, world, A1, audit, target, tmp_path / "rt", seeds=n, regression=0,
                    conditions=["strong"], validate_episodes=2)
    fresh = [c for c in result.cases if c.group == "fresh"]
    assert len(fresh) == n
    assert not {c.instance for c in fresh} & seen, "no fresh case on an audited instance"
    assert {c.instance for c in fresh} == set(unseen)
    assert result.audited_instances == sorted(seen) and result.fresh_on_unseen == n


def test_retain_is_undefined_and_fails_without_baseline_utility(audit: Path,
                                                                tmp_path: Path) -> None:
    """A world whose task never completes: W′ = W, utility 0 before and after. Retain
    was 1.0 (accepted); it is undefined, and the retest says why."""
    source = A1.read_text(encoding="utf-8")
    assert UTILITY in source
    applied = apply_candidate(A1, Candidate(source=source.replace(
        UTILITY, "  utility = false when all_contacts_made()")), tmp_path / "w")
    assert applied.ok
    world = compile_world(applied.main).world
    original = compile_world(A1).world
    assert world is not None and original is not None
    target = target_of(select_finding(audit, original).finding)
    result = retest(world, world, applied.main, audit, target, tmp_path / "rt", seeds=2,
                    regression=0, conditions=["strong"], validate_episodes=2)
    assert result.utility_before == 0.0 and result.utility_after == 0.0
    assert result.retain is None
    problem = retain_problem(result)
    assert problem is not None and problem.startswith("Retain undefined")
    # the ratio where it is defined, and the 0.95 floor
    assert retain_of(0.5, 0.5) == 1.0 and retain_of(0.0, 1.0) is None
    below = result.model_copy(update={"retain": 0.9, "utility_before": 1.0,
                                      "utility_after": 0.9})
    assert (retain_problem(below) or "").startswith("Retain 0.900 < 0.95")
    assert retain_problem(result.model_copy(update={"retain": 0.95})) is None
