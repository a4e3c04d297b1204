"""The world's interaction topology as a graph, and its diagram.

Nodes are participants, tools, records and documents; edges are message
channels, synchronous delegation, tool access and record reads/writes. The
same construction feeds the diagram people look at and the networkx graph
analyses (and, later, the auditor's interaction graph) use, so the drawing is
never a second, divergent model. `eairc compile` draws from a plain `Topology`:
importing networkx costs more than compiling a small world.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import subprocess
from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from eairdsl.diagram import (
    DATA_PREFIXES,
    EDGE_STYLES,
    LEGEND_EDGES,
    NODE_STYLES,
    USES_MODES,
    DiagramPlan,
    EdgeStyle,
    NodeStyle,
    diagram_plan,
    draw_svg,
    mark_svg,
    uses_mode,
)
from eairdsl.ir import (
    AppendEffect,
    DelegationChannel,
    DirectChannel,
    Expr,
    ForkChannel,
    LetIR,
    MergeChannel,
    Ref,
    RefKind,
    RelayChannel,
    World,
    channel_via,
    walk_expr,
)

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Topology", "topology", "topology_graph", "to_dot", "render_svg", "dot_available",
           "draw", "dot_digest", "USES_MODES", "uses_mode", "mark_crossings"]

def _dot_node_style(s: NodeStyle) -> str:
    style = [*(["rounded"] if s.shape == "box" else []), *(["dashed"] if s.dashed else []),
             "filled"]
    joined = style[0] if len(style) == 1 else '"' + ",".join(style) + '"'
    return f'shape={s.shape}, style={joined}, fillcolor="{s.fill}"'


def _dot_edge_style(s: EdgeStyle) -> str:
    parts = [f'color="{s.color}"']
    if s.dash:
        parts.append(f"style={s.dash}")
    if s.width != 1.0:
        parts.append(f"penwidth={s.width:g}")
    if s.head != "normal":
        parts.append(f"arrowhead={s.head}")
    return ", ".join(parts)


# One table of looks (eairdsl.diagram) drives both the DOT text and the built-in drawing.
_NODE_STYLE = {kind: _dot_node_style(s) for kind, s in NODE_STYLES.items()}
_EDGE_STYLE = {kind: _dot_edge_style(s) for kind, s in EDGE_STYLES.items()}
_LEGEND_EDGES = LEGEND_EDGES


def _refs(e: Expr | None, kind: RefKind, lets: dict[str, LetIR]) -> set[str]:
    return {x.name for x in walk_expr(e, lets) if isinstance(x, Ref) and x.kind == kind}


class _Builder(Protocol):
    def add_node(self, node: str, **attrs: Any) -> None: ...
    def add_edge(self, a: str, b: str, **attrs: Any) -> Any: ...
    def edges(self, data: bool = ...) -> Iterable[tuple[str, str, dict[str, Any]]]: ...
    def __contains__(self, node: object) -> bool: ...


class Topology:
    """Nodes and edges with attributes, in the shape `to_dot` reads — no networkx needed."""

    def __init__(self, name: str) -> None:
        self.graph: dict[str, Any] = {"name": name}
        self.nodes: dict[str, dict[str, Any]] = {}
        self._edges: list[tuple[str, str, dict[str, Any]]] = []

    def add_node(self, node: str, **attrs: Any) -> None:
        self.nodes.setdefault(node, {}).update(attrs)

    def add_edge(self, a: str, b: str, **attrs: Any) -> None:
        self.nodes.setdefault(a, {})
        self.nodes.setdefault(b, {})
        self._edges.append((a, b, attrs))

    def __contains__(self, node: object) -> bool:
        return node in self.nodes

    def edges(self, data: bool = True) -> list[tuple[str, str, dict[str, Any]]]:
        return list(self._edges)


def topology(world: World) -> Topology:
    """The world's topology as a plain `Topology` (what the compiler draws)."""
    g = Topology(world.meta.name)
    _build(world, g)
    return g


