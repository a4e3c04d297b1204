"""The oracle auditor (grader-side only) on sim episodes of the five shipped worlds.

Every report it writes validates, against the bundle alone and against the
world; its verdict follows the grader's labels (a supported finding on every
realized episode, a lead on every intercepted anomaly); its citations are the
witness steps. And issue 14's property: a report built from any subset of an
episode's witness steps, given in any order, validates.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.auditor import AuditorAgent
from eairdsl.audit.contract import Report
from eairdsl.audit.evidence import MANIFEST, Bundle, edge_ref, field_text, normalize, sha256_file
from eairdsl.audit.oracle import (
    MAX_QUOTE,
    ORACLE,
    GroundTruth,
    OracleAuditor,
    certificate,
    ground_truth,
    is_cross_role,
    oracle_report,
    quote_slice,
)
from eairdsl.audit.runner import BUNDLES, REPORTS, audit_episodes, grader_traces
from eairdsl.audit.validate import MIN_QUOTE, Declarations, validate_report
from eairdsl.ir import World

ROOT = Path(__file__).resolve().parents[1]
WORLDS = ("a1", "b1", "c1", "d1", "f1")
#: (seed, agents) of each condition's episodes: the default sim and the reckless profile
RUNS = ((0, "sim"), (1, "sim:reckless"), (2, "sim"))


@dataclass
class Audited:
    world: str
    bundle: Bundle
    truth: GroundTruth
    report: Report
    decls: Declarations


@pytest.fixture(scope="module")
def worlds() -> dict[str, World]:
    return {name: resolve_world(ROOT / "worlds" / f"{name}.eair") for name in WORLDS}


@pytest.fixture(scope="module")
def audited(worlds: dict[str, World], tmp_path_factory: pytest.TempPathFactory
            ) -> list[Audited]:
    """Every condition of every world, three episodes each, audited by the oracle."""
    root = tmp_path_factory.mktemp("oracle")
    out: list[Audited] = []
    for name, world in worlds.items():
        runs = root / "runs" / name
        for cond in world.conditions:
            for seed, agents in RUNS:
                run_episode(world, cond.name, None, seed, agents, runs)
        audit = root / "audit" / name
        source = ROOT / "worlds" / f"{name}.eair"
        index = audit_episodes(runs, audit, OracleAuditor.for_audit(audit, source),
                               world=source)
        assert index.entries and all(e.status != "failed" for e in index.entries)
        traces = grader_traces(audit)
        decls = Declarations.from_world(world)
        found: dict[str, World | None] = {}  # the world the headers name, found once
        for e in index.entries:
            bundle = Bundle.load(audit / BUNDLES / e.episode)
            truth = ground_truth(sorted(traces[e.episode])[0], source, worlds=found)
            report = Report.model_validate_json(
                (audit / REPORTS / f"{e.episode}.json").read_bytes())
            out.append(Audited(name, bundle, truth, report, decls))
    return out


def test_the_sample_has_every_kind_of_episode(audited: list[Audited]) -> None:
    for name in WORLDS:
        mine = [a for a in audited if a.world == name]
        assert any(a.truth.realized for a in mine), name
        assert any(a.truth.realized is False for a in mine), name
    assert any(a.truth.anomaly and a.truth.realized is False for a in audited)
    assert any(a.truth.realized is None for a in audited)  # F1's solo arms are unassessed


def test_every_oracle_report_validates(audited: list[Audited]) -> None:
    for a in audited:
        for against in (None, a.decls):
            result = validate_report(a.report.model_dump(mode="json"), a.bundle, against)
            assert result.citations_checked
            errors = [d.diagnostic.message for d in result.diagnostics if d.is_error]
            assert errors == [], (a.world, a.bundle.manifest.episode, errors)
            assert result.findings_resolvable == result.findings_total
            assert result.units_resolvable == result.units_total


def test_the_oracle_says_it_is_the_oracle(audited: list[Audited]) -> None:
    for a in audited:
        assert a.report.auditor.kind == "oracle" and a.report.auditor.prompt_version == ORACLE
        assert isinstance(OracleAuditor({}), AuditorAgent)


def test_verdict_follows_the_grader(audited: list[Audited]) -> None:
    for a in audited:
        r, t = a.report, a.truth
        where = (a.world, a.bundle.manifest.episode)
        if t.realized:
            assert r.verdict == "findings" and len(r.findings) == 1 and not r.leads, where
            f = r.findings[0]
            assert f.status == "supported" and f.nature == "realized_defect"
            assert f.risk == a.world.upper() and f.repair_plan is not None
        elif t.anomaly:
            assert not r.findings and len(r.leads) == 1, where
            lead = r.leads[0]
            assert lead.nature == "risk_exposure" and lead.effect.step is None
            assert r.verdict == ("no_supported_problem" if t.realized is False
                                 else "insufficient_evidence")
        else:
            assert not r.findings and not r.leads, where
            assert r.verdict == ("insufficient_evidence" if t.realized is None
                                 else "no_supported_problem")
        assert r.coverage.steps_read == [s.step for s in a.bundle.steps]


def test_certificates_cite_the_witness_steps(audited: list[Audited]) -> None:
    for a in audited:
        w = a.truth.witnesses
        order = {s.step: i for i, s in enumerate(a.bundle.steps)}
        for f in a.report.findings + a.report.leads:
            seeded = set(w.get("anomaly", [])) if a.truth.anomaly else set()
            if f.status == "supported":
                realized = w["realized"]
                assert f.effect.step == max(realized, key=order.__getitem__)
                seeded |= set(realized)
            assert f.first_anomaly in seeded and set(f.path) <= seeded
            if a.truth.anomaly:
                assert f.first_anomaly == min(
                    (s for s in w["anomaly"] if f.effect.step is None
                     or order[s] <= order[f.effect.step]), key=order.__getitem__)
            boundary = a.bundle.by_step[f.boundary.step]
            assert is_cross_role(a.bundle, boundary)
            assert f.boundary.edge == edge_ref(boundary)
            cited = {u.step for u in f.evidence}
            assert cited == {f.first_anomaly, *f.path, f.boundary.step} | (
                {f.effect.step} if f.effect.step else set())
            assert [u.step for u in f.evidence] == sorted(cited, key=order.__getitem__)


def test_a_policy_that_fails_is_the_property(audited: list[Audited]) -> None:
    """A1's ledger breaks a declared rule: the finding names the policy, not free text."""
    a1 = [f for a in audited if a.world == "a1" for f in a.report.findings]
    assert a1 and all(f.property.policy is not None for f in a1)
    names = {p.name for a in audited if a.world == "a1" for p in a.bundle.policies}
    assert {f.property.policy for f in a1} <= names


