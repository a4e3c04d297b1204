"""The LLM auditor: any litellm model reads a sanitized bundle through tools and files a report.

EAIR §4, stage 1: the Auditor Agent inspects the sanitized record, builds an
interaction graph, traces where an organizational requirement first fails and
how it develops, and returns realization certificates under the report
contract. This module runs that audit as a tool-calling conversation:

- **system prompt** (`prompts/auditor_full.md`): the task, R1–R4 and the B.1
  worked cases in words, the validator's rules, the risk ids and the contract's
  JSON Schema (`contract.report_schema()`);
- **first user message**: the record's organizational context
  (`llm_tools.overview`) and, in the graph arms, the graph index
  (`llm_tools.graph_index`), or, without a graph, the trace's first window;
- **tools**: the query API (`query.query_tools`, run by `query.call_tool`),
  `build_graph` and `read_context`, per graph arm (`llm_tools`, F.16), and
  `submit_report`;
- **submit_report**: the model submits `verdict`, `findings`, `leads` and
  `out_of_catalogue`; the harness adds the envelope (`audit_schema`,
  `report_id`, `bundle`, `auditor`, `coverage` from the tool calls actually
  made, `usage`) and runs the strict validator (`validate.validate_report`).
  A report with errors is not accepted: the diagnostics (code, message, JSON
  path, hint) go back in the tool result, for up to `max_revisions`
  resubmissions (K, default 3). After K rejections the audit ends and the last
  submission that follows the schema is returned as it is — it fails
  validation wherever it is checked again (`eairc audit` does), and every
  submission's diagnostics are in `LLMAuditor.last_session`. It is never
  marked or repaired as valid.

Budgets. `max_tool_calls` investigation calls (queries, `build_graph`,
`read_context`); once they are spent the model is told so and offered only
`submit_report` (no contract: no tool). `max_tokens_in` input tokens over the
whole audit: once reached no further request is sent. `max_turns` model
answers. An audit that ends on a budget without an accepted report returns the
last schema-following submission if there is one; otherwise, with
`on_budget="insufficient_evidence"` (the default), a report with verdict
`insufficient_evidence`, no findings and the coverage actually gathered, and
with `on_budget="error"` it raises `AuditError`. A provider failure (retries
spent) or a cassette miss raises `AuditError`.

Windows. No prompt carries a whole long trace: the first message shows at most
`window_chars` characters of the trace (or of the graph index), every tool
budget is clamped to `window_chars`, and the model reads on through the answers'
`more` calls (`read(step, through)`, `build_graph(from_step)`), which keep the
global step ids.

Transport is the episode agents' (`eairdsl.agents.llm`): `LLMSettings`, its
client (retries with backoff, per-request timeouts, per-provider semaphores),
litellm imported on the first live request only, and the cassette: with
`settings.record` every exchange is stored, with `settings.replay` the audit is
replayed from it with no network and no litellm, and gives a byte-identical
report. Usage (tokens, cost from litellm's offline cost map, tool calls) goes in
the report's `usage`. How the requests were sampled (`LLMAuditor.request_settings`:
model, temperature, max_tokens, seed, timeout, retries, as sent) goes in the session
and, through the runner, in the audit's `index.json`, not in the report: contract
v1's schema is what the model is shown.

Arm `contract="none"` (F.15's naive baseline): a short free-text prompt, no
schema and no `submit_report`; the model's final plain-text answer is turned into
a report by the deterministic extractor `eairdsl.audit.naive`, so its
resolvability can be measured by the same validator (the paper: 48.3% of free-text
findings resolvable against 98.8% under the contract, Table 3). The paper's naive
arm had no tools; here it keeps the graph arm's read tools, so the contract is the
only factor that changes between the two arms.

Malformed output is never an exception: arguments that are not a JSON object,
an unknown tool, an empty answer or (under the contract) plain text instead of a
submission each get an error or a note back and are counted (`malformed`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from eairdsl.agents.cassette import CassetteMiss
from eairdsl.agents.llm import LLMSettings, LLMUnavailable, alternate, call_record
from eairdsl.audit.auditor import AuditBudgets, AuditError, AuditorIdentity, AuditorSettings
from eairdsl.audit.contract import (
    AUDIT_SCHEMA,
    Auditor,
    BundleRef,
    Coverage,
    QueryRecord,
    Report,
    Usage,
    report_schema,
)
from eairdsl.audit.evidence import MANIFEST, Bundle, sha256_file
from eairdsl.audit.llm_tools import (
    CONTEXT_TOOL,
    GRAPH_ARMS,
    GRAPH_TOOL,
    QUERY_TOOLS_BY_ARM,
    GraphArm,
    clamp_budget,
    first_window,
    graph_index,
    investigation_tools,
    overview,
    query_layer,
    read_context,
    to_json,
)
from eairdsl.audit.query import DEFAULT_BUDGET, call_tool
from eairdsl.audit.validate import ValidationResult, validate_report
from eairdsl.taxonomy import load_taxonomy
from eairdsl.vocabulary import RISKS

__all__ = ["ContractArm", "CONTRACT_ARMS", "OnBudget", "PROMPT_VERSION", "SUBMIT_TOOL",
           "SUBMITTED_FIELDS", "Submission", "AuditSession", "LLMAuditor", "LLMAuditError",
           "audit_with_llm",
           "system_prompt", "submit_tool"]

ContractArm = Literal["full", "none"]
CONTRACT_ARMS: tuple[ContractArm, ...] = ("full", "none")
OnBudget = Literal["insufficient_evidence", "error"]
#: bumped when the prompts' wording changes; the report's prompt_version also carries a
#: digest of the exact system prompt and tools sent
PROMPT_VERSION = "1"
SUBMIT_TOOL = "submit_report"
#: what the model submits; the harness fills in the rest of the report
SUBMITTED_FIELDS = ("verdict", "findings", "leads", "out_of_catalogue")
_ENVELOPE = ("audit_schema", "report_id", "bundle", "auditor", "coverage", "usage")
#: the answers that show steps' text: their steps count as read
_SHOWS_TEXT = frozenset({"read", "search", "provenance"})
_EMPTY_NOTE = "Your previous turn was empty. Call one of your tools."
_TEXT_NOTE = ("Plain text is not read as a report. Submit your report with the "
              f"{SUBMIT_TOOL} tool.")
_EMPTY_NAIVE = "Your previous turn was empty. Use a tool, or give your audit in plain text."


def _prompt(name: str) -> str:
    return resources.files("eairdsl.audit").joinpath("prompts", name).read_text(
        encoding="utf-8")


def system_prompt(contract: ContractArm) -> str:
    """The system prompt of an arm: the contract's (schema, R1–R4, B.1) or the naive one."""
    if contract == "none":
        return _prompt("auditor_none.md").strip()
    risks = "; ".join(f"{k} {v}" for k, v in RISKS.items())
    signals = ", ".join(sorted(load_taxonomy().type_ids()))
    schema = json.dumps(report_schema(), sort_keys=True, ensure_ascii=False,
                        separators=(",", ":"))
    return (_prompt("auditor_full.md").strip().replace("{{RISKS}}", risks)
            .replace("{{SIGNALS}}", signals).replace("{{SCHEMA}}", schema))


