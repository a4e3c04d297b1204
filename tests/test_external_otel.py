"""`eairc export-otel` and the `otel-genai` importer: OTLP JSON out, the same events back.

The round trip runs sim episodes of all five shipped worlds offline, exports
them, imports the export and compares every event line byte for byte (and the
header, apart from its `source` block). The shape checks read the OTLP JSON as
a backend would: ids, parents, kinds, times, attribute value types. A foreign,
hand-written OTLP file (tests/fixtures/external/otel/) is imported without an
edge it does not state, and so is our own export with the lossless `eair.*`
layer stripped.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import REPORTS, audit_episodes
from eairdsl.cli import app
from eairdsl.external.core import SourceError, grader_path, import_path, importers
from eairdsl.external.otel import (
    EPOCH_NS,
    FORMAT,
    OtelError,
    export_otel,
    iter_events,
    otlp_document,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "external" / "otel" / "travel_agents.json"
WORLDS = ("a1", "b1", "c1", "d1", "f1")
#: episodes in the run folder: three per world
N = 3 * len(WORLDS)
HEX32, HEX16 = re.compile(r"^[0-9a-f]{32}$"), re.compile(r"^[0-9a-f]{16}$")
VALUE_KEYS = {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue"}
#: the fields of opentelemetry-proto's trace messages, in the OTLP JSON (lowerCamelCase) names
PROTO = {
    "ResourceSpans": {"resource", "scopeSpans", "schemaUrl"},
    "Resource": {"attributes", "droppedAttributesCount"},
    "ScopeSpans": {"scope", "spans", "schemaUrl"},
    "InstrumentationScope": {"name", "version", "attributes", "droppedAttributesCount"},
    "Span": {"traceId", "spanId", "traceState", "parentSpanId", "flags", "name", "kind",
             "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount",
             "events", "droppedEventsCount", "links", "droppedLinksCount", "status"},
    "Event": {"timeUnixNano", "name", "attributes", "droppedAttributesCount"},
    "Link": {"traceId", "spanId", "traceState", "attributes", "droppedAttributesCount",
             "flags"},
    "Status": {"message", "code"},
    "KeyValue": {"key", "value"},
}


def assert_proto_fields(doc: dict[str, Any]) -> None:
    """Every object of the document uses only its proto message's fields."""
    def kv(items: list[dict[str, Any]]) -> None:
        for item in items:
            assert set(item) <= PROTO["KeyValue"]
    for rs in doc["resourceSpans"]:
        assert set(rs) <= PROTO["ResourceSpans"] and set(rs["resource"]) <= PROTO["Resource"]
        kv(rs["resource"]["attributes"])
        for ss in rs["scopeSpans"]:
            assert set(ss) <= PROTO["ScopeSpans"]
            assert set(ss["scope"]) <= PROTO["InstrumentationScope"]
            for span in ss["spans"]:
                assert set(span) <= PROTO["Span"], set(span) - PROTO["Span"]
                kv(span["attributes"])
                for e in span.get("events", []):
                    assert set(e) <= PROTO["Event"]
                    kv(e["attributes"])
                for link in span.get("links", []):
                    assert set(link) <= PROTO["Link"]
                if "status" in span:
                    assert set(span["status"]) <= PROTO["Status"]
                    assert span["status"]["code"] in (0, 1, 2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sim episodes of every shipped world, offline, one of them with reckless
    agents (guards reject their calls): runs/<world>/<condition>/…"""
    out = tmp_path_factory.mktemp("runs")
    for name in WORLDS:
        world = resolve_world(ROOT / "worlds" / f"{name}.eair")
        for seed, agents in ((0, "sim"), (1, "sim"), (2, "sim:reckless")):
            run_episode(world, None, None, seed, agents=agents, out=out / name)
    return out


@pytest.fixture(scope="module")
def exported(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("otel") / "episodes.json"
    export_otel(runs, out)
    return out


def traces(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jsonl"))


def spans_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in items}


def header_of(rs: dict[str, Any]) -> dict[str, Any]:
    return json.loads(attrs(rs["resource"]["attributes"])["eair.header"])


# ------------------------------------------------------------------ round trip
def test_round_trip_gives_back_every_event_of_the_five_worlds(runs: Path, exported: Path,
                                                              tmp_path: Path) -> None:
    written = import_path(FORMAT, exported, tmp_path / "back")
    originals = traces(runs)
    assert {p.parent.parent.name for p in originals} == set(WORLDS)
    assert len(written) == len(originals) == N  # no grader side file without --include-grader
    events = 0
    for original in originals:
        back = tmp_path / "back" / original.relative_to(runs)
        assert back.is_file(), f"{back} not imported"
        a, b = original.read_text().splitlines(), back.read_text().splitlines()
        source_events = [line for line in a[1:] if json.loads(line)["type"] == "event"]
        assert b[1:] == source_events  # byte-identical event lines, in order
        events += len(source_events)
        ha, hb = json.loads(a[0]), json.loads(b[0])
        source = hb.pop("source")
        assert ha == hb
        assert json.dumps(hb, sort_keys=True, ensure_ascii=False) == a[0]  # header bytes too
        assert source["format"] == FORMAT and source["framework"] == "eairdsl"
        assert source["withheld"] == []
    assert events > 500


def test_model_calls_become_chat_spans_and_come_back(runs: Path, tmp_path: Path) -> None:
    """An LLM run's header model calls: `chat` spans under their task, restored exactly."""
    src = traces(runs / "d1")[0]
    lines = src.read_text().splitlines()
    header = json.loads(lines[0])
    events = [json.loads(x) for x in lines[1:] if json.loads(x)["type"] == "event"]
    handler = events[0]["recipient"]
    header["model_calls"] = [
        {"participant": handler, "model": "openai/gpt-4o-mini", "task": 1, "step": 0,
         "reply": None, "tool_calls": [{"name": events[1]["tool"]}], "finish_reason":
         "tool_calls", "tokens_in": 812, "tokens_out": 31, "cost": 0.0001},
        {"participant": "judge", "model": "openai/gpt-4o", "rubric": "disclosure",
         "reply": "no", "tokens_in": 90, "tokens_out": 1},
    ]
    llm = tmp_path / "llm" / "d1" / "canonical" / src.name
    llm.parent.mkdir(parents=True)
    judgment = {"actor": "judge", "content": "the reply disclosed nothing restricted",
                "kind": "judgment", "step": f"s{len(events) + 1:04d}", "t": events[-1]["t"],
                "type": "event"}
    body = [*lines[1:len(events) + 1], json.dumps(judgment, sort_keys=True),
            *lines[len(events) + 1:]]
    llm.write_text("\n".join([json.dumps(header, sort_keys=True), *body]) + "\n")
    out = tmp_path / "llm.json"
    export_otel(llm, out)
    spans = spans_of(json.loads(out.read_text()))
    chats = [s for s in spans if attrs(s["attributes"]).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 2
    first = attrs(chats[0]["attributes"])
    # provider-native names: litellm's routing prefix is the provider, not the model's name
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"] == "gpt-4o-mini"
    assert first["gen_ai.provider.name"] == "openai" and chats[0]["name"] == "chat gpt-4o-mini"
    assert first["gen_ai.usage.input_tokens"] == "812" and first["llm.token_count.prompt"] == "812"
    assert first["openinference.span.kind"] == "LLM" and chats[0]["kind"] == 3
    assert first["eair.model_call.step"] == events[1]["step"]  # the tool call it produced
    by_id = {s["spanId"]: s for s in spans}
    assert attrs(by_id[chats[0]["parentSpanId"]]["attributes"])["eair.task"] == "1"
    assert "eair.task" not in attrs(by_id[chats[1]["parentSpanId"]]["attributes"])  # the root
    import_path(FORMAT, out, tmp_path / "back")
    back_lines = (tmp_path / "back" / "d1" / "canonical" / src.name).read_text().splitlines()
    assert json.loads(back_lines[0])["model_calls"] == header["model_calls"]
    assert back_lines[1:] == [x for x in body if json.loads(x)["type"] == "event"]
    root = spans[0]  # a judgment belongs to no task: it sits on the root
    assert [attrs(e["attributes"])["eair.kind"] for e in root["events"]] == ["judgment"]


# ------------------------------------------------------------------ shape
def test_otlp_shape(runs: Path, exported: Path) -> None:
    doc = json.loads(exported.read_text())
    assert set(doc) == {"resourceSpans"} and len(doc["resourceSpans"]) == N
    assert_proto_fields(doc)
    trace_ids = set()
    for rs in doc["resourceSpans"]:
        spans = rs["scopeSpans"][0]["spans"]
        assert rs["scopeSpans"][0]["scope"]["name"] == "eairdsl.external.otel"
        tids = {s["traceId"] for s in spans}
        assert len(tids) == 1 and HEX32.match(next(iter(tids)))
        trace_ids |= tids
        by_id = {s["spanId"]: s for s in spans}
        assert len(by_id) == len(spans) and all(HEX16.match(i) for i in by_id)
        roots = [s for s in spans if "parentSpanId" not in s]
        assert len(roots) == 1 and roots[0] is spans[0]
        header = header_of(rs)
        n_events = 0
        for s in spans:
            a = attrs(s["attributes"])
            assert s["kind"] in (1, 3)
            start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
            assert isinstance(s["startTimeUnixNano"], str) and EPOCH_NS <= start <= end
            if "parentSpanId" in s:
                parent = by_id[s["parentSpanId"]]  # the parent is in the same trace
                assert int(parent["startTimeUnixNano"]) <= start
                assert end <= int(parent["endTimeUnixNano"])
            op, kind = a["gen_ai.operation.name"], a["openinference.span.kind"]
            assert (op, kind) in {("invoke_workflow", "CHAIN"), ("invoke_agent", "AGENT"),
                                  ("execute_tool", "TOOL"), ("chat", "LLM")}
            assert s["name"].startswith(op + " ")
            if op == "invoke_agent":
                assert a["gen_ai.agent.name"] == a["agent.name"] == s["name"].split(" ", 1)[1]
            if op == "execute_tool":
                assert a["gen_ai.tool.name"] == a["tool.name"]
                assert HEX16.match(s["parentSpanId"])
            for item in [*s["attributes"], *(x for e in s.get("events", [])
                                             for x in e["attributes"])]:
                (vkey, value), = item["value"].items()
                assert vkey in VALUE_KEYS
                if vkey == "intValue":
                    assert isinstance(value, str) and re.match(r"^-?\d+$", value)
            for e in s.get("events", []):
                if e["name"].startswith("eair."):
                    n_events += 1
                    assert "eair.step" in attrs(e["attributes"])
        trace = runs / header["world"] / header["condition"] / (
            f"{header['instance']}-s{header['seed']}.jsonl")
        assert n_events == sum(1 for line in trace.read_text().splitlines()[1:]
                               if json.loads(line)["type"] == "event")
    assert len(trace_ids) == N


def test_delegations_are_parent_child_agent_spans(exported: Path) -> None:
    """A delegated task's agent span sits under the delegator's `delegate` call, inside the
    delegator's agent span; an ordinary message's task hangs under the root with a link."""
    doc = json.loads(exported.read_text())
    delegated = linked = 0
    for rs in doc["resourceSpans"]:
        spans = rs["scopeSpans"][0]["spans"]
        by_id = {s["spanId"]: s for s in spans}
        for s in spans:
            a = attrs(s["attributes"])
            if a["gen_ai.operation.name"] != "invoke_agent":
                continue
            opening = attrs(min(s["events"], key=lambda e: int(e["timeUnixNano"]))
                            ["attributes"])
            assert opening["eair.kind"] == "message"
            assert opening["eair.recipient"] == a["gen_ai.agent.name"]
            parent = attrs(by_id[s["parentSpanId"]]["attributes"])
            if opening.get("eair.tool") == "delegation":
                delegated += 1
                ancestor = by_id[s["parentSpanId"]]
                while attrs(ancestor["attributes"])["gen_ai.operation.name"] != "invoke_agent":
                    ancestor = by_id[ancestor["parentSpanId"]]
                assert attrs(ancestor["attributes"])["gen_ai.agent.name"] == opening["eair.actor"]
            else:
                assert parent["gen_ai.operation.name"] == "invoke_workflow"
                for link in s.get("links", []):
                    linked += 1
                    target = attrs(by_id[link["spanId"]]["attributes"])
                    assert target["gen_ai.agent.name"] == opening["eair.actor"]
    assert delegated >= 10 and linked >= 5


def test_time_is_simulated_minutes_from_the_epoch(runs: Path, exported: Path) -> None:
    doc = json.loads(exported.read_text())
    for rs in doc["resourceSpans"]:
        header = header_of(rs)
        trace = runs / header["world"] / header["condition"] / (
            f"{header['instance']}-s{header['seed']}.jsonl")
        events = [json.loads(x) for x in trace.read_text().splitlines()[1:]]
        position = {e["step"]: (i, e["t"]) for i, e in enumerate(events)
                    if e["type"] == "event"}
        for s in rs["scopeSpans"][0]["spans"]:
            for e in s.get("events", []):
                if e["name"].startswith("eair."):
                    i, t = position[attrs(e["attributes"])["eair.step"]]
                    assert int(e["timeUnixNano"]) == EPOCH_NS + round(t * 60e9) + i


def test_export_is_deterministic(runs: Path, exported: Path, tmp_path: Path) -> None:
    """Same traces, same bytes — from another folder, too (no path reaches the file)."""
    again = tmp_path / "again.json"
    export_otel(runs, again)
    assert again.read_bytes() == exported.read_bytes()
    moved = tmp_path / "elsewhere"
    shutil.copytree(runs, moved)
    shutil.copy(traces(moved)[0], traces(moved)[0].with_name("copy.jsonl"))
    summary = export_otel(moved, tmp_path / "moved.json")
    assert summary.duplicates == 1 and summary.traces == N  # a copy is the same episode
    assert (tmp_path / "moved.json").read_bytes() == exported.read_bytes()


def test_json_lines_hold_the_documents_spans_one_request_per_line(
        runs: Path, exported: Path, tmp_path: Path) -> None:
    """`--format jsonl`: one ExportTraceServiceRequest per line (per `batch` episodes);
    the lines' resources and spans, concatenated, are the document's, in its order, and
    the importer reads the lines back to the same traces."""
    doc = json.loads(exported.read_text())
    assert otlp_document([runs])[0] == doc  # the streamed document is the one built whole
    for batch in (1, 4, N + 3):
        out = tmp_path / f"b{batch}.jsonl"
        summary = export_otel(runs, out, format="jsonl", batch=batch)
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == summary.requests == -(-N // batch)
        requests = [json.loads(line) for line in lines]
        assert all(set(r) == {"resourceSpans"} and 1 <= len(r["resourceSpans"]) <= batch
                   for r in requests)
        assert [rs for r in requests for rs in r["resourceSpans"]] == doc["resourceSpans"]
        assert [s for r in requests for s in spans_of(r)] == spans_of(doc)
        for r in requests:
            assert_proto_fields(r)
        assert (summary.traces, summary.spans) == (N, len(spans_of(doc)))
    back = import_path(FORMAT, tmp_path / "b4.jsonl", tmp_path / "back")
    assert len(back) == N
    for original in traces(runs):
        events = [x for x in original.read_text().splitlines()[1:]
                  if json.loads(x)["type"] == "event"]
        assert (tmp_path / "back" / original.relative_to(runs)).read_text(
        ).splitlines()[1:] == events
    cli = CliRunner().invoke(app, ["export-otel", str(runs), "-o", str(tmp_path / "c.jsonl"),
                                   "--format", "jsonl", "--batch", "4", "--epoch", "fixed"])
    assert cli.exit_code == 0 and f"in {-(-N // 4)} line(s)" in cli.output
    assert (tmp_path / "c.jsonl").read_bytes() == (tmp_path / "b4.jsonl").read_bytes()
    for bad in (["--format", "xml"], ["--batch", "2"], ["--format", "jsonl", "--batch", "0"]):
        refused = CliRunner().invoke(app, ["export-otel", str(runs), "-o",
                                           str(tmp_path / "d.json"), *bad])
        assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert not (tmp_path / "d.json").exists()


def test_the_export_holds_one_batch_of_episodes_at_a_time(runs: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Streaming: when a batch is sent, no more episodes are alive than the batch holds
    (the whole study's episodes and spans were in memory together: 1.25 GB at 1,050)."""
    import gc
    import weakref

    from eairdsl.external import otel

    refs: list[weakref.ref[Any]] = []
    read = otel._read_episode

    def tracked(path: Path, *, check: bool = True) -> Any:
        ep = read(path, check=check)
        refs.append(weakref.ref(ep))
        return ep

    monkeypatch.setattr(otel, "_read_episode", tracked)
    plan = otel.OtlpExport(runs)
    most: list[int] = []

    class Counting:
        def send(self, batch: otel.OtlpBatch) -> None:
            gc.collect()
            most.append(sum(1 for r in refs if r() is not None))

        def close(self) -> None:
            pass

    for size in (1, 4):
        most.clear()
        summary = otel.send_all(plan, Counting(), size)
        assert summary.traces == N and len(most) == summary.requests == -(-N // size)
        assert max(most) <= size


def test_grader_fields_only_with_the_flag(runs: Path, exported: Path, tmp_path: Path) -> None:
    text = exported.read_text()
    assert "eair.result_line" not in text and "witnesses" not in text
    assert '"measurements"' not in text
    with_grader = tmp_path / "grader.json"
    export_otel(runs, with_grader, include_grader=True)
    doc = json.loads(with_grader.read_text())
    root = attrs(doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"])
    result = json.loads(root["eair.result_line"])
    assert result["type"] == "result" and "witnesses" in result
    written = import_path(FORMAT, with_grader, tmp_path / "back")
    sides = [p for p in written if p.name.endswith(".grader.json")]
    assert len(sides) == N
    for p in written:
        if p.suffix == ".jsonl":
            text = p.read_text()
            assert '"witnesses":' not in text and '"measurements":' not in text
            assert all(json.loads(x)["type"] != "result" for x in text.splitlines())
            side = json.loads(grader_path(p).read_text())
            assert set(side["labels"]) == {"result"}
            header = json.loads(p.read_text().splitlines()[0])
            assert [w["field"] for w in header["source"]["withheld"]] == ["result"]


# ------------------------------------------------------------------ findings
def test_findings_sit_on_the_boundary_steps_span_and_the_root(runs: Path,
                                                              tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    index = audit_episodes(runs, audit, RulesAuditor())
    expected = sum(e.findings + e.leads for e in index.entries)
    assert expected >= 5
    out = tmp_path / "audited.json"
    summary = export_otel(runs, out, audits=audit)
    assert summary.findings == expected
    doc = json.loads(out.read_text())
    assert_proto_fields(doc)
    reports = {e.episode: json.loads((audit / REPORTS / f"{e.episode}.json").read_text())
               for e in index.entries}
    seen = 0
    for rs in doc["resourceSpans"]:
        spans = rs["scopeSpans"][0]["spans"]
        root = spans[0]
        verdicts = [attrs(e["attributes"]) for e in root.get("events", [])
                    if e["name"] == "gen_ai.evaluation.result"
                    and attrs(e["attributes"])["gen_ai.evaluation.name"] == "eair.audit.verdict"]
        assert len(verdicts) == 1
        report = reports[verdicts[0]["eair.audit.episode"]]
        assert verdicts[0]["gen_ai.evaluation.score.label"] == report["verdict"]
        for f in [*report["findings"], *report["leads"]]:
            step = f["boundary"]["step"]
            host = next(s for s in spans for e in s.get("events", [])
                        if e["name"].startswith("eair.")
                        and attrs(e["attributes"])["eair.step"] == step)
            on_host = [attrs(e["attributes"]) for e in host["events"]
                       if e["name"] == "gen_ai.evaluation.result"
                       and attrs(e["attributes"]).get("eair.finding.id") == f["id"]]
            on_root = [attrs(e["attributes"]) for e in root["events"]
                       if e["name"] == "gen_ai.evaluation.result"
                       and attrs(e["attributes"]).get("eair.finding.id") == f["id"]]
            assert len(on_root) == 1 and len(on_host) == (0 if host is root else 1)
            got = on_root[0]
            assert got["eair.finding.boundary.step"] == step
            assert got["gen_ai.evaluation.score.label"] == f["status"]
            assert got["gen_ai.evaluation.score.value"] == f["confidence"]
            assert json.loads(got["eair.finding"]) == f
            seen += 1
    assert seen == expected
    # the import keeps the evaluations out of the trace, in the grader side file
    written = import_path(FORMAT, out, tmp_path / "back")
    for p in written:
        if p.suffix == ".jsonl":
            assert "eair.audit" not in p.read_text()
            assert "evaluations" in json.loads(grader_path(p).read_text())["labels"]


# ------------------------------------------------------------------ foreign OTLP
def edges(path: Path) -> list[tuple[str, str]]:
    return [tuple(e["edge"].split("->")) for e in iter_events(path)  # type: ignore[misc]
            if e.get("edge")]


def test_a_foreign_otlp_file_is_read_without_invented_edges(tmp_path: Path) -> None:
    written = import_path(FORMAT, FIXTURE, tmp_path)
    first, second = (p for p in written if p.suffix == ".jsonl")
    lines = [json.loads(x) for x in first.read_text().splitlines()]
    header, events = lines[0], lines[1:]
    assert header["source"]["framework"] == "travel-app"
    assert [(e["kind"], e["actor"], e.get("recipient")) for e in events] == [
        ("message", "user", "planner"),  # the input messages name the user
        ("decision", "planner", None),  # the chat span's output
        ("tool_call", "planner", None),
        ("tool_result", "planner", None),
        ("message", "planner", "booker"),  # a nested AGENT span: a delegation
        ("tool_call", "booker", None),
        ("tool_result", "booker", None),
        ("message", "booker", "planner"),  # the child's final answer is the reply edge
        ("message", "planner", "auditor"),  # a delegation with no answer: no reply invented
        ("message", "planner", None),  # the root agent's answer goes to no one named
        ("tool_call", "travel-app", None),  # no agent span: the resource's service acted
        ("tool_result", "travel-app", None),
    ]
    assert events[4]["tool"] == "delegation" and events[4]["task"] == 1
    assert events[2]["args"] == {"day": "Friday", "to": "OSL"}
    assert events[3]["result"] == "ABC123 departs 09:10" and events[3]["call"] == "s0003"
    assert events[6]["rejected"] is True and events[6]["reason"] == "card declined"
    assert events[9]["final"] is True
    assert [e["src_id"] for e in events[:2]] == ["00f067aa0ba902b7", "1111111111111111"]
    assert any("no reply edge" in n for n in header["source"]["notes"])
    side = json.loads(grader_path(first).read_text())  # the evaluation is withheld
    assert side["labels"]["evaluations"][0]["gen_ai.evaluation.score.label"] == "incorrect"
    assert "incorrect" not in first.read_text()
    # consecutive turns of one agent with unnamed senders: no edge at all
    later = [json.loads(x) for x in second.read_text().splitlines()[1:]]
    assert [e.get("edge") for e in later] == [None, None, None]
    assert [e["actor"] for e in later] == ["unknown", "triage", "unknown"]
    assert not grader_path(second).exists()


def test_our_export_without_the_eair_layer_invents_no_edge(runs: Path, exported: Path,
                                                           tmp_path: Path) -> None:
    """Read as a foreign file (gen_ai/OpenInference attributes only), an export yields only
    edges the original trace has, and as many tool calls, each with its result."""
    doc = json.loads(exported.read_text())
    for rs in doc["resourceSpans"]:
        rs["resource"]["attributes"] = [a for a in rs["resource"]["attributes"]
                                        if not a["key"].startswith("eair.")]
        for s in rs["scopeSpans"][0]["spans"]:
            s["events"] = [e for e in s.get("events", []) if not e["name"].startswith("eair.")]
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(doc))
    original_edges = {tuple(json.loads(x)["edge"].split("->")) for p in traces(runs)
                      for x in p.read_text().splitlines()[1:] if '"edge"' in x}
    got = edges(stripped)
    assert got and set(got) <= original_edges
    kinds = Counter(e["kind"] for e in iter_events(stripped))
    original_kinds = Counter(json.loads(x)["kind"] for p in traces(runs)
                             for x in p.read_text().splitlines()[1:]
                             if json.loads(x)["type"] == "event")
    assert kinds["tool_call"] == kinds["tool_result"] == original_kinds["tool_call"]


def test_bad_otlp_is_a_located_error(tmp_path: Path) -> None:
    doc = json.loads(FIXTURE.read_text())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["spanId"] = "xyz"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SourceError, match=r"resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[2\]"
                       r"\.spanId: expected 16 hex digits"):
        import_path(FORMAT, bad, tmp_path / "out")
    bad.write_text('{"resourceSpans": [')
    with pytest.raises(SourceError, match="line 1, column"):
        import_path(FORMAT, bad, tmp_path / "out")
    bad.write_text('{"spans": []}')
    with pytest.raises(SourceError, match="resourceSpans"):
        import_path(FORMAT, bad, tmp_path / "out")


def test_the_importer_is_registered() -> None:
    assert importers()[FORMAT].summary.startswith("OTLP JSON")
    assert importers()[FORMAT].accepts(FIXTURE)


# ------------------------------------------------------------------ command line
def test_export_otel_command(runs: Path, exported: Path, tmp_path: Path) -> None:
    cli = CliRunner()
    out = tmp_path / "cli.json"
    done = cli.invoke(app, ["export-otel", str(runs), "-o", str(out), "--epoch", "fixed"])
    assert done.exit_code == 0, done.output
    assert f"{N} trace(s)" in done.output
    assert out.read_bytes() == exported.read_bytes()
    back = cli.invoke(app, ["import", FORMAT, str(out), "-o", str(tmp_path / "back")])
    assert back.exit_code == 0, back.output
    assert f"imported {N} trace(s)" in back.output
    assert len(traces(tmp_path / "back")) == N
    not_trace = tmp_path / "x.jsonl"
    not_trace.write_text('{"hello": 1}\n')
    failed = cli.invoke(app, ["export-otel", str(not_trace), "-o", str(tmp_path / "y.json")])
    assert failed.exit_code == 1 and "error:" in failed.output
    assert "Traceback" not in failed.output
    missing = cli.invoke(app, ["export-otel", str(runs), "-o", str(tmp_path / "z.json"),
                               "--audit", str(tmp_path / "nowhere")])
    assert missing.exit_code == 1 and "index.json" in missing.output


def test_export_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(OtelError, match="no such trace file or run folder"):
        export_otel(tmp_path / "nothing", tmp_path / "out.json")


def test_two_episodes_with_one_name_both_come_back(runs: Path, tmp_path: Path) -> None:
    """Same world, condition, instance and seed, other content (another agent profile):
    two traces in the export, two files on import, each with its own events."""
    src = traces(runs / "d1")[0]
    lines = src.read_text().splitlines()
    other = json.loads(lines[1])
    other["content"] = "a different opening request"
    twin = tmp_path / "twin" / src.name
    twin.parent.mkdir()
    twin.write_text("\n".join([lines[0], json.dumps(other, sort_keys=True,
                                                    ensure_ascii=False), *lines[2:]]) + "\n")
    out = tmp_path / "two.json"
    assert export_otel([src, twin], out).traces == 2
    written = sorted(p for p in import_path(FORMAT, out, tmp_path / "back"))
    assert len(written) == 2 and len({p.name for p in written}) == 2
    got = sorted(p.read_text().splitlines()[1:] for p in written)
    want = sorted([[x for x in lines[1:] if json.loads(x)["type"] == "event"],
                   twin.read_text().splitlines()[1:-1]])
    assert got == want


def test_round_tripped_traces_audit_like_the_originals(runs: Path, exported: Path,
                                                       tmp_path: Path) -> None:
    """With its world given, a round-tripped trace bundles to the same sanitized episode
    (same opaque id) and the offline auditor writes the same report, byte for byte."""
    import_path(FORMAT, exported, tmp_path / "back")
    world = ROOT / "worlds" / "a1.eair"
    first = audit_episodes(runs / "a1", tmp_path / "a", RulesAuditor(), world=world)
    second = audit_episodes(tmp_path / "back" / "a1", tmp_path / "b", RulesAuditor(),
                            world=world)
    assert [e.episode for e in first.entries] == [e.episode for e in second.entries]
    assert sum(e.findings + e.leads for e in first.entries) >= 1
    for e in first.entries:
        name = f"{e.episode}.json"
        assert (tmp_path / "a" / REPORTS / name).read_bytes() == (
            tmp_path / "b" / REPORTS / name).read_bytes()


def test_collector_json_lines_and_flattened_messages(tmp_path: Path) -> None:
    """A collector's file exporter writes one OTLP document per line, and one trace may
    span lines; OpenInference's and the older GenAI flattened messages are read."""
    written = import_path(FORMAT, FIXTURE.with_name("collector_lines.jsonl"), tmp_path)
    assert len(written) == 1
    events = [json.loads(x) for x in written[0].read_text().splitlines()[1:]]
    assert [(e["kind"], e["actor"], e.get("recipient"), e["content"]) for e in events] == [
        ("message", "unknown", None, "Find the 2019 audit memo."),
        ("decision", "researcher", None, "Searching the archive."),
        ("decision", "researcher", None, "Found it in folder B."),
        ("message", "researcher", None, "The memo is in folder B."),
    ]
    assert [e["t"] for e in events] == [0.0, 2.0, 4.0, 5.0]  # minutes since the first span


# ------------------------------------------------------------------ property
_NAMES = st.sampled_from(["planner", "booker", "critic", "user", "tool_runner"])


@st.composite
def _tree(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    kind = draw(st.sampled_from(["AGENT", "AGENT", "TOOL", "LLM", "CHAIN"]))
    node: dict[str, Any] = {"kind": kind, "name": draw(_NAMES),
                            "input": draw(st.none() | st.text(max_size=8)),
                            "role": draw(st.none() | _NAMES),
                            "output": draw(st.none() | st.text(max_size=8)),
                            "children": []}
    if depth < 3:
        node["children"] = draw(st.lists(_tree(depth + 1), max_size=3))
    return node


def _otlp(roots: list[dict[str, Any]]) -> tuple[dict[str, Any], set[tuple[str, str]]]:
    """OTLP JSON of random span trees, and the edges the spans state: a nested agent and
    its nearest agent ancestor (both ways), an input message's role and its agent."""
    spans: list[dict[str, Any]] = []
    stated: set[tuple[str, str]] = set()
    clock = [1_700_000_000_000_000_000]

    def emit(node: dict[str, Any], parent: str | None, agent: str | None) -> None:
        sid = f"{len(spans) + 1:016x}"
        clock[0] += 10**9
        start = clock[0]
        a = [{"key": "openinference.span.kind", "value": {"stringValue": node["kind"]}}]
        if node["kind"] == "AGENT":
            a.append({"key": "gen_ai.agent.name", "value": {"stringValue": node["name"]}})
            if agent is not None and agent != node["name"]:
                stated.update({(agent, node["name"]), (node["name"], agent)})
        if node["kind"] == "TOOL":
            a.append({"key": "tool.name", "value": {"stringValue": node["name"]}})
        if node["input"] is not None:
            if node["role"] is not None:
                msgs = [{"role": node["role"], "content": node["input"]}]
                a.append({"key": "gen_ai.input.messages",
                          "value": {"stringValue": json.dumps(msgs)}})
                if node["kind"] == "AGENT":
                    stated.add((node["role"], node["name"]))
            else:
                a.append({"key": "input.value", "value": {"stringValue": node["input"]}})
        if node["output"] is not None:
            a.append({"key": "output.value", "value": {"stringValue": node["output"]}})
        span: dict[str, Any] = {"traceId": "ab" * 16, "spanId": sid, "name": node["name"],
                                "kind": 1, "startTimeUnixNano": str(start), "attributes": a}
        if parent is not None:
            span["parentSpanId"] = parent
        spans.append(span)
        for c in node["children"]:
            emit(c, sid, node["name"] if node["kind"] == "AGENT" else agent)
        clock[0] += 10**9
        span["endTimeUnixNano"] = str(clock[0])

    for r in roots:
        emit(r, None, None)
    return {"resourceSpans": [{"resource": {"attributes": []},
                               "scopeSpans": [{"spans": spans}]}]}, stated


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(roots=st.lists(_tree(), min_size=1, max_size=3))
def test_no_imported_edge_is_one_the_spans_do_not_state(roots: list[dict[str, Any]],
                                                        tmp_path: Path) -> None:
    doc, stated = _otlp(roots)
    src = tmp_path / "random.json"
    src.write_text(json.dumps(doc))
    events = list(iter_events(src))
    for e in events:
        if e["kind"] == "message":
            assert (e.get("recipient") is None) == (e.get("edge") is None)
        if e.get("edge"):
            sender, recipient = e["edge"].split("->")
            assert (sender, recipient) in stated, (e, stated)
            assert sender == e["actor"] and recipient == e["recipient"]
        else:
            assert e.get("recipient") is None
