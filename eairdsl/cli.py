"""`eairc`: the command line, a thin typer layer over the library.

This is the only module that prints or chooses exit codes: 0 success, 1 the
input has errors (diagnostics were printed), 2 usage errors. Heavy modules are
imported inside commands so `eairc --help` stays fast (and litellm is never
imported by compile/check/fmt/graph).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.api import EpisodeResult
    from eairdsl.study.grid import Attempt

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Compile, run and study EAIR micro-worlds written in the .eair language.",
)

EXIT_OK, EXIT_INPUT, EXIT_USAGE = 0, 1, 2


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _usage_message(exc: Exception) -> str:
    """Compile diagnostics print as they are; other usage errors get an `error:` prefix."""
    from eairdsl.api import WorldHasErrors

    return str(exc) if isinstance(exc, WorldHasErrors) else f"error: {exc}"


def _version(value: bool) -> None:
    if value:
        from eairdsl import __version__
        typer.echo(f"eairc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Compile, run and study EAIR micro-worlds written in the .eair language."""


def _world_paths(worlds: list[Path]) -> list[Path]:
    if worlds:
        return worlds
    found = sorted(Path("worlds").glob("*.eair"))
    if not found:
        _err("error: no world given and no worlds/*.eair here")
        raise typer.Exit(EXIT_USAGE)
    return found


def _report(result: object, limit: int) -> None:
    from eairdsl.compiler import CompileResult
    from eairdsl.diagnostics import render_all

    assert isinstance(result, CompileResult)
    items = result.diagnostics.sorted()
    if items:
        _err(render_all(items, result.sources, limit=limit))


# The LLM transport options of every command that can call a model, declared once.
MaxConnections = Annotated[int, typer.Option(
    min=1, help="Concurrent LLM requests per provider and endpoint.")]
Timeout = Annotated[float, typer.Option(min=0.001, help="Seconds per LLM request attempt.")]
Retries = Annotated[int, typer.Option(min=0, help="Retries on rate limits, timeouts and 5xx.")]
ApiBase = Annotated[str | None, typer.Option(
    help="Endpoint of a local or self-hosted server (Ollama, vLLM).")]
Temperature = Annotated[float | None, typer.Option(
    min=0.0, help="Sampling temperature of every LLM request (default: the provider's; "
    "judges use 0).")]
MaxTokens = Annotated[int | None, typer.Option(
    min=1, help="Cap on the tokens of each LLM answer (default: the provider's).")]
LLMSeed = Annotated[int | None, typer.Option(
    help="Sampling seed sent with every LLM request, where the provider supports it (not "
    "the episode --seed).")]


@app.command()
def check(
    worlds: Annotated[list[Path] | None, typer.Argument(
        help="World files (default: worlds/*.eair).")] = None,
    max_errors: Annotated[int, typer.Option(
        min=0, help="Show at most this many diagnostics.")] = 20,
) -> None:
    """Report diagnostics for worlds without writing anything."""
    from eairdsl.compiler import compile_world

    failed = False
    for path in _world_paths(worlds or []):
        result = compile_world(path)
        _report(result, max_errors)
        if not result.ok:
            failed = True
            _err(f"{path}: {len(result.diagnostics.errors)} error(s)")
        else:
            typer.echo(f"{path}: ok ({len(result.diagnostics)} warning(s))")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


@app.command()
def compile(
    worlds: Annotated[list[Path] | None, typer.Argument(
        help="World files (default: worlds/*.eair).")] = None,
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Root of generated output.")] = Path("generated"),
    check_only: Annotated[bool, typer.Option(
        "--check", help="Fail if generated/ is stale; write nothing.")] = False,
    max_errors: Annotated[int, typer.Option(
        min=0, help="Show at most this many diagnostics.")] = 20,
) -> None:
    """Check worlds and write generated/<world>/ (world.json, prompts, topology.dot/svg)."""
    from eairdsl.compiler import OutputClaims, compile_world, stale_files, write_generated

    if out.exists() and not out.is_dir():
        _err(f"error: --out {out} exists and is not a folder")
        raise typer.Exit(EXIT_USAGE)
    failed = False
    claims = OutputClaims()
    for path in _world_paths(worlds or []):
        result = compile_world(path)
        _report(result, max_errors)
        if not result.ok or result.world is None:
            failed = True
            _err(f"{path}: {len(result.diagnostics.errors)} error(s); generated/ left unchanged")
            continue
        clash = claims.claim(result.world, path, out)
        if clash is not None:
            failed = True
            _err(f"{path}: error: {clash}")
            continue
        if check_only:
            stale = stale_files(result.world, out)
            if stale:
                failed = True
                _err(f"{path}: {out / result.world.meta.name} is stale: {', '.join(stale)}")
                _err(f"  hint: run `eairc compile {path}` and commit the result")
            else:
                typer.echo(f"{path}: {out / result.world.meta.name} is up to date")
            continue
        try:
            target, notes = write_generated(result.world, out)
            (out / ".last").write_text(result.world.meta.name + "\n", encoding="utf-8")
        except OSError as exc:
            _err(f"{path}: cannot write {out}: {exc.strerror or exc}")
            failed = True
            continue
        prompts = sum(len(v) for v in result.world.prompts.values())
        typer.echo(f"{path}: compiled to {target} (world.json, {prompts} prompts, topology)")
        for note in notes:
            typer.echo(f"  note: {note}")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


def _eair_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(p.rglob("*.eair")))
        else:
            files.append(p)
    return files


@app.command()
def fmt(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Files or folders (default: worlds/ and eairdsl/stdlib/ when present).")] = None,
    check_only: Annotated[bool, typer.Option(
        "--check", help="Fail if a file is not formatted; write nothing.")] = False,
) -> None:
    """Rewrite .eair files in the one canonical layout (comments kept)."""
    from eairdsl.diagnostics import render_all
    from eairdsl.source import SourceError, read_source, write_source
    from eairdsl.syntax.fmt import FormatterError, format_text

    defaults = [p for p in (Path("worlds"), Path("eairdsl/stdlib")) if p.exists()]
    if not paths and not defaults:  # `fmt --check` in the wrong folder passed, vacuously
        _err("error: no file given and no worlds/ or eairdsl/stdlib/ here")
        raise typer.Exit(EXIT_USAGE)
    targets = _eair_files(paths or defaults)
    failed = changed = 0
    for path in targets:
        try:
            source = read_source(path)
        except SourceError as err:
            _err(f"{path}: error[{err.code}]: {err.message}\n  hint: {err.hint}")
            failed += 1
            continue
        try:
            formatted, diagnostics = format_text(source.text, source.name)
        except FormatterError as exc:
            _err(f"{path}: internal formatter error, file left unchanged: {exc}")
            failed += 1
            continue
        if formatted is None:
            _err(render_all(diagnostics.sorted(), {source.name: source.text.split("\n")}))
            failed += 1
            continue
        if formatted != source.text:
            changed += 1
            if check_only:
                _err(f"{path}: not formatted (run `eairc fmt {path}`)")
            else:
                try:
                    write_source(path, formatted)
                except SourceError as err:
                    _err(f"{path}: error[{err.code}]: {err.message}\n  hint: {err.hint}")
                    failed += 1
                    changed -= 1
                    continue
                typer.echo(f"formatted {path}")
    if check_only and changed:
        failed += changed
    if not check_only or not failed:
        typer.echo(f"{len(targets)} file(s) checked, {changed} "
                   f"{'need formatting' if check_only else 'reformatted'}")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