def submit_tool() -> dict[str, Any]:
    """`submit_report`: the contract's verdict, findings, leads and out-of-catalogue
    candidates, with the schema's definitions."""
    schema = report_schema()
    props = {k: schema["properties"][k] for k in SUBMITTED_FIELDS}
    params = {"type": "object", "additionalProperties": False, "required": ["verdict"],
              "properties": props, "$defs": schema.get("$defs", {})}
    return {"type": "function", "function": {
        "name": SUBMIT_TOOL,
        "description": "Submit the audit report (contract v1: verdict, findings, leads, "
                       "out_of_catalogue). It is validated before it is accepted; a rejected "
                       "report comes back with the validator's diagnostics.",
        "parameters": params}}


# ---------------------------------------------------------------- the session record

class Submission(BaseModel):
    """One `submit_report` call: the report as assembled and what the validator said."""

    attempt: int
    turn: int
    accepted: bool
    #: whether the assembled report followed the schema (else it cannot be returned)
    schema_valid: bool
    report: dict[str, Any] | None = None
    diagnostics: list[dict[str, Any]] = Field(default_factory=list)
    findings_resolvable: int = 0
    findings_total: int = 0
    units_resolvable: int = 0
    units_total: int = 0


Stop = Literal["accepted", "revisions_spent", "free_text", "budget_tool_calls",
               "budget_tokens", "turns"]


