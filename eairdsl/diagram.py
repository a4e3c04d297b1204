"""An SVG of a topology or episode graph drawn without graphviz.

`eairc compile` and `eairc graph` must leave a diagram a person can open on a
machine that has no `dot` binary (a fresh laptop, a CI image, a wheel installed
with pip). Vendoring a Graphviz build compiled to JavaScript would add a
megabyte of someone else's code to the package; these graphs are small (tens
of nodes), so a plain layered drawing in the spirit of Sugiyama's method is
enough: ranks by longest path over the graph with its back edges reversed,
order within a rank by a few barycentre sweeps, straight placement, curved
edges. Every choice breaks ties by name, so the same graph gives the same bytes.

Every string in the drawing comes from a world or a trace, which are untrusted
input, and is escaped before it reaches the SVG.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

__all__ = ["NodeStyle", "EdgeStyle", "NODE_STYLES", "EDGE_STYLES", "LEGEND_EDGES", "draw_svg",
           "DIGEST_MARK", "mark_svg", "svg_mark", "layer_ranks", "layer_order", "node_shape",
           "USES_MODES", "DiagramPlan", "diagram_plan", "DATA_PREFIXES", "uses_mode",
           "MAX_USES_EDGES"]


@dataclass(frozen=True)
class NodeStyle:
    """How a node kind looks, in both the DOT text and the built-in drawing."""

    shape: str  # box | ellipse | component | cylinder | note
    fill: str
    dashed: bool = False


@dataclass(frozen=True)
class EdgeStyle:
    """How an edge kind looks, in both the DOT text and the built-in drawing."""

    color: str
    dash: str = ""  # "" solid | dashed | dotted
    width: float = 1.0
    head: str = "normal"  # normal | veevee | inv | none


NODE_STYLES: dict[str, NodeStyle] = {
    "role": NodeStyle("box", "#dbe9f6"),
    "actor": NodeStyle("ellipse", "#f2f2f2"),
    "simulator": NodeStyle("ellipse", "#fdf0d5", dashed=True),
    "tool": NodeStyle("component", "#e8f5e9"),
    "record": NodeStyle("cylinder", "#fff3e0"),
    "document": NodeStyle("note", "#ede7f6"),
}
EDGE_STYLES: dict[str, EdgeStyle] = {
    "direct": EdgeStyle("#1f4e79"),
    "fork": EdgeStyle("#1f4e79", head="veevee"),
    "merge": EdgeStyle("#1f4e79", head="inv"),
    "relay": EdgeStyle("#1f4e79", dash="dashed"),
    "delegation": EdgeStyle("#b71c1c", width=2.2),
    "uses": EdgeStyle("#7a7a7a", dash="dotted", head="none"),
    "reads": EdgeStyle("#e65100", dash="dashed"),
    "writes": EdgeStyle("#e65100", width=1.6),
    # an episode's interactions (eairdsl.interaction)
    "message": EdgeStyle("#1f4e79"),
    "call": EdgeStyle("#2e7d32"),
    "rejected": EdgeStyle("#b71c1c", dash="dashed"),
    # the annotated audit layer: record fields that reached a receiver who may not see them
    "restricted": EdgeStyle("#d50000", width=2.6),
}
LEGEND_EDGES = ("direct", "delegation", "relay", "fork", "merge", "uses", "reads", "writes",
                "message", "call", "rejected", "restricted")

#: The comment every diagram carries: the SHA-256 of the DOT text it was drawn from, so
#: `eairc compile --check` can tell a stale SVG without redrawing it (graphviz's bytes vary
#: by version; the DOT text does not).
DIGEST_MARK = "eairdsl-dot-sha256:"

_FONT = "Helvetica, Arial, sans-serif"
_CHAR_W = 6.4  # average glyph width at 11px, enough to size boxes
_NODE_H = 34.0
_RANK_GAP = 90.0
_ROW_GAP = 22.0
_MARGIN = 24.0


class _Drawable(Protocol):
    graph: dict[str, Any]

    @property
    def nodes(self) -> Any: ...
    def edges(self, data: bool = ...) -> Iterable[tuple[str, str, dict[str, Any]]]: ...


def svg_mark(dot_digest: str) -> str:
    return f"<!-- {DIGEST_MARK}{dot_digest} -->"


def mark_svg(svg: bytes, dot_digest: str) -> bytes:
    """Insert the DOT digest comment after the XML prolog (or at the top)."""
    mark = svg_mark(dot_digest).encode("utf-8")
    text = svg
    start = text.find(b"<svg")
    if start < 0:
        return mark + b"\n" + text
    return text[:start] + mark + b"\n" + text[start:]


def layer_ranks(nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path ranks over the graph with back edges (found by DFS) reversed."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        if a != b:
            succ[a].append(b)
    succ = {n: sorted(set(targets)) for n, targets in succ.items()}
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    dag: dict[str, set[str]] = {n: set() for n in nodes}
    for root in nodes:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack.pop()
            if i < len(succ[node]):
                stack.append((node, i + 1))
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    dag[nxt].add(node)  # a back edge: draw it as if reversed
                else:
                    dag[node].add(nxt)
                    if nxt not in state:
                        state[nxt] = 1
                        stack.append((nxt, 0))
            else:
                state[node] = 2
    indeg = dict.fromkeys(nodes, 0)
    for a in nodes:
        for b in dag[a]:
            indeg[b] += 1
    rank = dict.fromkeys(nodes, 0)
    ready = sorted(n for n in nodes if indeg[n] == 0)
    while ready:
        node = ready.pop(0)
        for b in sorted(dag[node]):
            rank[b] = max(rank[b], rank[node] + 1)
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
        ready.sort()
    return rank


def layer_order(rank: dict[str, int], edges: list[tuple[str, str]]) -> list[list[str]]:
    """Nodes per rank, ordered by barycentre sweeps (ties broken by name)."""
    layers: list[list[str]] = [[] for _ in range(max(rank.values(), default=0) + 1)]
    for node in sorted(rank):
        layers[rank[node]].append(node)
    neighbours: dict[str, list[str]] = {n: [] for n in rank}
    for a, b in edges:
        if a != b:
            neighbours[a].append(b)
            neighbours[b].append(a)
    for sweep in range(6):
        indices = range(1, len(layers)) if sweep % 2 == 0 else range(len(layers) - 2, -1, -1)
        for i in indices:
            ref = layers[i - 1] if sweep % 2 == 0 else layers[i + 1]
            pos = {n: k for k, n in enumerate(ref)}
            here = {n: k for k, n in enumerate(layers[i])}

            def centre(node: str, pos: dict[str, int] = pos, here: dict[str, int] = here
                       ) -> tuple[float, str]:
                seen = [pos[m] for m in neighbours[node] if m in pos]
                return (sum(seen) / len(seen) if seen else float(here[node]), node)

            layers[i].sort(key=centre)
    return layers


def node_shape(kind: str, x: float, y: float, w: float, h: float) -> str:
    """One node's SVG shape in its kind's style (shared with the report's episode graphs)."""
    style = NODE_STYLES.get(kind, NODE_STYLES["actor"])
    dash = ' stroke-dasharray="4 3"' if style.dashed else ""
    paint = f'fill="{style.fill}" stroke="#333" stroke-width="1"{dash}'
    if style.shape == "box":
        return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" {paint}/>'
    if style.shape == "ellipse":
        return (f'<ellipse cx="{x + w / 2:.1f}" cy="{y + h / 2:.1f}" rx="{w / 2:.1f}" '
                f'ry="{h / 2:.1f}" {paint}/>')
    if style.shape == "component":
        return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" {paint}/>'
                f'<rect x="{x - 4:.1f}" y="{y + 7:.1f}" width="8" height="5" {paint}/>'
                f'<rect x="{x - 4:.1f}" y="{y + h - 12:.1f}" width="8" height="5" {paint}/>')
    if style.shape == "cylinder":
        e = 5.0
        body = (f'<path d="M{x:.1f},{y + e:.1f} v{h - 2 * e:.1f} a{w / 2:.1f},{e:.1f} 0 0 0 '
                f'{w:.1f},0 v{-(h - 2 * e):.1f}" {paint}/>')
        top = (f'<ellipse cx="{x + w / 2:.1f}" cy="{y + e:.1f}" rx="{w / 2:.1f}" ry="{e:.1f}" '
               f'{paint}/>')
        return body + top
    fold = 8.0  # note
    return (f'<path d="M{x:.1f},{y:.1f} h{w - fold:.1f} l{fold:.1f},{fold:.1f} '
            f'v{h - fold:.1f} h{-w:.1f} z" {paint}/>'
            f'<path d="M{x + w - fold:.1f},{y:.1f} v{fold:.1f} h{fold:.1f}" fill="none" '
            f'stroke="#333" stroke-width="1"/>')


