"""Each offline rule on its own hand-made bundles (tests/fixtures/audit_rules/<rule>/<case>/).

The fixtures are small sanitized bundles written by hand, not derived from the
shipped worlds, one folder per case, with the rule's hits as a golden
`expected.json` (README.md there). A case's name says what kind of control it is:
`positive` (the rule files a supported hit), `lead_*` (it fires, but the hit lacks
an effect and stays a lead), `negative` (the rule finds nothing). Every rule of
`RULES` has a firing case and a negative one.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from world_vocabulary import own_vocabulary, shipped_names

from eairdsl.audit.evidence import Bundle
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.rules import RULES, Context, FindRule, Outcome, Rule
from eairdsl.audit.validate import validate_report

FIXTURES = Path(__file__).parent / "fixtures" / "audit_rules"
CASES = sorted(p.parent for p in FIXTURES.glob("*/*/bundle") if p.is_dir())
REGENERATE = "python tests/fixtures/audit_rules/make_fixtures.py --expected"


def _id(case: Path) -> str:
    return f"{case.parent.name}/{case.name}"


def _rule(name: str) -> Rule:
    found = [r for r in RULES if r.name == name]
    assert found, f"fixture folder {name}/ names no rule of RULES"
    return found[0]


def _observed(case: Path) -> dict[str, Any]:
    outcome = _rule(case.parent.name).run(Context(Bundle.load(case / "bundle")))
    return {"rule": case.parent.name,
            "hits": [dataclasses.asdict(h) for h in outcome.hits],
            "queries": [q.model_dump(mode="json") for q in outcome.queries]}


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_rule_gives_its_golden_hits(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text(encoding="utf-8"))
    observed = json.loads(json.dumps(_observed(case)))  # tuples as JSON lists
    assert observed == expected, f"{_id(case)} differs from expected.json ({REGENERATE})"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_case_is_the_control_its_name_says(case: Path) -> None:
    hits = _observed(case)["hits"]
    if case.name == "positive" or case.name.startswith("positive_"):
        assert any(h["supported"] for h in hits), f"{_id(case)}: no supported hit"
    elif case.name.startswith("lead_"):
        assert hits and not any(h["supported"] for h in hits), f"{_id(case)}: not a lead"
    else:
        assert case.name == "negative", \
            f"{_id(case)}: a case is positive, positive_*, lead_* or negative"
        assert not hits, f"{_id(case)}: the negative control fires"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_auditor_report_on_the_case_validates(case: Path) -> None:
    """All rules together, as `eairc audit` runs them: a report the validator accepts, and
    a positive case's supported hit a finding at its boundary."""
    bundle = Bundle.load(case / "bundle")
    report = RulesAuditor().audit(bundle)
    result = validate_report(report.model_dump_json(), bundle)
    assert result.ok, [d.diagnostic.message for d in result.diagnostics]
    if case.name == "positive" or case.name.startswith("positive_"):
        boundaries = {h["boundary_step"] for h in _observed(case)["hits"] if h["supported"]}
        assert {f.boundary.step for f in report.findings} & boundaries


@pytest.mark.parametrize("rule", [r.name for r in RULES])
def test_every_rule_has_a_firing_and_a_negative_control(rule: str) -> None:
    names = {c.name for c in CASES if c.parent.name == rule}
    assert "negative" in names, f"{rule}: no negative control"
    assert names & {"positive"} or any(n.startswith("lead_") for n in names), \
        f"{rule}: no case where it fires"


def test_fixture_folders_name_only_rules() -> None:
    assert {c.parent.name for c in CASES} == {r.name for r in RULES}


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_fixtures_are_not_the_shipped_worlds(case: Path) -> None:
    """No participant, tool, record, field, policy or document of a shipped world, and no
    distinctive shipped name (`issue_credit`, `d1`) anywhere in the bundle's text."""
    bundle = Bundle.load(case / "bundle")
    declared = {p.name for p in bundle.participants} | {t.name for t in bundle.tools}
    declared |= {p.name for p in bundle.policies} | set(bundle.documents)
    for view in bundle.records.values():
        declared |= {view.name, *view.fields}
    shipped = shipped_names() - own_vocabulary()
    assert not declared & shipped, f"{_id(case)} declares shipped names {declared & shipped}"
    distinctive = {n for n in shipped if "_" in n or any(c.isdigit() for c in n)}
    text = "\n".join(p.read_text(encoding="utf-8")
                     for p in sorted((case / "bundle").rglob("*")) if p.is_file())
    found = sorted(n for n in distinctive
                   if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text))
    assert not found, f"{_id(case)} names shipped declarations: {found}"


def test_rules_have_the_rule_shape() -> None:
    """`RULES` is ordered as the report's coverage lists the rules, and each is a `Rule`
    whose run gives an `Outcome` (a `FindRule` records one query of its name)."""
    assert [r.name for r in RULES] == ["policy_rule", "authorization", "status_drift", "hedge",
                                       "evidence_not_sought", "self_report_routing"]
    case = FIXTURES / "hedge" / "negative" / "bundle"
    for rule in RULES:
        outcome = rule.run(Context(Bundle.load(case)))
        assert isinstance(outcome, Outcome)
        if isinstance(rule, FindRule):
            assert [q.name for q in outcome.queries] == [rule.name]


