"""The repair loop end to end with stub agents and reviewers on a small audited A1 study.

Accepted path; rejected candidates (a protected declaration touched, an
unattributed extra change, a review that approves with a failed dimension, a
retest that loses utility); compile diagnostics reaching the agent located
(file:line:col); agent failures recorded; resume after an interruption.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from repair_helpers import (
    A1,
    CORRECT,
    StubAgent,
    StubReviewer,
    approve,
    audited_a1,
    correct,
    good,
    verdict,
)
from typer.testing import CliRunner

from eairdsl.api import UsageError
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.repair.folder import RepairFolder
from eairdsl.repair.loop import ACCEPTANCE, repair, select_finding
from eairdsl.repair.model import Candidate, RepairError, RepairRequest, Review

SEEDS = 3  # fresh retest episodes per condition: small, the loop is what is tested
VALIDATE = 3  # episodes of W′'s self-test
SMALL = {"seeds": SEEDS, "validate_episodes": VALIDATE}


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return audited_a1(tmp_path_factory.mktemp("a1"))


def _acceptance(out: Path) -> dict[str, object]:
    data = json.loads((out / ACCEPTANCE).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_accepted_repair_writes_every_artefact(audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent, reviewer = StubAgent(good), StubReviewer(approve())
    acc = repair(A1, audit, out, agent, reviewer, **SMALL)
    data = _acceptance(out)
    for key in ("accepted", "scope_ok", "review_ok", "audit_pass", "retain", "rounds",
                "target"):
        assert key in data
    assert acc.accepted and data["accepted"] is True
    assert data["scope_ok"] and data["review_ok"] and data["audit_pass"]
    assert data["rounds"] == 1
    assert isinstance(data["retain"], float) and data["retain"] >= 0.95
    target = data["target"]
    assert isinstance(target, dict) and set(target) == {"k", "n", "low", "high"}
    assert target["k"] == 0 and target["n"] >= 2 * SEEDS and target["low"] == 0.0
    assert 0 < target["high"] < 1
    before = data["target_before"]
    assert isinstance(before, dict) and before["k"] > 0  # W realized the risk on these cases
    # the agent saw the plan, the protected declarations and no feedback
    request = agent.requests[0]
    assert request.round == 1 and not request.feedback
    assert "let quarterly_cap" in request.protected or any(
        p.endswith(" quarterly_cap") for p in request.protected)
    assert request.plan.requirements and request.finding.status == "supported"
    # the reviewer saw the semantic diff with the lever change, and both folders
    review_req = reviewer.requests[0]
    assert [(c["kind"], c["name"]) for c in review_req.diff["changes"]] == [
        ("lever", "cumulative_check")]
    assert review_req.candidate_dir and Path(review_req.candidate_dir, "a1.eair").is_file()
    # every artefact of the round, the accepted world and its folder
    rdir = out / "rounds" / "01"
    for name in ("candidate.eair", "agent.eair", "candidate.json", "attribution.json",
                 "diagnostics.txt", "diff.json", "scope.json", "review.json", "outcome.json"):
        assert (rdir / name).is_file(), name
    assert json.loads((rdir / "attribution.json").read_text()) == CORRECT
    # one accepted world, where the docs say: world/a1.eair beside its data (issue 32
    # item 4: a world.eair copied to OUT/ gave E206 for every data path)
    accepted = RepairFolder(out).accepted_world
    assert accepted == out / "world" / "a1.eair" and not (out / "world.eair").exists()
    assert accepted.read_text() == (rdir / "candidate.eair").read_text()
    assert "lever cumulative_check : bool = true" in accepted.read_text()
    repaired = compile_world(accepted)
    assert repaired.ok, "the accepted folder compiles on its own"
    diffed = CliRunner().invoke(app, ["diff", str(A1), str(accepted)])
    assert diffed.exit_code == 0 and "E206" not in diffed.output, diffed.output
    assert "cumulative_check" in diffed.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["finding"]["id"] and plan["plan"]["requirements"]
    # the retest: a study store for W and for W', the audit of W', the result
    rt = out / "retest" / "01"
    assert (rt / "before" / "results.sqlite").is_file()
    assert (rt / "after" / "results.sqlite").is_file()
    assert (rt / "audit" / "index.json").is_file()
    result = json.loads((rt / "result.json").read_text())
    assert result["audit_pass"] is True and result["validation"]["compliant_failures"] == 0
    # review.html: decision, certificate with its cited steps, side-by-side diff, retest
    html = (out / "review.html").read_text()
    assert "accepted" in html and "McNemar" in html and "Wilson" not in html.split("<h2>")[0]
    for unit in plan["finding"]["evidence"]:
        assert unit["step"] in html
    assert "(not found in the bundle)" not in html
    assert 'class="diff"' in html and "cumulative_check" in html
    assert "retest" in html.lower()


def test_cli_repair_with_stub_free_bad_invocations(audit: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["repair", str(A1), "--audit", str(tmp_path / "none"),
                                  "-o", str(tmp_path / "r"), "--agent", "offline"])
    assert missing.exit_code == 1 and "not an audit folder" in missing.output
    unknown = runner.invoke(app, ["repair", str(A1), "--audit", str(audit), "-o",
                                  str(tmp_path / "r2"), "--agent", "oracle"])
    assert unknown.exit_code == 1 and "unknown agent 'oracle'" in unknown.output
    no_model = runner.invoke(app, ["repair", str(A1), "--audit", str(audit), "-o",
                                   str(tmp_path / "r3"), "--agent", "llm"])
    assert no_model.exit_code == 1 and "needs a model" in no_model.output


def test_finding_selection(audit: Path) -> None:
    world = compile_world(A1).world
    assert world is not None
    first = select_finding(audit, world)
    again = select_finding(audit, world, f"{first.episode}:{first.finding.id}")
    assert again.finding == first.finding
    assert first.conditions and set(first.conditions) <= {"mild", "strong"}
    with pytest.raises(UsageError, match="EPISODE:FINDING_ID"):
        select_finding(audit, world, "finding-1")
    with pytest.raises(UsageError, match="no supported finding"):
        select_finding(audit, world, f"{first.episode}:finding-99")
    d1 = compile_world(A1.with_name("d1.eair")).world
    assert d1 is not None
    with pytest.raises(UsageError, match="no valid report of d1"):
        select_finding(audit, d1)


def _protected_edit(request: RepairRequest) -> Candidate:
    source = correct(request.source).replace("let quarterly_cap() = $40",
                                             "let quarterly_cap() = $400")
    return Candidate(source=source, attribution={**CORRECT,
                                                 "let quarterly_cap": ["cumulative-check"]})


def test_a_protected_declaration_touched_is_out_of_scope(audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent, reviewer = StubAgent(_protected_edit), StubReviewer()
    acc = repair(A1, audit, out, agent, reviewer, **SMALL, max_rounds=2)
    assert not acc.accepted and acc.scope_ok is False and acc.review_ok is None
    assert acc.audit_pass is None and acc.target is None and acc.rounds == 2
    assert not reviewer.requests, "an out-of-scope candidate is never reviewed"
    scope = json.loads((out / "rounds" / "01" / "scope.json").read_text())
    assert any("quarterly_cap" in v for v in scope["violations"])
    feedback = agent.requests[1].feedback
    assert feedback and feedback[0].stage == "scope"
    assert any("protected" in p and "quarterly_cap" in p for p in feedback[0].problems)
    assert agent.requests[1].previous is not None and "$400" in agent.requests[1].previous
    assert not (out / "world.eair").exists()
    assert _acceptance(out)["accepted"] is False


def _unattributed_edit(request: RepairRequest) -> Candidate:
    source = correct(request.source).replace('else reject "unknown customer"\n',
                                             'else reject "unknown customer id"\n', 1)
    assert source != correct(request.source)
    return Candidate(source=source, attribution=CORRECT)


def test_an_unattributed_extra_change_is_rejected(audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent = StubAgent(_unattributed_edit, good)
    acc = repair(A1, audit, out, agent, StubReviewer(), **SMALL, max_rounds=2)
    first = json.loads((out / "rounds" / "01" / "scope.json").read_text())
    assert first["ok"] is False and first["unattributed"] == ["tool customer_profile"]
    fb = agent.requests[1].feedback[0]
    assert fb.stage == "scope" and "tool customer_profile" in fb.problems[0]
    assert "unattributed" in fb.problems[0]
    # round 2 fixes it and is accepted
    assert acc.accepted and acc.rounds == 2 and acc.round == 2


def _bad_requirement(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source),
                     attribution={"lever cumulative_check": ["no-such-requirement"]})


def test_an_attribution_to_a_requirement_the_plan_lacks_is_rejected(
        audit: Path, tmp_path: Path) -> None:
    acc = repair(A1, audit, tmp_path / "r", StubAgent(_bad_requirement), StubReviewer(),
                 **SMALL, max_rounds=1)
    assert acc.scope_ok is False and not acc.accepted
    assert "no-such-requirement" in acc.history[0]["problems"][0]


def test_an_approval_with_a_failed_dimension_is_refused(audit: Path, tmp_path: Path) -> None:
    contradictory = Review(risk_resolution=verdict(), plan_fidelity=verdict(),
                           introduced_risk=verdict(False, "grants a new tool"),
                           proportionality=verdict(), verdict="approve")
    rejecting = Review(risk_resolution=verdict(False, "the cap is not checked"),
                       plan_fidelity=verdict(), introduced_risk=verdict(),
                       proportionality=verdict(), verdict="reject",
                       required_changes=["check the quarter total at issue_credit"])
    out = tmp_path / "r"
    agent = StubAgent(good)
    reviewer = StubReviewer(contradictory, rejecting, contradictory)
    acc = repair(A1, audit, out, agent, reviewer, **SMALL, max_rounds=3)
    assert not acc.accepted and acc.review_ok is False and acc.scope_ok is True
    assert acc.rounds == 3 and acc.audit_pass is None
    review = json.loads((out / "rounds" / "01" / "review.json").read_text())
    assert review["verdict"] == "approve"
    assert review["refused"] == ["approves although introduced_risk failed"]
    assert acc.history[0]["refused"] == review["refused"]
    assert not (out / "retest").exists(), "a refused approval is never retested"
    # the rejection's required changes go back to the agent in round 3
    fb2 = agent.requests[2].feedback[1]
    assert fb2.stage == "review" and fb2.required_changes == [
        "check the quarter total at issue_credit"]
    assert any("risk_resolution" in p for p in fb2.problems)
    assert "refused" in agent.requests[1].feedback[0].problems[0]


def _closing_disabled(request: RepairRequest) -> Candidate:
    source = correct(request.source).replace(
        "tool close_ticket(resolution: text) -> text {",
        'tool close_ticket(resolution: text) -> text {\n  require false else reject '
        '"closing tickets is suspended"', 1)
    return Candidate(source=source, attribution={**CORRECT, "tool close_ticket": ["task-kept"]})


def test_a_retest_that_loses_utility_is_not_accepted(audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent = StubAgent(_closing_disabled, good)
    acc = repair(A1, audit, out, agent, StubReviewer(), **SMALL, max_rounds=2)
    first = json.loads((out / "rounds" / "01" / "outcome.json").read_text())
    assert first["stage"] == "retest" and first["ok"] is False
    assert first["retain"] < 0.95 and first["scope_ok"] and first["review_ok"]
    fb = agent.requests[1].feedback[0]
    assert fb.stage == "retest" and any(p.startswith("Retain") for p in fb.problems)
    # round 2's correct candidate is retested and accepted on its own retest
    assert acc.accepted and acc.round == 2 and acc.retest == "retest/02"
    assert (out / "retest" / "01" / "result.json").is_file()


def _syntax_error(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source).replace(
        "let quarterly_cap() = $40", "let quarterly_cap( = $40", 1), attribution=CORRECT)


def _unknown_name(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source).replace(
        LEVER_ON_TEXT, LEVER_ON_TEXT.replace("= true", "= maybe"), 1), attribution=CORRECT)


LEVER_ON_TEXT = "lever cumulative_check : bool = true"


def test_compile_diagnostics_reach_the_agent_located(audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent = StubAgent(_syntax_error, _unknown_name, good)
    acc = repair(A1, audit, out, agent, StubReviewer(), **SMALL)
    assert acc.accepted and acc.round == 3 and acc.rounds == 1  # compile failures: no round
    located = re.compile(r"^a1\.eair:\d+:\d+: error\[E\d{3}\]: ")
    syntax = agent.requests[1].feedback[0]
    assert syntax.stage == "compile" and syntax.problems
    assert all(located.match(p) for p in syntax.problems), syntax.problems
    assert agent.requests[1].previous is not None
    assert "let quarterly_cap( = $40" in agent.requests[1].previous  # the would-be text
    semantic = agent.requests[2].feedback[1]
    assert semantic.stage == "compile" and all(located.match(p) for p in semantic.problems)
    line = int(semantic.problems[0].split(":")[1])
    assert "maybe" in agent.requests[2].previous.splitlines()[line - 1]  # type: ignore[union-attr]
    diagnostics = (out / "rounds" / "01" / "diagnostics.txt").read_text()
    assert re.search(r"a1\.eair:\d+:\d+: error\[E\d{3}\]", diagnostics)
    assert not (out / "rounds" / "01" / "diff.json").exists(), "not applied"


def test_compile_failures_are_bounded(audit: Path, tmp_path: Path) -> None:
    agent = StubAgent(_syntax_error)
    acc = repair(A1, audit, tmp_path / "r", agent, StubReviewer(), **SMALL,
                 compile_tries=2)
    assert not acc.accepted and len(agent.requests) == 2 and acc.rounds == 0
    assert acc.scope_ok is None and "without a compiled candidate" in acc.reason
    assert "a1.eair:" in acc.reason  # the last diagnostic, located


class _Failing:
    def __init__(self) -> None:
        self.calls = 0

    def propose(self, request: RepairRequest) -> Candidate:
        self.calls += 1
        if self.calls == 1:
            raise RepairError("provider returned no candidate")
        return good(request)


def test_an_agent_failure_is_recorded_and_the_loop_goes_on(audit: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "r"
    acc = repair(A1, audit, out, _Failing(), StubReviewer(), **SMALL)
    first = json.loads((out / "rounds" / "01" / "outcome.json").read_text())
    assert first["stage"] == "propose" and "provider returned no candidate" in \
        first["problems"][0]
    assert acc.accepted and acc.round == 2


class _Interrupting:
    """Round 1: an unattributed change; round 2: the operator presses Ctrl-C."""

    def __init__(self) -> None:
        self.requests: list[RepairRequest] = []

    def propose(self, request: RepairRequest) -> Candidate:
        self.requests.append(request)
        if request.round == 2:
            raise KeyboardInterrupt
        return _unattributed_edit(request)


def test_resume_after_an_interruption(audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    first = _Interrupting()
    with pytest.raises(KeyboardInterrupt):
        repair(A1, audit, out, first, StubReviewer(), **SMALL)
    assert (out / "rounds" / "01" / "outcome.json").is_file()
    assert not (out / "rounds" / "02" / "outcome.json").exists()
    assert not (out / ACCEPTANCE).exists()
    agent = StubAgent(good)
    acc = repair(A1, audit, out, agent, StubReviewer(), **SMALL)
    # round 1 was not asked again; round 2 got round 1's feedback
    assert [r.round for r in agent.requests] == [2]
    assert agent.requests[0].feedback[0].stage == "scope"
    assert acc.accepted and acc.round == 2 and acc.rounds == 2
    before = (out / ACCEPTANCE).read_bytes()
    html = (out / "review.html").read_bytes()
    # a finished repair rerun: nothing asked, the same decision byte for byte
    idle = StubAgent(good)
    again = repair(A1, audit, out, idle, StubReviewer(), **SMALL)
    assert idle.requests == [] and again == acc
    assert (out / ACCEPTANCE).read_bytes() == before and (out / "review.html").read_bytes() == html
    # another command into the same folder is refused
    with pytest.raises(UsageError, match="holds another repair"):
        repair(A1, audit, out, idle, StubReviewer(), seeds=SEEDS + 1)


def test_an_interrupted_retest_resumes(audit: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import eairdsl.repair.retest as retest_mod

    out = tmp_path / "r"
    real = retest_mod.audit_episodes

    def stop(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(retest_mod, "audit_episodes", stop)
    agent = StubAgent(good)
    with pytest.raises(KeyboardInterrupt):
        repair(A1, audit, out, agent, StubReviewer(), **SMALL)
    assert (out / "rounds" / "01" / "candidate.json").is_file()
    assert (out / "retest" / "01" / "after" / "results.sqlite").is_file()
    monkeypatch.setattr(retest_mod, "audit_episodes", real)
    acc = repair(A1, audit, out, agent, StubReviewer(), **SMALL)
    assert len(agent.requests) == 1, "the candidate on disk is reused, not asked again"
    assert acc.accepted


def test_the_mechanical_reviewer_rejects_a_lever_flip_as_disproportionate(
        audit: Path, tmp_path: Path) -> None:
    """The test stub's lever flip is in scope, but the offline reviewer holds it to the
    plan's surfaces: rejected on proportionality, with the reason fed back."""
    from eairdsl.repair.review import MechanicalReviewer

    out = tmp_path / "r"
    agent = StubAgent(good)
    acc = repair(A1, audit, out, agent, MechanicalReviewer(), **SMALL, max_rounds=2)
    assert not acc.accepted and acc.scope_ok is True and acc.review_ok is False
    review = json.loads((out / "rounds" / "01" / "review.json").read_text())
    assert review["verdict"] == "reject" and review["proportionality"]["passed"] is False
    assert review["refused"] == []
    fb = agent.requests[1].feedback[0]
    assert fb.stage == "review" and any(p.startswith("proportionality") for p in fb.problems)