def _dash(style: EdgeStyle) -> str:
    return {"dashed": ' stroke-dasharray="6 4"', "dotted": ' stroke-dasharray="2 3"'}.get(
        style.dash, "")


def _marker_id(kind: str) -> str:
    return f"head-{kind}"


def _markers(kinds: Iterable[str]) -> list[str]:
    out = []
    for kind in kinds:
        style = EDGE_STYLES[kind]
        if style.head == "none":
            continue
        shape = {"normal": "M0,0 L10,5 L0,10 z", "veevee": "M0,0 L10,5 L0,10 L4,5 z",
                 "inv": "M10,0 L0,5 L10,10 z"}[style.head]
        out.append(f'<marker id="{_marker_id(kind)}" viewBox="0 0 10 10" refX="9" refY="5" '
                   f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                   f'<path d="{shape}" fill="{style.color}"/></marker>')
    return out


def _edge(kind: str, x1: float, y1: float, x2: float, y2: float, bend: float) -> str:
    style = EDGE_STYLES[kind]
    head = "" if style.head == "none" else f' marker-end="url(#{_marker_id(kind)})"'
    if x2 > x1:
        dx = (x2 - x1) / 2
        path = (f"M{x1:.1f},{y1:.1f} C{x1 + dx:.1f},{y1 + bend:.1f} {x2 - dx:.1f},"
                f"{y2 + bend:.1f} {x2:.1f},{y2:.1f}")
    else:  # same rank or backwards: loop out to the right and come back
        reach = 40.0 + abs(bend)
        path = (f"M{x1:.1f},{y1:.1f} C{x1 + reach:.1f},{y1 + bend:.1f} {x2 - reach:.1f},"
                f"{y2 + bend:.1f} {x2:.1f},{y2:.1f}")
    return (f'<path d="{path}" fill="none" stroke="{style.color}" '
            f'stroke-width="{style.width}"{_dash(style)}{head}/>')


