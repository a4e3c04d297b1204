"""The naive baseline's extractor: a free-text audit -> a contract-v1 report, deterministically.

EAIR F.15 compares the report contract with "a short free-text prompt, without
the schema, tools or pre-submission validation": 87 free-text findings, of which
46 tie their evidence to identifiable steps and 42 resolve completely (48.3%,
against 98.8% under the contract; Table 3). To measure that with the same strict
validator, a free-text audit is turned into a report by fixed rules — no model,
no fuzzy matching, nothing looked up in other steps:

- **decision**: a phrase such as "no interaction failure", "no problem was
  found" or "insufficient evidence"; findings, when any are extracted, make the
  verdict `findings`. A text with neither has no machine-recognizable decision
  (`NaiveExtraction.decision_found` is False) and gets `insufficient_evidence`.
- **findings**: a heading line whose first word is *Finding*, *Issue* or
  *Problem* (markdown `#`, bold or a list number before it are allowed) opens a
  finding; it runs to the next such heading or the next other markdown heading.
  A finding under a nonstandard heading is not recognised (as in the paper, where
  one report used one).
- **step ids**: `s` and three to six digits (`s0012`), as the bundles name steps;
  a range `s0005–s0009` gives its two ends. Ids that name no step are kept, so
  the validator rejects them (V804) and the finding does not resolve.
- **quotes**: text between double quotes (“…” or "…"), in backticks, or on a
  markdown blockquote line (`> …`), of at least `validate.MIN_QUOTE` characters
  after normalisation; shorter quoted words are names, not citations. Each quote
  is tied to the step id nearest before it on its line, else the nearest after it
  on its line, else the last step id before it in the finding; with none, to no
  step (`unknown`, rejected as V804).
- **field and edge**: free text names neither, so the quote's field is the first
  field of the *cited* step whose text holds it (none: `content`), and the edge is
  the one written on the quote's line (`a->b`) when there is exactly one, else the
  cited step's own edge ref. A unit therefore resolves exactly when its step
  exists, a written edge (if any) is that step's, and the quote is verbatim there.

Every extracted finding is filed as supported, with each unit supporting R4
only, nature `risk_exposure`, no effect step and no repair plan: free text does
not map onto R1–R3 or a plan, so those validator codes (V809, V820) are expected
on naive reports; resolvability is what the naive arm measures.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from eairdsl.audit.contract import AUDIT_SCHEMA, Auditor, BoundaryKind, Coverage, Report, Usage
from eairdsl.audit.evidence import MANIFEST, Bundle, edge_ref, field_names, field_text, normalize
from eairdsl.audit.evidence import sha256_file as _sha256
from eairdsl.audit.validate import MIN_QUOTE
from eairdsl.vocabulary import RISKS

__all__ = ["UNKNOWN_STEP", "NaiveQuote", "NaiveFinding", "NaiveExtraction", "extract",
           "naive_report", "STEP_ID"]

#: how a step id is written in free text
STEP_ID = re.compile(r"(?<![A-Za-z0-9_])s\d{3,6}(?![A-Za-z0-9_])")
#: the step a citation without a step id is filed under (it names no step: V804)
UNKNOWN_STEP = "unknown"
_HEADING = re.compile(
    r"^\s{0,3}(?:#{1,6}\s*)?(?:[-*]\s+)?(?:\d+[.)]\s*)?(?:\*\*|__)?\s*"
    r"(?:finding|issue|problem)\b(?P<rest>.*)$", re.IGNORECASE)
_OTHER_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_QUOTES = (re.compile(r"“([^”\n]+)”"), re.compile(r'"([^"\n]+)"'), re.compile(r"`([^`\n]+)`"))
_BLOCKQUOTE = re.compile(r"^\s*>\s?(.*\S)\s*$")
_EDGE = re.compile(r"(?<![\w.:-])([\w.:-]+)\s*->\s*([\w.:-]+)")
_RISK = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(RISKS) + r")(?![A-Za-z0-9])")
_CLEAN = re.compile(
    r"\bno\s+(?:supported\s+|interaction\s+|material\s+|significant\s+)?"
    r"(?:problems?|issues?|failures?|violations?|findings?|risks?)\b"
    r"(?:\s+(?:was|were|is|are|has been|have been))?"
    r"(?:\s+(?:found|identified|detected|observed|established))?", re.IGNORECASE)
_INSUFFICIENT = re.compile(r"\b(?:insufficient|not enough)\s+evidence\b", re.IGNORECASE)
_KINDS: tuple[tuple[re.Pattern[str], BoundaryKind], ...] = (
    (re.compile(r"delegat", re.I), "delegation"),
    (re.compile(r"hand-?\s?off|relay", re.I), "handoff"),
    (re.compile(r"\breview|approv", re.I), "review"),
    (re.compile(r"\brout(?:e|ing)|select", re.I), "routing"),
    (re.compile(r"\bshared\b|cumulative|combined", re.I), "shared_action"),
    (re.compile(r"authority|seniori|power", re.I), "power"),
    (re.compile(r"\brecord\b|ledger|\bcrm\b", re.I), "record"),
)


class NaiveQuote(BaseModel):
    """One quoted string of a finding and the step id it was tied to (None: no step)."""

    quote: str
    step: str | None
    #: an edge written on the quote's line, when exactly one is
    edge: str | None = None
    line: int


class NaiveFinding(BaseModel):
    title: str
    #: 1-based line of its heading
    line: int
    steps: list[str] = Field(default_factory=list)
    quotes: list[NaiveQuote] = Field(default_factory=list)
    risks: list[str] = Field(default_factory=list)
    text: str = ""


class NaiveExtraction(BaseModel):
    findings: list[NaiveFinding] = Field(default_factory=list)
    decision: str | None = None
    decision_found: bool = False
    #: every step id and quote of the whole text (also outside findings)
    steps: list[str] = Field(default_factory=list)
    quotes: int = 0


def _steps_in(line: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group(0)) for m in STEP_ID.finditer(line)]


def _quotes_in(line: str) -> list[tuple[int, str]]:
    block = _BLOCKQUOTE.match(line)
    if block is not None:
        text = block.group(1).strip()
        # a blockquote that is itself one quoted string is that string
        for pattern in _QUOTES:
            whole = pattern.fullmatch(text)
            if whole is not None:
                text = whole.group(1)
                break
        return [(block.start(1), text)]
    found: list[tuple[int, int, str]] = []
    for pattern in _QUOTES:
        for m in pattern.finditer(line):
            if any(a <= m.start() < b for a, b, _ in found):
                continue  # inside a quote already taken (a "…" within “…”)
            found.append((m.start(), m.end(), m.group(1)))
    return [(a, q) for a, _, q in sorted(found)]


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def extract(text: str) -> NaiveExtraction:
    """The findings, step ids and quotes of a free-text audit (no bundle needed)."""
    lines = text.splitlines()
    out = NaiveExtraction()
    current: NaiveFinding | None = None
    body: list[str] = []
    last_step: str | None = None

    def close() -> None:
        nonlocal current, body
        if current is not None:
            current.text = "\n".join(body).strip()
            current.steps = _dedupe(current.steps)
            current.risks = _dedupe(current.risks)
            out.findings.append(current)
        current, body = None, []

    for n, line in enumerate(lines, 1):
        heading = _HEADING.match(line)
        if heading is not None:
            close()
            title = re.sub(r"[*_#]+", "", line).strip() or f"finding {len(out.findings) + 1}"
            current = NaiveFinding(title=title, line=n)
            last_step = None
        elif _OTHER_HEADING.match(line):
            close()
        steps = _steps_in(line)
        out.steps.extend(s for _, s in steps)
        quotes = [(at, q) for at, q in _quotes_in(line) if len(normalize(q)) >= MIN_QUOTE]
        out.quotes += len(quotes)
        if current is None:
            continue
        body.append(line)
        current.steps.extend(s for _, s in steps)
        current.risks.extend(m.group(1) for m in _RISK.finditer(line))
        edges = _dedupe([f"{m.group(1)}->{m.group(2)}" for m in _EDGE.finditer(line)])
        for at, quote in quotes:
            before = [s for pos, s in steps if pos < at]
            after = [s for pos, s in steps if pos > at]
            step = before[-1] if before else after[0] if after else last_step
            current.quotes.append(NaiveQuote(quote=quote, step=step, line=n,
                                             edge=edges[0] if len(edges) == 1 else None))
        if steps:
            last_step = steps[-1][1]
    close()
    out.steps = _dedupe(out.steps)
    if _INSUFFICIENT.search(text):
        out.decision, out.decision_found = "insufficient_evidence", True
    if _CLEAN.search(text):
        out.decision, out.decision_found = "no_supported_problem", True
    if out.findings:
        out.decision, out.decision_found = "findings", True
    return out


def _boundary_kind(text: str) -> BoundaryKind:
    for pattern, kind in _KINDS:
        if pattern.search(text):
            return kind
    return "handoff"


def _unit(bundle: Bundle, q: NaiveQuote) -> dict[str, Any]:
    step = bundle.by_step.get(q.step) if q.step is not None else None
    if step is None:
        return {"step": q.step or UNKNOWN_STEP, "edge": q.edge, "field": "content",
                "quote": q.quote, "supports": ["R4"]}
    want = normalize(q.quote)
    names = field_names(step)
    field = next((f for f in names if want in normalize(field_text(step, f) or "")),
                 "content" if "content" in names else (names[0] if names else "content"))
    return {"step": step.step, "edge": q.edge if q.edge is not None else edge_ref(step),
            "field": field, "quote": q.quote, "supports": ["R4"]}


def _finding(bundle: Bundle, n: int, f: NaiveFinding) -> dict[str, Any]:
    order = {s.step: i for i, s in enumerate(bundle.steps)}
    known = sorted((s for s in f.steps if s in order), key=order.__getitem__)
    unknown = [s for s in f.steps if s not in order]
    cited = known + unknown
    first = cited[0] if cited else UNKNOWN_STEP
    boundary_step = bundle.by_step.get(known[0]) if known else None
    edge = (edge_ref(boundary_step) if boundary_step is not None else None) or UNKNOWN_STEP
    units = [_unit(bundle, q) for q in f.quotes]
    if not units:  # a finding that quotes nothing cites nothing verbatim
        units = [{"step": first, "edge": None, "field": "content", "quote": "",
                  "supports": ["R4"]}]
    return {
        "id": f"N{n}", "status": "supported",
        "property": {"policy": None, "text": f.title},
        "risk": f.risks[0] if f.risks else "other",
        "nature": "risk_exposure", "types": [],
        "component": {"type": "channel", "name": edge},
        "boundary": {"kind": _boundary_kind(f.text or f.title), "edge": edge,
                     "step": known[0] if known else first},
        "contribution": "introduced",
        "first_anomaly": first, "path": cited[1:],
        "effect": {"endpoint": "not stated in the free-text audit", "step": None},
        "evidence": units, "resolved_later": None, "confidence": 0.5, "repair_plan": None}


def naive_report(text: str, bundle: Bundle, *, auditor: Auditor,
                 coverage: Coverage | None = None, usage: Usage | None = None,
                 report_id: str | None = None) -> Report:
    """A free-text audit as a contract-v1 report of `bundle` (rules in the module docstring).

    The report follows the schema; whether its citations resolve is for
    `validate.validate_report` to say.
    """
    ex = extract(text)
    manifest = bundle.root / MANIFEST
    digest = _sha256(manifest) if manifest.is_file() else "0" * 64
    data: dict[str, Any] = {
        "audit_schema": AUDIT_SCHEMA,
        "report_id": report_id or "naive",
        "bundle": {"episode": bundle.manifest.episode, "manifest_sha256": digest},
        "auditor": auditor.model_dump(mode="json"),
        "verdict": ex.decision or "insufficient_evidence",
        "findings": [_finding(bundle, n, f) for n, f in enumerate(ex.findings, 1)],
        "leads": [], "out_of_catalogue": [],
        "coverage": (coverage or Coverage()).model_dump(mode="json"),
        "usage": (usage or Usage()).model_dump(mode="json")}
    return Report.model_validate(data)
