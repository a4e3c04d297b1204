"""The audit interaction graph (F.16) on real offline episodes of D1 and A1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from audit_bundles import episode_bundle

from eairdsl.audit.evidence import Bundle, edge_ref, field_text, normalize
from eairdsl.audit.graph import (
    EDGE_KINDS,
    GraphError,
    build_graph,
    node_link,
    summary,
    trace_bundle,
)
from eairdsl.diagram import EDGE_STYLES, NODE_STYLES

ANNOTATIONS = {"summary", "sender_authority", "receiver_authority", "values", "receiver_may_see",
               "repeats"}
RESTRICTED = {"acquisition_status", "forecast_variance", "vendor_bid", "executive_reserve"}


@pytest.fixture(scope="module")
def d1(tmp_path_factory: pytest.TempPathFactory) -> tuple[Bundle, Path]:
    return episode_bundle(tmp_path_factory.mktemp("d1"), "d1", "canonical", "fin-1")


@pytest.fixture(scope="module")
def a1(tmp_path_factory: pytest.TempPathFactory) -> tuple[Bundle, Path]:
    return episode_bundle(tmp_path_factory.mktemp("a1"), "a1", "mild", "a1-01")


def _by_key(g: nx.MultiDiGraph) -> dict[str, tuple[str, str, dict[str, object]]]:
    return {k: (a, b, d) for a, b, k, d in g.edges(keys=True, data=True)}


def test_topology_has_one_edge_per_step_naming_its_step_and_edge_ref(
        d1: tuple[Bundle, Path]) -> None:
    """Every message, call, result and write is an edge carrying its step, time, task and
    the step's edge ref; reads add record edges at the result's step; no annotations."""
    bundle, _ = d1
    g = build_graph(bundle, "topology")
    edges = _by_key(g)
    for _a, _b, d in edges.values():
        step = bundle.by_step[str(d["step"])]
        assert d["ref"] == edge_ref(step) and d["t"] == step.t and d["task"] == step.task
        assert d["kind"] in EDGE_KINDS
        assert not ANNOTATIONS & set(d)
    primary = {k.split(":")[0] for k, (_a, _b, d) in edges.items()
               if d["kind"] not in ("reads", "writes")}
    assert primary == {s.step for s in bundle.steps if edge_ref(s) is not None}
    # the D1 disclosure chain, edge by edge
    assert edges["s0005:message"][:2] == ("assistant", "specialist")
    assert edges["s0005:message"][2]["kind"] == "delegation"
    assert edges["s0005:message"][2]["channel"] == "delegation"
    assert edges["s0005:message"][2]["via"] == "delegate"
    assert edges["s0006:call"][:2] == ("specialist", "tool:finance_read")
    assert edges["s0007:result"][:2] == ("tool:finance_read", "specialist")
    assert edges["s0007:reads:record:project"][:2] == ("record:project", "tool:finance_read")
    assert edges["s0008:message"][:2] == ("specialist", "assistant")
    assert edges["s0010:message"][:2] == ("assistant", "requester")
    assert edges["s0010:message"][2]["final"] is True
    kinds = {n: d["kind"] for n, d in g.nodes(data=True)}
    assert kinds["assistant"] == "role" and kinds["requester"] == "actor"
    assert kinds["tool:finance_read"] == "tool" and kinds["record:project"] == "record"


def test_annotated_visibility_follows_the_authorization_matrix(d1: tuple[Bundle, Path]) -> None:
    """The specialist may see the restricted fields its read returned; the assistant and
    the requester may not, so the reply and the final answer are flagged, naming exactly the
    restricted fields whose values they carry and the read that first returned them."""
    bundle, _ = d1
    edges = _by_key(build_graph(bundle, "annotated"))
    assert edges["s0003:result"][2]["receiver_may_see"] is True  # public directory row
    assert edges["s0007:result"][2]["receiver_may_see"] is True  # specialist: every field
    assert edges["s0005:message"][2]["receiver_may_see"] is True
    project = bundle.records["project"].rows[0]
    assert project["id"] == "P-AURORA"
    for key in ("s0008:message", "s0009:result", "s0010:message"):
        data = edges[key][2]
        assert data["receiver_may_see"] is False, key
        step = bundle.by_step[key.split(":")[0]]
        text = normalize(field_text(step, "content") or field_text(step, "result") or "")
        hidden = {v["field"] for v in data["values"] if v["visible"] is False}  # type: ignore[attr-defined]
        assert hidden == {f for f in RESTRICTED if normalize(project[f]) in text}, key
        assert hidden  # the canonical episode discloses
        for v in data["values"]:  # type: ignore[attr-defined]
            if v["field"] in RESTRICTED:
                assert v["first_step"] == "s0007"
    # the relay repeats the reply word for word
    assert edges["s0009:result"][2]["repeats"] == "s0008"
    assert edges["s0010:message"][2]["sender_authority"] == 2
    assert edges["s0010:message"][2]["receiver_authority"] == 1
    summary_text = edges["s0008:message"][2]["summary"]
    assert isinstance(summary_text, str)
    assert normalize(field_text(bundle.by_step["s0008"], "content") or "").startswith(summary_text)


def test_a_repaired_episode_sends_nothing_the_requester_may_not_see(
        tmp_path: Path) -> None:
    """Contrast: under the F.11 repair no edge into the requester is flagged."""
    bundle, _ = episode_bundle(tmp_path, "d1", "repaired", "fin-1")
    g = build_graph(bundle, "annotated")
    into = [d for _a, b, d in g.edges(data=True) if b == "requester"]
    assert into and all(d["receiver_may_see"] is not False for d in into)


def test_unconsulted_obligations_are_documents_a_role_could_but_did_not_read(
        a1: tuple[Bundle, Path]) -> None:
    """A1: retention holds search_document but never searched the handbook, so the
    handbook and its policies are its unconsulted obligations; support searched it.
    (search_document reads the handbook with section 4.6 instead under the history_rule
    lever; the lever is off in this episode, so that document is out of the tool's reach
    and no one's obligation.)"""
    bundle, _ = a1
    g = build_graph(bundle, "annotated")
    searched = {s.actor for s in bundle.steps
                if s.kind == "tool_call" and s.tool == "search_document"}
    assert "retention" not in searched and "support" in searched
    retention = g.nodes["retention"]["unconsulted"]
    assert [o["document"] for o in retention] == ["handbook"]
    assert retention[0]["tools"] == ["search_document"]
    assert set(bundle.documents) == {"handbook"}
    assert set(retention[0]["policies"]) == {p.name for p in bundle.policies
                                             if p.document == "handbook"}
    assert "compensation_cap" in retention[0]["policies"]
    for role in searched & {"support", "billing", "finance"}:
        assert g.nodes[role]["unconsulted"] == []
    reads = [(a, d["reader"]) for a, _b, d in g.edges(data=True)
             if d["kind"] == "reads" and a == "document:handbook"]
    assert {r for _, r in reads} == searched
    writes = {b for _a, b, d in g.edges(data=True) if d["kind"] == "writes"}
    assert {"record:payments", "record:closures"} <= writes
    assert "unconsulted" not in build_graph(bundle, "topology").nodes["retention"]


def test_node_link_json_round_trips_and_is_deterministic(d1: tuple[Bundle, Path]) -> None:
    bundle, _ = d1
    g = build_graph(bundle, "annotated")
    data = node_link(g)
    text = json.dumps(data, sort_keys=True)
    assert text == json.dumps(node_link(build_graph(bundle, "annotated")), sort_keys=True)
    back = nx.node_link_graph(json.loads(text), edges="links")
    assert back.number_of_edges() == g.number_of_edges()
    assert sorted(back.nodes) == sorted(g.nodes)
    assert [link["step"] for link in data["links"]] == sorted(link["step"]
                                                               for link in data["links"])


def test_summary_draws_only_kinds_the_diagram_knows(tmp_path: Path) -> None:
    # A1 repaired a1-01 seed 0: the cumulative check refuses service recovery's credit
    # (mild a1-01 has no refused call since the sim's approval requests name the customer)
    bundle, _ = episode_bundle(tmp_path, "a1", "repaired", "a1-01")
    drawn = summary(build_graph(bundle, "topology"))
    assert {d["kind"] for _a, _b, d in drawn.edges(data=True)} <= set(EDGE_STYLES)
    assert {d["kind"] for _n, d in drawn.nodes(data=True)} <= set(NODE_STYLES)
    assert any(d["kind"] == "rejected" for _a, _b, d in drawn.edges(data=True))


def test_unknown_layer_is_an_error(d1: tuple[Bundle, Path]) -> None:
    with pytest.raises(GraphError, match="unknown graph layer"):
        build_graph(d1[0], "full")  # type: ignore[arg-type]


def _eairc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eairdsl.cli", "graph", *args],
                          capture_output=True, text=True, check=False, timeout=120)


