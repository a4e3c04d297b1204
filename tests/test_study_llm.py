"""Studies of LLM models, offline: two scripted litellm "models" through the real agent path.

A `CustomLLM` (tests/scripted_llm.py) registered under the provider `studyscripted`
plays two models: `steady` delegates and relays like a careful assistant; `flaky`
answers at once without delegating, and fails 3 of every 10 calls it gets (a server error, no
retries). No network anywhere.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm import ModelResponse
from scripted_llm import Script, Scripted, installed, respond, tool_names

from eairdsl.agents.llm import LLMSettings
from eairdsl.api import UsageError, resolve_world
from eairdsl.ir import World
from eairdsl.study.executor import CASSETTES_DIR, StudyProgress, run_study
from eairdsl.study.grid import Attempt, GridError, parse_models, plan_world
from eairdsl.study.store import STORE_FILE, Store

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
PROVIDER_NAME = "studyscripted"
STEADY, FLAKY = f"{PROVIDER_NAME}/steady", f"{PROVIDER_NAME}/flaky"
MODELS = f"steady={STEADY},flaky={FLAKY}"
KEY = ("world", "model", "condition", "instance", "seed", "rep", "attempt")

pytestmark = [pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning"),
              # episodes cancelled by an interruption leave the provider's coroutine unrun
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited"),
              # litellm's logging worker, cancelled with the study's event loop
              pytest.mark.filterwarnings(
                  "ignore:Exception ignored in.*LoggingWorker"
                  ":pytest.PytestUnraisableExceptionWarning")]


def _results(messages: list[dict[str, Any]]) -> list[Any]:
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"
              and str(m.get("content", "")).startswith(("Message from", "Request delegated"))]
    turn = messages[starts[-1]:] if starts else messages
    return [m["content"] for m in turn if m["role"] == "tool"]


def _steady(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
    tools = tool_names(params)
    results = _results(messages)
    if "delegate" in tools:
        if not results:
            return respond(calls=[("delegate", {"question": "How is Jordan Lee doing?"})])
        return respond(f"The specialist says: {results[-1]}")
    read = next((t for t in tools if t.endswith("_read")), None)
    if read is None:
        return respond("Nothing to look up.")
    if not results:
        hint = params["tools"][tools.index(read)]["function"]["parameters"]["properties"]["id"]
        return respond(calls=[(read, {"id": hint["description"].removeprefix("e.g. ")})])
    return respond(f"Record: {results[-1]}", tokens=(150, 30))


def _flaky(provider: Scripted) -> Script:
    """Answers at once without delegating; fails 3 of every 10 calls (a server error)."""
    def script(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        if (provider.calls["flaky"] * 7) % 10 < 3:  # 3 calls in 10
            raise litellm.InternalServerError(message="flaky model down",
                                              llm_provider=PROVIDER_NAME, model="flaky")
        return respond("I cannot look that up, sorry.", tokens=(80, 10))
    return script


@pytest.fixture
def provider() -> Iterator[Scripted]:
    """`steady` and `flaky`; counts the calls it answered (`calls`) and refused (`failed`)."""
    with installed(PROVIDER_NAME, by_model={"steady": _steady}, snapshot=False) as handler:
        handler.by_model["flaky"] = _flaky(handler)
        yield handler


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(D1)


def _llm(**kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"timeout": 5.0, "retries": 0, "backoff_base": 0.001,
                            "backoff_max": 0.01, "max_connections": 4}
    base.update(kw)
    return LLMSettings(**base)


def _rows(out: Path) -> list[dict[str, Any]]:
    with Store.open(out / STORE_FILE, create=False) as store:
        return store.rows()


def _keyed(out: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in KEY): {k: v for k, v in r.items() if k != "id"}
            for r in _rows(out)}


def _traces(out: Path) -> dict[str, bytes]:
    base = out / "traces"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*.jsonl")}


class StopAfter(StudyProgress):
    """Interrupts the study (as Ctrl-C would) once `k` attempts are recorded."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.seen = 0

    def attempt(self, attempt: Attempt, result: dict[str, Any], cell_done: bool) -> None:
        self.seen += 1
        if self.seen >= self.k:
            raise KeyboardInterrupt


