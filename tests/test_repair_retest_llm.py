"""The retest reruns an LLM cohort with its models and an LLM audit with its auditor (issue 16
item 4: "run with the same agents or models"; AuditPass: "the same auditor").

Offline through litellm's custom-provider hook (tests/scripted_llm.py): a provider
named `retestscripted` plays four models — the A1 service roles under test
(`agent`: it issues the customer a $20 credit and closes the ticket), the customer
(`customer`, the counterpart), the judge (`judge`) and the auditor (`auditor`: it
reads the record, then submits the rules auditor's findings for the bundle it was
given, so its reports carry supported findings with repair plans; tests/scripted_a1.py).
A one-condition, two-seed A1 study played by those models is audited by the LLM auditor; `repair`
with a stub agent and reviewer must then run W and W′ with the same four models and
audit W′ with the same LLM auditor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from repair_helpers import A1, StubAgent, StubReviewer, approve, good
from scripted_a1 import AuditorModel, credit_then_close
from scripted_llm import Scripted, fast_settings, installed, respond
from typer.testing import CliRunner

from eairdsl.agents.llm import LLMSettings
from eairdsl.api import UsageError
from eairdsl.audit.auditors import arm_name, make_auditor
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes, read_index
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.repair.loop import repair
from eairdsl.repair.retest import AuditedEpisode, RetestResult, cohort_of
from eairdsl.runtime.trace import read_trace
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world

PROVIDER = "retestscripted"
AGENT, CUSTOMER, JUDGE, AUDITOR = (f"{PROVIDER}/{m}" for m in
                                   ("agent", "customer", "judge", "auditor"))
UNDER_TEST = ("billing", "escalation", "finance", "retention", "service_recovery", "support")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def study_settings() -> LLMSettings:
    return fast_settings().model_copy(update={"counterpart_model": CUSTOMER,
                                          "judge_model": JUDGE})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm-retest")


@pytest.fixture(scope="module")
def provider(root: Path) -> Iterator[tuple[Scripted, AuditorModel]]:
    auditor = AuditorModel(root)
    by_model = {"agent": credit_then_close,
                "customer": lambda m, p: respond("I was charged twice."),
                "judge": lambda m, p: respond(json.dumps({"scores": []})), "auditor": auditor}
    with installed(PROVIDER, by_model=by_model) as handler:
        yield handler, auditor


@pytest.fixture(scope="module")
def llm_audit(root: Path, provider: tuple[Scripted, AuditorModel]) -> Path:
    """A1 (strong, 2 seeds) played by the scripted models, audited by the LLM auditor as
    `eairc audit --auditor llm --model retestscripted/auditor` does."""
    world = compile_world(A1).world
    assert world is not None
    plan = plan_world(world, ["strong"], "seed", 2)
    run_study([world], [plan], [Model(AGENT, "llm:" + AGENT)], root / "study",
              llm=study_settings())
    out = root / "audit"
    # sampled as an audit may be: the retest's AuditPass must ask alike
    settings = fast_settings().model_copy(update={"model": AUDITOR, "temperature": 0.25,
                                              "max_tokens": 700})
    auditor, describe = make_auditor("llm", out, model=AUDITOR, settings=settings,
                                     max_tool_calls=40, max_revisions=2)
    index = audit_episodes(root / "study", out, auditor, world=A1,
                           describe={"arm": arm_name("llm", AUDITOR, "full", "annotated"),
                                     **describe})
    assert index.entries and all(e.status == "valid" for e in index.entries)
    return out


def _headers(folder: Path) -> list[Any]:
    traces = sorted(p for p in folder.rglob("*.jsonl") if not p.name.endswith(".calls.ndjson")
                    and "traces" in p.parts)
    assert traces, f"no traces under {folder}"
    return [read_trace(p).header for p in traces]


def test_an_llm_cohort_is_retested_with_its_models_and_its_llm_auditor(
        root: Path, llm_audit: Path, provider: tuple[Scripted, AuditorModel]) -> None:
    handler, auditor_model = provider
    calls_before = dict(handler.calls)
    audited_before = len(auditor_model.episodes)
    out = root / "repair"
    acc = repair(A1, llm_audit, out, StubAgent(good), StubReviewer(approve()), seeds=2,
                 validate_episodes=2, llm=fast_settings())
    assert acc.audit_pass is not None, acc.reason  # the retest ran
    rt = out / "retest" / "01"
    result = RetestResult.model_validate_json((rt / "result.json").read_bytes())
    # W and W′ ran with the audited episodes' models, party by party
    for study in (rt / "before", rt / "after"):
        for h in _headers(study):
            assert h.llm == {"model": AGENT, "counterpart_model": CUSTOMER,
                             "judge_model": JUDGE}
            assert h.agents["customer"] == f"llm:{CUSTOMER}"
            assert all(h.agents[r] == f"llm:{AGENT}" for r in UNDER_TEST)
            assert h.model_calls, "the models were asked"
    # the scripted models answered during the retest (not only during the study)
    assert handler.calls["agent"] > calls_before["agent"]
    assert handler.calls["judge"] > calls_before.get("judge", 0)
    # AuditPass: the same LLM auditor (kind, model, arm) on W′'s traces
    index = read_index(rt / "audit")
    assert index.auditor["kind"] == "llm" and index.auditor["model"] == AUDITOR
    assert index.auditor["arm"] == read_index(llm_audit).auditor["arm"]
    # ... sampled as the audit was (its index records the settings its requests carried)
    audited = read_index(llm_audit).settings
    assert audited is not None and (audited.temperature, audited.max_tokens) == (0.25, 700)
    assert index.settings is not None and index.settings.sampling() == audited.sampling()
    # ... and with its budgets (they decide when an audit stops)
    assert (audited.budgets.max_tool_calls, audited.budgets.max_revisions) == (40, 2)
    assert index.settings.budgets == audited.budgets
    assert index.entries and all(e.status == "valid" for e in index.entries)
    reports = [json.loads((rt / "audit" / "reports" / f"{e.episode}.json").read_text())
               for e in index.entries]
    assert {r["auditor"]["kind"] for r in reports} == {"llm"}
    assert {r["auditor"]["model"] for r in reports} == {AUDITOR}
    assert len(auditor_model.episodes) - audited_before == len(index.entries)
    # what ran is recorded in result.json
    assert result.profile == "llm"
    assert result.llm == {"model": AGENT, "counterpart_model": CUSTOMER, "judge_model": JUDGE}
    assert result.agents["customer"] == [f"llm:{CUSTOMER}"]
    assert result.agents["support"] == [f"llm:{AGENT}"]
    assert result.auditor["kind"] == "llm" and result.auditor["model"] == AUDITOR
    assert result.audit_auditor == result.auditor
    # the repaired world stops the scripted roles' over-cap credits
    assert result.target_before.k > 0 and result.target_after.k == 0
    assert result.audit_pass
    # and review.html says who played the retest and which auditor decided AuditPass
    page = (out / "review.html").read_text(encoding="utf-8")
    assert f"llm:{AGENT}" in page and f"llm:{CUSTOMER}" in page
    assert f"model {AUDITOR}" in page and "the audit's own auditor (llm" in page


def test_a_finished_llm_retest_is_read_back_without_a_model_call(
        root: Path, llm_audit: Path, provider: tuple[Scripted, AuditorModel]) -> None:
    out = root / "repair"
    if not (out / "acceptance.json").is_file():
        pytest.skip("needs the previous test's repair")
    handler, _ = provider
    before = (out / "acceptance.json").read_bytes()
    handler.refuse = True  # any request now fails the test
    try:
        repair(A1, llm_audit, out, StubAgent(good), StubReviewer(approve()), seeds=2,
               validate_episodes=2, llm=fast_settings())
    finally:
        handler.refuse = False
    assert (out / "acceptance.json").read_bytes() == before


def _episode(profile: str, llm: dict[str, Any] | None) -> AuditedEpisode:
    return AuditedEpisode(episode="ep-1", trace="t", condition="strong", instance="a1-01",
                          seed=0, profile=profile, realized=True, utility=True, llm=llm)


def test_the_cohort_is_what_the_headers_record() -> None:
    llm = {"model": AGENT, "judge_model": JUDGE}
    cohort = cohort_of([_episode("llm", llm)] * 2)
    assert cohort.kind == "llm" and cohort.model().agents == f"llm:{AGENT}"
    settings = cohort.settings(LLMSettings(api_base="http://127.0.0.1:9", timeout=3.0,
                                           temperature=0.9))
    assert settings is not None
    assert (settings.judge_model, settings.counterpart_model, settings.temperature) == (
        JUDGE, None, None)  # the trace decides the models and sampling, not the caller
    assert (settings.api_base, settings.timeout) == ("http://127.0.0.1:9", 3.0)
    assert cohort_of([_episode("sim", None), _episode("sim", None),
                      _episode("sim:reckless", None)]).profile == "sim"
    with pytest.raises(UsageError, match=r"different agents \(1 with sim; 1 with LLM model "
                                         r"retestscripted/agent \(judge retestscripted/judge\)\)"):
        cohort_of([_episode("llm", llm), _episode("sim", None)])
    with pytest.raises(UsageError, match="different agents"):
        cohort_of([_episode("llm", llm), _episode("llm", {**llm, "temperature": 0.2})])
    with pytest.raises(UsageError, match="without a model under test"):
        cohort_of([_episode("llm", {"role_models": {"support": AGENT}})])


def test_a_sim_and_llm_audit_is_refused_in_one_line_through_the_cli(
        root: Path, provider: tuple[Scripted, AuditorModel], tmp_path: Path) -> None:
    world = compile_world(A1).world
    assert world is not None
    plan = plan_world(world, ["strong"], "seed", 2)
    run_study([world], [plan], [Model("sim", "sim"), Model(AGENT, "llm:" + AGENT)],
              tmp_path / "study", llm=study_settings())
    audit_episodes(tmp_path / "study", tmp_path / "audit", RulesAuditor(), world=A1,
                   describe={"kind": "offline"})
    result = CliRunner().invoke(app, ["repair", str(A1), "--audit", str(tmp_path / "audit"),
                                      "-o", str(tmp_path / "r"), "--seeds", "1"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert "Traceback" not in result.output
    error = [ln for ln in lines if "different agents" in ln]
    assert len(error) == 1 and "with sim" in error[0] and AGENT in error[0], result.output
    assert not (tmp_path / "r" / "rounds").exists(), "refused before any agent was asked"


def test_an_interrupted_llm_retest_resumes_without_rerunning_its_episodes(
        root: Path, llm_audit: Path, provider: tuple[Scripted, AuditorModel],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import eairdsl.repair.retest as retest_mod

    handler, _ = provider
    real = retest_mod.audit_episodes

    def stop(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(retest_mod, "audit_episodes", stop)
    out = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):
        repair(A1, llm_audit, out, StubAgent(good), StubReviewer(approve()), seeds=2,
               validate_episodes=2, llm=fast_settings())
    assert (out / "retest" / "01" / "after" / "results.sqlite").is_file()
    episodes_asked = handler.calls["agent"]
    monkeypatch.setattr(retest_mod, "audit_episodes", real)
    acc = repair(A1, llm_audit, out, StubAgent(good), StubReviewer(approve()), seeds=2,
                 validate_episodes=2, llm=fast_settings())
    assert acc.accepted and acc.audit_pass
    # the stored W and W′ episodes were kept: the role model was not asked again
    assert handler.calls["agent"] == episodes_asked
    assert read_index(out / "retest" / "01" / "audit").auditor["kind"] == "llm"
