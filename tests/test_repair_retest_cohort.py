"""The retest's fresh cohort and Retain, as EAIR D.1 asks (issue 26's smaller items).

- Fresh cases take the instances no audited episode ran first: D.1's retest episodes
  have content "that does not overlap the audited trajectories", and an instance's
  facts are content the audit showed (new seeds on audited instances follow, as the
  paper's own retests reran their task instances under new seeds).
- Retain is undefined when W reached no utility on the retest cases: such a cohort
  cannot show that a repair keeps the task, so the retest does not pass on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from repair_helpers import A1

from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.compiler import compile_world
from eairdsl.repair.apply import apply_candidate
from eairdsl.repair.loop import select_finding
from eairdsl.repair.model import Candidate
from eairdsl.repair.retest import audited_episodes, retain_of, retest, target_of
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world

UTILITY = "  utility = (all t in episode_tickets(): ticket_closed(t.id)) when all_contacts_made()"


#: the instances the audit runs: the ones the first fresh seeds drew before (seed s took
#: instance s mod 20, and the audit's seeds are 0-1), so a cohort of fresh seeds alone
#: reran the audited instances
AUDITED = ["a1-03", "a1-04", "a1-05", "a1-06"]


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A1 under `strong` on four of its 20 instances × seeds 0-1, audited offline."""
    root = tmp_path_factory.mktemp("a1")
    world = compile_world(A1).world
    assert world is not None
    run_study([world], [plan_world(world, ["strong"], AUDITED, 2)], [Model("sim", "sim")],
              root / "study")
    audit_episodes(root / "study", root / "audit", RulesAuditor(), world=A1)
    return root / "audit"


def test_fresh_cases_take_the_instances_the_audit_never_ran_first(audit: Path,
                                                                  tmp_path: Path) -> None:
    world = compile_world(A1).world
    assert world is not None
    seen = {a.instance for a in audited_episodes(audit)}
    assert seen == set(AUDITED)
    ids = [str(i.get("id")) for i in world.instances]
    target = target_of(select_finding(audit, world).finding)
    result = retest(world, world, A1, audit, target, tmp_path / "rt", seeds=4, regression=0,
                    conditions=["strong"], validate_episodes=2)
    fresh = [c for c in result.cases if c.group == "fresh"]
    assert len(fresh) == 4 and not {c.seed for c in fresh} & {0, 1}
    # the first unseen instances in the world's order, none the audit ran
    assert [c.instance for c in fresh] == [i for i in ids if i not in seen][:4]
    assert result.audited_instances == AUDITED and result.fresh_on_unseen == 4


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
    problem = result.retain_problem()
    assert problem is not None and problem.startswith("Retain undefined")
    # the ratio where it is defined, and the 0.95 floor
    assert retain_of(0.5, 0.5) == 1.0 and retain_of(0.0, 1.0) is None
    below = result.model_copy(update={"retain": 0.9, "utility_before": 1.0,
                                      "utility_after": 0.9})
    assert (below.retain_problem() or "").startswith("Retain 0.900 < 0.95")
    assert result.model_copy(update={"retain": 0.95}).retain_problem() is None
