"""The native OpenAI-compatible client answers exactly as the litellm path does.

`openai/...` models with an API key go through `eairdsl.agents.openai_http` (httpx,
no litellm) unless EAIR_LLM_LITELLM forces litellm. These tests send the same
requests both ways to loopback servers started here and compare, byte for byte:
the normalised answers (text, tool calls, usage, cost, finish reason), the failure
of each HTTP error (its description, whether it was retried, the Retry-After it
honoured), the JSON the server received, and whole D1 episodes' traces and
cassettes. A last test runs `eairc run --model openai/x --api-base ...` in a
subprocess and checks that litellm was never imported.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai import FakeServer
from scenario_openai import SCENARIOS, ScenarioServer

from eairdsl.agents import openai_http
from eairdsl.agents.llm import LLMSettings, LLMUnavailable
from eairdsl.agents.provider import _retry_after
from eairdsl.api import resolve_world, run_episodes

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a record up.",
    "parameters": {"type": "object", "properties": {"id": {
        "type": "string", "maxLength": 8, "description": "e.g. e-1"}},
        "required": ["id"], "additionalProperties": False}}}]
MESSAGES = [{"role": "system", "content": "You are careful."},
            {"role": "user", "content": "Message from requester:\nHow is e-1 doing? \u00e9"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"id\": \"e-1\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1_1", "content": "{\"rating\": 3}"},
            {"role": "assistant", "content": "Looked."},
            {"role": "user", "content": "[Dashboard, now]\nline"}]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy-test-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.delenv(openai_http.LITELLM_ENV, raising=False)
    monkeypatch.delenv("EAIR_LLM_TRANSPORTS", raising=False)
    return monkeypatch


@pytest.fixture
def scenarios(env: pytest.MonkeyPatch) -> Iterator[ScenarioServer]:
    server = ScenarioServer()
    yield server
    server.stop()


def _outcome(server: ScenarioServer, model: str, forced: bool, env: pytest.MonkeyPatch,
             **kw: Any) -> tuple[str, Any, int, dict[str, Any]]:
    """One request through a fresh client: ("ok", answer) or ("failed", reason), the
    attempts it took, and the body the server received last."""
    if forced:
        env.setenv(openai_http.LITELLM_ENV, "1")
    else:
        env.delenv(openai_http.LITELLM_ENV, raising=False)
    settings = LLMSettings(**({"api_base": server.base, "timeout": 10.0, "retries": 0,
                               "backoff_base": 0.001, "backoff_max": 0.01,
                               "temperature": 0, "max_tokens": 64, "seed": 7} | kw))
    client = settings.client()
    assert (client.route(model) is None) == forced
    request = client.request(model, MESSAGES, TOOLS, "auto")
    meta: dict[str, Any] = {}
    before = len(server.bodies)
    try:
        answer = asyncio.run(client.complete(request, "w/c/i/s0/p", {}, random.Random(1),
                                             "here", meta))
        out: tuple[str, Any] = ("ok", json.dumps(answer, sort_keys=True))
    except LLMUnavailable as exc:  # the seconds spent are wall-clock: not compared
        out = ("failed", re.sub(r" in \d+\.\ds \(", " in _s (", str(exc)))
    assert len(server.bodies) > before
    return (*out, meta["attempts"], server.bodies[-1])


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_answers_and_fails_as_through_litellm(
        scenarios: ScenarioServer, env: pytest.MonkeyPatch, scenario: str) -> None:
    """Well-formed, malformed and odd answers normalise to the same data on both paths,
    priced models cost the same, and every HTTP failure is described, classified and
    retried (or not) the same; the server receives the same JSON."""
    model = f"openai/{scenario}"
    via_litellm = _outcome(scenarios, model, True, env)
    native = _outcome(scenarios, model, False, env)
    assert native == via_litellm


@pytest.mark.parametrize("scenario", ["text", "tools", "chunked", "until-close", "429", "502",
                                      "not-json", "surrogate"])
def test_httpx_carries_proxied_endpoints_with_the_same_answers(
        scenarios: ScenarioServer, scenario: str) -> None:
    """Where a proxy applies, httpx carries the request instead of the small client: the
    same JSON, the same errors (status, text, Retry-After)."""
    target = openai_http.route(f"openai/{scenario}", scenarios.base, {})
    assert target is not None and not target.proxied
    request = {"model": f"openai/{scenario}", "messages": MESSAGES}

    async def both() -> list[Any]:
        out = []
        for carrier in (target, dataclasses.replace(target, proxied=True)):
            try:
                out.append(("ok", await openai_http.post(carrier, request, 2)))
            except openai_http.NativeError as exc:
                out.append((type(exc).__name__, str(exc), exc.status_code,
                            _retry_after(exc)))
        return out

    small, via_httpx = asyncio.run(both())
    assert small == via_httpx
    assert scenarios.bodies[-1] == scenarios.bodies[-2]


def test_cost_is_litellm_s_for_priced_models(scenarios: ScenarioServer,
                                             env: pytest.MonkeyPatch) -> None:
    """A priced model costs what litellm's cost map says (not 0), on both paths; a model
    the map does not price costs 0."""
    for name, priced in (("gpt-4o-mini", True), ("other-model", True), ("text", False)):
        kind, answer, _, _ = _outcome(scenarios, f"openai/{name}", False, env)
        assert kind == "ok"
        assert (json.loads(answer)["cost"] > 0) == priced, name


def test_retries_and_retry_after_on_the_native_path(scenarios: ScenarioServer,
                                                    env: pytest.MonkeyPatch) -> None:
    """A 503 is retried and the retry answers; a Retry-After beyond the budget fails at
    once with the reason, as on the litellm path."""
    for forced in (True, False):
        kind, answer, attempts, _ = _outcome(scenarios, f"openai/flaky{forced}", forced, env,
                                             retries=2)
        assert (kind, attempts) == ("ok", 2), answer
    results = [_outcome(scenarios, "openai/429", forced, env, retries=3, retry_budget=1.0)
               for forced in (True, False)]
    assert results[0] == results[1]
    assert results[1][0] == "failed" and "asked to wait 2s, beyond the retry budget" \
        in results[1][1] and results[1][2] == 1


def test_a_timeout_and_a_dead_endpoint_fail_as_through_litellm(
        env: pytest.MonkeyPatch) -> None:
    """A server that does not answer in time, and a port nobody listens on, are retryable
    failures on the native path, and read as they do through litellm."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts, never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()
    try:
        for base, expect in ((f"http://127.0.0.1:{silent.getsockname()[1]}/v1", "Timeout"),
                             (f"http://127.0.0.1:{dead}/v1", "InternalServerError")):
            reasons = []
            for forced in (True, False):
                if forced:
                    env.setenv(openai_http.LITELLM_ENV, "1")
                else:
                    env.delenv(openai_http.LITELLM_ENV)
                client = LLMSettings(api_base=base, timeout=0.5, retries=1,
                                     backoff_base=0.001, backoff_max=0.001).client()
                meta: dict[str, Any] = {}
                with pytest.raises(LLMUnavailable) as info:
                    asyncio.run(client.complete(client.request("openai/x", MESSAGES), "s",
                                                {}, random.Random(0), "", meta))
                assert meta["attempts"] == 2  # retried
                reasons.append(str(info.value).split("(last: ", 1)[1])
            assert reasons[1].startswith(expect), reasons
            assert reasons[0] == reasons[1]
    finally:
        silent.close()