def _audit_graph(source: Path, layer: str, world: Path | None, output: Path) -> None:
    """`eairc graph BUNDLE|TRACE --layer ...`: the audit graph as node-link JSON or a drawing."""
    from eairdsl.api import UsageError, resolve_world
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.graph import LAYERS, build_graph, node_link, open_episode, summary
    from eairdsl.graph import draw, to_dot

    if layer not in LAYERS:
        _err(f"error: unknown --layer {layer!r}; use {' or '.join(LAYERS)}")
        raise typer.Exit(EXIT_USAGE)
    try:
        compiled = resolve_world(world) if world is not None else None
        bundle = open_episode(source, compiled)
    except (UsageError, BundleError) as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    g = build_graph(bundle, layer)
    title = f"episode {bundle.manifest.episode} · {layer}"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.suffix == ".json":
            output.write_text(json.dumps(node_link(g), indent=1, sort_keys=True,
                                         ensure_ascii=False) + "\n", encoding="utf-8")
        elif output.suffix == ".dot":
            output.write_text(to_dot(summary(g), title), encoding="utf-8")
        else:
            output.write_bytes(draw(summary(g), title)[0])
    except OSError as exc:
        _err(f"error: cannot write {output}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(f"wrote {output} ({layer}: {g.number_of_nodes()} nodes, "
               f"{g.number_of_edges()} edges over {len(bundle.steps)} steps)")
    raise typer.Exit(EXIT_OK)


@app.command()
def graph(
    world: Annotated[Path, typer.Argument(
        help="A world file (its topology), an episode trace .jsonl (its interactions) or, "
        "with --layer, a sanitized bundle folder or trace (the audit graph).")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Output .svg or .dot file (.json too with --layer: "
        "node-link data).")] = Path("topology.svg"),
    layer: Annotated[str | None, typer.Option(
        "--layer", help="The audit graph's layer: topology or annotated (F.16); the default "
        "for a bundle folder is topology.")] = None,
    of_world: Annotated[Path | None, typer.Option(
        "--world", help="With --layer and a trace: the episode's world, to bundle the trace "
        "with its records, documents and authorization.")] = None,
) -> None:
    """Draw a world's topology, what one episode did, or an episode's audit graph."""
    from eairdsl.graph import draw, to_dot, topology_graph

    if layer is not None or (world.is_dir() and (world / "manifest.json").is_file()):
        if output.suffix not in (".svg", ".dot", ".json"):
            _err(f"error: cannot write {output.suffix or 'a file without extension'}; use "
                 ".json, .svg or .dot")
            raise typer.Exit(EXIT_USAGE)
        _audit_graph(world, layer or "topology", of_world, output)
    if output.suffix not in (".svg", ".dot"):
        _err(f"error: cannot write {output.suffix or 'a file without extension'}; use .svg or .dot")
        raise typer.Exit(EXIT_USAGE)
    if world.suffix == ".jsonl":
        from pydantic import ValidationError

        from eairdsl.interaction import episode_graph
        from eairdsl.runtime.trace import read_trace

        try:
            trace = read_trace(world)
        except (OSError, ValueError, ValidationError) as exc:
            _err(f"{world}: error: not a readable trace ({type(exc).__name__}: "
                 f"{str(exc).splitlines()[0] if str(exc) else ''})")
            raise typer.Exit(EXIT_INPUT) from None
        h = trace.header
        drawn = episode_graph(trace)
        title = f"{h.world} · {h.condition} · {h.instance} · seed {h.seed}"
    else:
        from eairdsl.compiler import compile_world

        result = compile_world(world)
        _report(result, 20)
        if not result.ok or result.world is None:
            raise typer.Exit(EXIT_INPUT)
        title = f"{result.world.meta.name}: {result.world.meta.title}"
        drawn = topology_graph(result.world)
    if output.is_dir() or (output.parent.exists() and not output.parent.is_dir()):
        _err(f"error: cannot write {output}")
        raise typer.Exit(EXIT_USAGE)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.suffix == ".dot":
            output.write_text(to_dot(drawn, title), encoding="utf-8")
        else:
            svg, renderer = draw(drawn, title)
            output.write_bytes(svg)
    except OSError as exc:
        _err(f"error: cannot write {output}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(f"wrote {output}")
    if output.suffix != ".dot" and renderer != "graphviz":
        typer.echo("  note: graphviz's `dot` is not installed: drew the SVG with the built-in "
                   "renderer (install the Debian package `graphviz` for graphviz's layout)")
    raise typer.Exit(EXIT_OK)


@app.command()
def diff(
    old: Annotated[Path, typer.Argument(help="The world before: a .eair file or generated dir.")],
    new: Annotated[Path, typer.Argument(help="The world after (e.g. a repaired copy).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the diff as JSON.")] = False,
) -> None:
    """What changed between two versions of a world; exit 1 if a protected declaration did.

    Worlds are compared as compiled IR, so moved lines, comments and layout do
    not count. A protected declaration is touched when it, or anything it reads
    (a `let`, a lever, a data file, a card or partial), changed, or when the new
    world stops protecting it.
    """
    from eairdsl.api import UsageError, resolve_world
    from eairdsl.diff import diff_worlds

    try:
        before, after = resolve_world(old), resolve_world(new)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    result = diff_worlds(before, after)
    if as_json:
        data = result.model_dump(mode="json")
        data["violations"] = len(result.violations)
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        typer.echo(f"{old} -> {new}: {len(result.changes)} declaration(s) changed, "
                   f"{len(result.violations)} protected")
        for c in result.changes:
            mark = {"added": "+", "removed": "-", "changed": "~"}[c.change]
            typer.echo(f"  {mark} {c.kind} {c.name}"
                       + (f"   PROTECTED: {c.protected}" if c.protected else ""))
            for detail in c.details[:8]:
                typer.echo(f"      {detail}")
            if len(c.details) > 8:
                typer.echo(f"      … {len(c.details) - 8} more")
    raise typer.Exit(EXIT_INPUT if result.violations else EXIT_OK)


_MARK = {True: "yes", False: "no", None: "—"}


@app.command()
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
    model: Annotated[str | None, typer.Option(
        help="litellm model for roles bound under_test (openai/gpt-4o-mini, ollama/llama3.1)."
    )] = None,
    counterpart_model: Annotated[str | None, typer.Option(
        help="Fixed model for counterpart simulators (default: --model).")] = None,
    judge_model: Annotated[str | None, typer.Option(
        help="Fixed model for LLM judges (default: the counterpart model).")] = None,
    role_model: Annotated[list[str] | None, typer.Option(
        metavar="ROLE=MODEL", help="Model for one role or simulator (repeatable).")] = None,
    record: Annotated[Path | None, typer.Option(
        metavar="CASSETTE", help="Record every LLM exchange to this JSONL cassette.")] = None,
    replay: Annotated[Path | None, typer.Option(
        metavar="CASSETTE", help="Answer from this cassette instead of the network.")] = None,
    max_connections: MaxConnections = 8,
    timeout: Timeout = 60.0,
    retries: Retries = 4,
    api_base: ApiBase = None,
    max_tokens: MaxTokens = None,
    temperature: Temperature = None,
    llm_seed: LLMSeed = None,
) -> None:
    """Run episodes (offline sim agents, or LLMs with --model); print the six measurements."""
    from rich.console import Console
    from rich.table import Table

    from eairdsl.agents.cassette import CassetteError, check_recordable
    from eairdsl.api import UsageError, resolve_world, run_episodes
    from eairdsl.names import safe_filename
    from eairdsl.vocabulary import MEASUREMENTS

    folder: Path | None = out
    try:
        w = resolve_world(world)
        folder = out or Path("runs") / safe_filename(w.meta.name)
        llm = _llm_settings(agents, model, counterpart_model, judge_model, role_model or [],
                            record, replay, max_connections, timeout, retries, api_base,
                            max_tokens, temperature, llm_seed)
        if llm is not None and llm.record is not None and llm.replay is None:
            # refused now if it cannot be written; emptied only when the first episode
            # starts, so a run refused before (a mistyped --condition) keeps it as it was
            check_recordable(llm.record)
        elif llm is not None:
            llm.client()  # opens the cassette now: a bad one is refused before any episode
        results = run_episodes(w, condition, instance, seed, episodes, agents, folder, llm=llm)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    except CassetteError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    except KeyboardInterrupt:  # typer would exit 130 without a word
        kept = f"; the cassette {record} keeps every exchange answered" if record else ""
        _err(f"interrupted: the traces of the episodes that finished are in "
             f"{folder or 'runs/<world>'}{kept}")
        raise typer.Exit(130) from None
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
    if llm is not None:
        _llm_summary(llm, results)
    if not any(r.valid for r in results):
        # nothing was measured (a missing key, an unknown provider, a world's budget): a
        # script or CI job must be able to tell, not read a table of failures as success
        _err(f"error: no valid episode: all {len(results)} are execution-invalid (the first: "
             f"{results[0].validity_reason})")
        raise typer.Exit(EXIT_INPUT)
    raise typer.Exit(EXIT_OK)


def _llm_settings(agents: str, model: str | None, counterpart_model: str | None,
                  judge_model: str | None, role_model: list[str], record: Path | None,
                  replay: Path | None, max_connections: int, timeout: float, retries: int,
                  api_base: str | None, max_tokens: int | None = None,
                  temperature: float | None = None,
                  llm_seed: int | None = None) -> LLMSettings | None:
    """LLMSettings when any LLM option is given (importing it does not import litellm)."""
    from eairdsl.api import UsageError

    for flag, value in (("--model", model), ("--counterpart-model", counterpart_model),
                        ("--judge-model", judge_model)):
        if value is not None and not value.strip():  # "" used to mean a silent sim run
            raise UsageError(f"{flag} is empty: give a litellm model string, e.g. "
                             "openai/gpt-4o-mini or ollama/llama3.1")
    if agents != "llm" and not (model or counterpart_model or role_model or record or replay
                                or judge_model):
        return None
    from eairdsl.agents.llm import LLMSettings

    roles: dict[str, str] = {}
    for item in role_model:
        role, sep, name = item.partition("=")
        if not sep or not role.strip() or not name.strip():
            raise UsageError(f"--role-model takes ROLE=MODEL, got {item!r}")
        roles[role.strip()] = name.strip()
    return LLMSettings(model=model, counterpart_model=counterpart_model, judge_model=judge_model,
                       role_models=roles, record=record, replay=replay,
                       max_connections=max_connections, timeout=timeout, retries=retries,
                       api_base=api_base, max_tokens=max_tokens, temperature=temperature,
                       seed=llm_seed)


def _llm_summary(llm: LLMSettings, results: list[EpisodeResult]) -> None:
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


@app.command()
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
    from eairdsl.api import UsageError, resolve_world, validate_world

    if conditions is not None:
        _validate_conditions(world, conditions, condition, episodes)
        return
    try:
        w = resolve_world(world)
        report = validate_world(w, condition, episodes)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    typer.echo(f"{report.world} · {report.condition}: {report.episodes} episodes per profile")
    for label, failures, expect in (
            ("sim:compliant", report.compliant_failures, "property kept and utility kept"),
            ("sim:reckless", report.reckless_failures, "risk realized")):
        if failures:
            typer.echo(f"  FAIL {label}: expected {expect}; failing episodes:")
            for r in failures:
                typer.echo(f"    seed {r.seed} instance {r.instance}: {r.measurements}"
                           + ("" if r.valid else f" invalid: {r.validity_reason}"))
        else:
            typer.echo(f"  ok   {label}: {expect} in every episode")
    raise typer.Exit(EXIT_OK if report.ok else EXIT_INPUT)


def _validate_conditions(world: Path | None, conditions: str, condition: str | None,
                         episodes: int | None) -> None:
    """`validate --conditions`: one line per condition, the reasons and seeds of a failure."""
    from eairdsl.api import UsageError, resolve_world, validate_conditions

    if condition is not None:
        _err("error: give either --condition or --conditions, not both")
        raise typer.Exit(EXIT_USAGE)
    names = None if conditions.strip() == "all" else [
        c.strip() for c in conditions.split(",") if c.strip()]
    try:
        w = resolve_world(world)
        checks = validate_conditions(w, names, episodes)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    n = checks[0].episodes if checks else 0
    typer.echo(f"{w.meta.name}: {len(checks)} condition(s), {n} episodes per profile")
    for check in checks:
        what = f"repair; utility compared with {check.base}" if check.repair else "condition"
        if check.ok:
            expect = ("risk removed and utility kept" if check.repair
                      else "compliant keeps the property, reckless realizes the risk")
            typer.echo(f"  ok   {check.condition} ({what}): {expect}")
            continue
        typer.echo(f"  FAIL {check.condition} ({what}): " + "; ".join(check.reasons))
        for profile, expect, failing in check.failures:
            seeds = ", ".join(f"{r.seed}/{r.instance}" for r in failing[:10])
            more = f" (+{len(failing) - 10} more)" if len(failing) > 10 else ""
            typer.echo(f"    {profile}, expected {expect}: seed/instance {seeds}{more}")
    failed = [c.condition for c in checks if not c.ok]
    if failed:
        typer.echo(f"FAILED: {', '.join(failed)}")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


# ---------------------------------------------------------------------- studies (issue 6)
_STUDY_EXECUTORS = ("local", "dask")
_EXPORT_FORMATS = ("csv", "parquet")
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


@app.command()
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
    counterpart_model: Annotated[str | None, typer.Option(
        help="Fixed model for counterpart simulators of LLM models (default: each model).")
    ] = None,
    judge_model: Annotated[str | None, typer.Option(
        help="Fixed model for LLM judges, the same for the whole study.")] = None,
    role_model: Annotated[list[str] | None, typer.Option(
        metavar="ROLE=MODEL", help="Fixed model for one role or simulator (repeatable).")
    ] = None,
    record: Annotated[bool, typer.Option("--record", help=_STUDY_RECORD_HELP)] = False,
    replay: Annotated[Path | None, typer.Option(
        metavar="STUDY_DIR", help=_STUDY_REPLAY_HELP)] = None,
    max_connections: MaxConnections = 8,
    timeout: Timeout = 60.0,
    retries: Retries = 4,
    api_base: ApiBase = None,
    temperature: Temperature = None,
    max_tokens: MaxTokens = None,
    llm_seed: LLMSeed = None,
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
    if executor not in _STUDY_EXECUTORS:
        _err(f"error: unknown executor '{executor}'; choose local or dask")
        raise typer.Exit(EXIT_USAGE)
    if scheduler and executor != "dask":
        _err("error: --scheduler needs --executor dask")
        raise typer.Exit(EXIT_USAGE)
    if out.exists() and not out.is_dir():
        _err(f"error: --out {out} exists and is not a folder (a study folder holds "
             "results.sqlite, traces/ and report/)")
        raise typer.Exit(EXIT_USAGE)
    from rich.console import Console

    from eairdsl.api import UsageError, resolve_world
    from eairdsl.study.executor import Budget, run_study, warm_llm
    from eairdsl.study.grid import GridError, parse_models, parse_names, plan_world

    try:
        chosen = parse_models(models, agents, shifts)
        if replay is None:  # litellm's import starts now, beside the worlds' compilation
            warm_llm(chosen, workers or os.cpu_count() or 1, executor)
        loaded = [resolve_world(p) for p in _world_paths(worlds or [])]
        wanted = parse_names(conditions, "--conditions")
        picks = "seed" if instances.strip() == "seed" else parse_names(instances,
                                                                        "--instances")
        plans = [plan_world(w, wanted, picks, seeds, episodes_per_cell) for w in loaded]
        llm = _study_llm(out, counterpart_model, judge_model, role_model or [], record,
                         replay, max_connections, timeout, retries, api_base, temperature,
                         max_tokens, llm_seed)
        if llm is not None and not any(m.llm for m in chosen):
            raise UsageError("the LLM options need an LLM model in --models (a litellm "
                             "model string such as openai/gpt-4o-mini)")
    except (UsageError, GridError) as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    names = [w.meta.name for w in loaded]
    if len(set(names)) != len(names):
        _err(f"error: the same world is given twice ({', '.join(names)})")
        raise typer.Exit(EXIT_INPUT)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _err(f"error: cannot create the study folder {out}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_INPUT) from None
    budget = None if budget_usd is None and budget_tokens is None else \
        Budget(usd=budget_usd, tokens=budget_tokens)
    try:
        with _StudyBar(Console(stderr=True)) as bar:
            summary = run_study(loaded, plans, chosen, out,
                                workers=workers or os.cpu_count() or 1, executor=executor,
                                scheduler=scheduler, max_attempts=max_attempts, progress=bar,
                                llm=llm, budget=budget)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    except KeyboardInterrupt:
        _err(f"interrupted: finished episodes are saved in {out / 'results.sqlite'}; "
             "rerun the same command to resume")
        raise typer.Exit(130) from None
    _study_summary(out, summary)
    if summary.stopped:
        _err(f"{summary.stopped}: no new episode was scheduled; {summary.left} cell(s) left "
             "open. Rerun the same command with a higher budget to go on.")
    if summary.lost:
        _err(f"{summary.lost} episode(s) were lost with their workers; rerun the same command "
             "to run them")
        raise typer.Exit(EXIT_INPUT)
    ran = summary.cells - summary.skipped
    if ran and summary.exhausted == ran:
        # nothing was measured (a missing API key, an unknown provider, a world whose every
        # episode exhausts a budget): a script or CI job must be able to tell
        import shlex

        _err(f"error: no valid episode: every one of the {ran} cell(s) run used its attempts "
             f"execution-invalid; the reasons are in the traces (`eairc report "
             f"{shlex.quote(str(out))}`)")
        raise typer.Exit(EXIT_INPUT)
    raise typer.Exit(EXIT_OK)


def _study_llm(out: Path, counterpart_model: str | None, judge_model: str | None,
               role_model: list[str], record: bool, replay: Path | None,
               max_connections: int, timeout: float, retries: int, api_base: str | None,
               temperature: float | None, max_tokens: int | None = None,
               llm_seed: int | None = None) -> LLMSettings | None:
    """The LLM options of `eairc study` (None when none is given); `model` is set per
    model column by the executor, cassettes are folders."""
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.api import UsageError
    from eairdsl.study.executor import CASSETTES_DIR

    if record and replay is not None:
        raise UsageError("--record and --replay exclude each other")
    roles: dict[str, str] = {}
    for item in role_model:
        role, sep, name = item.partition("=")
        if not sep or not role.strip() or not name.strip():
            raise UsageError(f"--role-model takes ROLE=MODEL, got {item!r}")
        roles[role.strip()] = name.strip()
    given = (counterpart_model, judge_model, roles or None, record or None, replay, api_base,
             temperature, max_tokens, llm_seed)
    defaults = (max_connections, timeout, retries) != (8, 60.0, 4)
    if all(v is None for v in given) and not defaults:
        return None
    replay_dir = None
    if replay is not None:
        if replay.is_file():
            raise UsageError(f"--replay {replay}: a file; a study replays from a study folder or "
                             "its cassettes/ folder (one <model>.jsonl per model), not one "
                             "cassette file (`eairc run --replay` takes one)")
        replay_dir = replay / CASSETTES_DIR if (replay / CASSETTES_DIR).is_dir() else replay
    return LLMSettings(counterpart_model=counterpart_model, judge_model=judge_model,
                       role_models=roles, record=out / CASSETTES_DIR if record else None,
                       replay=replay_dir, max_connections=max_connections, timeout=timeout,
                       retries=retries, api_base=api_base, temperature=temperature,
                       max_tokens=max_tokens, seed=llm_seed)


class _StudyBar:
    """`eairc study`'s progress: a rich bar over the grid's cells on stderr, with elapsed
    time, ETA and invalid/lost counts. The study library only calls back
    (`eairdsl.study.executor.StudyProgress`); rendering is the CLI's.

    Use it as a context manager around `run_study` (`with bar: run_study(..., progress=bar)`).
    """

    def __init__(self, console: Any = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.live = Progress(TextColumn("[bold]study"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("cells"), TimeElapsedColumn(), TextColumn("ETA"),
                             TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                             console=console)
        self.task = self.live.add_task("study", total=None, note="")
        self.invalid = self.lost_count = 0

    def __enter__(self) -> _StudyBar:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def start(self, total: int, done: int, todo: int) -> None:
        if done:
            self.live.console.print(f"resuming: {done} of {total} cells already complete, "
                                    f"{todo} to run")
        self.live.update(self.task, total=total, completed=done)

    def _note(self) -> str:
        parts = []
        if self.invalid:
            parts.append(f"{self.invalid} invalid attempt(s)")
        if self.lost_count:
            parts.append(f"{self.lost_count} lost with a worker")
        return ", ".join(parts)

    def attempt(self, attempt: Attempt, result: dict[str, Any], cell_done: bool) -> None:
        if not result.get("valid"):
            self.invalid += 1
        self.live.update(self.task, advance=1 if cell_done else 0, note=self._note())

    def lost(self, attempt: Attempt, reason: str, requeued: bool) -> None:
        self.lost_count += 1
        self.live.update(self.task, note=self._note())


def _study_summary(out: Path, summary: object) -> None:
    from rich.console import Console

    from eairdsl.study.executor import StudySummary, spend
    from eairdsl.study.report import summary_table
    from eairdsl.study.store import STORE_FILE, Store

    assert isinstance(summary, StudySummary)
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
        table = summary_table(rows, store.worlds(), f"study {out}")
    Console(width=max(110, Console().width)).print(table)
    for (world_name, model_name), used in sorted(spend(rows).items()):
        typer.echo(f"llm spend {world_name} · {model_name}: {used['calls']} calls, "
                   f"{used['tokens_in']} tokens in, {used['tokens_out']} out, "
                   f"${used['cost']:.4f} over {used['episodes']} episode attempt(s)")
    from eairdsl.study.cohort import summary_lines

    for line in summary_lines(summary.study_measures):
        typer.echo(line)
    s = summary
    typer.echo(f"{s.attempts} episode(s) run in {s.seconds:.1f}s ({s.executor}, {s.workers} "
               f"worker(s)); {s.skipped} of {s.cells} cells were already complete; "
               f"{s.invalid_attempts} execution-invalid attempt(s)")
    import shlex

    typer.echo(f"results: {out / STORE_FILE}; next: `eairc report {shlex.quote(str(out))}` or "
               f"`eairc export {shlex.quote(str(out))} --format csv`")


@app.command()
def export(
    study_dir: Annotated[Path, typer.Argument(help="A study folder (holding results.sqlite).")],
    format_: Annotated[str, typer.Option(
        "--format", help="csv, or parquet (needs pyarrow).")] = "csv",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="File to write (default: STUDY/results.<format>).")] = None,
) -> None:
    """Export every episode attempt of a study (with a `retained` column) to CSV or Parquet."""
    if format_ not in _EXPORT_FORMATS:
        _err(f"error: unknown format '{format_}'; choose csv or parquet")
        raise typer.Exit(EXIT_USAGE)
    from eairdsl.api import UsageError
    from eairdsl.study.store import STORE_FILE, Store, export_csv, export_parquet

    target = output or study_dir / f"results.{format_}"
    try:
        with Store.open(study_dir / STORE_FILE, create=False) as store:
            count = (export_csv if format_ == "csv" else export_parquet)(store, target)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    typer.echo(f"wrote {count} episode attempt(s) to {target}")
    raise typer.Exit(EXIT_OK)


@app.command("export-otel")
def export_otel_command(
    target: Annotated[Path, typer.Argument(
        metavar="TRACE|RUN_DIR|STUDY_DIR", help="A trace, a run folder or a study folder.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The OTLP JSON file to write.")],
    audit_dir: Annotated[Path | None, typer.Option(
        "--audit", metavar="AUDIT_DIR", help="An `eairc audit` folder: its findings become "
        "gen_ai.evaluation.result events on the boundary step's span and the root.")] = None,
    include_grader: Annotated[bool, typer.Option(
        "--include-grader", help="Also export the result line (measurements, witnesses): "
        "grader-side, off by default.")] = False,
) -> None:
    """Export episodes as OTLP JSON (OpenTelemetry GenAI + OpenInference spans, one trace per
    episode) for Phoenix or Langfuse; `eairc import otel-genai` reads it back (docs/external.md)."""
    from eairdsl.external.otel import OtelError, export_otel

    try:
        done = export_otel(target, output, audit_dir, include_grader=include_grader)
    except OtelError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_INPUT) from None
    dup = f" ({done.duplicates} duplicate trace(s) exported once)" if done.duplicates else ""
    found = f", {done.findings} finding(s) and lead(s) attached" if audit_dir else ""
    typer.echo(f"wrote {done.traces} trace(s), {done.spans} span(s), {done.events} event(s)"
               f"{found} to {output}{dup}")
    raise typer.Exit(EXIT_OK)


@app.command()
def rescore(
    study_dir: Annotated[Path, typer.Argument(help="A study folder (holding results.sqlite).")],
    world: Annotated[Path, typer.Option(
        "--world", help="The new version of the world (only measures, metrics, lets changed).")],
    original: Annotated[Path | None, typer.Option(
        "--original", help="The world the study ran (.eair or generated dir); the store keeps "
        "only its digest, which this must match.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="New study folder for the rescored results (default: "
        "STUDY-rescored-<digest>).")] = None,
) -> None:
    """Recompute measurements and metrics from a study's stored traces, into a new store.

    Allowed only when `measure`, `metric` or `let` declarations alone changed between
    the study's world (--original, checked against the stored digest) and --world;
    any other change is refused with the list of changes (exit 1). The original
    results.sqlite is never written: OUT/results.sqlite is a rescored copy (read it
    with `eairc export OUT` or `eairc report OUT`). Judged metrics are not rejudged
    (no --judge-model yet): they come out unassessed.
    """
    from eairdsl.api import UsageError, resolve_world
    from eairdsl.study.rescore import RescoreError, default_out
    from eairdsl.study.rescore import rescore as run_rescore

    try:
        new = resolve_world(world)
        if original is None:
            raise UsageError(
                f"{study_dir}: the results store keeps only each world's digest, not its text, "
                "so the study's world cannot be recompiled from it; pass the world the study "
                "ran with --original (its digest is checked)")
        old = resolve_world(original)
        target = out or default_out(study_dir, new)
        summary = run_rescore(study_dir, old, new, target)
    except RescoreError as exc:
        _err(_usage_message(exc))
        for c in exc.changes:
            mark = {"added": "+", "removed": "-", "changed": "~"}[c.change]
            _err(f"  {mark} {c.kind} {c.name}")
            for detail in c.details[:8]:
                _err(f"      {detail}")
        raise typer.Exit(EXIT_INPUT) from None
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    typer.echo(f"rescored {summary.rescored} episode attempt(s) of {new.meta.name} into "
               f"{summary.store} ({len(summary.kept)} kept as stored)")
    for why in summary.kept[:20]:
        typer.echo(f"  kept {why}")
    raise typer.Exit(EXIT_OK)


@app.command()
def report(
    study_dir: Annotated[Path, typer.Argument(help="A study folder (holding results.sqlite).")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Report folder (default: STUDY/report).")] = None,
    resamples: Annotated[int, typer.Option(
        min=0, help="Bootstrap resamples for contrast intervals (0: none).")] = 20_000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    traces: Annotated[bool, typer.Option(
        "--traces/--no-traces", help="Write the trace viewer (trace.html and its data).")] = True,
) -> None:
    """Write a static HTML report of a study (opens from disk; no server)."""
    from eairdsl.api import UsageError
    from eairdsl.study.report import write_report

    try:
        index = write_report(study_dir, out, resamples, seed, traces)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    typer.echo(f"wrote {index}")
    raise typer.Exit(EXIT_OK)


@app.command("check-report")
def check_report(
    report_file: Annotated[Path, typer.Argument(metavar="REPORT",
                                                help="An audit report (JSON, contract v1).")],
    bundle: Annotated[Path, typer.Option("--bundle", help="The sanitized bundle folder.")],
    world: Annotated[Path | None, typer.Option(
        "--world", help="The audited world (.eair or generated dir): plan surfaces are checked "
        "against its declarations and `protected` list.")] = None,
    suggest: Annotated[bool, typer.Option(
        "--suggest", help="Name where a rejected quote does occur verbatim (a hint, never a "
        "fix).")] = False,
    max_errors: Annotated[int, typer.Option(
        min=0, help="Show at most this many diagnostics.")] = 20,
) -> None:
    """Validate an audit report against its bundle: schema, steps, edges, verbatim quotes.

    Prints located V8xx diagnostics, then the resolvable-finding and resolvable-unit
    rates; exit 0 when the report is valid (warnings allowed), 1 when it is not.
    """
    from eairdsl.api import UsageError, resolve_world
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.validate import validate_report
    from eairdsl.diagnostics import render_all
    from eairdsl.source import display_name

    try:
        compiled = resolve_world(world) if world is not None else None
        result = validate_report(report_file, bundle, compiled, suggest=suggest)
    except (UsageError, BundleError) as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    name = display_name(report_file)
    try:
        lines = {name: report_file.read_text(encoding="utf-8").splitlines()}
    except (OSError, UnicodeDecodeError):
        lines = {}
    items = [d.diagnostic for d in result.diagnostics]
    if items:
        _err(render_all(items, lines, limit=max_errors))
    errors = sum(d.is_error for d in result.diagnostics)
    if result.citations_checked:
        typer.echo(f"resolvable findings: {result.findings_resolvable}/{result.findings_total}")
        typer.echo(f"resolvable evidence units: {result.units_resolvable}/{result.units_total}")
        if result.unknown_steps:
            typer.echo(f"unknown steps: {result.unknown_steps}")
        if world is None:
            typer.echo("plan surfaces: checked against the bundle's names (no --world: "
                       "protection not checked)")
    else:
        why = "the report is about another bundle" if result.schema_valid else "schema errors"
        typer.echo(f"citations not checked: {why}")
    if errors:
        _err(f"{name}: {errors} error(s)")
        raise typer.Exit(EXIT_INPUT)
    typer.echo(f"{name}: valid ({len(result.diagnostics)} warning(s))")
    raise typer.Exit(EXIT_OK)


@app.command()
def bundle(
    path: Annotated[Path, typer.Argument(help="A trace (.jsonl) or a run folder of traces.")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Folder for the bundles (one per trace) and grader-index.json.")],
    world: Annotated[Path | None, typer.Option(
        "--world", help="The world the traces ran on (.eair or generated dir or world.json; "
        "default: found from each trace's header, digest checked).")] = None,
) -> None:
    """Write the sanitized audit bundle of each trace: what an auditor may see (docs/audit.md)."""
    from eairdsl.api import UsageError
    from eairdsl.audit.bundle import GRADER_INDEX, bundle_run

    try:
        done = bundle_run(path, out, world)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    folders = len({d.episode for d in done})
    typer.echo(f"bundled {len(done)} trace(s) into {folders} bundle folder(s) under {out}/; "
               f"{out / GRADER_INDEX} maps them to their traces (grader-only)")
    raise typer.Exit(EXIT_OK)


@app.command("import")
def import_command(
    format: Annotated[str, typer.Argument(
        metavar="FORMAT", help="who-and-when, trail, openinference, otel-genai, tau-bench, "
        "chatdev or mad (docs/external.md).")],
    src: Annotated[Path, typer.Argument(
        metavar="SRC", help="A source file, or a folder (every file of the format under it).")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Folder for the traces (OUT/<world>/<instance>.jsonl) and their "
        "grader-only side files (<instance>.grader.json).")],
) -> None:
    """Import other frameworks' traces into EAIR traces, inventing nothing (docs/external.md)."""
    from eairdsl.external.core import SourceError, import_path, importers

    known = importers()
    if format not in known:
        _err(f"error: unknown format {format!r}; use one of {', '.join(sorted(known))}")
        raise typer.Exit(EXIT_USAGE)
    try:
        written = import_path(format, src, out)
    except SourceError as exc:
        _err(f"{exc}")
        raise typer.Exit(EXIT_INPUT) from None
    traces = [p for p in written if p.suffix == ".jsonl"]
    typer.echo(f"imported {len(traces)} trace(s) as {format} into {out}/; "
               f"{len(written) - len(traces)} grader side file(s) (*.grader.json, grader-only)")
    raise typer.Exit(EXIT_OK)


@app.command("import-eval")
def import_eval(
    out: Annotated[Path, typer.Argument(metavar="OUT", help="An `eairc import` folder.")],
    audit_dir: Annotated[Path | None, typer.Option(
        "--audit", metavar="AUDIT_DIR", help="`eairc audit OUT -o AUDIT_DIR`'s folder: "
        "findings, leads, evidence units and the predictions graded.")] = None,
    predictions: Annotated[Path | None, typer.Option(
        help="A predictions file to grade instead of the audit reports (docs/external.md).")
    ] = None,
    k: Annotated[int, typer.Option(min=0, help="Who&When step accuracy within ±k.")] = 1,
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="Also write the whole evaluation as JSON (grader-side).")] = None,
) -> None:
    """Summary per framework and grading against the datasets' labels (grader side)."""
    from rich.console import Console
    from rich.table import Table

    from eairdsl.external.grading import evaluate

    if not out.is_dir():
        _err(f"error: {out} is not a folder")
        raise typer.Exit(EXIT_USAGE)
    try:
        result = evaluate(out, audit_dir, predictions, k)
    except ValueError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_INPUT) from None

    def rate(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:.1f}%"

    table = Table(title="Imported traces per framework")
    for col in ("format", "framework", "traces", "steps", "edges", "audited", "findings",
                "leads", "units", "agent", "step", "location"):
        table.add_column(col, justify="left" if col in ("format", "framework") else "right")
    for r in result.frameworks:
        table.add_row(r.format, r.framework, str(r.traces), str(r.steps), str(r.explicit_edges),
                      str(r.audited), str(r.findings), str(r.leads),
                      f"{r.units_resolvable}/{r.units_total}", rate(r.agent_accuracy),
                      rate(r.step_accuracy), rate(r.location_accuracy))
    Console(width=None if sys.stdout.isatty() else 120).print(table)
    typer.echo("edges: steps with an explicit edge; units: resolvable/all evidence units; "
               "agent, step, location: accuracy against the labels")
    ww = result.who_and_when
    if ww is not None and "all" in ww:
        for name in ("all", "unflagged"):
            g = ww[name]
            typer.echo(f"Who&When ({name} labels, n={g['labels']}): agent "
                       f"{rate(g['agent_accuracy'])}, step exact {rate(g['step_accuracy'])}, "
                       f"step within ±{k} {rate(g[f'step_within_{k}_accuracy'])}")
    if ww is not None:
        flags = ww["flagged"]
        typer.echo(f"Who&When label-noise flags: {len(flags)}" + (
            " (" + "; ".join(f"{i} {f}" for i, f in flags) + ")" if flags else ""))
    tr = result.trail
    if tr is not None:
        typer.echo(f"TRAIL ({tr['errors']} annotated errors, alias table {tr['alias_table']}): "
                   f"location {rate(tr['location_accuracy'])}, (location, category) "
                   f"{rate(tr['pair_accuracy'])}")
    for note in result.notes:
        typer.echo(f"note: {note}")
    if json_out is not None:
        try:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(result.model_dump(mode="json"), indent=1,
                                           sort_keys=True, ensure_ascii=False) + "\n",
                                encoding="utf-8")
        except OSError as exc:
            _err(f"error: cannot write {json_out}: {exc.strerror or exc}")
            raise typer.Exit(EXIT_USAGE) from None
        typer.echo(f"wrote {json_out} (grader-side)")
    raise typer.Exit(EXIT_OK)


