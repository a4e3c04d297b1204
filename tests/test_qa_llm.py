"""What real providers do to a user of the LLM paths, offline.

Each test drives the real code path — litellm's custom-provider hook
(tests/scripted_llm.py) or litellm's OpenAI client against a fault-injecting
OpenAI-compatible server on 127.0.0.1 that the test starts itself — and
asserts what a user sees: the episode is recorded (valid, or execution-invalid
with the reason), retries follow the provider's advice, and a replay is byte
for byte the recording. Never a network model.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


import httpx
import litellm
from scripted_llm import Scripted, respond, scripted_provider, tool_names

from eairdsl.agents import provider as provider_module
from eairdsl.agents import transport
from eairdsl.agents.llm import LLMClient, LLMSettings, _retry_after
from eairdsl.api import resolve_world, run_episode
from eairdsl.ir import World
from eairdsl.runtime.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
MODEL = "qallm/agent"

pytestmark = [pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited"),
              pytest.mark.filterwarnings(
                  "ignore:Exception ignored in.*LoggingWorker"
                  ":pytest.PytestUnraisableExceptionWarning")]

provider = scripted_provider("qallm")


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


def settings(**kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"model": MODEL, "timeout": 5.0, "retries": 2, "backoff_base": 0.001,
                            "backoff_max": 0.01}
    base.update(kw)
    return LLMSettings(**base)


def _rate_limited(after: str, header: str = "retry-after") -> litellm.RateLimitError:
    return litellm.RateLimitError(
        message="slow down", llm_provider="qallm", model=MODEL,
        response=httpx.Response(429, headers={header: after},
                                request=httpx.Request("POST", "http://127.0.0.1/")))


# ---------------------------------------------------------------- lone surrogates
def test_a_lone_surrogate_in_model_output_is_recorded_and_replays(
        d1: World, provider: Scripted, tmp_path: Path) -> None:
    """A model (or proxy) that sends `\\ud800` in its JSON — in a tool call's arguments or
    in its answer — used to end `eairc run` with 'internal error: UnicodeEncodeError' and a
    0-byte trace (arguments), or an execution-invalid episode 'agent failed: utf-8 codec
    can't encode' and an empty cassette (answer, while recording). Now the character is
    U+FFFD, the episode is valid and recorded, and the replay is the same bytes."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        tools = tool_names(params)
        if "delegate" in tools and not any(m["role"] == "tool" for m in messages):
            return respond(calls=[("directory_lookup", '{"query": "Jordan\\ud800 Lee"}')])
        return respond("Jordan Lee \ud800works on the platform team.")

    provider.script = script
    cassette = tmp_path / "c.jsonl"
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "rec",
                    llm=settings(record=cassette))
    assert r.valid, r.validity_reason
    trace = Path(r.trace_path or "")
    text = trace.read_text(encoding="utf-8")
    assert "Jordan\ufffd Lee" in text and "\ufffdworks on" in text
    calls = [e for e in read_trace(trace).events if e.kind == "tool_call"]
    assert calls and calls[0].args == {"query": "Jordan\ufffd Lee"}
    assert len(cassette.read_text(encoding="utf-8").splitlines()) == 2
    provider.refuse = True
    again = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "rep",
                        llm=settings(replay=cassette))
    assert Path(again.trace_path or "").read_bytes() == trace.read_bytes()


# ---------------------------------------------------------------- Retry-After
def test_retry_after_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _retry_after(_rate_limited("2")) == 2.0
    assert _retry_after(_rate_limited("1500", "retry-after-ms")) == 1.5
    # an HTTP date is read against the wall clock: a fixed one, so the wait is exact
    # (with the real clock a slow moment between writing the date and reading it moved it)
    now = 1_750_000_000.0
    monkeypatch.setattr(provider_module, "time", SimpleNamespace(time=lambda: now))
    assert _retry_after(_rate_limited(formatdate(now + 30, usegmt=True))) == 30.0
    assert _retry_after(_rate_limited(formatdate(now - 30, usegmt=True))) == 0.0
    assert _retry_after(_rate_limited("soon")) is None
    assert _retry_after(litellm.RateLimitError(message="x", llm_provider="q", model="m")) \
        is None
    assert _retry_after(transport.TransportError("RateLimitError: x", True, 3.0)) == 3.0
    assert _retry_after(TimeoutError()) is None


