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