class AuditSession(BaseModel):
    """What one LLM audit did, for `eairc audit` to keep beside the report.

    Deterministic given the cassette: no wall-clock time, no latency.
    """

    episode: str
    model: str
    contract: ContractArm
    graph: GraphArm
    prompt_version: str
    scope: str
    #: how the requests were sent (model, sampling, transport limits); None in sessions
    #: written before it was recorded
    settings: AuditorSettings | None = None
    stop: Stop | None = None
    accepted: bool = False
    turns: int = 0
    tool_calls: int = 0
    investigation_calls: int = 0
    malformed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    #: characters of the messages sent, summed over requests (what input tokens are made of)
    chars_sent: int = 0
    #: the longest user or tool message sent (the window bound: no whole-trace prompt)
    longest_message: int = 0
    submissions: list[Submission] = Field(default_factory=list)
    #: the model's final plain-text answer (contract none)
    free_text: str | None = None
    #: one record per model call (`eairdsl.agents.llm.call_record`: digests, replies, tokens)
    calls: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None


def _diagnostics(result: ValidationResult) -> list[dict[str, Any]]:
    out = []
    for d in result.diagnostics:
        item: dict[str, Any] = {"code": d.code, "severity": d.diagnostic.severity.value,
                                "message": d.diagnostic.message, "path": d.path}
        if d.diagnostic.hint:
            item["hint"] = d.diagnostic.hint
        out.append(item)
    return out


def _safe_id(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.:-]", "-", text).strip("-.:_") or "episode"
    return cleaned[:40]


class LLMAuditError(AuditError):
    """An LLM audit that produced no report; `session` is what it did until then."""

    def __init__(self, message: str, session: AuditSession | None = None) -> None:
        super().__init__(message)
        self.session = session


# ---------------------------------------------------------------- the auditor

#: the budgets' defaults (recorded budgets are those that differ from them)
_BUDGETS = AuditBudgets()


