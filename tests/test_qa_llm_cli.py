"""`eairc run` with LLM options, from the outside: what the command says when interrupted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "qallm/agent"


def test_ctrl_c_in_run_says_what_is_kept(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    """Ctrl-C during `eairc run --model M --record C` exited 130 without a word (typer
    swallows KeyboardInterrupt), so a user could not tell what survived."""
    from typer.testing import CliRunner

    import eairdsl.api
    from eairdsl.cli import app

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(eairdsl.api, "run_episodes", interrupted)
    cassette = tmp_path / "c.jsonl"
    result = CliRunner().invoke(app, ["run", str(ROOT / "worlds" / "d1.eair"), "--model", MODEL,
                                      "--record", str(cassette), "-o", str(tmp_path / "o")])
    assert result.exit_code == 130
    assert "interrupted: the traces of the episodes that finished are in" in result.output
    assert f"the cassette {cassette} keeps every exchange answered" in result.output

