"""The LLM Repair Agent and LLM Reviewer (issue 16 items 2–3) against scripted models, offline.

A `CustomLLM` (tests/scripted_llm.py) registered under the provider name
`repairscripted` plays the model from a queue of per-call scripts (litellm's
custom-provider hook) and records every request, so the tests read exactly
what was sent: the marked source, the plan, the loop's feedback with the
compiler's located diagnostics, the semantic diff and both sources.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from scripted_llm import Scripted, scripted_provider, unregister

from eairdsl.agents.llm import LLMSettings
from eairdsl.audit.contract import Finding
from eairdsl.audit.validate import Declarations
from eairdsl.compiler import compile_world
from eairdsl.diagnostics import render
from eairdsl.diff import diff_worlds
from eairdsl.repair.llm import (
    READ_ONLY_MARK,
    LLMRepairAgent,
    LLMReviewer,
    language_excerpt,
    language_excerpt_from,
    mark_protected,
    parse_candidate,
    strip_marks,
)
from eairdsl.repair.model import (
    Feedback,
    RepairAgent,
    RepairError,
    RepairRequest,
    Reviewer,
    ReviewRequest,
    decl_name,
)
from eairdsl.repair.review import MechanicalReviewer

ROOT = Path(__file__).resolve().parents[1]
WORLD = ROOT / "worlds" / "a1.eair"
ORIGINAL = WORLD.read_text(encoding="utf-8")
FINDING = Finding.model_validate(json.loads(
    (ROOT / "tests" / "fixtures" / "audit" / "a1" / "report.json").read_text(
        encoding="utf-8"))["findings"][0])
PLAN = FINDING.repair_plan
assert PLAN is not None
AGENT, REVIEWER = "repairscripted/agent", "repairscripted/reviewer"
PAID_ONCE = ('  require not paid_by(context.caller, customer_id) else reject "you have already '
             'issued a goodwill credit to this customer"\n')
CAP = ('  require quarter_total(customer_id, quarter_of(episode_date())) + amount <= '
       'quarterly_cap() else reject "credit refused: over the customer\'s quarterly limit"\n')
BROKEN_CAP = CAP.replace(" else reject", " reject")  # no `else`: a syntax error
ATTRIBUTION = {"tool issue_credit": ["REQ-1", "REQ-2"]}
Script = Callable[[list[dict[str, Any]]], Any]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


provider = scripted_provider("repairscripted", messages_only=True, text_tokens=(1000, 200))


def settings(**kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"timeout": 5.0, "retries": 0, "backoff_base": 0.001,
                            "backoff_max": 0.01}
    return LLMSettings(**(base | kw))


def answer(source: str, attribution: dict[str, list[str]] | None = None,
           rationale: str = "a shared cumulative check at issue_credit") -> str:
    return json.dumps({"source": source, "attribution": ATTRIBUTION if attribution is None
                       else attribution, "rationale": rationale, "files": {}})


def verdict(approve: bool, failed: tuple[str, ...] = (), changes: list[str] | None = None
            ) -> str:
    dims = {d: {"passed": d not in failed, "reason": f"{d} {'fails' if d in failed else 'ok'}"}
            for d in ("risk_resolution", "plan_fidelity", "introduced_risk",
                      "proportionality")}
    return json.dumps({**dims, "verdict": "approve" if approve else "reject",
                       "required_changes": changes or []})


def user_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")


def with_cap(guard: str = CAP, source: str = ORIGINAL) -> str:
    return source.replace(PAID_ONCE, PAID_ONCE + guard)


@pytest.fixture(scope="module")
def protected() -> list[str]:
    world = compile_world(WORLD).world
    assert world is not None
    return sorted(decl_name(k, n) for k, n in Declarations.from_world(world).protected)


def repair_request(protected: list[str], **kw: Any) -> RepairRequest:
    base: dict[str, Any] = {"world_file": "a1.eair", "source": ORIGINAL, "finding": FINDING,
                            "plan": PLAN, "protected": protected}
    return RepairRequest(**(base | kw))


def candidate_dir(tmp_path: Path, source: str) -> Path:
    folder = tmp_path / "candidate"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copytree(WORLD.parent / "a1", folder / "a1")
    (folder / "a1.eair").write_text(source, encoding="utf-8")
    return folder


def review_request(tmp_path: Path, source: str, attribution: dict[str, list[str]],
                   round_: int = 1) -> ReviewRequest:
    old = compile_world(WORLD).world
    new = compile_world(candidate_dir(tmp_path, source) / "a1.eair").world
    assert old is not None and new is not None
    return ReviewRequest(world_file="a1.eair", original=ORIGINAL, candidate=source,
                         finding=FINDING, plan=PLAN,
                         diff=diff_worlds(old, new).model_dump(mode="json"),
                         attribution=attribution, rationale="a cumulative check",
                         round=round_)


# ---------------------------------------------------------------- the Repair Agent

def test_the_agent_fixes_a_syntax_error_from_the_located_diagnostics(
        provider: Scripted, protected: list[str], tmp_path: Path) -> None:
    agent = LLMRepairAgent(AGENT, settings=settings())
    assert isinstance(agent, RepairAgent)
    provider.scripts = [lambda m: answer(with_cap(BROKEN_CAP))]
    first = agent.propose(repair_request(protected))
    sent = provider.requests[0]
    system, user = sent["messages"][0]["content"], user_text(sent)
    assert "### tool" in system and "`ensure`" in system  # the language excerpt
    assert '"may_change"' in user and "REQ-2" in user and "tool:issue_credit->state" in user
    assert f"{READ_ONLY_MARK}\nrecord customers from" in user
    assert f"{READ_ONLY_MARK}\nmeasure {{" in user
    assert f"{READ_ONLY_MARK}\ntool issue_credit" not in user  # a surface, not protected
    assert sent["params"].get("temperature") == 0
    assert first.attribution == ATTRIBUTION and first.produced_by["model"] == AGENT
    assert first.produced_by["usage"] == {"calls": 1, "tokens_in": 1000, "tokens_out": 200,
                                          "cost_usd": 0.0}

    # the loop's guarded apply: the candidate does not compile; its located diagnostics
    # go back to the agent with the would-be text
    compiled = compile_world(candidate_dir(tmp_path, first.source) / "a1.eair")
    assert not compiled.ok
    located = [render(d) for d in compiled.diagnostics if d.is_error]
    line = first.source[:first.source.index(BROKEN_CAP.strip())].count("\n") + 1
    assert located and f"a1.eair:{line}:" in located[0] and "error[E108]" in located[0]
    feedback = Feedback(round=1, stage="compile", problems=located)

    def fixed(messages: list[dict[str, Any]]) -> str:
        text = "\n".join(m["content"] for m in messages if m["role"] == "user")
        assert located[0] in text and "not taken at the compile stage" in text
        assert "Your latest candidate" in text and BROKEN_CAP.strip() in text
        # fenced, and echoing a read-only mark: both are tolerated
        body = answer(mark_protected(with_cap(), protected))
        return f"```json\n{body}\n```"

    provider.scripts = [fixed]
    second = agent.propose(repair_request(protected, round=2, feedback=[feedback],
                                          previous=first.source))
    assert READ_ONLY_MARK not in second.source and second.source == with_cap()
    compiled = compile_world(candidate_dir(tmp_path, second.source) / "a1.eair")
    assert compiled.ok
    # and the offline reviewer approves the fixed candidate
    review = MechanicalReviewer().review(review_request(tmp_path / "r", second.source,
                                                        second.attribution))
    assert review.verdict == "approve", review.model_dump()


def test_a_malformed_answer_is_sent_back_then_a_repair_error(
        provider: Scripted, protected: list[str]) -> None:
    provider.scripts = [lambda m: "Sure! I added a guard to issue_credit."]
    with pytest.raises(RepairError, match=r"not JSON .*after 1 answer"):
        LLMRepairAgent(AGENT, settings=settings(), max_tries=1).propose(
            repair_request(protected))
    provider.requests.clear()
    provider.scripts = [lambda m: json.dumps({"attribution": ATTRIBUTION}),
                        lambda m: answer(with_cap())]
    candidate = LLMRepairAgent(AGENT, settings=settings()).propose(repair_request(protected))
    assert candidate.source == with_cap() and candidate.produced_by["answers"] == 2
    retry = provider.requests[1]["messages"]
    assert retry[-2]["role"] == "assistant"
    assert "could not be used" in retry[-1]["content"] and "source" in retry[-1]["content"]
    for bad, reason in ((json.dumps([1]), "not an object"),
                        (json.dumps({"source": " "}), "empty"),
                        (answer(ORIGINAL, {"issue_credit": ["REQ-1"]}), "not `KIND NAME`"),
                        (answer(ORIGINAL, {"tool x": []}), "names no requirement id"),
                        (json.dumps({"source": "x", "files": {"../etc/passwd": "x"}}),
                         "inside the world folder")):
        with pytest.raises(RepairError, match=reason):
            parse_candidate(bad, "a1.eair")


def test_a_provider_failure_is_a_repair_error(provider: Scripted,
                                              protected: list[str]) -> None:
    def boom(messages: list[dict[str, Any]]) -> str:
        raise litellm.exceptions.AuthenticationError("bad key", "repairscripted", AGENT)

    provider.scripts = [boom]
    with pytest.raises(RepairError, match="could not answer"):
        LLMRepairAgent(AGENT, settings=settings()).propose(repair_request(protected))
    with pytest.raises(ValueError, match="max_tries"):
        LLMRepairAgent(AGENT, max_tries=0)
    with pytest.raises(ValueError, match="needs a model"):
        LLMReviewer("")


# ---------------------------------------------------------------- the Reviewer

def test_the_reviewer_rejects_with_required_changes_then_approves(
        provider: Scripted, tmp_path: Path) -> None:
    reviewer = LLMReviewer(REVIEWER, settings=settings())
    assert isinstance(reviewer, Reviewer)
    extra = with_cap().replace("Close the ticket you are handling with a short resolution",
                               "Close your ticket with a short resolution")
    required = ["revert the description of tool close_ticket: it is not on the plan's surface"]
    provider.scripts = [lambda m: verdict(False, ("plan_fidelity", "proportionality"),
                                          required)]
    first = reviewer.review(review_request(tmp_path, extra, ATTRIBUTION))
    assert first.verdict == "reject" and first.required_changes == required
    assert not first.plan_fidelity.passed and first.risk_resolution.passed
    assert first.contradictions() == []
    assert first.reviewer["model"] == REVIEWER and first.reviewer["kind"] == "llm"
    user = user_text(provider.requests[0])
    assert '"name": "close_ticket"' in user  # the semantic diff
    assert "## Original world W: a1.eair" in user and "## Candidate world W': a1.eair" in user
    assert "+  description \"Close your ticket" in user  # the changed lines
    assert '"policy": "compensation_cap"' in user and '"REQ-3"' in user
    system = provider.requests[0]["messages"][0]["content"]
    assert all(d in system for d in ("risk_resolution", "plan_fidelity", "introduced_risk",
                                     "proportionality"))

    provider.scripts = [lambda m: verdict(True)]
    second = reviewer.review(review_request(tmp_path, with_cap(), ATTRIBUTION, round_=2))
    assert second.verdict == "approve" and second.required_changes == []
    assert "# Review round 2" in user_text(provider.requests[1])


def test_a_malformed_or_contradictory_review(provider: Scripted, tmp_path: Path) -> None:
    req = review_request(tmp_path, with_cap(), ATTRIBUTION)
    provider.scripts = [lambda m: '{"verdict": "approve"}'] * 2
    with pytest.raises(RepairError, match="no verdict on risk_resolution"):
        LLMReviewer(REVIEWER, settings=settings()).review(req)
    provider.scripts = [lambda m: "not json at all", lambda m: '{"risk_resolution": 1}']
    with pytest.raises(RepairError, match="after 2 answer"):
        LLMReviewer(REVIEWER, settings=settings()).review(req)
    # an approval with a failed dimension is sent back; a consistent answer is taken
    provider.requests.clear()
    provider.scripts = [lambda m: verdict(True, ("introduced_risk",)),
                        lambda m: verdict(False, ("introduced_risk",), ["drop the new tool"])]
    review = LLMReviewer(REVIEWER, settings=settings()).review(req)
    assert review.verdict == "reject" and review.reviewer["answers"] == 2
    assert "approves although introduced_risk failed" in \
        provider.requests[1]["messages"][-1]["content"]
    # still contradictory after max_tries: returned as it is, for the loop's validator
    provider.scripts = [lambda m: verdict(True, ("introduced_risk",))]
    review = LLMReviewer(REVIEWER, settings=settings(), max_tries=1).review(req)
    assert review.contradictions() == ["approves although introduced_risk failed"]


# ---------------------------------------------------------------- cassette

def test_cassette_replay_is_byte_identical(provider: Scripted, protected: list[str],
                                           tmp_path: Path) -> None:
    cassette = tmp_path / "repair.jsonl"
    record = settings(record=cassette)
    provider.scripts = [lambda m: "oops", lambda m: answer(with_cap()),
                        lambda m: verdict(True)]
    request = repair_request(protected)
    candidate = LLMRepairAgent(AGENT, settings=record).propose(request)
    review_req = review_request(tmp_path, candidate.source, candidate.attribution)
    review = LLMReviewer(REVIEWER, settings=record).review(review_req)
    assert len(provider.requests) == 3 and len(cassette.read_text().splitlines()) == 3
    unregister("repairscripted")
    provider.requests.clear()
    replay = settings(replay=cassette)
    again = LLMRepairAgent(AGENT, settings=replay).propose(request)
    again_review = LLMReviewer(REVIEWER, settings=replay).review(review_req)
    assert provider.requests == []
    assert again.model_dump_json() == candidate.model_dump_json()
    assert again_review.model_dump_json() == review.model_dump_json()
    # another round asks something else: a located miss, as a repair error
    with pytest.raises(RepairError, match="cassette"):
        LLMRepairAgent(AGENT, settings=settings(replay=cassette)).propose(
            repair_request(protected, round=2))


# ---------------------------------------------------------------- prompts

def test_the_shipped_language_excerpt_is_docs_language_md() -> None:
    doc = ROOT / "docs" / "language.md"
    if not doc.is_file():
        pytest.skip("no docs/language.md beside the package (an installed wheel)")
    assert language_excerpt() == language_excerpt_from(doc.read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="no section ### nothing"):
        language_excerpt_from(doc.read_text(encoding="utf-8"), ("### nothing",))


def test_marks() -> None:
    source = "role a {\n}\n\nrole b {\n}\n\nmeasure {\n}\nchannel a -> b\n"
    marked = mark_protected(source, ["participant a", "measure"])
    assert marked == (f"{READ_ONLY_MARK}\nrole a {{\n}}\n\nrole b {{\n}}\n\n"
                      f"{READ_ONLY_MARK}\nmeasure {{\n}}\nchannel a -> b\n")
    assert strip_marks(marked) == source
    assert strip_marks("  " + READ_ONLY_MARK + "  \nrole a\n") == "role a\n"


# ---------------------------------------------------------------- through the loop

def test_the_llm_agent_and_reviewer_through_the_repair_loop(provider: Scripted,
                                                            tmp_path: Path) -> None:
    """`eairc repair --agent llm --reviewer llm` in miniature: the agent's syntax error comes
    back located from the loop's guarded apply, the reviewer's required change comes back
    as the next round's feedback, and the third candidate is approved and accepted."""
    from repair_helpers import audited_a1

    from eairdsl.repair.loop import repair

    audit = audited_a1(tmp_path / "a", seeds=3)
    good = {"tool issue_credit": ["cumulative-check"]}
    csat = "let csat_role(role: party) = role in [service_recovery, escalation]"
    assert csat in ORIGINAL
    # an extra change the loop's ScopeOK passes (attributed, nothing protected touched),
    # for the reviewer to send back
    extra = with_cap().replace(csat, csat.replace("service_recovery, escalation",
                                                  "escalation, service_recovery"))
    seen: list[str] = []

    def agent_says(source: str, attribution: dict[str, list[str]]) -> Script:
        def script(messages: list[dict[str, Any]]) -> str:
            assert "You are the Repair Agent" in messages[0]["content"]
            seen.append("\n".join(m["content"] for m in messages if m["role"] == "user"))
            return answer(source, attribution)
        return script

    def reviewer_says(body: str) -> Script:
        def script(messages: list[dict[str, Any]]) -> str:
            assert "You are the Repair Reviewer" in messages[0]["content"]
            return body
        return script

    required = "revert let csat_role: the repair does not need it"
    provider.scripts = [
        agent_says(with_cap(BROKEN_CAP), good),                   # round 1: does not compile
        agent_says(extra, {**good, "let csat_role": ["cumulative-check"]}),  # round 2
        reviewer_says(verdict(False, ("proportionality",), [required])),
        agent_says(with_cap(), good),                             # round 3
        reviewer_says(verdict(True))]
    acc = repair(WORLD, audit, tmp_path / "repair",
                 LLMRepairAgent(AGENT, settings=settings()),
                 LLMReviewer(REVIEWER, settings=settings()), seeds=2, max_rounds=3)
    assert provider.scripts == []
    assert "error[E108]" in seen[1] and "not taken at the compile stage" in seen[1]
    assert required in seen[2] and "not taken at the review stage" in seen[2]
    assert "# Repair round 3" in seen[2]
    # rounds count the reviews (Table 4), not the candidate that did not compile
    assert acc.accepted and acc.review_ok and acc.rounds == 2, acc