def test_a_429_waits_as_long_as_the_provider_asks(d1: World, provider: Scripted) -> None:
    """The backoff (here 1-2 ms) used to ignore Retry-After, so a provider's 'wait 30 s'
    was answered by retries a second apart, each another 429, until the episode failed."""
    asked: list[float] = []

    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        asked.append(time.monotonic())
        if len(asked) == 1:
            raise _rate_limited("0.6")
        return respond("Jordan Lee works on the platform team.")

    provider.script = script
    llm = settings()
    r = run_episode(d1, "canonical", "hr-1", 0, llm=llm)
    assert r.valid, r.validity_reason
    assert len(asked) == 2 and asked[1] - asked[0] >= 0.6
    assert llm.client().retries == 1


def test_a_wait_beyond_the_retry_budget_fails_at_once_and_says_why(
        d1: World, provider: Scripted) -> None:
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        raise _rate_limited("3600")

    provider.script = script
    began = time.monotonic()
    r = run_episode(d1, "canonical", "hr-1", 0, llm=settings(retry_budget=5.0))
    assert time.monotonic() - began < 60  # at once: not the 3600 s asked for
    assert not r.valid
    assert "the provider asked to wait 3600s, beyond the retry budget" in (
        r.validity_reason or "")
    assert len(provider.requests) == 1


# ---------------------------------------------------------------- a loopback server
class _Faulty(http.server.ThreadingHTTPServer):
    """Answers `POST /v1/chat/completions` from a queue of (status, headers, body) faults,
    then with a plain answer."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FaultyHandler)
        self.faults: list[tuple[int, dict[str, str], bytes]] = []
        self.arrivals: list[float] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _FaultyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Faulty

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.arrivals.append(time.monotonic())
        if self.server.faults:
            status, headers, data = self.server.faults.pop(0)
        else:
            status, headers = 200, {}
            data = json.dumps({
                "id": "chatcmpl-qa", "object": "chat.completion", "created": 0,
                "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Fine."}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                          "total_tokens": 4}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Faulty]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy-test-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv(transport.TRANSPORTS_ENV, raising=False)
    srv = _Faulty()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    transport.stop()
    srv.shutdown()
    srv.server_close()


def _complete(llm: LLMSettings) -> dict[str, Any]:
    client = LLMClient(llm)
    request = client.request("openai/qa", [{"role": "user", "content": "hi"}])
    return asyncio.run(client.complete(request, "qa/s0/agent", {}, random.Random(0)))


_SLOW_DOWN = (429, {"Retry-After": "1"}, b'{"error": {"message": "slow down"}}')


@pytest.mark.parametrize("via", ["litellm", "native"])
def test_retry_after_over_http_in_process(faulty: _Faulty, via: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Through litellm's OpenAI client (and through the native one, which an openai/ model
    takes unless EAIR_LLM_LITELLM is set), the header of a real 429 response."""
    if via == "litellm":
        monkeypatch.setenv("EAIR_LLM_LITELLM", "1")
    faulty.faults = [_SLOW_DOWN]
    answer = _complete(LLMSettings(api_base=f"http://127.0.0.1:{faulty.port}/v1",
                                   timeout=10, retries=1, backoff_base=0.001,
                                   backoff_max=0.01, transport=False))
    assert answer["content"] == "Fine."
    assert len(faulty.arrivals) == 2 and faulty.arrivals[1] - faulty.arrivals[0] >= 1.0


#: the transport child's startup, made longer than the request timeout below whatever
#: the machine: its interpreter sleeps this long first (a `sitecustomize` on its path)
CHILD_STARTUP = 6.0
#: the request timeout: shorter than the startup, and seconds more than an attempt needs
#: even on a loaded machine. It was 0.8 s, to stay below the child's litellm import, but
#: a fresh child's first request through litellm takes about that long itself (0.94 s
#: measured at load 6.5 on 2 cores; later ones 0.05-0.1 s): both attempts timed out
TRANSPORT_TIMEOUT = 5.0


