"""A Signal as a developer reads it: severity from its occurrences, remediations, checks.

`signal_view(store, id)` recomputes everything from the stored occurrences, so
a later update (more sessions analysed, a new consequence) changes the answer
and nothing is cached that could disagree with the evidence:

- **severity**: per nature, the distinct affected sessions among the Signal's
  *supported* occurrences over the sessions actually analysed in its worlds
  (every session an ingested audit analysed, with findings or without), and
  the highest factor any supported occurrence of that nature evidences
  (`eairdsl.signals.mapping.factors`); `eairdsl.signals.severity` does the
  arithmetic and S is the maximum over the natures present. A Signal with no
  supported occurrence (leads only, or outside the catalogue) has none;
- **actions** (§3.4): one per distinct repair plan of its occurrences, on
  instructions (a participant's card or objective), context (a document or
  record), tool integration (a tool) or world declarations (a policy, guard,
  channel or anything else), read from the plan's `may_change`;
- **checks**: two cohorts — the affected cases and the cases that previously
  succeeded (the Signal's worlds' analysed sessions it never occurred in) —
  each `pending` until a repair's retest decides it: the retest's target
  outcome on fresh cases (no realized target, AuditPass) for the affected
  cohort, Retain ≥ 0.95 on the regression cases for the other. A regression
  after the resolution fails the affected cohort again.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.audit.contract import RepairPlan
from eairdsl.repair.model import Acceptance, RetestResult
from eairdsl.signals.occurrences import Occurrence, Status
from eairdsl.signals.severity import SeverityCalculation, SignalSeverity, calculate, signal_severity


class SignalsStore(Protocol):
    """What a Signal's view reads of the store (`signals.store.SignalsStore`): a protocol,
    since the store calls `signal_view` to cache each Signal's severity after an update
    and so imports this module, which must not import it back."""

    def signal_row(self, sid: str) -> dict[str, Any]: ...
    def occurrences(self, sid: str) -> list[tuple[Occurrence, int]]: ...
    def analysed(self, worlds: set[str | None]) -> set[str]: ...
    def studies_by_seq(self) -> dict[int, str]: ...
    def transitions(self, sid: str) -> list[dict[str, Any]]: ...
    def repairs(self, sid: str) -> list[dict[str, Any]]: ...

__all__ = ["Action", "Check", "RepairRecord", "SignalView", "signal_view", "action_category",
           "repair_records", "NATURE_ORDER"]

NATURE_ORDER = ("realized_defect", "risk_exposure", "inefficiency")
Category = Literal["instructions", "context", "tool_integration", "world_declarations"]
_CATEGORY: dict[str, Category] = {
    "participant": "instructions", "role": "instructions", "actor": "instructions",
    "simulator": "instructions", "card": "instructions",
    "document": "context", "record": "context", "memory": "context", "field": "context",
    "tool": "tool_integration",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def action_category(surface: str) -> Category:
    """What a `KIND NAME` repair surface is an action on."""
    return _CATEGORY.get(surface.split(" ", 1)[0].casefold(), "world_declarations")


class Action(_Model):
    objective: str
    categories: list[Category]
    surfaces: list[str] = Field(default_factory=list)
    requirements: list[dict[str, Any]] = Field(default_factory=list)
    must_not_change: list[str] = Field(default_factory=list)
    occurrences: int = 0
    repaired_by: str | None = None


class RepairRecord(BaseModel):
    """A repair the store recorded for a Signal (`SignalsStore.repairs`), typed: the
    decision, the plan it carried out, and its retest (None when none ran) as the repair
    folder holds them (`eairdsl.repair.folder`)."""

    repair: str
    accepted: bool
    acceptance: Acceptance
    plan: RepairPlan
    retest: RetestResult | None = None


def repair_records(store: SignalsStore, sid: str) -> list[RepairRecord]:
    """The Signal's repairs in the order they were recorded."""
    return [RepairRecord.model_validate(r) for r in store.repairs(sid)]


class Check(_Model):
    cohort: Literal["affected", "previously_succeeding"]
    cases: int
    status: Literal["pending", "passed", "failed"]
    detail: str


class SignalView(_Model):
    id: str
    state: str
    merged_into: str | None = None
    resolved_digest: str | None = None
    evidence: Status
    natures: list[str]
    top_type: str
    types: list[str]
    component: str
    worlds: list[str]
    occurrences: int
    supported: int
    sessions: int
    analysed: int
    first_seen: str
    last_seen: str
    severity: SignalSeverity | None = None
    factor_rules: dict[str, str] = Field(default_factory=dict)
    actions: list[Action] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)

    @property
    def score(self) -> int:
        return self.severity.score if self.severity else 0


def _evidence(occs: list[Occurrence]) -> Status:
    statuses = {o.status for o in occs}
    for s in ("supported", "insufficient_evidence"):
        if s in statuses:
            return s
    return "outside_catalogue"


def _severity(occs: list[Occurrence], analysed: int
              ) -> tuple[SignalSeverity | None, dict[str, str]]:
    calcs: list[SeverityCalculation] = []
    rules: dict[str, str] = {}
    for nature in NATURE_ORDER:
        mine = [o for o in occs if o.status == "supported" and o.nature == nature
                and o.factors is not None]
        if not mine:
            continue
        best = max(mine, key=lambda o: (o.factors.points(nature) if o.factors else 0, o.key))
        f = best.factors
        assert f is not None
        affected = len({o.session for o in mine})
        calcs.append(calculate(nature, consequence=f.consequence, reachability=f.reachability,
                               waste=f.waste, affected_sessions=affected,
                               analyzed_sessions=max(analysed, affected)))
        rules[nature] = f"{f.rule} ({best.short}, {f.version})"
    return (signal_severity(calcs) if calcs else None), rules


