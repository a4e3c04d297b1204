"""`eairc study`: every world × model × condition × instance × seed, resumable.

The grid, the executors and the store are the library's (eairdsl.study); this
module parses the options, draws the progress and prints the summary. A
study's LLM options are gathered into one LLMOptions (eairdsl.cli.options).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

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
from eairdsl.cli.output import EXIT_OK, EXIT_USAGE, err, fail, interrupted, refuse
from eairdsl.cli.world import world_paths
from eairdsl.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from eairdsl.agents.llm import LLMSettings
    from eairdsl.ir import World
    from eairdsl.study.executor import StudySummary
    from eairdsl.study.grid import Model, WorldPlan

__all__ = ["study", "study_settings"]

_STUDY_EXECUTORS = ("local", "dask")
_WORLDS_HELP = "World files or generated/<world> folders (default: worlds/*.eair)."
_MODELS_HELP = ("Comma-separated models: an agent profile, a litellm model string "
                "(openai/gpt-4o-mini, ollama/llama3.1), or NAME=PROFILE / NAME=MODEL to name "
                "the model column (default: the --agents value).")
_STUDY_RECORD_HELP = ("Record every LLM exchange to OUT/cassettes/<model>.jsonl (kept across "
                      "resumed runs).")
_STUDY_REPLAY_HELP = ("Answer every LLM request from the cassettes of this study folder (or "
                      "cassettes folder) instead of the network.")
_INSTANCES_HELP = "'all', 'seed' (one instance drawn per seed) or comma-separated ids."
_SEEDS_HELP = "Seeds 0..N-1 per cell (default: the world's declared seeds)."
_SCHEDULER_HELP = "Dask scheduler, e.g. tcp://host:8786 (default: a local cluster)."
_SHIFTS_HELP = ("on: the world's declared trait shifts apply; off: only its mechanics "
                "(each sim model's :mechanics twin); both: each model and its twin, and the "
                "report marks each contrast mechanical or declared.")

# A study's model and cassette options (its models are --models, each column's own
# model); the transport and sampling ones are shared.
_STUDY_LLM = (
    option("counterpart_model", Annotated[str | None, typer.Option(
        help="Fixed model for counterpart simulators of LLM models (default: each model).")]),
    option("judge_model", Annotated[str | None, typer.Option(
        help="Fixed model for LLM judges, the same for the whole study.")]),
    option("role_model", Annotated[list[str] | None, typer.Option(
        metavar="ROLE=MODEL", help="Fixed model for one role or simulator (repeatable).")]),
    option("record", Annotated[bool, typer.Option("--record", help=_STUDY_RECORD_HELP)],
           False),
    option("replay", Annotated[Path | None, typer.Option(
        metavar="STUDY_DIR", help=_STUDY_REPLAY_HELP)]),
    MAX_CONNECTIONS, TIMEOUT, RETRIES, API_BASE, TEMPERATURE, MAX_TOKENS, LLM_SEED,
)


@llm_options(*_STUDY_LLM)
def study(
    worlds: Annotated[list[Path] | None, typer.Argument(help=_WORLDS_HELP)] = None,
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Study folder: results.sqlite, traces/, report/.")
    ] = Path("runs/study"),
    models: Annotated[str | None, typer.Option(help=_MODELS_HELP)] = None,
    conditions: Annotated[str, typer.Option(
        help="'all' or comma-separated condition names.")] = "all",
    instances: Annotated[str, typer.Option(help=_INSTANCES_HELP)] = "all",
    seeds: Annotated[int | None, typer.Option(min=1, help=_SEEDS_HELP)] = None,
    episodes_per_cell: Annotated[int, typer.Option(
        min=1, help="Episodes (replicates) per grid cell.")] = 1,
    agents: Annotated[str, typer.Option(
        help="sim, sim:compliant or sim:reckless, each also as PROFILE:mechanics (the "
        "default model).")] = "sim",
    shifts: Annotated[str, typer.Option(help=_SHIFTS_HELP)] = "on",
    workers: Annotated[int | None, typer.Option(
        min=1, help="Parallel workers (default: the number of CPUs).")] = None,
    executor: Annotated[str, typer.Option(help="local (processes here) or dask.")] = "local",
    scheduler: Annotated[str | None, typer.Option(help=_SCHEDULER_HELP)] = None,
    max_attempts: Annotated[int, typer.Option(
        min=1, help="Attempts per cell under the first-success rule.")] = 3,
    llm: LLMOptions = LLM_DEFAULTS,
    budget_usd: Annotated[float | None, typer.Option(
        min=0.0, help="Stop scheduling episodes once the study's LLM cost reaches this (USD).")
    ] = None,
    budget_tokens: Annotated[int | None, typer.Option(
        min=0, help="Stop scheduling episodes once the study's LLM tokens (in + out) reach "
        "this.")] = None,
) -> None:
    """Run a study: every world × model × condition × instance × seed, resumable.

    Results go to OUT/results.sqlite (one row per episode attempt) and traces to
    OUT/traces/. Rerun the same command after an interruption to resume. LLM
    models (litellm model strings in --models) run many episodes at once in one
    event loop, bounded by --max-connections per provider.
    """
    _check_placement(out, executor, scheduler)
    from rich.console import Console

    from eairdsl.cli.progress import StudyBar
    from eairdsl.study.executor import Budget, run_study, warm_llm
    from eairdsl.study.grid import GridError, parse_models

    n_workers = workers or os.cpu_count() or 1
    try:
        chosen = parse_models(models, agents, shifts)
        if llm.replay is None:  # litellm's import starts now, beside the worlds' compilation
            warm_llm(chosen, n_workers, executor)
        paths = world_paths(worlds or [])
        loaded, plans = _plan(paths, conditions, instances, seeds, episodes_per_cell)
        settings = study_settings(out, llm, chosen)
    except (UsageError, GridError) as exc:
        refuse(exc)
    _make_folder(out, loaded)
    budget = None if budget_usd is None and budget_tokens is None else \
        Budget(usd=budget_usd, tokens=budget_tokens)
    try:
        with StudyBar(Console(stderr=True)) as bar:
            summary = run_study(loaded, plans, chosen, out, workers=n_workers,
                                executor=executor, scheduler=scheduler,
                                max_attempts=max_attempts, progress=bar, llm=settings,
                                budget=budget, sources={w.meta.name: p for w, p in
                                                        zip(loaded, paths, strict=True)})
    except UsageError as exc:
        refuse(exc)
    except KeyboardInterrupt:
        interrupted(f"finished episodes are saved in {out / 'results.sqlite'}; rerun the same "
                    "command to resume")
    _study_summary(out, summary)
    _exit(out, summary)


def _check_placement(out: Path, executor: str, scheduler: str | None) -> None:
    """Where the study runs and writes, refused (exit 2) before anything is compiled."""
    if executor not in _STUDY_EXECUTORS:
        fail(f"error: unknown executor '{executor}'; choose local or dask", EXIT_USAGE)
    if scheduler and executor != "dask":
        fail("error: --scheduler needs --executor dask", EXIT_USAGE)
    if out.exists() and not out.is_dir():
        fail(f"error: --out {out} exists and is not a folder (a study folder holds "
             "results.sqlite, traces/ and report/)", EXIT_USAGE)


def _plan(worlds: list[Path], conditions: str, instances: str, seeds: int | None,
          episodes_per_cell: int) -> tuple[list[World], list[WorldPlan]]:
    """The worlds compiled and each one's grid (a GridError or UsageError if refused)."""
    from eairdsl.api import resolve_world
    from eairdsl.study.grid import parse_names, plan_world

    loaded = [resolve_world(p) for p in worlds]
    wanted = parse_names(conditions, "--conditions")
    picks = "seed" if instances.strip() == "seed" else parse_names(instances, "--instances")
    return loaded, [plan_world(w, wanted, picks, seeds, episodes_per_cell) for w in loaded]


