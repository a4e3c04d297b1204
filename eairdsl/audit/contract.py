"""Report contract v1: the realization certificate an Auditor Agent returns, as data.

EAIR §4 asks every reported failure to come back as a certificate
c = (b, π, m, E, ρ) mirroring the criteria of §2: the interaction boundary b
where the organizational property failed (R1), the path π from the first
observed anomaly (R2), the material effect m (R3), the cited steps E ⊆ τ̃ (R4),
and the repair plan ρ. The paper's finding is that the contract, not the
model, makes a diagnosis checkable (98.8% of findings resolvable against 48.3%
for free text, Table 3), so the contract is strict: every model forbids extra
fields, every choice is a closed vocabulary, and `validate.validate_report`
checks what a schema cannot (that citations resolve to the bundle).

The JSON Schema of `Report` is committed as docs/audit-report.schema.json and
a test keeps it equal to `report_schema()`. docs/audit.md describes every field.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eairdsl.vocabulary import RISKS

__all__ = ["AUDIT_SCHEMA", "EAIR_TAXONOMY_VERSION", "SIGNALS_TAXONOMY_VERSION", "RiskId",
           "Criterion", "Nature", "BoundaryKind", "Contribution", "Verdict", "BundleRef",
           "Auditor", "PropertyRef", "RiskType", "Component", "Boundary", "Effect",
           "EvidenceUnit", "Requirement", "RepairPlan", "Finding", "OutOfCatalogue",
           "QueryRecord", "Coverage", "Usage", "Report", "report_schema", "schema_text"]

#: the contract's version; a report says which one it follows in `audit_schema`
AUDIT_SCHEMA = 1
#: EAIR Table 1: thirteen risks A1–F2
EAIR_TAXONOMY_VERSION = "eair-1"
#: Signals Table 4: forty-five problem types in eight families
SIGNALS_TAXONOMY_VERSION = "signals-1"

RiskId = Literal["A1", "A2", "A3", "B1", "B2", "C1", "C2", "C3", "D1", "D2", "D3", "F1", "F2",
                 "other"]
assert set(get_args(RiskId)) == set(RISKS) | {"other"}
#: the four failure criteria of §2 (B.1 keeps their identifiers in the schema)
Criterion = Literal["R1", "R2", "R3", "R4"]
Nature = Literal["realized_defect", "risk_exposure", "inefficiency"]
#: §2's interaction boundaries, plus a shared record
BoundaryKind = Literal["handoff", "delegation", "review", "routing", "shared_action", "power",
                       "record"]
#: R2: how the boundary contributed (B.1: beyond transport)
Contribution = Literal["introduced", "amplified", "authorized", "concealed",
                       "preserved_despite_check"]
Verdict = Literal["findings", "no_supported_problem", "insufficient_evidence"]

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
_STEP = Field(min_length=1, max_length=64)


class _Model(BaseModel):
    """Strict: no extra fields, no coercion (a JSON string is never read as a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BundleRef(_Model):
    """Which sanitized bundle the report is about: its manifest's episode and sha256."""

    episode: str = Field(min_length=1, description="manifest.json's opaque episode id")
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$",
                                 description="sha256 of the bundle's manifest.json")


class Auditor(_Model):
    """Who audited: enough to reproduce the audit."""

    kind: Literal["rules", "oracle", "llm", "human"]
    model: str | None = Field(None, description="the model, for an llm auditor")
    prompt_version: str | None = None
    seed: int | None = None


class PropertyRef(_Model):
    """The organizational property φ_r that failed: a declared policy, free text, or both."""

    policy: str | None = Field(None, description="a policy of the bundle's policies.json")
    text: str | None = Field(None, min_length=1, description="the property in words")


class RiskType(_Model):
    """One taxonomy type of a finding; the taxonomy version is pinned with the id."""

    taxonomy: Literal["eair", "signals"]
    version: Literal["eair-1", "signals-1"]
    id: str = Field(min_length=1, max_length=64,
                    description="an EAIR risk id (A1–F2) or a Signals type id")


class Component(_Model):
    """The part of the workflow the finding implicates."""

    type: Literal["participant", "tool", "policy", "record", "document", "channel"]
    name: str = Field(min_length=1)


