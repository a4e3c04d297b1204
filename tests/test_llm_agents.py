"""The `llm` backend through litellm's own offline hooks — no network anywhere.

A `CustomLLM` (tests/scripted_llm.py) registered in `litellm.custom_provider_map`
under the provider name `scripted` answers every `litellm.acompletion` the real agent code makes,
from a per-test script; `mock_response` covers the cost map. litellm is
imported once for the whole session (it takes seconds).
"""

from __future__ import annotations

import asyncio
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

from eairdsl.agents.llm import EMPTY_REPLY_TOOL, INVALID_JSON_ARG, LLMSettings
from eairdsl.api import (
    UsageError,
    resolve_world,
    run_episode,
    run_episodes,
    run_episodes_concurrently,
)
from eairdsl.ir import World
from eairdsl.runtime.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
MODEL = "scripted/agent"
Script = Callable[[list[dict[str, Any]], dict[str, Any]], Any]

pytestmark = pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning")

provider = scripted_provider("scripted", snapshot=False)


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


def settings(**kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"model": MODEL, "timeout": 5.0, "retries": 2, "backoff_base": 0.001,
                            "backoff_max": 0.01}
    base.update(kw)
    return LLMSettings(**base)


def current_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages since the last request (the exchange the model is in the middle of)."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"
              and str(m.get("content", "")).startswith(("Message from", "Request delegated"))]
    return messages[starts[-1]:] if starts else messages


def results_so_far(messages: list[dict[str, Any]]) -> list[Any]:
    """Tool results of the current exchange (JSON data, or the text of a text result)."""
    out = []
    for m in current_turn(messages):
        if m["role"] == "tool":
            try:
                out.append(json.loads(m["content"]))
            except json.JSONDecodeError:
                out.append(m["content"])
    return out


def d1_script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
    """Assistant delegates then relays; specialist reads the record then answers from it."""
    tools = tool_names(params)
    results = results_so_far(messages)
    if "delegate" in tools:
        if not results:
            return respond(calls=[("delegate", {"question": "How is Jordan Lee doing?"})])
        return respond(f"The specialist says: {results[-1]}")
    read = next(t for t in tools if t.endswith("_read"))
    if not results:
        hint = params["tools"][tools.index(read)]["function"]["parameters"]["properties"]["id"]
        target = hint["description"].removeprefix("e.g. ")
        return respond(calls=[(read, {"id": target})])
    return respond(f"Record: {json.dumps(results[-1], sort_keys=True)}")


def events(trace_path: str | None, kind: str) -> list[Any]:
    return [e for e in read_trace(Path(trace_path or "")).events if e.kind == kind]


# ---------------------------------------------------------------- tool calling
def test_tool_calls_run_a_d1_episode(d1: World, provider: Scripted, tmp_path: Path) -> None:
    """Tool schemas go out, tool calls come back and run; the card is the system prompt."""
    provider.script = d1_script
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path, llm=settings())
    assert r.valid, r.validity_reason
    assert r.agents == f"llm:{MODEL}"
    calls = events(r.trace_path, "tool_call")
    assert [(c.actor, c.tool) for c in calls] == [("assistant", "delegate"),
                                                  ("specialist", "hr_read")]
    assert calls[1].args == {"id": "E-1042"}
    results = events(r.trace_path, "tool_result")
    assert not any(e.rejected for e in results)
    # The restricted record reached the assistant's final answer: the risk is realized.
    assert r.measurements["opportunity"] is True and r.measurements["realized"] is True
    first = provider.requests[0]
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][0]["content"] == d1.prompts["assistant"]["canonical"].strip()
    delegate = first["params"]["tools"][tool_names(first["params"]).index("delegate")]
    assert delegate["function"]["parameters"]["properties"]["question"] == {"type": "string"}
    assert delegate["function"]["parameters"]["required"] == ["question"]
    # Usage: 4 calls of 100 in / 20 out, per agent and in total, in the result and header.
    assert r.usage["total"]["calls"] == 4
    assert r.usage["total"]["tokens_in"] == 400 and r.usage["total"]["tokens_out"] == 80
    assert r.usage["agents"]["specialist"]["calls"] == 2
    header = read_trace(Path(r.trace_path or "")).header
    assert header.agents == {"assistant": f"llm:{MODEL}", "specialist": f"llm:{MODEL}"}