_AUDITOR_HELP = ("offline (default: deterministic rules, no network), llm (--model) or "
                 "oracle (grader-side witness steps; a pipeline check, not an auditor)")


def _audit_llm(model: str | None, out: Path, record: bool, replay: Path | None,
               api_base: str | None, timeout: float, retries: int, max_connections: int,
               temperature: float | None, max_tokens: int | None,
               llm_seed: int | None, arm: str | None = None) -> Any:
    """The LLMSettings of an LLM auditor (its cassette OUT/cassettes/auditor.jsonl; a
    replay reads the one `--replay` names, for `arm` in an audit study), else None."""
    if model is None:
        return None
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.api import UsageError
    from eairdsl.audit.cassettes import auditor_cassette, replay_cassette

    if record and replay is not None:
        raise UsageError("--record and --replay exclude each other")
    return LLMSettings(model=model, api_base=api_base, timeout=timeout, retries=retries,
                       max_connections=max_connections, temperature=temperature,
                       max_tokens=max_tokens, seed=llm_seed,
                       record=auditor_cassette(out) if record else None,
                       replay=replay_cassette(replay, arm) if replay is not None else None)


class _AuditBar:
    """Progress of an audit on stderr (the audit library only calls back)."""

    def __init__(self, label: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
        self.task = self.progress.add_task(label, total=None)

    def __enter__(self) -> _AuditBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, done: int, total: int, entry: Any) -> None:
        self.progress.update(self.task, completed=done, total=total)


