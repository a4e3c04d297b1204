"""`eairc export-otel` as Phoenix and Langfuse expect it (issue #29).

Read as a backend reads it: every export parsed with `opentelemetry-proto` (ids of 16
and 8 raw bytes), the attributes the GenAI and OpenInference conventions require,
wall-clock times with the measured latency of model calls, the prompts from the
`.calls.ndjson` sidecar, the study's dimensions on the root; a loopback OTLP/HTTP
receiver the test starts decodes the protobuf batches (retries on 429/5xx, headers
from the environment), and loopback Phoenix and Langfuse annotation APIs check the
bodies of the findings posted. Nothing here touches the network.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from typer.testing import CliRunner

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.cli import app
from eairdsl.external.core import import_path
from eairdsl.external.otel import FORMAT, OtelError, OtlpExport, export_otel, otlp_document
from eairdsl.external.otlp_transport import RetryPolicy, env_headers, read_delimited, traces_url

ROOT = Path(__file__).resolve().parents[1]
MODEL = "openai/gpt-4o-mini"
NOW = 1_900_000_000 * 10**9  # an export time the tests choose
# short backoffs (retries are counted, not timed); the request timeout only a hang guard
FAST = RetryPolicy(attempts=4, base=0.001, ceiling=0.01, budget=1.0, timeout=120.0)


def spans_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for a in items:
        (kind, v), = a["value"].items()
        out[a["key"]] = [next(iter(x.values())) for x in v["values"]] \
            if kind == "arrayValue" else v
    return out


def by_op(doc: dict[str, Any], op: str) -> list[dict[str, Any]]:
    return [s for s in spans_of(doc)
            if attrs(s["attributes"]).get("gen_ai.operation.name") == op]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """D1 sim episodes: two seeds of one study cell, and a reckless arm (another cell)."""
    out = tmp_path_factory.mktemp("runs")
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    for seed, agents in ((0, "sim"), (1, "sim"), (0, "sim:reckless")):
        run_episode(world, None, None, seed, agents=agents, out=out / agents.replace(":", "-"))
    return out


def _llm_trace(root: Path, src: Path, latency: tuple[float, float] = (1.25, 0.5)) -> Path:
    """A D1 trace made an LLM run's: header model calls (a tool-only call of the handler,
    a judge's), and their sidecar with full messages, tool schemas and latency."""
    lines = src.read_text().splitlines()
    header = json.loads(lines[0])
    events = [json.loads(x) for x in lines[1:] if json.loads(x)["type"] == "event"]
    handler, tool = events[0]["recipient"], events[1]["tool"]
    args = json.dumps(events[1].get("args") or {}, sort_keys=True)
    header["agents"] = {**header["agents"], handler: f"llm:{MODEL}"}
    header["llm"] = {"model": MODEL}
    header["model_calls"] = [
        {"participant": handler, "model": MODEL, "task": 1, "step": 0, "reply": None,
         "tool_calls": [{"name": tool, "arguments": args}], "finish_reason": "tool_calls",
         "tokens_in": 812, "tokens_out": 31, "cost": 0.0001, "retries": 0,
         "messages_sha256": "0" * 64, "tools": [tool]},
        {"participant": "judge", "model": "anthropic/claude-3-5-haiku", "rubric": "r",
         "reply": "no", "finish_reason": "stop", "tokens_in": 90, "tokens_out": 1},
    ]
    trace = root / "d1" / "canonical" / src.name
    trace.parent.mkdir(parents=True, exist_ok=True)
    trace.write_text("\n".join([json.dumps(header, sort_keys=True), *lines[1:]]) + "\n")
    sidecar = [
        {"participant": handler, "model": MODEL, "task": 1, "step": 0, "latency": latency[0],
         "messages": [{"role": "system", "content": "You are the assistant."},
                      {"role": "user", "content": events[0]["content"]}],
         "tools": [{"type": "function", "function": {"name": tool, "parameters": {}}}]},
        {"participant": "judge", "model": "anthropic/claude-3-5-haiku", "latency": latency[1],
         "messages": [{"role": "user", "content": "Did the reply disclose?"}], "tools": []},
    ]
    trace.with_name(trace.name.removesuffix(".jsonl") + ".calls.ndjson").write_text(
        "".join(json.dumps(c, sort_keys=True) + "\n" for c in sidecar))
    return trace


@pytest.fixture()
def llm(runs: Path, tmp_path: Path) -> Path:
    return _llm_trace(tmp_path / "llm", sorted((runs / "sim").rglob("*.jsonl"))[0])


