"""Report contract v1: the committed JSON Schema is the model's, and the model is strict.

A report is untrusted input that a validator and then a Repair Agent read, so
the contract accepts no extra field, no coercion (a quoted number is not a
number), no boolean for `audit_schema`, no fourth taxonomy type and no
vocabulary outside §2's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from eairdsl.audit.contract import (
    AUDIT_SCHEMA,
    Report,
    report_schema,
    schema_text,
)
from eairdsl.check.references import RISKS

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "docs" / "audit-report.schema.json"
REPORT = ROOT / "tests" / "fixtures" / "audit" / "d1" / "report.json"


def _report() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REPORT.read_text(encoding="utf-8"))
    return data


def test_committed_schema_is_the_generated_one() -> None:
    """docs/audit-report.schema.json never drifts from the model (regenerate with schema_text)."""
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "run: python -c 'from eairdsl.audit.contract import schema_text; "
        "open(\"docs/audit-report.schema.json\", \"w\").write(schema_text())'")


def test_schema_forbids_extra_fields_everywhere() -> None:
    schema = report_schema()
    assert schema["additionalProperties"] is False
    for name, definition in schema["$defs"].items():
        if definition.get("type") == "object":
            assert definition.get("additionalProperties") is False, name


def test_schema_vocabularies_are_the_papers() -> None:
    defs = report_schema()["$defs"]
    finding = defs["Finding"]["properties"]
    assert set(finding["risk"]["enum"]) == set(RISKS) | {"other"}
    assert finding["status"]["enum"] == ["supported", "lead"]
    assert set(finding["nature"]["enum"]) == {"realized_defect", "risk_exposure",
                                              "inefficiency"}
    assert set(finding["contribution"]["enum"]) == {
        "introduced", "amplified", "authorized", "concealed", "preserved_despite_check"}
    assert finding["types"]["maxItems"] == 3
    assert set(defs["Boundary"]["properties"]["kind"]["enum"]) == {
        "handoff", "delegation", "review", "routing", "shared_action", "power", "record"}
    assert set(defs["EvidenceUnit"]["properties"]["supports"]["items"]["enum"]) == {
        "R1", "R2", "R3", "R4"}
    assert set(report_schema()["properties"]["verdict"]["enum"]) == {
        "findings", "no_supported_problem", "insufficient_evidence"}


def test_the_d1_report_parses() -> None:
    report = Report.model_validate(_report(), strict=True)
    assert report.audit_schema == AUDIT_SCHEMA
    assert report.findings[0].boundary.edge == "assistant->specialist"


def _set(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize(("path", "value", "loc"), [
    (("findings", 0, "severity"), "high", ("findings", 0, "severity")),
    (("findings", 0, "confidence"), "0.95", ("findings", 0, "confidence")),
    (("findings", 0, "confidence"), 1.5, ("findings", 0, "confidence")),
    (("audit_schema",), True, ("audit_schema",)),
    (("audit_schema",), 2, ("audit_schema",)),
    (("verdict",), "clean", ("verdict",)),
    (("findings", 0, "boundary", "kind"), "email", ("findings", 0, "boundary", "kind")),
    (("findings", 0, "evidence", 0, "supports"), ["R5"],
     ("findings", 0, "evidence", 0, "supports", 0)),
    (("findings", 0, "evidence"), [], ("findings", 0, "evidence")),
    (("findings", 0, "types"), [{"taxonomy": "eair", "version": "eair-1", "id": "D1"}] * 4,
     ("findings", 0, "types")),
    (("bundle", "manifest_sha256"), "abc", ("bundle", "manifest_sha256")),
])
def test_contract_rejects(path: tuple[str | int, ...], value: Any,
                          loc: tuple[str | int, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        Report.model_validate(_set(_report(), path, value), strict=True)
    assert [e["loc"] for e in info.value.errors()] == [loc]


def test_a_finding_without_its_boundary_is_rejected() -> None:
    data = _report()
    del data["findings"][0]["boundary"]
    with pytest.raises(ValidationError) as info:
        Report.model_validate(data, strict=True)
    assert info.value.errors()[0]["loc"] == ("findings", 0, "boundary")
    assert info.value.errors()[0]["type"] == "missing"
