"""Grading imported traces against their datasets' labels (grader side only).

The labels live in the grader side files (`<instance>.grader.json`) that the
importers write and no bundle contains. `evaluate(OUT, audit=AUDIT_DIR)` reads
the imported traces under OUT, the audit folder's index and reports (`eairc
audit OUT -o AUDIT_DIR`), and optionally a predictions file, and returns:

- per framework: traces, steps, explicit edges (steps with an edge), findings,
  leads, resolvable evidence units (the validator's count) — the summary;
- Who&When: agent accuracy (the predicted agent equals `mistake_agent`, exact
  string equality) and step accuracy (the predicted step index equals
  `mistake_step` read as an integer: exact integer equality, never substring — a
  label "1" never matches 12), and step accuracy within ±k reported separately;
  each over all labels and over the labels without a noise flag. Flags: the
  labelled step's speaker is not the labelled agent (`speaker-differs`), the step
  is past the end of the history (`step-past-end`), the label is not an integer
  (`step-not-an-integer`);
- TRAIL: location accuracy (a gold error whose span id is a predicted location)
  and (location, category) accuracy, the gold pairs built from every annotated
  error before any filtering (duplicates and unknown categories included, so the
  denominator is the annotation count), categories compared after the explicit,
  versioned alias table `TRAIL_CATEGORIES`.

A prediction from an audit report is its first finding, else its first lead, in
trace order of the first anomaly: the agent is the finding's component when it
is a participant (else the first anomaly's actor), the step is the first
anomaly's source index, the location its source id. Contract v1 risk types are
EAIR or Signals ids, never TRAIL categories, so an audit report predicts no TRAIL
category; a predictions file (`{"<world>/<instance>": {"agent", "step"} |
[{"location", "category"}]}`) can.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from eairdsl.external.core import GRADER_SUFFIX, grader_path
from eairdsl.runtime.trace import TraceEvent, TraceHeader, read_trace

if TYPE_CHECKING:
    from eairdsl.audit.contract import Finding, Report
    from eairdsl.audit.folder import AuditEntry

__all__ = ["TRAIL_CATEGORIES", "TRAIL_CATEGORIES_VERSION", "EvalReport", "FrameworkRow",
           "Prediction", "TrailPrediction", "WhoWhenLabel", "canonical_category", "evaluate",
           "grade_trail", "grade_who_when", "parse_step", "who_when_label"]

#: the alias table's version: bump it whenever an entry changes (grades cite it)
TRAIL_CATEGORIES_VERSION = "trail-categories-1"
#: canonical TRAIL category -> the spellings seen or documented for it (compared after
#: case folding and collapsing whitespace; nothing else is fuzzy)
TRAIL_CATEGORIES: dict[str, tuple[str, ...]] = {
    "Language-only": ("language-only", "language only", "language-only hallucination",
                      "language-only hallucinations"),
    "Tool-related": ("tool-related", "tool related", "tool-related hallucination",
                     "tool-related hallucinations"),
    "Poor Information Retrieval": ("poor information retrieval",),
    "Tool Output Misinterpretation": ("tool output misinterpretation",),
    "Incorrect Problem Identification": ("incorrect problem identification",),
    "Tool Selection Errors": ("tool selection errors", "tool selection error"),
    "Formatting Errors": ("formatting errors", "formatting error"),
    "Instruction Non-compliance": ("instruction non-compliance", "instruction noncompliance",
                                   "instruction non compliance"),
    "Context Handling Failures": ("context handling failures", "context handling failure"),
    "Resource Abuse": ("resource abuse",),
    "Goal Deviation": ("goal deviation",),
    "Task Orchestration": ("task orchestration", "task orchestration errors",
                           "task orchestration error"),
    "Tool Definition Issues": ("tool definition issues", "tool definition issue"),
    "Environment Setup Errors": ("environment setup errors", "environment setup error"),
    "Rate Limiting": ("rate limiting",),
    "Authentication Errors": ("authentication errors", "authentication error"),
    "Service Errors": ("service errors", "service error"),
    "Resource Not Found": ("resource not found",),
    "Resource Exhaustion": ("resource exhaustion",),
    "Timeout Issues": ("timeout issues", "timeout issue"),
}
_ALIAS = {a: canon for canon, aliases in TRAIL_CATEGORIES.items()
          for a in (*aliases, canon.casefold())}
_INT = re.compile(r"^\s*\d+\s*$")


def canonical_category(text: Any) -> str | None:
    """The canonical TRAIL category of a spelling in the alias table, else None."""
    if not isinstance(text, str):
        return None
    return _ALIAS.get(" ".join(text.casefold().split()))


def parse_step(raw: Any) -> int | None:
    """A step label as an integer: an int, or a string of digits only ("12" -> 12); None
    for anything else (a bool, "1.0", "step 3", "")."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if isinstance(raw, str) and _INT.match(raw):
        return int(raw)
    return None