def test_the_request_json_is_litellm_s() -> None:
    """The body drops only an assistant message's null content, as litellm does, and
    names the endpoint's model."""
    body = openai_http.request_body({"model": "openai/a/b", "messages": MESSAGES,
                                     "tools": TOOLS, "tool_choice": "auto"}, "a/b")
    assert body["model"] == "a/b" and "content" not in body["messages"][2]
    assert body["messages"][:2] == MESSAGES[:2] and MESSAGES[2]["content"] is None


def test_routes(env: pytest.MonkeyPatch) -> None:
    """Only openai/ models with a key and no litellm-only option go natively; the escape
    hatch sends everything through litellm."""
    route = openai_http.route
    assert route("openai/x", "http://h/v1", {}) is not None
    assert route("openai/x", None, {}).url == "https://api.openai.com/v1/chat/completions"
    assert route("openai/x", "http://h/v1/", {"api_key": "k"}).url == \
        "http://h/v1/chat/completions"
    for model in ("anthropic/claude", "ollama_chat/llama3.1", "hosted_vllm/q", "openai/o3-mini",
                  "openai/gpt-5", "gpt-4o"):
        assert route(model, "http://h/v1", {}) is None, model
    assert route("openai/x", None, {"mock_response": "hi"}) is None
    env.delenv("OPENAI_API_KEY")
    assert route("openai/x", "http://h/v1", {}) is None  # litellm says the key is missing
    assert route("openai/x", "http://h/v1", {"api_key": "k"}) is not None
    env.setenv(openai_http.LITELLM_ENV, "1")
    assert route("openai/x", "http://h/v1", {"api_key": "k"}) is None