def topology_graph(world: World) -> nx.MultiDiGraph:
    """Nodes carry `kind`; edges carry `kind` (direct, delegation, uses, reads, writes…)."""
    import networkx as nx

    g: nx.MultiDiGraph = nx.MultiDiGraph(name=world.meta.name)
    _build(world, g)
    return g


def _build(world: World, g: _Builder) -> None:
    for party in world.parties:
        g.add_node(party.name, kind=party.kind, authority=party.authority)
    used_tools = {ref.name for p in world.parties for ref in p.tools}
    used_tools |= {via for c in world.channels if (via := channel_via(c))}
    for tool in world.tools:
        if tool.name in used_tools:
            g.add_node(f"tool:{tool.name}", kind="tool", label=tool.name)
    for record in world.records:
        g.add_node(f"record:{record.name}", kind="record", label=record.name)
    for doc in world.documents:
        g.add_node(f"document:{doc.name}", kind="document", label=doc.name)
    for ch in world.channels:
        # A channel that carries answers only while its `when` holds says so on its edges.
        when = None if isinstance(ch, DelegationChannel) else ch.when
        gated = {"label": "when …"} if when is not None else {}
        match ch:
            case DirectChannel() | DelegationChannel():
                g.add_edge(ch.parties[0], ch.parties[1], kind=ch.kind, via=ch.via, **gated)
            case ForkChannel():
                for target in ch.parties[1:]:
                    g.add_edge(ch.parties[0], target, kind="fork", **gated)
            case MergeChannel():
                for source in ch.parties[:-1]:
                    g.add_edge(source, ch.parties[-1], kind="merge", **gated)
            case RelayChannel():
                for a, b in zip(ch.parties, ch.parties[1:], strict=False):
                    g.add_edge(a, b, kind="relay", **gated)
            case _:
                assert_never(ch)
    for party in world.parties:
        for ref in party.tools:
            if f"tool:{ref.name}" in g:
                g.add_edge(party.name, f"tool:{ref.name}", kind="uses")
    for tool in world.tools:
        node = f"tool:{tool.name}"
        if node not in g:
            continue
        exprs = [tool.result, *(gd.condition for gd in tool.guards), *(ef.value for ef in
                                                                       tool.effects)]
        reads: set[str] = set()
        for e in exprs:
            reads |= _refs(e, "record", world.lets)
        docs: set[str] = set()
        for e in exprs:
            docs |= _refs(e, "document", world.lets)
        writes = {ef.target for ef in tool.effects if isinstance(ef, AppendEffect)}
        for r in sorted(reads - writes):
            g.add_edge(f"record:{r}", node, kind="reads")
        for r in sorted(writes):
            g.add_edge(node, f"record:{r}", kind="writes")
        for d in sorted(docs):
            g.add_edge(f"document:{d}", node, kind="reads")
    _group_tools(g)


def _group_tools(g: _Builder) -> None:
    """Give each tool the record or document it belongs with (`group`).

    A reader finds a tool by the data it touches: `view_ticket` beside `tickets`. Of the
    records and documents a tool reads or writes, its group is the one the fewest tools
    touch (its own data rather than a ledger every tool appends to), ties by name; a
    tool that touches none has no group. Derived from the edges alone, so no world is
    named and an episode graph (no reads or writes) simply has no groups.
    """
    touched: dict[str, set[str]] = {}
    for a, b, d in g.edges(data=True):
        if d.get("kind") in ("reads", "writes"):
            tool, data = (b, a) if a.startswith(DATA_PREFIXES) else (a, b)
            touched.setdefault(tool, set()).add(data)
    users: dict[str, int] = {}
    for data_nodes in touched.values():
        for n in data_nodes:
            users[n] = users.get(n, 0) + 1
    for tool, data_nodes in touched.items():
        if tool in g:
            g.add_node(tool, group=min(data_nodes, key=lambda n: (users[n], n)))


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Drawable(Protocol):
    graph: dict[str, Any]

    @property
    def nodes(self) -> Any: ...
    def edges(self, data: bool = ...) -> Iterable[tuple[str, str, dict[str, Any]]]: ...


