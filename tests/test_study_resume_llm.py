"""A resumed LLM study must be run with its first run's LLM options.

The stored episodes were answered by particular models under particular
sampling options and endpoint; resuming with others would mix two studies in
one store. The first run keeps its options in the store (meta `llm_options`);
a resume with any other refuses in one line that names each difference. A new
model column may be added; transport limits (connections, timeout, retries)
may change. Offline: litellm's custom-provider hook answers.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from scripted_llm import Scripted, installed, respond

from eairdsl.agents.llm import LLMSettings
from eairdsl.api import resolve_world
from eairdsl.ir import World
from eairdsl.study.executor import LLM_OPTIONS_KEY, StudyError, run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.store import STORE_FILE

ROOT = Path(__file__).resolve().parents[1]
PROVIDER = "resumescripted"
A, B, C = (f"{PROVIDER}/{n}" for n in ("alpha", "beta", "gamma"))

pytestmark = pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning")


def _terse(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
    """Every model answers at once, in text."""
    return respond("I cannot say.", tokens=(10, 3))


@pytest.fixture
def provider() -> Iterator[Scripted]:
    """`_terse` for every model; `requests` are the calls it got."""
    with installed(PROVIDER, script=_terse, snapshot=False) as handler:
        yield handler


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(ROOT / "worlds" / "d1.eair")


def _llm(**kw: Any) -> LLMSettings:
    base: dict[str, Any] = {"timeout": 5.0, "retries": 0, "max_connections": 4,
                            "temperature": 0.0, "max_tokens": 64}
    base.update(kw)
    return LLMSettings(**base)


def _run(d1: World, out: Path, models: str, seeds: int = 2, **kw: Any) -> Any:
    return run_study([d1], [plan_world(d1, ["canonical"], ["hr-1"], seeds)],
                     parse_models(models), out, llm=_llm(**kw))


def _stored(out: Path) -> dict[str, Any]:
    with sqlite3.connect(out / STORE_FILE) as db:
        (value,) = db.execute("SELECT value FROM meta WHERE key = ?",
                              (LLM_OPTIONS_KEY,)).fetchone()
    stored: dict[str, Any] = json.loads(value)
    return stored


def test_first_run_keeps_its_llm_options(d1: World, provider: Scripted, tmp_path: Path) -> None:
    _run(d1, tmp_path, f"a={A}", api_base="http://127.0.0.1:9/v1", seed=7,
         role_models={"specialist": C})
    assert _stored(tmp_path) == {
        "models": {"a": A}, "counterpart_model": None, "judge_model": None,
        "role_models": {"specialist": C}, "temperature": 0.0, "max_tokens": 64, "seed": 7,
        "api_base": "http://127.0.0.1:9/v1"}


def test_resume_with_the_same_options_goes_on(d1: World, provider: Scripted,
                                              tmp_path: Path) -> None:
    first = _run(d1, tmp_path, f"a={A}", seeds=1)
    assert first.attempts == 1
    # more seeds, other transport limits, the same LLM options: resumed
    again = _run(d1, tmp_path, f"a={A}", seeds=3, max_connections=1, timeout=9.0, retries=2)
    assert again.skipped == 1 and again.attempts == 2


def test_resume_with_other_options_is_refused_naming_each(d1: World, provider: Scripted,
                                                          tmp_path: Path) -> None:
    _run(d1, tmp_path, f"a={A},b={B}")
    calls = len(provider.requests)
    with pytest.raises(StudyError) as info:
        _run(d1, tmp_path, f"a={A},b={C}", seeds=3, temperature=0.7, max_tokens=None,
             judge_model=B, api_base="http://127.0.0.1:9/v1")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("this study's first run used other LLM options: ")
    for part in (f"--models b={C} (was b={B})", "--temperature 0.7 (was 0.0)",
                 "--max-tokens unset (was 64)", f"--judge-model {B} (was unset)",
                 "--api-base http://127.0.0.1:9/v1 (was unset)"):
        assert part in message
    assert "--llm-seed" not in message and f"a={A}" not in message  # only what differs
    assert len(provider.requests) == calls  # refused before any episode
    assert _stored(tmp_path)["models"] == {"a": A, "b": B}  # left as the first run's


def test_a_new_model_column_may_join_a_resumed_study(d1: World, provider: Scripted,
                                                     tmp_path: Path) -> None:
    _run(d1, tmp_path, f"a={A}")
    added = _run(d1, tmp_path, f"a={A},c={C}")
    assert added.skipped == 2 and added.attempts == 2
    assert _stored(tmp_path)["models"] == {"a": A, "c": C}
    # dropping a column later is fine too; renaming what a kept column plays is not
    assert _run(d1, tmp_path, f"c={C}").attempts == 0
    with pytest.raises(StudyError, match=rf"--models c={A} \(was c={C}\)"):
        _run(d1, tmp_path, f"c={A}")


def test_cli_refuses_in_one_line_exit_1(provider: Scripted, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from eairdsl.cli import app

    args = ["study", str(ROOT / "worlds" / "d1.eair"), "--conditions", "canonical",
            "--instances", "hr-1", "--seeds", "1", "--models", f"a={A}", "--retries", "0",
            "--out", str(tmp_path)]
    runner = CliRunner()
    first = runner.invoke(app, [*args, "--temperature", "0.2"])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, [*args, "--temperature", "0.3"])
    assert second.exit_code == 1
    errors = [line for line in second.output.splitlines() if "LLM options" in line]
    assert len(errors) == 1 and "--temperature 0.3 (was 0.2)" in errors[0]
    assert "Traceback" not in second.output