@pytest.fixture
def fake(env: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    server = FakeServer(0.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("close", [False, True])
def test_d1_episodes_trace_and_record_byte_for_byte_as_through_litellm(
        fake: FakeServer, env: pytest.MonkeyPatch, tmp_path: Path, close: bool) -> None:
    """Whole D1 episodes (delegation, a tool call, relaying) against the fake server, with
    keep-alive and with every connection closed: the traces (header, usage, model calls)
    and the recorded cassettes are the same bytes on both paths, and the replay of the
    native path's cassette reproduces its traces."""
    fake.close = close
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    base = f"http://127.0.0.1:{fake.port}/v1"
    outs = {}
    for forced in (True, False):
        if forced:
            env.setenv(openai_http.LITELLM_ENV, "1")
        else:
            env.delenv(openai_http.LITELLM_ENV)
        out = tmp_path / ("litellm" if forced else "native")
        llm = LLMSettings(model="openai/x-steady", counterpart_model="openai/terse",
                          api_base=base, retries=0, max_connections=4,
                          record=out / "cassette.jsonl")
        results = run_episodes(world, "canonical", None, 0, 3, agents="llm", out=out / "t",
                               llm=llm)
        assert all(r.valid for r in results)
        outs[forced] = out
    assert fake.requests == 2 * 3 * 4
    traces = {k: _files(v / "t") for k, v in outs.items()}
    sidecars = [n for n in traces[False] if n.endswith(".calls.ndjson")]
    assert sidecars and traces[True].keys() == traces[False].keys()
    for name in traces[True]:
        if name.endswith(".calls.ndjson"):  # wall-clock latency: compare the rest
            a, b = ([{k: v for k, v in json.loads(line).items() if k != "latency"}
                     for line in t[name].splitlines()] for t in (traces[True], traces[False]))
            assert a == b, name
        else:
            assert traces[True][name] == traces[False][name], name
    cassettes = [sorted((v / "cassette.jsonl").read_text().splitlines())
                 for v in outs.values()]
    assert cassettes[0] == cassettes[1] and len(cassettes[0]) == 3 * 4
    replayed = tmp_path / "replayed"
    run_episodes(world, "canonical", None, 0, 3, agents="llm", out=replayed, llm=LLMSettings(
        model="openai/x-steady", counterpart_model="openai/terse",
        replay=outs[False] / "cassette.jsonl"))
    assert fake.requests == 2 * 3 * 4
    assert {k: v for k, v in _files(replayed).items() if k.endswith(".jsonl")} == \
        {k: v for k, v in traces[False].items() if k.endswith(".jsonl")}


_PROBE = """
import runpy, sys
sys.argv = ["eairc", *sys.argv[1:]]
try:
    runpy.run_module("eairdsl.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("LITELLM-IMPORTED" if "litellm" in sys.modules else "LITELLM-ABSENT", code)
"""


def test_eairc_run_on_an_openai_endpoint_never_imports_litellm(
        fake: FakeServer, tmp_path: Path) -> None:
    """`eairc run --model openai/x --api-base http://127.0.0.1:PORT/v1` answers every call
    without importing litellm (the start-up it costs), and with EAIR_LLM_LITELLM=1 it
    goes through litellm again."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-dummy", "NO_PROXY": "127.0.0.1"}
    env.pop(openai_http.LITELLM_ENV, None)
    command = [sys.executable, "-c", _PROBE, "run", str(ROOT / "worlds" / "d1.eair"),
               "--model", "openai/x-steady", "--api-base", f"http://127.0.0.1:{fake.port}/v1",
               "--episodes", "2", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT, check=False)
    assert "LITELLM-ABSENT 0" in done.stdout, done.stdout + done.stderr
    assert fake.requests == 2 * 4
    forced = subprocess.run(command, env={**env, openai_http.LITELLM_ENV: "1"},
                            capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert "LITELLM-IMPORTED 0" in forced.stdout, forced.stdout + forced.stderr
    assert fake.requests == 2 * 2 * 4


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_endpoints_are_verified(scenarios: ScenarioServer, env: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    """Over TLS the small client checks the certificate (here a self-signed one for
    127.0.0.1, trusted through SSL_CERT_FILE) and answers as over plain HTTP; without the
    trust it is a (retryable) connection error, never an unverified answer."""
    import ssl

    from eairdsl.agents import http1

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=120)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    scenarios.socket = context.wrap_socket(scenarios.socket, server_side=True)
    base = scenarios.base.replace("http://", "https://")
    request = {"model": "openai/text", "messages": MESSAGES}
    target = openai_http.route("openai/text", base, {})
    assert target is not None
    env.setattr(http1, "_TLS", None)
    env.delenv("SSL_CERT_FILE", raising=False)
    env.delenv("SSL_CERT_DIR", raising=False)
    with pytest.raises(openai_http.NativeError) as info:  # certifi does not know it
        asyncio.run(openai_http.post(target, request, 2))
    assert info.value.status_code == 500 and "Connection error." in str(info.value)
    env.setattr(http1, "_TLS", None)
    env.setenv("SSL_CERT_FILE", str(cert))
    answer = asyncio.run(openai_http.post(target, request, 2))
    assert answer["choices"][0]["message"]["content"] == "Hello there."
