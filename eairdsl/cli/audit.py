"""`eairc audit` and `eairc audit-study`: blind audits of episodes, and the audit study.

The auditors, the runner, the cohort and the grading are the library's
(eairdsl.audit); this module builds the auditor from the options (its LLM
options gathered into one LLMOptions, eairdsl.cli.options), draws the progress
and prints the summaries.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from eairdsl.cli.options import (
    API_BASE,
    LLM_DEFAULTS,
    LLM_SEED,
    MAX_CONNECTIONS,
    MAX_TOKENS,
    RETRIES,
    TEMPERATURE,
    TIMEOUT,
    LLMOptions,
    llm_options,
    option,
)
from eairdsl.cli.output import EXIT_INPUT, EXIT_OK, EXIT_USAGE, err, fail, interrupted, refuse
from eairdsl.errors import UsageError

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.audit.cohort import ArmSummary
    from eairdsl.audit.runner import AuditIndex

__all__ = ["audit", "audit_study_command", "auditor_settings"]

_AUDITOR_HELP = ("offline (default: deterministic rules, no network), llm (--model) or "
                 "oracle (grader-side witness steps; a pipeline check, not an auditor)")
#: The transport and sampling options of an LLM auditor, in the audit commands' order.
_AUDITOR_LLM = (API_BASE, TIMEOUT, RETRIES, MAX_CONNECTIONS, TEMPERATURE, MAX_TOKENS, LLM_SEED)


@llm_options(
    option("record", Annotated[bool, typer.Option(
        "--record", help="Record the LLM auditor's calls to OUT/cassettes/auditor.jsonl "
        "(a resumed audit keeps those of the reports it keeps).")], False),
    option("replay", Annotated[Path | None, typer.Option(
        metavar="AUDIT_DIR", help="Replay an earlier audit's cassette (offline): its folder, "
        "its cassettes/ folder or the file.")]),
    *_AUDITOR_LLM)
def audit(
    target: Annotated[Path, typer.Argument(
        metavar="TRACE|RUN_DIR|STUDY_DIR", help="A trace, a run folder or a study folder.")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Audit folder: bundles/, reports/, index.json (default for a "
        "study folder: STUDY_DIR/audit/ARM).")] = None,
    auditor: Annotated[str, typer.Option(help=_AUDITOR_HELP)] = "offline",
    model: Annotated[str | None, typer.Option(
        help="litellm model string of an LLM auditor.")] = None,
    contract: Annotated[str, typer.Option(
        help="LLM arm: full (contract v1, submit_report validated) or none (free text).")
    ] = "full",
    graph: Annotated[str, typer.Option(
        help="LLM arm: annotated, topology or none (which graph tools are offered).")
    ] = "annotated",
    world: Annotated[Path | None, typer.Option(
        "--world", help="The world the traces ran on (default: found from each header).")
    ] = None,
    llm: LLMOptions = LLM_DEFAULTS,
) -> None:
    """Audit every episode: one contract-v1 report per episode, validated (docs/audit.md).

    Each auditor sees only the episode's sanitized bundle. Rerun the same command
    to resume; reports already written are kept.
    """
    from eairdsl.audit.auditors import arm_name, make_auditor, takes_model
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.runner import audit_episodes
    from eairdsl.cli.progress import AuditBar
    from eairdsl.study.store import STORE_FILE

    arm = arm_name(auditor, model, contract, graph)
    if out is None:
        if not (target / STORE_FILE).is_file():
            fail("error: --out is needed unless the target is a study folder", EXIT_USAGE)
        out = target / "audit" / arm
    try:
        settings = auditor_settings(model if takes_model(auditor) else None, llm, out)
        agent, describe = make_auditor(auditor, out, model=model, contract=contract,
                                       graph=graph, settings=settings, world=world,
                                       record=bool(llm.record), replay=llm.replay)
        with AuditBar(f"audit ({arm})") as bar:
            index = audit_episodes(target, out, agent, world=world,
                                   describe={"arm": arm, **describe}, progress=bar)
    except (UsageError, BundleError) as exc:
        refuse(exc)
    except KeyboardInterrupt:
        interrupted(f"reports written so far are in {out}; rerun the same command to resume")
    _audit_summary(index, arm, out)


def auditor_settings(model: str | None, llm: LLMOptions, out: Path,
                     arm: str | None = None) -> LLMSettings | None:
    """The LLMSettings of an LLM auditor playing `model`, else None (no model).

    Its cassette is OUT/cassettes/auditor.jsonl; a replay reads the one `--replay`
    names (for `arm`, in an audit study).
    """
    if model is None:
        return None
    from eairdsl.audit.cassettes import auditor_cassette, replay_cassette

    llm.check_cassettes()
    return llm.settings(
        model=model, record=auditor_cassette(out) if llm.record else None,
        replay=replay_cassette(llm.replay, arm) if llm.replay is not None else None)


def _audit_summary(index: AuditIndex, arm: str, out: Path) -> None:
    """Reports, verdicts and resolvable rates of an audit; exit 1 if an episode has no
    report or a report fails validation (everything written is kept: an invalid report
    is evidence about the auditor, but not an audit a caller may build on)."""
    from eairdsl.audit.folder import AuditFolder

    entries = index.entries
    valid = sum(e.status == "valid" for e in entries)
    failed = [e for e in entries if e.status == "failed"]
    invalid = [e for e in entries if e.status == "invalid"]
    verdicts: dict[str, int] = {}
    for e in entries:
        if e.verdict:
            verdicts[e.verdict] = verdicts.get(e.verdict, 0) + 1
    f_ok = sum(e.findings_resolvable for e in entries)
    f_all = sum(e.findings_total for e in entries)
    u_ok = sum(e.units_resolvable for e in entries)
    u_all = sum(e.units_total for e in entries)
    typer.echo(f"audited {len(entries)} episode(s) with {arm}: {valid} valid report(s), "
               f"{len(entries) - valid - len(failed)} invalid, {len(failed)} without a report")
    if index.settings is not None:
        typer.echo(f"auditor requests: {index.settings.describe()}")
    typer.echo("verdicts: " + (", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
                               or "none"))
    typer.echo(f"resolvable findings {f_ok}/{f_all}, evidence units {u_ok}/{u_all}")
    folder = AuditFolder(out)
    typer.echo(f"reports: {folder.reports_dir}/; index: {folder.index_path} (grader-side)")
    for e in failed[:5]:
        err(f"no report for {e.episode}: {e.reason}")
    if invalid:
        first = folder.validation_path(invalid[0].episode)
        err(f"error: {len(invalid)} of {len(entries)} report(s) failed validation (kept, "
            f"with their diagnostics: {first}" + (" and the others" if len(invalid) > 1
                                                   else "") + ")")
    raise typer.Exit(EXIT_INPUT if failed or invalid else EXIT_OK)


@llm_options(
    option("record", Annotated[bool, typer.Option(
        "--record", help="Record the LLM auditor's calls to "
        "OUT/arms/ARM/cassettes/auditor.jsonl.")], False),
    option("replay", Annotated[Path | None, typer.Option(
        metavar="DIR", help="Replay this arm from an earlier audit study's (or audit's) "
        "cassette (offline).")]),
    *_AUDITOR_LLM)
def audit_study_command(
    study_dir: Annotated[Path, typer.Argument(metavar="STUDY_DIR", help="A study folder.")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Audit-study folder (default STUDY_DIR/audit-study).")] = None,
    per_world: Annotated[int, typer.Option(min=1, help="Trajectories per world.")] = 20,
    positives: Annotated[int, typer.Option(
        min=0, help="Of them, with the seeded target realized (F1 may have fewer).")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the cohort's draw.")] = 0,
    auditor: Annotated[str, typer.Option(help="offline (default) or llm.")] = "offline",
    model: Annotated[str | None, typer.Option(
        help="litellm model string of an LLM auditor.")] = None,
    contract: Annotated[str, typer.Option(help="LLM arm: full or none.")] = "full",
    graph: Annotated[str, typer.Option(help="LLM arm: annotated, topology or none.")
                     ] = "annotated",
    world: Annotated[Path | None, typer.Option("--world")] = None,
    llm: LLMOptions = LLM_DEFAULTS,
) -> None:
    """The audit study (EAIR F.14): a cohort by content identity, blind audits, grading.

    Prints the Table-3-style summary; DIR/summary.json holds it per arm and world.
    Run again with another --auditor/--model/--contract/--graph to add an arm on the
    same cohort.
    """
    from eairdsl.audit.auditors import arm_name, grader_side, make_auditor, takes_model
    from eairdsl.audit.cohort import audit_study
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.folder import AuditStudyFolder
    from eairdsl.cli.progress import AuditBar

    if grader_side(auditor):
        fail("error: the oracle reads the grader's witness steps: it is not an arm of the "
             "audit study (use `eairc audit --auditor oracle` to check the pipeline)",
             EXIT_USAGE)
    out = out if out is not None else study_dir / "audit-study"
    arm = arm_name(auditor, model, contract, graph)
    arm_dir = AuditStudyFolder(out).arm(arm).path
    try:
        settings = auditor_settings(model if takes_model(auditor) else None, llm, arm_dir,
                                    arm)
        agent, describe = make_auditor(auditor, arm_dir, model=model, contract=contract,
                                       graph=graph, settings=settings, world=world,
                                       record=bool(llm.record), replay=llm.replay)
        with AuditBar(f"audit study ({arm})") as bar:
            summary = audit_study(study_dir, out, agent, arm, describe=describe,
                                  per_world=per_world, positives=positives, seed=seed,
                                  world=world, progress=bar)
    except (UsageError, BundleError) as exc:
        refuse(exc)
    except KeyboardInterrupt:
        interrupted(f"rerun the same command to resume ({out})")
    _audit_study_table(summary, arm)
    study_folder = AuditStudyFolder(out)
    typer.echo(f"summary: {study_folder.summary_path}; cohort (grader-side): "
               f"{study_folder.cohort_path}")
    missing = int(summary.totals.get("seeded", 0) + summary.totals.get("negatives", 0)
                  - summary.totals.get("reports", 0))
    if missing:
        fail(f"{missing} audit(s) produced no report; rerun the same command to retry them")
    raise typer.Exit(EXIT_OK)


def _audit_study_table(summary: ArmSummary, arm: str) -> None:
    """The arm's Table-3-style rows, one per world and one for all."""
    from rich.console import Console
    from rich.table import Table

    def pct(k: float, n: float, percent: bool) -> str:
        return f"{int(k)}/{int(n)}" + (f" {100 * k / n:.0f}%" if n and percent else "")

    table = Table(title=f"Audit study, arm {arm} (EAIR Table 3 / Table 14)")
    for col in ("world", "seeded: verdict", "witness cited", "negatives: findings",
                "findings resolvable", "units resolvable", "tokens in", "s/audit"):
        table.add_column(col, justify="left" if col == "world" else "right")
    rows = [*sorted(summary.worlds.items()), ("all", summary.totals)]
    for name, g in rows:
        total = name == "all"
        table.add_row(name, pct(g["seeded_with_verdict"], g["seeded"], total),
                      pct(g["cites_witness"], g["seeded_with_verdict"], total),
                      pct(g["negatives_with_findings"], g["negatives"], total),
                      pct(g["resolvable_findings"], g["findings"], total),
                      pct(g["resolvable_units"], g["evidence_units"], total),
                      str(int(g["tokens_in"])),
                      f"{g['seconds'] / g['reports']:.3f}" if g["reports"] else "—")
    Console().print(table)