def study_settings(out: Path, llm: LLMOptions, chosen: Sequence[Model]) -> LLMSettings | None:
    """The LLMSettings of a study of the `chosen` models (None when no LLM option is given).

    `model` is set per model column by the executor; cassettes are folders: one
    <model>.jsonl per model under OUT/cassettes (record) or the folder replayed.
    """
    from eairdsl.study.executor import CASSETTES_DIR

    llm.check_cassettes()
    roles = llm.roles()
    if not llm.any_given:
        return None
    replay_dir = None
    if llm.replay is not None:
        if llm.replay.is_file():
            raise UsageError(f"--replay {llm.replay}: a file; a study replays from a study "
                             "folder or its cassettes/ folder (one <model>.jsonl per model), "
                             "not one cassette file (`eairc run --replay` takes one)")
        replay_dir = (llm.replay / CASSETTES_DIR if (llm.replay / CASSETTES_DIR).is_dir()
                      else llm.replay)
    settings = llm.settings(counterpart_model=llm.counterpart_model,
                            judge_model=llm.judge_model, role_models=roles,
                            record=out / CASSETTES_DIR if llm.record else None,
                            replay=replay_dir)
    if not any(m.llm for m in chosen):
        raise UsageError("the LLM options need an LLM model in --models (a litellm "
                         "model string such as openai/gpt-4o-mini)")
    return settings