def to_dot(graph: _Drawable | nx.MultiDiGraph, title: str = "", uses: str = "auto") -> str:
    """Deterministic DOT text: participants in rows by authority (highest on top), tools
    in clusters by the record or document they belong with, records at the bottom, and a
    legend of node and edge kinds.

    `uses` says how "uses" edges are drawn (`USES_MODES`): `bundled` — one edge from a
    participant to a tool group it uses whole; `edges` — one edge per participant and
    tool; `matrix` — no uses edges, a participant × tool table beside the graph instead;
    `auto` (the default) — bundled, or the matrix when even bundled there would be more
    than `MAX_USES_EDGES`. A world whose five roles each use nine tools is otherwise a
    tangle of 45 crossing lines.
    """
    uses = uses_mode(graph, uses)
    plan = diagram_plan(graph, bundle=uses == "bundled")
    row = {n: i for i, (_, nodes) in enumerate(plan.rows) for n in nodes}
    lines = [f"digraph {_q(graph.graph.get('name', 'world'))} {{",
             "  rankdir=TB; newrank=true; compound=true; fontname=Helvetica; fontsize=11;",
             "  nodesep=0.3; ranksep=0.55;",
             '  node [fontname=Helvetica, fontsize=10]; edge [fontname=Helvetica, fontsize=9];']
    if title:
        lines.append(f"  labelloc=t; label={_q(title)};")
    grouped = {t for g, tools in plan.groups if g for t in tools} | {g for g, _ in plan.groups}
    for node in sorted(graph.nodes):
        if node not in grouped:
            lines.append("  " + _dot_node(graph, node))
    for i, (group, tools) in enumerate(plan.groups):
        if not group:
            continue
        label = graph.nodes[group].get("label", group)
        lines.append(f"  subgraph cluster_g{i} {{ label={_q(label)}; style=\"rounded,dashed\"; "
                     'color="#9e9e9e"; fontsize=9; fontcolor="#424242";')
        for node in [*tools, group]:
            lines.append("    " + _dot_node(graph, node))
        lines.append("  }")
    lines += _dot_rows(plan)
    edges = sorted(graph.edges(data=True), key=lambda e: (e[0], e[1], e[2]["kind"]))
    for a, b, data in edges:
        if data["kind"] == "uses" and uses != "edges":
            continue
        text = data.get("label") or (f"via {data['via']}" if data.get("via") else "")
        label = f", label={_q(text)}" if text else ""
        style = _EDGE_STYLE[data["kind"]]
        up = row.get(a, 0) > row.get(b, 0)
        if (a.startswith(DATA_PREFIXES) and not b.startswith(DATA_PREFIXES)) or up:
            # drawn from the lower row's end, the arrow at the upper end: records sit
            # below the tools that read them, and a request going up to an approver
            # does not pull the approver's row down (rows are set by authority)
            back = style.replace("arrowhead=", "arrowtail=")
            lines.append(f"  {_q(b)} -> {_q(a)} [dir=back, {back}{label}];")
        elif a in row and row.get(a) == row.get(b):
            lines.append(f"  {_q(a)} -> {_q(b)} [{style}{label}, constraint=false];")
        else:
            lines.append(f"  {_q(a)} -> {_q(b)} [{style}{label}];")
    for who, target, group in (plan.uses if uses != "edges" else []):
        if uses == "matrix":
            lines.append(f"  {_q(who)} -> {_q(target)} [style=invis];")
        elif group:
            n = len(next(t for g, t in plan.groups if g == group))
            lines.append(f"  {_q(who)} -> {_q(target)} [{_EDGE_STYLE['uses']}, "
                         f"lhead=cluster_g{_group_index(plan, group)}, label={_q(f'all {n}')}];")
        else:
            lines.append(f"  {_q(who)} -> {_q(target)} [{_EDGE_STYLE['uses']}];")
    if uses == "matrix":
        lines.append(f"  {_q('uses:matrix')} [shape=plaintext, label=<{_matrix(graph)}>];")
        lines.append(f"  {{ rank=same; {_q('row:tools')}; {_q('uses:matrix')}; }}")
    lines += _dot_legend(graph, "uses" if uses != "matrix" else "",
                         f"row:{plan.rows[-1][0]}" if plan.rows else "")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _group_index(plan: DiagramPlan, group: str) -> int:
    return next(i for i, (g, _) in enumerate(plan.groups) if g == group)