def test_a_disclosure_is_quoted_where_the_marked_value_is(audited: list[Audited]) -> None:
    """D1's final messages are long: the effect's quote is the part carrying the restricted
    value, not the greeting before it."""
    d1 = [a for a in audited if a.world == "d1" and a.report.findings]
    assert d1
    for a in d1:
        f = a.report.findings[0]
        effect = next(u for u in f.evidence if u.step == f.effect.step)
        assert len(field_text(a.bundle.by_step[effect.step], effect.field) or "") > MAX_QUOTE
        assert any(m in effect.quote for m in a.truth.markers), effect.quote


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from("ab c\u00e9\n\t—x"), max_size=400),
       markers=st.lists(st.text(st.sampled_from("abc x"), min_size=1, max_size=12),
                        max_size=3))
def test_quotes_are_verbatim_slices(text: str, markers: list[str]) -> None:
    quote = quote_slice(text, markers)
    body = normalize(text)
    assert quote in body and len(quote) <= MAX_QUOTE
    assert quote == body or len(quote) >= MIN_QUOTE


def test_plan_surfaces_are_declarations_the_bundle_shows(audited: list[Audited]) -> None:
    for a in audited:
        shown = Declarations.from_bundle(a.bundle)
        for f in a.report.findings + a.report.leads:
            assert f.repair_plan is not None and f.repair_plan.may_change
            for entry in f.repair_plan.may_change:
                assert shown.resolve(entry) and a.decls.resolve(entry), entry
                assert not set(a.decls.resolve(entry)) & a.decls.protected


# ---------------------------------------------------------------- the property (issue 14)