def test_the_transport_child_honours_retry_after_and_its_startup_is_no_timeout(
        faulty: _Faulty, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the transport process: a request sent while the child still started
    (imported litellm: seconds) used to run into a short --timeout and be retried, or
    fail with --retries 0; and the child's errors did not carry Retry-After."""
    assert CHILD_STARTUP > TRANSPORT_TIMEOUT
    # the transport carries litellm's calls (an openai/ model would go the native way)
    monkeypatch.setenv("EAIR_LLM_LITELLM", "1")
    slow = tmp_path / "slow-start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(f"import time\ntime.sleep({CHILD_STARTUP})\n",
                                           encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(slow), *filter(None, [os.environ.get("PYTHONPATH")])]))
    began = time.monotonic()
    transport.start(1)
    faulty.faults = [_SLOW_DOWN]
    answer = _complete(LLMSettings(api_base=f"http://127.0.0.1:{faulty.port}/v1",
                                   timeout=TRANSPORT_TIMEOUT, retries=1, backoff_base=0.001,
                                   backoff_max=0.01, transport=True))
    assert answer["content"] == "Fine."
    # sent at once, the request reached the provider only after the startup, longer
    # than its timeout: it waited for the child, unharmed (a timeout is a retry too)
    assert faulty.arrivals[0] - began >= CHILD_STARTUP
    assert len(faulty.arrivals) == 2 and faulty.arrivals[1] - faulty.arrivals[0] >= 1.0


# ---------------------------------------------------------------- bindings
def test_a_counterpart_model_alone_plays_the_counterpart(provider: Scripted,
                                                         tmp_path: Path) -> None:
    """`eairc run worlds/a1.eair --counterpart-model M` (no --model) ran every participant
    as sim — the customer too — and printed a sim table, ignoring M without a word. The
    docs promise mixed runs: the customer is now played by M, the roles under test by sim."""
    a1 = resolve_world(ROOT / "worlds" / "a1.eair")
    provider.script = lambda messages, params: respond("I would like a refund, please.")
    r = run_episode(a1, None, None, 0, out=tmp_path,
                    llm=LLMSettings(counterpart_model=MODEL, timeout=5.0))
    agents = read_trace(Path(r.trace_path or "")).header.agents
    assert agents["customer"] == f"llm:{MODEL}" and agents["support"] == "sim"
    assert provider.requests, "the counterpart model was never asked"
    assert r.usage["agents"]["customer"]["calls"] >= 1
    assert set(r.usage["agents"]) == {"customer"}


@pytest.mark.parametrize("flag", ["--model", "--counterpart-model", "--judge-model"])
def test_an_empty_model_is_a_usage_error_not_a_sim_run(flag: str, tmp_path: Path) -> None:
    """`eairc run worlds/d1.eair --model ""` ran the sim agents and exited 0: a script whose
    $MODEL was unset got sim results labelled as its run."""
    from typer.testing import CliRunner

    from eairdsl.cli import app

    out = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(ROOT / "worlds" / "d1.eair"), flag, " ",
                                      "--episodes", "1", "-o", str(out)])
    assert result.exit_code == 1
    assert f"{flag} is empty" in result.output
    assert not out.exists()


# ---------------------------------------------------------------- nesting
@pytest.mark.parametrize("depth", [900, 100_000])
def test_deeply_nested_arguments_are_a_rejected_call(d1: World, provider: Scripted,
                                                     tmp_path: Path, depth: int) -> None:
    """Arguments nested 100,000 deep made json.loads raise RecursionError, which ended the
    decision: the episode was execution-invalid 'agent failed: maximum recursion depth
    exceeded' instead of the model seeing a rejected call. Now any nesting past
    MAX_ARGUMENT_DEPTH is malformed output like invalid JSON."""
    from eairdsl.agents.llm import MAX_ARGUMENT_DEPTH

    deep = '{"query": "x", "extra": ' + "[" * depth + "]" * depth + "}"

    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        if "delegate" in tool_names(params) and not any(m["role"] == "tool" for m in messages):
            return respond(calls=[("directory_lookup", deep)])
        return respond("Jordan Lee works on the platform team.")

    provider.script = script
    cassette = tmp_path / "c.jsonl"
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "rec",
                    llm=settings(record=cassette))
    assert r.valid, r.validity_reason
    assert r.usage["total"]["malformed"] == 1
    results = [e for e in read_trace(Path(r.trace_path or "")).events
               if e.kind == "tool_result"]
    assert results and results[0].rejected
    sent = json.dumps(provider.requests[-1]["messages"])
    assert f"nest deeper than {MAX_ARGUMENT_DEPTH} levels" in sent or \
        "not valid JSON" in sent
    provider.refuse = True
    again = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "rep",
                        llm=settings(replay=cassette))
    assert Path(again.trace_path or "").read_bytes() == Path(r.trace_path or "").read_bytes()


