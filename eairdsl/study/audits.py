"""Audit findings in the study report: the audit folders of a study, read through
`eairdsl.audit.folder`.

`eairc audit STUDY_DIR` writes `STUDY_DIR/audit/<ARM>/` and `eairc audit-study`
writes `STUDY_DIR/audit-study/arms/<ARM>/` (or `DIR/arms/<ARM>/` for any `-o DIR`
inside the study, beside the cohort); `eairdsl.audit.folder.study_audits` finds them
and `AuditFolder` reads each: its index, whose entries name the trace(s) every bundle
was made from (relative to that audit folder), the verdict and the validation status;
each report (contract v1, `Report`) and its validation (`ValidationResult`).
`discover_audits` maps each audited episode to the study's rows by its trace paths
(several traces that sanitize to the same bundle share one report);
`episode_audits` reads what the trace viewer shows of one trace: every finding and
lead with its certificate, the diagnostics of an invalid report, and per finding a
small SVG of the episode's interaction graph with the finding's path and boundary
drawn on it (`finding_svg`, from a typed `Finding`).

The study stage comes before the audit stage: the audit modules are imported inside
the functions that read a folder (loaded when a study has audits), never at module
level. The files are untrusted input (an LLM auditor wrote the reports): the index is
read entry by entry (a damaged entry is listed, the others shown), a path that leaves
its folder is not followed, a file that is not what it should be is listed among the
problems and skipped, an oversized file is not read, and every string reaches the page
escaped (the SVG here; the viewer's script for the rest).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eairdsl.audit.contract import Finding, Report
    from eairdsl.audit.folder import AuditEntry, AuditFolder

__all__ = ["MAX_AUDIT_FILE", "VERDICTS", "ArmAudit", "AuditCell", "Audits", "discover_audits",
           "episode_audits", "finding_svg"]

#: contract v1's verdicts (eairdsl.audit.contract.Verdict, not imported: a later stage)
VERDICTS = ("findings", "no_supported_problem", "insufficient_evidence")
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
    folder: AuditFolder  # the arm's audit folder

    @property
    def report(self) -> Path:
        """The report's file, for the page's link."""
        return self.folder.report_path(self.episode)


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


def _int(value: int) -> int:
    return value if value >= 0 else 0


def discover_audits(study_dir: Path) -> Audits:
    """The audits of a study: `audit/*/` (`eairc audit`), then every audit study's arms,
    `*/arms/*/` beside a `cohort.json` (`eairc audit-study`, by default `audit-study/`)."""
    from eairdsl.audit.folder import study_audits

    root = Path(study_dir).resolve()
    out = Audits()
    for label, folder in study_audits(root):  # `eairc audit` arms, then the audit study's
        rel = folder.index_path.relative_to(root).as_posix()
        try:
            index = folder.index_entries(MAX_AUDIT_FILE)
        except ValueError as exc:
            out.problems.append(f"{rel}: {exc}")
            continue
        count = 0
        for n, entry in enumerate(index.entries):
            cell = _cell(label, folder, entry)
            if cell is None or entry is None:
                out.problems.append(f"{rel}: entry {n} is not an audited episode")
                continue
            mapped = False
            for t in entry.traces:
                trace = (folder.path / t).resolve()
                if trace.is_relative_to(root):  # a path that leaves the study is not followed
                    out.by_trace.setdefault(trace, {})[label] = cell
                    mapped = True
            count += mapped
        out.arms.append(ArmAudit(label, folder.path, index.auditor, count))
    return out


def _cell(label: str, folder: AuditFolder, entry: AuditEntry | None) -> AuditCell | None:
    """The cell of an index entry; None for one whose episode id could name another file."""
    if entry is None or not (_EPISODE.match(entry.episode) and ".." not in entry.episode):
        return None
    return AuditCell(arm=label, episode=entry.episode, status=entry.status,
                     verdict=entry.verdict, findings=_int(entry.findings),
                     leads=_int(entry.leads), errors=_int(entry.errors), reason=entry.reason,
                     folder=folder)


# ---------------------------------------------------------------- what the viewer shows
def _validation(cell: AuditCell, item: dict[str, Any]) -> str | None:
    """The validator's diagnostics (flattened: code, severity, message, hint, path,
    finding), rates and schema validity into `item`; the problem when it cannot be read."""
    from eairdsl.audit.folder import AuditFolderError

    try:
        result = cell.folder.validation(cell.episode, MAX_AUDIT_FILE)
    except AuditFolderError as exc:
        return f"{_in_folder(cell, exc.path)}: {exc.why}"
    diagnostics = []
    for d in result.diagnostics:
        shown = {"code": d.diagnostic.code, "severity": d.diagnostic.severity.value,
                 "message": d.diagnostic.message, "hint": d.diagnostic.hint,
                 "path": d.path, "finding": d.finding_id}
        diagnostics.append({k: v for k, v in shown.items() if isinstance(v, str)})
    item["diagnostics"] = diagnostics
    item["rates"] = {k: _int(getattr(result, k)) for k in (
        "findings_resolvable", "findings_total", "units_resolvable", "units_total")}
    item["schema_valid"] = result.schema_valid
    return None


def _in_folder(cell: AuditCell, path: Path) -> str:
    """A file of the arm's folder as the page names it (`reports/<episode>.json`)."""
    return path.relative_to(cell.folder.path).as_posix()