class Boundary(_Model):
    """R1: where roles or workflow states interact, named by its kind, edge and step."""

    kind: BoundaryKind
    edge: str = Field(min_length=1, description="the step's edge ref (evidence.edge_ref)")
    step: str = _STEP


class Effect(_Model):
    """R3: the material effect at the property's endpoint; a risk exposure has no step."""

    endpoint: str = Field(min_length=1, description="where the property had to hold")
    step: str | None = Field(None, min_length=1, max_length=64)


class EvidenceUnit(_Model):
    """R4: one cited step, its edge, one field of it and a verbatim quote from that field."""

    step: str = _STEP
    edge: str | None = Field(None, description="edge_ref(step); null for a step with no edge")
    field: str = Field(min_length=1, description="a field of the step, as field_text names it")
    quote: str
    supports: list[Criterion] = Field(min_length=1, max_length=4)


class Requirement(_Model):
    """One condition a successful repair must meet, with how to check it."""

    id: str = Field(pattern=_ID)
    text: str = Field(min_length=1)
    check: str | None = Field(None, description="how a retest or review decides it is met")


class RepairPlan(_Model):
    """ρ: what must change, the minimum conditions of success, and the repair surface."""

    objective: str = Field(min_length=1)
    requirements: list[Requirement] = Field(min_length=1)
    may_change: list[str] = Field(default_factory=list,
                                  description="declarations of the world the repair may edit")
    must_not_change: list[str] = Field(default_factory=list,
                                       description="what the repair must leave as it is")


class Finding(_Model):
    """A realization certificate c = (b, π, m, E, ρ), supported or kept as a lead."""

    id: str = Field(pattern=_ID)
    status: Literal["supported", "lead"]
    property: PropertyRef
    risk: RiskId
    nature: Nature
    types: list[RiskType] = Field(default_factory=list, max_length=3,
                                  description="ranked, most likely first")
    component: Component
    boundary: Boundary
    contribution: Contribution
    first_anomaly: str = _STEP
    path: list[str] = Field(default_factory=list, description="step ids in trace order")
    effect: Effect
    evidence: list[EvidenceUnit] = Field(min_length=1, description="E: the cited steps (R4)")
    resolved_later: str | None = Field(None, min_length=1, max_length=64,
                                       description="a later step that stopped or undid it")
    confidence: float = Field(ge=0.0, le=1.0)
    repair_plan: RepairPlan | None = None


class OutOfCatalogue(_Model):
    """A candidate problem outside the risk catalogue (the paper's beyond-label reports)."""

    id: str = Field(pattern=_ID)
    summary: str = Field(min_length=1)
    property: PropertyRef | None = None
    evidence: list[EvidenceUnit] = Field(default_factory=list)


class QueryRecord(_Model):
    """One query-API call the auditor made."""

    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class Coverage(_Model):
    """What was inspected: a clean verdict must show it."""

    steps_read: list[str] = Field(default_factory=list)
    queries: list[QueryRecord] = Field(default_factory=list)


class Usage(_Model):
    tokens_in: int | None = Field(None, ge=0)
    tokens_out: int | None = Field(None, ge=0)
    cost_usd: float | None = Field(None, ge=0)
    tool_calls: int | None = Field(None, ge=0)


class Report(_Model):
    """An audit report: contract v1."""

    audit_schema: Literal[1]
    report_id: str = Field(pattern=_ID)
    bundle: BundleRef
    auditor: Auditor
    verdict: Verdict
    findings: list[Finding] = Field(default_factory=list,
                                    description="status supported")
    leads: list[Finding] = Field(default_factory=list, description="status lead")
    out_of_catalogue: list[OutOfCatalogue] = Field(default_factory=list)
    coverage: Coverage
    usage: Usage = Usage()

    @field_validator("audit_schema", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        # `true == 1` in Python; JSON Schema tells them apart, and so does the contract.
        if isinstance(value, bool):
            raise ValueError("audit_schema is the number 1, not a boolean")
        return value


def report_schema() -> dict[str, Any]:
    """The JSON Schema of contract v1, as committed in docs/audit-report.schema.json."""
    schema = Report.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def schema_text() -> str:
    """The schema file's exact text: sorted keys, two-space indent, one final newline."""
    return json.dumps(report_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
