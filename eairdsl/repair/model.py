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

Below them, what a repair folder records (`eairdsl.repair.folder` reads and
writes them): the selected finding and plan (`Selected`), each round's end
(`RoundOutcome`), a retest's result (`RetestResult`, with its `Target`, `Case`,
`Interval` and `Paired`), and the decision (`Acceptance`). They live here, beside
the protocols and with no tool module imported, so a reader of a finished repair
folder (the Signals store) loads neither the compiler nor the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from eairdsl.audit.contract import Finding, RepairPlan

if TYPE_CHECKING:
    from eairdsl.ir import World

__all__ = ["Feedback", "RepairRequest", "Candidate", "RepairAgent", "Dimension",
           "DIMENSIONS", "DimensionVerdict", "ReviewRequest", "Review", "Reviewer",
           "RepairError", "decl_name", "parse_entry", "canonical_key", "Selected", "Stage",
           "RoundOutcome", "Acceptance", "Target", "Case", "Interval", "Paired",
           "RetestResult"]


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
    #: W and W′ as the loop compiled them from those folders (not part of the request's
    #: data): a reviewer that reads compiled worlds takes them instead of compiling both
    #: again each round
    _compiled: tuple[World, World] | None = PrivateAttr(default=None)

    def with_worlds(self, original: World, candidate: World) -> ReviewRequest:
        """This request carrying W and W′ compiled (`compiled_worlds`)."""
        self._compiled = (original, candidate)
        return self

    def compiled_worlds(self) -> tuple[World, World] | None:
        """W and W′ compiled from `original_dir` and `candidate_dir`, when the loop gave
        them (`with_worlds`)."""
        return self._compiled


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


# ---------------------------------------------------------------- the folder's records


class Selected(BaseModel):
    """The finding a repair starts from, and where it came from (grader-side)."""

    episode: str
    finding: Finding
    plan: RepairPlan
    report: str
    #: the conditions of the audited episodes with a supported finding of the same property
    conditions: list[str] = Field(default_factory=list)


#: the stage a round reached: the loop's stages in order, and `accepted` past the last
Stage = Literal["propose", "compile", "scope", "review", "retest", "accepted"]


class RoundOutcome(BaseModel):
    """How a round ended: the stage it reached and whether it passed there."""

    round: int
    stage: Stage
    ok: bool
    compiled: bool = False
    scope_ok: bool | None = None
    review_ok: bool | None = None
    #: a review refused because it contradicts itself
    refused: list[str] = Field(default_factory=list)
    audit_pass: bool | None = None
    retain: float | None = None
    problems: list[str] = Field(default_factory=list)
    #: the candidate world's digest (when it compiled)
    digest: str | None = None
    feedback: Feedback | None = None


class Acceptance(BaseModel):
    accepted: bool
    scope_ok: bool | None
    review_ok: bool | None
    audit_pass: bool | None
    retain: float | None
    rounds: int
    target: dict[str, Any] | None
    #: the round decided on (the accepted one, or the last that compiled)
    round: int | None = None
    reason: str = ""
    finding: str = ""
    retest: str | None = None
    target_before: dict[str, Any] | None = None
    realized_after: int | None = None
    other_findings: int | None = None
    world_digest: str = ""
    candidate_digest: str | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)


class Target(BaseModel):
    """The targeted property: what a finding must share to be "the same failure"."""

    risk: str
    policy: str | None = None
    text: str | None = None
    boundary_kind: str
    #: the repair started from a lead (`--finding EP:lead-N`): the same failure found again
    #: as a lead counts against AuditPass too, or a repair seeded by a lead would pass on
    #: the auditor's conservatism alone
    lead: bool = False


class Case(BaseModel):
    """One retest case: run under W and W′ alike."""

    group: Literal["fresh", "regression"]
    condition: str
    instance: str
    seed: int
    #: the audited episode a regression case reruns
    audited: str | None = None
    #: content identity of the case's W trace (its bundle's episode id)
    identity: str | None = None


class Interval(BaseModel):
    k: int
    n: int
    low: float
    high: float


class Paired(BaseModel):
    """A measurement before (W) and after (W′) on the same cases, with McNemar's test."""

    measurement: str
    group: str
    before: Interval
    after: Interval
    #: discordant pairs: true before and false after (b), false before and true after (c)
    b: int
    c: int
    p: float


#: Retain threshold of acceptance (D.1)
RETAIN = 0.95


class RetestResult(BaseModel):
    about: str = ("the behavioural retest of an approved candidate (EAIR D.1): W and W' on a "
                  "cohort disjoint from the audited episodes, W' audited again")
    target: Target
    profile: str
    conditions: list[str]
    cases: list[Case]
    #: seeds of the audited episodes (never a fresh case's)
    audited_seeds: list[int]
    #: instances an audited episode ran (fresh cases take the others first)
    audited_instances: list[str] = Field(default_factory=list)
    #: fresh cases on an instance no audited episode ran (0: the audit ran every instance)
    fresh_on_unseen: int = 0
    dropped_same_content: int = 0
    audit_pass: bool
    #: why AuditPass failed: episode -> what the audit found
    audit_problems: list[str] = Field(default_factory=list)
    #: supported findings of other properties in the fresh audit (beyond the target)
    other_findings: int = 0
    target_after: Interval
    target_before: Interval
    utility_before: float
    utility_after: float
    #: utility(W′) / utility(W) on the same cases; None when W had no utility on them
    #: (undefined: not accepted, `retest.retain_problem`)
    retain: float | None
    paired: list[Paired] = Field(default_factory=list)
    #: per case: (W realized, W utility, W′ realized, W′ utility) as 1/0/None
    outcomes: list[dict[str, Any]] = Field(default_factory=list)
    validation: dict[str, Any] = Field(default_factory=dict)
    #: what ran: each party's agent in the retest traces' headers (W and W′)
    agents: dict[str, list[str]] = Field(default_factory=dict)
    #: LLM retests: the models and sampling options the retest traces record
    llm: dict[str, Any] | None = None
    #: the retest audit's auditor (from its reports), and the audit's it reran
    auditor: dict[str, Any] = Field(default_factory=dict)
    audit_auditor: dict[str, Any] = Field(default_factory=dict)

    def retain_problem(self) -> str | None:
        """Why Retain fails acceptance (None when it passes): below `RETAIN`, or undefined
        because W had no utility on the cases. Here, not in the retest, so the Signals
        store reads the same decision without loading the runtime."""
        if self.retain is None:
            return (f"Retain undefined: W reached no utility on the {len(self.cases)} "
                    "retest case(s), so the retest cannot show that W' keeps the task "
                    "(D.1); retest under conditions where the workflow completes its task")
        if self.retain < RETAIN:
            return (f"Retain {self.retain:.3f} < {RETAIN}: utility {self.utility_after:.0%} "
                    f"after vs {self.utility_before:.0%} before on the same cases")
        return None