@pytest.mark.parametrize("rule", list(RULES), ids=lambda r: r.name)
def test_each_rule_module_documents_its_reading(rule: Rule) -> None:
    """The module docstring is the rule's documentation: R1 to R4 and its limits."""
    import sys

    module = sys.modules[f"eairdsl.audit.rules.{rule.name}"]
    doc = module.__doc__ or ""
    assert doc.startswith(f"Rule `{rule.name}`"), doc[:60]
    for part in ("R1 boundary", "R2 path", "R3 effect", "R4 evidence", "Limits"):
        assert part in doc, f"{rule.name}: the docstring does not say its {part}"


def test_a_rule_the_bundle_defeats_is_recorded_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any rule of `RULES`, the policy rule too, that raises on an untrusted bundle is
    listed in coverage as failed and the others still run (never a traceback)."""
    from eairdsl.audit import offline

    def broken(ctx: Context) -> list[Any]:
        raise KeyError("hostile")

    monkeypatch.setattr(offline, "RULES", (FindRule("policy_rule", broken), *RULES[1:]))
    bundle = Bundle.load(FIXTURES / "authorization" / "positive" / "bundle")
    report = RulesAuditor().audit(bundle)
    assert validate_report(report.model_dump_json(), bundle).ok
    ran = [(q.name, q.args) for q in report.coverage.queries]
    assert ("policy_rule", {"failed": "KeyError"}) in ran
    assert ("authorization", {}) in ran and report.verdict == "findings"


def test_a_single_writer_told_by_other_roles_is_supported_at_the_handoff() -> None:
    """Issue 26 item 3: the clerk alone logs the count two other roles told it. R1 is the
    latest message that carried the value, R2 runs from the first message to the write,
    and each message is cited with the value quoted. The same clerk logging a count
    nobody told it (`lead_invented`: the messages say 45, it writes 75) stays a lead."""
    here = FIXTURES / "policy_rule"
    bundle = Bundle.load(here / "positive_relayed" / "bundle")
    report = RulesAuditor().audit(bundle)
    [finding] = report.findings
    assert finding.status == "supported" and finding.boundary.kind == "handoff"
    assert finding.boundary.step == "s0002" and "tally_checker" in finding.boundary.edge
    assert finding.path == ["s0001", "s0002", "s0004"] and finding.effect.step == "s0004"
    by_step = {u.step: u for u in finding.evidence}
    assert "75 crates" in by_step["s0001"].quote and "R2" in by_step["s0001"].supports
    assert {"R1", "R2", "R4"} <= set(by_step["s0002"].supports)
    invented = RulesAuditor().audit(Bundle.load(here / "lead_invented" / "bundle"))
    assert not invented.findings and [f.status for f in invented.leads] == ["lead"]
    assert invented.leads[0].contribution == "introduced"


def _seal(bundle: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures",
                                                  FIXTURES / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.seal(bundle)


def test_a_shared_tool_s_result_that_carries_another_role_s_value_is_a_boundary(
        tmp_path: Path) -> None:
    """The same clerk, told by a tally board the checker posts to (a tool both hold)
    instead of a message: R1 is the board's result returned to the clerk."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURES / "policy_rule" / "positive_relayed" / "bundle", bundle)
    events = [
        {"actor": "tally_checker", "args": {"note": "the morning truck carried 75 crates"},
         "kind": "tool_call", "step": "s0001", "t": 0.0, "tool": "tally_board"},
        {"actor": "tally_checker", "call": "s0001", "kind": "tool_result", "result": "posted",
         "step": "s0002", "t": 1.0, "tool": "tally_board"},
        {"actor": "dock_clerk", "args": {}, "kind": "tool_call", "step": "s0003", "t": 2.0,
         "tool": "tally_board"},
        {"actor": "dock_clerk", "call": "s0003", "kind": "tool_result",
         "result": "board: the morning truck carried 75 crates", "step": "s0004", "t": 3.0,
         "tool": "tally_board"},
        {"actor": "dock_clerk", "diff": {"append": {"crate_log": {
            "crates": 75, "truck": "morning truck"}}}, "kind": "state_update", "step": "s0005",
         "t": 4.0, "tool": "log_crates"}]
    (bundle / "events.jsonl").write_text("".join(
        json.dumps({**e, "type": "event"}, sort_keys=True) + "\n" for e in events))
    tools = json.loads((bundle / "tools.json").read_text())
    tools.append({"description": "Post to or read the tally board.", "kind": "act",
                  "name": "tally_board", "parameters": {"properties": {"note": {
                      "type": "string"}}, "type": "object"},
                  "roles": ["dock_clerk", "tally_checker"]})
    (bundle / "tools.json").write_text(json.dumps(tools))
    _seal(bundle)
    loaded = Bundle.load(bundle)
    [finding] = RulesAuditor().audit(loaded).findings
    assert finding.boundary.step == "s0004" and finding.boundary.kind == "shared_action"
    assert finding.path == ["s0004", "s0005"]
    assert validate_report(RulesAuditor().audit(loaded).model_dump_json(), loaded).ok
