"""The litellm transport process against an OpenAI-compatible fake server on loopback.

A study whose calls go through the transport (`eairdsl.agents.transport`: the
litellm CPU in a child process) must give the same traces, rows and cassettes
as the same study with every call in-process, and replay byte for byte; a
timed-out call is cancelled in the child, which goes on serving; a child that
dies mid-call leaves the retry to this process. The transport is opt-in
(EAIR_LLM_TRANSPORTS or LLMSettings.transport): here it is forced on. The
server (tests/fake_openai.py) runs on 127.0.0.1 in a thread of this test,
with two scripted models.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai import FakeServer

from eairdsl.agents import transport
from eairdsl.agents.llm import LLMSettings
from eairdsl.api import resolve_world, run_episodes_concurrently
from eairdsl.ir import World
from eairdsl.study.executor import CASSETTES_DIR, run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.store import STORE_FILE, Store

ROOT = Path(__file__).resolve().parents[1]
MODELS = "steady=openai/steady,terse=openai/terse"

pytestmark = [pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited"),
              pytest.mark.filterwarnings(
                  "ignore:Exception ignored in.*LoggingWorker"
                  ":pytest.PytestUnraisableExceptionWarning")]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy-test-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv(transport.TRANSPORTS_ENV, raising=False)
    # the transport carries litellm's calls: openai/ models would otherwise take the
    # native client (eairdsl.agents.openai_http), which never uses it
    monkeypatch.setenv("EAIR_LLM_LITELLM", "1")
    srv = FakeServer(0.0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    transport.stop()
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


@pytest.fixture
def carried(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model of every call the transport carried."""
    seen: list[str] = []
    call = transport.Transport.call

    async def counted(self: transport.Transport, kwargs: dict[str, Any]) -> dict[str, Any]:
        seen.append(str(kwargs["model"]))
        return await call(self, kwargs)

    monkeypatch.setattr(transport.Transport, "call", counted)
    return seen


def _llm(server: FakeServer, **kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"api_base": f"http://127.0.0.1:{server.port}/v1", "timeout": 20.0,
                            "retries": 0, "max_connections": 4, "backoff_base": 0.001,
                            "backoff_max": 0.01}
    base.update(kw)
    return LLMSettings(**base)


def _traces(out: Path) -> dict[str, bytes]:
    base = out / "traces"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*.jsonl")}


def _rows(out: Path) -> list[dict[str, Any]]:
    """The store's rows without row ids and times, in grid order (not completion order)."""
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = [{k: v for k, v in r.items() if k not in ("id", "created")}
                for r in store.rows()]
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in (
        "world", "model", "condition", "instance", "seed", "rep", "attempt")))


def test_transport_answers_as_in_process_and_replays(d1: World, server: FakeServer,
                                                     carried: list[str],
                                                     tmp_path: Path) -> None:
    models = parse_models(MODELS)
    plan = [plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 2)]
    via = tmp_path / "via"
    run_study([d1], plan, models, via, llm=_llm(server, transport=True,
                                                record=via / CASSETTES_DIR))
    # steady: 4 calls per episode, terse 1; every one through the transport
    assert server.requests == len(carried) == 4 * 4 + 4 * 1
    assert set(carried) == {"openai/steady", "openai/terse"}
    assert transport.active() is None  # stopped with the study
    rows = _rows(via)
    assert len(rows) == 8 and all(r["valid"] for r in rows)
    assert {r["utility"] for r in rows if r["model"] == "steady"} == {1}  # relayed the record
    inline = tmp_path / "inline"
    before = len(carried)
    run_study([d1], plan, models, inline, llm=_llm(server, transport=False,
                                                   record=inline / CASSETTES_DIR))
    assert len(carried) == before and server.requests == 2 * before
    assert _traces(via) == _traces(inline)
    assert _rows(via) == _rows(inline)
    for name in ("steady", "terse"):
        got = (via / CASSETTES_DIR / f"{name}.jsonl").read_text().splitlines()
        want = (inline / CASSETTES_DIR / f"{name}.jsonl").read_text().splitlines()
        assert sorted(got) == sorted(want)
    # replayed from the transport's cassettes: no request, byte for byte
    replayed = tmp_path / "replayed"
    run_study([d1], plan, models, replayed, llm=_llm(server, replay=via / CASSETTES_DIR))
    assert server.requests == 2 * before
    assert _traces(replayed) == _traces(via)


def test_a_timed_out_call_is_cancelled_and_the_child_goes_on(server: FakeServer) -> None:
    (carrier,) = transport.start(1)
    kwargs = {"model": "openai/terse", "messages": [{"role": "user", "content": "hi"}],
              "api_base": f"http://127.0.0.1:{server.port}/v1", "timeout": 20,
              "num_retries": 0}

    async def go() -> dict[str, Any]:
        server.latency = 1.5
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(carrier.call(kwargs), 0.3)
        assert carrier.load == 0  # forgotten here, cancelled there
        server.latency = 0.0
        return await carrier.call(kwargs)

    answer = asyncio.run(go())
    assert answer["content"] == "I cannot look that up, sorry."
    assert answer["usage"]["tokens_out"] == 20 and carrier.alive


def test_an_error_comes_back_classified(server: FakeServer) -> None:
    (carrier,) = transport.start(1)
    kwargs = {"model": "openai/terse", "messages": [{"role": "user", "content": "hi"}],
              "api_base": f"http://127.0.0.1:{server.port}/nowhere", "timeout": 20,
              "num_retries": 0}
    with pytest.raises(transport.TransportError) as info:
        asyncio.run(carrier.call(kwargs))
    assert "NotFound" in info.value.description and not info.value.retryable


def test_a_dead_child_leaves_the_retry_in_process(d1: World, server: FakeServer,
                                                  carried: list[str]) -> None:
    (carrier,) = transport.start(1)
    deadline = time.monotonic() + 60
    while not carrier.ready and time.monotonic() < deadline:
        time.sleep(0.05)
    assert carrier.ready
    server.latency = 1.0
    threading.Timer(0.4, carrier.proc.kill).start()  # while the first call is in flight
    results = asyncio.run(run_episodes_concurrently(
        d1, "canonical", "hr-1", 0, 1, llm=_llm(server, model="openai/terse", retries=1,
                                                transport=True)))
    (result,) = results
    assert result.valid, result.validity_reason
    assert not carrier.alive and transport.active() is None
    assert len(carried) == 1  # the first attempt; its retry went in-process
    assert result.usage["total"]["calls"] == 1


def test_the_transport_is_opt_in_and_never_where_litellm_was_imported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import litellm  # noqa: F401 - as a library user who configured litellm would

    monkeypatch.delenv(transport.TRANSPORTS_ENV, raising=False)
    assert not transport.transport_usable({})  # off by default
    monkeypatch.setenv(transport.TRANSPORTS_ENV, "2")
    assert not transport.transport_usable({})  # asked for, but this process has litellm
    monkeypatch.setitem(sys.modules, "litellm", None)  # as if it had not been imported
    del sys.modules["litellm"]
    assert transport.transport_usable({})
    assert not transport.transport_usable({}, False)
    monkeypatch.setenv(transport.TRANSPORTS_ENV, "0")
    assert not transport.transport_usable({})
    assert transport.transport_usable({}, True)
    assert not transport.transport_usable({"hook": object()}, True)  # not JSON