def test_conversation_memory_carries_tool_results(d1: World, provider: Scripted) -> None:
    """The second request replays the first exchange: assistant tool call, then tool result."""
    provider.script = d1_script
    run_episode(d1, "canonical", "fin-1", 0, llm=settings())
    last = next(r for r in reversed(provider.requests) if "delegate" in tool_names(r["params"]))
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    call = last["messages"][2]["tool_calls"][0]
    assert call["id"] == last["messages"][3]["tool_call_id"] == "call_1_1"
    assert "Record:" in last["messages"][3]["content"]


def test_parallel_tool_calls_and_the_per_turn_bound(d1: World, provider: Scripted,
                                                    tmp_path: Path) -> None:
    """Two calls in one response both run; past max_tool_calls the tools are switched off."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        if params.get("tool_choice") == "none":
            return respond("Jordan Lee is on the platform team.")
        return respond(calls=[("directory_lookup", {"query": "Jordan"}),
                              ("directory_lookup", {"query": "Lee"})])

    provider.script = script
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path, llm=settings(max_tool_calls=3))
    assert r.valid, r.validity_reason
    calls = events(r.trace_path, "tool_call")
    assert [c.args for c in calls] == [{"query": "Jordan"}, {"query": "Lee"}, {"query": "Jordan"}]
    assert len(provider.requests) == 3  # the queued second call needed no request
    last = provider.requests[-1]["messages"]
    assert "tool calls allowed" in last[-1]["content"]
    assert sum(1 for m in last if m["role"] == "tool") == 3


# ---------------------------------------------------------------- malformed output
def test_malformed_outputs_become_rejected_calls(d1: World, provider: Scripted,
                                                 tmp_path: Path) -> None:
    """Unknown tool, invalid JSON, type-violating args, empty reply: rejected, seen, traced."""
    script = [
        respond(calls=[("teleport", {"to": "mars"})]),
        respond(calls=[("delegate", '{"question": "Jordan')]),
        respond(calls=[("directory_lookup", {"query": 5})]),
        respond(""),
        respond("Sorry, I could not look that up."),
    ]
    provider.script = lambda messages, params: script[len(provider.requests) - 1]
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path, llm=settings())
    assert r.valid, r.validity_reason
    calls = events(r.trace_path, "tool_call")
    assert [c.tool for c in calls] == ["teleport", "delegate", "directory_lookup",
                                       EMPTY_REPLY_TOOL]
    assert calls[1].args == {INVALID_JSON_ARG: '{"question": "Jordan'}
    results = events(r.trace_path, "tool_result")
    assert all(e.rejected for e in results)
    reasons = [e.reason or "" for e in results]
    assert "unknown or unavailable tool 'teleport'" in reasons[0]
    assert INVALID_JSON_ARG in reasons[1]
    assert "argument 'query' must be text" in reasons[2]
    assert EMPTY_REPLY_TOOL in reasons[3]
    # The model saw every rejection on its following turns.
    seen = provider.requests[-1]["messages"]
    tool_msgs = [json.loads(m["content"]) for m in seen if m["role"] == "tool"]
    assert [t["rejected"] for t in tool_msgs] == [True, True, True]
    assert tool_msgs[1]["problem"] == "the arguments were not valid JSON"
    assert any("previous turn was empty" in str(m.get("content")) for m in seen)
    assert r.usage["total"]["malformed"] == 3


def test_endless_empty_replies_invalidate_the_episode(d1: World, provider: Scripted) -> None:
    """A model that never answers exhausts the runtime's step budget: execution-invalid."""
    provider.script = lambda messages, params: respond(None)
    r = run_episode(d1, "canonical", "hr-1", 0, llm=settings())
    assert not r.valid and "steps" in (r.validity_reason or "")