# ------------------------------------------------------------------ protobuf
def test_otlp_proto_parses_with_opentelemetry_proto_ids_as_raw_bytes(runs: Path,
                                                                     tmp_path: Path) -> None:
    """`--format otlp-proto`: length-delimited ExportTraceServiceRequests that protobuf
    parses, ids of 16 and 8 raw bytes equal to the JSON export's hex (not the hex text
    read as base64), at most `max_spans` spans a request, the same spans in order."""
    doc, _ = otlp_document([runs])
    out = tmp_path / "spans.otlp"
    summary = export_otel(runs, out, format="otlp-proto", max_spans=4)
    messages = read_delimited(out.read_bytes())
    assert len(messages) == summary.requests > summary.traces  # episodes were split
    got = []
    for raw in messages:
        req = ExportTraceServiceRequest.FromString(raw)
        n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        assert 1 <= n <= 4
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    assert len(sp.trace_id) == 16 and len(sp.span_id) == 8
                    assert len(sp.parent_span_id) in (0, 8)
                    assert all(len(lk.span_id) == 8 for lk in sp.links)
                    got.append((sp.trace_id.hex(), sp.span_id.hex(), sp.parent_span_id.hex(),
                                sp.name, sp.start_time_unix_nano, sp.end_time_unix_nano))
    want = [(s["traceId"], s["spanId"], s.get("parentSpanId", ""), s["name"],
             int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])) for s in spans_of(doc)]
    assert got == want
    assert export_otel(runs, tmp_path / "again.otlp", format="otlp-proto",
                       max_spans=4).requests == summary.requests
    assert (tmp_path / "again.otlp").read_bytes() == out.read_bytes()  # deterministic