DATA_PREFIXES = ("record:", "document:")
#: how "uses" edges are drawn (`eairdsl.graph.to_dot`): bundled per tool group, one per
#: participant and tool, or as a participant × tool table
USES_MODES = ("bundled", "edges", "matrix")
#: `auto` draws the uses matrix instead of edges past this many (bundled) uses edges
MAX_USES_EDGES = 12


def uses_mode(graph: _Drawable, uses: str) -> str:
    """`uses` made concrete: `auto` is `bundled`, or `matrix` when bundling still leaves
    more than `MAX_USES_EDGES` lines (every role of a help desk using every tool)."""
    if uses not in (*USES_MODES, "auto"):
        raise ValueError(f"unknown uses mode {uses!r}; use auto, {', '.join(USES_MODES)}")
    if uses != "auto":
        return uses
    return "matrix" if len(diagram_plan(graph).uses) > MAX_USES_EDGES else "bundled"


@dataclass(frozen=True)
class DiagramPlan:
    """What goes where, shared by the DOT text and the built-in drawing so both read the
    same: `rows` top to bottom (participants by authority, highest first; then tools; then
    records and documents), `groups` of tools by the record or document they belong with
    (its node name, "" for tools of no record), and the "uses" edges to draw: participant,
    tool, and the group when the edge stands for the participant using the whole group."""

    rows: list[tuple[str, list[str]]]
    groups: list[tuple[str, list[str]]]
    uses: list[tuple[str, str, str]]


