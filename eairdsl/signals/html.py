"""What `eairc signals list|show|report` say: a table, a Signal's text, an HTML page.

Every occurrence links to its trace steps: to the study report's trace viewer
(`report/trace.html#c0003.17:s0004`, the anchor `eairdsl.study.viewer` gives
each trace and step) when the session's study has a rendered report, else to
the raw trace file. The viewer's chunk names are recomputed here the way
`write_chunks` assigns them (rows in store order, sorted by its group key,
`CHUNK_SIZE` per world and condition), so the links hold for a report rendered
from the study's current store; `eairc report STUDY_DIR` refreshes a stale one.

Everything that reaches the page is escaped: occurrences come from audit
reports, which are untrusted input.
"""

from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path
from typing import Any

from eairdsl.errors import UsageError
from eairdsl.signals.occurrences import Occurrence, Session
from eairdsl.signals.remediation import Action, SignalView, signal_view
from eairdsl.signals.store import SignalsStore
from eairdsl.source import display_name, write_atomic

__all__ = ["ranked_views", "list_rows", "signal_text", "viewer_links", "write_report",
           "LIST_COLUMNS"]

LIST_COLUMNS = ("id", "severity", "nature", "top type", "component", "occurrences",
                "sessions", "status")


def ranked_views(store: SignalsStore, everything: bool = False) -> list[SignalView]:
    """Signals by severity (highest first, then id); without `everything`, only those with
    a supported occurrence (leads and out-of-catalogue candidates are not diagnoses)."""
    views = [signal_view(store, sid) for sid in store.signal_ids()]
    if not everything:
        views = [v for v in views if v.evidence == "supported"]
    return sorted(views, key=lambda v: (-v.score, int(v.id.split("-")[-1])))


def _nature(v: SignalView) -> str:
    return ", ".join(n.replace("_", " ") for n in v.natures) or "—"


def _severity(v: SignalView) -> str:
    return f"{v.severity.score} {v.severity.level}" if v.severity else "—"


def _status(v: SignalView) -> str:
    state = v.state if v.evidence == "supported" else f"{v.state} ({v.evidence})"
    return state.replace("wontfix", "won't-fix")


def list_rows(views: list[SignalView]) -> list[dict[str, Any]]:
    """One row per Signal, as `list` prints it and `--json` gives it."""
    return [{"id": v.id, "severity": _severity(v),
             "score": v.severity.score if v.severity else None,
             "level": v.severity.level if v.severity else None, "nature": _nature(v),
             "natures": v.natures, "top type": v.top_type, "component": v.component,
             "occurrences": v.occurrences, "sessions": v.sessions, "analysed": v.analysed,
             "status": _status(v), "state": v.state, "evidence": v.evidence,
             "worlds": v.worlds} for v in views]


def _step_ref(o: Occurrence) -> str:
    steps = [s for s in [o.boundary_step, *o.evidence_steps] if s]
    seen: list[str] = []
    for s in steps:
        if s not in seen:
            seen.append(s)
    return " ".join(seen) or "—"


