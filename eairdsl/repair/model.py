"""What crosses between the repair loop, the Repair Agent and the Repair Reviewer.

Two one-method protocols, like the episode agents and the auditors:

- `RepairAgent.propose(RepairRequest) -> Candidate`: the certificate, its repair
  plan, the world's source (with its `protected` declarations named read-only)
  and the feedback of earlier rounds in; a whole candidate `.eair` text out,
  with every changed declaration attributed to a plan requirement id.
- `Reviewer.review(ReviewRequest) -> Review`: the finding, the plan, both sources
  and the semantic diff in; a pass/fail with a reason on each of D.1's four
  dimensions and a verdict out.

The loop owns everything in between (compiling, ScopeOK, rounds, retest,
acceptance); agents and reviewers only read and propose, so an offline
catalogue, an LLM and a person are interchangeable.

Declarations are named `KIND NAME` everywhere (`tool issue_credit`,
`participant specialist`, `policy compensation_cap`), the form repair plans'
`may_change` uses and `diff.Change` gives as (kind, name).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.audit.contract import Finding, RepairPlan

__all__ = ["Feedback", "RepairRequest", "Candidate", "RepairAgent", "Dimension",
           "DIMENSIONS", "DimensionVerdict", "ReviewRequest", "Review", "Reviewer",
           "RepairError", "decl_name", "parse_entry", "canonical_key"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def decl_name(kind: str, name: str) -> str:
    """The `KIND NAME` form of a declaration (plan surfaces, attribution keys)."""
    return f"{kind} {name}"


#: `role`, `ledger` … as plan surfaces and attribution keys name them -> diff kinds
_ALIASES = {"role": "participant", "actor": "participant", "simulator": "participant",
            "table": "record", "ledger": "record", "delegation": "channel"}


def parse_entry(entry: str) -> tuple[str, str]:
    """A plan surface or attribution key as (kind, name); a bare name has kind `*`."""
    head, _, rest = entry.strip().partition(" ")
    if rest.strip():
        kind = _ALIASES.get(head, head)
        return kind, rest.strip()
    return "*", head


def canonical_key(entry: str) -> str:
    """An attribution key in the diff's own `KIND NAME` form (`role x` -> `participant
    x`), so an agent may name a declaration by its keyword."""
    kind, name = parse_entry(entry)
    return name if kind == "*" else decl_name(kind, name)


class Feedback(_Model):
    """Why an earlier round's candidate was not taken, for the agent's next try."""

    round: int
    stage: Literal["compile", "scope", "review", "retest"]
    #: one line per problem: located compiler diagnostics (file:line:col: error[E…]),
    #: scope violations, the reviewer's failed dimensions and required changes
    problems: list[str]
    #: the reviewer's required changes, when a review rejected the candidate
    required_changes: list[str] = Field(default_factory=list)


class RepairRequest(_Model):
    """Everything a Repair Agent gets for one round."""

    #: the world's main file name (the candidate replaces its text)
    world_file: str
    #: the original source text of the world's main file
    source: str
    #: other source files of the world folder by relative path (imports, cards), read-only
    #: unless a candidate returns them changed
    files: dict[str, str] = Field(default_factory=dict)
    finding: Finding
    plan: RepairPlan
    #: `KIND NAME` of every declaration the original protects (read-only)
    protected: list[str]
    round: int = 1
    feedback: list[Feedback] = Field(default_factory=list)
    #: the text of the latest candidate, when this round revises it
    previous: str | None = None


class Candidate(_Model):
    """A proposed repaired world: the main file's whole text, formatted."""

    source: str
    #: changed or new files of the world folder besides the main file (relative paths,
    #: inside the folder; e.g. a new module it imports)
    files: dict[str, str] = Field(default_factory=dict)
    #: `KIND NAME` of each changed declaration -> the plan requirement ids it serves
    attribution: dict[str, list[str]] = Field(default_factory=dict)
    #: how each change addresses the diagnosed failure (EAIR §4, stage 2)
    rationale: str = ""
    #: which agent and pattern produced it (catalogue pattern id, model)
    produced_by: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class RepairAgent(Protocol):
    def propose(self, request: RepairRequest) -> Candidate:  # pragma: no cover - protocol
        ...


#: Appendix D.1's four review dimensions
Dimension = Literal["risk_resolution", "plan_fidelity", "introduced_risk", "proportionality"]
DIMENSIONS: tuple[Dimension, ...] = ("risk_resolution", "plan_fidelity", "introduced_risk",
                                     "proportionality")


class ReviewRequest(_Model):
    """What the Repair Reviewer compares: W and W′, the diff, the finding and the plan."""

    world_file: str
    original: str
    candidate: str
    files_changed: dict[str, str] = Field(default_factory=dict)
    finding: Finding
    plan: RepairPlan
    #: `eairc diff --json` of the two compiled worlds (diff.WorldDiff as data)
    diff: dict[str, Any]
    attribution: dict[str, list[str]] = Field(default_factory=dict)
    rationale: str = ""
    round: int = 1
    #: the original world's folder and the candidate's (a copy with the candidate
    #: applied), for reviewers that compile or run them; None when not on disk
    original_dir: str | None = None
    candidate_dir: str | None = None


class DimensionVerdict(_Model):
    passed: bool
    reason: str = Field(min_length=1)


class Review(_Model):
    """D.1: pass/fail with a reason on each dimension, and the verdict."""

    risk_resolution: DimensionVerdict
    plan_fidelity: DimensionVerdict
    introduced_risk: DimensionVerdict
    proportionality: DimensionVerdict
    verdict: Literal["approve", "reject"]
    #: what must change before approval (required on a rejection)
    required_changes: list[str] = Field(default_factory=list)
    reviewer: dict[str, Any] = Field(default_factory=dict)

    def dimension(self, d: Dimension) -> DimensionVerdict:
        verdict: DimensionVerdict = getattr(self, d)
        return verdict

    def contradictions(self) -> list[str]:
        """Why this review is not acceptable as given: an approval with a failed dimension,
        or a rejection that names nothing to change (the loop refuses such reviews)."""
        failed = [d for d in DIMENSIONS if not self.dimension(d).passed]
        problems: list[str] = []
        if self.verdict == "approve" and failed:
            problems.append("approves although " + ", ".join(failed) + " failed")
        if self.verdict == "reject" and not self.required_changes:
            problems.append("rejects without naming a required change")
        return problems


@runtime_checkable
class Reviewer(Protocol):
    def review(self, request: ReviewRequest) -> Review:  # pragma: no cover - protocol
        ...


class RepairError(RuntimeError):
    """A Repair Agent or Reviewer that could not answer (provider failure, bad output);
    the loop records it for the round instead of a candidate or review."""
