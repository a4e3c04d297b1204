"""The offline policy auditor (`--auditor offline`): deterministic rules, a bundle in, a report out.

`RulesAuditor.audit(bundle)` runs the rules of `eairdsl.audit.rules.RULES` over the
bundle alone (no network, no world, no trace path), turns each hit into a
realization certificate c = (b, π, m, E, ρ) of report contract v1 with the
repair plan and the Signals types of the mechanism the rule found
(`eairdsl.audit.repairs`), and returns one report. Its risk is always `other`
(the contract's unknown): the bundle is sanitized of risk labels (EAIR §4), and
a rule's shape is not the world's risk, so the offline auditor never names one.

- `findings` holds the hits with evidence for R1, R2 and R3 (EAIR B.1);
  the others are `leads` (no material effect established: intercepted,
  restored, or a risk exposure);
- the verdict is `findings` when any is supported, `no_supported_problem`
  otherwise (coverage lists every step read and every rule run as a query),
  and `insufficient_evidence` for a bundle with no steps.

Reports pass `validate_report` by construction: every step, edge and quote
comes from the bundle through `evidence.edge_ref` and `evidence.field_text`,
duplicates (same property, boundary edge and effect step) are merged before
the report is written, and a hit whose certificate the validator would reject
is kept only as an out-of-catalogue candidate, never as a finding.

The same bundle always gives the same report, byte for byte.
"""

from __future__ import annotations

import itertools
from typing import Literal

from eairdsl.audit.auditor import AuditorIdentity
from eairdsl.audit.contract import (
    Auditor,
    Boundary,
    BundleRef,
    Component,
    Coverage,
    Effect,
    EvidenceUnit,
    Finding,
    Nature,
    OutOfCatalogue,
    PropertyRef,
    QueryRecord,
    Report,
    RiskType,
    Usage,
)
from eairdsl.audit.evidence import MANIFEST, Bundle, edge_ref, normalize, sha256_file
from eairdsl.audit.repairs import plan_for, types_for
from eairdsl.audit.rules import RULES, Context, Hit

__all__ = ["PROMPT_VERSION", "RulesAuditor", "hits"]

#: the rule set's version, recorded as the report's prompt version
PROMPT_VERSION = "rules-1"
#: what a hostile bundle can make a rule raise
_UNTRUSTED = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


def hits(bundle: Bundle) -> tuple[list[Hit], list[QueryRecord]]:
    """Every rule's hits on the bundle, in `RULES` order, and the queries (rules run)
    for coverage."""
    ctx = Context(bundle)
    found: list[Hit] = []
    queries = [QueryRecord(name="build_graph", args={"layer": "annotated"})]
    for rule in RULES:
        try:
            outcome = rule.run(ctx)
        except _UNTRUSTED as exc:
            # a bundle is untrusted input: a rule it defeats is recorded as not run,
            # never a traceback and never a silent pass
            queries.append(QueryRecord(name=rule.name, args={"failed": type(exc).__name__}))
            continue
        found += outcome.hits
        queries += outcome.queries
    return found, queries


class RulesAuditor:
    """The offline Auditor Agent (kind `rules`): `audit(bundle) -> Report`."""

    @property
    def identity(self) -> AuditorIdentity:
        """Which auditor this is (`IdentifiedAuditor`): kind `rules`, the rule set's
        version as its prompt version."""
        return AuditorIdentity(kind="rules", prompt_version=PROMPT_VERSION)

    def audit(self, bundle: Bundle) -> Report:
        episode = bundle.manifest.episode
        ref = BundleRef(episode=episode, manifest_sha256=sha256_file(bundle.root / MANIFEST))
        auditor = Auditor(kind="rules", prompt_version=PROMPT_VERSION)
        if not bundle.steps:
            return Report(audit_schema=1, report_id=_report_id(episode), bundle=ref,
                          auditor=auditor, verdict="insufficient_evidence",
                          coverage=Coverage(steps_read=[], queries=[]), usage=Usage())
        found, queries = hits(bundle)
        supported: list[Finding] = []
        leads: list[Finding] = []
        candidates: list[OutOfCatalogue] = []
        seen: set[tuple[str, str, str | None]] = set()
        for hit in found:
            finding = _finding(bundle, hit, len(supported) + len(leads) + 1)
            if finding is None:
                candidates += _candidate(bundle, hit, len(candidates) + 1)
                continue
            key = (finding.property.policy or normalize(finding.property.text or ""),
                   finding.boundary.edge, finding.effect.step)
            if key in seen:
                continue
            seen.add(key)
            (supported if finding.status == "supported" else leads).append(finding)
        return Report(
            audit_schema=1, report_id=_report_id(episode), bundle=ref,
            auditor=auditor, verdict="findings" if supported else "no_supported_problem",
            findings=supported, leads=leads, out_of_catalogue=candidates,
            coverage=Coverage(steps_read=[s.step for s in bundle.steps], queries=queries),
            usage=Usage(tokens_in=0, tokens_out=0, tool_calls=len(queries)))