def _actions(occs: list[Occurrence], repairs: list[RepairRecord]) -> list[Action]:
    plans: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
    counts: dict[tuple[str, tuple[str, ...]], int] = {}
    for o in occs:
        if not o.repair_plan:
            continue
        key = (str(o.repair_plan.get("objective", "")),
               tuple(sorted(o.repair_plan.get("may_change") or [])))
        plans.setdefault(key, o.repair_plan)
        counts[key] = counts.get(key, 0) + 1
    repaired = {(r.plan.objective, tuple(sorted(r.plan.may_change))): r for r in repairs
                if r.accepted}
    out = []
    for key in sorted(plans, key=lambda k: (-counts[k], k)):
        plan = plans[key]
        surfaces = list(key[1])
        cats = sorted({action_category(s) for s in surfaces}) or ["world_declarations"]
        out.append(Action(objective=key[0], categories=cats, surfaces=surfaces,
                          requirements=list(plan.get("requirements") or []),
                          must_not_change=list(plan.get("must_not_change") or []),
                          occurrences=counts[key],
                          repaired_by=repaired[key].repair if key in repaired else None))
    return out


def _checks(affected: int, succeeded: int, repairs: list[RepairRecord], state: str,
            regression: str | None) -> list[Check]:
    done = [(r, r.retest) for r in repairs if r.retest is not None]
    if not done:
        tried = [r for r in repairs if not r.accepted]
        why = (f"; repair {tried[-1].repair} not accepted: "
               f"{tried[-1].acceptance.reason}" if tried else "")
        return [Check(cohort="affected", cases=affected, status="pending",
                      detail="no retest yet: rerun the affected cases after a change" + why),
                Check(cohort="previously_succeeding", cases=succeeded, status="pending",
                      detail="no retest yet: rerun cases that kept the property")]
    last, rt = done[-1]
    after, before = rt.target_after, rt.target_before
    regress = sum(1 for c in rt.cases if c.group == "regression")
    ok_a = rt.audit_pass and after.k == 0
    detail_a = (f"retest {last.repair}: target realized {after.k}/{after.n} "
                f"after the repair (before {before.k}/{before.n}), AuditPass {rt.audit_pass}")
    if not last.accepted:
        detail_a += (f" (repair not accepted: {last.acceptance.reason}; the "
                     "world is unchanged)")
        ok_a = False
    if state == "regressed" and regression:
        ok_a, detail_a = False, f"regressed after the repair: {regression}"
    ok_b = rt.retain_problem() is None  # undefined (no baseline utility) does not pass
    return [Check(cohort="affected", cases=after.n,
                  status="passed" if ok_a else "failed", detail=detail_a),
            Check(cohort="previously_succeeding", cases=regress or succeeded,
                  status="passed" if ok_b else "failed",
                  detail=f"retest {last.repair}: Retain {rt.retain} (utility "
                         f"{rt.utility_before} -> {rt.utility_after}) on "
                         f"{regress} regression case(s); needs >= 0.95")]


def signal_view(store: SignalsStore, sid: str) -> SignalView:
    """Everything `list`, `show` and the report say about one Signal, from the store."""
    row = store.signal_row(sid)
    pairs = store.occurrences(sid)
    occs = [o for o, _ in pairs]
    worlds = sorted({o.world or "unknown" for o in occs})
    population = store.analysed(set(worlds) | ({None} if "unknown" in worlds else set()))
    sessions = {o.session for o in occs}
    supported = [o for o in occs if o.status == "supported"]
    affected = {o.session for o in supported}
    severity, rules = _severity(occs, len(population))
    ranked: dict[str, int] = {}
    for o in occs:
        for rank, t in enumerate(o.types):
            ranked[t] = min(ranked.get(t, rank), rank) if t in ranked else rank
    types = sorted(ranked, key=lambda t: (ranked[t], t))
    tops = sorted({o.types[0] if o.types else "outside_catalogue" for o in occs})
    components = sorted({f"{o.component_type} {o.component_name}" for o in occs})
    studies = store.studies_by_seq()
    seqs = sorted(seq for _, seq in pairs)

    def seen(seq: int | None) -> str:
        return "—" if seq is None else f"{studies.get(seq, '') or '?'} (update {seq})"

    repairs = repair_records(store, sid)
    regression = next((t["reason"] for t in reversed(store.transitions(sid))
                       if t["to_state"] == "regressed"), None)
    return SignalView(
        id=sid, state=str(row["state"]), merged_into=row["merged_into"],
        resolved_digest=row["resolved_digest"], evidence=_evidence(occs) if occs else
        "outside_catalogue",
        natures=[n for n in NATURE_ORDER if any(o.nature == n for o in supported)]
        or sorted({o.nature for o in occs if o.nature}),
        top_type=", ".join(tops) if tops else "—", types=types[:6],
        component=", ".join(components) if components else "—", worlds=worlds,
        occurrences=len(occs), supported=len(supported), sessions=len(sessions),
        analysed=len(population), first_seen=seen(seqs[0] if seqs else None),
        last_seen=seen(seqs[-1] if seqs else None), severity=severity, factor_rules=rules,
        actions=_actions(occs, repairs),
        checks=_checks(len(affected) or len(sessions), max(len(population - sessions), 0),
                       repairs, str(row["state"]), regression))