def diagram_plan(graph: _Drawable, bundle: bool = True) -> DiagramPlan:
    """The plan of `graph`, from node attributes only (`kind`, `authority`, a tool's
    `group`): a graph without them (an episode's) gets one row of participants."""
    names = sorted(graph.nodes)
    kind = {n: str(graph.nodes[n].get("kind", "actor")) for n in names}
    data = [n for n in names if kind[n] in ("record", "document") or n.startswith(DATA_PREFIXES)]
    tools = [n for n in names if kind[n] == "tool" and n not in data]
    parts = [n for n in names if n not in data and n not in tools]
    level = {n: graph.nodes[n].get("authority") for n in parts}
    rows: list[tuple[str, list[str]]] = []
    for lv in sorted({v for v in level.values() if isinstance(v, int)}, reverse=True):
        rows.append((f"authority {lv}", [n for n in parts if level[n] == lv]))
    unranked = [n for n in parts if not isinstance(level[n], int)]
    if unranked:
        rows.append(("participants", unranked))
    by_group: dict[str, list[str]] = {}
    for t in tools:
        g = graph.nodes[t].get("group") or ""
        by_group.setdefault(g if g in graph.nodes else "", []).append(t)
    order = sorted((g for g in by_group if g),
                   key=lambda g: (str(graph.nodes[g].get("label", g)), g))
    groups = [(g, by_group[g]) for g in order] + ([("", by_group[""])] if "" in by_group else [])
    if tools:
        rows.append(("tools", [t for _, ts in groups for t in ts]))
    if data:
        homes = [g for g, _ in groups if g]
        rows.append(("records", homes + [n for n in data if n not in homes]))
    pairs = sorted({(a, b) for a, b, d in graph.edges(data=True) if d.get("kind") == "uses"})
    uses: list[tuple[str, str, str]] = []
    covered: set[tuple[str, str]] = set()
    if bundle:
        for who in sorted({a for a, _ in pairs}):
            mine = {b for a, b in pairs if a == who}
            for g, ts in groups:
                if g and len(ts) > 1 and set(ts) <= mine:
                    uses.append((who, ts[0], g))
                    covered |= {(who, t) for t in ts}
    uses += [(a, b, "") for a, b in pairs if (a, b) not in covered]
    return DiagramPlan(rows, groups, sorted(uses))


def draw_svg(graph: _Drawable, title: str = "", dot_digest: str = "", uses: str = "auto"
             ) -> bytes:
    """An SVG of `graph` (nodes with `kind`/`label`, edges with `kind`/`label`/`via`).

    Laid out first (`_layout`: the plan's rows, order within a row, boxes), then drawn in
    painting order: the frame and title, the tool groups, the edges under the nodes, the
    nodes, the edge labels (each moved off any label or node it would cover), the uses
    matrix when asked for, and the legend of the node and edge kinds present."""
    lay = _layout(graph, title, uses_mode(graph, uses))
    present = [k for k in LEGEND_EDGES if any(d.get("kind") == k for _, _, d in lay.edges)]
    legend_y = lay.top + lay.body_h + 16
    legend_rows = max(1, (len(present) + 3) // 4) + 1
    total_w = max(lay.right + _MARGIN, 560.0)
    total_h = legend_y + legend_rows * 24 + 30 + _MARGIN

    out = ['<?xml version="1.0" encoding="UTF-8" standalone="no"?>']
    if dot_digest:
        out.append(svg_mark(dot_digest))
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" '
               f'height="{total_h:.0f}" viewBox="0 0 {total_w:.0f} {total_h:.0f}" '
               f'font-family="{_FONT}">')
    out.append(f"<title>{escape(title or str(graph.graph.get('name', 'world')))}</title>")
    out.append("<defs>" + "".join(_markers(k for k in EDGE_STYLES)) + "</defs>")
    out.append(f'<rect width="{total_w:.0f}" height="{total_h:.0f}" fill="#ffffff"/>')
    if title:
        out.append(f'<text x="{total_w / 2:.1f}" y="{_MARGIN + 6:.1f}" text-anchor="middle" '
                   f'font-size="13">{escape(title)}</text>')
    out += _frame_lines(lay)
    edge_lines, label_lines = _edge_lines(lay)
    out += edge_lines
    out += _node_lines(lay)
    out += label_lines
    out += _matrix_lines(lay)
    out += _legend_lines(sorted(set(lay.kinds.values())), present, legend_y)
    out.append("</svg>")
    return ("\n".join(out) + "\n").encode("utf-8")