def signal_text(store: SignalsStore, sid: str, limit: int = 20) -> str:
    """`eairc signals show ID`: occurrences, why grouped, severity, remediations, checks."""
    v = signal_view(store, sid)
    lines = [f"{v.id}  {_severity(v)}  {_status(v)}" + (f"  merged into {v.merged_into}"
                                                        if v.merged_into else ""),
             f"  component {v.component}; worlds {', '.join(v.worlds)}",
             f"  types (ranked) {', '.join(v.types) or '—'}",
             f"  {v.occurrences} occurrence(s) ({v.supported} supported) in {v.sessions} "
             f"session(s) of {v.analysed} analysed; first seen {v.first_seen}, last seen "
             f"{v.last_seen}"]
    if v.resolved_digest:
        lines.append(f"  resolved at world digest {v.resolved_digest[:16]}…")
    lines.append("why grouped (fingerprint inputs):")
    for fp, inputs in store.fingerprints(sid):
        lines.append(f"  {fp}: " + ", ".join(f"{k}={inputs[k]}" for k in sorted(inputs)))
    for m in store.merges(sid):
        lines.append(f"  {m['kind']} {m['source']} -> {m['target']} (update {m['seq']}): "
                     f"{len(m['fingerprints'])} fingerprint(s)")
    lines.append("severity:")
    if v.severity is None:
        lines.append("  none: no supported occurrence (insufficient evidence or outside the "
                     "catalogue)")
    else:
        for c in v.severity.calculations:
            share = f", share band {c.share_band}" if c.share_band else \
                " (share band needs 20 analysed)"
            lines.append(f"  {c.nature} (eq. {c.equation}): {c.factor} {c.factor_level} "
                         f"{c.arithmetic()}; {c.affected_sessions} of {c.analyzed_sessions} "
                         f"sessions: count band {c.count_band}{share} -> {c.band}")
            if c.nature in v.factor_rules:
                lines.append(f"    factor: {v.factor_rules[c.nature]}")
        lines.append(f"  S = max over natures = {v.severity.score} {v.severity.level} "
                     f"(from {v.severity.nature})")
    lines.append("remediations:")
    for a in v.actions or []:
        lines.append(f"  [{', '.join(a.categories)}] {a.objective} (from {a.occurrences} "
                     "occurrence(s))" + (f"; repaired by {a.repaired_by}" if a.repaired_by
                                          else ""))
        if a.surfaces:
            lines.append(f"    may change: {', '.join(a.surfaces)}")
        for r in a.requirements:
            lines.append(f"    - {r.get('id')}: {r.get('text')}"
                         + (f" (check: {r['check']})" if r.get("check") else ""))
    if not v.actions:
        lines.append("  no repair plan among the occurrences")
    lines.append("checks:")
    for k in v.checks:
        lines.append(f"  {k.cohort.replace('_', ' ')} cohort ({k.cases} case(s)): {k.status} — "
                     f"{k.detail}")
    lines.append("lifecycle:")
    for t in store.transitions(sid):
        lines.append(f"  update {t['seq']}: {t['from_state'] or '—'} -> {t['to_state']}"
                     + (f" at {t['digest'][:16]}…" if t["digest"] else "") + f" ({t['reason']})")
    pairs = store.occurrences(sid)
    sessions = {s.id: s for s in store.sessions({o.session for o, _ in pairs})}
    lines.append(f"occurrences ({len(pairs)}):")
    for o, seq in pairs[:limit]:
        s = sessions.get(o.session)
        where = display_name(Path(s.trace_path)) if s else o.session  # as `check` names files
        lines.append(f"  {o.short} {o.status} {o.nature or '—'} {o.auditor} {o.episode}:"
                     f"{o.finding_id} update {seq}")
        lines.append(f"    trace {where} steps {_step_ref(o)}")
        lines.append(f"    {o.summary}")
    if len(pairs) > limit:
        lines.append(f"  … {len(pairs) - limit} more (--limit N, or the HTML report)")
    return "\n".join(lines)


# ------------------------------------------------------------------ the HTML page
def viewer_links(study_dir: Path) -> dict[str, str]:
    """A study's trace path (relative to it) -> its viewer anchor (`c0003.17`), when the
    study has a rendered trace viewer; {} otherwise."""
    from eairdsl.study.report import REPORT_DIR, VIEWER_PAGE
    from eairdsl.study.store import STORE_FILE, Store, StoreError
    from eairdsl.study.viewer import CHUNK_SIZE, TraceItem, _group_key

    if not (study_dir / REPORT_DIR / VIEWER_PAGE).is_file():
        return {}
    try:
        with Store.open(study_dir / STORE_FILE, create=False) as store:
            rows = store.rows()
    except StoreError:
        return {}
    root = study_dir.resolve()
    items = []
    for i, row in enumerate(rows):
        rel = row.get("trace_path")
        if not isinstance(rel, str) or not rel:
            continue
        source = (root / rel).resolve()
        if source.is_relative_to(root) and source.is_file():
            items.append(TraceItem(i, row, source, rel))
    groups: dict[tuple[str, str], list[TraceItem]] = {}
    for item in sorted(items, key=_group_key):
        groups.setdefault((str(item.row["world"]), str(item.row["condition"])), []).append(item)
    links: dict[str, str] = {}
    number = 0
    for key in sorted(groups):
        members = groups[key]
        for start in range(0, len(members), CHUNK_SIZE):
            number += 1
            for j, item in enumerate(members[start:start + CHUNK_SIZE]):
                links[str(item.row["trace_path"])] = f"c{number:04d}.{j}"
    return links