def test_a_provider_traceback_stays_out_of_the_reason(d1: World, provider: Scripted) -> None:
    """A malformed response made litellm raise with its own traceback in the message, and
    the episode's reason (printed in the run's table) read '... Invalid response object
    Traceback (most recent call last): File "/…/site-packages/litellm/…'."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        raise litellm.InternalServerError(
            message='Invalid response object Traceback (most recent call last):\n  File '
                    '"/venv/lib/python3.11/site-packages/litellm/x.py", line 9, in f\n'
                    'RecursionError: maximum recursion depth exceeded',
            llm_provider="qallm", model=MODEL)

    provider.script = script
    r = run_episode(d1, "canonical", "hr-1", 0, llm=settings(retries=0))
    reason = r.validity_reason or ""
    assert not r.valid and "Invalid response object (litellm's traceback omitted)" in reason
    assert "Traceback" not in reason and "site-packages" not in reason


# ---------------------------------------------------------------- damaged cassettes
@pytest.mark.parametrize(("damage", "says"), [
    (lambda r: {k: v for k, v in r.items() if k != "usage"}, "response.usage: Field required"),
    (lambda r: 5, "response: Input should be a valid dictionary"),
    (lambda r: {**r, "tool_calls": "x"}, "response.tool_calls: Input should be a valid list"),
    (lambda r: {**r, "usage": {"tokens_in": "many", "tokens_out": 1}},
     "response.usage.tokens_in: Input should be a valid integer"),
])
def test_a_damaged_cassette_is_refused_where_it_is_damaged(
        d1: World, provider: Scripted, tmp_path: Path, damage: Any, says: str) -> None:
    """A hand-edited or damaged cassette replayed 'successfully' (exit 0, '1 exchanges
    replayed') into execution-invalid episodes reading "agent failed: 'usage'" or "'int'
    object is not iterable". It is now refused before any episode, at its line."""
    from eairdsl.agents.cassette import CassetteError

    provider.script = lambda messages, params: respond("Jordan Lee is on the platform team.")
    cassette = tmp_path / "c.jsonl"
    run_episode(d1, "canonical", "hr-1", 0, llm=settings(record=cassette))
    entry = json.loads(cassette.read_text(encoding="utf-8").splitlines()[0])
    entry["response"] = damage(entry["response"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(entry) + "\n", encoding="utf-8")
    with pytest.raises(CassetteError) as info:
        settings(replay=bad).client()
    assert str(info.value) == f"{bad}:1: not a cassette entry ({says})"


def test_a_replay_reports_the_recorded_retries(d1: World, provider: Scripted,
                                               tmp_path: Path) -> None:
    """`eairc run --replay` printed '0 retries' for a recording that took 2, while the
    replayed traces (byte-identical) said retries 2: the summary now agrees with them."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        if len(provider.requests) <= 2:
            raise _rate_limited("0")
        return respond("Jordan Lee works on the platform team.")

    provider.script = script
    cassette = tmp_path / "c.jsonl"
    live = settings(record=cassette)
    run_episode(d1, "canonical", "hr-1", 0, llm=live)
    assert live.client().retries == 2
    provider.refuse = True
    replayed = settings(replay=cassette)
    run_episode(d1, "canonical", "hr-1", 0, llm=replayed)
    assert replayed.client().retries == 2


def test_a_refused_run_leaves_an_earlier_recording_alone(d1: World, provider: Scripted,
                                                          tmp_path: Path) -> None:
    """`eairc run ... --record good.jsonl --condition typo` said "unknown condition" and
    exited 1 — after truncating good.jsonl, 12 recorded exchanges to 0 bytes. `run` now
    only checks the cassette can be written (`check_recordable`) and opens it, emptying
    it, when the first episode starts."""
    from typer.testing import CliRunner

    from eairdsl.cli import app

    provider.script = lambda messages, params: respond("Jordan Lee is on the platform team.")
    cassette = tmp_path / "good.jsonl"
    run_episode(d1, "canonical", "hr-1", 0, llm=settings(record=cassette))
    before = cassette.read_bytes()
    assert before
    result = CliRunner().invoke(app, ["run", str(ROOT / "worlds" / "d1.eair"), "--model", MODEL,
                                      "--record", str(cassette), "--condition", "typo",
                                      "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "unknown condition 'typo'" in result.output
    assert cassette.read_bytes() == before
    # a run that records does start the cassette afresh
    run_episode(d1, "canonical", "hr-2", 1, llm=settings(record=cassette))
    lines = cassette.read_text(encoding="utf-8").splitlines()
    assert lines and all("/hr-2/s1/" in json.loads(line)["scope"] for line in lines)
