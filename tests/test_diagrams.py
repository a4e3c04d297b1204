"""Diagrams everywhere: with or without graphviz's `dot`, compile and graph leave an SVG.

Graphviz draws when it is installed; otherwise the built-in layered renderer
(`eairdsl.diagram`) does. Either way the SVG carries the digest of the DOT text
it was drawn from, which is what `compile --check` compares.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_helpers import ROOT, make_workspace, run_eairc

from eairdsl.compiler import compile_world, stale_files, svg_digest, write_generated
from eairdsl.diagram import draw_svg
from eairdsl.graph import Topology, dot_digest, to_dot, topology

SVG = "{http://www.w3.org/2000/svg}"
HAS_DOT = shutil.which("dot") is not None


def _no_dot(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {"PATH": str(empty)}


def _texts(svg: bytes) -> list[str]:
    return [el.text or "" for el in ET.fromstring(svg).iter(f"{SVG}text")]


@pytest.mark.parametrize("name", ["a1", "b1", "c1", "d1", "f1"])
def test_built_in_drawing_names_every_node_and_is_deterministic(name: str) -> None:
    """The built-in SVG is well-formed, labels every topology node, and is the same twice."""
    result = compile_world(ROOT / "worlds" / f"{name}.eair")
    assert result.world is not None
    graph = topology(result.world)
    first = draw_svg(graph, "t", "abc")
    assert first == draw_svg(topology(result.world), "t", "abc")
    assert ET.fromstring(first).tag == f"{SVG}svg"
    texts = set(_texts(first))
    for node, data in graph.nodes.items():
        assert str(data.get("label", node)) in texts, node
    assert svg_digest(first) == "abc"


def test_built_in_drawing_escapes_world_strings() -> None:
    """Labels, titles and edge labels from a world or trace are text in the SVG, never markup."""
    g = Topology("w")
    g.add_node("a", kind="role", label="<script>alert(1)</script>")
    g.add_node("b", kind="tool", label='b" onload="x')
    g.add_edge("a", "b", kind="uses", label="<img src=x>")
    svg = draw_svg(g, "</title><script>x</script>")
    root = ET.fromstring(svg)
    assert not [el for el in root.iter() if el.tag.endswith("script") or el.tag.endswith("img")]
    assert "<script>alert(1)</script>" in _texts(svg)
    assert b"<script>" not in svg


def test_graphviz_svg_carries_the_dot_digest_too(tmp_path: Path) -> None:
    """Whichever renderer drew it, the written SVG names the digest of generated topology.dot."""
    result = compile_world(ROOT / "worlds" / "d1.eair")
    assert result.world is not None
    target, _ = write_generated(result.world, tmp_path / "gen")
    dot = (target / "topology.dot").read_text(encoding="utf-8")
    assert svg_digest((target / "topology.svg").read_bytes()) == dot_digest(dot)
    assert dot == to_dot(topology(result.world), "d1: Delegated authorization violation")


def test_compile_without_dot_keeps_an_existing_up_to_date_svg(tmp_path: Path) -> None:
    """Compiling without `dot` keeps an SVG drawn from the same topology byte for byte."""
    ws = make_workspace(tmp_path / "ws")
    first = run_eairc("compile", "worlds/d1.eair", "-o", "OUT", cwd=ws)
    assert first.returncode == 0, first.stderr
    svg = ws / "OUT" / "d1" / "topology.svg"
    before = svg.read_bytes()
    again = run_eairc("compile", "worlds/d1.eair", "-o", "OUT", cwd=ws, env=_no_dot(tmp_path))
    assert again.returncode == 0, again.stderr
    assert svg.read_bytes() == before
    assert "note:" not in again.stdout  # nothing was redrawn, so nothing to say


def test_compile_check_without_dot_notices_a_missing_or_stale_svg(tmp_path: Path) -> None:
    """`compile --check` (no `dot`) passes on fresh output, names a deleted or stale SVG."""
    ws = make_workspace(tmp_path / "ws")
    env = _no_dot(tmp_path)
    assert run_eairc("compile", "worlds/d1.eair", "-o", "OUT", cwd=ws, env=env).returncode == 0
    ok = run_eairc("compile", "--check", "worlds/d1.eair", "-o", "OUT", cwd=ws, env=env)
    assert ok.returncode == 0, ok.stderr
    svg = ws / "OUT" / "d1" / "topology.svg"
    fresh = svg.read_bytes()
    svg.unlink()
    missing = run_eairc("compile", "--check", "worlds/d1.eair", "-o", "OUT", cwd=ws, env=env)
    assert missing.returncode == 1
    assert "topology.svg" in missing.stderr
    svg.write_bytes(fresh.replace(svg_digest(fresh).encode(), b"0" * 64))  # type: ignore[union-attr]
    stale = run_eairc("compile", "--check", "worlds/d1.eair", "-o", "OUT", cwd=ws, env=env)
    assert stale.returncode == 1
    assert "topology.svg (drawn from another topology)" in stale.stderr


def test_stale_svg_after_the_topology_changes(tmp_path: Path) -> None:
    """A channel removed from the world makes both topology.dot and topology.svg stale."""
    result = compile_world(ROOT / "worlds" / "d1.eair")
    assert result.world is not None
    write_generated(result.world, tmp_path / "gen")
    changed = result.world.model_copy(deep=True)
    assert changed.channels
    changed.channels = changed.channels[:-1]
    assert {"topology.dot", "topology.svg (drawn from another topology)"} <= set(
        stale_files(changed, tmp_path / "gen"))


def test_graph_svg_without_dot(tmp_path: Path) -> None:
    """`eairc graph -o x.svg` with no `dot` writes an SVG (not a .dot in its place) and says so."""
    ws = make_workspace(tmp_path / "ws")
    proc = run_eairc("graph", "worlds/d1.eair", "-o", "x.svg", cwd=ws, env=_no_dot(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert ET.parse(ws / "x.svg").getroot().tag == f"{SVG}svg"
    assert not (ws / "x.dot").exists()
    assert "built-in renderer" in proc.stdout


# ------------------------------------------------------------- a layout that reads (issue 29)

def _world_graph(name: str) -> Topology:
    result = compile_world(ROOT / "worlds" / f"{name}.eair")
    assert result.world is not None
    return topology(result.world)


def test_plan_ranks_participants_by_authority_and_groups_tools_by_their_data() -> None:
    """Rows go from the highest authority down, then tools, then records; a tool sits in
    the group of the record it alone (or least shared) touches."""
    from eairdsl.diagram import diagram_plan

    g = _world_graph("d1")
    plan = diagram_plan(g)
    names = [name for name, _ in plan.rows]
    levels = [int(n.split()[1]) for n in names if n.startswith("authority")]
    assert levels == sorted(levels, reverse=True) and len(levels) >= 2
    assert names[-2:] == ["tools", "records"]
    row = {n: i for i, (_, nodes) in enumerate(plan.rows) for n in nodes}
    for n, data in g.nodes.items():
        if data["kind"] == "role":
            assert names[row[n]] == f"authority {data['authority']}"
    groups = dict(plan.groups)
    assert "tool:hr_read" in groups["record:employee"]


def test_dense_uses_become_a_matrix_and_sparse_ones_stay_edges() -> None:
    """Auto mode: A1's 45 role→tool lines become a participant × tool table (no uses edge
    drawn); D1's few stay edges, bundled."""
    a1 = to_dot(_world_graph("a1"), "a1")
    assert '"uses:matrix"' in a1 and "arrowhead=none" not in a1.split("cluster_legend")[0]
    d1 = to_dot(_world_graph("d1"), "d1")
    assert '"uses:matrix"' not in d1 and "arrowhead=none" in d1
    edges = to_dot(_world_graph("a1"), "a1", uses="edges")
    assert edges.count('style=dotted, arrowhead=none') >= 45