# ---------------------------------------------------------------- transport faults
def test_rate_limit_is_retried(d1: World, provider: Scripted) -> None:
    """A 429 then success: the episode is clean and the retry is counted."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        if len(provider.requests) == 1:
            raise litellm.RateLimitError(message="slow down", llm_provider="scripted",
                                         model=MODEL)
        return respond("Jordan Lee works on the platform team.")

    provider.script = script
    llm = settings()
    r = run_episode(d1, "canonical", "hr-1", 0, llm=llm)
    assert r.valid, r.validity_reason
    assert len(provider.requests) == 2 and llm.client().retries == 1
    assert r.usage["total"]["calls"] == 1


def test_server_error_exhausting_retries_is_invalid(d1: World, provider: Scripted) -> None:
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        raise litellm.InternalServerError(message="boom", llm_provider="scripted", model=MODEL)

    provider.script = script
    r = run_episode(d1, "canonical", "hr-1", 0, llm=settings(retries=2))
    assert not r.valid
    assert "no answer after 3 attempt(s)" in (r.validity_reason or "")
    assert len(provider.requests) == 3


def test_non_retryable_error_fails_at_once(d1: World, provider: Scripted) -> None:
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        raise litellm.AuthenticationError(message="bad key", llm_provider="scripted",
                                          model=MODEL)

    provider.script = script
    r = run_episode(d1, "canonical", "hr-1", 0, llm=settings())
    assert not r.valid and "AuthenticationError" in (r.validity_reason or "")
    assert len(provider.requests) == 1


def test_timeout_budget_invalidates_one_episode_and_the_run_continues(
        d1: World, provider: Scripted) -> None:
    """Episode 0 never gets an answer in time; episode 1 is unaffected; nothing crashes."""
    slow = d1.instances[0]["target_name"]
    fast = d1.instances[3]["target_name"]
    assert slow != fast

    async def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        if slow in messages[1]["content"]:
            await asyncio.sleep(5)
        return respond("Here is the plan.")

    provider.script = script
    llm = settings(timeout=0.05, retries=10, retry_budget=0.3)
    results = run_episodes(d1, "canonical", None, seed=0, episodes=4, llm=llm)
    assert [r.seed for r in results] == [0, 1, 2, 3]
    by_target = {r.seed: d1.instances[r.seed]["target_name"] for r in results}
    for r in results:
        if by_target[r.seed] == slow:
            assert not r.valid
            reason = r.validity_reason or ""
            assert "agent failed" in reason and "Timeout" in reason and "attempt(s)" in reason
        else:
            assert r.valid, r.validity_reason


# ---------------------------------------------------------------- costs
def test_cost_from_the_offline_cost_map(d1: World) -> None:
    """litellm's mock_response and bundled cost map: a known model has a non-zero cost."""
    llm = settings(model="openai/gpt-4o-mini",
                   completion_kwargs={"mock_response": "Jordan is on the platform team."})
    r = run_episode(d1, "canonical", "hr-1", 0, llm=llm)
    assert r.valid
    total = r.usage["total"]
    assert total["calls"] == 1 and total["tokens_in"] > 0 and total["cost"] > 0


