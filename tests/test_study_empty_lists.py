"""`eairc study --conditions ""` (an unset shell variable, say) ran every condition, and
`--models ""` the default model: a list given but empty is refused, with the option's
name, before anything is written; `all` and leaving the option out still mean all."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.cli import app
from eairdsl.study.grid import GridError, parse_models, parse_names

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("option", "value"), [("--conditions", ""), ("--conditions", " , "),
                                               ("--instances", ","), ("--models", "")])
def test_an_empty_list_is_refused_and_nothing_is_written(option: str, value: str,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "study"
    result = CliRunner().invoke(app, ["study", str(ROOT / "worlds" / "d1.eair"), "--seeds",
                                      "1", option, value, "--out", str(out)])
    said = result.output + (result.stderr if result.stderr_bytes else "")
    assert result.exit_code == 1, said
    assert f"{option} is empty" in said and "Traceback" not in said
    assert not out.exists()


def test_all_and_no_option_still_mean_all() -> None:
    assert parse_names(None) is None and parse_names(" all ") is None
    assert parse_names("b, a, b", "--conditions") == ["b", "a"]
    with pytest.raises(GridError, match="--conditions is empty"):
        parse_names("", "--conditions")
    assert [m.name for m in parse_models(None, "sim")] == ["sim"]