@app.command()
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
    record: Annotated[bool, typer.Option(
        "--record", help="Record the LLM auditor's calls to OUT/cassettes/auditor.jsonl "
        "(a resumed audit keeps those of the reports it keeps).")] = False,
    replay: Annotated[Path | None, typer.Option(
        metavar="AUDIT_DIR", help="Replay an earlier audit's cassette (offline): its folder, "
        "its cassettes/ folder or the file.")] = None,
    api_base: ApiBase = None,
    timeout: Timeout = 60.0,
    retries: Retries = 4,
    max_connections: MaxConnections = 8,
    temperature: Temperature = None,
    max_tokens: MaxTokens = None,
    llm_seed: LLMSeed = None,
) -> None:
    """Audit every episode: one contract-v1 report per episode, validated (docs/audit.md).

    Each auditor sees only the episode's sanitized bundle. Rerun the same command
    to resume; reports already written are kept.
    """
    from eairdsl.api import UsageError
    from eairdsl.audit.auditors import arm_name, make_auditor
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.runner import audit_episodes
    from eairdsl.study.store import STORE_FILE

    arm = arm_name(auditor, model, contract, graph)
    if out is None:
        if not (target / STORE_FILE).is_file():
            _err("error: --out is needed unless the target is a study folder")
            raise typer.Exit(EXIT_USAGE)
        out = target / "audit" / arm
    try:
        settings = _audit_llm(model if auditor == "llm" else None, out, record, replay,
                              api_base, timeout, retries, max_connections, temperature,
                              max_tokens, llm_seed)
        agent, describe = make_auditor(auditor, out, model=model, contract=contract,
                                       graph=graph, settings=settings, world=world,
                                       record=record, replay=replay)
        with _AuditBar(f"audit ({arm})") as bar:
            index = audit_episodes(target, out, agent, world=world,
                                   describe={"arm": arm, **describe}, progress=bar)
    except (UsageError, BundleError) as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    except KeyboardInterrupt:
        _err(f"interrupted: reports written so far are in {out}; rerun the same command to "
             "resume")
        raise typer.Exit(130) from None
    entries = index.entries
    valid = sum(e.status == "valid" for e in entries)
    failed = [e for e in entries if e.status == "failed"]
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
    typer.echo(f"reports: {out / 'reports'}/; index: {out / 'index.json'} (grader-side)")
    for e in failed[:5]:
        _err(f"no report for {e.episode}: {e.reason}")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


