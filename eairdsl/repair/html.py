"""`REPAIR_DIR/review.html`: one self-contained page a reviewer reads to check a repair.

In order: the decision; the certificate (the finding, its boundary and effect,
and every cited step with its quote, read from the audit's bundle — a quote
the bundle's step does not contain is marked); the repair plan; the semantic
diff of the decided round with the changed source lines side by side
(`difflib.HtmlDiff`); every round (stage, problems, the four review
dimensions, required changes); the retest table (before vs after with Wilson
intervals and McNemar's exact test on the paired cases); the acceptance
conditions. Everything shown is escaped: worlds, bundles and reviews are
untrusted. The page is built from the files in `REPAIR_DIR` only, so it can be
re-rendered at any time; it carries no wall-clock time.
"""

from __future__ import annotations

import difflib
import json
from html import escape
from pathlib import Path
from typing import Any

from eairdsl.audit.evidence import Bundle, BundleError, field_text, normalize
from eairdsl.audit.runner import BUNDLES
from eairdsl.repair.apply import write_atomic
from eairdsl.repair.model import DIMENSIONS

__all__ = ["render_review", "write_review"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;text-align:left} .ok{color:#17692b;font-weight:bold}
.bad{color:#a11;font-weight:bold} .muted{color:#777} blockquote{margin:.3em 0 .3em 1em;
padding:.2em .6em;border-left:3px solid #88a;background:#f6f6fb;white-space:pre-wrap}
table.diff{font-family:monospace;font-size:12px} .diff_add{background:#cfc}
.diff_chg{background:#ffa} .diff_sub{background:#fcc} td.diff_header{color:#888}
code{background:#f3f3f3;padding:0 2px}
"""


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _flag(value: Any) -> str:
    if value is None:
        return '<span class="muted">not reached</span>'
    if isinstance(value, bool):
        return '<span class="ok">yes</span>' if value else '<span class="bad">no</span>'
    return escape(str(value))


def _interval(d: dict[str, Any] | None) -> str:
    if not d:
        return '<span class="muted">–</span>'
    return (f"{d['k']}/{d['n']} <span class=muted>[{float(d['low']):.2f}, "
            f"{float(d['high']):.2f}]</span>")


def _certificate(plan: dict[str, Any], audit_dir: Path) -> list[str]:
    f = plan.get("finding") or {}
    out = ["<h2>Certificate</h2>", "<table>"]
    prop = f.get("property") or {}
    boundary = f.get("boundary") or {}
    component = f.get("component") or {}
    effect = f.get("effect") or {}
    rows = [("episode", f"{plan.get('episode')} ({plan.get('report')})"),
            ("finding", f"{f.get('id')} ({f.get('status')}, risk {f.get('risk')}, "
                        f"{f.get('nature')}, confidence {f.get('confidence')})"),
            ("property", f"{prop.get('policy') or ''} {prop.get('text') or ''}".strip()),
            ("component", f"{component.get('type')} {component.get('name')}"),
            ("boundary", f"{boundary.get('kind')} at {boundary.get('edge')} "
                         f"(step {boundary.get('step')})"),
            ("first anomaly", str(f.get("first_anomaly"))),
            ("effect", f"{effect.get('endpoint')} (step {effect.get('step')})"),
            ("path", " → ".join(map(str, f.get("path") or [])))]
    out += [f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows]
    out.append("</table><h3>Cited steps</h3>")
    bundle: Bundle | None = None
    try:
        bundle = Bundle.load(audit_dir / BUNDLES / str(plan.get("episode")))
    except (BundleError, OSError, ValueError) as exc:
        out.append(f"<p class=bad>the audit's bundle cannot be read: {escape(str(exc))}</p>")
    out.append("<table><tr><th>step</th><th>kind</th><th>actor → recipient</th>"
               "<th>field</th><th>quote</th><th>supports</th></tr>")
    for unit in f.get("evidence") or []:
        step_id = str(unit.get("step"))
        quote = str(unit.get("quote") or "")
        step = bundle.by_step.get(step_id) if bundle else None
        if step is not None:
            text = field_text(step, str(unit.get("field"))) or ""
            found = normalize(quote) in normalize(text)
            who = f"{step.actor} → {step.recipient or step.tool or ''}"
            kind = str(step.kind)
        else:
            found, who, kind = False, "", "?"
        mark = "" if found else ' <span class="bad">(not found in the bundle)</span>'
        out.append(f"<tr><td>{escape(step_id)}</td><td>{escape(kind)}</td>"
                   f"<td>{escape(who)}</td><td>{escape(str(unit.get('field')))}</td>"
                   f"<td><blockquote>{escape(quote)}</blockquote>{mark}</td>"
                   f"<td>{escape(', '.join(map(str, unit.get('supports') or [])))}</td></tr>")
    out.append("</table>")
    p = plan.get("plan") or {}
    out += ["<h2>Repair plan</h2>", f"<p>{escape(str(p.get('objective', '')))}</p>",
            "<table><tr><th>requirement</th><th>text</th><th>check</th></tr>"]
    for r in p.get("requirements") or []:
        out.append(f"<tr><td><code>{escape(str(r.get('id')))}</code></td>"
                   f"<td>{escape(str(r.get('text')))}</td>"
                   f"<td>{escape(str(r.get('check') or ''))}</td></tr>")
    out.append("</table>")
    out.append("<p>may change: " + escape(", ".join(p.get("may_change") or []) or "–")
               + "<br>must not change: " + escape("; ".join(p.get("must_not_change") or [])
                                                    or "–") + "</p>")
    return out


class _SideBySide(difflib.HtmlDiff):
    """`HtmlDiff` with fixed anchor names: the stock one numbers its tables by a class-wide
    counter, so the same page would differ from one rendering to the next."""

    def _make_prefix(self) -> None:
        self._prefix = ["from_", "to_"]


def _diff(out_dir: Path, n: int | None, world_file: str, original: str) -> list[str]:
    if n is None:
        return ["<h2>Semantic diff</h2><p class=muted>no candidate compiled</p>"]
    rdir = out_dir / "rounds" / f"{n:02d}"
    diff = _read(rdir / "diff.json") or {}
    attribution = _read(rdir / "attribution.json") or {}
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
    try:
        candidate = (rdir / "candidate.eair").read_text(encoding="utf-8")
    except OSError:
        candidate = ""
    table = _SideBySide(wrapcolumn=80).make_table(
        original.splitlines(), candidate.splitlines(), f"{world_file} (W)",
        f"{world_file} (W′, round {n})", context=True, numlines=2)
    out += ["<h3>Changed source lines</h3>", table]
    return out


def _rounds(out_dir: Path) -> list[str]:
    out = ["<h2>Rounds</h2>"]
    for rdir in sorted((out_dir / "rounds").glob("[0-9][0-9]")):
        outcome = _read(rdir / "outcome.json") or {}
        stage = outcome.get("stage", "interrupted")
        out.append(f"<h3>Round {escape(rdir.name)}: {escape(str(stage))} "
                   f"{_flag(outcome.get('ok')) if outcome else ''}</h3>")
        cand = _read(rdir / "candidate.json") or {}
        if cand.get("rationale"):
            out.append(f"<p>rationale: {escape(str(cand['rationale']))}</p>")
        if cand.get("produced_by"):
            out.append(f"<p class=muted>produced by {escape(json.dumps(cand['produced_by']))}</p>")
        problems = outcome.get("problems") or []
        if problems:
            out.append("<ul>" + "".join(f"<li>{escape(str(p))}</li>" for p in problems[:20])
                       + "</ul>")
        review = _read(rdir / "review.json")
        if isinstance(review, dict) and "verdict" in review:
            out.append("<table><tr><th>dimension</th><th>passed</th><th>reason</th></tr>")
            for d in DIMENSIONS:
                v = review.get(d) or {}
                out.append(f"<tr><td>{d}</td><td>{_flag(v.get('passed'))}</td>"
                           f"<td>{escape(str(v.get('reason', '')))}</td></tr>")
            out.append(f"<tr><th>verdict</th><td colspan=2>{escape(str(review['verdict']))}"
                       + (f" — <span class=bad>refused: "
                          f"{escape('; '.join(review.get('refused') or []))}</span>"
                          if review.get("refused") else "") + "</td></tr></table>")
            if review.get("required_changes"):
                out.append("<p>required changes:</p><ul>" + "".join(
                    f"<li>{escape(str(c))}</li>" for c in review["required_changes"]) + "</ul>")
    return out


def _auditor_label(auditor: dict[str, Any]) -> str:
    parts = [str(auditor.get("kind", "?"))]
    parts += [f"{k} {auditor[k]}" for k in ("model", "contract", "graph") if auditor.get(k)]
    return ", ".join(parts)


def _who(rt: dict[str, Any]) -> list[str]:
    """Which agents played the retest (the audited episodes' own) and which auditor
    decided AuditPass, as `result.json` records them."""
    agents: dict[str, list[str]] = rt.get("agents") or {}
    if not agents and not rt.get("auditor"):
        return []
    rows = "".join(f"<tr><td>{escape(str(party))}</td><td>{escape(', '.join(map(str, kinds)))}"
                   "</td></tr>" for party, kinds in sorted(agents.items()))
    out = ["<p>Played by the audited episodes' own agents:</p>",
           f"<table><tr><th>party</th><th>agent</th></tr>{rows}</table>"] if rows else []
    auditor, original = rt.get("auditor") or {}, rt.get("audit_auditor") or {}
    if auditor:
        out.append(f"<p>Retest audit: {escape(_auditor_label(auditor))}"
                   + (f"; the original audit: {escape(_auditor_label(original))}"
                      if original and original != auditor else "; the same as the audit's")
                   + ".</p>")
    return out


def _retest(out_dir: Path, acceptance: dict[str, Any]) -> list[str]:
    rel = acceptance.get("retest")
    if not rel:
        return ["<h2>Retest</h2><p class=muted>no approved candidate was retested</p>"]
    rt = _read(out_dir / rel / "result.json") or {}
    cases = rt.get("cases") or []
    fresh = sum(1 for c in cases if c.get("group") == "fresh")
    out = ["<h2>Retest</h2>",
           f"<p>{len(cases)} case(s) under {escape(', '.join(rt.get('conditions') or []))} with "
           f"<code>{escape(str(rt.get('profile')))}</code>: {fresh} fresh (seeds no audited "
           f"episode used; {rt.get('dropped_same_content', 0)} dropped for reading like an "
           f"audited or earlier case) and {len(cases) - fresh} regression case(s) that kept "
           "the property before the repair.</p>",
           "<table><tr><th>measurement</th><th>cases</th><th>before (W)</th><th>after (W′)</th>"
           "<th>b (1→0)</th><th>c (0→1)</th><th>McNemar p</th></tr>"]
    for p in rt.get("paired") or []:
        out.append(f"<tr><td>{escape(str(p['measurement']))}</td><td>{escape(str(p['group']))}"
                   f"</td><td>{_interval(p['before'])}</td><td>{_interval(p['after'])}</td>"
                   f"<td>{p['b']}</td><td>{p['c']}</td><td>{float(p['p']):.4f}</td></tr>")
    out.append("</table>")
    out.extend(_who(rt))
    problems = rt.get("audit_problems") or []
    auditor = rt.get("auditor") or {}
    who = "the offline auditor" if not auditor or auditor.get("kind") == "offline" else \
        f"the audit's own auditor ({escape(_auditor_label(auditor))})"
    out.append(f"<p>AuditPass {_flag(rt.get('audit_pass'))}: {who} on W′'s "
               f"retest traces found {len(problems)} supported finding(s) of the targeted "
               f"property; {rt.get('other_findings', 0)} supported finding(s) of other "
               "properties.</p>")
    if problems:
        out.append("<ul>" + "".join(f"<li>{escape(str(x))}</li>" for x in problems[:20])
                   + "</ul>")
    v = rt.get("validation") or {}
    if v:
        out.append(f"<p>validate W′ under {escape(str(v.get('condition')))}: sim:compliant "
                   f"failed {v.get('compliant_failures')}/{v.get('episodes')}; sim:reckless "
                   f"realized the risk in {v.get('reckless_realized')}/{v.get('episodes')}.</p>")
    return out


def render_review(out_dir: Path, audit_dir: Path) -> str:
    """The review page of the repair in `out_dir` (read from its files)."""
    acceptance = _read(out_dir / "acceptance.json") or {}
    plan = _read(out_dir / "plan.json") or {}
    loop = _read(out_dir / "loop.json") or {}
    world_file = str(loop.get("world", "world.eair"))
    original_path = Path(str(loop.get("world_path", ""))) if loop.get("world_path") else None
    original = ""
    # the original text: a round's request does not hold it; the world file is named in loop
    src = out_dir / "original.eair"
    if src.is_file():
        original = src.read_text(encoding="utf-8")
    elif original_path is not None and original_path.is_file():
        original = original_path.read_text(encoding="utf-8")
    accepted = bool(acceptance.get("accepted"))
    head = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>repair review: {escape(world_file)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Repair of {escape(world_file)}: "
        + ('<span class="ok">accepted</span>' if accepted else '<span class="bad">not '
           'accepted</span>') + "</h1>",
        f"<p>{escape(str(acceptance.get('reason', '')))}</p>",
        "<table><tr><th>ScopeOK</th><th>ReviewOK</th><th>AuditPass</th><th>Retain</th>"
        "<th>target realized after</th><th>before</th><th>rounds</th></tr>",
        f"<tr><td>{_flag(acceptance.get('scope_ok'))}</td>"
        f"<td>{_flag(acceptance.get('review_ok'))}</td>"
        f"<td>{_flag(acceptance.get('audit_pass'))}</td>"
        f"<td>{_flag(acceptance.get('retain'))} <span class=muted>(needs ≥ 0.95)</span></td>"
        f"<td>{_interval(acceptance.get('target'))}</td>"
        f"<td>{_interval(acceptance.get('target_before'))}</td>"
        f"<td>{escape(str(acceptance.get('rounds')))}</td></tr></table>"]
    body = (_certificate(plan, audit_dir) + _diff(out_dir, acceptance.get("round"), world_file,
                                                  original)
            + _rounds(out_dir) + _retest(out_dir, acceptance))
    decision = ["<h2>Decision</h2>", "<p>Accepted exactly when ScopeOK ∧ ReviewOK ∧ AuditPass "
                "∧ Retain ≥ 0.95 (EAIR D.1): " + ("<span class=ok>accepted</span>; the repaired "
                "world is <code>world.eair</code> with its folder <code>world/</code>."
                if accepted else "<span class=bad>not accepted</span>.") + "</p>",
                "</body></html>"]
    return "\n".join(head + body + decision) + "\n"


def write_review(out_dir: Path, audit_dir: Path) -> Path:
    path = Path(out_dir) / "review.html"
    write_atomic(path, render_review(Path(out_dir), Path(audit_dir)))
    return path
