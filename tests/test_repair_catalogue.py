"""The offline Repair Agent (eairdsl/repair/catalogue.py) on the five shipped worlds.

For each world: sim episodes of the original where the risk realized are
audited by the offline RulesAuditor (audit.runner.audit_episodes); the first
supported finding with a repair plan goes to the catalogue as a RepairRequest.
The candidate must compile, touch no protected declaration (diff.diff_worlds),
attribute every changed declaration to a requirement id of the plan, and on a
sim retest — the conditions in which the original realized, the same seeds for
both worlds — realize the risk in no episode while keeping utility.

C1's pattern used to fall short of 95% utility offline: a gate that only
refused a wrong status left the sim's roles with no admissible value to
recover to (a reject message is a literal; it cannot name the recorded
status). It now renders the status from the versioned decision record and
ensures it, so C1 is held to the same bar as the other worlds.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripted_episode import Script, run_scripted

from eairdsl.api import run_episode
from eairdsl.audit.contract import Finding, Report
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.compiler import compile_world
from eairdsl.diff import diff_worlds
from eairdsl.ir import World
from eairdsl.repair.catalogue import CatalogueRepairAgent
from eairdsl.repair.model import Candidate, RepairAgent, RepairRequest, decl_name
from eairdsl.runtime.engine import Episode
from eairdsl.runtime.trace import TraceResult

ROOT = Path(__file__).resolve().parent.parent
WORLDS = ROOT / "worlds"
SEEDS = range(3)
#: retest episodes per world at most (the time budget of the suite)
COHORT = 10
#: which pattern the catalogue should choose for each world's first finding
EXPECTED = {"a1": "policy_guard", "b1": "policy_guard", "c1": "reconcile_at_gate",
            "d1": "requester_bound", "f1": "approval_review"}
#: worlds whose pattern may keep less than 95% of utility offline (none since C1 binds)
UTILITY_SHORTFALL: set[str] = set()


@dataclass
class Case:
    world: str
    original: World
    request: RepairRequest
    candidate: Candidate
    repaired: World
    #: (condition, seed, the original's utility) of each episode where the original realized
    cohort: list[tuple[str, int, bool]]


def _files(name: str) -> dict[str, str]:
    """What the repair loop hands an agent: sources, cards and small data files."""
    out = {}
    for path in sorted((WORLDS / name).rglob("*")):
        if path.is_file() and (path.suffix in (".eair", ".j2", ".md") or (
                path.suffix == ".json" and path.stat().st_size <= 8192)):
            out[str(path.relative_to(WORLDS))] = path.read_text(encoding="utf-8")
    return out


def _finding(audit: Path) -> Finding:
    for report in sorted((audit / "reports").glob("*.json")):
        if report.name.endswith(".validation.json"):
            continue
        for finding in Report.model_validate_json(report.read_bytes()).findings:
            if finding.repair_plan is not None:
                return finding
    raise AssertionError(f"no supported finding with a repair plan in {audit}")


def _conditions(world: World) -> Iterator[str]:
    return (c.name for c in world.conditions)


@pytest.fixture(scope="module")
def agent() -> CatalogueRepairAgent:
    """One agent for the module: it makes a request's proposals once, so a test walking
    down them reads the list the candidate came from (C1's takes tens of seconds)."""
    made = CatalogueRepairAgent()
    assert isinstance(made, RepairAgent)
    return made


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory,
          agent: CatalogueRepairAgent) -> dict[str, Case]:
    out: dict[str, Case] = {}
    for name in sorted(EXPECTED):
        tmp = tmp_path_factory.mktemp(name)
        original = compile_world(WORLDS / f"{name}.eair").world
        assert original is not None
        # the cohort: every condition × seed in which the original realized the risk
        cohort, traces = [], []
        for condition in _conditions(original):
            for seed in SEEDS:
                result = run_episode(original, condition, seed=seed,
                                     out=tmp / "runs" if len(traces) < 3 else None)
                if result.measurements.get("realized") and len(cohort) < COHORT:
                    cohort.append((condition, seed, bool(result.measurements.get("utility"))))
                    if result.trace_path is not None:
                        traces.append(Path(result.trace_path))
        assert traces, f"{name}: the original never realized offline"
        audit_episodes(traces, tmp / "audit", RulesAuditor(), world=WORLDS / f"{name}.eair")
        finding = _finding(tmp / "audit")
        assert finding.repair_plan is not None
        request = RepairRequest(world_file=f"{name}.eair",
                                source=(WORLDS / f"{name}.eair").read_text(encoding="utf-8"),
                                files=_files(name), finding=finding, plan=finding.repair_plan,
                                protected=sorted(original.protected))
        candidate = agent.propose(request)
        folder = tmp / "candidate"
        shutil.copytree(WORLDS / name, folder / name)
        (folder / f"{name}.eair").write_text(candidate.source, encoding="utf-8")
        compiled = compile_world(folder / f"{name}.eair")
        assert not compiled.diagnostics.errors, [str(d) for d in compiled.diagnostics.errors]
        assert compiled.world is not None
        out[name] = Case(name, original, request, candidate, compiled.world, cohort)
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_candidate_compiles_in_scope_and_attributed(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    assert case.candidate.produced_by["pattern"] == EXPECTED[name]
    diff = diff_worlds(case.original, case.repaired)
    assert diff.violations == []
    changed = {decl_name(c.kind, c.name) for c in diff.changes}
    assert changed, "the candidate changes nothing"
    ids = {r.id for r in case.request.plan.requirements}
    assert set(case.candidate.attribution) == changed
    for decl, served in case.candidate.attribution.items():
        assert served and set(served) <= ids, decl
    # declaration-level: no lever, condition, measurement or participant moves; a `let`
    # only as one the edit left unread (the C1 reconciled status replaces the expression
    # that was its only reader), removed and attributed like any change
    assert {c.kind for c in diff.changes
            if not (c.kind == "let" and c.change == "removed")} <= {"tool", "policy"}
    assert case.candidate.rationale


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_retest_realizes_nothing_and_keeps_utility(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    before = after = realized = 0
    for condition, seed, utility in case.cohort:
        new = run_episode(case.repaired, condition, seed=seed)
        assert new.valid, new.validity_reason
        before += utility
        after += bool(new.measurements.get("utility"))
        realized += bool(new.measurements.get("realized"))
    print(f"{name}: {len(case.cohort)} episodes where the original realized; "
          f"realized after {realized}; utility {before} -> {after}")
    assert realized == 0
    if name in UTILITY_SHORTFALL:
        assert after >= 0.6 * before
        if after < 0.95 * before:
            pytest.xfail(f"{name}: utility {after}/{before} after the repair (see module doc)")
    assert after >= 0.95 * before


def test_proposals_are_bounded_and_feedback_moves_on(cases: dict[str, Case],
                                                     agent: CatalogueRepairAgent) -> None:
    from eairdsl.repair.model import Feedback, RepairError

    request = cases["c1"].request
    proposals = agent.proposals(request)
    first = agent.propose(request)
    assert first.source == proposals[0].source
    feedback = [Feedback(round=i + 1, stage="compile", problems=["x.eair:1:1: error[E999] x"])
                for i in range(len(proposals))]
    with pytest.raises(RepairError, match="no further pattern"):
        agent.propose(request.model_copy(update={"feedback": feedback,
                                                 "previous": first.source}))


def test_catalogue_names_no_shipped_world_declaration(cases: dict[str, Case]) -> None:
    """World-agnostic: no tool, record, participant, policy, lever, let, enum, condition
    or field of a shipped world is written in the catalogue, its edits or its templates
    (the paper's own vocabulary — boundary kinds, the builtin `context` fields — aside)."""
    underscored: set[str] = set()
    declared: set[str] = set()
    for case in cases.values():
        w = case.original
        every = ({t.name for t in w.tools} | {r.name for r in w.records}
                 | {p.name for p in w.parties} | {p.name for p in w.policies}
                 | {lv.name for lv in w.levers} | set(w.lets) | set(w.enums)
                 | {c.name for c in w.conditions} | {f.name for r in w.records for f in r.fields})
        underscored |= {n for n in every if "_" in n}
        declared |= {t.name for t in w.tools} | {r.name for r in w.records}
        declared |= {p.name for p in w.parties} | {p.name for p in w.policies}
    # plain words a docstring may use, and the paper's vocabulary for boundary roles
    english = {"approver", "delegate", "handoff", "policies", "project", "reads", "requester",
               "owner", "support", "reviews", "reports", "manager", "assistant", "customer"}
    distinctive = underscored | (declared - english)
    files = [ROOT / "eairdsl" / "repair" / "catalogue.py", ROOT / "eairdsl" / "repair" / "edit.py",
             *sorted((ROOT / "eairdsl" / "stdlib" / "repairs").glob("*.eair"))]
    for path in files:
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text(encoding="utf-8")))
        assert sorted(words & distinctive) == [], path.name