def test_a_proto_attribute_keeps_its_type(runs: Path, tmp_path: Path) -> None:
    """Ints stay ints, string arrays arrays: the root's `tag.tags` and a task's
    `eair.task` read back from protobuf as they were written."""
    out = tmp_path / "one.otlp"
    export_otel(sorted((runs / "sim").rglob("*.jsonl"))[0], out, format="otlp-proto")
    req = ExportTraceServiceRequest.FromString(read_delimited(out.read_bytes())[0])
    as_json = json_format.MessageToDict(req)
    root = as_json["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    tags = next(a for a in root["attributes"] if a["key"] == "tag.tags")["value"]
    assert next(v["stringValue"] for v in tags["arrayValue"]["values"]) == "world:d1"
    task = next(s for s in as_json["resourceSpans"][0]["scopeSpans"][0]["spans"]
                if any(a["key"] == "eair.task" for a in s["attributes"]))
    assert next(a for a in task["attributes"] if a["key"] == "eair.task")["value"] == {
        "intValue": "1"}


# ------------------------------------------------------------------ attributes
def test_the_root_carries_the_study_cell_as_metadata_tags_and_session(runs: Path) -> None:
    """`metadata` (JSON) and `tag.tags` name world, model, condition, instance, seed and
    levers; `session.id` groups one study cell: two seeds of one arm share it, the
    reckless arm has its own; the root has the episode's first request and final answer."""
    doc, _ = otlp_document([runs])
    roots = [rs["scopeSpans"][0]["spans"][0] for rs in doc["resourceSpans"]]
    sessions: dict[str, list[dict[str, Any]]] = {}
    for root in roots:
        a = attrs(root["attributes"])
        meta = json.loads(a["metadata"])
        assert set(meta) == {"world", "model", "condition", "instance", "seed", "levers"}
        assert meta["world"] == "d1" == a["gen_ai.workflow.name"]
        assert isinstance(meta["levers"], dict) and meta["levers"]
        assert a["session.id"] == f"d1/{meta['model']}/{meta['condition']}"
        assert a["session.id"] == a["gen_ai.conversation.id"] != root["traceId"]
        tags = a["tag.tags"]
        assert f"model:{meta['model']}" in tags and f"seed:{meta['seed']}" in tags
        assert sum(t.startswith("lever:") for t in tags) == len(meta["levers"])
        assert a["input.value"] and a["output.value"]
        sessions.setdefault(a["session.id"], []).append(meta)
    assert sorted(len(v) for v in sessions.values()) == [1, 2]
    assert {m["seed"] for m in max(sessions.values(), key=len)} == {0, 1}
    for s in by_op(doc, "invoke_agent"):
        assert attrs(s["attributes"])["gen_ai.provider.name"] in ("eairdsl.sim", "eairdsl")


def test_chat_spans_carry_prompts_tool_calls_and_provider_native_names(llm: Path,
                                                                       tmp_path: Path) -> None:
    """The sidecar's messages in OpenInference's flattened form and as GenAI JSON, the
    system prompt as `gen_ai.system_instructions`; a call that only requested a tool has
    that request as its output; `--content off` leaves the prompts out."""
    doc, _ = otlp_document([llm])
    chat, judge = (attrs(s["attributes"]) for s in by_op(doc, "chat"))
    assert chat["gen_ai.provider.name"] == "openai" and chat["llm.provider"] == "openai"
    assert chat["gen_ai.request.model"] == chat["llm.model_name"] == "gpt-4o-mini"
    assert judge["gen_ai.provider.name"] == "anthropic"
    assert judge["gen_ai.request.model"] == "claude-3-5-haiku"
    assert chat["llm.input_messages.0.message.role"] == "system"
    assert chat["llm.input_messages.1.message.role"] == "user"
    assert json.loads(chat["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You are the assistant."}]
    inputs = json.loads(chat["gen_ai.input.messages"])
    assert [m["role"] for m in inputs] == ["user"]
    assert inputs[0]["parts"][0]["type"] == "text"
    assert chat["input.value"] == inputs[0]["parts"][0]["content"]
    output = json.loads(chat["gen_ai.output.messages"])
    assert output[0]["role"] == "assistant" and output[0]["finish_reason"] == "tool_calls"
    (part,) = output[0]["parts"]
    assert part["type"] == "tool_call" and isinstance(part["arguments"], dict)
    assert chat["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == \
        part["name"]
    assert json.loads(chat["output.value"])[0]["name"] == part["name"]
    assert json.loads(chat["llm.tools.0.tool.json_schema"])["function"]["name"] == part["name"]
    agent = next(attrs(s["attributes"]) for s in by_op(doc, "invoke_agent")
                 if attrs(s["attributes"])["gen_ai.agent.name"] == chat["gen_ai.agent.name"])
    assert agent["gen_ai.provider.name"] == "openai"
    assert agent["gen_ai.request.model"] == "gpt-4o-mini"
    bare, _ = otlp_document([llm], content=False)
    bare_chat = attrs(by_op(bare, "chat")[0]["attributes"])
    assert not [k for k in bare_chat if k.startswith(("llm.input_messages", "gen_ai.input",
                                                      "gen_ai.system", "gen_ai.output"))]
    back = import_path(FORMAT, _write(tmp_path / "x.json", doc), tmp_path / "back")
    assert len(back) == 1  # the lossless layer still reads back


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _times_stripped(doc: dict[str, Any]) -> Any:
    """The document without its times (and the clock's name)."""
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if "UnixNano" not in k}
        if isinstance(x, list):
            return [strip(v) for v in x if not (isinstance(v, dict)
                                                and v.get("key") == "eair.clock")]
        return x
    return strip(doc)


# ------------------------------------------------------------------ time
def test_wall_clock_chat_spans_last_their_measured_latency(llm: Path) -> None:
    """`epoch now`: a chat span lasts the sidecar's latency and ends before the step it
    produced; the agent span covers it; the episode ends at the export; events keep
    their order. Apart from its times the export is the `fixed` one."""
    doc = next(OtlpExport(llm, epoch="now", now_ns=NOW).batches()).request
    chat, judge = by_op(doc, "chat")
    dur = [int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"]) for s in (chat, judge)]
    assert dur == [1_250_000_000, 500_000_000]
    spans = spans_of(doc)
    root = spans[0]
    assert int(root["endTimeUnixNano"]) == NOW
    by_id = {s["spanId"]: s for s in spans}
    task = by_id[chat["parentSpanId"]]
    assert int(task["startTimeUnixNano"]) <= int(chat["startTimeUnixNano"])
    assert int(task["endTimeUnixNano"]) - int(task["startTimeUnixNano"]) >= dur[0]
    step = attrs(chat["attributes"])["eair.model_call.step"]
    times = sorted((attrs(e["attributes"])["eair.step"], int(e["timeUnixNano"]))
                   for s in spans for e in s.get("events", []) if e["name"].startswith("eair."))
    assert [t for _, t in times] == sorted(t for _, t in times)  # step order is time order
    at = dict(times)[step]
    assert int(chat["endTimeUnixNano"]) < at
    assert attrs(root["attributes"])["eair.clock"] == "wall-clock"
    fixed, _ = otlp_document([llm])
    assert _times_stripped(fixed) == _times_stripped(doc)


def test_recorded_epoch_ends_where_the_trace_was_written_and_fixed_ignores_latency(
        runs: Path, tmp_path: Path) -> None:
    """`recorded`: the episode ends at the trace file's modification time. `fixed`: the
    same bytes whatever the measured latencies (a rerun of the same seed measures others)."""
    src = sorted((runs / "sim").rglob("*.jsonl"))[0]
    a = _llm_trace(tmp_path / "a", src, (1.25, 0.5))
    b = _llm_trace(tmp_path / "b", src, (3.0, 0.1))
    written = 1_800_000_000_123_456_789
    os.utime(a, ns=(written, written))
    root = spans_of(next(OtlpExport(a, epoch="recorded", now_ns=NOW).batches()).request)[0]
    assert int(root["endTimeUnixNano"]) == written
    export_otel(a, tmp_path / "a.json")
    export_otel(b, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    root = spans_of(json.loads((tmp_path / "a.json").read_text()))[0]
    assert attrs(root["attributes"])["eair.clock"] == "simulated-minutes"


def test_a_sidecar_that_is_not_the_traces_is_refused(llm: Path, tmp_path: Path) -> None:
    side = llm.with_name(llm.name.removesuffix(".jsonl") + ".calls.ndjson")
    side.write_text(side.read_text().splitlines()[0] + "\n")
    with pytest.raises(OtelError, match="holds 1 model call"):
        export_otel(llm, tmp_path / "x.json")


# ------------------------------------------------------------------ OTLP/HTTP
@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Loopback:
    """A loopback HTTP server: answers each POST with the next scripted status (200 once
    the script is used up) and keeps what it received."""

    url: str
    script: list[int] = field(default_factory=list)
    got: list[Received] = field(default_factory=list)


@pytest.fixture()
def server() -> Iterator[Loopback]:
    state = Loopback(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.got.append(Received(self.path, {k.lower(): v for k, v in
                                                  self.headers.items()}, body))
            status = state.script.pop(0) if state.script else 200
            answer = b"{}" if status == 200 else b"busy"
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def _decoded(got: list[Received]) -> list[ExportTraceServiceRequest]:
    return [ExportTraceServiceRequest.FromString(r.body) for r in got
            if r.path.endswith("/v1/traces")]


def test_batches_are_posted_as_protobuf_with_retries_and_env_headers(
        runs: Path, server: Loopback) -> None:
    """Every span arrives once, in protobuf batches of at most `max_spans`, with the
    Content-Type OTLP/HTTP requires and the environment's headers (Langfuse's Basic
    auth); a 503 and a 429 are retried."""
    server.script = [503, 429]
    auth = "Basic " + base64.b64encode(b"pk:sk").decode()
    headers = env_headers({"OTEL_EXPORTER_OTLP_HEADERS": f"Authorization={auth.replace(' ', '%20')}"
                           ",x-other=1"})
    assert headers == {"Authorization": auth, "x-other": "1"}
    summary = export_otel(runs, None, endpoint=server.url, headers=headers, max_spans=10,
                          policy=FAST)
    assert summary.requests == len(server.got) - 2
    assert {r.path for r in server.got} == {"/v1/traces"}
    assert all(r.headers["content-type"] == "application/x-protobuf" and
               r.headers["authorization"] == auth for r in server.got)
    requests = _decoded(server.got[2:])
    ids = [sp.span_id.hex() for req in requests for rs in req.resource_spans
           for ss in rs.scope_spans for sp in ss.spans]
    doc, _ = otlp_document([runs], epoch="now")
    assert ids == [s["spanId"] for s in spans_of(doc)]
    assert all(sum(len(ss.spans) for rs in r.resource_spans for ss in rs.scope_spans) <= 10
               for r in requests)


def test_a_refused_or_unreachable_endpoint_is_a_clear_error(runs: Path,
                                                            server: Loopback) -> None:
    """A 400 is not retried; a 503 that persists stops after the policy's attempts; either
    names the endpoint and the status."""
    server.script = [400]
    with pytest.raises(OtelError, match=r"POST http://127\.0\.0\.1:\d+/v1/traces: HTTP 400"):
        export_otel(runs, None, endpoint=server.url, headers={}, policy=FAST)
    assert len(server.got) == 1
    server.script = [503] * 10
    with pytest.raises(OtelError, match=r"HTTP 503 \(busy\) after 4 attempt\(s\)"):
        export_otel(runs, None, endpoint=server.url, headers={}, policy=FAST)
    assert len(server.got) == 1 + 4
    assert traces_url("http://h:6006/") == "http://h:6006/v1/traces"
    lf = "https://cloud.langfuse.com/api/public/otel/v1/traces"
    assert traces_url(lf) == lf


def test_the_command_posts_to_an_endpoint(runs: Path, server: Loopback,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api_key=secret")
    done = CliRunner().invoke(app, ["export-otel", str(runs), "--endpoint", server.url])
    assert done.exit_code == 0, done.output
    assert f"sent to {server.url}/v1/traces in 1 request(s)" in done.output
    assert server.got[0].headers["api_key"] == "secret"
    for bad, code in ((["--endpoint", "ftp://x"], 1), ([], 2),
                      (["--endpoint", server.url, "-o", "x.json"], 2),
                      (["--endpoint", server.url, "--format", "jsonl"], 2),
                      (["-o", "x.json", "--epoch", "soon"], 2),
                      (["--endpoint", server.url, "--annotations", "phoenix"], 2)):
        refused = CliRunner().invoke(app, ["export-otel", str(runs), *bad])
        assert refused.exit_code == code, (bad, refused.output)
        assert "Traceback" not in refused.output and "error:" in refused.output
    server.script = [500] * 20
    failed = CliRunner().invoke(app, ["export-otel", str(runs), "--endpoint", server.url,
                                      "--max-spans", "1000"])
    assert failed.exit_code == 1 and "HTTP 500" in failed.output
    assert server.url in failed.output and "Traceback" not in failed.output


# ------------------------------------------------------------------ annotations
@pytest.fixture(scope="module")
def audit(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit")
    index = audit_episodes(runs, out, RulesAuditor())
    assert sum(e.findings + e.leads for e in index.entries) >= 1
    return out


def test_findings_become_phoenix_span_annotations(runs: Path, audit: Path,
                                                  server: Loopback) -> None:
    """`POST /v1/span_annotations` with `{"data": [SpanAnnotationData…]}`: each on a span the
    OTLP requests created, with a name, an annotator kind, a result and an identifier."""
    summary = export_otel(runs, None, audit, endpoint=server.url, headers={},
                          annotations="phoenix", policy=FAST)
    spans = {sp.span_id.hex() for req in _decoded(server.got) for rs in req.resource_spans
             for ss in rs.scope_spans for sp in ss.spans}
    posts = [r for r in server.got if r.path == "/v1/span_annotations"]
    assert posts and all(r.headers["content-type"] == "application/json" for r in posts)
    data = [d for r in posts for d in json.loads(r.body)["data"]]
    assert len(data) == summary.annotations == summary.findings + summary.traces
    for d in data:
        assert set(d) == {"span_id", "name", "annotator_kind", "result", "metadata",
                          "identifier"}
        assert d["span_id"] in spans and d["annotator_kind"] in ("LLM", "CODE", "HUMAN")
        assert set(d["result"]) <= {"label", "score", "explanation"} and d["result"]["label"]
        assert isinstance(d["metadata"], dict) and d["identifier"]
    assert len({d["identifier"] for d in data}) == len(data)
    findings = [d for d in data if d["name"].startswith("eair.audit.finding.")]
    assert findings and all(0 <= d["result"]["score"] <= 1 for d in findings)
    assert sum(d["name"] == "eair.audit.verdict" for d in data) == summary.traces


def test_findings_become_langfuse_scores(runs: Path, audit: Path, server: Loopback) -> None:
    """`POST /api/public/scores`, one CreateScoreRequest each: traceId (32 hex) and, for a
    finding, the observationId of its span; NUMERIC values are numbers, CATEGORICAL text."""
    base = f"{server.url}/api/public/otel"
    summary = export_otel(runs, None, audit, endpoint=base, headers={"Authorization": "x"},
                          annotations="langfuse", policy=FAST)
    assert server.got[0].path == "/api/public/otel/v1/traces"
    traces = {sp.trace_id.hex() for req in _decoded(server.got) for rs in req.resource_spans
              for ss in rs.scope_spans for sp in ss.spans}
    scores = [json.loads(r.body) for r in server.got if r.path == "/api/public/scores"]
    assert len(scores) == summary.annotations > summary.traces
    for s in scores:
        assert {"id", "traceId", "name", "value", "dataType", "comment"} <= set(s)
        assert s["traceId"] in traces and s["dataType"] in ("NUMERIC", "CATEGORICAL")
        assert isinstance(s["value"], float if s["dataType"] == "NUMERIC" else str)
        assert ("observationId" in s) == s["name"].startswith("eair.audit.finding.")
        assert all(r.headers["authorization"] == "x" for r in server.got)
    assert len({s["id"] for s in scores}) == len(scores)
