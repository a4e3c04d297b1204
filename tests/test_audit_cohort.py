"""The audit study's cohort (F.14): drawn by content identity, stratified, graded blind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eairdsl.api import UsageError, resolve_world
from eairdsl.audit.auditor import AuditError
from eairdsl.audit.cohort import COHORT, SUMMARY, SUMMARY_KEYS, audit_study, draw_cohort
from eairdsl.audit.contract import (
    AUDIT_SCHEMA,
    Auditor,
    Boundary,
    BundleRef,
    Component,
    Coverage,
    Effect,
    EvidenceUnit,
    Finding,
    PropertyRef,
    Report,
)
from eairdsl.audit.evidence import MANIFEST, Bundle, field_text, sha256_file
from eairdsl.runtime.trace import read_trace
from eairdsl.study.executor import run_study
from eairdsl.study.grid import parse_models, plan_world

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study")
    d1 = resolve_world(ROOT / "worlds" / "d1.eair")
    plan = plan_world(d1, ["canonical", "repaired"], ["hr-1", "fin-2", "sec-3"], 3)
    run_study([d1], [plan], parse_models("sim"), out, workers=1)
    return out


class FirstMessage:
    """Files one supported finding quoting the last message of every episode; a stand-in
    for an auditor, so the grading (not the auditing) is what is tested."""

    def __init__(self) -> None:
        self.seen: list[Path] = []

    def audit(self, bundle: Bundle) -> Report:
        self.seen.append(bundle.root)
        ref = BundleRef(episode=bundle.manifest.episode,
                        manifest_sha256=sha256_file(bundle.root / MANIFEST))
        last = [s for s in bundle.steps if s.kind == "message"][-1]
        text = field_text(last, "content") or ""
        unit = EvidenceUnit(step=last.step, edge=last.edge, field="content", quote=text[:40],
                            supports=["R1", "R2", "R3"])
        finding = Finding(
            id="f1", status="supported", property=PropertyRef(text="requester sees only what "
                                                                   "they may"),
            risk="D1", nature="realized_defect", component=Component(type="participant",
                                                                     name=last.actor),
            boundary=Boundary(kind="delegation", edge=last.edge or "", step=last.step),
            contribution="introduced", first_anomaly=last.step, path=[last.step],
            effect=Effect(endpoint="the requester", step=last.step), evidence=[unit],
            confidence=0.5)
        return Report(audit_schema=AUDIT_SCHEMA, report_id="r1", bundle=ref,
                      auditor=Auditor(kind="human"), verdict="findings", findings=[finding],
                      coverage=Coverage(steps_read=[last.step]))


def test_cohort_is_stratified_distinct_and_deterministic(study: Path) -> None:
    a = draw_cohort(study, per_world=6, positives=3, seed=1)
    b = draw_cohort(study, per_world=6, positives=3, seed=1)
    assert a == b
    labels = [m.label for m in a.members]
    assert labels.count("positive") == 3 and labels.count("negative") == 3
    assert len({m.episode for m in a.members}) == 6  # content identity: none twice
    for m in a.members:
        result = read_trace(study / m.trace).result
        assert result is not None
        assert bool(result.measurements["realized"]) == (m.label == "positive")
        assert m.witnesses == result.witnesses.get("realized", [])
    assert draw_cohort(study, per_world=6, positives=3, seed=2) != a


def test_too_few_positives_fill_with_negatives(study: Path) -> None:
    cohort = draw_cohort(study, per_world=30, positives=25, seed=0)
    positives = sum(m.label == "positive" for m in cohort.members)
    assert positives < 25 and "d1" in cohort.shortfalls
    assert len({m.episode for m in cohort.members}) == len(cohort.members)


def test_audit_study_grades_and_writes_the_summary(study: Path, tmp_path: Path) -> None:
    auditor = FirstMessage()
    summary = audit_study(study, tmp_path, auditor, "stub", per_world=6, positives=3, seed=1)
    assert len(auditor.seen) == 6
    w = summary.worlds["d1"]
    assert (w["seeded"], w["negatives"]) == (3, 3)
    assert w["seeded_with_verdict"] == 3 and w["negatives_with_findings"] == 3
    assert w["findings"] == 6 and w["evidence_units"] == 6
    assert w["resolvable_units"] == w["resolvable_findings"] == 6
    cohort = json.loads((tmp_path / COHORT).read_text())
    # the last message is the realized witness in D1 (the disclosing final answer)
    expect = sum(1 for m in cohort["members"] if m["label"] == "positive"
                 and m["witnesses"] and m["witnesses"][-1] == _last_message(study / m["trace"]))
    assert w["cites_witness"] == expect
    on_disk = json.loads((tmp_path / SUMMARY).read_text())
    assert set(SUMMARY_KEYS) <= set(on_disk["worlds"]["d1"])
    assert on_disk["arms"]["stub"]["worlds"]["d1"]["seeded"] == 3
    # the auditor saw only bundle folders, never the study or its traces
    assert all((p / MANIFEST).is_file() and study not in p.parents for p in auditor.seen)


def _last_message(trace: Path) -> str:
    return [e.step for e in read_trace(trace).events if e.kind == "message"][-1]


def test_a_second_arm_reuses_the_cohort_and_a_failed_audit_counts_as_no_report(
        study: Path, tmp_path: Path) -> None:
    audit_study(study, tmp_path, FirstMessage(), "one", per_world=6, positives=3, seed=1)

    class Failing:
        def audit(self, bundle: Bundle) -> Report:
            raise AuditError("budget spent")

    two = audit_study(study, tmp_path, Failing(), "two", per_world=6, positives=3, seed=1)
    assert two.totals["reports"] == 0 and two.totals["seeded"] == 3
    data = json.loads((tmp_path / SUMMARY).read_text())
    assert set(data["arms"]) == {"one", "two"} and data["arm"] == "two"
    with pytest.raises(UsageError, match="--per-world 6"):
        audit_study(study, tmp_path, FirstMessage(), "three", per_world=8, positives=3, seed=1)