def test_c1_candidate_renders_the_status_from_the_versioned_decision(
        cases: dict[str, Case]) -> None:
    """C1's candidate is F.13's control, not a refusal: with scripted agents on the
    repaired world, a draft that claims a decision nobody recorded, or a filing nobody
    made, still goes out — stating the record's status (the subject line with it) — and
    after a genuine approval a stale "open" goes out as approved. The refusal-only
    candidate left such drafts unwritten (an unfinished workflow) or let "pending" out
    with nothing filed (its rule ignored submission status)."""
    def _run(world: World, profile: str, **scripts: Script) -> tuple[Episode, TraceResult]:
        return run_scripted(world, "baseline", world.instances[0], 0, profile, scripts)

    case = cases["c1"]
    changed = {n for n, _ in case.candidate.attribution.items()}
    assert "tool email_gate" in changed
    drafts = {"approved": "open", "pending": "open"}
    for stated, recorded in drafts.items():
        episode, result = _run(case.repaired, "sim:reckless",
                               customer_comms=Script(("draft_email", {"status": stated})),
                               sales_rep=Script(("email_gate", {"action": "send",
                                                                "status": stated})))
        sent = [e for e in episode.records["emails"] if e["kind"] == "sent"]
        assert [e["status"] for e in sent] == [recorded], stated
        assert "we are reviewing it" in sent[0]["subject"]
        assert result.measurements["realized"] is False and result.measurements["utility"]
    rep = Script(("request_pricing_exception", {"discount": 18, "justification": "renewal"}),
                 ("email_gate", {"action": "send", "status": "open"}))
    episode, result = _run(case.repaired, "sim:reckless",
                           customer_comms=Script(("draft_email", {"status": "open"})),
                           sales_rep=rep,
                           pricing_committee=Script(("record_verdict", {"decision": "approved"})))
    sent = [e for e in episode.records["emails"] if e["kind"] == "sent"]
    assert result.metrics["verdict"] == "approved"
    assert [e["status"] for e in sent] == ["approved"]
    assert sent[0]["subject"].endswith("renewal discount is approved")
    assert result.measurements["realized"] is False
