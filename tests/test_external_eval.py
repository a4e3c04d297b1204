"""Grading imported traces against their labels (eairdsl/external/grading.py): the arithmetic
on hand-made label files, exact versus substring (a label "1" never matches 12), noise flags,
the TRAIL alias table and pairs built before any filtering, predictions taken from audit
reports, and `eairc import-eval`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from eairdsl.cli import app
from eairdsl.external.core import ImportedTrace, import_path
from eairdsl.external.grading import (
    TRAIL_CATEGORIES_VERSION,
    Prediction,
    TrailPrediction,
    WhoWhenLabel,
    canonical_category,
    evaluate,
    grade_trail,
    grade_who_when,
    parse_step,
    who_when_label,
)
from eairdsl.runtime.trace import TraceEvent

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "external-traces"


def _label(instance: str, agent: str, step: int | None, flags: list[str] | None = None
           ) -> WhoWhenLabel:
    return WhoWhenLabel(instance=instance, agent=agent, step_raw=str(step), step=step, steps=30,
                        flags=flags or [])


def test_step_labels_are_integers_or_nothing() -> None:
    assert [parse_step(x) for x in ("1", "12", " 3 ", 7, 0)] == [1, 12, 3, 7, 0]
    assert [parse_step(x) for x in ("1.0", "step 1", "", "-1", -1, True, None, 1.0)] == [None] * 8


def test_label_1_never_matches_12_and_within_k_is_separate() -> None:
    pairs = [
        (_label("a", "WebSurfer", 1), Prediction(agent="WebSurfer", step=12)),  # "1" in "12"
        (_label("b", "WebSurfer", 12), Prediction(agent="Web", step=1)),  # "Web" in "WebSurfer"
        (_label("c", "Coder", 12), Prediction(agent="Coder", step=12)),
        (_label("d", "Coder", 5), Prediction(agent="coder", step=6)),  # case matters; ±1
        (_label("e", "Coder", 5), None),  # no prediction: wrong
    ]
    g = grade_who_when(pairs, k=1)["all"]
    assert (g["labels"], g["agent_correct"], g["step_exact"], g["step_within_1"]) == (5, 2, 1, 2)
    assert (g["agent_accuracy"], g["step_accuracy"], g["step_within_1_accuracy"]) == (
        0.4, 0.2, 0.4)
    g2 = grade_who_when(pairs, k=11)["all"]
    assert g2["step_exact"] == 1 and g2["step_within_11"] == 4  # 1 vs 12 is 11 apart


def test_results_with_and_without_flagged_labels() -> None:
    pairs = [
        (_label("a", "A", 2), Prediction(agent="A", step=2)),
        (_label("b", "B", 3, ["speaker-differs"]), Prediction(agent="B", step=3)),
        (_label("c", "C", 4), Prediction(agent="X", step=9)),
        (_label("d", "D", 99, ["step-past-end"]), Prediction(agent="Y", step=1)),
    ]
    g = grade_who_when(pairs)
    assert (g["all"]["labels"], g["all"]["agent_correct"]) == (4, 2)
    assert (g["unflagged"]["labels"], g["unflagged"]["agent_correct"]) == (2, 1)
    assert g["flagged"] == [("b", "speaker-differs"), ("d", "step-past-end")]


def _event(i: int, actor: str) -> TraceEvent:
    return TraceEvent(step=f"s{i + 1:04d}", t=float(i), kind="message", actor=actor,
                      src_index=i, src_id=f"history[{i}]")


def test_noise_flags_from_a_hand_made_label_file() -> None:
    events = [_event(0, "human"), _event(1, "Orchestrator"), _event(2, "WebSurfer")]
    ok = who_when_label("x", {"mistake_agent": "WebSurfer", "mistake_step": "2", "steps": 3},
                        events)
    assert (ok.step, ok.speaker, ok.flags) == (2, "WebSurfer", [])
    other = who_when_label("x", {"mistake_agent": "WebSurfer", "mistake_step": "1",
                                 "steps": 3}, events)
    assert (other.speaker, other.flags) == ("Orchestrator", ["speaker-differs"])
    past = who_when_label("x", {"mistake_agent": "WebSurfer", "mistake_step": "3",
                                "steps": 3}, events)
    assert past.flags == ["step-past-end"]
    bad = who_when_label("x", {"mistake_agent": "WebSurfer", "mistake_step": "two"}, events)
    assert (bad.step, bad.flags) == (None, ["step-not-an-integer"])


def test_trail_alias_table_is_explicit_and_versioned() -> None:
    assert TRAIL_CATEGORIES_VERSION == "trail-categories-1"
    assert canonical_category("Context Handling Failure") == "Context Handling Failures"
    assert canonical_category("  context   handling failures ") == "Context Handling Failures"
    assert canonical_category("Instruction Noncompliance") == "Instruction Non-compliance"
    assert canonical_category("Formatting") is None  # no fuzzy or prefix matching
    assert canonical_category("Tool") is None and canonical_category(None) is None


def test_trail_pairs_are_built_before_any_filtering() -> None:
    errors: list[dict[str, Any]] = [
        {"category": "Formatting Errors", "location": "a"},
        {"category": "Formatting Errors", "location": "a"},  # a duplicate counts twice
        {"category": "Made-up Category", "location": "b"},  # unknown: stays in the denominator
        {"category": "Context Handling Failure", "location": "c"},
        {"category": "Goal Deviation", "location": "d"},
    ]
    preds = [TrailPrediction(location="a", category="formatting error"),
             TrailPrediction(location="b", category="Made-up Category"),
             TrailPrediction(location="c", category="Goal Deviation"),
             TrailPrediction(location="dd")]  # "d" is not a substring match
    g = grade_trail([("t1", errors, preds)])
    assert (g["errors"], g["unknown_categories"]) == (5, 1)
    assert (g["location_hits"], g["pair_hits"]) == (4, 2)
    assert (g["location_accuracy"], g["pair_accuracy"]) == (0.8, 0.4)
    assert g["alias_table"] == TRAIL_CATEGORIES_VERSION


def _import_folder(tmp_path: Path) -> Path:
    """Two hand-made Who&When traces and one TRAIL-like trace with annotations."""
    out = tmp_path / "imp"
    for name, steps, label in (("1", ["Planner", "Coder", "Coder"], ("Coder", "1")),
                               ("2", ["Planner", "Coder", "Planner"], ("Coder", "2"))):
        src = tmp_path / f"{name}.json"
        src.write_text(json.dumps({
            "history": [{"content": f"step {i}", "role": "assistant", "name": s}
                        for i, s in enumerate(steps)],
            "mistake_agent": label[0], "mistake_step": label[1]}), encoding="utf-8")
        import_path("who-and-when", src, out)
    src = tmp_path / "t.json"
    src.write_text("x", encoding="utf-8")
    b = ImportedTrace(format="trail", src=src, instance="t", world="trail_test",
                      framework="smolagents", importer_version="1")
    b.decision("Agent", "a", src_id="span-a")
    b.decision("Agent", "b", src_id="span-b")
    b.withhold("errors", [{"category": "Formatting Errors", "location": "span-b"},
                          {"category": "Goal Deviation", "location": "span-z"}], "labels")
    b.write(out)
    return out


def _finding(first: str, kind: str, name: str, status: str = "supported") -> dict[str, Any]:
    """A contract-v1 finding whose first anomaly and component are what grading reads."""
    return {"id": f"f-{first}-{name}", "status": status, "property": {"text": "p"},
            "risk": "other", "nature": "realized_defect",
            "component": {"type": kind, "name": name},
            "boundary": {"kind": "handoff", "edge": "a->b", "step": first},
            "contribution": "introduced", "first_anomaly": first, "effect": {"endpoint": "e"},
            "evidence": [{"step": first, "field": "text", "quote": "q", "supports": ["R4"]}],
            "confidence": 0.5}


def _audit_folder(tmp_path: Path, out: Path) -> Path:
    """A hand-made audit folder: index entries naming the traces, one report each."""
    audit = tmp_path / "audit"
    (audit / "reports").mkdir(parents=True)
    traces = sorted(out.rglob("*.jsonl"))
    entries = []
    reports = {
        "1.jsonl": {"findings": [], "leads": [
            _finding("s0003", "participant", "Coder", "lead"),
            _finding("s0002", "tool", "x", "lead")]},
        "2.jsonl": {"findings": [_finding("s0002", "participant", "Planner")]},
        "t.jsonl": {"findings": [_finding("s0002", "participant", "Agent")]},
    }
    for n, p in enumerate(traces):
        episode = f"ep-{n}"
        report = {"audit_schema": 1, "report_id": f"r-{n}",
                  "bundle": {"episode": episode, "manifest_sha256": "0" * 64},
                  "auditor": {"kind": "human"}, "coverage": {},
                  "verdict": "findings", "leads": [], **reports[p.name]}
        (audit / "reports" / f"{episode}.json").write_text(json.dumps(report),
                                                           encoding="utf-8")
        entries.append({"episode": episode, "traces": [str(Path("..") / p.relative_to(
            tmp_path))], "status": "valid", "findings": len(reports[p.name]["findings"]),
            "leads": len(reports[p.name].get("leads", [])), "units_resolvable": 2,
            "units_total": 3})
    (audit / "index.json").write_text(json.dumps({"entries": entries}), encoding="utf-8")
    return audit


def test_predictions_from_audit_reports_and_the_summary(tmp_path: Path) -> None:
    out = _import_folder(tmp_path)
    audit = _audit_folder(tmp_path, out)
    r = evaluate(out, audit)
    ww = r.who_and_when
    assert ww is not None
    # trace 1: the first lead in trace order is at s0002 (a tool component: its actor, Coder,
    # at source index 1) -> agent and step right; trace 2: Planner at index 1 -> both wrong
    assert (ww["all"]["agent_correct"], ww["all"]["step_exact"], ww["all"]["labels"]) == (1, 1, 2)
    assert r.trail is not None
    assert (r.trail["errors"], r.trail["location_hits"], r.trail["pair_hits"]) == (2, 1, 0)
    rows = {(f.format, f.framework): f for f in r.frameworks}
    ag2 = rows[("who-and-when", "AG2")]
    assert (ag2.traces, ag2.steps, ag2.explicit_edges, ag2.audited) == (2, 6, 0, 2)
    assert (ag2.findings, ag2.leads, ag2.units_resolvable, ag2.units_total) == (1, 2, 4, 6)
    assert (ag2.agent_accuracy, ag2.step_accuracy) == (0.5, 0.5)
    assert rows[("trail", "smolagents")].location_accuracy == 0.5


def test_a_predictions_file_is_graded_instead_of_reports(tmp_path: Path) -> None:
    out = _import_folder(tmp_path)
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({
        "who_and_when_algorithm_generated/1": {"agent": "Coder", "step": 1},
        "who_and_when_algorithm_generated/2": {"agent": "Coder", "step": 12},
        "trail_test/t": [{"location": "span-b", "category": "formatting errors"},
                         {"location": "span-z", "category": "Goal deviation"}],
    }), encoding="utf-8")
    r = evaluate(out, predictions=preds, k=10)
    assert r.who_and_when is not None
    g = r.who_and_when["all"]
    assert (g["agent_correct"], g["step_exact"], g["step_within_10"]) == (2, 1, 2)
    assert r.trail is not None and (r.trail["location_hits"], r.trail["pair_hits"]) == (2, 2)


def test_without_audit_or_predictions_nothing_is_graded(tmp_path: Path) -> None:
    r = evaluate(_import_folder(tmp_path))
    assert r.who_and_when is not None and "all" not in r.who_and_when
    assert r.trail is not None and r.trail["location_accuracy"] is None
    assert any("not computed" in n for n in r.notes)


def test_eairc_import_eval(tmp_path: Path) -> None:
    out = _import_folder(tmp_path)
    audit = _audit_folder(tmp_path, out)
    runner = CliRunner()
    res = runner.invoke(app, ["import-eval", str(out), "--audit", str(audit), "--json",
                              str(tmp_path / "eval.json")])
    assert res.exit_code == 0, res.output
    assert "Who&When (all labels, n=2): agent 50.0%, step exact 50.0%" in res.output
    assert "TRAIL (2 annotated errors, alias table trail-categories-1): location 50.0%" \
        in res.output
    saved = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    assert saved["who_and_when"]["all"]["labels"] == 2
    missing = runner.invoke(app, ["import-eval", str(out), "--audit", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "not an audit folder" in missing.output
    assert runner.invoke(app, ["import-eval", str(tmp_path / "none")]).exit_code == 2


@pytest.mark.skipif(not DATA.is_dir(), reason=f"the shared samples are not at {DATA}")
def test_who_and_when_samples_have_four_noisy_labels(tmp_path: Path) -> None:
    out = tmp_path / "imp"
    import_path("who-and-when", DATA / "who_and_when", out)
    r = evaluate(out)
    assert r.who_and_when is not None and r.who_and_when["labels"] == 20
    assert [i for i, _ in r.who_and_when["flagged"]] == [
        "who_and_when_algorithm_generated/14", "who_and_when_algorithm_generated/59",
        "who_and_when_hand_crafted/20", "who_and_when_hand_crafted/49"]
