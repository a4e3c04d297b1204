"""The LLM options of the cli package: declared once (eairdsl.cli.options), gathered into
one LLMOptions per command, listed by `--help` where each command always listed them."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.api import UsageError
from eairdsl.cli import app
from eairdsl.cli.options import TIMEOUT, LLMOptions, llm_options

SHARED = ("--api-base", "--timeout", "--retries", "--max-connections")
SAMPLING = ("--temperature", "--max-tokens", "--llm-seed")


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("command", "options"), [
    ("run", (*SHARED, *SAMPLING, "--model", "--counterpart-model", "--judge-model",
             "--role-model", "--record", "--replay")),
    ("study", (*SHARED, *SAMPLING, "--counterpart-model", "--judge-model", "--role-model",
               "--record", "--replay", "--budget-usd")),
    ("audit", (*SHARED, *SAMPLING, "--model", "--record", "--replay")),
    ("audit-study", (*SHARED, *SAMPLING, "--model", "--record", "--replay")),
    ("repair", (*SHARED, "--model", "--reviewer-model", "--record", "--replay")),
])
def test_each_command_lists_its_llm_options_once(command: str, options: tuple[str, ...]) -> None:
    text = _help(command)
    for name in options:
        assert text.count(f"  {name} ") == 1, (command, name)
    assert "Seconds per LLM request attempt. [default: 60.0; x>=0.001]" in " ".join(text.split())
    if command == "repair":  # repair takes no sampling options
        assert not any(name in text for name in SAMPLING)


def test_the_order_of_help_is_the_commands_own() -> None:
    """The shared options sit where each command listed them (study: before the budgets)."""
    def order(command: str, *names: str) -> list[int]:
        text = _help(command)
        return [text.index(f"\n  {name} ") for name in names]

    for command, names in (
            ("study", ("--replay", "--max-connections", "--llm-seed", "--budget-usd")),
            ("audit", ("--world", "--record", "--api-base", "--max-connections",
                       "--temperature")),
            ("repair", ("--max-rounds", "--api-base", "--record"))):
        at = order(command, *names)
        assert at == sorted(at), (command, names)


def test_from_cli_normalises_what_typer_hands_over() -> None:
    llm = LLMOptions.from_cli({"role_model": None, "record": None, "timeout": 5.0})
    assert llm == LLMOptions(timeout=5.0)
    assert llm.record_file is None and llm.any_given
    cassette = LLMOptions.from_cli({"record": Path("c.jsonl"), "role_model": ["a=b"]})
    assert cassette.record_file == Path("c.jsonl") and cassette.roles() == {"a": "b"}
    assert LLMOptions(record=True).record_file is None
    assert not LLMOptions().any_given


def test_role_models_and_cassettes_are_checked() -> None:
    with pytest.raises(UsageError, match="ROLE=MODEL"):
        LLMOptions(role_model=("nomodel",)).roles()
    with pytest.raises(UsageError, match="exclude each other"):
        LLMOptions(record=True, replay=Path("x")).check_cassettes()


def test_settings_carry_the_transport_and_the_bindings() -> None:
    llm = LLMOptions(timeout=5.0, retries=1, max_connections=2, api_base="http://h",
                     temperature=0.2, max_tokens=9, llm_seed=3)
    s = llm.settings(model="m", replay=Path("r"))
    assert (s.model, s.timeout, s.retries, s.max_connections, s.api_base) == \
        ("m", 5.0, 1, 2, "http://h")
    assert (s.temperature, s.max_tokens, s.seed, s.replay, s.record) == (0.2, 9, 3, Path("r"),
                                                                        None)


def test_the_decorator_splices_the_options_and_gathers_them() -> None:
    seen: list[LLMOptions] = []

    @llm_options(TIMEOUT)
    def command(first: int = 0, llm: LLMOptions = LLMOptions(), last: int = 0) -> None:  # noqa: B008
        seen.append(llm)

    assert list(inspect.signature(command).parameters) == ["first", "timeout", "last"]
    command(first=1, timeout=2.5, last=3)
    assert seen == [LLMOptions(timeout=2.5)]
    with pytest.raises(TypeError, match="not LLMOptions fields"):
        llm_options(TIMEOUT.replace(name="colour"))
