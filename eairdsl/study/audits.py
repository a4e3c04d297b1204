"""Audit findings in the study report: the audit folders of a study, read as plain JSON.

`eairc audit STUDY_DIR` writes `STUDY_DIR/audit/<ARM>/` and `eairc audit-study`
writes `STUDY_DIR/audit-study/arms/<ARM>/` (or `DIR/arms/<ARM>/` for any `-o DIR`
inside the study, beside the cohort's `cohort.json`); each holds an `index.json` whose
entries name the trace(s) every bundle was made from (relative to that audit
folder), the verdict and the validation status, and `reports/<episode>.json`
(contract v1) with `reports/<episode>.validation.json` (the validator's
diagnostics). `discover_audits` finds those folders and maps each audited
episode to the study's rows by its trace paths (several traces that sanitize to
the same bundle share one report); `episode_audits` reads what the trace viewer
shows of one trace: every finding and lead with its certificate, the
diagnostics of an invalid report, and per finding a small SVG of the episode's
interaction graph with the finding's path and boundary drawn on it.

The study stage comes before the audit stage, so nothing here imports
`eairdsl.audit`: the files are read with `json` and checked field by field.
They are untrusted input (an LLM auditor wrote the reports): a path that
leaves its folder is not followed, a file that is not what it should be is
listed among the problems and skipped, an oversized file is not read, and
every string reaches the page escaped (the SVG here; the viewer's script for
the rest).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

__all__ = ["AUDIT_GLOB", "MAX_AUDIT_FILE", "STUDY_GLOB", "VERDICTS", "ArmAudit", "AuditCell",
           "Audits", "discover_audits", "episode_audits", "finding_svg"]

#: where audits of a study live, relative to it: `eairc audit STUDY_DIR` writes
#: `audit/<ARM>/`; `eairc audit-study STUDY_DIR -o DIR` writes `DIR/arms/<ARM>/` beside
#: `DIR/cohort.json` (DIR is `audit-study` by default; any folder of the study counts)
AUDIT_GLOB = "audit/*/index.json"
STUDY_GLOB = "*/arms/*/index.json"
COHORT_FILE = "cohort.json"  # as eairdsl.audit.cohort.COHORT
#: contract v1's verdicts (eairdsl.audit.contract.Verdict, not imported: a later stage)
VERDICTS = ("findings", "no_supported_problem", "insufficient_evidence")
_STATUSES = ("valid", "invalid", "failed")
#: a report, validation or index file larger than this is not read (untrusted input)
MAX_AUDIT_FILE = 8 * 1024 * 1024
#: an opaque episode id, as the audit runner names bundles and reports
_EPISODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class AuditCell:
    """One audited episode of one arm, as its index entry records it."""

    arm: str
    episode: str
    status: str  # valid | invalid | failed
    verdict: str | None
    findings: int
    leads: int
    errors: int
    reason: str | None
    folder: Path  # the arm's audit folder

    @property
    def report(self) -> Path:
        return self.folder / "reports" / f"{self.episode}.json"

    @property
    def validation(self) -> Path:
        return self.folder / "reports" / f"{self.episode}.validation.json"


@dataclass(frozen=True)
class ArmAudit:
    """One audit folder of the study: its label, folder and how many episodes it audited."""

    label: str
    folder: Path
    auditor: dict[str, Any]
    episodes: int


@dataclass
class Audits:
    """Every audit of a study: the arms (`eairc audit`'s by name, then the audit study's)
    and their cells by resolved trace path."""

    arms: list[ArmAudit] = field(default_factory=list)
    #: resolved trace path -> arm label -> the cell
    by_trace: dict[Path, dict[str, AuditCell]] = field(default_factory=dict)
    #: audit folders or entries that could not be read, with why (shown in the report)
    problems: list[str] = field(default_factory=list)

    def cells(self, trace: Path) -> dict[str, AuditCell]:
        return self.by_trace.get(trace, {})


def _read_json(path: Path) -> Any:
    """A JSON file's value; ValueError (with a reason for people) if it cannot be used."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror or exc})") from None
    if size > MAX_AUDIT_FILE:
        raise ValueError(f"it is larger than {MAX_AUDIT_FILE} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"it is not JSON ({exc.msg}, line {exc.lineno})") from None


def _obj(value: Any) -> dict[str, Any]:
    """An untrusted JSON value as an object: itself if it is one, else empty."""
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def discover_audits(study_dir: Path) -> Audits:
    """The audits of a study: `audit/*/` (`eairc audit`), then every audit study's arms,
    `*/arms/*/` beside a `cohort.json` (`eairc audit-study`, by default `audit-study/`)."""
    root = Path(study_dir).resolve()
    out = Audits()
    found = [(index.parent.name, index) for index in sorted(root.glob(AUDIT_GLOB))]
    found += [(f"{index.parents[2].name}/{index.parent.name}", index)
              for index in sorted(root.glob(STUDY_GLOB))
              if (index.parents[2] / COHORT_FILE).is_file()]
    for label, index in found:  # `eairc audit` arms, then the audit study's; each by name
        folder = index.parent
        rel = index.relative_to(root).as_posix()
        try:
            data = _read_json(index)
        except ValueError as exc:
            out.problems.append(f"{rel}: {exc}")
            continue
        entries = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            out.problems.append(f"{rel}: not an audit index (no list of entries)")
            continue
        auditor = _obj(_obj(data).get("auditor"))
        count = 0
        for n, entry in enumerate(entries):
            cell, traces = _cell(label, folder, entry)
            if cell is None:
                out.problems.append(f"{rel}: entry {n} is not an audited episode")
                continue
            mapped = False
            for t in traces:
                trace = (folder / t).resolve()
                if trace.is_relative_to(root):  # a path that leaves the study is not followed
                    out.by_trace.setdefault(trace, {})[label] = cell
                    mapped = True
            count += mapped
        out.arms.append(ArmAudit(label, folder, dict(auditor), count))
    return out


def _cell(label: str, folder: Path, entry: Any) -> tuple[AuditCell | None, list[str]]:
    if not isinstance(entry, dict):
        return None, []
    episode, status = entry.get("episode"), entry.get("status")
    traces = entry.get("traces")
    if not (isinstance(episode, str) and _EPISODE.match(episode) and ".." not in episode
            and status in _STATUSES and isinstance(traces, list)):
        return None, []
    verdict = entry.get("verdict")
    reason = entry.get("reason")
    return AuditCell(arm=label, episode=episode, status=str(status),
                     verdict=verdict if verdict in VERDICTS else None,
                     findings=_int(entry.get("findings")), leads=_int(entry.get("leads")),
                     errors=_int(entry.get("errors")),
                     reason=reason if isinstance(reason, str) else None,
                     folder=folder), [t for t in traces if isinstance(t, str)]


# ---------------------------------------------------------------- what the viewer shows
def _diagnostics(value: Any) -> list[dict[str, Any]]:
    """The validator's diagnostics, flattened: code, severity, message, hint, path, finding."""
    out = []
    for d in value if isinstance(value, list) else []:
        if not isinstance(d, dict):
            continue
        diag = _obj(d.get("diagnostic"))
        item = {"code": diag.get("code"), "severity": diag.get("severity"),
                "message": diag.get("message"), "hint": diag.get("hint"),
                "path": d.get("path"), "finding": d.get("finding_id")}
        out.append({k: v for k, v in item.items() if isinstance(v, str)})
    return out


def _findings(report: Any, key: str) -> list[dict[str, Any]]:
    items = report.get(key) if isinstance(report, dict) else None
    return [f for f in items if isinstance(f, dict)] if isinstance(items, list) else []


def episode_audits(cells: dict[str, AuditCell], trace: Path,
                   report_dir: Path) -> list[dict[str, Any]]:
    """What the viewer shows of a trace's audits, one dict per arm (in the arms' order).

    Each holds the arm, the index's status, verdict and counts, the report's path
    relative to `report_dir`, the auditor, the findings, leads and out-of-catalogue
    items as the report has them (each finding with `graph`: an SVG of the episode's
    interaction graph with its path and boundary drawn), the validator's diagnostics
    and rates, and `problem` when a file could not be read."""
    out: list[dict[str, Any]] = []
    graph: Any = None
    for label, cell in cells.items():  # in the arms' order (`discover_audits`)
        item: dict[str, Any] = {
            "arm": label, "episode": cell.episode, "status": cell.status,
            "verdict": cell.verdict, "findings_n": cell.findings, "leads_n": cell.leads,
            "errors": cell.errors}
        if cell.reason:
            item["reason"] = cell.reason
        problems: list[str] = []
        report: Any = None
        if cell.status != "failed":
            item["report"] = _relative(cell.report, report_dir)
            try:
                report = _read_json(cell.report)
            except ValueError as exc:
                problems.append(f"reports/{cell.episode}.json: {exc}")
            try:
                validation = _read_json(cell.validation)
                if isinstance(validation, dict):
                    item["diagnostics"] = _diagnostics(validation.get("diagnostics"))
                    item["rates"] = {k: _int(validation.get(k)) for k in (
                        "findings_resolvable", "findings_total", "units_resolvable",
                        "units_total")}
                    item["schema_valid"] = validation.get("schema_valid") is True
            except ValueError as exc:
                problems.append(f"reports/{cell.episode}.validation.json: {exc}")
        if isinstance(report, dict):
            if isinstance(report.get("auditor"), dict):
                item["auditor"] = report["auditor"]
            for key in ("findings", "leads", "out_of_catalogue"):
                item[key] = _findings(report, key)
            if item["findings"] or item["leads"]:
                if graph is None:
                    graph = _episode_graph(trace)
                for f in (*item["findings"], *item["leads"]):
                    f["graph"] = finding_svg(graph, f) if graph is not False else None
        elif report is not None:
            problems.append(f"reports/{cell.episode}.json is not a report object")
        if problems:
            item["problem"] = "; ".join(problems)
        out.append(item)
    return out


def _relative(path: Path, base: Path) -> str:
    import os

    return Path(os.path.relpath(path, base.resolve())).as_posix()


def _episode_graph(trace: Path) -> Any:
    """The episode's interaction graph (`eairdsl.interaction`), with each step's edge;
    False when the trace cannot be read as one."""
    from eairdsl.interaction import episode_graph
    from eairdsl.runtime.trace import read_trace

    try:
        t = read_trace(trace)
    except Exception:  # a trace the viewer still shows, but that does not parse as one
        return False
    g = episode_graph(t)
    # steps with no edge of their own lean on one: a tool result on its call's edge, a
    # state update on the edge of the call of that tool its actor made last
    calls: dict[str, str] = {}
    last: dict[tuple[str, str], str] = {}
    for e in t.events:
        if e.kind == "tool_call" and e.tool:
            last[(e.actor, e.tool)] = e.step
        elif e.kind == "tool_result" and e.call:
            calls[e.step] = e.call
        elif e.kind == "state_update" and e.tool and (e.actor, e.tool) in last:
            calls[e.step] = last[(e.actor, e.tool)]
    g.graph["step_edge"] = _step_edges(g, calls)
    g.graph["actors"] = {e.step: e.actor for e in t.events}
    return g


def _step_edges(g: Any, calls: dict[str, str]) -> dict[str, tuple[str, str, str]]:
    edge_of: dict[str, tuple[str, str, str]] = {}
    for a, b, data in g.edges(data=True):
        for step in data.get("steps", []):
            edge_of[step] = (a, b, str(data.get("kind")))
    for result, call in calls.items():
        if call in edge_of and result not in edge_of:
            edge_of[result] = edge_of[call]
    return edge_of


# ---------------------------------------------------------------- the finding on the graph
_PATH_COLOUR = "#e65100"
_BOUNDARY_COLOUR = "#c62828"
_MUTED = "#9aa3ad"
_NODE_H = 30.0
_RANK_GAP = 120.0
_ROW_GAP = 22.0
_MARGIN = 12.0
_CHAR_W = 6.2


def _steps(value: Any) -> list[str]:
    return [s for s in value if isinstance(s, str)] if isinstance(value, list) else []


def _sub(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, dict) else None


def finding_svg(graph: Any, finding: dict[str, Any]) -> str:
    """A small SVG of the episode graph: participants and tools as nodes, every
    interaction as a grey edge, the finding's path edges in orange with their step ids
    and the boundary edge in red (its step id and kind). Deterministic; every name
    escaped. Reuses `eairdsl.diagram`'s layered layout and node shapes."""
    from eairdsl.diagram import layer_order, layer_ranks, node_shape

    edge_of: dict[str, tuple[str, str, str]] = graph.graph.get("step_edge", {})
    actors: dict[str, str] = graph.graph.get("actors", {})
    path = _steps(finding.get("path"))
    for extra in (finding.get("first_anomaly"), _sub(finding.get("effect"), "step")):
        if isinstance(extra, str) and extra not in path:
            path.append(extra)
    boundary = _obj(finding.get("boundary"))
    b_step = boundary.get("step") if isinstance(boundary.get("step"), str) else None
    b_edge = _edge_named(graph, edge_of, b_step, boundary.get("edge"))
    on_path: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for step in path:
        if step in edge_of:
            on_path[edge_of[step]].append(step)
    hot_nodes = {actors[s] for s in path if s in actors} | {
        n for key in on_path for n in key[:2]}
    if b_edge is not None:
        hot_nodes |= set(b_edge[:2])

    names = sorted(graph.nodes)
    kinds = {n: graph.nodes[n].get("kind", "actor") for n in names}
    labels = {n: str(graph.nodes[n].get("label", n)) for n in names}
    edges = sorted({(a, b, str(d.get("kind"))): list(d.get("steps", []))
                    for a, b, d in graph.edges(data=True)}.items())
    pairs = [(a, b) for (a, b, _), _ in edges]
    layers = layer_order(layer_ranks(names, pairs), pairs)
    width = {n: max(54.0, len(labels[n]) * _CHAR_W + 18) for n in names}
    col_w = [max((width[n] for n in layer), default=54.0) for layer in layers]
    tallest = max((len(layer) for layer in layers), default=1)
    body_h = tallest * (_NODE_H + _ROW_GAP)
    pos: dict[str, tuple[float, float]] = {}
    x = _MARGIN + 6
    for i, layer in enumerate(layers):
        offset = (body_h - len(layer) * (_NODE_H + _ROW_GAP)) / 2
        for k, node in enumerate(layer):
            pos[node] = (x + (col_w[i] - width[node]) / 2,
                         _MARGIN + 14 + offset + k * (_NODE_H + _ROW_GAP))
        x += col_w[i] + _RANK_GAP
    total_w = max(x - _RANK_GAP + _MARGIN + 40, 200.0)  # room for same-rank loops
    total_h = _MARGIN + 14 + body_h + 40  # room for backward edges and the key

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="egraph" width="{total_w:.0f}" '
           f'height="{total_h:.0f}" viewBox="0 0 {total_w:.0f} {total_h:.0f}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="10">',
           "<defs>" + "".join(
               f'<marker id="eg-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
               f'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
               f'<path d="M0,0 L10,5 L0,10 z" fill="{c}"/>'
               "</marker>" for name, c in (("m", _MUTED), ("p", _PATH_COLOUR),
                                            ("b", _BOUNDARY_COLOUR))) + "</defs>"]
    seen: dict[tuple[str, str], int] = {}
    layers_out: dict[str, list[str]] = {"edge": [], "path": [], "boundary": [], "label": []}
    for (a, b, kind), steps in edges:
        n = seen[(a, b)] = seen.get((a, b), -1) + 1
        bend = n * 12.0 * (1 if n % 2 == 0 else -1)
        is_b = b_edge == (a, b, kind)
        hot = on_path.get((a, b, kind), [])
        colour, mark, w = ((_BOUNDARY_COLOUR, "b", 2.6) if is_b else
                           (_PATH_COLOUR, "p", 2.2) if hot else (_MUTED, "m", 1.0))
        (ax, ay), (bx, by) = pos[a], pos[b]
        y1, y2 = ay + _NODE_H / 2, by + _NODE_H / 2
        at = 0.65  # where along the curve the label sits: past the fan at the source
        if a == b:
            x1 = ax + width[a]
            pts = ((x1, ay + 6), (x1 + 24, ay - 14), (x1 + 24, ay + 22), (x1, ay + 22))
        elif bx > ax:  # forward: right side to left side
            x1, x2 = ax + width[a], bx
            r = (x2 - x1) / 2
            pts = ((x1, y1), (x1 + r, y1 + bend), (x2 - r, y2 + bend), (x2, y2))
        elif bx < ax:  # backward: left side to right side, sagging below the forward edges
            x1, x2 = ax, bx + width[b]
            r, sag = (x1 - x2) / 2, 18.0 + abs(bend)
            pts = ((x1, y1 + 6), (x1 - r, y1 + 6 + sag), (x2 + r, y2 + 6 + sag), (x2, y2 + 6))
            at = 0.5
        else:  # the same rank: loop out to the right
            x1, x2 = ax + width[a], bx + width[b]
            r = 36.0 + abs(bend)
            pts = ((x1, y1), (x1 + r, y1 + bend), (x2 + r, y2 + bend), (x2, y2))
        d = "M{:.0f},{:.0f} C{:.0f},{:.0f} {:.0f},{:.0f} {:.0f},{:.0f}".format(
            *(c for pt in pts for c in pt))
        cls = "boundary" if is_b else "path" if hot else "edge"
        dash = ' stroke-dasharray="5 3"' if kind == "rejected" else ""
        title = escape(f"{a} → {labels.get(b, b)} ({kind}): {', '.join(steps)}")
        layers_out[cls].append(f'<path class="{cls}" d="{d}" fill="none" stroke="{colour}" '
                   f'stroke-width="{w}"{dash} marker-end="url(#eg-{mark})">'
                   f"<title>{title}</title></path>")
        if is_b or hot:
            shown = list(dict.fromkeys(
                [*([b_step] if is_b and b_step else []), *hot]))
            text = ", ".join(shown[:3]) + (f" +{len(shown) - 3}" if len(shown) > 3 else "")
            if is_b and isinstance(boundary.get("kind"), str):
                text += f" · {boundary['kind']}"
            lx, ly = _bezier(pts, at)
            layers_out["label"].append(f'<text x="{lx:.0f}" y="{ly - 4:.0f}" '
                       f'text-anchor="middle" fill="{colour}" stroke="#fff" stroke-width="3" '
                       f'paint-order="stroke">{escape(text)}</text>')
    for part in ("edge", "path", "boundary"):  # the finding's edges over the others
        out.extend(layers_out[part])
    for node in names:
        nx_, ny = pos[node]
        shape = node_shape(kinds[node], nx_, ny, width[node], _NODE_H)
        if node in hot_nodes:
            shape = shape.replace('stroke="#333" stroke-width="1"',
                                  f'stroke="{_PATH_COLOUR}" stroke-width="2"')
        out.append(f'<g><title>{escape(node)}</title>{shape}<text x="{nx_ + width[node] / 2:.0f}" '
                   f'y="{ny + _NODE_H / 2 + 4:.0f}" text-anchor="middle" font-size="11">'
                   f"{escape(labels[node])}</text></g>")
    out.extend(layers_out["label"])  # labels over the nodes
    out.append(f'<text x="{_MARGIN:.0f}" y="{total_h - 8:.0f}" fill="#555">'
               f'<tspan fill="{_BOUNDARY_COLOUR}">━ boundary</tspan>  '
               f'<tspan fill="{_PATH_COLOUR}">━ path</tspan>  '
               f'<tspan fill="{_MUTED}">━ other interactions</tspan></text>')
    out.append("</svg>")
    return "".join(out)