def test_the_agent_sees_the_worlds_cards_and_which_are_read_only(protected: list[str]) -> None:
    from eairdsl.repair.llm import agent_messages

    files = {name: (WORLD.parent / name).read_text(encoding="utf-8")
             for name in ("a1/support.md.j2", "a1/customer.md.j2", "a1/customers.json")}
    user = agent_messages(repair_request(protected, files=files), "system")[1]["content"]
    assert "### a1/support.md.j2\n```\n" + files["a1/support.md.j2"] in user
    assert "### a1/customer.md.j2 (read-only: the card of protected customer)" in user
    assert "- a1/customers.json (" in user and files["a1/customers.json"][:40] not in user
    small = agent_messages(repair_request(protected, files=files), "system",
                           files_chars=10)[1]["content"]
    assert "### a1/support.md.j2" not in small and "- a1/support.md.j2 (" in small


def test_a_card_on_a_line_with_other_clauses_is_still_read_only() -> None:
    """The compact form puts a card clause after a `{` or a `;`: its owner is still found."""
    from eairdsl.repair.llm import _cards

    source = ('role clerk { model under_test; card "w/clerk.md.j2" }\n\n'
              'simulator vendor {\n  model counterpart; card "w/vendor.md.j2"; memory private\n}\n'
              'role boss {\n  card "w/boss.md.j2"\n}\n')
    assert _cards(source) == {"w/clerk.md.j2": "clerk", "w/vendor.md.j2": "vendor",
                              "w/boss.md.j2": "boss"}


def test_an_answer_with_raw_newlines_in_its_strings_or_prose_around_it_is_read() -> None:
    raw = '{"source": "role a {\n}\n", "attribution": {"participant a": ["R1"]}}'
    source, attribution, _, _ = parse_candidate("Here you go:\n" + raw + "\nDone.", "w.eair")
    assert source == "role a {\n}\n" and attribution == {"participant a": ["R1"]}