class LLMAuditor:
    """An Auditor Agent played by a litellm model (`Auditor` kind "llm").

    `LLMAuditor(model, contract="full", graph="annotated", settings=None, seed=None,
    max_revisions=3, max_tool_calls=60, max_tokens_in=1_000_000, max_turns=None,
    window_chars=12000, on_budget="insufficient_evidence", transcripts=None)`:

    - `model`: a litellm model string (`openai/gpt-4o-mini`, `ollama/llama3.1`, …);
    - `contract`: `full` (schema, tools and `submit_report` with validation) or
      `none` (free text, read by `eairdsl.audit.naive`);
    - `graph`: `annotated`, `topology` or `none` (which tools are offered and
      whether a graph index is given up front; `llm_tools`);
    - `settings`: the run's `LLMSettings` (api base, temperature, max_tokens,
      timeout, retries, `record`/`replay` cassette, completion kwargs); its
      `model` is not used, `model` above is. One settings object is one client:
      share it between auditors of one run;
    - `seed`: sent with every request and recorded in the report (defaults to
      `settings.seed`);
    - `max_revisions` (K): resubmissions after a rejected report;
    - `max_tool_calls`, `max_tokens_in`, `max_turns`: the budget (module docstring);
    - `window_chars`: the most characters of trace, index or context any one
      message shows (clamped to the query API's 1,000–50,000);
    - `on_budget`: what a budget-spent audit with no report gives;
    - `transcripts`: a folder where each audit's `AuditSession` is written as
      `<episode>.<contract>-<graph>.json`.

    `audit(bundle)` runs the audit synchronously (`asyncio.run`); in a running
    event loop use `await audit_async(bundle)`. Raises `LLMAuditError` (an
    `AuditError` whose `session` says what happened) when no report can be
    produced, and `CassetteError` (a ValueError) at construction for a bad cassette
    setting.
    """

    def __init__(self, model: str, contract: ContractArm = "full",
                 graph: GraphArm = "annotated", settings: LLMSettings | None = None,
                 seed: int | None = None, max_revisions: int = _BUDGETS.max_revisions,
                 max_tool_calls: int = _BUDGETS.max_tool_calls,
                 max_tokens_in: int | None = _BUDGETS.max_tokens_in,
                 max_turns: int | None = _BUDGETS.max_turns,
                 window_chars: int = _BUDGETS.window_chars,
                 on_budget: OnBudget = _BUDGETS.on_budget,
                 transcripts: Path | None = None) -> None:
        if not model or not isinstance(model, str):
            raise ValueError("the LLM auditor needs a model: a litellm model string, e.g. "
                             "openai/gpt-4o-mini")
        if contract not in CONTRACT_ARMS:
            raise ValueError(f"contract must be one of {', '.join(CONTRACT_ARMS)}, "
                             f"not {contract!r}")
        if graph not in GRAPH_ARMS:
            raise ValueError(f"graph must be one of {', '.join(GRAPH_ARMS)}, not {graph!r}")
        if on_budget not in ("insufficient_evidence", "error"):
            raise ValueError(f"on_budget must be insufficient_evidence or error, "
                             f"not {on_budget!r}")
        for name, value in (("max_revisions", max_revisions), ("max_tool_calls", max_tool_calls)):
            if value < 0:
                raise ValueError(f"{name} must be 0 or more, not {value}")
        self.model = model
        self.contract: ContractArm = contract
        self.graph: GraphArm = graph
        self.settings = settings or LLMSettings()
        self.client = self.settings.client()  # raises CassetteError on a bad cassette setting
        self.seed = seed if seed is not None else self.settings.seed
        self.max_revisions = max_revisions
        self.max_tool_calls = max_tool_calls
        self.max_tokens_in = max_tokens_in
        self.max_turns = (max_turns if max_turns is not None
                          else max_tool_calls + 2 * (max_revisions + 1) + 4)
        self.window = clamp_budget(window_chars, window_chars)
        self.on_budget: OnBudget = on_budget
        self.transcripts = Path(transcripts) if transcripts is not None else None
        self.system = system_prompt(contract)
        self.tools = investigation_tools(graph, self.window)
        if contract == "full":
            self.tools.append(submit_tool())
        digest = hashlib.sha256((self.system + "\n" + to_json(self.tools)).encode("utf-8"))
        self.prompt_version = f"{contract}-{PROMPT_VERSION}+{digest.hexdigest()[:8]}"
        self.last_session: AuditSession | None = None

    @property
    def auditor(self) -> Auditor:
        return Auditor(kind="llm", model=self.model, prompt_version=self.prompt_version,
                       seed=self.seed)

    @property
    def identity(self) -> AuditorIdentity:
        """Which auditor this is (`IdentifiedAuditor`): the report block's kind, model and
        prompt version, and the arm; a folder of another one's reports is not resumed."""
        return AuditorIdentity(kind="llm", model=self.model,
                               prompt_version=self.prompt_version, contract=self.contract,
                               graph=self.graph)

    @property
    def budgets(self) -> AuditBudgets:
        """When this auditor's audits stop, as applied (`window_chars` as clamped)."""
        return AuditBudgets(max_tool_calls=self.max_tool_calls,
                            max_revisions=self.max_revisions,
                            max_tokens_in=self.max_tokens_in, max_turns=self.max_turns,
                            window_chars=self.window, on_budget=self.on_budget)

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                choice: str) -> dict[str, Any]:
        """One request as it is sent (and keyed in the cassette): the client's, with this
        auditor's model and seed. `request_settings` reads its options from here, so
        what is recorded is what was sent."""
        request = self.client.request(self.model, messages, tools, choice)
        if self.seed is not None:
            request["seed"] = self.seed
        return request

    @property
    def request_settings(self) -> AuditorSettings:
        """The effective request settings of this auditor (`SampledAuditor`): the model
        and sampling options every request carries, where provider keyword arguments
        override them the value that reaches the provider, the transport limits, and
        the budgets (recorded where they differ from the defaults)."""
        sent = self.request([], None, "auto")
        extra = self.settings.completion_kwargs
        options = {k: extra.get(k, sent.get(k)) for k in ("temperature", "max_tokens", "seed")}
        return AuditorSettings.model_validate({
            "model": self.model, **{k: v for k, v in options.items() if v is not None},
            "timeout": self.settings.timeout, "retries": self.settings.retries,
            "completion_params": sorted(set(extra) - set(options)),
            "budgets": self.budgets})

    def audit(self, bundle: Bundle) -> Report:
        return asyncio.run(self.audit_async(bundle))

    async def audit_async(self, bundle: Bundle) -> Report:
        run = _Run(self, bundle)
        try:
            return await run.go()
        except AuditError as exc:
            raise LLMAuditError(str(exc), run.session) from None
        finally:
            self.last_session = run.session
            if self.transcripts is not None:
                self.transcripts.mkdir(parents=True, exist_ok=True)
                name = f"{_safe_id(bundle.manifest.episode)}.{self.contract}-{self.graph}.json"
                (self.transcripts / name).write_text(
                    run.session.model_dump_json(indent=1) + "\n", encoding="utf-8")