@dataclass
class _Layout:
    """Where everything goes: the sorted nodes and edges, each node's kind, label, box
    width and top-left corner, the plan it follows, the group boxes, the uses matrix's
    corner (when drawn) and the extent of the drawing's body."""

    names: list[str]
    kinds: dict[str, str]
    labels: dict[str, str]
    edges: list[tuple[str, str, dict[str, Any]]]
    width: dict[str, float]
    pos: dict[str, tuple[float, float]]
    plan: DiagramPlan
    boxes: dict[str, tuple[float, float, float, float]]
    uses: str
    matrix_at: tuple[float, float] | None
    #: where the body starts (below the title, if any) and how tall it is
    top: float
    body_h: float
    #: the x past the rightmost thing drawn
    right: float


_ROW_LABEL_W = 84.0  # the column of row names ("authority 3", "tools", "records")
_ROW_STEP = _NODE_H + 64.0
_COL_GAP = 18.0
_GROUP_PAD = 8.0


def _layout(graph: _Drawable, title: str, uses: str = "bundled") -> _Layout:
    """The plan's rows top to bottom. Tools sit side by side in their groups and each
    group's record under it; a row of participants is ordered by where the tools and
    participants they are joined to sit (one barycentre pass, ties by name), so edges run
    down rather than across."""
    names = sorted(graph.nodes)
    kinds = {n: str(graph.nodes[n].get("kind", "actor")) for n in names}
    labels = {n: str(graph.nodes[n].get("label", n)) for n in names}
    edges = sorted(((a, b, d) for a, b, d in graph.edges(data=True)),
                   key=lambda e: (e[0], e[1], e[2].get("kind", ""), str(e[2].get("label", ""))))
    plan = diagram_plan(graph, bundle=uses == "bundled")
    width = {n: max(60.0, len(labels[n]) * _CHAR_W + 24) for n in names}
    top = _MARGIN + (30.0 if title else 0.0)
    left = _MARGIN + _ROW_LABEL_W
    pos: dict[str, tuple[float, float]] = {}
    boxes: dict[str, tuple[float, float, float, float]] = {}
    tool_row = next((i for i, (name, _) in enumerate(plan.rows) if name == "tools"), None)
    data_row = next((i for i, (name, _) in enumerate(plan.rows) if name == "records"), None)
    x = left
    for g, tools in plan.groups:  # tools and, under each group, its record
        start = x
        inner = sum(width[t] for t in tools) + _COL_GAP * (len(tools) - 1)
        span = max(inner, width[g]) if g else inner
        tx = start + (span - inner) / 2
        for t in tools:
            pos[t] = (tx, top + (tool_row or 0) * _ROW_STEP)
            tx += width[t] + _COL_GAP
        if g and data_row is not None:
            pos[g] = (start + (span - width[g]) / 2, top + data_row * _ROW_STEP)
            y0 = top + (tool_row or 0) * _ROW_STEP - _GROUP_PAD - 12
            boxes[g] = (start - _GROUP_PAD, y0, span + 2 * _GROUP_PAD,
                        pos[g][1] + _NODE_H + _GROUP_PAD - y0)
        x = start + span + _COL_GAP + (2 * _GROUP_PAD if g else 0)
    if data_row is not None:
        for n in plan.rows[data_row][1]:
            if n not in pos:
                pos[n] = (x, top + data_row * _ROW_STEP)
                x += width[n] + _COL_GAP
    right = max(x, left + 200.0)
    neighbours: dict[str, list[str]] = {n: [] for n in names}
    for a, b, _ in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    for i, (name, nodes) in enumerate(plan.rows):
        if name in ("tools", "records"):
            continue
        def centre(n: str) -> tuple[float, str]:
            seen = [pos[m][0] + width[m] / 2 for m in neighbours[n] if m in pos]
            return (sum(seen) / len(seen) if seen else 0.0, n)
        ordered = sorted(nodes, key=centre)
        row_w = sum(width[n] for n in ordered) + 2 * _COL_GAP * (len(ordered) - 1)
        px = left + max(0.0, (right - left - row_w) / 2)
        for n in ordered:
            pos[n] = (px, top + i * _ROW_STEP)
            px += width[n] + 2 * _COL_GAP
        right = max(right, px)
    matrix_at = None
    if uses == "matrix" and tool_row is not None:
        matrix_at = (right + 10.0, top + (tool_row or 0) * _ROW_STEP - 12)
        right = matrix_at[0] + _matrix_size(graph, labels)[0]
    body_h = max(1, len(plan.rows)) * _ROW_STEP - 40.0
    if matrix_at is not None:
        body_h = max(body_h, matrix_at[1] - top + _matrix_size(graph, labels)[1])
    return _Layout(names, kinds, labels, edges, width, pos, plan, boxes, uses, matrix_at,
                   top, body_h, right)


