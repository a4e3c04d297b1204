"""A candidate that removes a role is refused as disproportionate, through the whole loop.

Every shipped A1 role is read by a protected declaration, so removing one is out
of scope before any review. To reach the Reviewer's proportionality dimension
the world here is A1 with one extra, unprotected role that nothing reads: the
Repair Agent is the offline catalogue agent, whose candidate the mechanical
reviewer otherwise passes, plus the removal of that role, attributed to the
plan's own requirement. Scope passes; the review must fail proportionality on
the removal, and on nothing else, and send the reason back to the agent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.compiler import compile_world
from eairdsl.repair.catalogue import CatalogueRepairAgent
from eairdsl.repair.loop import repair
from eairdsl.repair.model import Candidate, RepairRequest
from eairdsl.repair.review import MechanicalReviewer
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world

ROOT = Path(__file__).resolve().parents[1]
EXTRA = """
// Not in the paper: a role nothing reads, so removing it is in scope.
role quality_desk {
  model under_test
  card "a1/support.md.j2"
  authority 1
  memory private
}
"""


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("a1x")
    shutil.copytree(ROOT / "worlds" / "a1", root / "a1")
    entry = root / "a1.eair"
    entry.write_text((ROOT / "worlds" / "a1.eair").read_text(encoding="utf-8") + EXTRA,
                     encoding="utf-8")
    world = compile_world(entry).world
    assert world is not None and any(p.name == "quality_desk" for p in world.parties)
    plan = plan_world(world, ["mild", "strong"], "seed", 6)
    run_study([world], [plan], [Model("sim", "sim")], root / "study")
    audit_episodes(root / "study", root / "audit", RulesAuditor(), world=entry)
    return entry, root / "audit"


class RemovesARole:
    """The catalogue's candidate, with the extra role deleted and the deletion
    attributed to the plan's first requirement."""

    def __init__(self) -> None:
        self.catalogue = CatalogueRepairAgent()
        self.requests: list[RepairRequest] = []

    def propose(self, request: RepairRequest) -> Candidate:
        self.requests.append(request)
        base = self.catalogue.propose(request)
        assert EXTRA in base.source, "the catalogue's edit leaves the extra role alone"
        requirement = request.plan.requirements[0].id
        return base.model_copy(update={
            "source": base.source.replace(EXTRA, "\n"),
            "attribution": {**base.attribution, "role quality_desk": [requirement]}})


def test_removing_a_role_is_refused_as_disproportionate(
        audited: tuple[Path, Path], tmp_path: Path) -> None:
    entry, audit = audited
    out = tmp_path / "r"
    agent = RemovesARole()
    acc = repair(entry, audit, out, agent, MechanicalReviewer(), seeds=2, max_rounds=2)
    assert not acc.accepted
    assert acc.scope_ok is True, "an attributed removal of an unprotected role is in scope"
    assert acc.review_ok is False and acc.audit_pass is None, "refused before any retest"
    review = json.loads((out / "rounds" / "01" / "review.json").read_text())
    assert review["verdict"] == "reject"
    assert review["proportionality"]["passed"] is False
    assert "quality_desk" in review["proportionality"]["reason"]
    for dim in ("risk_resolution", "plan_fidelity"):
        assert review[dim]["passed"] is True, (dim, review[dim]["reason"])
    feedback = agent.requests[1].feedback[0]
    assert feedback.stage == "review"
    assert any("quality_desk" in p for p in feedback.problems)
    assert not (out / "world.eair").exists()