def _report_id(episode: str) -> str:
    return f"rules-{episode}"[:64]


def _finding(bundle: Bundle, hit: Hit, n: int) -> Finding | None:
    """The hit as a contract finding, or None when a part of it would not resolve."""
    steps = bundle.by_step
    order = {s.step: i for i, s in enumerate(bundle.steps)}
    chain = [hit.first_anomaly, *hit.path] + ([hit.effect_step] if hit.effect_step else [])
    if any(s not in steps for s in [*chain, hit.boundary_step]):
        return None
    if any(order[a] > order[b] for a, b in itertools.pairwise(chain)) \
            or len(set(hit.path)) != len(hit.path):
        return None
    if hit.resolved_later is not None and order.get(hit.resolved_later, -1) \
            <= order[hit.first_anomaly]:
        return None
    boundary = steps[hit.boundary_step]
    edge = edge_ref(boundary)
    if edge is None:
        return None
    units = _units(bundle, hit)
    if not units:
        return None
    covered = {c for u in units for c in u.supports}
    complete = {"R1", "R2", "R3"} <= covered and hit.effect_step is not None
    status: Literal["supported", "lead"] = "supported" if hit.supported and complete else "lead"
    # a lead may still name an effect (one participant broke the rule alone): then it is a
    # realized defect without an interaction's contribution, not an exposure
    effect_step = hit.effect_step
    nature: Nature = "realized_defect" if effect_step is not None else "risk_exposure"
    subject = hit.property_policy or hit.rule
    plan = plan_for(hit.boundary_kind, hit.shape, hit.surfaces, subject)
    # the bundle carries no risk label (EAIR §4), so the risk is the contract's unknown
    # (`other`); what the rule found is named by its mechanism's Signals types
    types = [RiskType(taxonomy="signals", version="signals-1", id=t)
             for t in types_for(hit.boundary_kind, hit.shape)]
    return Finding(
        id=f"{'finding' if status == 'supported' else 'lead'}-{n}", status=status,
        property=PropertyRef(policy=hit.property_policy, text=hit.property_text),
        risk="other", nature=nature, types=types,
        component=Component(type=hit.component[0], name=hit.component[1]),  # type: ignore[arg-type]
        boundary=Boundary(kind=hit.boundary_kind, edge=edge, step=hit.boundary_step),
        contribution=hit.contribution, first_anomaly=hit.first_anomaly, path=list(hit.path),
        effect=Effect(endpoint=hit.effect_endpoint, step=effect_step), evidence=units,
        resolved_later=hit.resolved_later,
        confidence=hit.confidence if status == "supported" else min(hit.confidence, 0.6),
        repair_plan=plan)


def _units(bundle: Bundle, hit: Hit) -> list[EvidenceUnit]:
    """The hit's citations as evidence units, one per (step, field, quote) with the
    criteria of every citation of it merged."""
    merged: dict[tuple[str, str, str], set[str]] = {}
    for c in hit.cites:
        if c.step in bundle.by_step:
            merged.setdefault((c.step, c.field, c.quote), set()).update(c.supports)
    return [EvidenceUnit(step=step, edge=edge_ref(bundle.by_step[step]), field=fld, quote=q,
                         supports=sorted(supports))  # type: ignore[arg-type]
            for (step, fld, q), supports in merged.items()]


def _candidate(bundle: Bundle, hit: Hit, n: int) -> list[OutOfCatalogue]:
    units = _units(bundle, hit)
    return [OutOfCatalogue(id=f"candidate-{n}", summary=hit.property_text,
                           property=PropertyRef(policy=hit.property_policy,
                                                text=hit.property_text),
                           evidence=units)]