def _report_into(report: Report, item: dict[str, Any], trace: Path,
                 graph: list[Any]) -> None:
    """The report's auditor, findings, leads and out-of-catalogue items into `item`, each
    finding and lead with its SVG (`graph` caches the episode graph for the trace)."""
    item["auditor"] = report.auditor.model_dump(mode="json")
    item["out_of_catalogue"] = [c.model_dump(mode="json") for c in report.out_of_catalogue]
    for key, found in (("findings", report.findings), ("leads", report.leads)):
        shown = []
        for f in found:
            if not graph:
                graph.append(_episode_graph(trace))
            data = f.model_dump(mode="json")
            data["graph"] = finding_svg(graph[0], f) if graph[0] is not False else None
            shown.append(data)
        item[key] = shown


def episode_audits(cells: dict[str, AuditCell], trace: Path,
                   report_dir: Path) -> list[dict[str, Any]]:
    """What the viewer shows of a trace's audits, one dict per arm (in the arms' order).

    Each holds the arm, the index's status, verdict and counts, the report's path
    relative to `report_dir`, the auditor, the findings, leads and out-of-catalogue
    items as the report has them (each finding with `graph`: an SVG of the episode's
    interaction graph with its path and boundary drawn), the validator's diagnostics
    and rates, and `problem` when a file could not be read."""
    from eairdsl.audit.folder import AuditFolderError

    out: list[dict[str, Any]] = []
    graph: list[Any] = []  # the episode graph, read once, when a finding is drawn
    for label, cell in cells.items():  # in the arms' order (`discover_audits`)
        item: dict[str, Any] = {
            "arm": label, "episode": cell.episode, "status": cell.status,
            "verdict": cell.verdict, "findings_n": cell.findings, "leads_n": cell.leads,
            "errors": cell.errors}
        if cell.reason:
            item["reason"] = cell.reason
        problems: list[str] = []
        if cell.status != "failed":
            item["report"] = _relative(cell.report, report_dir)
            try:
                _report_into(cell.folder.report(cell.episode, MAX_AUDIT_FILE), item, trace,
                             graph)
            except AuditFolderError as exc:
                problems.append(f"{_in_folder(cell, exc.path)}: {exc.why}")
            problem = _validation(cell, item)
            if problem is not None:
                problems.append(problem)
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


Edge = tuple[str, str, str]
Points = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class _Marks:
    """What a finding highlights on the graph: its path's edges (with their steps), the
    boundary edge, step and kind, and the participants and tools they touch."""

    on_path: dict[Edge, list[str]]
    boundary: Edge | None
    b_step: str
    b_kind: str
    hot_nodes: set[str]


