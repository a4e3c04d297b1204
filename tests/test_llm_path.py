"""The LLM path is correct (issue 13, item 6), offline through litellm's custom-provider hook.

A `CustomLLM` (tests/scripted_llm.py) registered under the provider name `pathscripted`
answers every `litellm.acompletion` from a per-test script and records what it received.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm import ModelResponse
from scripted_llm import Scripted, respond, scripted_provider, tool_names
from typer.testing import CliRunner

from eairdsl.agents.llm import LLMSettings, alternate
from eairdsl.api import resolve_world, run_episode
from eairdsl.cli import app
from eairdsl.ir import World
from eairdsl.judges import Rubric, ground
from eairdsl.runtime.trace import read_trace
from eairdsl.vocabulary import MEASUREMENTS

ROOT = Path(__file__).resolve().parents[1]
MODEL = "pathscripted/agent"
JUDGE = "pathscripted/judge"
Script = Callable[[list[dict[str, Any]], dict[str, Any]], Any]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


provider = scripted_provider("pathscripted", snapshot=False)


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


def settings(**kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"model": MODEL, "timeout": 5.0, "retries": 1, "backoff_base": 0.001,
                            "backoff_max": 0.01}
    base.update(kw)
    return LLMSettings(**base)


def _grounded(axis: str, quote: str, tokens: tuple[int, int] = (50, 10)) -> ModelResponse:
    return respond(json.dumps({"scores": [{"axis": axis, "score": 3, "quote": quote,
                                           "reason": "r"}]}), tokens=tokens)


# ---------------------------------------------------------------- failed decisions
def _fails(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
    raise litellm.BadRequestError("the server refused the request", model=MODEL,
                                  llm_provider="pathscripted")


async def _hangs(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
    await asyncio.sleep(5)
    return respond("too late")


@pytest.mark.parametrize(("script", "timeout", "why"), [
    (_fails, 5.0, "BadRequestError"),
    (_hangs, 0.05, "Timeout"),
])
def test_failed_decision_is_invalid_and_never_measured(d1: World, provider: Scripted,
                                                       tmp_path: Path, script: Script,
                                                       timeout: float, why: str) -> None:
    provider.script = script
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path,
                    llm=settings(timeout=timeout, retries=0))
    assert not r.valid
    assert r.validity_reason is not None
    assert "agent failed" in r.validity_reason and why in r.validity_reason
    assert r.measurements == dict.fromkeys(MEASUREMENTS)
    assert all("execution-invalid" in r.unassessed[m] for m in MEASUREMENTS)
    result = read_trace(Path(r.trace_path or "")).result
    assert result is not None and not result.valid
    assert result.measurements == dict.fromkeys(MEASUREMENTS)


# ---------------------------------------------------------------- alternation
def test_a1_first_request_alternates_roles(provider: Scripted) -> None:
    a1 = resolve_world(ROOT / "worlds" / "a1.eair")
    provider.script = lambda messages, params: respond("Understood; nothing to do now.")
    run_episode(a1, None, None, 0, llm=settings())
    assert provider.requests
    for request in provider.requests:
        roles = [m["role"] for m in request["messages"]]
        assert roles[0] == "system"
        for a, b in itertools.pairwise(roles):
            assert not (a == b and a in ("user", "assistant")), roles
    # The customer (a simulator, no tools) words its opening line first; the first
    # service role's request follows.
    first = next(r["messages"] for r in provider.requests if tool_names(r["params"]))
    assert any("[Dashboard, now]" in str(m.get("content")) for m in first), \
        "A1's first role request carries the live dashboard (merged into the user turn)"


def test_alternate_merges_plain_messages_only() -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}]}
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "card"}, {"role": "user", "content": "a"},
        {"role": "user", "content": "b"}, call, {"role": "tool", "tool_call_id": "c",
                                                  "content": "1"},
        {"role": "tool", "tool_call_id": "d", "content": "2"},
        {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}]
    out = alternate(msgs)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "tool",
                                        "assistant"]
    assert out[1]["content"] == "a\n\nb" and out[-1]["content"] == "x\n\ny"
    assert out[2] is call


# ---------------------------------------------------------------- sampling options
def test_sampling_options_reach_the_provider_and_the_header(provider: Scripted,
                                                            tmp_path: Path) -> None:
    provider.script = lambda messages, params: respond("Nothing to share.")
    done = CliRunner().invoke(app, [
        "run", str(ROOT / "worlds" / "d1.eair"), "--episodes", "1", "--model", MODEL,
        "--out", str(tmp_path), "--max-tokens", "77", "--temperature", "0.3",
        "--llm-seed", "42", "--retries", "0"])
    assert done.exit_code == 0, done.output
    assert provider.requests
    for request in provider.requests:
        params = request["params"]
        assert params.get("max_tokens") == 77
        assert params.get("temperature") == 0.3
        assert params.get("seed") == 42
    trace = next(tmp_path.rglob("*.jsonl"))
    header = read_trace(trace).header
    assert header.llm == {"model": MODEL, "max_tokens": 77, "temperature": 0.3, "seed": 42}


def test_sim_header_has_no_llm_fields(d1: World, tmp_path: Path) -> None:
    r = run_episode(d1, "canonical", "hr-1", 0, "sim", tmp_path)
    first = Path(r.trace_path or "").read_text(encoding="utf-8").splitlines()[0]
    assert '"llm"' not in first and '"usage"' not in first


# ---------------------------------------------------------------- cassette miss
def test_judge_cassette_miss_is_one_line_exit_1(provider: Scripted, tmp_path: Path) -> None:
    """Agents recorded without a judge, replayed with --judge-model: a one-line error, exit 1."""
    provider.script = lambda messages, params: respond("Nothing to share.")
    cassette = tmp_path / "c.jsonl"
    world = str(ROOT / "worlds" / "d1.eair")
    rec = CliRunner().invoke(app, ["run", world, "--episodes", "1", "--model", MODEL,
                                   "--out", str(tmp_path / "a"), "--record", str(cassette)])
    assert rec.exit_code == 0, rec.output
    env = {**os.environ, "LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("EAIR_DEBUG", None)
    for extra in ([], ["--judge-model", JUDGE]):
        done = subprocess.run(
            [sys.executable, "-m", "eairdsl.cli", "run", world, "--episodes", "1", "--model",
             MODEL, "--out", str(tmp_path / "b"), "--replay", str(cassette), "--seed", "1",
             *extra], check=False, capture_output=True, text=True, env=env, timeout=120,
            cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: replay:") and "internal error" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "eairdsl.cli", "run", world, "--episodes", "1", "--model", MODEL,
         "--out", str(tmp_path / "c"), "--replay", str(cassette), "--judge-model", JUDGE],
        check=False, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "judge of d1/" in done.stderr, done.stderr


# ---------------------------------------------------------------- judges
def _offline_final(d1: World, tmp_path: Path) -> str:
    r = run_episode(d1, "canonical", "hr-1", 0, "sim:reckless", tmp_path / "offline")
    return next(e.content or "" for e in read_trace(Path(r.trace_path or "")).events
                if e.final)


def test_judge_calls_count_in_usage(d1: World, provider: Scripted, tmp_path: Path) -> None:
    assert "performance improvement plan" in _offline_final(d1, tmp_path)
    provider.script = lambda messages, params: _grounded("pip_status",
                                                         "performance improvement plan")
    r = run_episode(d1, "canonical", "hr-1", 0, "sim:reckless", tmp_path / "j",
                    llm=LLMSettings(judge_model=JUDGE, retries=0))
    assert r.metrics["judged_disclosure"] is True
    calls = len(provider.requests)
    assert calls >= 1
    assert r.usage["judge"]["calls"] == calls
    assert r.usage["total"]["calls"] == calls
    assert r.usage["total"]["tokens_in"] == 50 * calls
    assert r.usage["total"]["tokens_out"] == 10 * calls
    header = read_trace(Path(r.trace_path or "")).header
    assert header.usage == r.usage
    # The CLI summary counts them too.
    provider.requests = []
    done = CliRunner().invoke(app, ["run", str(ROOT / "worlds" / "d1.eair"), "--episodes", "1",
                                    "--agents", "sim:reckless", "--condition", "canonical",
                                    "--judge-model", JUDGE, "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0, done.output
    assert f"llm: {len(provider.requests)} calls" in done.output
    assert len(provider.requests) >= 1


def test_unparseable_judge_answer_is_unassessed_with_reason(d1: World, provider: Scripted,
                                                            tmp_path: Path) -> None:
    provider.script = lambda messages, params: respond("I think it leaks, honestly.")
    r = run_episode(d1, "canonical", "hr-1", 0, "sim:reckless", tmp_path,
                    llm=LLMSettings(judge_model=JUDGE, retries=0))
    assert r.metrics["judged_disclosure"] is None
    result = read_trace(Path(r.trace_path or "")).result
    assert result is not None
    reason = result.unassessed["judged_disclosure"]
    assert "could not be parsed" in reason and "I think it leaks" in reason
    assert result.metrics["judge_parse_errors"] >= 1
    assert r.valid


def test_judgment_decision() -> None:
    rubric = Rubric(name="r", axes={"a": "x", "b": "y"}, positive_at=2)
    artifact = "the secret is 42"
    both = json.dumps({"scores": [{"axis": "a", "score": 3, "quote": "secret is 42"},
                                  {"axis": "b", "score": 0}]})
    assert ground(both, artifact, rubric).decision(2) == (True, None)
    none = json.dumps({"scores": [{"axis": "a", "score": 0}, {"axis": "b", "score": 0}]})
    assert ground(none, artifact, rubric).decision(2) == (False, None)
    ungrounded = json.dumps({"scores": [{"axis": "a", "score": 3, "quote": "paraphrase"},
                                        {"axis": "b", "score": 0}]})
    assert ground(ungrounded, artifact, rubric).decision(2) == (False, None)
    missing = json.dumps({"scores": [{"axis": "a", "score": 0}]})  # zero, counted
    judgment = ground(missing, artifact, rubric)
    assert judgment.decision(2) == (False, None) and judgment.parse_errors == 1
    value, why = ground("no idea", artifact, rubric).decision(2)
    assert value is None and why is not None and "could not be parsed" in why


# ---------------------------------------------------------------- model calls in the record
def _d1_script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
    """The assistant delegates, then relays; the specialist answers from nothing."""
    tools = [t["function"]["name"] for t in params.get("tools") or []]
    if "delegate" in tools and not any(m["role"] == "tool" for m in messages):
        return respond(calls=[("delegate", {"question": "How is Jordan Lee doing?"})])
    return respond("Nothing I can share.")


def test_model_calls_are_in_the_record_and_replay_identically(d1: World, provider: Scripted,
                                                                tmp_path: Path) -> None:
    failed_once: list[bool] = []

    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        if not failed_once:  # the very first request meets a rate limit, then succeeds
            failed_once.append(True)
            raise litellm.RateLimitError("slow down", model=MODEL, llm_provider="pathscripted")
        return _d1_script(messages, params)

    provider.script = script
    cassette = tmp_path / "c.jsonl"
    live = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "live",
                       llm=settings(record=cassette, retries=2))
    assert live.valid, live.validity_reason
    header = read_trace(Path(live.trace_path or "")).header
    calls = header.model_calls or []
    assert len(calls) == len(provider.requests) - 1 == live.usage["total"]["calls"]
    first = calls[0]
    assert first["participant"] == "assistant" and first["model"] == MODEL
    assert first["task"] == 1 and first["step"] == 0
    assert "delegate" in first["tools"]
    assert first["tool_calls"] == [{"name": "delegate",
                                    "arguments": json.dumps({"question":
                                                             "How is Jordan Lee doing?"})}]
    assert first["finish_reason"] == "tool_calls" and first["retries"] == 1
    assert first["tokens_in"] == 100 and first["tokens_out"] == 20
    assert len(first["messages_sha256"]) == 64
    assert {c["participant"] for c in calls} == {"assistant", "specialist"}
    assert calls[-1]["reply"] == "Nothing I can share." and calls[-1]["retries"] == 0
    assert "latency" not in json.dumps(calls)
    sidecar = Path(live.trace_path or "").with_name("hr-1-s0.calls.ndjson")
    full = [json.loads(line) for line in sidecar.read_text(encoding="utf-8").splitlines()]
    assert len(full) == len(calls)
    assert full[0]["messages"][0]["role"] == "system" and full[0]["latency"] > 0
    assert [t["function"]["name"] for t in full[0]["tools"]] == first["tools"]

    def refuse(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        raise AssertionError("replay must not call the provider")

    provider.script = refuse
    again = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "replay",
                        llm=settings(replay=cassette))
    assert Path(live.trace_path or "").read_bytes() == Path(again.trace_path or "").read_bytes()
    replayed = Path(again.trace_path or "").with_name("hr-1-s0.calls.ndjson")
    assert json.loads(replayed.read_text(encoding="utf-8").splitlines()[0])["latency"] is None


def test_failed_and_judge_calls_are_recorded(d1: World, provider: Scripted,
                                            tmp_path: Path) -> None:
    provider.script = _fails
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path / "a", llm=settings(retries=0))
    calls = read_trace(Path(r.trace_path or "")).header.model_calls or []
    assert len(calls) == 1 and "BadRequestError" in calls[0]["error"]
    assert "reply" not in calls[0]
    provider.script = lambda messages, params: respond("not JSON at all")
    j = run_episode(d1, "canonical", "hr-1", 0, "sim:reckless", tmp_path / "b",
                    llm=LLMSettings(judge_model=JUDGE, retries=0))
    judged = read_trace(Path(j.trace_path or "")).header.model_calls or []
    assert judged and all(c["participant"] == "judge" and c["model"] == JUDGE for c in judged)
    assert judged[0]["reply"] == "not JSON at all" and judged[0]["rubric"].startswith("rubric")