@app.command("audit-study")
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
    record: Annotated[bool, typer.Option(
        "--record", help="Record the LLM auditor's calls to "
        "OUT/arms/ARM/cassettes/auditor.jsonl.")] = False,
    replay: Annotated[Path | None, typer.Option(
        metavar="DIR", help="Replay this arm from an earlier audit study's (or audit's) "
        "cassette (offline).")] = None,
    api_base: ApiBase = None,
    timeout: Timeout = 60.0,
    retries: Retries = 4,
    max_connections: MaxConnections = 8,
    temperature: Temperature = None,
    max_tokens: MaxTokens = None,
    llm_seed: LLMSeed = None,
) -> None:
    """The audit study (EAIR F.14): a cohort by content identity, blind audits, grading.

    Prints the Table-3-style summary; DIR/summary.json holds it per arm and world.
    Run again with another --auditor/--model/--contract/--graph to add an arm on the
    same cohort.
    """
    from eairdsl.api import UsageError
    from eairdsl.audit.auditors import arm_name, make_auditor
    from eairdsl.audit.cohort import audit_study
    from eairdsl.audit.evidence import BundleError

    if auditor == "oracle":
        _err("error: the oracle reads the grader's witness steps: it is not an arm of the "
             "audit study (use `eairc audit --auditor oracle` to check the pipeline)")
        raise typer.Exit(EXIT_USAGE)
    out = out if out is not None else study_dir / "audit-study"
    arm = arm_name(auditor, model, contract, graph)
    arm_dir = out / "arms" / arm
    try:
        settings = _audit_llm(model if auditor == "llm" else None, arm_dir, record, replay,
                              api_base, timeout, retries, max_connections, temperature,
                              max_tokens, llm_seed, arm)
        agent, describe = make_auditor(auditor, arm_dir, model=model, contract=contract,
                                       graph=graph, settings=settings, world=world,
                                       record=record, replay=replay)
        with _AuditBar(f"audit study ({arm})") as bar:
            summary = audit_study(study_dir, out, agent, arm, describe=describe,
                                  per_world=per_world, positives=positives, seed=seed,
                                  world=world, progress=bar)
    except (UsageError, BundleError) as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    except KeyboardInterrupt:
        _err(f"interrupted: rerun the same command to resume ({out})")
        raise typer.Exit(130) from None
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
    typer.echo(f"summary: {out / 'summary.json'}; cohort (grader-side): {out / 'cohort.json'}")
    missing = int(summary.totals.get("seeded", 0) + summary.totals.get("negatives", 0)
                  - summary.totals.get("reports", 0))
    if missing:
        _err(f"{missing} audit(s) produced no report; rerun the same command to retry them")
        raise typer.Exit(EXIT_INPUT)
    raise typer.Exit(EXIT_OK)