def _marks(graph: Any, finding: Finding) -> _Marks:
    """The finding's path (with its first anomaly and effect step) and boundary, as edges
    and nodes of the episode graph."""
    edge_of: dict[str, Edge] = graph.graph.get("step_edge", {})
    actors: dict[str, str] = graph.graph.get("actors", {})
    path = list(finding.path)
    for extra in (finding.first_anomaly, finding.effect.step):
        if extra is not None and extra not in path:
            path.append(extra)
    b = finding.boundary
    b_edge = _edge_named(graph, edge_of, b.step, b.edge)
    on_path: dict[Edge, list[str]] = defaultdict(list)
    for step in path:
        if step in edge_of:
            on_path[edge_of[step]].append(step)
    hot_nodes = {actors[s] for s in path if s in actors} | {
        n for key in on_path for n in key[:2]}
    if b_edge is not None:
        hot_nodes |= set(b_edge[:2])
    return _Marks(dict(on_path), b_edge, b.step, b.kind, hot_nodes)


@dataclass(frozen=True)
class _Layout:
    """The graph laid out: nodes (kind, label, width, position), edges and the size."""

    names: list[str]
    kinds: dict[str, str]
    labels: dict[str, str]
    edges: list[tuple[Edge, list[str]]]
    width: dict[str, float]
    pos: dict[str, tuple[float, float]]
    total_w: float
    total_h: float


def _layout(graph: Any) -> _Layout:
    """`eairdsl.diagram`'s layered layout of the episode graph, left to right."""
    from eairdsl.diagram import layer_order, layer_ranks

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
    return _Layout(names, kinds, labels, edges, width, pos, total_w, total_h)


def _curve(lay: _Layout, a: str, b: str, bend: float) -> tuple[Points, float]:
    """An edge's cubic Bézier control points, and where along it the label sits."""
    (ax, ay), (bx, by) = lay.pos[a], lay.pos[b]
    y1, y2 = ay + _NODE_H / 2, by + _NODE_H / 2
    at = 0.65  # where along the curve the label sits: past the fan at the source
    pts: Points
    if a == b:
        x1 = ax + lay.width[a]
        pts = ((x1, ay + 6), (x1 + 24, ay - 14), (x1 + 24, ay + 22), (x1, ay + 22))
    elif bx > ax:  # forward: right side to left side
        x1, x2 = ax + lay.width[a], bx
        r = (x2 - x1) / 2
        pts = ((x1, y1), (x1 + r, y1 + bend), (x2 - r, y2 + bend), (x2, y2))
    elif bx < ax:  # backward: left side to right side, sagging below the forward edges
        x1, x2 = ax, bx + lay.width[b]
        r, sag = (x1 - x2) / 2, 18.0 + abs(bend)
        pts = ((x1, y1 + 6), (x1 - r, y1 + 6 + sag), (x2 + r, y2 + 6 + sag), (x2, y2 + 6))
        at = 0.5
    else:  # the same rank: loop out to the right
        x1, x2 = ax + lay.width[a], bx + lay.width[b]
        r = 36.0 + abs(bend)
        pts = ((x1, y1), (x1 + r, y1 + bend), (x2 + r, y2 + bend), (x2, y2))
    return pts, at


def _edges_svg(lay: _Layout, marks: _Marks) -> dict[str, list[str]]:
    """Every edge as a path (grey, the finding's path orange, its boundary red), in
    layers, with a label on each highlighted edge naming its steps."""
    seen: dict[tuple[str, str], int] = {}
    layers_out: dict[str, list[str]] = {"edge": [], "path": [], "boundary": [], "label": []}
    for (a, b, kind), steps in lay.edges:
        n = seen[(a, b)] = seen.get((a, b), -1) + 1
        bend = n * 12.0 * (1 if n % 2 == 0 else -1)
        is_b = marks.boundary == (a, b, kind)
        hot = marks.on_path.get((a, b, kind), [])
        colour, mark, w = ((_BOUNDARY_COLOUR, "b", 2.6) if is_b else
                           (_PATH_COLOUR, "p", 2.2) if hot else (_MUTED, "m", 1.0))
        pts, at = _curve(lay, a, b, bend)
        d = "M{:.0f},{:.0f} C{:.0f},{:.0f} {:.0f},{:.0f} {:.0f},{:.0f}".format(
            *(c for pt in pts for c in pt))
        cls = "boundary" if is_b else "path" if hot else "edge"
        dash = ' stroke-dasharray="5 3"' if kind == "rejected" else ""
        title = escape(f"{a} → {lay.labels.get(b, b)} ({kind}): {', '.join(steps)}")
        layers_out[cls].append(f'<path class="{cls}" d="{d}" fill="none" stroke="{colour}" '
                               f'stroke-width="{w}"{dash} marker-end="url(#eg-{mark})">'
                               f"<title>{title}</title></path>")
        if is_b or hot:
            shown = list(dict.fromkeys([*([marks.b_step] if is_b else []), *hot]))
            text = ", ".join(shown[:3]) + (f" +{len(shown) - 3}" if len(shown) > 3 else "")
            if is_b:
                text += f" · {marks.b_kind}"
            lx, ly = _bezier(pts, at)
            layers_out["label"].append(
                f'<text x="{lx:.0f}" y="{ly - 4:.0f}" text-anchor="middle" fill="{colour}" '
                f'stroke="#fff" stroke-width="3" paint-order="stroke">{escape(text)}</text>')
    return layers_out