class _Links:
    """Where an occurrence's steps link to, from the page's folder."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir.resolve()
        self.viewers: dict[str, dict[str, str]] = {}

    def href(self, s: Session | None, step: str | None) -> str | None:
        if s is None:
            return None
        if s.study_dir and s.rel_path:
            from eairdsl.study.report import REPORT_DIR, VIEWER_PAGE

            if s.study_dir not in self.viewers:
                self.viewers[s.study_dir] = viewer_links(Path(s.study_dir))
            target = self.viewers[s.study_dir].get(s.rel_path)
            if target:
                rel = self.relative(Path(s.study_dir) / REPORT_DIR / VIEWER_PAGE)
                if rel is not None:
                    return f"{rel}#{target}" + (f":{step}" if step else "")
        return self.relative(Path(s.trace_path))

    def relative(self, path: Path) -> str | None:
        """`path` from the page's folder: the page names no absolute local path, so it
        reads the same when the folder is moved or copied; None when there is no relative
        path (another drive on Windows)."""
        try:
            return Path(os.path.relpath(path, self.out_dir)).as_posix()
        except ValueError:
            return None

    def label(self, s: Session | None, session: str) -> str:
        """How the page names a session: its id (`study:path inside the study`), or, for a
        trace outside any study (whose id is its absolute path), the path from the page's
        folder, else the file's name."""
        if s is None or s.rel_path:
            return session
        return self.relative(Path(s.trace_path)) or Path(s.trace_path).name


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%;margin:.5em 0}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4} table{display:block;max-width:100%;overflow-x:auto}
pre{overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
body{overflow-wrap:break-word} code{font-size:12px} .muted{color:#595959}
.Critical{color:#fff;background:#b00020;padding:0 4px;border-radius:3px}
.High{color:#fff;background:#a84300;padding:0 4px;border-radius:3px}
.Low{background:#eee;padding:0 4px;border-radius:3px}
section{border-top:2px solid #444;margin-top:2em} .passed{color:#1b7f3b} .failed{color:#b00020}
.pending{color:#595959} details{margin:.3em 0}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _badge(v: SignalView) -> str:
    if v.severity is None:
        return '<span class="muted">—</span>'
    return f'<span class="{_e(v.severity.level)}">{v.severity.score} {_e(v.severity.level)}</span>'


class _Remediations:
    """The page's remediations, each once. A plan is its objective, requirements and what
    must not change; occurrences that propose it for different surfaces (the same fix of
    `tool finance_read`, of `tool hr_read`, …) and Signals that share it are listed under
    it, instead of the same text in every Signal's section and once per surface. Numbered
    in the order the ranked Signals first name them, so the page is the same for the same
    store."""

    def __init__(self) -> None:
        self.keys: dict[str, int] = {}
        self.plans: list[Action] = []
        #: per plan: its surface variants in first-seen order, each with (Signal, Action)s
        self.variants: list[dict[tuple[str, ...], list[tuple[str, Action]]]] = []

    @staticmethod
    def _key(a: Action) -> str:
        return json.dumps([a.objective, a.requirements, a.must_not_change], sort_keys=True,
                          default=str)

    def number(self, a: Action) -> int:
        """R<number> of `a`'s plan (1-based), given when first seen."""
        key = self._key(a)
        if key not in self.keys:
            self.keys[key] = len(self.plans) + 1
            self.plans.append(a)
            self.variants.append({})
        return self.keys[key]

    def collect(self, views: list[SignalView]) -> None:
        """Number every plan of `views` and note which Signal uses it, in page order."""
        for v in views:
            for a in v.actions:
                n = self.number(a)
                self.variants[n - 1].setdefault(tuple(a.surfaces), []).append((v.id, a))

    def _entry(self, n: int) -> str:
        a, variants = self.plans[n - 1], self.variants[n - 1]
        users: dict[str, list[Action]] = {}
        for uses in variants.values():
            for sid, u in uses:
                users.setdefault(sid, []).append(u)
        cats = sorted({c for uses in variants.values() for _, u in uses for c in u.categories})
        applies = "; ".join(
            f"<a href='#{_e(sid)}'>{_e(sid)}</a> ({sum(u.occurrences for u in us)} "
            "occurrence(s)" + "".join(f", repaired by {_e(r)}" for r in
                                      sorted({u.repaired_by for u in us if u.repaired_by}))
            + ")" for sid, us in users.items())
        shared = [s for s in next(iter(variants)) if all(s in v for v in variants)]
        head = [f"<b>R{n}</b> <b>[{_e(', '.join(cats))}]</b> {_e(a.objective)}",
                f"applies to {len(users)} Signal(s): {applies}"]
        surfaces = ""  # a list of the occurrence groups' own surfaces, when they differ
        if len(variants) > 1:
            head.append("may change: " + (f"<code>{_e(', '.join(shared))}</code> and, by "
                                          "occurrence:" if shared else "by occurrence:"))
            surfaces = "<ul class='surfaces'>" + "".join(
                f"<li><code>{_e(', '.join(s for s in own if s not in shared) or '—')}</code> ("
                + ", ".join(f"{_e(sid)}: {u.occurrences}" for sid, u in uses) + ")</li>"
                for own, uses in variants.items()) + "</ul>"
        elif shared:
            head.append(f"may change: <code>{_e(', '.join(shared))}</code>")
        tail = (f"<p>must not change: <code>{_e(', '.join(a.must_not_change))}</code></p>"
                if a.must_not_change else "")
        h = [f"<div class='remediation' id='remediation-{n}'><p>" + "<br>".join(head)
             + f"</p>{surfaces}{tail}" + ("<ul>" if a.requirements else "")]
        for r in a.requirements:
            h.append(f"<li><code>{_e(r.get('id'))}</code> {_e(r.get('text'))}"
                     + (f" <span class='muted'>check: {_e(r['check'])}</span>"
                        if r.get("check") else "") + "</li>")
        h.append(("</ul>" if a.requirements else "") + "</div>")
        return "\n".join(h)

    def html(self) -> str:
        if not self.plans:
            return ""
        return "\n".join([f"<h2 id='remediations'>Remediations</h2><p class='muted'>"
                           f"{len(self.plans)} distinct repair plan(s) among the occurrences, "
                           "each with the Signals it applies to and, when occurrences "
                           "proposed it for different surfaces, each surface.</p>",
                           *(self._entry(n) for n in range(1, len(self.plans) + 1))])


def _signal_section(store: SignalsStore, v: SignalView, links: _Links,
                    remediations: _Remediations) -> str:
    h = [f'<section id="{_e(v.id)}"><h2>{_e(v.id)} {_badge(v)} <small>{_e(_status(v))}'
         f"</small></h2>",
         f"<p>{_e(v.component)} · worlds {_e(', '.join(v.worlds))} · types "
         f"{_e(', '.join(v.types) or '—')}<br>{v.occurrences} occurrence(s), {v.supported} "
         f"supported, in {v.sessions} of {v.analysed} analysed session(s); first seen "
         f"{_e(v.first_seen)}, last seen {_e(v.last_seen)}</p>",
         "<h3>Why grouped</h3><ul>"]
    for fp, inputs in store.fingerprints(v.id):
        h.append(f"<li><code>{_e(fp)}</code>: " + ", ".join(
            f"{_e(k)} <code>{_e(inputs[k])}</code>" for k in sorted(inputs)) + "</li>")
    h.append("</ul><h3>Severity</h3>")
    if v.severity is None:
        h.append('<p class="muted">none: no supported occurrence</p>')
    else:
        h.append("<table><tr><th>nature</th><th>factor</th><th>affected / analysed</th>"
                 "<th>scope band</th><th>arithmetic</th></tr>")
        for c in v.severity.calculations:
            h.append(f"<tr><td>{_e(c.nature)} (eq. {c.equation})</td><td>{_e(c.factor)} "
                     f"{_e(c.factor_level)}<br><span class='muted'>"
                     f"{_e(v.factor_rules.get(c.nature, ''))}</span></td>"
                     f"<td>{c.affected_sessions} / {c.analyzed_sessions}</td><td>count "
                     f"{_e(c.count_band)}, share {_e(c.share_band or 'n/a (< 20 analysed)')}"
                     f" → {_e(c.band)} ({c.scope_points})</td><td>{_e(c.arithmetic())}</td></tr>")
        h.append(f"</table><p>S = max = {v.severity.score} ({_e(v.severity.level)}), from "
                 f"{_e(v.severity.nature)}</p>")
    h.append("<h3>Remediations</h3>")
    if not v.actions:
        h.append('<p class="muted">no repair plan among the occurrences</p>')
    else:
        mine: dict[int, list[Action]] = {}
        for a in v.actions:
            mine.setdefault(remediations.number(a), []).append(a)
        h.append("<ul>")
        for n, acts in mine.items():
            repaired = sorted({a.repaired_by for a in acts if a.repaired_by})
            h.append(f"<li><a href='#remediation-{n}'>R{n}</a> <span class='muted'>"
                     f"({sum(a.occurrences for a in acts)} occurrence(s)"
                     + "".join(f"; repaired by {_e(r)}" for r in repaired) + ")</span></li>")
        h.append("</ul>")
    h.append("<h3>Checks</h3><table><tr><th>cohort</th><th>cases</th><th>status</th>"
             "<th>detail</th></tr>")
    for k in v.checks:
        h.append(f"<tr><td>{_e(k.cohort.replace('_', ' '))}</td><td>{k.cases}</td>"
                 f"<td class='{_e(k.status)}'>{_e(k.status)}</td><td>{_e(k.detail)}</td></tr>")
    h.append("</table><h3>Lifecycle</h3><ul>")
    for t in store.transitions(v.id):
        h.append(f"<li>update {t['seq']}: {_e(t['from_state'] or '—')} → {_e(t['to_state'])}"
                 + (f" at <code>{_e(t['digest'][:16])}…</code>" if t["digest"] else "")
                 + f" <span class='muted'>{_e(t['reason'])}</span></li>")
    pairs = store.occurrences(v.id)
    sessions = {s.id: s for s in store.sessions({o.session for o, _ in pairs})}
    h.append(f"</ul><details><summary>Occurrences ({len(pairs)})</summary><table><tr>"
             "<th>occurrence</th><th>session</th><th>status</th><th>nature</th>"
             "<th>steps</th><th>summary</th></tr>")
    for o, _seq in pairs:
        s = sessions.get(o.session)
        trace = links.href(s, None)
        name = links.label(s, o.session)
        session = f'<a href="{_e(trace)}">{_e(name)}</a>' if trace else _e(name)
        steps = []
        for step in _step_ref(o).split():
            if step == "—":
                continue
            href = links.href(s, step)
            steps.append(f'<a href="{_e(href)}">{_e(step)}</a>' if href and "#" in href
                         else _e(step))
        h.append(f"<tr><td><code>{_e(o.short)}</code><br><span class='muted'>"
                 f"{_e(o.auditor)} {_e(o.episode)}:{_e(o.finding_id)}</span></td>"
                 f"<td>{session}</td><td>{_e(o.status)}</td><td>{_e(o.nature or '—')}</td>"
                 f"<td>{' '.join(steps) or '—'}</td><td>{_e(o.summary)}</td></tr>")
    h.append("</table></details></section>")
    return "\n".join(h)


def write_report(store: SignalsStore, out: Path, everything: bool = False) -> int:
    """Write the Signals page to `out`; returns how many Signals it shows."""
    views = ranked_views(store, everything)
    links = _Links(out.parent)
    head = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
            "<title>Signals</title>", f"<style>{_CSS}</style></head><body>",
            f"<h1>Signals</h1><p class='muted'>{len(views)} Signal(s) by severity from "
            f"<code>{_e(store.path.name)}</code>; each occurrence links to its trace steps."
            "</p>", "<table><tr>" + "".join(f"<th>{_e(c)}</th>" for c in LIST_COLUMNS)
            + "</tr>"]
    for row, v in zip(list_rows(views), views, strict=True):
        head.append(f"<tr><td><a href='#{_e(v.id)}'>{_e(v.id)}</a></td><td>{_badge(v)}</td>"
                    + "".join(f"<td>{_e(row[c])}</td>" for c in LIST_COLUMNS[2:]) + "</tr>")
    head.append("</table>")
    remediations = _Remediations()
    remediations.collect(views)
    body = [remediations.html(), *(_signal_section(store, v, links, remediations)
                                   for v in views)]
    if out.is_dir():
        # a folder given as the page (`-o reports/`) was an IsADirectoryError, with the
        # temporary page left beside it
        raise UsageError(f"{out} is a folder; -o names the HTML page to write (e.g. "
                         f"{out / 'signals.html'})")
    try:
        write_atomic(out, "\n".join([*head, *body, "</body></html>\n"]))
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return len(views)