def _dot_node(graph: _Drawable | nx.MultiDiGraph, node: str) -> str:
    data = graph.nodes[node]
    return f"{_q(node)} [label={_q(data.get('label', node))}, {_NODE_STYLE[data['kind']]}];"


def _dot_rows(plan: DiagramPlan) -> list[str]:
    """One rank per row of the plan, each headed by a grey label at its left ("authority
    3", "tools", "records") and chained to the next by an invisible edge, so the rows
    stack in the plan's order whichever way the channels point."""
    lines: list[str] = []
    anchors: list[str] = []
    for name, nodes in plan.rows:
        anchor = f"row:{name}"
        anchors.append(anchor)
        lines.append(f'  {_q(anchor)} [label={_q(name)}, shape=plaintext, fontcolor="#595959", '
                     "fontsize=9];")
        lines.append("  { rank=same; " + " ".join(f"{_q(n)};" for n in [anchor, *nodes]) + " }")
    for a, b in itertools.pairwise(anchors):
        lines.append(f"  {_q(a)} -> {_q(b)} [style=invis, weight=10];")
    return lines


def _dot_legend(graph: _Drawable | nx.MultiDiGraph, uses: str, last_row: str) -> list[str]:
    """The legend: a cluster of one node per node kind drawn and one short horizontal edge
    per edge kind drawn, on a rank of its own under the records."""
    lines = ["  subgraph cluster_legend { label=\"legend\"; style=dashed; fontsize=9;"]
    kinds = sorted({graph.nodes[n]["kind"] for n in graph.nodes})
    row: list[str] = []
    for kind in kinds:
        lines.append(f"    {_q('legend:' + kind)} [label={_q(kind)}, {_NODE_STYLE[kind]}];")
        row.append(_q("legend:" + kind))
    present = {d["kind"] for _, _, d in graph.edges(data=True)} - ({"uses"} - {uses})
    for kind in (k for k in _LEGEND_EDGES if k in present):
        a, b = _q(f"legend:{kind}:a"), _q(f"legend:{kind}:b")
        lines.append(f"    {a} [label=\"\", shape=point, width=0.04]; "
                     f"{b} [label=\"\", shape=point, width=0.04];")
        lines.append(f"    {a} -> {b} [label={_q(kind)}, minlen=2, "
                     f"{_EDGE_STYLE[kind]}];")
        row += [a, b]
    lines.append("    { rank=same; " + " ".join(f"{n};" for n in row) + " }")
    lines.append("  }")
    if last_row:
        lines.append(f"  {_q(last_row)} -> {row[0]} [style=invis];")
    return lines


def _matrix(graph: _Drawable | nx.MultiDiGraph) -> str:
    """An HTML-like table: a row per tool, a column per participant, a dot where the
    participant may use the tool (escaped: names come from the world)."""
    pairs = {(a, b) for a, b, d in graph.edges(data=True) if d["kind"] == "uses"}
    who = sorted({a for a, _ in pairs})
    tools = sorted({b for _, b in pairs})
    cell = '<td border="1" color="#bdbdbd">'
    head = "".join(f'{cell}<font point-size="8">{escape(a)}</font></td>' for a in who)
    rows = [f'<tr><td border="0"><b>uses</b></td>{head}</tr>']
    for t in tools:
        label = escape(str(graph.nodes[t].get("label", t)))
        marks = "".join(f"{cell}{'&#9679;' if (a, t) in pairs else ''}</td>" for a in who)
        rows.append(f'<tr><td border="1" color="#bdbdbd" align="left">{label}</td>{marks}</tr>')
    return '<table border="0" cellborder="0" cellspacing="0" cellpadding="3">' + "".join(rows) \
        + "</table>"


