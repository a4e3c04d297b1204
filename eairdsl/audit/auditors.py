"""Choosing an Auditor Agent by name: what `eairc audit` and `eairc audit-study` build.

Three kinds, one protocol (`auditor.AuditorAgent`):

- `offline` (the default): the deterministic rules auditor (`offline.RulesAuditor`);
  no network, reads only the bundle.
- `llm`: any litellm model with the query API as tools (`llm.LLMAuditor`), arms
  `contract` full|none and `graph` annotated|topology|none.
- `oracle`: certificates from the grader's witness steps (`oracle.OracleAuditor`).
  Grader-side only — for testing the pipeline and as an upper bound — so the
  audit study refuses it as an arm.

Each is imported only when chosen: the offline path never loads litellm.
`identity_of(agent)` says which of them an auditor is (`auditor.AuditorIdentity`), so
the runner can refuse to resume a folder of another auditor's reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from eairdsl.audit.auditor import AuditorAgent, AuditorIdentity, IdentifiedAuditor
from eairdsl.errors import UsageError

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["AUDITOR_KINDS", "AuditorKind", "ContractArm", "GraphArm", "arm_name",
           "identity_of", "make_auditor"]

AuditorKind = Literal["offline", "llm", "oracle"]
AUDITOR_KINDS: tuple[str, ...] = get_args(AuditorKind)
ContractArm = Literal["full", "none"]
GraphArm = Literal["annotated", "topology", "none"]


def arm_name(kind: str, model: str | None, contract: str, graph: str) -> str:
    """The arm's folder name: auditor × contract × graph (and the model for llm)."""
    if kind != "llm":
        return kind
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in (model or "model"))
    return f"llm-{safe}-contract_{contract}-graph_{graph}"


def make_auditor(kind: str, out: Path, *, model: str | None = None, contract: str = "full",
                 graph: str = "annotated", settings: LLMSettings | None = None,
                 world: Path | None = None, record: bool = False,
                 replay: Path | None = None, **llm_options: Any
                 ) -> tuple[AuditorAgent, dict[str, Any]]:
    """The auditor of `kind` for an audit into `out`, and what the index records of it.

    `record` and `replay` say whether the user asked to record or replay a cassette: only
    an LLM auditor has one, so asking it of another is refused rather than ignored (an
    offline audit given `--replay DIR` used to run the rules and report success)."""
    if kind not in AUDITOR_KINDS:
        raise UsageError(f"unknown auditor '{kind}'; choose {', '.join(AUDITOR_KINDS)}")
    if contract not in get_args(ContractArm):
        raise UsageError(f"--contract is full or none, not '{contract}'")
    if graph not in get_args(GraphArm):
        raise UsageError(f"--graph is annotated, topology or none, not '{graph}'")
    if kind != "llm" and (model is not None or contract != "full" or graph != "annotated"):
        raise UsageError("--model, --contract and --graph choose an LLM auditor's arm; add "
                         "--auditor llm")
    if kind != "llm" and (record or replay is not None):
        raise UsageError(f"--record and --replay keep an LLM auditor's calls; the {kind} "
                         "auditor makes none: add --auditor llm --model M, or drop them")
    match kind:
        case "offline":
            from eairdsl.audit.offline import RulesAuditor

            return RulesAuditor(), {"kind": "offline"}
        case "oracle":
            from eairdsl.audit.oracle import OracleAuditor

            return OracleAuditor.for_audit(out, world), {"kind": "oracle", "grader_side": True}
        case _:
            if not model:
                raise UsageError("--auditor llm needs --model (a litellm model string, e.g. "
                                 "openai/gpt-4o-mini or ollama_chat/qwen2.5)")
            from eairdsl.audit.cassettes import finished_exchanges
            from eairdsl.audit.llm import LLMAuditor

            # A resumed recording keeps the exchanges of the reports it keeps: opening the
            # cassette empties it (eairdsl.audit.cassettes).
            recording = settings.record if settings is not None else None
            kept = finished_exchanges(recording, out) if recording is not None else []
            auditor = LLMAuditor(model, contract=contract,  # type: ignore[arg-type]
                                 graph=graph,  # type: ignore[arg-type]
                                 settings=settings, **llm_options)
            if kept and recording is not None:
                with recording.open("a", encoding="utf-8") as fh:
                    fh.write("".join(line + "\n" for line in kept))
            return auditor, {"kind": "llm", "model": model, "contract": contract,
                             "graph": graph}


def identity_of(agent: AuditorAgent) -> AuditorIdentity | None:
    """Which auditor `agent` is, as its reports' `auditor` blocks will name it: the LLM
    auditor says so itself (with its arm); the rules auditor and the oracle are known by
    class (their rule set or witness reading is their prompt version); any other
    auditor (a test's, a person's) is unknown (None) and its folders are not checked."""
    if isinstance(agent, IdentifiedAuditor):
        return agent.identity
    from eairdsl.audit.offline import PROMPT_VERSION, RulesAuditor

    if isinstance(agent, RulesAuditor):
        return AuditorIdentity(kind="rules", prompt_version=PROMPT_VERSION)
    from eairdsl.audit.oracle import ORACLE, OracleAuditor

    if isinstance(agent, OracleAuditor):
        return AuditorIdentity(kind="oracle", prompt_version=ORACLE)
    return None
