"""Choose a Repair Agent and a Repair Reviewer by name (`--agent`, `--reviewer`).

`offline` is the catalogue agent (`eairdsl.repair.catalogue.CatalogueRepairAgent`)
and the mechanical reviewer (`eairdsl.repair.review.MechanicalReviewer`); `llm`
is `eairdsl.repair.llm.LLMRepairAgent` / `LLMReviewer` with a litellm model
string. Each is registered with `@repair_agent` or `@repair_reviewer` in
`REPAIR_AGENTS` / `REPAIR_REVIEWERS` (`eairdsl.registry`), with whether it takes a
model, so no caller tests `kind == "llm"`. The registered functions import their
class when called, as for the auditors: the offline path never loads litellm, and
a name whose module is missing is a clear usage error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eairdsl.errors import UsageError
from eairdsl.registry import Registry
from eairdsl.repair.model import RepairAgent, Reviewer

__all__ = ["AGENTS", "REVIEWERS", "REPAIR_AGENTS", "REPAIR_REVIEWERS", "Maker", "describe",
           "make_agent", "make_reviewer", "repair_agent", "repair_reviewer",
           "agent_takes_model", "reviewer_takes_model"]

#: a registered name's loader: imports and returns the class (or factory) to call
Load = Callable[[], Callable[..., Any]]


@dataclass(frozen=True)
class Maker:
    """One named agent or reviewer: its loader, and whether it is built with a model
    (`cls(model=M, **options)`; the others `cls(**options)`)."""

    load: Load
    needs_model: bool = False


REPAIR_AGENTS: Registry[Maker] = Registry("agent", option="--agent")
REPAIR_REVIEWERS: Registry[Maker] = Registry("reviewer", option="--reviewer")


def repair_agent(name: str, *, needs_model: bool = False) -> Callable[[Load], Load]:
    """Register the decorated loader as Repair Agent `name`."""
    def add(load: Load) -> Load:
        REPAIR_AGENTS.add(name, Maker(load, needs_model), origin=load.__module__)
        return load
    return add


def repair_reviewer(name: str, *, needs_model: bool = False) -> Callable[[Load], Load]:
    """Register the decorated loader as Repair Reviewer `name`."""
    def add(load: Load) -> Load:
        REPAIR_REVIEWERS.add(name, Maker(load, needs_model), origin=load.__module__)
        return load
    return add


@repair_agent("offline")
def _catalogue_agent() -> Callable[..., Any]:
    from eairdsl.repair.catalogue import CatalogueRepairAgent

    return CatalogueRepairAgent


@repair_agent("llm", needs_model=True)
def _llm_agent() -> Callable[..., Any]:
    from eairdsl.repair.llm import LLMRepairAgent

    return LLMRepairAgent


@repair_reviewer("offline")
def _mechanical_reviewer() -> Callable[..., Any]:
    from eairdsl.repair.review import MechanicalReviewer

    return MechanicalReviewer


@repair_reviewer("llm", needs_model=True)
def _llm_reviewer() -> Callable[..., Any]:
    from eairdsl.repair.llm import LLMReviewer

    return LLMReviewer


AGENTS = REPAIR_AGENTS.names()
REVIEWERS = REPAIR_REVIEWERS.names()


def _build(kind: str, registry: Registry[Maker], model: str | None,
           options: dict[str, Any]) -> Any:
    what = registry.what
    maker = registry.get(kind)
    if maker.needs_model and not model:
        raise UsageError(f"--{what} {kind} needs a model (--model or --reviewer-model, a "
                         "litellm model string such as openai/gpt-4o-mini)")
    try:
        cls = maker.load()
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"the {kind} {what} is not available in this eairdsl ({exc})") from None
    try:
        return cls(model=model, **options) if maker.needs_model else cls(**options)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot start the {kind} {what}: {exc}") from None


def make_agent(kind: str, model: str | None = None, **options: Any) -> RepairAgent:
    """The Repair Agent named `kind` (`offline` or `llm` with `model`)."""
    agent: RepairAgent = _build(kind, REPAIR_AGENTS, model, options)
    return agent


def make_reviewer(kind: str, model: str | None = None, **options: Any) -> Reviewer:
    """The Repair Reviewer named `kind` (`offline` or `llm` with `model`)."""
    reviewer: Reviewer = _build(kind, REPAIR_REVIEWERS, model, options)
    return reviewer


def _takes_model(registry: Registry[Maker], kind: str) -> bool:
    maker = registry.find(kind)
    return maker is not None and maker.needs_model


def agent_takes_model(kind: str) -> bool:
    """Whether Repair Agent `kind` is played by a model (`--model`)."""
    return _takes_model(REPAIR_AGENTS, kind)


def reviewer_takes_model(kind: str) -> bool:
    """Whether Repair Reviewer `kind` is played by a model (`--reviewer-model`)."""
    return _takes_model(REPAIR_REVIEWERS, kind)


def describe(agent: str, reviewer: str, model: str | None = None,
             reviewer_model: str | None = None) -> dict[str, Any]:
    """What a repair records about who proposed and who reviewed (its `loop.json`)."""
    return {"agent": agent, "model": model if _takes_model(REPAIR_AGENTS, agent) else None,
            "reviewer": reviewer,
            "reviewer_model": (reviewer_model or model)
            if _takes_model(REPAIR_REVIEWERS, reviewer) else None}