def _frame_lines(lay: _Layout) -> list[str]:
    """Row names at the left and a dashed box around each tool group, named by its record."""
    out: list[str] = []
    for i, (name, _) in enumerate(lay.plan.rows):
        y = lay.top + i * _ROW_STEP + _NODE_H / 2 + 4
        out.append(f'<text x="{_MARGIN:.1f}" y="{y:.1f}" font-size="10" '
                   f'fill="#595959">{escape(name)}</text>')
    for g, (x, y, w, h) in sorted(lay.boxes.items()):
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="8" '
                   'fill="none" stroke="#9e9e9e" stroke-dasharray="5 3"/>'
                   f'<text x="{x + 6:.1f}" y="{y + 11:.1f}" font-size="9" fill="#424242">'
                   f"{escape(lay.labels[g])}</text>")
    return out


def _edge_lines(lay: _Layout) -> tuple[list[str], list[str]]:
    """The edges, and their labels drawn last. An edge leaves the bottom of its source for
    the top of a target below (or the top for one above); between two nodes of one row it
    arcs over them. Parallel edges bend apart, a self-loop is a small hook. Uses edges
    follow the plan (one per tool group a participant uses whole, when bundled; none under
    a matrix). A label goes at its edge's middle, moved down or up a line at a time until
    it covers no node and no other label."""
    out: list[str] = []
    taken = [(x - 2, y - 2, lay.width[n] + 4, _NODE_H + 4) for n, (x, y) in lay.pos.items()]
    labels: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    drawn = [(a, b, d) for a, b, d in lay.edges if d.get("kind") != "uses"]
    if lay.uses == "edges":
        drawn = list(lay.edges)
    else:
        for who, tool, g in lay.plan.uses if lay.uses == "bundled" else []:
            drawn.append((who, f"group:{g}" if g else tool, {"kind": "uses"}))
    for a, b, data in drawn:
        kind = data.get("kind", "direct")
        if kind not in EDGE_STYLES:
            kind = "direct"
        pair = (min(a, b), max(a, b))  # both directions of a pair bend apart too
        n = seen[pair] = seen.get(pair, -1) + 1
        bend = n * 16.0 * (1 if n % 2 == 0 else -1)
        if a == b:
            ax, ay = lay.pos[a]
            out.append(f'<path d="M{ax + lay.width[a]:.1f},{ay + 8:.1f} c30,-24 30,42 0,18" '
                       f'fill="none" stroke="{EDGE_STYLES[kind].color}"/>')
            continue
        (x1, y1), (x2, y2), mid = _ends(lay, a, b, bend)
        out.append(_curve(kind, x1, y1, x2, y2, mid))
        text = data.get("label") or (f"via {data['via']}" if data.get("via") else "")
        if text:
            text = str(text)
            w = len(text) * 5.4 + 6
            lx, ly = mid[0], mid[1]
            for step in range(40):
                dy = (step + 1) // 2 * 12.0 * (1 if step % 2 else -1)
                box = (lx - w / 2, ly + dy - 9, w, 12)
                if not any(_overlap(box, t) for t in taken):
                    break
            taken.append(box)
            labels.append(f'<text x="{lx:.1f}" y="{box[1] + 9:.1f}" text-anchor="middle" '
                          f'font-size="9" fill="#333" stroke="#ffffff" stroke-width="3" '
                          f'paint-order="stroke">{escape(text)}</text>')
    return out, labels


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]
             ) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def _ends(lay: _Layout, a: str, b: str, bend: float
          ) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """Where an edge from `a` to `b` leaves and arrives, and the middle of its curve."""
    ax, ay = lay.pos[a]
    aw = lay.width[a]
    if b.startswith("group:"):  # a bundled uses edge: to the top of the group's box
        bx, by, bw, _ = lay.boxes[b[6:]]
        end = (bx + bw / 2 + bend, by)
        start = (ax + aw / 2 + bend / 2, ay + _NODE_H)
        return start, end, ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
    bx, by = lay.pos[b]
    bw = lay.width[b]
    if abs(ay - by) < 1:  # one row: over the top
        start, end = (ax + aw / 2, ay), (bx + bw / 2, by)
        lift = 26.0 + abs(start[0] - end[0]) * 0.08 + abs(bend)
        return start, end, ((start[0] + end[0]) / 2, ay - lift * 0.75)
    if by > ay:
        start, end = (ax + aw / 2 + bend / 2, ay + _NODE_H), (bx + bw / 2 + bend / 2, by)
    else:
        start, end = (ax + aw / 2 + bend / 2, ay), (bx + bw / 2 + bend / 2, by + _NODE_H)
    return start, end, ((start[0] + end[0]) / 2 + bend, (start[1] + end[1]) / 2)


