"""The interaction graph of an episode, drawn from its trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from eairdsl.api import resolve_world, run_episode
from eairdsl.interaction import episode_graph
from eairdsl.runtime.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]


def test_edges_cite_real_steps_and_rejections(tmp_path: Path) -> None:
    """Every edge names trace steps of its kind; a refused privileged read is a rejected edge."""
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    r = run_episode(world, "acl_without_propagation", "hr-1", 0, "sim:reckless", tmp_path)
    trace = read_trace(Path(r.trace_path or ""))
    g = episode_graph(trace)
    by_step = {e.step: e for e in trace.events}
    for a, b, data in g.edges(data=True):
        for step in data["steps"]:
            event = by_step[step]
            assert event.actor == a
            assert event.kind == ("tool_call" if b.startswith("tool:") else "message")
    kinds = {(a, b): d["kind"] for a, b, d in g.edges(data=True)}
    assert kinds[("specialist", "tool:hr_read")] == "rejected"
    assert kinds[("assistant", "specialist")] == "delegation"
    assert g.nodes["requester"]["kind"] == "actor" and g.nodes["assistant"]["kind"] == "role"


def test_cli_draws_a_trace(tmp_path: Path) -> None:
    """`eairc graph TRACE.jsonl -o x.dot` writes the episode's DOT; a bad trace is exit 1."""
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    r = run_episode(world, "canonical", "fin-1", 0, "sim", tmp_path)
    out = tmp_path / "episode.dot"
    proc = subprocess.run([sys.executable, "-m", "eairdsl.cli", "graph", str(r.trace_path),
                           "-o", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert '"assistant" -> "specialist"' in out.read_text(encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a trace"}\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "eairdsl.cli", "graph", str(bad), "-o",
                           str(tmp_path / "x.svg")], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "not a readable trace" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_compiling_draws_the_topology_without_importing_networkx(tmp_path: Path) -> None:
    """networkx costs more to import than a compile; the compiler's plain topology draws
    the same DOT as the networkx graph analyses use."""
    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from eairdsl.compiler import compile_world\n"
        f"result = compile_world(Path({str(root / 'worlds' / 'c1.eair')!r}))\n"
        "assert result.ok\n"
        "print('networkx' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    from eairdsl.graph import to_dot, topology, topology_graph

    world = resolve_world(root / "worlds" / "c1.eair")
    assert to_dot(topology(world), "c1") == to_dot(topology_graph(world), "c1")
