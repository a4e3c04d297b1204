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
import shutil
import subprocess
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from eairdsl.diagram import (
    EDGE_STYLES,
    LEGEND_EDGES,
    NODE_STYLES,
    EdgeStyle,
    NodeStyle,
    draw_svg,
    mark_svg,
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
           "draw", "dot_digest"]

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
        g.add_node(party.name, kind=party.kind)
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


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Drawable(Protocol):
    graph: dict[str, Any]

    @property
    def nodes(self) -> Any: ...
    def edges(self, data: bool = ...) -> Iterable[tuple[str, str, dict[str, Any]]]: ...


def to_dot(graph: _Drawable | nx.MultiDiGraph, title: str = "") -> str:
    """Deterministic DOT text with a legend of node and edge kinds."""
    lines = [f"digraph {_q(graph.graph.get('name', 'world'))} {{",
             "  rankdir=LR; fontname=Helvetica; fontsize=11;",
             '  node [fontname=Helvetica, fontsize=10]; edge [fontname=Helvetica, fontsize=9];']
    if title:
        lines.append(f"  labelloc=t; label={_q(title)};")
    for node in sorted(graph.nodes):
        data = graph.nodes[node]
        label = data.get("label", node)
        lines.append(f"  {_q(node)} [label={_q(label)}, {_NODE_STYLE[data['kind']]}];")
    edges = sorted(graph.edges(data=True), key=lambda e: (e[0], e[1], e[2]["kind"]))
    for a, b, data in edges:
        text = data.get("label") or (f"via {data['via']}" if data.get("via") else "")
        label = f", label={_q(text)}" if text else ""
        lines.append(f"  {_q(a)} -> {_q(b)} [{_EDGE_STYLE[data['kind']]}{label}];")
    lines.append("  subgraph cluster_legend { label=\"legend\"; style=dashed; fontsize=9;")
    kinds = sorted({graph.nodes[n]["kind"] for n in graph.nodes})
    for kind in kinds:
        lines.append(f"    {_q('legend:' + kind)} [label={_q(kind)}, {_NODE_STYLE[kind]}];")
    present = {d["kind"] for _, _, d in graph.edges(data=True)}
    for kind in (k for k in _LEGEND_EDGES if k in present):
        a, b = _q(f"legend:{kind}:a"), _q(f"legend:{kind}:b")
        lines.append(f"    {a} [label=\"\", shape=point]; {b} [label=\"\", shape=point];")
        lines.append(f"    {a} -> {b} [label={_q(kind)}, {_EDGE_STYLE[kind]}];")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


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


def draw(graph: _Drawable | nx.MultiDiGraph, title: str = "") -> tuple[bytes, str]:
    """The graph as SVG, and which renderer drew it ("graphviz" or "built-in").

    Graphviz draws better; without its `dot` binary the built-in layered drawing
    (`eairdsl.diagram`) still gives a diagram a browser opens. Both carry the
    digest of the same DOT text, so staleness checks do not depend on the renderer.
    """
    source = to_dot(graph, title)
    if dot_available():
        try:
            return render_svg(source), "graphviz"
        except Exception:  # a broken graphviz install, or `dot` past DOT_TIMEOUT: fall back,
            pass           # the drawing is not optional
    return draw_svg(graph, title, dot_digest(source)), "built-in"