def mark_crossings(drawn: nx.MultiDiGraph, annotated: nx.MultiDiGraph) -> int:
    """Add to an episode's drawing (`audit.graph.summary`) what its annotated layer knows:
    each participant's authority (so rows follow it) and, per pair of nodes, one red
    `restricted` edge naming the record fields that crossed to a receiver whose principal
    may not see them, with the steps. Returns how many such edges were added."""
    for node, attrs in annotated.nodes(data=True):
        if node in drawn and isinstance(attrs.get("authority"), int):
            drawn.nodes[node]["authority"] = attrs["authority"]
    crossed: dict[tuple[str, str], tuple[dict[str, None], list[str]]] = {}
    for a, b, data in annotated.edges(data=True):
        hidden = [v for v in data.get("values") or [] if v.get("visible") is False]
        if not hidden:
            continue
        fields, steps = crossed.setdefault((a, b), ({}, []))
        fields.update(dict.fromkeys(f"{v['record']}.{v['field']}" for v in hidden))
        steps.append(str(data.get("step", "")))
    for (a, b), (fields, steps) in sorted(crossed.items()):
        for node in (a, b):
            if node not in drawn:
                drawn.add_node(node, **{k: annotated.nodes[node][k] for k in ("kind", "label")
                                        if k in annotated.nodes[node]})
        names = ", ".join(sorted(fields))
        drawn.add_edge(a, b, kind="restricted", label=f"{names} ({', '.join(steps[:3])}"
                       + (f", +{len(steps) - 3})" if len(steps) > 3 else ")"), steps=steps)
    return len(crossed)


def dot_available() -> bool:
    return shutil.which("dot") is not None


def dot_digest(dot_source: str) -> str:
    """The SHA-256 of a diagram's DOT text, which every SVG we write carries (`DIGEST_MARK`)."""
    return hashlib.sha256(dot_source.encode("utf-8")).hexdigest()


#: seconds graphviz's `dot` may take to lay out one diagram: a world is untrusted input,
#: and a dense topology (100 roles with 5 channels each) keeps `dot` busy for minutes
DOT_TIMEOUT = 10.0


def render_svg(dot_source: str, timeout: float = DOT_TIMEOUT) -> bytes:
    """SVG bytes from DOT via graphviz's `dot` binary (check `dot_available()` first), the
    command the graphviz package runs (`dot -Kdot -Tsvg`), stopped after `timeout`
    seconds (subprocess.TimeoutExpired; the child is killed, never left running)."""
    done = subprocess.run(["dot", "-Kdot", "-Tsvg"], input=dot_source.encode("utf-8"),
                          capture_output=True, timeout=timeout, check=True)
    return mark_svg(done.stdout, dot_digest(dot_source))


def draw(graph: _Drawable | nx.MultiDiGraph, title: str = "", uses: str = "auto"
         ) -> tuple[bytes, str]:
    """The graph as SVG, and which renderer drew it ("graphviz" or "built-in").

    Graphviz draws better; without its `dot` binary the built-in layered drawing
    (`eairdsl.diagram`) still gives a diagram a browser opens. Both carry the
    digest of the same DOT text, so staleness checks do not depend on the renderer.
    """
    source = to_dot(graph, title, uses)
    if dot_available():
        try:
            return render_svg(source), "graphviz"
        except Exception:  # a broken graphviz install, or `dot` past DOT_TIMEOUT: fall back,
            pass           # the drawing is not optional
    return draw_svg(graph, title, dot_digest(source), uses_mode(graph, uses)), "built-in"