def _curve(kind: str, x1: float, y1: float, x2: float, y2: float, mid: tuple[float, float]
           ) -> str:
    """A cubic from (x1, y1) to (x2, y2) leaving and arriving vertically, through about
    `mid`; the arrowhead only for kinds that have one."""
    style = EDGE_STYLES[kind]
    head = "" if style.head == "none" else f' marker-end="url(#{_marker_id(kind)})"'
    if abs(y1 - y2) < 1:
        c1, c2 = (x1, mid[1] - 8), (x2, mid[1] - 8)
    else:
        dy = (y2 - y1) / 2
        c1, c2 = (x1 + (mid[0] - (x1 + x2) / 2), y1 + dy), (x2 + (mid[0] - (x1 + x2) / 2), y2 - dy)
    path = (f"M{x1:.1f},{y1:.1f} C{c1[0]:.1f},{c1[1]:.1f} {c2[0]:.1f},{c2[1]:.1f} "
            f"{x2:.1f},{y2:.1f}")
    return (f'<path d="{path}" fill="none" stroke="{style.color}" '
            f'stroke-width="{style.width}"{_dash(style)}{head}/>')


def _node_lines(lay: _Layout) -> list[str]:
    """Each node as its kind's shape with its label, titled by its name (a tooltip)."""
    out: list[str] = []
    for node in lay.names:
        nx_, ny = lay.pos[node]
        w = lay.width[node]
        out.append(f'<g class="node"><title>{escape(node)}</title>'
                   + node_shape(lay.kinds[node], nx_, ny, w, _NODE_H)
                   + f'<text x="{nx_ + w / 2:.1f}" y="{ny + _NODE_H / 2 + 4:.1f}" '
                   f'text-anchor="middle" font-size="11">{escape(lay.labels[node])}</text></g>')
    return out


