"""The strict validator, against the golden D1 fixtures (tests/fixtures/audit/README.md).

The hand-written D1 report (tests/fixtures/audit/d1/report.json) cites a real
sim episode's bundle and validates. Each mutation below changes that report's
text in one place and names the one code it must draw and where: the location
is computed here from the mutated text (the offset of an anchor), not by the
validator's own JSON reader, so a reader that mislocates fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from eairdsl.api import resolve_world
from eairdsl.audit.evidence import Bundle
from eairdsl.audit.jsonpos import JsonSyntaxError, parse_fast, parse_positioned
from eairdsl.audit.validate import CODES, Declarations, ValidationResult, validate_report
from eairdsl.ir import World

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "audit" / "d1"
REPORT = FIXTURES / "report.json"
BUNDLE = FIXTURES / "bundle"
TEXT = REPORT.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return Bundle.load(BUNDLE)


@pytest.fixture(scope="module")
def world() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


def _at(text: str, anchor: str, delta: int = 0) -> tuple[int, int]:
    """Line and column (1-based) of the first occurrence of `anchor`, plus `delta` chars."""
    offset = text.index(anchor) + delta
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _write(tmp_path: Path, text: str, name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _validate(tmp_path: Path, text: str, bundle: Bundle, world: World | None = None,
              suggest: bool = False) -> ValidationResult:
    return validate_report(_write(tmp_path, text), bundle, world, suggest=suggest)


# ------------------------------------------------------------------ the golden report

def test_the_hand_written_d1_report_validates(bundle: Bundle, world: World) -> None:
    for w in (None, world):
        result = validate_report(REPORT, bundle, w)
        assert result.diagnostics == []
        assert result.ok and result.schema_valid
        assert (result.findings_resolvable, result.findings_total) == (1, 1)
        assert (result.units_resolvable, result.units_total) == (5, 5)
    assert validate_report(REPORT, bundle, world).surface_checked_against == "world"
    assert validate_report(REPORT, bundle).surface_checked_against == "bundle"


def test_a_parsed_report_validates_without_positions(bundle: Bundle) -> None:
    data = json.loads(TEXT)
    assert validate_report(data, bundle).ok
    data["findings"][0]["evidence"][0]["step"] = "s0099"
    result = validate_report(data, bundle)
    assert result.codes == ["V804"]
    assert result.diagnostics[0].diagnostic.span is None
    assert result.diagnostics[0].path == "findings[0].evidence[0].step"


def test_whitespace_runs_are_the_only_leniency(tmp_path: Path, bundle: Bundle) -> None:
    spaced = TEXT.replace("rating: 2.1 of 5, below", "rating:\\n  2.1   of 5,\\tbelow")
    assert spaced != TEXT
    assert _validate(tmp_path, spaced, bundle).ok
    # one character of case is not whitespace
    assert _validate(tmp_path, TEXT.replace("rating: 2.1 of 5, below", "Rating: 2.1 of 5, below"),
                     bundle).codes == ["V806"]


# ------------------------------------------------------------------ one mutation per code

@dataclass(frozen=True)
class Mutation:
    name: str
    old: str
    new: str
    code: str
    anchor: str
    delta: int = 0
    finding: int | None = 0
    unit: int | None = None
    count: int = 1  # how many occurrences of `old` to replace (-1: all)
    with_world: bool = False
    path: str | None = None


FINDING_TEXT = TEXT[TEXT.index("    {\n      \"id\": \"F1\""):TEXT.index("\n  ],\n  \"leads\"")]

MUTATIONS = [
    Mutation("wrong_bundle", '"ep-39b74f55d0cb62e28d43"', '"fixture-0000000000000000"', "V803",
             '"fixture-0000000000000000"', finding=None, path="bundle.episode"),
    Mutation("wrong_step", '"step": "s0008",\n          "edge": "specialist->assistant"',
             '"step": "s0099",\n          "edge": "specialist->assistant"', "V804", '"s0099"',
             unit=2, path="findings[0].evidence[2].step"),
    Mutation("wrong_boundary_step", '"step": "s0005"\n      }', '"step": "s5"\n      }', "V804",
             '"s5"', path="findings[0].boundary.step"),
    Mutation("wrong_edge", '"edge": "specialist->assistant"', '"edge": "specialist->requester"',
             "V805", '"specialist->requester"', unit=2, path="findings[0].evidence[2].edge"),
    Mutation("wrong_boundary_edge", '"edge": "assistant->specialist",\n        "step"',
             '"edge": "requester->assistant",\n        "step"', "V805", '"requester->assistant"',
             path="findings[0].boundary.edge"),
    Mutation("quote_one_character_off", "2.1 of 5, below", "2.1 of 5, belov", "V806",
             '"Jordan Lee — rating: 2.1 of 5, belov', unit=2,
             path="findings[0].evidence[2].quote"),
    Mutation("quote_from_another_step",
             '"field": "content",\n          "quote": "Could Jordan Lee be a good fit to lead the '
             'cutover work?"',
             '"field": "content",\n          "quote": "attrition: high flight risk"', "V806",
             '"attrition: high flight risk"', unit=0, path="findings[0].evidence[0].quote"),
    Mutation("quote_too_short", '"Could Jordan Lee be a good fit to lead the cutover work?"',
             '"Jordan"', "V807", '"Jordan"', unit=0, path="findings[0].evidence[0].quote"),
    Mutation("quote_from_withheld_field", '"field": "content",\n          "quote": "Could',
             '"field": "header.condition",\n          "quote": "Could', "V808",
             '"header.condition"', unit=0, path="findings[0].evidence[0].field"),
    Mutation("quote_from_a_field_the_step_lacks", '"field": "args"', '"field": "reason"', "V808",
             '"reason"', unit=1, path="findings[0].evidence[1].field"),
    Mutation("missing_r3", '"supports": ["R3"]', '"supports": ["R4"]', "V809", '"evidence": [',
             delta=len('"evidence": '), count=-1, path="findings[0].evidence"),
    Mutation("reversed_order", '"path": ["s0008", "s0009"]', '"path": ["s0009", "s0008"]', "V810",
             '"s0008"]', path="findings[0].path[1]"),
    Mutation("effect_before_path", '"step": "s0010"\n      }', '"step": "s0007"\n      }', "V810",
             '"s0007"\n      }', path="findings[0].effect.step"),
    Mutation("boundary_not_cross_role",
             '"edge": "assistant->specialist",\n        "step": "s0005"',
             '"edge": "assistant->tool:directory_lookup",\n        "step": "s0002"', "V811",
             '"s0002"', path="findings[0].boundary.step"),
    Mutation("exposure_with_effect_step", '"nature": "realized_defect"',
             '"nature": "risk_exposure"', "V813", '"s0010"\n      }',
             path="findings[0].effect.step"),
    Mutation("requirement_without_check", '"check": "retest on fresh episodes: realized 0/20"',
             '"check": null', "V814", '{\n            "id": "REQ-2"',
             path="findings[0].repair_plan.requirements[1]"),
    Mutation("unattributed_plan_surface", '"tool hr_read"', '"tool hr_write"', "V815",
             '"tool hr_write"', path="findings[0].repair_plan.may_change[1]"),
    Mutation("unattributed_plan_surface_in_world", '"role specialist"', '"lever strictness"',
             "V815", '"lever strictness"', with_world=True,
             path="findings[0].repair_plan.may_change[2]"),
    Mutation("protected_plan_surface", '"role specialist"', '"record employee"', "V816",
             '"record employee"', with_world=True, path="findings[0].repair_plan.may_change[2]"),
    Mutation("protected_measure_block", '"role specialist"', '"realized"', "V816",
             '"realized"', with_world=True, path="findings[0].repair_plan.may_change[2]"),
    Mutation("verdict_without_supported_finding", '"verdict": "findings"',
             '"verdict": "no_supported_problem"', "V818", '"no_supported_problem"', finding=None,
             path="verdict"),
    Mutation("unknown_component", '"name": "delegate"', '"name": "delegator"', "V819",
             '"delegator"', path="findings[0].component.name"),
    Mutation("unknown_policy", '"policy": null', '"policy": "need_to_know"', "V819",
             '"need_to_know"', path="findings[0].property.policy"),
    Mutation("unknown_signals_type", '"id": "sensitive_information_disclosure"',
             '"id": "sensitive_info_disclosure"', "V802", '"sensitive_info_disclosure"',
             path="findings[0].types[1].id"),
    Mutation("extra_field", '"confidence": 0.95', '"severity": "high",\n      "confidence": 0.95',
             "V802", '"severity"', path="findings[0].severity"),
    Mutation("quoted_number", '"confidence": 0.95', '"confidence": "0.95"', "V802", '"0.95"',
             path="findings[0].confidence"),
    Mutation("repeated_key", '"confidence": 0.95', '"confidence": 0.95,\n      "confidence": 0.9',
             "V802", '"confidence": 0.9,', path="findings[0].confidence"),
    Mutation("not_json", '"leads": [],', '"leads": [,', "V801", ',\n  "out_of', finding=None,
             path="report"),
]


def _mutate(m: Mutation) -> str:
    assert m.old in TEXT, m.name
    out = TEXT.replace(m.old, m.new) if m.count == -1 else TEXT.replace(m.old, m.new, m.count)
    assert out != TEXT
    return out


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_mutation_draws_its_code_at_its_place(m: Mutation, tmp_path: Path, bundle: Bundle,
                                              world: World) -> None:
    text = _mutate(m)
    result = _validate(tmp_path, text, bundle, world if m.with_world else None)
    assert result.codes == [m.code], [d.diagnostic.message for d in result.diagnostics]
    d = result.diagnostics[0]
    span = d.diagnostic.span
    assert span is not None and span.file.endswith("report.json")
    assert (span.line, span.col) == _at(text, m.anchor, m.delta)
    if m.path is not None:
        assert d.path == m.path
    if m.finding is not None and m.code not in ("V801",):
        assert d.section == "findings" and d.finding == m.finding
        assert m.code == "V802" or d.finding_id == "F1"
    if m.unit is not None:
        assert d.unit == m.unit
        assert f"evidence[{m.unit}]" in d.diagnostic.message
    assert not result.ok


def test_every_code_has_a_mutation_or_a_test_of_its_own() -> None:
    covered = {m.code for m in MUTATIONS} | {"V812", "V817", "V820"}
    assert covered == set(CODES)


def test_an_unknown_step_is_rejected_counted_and_never_moved(tmp_path: Path,
                                                             bundle: Bundle) -> None:
    text = TEXT.replace('"path": ["s0008", "s0009"]', '"path": ["s0008", "s0077", "s0078"]')
    result = _validate(tmp_path, text, bundle, suggest=True)
    assert result.codes == ["V804", "V804"]
    assert result.unknown_steps == 2
    # the finding is still a supported finding, counted and unresolvable
    assert (result.findings_resolvable, result.findings_total) == (0, 1)
    assert (result.units_resolvable, result.units_total) == (5, 5)


def test_suggest_names_where_a_quote_is_verbatim_but_fixes_nothing(tmp_path: Path,
                                                                   bundle: Bundle) -> None:
    text = TEXT.replace('"step": "s0008",\n          "edge": "specialist->assistant"',
                        '"step": "s0099",\n          "edge": "specialist->assistant"')
    plain = _validate(tmp_path, text, bundle)
    hinted = _validate(tmp_path, text, bundle, suggest=True)
    assert plain.codes == hinted.codes == ["V804"]
    assert plain.diagnostics[0].diagnostic.hint is None
    hint = hinted.diagnostics[0].diagnostic.hint
    assert hint is not None and "s0008.content" in hint and "not a fix" in hint
    assert (hinted.units_resolvable, hinted.findings_resolvable) == (4, 0)
    moved = _mutate(MUTATIONS[[m.name for m in MUTATIONS].index("quote_from_another_step")])
    result = _validate(tmp_path, moved, bundle, suggest=True)
    assert result.codes == ["V806"]
    assert "s0010.content" in (result.diagnostics[0].diagnostic.hint or "")


def test_duplicate_findings_are_merged_with_a_warning(tmp_path: Path, bundle: Bundle) -> None:
    copy = FINDING_TEXT.replace('"id": "F1"', '"id": "F2"')
    text = TEXT.replace(FINDING_TEXT, FINDING_TEXT + ",\n" + copy)
    result = _validate(tmp_path, text, bundle)
    assert result.codes == ["V812"]
    d = result.diagnostics[0]
    assert not d.is_error and result.ok
    assert (d.section, d.finding, d.finding_id) == ("findings", 1, "F2")
    assert d.diagnostic.span is not None
    assert (d.diagnostic.span.line, d.diagnostic.span.col) == _at(text, '{\n      "id": "F2"')
    assert result.merged == [("findings[0]", "findings[1]")]
    assert (result.findings_resolvable, result.findings_total) == (1, 1)
    assert (result.units_resolvable, result.units_total) == (10, 10)


def test_a_clean_verdict_must_show_coverage(tmp_path: Path, bundle: Bundle) -> None:
    as_lead = (TEXT.replace('"verdict": "findings"', '"verdict": "no_supported_problem"')
               .replace('"findings": [\n', '"leads": [\n', 1)
               .replace('"leads": [],', '"findings": [],')
               .replace('"status": "supported"', '"status": "lead"'))
    assert _validate(tmp_path, as_lead, bundle).ok
    steps = re.search(r'"steps_read": \[[^\]]*\]', as_lead)
    assert steps is not None
    blind = as_lead.replace(steps.group(0), '"steps_read": []')
    result = _validate(tmp_path, blind, bundle)
    assert result.codes == ["V817"]
    span = result.diagnostics[0].diagnostic.span
    assert span is not None
    assert (span.line, span.col) == _at(blind, '"steps_read": [', len('"steps_read": '))


def test_a_supported_finding_needs_a_repair_plan(tmp_path: Path, bundle: Bundle) -> None:
    text = re.sub(r'"repair_plan": \{.*?\n      \}', '"repair_plan": null', TEXT, flags=re.S)
    result = _validate(tmp_path, text, bundle)
    assert result.codes == ["V820"]
    span = result.diagnostics[0].diagnostic.span
    assert span is not None and (span.line, span.col) == _at(text, '{\n      "id": "F1"')
    lead = (text.replace('"status": "supported"', '"status": "lead"')
            .replace('"findings": [\n', '"leads": [\n', 1)
            .replace('"leads": [],', '"findings": [],')
            .replace('"verdict": "findings"', '"verdict": "no_supported_problem"'))
    assert _validate(tmp_path, lead, bundle).ok  # a lead need not carry a plan


def test_declarations_from_names(bundle: Bundle) -> None:
    data = json.loads(TEXT)
    names = Declarations.from_names(["delegate", "hr_read", "specialist"], protected=["hr_read"])
    result = validate_report(data, bundle, names)
    assert result.codes == ["V816"]
    assert result.diagnostics[0].path == "findings[0].repair_plan.may_change[1]"


def test_position_reader_matches_json_and_locates_values() -> None:
    doc = parse_positioned(TEXT, "r.json")
    assert doc.value == json.loads(TEXT)
    span = doc.spans[("findings", 0, "evidence", 3, "quote")]
    assert (span.line, span.col) == _at(TEXT, '"Jordan Lee — pip status')
    deep = "[" * 200 + "]" * 200
    with pytest.raises(ValueError, match="nested deeper"):
        parse_positioned(deep, "deep.json")
    with pytest.raises(ValueError, match="1:6"):
        parse_positioned('{"a" 1}', "bad.json")


# ------------------------------------------------------------------ the command

def _eairc(*args: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EAIR_DEBUG"}
    env.update(LITELLM_OFFLINE_MODE="true", LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.run([sys.executable, "-m", "eairdsl.cli", *map(str, args)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in proc.stderr + proc.stdout
    return proc


def test_done_when_through_the_cli(tmp_path: Path) -> None:
    """The correct report passes; one quote one character off fails, located, coded, named."""
    ok = _eairc("check-report", REPORT.relative_to(ROOT), "--bundle", BUNDLE.relative_to(ROOT),
                "--world", "worlds/d1.eair")
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""
    assert "resolvable findings: 1/1" in ok.stdout
    assert "resolvable evidence units: 5/5" in ok.stdout
    off_text = TEXT.replace("2.1 of 5, below", "2.1 of 5, belov")
    off = _write(tmp_path, off_text, "d1-quote-off.json")
    bad = _eairc("check-report", off, "--bundle", BUNDLE.relative_to(ROOT))
    assert bad.returncode == 1
    line, col = _at(off_text, '"Jordan Lee — rating: 2.1 of 5, belov')
    first = bad.stderr.splitlines()[0]
    assert first.endswith(
        f"d1-quote-off.json:{line}:{col}: error[V806]: finding 'F1' (findings[0]) evidence[2]: "
        "quote is not verbatim in s0008.content (compared after Unicode NFC and whitespace "
        "normalisation only)")
    assert "^^^" in bad.stderr
    assert "resolvable findings: 0/1" in bad.stdout
    assert "resolvable evidence units: 4/5" in bad.stdout


def test_golden_expected_diagnostics() -> None:
    """tests/fixtures/audit/d1/quote-off.json draws exactly quote-off.expected (stderr)."""
    proc = _eairc("check-report", "tests/fixtures/audit/d1/quote-off.json", "--bundle",
                  "tests/fixtures/audit/d1/bundle")
    assert proc.returncode == 1
    expected = (FIXTURES / "quote-off.expected").read_text(encoding="utf-8")
    assert proc.stderr == expected
    ok = _eairc("check-report", "tests/fixtures/audit/d1/report.json", "--bundle",
                "tests/fixtures/audit/d1/bundle")
    assert ok.stdout == (FIXTURES / "report.expected").read_text(encoding="utf-8")


@pytest.mark.parametrize(("args", "needle"), [
    (("--bundle", "tests/fixtures/audit/nowhere"), "not a bundle manifest"),
    (("--bundle", "tests/fixtures/audit/d1/bundle", "--world", "worlds/nope.eair"), "error"),
])
def test_cli_bad_inputs_exit_1_without_traceback(args: tuple[str, ...], needle: str) -> None:
    proc = _eairc("check-report", "tests/fixtures/audit/d1/report.json", *args)
    assert proc.returncode == 1
    assert needle in proc.stderr


def test_cli_missing_report_is_a_located_v801(tmp_path: Path) -> None:
    proc = _eairc("check-report", tmp_path / "none.json", "--bundle",
                  "tests/fixtures/audit/d1/bundle")
    assert proc.returncode == 1
    assert "error[V801]" in proc.stderr


def test_every_code_is_documented_in_errors_md() -> None:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^### (V8\d\d) — ", text, re.M))
    assert documented == set(CODES)
    assert "| V8xx |" in text


def test_a_step_scoped_withheld_locator_rejects_a_field_the_step_has() -> None:
    """`s0008.content` withheld: the field exists, but the bundle says it is not to be quoted."""
    scoped = Bundle.load(BUNDLE)
    scoped.withheld.add("s0008.content")
    result = validate_report(TEXT, scoped)
    assert result.codes == ["V808"]
    assert result.diagnostics[0].unit == 2
    assert result.diagnostics[0].path == "findings[0].evidence[2].field"
    # a bare locator (`result`: the trace's result line) never hides a step's own field
    assert "result" in scoped.withheld
    text = TEXT.replace('"field": "args"', '"field": "result"')
    assert validate_report(text, Bundle.load(BUNDLE)).codes == ["V808"]  # s0006 has no result
    own = TEXT.replace('"step": "s0006",\n          "edge": "specialist->tool:hr_read",\n'
                       '          "field": "args",\n          "quote": "{\\"id\\": \\"E-1042\\"}"',
                       '"step": "s0007",\n          "edge": "tool:hr_read->specialist",\n'
                       '          "field": "result.rating",\n'
                       '          "quote": "below expectations"')
    assert own != TEXT
    assert validate_report(own, Bundle.load(BUNDLE)).ok  # s0007's own result is quotable


def test_the_hand_written_a1_report_validates() -> None:
    """A1: a shared action (the payments ledger every paying role writes) is a boundary."""
    a1 = ROOT / "tests" / "fixtures" / "audit" / "a1"
    world = resolve_world(ROOT / "worlds" / "a1.eair")
    bundle = Bundle.load(a1 / "bundle")
    text = (a1 / "report.json").read_text(encoding="utf-8")
    result = validate_report(text, bundle, world)
    assert result.diagnostics == []
    assert (result.findings_resolvable, result.units_resolvable, result.units_total) == (1, 6, 6)
    # a two-character quote is accepted only because it is the whole field (args.amount)
    assert validate_report(text.replace('"quote": "20"', '"quote": "2"'), bundle,
                           world).codes == ["V807"]  # verbatim, but not the whole field
    assert validate_report(text.replace('"quote": "20"', '"quote": "21"'), bundle,
                           world).codes == ["V806"]
    assert validate_report(text.replace('"field": "args.amount"', '"field": "args"'), bundle,
                           world).codes == ["V807"]
    # the ledger itself is ground truth: protected in a1.eair
    guarded = text.replace('"tool request_approval"', '"ledger payments"')
    assert validate_report(guarded, bundle, world).codes == ["V816"]


@pytest.mark.parametrize("text", ["[]", '"x"', "null", "1e999999", '{"a":' * 100, "-",
                                  "[" * 70 + "]" * 70, '{"findings": [1, 2]}', "\ufeff{}"])
def test_hostile_reports_are_located_diagnostics(text: str, bundle: Bundle) -> None:
    result = validate_report(text, bundle)
    assert not result.ok and result.codes[0] in ("V801", "V802")
    assert all(d.diagnostic.span is not None for d in result.diagnostics)


def test_any_one_character_edit_gives_diagnostics_not_exceptions(bundle: Bundle) -> None:
    """300 seeded random edits of the golden report: each validates or draws V8xx codes."""
    import random

    rng = random.Random(14)
    for _ in range(300):
        k = rng.randrange(len(TEXT))
        edit = rng.choice(['x', '"', "{", "}", "[", "]", ",", ":", "0", " ", "\\", ""])
        text = TEXT[:k] + edit + TEXT[k + rng.randrange(2):]
        result = validate_report(text, bundle)
        assert all(c in CODES for c in result.codes)
        assert result.ok == (not any(d.is_error for d in result.diagnostics))


def test_a_report_on_another_bundle_stops_at_v803() -> None:
    other = Bundle.load(ROOT / "tests" / "fixtures" / "audit" / "a1" / "bundle")
    result = validate_report(REPORT, other)
    assert result.codes == ["V803", "V803"]
    assert result.schema_valid and not result.citations_checked
    proc = _eairc("check-report", REPORT.relative_to(ROOT), "--bundle",
                  "tests/fixtures/audit/a1/bundle")
    assert proc.returncode == 1
    assert "citations not checked: the report is about another bundle" in proc.stdout


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [1, 2.5, -0, 1e400, "x\\u00e9", null, true]}',
    '{"a": 1, "a": 2}',                       # a repeated key: the positioned reader's report
    '{"a": NaN}', '[Infinity]', '\ufeff{"a": 1}', '{"a": 1} x', '', '{"a": "\x01"}',
    json.dumps(_nested(64, 1)), json.dumps(_nested(65, 1)), json.dumps(_nested(64, [])),
    json.dumps(_nested(64, [1])), json.dumps(_nested(200, 1)),
])
def test_the_fast_reader_reads_as_the_positioned_one(text: str) -> None:
    """`parse_fast` (the C reader, positions on demand) gives `parse_positioned`'s value,
    repeated keys and error, and the same located span for any path it is asked for."""
    def outcome(parse: object) -> object:
        try:
            value, positions = parse(text)  # type: ignore[operator]
        except JsonSyntaxError as exc:
            return str(exc)
        return json.dumps(value, sort_keys=True), positions.repeated, \
            positions.locate(("a",)) if isinstance(value, dict) else None

    def positioned(t: str) -> object:
        found = parse_positioned(t, "r.json")
        return found.value, found

    assert outcome(lambda t: parse_fast(t, "r.json")) == outcome(positioned)
