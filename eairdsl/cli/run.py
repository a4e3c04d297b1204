"""`eairc run` and `eairc validate`: episodes of one world, printed as measurements.

`run` plays episodes with sim agents or LLMs (its LLM options are gathered into
one LLMOptions, eairdsl.cli.options); `validate` is the world's self-test with
the sim profiles, which never calls a model.
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
from eairdsl.cli.output import EXIT_INPUT, EXIT_OK, EXIT_USAGE, fail, interrupted, refuse
from eairdsl.errors import UsageError

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.api import ConditionCheck, EpisodeResult, ProfileCheck
    from eairdsl.ir import World

__all__ = ["run", "run_settings", "validate"]

_MARK = {True: "yes", False: "no", None: "—"}

# `run`'s model and cassette options; the transport and sampling ones are shared.
_RUN_LLM = (
    option("model", Annotated[str | None, typer.Option(
        help="litellm model for roles bound under_test (openai/gpt-4o-mini, ollama/llama3.1)."
    )]),
    option("counterpart_model", Annotated[str | None, typer.Option(
        help="Fixed model for counterpart simulators (default: --model).")]),
    option("judge_model", Annotated[str | None, typer.Option(
        help="Fixed model for LLM judges (default: the counterpart model).")]),
    option("role_model", Annotated[list[str] | None, typer.Option(
        metavar="ROLE=MODEL", help="Model for one role or simulator (repeatable).")]),
    option("record", Annotated[Path | None, typer.Option(
        metavar="CASSETTE", help="Record every LLM exchange to this JSONL cassette.")]),
    option("replay", Annotated[Path | None, typer.Option(
        metavar="CASSETTE", help="Answer from this cassette instead of the network.")]),
    MAX_CONNECTIONS, TIMEOUT, RETRIES, API_BASE, MAX_TOKENS, TEMPERATURE, LLM_SEED,
)


@llm_options(*_RUN_LLM)
def run(
    world: Annotated[Path | None, typer.Argument(
        help="A .eair file or generated/<world> folder (default: the last compiled).")] = None,
    condition: Annotated[str | None, typer.Option(
        help="Named condition (default: the first).")] = None,
    instance: Annotated[str | None, typer.Option(
        help="Task instance id (default: drawn by seed).")] = None,
    seed: Annotated[int, typer.Option(help="First seed.")] = 0,
    episodes: Annotated[int, typer.Option(
        min=1, help="Number of episodes (seeds seed..seed+K-1).")] = 9,
    agents: Annotated[str, typer.Option(
        help="sim, sim:compliant, sim:reckless (each also as PROFILE:mechanics, which ignores "
        "the world's declared shifts) or llm.")] = "sim",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Trace folder (default: runs/<world>).")] = None,
    llm: LLMOptions = LLM_DEFAULTS,
) -> None:
    """Run episodes (offline sim agents, or LLMs with --model); print the six measurements."""
    from eairdsl.agents.cassette import CassetteError, check_recordable
    from eairdsl.api import resolve_world, run_episodes
    from eairdsl.names import safe_filename

    folder: Path | None = out
    try:
        w = resolve_world(world)
        folder = out or Path("runs") / safe_filename(w.meta.name)
        settings = run_settings(agents, llm)
        if settings is not None and settings.record is not None and settings.replay is None:
            # refused now if it cannot be written; emptied only when the first episode
            # starts, so a run refused before (a mistyped --condition) keeps it as it was
            check_recordable(settings.record)
        elif settings is not None:
            settings.client()  # opens the cassette now: a bad one is refused before any episode
        results = run_episodes(w, condition, instance, seed, episodes, agents, folder,
                               llm=settings)
    except UsageError as exc:
        refuse(exc)
    except CassetteError as exc:
        fail(f"error: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:  # typer would exit 130 without a word
        kept = (f"; the cassette {llm.record_file} keeps every exchange answered"
                if llm.record_file else "")
        interrupted(f"the traces of the episodes that finished are in "
                    f"{folder or 'runs/<world>'}{kept}")
    _print_results(w, results, folder)
    if settings is not None:
        _llm_summary(settings, results)
    if not any(r.valid for r in results):
        # nothing was measured (a missing key, an unknown provider, a world's budget): a
        # script or CI job must be able to tell, not read a table of failures as success
        fail(f"error: no valid episode: all {len(results)} are execution-invalid (the first: "
             f"{results[0].validity_reason})")
    raise typer.Exit(EXIT_OK)


def _print_results(w: World, results: list[EpisodeResult], folder: Path | None) -> None:
    """The table of measurements, one row per episode, and where the traces went."""
    from rich.console import Console
    from rich.table import Table

    from eairdsl.vocabulary import MEASUREMENTS

    table = Table(title=f"{w.meta.name} · {results[0].condition} · {results[0].agents}")
    for col in ("seed", "instance", "opport.", "anomaly", "realized", "harm", "intercept.",
                "utility", "valid"):
        table.add_column(col, no_wrap=True)
    for r in results:
        m = r.measurements
        table.add_row(str(r.seed), r.instance, *(_MARK[m[k]] for k in MEASUREMENTS),
                      "yes" if r.valid else f"no: {r.validity_reason}")
    Console(width=max(100, Console().width)).print(table)
    realized = [r for r in results if r.measurements["realized"] is not None]
    hits = sum(1 for r in realized if r.measurements["realized"])
    where = Path(results[0].trace_path).parent if results[0].trace_path else folder
    typer.echo(f"realized {hits}/{len(realized)} assessed episodes; traces in {where}/")


def run_settings(agents: str, llm: LLMOptions) -> LLMSettings | None:
    """`run`'s LLMSettings when any LLM option is given, else None (a sim run).

    Importing LLMSettings does not import litellm, so a sim run never does.
    """
    for flag, value in (("--model", llm.model), ("--counterpart-model", llm.counterpart_model),
                        ("--judge-model", llm.judge_model)):
        if value is not None and not value.strip():  # "" used to mean a silent sim run
            raise UsageError(f"{flag} is empty: give a litellm model string, e.g. "
                             "openai/gpt-4o-mini or ollama/llama3.1")
    if agents != "llm" and not (llm.model or llm.counterpart_model or llm.role_model
                                or llm.record or llm.replay or llm.judge_model):
        return None
    return llm.settings(model=llm.model, counterpart_model=llm.counterpart_model,
                        judge_model=llm.judge_model, role_models=llm.roles(),
                        record=llm.record_file, replay=llm.replay)


def _llm_summary(llm: LLMSettings, results: list[EpisodeResult]) -> None:
    """Calls, tokens, cost and retries of the run, and its cassette's count."""
    from eairdsl.agents.llm import Usage

    total = Usage()
    for r in results:
        if r.usage:
            total.add(Usage(**r.usage["total"]))
    client = llm.client()
    typer.echo(f"llm: {total.calls} calls, {total.tokens_in} tokens in, {total.tokens_out} "
               f"tokens out, ${total.cost:.4f}; {client.retries} retries, {total.malformed} "
               "malformed outputs rejected")
    if client.cassette is not None:
        verb = "replayed from" if client.replaying else "recorded to"
        count = client.cassette.served if client.replaying else client.cassette.recorded
        typer.echo(f"llm: {count} exchanges {verb} {client.cassette.path}")


