"""Choosing an Auditor Agent by name: what `eairc audit` and `eairc audit-study` build.

Three kinds, one protocol (`auditor.AuditorAgent`), each a factory registered with
`@auditor_kind` in `AUDITORS` (`eairdsl.registry`), which also says whether the kind
has arms and a cassette (no `kind == "llm"` tests in the callers):

- `offline` (the default): the deterministic rules auditor (`offline.RulesAuditor`);
  no network, reads only the bundle.
- `llm`: any litellm model with the query API as tools (`llm.LLMAuditor`), arms
  `contract` full|none and `graph` annotated|topology|none.
- `oracle`: certificates from the grader's witness steps (`oracle.OracleAuditor`).
  Grader-side only — for testing the pipeline and as an upper bound — so the
  audit study refuses it as an arm.

Each is imported only when chosen: the offline path never loads litellm.
`identity_of(agent)` (defined in `auditor`, re-exported here) says which of them an
auditor is: each says so itself (`IdentifiedAuditor`), so the runner asks the agent
and imports none of the factories (which import it: the cycle this broke).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from eairdsl.audit.auditor import AuditorAgent, identity_of
from eairdsl.errors import UsageError
from eairdsl.registry import Registry

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["AUDITORS", "AUDITOR_KINDS", "AuditorKind", "AuditorRequest", "ContractArm",
           "GraphArm", "KindEntry", "arm_name", "auditor_kind", "identity_of", "make_auditor",
           "takes_model", "grader_side"]

AuditorKind = Literal["offline", "llm", "oracle"]
ContractArm = Literal["full", "none"]
GraphArm = Literal["annotated", "topology", "none"]


@dataclass(frozen=True)
class AuditorRequest:
    """What `make_auditor` was asked for, handed to the chosen kind's factory."""

    out: Path
    model: str | None = None
    contract: str = "full"
    graph: str = "annotated"
    settings: LLMSettings | None = None
    world: Path | None = None
    llm_options: dict[str, Any] = field(default_factory=dict)


#: a kind's factory: the auditor for the request, and what the audit's index records of it
Build = Callable[[AuditorRequest], tuple[AuditorAgent, dict[str, Any]]]


@dataclass(frozen=True)
class KindEntry:
    """One auditor kind: its factory, whether it has arms (`--model`, `--contract`,
    `--graph`: an arm per model and reading) and a cassette (`--record`, `--replay`),
    and whether it reads the grader's side (then it is no arm of an audit study)."""

    build: Build
    arms: bool = False
    cassette: bool = False
    grader_side: bool = False


#: the auditor kinds `--auditor` chooses from, in the order the help lists them
AUDITORS: Registry[KindEntry] = Registry("auditor", option="--auditor")


def auditor_kind(name: str, *, arms: bool = False, cassette: bool = False,
                 grader_side: bool = False) -> Callable[[Build], Build]:
    """Register the decorated factory as auditor kind `name` (Inspect's `@scorer`)."""
    def add(build: Build) -> Build:
        AUDITORS.add(name, KindEntry(build, arms=arms, cassette=cassette,
                                     grader_side=grader_side), origin=build.__module__)
        return build
    return add


@auditor_kind("offline")
def _offline(request: AuditorRequest) -> tuple[AuditorAgent, dict[str, Any]]:
    from eairdsl.audit.offline import RulesAuditor

    return RulesAuditor(), {"kind": "offline"}


@auditor_kind("llm", arms=True, cassette=True)
def _llm(request: AuditorRequest) -> tuple[AuditorAgent, dict[str, Any]]:
    if not request.model:
        raise UsageError("--auditor llm needs --model (a litellm model string, e.g. "
                         "openai/gpt-4o-mini or ollama_chat/qwen2.5)")
    from eairdsl.audit.cassettes import finished_exchanges
    from eairdsl.audit.llm import LLMAuditor

    # A resumed recording keeps the exchanges of the reports it keeps: opening the
    # cassette empties it (eairdsl.audit.cassettes).
    settings = request.settings
    recording = settings.record if settings is not None else None
    kept = finished_exchanges(recording, request.out) if recording is not None else []
    auditor = LLMAuditor(request.model, contract=request.contract,  # type: ignore[arg-type]
                         graph=request.graph,  # type: ignore[arg-type]
                         settings=settings, **request.llm_options)
    if kept and recording is not None:
        with recording.open("a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in kept))
    return auditor, {"kind": "llm", "model": request.model, "contract": request.contract,
                     "graph": request.graph}


@auditor_kind("oracle", grader_side=True)
def _oracle(request: AuditorRequest) -> tuple[AuditorAgent, dict[str, Any]]:
    from eairdsl.audit.oracle import OracleAuditor

    return (OracleAuditor.for_audit(request.out, request.world),
            {"kind": "oracle", "grader_side": True})


#: the kinds' names, in registration order
AUDITOR_KINDS: tuple[str, ...] = AUDITORS.names()


def takes_model(kind: str) -> bool:
    """Whether auditor `kind` is played by a model (`--model`, arms per model and reading);
    False for a name nobody registered (`make_auditor` refuses it with the choices)."""
    entry = AUDITORS.find(kind)
    return entry is not None and entry.arms


def grader_side(kind: str) -> bool:
    """Whether auditor `kind` reads the grader's side (then it is no arm of a study)."""
    entry = AUDITORS.find(kind)
    return entry is not None and entry.grader_side


def arm_name(kind: str, model: str | None, contract: str, graph: str) -> str:
    """The arm's folder name: auditor × contract × graph (and the model for a kind with
    arms, the LLM auditor). An unknown kind is its own name (`make_auditor` refuses it)."""
    entry = AUDITORS.find(kind)
    if entry is None or not entry.arms:
        return kind
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in (model or "model"))
    return f"{kind}-{safe}-contract_{contract}-graph_{graph}"


def make_auditor(kind: str, out: Path, *, model: str | None = None, contract: str = "full",
                 graph: str = "annotated", settings: LLMSettings | None = None,
                 world: Path | None = None, record: bool = False,
                 replay: Path | None = None, **llm_options: Any
                 ) -> tuple[AuditorAgent, dict[str, Any]]:
    """The auditor of `kind` for an audit into `out`, and what the index records of it.

    `record` and `replay` say whether the user asked to record or replay a cassette: only
    a kind with a cassette (the LLM auditor) has one, so asking it of another is refused
    rather than ignored (an offline audit given `--replay DIR` used to run the rules and
    report success)."""
    entry = AUDITORS.get(kind)
    if contract not in get_args(ContractArm):
        raise UsageError(f"--contract is full or none, not '{contract}'")
    if graph not in get_args(GraphArm):
        raise UsageError(f"--graph is annotated, topology or none, not '{graph}'")
    if not entry.arms and (model is not None or contract != "full" or graph != "annotated"):
        raise UsageError("--model, --contract and --graph choose an LLM auditor's arm; add "
                         "--auditor llm")
    if not entry.cassette and (record or replay is not None):
        raise UsageError(f"--record and --replay keep an LLM auditor's calls; the {kind} "
                         "auditor makes none: add --auditor llm --model M, or drop them")
    return entry.build(AuditorRequest(out=out, model=model, contract=contract, graph=graph,
                                      settings=settings, world=world,
                                      llm_options=dict(llm_options)))