def _nodes_svg(lay: _Layout, hot_nodes: set[str]) -> list[str]:
    """Participants and tools in `eairdsl.diagram`'s shapes; those the finding touches
    outlined in the path's colour."""
    from eairdsl.diagram import node_shape

    out = []
    for node in lay.names:
        nx_, ny = lay.pos[node]
        shape = node_shape(lay.kinds[node], nx_, ny, lay.width[node], _NODE_H)
        if node in hot_nodes:
            shape = shape.replace('stroke="#333" stroke-width="1"',
                                  f'stroke="{_PATH_COLOUR}" stroke-width="2"')
        out.append(f'<g><title>{escape(node)}</title>{shape}<text '
                   f'x="{nx_ + lay.width[node] / 2:.0f}" y="{ny + _NODE_H / 2 + 4:.0f}" '
                   f'text-anchor="middle" font-size="11">{escape(lay.labels[node])}</text></g>')
    return out


def finding_svg(graph: Any, finding: Finding) -> str:
    """A small SVG of the episode graph: participants and tools as nodes, every
    interaction as a grey edge, the finding's path edges in orange with their step ids
    and the boundary edge in red (its step id and kind). Deterministic; every name
    escaped. Reuses `eairdsl.diagram`'s layered layout and node shapes."""
    marks = _marks(graph, finding)
    lay = _layout(graph)
    w, h = lay.total_w, lay.total_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="egraph" width="{w:.0f}" '
           f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="10">',
           "<defs>" + "".join(
               f'<marker id="eg-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
               f'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
               f'<path d="M0,0 L10,5 L0,10 z" fill="{c}"/>'
               "</marker>" for name, c in (("m", _MUTED), ("p", _PATH_COLOUR),
                                            ("b", _BOUNDARY_COLOUR))) + "</defs>"]
    layers_out = _edges_svg(lay, marks)
    for part in ("edge", "path", "boundary"):  # the finding's edges over the others
        out.extend(layers_out[part])
    out.extend(_nodes_svg(lay, marks.hot_nodes))
    out.extend(layers_out["label"])  # labels over the nodes
    out.append(f'<text x="{_MARGIN:.0f}" y="{h - 8:.0f}" fill="#555">'
               f'<tspan fill="{_BOUNDARY_COLOUR}">━ boundary</tspan>  '
               f'<tspan fill="{_PATH_COLOUR}">━ path</tspan>  '
               f'<tspan fill="{_MUTED}">━ other interactions</tspan></text>')
    out.append("</svg>")
    return "".join(out)


def _bezier(pts: Points, t: float) -> tuple[float, float]:
    """The point at `t` of a cubic Bézier curve."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = pts
    u = 1 - t
    return (u ** 3 * x0 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t ** 3 * x3,
            u ** 3 * y0 + 3 * u * u * t * y1 + 3 * u * t * t * y2 + t ** 3 * y3)


def _edge_named(graph: Any, edge_of: dict[str, Edge], step: str | None,
                ref: str) -> Edge | None:
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