def _label_boxes(svg: bytes) -> list[tuple[float, float, float, float]]:
    boxes = []
    for el in ET.fromstring(svg).iter(f"{SVG}text"):
        if el.get("transform") or not el.text:
            continue
        size = float(el.get("font-size", "11"))
        w = len(el.text) * size * 0.52
        x, y = float(el.get("x", "0")), float(el.get("y", "0"))
        if el.get("text-anchor") == "middle":
            x -= w / 2
        boxes.append((x, y - size * 0.8, w, size))
    return boxes


@pytest.mark.parametrize("name", ["a1", "b1", "c1", "d1", "f1", "a2", "b2", "c2", "d3", "f2"])
def test_built_in_drawing_has_no_overlapping_labels_or_stray_arrowheads(name: str) -> None:
    """No two texts of the built-in drawing cover each other, and only edge kinds with an
    arrowhead carry a marker (a uses line has none)."""
    svg = draw_svg(_world_graph(name), name, "x")
    boxes = _label_boxes(svg)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap_w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
            overlap_h = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
            assert overlap_w <= 1 or overlap_h <= 1, (a, b)
    for el in ET.fromstring(svg).iter(f"{SVG}path"):
        if el.get("stroke-dasharray") == "2 3":  # a uses line
            assert el.get("marker-end") is None


def test_annotated_layer_draws_restricted_crossings_in_red_with_field_names() -> None:
    """`mark_crossings` adds one red edge per pair whose values the receiver may not see,
    named by record.field, and carries authority over for the rows."""
    import networkx as nx

    from eairdsl.graph import mark_crossings

    ann = nx.MultiDiGraph()
    ann.add_node("a", kind="role", authority=3)
    ann.add_node("b", kind="role", authority=1)
    ann.add_edge("a", "b", kind="message", step="s0002", values=[
        {"record": "emp", "field": "salary", "visible": False},
        {"record": "emp", "field": "name", "visible": True}])
    ann.add_edge("b", "a", kind="message", step="s0003", values=[])
    drawn = nx.MultiDiGraph()
    drawn.add_node("a", kind="role")
    drawn.add_node("b", kind="role")
    drawn.add_edge("a", "b", kind="message", label="1× s0002")
    assert mark_crossings(drawn, ann) == 1
    red = [d for _, _, d in drawn.edges(data=True) if d["kind"] == "restricted"]
    assert len(red) == 1 and "emp.salary" in red[0]["label"] and "emp.name" not in red[0]["label"]
    assert drawn.nodes["a"]["authority"] == 3
    dot = to_dot(drawn, "t")
    assert '#d50000' in dot and "emp.salary (s0002)" in dot