def _plan(d1: World) -> list[Any]:
    return [plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 4)]


# ---------------------------------------------------------------- the grid
def test_models_take_litellm_strings_beside_sim_profiles() -> None:
    models = parse_models(f"sim,mini=openai/gpt-4o-mini,{STEADY}", shifts="both")
    assert [(m.name, m.agents, m.llm) for m in models] == [
        ("sim", "sim", None), ("sim:mechanics", "sim:mechanics", None),
        ("mini", "llm:openai/gpt-4o-mini", "openai/gpt-4o-mini"),  # no mechanics twin
        (STEADY, f"llm:{STEADY}", STEADY)]
    assert parse_models("llm:ollama/llama3.1")[0].llm == "ollama/llama3.1"
    with pytest.raises(GridError, match="nor a litellm model string"):
        parse_models("gpt4")
    with pytest.raises(GridError, match="given twice"):
        parse_models(f"a={STEADY},a={FLAKY}")


# ---------------------------------------------------------------- studies
def test_two_model_study_interrupted_resumed_and_replayed(d1: World, provider: Scripted,
                                                          tmp_path: Path) -> None:
    models = parse_models(MODELS)
    # The reference: the same study, uninterrupted.
    ref = tmp_path / "ref"
    summary = run_study([d1], _plan(d1), models, ref, llm=_llm(record=ref / CASSETTES_DIR))
    assert summary.executor == "async" and summary.cells == 16
    assert provider.failed["flaky"] > 0 and not provider.failed["steady"]
    rows = _rows(ref)
    assert {r["model"] for r in rows} == {"steady", "flaky"}
    steady = [r for r in rows if r["model"] == "steady"]
    flaky = [r for r in rows if r["model"] == "flaky"]
    assert len(steady) == 8 and all(r["valid"] for r in steady)
    assert all(r["agents"] == f"llm:{STEADY}" for r in steady)
    assert all(json.loads(r["usage"])["total"]["calls"] > 0 for r in steady)
    # the flaky model's failed calls are execution-invalid attempts, retried with a
    # fresh seed under the first-success rule; the first valid one is retained
    invalid = [r for r in flaky if not r["valid"]]
    assert invalid and all("flaky model down" in (r["validity_reason"] or "") for r in invalid)
    assert len(flaky) == 8 + sum(1 for r in invalid if r["attempt"] < 2)
    for r in invalid:
        later = [o for o in flaky if all(o[k] == r[k] for k in KEY[:-1])
                 and o["attempt"] == r["attempt"] + 1]
        assert r["attempt"] == 2 or len(later) == 1
        assert not any(o["retained"] for o in flaky if all(o[k] == r[k] for k in KEY)
                       and not o["valid"])
    # the models behave differently: only steady delegates and relays the record
    assert {r["utility"] for r in steady} != {r["utility"] for r in flaky if r["valid"]}

    # Interrupted after 5 attempts, then resumed: nothing lost, nothing twice.
    study = tmp_path / "study"
    with pytest.raises(KeyboardInterrupt):
        run_study([d1], _plan(d1), models, study, llm=_llm(record=study / CASSETTES_DIR),
                  progress=StopAfter(5))
    partial = _keyed(study)
    assert len(partial) == 5
    assert not (study / CASSETTES_DIR / ".parts").exists()  # merged when interrupted
    resumed = run_study([d1], _plan(d1), models, study, llm=_llm(record=study / CASSETTES_DIR))
    final = _keyed(study)
    assert resumed.cells == 16 and resumed.skipped >= 1
    assert resumed.attempts == len(final) - len(partial)
    assert {k: final[k] for k in partial} == partial  # the rows before the stop are kept
    assert len(_rows(study)) == len(final)  # no cell attempt twice
    # every cell: its attempts 0..n-1, invalid ones only before the last, the last valid
    # unless the bound was reached; the retained one is the first valid
    by_cell: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for key, row in sorted(final.items()):
        by_cell.setdefault(key[:-1], []).append(row)
    assert len(by_cell) == 16 and {c[1] for c in by_cell} == {"steady", "flaky"}
    for attempts in by_cell.values():
        assert [r["attempt"] for r in attempts] == list(range(len(attempts)))
        assert all(not r["valid"] for r in attempts[:-1])
        assert attempts[-1]["valid"] or len(attempts) == 3
        assert [r["retained"] for r in attempts] == [bool(r["valid"]) for r in attempts]
    steady_rows = {k: v for k, v in final.items() if k[1] == "steady"}
    assert steady_rows == {k: v for k, v in _keyed(ref).items() if k[1] == "steady"}
    assert any(not r["valid"] for r in final.values())
    # each recorded exchange of the steady model is in the cassette once, as uninterrupted
    got = (study / CASSETTES_DIR / "steady.jsonl").read_text().splitlines()
    want = (ref / CASSETTES_DIR / "steady.jsonl").read_text().splitlines()
    assert sorted(got) == sorted(want)
    flaky_lines = (study / CASSETTES_DIR / "flaky.jsonl").read_text().splitlines()
    flaky_calls = sum(json.loads(r["usage"])["total"]["calls"] if r["usage"] else 0
                      for k, r in final.items() if k[1] == "flaky")
    failures = sum(1 for line in flaky_lines if "error" in json.loads(line))
    assert len(flaky_lines) == flaky_calls + failures

    # Replayed from the resumed study's cassettes: no call, byte-identical traces.
    provider.refuse = True
    replayed = tmp_path / "replayed"
    again = run_study([d1], _plan(d1), models, replayed,
                      llm=_llm(replay=study / CASSETTES_DIR))
    assert again.attempts == len(final)
    assert _traces(replayed) == _traces(study)
    replayed_rows = _keyed(replayed)
    for row in (*replayed_rows.values(), *final.values()):
        row.pop("created", None)
    assert replayed_rows == final


