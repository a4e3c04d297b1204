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

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from eairdsl.audit.contract import Report
from eairdsl.audit.evidence import Bundle

__all__ = ["AuditBudgets", "AuditorAgent", "AuditError", "AuditorIdentity", "AuditorSettings",
           "IdentifiedAuditor", "SampledAuditor", "identity_of"]


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


class AuditBudgets(BaseModel):
    """When an LLM audit stops: its budgets, which decide the report as much as sampling.

    `max_tool_calls` investigation calls (and the first message tells the model that
    number), `max_revisions` resubmissions after a rejected report (K),
    `max_tokens_in` input tokens over the audit (None: no cap), `max_turns` model
    answers (None: derived, `max_tool_calls + 2 * (max_revisions + 1) + 4`),
    `window_chars` the most characters any one message shows (as clamped), and
    `on_budget`, what an audit that spends a budget with no submission gives. The
    defaults here are `LLMAuditor`'s defaults. Recorded (in `AuditorSettings.budgets`)
    with only the budgets that differ from these defaults, so an audit run with the
    defaults, and an index written before budgets were recorded, read as the
    defaults; `max_turns` is recorded only when it is not the derived number.
    """

    model_config = ConfigDict(frozen=True)

    max_tool_calls: int = 60
    max_revisions: int = 3
    max_tokens_in: int | None = 1_000_000
    max_turns: int | None = None
    window_chars: int = 12000
    on_budget: Literal["insufficient_evidence", "error"] = "insufficient_evidence"

    @property
    def turns(self) -> int:
        """The model answers allowed: `max_turns`, or the number derived from the others."""
        if self.max_turns is not None:
            return self.max_turns
        return self.max_tool_calls + 2 * (self.max_revisions + 1) + 4

    @model_serializer(mode="wrap")
    def _only_changed(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped with only the budgets that differ from the defaults (None is a value
        here: `max_tokens_in` null is no cap, not unset)."""
        data: dict[str, Any] = handler(self)
        default = type(self)()
        changed = {k: v for k, v in data.items() if v != getattr(default, k)}
        if "max_turns" in changed and self.max_turns == type(self)(
                max_tool_calls=self.max_tool_calls, max_revisions=self.max_revisions).turns:
            del changed["max_turns"]  # the derived number, given explicitly
        return changed

    def effective(self) -> dict[str, Any]:
        """Every budget as the audit applied it (`max_turns` derived when unset): what
        two audits compare, so an explicit default and an unrecorded one agree."""
        return {"max_tool_calls": self.max_tool_calls, "max_revisions": self.max_revisions,
                "max_tokens_in": self.max_tokens_in, "max_turns": self.turns,
                "window_chars": self.window_chars, "on_budget": self.on_budget}

    def describe(self) -> str:
        """The budgets that differ from the defaults, for people (empty when none)."""
        changed = self.model_dump(mode="json")
        return ", ".join(f"{k} {'no cap' if v is None else v}" for k, v in changed.items())


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
    never recorded. Unset options are absent, not null. `budgets` (`AuditBudgets`)
    are when the audit stops, recorded only where they differ from the defaults (absent
    in an index written before they were kept: the defaults).
    """

    model_config = ConfigDict(frozen=True)

    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    timeout: float | None = None
    retries: int | None = None
    completion_params: list[str] = Field(default_factory=list)
    budgets: AuditBudgets = Field(default_factory=AuditBudgets)

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped (in the index, the session) with only the options that were set."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k == "model" or v not in (None, [], {})}

    def sampling(self) -> dict[str, Any]:
        """What decides the answers: the model and the sampling options that were set
        (the extra provider parameters by name). Two audits whose sampling differs
        cannot share reports; a longer timeout or more retries can."""
        return {k: v for k, v in self.model_dump(mode="json").items()
                if k not in ("timeout", "retries", "budgets")}

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
        budgets = self.budgets.describe()
        return (", ".join(parts) + (f" ({', '.join(limits)})" if limits else "")
                + (f"; budgets {budgets}" if budgets else ""))


@runtime_checkable
class SampledAuditor(Protocol):
    """An auditor whose reports depend on how its model was sampled (the LLM auditor):
    the runner records `request_settings` in the index and refuses to mix reports
    made under different sampling in one audit folder."""

    @property
    def request_settings(self) -> AuditorSettings:  # pragma: no cover - protocol
        ...


class AuditorIdentity(BaseModel):
    """Which auditor made an audit's reports: what a resumed audit must share with them.

    `kind`, `model` and `prompt_version` are the report's `auditor` block (for the
    LLM auditor the prompt version digests its system prompt and tool definitions, so
    it moves with the arm and the read window too); `contract` and `graph` are the LLM
    auditor's arm (F.15, F.16), which the runner also records in the index's `auditor`
    block. A field that is None is unknown (or
    does not apply: a rules auditor has no graph arm) and is not compared.
    """

    model_config = ConfigDict(frozen=True)

    kind: str | None = None
    model: str | None = None
    contract: str | None = None
    graph: str | None = None
    prompt_version: str | None = None

    @classmethod
    def of_block(cls, block: object) -> AuditorIdentity:
        """The identity a recorded `auditor` block (a report's, or an index's from
        `auditors.make_auditor`, whose offline kind is `offline`) names; an unreadable
        block (reports are untrusted) names nothing."""
        if not isinstance(block, dict):
            return cls()
        fields = {k: v for k in cls.model_fields if isinstance(v := block.get(k), str) and v}
        if fields.get("kind") == "offline":
            fields["kind"] = "rules"
        return cls.model_validate(fields)

    def known(self) -> dict[str, str]:
        """The fields that are known, by name."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


@runtime_checkable
class IdentifiedAuditor(Protocol):
    """An auditor that says which auditor (and arm) it is (the rules auditor, the oracle,
    the LLM auditor): the runner refuses to resume a folder whose reports another one
    made."""

    @property
    def identity(self) -> AuditorIdentity:  # pragma: no cover - protocol
        ...


def identity_of(agent: AuditorAgent) -> AuditorIdentity | None:
    """Which auditor `agent` is, as its reports' `auditor` blocks will name it: each of
    the package's auditors says so itself (`IdentifiedAuditor`: its kind and prompt
    version, and the LLM auditor its arm); any other auditor (a test's, a person's) is
    unknown (None) and its folders are not checked.

    Asking the agent, not testing its class, keeps this module (and the runner that
    calls it) free of imports of the auditors, which import the runner."""
    return agent.identity if isinstance(agent, IdentifiedAuditor) else None