def _make_folder(out: Path, loaded: list[World]) -> None:
    """Create the study folder, once the worlds are known to be distinct (else exit 1)."""
    names = [w.meta.name for w in loaded]
    if len(set(names)) != len(names):
        fail(f"error: the same world is given twice ({', '.join(names)})")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"error: cannot create the study folder {out}: {exc.strerror or exc}")


def _study_summary(out: Path, summary: StudySummary) -> None:
    """The grid's table, spend per world and model, the study measures, what ran."""
    import shlex

    from rich.console import Console

    from eairdsl.study.cohort import summary_lines
    from eairdsl.study.executor import spend
    from eairdsl.study.report import summary_table
    from eairdsl.study.store import STORE_FILE, Store

    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
        table = summary_table(rows, store.worlds(), f"study {out}")
    Console(width=max(110, Console().width)).print(table)
    for (world_name, model_name), used in sorted(spend(rows).items()):
        typer.echo(f"llm spend {world_name} · {model_name}: {used['calls']} calls, "
                   f"{used['tokens_in']} tokens in, {used['tokens_out']} out, "
                   f"${used['cost']:.4f} over {used['episodes']} episode attempt(s)")
    for line in summary_lines(summary.study_measures):
        typer.echo(line)
    s = summary
    typer.echo(f"{s.attempts} episode(s) run in {s.seconds:.1f}s ({s.executor}, {s.workers} "
               f"worker(s)); {s.skipped} of {s.cells} cells were already complete; "
               f"{s.invalid_attempts} execution-invalid attempt(s)")
    typer.echo(f"results: {out / STORE_FILE}; next: `eairc report {shlex.quote(str(out))}` or "
               f"`eairc export {shlex.quote(str(out))} --format csv`")


def _exit(out: Path, summary: StudySummary) -> NoReturn:
    """Exit 1 when episodes were lost or nothing valid was measured, else 0."""
    import shlex

    if summary.stopped:
        err(f"{summary.stopped}: no new episode was scheduled; {summary.left} cell(s) left "
            "open. Rerun the same command with a higher budget to go on.")
    if summary.lost:
        fail(f"{summary.lost} episode(s) were lost with their workers; rerun the same command "
             "to run them")
    ran = summary.cells - summary.skipped
    if ran and summary.exhausted == ran:
        # nothing was measured (a missing API key, an unknown provider, a world whose every
        # episode exhausts a budget): a script or CI job must be able to tell
        fail(f"error: no valid episode: every one of the {ran} cell(s) run used its attempts "
             f"execution-invalid; the reasons are in the traces (`eairc report "
             f"{shlex.quote(str(out))}`)")
    raise typer.Exit(EXIT_OK)
