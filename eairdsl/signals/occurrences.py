"""Occurrences: one problem instance in one session, read from any auditor's reports.

A *session* is one recorded execution (a trace file); an *occurrence* is one
finding of an audit report about that session (§3). `read_audit(AUDIT_DIR)`
reads an `eairc audit` folder — `index.json` (the analysed population: every
entry with a valid report is a session analysed, whether or not it has
findings), `bundles/grader-index.json` (episode → trace files), and
`reports/<episode>.json` (contract v1) — and returns the sessions analysed and
one `Occurrence` per trace × finding, lead or out-of-catalogue candidate:

- status `supported` (a supported finding), `insufficient_evidence` (a lead) or
  `outside_catalogue` (an out-of-catalogue candidate, or a finding whose
  Signals type ids are not in the taxonomy);
- up to three ranked Signals type ids: the finding's own (the offline auditor
  names its mechanism's), or by the versioned mapping table of
  `eairdsl.signals.mapping` from its EAIR risk, policy and boundary;
- the world's declared risk (`declared_risk`), read grader-side from the study
  store: the auditor's `risk` stays what the auditor said (`other` for the
  offline auditor, which reads a bundle without risk labels);
- the world digest from the trace header (`digest`: the compiled world's, or for
  an imported trace the source file's sha256) and the trace file's sha256.

An occurrence is keyed by its content (session, auditor and the finding as
reported), so reading the same audit twice yields the same keys. Reports are
untrusted input: one that is not contract v1 is listed among the problems and
skipped, never guessed at.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.signals.mapping import MAPPING_VERSION, Factors, factors, mapped_types

__all__ = ["Status", "Session", "Occurrence", "AuditRead", "read_audit", "study_root",
           "audit_dirs", "trace_header", "MAX_REPORT"]

Status = Literal["supported", "insufficient_evidence", "outside_catalogue"]
#: a report or trace header larger than this is not read (untrusted input)
MAX_REPORT = 8 * 1024 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Session(_Model):
    """One analysed execution: a trace, where it came from and what it ran."""

    id: str = Field(description="study:relative trace path (or the absolute path)")
    study: str
    trace_path: str = Field(description="absolute path of the trace file")
    study_dir: str | None = None
    rel_path: str | None = Field(None, description="the trace's path inside its study")
    world: str | None = None
    world_digest: str | None = None
    trace_sha256: str | None = None
    condition: str | None = None
    instance: str | None = None
    seed: int | None = None


class Occurrence(_Model):
    """One finding about one session, in Signals' terms."""

    key: str = Field(description="sha256 of session, auditor and the finding's content")
    session: str
    auditor: str
    audit: str = Field(description="the audit folder (absolute)")
    episode: str
    finding_id: str
    status: Status
    finding_status: str = Field(description="supported | lead | out_of_catalogue")
    world: str | None = None
    world_digest: str | None = None
    trace_sha256: str | None = None
    component_type: str
    component_name: str
    types: list[str] = Field(default_factory=list, max_length=3)
    types_source: str = Field(description="'auditor' or the mapping table's version")
    risk: str | None = None
    declared_risk: str | None = Field(None, description="the world's declared risk, read "
                                      "grader-side from the study store (never the auditor's)")
    nature: str | None = None
    property_policy: str | None = None
    property_text: str | None = None
    boundary_kind: str | None = None
    boundary_edge: str | None = None
    boundary_step: str | None = None
    sender: str | None = None
    receiver: str | None = None
    evidence_steps: list[str] = Field(default_factory=list)
    path: list[str] = Field(default_factory=list)
    effect_endpoint: str | None = None
    effect_step: str | None = None
    resolved_later: str | None = None
    factors: Factors | None = None
    repair_plan: dict[str, Any] | None = None
    summary: str = ""

    @property
    def short(self) -> str:
        return f"O-{self.key[:10]}"