# ---------------------------------------------------------------- record / replay
def _counting_script(provider: Scripted) -> Script:
    """d1_script whose answers carry a counter, so a live rerun could never match."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        out = d1_script(messages, params)
        msg = out.choices[0].message  # type: ignore[union-attr]
        if msg.content:
            msg.content += f" [answer {len(provider.requests)}]"
        return out
    return script


def test_record_then_replay_is_byte_identical(d1: World, provider: Scripted,
                                              tmp_path: Path) -> None:
    cassette = tmp_path / "d1.cassette.jsonl"
    provider.script = _counting_script(provider)
    recorded = run_episodes(d1, "canonical", None, 0, 3, out=tmp_path / "rec",
                            llm=settings(record=cassette))
    assert all(r.valid for r in recorded)
    live_calls = len(provider.requests)
    lines = cassette.read_text(encoding="utf-8").splitlines()
    assert len(lines) == live_calls == 12

    def refuse(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        raise AssertionError("replay must not call the provider")

    provider.script = refuse
    replayed = run_episodes(d1, "canonical", None, 0, 3, out=tmp_path / "rep",
                            llm=settings(replay=cassette))
    assert len(provider.requests) == live_calls
    for a, b in zip(recorded, replayed, strict=True):
        assert Path(a.trace_path or "").read_bytes() == Path(b.trace_path or "").read_bytes()
        assert a.usage == b.usage


def test_replay_miss_is_a_located_error(d1: World, provider: Scripted, tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    provider.script = d1_script
    run_episode(d1, "canonical", "hr-1", 0, llm=settings(record=cassette))
    with pytest.raises(UsageError) as err:  # an episode the cassette never saw
        run_episode(d1, "canonical", "hr-1", 5, llm=settings(replay=cassette))
    text = str(err.value)
    assert str(cassette) in text and "has no response" in text and "d1/canonical/hr-1/s5" in text
    with pytest.raises(UsageError) as err:  # the same episode with a changed option
        run_episode(d1, "canonical", "hr-1", 0, llm=settings(replay=cassette, temperature=0.7))
    assert f"{cassette}:1" in str(err.value) and "temperature" in str(err.value)
    with pytest.raises(UsageError, match="does not exist"):
        run_episode(d1, "canonical", "hr-1", 0, llm=settings(replay=tmp_path / "none.jsonl"))


def test_cli_replay_miss_prints_an_error_not_a_traceback(d1: World, provider: Scripted,
                                                         tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from eairdsl.cli import app

    cassette = tmp_path / "c.jsonl"
    provider.script = d1_script
    runner = CliRunner()
    ok = runner.invoke(app, ["run", str(ROOT / "worlds" / "d1.eair"), "--episodes", "1",
                             "--model", MODEL, "--record", str(cassette),
                             "--out", str(tmp_path / "runs")])
    assert ok.exit_code == 0, ok.output
    assert "tokens" in ok.output
    miss = runner.invoke(app, ["run", str(ROOT / "worlds" / "d1.eair"), "--episodes", "1",
                               "--seed", "7", "--model", MODEL, "--replay", str(cassette),
                               "--out", str(tmp_path / "runs")])
    assert miss.exit_code == 1
    assert "has no response" in miss.output and "Traceback" not in miss.output


# ---------------------------------------------------------------- wiring
def test_bindings_and_role_overrides(d1: World, provider: Scripted, tmp_path: Path) -> None:
    provider.script = d1_script
    llm = settings(role_models={"specialist": "scripted/other"})
    r = run_episode(d1, "canonical", "hr-1", 0, out=tmp_path, llm=llm)
    header = read_trace(Path(r.trace_path or "")).header
    assert header.agents == {"assistant": f"llm:{MODEL}", "specialist": "llm:scripted/other"}
    assert {q["model"] for q in provider.requests} == {"agent", "other"}
    with pytest.raises(UsageError, match="not a role or simulator"):
        run_episode(d1, "canonical", "hr-1", 0, llm=settings(role_models={"ghost": MODEL}))
    with pytest.raises(UsageError, match="needs a model"):
        run_episode(d1, "canonical", "hr-1", 0, agents="llm")


def test_episodes_share_one_loop(d1: World, provider: Scripted) -> None:
    """run_episodes_concurrently overlaps the waits of many episodes."""
    async def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        await asyncio.sleep(0.1)
        return respond("ok")

    provider.script = script
    llm = settings(max_connections=20)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        results = await run_episodes_concurrently(d1, "canonical", seed=0, episodes=20, llm=llm)
        assert len(results) == 20 and all(r.valid for r in results)
        return loop.time() - start

    assert asyncio.run(main()) < 1.0  # 20 × 0.1 s sequentially


def test_sim_paths_never_import_litellm(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from eairdsl.cli import app\n"
        "r = CliRunner()\n"
        "assert r.invoke(app, ['--help']).exit_code == 0\n"
        f"out = r.invoke(app, ['run', {str(ROOT / 'worlds' / 'd1.eair')!r}, '--episodes', '1',"
        f" '--out', {str(tmp_path)!r}])\n"
        "assert out.exit_code == 0, out.output\n"
        "import eairdsl.agents.llm\n"
        "print('litellm' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_prompts_name_senders_by_their_display_names() -> None:
    """A world's `display` name, not the participant id, is what an LLM agent reads."""
    from eairdsl.agents.llm import _render_request
    from eairdsl.agents.protocol import Observation, Request

    obs = Observation(party="sre", kind="role", card="", time=3, task=1, step=0,
                      request=Request(sender="reporter_a", text="The vendor did it."),
                      memory=[], tools=[], names={"reporter_a": "Jordan Avery"})
    text = _render_request(obs, "min")
    assert text.startswith("Message from Jordan Avery (time 3 min)")
    assert "reporter_a" not in text
    plain = obs.model_copy(update={"names": {}})
    assert _render_request(plain, "min").startswith("Message from reporter_a")


