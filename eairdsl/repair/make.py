"""Choose a Repair Agent and a Repair Reviewer by name (`--agent`, `--reviewer`).

`offline` is the catalogue agent (`eairdsl.repair.catalogue.CatalogueRepairAgent`)
and the mechanical reviewer (`eairdsl.repair.review.MechanicalReviewer`); `llm`
is `eairdsl.repair.llm.LLMRepairAgent` / `LLMReviewer` with a litellm model
string. Imports are lazy, as for the auditors: the offline path never loads
litellm, and a name whose module is missing is a clear usage error.
"""

from __future__ import annotations

import importlib
from typing import Any

from eairdsl.errors import UsageError
from eairdsl.repair.model import RepairAgent, Reviewer

__all__ = ["AGENTS", "REVIEWERS", "make_agent", "make_reviewer", "describe"]

AGENTS = ("offline", "llm")
REVIEWERS = ("offline", "llm")

_AGENT_CLASSES = {"offline": ("eairdsl.repair.catalogue", "CatalogueRepairAgent"),
                  "llm": ("eairdsl.repair.llm", "LLMRepairAgent")}
_REVIEWER_CLASSES = {"offline": ("eairdsl.repair.review", "MechanicalReviewer"),
                     "llm": ("eairdsl.repair.llm", "LLMReviewer")}


def _build(kind: str, table: dict[str, tuple[str, str]], what: str,
           model: str | None, options: dict[str, Any]) -> Any:
    if kind not in table:
        raise UsageError(f"unknown {what} '{kind}'; choose {' or '.join(sorted(table))}")
    if kind == "llm" and not model:
        raise UsageError(f"--{what} llm needs a model (--model or --reviewer-model, a litellm "
                         "model string such as openai/gpt-4o-mini)")
    module_name, class_name = table[kind]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"the {kind} {what} is not available in this eairdsl "
                         f"({module_name}.{class_name}: {exc})") from None
    try:
        return cls(model=model, **options) if kind == "llm" else cls(**options)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot start the {kind} {what}: {exc}") from None


def make_agent(kind: str, model: str | None = None, **options: Any) -> RepairAgent:
    """The Repair Agent named `kind` (`offline` or `llm` with `model`)."""
    agent: RepairAgent = _build(kind, _AGENT_CLASSES, "agent", model, options)
    return agent


def make_reviewer(kind: str, model: str | None = None, **options: Any) -> Reviewer:
    """The Repair Reviewer named `kind` (`offline` or `llm` with `model`)."""
    reviewer: Reviewer = _build(kind, _REVIEWER_CLASSES, "reviewer", model, options)
    return reviewer


def describe(agent: str, reviewer: str, model: str | None = None,
             reviewer_model: str | None = None) -> dict[str, Any]:
    """What a repair records about who proposed and who reviewed (its `loop.json`)."""
    return {"agent": agent, "model": model if agent == "llm" else None,
            "reviewer": reviewer,
            "reviewer_model": (reviewer_model or model) if reviewer == "llm" else None}
