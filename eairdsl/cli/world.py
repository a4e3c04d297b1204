"""`eairc check`, `compile`, `fmt` and `diff`: the world language's own commands.

They never import litellm or the runtime: compiling a world must stay fast and
work without any model configured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eairdsl.cli.output import EXIT_INPUT, EXIT_OK, EXIT_USAGE, err, fail, refuse
from eairdsl.errors import UsageError

__all__ = ["check", "compile", "diff", "fmt", "report_diagnostics", "world_paths"]


def world_paths(worlds: list[Path]) -> list[Path]:
    """The worlds given, else worlds/*.eair here (none at all is a usage error, exit 2)."""
    if worlds:
        return worlds
    found = sorted(Path("worlds").glob("*.eair"))
    if not found:
        fail("error: no world given and no worlds/*.eair here", EXIT_USAGE)
    return found


def report_diagnostics(result: object, limit: int) -> None:
    """Print a compile result's diagnostics on stderr, at most `limit` of them."""
    from eairdsl.compiler import CompileResult
    from eairdsl.diagnostics import render_all

    assert isinstance(result, CompileResult)
    items = result.diagnostics.sorted()
    if items:
        err(render_all(items, result.sources, limit=limit))


def check(
    worlds: Annotated[list[Path] | None, typer.Argument(
        help="World files (default: worlds/*.eair).")] = None,
    max_errors: Annotated[int, typer.Option(
        min=0, help="Show at most this many diagnostics (text format).")] = 20,
    format_: Annotated[str, typer.Option(
        "--format", metavar="text|json|sarif", help="text (for people), json (one object "
        "per world with its diagnostics as data) or sarif (SARIF 2.1.0, for code scanning "
        "and editors); the exit code is the same.")] = "text",
) -> None:
    """Report diagnostics for worlds without writing anything."""
    from eairdsl import __version__
    from eairdsl.compiler import compile_world
    from eairdsl.diagnostics import as_data, sarif_log

    if format_ not in ("text", "json", "sarif"):
        fail(f"error: unknown format '{format_}'; choose text, json or sarif", EXIT_USAGE)
    failed = False
    found: list[dict[str, object]] = []
    everything = []
    for path in world_paths(worlds or []):
        result = compile_world(path)
        failed = failed or not result.ok
        if format_ == "text":
            report_diagnostics(result, max_errors)
            if not result.ok:
                err(f"{path}: {len(result.diagnostics.errors)} error(s)")
            else:
                typer.echo(f"{path}: ok ({len(result.diagnostics)} warning(s))")
            continue
        ordered = result.diagnostics.sorted()
        everything += ordered
        found.append({"path": str(path), "ok": result.ok,
                      "errors": len(result.diagnostics.errors),
                      "warnings": len(ordered) - len(result.diagnostics.errors),
                      "diagnostics": [as_data(d) for d in ordered]})
    if format_ == "json":
        typer.echo(json.dumps({"worlds": found}, indent=2, ensure_ascii=False))
    elif format_ == "sarif":
        typer.echo(json.dumps(sarif_log(everything, __version__), indent=2,
                              ensure_ascii=False))
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


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
        fail(f"error: --out {out} exists and is not a folder", EXIT_USAGE)
    failed = False
    claims = OutputClaims()
    for path in world_paths(worlds or []):
        result = compile_world(path)
        report_diagnostics(result, max_errors)
        if not result.ok or result.world is None:
            failed = True
            err(f"{path}: {len(result.diagnostics.errors)} error(s); generated/ left unchanged")
            continue
        clash = claims.claim(result.world, path, out)
        if clash is not None:
            failed = True
            err(f"{path}: error: {clash}")
            continue
        if check_only:
            stale = stale_files(result.world, out)
            if stale:
                failed = True
                err(f"{path}: {out / result.world.meta.name} is stale: {', '.join(stale)}")
                err(f"  hint: run `eairc compile {path}` and commit the result")
            else:
                typer.echo(f"{path}: {out / result.world.meta.name} is up to date")
            continue
        try:
            target, notes = write_generated(result.world, out)
            (out / ".last").write_text(result.world.meta.name + "\n", encoding="utf-8")
        except OSError as exc:
            err(f"{path}: cannot write {out}: {exc.strerror or exc}")
            failed = True
            continue
        prompts = sum(len(v) for v in result.world.prompts.values())
        typer.echo(f"{path}: compiled to {target} (world.json, {prompts} prompts, topology)")
        for note in notes:
            typer.echo(f"  note: {note}")
    raise typer.Exit(EXIT_INPUT if failed else EXIT_OK)


def _eair_files(paths: list[Path]) -> list[Path]:
    """The files given, and every .eair file under the folders given."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(p.rglob("*.eair")))
        else:
            files.append(p)
    return files


def fmt(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Files or folders (default: worlds/ and eairdsl/stdlib/ when present).")] = None,
    check_only: Annotated[bool, typer.Option(
        "--check", help="Fail if a file is not formatted; write nothing.")] = False,
) -> None:
    """Rewrite .eair files in the one canonical layout (comments kept); `eairc fmt -`
    reads standard input and writes the formatted text to standard output (for editors'
    format-on-save)."""
    from eairdsl.diagnostics import render_all
    from eairdsl.source import SourceError, read_source, write_source
    from eairdsl.syntax.fmt import FormatterError, format_text

    if paths and any(str(p) == "-" for p in paths):
        if len(paths) > 1:
            fail("error: `-` (standard input) is formatted on its own, not with files",
                 EXIT_USAGE)
        _fmt_stdin(check_only)

    defaults = [p for p in (Path("worlds"), Path("eairdsl/stdlib")) if p.exists()]
    if not paths and not defaults:  # `fmt --check` in the wrong folder passed, vacuously
        fail("error: no file given and no worlds/ or eairdsl/stdlib/ here", EXIT_USAGE)
    targets = _eair_files(paths or defaults)
    failed = changed = 0
    for path in targets:
        try:
            source = read_source(path)
        except SourceError as exc:
            err(f"{path}: error[{exc.code}]: {exc.message}\n  hint: {exc.hint}")
            failed += 1
            continue
        try:
            formatted, diagnostics = format_text(source.text, source.name)
        except FormatterError as exc:
            err(f"{path}: internal formatter error, file left unchanged: {exc}")
            failed += 1
            continue
        if formatted is None:
            err(render_all(diagnostics.sorted(), {source.name: source.text.split("\n")}))
            failed += 1
            continue
        if formatted != source.text:
            changed += 1
            if check_only:
                err(f"{path}: not formatted (run `eairc fmt {path}`)")
            else:
                try:
                    write_source(path, formatted)
                except SourceError as exc:
                    err(f"{path}: error[{exc.code}]: {exc.message}\n  hint: {exc.hint}")
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


def _fmt_stdin(check_only: bool) -> None:
    """`eairc fmt -`: the formatted text on stdout, or the diagnostics on stderr and exit 1
    with nothing on stdout (an editor then keeps the buffer as it was)."""
    import sys

    from eairdsl.diagnostics import render_all
    from eairdsl.syntax.fmt import FormatterError, format_text

    raw = sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"<stdin>: error[E102]: not valid UTF-8 (byte {exc.start})", EXIT_INPUT)
    try:
        formatted, diagnostics = format_text(text, "<stdin>")
    except FormatterError as exc:
        fail(f"<stdin>: internal formatter error, nothing written: {exc}", EXIT_INPUT)
    if formatted is None:
        err(render_all(diagnostics.sorted(), {"<stdin>": text.split("\n")}))
        raise typer.Exit(EXIT_INPUT)
    if check_only:
        if formatted != text:
            err("<stdin>: not formatted")
            raise typer.Exit(EXIT_INPUT)
        raise typer.Exit(EXIT_OK)
    sys.stdout.write(formatted)
    sys.stdout.flush()
    raise typer.Exit(EXIT_OK)


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
    from eairdsl.api import resolve_world
    from eairdsl.diff import diff_worlds

    try:
        before, after = resolve_world(old), resolve_world(new)
    except UsageError as exc:
        refuse(exc)
    result = diff_worlds(before, after)
    if as_json:
        data = result.model_dump(mode="json")
        data["violations"] = len(result.violations)
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        marks = {"added": "+", "removed": "-", "changed": "~"}
        typer.echo(f"{old} -> {new}: {len(result.changes)} declaration(s) changed, "
                   f"{len(result.violations)} protected, {len(result.files)} file(s) "
                   "added, removed or changed")
        for c in result.changes:
            typer.echo(f"  {marks[c.change]} {c.kind} {c.name}"
                       + (f"   PROTECTED: {c.protected}" if c.protected else ""))
            for detail in c.details[:8]:
                typer.echo(f"      {detail}")
            if len(c.details) > 8:
                typer.echo(f"      … {len(c.details) - 8} more")
        for f in result.files:
            typer.echo(f"  {marks[f.change]} file {f.path}")
    raise typer.Exit(EXIT_INPUT if result.violations else EXIT_OK)

