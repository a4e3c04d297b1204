"""`REPAIR_DIR/review.html`: one self-contained page a reviewer reads to check a repair.

In order: the decision; the certificate (the finding, its boundary and effect —
with a warning first when the user seeded the repair with a lead —
and every cited step with its quote, read from the audit's bundle — a quote
the bundle's step does not contain is marked); the repair plan; the semantic
diff of the decided round with the changed source lines side by side
(`difflib.HtmlDiff`) and every file it added, changed or removed; every
round (stage, problems, the four review dimensions, required changes); the
retest table (before vs after with Wilson intervals and McNemar's exact test
on the paired cases); the acceptance conditions. Everything shown is
escaped: worlds, bundles and reviews are untrusted. The page is built from the
files in `REPAIR_DIR` only (read through `eairdsl.repair.folder`, as typed
records; a file a stopped repair did not write shows as not reached), so it can
be re-rendered at any time; it carries no wall-clock time.
"""

from __future__ import annotations

import difflib
import json
from html import escape
from pathlib import Path
from typing import Any

from eairdsl.audit.contract import EvidenceUnit, Finding
from eairdsl.audit.evidence import Bundle, BundleError, field_text, normalize
from eairdsl.audit.folder import AuditFolder
from eairdsl.repair.folder import RepairFolder, RoundFolder
from eairdsl.repair.model import DIMENSIONS, Acceptance, Interval, RetestResult, Selected

