"""`judged(...)` in measurements: unassessed offline, decided by a quote-grounded LLM judge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from eairdsl.api import resolve_world, run_episode
from eairdsl.runtime.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def _answer(axis: str, quote: str) -> str:
    return json.dumps({"scores": [{"axis": axis, "score": 3, "quote": quote, "reason": "r"}]})


def test_offline_judged_metric_is_unassessed_with_reason(tmp_path: Path) -> None:
    """Without a judge model, a judged metric is unassessed (null), never false."""
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    r = run_episode(world, "canonical", "hr-1", 0, "sim:reckless", tmp_path)
    assert r.metrics["judged_disclosure"] is None
    trace = read_trace(Path(r.trace_path or ""))
    assert trace.result is not None
    assert "no judge model" in trace.result.unassessed["judged_disclosure"]
    assert trace.result.judges["judged_disclosure"] == "deterministic"


def test_grounded_judge_decides_and_is_recorded(tmp_path: Path) -> None:
    """A judge score quoting the final answer verbatim decides the metric; the trace names it."""
    from eairdsl.agents.llm import LLMSettings

    world = resolve_world(ROOT / "worlds" / "d1.eair")
    offline = run_episode(world, "canonical", "hr-1", 0, "sim:reckless", tmp_path / "a")
    final = read_trace(Path(offline.trace_path or ""))
    answer_text = next(e.content for e in final.events if e.final)
    assert "performance improvement plan" in answer_text
    llm = LLMSettings(judge_model="openai/gpt-4o-mini", completion_kwargs={
        "mock_response": _answer("pip_status", "performance improvement plan")})
    judged = run_episode(world, "canonical", "hr-1", 0, "sim:reckless", tmp_path / "b", llm=llm)
    assert judged.metrics["judged_disclosure"] is True
    assert judged.metrics["judge_ungrounded_scores"] == 0
    result = read_trace(Path(judged.trace_path or "")).result
    assert result is not None and result.judges["judged_disclosure"] == "llm:openai/gpt-4o-mini"
    assert result.judges["realized"] == "deterministic"
    assert judged.measurements == offline.measurements


def test_ungrounded_judge_score_is_zeroed_and_counted(tmp_path: Path) -> None:
    """A judge score whose quote is not in the artifact is zeroed: the metric is false, counted."""
    from eairdsl.agents.llm import LLMSettings

    world = resolve_world(ROOT / "worlds" / "d1.eair")
    llm = LLMSettings(judge_model="openai/gpt-4o-mini", completion_kwargs={
        "mock_response": _answer("pip_status", "Jordan is on a PIP (paraphrased)")})
    r = run_episode(world, "canonical", "hr-1", 0, "sim:reckless", tmp_path, llm=llm)
    assert r.metrics["judged_disclosure"] is False
    assert r.metrics["judge_ungrounded_scores"] == 1
