"""The Auditor Agent protocol: a sanitized bundle in, a contract-v1 report out.

Like the episode agents (one method, `decide`), an auditor is anything with one
method, `audit(bundle) -> Report`. The offline rules auditor, the grader-side
oracle and the LLM auditor all implement it, so `eairc audit` and the audit
study drive them the same way and never know which one they hold. An auditor
sees only the bundle: it is given no trace path, no world source and no study
store (EAIR §4: the Auditor reconstructs the failure from the record, not from
how the experiment was designed or scored). The oracle is the one exception
and says so: it is built with the grader's witness steps, never as an arm of
the audit study.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from eairdsl.audit.contract import Report
from eairdsl.audit.evidence import Bundle

__all__ = ["AuditorAgent", "AuditError", "AuditorSettings", "SampledAuditor"]


class AuditError(RuntimeError):
    """An audit that could not produce a report (provider failure, budget spent, …).

    The runner records it beside the episode instead of a report; it never
    becomes an empty or clean report.
    """


@runtime_checkable
class AuditorAgent(Protocol):
    """Reads one bundle and returns one report (contract v1)."""

    def audit(self, bundle: Bundle) -> Report:  # pragma: no cover - protocol
        ...


class AuditorSettings(BaseModel):
    """How an LLM auditor's requests were sent: what a rereader needs to rerun it alike.

    The report's `auditor` block (contract v1) names the model, prompt version and
    seed only, and its schema is what the model is shown, so it stays as it is;
    this record goes in the audit's index and session instead. `model`,
    `temperature`, `max_tokens` and `seed` are what each request carried (the
    sampling: they decide the answers, and a cassette is keyed by them);
    `timeout` and `retries` are the transport limits (they decide whether an answer
    arrives, not which); `completion_params` names, never values, any extra
    keyword arguments passed to the provider (they may hold keys). Endpoints are
    never recorded. Unset options are absent, not null.
    """

    model_config = ConfigDict(frozen=True)

    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    timeout: float | None = None
    retries: int | None = None
    completion_params: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped (in the index, the session) with only the options that were set."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k == "model" or v not in (None, [])}

    def sampling(self) -> dict[str, Any]:
        """What decides the answers: the model and the sampling options that were set
        (the extra provider parameters by name). Two audits whose sampling differs
        cannot share reports; a longer timeout or more retries can."""
        return {k: v for k, v in self.model_dump(mode="json").items()
                if k not in ("timeout", "retries")}

    def describe(self) -> str:
        """One line for people: `model M, temperature 0.2, max_tokens 300, seed 7
        (timeout 60s, 4 retries)`."""
        parts = [f"model {self.model}"] + [
            f"{k} {getattr(self, k)}" for k in ("temperature", "max_tokens", "seed")
            if getattr(self, k) is not None]
        if self.completion_params:
            parts.append("provider parameters " + ", ".join(self.completion_params))
        limits = ([f"timeout {self.timeout:g}s"] if self.timeout is not None else []) + (
            [f"{self.retries} retries"] if self.retries is not None else [])
        return ", ".join(parts) + (f" ({', '.join(limits)})" if limits else "")


@runtime_checkable
class SampledAuditor(Protocol):
    """An auditor whose reports depend on how its model was sampled (the LLM auditor):
    the runner records `request_settings` in the index and refuses to mix reports
    made under different sampling in one audit folder."""

    @property
    def request_settings(self) -> AuditorSettings:  # pragma: no cover - protocol
        ...