@app.command()
def repair(
    world: Annotated[Path, typer.Argument(help="The world to repair (its .eair file).")],
    audit_dir: Annotated[Path, typer.Option(
        "--audit", metavar="AUDIT_DIR", help="An `eairc audit` folder of this world's "
        "episodes (index.json, reports/, bundles/).")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", metavar="REPAIR_DIR", help="Repair folder: plan, rounds, retest, "
        "acceptance.json, world.eair, review.html.")],
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
    api_base: ApiBase = None,
    timeout: Timeout = 60.0,
    retries: Retries = 4,
    max_connections: MaxConnections = 8,
    record: Annotated[bool, typer.Option("--record", help=(
        "Record every LLM exchange (Repair Agent, Reviewer, the retest's W and W' studies "
        "and its auditor) to REPAIR_DIR/cassettes/round-NN/ (kept across resumed runs)."))
    ] = False,
    replay: Annotated[Path | None, typer.Option(
        metavar="REPAIR_DIR", help="Answer every LLM request from the cassettes of this "
        "repair folder (or its cassettes folder) instead of the network.")] = None,
) -> None:
    """Repair a world from an audit finding: agent, guarded apply, ScopeOK, review, retest.

    Accepted exactly when ScopeOK, ReviewOK, AuditPass and Retain >= 0.95 (EAIR D.1).
    The retest reruns the audited episodes' agents or LLM models and the audit's
    auditor (the endpoint and limits are these LLM options). Rerun the same command
    to resume after an interruption.
    """
    from eairdsl.api import UsageError
    from eairdsl.repair.loop import CASSETTES
    from eairdsl.repair.loop import repair as run_repair
    from eairdsl.repair.make import describe, make_agent, make_reviewer

    if not (audit_dir / "index.json").is_file():
        _err(f"error: {audit_dir} is not an audit folder (no index.json); run `eairc audit "
             "… -o AUDIT_DIR` first")
        raise typer.Exit(EXIT_INPUT)
    def llm(kind: str, name: str | None) -> dict[str, object]:
        if kind != "llm" or name is None:
            return {}
        return {"settings": _audit_llm(name, out, False, None, api_base, timeout, retries,
                                       max_connections, None, None, None)}

    from eairdsl.agents.llm import LLMSettings

    replay_dir = None
    if replay is not None:
        replay_dir = replay / CASSETTES if (replay / CASSETTES).is_dir() else replay
    transport = LLMSettings(api_base=api_base, timeout=timeout, retries=retries,
                            max_connections=max_connections,
                            record=out / CASSETTES if record and replay is None else None,
                            replay=replay_dir)

    try:
        if record and replay is not None:
            raise UsageError("--record and --replay exclude each other")
        proposer = make_agent(agent, model, **llm(agent, model))
        checker = make_reviewer(reviewer, reviewer_model or model,
                                **llm(reviewer, reviewer_model or model))
        acc = run_repair(world, audit_dir, out, proposer, checker, finding=finding,
                         seeds=seeds, max_rounds=max_rounds,
                         describe=describe(agent, reviewer, model, reviewer_model),
                         llm=transport, progress=typer.echo)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    except KeyboardInterrupt:
        _err(f"interrupted: finished rounds and retest parts are kept in {out}; rerun the "
             "same command to resume")
        raise typer.Exit(130) from None
    t = acc.target
    typer.echo(f"{'accepted' if acc.accepted else 'not accepted'}: ScopeOK {acc.scope_ok}, "
               f"ReviewOK {acc.review_ok}, AuditPass {acc.audit_pass}, Retain {acc.retain}, "
               f"{acc.rounds} round(s)"
               + (f"; target realized {t['k']}/{t['n']} [{t['low']:.2f}, {t['high']:.2f}]"
                  if t else ""))
    typer.echo(f"decision: {out / 'acceptance.json'}; review: {out / 'review.html'}"
               + (f"; repaired world: {out / 'world.eair'}" if acc.accepted else ""))
    raise typer.Exit(EXIT_OK if acc.accepted else EXIT_INPUT)