def test_cli_writes_the_graph_of_a_bundle_or_a_trace(d1: tuple[Bundle, Path],
                                                     tmp_path: Path) -> None:
    """`eairc graph BUNDLE --layer annotated -o g.json` is the library's node-link data; a
    trace alone draws its topology; a bad layer is a usage error, a missing input exit 1."""
    bundle, trace = d1
    out = tmp_path / "g.json"
    proc = _eairc(str(bundle.root), "--layer", "annotated", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(
        json.dumps(node_link(build_graph(bundle, "annotated"))))
    svg = tmp_path / "g.svg"
    proc = _eairc(str(bundle.root), "-o", str(svg))  # a bundle folder: topology by default
    assert proc.returncode == 0, proc.stderr
    assert svg.read_text(encoding="utf-8").lstrip().startswith(("<svg", "<?xml", "<!--"))
    assert "specialist" in svg.read_text(encoding="utf-8")
    from_trace = tmp_path / "t.json"
    proc = _eairc(str(trace), "--layer", "topology", "-o", str(from_trace))
    assert proc.returncode == 0, proc.stderr
    keys = {link["key"] for link in json.loads(from_trace.read_text())["links"]}
    assert {"s0005:message", "s0010:message"} <= keys
    assert trace_bundle(trace).manifest.steps == len(bundle.steps)
    proc = _eairc(str(bundle.root), "--layer", "everything", "-o", str(out))
    assert proc.returncode == 2 and "unknown --layer" in proc.stderr
    proc = _eairc(str(tmp_path / "missing.jsonl"), "--layer", "annotated", "-o", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    proc = _eairc(str(bundle.root), "--layer", "annotated", "-o", str(tmp_path / "g.png"))
    assert proc.returncode == 2 and ".json, .svg or .dot" in proc.stderr


def test_the_drawn_summary_agrees_with_the_episode_diagram(d1: tuple[Bundle, Path],
                                                           a1: tuple[Bundle, Path]) -> None:
    """`summary` of a trace's topology draws the same messages, delegations, calls and
    rejected calls, with the same step ids, as `eairdsl.interaction.episode_graph`."""
    from eairdsl.interaction import episode_graph
    from eairdsl.runtime.trace import read_trace

    for _bundle, trace in (d1, a1):
        mine = {(a, b, d["kind"]): d["steps"]
                for a, b, d in summary(build_graph(trace_bundle(trace))).edges(data=True)
                if d["kind"] in ("message", "delegation", "call", "rejected")}
        theirs = {(a, b, d["kind"]): d["steps"]
                  for a, b, d in episode_graph(read_trace(trace)).edges(data=True)}
        assert mine == theirs


def test_a_hostile_bundle_gives_a_graph_not_a_crash(d1: tuple[Bundle, Path],
                                                    tmp_path: Path) -> None:
    """Odd but schema-valid steps: a diff whose `append` is a string, a result whose row
    key is a list, a result answering no call, a message to oneself, unknown actors."""
    from eairdsl.audit import query as q
    from eairdsl.runtime.trace import TraceEvent

    bundle, _ = d1
    odd = [TraceEvent(step="x1", t=0, kind="state_update", actor="ghost", diff={"append": "ab"}),
           TraceEvent(step="x2", t=0, kind="tool_result", actor="ghost", tool="finance_read",
                      call="nowhere", result=[{"id": ["P-AURORA"], "name": "x"}, 3, None]),
           TraceEvent(step="x3", t=0, kind="message", actor="ghost", recipient="ghost",
                      content="executive reserve of $600,000 held against overrun"),
           TraceEvent(step="x4", t=0, kind="tool_call", actor="nobody", tool="no_such_tool",
                      args={"a": {"b": [1, {"c": None}]}}),
           TraceEvent(step="x5", t=0, kind="decision", actor="ghost", content="x")]
    hostile = Bundle(bundle.root, bundle.manifest, [*bundle.steps, *odd], bundle.participants,
                     bundle.policies, bundle.authorization, bundle.records, bundle.documents,
                     bundle.tools, bundle.cards)
    for layer in ("topology", "annotated"):
        g = build_graph(hostile, layer)  # type: ignore[arg-type]
        assert g.nodes["ghost"]["kind"] == "actor"
    edges = _by_key(build_graph(hostile, "annotated"))
    assert edges["x3:message"][2]["values"][0]["first_step"] == "s0007"
    assert "x1" not in {str(d["step"]) for _a, _b, d in edges.values()}
    for name in q.TOOL_NAMES:
        for args in ({"step": "x4"}, {"node": "ghost"}, {"role": "ghost"},
                     {"pattern": "ab"}, {"text": "x"}, {"from_step": "x1", "to_step": "x5"}):
            assert isinstance(q.call_tool(hostile, name, args), dict)


def test_cli_bundles_a_trace_with_its_world(d1: tuple[Bundle, Path], tmp_path: Path) -> None:
    """With --world the trace is bundled first, so the annotated layer has its matrix."""
    _, trace = d1
    out = tmp_path / "w.json"
    proc = _eairc(str(trace), "--layer", "annotated", "--world",
                  str(Path(__file__).resolve().parents[1] / "worlds" / "d1.eair"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    links = {link["key"]: link for link in json.loads(out.read_text())["links"]}
    assert links["s0010:message"]["receiver_may_see"] is False
    assert links["s0007:result"]["receiver_may_see"] is True
    wrong = _eairc(str(trace), "--layer", "annotated", "--world",
                   str(Path(__file__).resolve().parents[1] / "worlds" / "a1.eair"), "-o", str(out))
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr


def test_obligations_of_a_document_no_one_read_come_from_the_tool_card(
        a1: tuple[Bundle, Path]) -> None:
    """With every handbook search taken out of the episode, only the tool card's
    `documents` says search_document reaches the handbook: then every role holding it has
    the handbook as an unconsulted obligation; without it, nothing can be said."""
    bundle, _ = a1
    searches = {s.step for s in bundle.steps if s.tool == "search_document"}
    steps = [s for s in bundle.steps if s.step not in searches]

    def with_cards(documents: list[str]) -> Bundle:
        cards = [c.model_copy(update={"documents": documents if c.name == "search_document"
                                      else []}) for c in bundle.tools]
        return Bundle(bundle.root, bundle.manifest, steps, bundle.participants,
                      bundle.policies, bundle.authorization, bundle.records, bundle.documents,
                      cards, bundle.cards)

    holders = {p.name for p in bundle.participants if "search_document" in p.tools}
    assert {"support", "retention", "finance"} <= holders
    g = build_graph(with_cards(["handbook"]), "annotated")
    for role in holders:
        assert [o["document"] for o in g.nodes[role]["unconsulted"]] == ["handbook"], role
    g = build_graph(with_cards([]), "annotated")
    assert all(g.nodes[r]["unconsulted"] == [] for r in holders)