__all__ = ["render_review", "write_review"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;text-align:left} .ok{color:#17692b;font-weight:bold}
.bad{color:#a11;font-weight:bold} .muted{color:#595959} blockquote{margin:.3em 0 .3em 1em;
padding:.2em .6em;border-left:3px solid #88a;background:#f6f6fb;white-space:pre-wrap}
table.diff{font-family:monospace;font-size:12px} .diff_add{background:#cfc}
.diff_chg{background:#ffa} .diff_sub{background:#fcc} td.diff_header{color:#595959}
code{background:#f3f3f3;padding:0 2px} table{display:block;max-width:100%;overflow-x:auto}
pre{overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere} body{overflow-wrap:break-word}
"""


def _flag(value: Any) -> str:
    if value is None:
        return '<span class="muted">not reached</span>'
    if isinstance(value, bool):
        return '<span class="ok">yes</span>' if value else '<span class="bad">no</span>'
    return escape(str(value))


def _interval(d: Interval | dict[str, Any] | None) -> str:
    if not d:
        return '<span class="muted">–</span>'
    i = d if isinstance(d, Interval) else Interval.model_validate(d)
    return (f"{i.k}/{i.n} <span class=muted>[{float(i.low):.2f}, "
            f"{float(i.high):.2f}]</span>")


def _finding_rows(plan: Selected | None) -> list[tuple[str, str]]:
    """The certificate's table: the finding, its property, boundary, path and effect (each
    "None" where no plan was recorded, as the page always showed it)."""
    if plan is None:
        return [("episode", "None (None)"),
                ("finding", "None (None, risk None, None, confidence None)"),
                ("property", ""), ("component", "None None"),
                ("boundary", "None at None (step None)"), ("first anomaly", "None"),
                ("effect", "None (step None)"), ("path", "")]
    f = plan.finding
    return [("episode", f"{plan.episode} ({plan.report})"),
            ("finding", f"{f.id} ({f.status}, risk {f.risk}, {f.nature}, "
                        f"confidence {f.confidence})"),
            ("property", f"{f.property.policy or ''} {f.property.text or ''}".strip()),
            ("component", f"{f.component.type} {f.component.name}"),
            ("boundary", f"{f.boundary.kind} at {f.boundary.edge} (step {f.boundary.step})"),
            ("first anomaly", str(f.first_anomaly)),
            ("effect", f"{f.effect.endpoint} (step {f.effect.step})"),
            ("path", " → ".join(map(str, f.path)))]


def _cited(unit: EvidenceUnit, bundle: Bundle | None) -> str:
    """One cited step's row, its quote marked when the bundle's step does not contain it."""
    step_id = str(unit.step)
    quote = str(unit.quote or "")
    step = bundle.by_step.get(step_id) if bundle else None
    if step is not None:
        text = field_text(step, str(unit.field)) or ""
        found = normalize(quote) in normalize(text)
        who = f"{step.actor} → {step.recipient or step.tool or ''}"
        kind = str(step.kind)
    else:
        found, who, kind = False, "", "?"
    mark = "" if found else ' <span class="bad">(not found in the bundle)</span>'
    return (f"<tr><td>{escape(step_id)}</td><td>{escape(kind)}</td>"
            f"<td>{escape(who)}</td><td>{escape(str(unit.field))}</td>"
            f"<td><blockquote>{escape(quote)}</blockquote>{mark}</td>"
            f"<td>{escape(', '.join(map(str, unit.supports)))}</td></tr>")


#: what the page says when the repair started from a lead the user named
LEAD_NOTE = ("This repair started from a lead, not a supported finding: the user named it "
             "(--finding EPISODE:lead-N). The auditor did not find evidence for every "
             "criterion (R1 boundary, R2 path, R3 effect) or an interaction's contribution; "
             "read the certificate below with that in mind. AuditPass counts supported "
             "findings only, so the same lead on the retest does not block acceptance.")


def _certificate(plan: Selected | None, audit_dir: Path) -> list[str]:
    out = ["<h2>Certificate</h2>"]
    if plan is not None and plan.finding.status == "lead":
        out.append(f'<p class="bad" id="seeded-by-lead">{escape(LEAD_NOTE)}</p>')
    out.append("<table>")
    out += [f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>"
            for k, v in _finding_rows(plan)]
    out.append("</table><h3>Cited steps</h3>")
    bundle: Bundle | None = None
    try:
        bundle = Bundle.load(AuditFolder(audit_dir).bundle_dir(str(plan.episode if plan
                                                                   else None)))
    except (BundleError, OSError, ValueError) as exc:
        out.append(f"<p class=bad>the audit's bundle cannot be read: {escape(str(exc))}</p>")
    out.append("<table><tr><th>step</th><th>kind</th><th>actor → recipient</th>"
               "<th>field</th><th>quote</th><th>supports</th></tr>")
    finding: Finding | None = plan.finding if plan else None
    out += [_cited(unit, bundle) for unit in (finding.evidence if finding else [])]
    out.append("</table>")
    return out + _plan_section(plan)


def _plan_section(plan: Selected | None) -> list[str]:
    """The repair plan: its objective, requirements and surfaces."""
    p = plan.plan if plan else None
    out = ["<h2>Repair plan</h2>", f"<p>{escape(str(p.objective if p else ''))}</p>",
           "<table><tr><th>requirement</th><th>text</th><th>check</th></tr>"]
    for r in p.requirements if p else []:
        out.append(f"<tr><td><code>{escape(str(r.id))}</code></td>"
                   f"<td>{escape(str(r.text))}</td>"
                   f"<td>{escape(str(r.check or ''))}</td></tr>")
    out.append("</table>")
    out.append("<p>may change: " + escape(", ".join(p.may_change if p else []) or "–")
               + "<br>must not change: " + escape("; ".join(p.must_not_change if p else [])
                                                    or "–") + "</p>")
    return out


class _SideBySide(difflib.HtmlDiff):
    """`HtmlDiff` with fixed anchor names: the stock one numbers its tables by a class-wide
    counter, so the same page would differ from one rendering to the next."""

    def _make_prefix(self) -> None:
        self._prefix = ["from_", "to_"]


def _diff(folder: RepairFolder, n: int | None, world_file: str, original: str) -> list[str]:
    if n is None:
        return ["<h2>Semantic diff</h2><p class=muted>no candidate compiled</p>"]
    rf = folder.round(n)
    diff = rf.read_diff()
    attribution = rf.read_attribution()
    out = [f"<h2>Semantic diff (round {n})</h2>",
           "<table><tr><th>declaration</th><th>change</th><th>details</th>"
           "<th>requirements</th><th>protected</th></tr>"]
    for c in diff.get("changes") or []:
        name = f"{c.get('kind')} {c.get('name')}"
        out.append(f"<tr><td><code>{escape(name)}</code></td><td>{escape(str(c.get('change')))}"
                   f"</td><td>{'<br>'.join(escape(str(d)) for d in c.get('details') or [])}</td>"
                   f"<td>{escape(', '.join(attribution.get(name, [])))}</td>"
                   f"<td>{escape(str(c.get('protected') or ''))}</td></tr>")
    out.append("</table>")
    out += _files(diff.get("files") or [])
    candidate = rf.read_candidate_text() or ""
    table = _SideBySide(wrapcolumn=80).make_table(
        original.splitlines(), candidate.splitlines(), f"{world_file} (W)",
        f"{world_file} (W′, round {n})", context=True, numlines=2)
    out += ["<h3>Changed source lines</h3>", table]
    return out


def _files(files: list[Any]) -> list[str]:
    """Every file the candidate added, changed or removed, and whether W′ reads it (a file
    it does not read was refused by ScopeOK)."""
    if not files:
        return ["<p class=muted>no file added, changed or removed</p>"]
    out = ["<h3>Files</h3><table><tr><th>file</th><th>change</th><th>read by W′</th></tr>"]
    for item in files:
        f = item if isinstance(item, dict) else {}
        read = bool(f.get("read"))
        refused = not read and f.get("change") != "removed"
        out.append(f"<tr><td><code>{escape(str(f.get('path')))}</code></td>"
                   f"<td>{escape(str(f.get('change')))}</td><td>{_flag(read)}"
                   + (' <span class="bad">(not read by the world: refused)</span>'
                      if refused else "") + "</td></tr>")
    out.append("</table>")
    return out


def _round(rf: RoundFolder) -> list[str]:
    """One round: its stage, the candidate's rationale, its problems and its review."""
    outcome = rf.read_outcome_or_none()
    stage = outcome.stage if outcome else "interrupted"
    out = [f"<h3>Round {escape(rf.name)}: {escape(str(stage))} "
           f"{_flag(outcome.ok) if outcome else ''}</h3>"]
    cand = rf.read_candidate_or_none()
    if cand is not None and cand.rationale:
        out.append(f"<p>rationale: {escape(str(cand.rationale))}</p>")
    if cand is not None and cand.produced_by:
        out.append(f"<p class=muted>produced by {escape(json.dumps(cand.produced_by))}</p>")
    problems = outcome.problems if outcome else []
    if problems:
        out.append("<ul>" + "".join(f"<li>{escape(str(p))}</li>" for p in problems[:20])
                   + "</ul>")
    record = rf.read_review()
    review = record.review if record else None
    if record is None or review is None:
        return out
    out.append("<table><tr><th>dimension</th><th>passed</th><th>reason</th></tr>")
    for d in DIMENSIONS:
        v = review.dimension(d)
        out.append(f"<tr><td>{d}</td><td>{_flag(v.passed)}</td>"
                   f"<td>{escape(str(v.reason))}</td></tr>")
    out.append(f"<tr><th>verdict</th><td colspan=2>{escape(str(review.verdict))}"
               + (f" — <span class=bad>refused: "
                  f"{escape('; '.join(record.refused))}</span>"
                  if record.refused else "") + "</td></tr></table>")
    if review.required_changes:
        out.append("<p>required changes:</p><ul>" + "".join(
            f"<li>{escape(str(c))}</li>" for c in review.required_changes) + "</ul>")
    return out


def _rounds(folder: RepairFolder) -> list[str]:
    out = ["<h2>Rounds</h2>"]
    for rf in folder.rounds():
        out += _round(rf)
    return out


def _auditor_label(auditor: dict[str, Any]) -> str:
    parts = [str(auditor.get("kind", "?"))]
    parts += [f"{k} {auditor[k]}" for k in ("model", "contract", "graph") if auditor.get(k)]
    return ", ".join(parts)


def _who(rt: RetestResult) -> list[str]:
    """Which agents played the retest (the audited episodes' own) and which auditor
    decided AuditPass, as `result.json` records them."""
    agents = rt.agents
    if not agents and not rt.auditor:
        return []
    rows = "".join(f"<tr><td>{escape(str(party))}</td><td>{escape(', '.join(map(str, kinds)))}"
                   "</td></tr>" for party, kinds in sorted(agents.items()))
    out = ["<p>Played by the audited episodes' own agents:</p>",
           f"<table><tr><th>party</th><th>agent</th></tr>{rows}</table>"] if rows else []
    auditor, original = rt.auditor, rt.audit_auditor
    if auditor:
        out.append(f"<p>Retest audit: {escape(_auditor_label(auditor))}"
                   + (f"; the original audit: {escape(_auditor_label(original))}"
                      if original and original != auditor else "; the same as the audit's")
                   + ".</p>")
    return out


def _retest(folder: RepairFolder, acceptance: Acceptance | None) -> list[str]:
    rel = acceptance.retest if acceptance else None
    if not rel:
        return ["<h2>Retest</h2><p class=muted>no approved candidate was retested</p>"]
    rt = folder.retest_at(rel).read_result_or_none()
    if rt is None:
        return _retest_unreadable()
    fresh = sum(1 for c in rt.cases if c.group == "fresh")
    out = ["<h2>Retest</h2>",
           f"<p>{len(rt.cases)} case(s) under {escape(', '.join(rt.conditions))} with "
           f"<code>{escape(str(rt.profile))}</code>: {fresh} fresh (seeds no audited "
           f"episode used; {rt.dropped_same_content} dropped for reading like an "
           f"audited or earlier case) and {len(rt.cases) - fresh} regression case(s) that "
           "kept the property before the repair.</p>",
           "<table><tr><th>measurement</th><th>cases</th><th>before (W)</th><th>after (W′)</th>"
           "<th>b (1→0)</th><th>c (0→1)</th><th>McNemar p</th></tr>"]
    for p in rt.paired:
        out.append(f"<tr><td>{escape(str(p.measurement))}</td><td>{escape(str(p.group))}"
                   f"</td><td>{_interval(p.before)}</td><td>{_interval(p.after)}</td>"
                   f"<td>{p.b}</td><td>{p.c}</td><td>{float(p.p):.4f}</td></tr>")
    out.append("</table>")
    out.extend(_who(rt))
    problems = rt.audit_problems
    auditor = rt.auditor
    who = "the offline auditor" if not auditor or auditor.get("kind") == "offline" else \
        f"the audit's own auditor ({escape(_auditor_label(auditor))})"
    out.append(f"<p>AuditPass {_flag(rt.audit_pass)}: {who} on W′'s "
               f"retest traces found {len(problems)} supported finding(s) of the targeted "
               f"property; {rt.other_findings} supported finding(s) of other "
               "properties.</p>")
    if problems:
        out.append("<ul>" + "".join(f"<li>{escape(str(x))}</li>" for x in problems[:20])
                   + "</ul>")
    v = rt.validation
    if v:
        out.append(f"<p>validate W′ under {escape(str(v.get('condition')))}: sim:compliant "
                   f"failed {v.get('compliant_failures')}/{v.get('episodes')}; sim:reckless "
                   f"realized the risk in {v.get('reckless_realized')}/{v.get('episodes')}.</p>")
    return out


def _retest_unreadable() -> list[str]:
    """The retest section of a named retest whose `result.json` cannot be read: empty, as
    the page always showed it."""
    return ["<h2>Retest</h2>",
            "<p>0 case(s) under  with <code>None</code>: 0 fresh (seeds no audited episode "
            "used; 0 dropped for reading like an audited or earlier case) and 0 regression "
            "case(s) that kept the property before the repair.</p>",
            "<table><tr><th>measurement</th><th>cases</th><th>before (W)</th><th>after (W′)</th>"
            "<th>b (1→0)</th><th>c (0→1)</th><th>McNemar p</th></tr>", "</table>",
            f"<p>AuditPass {_flag(None)}: the offline auditor on W′'s retest traces found 0 "
            "supported finding(s) of the targeted property; 0 supported finding(s) of other "
            "properties.</p>"]


def render_review(out_dir: Path, audit_dir: Path) -> str:
    """The review page of the repair in `out_dir` (read from its files)."""
    folder = RepairFolder(out_dir)
    acceptance = folder.read_acceptance_or_none()
    loop = folder.read_loop() or {}
    world_file = str(loop.get("world", "world.eair"))
    original_path = Path(str(loop.get("world_path", ""))) if loop.get("world_path") else None
    # the original text: a round's request does not hold it; the world file is named in loop
    original = folder.read_original()
    if original is None:
        original = (original_path.read_text(encoding="utf-8") if original_path is not None
                    and original_path.is_file() else "")
    return "\n".join(_head(world_file, acceptance)
                     + _certificate(folder.read_plan_or_none(), audit_dir)
                     + _diff(folder, acceptance.round if acceptance else None, world_file,
                             original)
                     + _rounds(folder) + _retest(folder, acceptance)
                     + _decision(bool(acceptance and acceptance.accepted))) + "\n"


def _head(world_file: str, acceptance: Acceptance | None) -> list[str]:
    """The title and the decision's table."""
    a = acceptance
    accepted = bool(a and a.accepted)
    return [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>repair review: {escape(world_file)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Repair of {escape(world_file)}: "
        + ('<span class="ok">accepted</span>' if accepted else '<span class="bad">not '
           'accepted</span>') + "</h1>",
        f"<p>{escape(str(a.reason if a else ''))}</p>",
        "<table><tr><th>ScopeOK</th><th>ReviewOK</th><th>AuditPass</th><th>Retain</th>"
        "<th>target realized after</th><th>before</th><th>rounds</th></tr>",
        f"<tr><td>{_flag(a.scope_ok if a else None)}</td>"
        f"<td>{_flag(a.review_ok if a else None)}</td>"
        f"<td>{_flag(a.audit_pass if a else None)}</td>"
        f"<td>{_flag(a.retain if a else None)} <span class=muted>(needs ≥ 0.95)</span></td>"
        f"<td>{_interval(a.target if a else None)}</td>"
        f"<td>{_interval(a.target_before if a else None)}</td>"
        f"<td>{escape(str(a.rounds if a else None))}</td></tr></table>"]


def _decision(accepted: bool) -> list[str]:
    return ["<h2>Decision</h2>", "<p>Accepted exactly when ScopeOK ∧ ReviewOK ∧ AuditPass "
            "∧ Retain ≥ 0.95 (EAIR D.1): " + ("<span class=ok>accepted</span>; the repaired "
            "world is the folder <code>world/</code>, its main file beside its data."
            if accepted else "<span class=bad>not accepted</span>.") + "</p>",
            "</body></html>"]


def write_review(out_dir: Path, audit_dir: Path) -> Path:
    return RepairFolder(out_dir).write_review_page(render_review(Path(out_dir),
                                                                 Path(audit_dir)))