signals_app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Signals: findings across runs grouped into issues with severity, remediations "
    "and checks (docs/signals.md).",
)
app.add_typer(signals_app, name="signals")


_STORE_OPT = typer.Option("--store", metavar="PATH", help="The Signals store (SQLite).")


def _signals_store(path: Path, create: bool = False) -> Any:
    from eairdsl.signals.store import SignalsStore, SignalsStoreError

    try:
        return SignalsStore.open(path, create=create)
    except SignalsStoreError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None


def _signals_call(action: Any) -> Any:
    """Run a store operation; a refused request is a located message and exit 1."""
    from eairdsl.api import UsageError

    try:
        return action()
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None


@signals_app.command("update")
def signals_update(
    targets: Annotated[list[Path], typer.Argument(
        metavar="AUDIT_DIR|STUDY_DIR|REPAIR_DIR", help="Audit folders (index.json, "
        "reports/), study folders (every STUDY_DIR/audit/*/) or repair folders "
        "(acceptance.json).")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Add audits (or an accepted repair) to the Signals store; updating twice adds nothing."""
    from eairdsl.signals.store import SignalsStore

    for target in targets:  # before the store is created: a refused target leaves no file
        _signals_call(lambda t=target: SignalsStore.audits_of(t))
    with _signals_store(store_path, create=True) as store:
        for target in targets:
            s = _signals_call(lambda t=target: store.update(t))
            typer.echo(f"{target}: " + (
                f"update {s.seq}: {s.audits} audit(s), {s.sessions} new session(s), "
                f"{s.occurrences} new occurrence(s), {s.signals} new Signal(s)"
                if s.seq is not None else f"nothing new from {s.audits} audit(s) (already in the "
                "store, or nothing readable: see the notes)")
                + (f"; resolved {', '.join(s.resolved)}" if s.resolved else "")
                + (f"; regressed {', '.join(s.regressed)}" if s.regressed else ""))
            for problem in s.problems[:5]:
                _err(f"note: {problem}")
            if len(s.problems) > 5:
                _err(f"note: … {len(s.problems) - 5} more")
    typer.echo(f"store: {store_path}; next: `eairc signals list --store {store_path}`")


@signals_app.command("list")
def signals_list(
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    everything: Annotated[bool, typer.Option(
        "--all", help="Also Signals with only leads or out-of-catalogue candidates.")] = False,
) -> None:
    """Signals by severity: id, score and level, natures, top type, component, counts, status."""
    from eairdsl.signals.html import LIST_COLUMNS, list_rows, ranked_views

    with _signals_store(store_path) as store:
        views = ranked_views(store, everything)
        rows = list_rows(views)
        hidden = len(store.signal_ids()) - len(views)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return
    if not rows:
        typer.echo("no Signals" + (f" with a supported occurrence ({hidden} without: --all)"
                                   if hidden else ""))
        return
    cells = [[str(r[c]) for c in LIST_COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(LIST_COLUMNS)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(LIST_COLUMNS, widths, strict=True)).rstrip())
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if hidden:
        typer.echo(f"({hidden} more Signal(s) with only leads or out-of-catalogue candidates, "
                   "or merged: --all)")


@signals_app.command("show")
def signals_show(
    signal: Annotated[str, typer.Argument(metavar="ID", help="A Signal id (SIG-N).")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
    limit: Annotated[int, typer.Option(min=1, help="Occurrences to list at most.")] = 20,
) -> None:
    """A Signal: occurrences with trace steps, why grouped, severity arithmetic, checks."""
    from eairdsl.signals.html import signal_text

    with _signals_store(store_path) as store:
        typer.echo(_signals_call(lambda: signal_text(store, signal, limit)))


@signals_app.command("report")
def signals_report(
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML page to write.")
                   ] = Path("signals.html"),
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
    everything: Annotated[bool, typer.Option(
        "--all", help="Also Signals with only leads or out-of-catalogue candidates.")] = False,
) -> None:
    """An HTML page of Signals by severity, occurrences linked to their trace steps."""
    from eairdsl.signals.html import write_report

    with _signals_store(store_path) as store:
        n = _signals_call(lambda: write_report(store, out, everything))
    typer.echo(f"{n} Signal(s): {out}")


@signals_app.command("merge")
def signals_merge(
    target: Annotated[str, typer.Argument(metavar="A", help="The Signal that remains.")],
    source: Annotated[str, typer.Argument(metavar="B", help="The Signal merged into A.")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Merge Signal B into A (recorded; `unmerge B` undoes it)."""
    with _signals_store(store_path) as store:
        fps = _signals_call(lambda: store.merge(target, source))
    typer.echo(f"merged {source} into {target} ({len(fps)} fingerprint(s))")


@signals_app.command("unmerge")
def signals_unmerge(
    source: Annotated[str, typer.Argument(metavar="B", help="A merged Signal.")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Undo the last merge of Signal B: its fingerprints come back to it."""
    with _signals_store(store_path) as store:
        fps = _signals_call(lambda: store.unmerge(source))
    typer.echo(f"unmerged {source} ({len(fps)} fingerprint(s))")


@signals_app.command("wontfix")
def signals_wontfix(
    signal: Annotated[str, typer.Argument(metavar="ID", help="A Signal id (SIG-N).")],
    reason: Annotated[str, typer.Option(help="Why it will not be fixed.")] = "marked won't-fix",
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Mark a Signal won't-fix: later occurrences no longer reopen or regress it."""
    with _signals_store(store_path) as store:
        _signals_call(lambda: store.wontfix(signal, reason))
    typer.echo(f"{signal}: won't-fix")


@signals_app.command("match")
def signals_match(
    pred: Annotated[Path, typer.Argument(
        metavar="PRED", help="Predictions: an audit folder, a study folder with one audit, "
        "a Signals store, or a JSON file of occurrences.")],
    ref: Annotated[Path, typer.Argument(metavar="REF", help="References, the same kinds.")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the whole result (pairs, unmatched) as byte-stable JSON.")
    ] = False,
    leads: Annotated[bool, typer.Option(
        "--leads", help="Let leads (insufficient evidence) of an audit enter too.")] = False,
) -> None:
    """Match predicted occurrences and Signals to references (Signals §6.1, docs/signals.md).

    Same session, component type and normalised name, a shared type id; a maximum
    one-to-one matching; occurrence, Signal and session precision, recall and F1.
    """
    from eairdsl.api import UsageError
    from eairdsl.signals.match_inputs import match_paths
    from eairdsl.signals.matcher import result_json, summary_lines

    try:
        result, p, r = match_paths(pred, ref, leads=leads)
    except UsageError as exc:
        _err(_usage_message(exc))
        raise typer.Exit(EXIT_INPUT) from None
    for side, name in ((p, "PRED"), (r, "REF")):
        for note in side.notes[:5]:
            _err(f"note: {name}: {note}")
    if as_json:
        sys.stdout.write(result_json(result))
    else:
        for line in summary_lines(result):
            typer.echo(line)


def main() -> None:
    """Console entry point: never show a Python traceback for a failure of ours."""
    try:
        app()
    except KeyboardInterrupt:
        _err("interrupted")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("EAIR_DEBUG"):
            raise
        _err(f"internal error: {type(exc).__name__}: {exc}\n"
             "  this is a bug in eairc; rerun with EAIR_DEBUG=1 for the traceback and report it")
        sys.exit(3)


if __name__ == "__main__":
    main()