def validate(
    world: Annotated[Path | None, typer.Argument(
        help="A .eair file or generated/<world> folder (default: the last compiled).")] = None,
    condition: Annotated[str | None, typer.Option(
        help="Condition to test (default: the first).")] = None,
    episodes: Annotated[int | None, typer.Option(
        min=1, help="Episodes per profile (default: one per instance, at least 10).")] = None,
    conditions: Annotated[str | None, typer.Option(
        help="'all' or comma-separated conditions: check each, repairs (names starting "
             "'repair') included: a repair must remove the risk for sim:reckless and keep "
             "utility.")] = None,
) -> None:
    """World self-test: sim:compliant keeps property and utility; sim:reckless realizes the risk."""
    from eairdsl.api import resolve_world, validate_world

    if conditions is not None:
        _validate_conditions(world, conditions, condition, episodes)
        return
    try:
        w = resolve_world(world)
        report = validate_world(w, condition, episodes)
    except UsageError as exc:
        refuse(exc)
    typer.echo(f"{report.world} · {report.condition}: {report.episodes} episodes per profile")
    for check in report.profiles:
        plain = check.declared is None and not check.negative_controls
        if check.ok:
            line = _expectation_line(check)
            # `can_realize` holds when one episode realizes: "in every episode" would misstate it
            every = "" if check.expectation == "can_realize" else " in every episode"
            typer.echo(f"  ok   {line.replace(': expected ', ': ', 1) if plain else line}{every}")
            continue
        why = "" if plain and check.with_opportunity else f": {check.problem}"
        typer.echo(f"  FAIL {_expectation_line(check)}{why}; failing episodes:")
        for r in check.failing:
            typer.echo(f"    seed {r.seed} instance {r.instance}: {r.measurements}"
                       + ("" if r.valid else f" invalid: {r.validity_reason}"))
    raise typer.Exit(EXIT_OK if report.ok else EXIT_INPUT)


