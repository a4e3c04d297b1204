"""The LLM options of `run`, `study`, `audit`, `audit-study` and `repair`, declared once.

Each of these commands takes one `LLMOptions` parameter named `llm`; the
`llm_options` decorator puts the command's LLM options in its signature where
that parameter stands (so `eairc CMD --help` lists them there, in the order the
command gives) and calls the command with one LLMOptions gathered from them.
The transport and sampling options are shared declarations (the constants
below); the model and cassette options, whose help differs from command to
command, are declared by each command module with `option`.

Nothing here imports litellm or the LLM machinery: `LLMOptions.settings` imports
`LLMSettings` when a command asks for it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eairdsl.errors import UsageError

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["API_BASE", "LLM_DEFAULTS", "LLM_SEED", "MAX_CONNECTIONS", "MAX_TOKENS", "RETRIES",
           "TEMPERATURE", "TIMEOUT", "LLMOptions", "llm_options", "option"]

#: A command of the cli package: typer calls it with its options as keywords.
Command = Callable[..., None]


@dataclass(frozen=True)
class LLMOptions:
    """What one command line says about calling models, built once per command.

    Field names are the commands' parameter names (`--role-model` is `role_model`),
    so the decorator fills it without a table. A command that does not declare
    an option gets its default here, which is also LLMSettings' default.
    """

    #: Model of the roles under test (`run`). The auditor's and the Repair Agent's
    #: `--model` stay those commands' own parameters: they name the arm (with
    #: `--auditor`, `--contract`; `--agent`, `--reviewer-model`), not the transport.
    model: str | None = None
    counterpart_model: str | None = None
    judge_model: str | None = None
    #: `--role-model ROLE=MODEL` as typed; `roles()` parses them.
    role_model: tuple[str, ...] = ()
    #: False: no recording; True: `--record` of a command that chooses the cassette's
    #: place itself (study, audit, repair); a path: `run --record CASSETTE`.
    record: bool | Path = False
    replay: Path | None = None
    max_connections: int = 8
    timeout: float = 60.0
    retries: int = 4
    api_base: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    llm_seed: int | None = None

    @classmethod
    def from_cli(cls, given: dict[str, Any]) -> LLMOptions:
        """The options as typer hands them over: a list option absent is None (or empty),
        `run --record` absent is None."""
        values = dict(given)
        if "role_model" in values:
            values["role_model"] = tuple(values["role_model"] or ())
        if values.get("record") is None:
            values.pop("record", None)
        return cls(**values)

    @property
    def any_given(self) -> bool:
        """Whether any LLM option differs from its default (a study without one runs no
        model through LLMSettings)."""
        return self != LLM_DEFAULTS

    @property
    def record_file(self) -> Path | None:
        """The cassette of `run --record CASSETTE` (the other commands' --record is a flag)."""
        return self.record if isinstance(self.record, Path) else None

    def roles(self) -> dict[str, str]:
        """`--role-model ROLE=MODEL` options as {role: model}; a malformed one is refused."""
        roles: dict[str, str] = {}
        for item in self.role_model:
            role, sep, name = item.partition("=")
            if not sep or not role.strip() or not name.strip():
                raise UsageError(f"--role-model takes ROLE=MODEL, got {item!r}")
            roles[role.strip()] = name.strip()
        return roles

    def check_cassettes(self) -> None:
        """Recording a cassette while replaying one is refused (study, audit, repair)."""
        if self.record and self.replay is not None:
            raise UsageError("--record and --replay exclude each other")

    def settings(self, **bindings: Any) -> LLMSettings:
        """The library's LLMSettings: these transport and sampling options, plus the model
        bindings and cassettes the command resolved (`bindings`, LLMSettings' names)."""
        from eairdsl.agents.llm import LLMSettings

        return LLMSettings(**{
            "max_connections": self.max_connections, "timeout": self.timeout,
            "retries": self.retries, "api_base": self.api_base,
            "temperature": self.temperature, "max_tokens": self.max_tokens,
            "seed": self.llm_seed, **bindings})


#: The placeholder default of a command's `llm` parameter (the decorator replaces it).
LLM_DEFAULTS = LLMOptions()


def option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    """One LLM option as a signature parameter: `name` (an LLMOptions field), its typer
    annotation (`Annotated[type, typer.Option(...)]`) and its default."""
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                             annotation=annotation)


# The transport and sampling options: the same declaration on every command.
MAX_CONNECTIONS = option("max_connections", Annotated[int, typer.Option(
    min=1, help="Concurrent LLM requests per provider and endpoint.")], 8)
TIMEOUT = option("timeout", Annotated[float, typer.Option(
    min=0.001, help="Seconds per LLM request attempt.")], 60.0)
RETRIES = option("retries", Annotated[int, typer.Option(
    min=0, help="Retries on rate limits, timeouts and 5xx.")], 4)
API_BASE = option("api_base", Annotated[str | None, typer.Option(
    help="Endpoint of a local or self-hosted server (Ollama, vLLM).")])
TEMPERATURE = option("temperature", Annotated[float | None, typer.Option(
    min=0.0, help="Sampling temperature of every LLM request (default: the provider's; "
    "judges use 0).")])
MAX_TOKENS = option("max_tokens", Annotated[int | None, typer.Option(
    min=1, help="Cap on the tokens of each LLM answer (default: the provider's).")])
LLM_SEED = option("llm_seed", Annotated[int | None, typer.Option(
    help="Sampling seed sent with every LLM request, where the provider supports it (not "
    "the episode --seed).")])


def llm_options(*declared: inspect.Parameter) -> Callable[[Command], Command]:
    """Declare the LLM options `declared` where the command's `llm` parameter stands, in
    this order, and call the command with `llm=LLMOptions(...)` gathered from them.

    The wrapper's `__signature__` is what typer reads (typer calls commands with
    keywords only), so `--help` lists exactly these options in this place.
    """
    names = [p.name for p in declared]
    unknown = set(names) - set(LLMOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"not LLMOptions fields: {sorted(unknown)}")

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index("llm")
        spliced = signature.replace(parameters=[*params[:at], *declared, *params[at + 1:]])

        @functools.wraps(command)
        def wrapper(**given: Any) -> None:
            llm = LLMOptions.from_cli({name: given.pop(name) for name in names})
            command(**given, llm=llm)

        wrapper.__signature__ = spliced  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in spliced.parameters.values()}
        return wrapper

    return decorate
