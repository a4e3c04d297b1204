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
           "DIGEST_MARK", "mark_svg", "svg_mark", "layer_ranks", "layer_order", "node_shape"]


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
}
LEGEND_EDGES = ("direct", "delegation", "relay", "fork", "merge", "uses", "reads", "writes",
                "message", "call", "rejected")

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


def draw_svg(graph: _Drawable, title: str = "", dot_digest: str = "") -> bytes:
    """An SVG of `graph` (nodes with `kind`/`label`, edges with `kind`/`label`/`via`).

    Laid out first (`_layout`: ranks, order, boxes, positions), then drawn in
    painting order: the frame and title, the edges under the nodes, the nodes,
    and the legend of the node and edge kinds present."""
    lay = _layout(graph, title)
    present = [k for k in LEGEND_EDGES if any(d.get("kind") == k for _, _, d in lay.edges)]
    legend_y = lay.top + lay.body_h + 10
    legend_rows = max(1, (len(present) + 3) // 4) + 1
    total_w = max(lay.right - _RANK_GAP + _MARGIN, 560.0)
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
    out += _edge_lines(lay)
    out += _node_lines(lay)
    out += _legend_lines(sorted(set(lay.kinds.values())), present, legend_y)
    out.append("</svg>")
    return ("\n".join(out) + "\n").encode("utf-8")


@dataclass
class _Layout:
    """Where everything goes: the sorted nodes and edges, each node's kind, label, box
    width and top-left corner, and the extent of the drawing's body."""

    names: list[str]
    kinds: dict[str, str]
    labels: dict[str, str]
    edges: list[tuple[str, str, dict[str, Any]]]
    width: dict[str, float]
    pos: dict[str, tuple[float, float]]
    #: where the body starts (below the title, if any) and how tall it is
    top: float
    body_h: float
    #: the x past the last rank (its gap included)
    right: float


def _layout(graph: _Drawable, title: str) -> _Layout:
    """Ranks and order by name-broken ties (`layer_ranks`, `layer_order`), then each
    rank a column as wide as its widest box, its nodes centred vertically."""
    names = sorted(graph.nodes)
    kinds = {n: graph.nodes[n].get("kind", "actor") for n in names}
    labels = {n: str(graph.nodes[n].get("label", n)) for n in names}
    edges = sorted(((a, b, d) for a, b, d in graph.edges(data=True)),
                   key=lambda e: (e[0], e[1], e[2].get("kind", ""), str(e[2].get("label", ""))))
    pairs = [(a, b) for a, b, _ in edges]
    layers = layer_order(layer_ranks(names, pairs), pairs)
    width = {n: max(60.0, len(labels[n]) * _CHAR_W + 24) for n in names}
    col_w = [max((width[n] for n in layer), default=60.0) for layer in layers]
    top = _MARGIN + (26.0 if title else 0.0)
    tallest = max((len(layer) for layer in layers), default=1)
    body_h = tallest * (_NODE_H + _ROW_GAP)
    pos: dict[str, tuple[float, float]] = {}
    x = _MARGIN + 6
    for i, layer in enumerate(layers):
        offset = (body_h - len(layer) * (_NODE_H + _ROW_GAP)) / 2
        for k, node in enumerate(layer):
            cx = x + (col_w[i] - width[node]) / 2
            pos[node] = (cx, top + offset + k * (_NODE_H + _ROW_GAP))
        x += col_w[i] + _RANK_GAP
    return _Layout(names, kinds, labels, edges, width, pos, top, body_h, x)


def _edge_lines(lay: _Layout) -> list[str]:
    """Each edge from the right side of its source to the left (or, going back, the
    right) side of its target; parallel edges bend apart, a self-loop is a small hook."""
    out: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    width, pos = lay.width, lay.pos
    for a, b, data in lay.edges:
        kind = data.get("kind", "direct")
        if kind not in EDGE_STYLES:
            kind = "direct"
        n = seen[(a, b)] = seen.get((a, b), -1) + 1
        bend = (n - 0.0) * 14.0 * (1 if n % 2 == 0 else -1)
        (ax, ay), (bx, by) = pos[a], pos[b]
        if a == b:
            path = (f'<path d="M{ax + width[a]:.1f},{ay + 8:.1f} c30,-24 30,42 0,18" '
                    f'fill="none" stroke="{EDGE_STYLES[kind].color}"/>')
            out.append(path)
            continue
        x1, y1 = ax + width[a], ay + _NODE_H / 2
        x2, y2 = bx, by + _NODE_H / 2
        if bx <= ax:
            x2 = bx + width[b]
        out.append(_edge(kind, x1, y1, x2, y2, bend))
        text = data.get("label") or (f"via {data['via']}" if data.get("via") else "")
        if text:
            out.append(f'<text x="{(x1 + x2) / 2:.1f}" y="{(y1 + y2) / 2 + bend * 0.75 - 3:.1f}" '
                       f'text-anchor="middle" font-size="9" fill="#444">{escape(str(text))}</text>')
    return out


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


def _legend_lines(node_kinds: list[str], present: list[str], legend_y: float) -> list[str]:
    """The legend under the body: one row of the node kinds drawn, then the edge kinds
    present, four to a row."""
    out = [f'<g class="legend"><text x="{_MARGIN:.1f}" y="{legend_y + 12:.1f}" '
           f'font-size="10" fill="#555">legend</text>']
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