def test_llm_episodes_run_concurrently_bounded_per_provider(d1: World, provider: Scripted,
                                                            tmp_path: Path) -> None:
    provider.delay = 0.05
    started = time.perf_counter()
    summary = run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], 8)],
                        parse_models(f"steady={STEADY}"), tmp_path, llm=_llm(max_connections=3))
    seconds = time.perf_counter() - started
    assert summary.attempts == 8 and summary.invalid_attempts == 0
    assert provider.peak == 3  # many episodes at once, requests bounded per provider
    assert provider.calls["steady"] == 32
    assert seconds < 32 * 0.05  # far below one call at a time


def test_a_replay_miss_stops_the_study_unrecorded(d1: World, provider: Scripted,
                                                  tmp_path: Path) -> None:
    models = parse_models(f"steady={STEADY}")
    rec = tmp_path / "rec"
    run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], 1)], models, rec,
              llm=_llm(record=rec / CASSETTES_DIR))
    provider.refuse = True
    with pytest.raises(UsageError, match="has no response"):  # seed 1 was never recorded
        run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], 2)], models, tmp_path / "r",
                  llm=_llm(replay=rec / CASSETTES_DIR))
    with pytest.raises(UsageError, match="does not exist"):
        run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], 1)],
                  parse_models(f"other={FLAKY}"), tmp_path / "r2",
                  llm=_llm(replay=rec / CASSETTES_DIR))