def _bezier(pts: tuple[tuple[float, float], ...], t: float) -> tuple[float, float]:
    """The point at `t` of a cubic Bézier curve."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = pts
    u = 1 - t
    return (u ** 3 * x0 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t ** 3 * x3,
            u ** 3 * y0 + 3 * u * u * t * y1 + 3 * u * t * t * y2 + t ** 3 * y3)


def _edge_named(graph: Any, edge_of: dict[str, tuple[str, str, str]], step: str | None,
                ref: Any) -> tuple[str, str, str] | None:
    """The graph edge of a boundary: its step's edge, else the edge its ref names
    (`a->b`, `a->tool:X`; a tool result `tool:X->a` is drawn on the call `a->tool:X`)."""
    if step is not None and step in edge_of:
        return edge_of[step]
    if not isinstance(ref, str) or "->" not in ref:
        return None
    a, b = ref.split("->", 1)
    for x, y in ((a, b), (b, a) if a.startswith("tool:") else (a, b)):
        for _, _, data in _edges_between(graph, x, y):
            return (x, y, str(data.get("kind")))
    return None


def _edges_between(graph: Any, a: str, b: str) -> Iterable[tuple[str, str, dict[str, Any]]]:
    if a in graph and b in graph and graph.has_edge(a, b):
        for data in sorted(graph.get_edge_data(a, b).values(), key=lambda d: str(d.get("kind"))):
            yield a, b, data