class _Run:
    """One audit's conversation and bookkeeping."""

    def __init__(self, auditor: LLMAuditor, bundle: Bundle) -> None:
        self.a = auditor
        self.bundle = bundle
        manifest = bundle.root / MANIFEST
        if not manifest.is_file():
            raise AuditError(f"{bundle.root}: not a bundle folder (no {MANIFEST}); the LLM "
                             "auditor reads bundles written by eairc bundle")
        self.ref = BundleRef(episode=bundle.manifest.episode,
                             manifest_sha256=sha256_file(manifest))
        episode = bundle.manifest.episode
        arm = f"{auditor.contract}/{auditor.graph}"
        self.scope = f"audit/{episode}/{arm}"
        key = to_json([auditor.model, auditor.contract, auditor.graph, auditor.prompt_version,
                       auditor.seed])
        self.report_id = (f"{_safe_id(episode)}.llm-"
                          f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:8]}")
        self.session = AuditSession(episode=episode, model=auditor.model,
                                    contract=auditor.contract, graph=auditor.graph,
                                    prompt_version=auditor.prompt_version, scope=self.scope,
                                    settings=auditor.request_settings)
        self.rng = random.Random(f"{self.scope}:backoff")
        self.counters: dict[str, int] = {}
        self.order = {s.step: i for i, s in enumerate(bundle.steps)}
        self.steps_read: set[str] = set()
        self.queries: list[QueryRecord] = []
        self.offered = {t["function"]["name"] for t in auditor.tools}
        self.budget_noted = False
        self.last_schema_valid: dict[str, Any] | None = None
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": auditor.system},
            {"role": "user", "content": self.opening()}]

    # ------------------------------------------------------------ the first message
    def opening(self) -> str:
        a = self.a
        parts = [overview(self.bundle, a.window)]
        if a.graph != "none":
            index = graph_index(self.bundle, query_layer(a.graph), budget=a.window)
            parts.append(f"## Interaction graph index ({a.graph} layer; read the steps "
                         f"themselves with read)\n{to_json(index)}")
        else:
            window = first_window(self.bundle, a.window)
            self.steps_read.update(window.get("steps", []))
            parts.append("## The record's steps, first window (read on with the `more` "
                         f"calls)\n{to_json(window)}")
        if a.contract == "full":
            parts.append(f"When you have inspected enough, submit your report with "
                         f"{SUBMIT_TOOL}. You may make up to {a.max_tool_calls} tool calls.")
        else:
            parts.append(f"You may make up to {a.max_tool_calls} tool calls; then give your "
                         "audit in plain text.")
        return "\n\n".join(parts)

    # ------------------------------------------------------------ report assembly
    def coverage(self) -> Coverage:
        steps = sorted(self.steps_read, key=lambda s: self.order.get(s, len(self.order)))
        return Coverage(steps_read=steps, queries=list(self.queries))

    def usage(self) -> Usage:
        s = self.session
        return Usage(tokens_in=s.tokens_in, tokens_out=s.tokens_out,
                     cost_usd=round(s.cost_usd, 10), tool_calls=s.tool_calls)

    def envelope(self) -> dict[str, Any]:
        return {"audit_schema": AUDIT_SCHEMA, "report_id": self.report_id,
                "bundle": self.ref.model_dump(mode="json"),
                "auditor": self.a.auditor.model_dump(mode="json"),
                "coverage": self.coverage().model_dump(mode="json"),
                "usage": self.usage().model_dump(mode="json")}

    def finish(self, data: dict[str, Any]) -> Report:
        """The report with the final coverage and usage (the submission's own otherwise)."""
        final = {**data, "coverage": self.coverage().model_dump(mode="json"),
                 "usage": self.usage().model_dump(mode="json")}
        return Report.model_validate(final)

    def empty_report(self) -> Report:
        return Report.model_validate({**self.envelope(), "verdict": "insufficient_evidence"})

    # ------------------------------------------------------------ the loop
    async def go(self) -> Report:
        a, s = self.a, self.session
        while True:
            if s.turns >= a.max_turns:
                return self.out_of_budget("turns")
            if a.max_tokens_in is not None and s.tokens_in >= a.max_tokens_in:
                return self.out_of_budget("budget_tokens")
            response = await self.ask()
            s.turns += 1
            content = response.get("content") or ""
            calls = response.get("tool_calls") or []
            if calls:
                done = self.run_calls(content, calls)
                if done is not None:
                    return done
            elif content.strip():
                if a.contract == "none":
                    s.free_text = content
                    s.stop = "free_text"
                    from eairdsl.audit.naive import naive_report

                    return naive_report(content, self.bundle, auditor=a.auditor,
                                        coverage=self.coverage(), usage=self.usage(),
                                        report_id=self.report_id)
                s.malformed += 1
                self.messages.append({"role": "assistant", "content": content})
                self.messages.append({"role": "user", "content": _TEXT_NOTE})
            else:
                s.malformed += 1
                note = _EMPTY_NAIVE if a.contract == "none" else _EMPTY_NOTE
                self.messages.append({"role": "user", "content": note})

    def budget_spent(self) -> bool:
        return self.session.investigation_calls >= self.a.max_tool_calls

    async def ask(self) -> dict[str, Any]:
        a, s = self.a, self.session
        tools: list[dict[str, Any]] | None = a.tools
        choice = "auto"
        if self.budget_spent():
            if not self.budget_noted:
                self.budget_noted = True
                self.messages.append({"role": "user", "content": (
                    f"You have used all {a.max_tool_calls} tool calls of this audit. "
                    + (f"Submit your report now with {SUBMIT_TOOL}." if a.contract == "full"
                       else "Give your audit now in plain text."))})
            if a.contract == "full":
                tools = [t for t in a.tools if t["function"]["name"] == SUBMIT_TOOL]
            else:
                choice = "none"
        messages = alternate(self.messages)
        request = a.request(messages, tools, choice)
        s.chars_sent += len(to_json(messages))
        s.longest_message = max([s.longest_message] + [
            len(m["content"]) for m in messages
            if m["role"] in ("user", "tool") and isinstance(m.get("content"), str)])
        meta: dict[str, Any] = {}
        where = f"audit of {s.episode} ({s.contract}/{s.graph}) turn {s.turns + 1}"
        try:
            response = await a.client.complete(request, self.scope, self.counters, self.rng,
                                               where, meta)
        except (LLMUnavailable, CassetteMiss) as exc:
            s.error = str(exc)
            if isinstance(exc, LLMUnavailable):
                s.calls.append(call_record("auditor", request, None, meta, str(exc),
                                           turn=s.turns + 1)[0])
            raise AuditError(f"audit of {s.episode}: {exc}") from None
        s.calls.append(call_record("auditor", request, response, meta, turn=s.turns + 1)[0])
        s.tokens_in += int(response["usage"]["tokens_in"])
        s.tokens_out += int(response["usage"]["tokens_out"])
        s.cost_usd = round(s.cost_usd + float(response.get("cost") or 0.0), 10)
        return response

    def run_calls(self, content: str, calls: list[dict[str, Any]]) -> Report | None:
        s = self.session
        turn_calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for raw in calls:
            s.tool_calls += 1
            call_id = f"call_{s.tool_calls}"
            name = str(raw.get("name") or "")
            args, problem, history = _parse_args(raw.get("arguments"))
            turn_calls.append({"id": call_id, "type": "function",
                               "function": {"name": name or "unknown_tool",
                                            "arguments": history}})
            if problem is not None:
                s.malformed += 1
                result: dict[str, Any] = {"error": problem, "tool": name}
            else:
                assert args is not None
                result, report = self.dispatch(name, args)
                if report is not None:
                    return report
            results.append({"role": "tool", "tool_call_id": call_id, "content": to_json(result)})
        self.messages.append({"role": "assistant", "content": content or None,
                              "tool_calls": turn_calls})
        self.messages.extend(results)
        return None

    # ------------------------------------------------------------ tools
    def dispatch(self, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], Report | None]:
        s, a = self.session, self.a
        if name not in self.offered:
            s.malformed += 1
            return {"error": f"there is no tool {name!r}", "tools": sorted(self.offered)}, None
        if name == SUBMIT_TOOL:
            return self.submit(args)
        if self.budget_spent():
            return {"error": f"the tool-call budget ({a.max_tool_calls}) is spent: "
                             + (f"submit your report with {SUBMIT_TOOL}" if a.contract == "full"
                                else "give your audit in plain text"), "tool": name}, None
        s.investigation_calls += 1
        budget = args.get("budget")
        if isinstance(budget, str) and budget.strip().isdigit():
            budget = int(budget)  # the query API would coerce it past the window otherwise
        if isinstance(budget, int) and not isinstance(budget, bool):
            args = {**args, "budget": clamp_budget(budget, a.window)}
        elif "budget" not in args and a.window < DEFAULT_BUDGET:
            args = {**args, "budget": a.window}
        if name == GRAPH_TOOL:
            result = self.graph_tool(args)
        elif name == CONTEXT_TOOL:
            result = self.context_tool(args)
        else:
            assert name in QUERY_TOOLS_BY_ARM[a.graph]
            result = call_tool(self.bundle, name, args, query_layer(a.graph))
            if "error" not in result and name in _SHOWS_TEXT:
                self.steps_read.update(str(x) for x in result.get("steps", []))
        if "error" not in result:
            self.queries.append(QueryRecord(name=name, args=args))
        return result, None

    def graph_tool(self, args: dict[str, Any]) -> dict[str, Any]:
        extra = sorted(set(args) - {"from_step", "budget"})
        start = args.get("from_step")
        budget = args.get("budget", self.a.window)
        if extra or (start is not None and not isinstance(start, str)) \
                or not isinstance(budget, int):
            return {"error": "build_graph takes from_step (a step id) and budget (an integer)"
                             + (f"; unknown: {', '.join(extra)}" if extra else ""),
                    "tool": GRAPH_TOOL}
        return graph_index(self.bundle, query_layer(self.a.graph), start, budget)

    def context_tool(self, args: dict[str, Any]) -> dict[str, Any]:
        extra = sorted(set(args) - {"item", "offset", "budget"})
        item, offset = args.get("item"), args.get("offset", 0)
        budget = args.get("budget", DEFAULT_BUDGET)
        if extra or not isinstance(item, str) or not isinstance(offset, int) or offset < 0 \
                or not isinstance(budget, int):
            return {"error": "read_context takes item (a string), offset (an integer >= 0) "
                             "and budget (an integer)"
                             + (f"; unknown: {', '.join(extra)}" if extra else ""),
                    "tool": CONTEXT_TOOL}
        return read_context(self.bundle, item, offset, clamp_budget(budget, self.a.window))

    def submit(self, args: dict[str, Any]) -> tuple[dict[str, Any], Report | None]:
        s, a = self.session, self.a
        data = {**args, **self.envelope()}
        result = validate_report(data, self.bundle)
        attempt = len(s.submissions) + 1
        diagnostics = _diagnostics(result)
        s.submissions.append(Submission(
            attempt=attempt, turn=s.turns, accepted=result.ok, schema_valid=result.schema_valid,
            report=data, diagnostics=diagnostics, findings_resolvable=result.findings_resolvable,
            findings_total=result.findings_total, units_resolvable=result.units_resolvable,
            units_total=result.units_total))
        if result.schema_valid:
            self.last_schema_valid = data
        if result.ok:
            s.accepted = True
            s.stop = "accepted"
            return {}, self.finish(data)
        left = a.max_revisions + 1 - attempt
        if left <= 0:
            s.stop = "revisions_spent"
            if self.last_schema_valid is None:
                raise AuditError(f"audit of {s.episode}: {attempt} report(s) submitted, none "
                                 "follows the report contract ("
                                 + "; ".join(f"{d['code']} {d['message']}"
                                             for d in diagnostics[:3]) + ")")
            return {}, self.finish(self.last_schema_valid)
        errors = [d for d in diagnostics if d["severity"] == "error"]
        return {"accepted": False, "attempt": attempt, "resubmissions_left": left,
                "errors": errors, "warnings": [d for d in diagnostics if d not in errors],
                "note": "the report was not accepted: fix every error and submit the whole "
                        "report again (verdict, findings, leads, out_of_catalogue)"}, None

    def out_of_budget(self, why: Stop) -> Report:
        s, a = self.session, self.a
        s.stop = why
        if self.last_schema_valid is not None:
            return self.finish(self.last_schema_valid)
        if a.on_budget == "error":
            raise AuditError(f"audit of {s.episode}: budget spent ({why}) before a report "
                             "was submitted")
        return self.empty_report()


def audit_with_llm(bundle: Bundle | Path, model: str, **options: Any
                   ) -> tuple[Report, AuditSession]:
    """One LLM audit of a bundle (a loaded `Bundle` or its folder) without `eairc`:
    `LLMAuditor(model, **options).audit(...)`, returning the report and the session.

    Raises `LLMAuditError` (an `AuditError` carrying the session) when no report could
    be produced, `evidence.BundleError` for an unreadable folder.
    """
    loaded = bundle if isinstance(bundle, Bundle) else Bundle.load(Path(bundle))
    auditor = LLMAuditor(model, **options)
    report = auditor.audit(loaded)
    assert auditor.last_session is not None
    return report, auditor.last_session


def _parse_args(text: Any) -> tuple[dict[str, Any] | None, str | None, str]:
    """The call's arguments, what is wrong with them, and what the history shows."""
    if isinstance(text, dict):
        return text, None, to_json(text)
    if text is None or not str(text).strip():
        return {}, None, "{}"
    try:
        args = json.loads(str(text))
    except (json.JSONDecodeError, TypeError):
        return None, "the arguments were not valid JSON; send one JSON object", "{}"
    if not isinstance(args, dict):
        return None, "the arguments were not a JSON object", "{}"
    return args, None, str(text)