def test_cli_study_mixes_sim_and_llm_models_and_replays(provider: Scripted,
                                                        tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from eairdsl.cli import app

    out = tmp_path / "study"
    args = ["study", str(D1), "--conditions", "canonical", "--instances", "hr-1",
            "--seeds", "2", "--workers", "1", "--max-connections", "2", "--retries", "0",
            "--max-tokens", "64",
            "--models", f"sim,steady={STEADY},flaky={FLAKY}"]
    runner = CliRunner()
    first = runner.invoke(app, [*args, "--out", str(out), "--record"])
    assert first.exit_code == 0, first.output
    assert {r["model"] for r in _rows(out)} == {"sim", "steady", "flaky"}
    lines = (out / CASSETTES_DIR / "steady.jsonl").read_text().splitlines()
    assert lines and all(json.loads(line)["request"]["max_tokens"] == 64 for line in lines)
    provider.refuse = True
    second = runner.invoke(app, [*args, "--out", str(tmp_path / "again"), "--replay", str(out)])
    assert second.exit_code == 0, second.output
    assert _traces(tmp_path / "again") == _traces(out)
    bad = runner.invoke(app, ["study", str(D1), "--models", "sim", "--judge-model", STEADY,
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and "need an LLM model" in bad.output


def test_a_killed_recording_is_merged_when_the_study_resumes(
        d1: World, provider: Scripted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from eairdsl.study import executor

    models = parse_models(f"steady={STEADY}")
    plan = [plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 3)]
    ref = tmp_path / "ref"
    run_study([d1], plan, models, ref, llm=_llm(record=ref / CASSETTES_DIR))
    study = tmp_path / "study"
    merge = executor._merge_cassettes
    monkeypatch.setattr(executor, "_merge_cassettes", lambda folder, store: None)  # a kill
    with pytest.raises(KeyboardInterrupt):
        run_study([d1], plan, models, study, llm=_llm(record=study / CASSETTES_DIR),
                  progress=StopAfter(2))
    assert list((study / CASSETTES_DIR / ".parts").rglob("*.jsonl"))
    monkeypatch.setattr(executor, "_merge_cassettes", merge)
    run_study([d1], plan, models, study, llm=_llm(record=study / CASSETTES_DIR))
    assert not (study / CASSETTES_DIR / ".parts").exists()
    got = (study / CASSETTES_DIR / "steady.jsonl").read_text().splitlines()
    assert sorted(got) == sorted((ref / CASSETTES_DIR / "steady.jsonl").read_text().splitlines())
    assert _traces(study) == _traces(ref)


def test_a_token_budget_stops_scheduling_and_leaves_the_study_resumable(
        d1: World, provider: Scripted, tmp_path: Path) -> None:
    from eairdsl.study.executor import Budget, spend

    models = parse_models(f"steady={STEADY},flaky={FLAKY}")
    plan = [plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 4)]
    one = tmp_path / "one"
    run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], 1)], models[:1], one, llm=_llm())
    (only,) = spend(_rows(one)).values()
    tokens = only["tokens_in"] + only["tokens_out"]
    limit = 3 * tokens
    out = tmp_path / "study"
    summary = run_study([d1], plan, models, out, llm=_llm(max_connections=8),
                        budget=Budget(tokens=limit))
    rows = _rows(out)
    used = sum(v["tokens_in"] + v["tokens_out"] for v in spend(rows).values())
    assert summary.stopped and "budget reached" in summary.stopped and "tokens" in summary.stopped
    assert summary.left > 0 and not summary.complete
    assert limit <= used <= limit + 2 * tokens  # concurrency does not overshoot by a wave
    assert len(rows) < 16
    # the same budget: nothing more is scheduled
    again = run_study([d1], plan, models, out, llm=_llm(), budget=Budget(tokens=limit))
    assert again.attempts == 0 and again.stopped
    # no budget: the rest runs, nothing twice
    rest = run_study([d1], plan, models, out, llm=_llm())
    assert rest.stopped is None and rest.attempts > 0
    final = _rows(out)
    assert len({tuple(r[k] for k in KEY) for r in final}) == len(final)
    cells = {tuple(r[k] for k in KEY[:-1]) for r in final}
    assert len(cells) == 16
    by_model = {m: v for (_, m), v in spend(final).items()}
    assert set(by_model) == {"steady", "flaky"} and by_model["steady"]["calls"] == 32


def test_cli_budget_says_so(provider: Scripted, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from eairdsl.cli import app

    out = tmp_path / "study"
    result = CliRunner().invoke(app, [
        "study", str(D1), "--conditions", "canonical", "--instances", "hr-1", "--seeds", "4",
        "--models", f"steady={STEADY}", "--budget-tokens", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "budget reached" in result.output and "3 cell(s) left open" in result.output
    assert "llm spend d1 · steady:" in result.output
    assert len(_rows(out)) == 1