# ------------------------------------------------------------------ labels, predictions

class WhoWhenLabel(BaseModel):
    """One Who&When label, read against its trace."""

    instance: str
    agent: str | None
    step_raw: Any = None
    step: int | None
    steps: int
    speaker: str | None = None
    flags: list[str] = Field(default_factory=list)


class Prediction(BaseModel):
    """Who did it and when: an agent name and a source step index (either may be None)."""

    agent: str | None = None
    step: int | None = None


class TrailPrediction(BaseModel):
    location: str
    category: str | None = None


def who_when_label(instance: str, labels: dict[str, Any], events: list[TraceEvent]
                   ) -> WhoWhenLabel:
    """The label and its noise flags; the labelled step's speaker is the actor of the
    trace event whose source index is the label."""
    agent = labels.get("mistake_agent")
    agent = agent if isinstance(agent, str) else None
    raw = labels.get("mistake_step")
    step = parse_step(raw)
    n = labels.get("steps")
    steps = n if isinstance(n, int) else len(events)
    flags: list[str] = []
    speaker = None
    if step is None:
        flags.append("step-not-an-integer")
    elif step >= steps:
        flags.append("step-past-end")
    else:
        speaker = next((e.actor for e in events if e.src_index == step), None)
        if agent is not None and speaker is not None and speaker != agent:
            flags.append("speaker-differs")
    return WhoWhenLabel(instance=instance, agent=agent, step_raw=raw, step=step, steps=steps,
                        speaker=speaker, flags=flags)


def _rate(k: int, n: int) -> float | None:
    return round(k / n, 6) if n else None


def grade_who_when(pairs: Iterable[tuple[WhoWhenLabel, Prediction | None]], k: int = 1
                   ) -> dict[str, Any]:
    """Agent and step accuracy, exact and within ±k, over all labels and unflagged ones.

    A missing prediction counts as wrong; equality is exact (strings for agents,
    integers for steps)."""
    rows = list(pairs)
    out: dict[str, Any] = {"k": k}
    for name, subset in (("all", rows), ("unflagged", [r for r in rows if not r[0].flags])):
        agent = step = near = 0
        for label, pred in subset:
            if pred is None:
                continue
            agent += int(pred.agent is not None and pred.agent == label.agent)
            if pred.step is not None and label.step is not None:
                step += int(pred.step == label.step)
                near += int(abs(pred.step - label.step) <= k)
        n = len(subset)
        out[name] = {"labels": n, "agent_correct": agent, "step_exact": step,
                     f"step_within_{k}": near, "agent_accuracy": _rate(agent, n),
                     "step_accuracy": _rate(step, n), f"step_within_{k}_accuracy": _rate(near, n)}
    out["flagged"] = sorted((r[0].instance, f) for r in rows for f in r[0].flags)
    return out


def grade_trail(traces: Iterable[tuple[str, list[dict[str, Any]], list[TrailPrediction]]]
                ) -> dict[str, Any]:
    """Location and (location, category) accuracy over every annotated error.

    Gold pairs are built from the annotations as they are, before any filtering: an
    error with an unknown category keeps its place in the denominator (its pair can
    never match), duplicates count twice."""
    gold_n = loc_hit = pair_hit = unknown = 0
    per: list[dict[str, Any]] = []
    for instance, errors, preds in traces:
        gold = [(str(e.get("location")), canonical_category(e.get("category")))
                for e in errors if isinstance(e, dict)]
        locations = {p.location for p in preds}
        pairs = {(p.location, canonical_category(p.category)) for p in preds
                 if canonical_category(p.category) is not None}
        hits = sum(1 for loc, _ in gold if loc in locations)
        both = sum(1 for g in gold if g[1] is not None and g in pairs)
        gold_n += len(gold)
        loc_hit += hits
        pair_hit += both
        unknown += sum(1 for _, c in gold if c is None)
        per.append({"instance": instance, "errors": len(gold), "predicted": len(preds),
                    "location_hits": hits, "pair_hits": both})
    return {"alias_table": TRAIL_CATEGORIES_VERSION, "errors": gold_n,
            "unknown_categories": unknown, "location_hits": loc_hit, "pair_hits": pair_hit,
            "location_accuracy": _rate(loc_hit, gold_n), "pair_accuracy": _rate(pair_hit, gold_n),
            "traces": per}