def _uses_table(edges: Iterable[tuple[str, str, dict[str, Any]]]
                ) -> tuple[list[str], list[str], set[tuple[str, str]]]:
    pairs = {(a, b) for a, b, d in edges if d.get("kind") == "uses"}
    return sorted({a for a, _ in pairs}), sorted({b for _, b in pairs}), pairs


_CELL_H = 16.0


def _matrix_size(graph: _Drawable, labels: dict[str, str]) -> tuple[float, float]:
    who, tools, _ = _uses_table(graph.edges(data=True))
    first = max((len(labels[t]) * 5.8 for t in tools), default=40.0) + 12
    return first + len(who) * 22.0 + 10, (len(tools) + 1) * _CELL_H + 90.0


def _matrix_lines(lay: _Layout) -> list[str]:
    """The participant × tool table (`uses="matrix"`): a row per tool, a column per
    participant (its name written upwards), a dot where it may use the tool."""
    if lay.matrix_at is None:
        return []
    who, tools, pairs = _uses_table(lay.edges)
    x0, y0 = lay.matrix_at
    first = max((len(lay.labels[t]) * 5.8 for t in tools), default=40.0) + 12
    head = 84.0
    out = ['<g class="uses-matrix">',
           f'<text x="{x0:.1f}" y="{y0 + 10:.1f}" font-size="10" font-weight="bold">uses</text>']
    for j, a in enumerate(who):
        cx = x0 + first + j * 22.0 + 11
        out.append(f'<text transform="translate({cx + 3:.1f},{y0 + head:.1f}) rotate(-60)" '
                   f'font-size="9">{escape(lay.labels[a])}</text>')
    for i, t in enumerate(tools):
        y = y0 + head + 6 + i * _CELL_H
        out.append(f'<text x="{x0:.1f}" y="{y + 12:.1f}" font-size="9">'
                   f"{escape(lay.labels[t])}</text>")
        for j, a in enumerate(who):
            cx = x0 + first + j * 22.0
            out.append(f'<rect x="{cx:.1f}" y="{y:.1f}" width="22" height="{_CELL_H:.0f}" '
                       'fill="none" stroke="#bdbdbd"/>')
            if (a, t) in pairs:
                out.append(f'<circle cx="{cx + 11:.1f}" cy="{y + _CELL_H / 2:.1f}" r="3.5" '
                           'fill="#424242"/>')
    out.append("</g>")
    return out


def _legend_lines(node_kinds: list[str], present: list[str], legend_y: float) -> list[str]:
    """The legend under the body: one row of the node kinds drawn, then the edge kinds
    present, four to a row."""
    out = [f'<g class="legend"><text x="{_MARGIN:.1f}" y="{legend_y + 12:.1f}" '
           f'font-size="10" fill="#595959">legend</text>']
    lx = _MARGIN + 50
    for kind in node_kinds:
        w = max(54.0, len(kind) * _CHAR_W + 18)
        out.append(node_shape(kind, lx, legend_y, w, 20)
                   + f'<text x="{lx + w / 2:.1f}" y="{legend_y + 14:.1f}" text-anchor="middle" '
                   f'font-size="10">{escape(kind)}</text>')
        lx += w + 12
    for i, kind in enumerate(present):
        row, col = divmod(i, 4)
        ex = _MARGIN + 50 + col * 130
        ey = legend_y + 34 + row * 22
        out.append(_edge(kind, ex, ey, ex + 50, ey, 0.0)
                   + f'<text x="{ex + 58:.1f}" y="{ey + 4:.1f}" font-size="10">'
                   f"{escape(kind)}</text>")
    out.append("</g>")
    return out