@dataclass
class AuditRead:
    """What one audit folder says: the sessions analysed, the occurrences, the problems."""

    audit: Path
    auditor: str
    study: str
    study_dir: Path | None
    sessions: list[Session] = field(default_factory=list)
    occurrences: list[Occurrence] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def study_root(path: Path) -> Path | None:
    """The study folder an audit folder lies in (the nearest parent with results.sqlite)."""
    from eairdsl.study.store import STORE_FILE

    for parent in [path, *path.parents][:5]:
        if (parent / STORE_FILE).is_file():
            return parent
    return None


def audit_dirs(target: Path) -> list[Path]:
    """The audit folders of a target: itself, a study's `audit/*/` and `*/arms/*/`, the
    arms of a study's `audit/` folder, or the arms of an audit-study folder
    (`eairdsl.audit.folder.find_audits`)."""
    from eairdsl.audit.folder import find_audits

    return [f.path for f in find_audits(target)]


def trace_header(path: Path) -> dict[str, Any]:
    """A trace's first line (its header), or {} if it cannot be read as one."""
    try:
        with path.open("rb") as fh:
            line = fh.readline(MAX_REPORT)
        head = json.loads(line)
    except (OSError, ValueError):
        return {}
    return head if isinstance(head, dict) else {}


def _sha256(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def _session(trace: Path, study: str, root: Path | None) -> Session:
    head = trace_header(trace)
    rel = None
    if root is not None and trace.is_relative_to(root):
        rel = trace.relative_to(root).as_posix()
    seed = head.get("seed")
    return Session(
        id=f"{study}:{rel}" if rel else trace.as_posix(), study=study,
        trace_path=trace.as_posix(), study_dir=root.as_posix() if root else None,
        rel_path=rel, world=_str(head.get("world")), world_digest=_str(head.get("digest")),
        trace_sha256=_sha256(trace), condition=_str(head.get("condition")),
        instance=_str(head.get("instance")),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _key(session: str, auditor: str, content: dict[str, Any]) -> str:
    text = json.dumps({"session": session, "auditor": auditor, "finding": content},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _edge_roles(edge: str | None) -> tuple[str | None, str | None]:
    if not edge or "->" not in edge:
        return None, None
    sender, _, receiver = edge.partition("->")
    return sender or None, receiver or None


def _steps(units: list[Any]) -> list[str]:
    seen: list[str] = []
    for u in units:
        if u.step not in seen:
            seen.append(u.step)
    return seen


def _declared_risks(root: Path | None) -> dict[str, str]:
    """World name -> the risk it declares, from the study store beside the audit: grader-side
    knowledge (the bundle the auditor read has no risk label, EAIR §4), so Signals can show a
    finding's world risk without the auditor guessing it. {} when there is no store."""
    from eairdsl.study.store import STORE_FILE, Store, StoreError

    if root is None:
        return {}
    try:
        store = Store.open(root / STORE_FILE, create=False)
    except (StoreError, OSError, ValueError):
        return {}
    try:
        return {str(w["name"]): str(w["risk"]) for w in store.worlds() if w.get("risk")}
    finally:
        store.close()


def _from_finding(f: Any, session: Session, auditor: str, audit: Path, episode: str,
                  known: set[str], declared: str | None = None) -> Occurrence:
    """An occurrence of a supported finding or a lead (`eairdsl.audit.contract.Finding`)."""
    own = [t.id for t in f.types if t.taxonomy == "signals"][:3]
    status: Status = "supported" if f.status == "supported" else "insufficient_evidence"
    if own:
        types, source = own, "auditor"
        if any(t not in known for t in own):
            status = "outside_catalogue"
    else:
        types = list(mapped_types(f.risk, f.boundary.kind, policy=f.property.policy))
        source = MAPPING_VERSION
        if not types:
            status = "outside_catalogue"
    sender, receiver = _edge_roles(f.boundary.edge)
    content = f.model_dump(mode="json")
    prop = f.property.policy or f.property.text or "a property"
    return Occurrence(
        key=_key(session.id, auditor, content), session=session.id, auditor=auditor,
        audit=audit.as_posix(), episode=episode, finding_id=f.id, status=status,
        finding_status=f.status, world=session.world, world_digest=session.world_digest,
        trace_sha256=session.trace_sha256, component_type=f.component.type,
        component_name=f.component.name, types=types, types_source=source, risk=f.risk,
        declared_risk=declared, nature=f.nature, property_policy=f.property.policy,
        property_text=f.property.text,
        boundary_kind=f.boundary.kind, boundary_edge=f.boundary.edge,
        boundary_step=f.boundary.step, sender=sender, receiver=receiver,
        evidence_steps=_steps(f.evidence), path=list(f.path),
        effect_endpoint=f.effect.endpoint, effect_step=f.effect.step,
        resolved_later=f.resolved_later,
        factors=factors(f.nature, boundary_kind=f.boundary.kind, effect_step=f.effect.step,
                        resolved_later=f.resolved_later, path_steps=len(f.path)),
        repair_plan=f.repair_plan.model_dump(mode="json") if f.repair_plan else None,
        summary=f"{declared or f.risk} {f.nature.replace('_', ' ')} at a {f.boundary.kind} "
                f"boundary: "
                f"{prop}")


def _from_candidate(c: Any, session: Session, auditor: str, audit: Path,
                    episode: str) -> Occurrence:
    """An occurrence of an out-of-catalogue candidate (`OutOfCatalogue`)."""
    policy = c.property.policy if c.property else None
    return Occurrence(
        key=_key(session.id, auditor, {"out_of_catalogue": c.model_dump(mode="json")}),
        session=session.id, auditor=auditor, audit=audit.as_posix(), episode=episode,
        finding_id=c.id, status="outside_catalogue", finding_status="out_of_catalogue",
        world=session.world, world_digest=session.world_digest,
        trace_sha256=session.trace_sha256,
        component_type="policy" if policy else "unknown", component_name=policy or "unknown",
        types=[], types_source="none", property_policy=policy,
        property_text=c.property.text if c.property else None,
        evidence_steps=_steps(c.evidence), summary=c.summary)


def read_audit(audit: Path, known_types: set[str]) -> AuditRead:
    """Read one audit folder: its analysed sessions and every occurrence of its reports."""
    from eairdsl.audit.folder import AuditFolder, AuditFolderError

    audit = audit.resolve()
    folder = AuditFolder(audit)
    root = study_root(audit)
    index = folder.index()
    auditor = str(index.auditor.get("arm") or index.auditor.get("kind") or audit.name)
    study = root.name if root is not None else audit.name
    out = AuditRead(audit=audit, auditor=auditor, study=study, study_dir=root)
    declared = _declared_risks(root)
    try:
        graded = folder.grader_traces()
    except (OSError, ValueError, AttributeError, TypeError):
        out.problems.append("bundles/grader-index.json is unreadable; using index.json's traces")
        graded = {}
    for entry in index.entries:
        if entry.status != "valid":
            out.problems.append(f"{entry.episode}: report {entry.status}, not analysed")
            continue
        traces = graded.get(entry.episode) or [
            (audit / t).resolve() for t in entry.traces]
        if not traces:
            out.problems.append(f"{entry.episode}: no trace named in the grader index")
            continue
        try:
            report = folder.report(entry.episode, limit=MAX_REPORT)
        except AuditFolderError as exc:
            out.problems.append(f"{exc.path}: not a contract-v1 report ({exc.why})")
            continue
        for trace in sorted(set(traces)):
            if not Path(trace).is_file():
                out.problems.append(f"{entry.episode}: trace {trace} is missing; its findings "
                                    "are not read")
                continue
            session = _session(Path(os.path.abspath(trace)), study, root)
            out.sessions.append(session)
            for f in [*report.findings, *report.leads]:
                out.occurrences.append(_from_finding(
                    f, session, auditor, audit, entry.episode, known_types,
                    declared.get(session.world or "")))
            for c in report.out_of_catalogue:
                out.occurrences.append(_from_candidate(c, session, auditor, audit,
                                                       entry.episode))
    return out