# ------------------------------------------------------------------ reading a folder

@dataclass
class Imported:
    path: Path
    header: TraceHeader
    events: list[TraceEvent]
    grader: dict[str, Any] | None
    entry: AuditEntry | None = None
    report: Report | None = None
    notes: list[str] = field(default_factory=list)


class FrameworkRow(BaseModel):
    format: str
    framework: str
    traces: int = 0
    steps: int = 0
    explicit_edges: int = 0
    audited: int = 0
    findings: int = 0
    leads: int = 0
    units_resolvable: int = 0
    units_total: int = 0
    agent_accuracy: float | None = None
    step_accuracy: float | None = None
    location_accuracy: float | None = None


class EvalReport(BaseModel):
    about: str = ("grader-side evaluation of imported traces against their datasets' labels "
                  "(docs/external.md); never give it to an auditor")
    frameworks: list[FrameworkRow] = Field(default_factory=list)
    who_and_when: dict[str, Any] | None = None
    trail: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list)


def _is_header(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("type") == "header"


def _imported(out: Path, notes: list[str]) -> list[Imported]:
    found: list[Imported] = []
    for folder, dirs, names in os.walk(out):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            p = Path(folder) / name
            if not name.endswith(".jsonl") or not _is_header(p):
                continue  # not a trace (a bundle's events, a sidecar)
            try:
                trace = read_trace(p)
            except (OSError, ValueError) as exc:
                notes.append(f"{p}: not a readable trace ({str(exc).splitlines()[0][:120]}); "
                             "left out")
                continue
            if trace.header.source is None:
                continue
            side = grader_path(p)
            grader = None
            if side.is_file():
                try:
                    data = json.loads(side.read_text(encoding="utf-8"))
                except ValueError:
                    raise ValueError(f"{side}: not JSON") from None
                grader = data.get("labels") if isinstance(data, dict) else None
            found.append(Imported(p, trace.header, list(trace.events), grader))
    return sorted(found, key=lambda i: str(i.path))


def _attach_audit(items: list[Imported], audit: Path) -> list[str]:
    """Give each imported trace its audit entry and report (contract v1; a report that
    does not read as one is left out: the trace counts as audited, with no prediction)."""
    from eairdsl.audit.folder import AuditFolder, AuditFolderError

    folder = AuditFolder(audit)
    if not folder.has_index():
        raise ValueError(f"{audit}: not an audit folder (no index.json); run `eairc audit "
                         f"OUT -o {audit}` first")
    try:
        index = folder.index()
    except AuditFolderError as exc:
        raise ValueError(f"{exc.path}: not an audit index ({exc.why})") from None
    by_trace: dict[Path, AuditEntry] = {}
    for e in index.entries:
        for t in e.traces:
            by_trace[(audit / t).resolve()] = e
    missing = []
    for it in items:
        entry = by_trace.get(it.path.resolve())
        if entry is None:
            missing.append(str(it.path))
            continue
        it.entry = entry
        if folder.report_path(entry.episode).is_file():
            try:
                it.report = folder.report(entry.episode)
            except AuditFolderError:
                it.report = None
    if items and len(missing) == len(items):
        # an audit of another folder: grading against it would report every label as
        # missed (0.0%) rather than say that nothing here was audited
        raise ValueError(f"{audit}: none of the {len(items)} imported trace(s) is in this "
                         "audit's index (an audit of another import folder?): give --audit "
                         "the folder `eairc audit OUT -o AUDIT_DIR` wrote for this OUT")
    return [f"{len(missing)} imported trace(s) are not in the audit index"] if missing else []


def _first_finding(it: Imported) -> Finding | None:
    """The report's first finding in trace order (of its findings, else of its leads)."""
    if it.report is None:
        return None
    order = {e.step: i for i, e in enumerate(it.events)}
    for items in (it.report.findings, it.report.leads):
        if items:
            return min(items, key=lambda f: order.get(f.first_anomaly, 1 << 30))
    return None


def _who_prediction(it: Imported) -> Prediction | None:
    f = _first_finding(it)
    if f is None:
        return None
    by_step = {e.step: e for e in it.events}
    first = by_step.get(f.first_anomaly)
    agent = f.component.name if f.component.type == "participant" else None
    if agent is None and first is not None:
        agent = first.actor
    return Prediction(agent=agent, step=first.src_index if first is not None else None)


def _trail_predictions(it: Imported) -> list[TrailPrediction]:
    if it.report is None:
        return []
    by_step = {e.step: e for e in it.events}
    out = []
    for f in (*it.report.findings, *it.report.leads):
        first = by_step.get(f.first_anomaly)
        if first is not None and first.src_id is not None:
            out.append(TrailPrediction(location=first.src_id))
    return out


def _from_file(predictions: Path) -> dict[str, Any]:
    try:
        data = json.loads(predictions.read_text(encoding="utf-8-sig"))  # a BOM is not JSON
    except (OSError, ValueError) as exc:
        raise ValueError(f"{predictions}: not a predictions file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{predictions}: a predictions file is an object keyed by instance")
    return data


_M = TypeVar("_M", bound=BaseModel)


def _given(predictions: Path | None, where: str, model: type[_M], raw: Any) -> _M:
    """One entry of a predictions file, or a ValueError naming the file, the instance and
    the field (it was pydantic's several-line dump, naming neither)."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"{predictions}: {where}: {field + ': ' if field else ''}"
                         f"{first['msg']}") from None


def evaluate(out: Path, audit: Path | None = None, predictions: Path | None = None,
             k: int = 1) -> EvalReport:
    """The summary per framework and the grades (module docstring). Raises ValueError
    with the file named for an unreadable audit folder or predictions file."""
    report = EvalReport()
    items = _imported(Path(out), report.notes)
    if not items:
        report.notes.append(f"no imported traces under {out}")
        return report
    if audit is not None:
        report.notes += _attach_audit(items, Path(audit))
    given = _from_file(predictions) if predictions is not None else None
    rows: dict[tuple[str, str], FrameworkRow] = {}
    who: dict[tuple[str, str], list[tuple[WhoWhenLabel, Prediction | None]]] = {}
    trail: dict[tuple[str, str], list[tuple[str, list[dict[str, Any]], list[TrailPrediction]]]]
    trail = {}
    for it in items:
        src = it.header.source or {}
        key = (str(src.get("format")), str(src.get("framework")))
        row = rows.setdefault(key, FrameworkRow(format=key[0], framework=key[1]))
        row.traces += 1
        row.steps += len(it.events)
        row.explicit_edges += sum(1 for e in it.events if e.edge)
        if it.entry is not None:
            row.audited += 1
            row.findings += it.entry.findings
            row.leads += it.entry.leads
            row.units_resolvable += it.entry.units_resolvable
            row.units_total += it.entry.units_total
        if it.grader is None:
            continue
        instance = f"{it.header.world}/{it.header.instance}"
        if "mistake_agent" in it.grader or "mistake_step" in it.grader:
            label = who_when_label(instance, it.grader, it.events)
            pred: Prediction | None
            if given is not None:
                raw = given.get(instance)
                pred = _given(predictions, instance, Prediction, raw) \
                    if isinstance(raw, dict) else None
            else:
                pred = _who_prediction(it) if audit is not None else None
            who.setdefault(key, []).append((label, pred))
        if isinstance(it.grader.get("errors"), list):
            if given is not None:
                raw = given.get(instance)
                preds = [_given(predictions, f"{instance}[{n}]", TrailPrediction, p)
                         for n, p in enumerate(raw) if isinstance(p, dict)] \
                    if isinstance(raw, list) else []
            else:
                preds = _trail_predictions(it)
            trail.setdefault(key, []).append((instance, it.grader["errors"], preds))
    graded = audit is not None or predictions is not None
    if who:
        every = [p for v in who.values() for p in v]
        report.who_and_when = grade_who_when(every, k) if graded else {
            "labels": len(every), "flagged": grade_who_when(every, k)["flagged"]}
        if graded:
            report.who_and_when["by_framework"] = {
                f"{fmt}/{fw}": grade_who_when(v, k) for (fmt, fw), v in sorted(who.items())}
            for key, v in who.items():
                g = grade_who_when(v, k)["all"]
                rows[key].agent_accuracy = g["agent_accuracy"]
                rows[key].step_accuracy = g["step_accuracy"]
    if trail:
        every_t = [t for v in trail.values() for t in v]
        report.trail = grade_trail(every_t)
        if graded:
            for key, tv in trail.items():
                rows[key].location_accuracy = grade_trail(tv)["location_accuracy"]
        else:
            report.trail["location_accuracy"] = report.trail["pair_accuracy"] = None
    if not graded:
        report.notes.append("no audit folder or predictions file: accuracies not computed")
    report.frameworks = [rows[key] for key in sorted(rows)]
    return report


def grader_files(out: Path) -> list[Path]:
    """Every grader side file under an import folder."""
    return sorted(p for p in Path(out).rglob(f"*{GRADER_SUFFIX}") if p.is_file())