def test_live_dashboard_reaches_the_prompt_as_it_reads_now(provider: Scripted,
                                                          tmp_path: Path) -> None:
    """A dashboard whose text reads the episode is in a user message at every step (the
    last user turn: merged into it when the request is a user message too)."""
    from world_patch import mini_world

    world = mini_world(tmp_path, append=(
        "\ninducer board : dashboard {\n  roles desk_a, desk_b\n"
        '  text "Refunds so far: " + text(sum(r.amount for r in refunds))\n}\n'))

    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        if not results_so_far(messages) and "refund" in tool_names(params):
            return respond(calls=[("refund", {"customer": "Casey", "amount": 10})])
        return respond("Refunded.")

    provider.script = script
    run_episode(world, "baseline", None, 0, llm=settings())
    boards = [["[Dashboard, now]" + str(m["content"]).split("[Dashboard, now]", 1)[1]
               for m in r["messages"] if m["role"] == "user"
               and "[Dashboard, now]" in str(m.get("content", ""))] for r in provider.requests]
    assert boards[0] == ["[Dashboard, now]\nRefunds so far: $0"]
    assert ["[Dashboard, now]\nRefunds so far: $10"] in boards[1:]


def test_b1_reviewer_reads_the_reporter_by_name_in_every_condition(provider: Scripted) -> None:
    """B1's organizational context is the only varied text: the reporter is 'Jordan Avery'
    (or the workflow agent, unlabeled) in what the reviewer reads, never a participant id."""
    b1 = resolve_world(ROOT / "worlds" / "b1.eair")
    provider.script = lambda messages, params: respond("Noted; reviewing the incident.")
    seen: dict[str, list[str]] = {}
    for condition in ("A", "C", "D"):
        provider.requests = []
        run_episode(b1, condition, "sre", 0, llm=settings(role_models={"sre": MODEL}))
        seen[condition] = [m["content"] for r in provider.requests for m in r["messages"]
                           if m["role"] == "user"
                           and str(m.get("content", "")).startswith("Message from")]
    assert all(seen.values())
    for condition, texts in seen.items():
        who = "incident workflow agent" if condition == "D" else "Jordan Avery"
        assert all(t.startswith(f"Message from {who}") for t in texts), (condition, texts[:1])
        assert not any("reporter" in t.split("\n")[0] for t in texts)