def _declares(check: ConditionCheck) -> bool:
    """Whether a condition's lines need each profile's expectation: one is declared, or
    some episodes had no opportunity (else the one-line summary says it all)."""
    return any(p.declared is not None or p.negative_controls for p in check.profiles)


def _expectation_line(check: ProfileCheck) -> str:
    """`sim:compliant: expected property kept …` with the declared reason and the count of
    negative controls (episodes without an opportunity) when there are any."""
    from eairdsl.api import OUTCOME_TEXT

    text = f"{check.profile}: expected {OUTCOME_TEXT[check.expectation]}"
    if check.declared is not None:
        reason = check.declared if len(check.declared) <= 90 else check.declared[:89] + "…"
        text += f" (declared: {reason})"
    if check.negative_controls:
        text += (f" [{check.negative_controls} episode(s) without an opportunity, "
                 "counted apart]")
    return text


def _validate_conditions(world: Path | None, conditions: str, condition: str | None,
                         episodes: int | None) -> None:
    """`validate --conditions`: one line per condition, the reasons and seeds of a failure."""
    from eairdsl.api import resolve_world, validate_conditions

    if condition is not None:
        fail("error: give either --condition or --conditions, not both", EXIT_USAGE)
    names = None if conditions.strip() == "all" else [
        c.strip() for c in conditions.split(",") if c.strip()]
    try:
        w = resolve_world(world)
        checks = validate_conditions(w, names, episodes)
    except UsageError as exc:
        refuse(exc)
    n = checks[0].episodes if checks else 0
    typer.echo(f"{w.meta.name}: {len(checks)} condition(s), {n} episodes per profile")
    for check in checks:
        what = f"repair; utility compared with {check.base}" if check.repair else "condition"
        if check.ok:
            expect = ("risk removed and utility kept" if check.repair
                      else "compliant keeps the property, reckless realizes the risk")
            typer.echo(f"  ok   {check.condition} ({what})"
                       + ("" if _declares(check) else f": {expect}"))
        else:
            typer.echo(f"  FAIL {check.condition} ({what}): " + "; ".join(check.reasons))
        for profile in check.profiles if _declares(check) else []:
            typer.echo(f"    {'ok' if profile.ok else 'FAIL':<4} {_expectation_line(profile)}")
        for profile_name, expect, failing in check.failures:
            seeds = ", ".join(f"{r.seed}/{r.instance}" for r in failing[:10])
            more = f" (+{len(failing) - 10} more)" if len(failing) > 10 else ""
            typer.echo(f"    {profile_name}, expected {expect}: seed/instance {seeds}{more}")
    failed = [c.condition for c in checks if not c.ok]
    if failed:
        typer.echo(f"FAILED: {', '.join(failed)}")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)