def _report(bundle: Bundle, findings: list, leads: list) -> dict:
    verdict = "findings" if findings else "no_supported_problem"
    return Report(audit_schema=1, report_id="prop", bundle={
        "episode": bundle.manifest.episode,
        "manifest_sha256": sha256_file(bundle.root / MANIFEST)},
        auditor={"kind": "oracle", "prompt_version": ORACLE}, verdict=verdict,
        findings=findings, leads=leads,
        coverage={"steps_read": [bundle.steps[0].step]}).model_dump(mode="json")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reports_built_from_witness_steps_always_validate(audited: list[Audited],
                                                          data: st.DataObject) -> None:
    a = data.draw(st.sampled_from([a for a in audited if any(a.truth.witnesses.values())]))
    order = {s.step: i for i, s in enumerate(a.bundle.steps)}
    witnesses = sorted({s for ws in a.truth.witnesses.values() for s in ws if s in order},
                       key=order.__getitem__)
    picked = data.draw(st.lists(st.sampled_from(witnesses), min_size=1, unique=True))
    shuffled = data.draw(st.permutations(picked))
    effect = data.draw(st.none() | st.sampled_from(picked))
    anomaly = data.draw(st.lists(st.sampled_from(picked), unique=True))
    status = "supported" if effect is not None else "lead"
    f = certificate(a.bundle, a.truth, shuffled, anomaly=anomaly, effect=effect,
                    status=status, finding_id="F1")
    assert f is not None  # every shipped world's bundle has a cross-role step
    # the order rules hold whatever order the steps came in
    chain = [f.first_anomaly, *f.path] + ([f.effect.step] if f.effect.step else [])
    assert [order[s] for s in chain] == sorted(order[s] for s in chain)
    assert len(set(f.path)) == len(f.path)
    report = _report(a.bundle, [f] if f.status == "supported" else [],
                     [f] if f.status == "lead" else [])
    for against in (None, a.decls):
        result = validate_report(report, a.bundle, against)
        errors = [d.diagnostic.message for d in result.diagnostics if d.is_error]
        assert errors == [], (a.world, picked, effect, anomaly, errors)
        assert result.units_resolvable == result.units_total > 0


def test_two_certificates_of_one_episode_validate_together(audited: list[Audited]) -> None:
    """A report with the supported finding and a lead from another slice of the witnesses."""
    rng = random.Random(7)
    for a in [a for a in audited if a.truth.realized][:12]:
        ws = sorted({s for v in a.truth.witnesses.values() for s in v if s in a.bundle.by_step})
        lead = certificate(a.bundle, a.truth, rng.sample(ws, max(1, len(ws) // 2)),
                           effect=None, status="lead", finding_id="L1")
        assert lead is not None
        result = validate_report(_report(a.bundle, list(a.report.findings), [lead]), a.bundle)
        assert result.ok, [d.diagnostic.message for d in result.diagnostics]


# ---------------------------------------------------------------- the runner

def test_an_episode_without_a_grader_trace_fails_and_is_retried(tmp_path: Path,
                                                                worlds: dict[str, World]
                                                                ) -> None:
    run_episode(worlds["d1"], "canonical", "hr-1", 0, "sim", tmp_path / "runs")
    index = audit_episodes(tmp_path / "runs", tmp_path / "a", OracleAuditor({}))
    assert [e.status for e in index.entries] == ["failed"]
    assert "no trace" in (index.entries[0].reason or "")
    index = audit_episodes(tmp_path / "runs", tmp_path / "a",
                           OracleAuditor(grader_traces(tmp_path / "a")))
    assert [(e.status, e.verdict) for e in index.entries] == [("valid", "findings")]
    # another episode's trace is refused, not audited against the wrong ground truth
    other = run_episode(worlds["d1"], "canonical", "fin-2", 0, "sim", tmp_path / "other")
    wrong = {e.episode: Path(other.trace_path or "") for e in index.entries}
    index = audit_episodes(tmp_path / "runs", tmp_path / "w", OracleAuditor(wrong))
    assert [e.status for e in index.entries] == ["failed"]
    assert "is not the trace of episode" in (index.entries[0].reason or "")
    (tmp_path / "broken.jsonl").write_text("{not a trace\n")
    broken = {e.episode: tmp_path / "broken.jsonl" for e in index.entries}
    index = audit_episodes(tmp_path / "runs", tmp_path / "b", OracleAuditor(broken))
    assert "cannot be read" in (index.entries[0].reason or "")


def test_reports_are_byte_identical_from_run_to_run(tmp_path: Path,
                                                   worlds: dict[str, World]) -> None:
    for seed in (0, 1):
        run_episode(worlds["a1"], "strong", None, seed, "sim", tmp_path / "runs")
    texts = []
    for out in ("x", "y"):
        audit_episodes(tmp_path / "runs", tmp_path / out,
                       OracleAuditor.for_audit(tmp_path / out, ROOT / "worlds" / "a1.eair"))
        texts.append({p.name: p.read_bytes()
                      for p in sorted((tmp_path / out / REPORTS).glob("*.json"))})
    assert texts[0] == texts[1] and len(texts[0]) == 4


def test_a_report_is_rebuilt_from_truth_alone(audited: list[Audited]) -> None:
    """`oracle_report` is a function of the bundle and the grader's truth."""
    for a in audited[:10]:
        again = oracle_report(a.bundle, a.truth)
        assert json.dumps(again.model_dump(mode="json"), sort_keys=True) == json.dumps(
            a.report.model_dump(mode="json"), sort_keys=True)
