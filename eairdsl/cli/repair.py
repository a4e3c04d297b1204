"""`eairc repair`: repair a world from an audit finding, then retest and decide.

The loop (agent, guarded apply, ScopeOK, review, retest) is the library's
(eairdsl.repair); this module builds the Repair Agent and Reviewer from the
options, hands the transport (one LLMOptions, eairdsl.cli.options) to the
retest, and prints the decision.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from eairdsl.cli.options import (
    API_BASE,
    LLM_DEFAULTS,
    MAX_CONNECTIONS,
    RETRIES,
    TIMEOUT,
    LLMOptions,
    llm_options,
    option,
)
from eairdsl.cli.output import EXIT_INPUT, EXIT_OK, fail, interrupted, refuse
from eairdsl.errors import UsageError

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.repair.loop import Acceptance

__all__ = ["repair"]


@llm_options(
    API_BASE, TIMEOUT, RETRIES, MAX_CONNECTIONS,
    option("record", Annotated[bool, typer.Option("--record", help=(
        "Record every LLM exchange (Repair Agent, Reviewer, the retest's W and W' studies "
        "and its auditor) to REPAIR_DIR/cassettes/round-NN/ (kept across resumed runs)."))
    ], False),
    option("replay", Annotated[Path | None, typer.Option(
        metavar="REPAIR_DIR", help="Answer every LLM request from the cassettes of this "
        "repair folder (or its cassettes folder) instead of the network.")]),
)
def repair(
    world: Annotated[Path, typer.Argument(help="The world to repair (its .eair file).")],
    audit_dir: Annotated[Path, typer.Option(
        "--audit", metavar="AUDIT_DIR", help="An `eairc audit` folder of this world's "
        "episodes (index.json, reports/, bundles/).")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", metavar="REPAIR_DIR", help="Repair folder: plan, rounds, retest, "
        "acceptance.json, world/ (the accepted world), review.html.")],
    finding: Annotated[str | None, typer.Option(
        metavar="EPISODE:FINDING_ID", help="The finding to repair (default: the first "
        "supported finding with a repair plan).")] = None,
    agent: Annotated[str, typer.Option(help="Repair Agent: offline (catalogue) or llm.")
                     ] = "offline",
    reviewer: Annotated[str, typer.Option(help="Repair Reviewer: offline (mechanical) or llm.")
                        ] = "offline",
    model: Annotated[str | None, typer.Option(
        help="litellm model string of an LLM Repair Agent.")] = None,
    reviewer_model: Annotated[str | None, typer.Option(
        help="litellm model of an LLM Reviewer (default: --model).")] = None,
    seeds: Annotated[int, typer.Option(
        min=1, help="Fresh retest episodes per condition.")] = 20,
    max_rounds: Annotated[int, typer.Option(
        min=1, help="Review rounds at most.")] = 4,
    llm: LLMOptions = LLM_DEFAULTS,
) -> None:
    """Repair a world from an audit finding: agent, guarded apply, ScopeOK, review, retest.

    Accepted exactly when ScopeOK, ReviewOK, AuditPass and Retain >= 0.95 (EAIR D.1).
    The retest reruns the audited episodes' agents or LLM models and the audit's
    auditor (the endpoint and limits are these LLM options). Rerun the same command
    to resume after an interruption.
    """
    from eairdsl.audit.folder import AUDIT_INDEX, AuditFolder
    from eairdsl.repair.loop import repair as run_repair
    from eairdsl.repair.make import (
        agent_takes_model,
        describe,
        make_agent,
        make_reviewer,
        reviewer_takes_model,
    )

    if not AuditFolder(audit_dir).has_index():
        fail(f"error: {audit_dir} is not an audit folder (no {AUDIT_INDEX}); run `eairc audit "
             "… -o AUDIT_DIR` first")

    def role(played: bool, name: str | None) -> dict[str, object]:
        """A model-played Repair Agent's or Reviewer's settings: its model on this
        transport."""
        return {"settings": llm.settings(model=name)} if played and name is not None else {}

    try:
        transport = _transport(llm, out)
        proposer = make_agent(agent, model, **role(agent_takes_model(agent), model))
        checker = make_reviewer(reviewer, reviewer_model or model,
                                **role(reviewer_takes_model(reviewer),
                                     reviewer_model or model))
        acc = run_repair(world, audit_dir, out, proposer, checker, finding=finding,
                         seeds=seeds, max_rounds=max_rounds,
                         describe=describe(agent, reviewer, model, reviewer_model),
                         llm=transport, progress=typer.echo)
    except UsageError as exc:
        refuse(exc)
    except KeyboardInterrupt:
        interrupted(f"finished rounds and retest parts are kept in {out}; rerun the same "
                    "command to resume")
    _decision(acc, out)


def _transport(llm: LLMOptions, out: Path) -> LLMSettings:
    """The retest's LLMSettings: the endpoint and limits, and the repair's cassettes
    (REPAIR_DIR/cassettes, or the folder replayed)."""
    from eairdsl.repair.folder import RepairFolder

    llm.check_cassettes()
    replay_dir = None if llm.replay is None else RepairFolder(llm.replay).replay_source()
    return llm.settings(record=RepairFolder(out).cassettes if llm.record else None,
                        replay=replay_dir)


def _decision(acc: Acceptance, out: Path) -> None:
    """The four conditions, the target's retest and where the decision is; exit 0 when
    accepted, 1 when not."""
    t = acc.target
    typer.echo(f"{'accepted' if acc.accepted else 'not accepted'}: ScopeOK {acc.scope_ok}, "
               f"ReviewOK {acc.review_ok}, AuditPass {acc.audit_pass}, Retain {acc.retain}, "
               f"{acc.rounds} round(s)"
               + (f"; target realized {t['k']}/{t['n']} [{t['low']:.2f}, {t['high']:.2f}]"
                  if t else ""))
    from eairdsl.repair.folder import RepairFolder

    folder = RepairFolder(out)
    typer.echo(f"decision: {folder.acceptance_path}; review: {folder.review_page}"
               + (f"; repaired world: {folder.accepted_world}" if acc.accepted else ""))
    raise typer.Exit(EXIT_OK if acc.accepted else EXIT_INPUT)
