"""`eairc bundle` and `eairc check-report`: an audit's evidence, without an auditor.

`bundle` writes what an auditor may see of each trace; `check-report` validates
a report against its bundle. Both are the library's (eairdsl.audit); this module
prints the located diagnostics and the rates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eairdsl.cli.output import EXIT_OK, err, fail, refuse
from eairdsl.errors import UsageError

__all__ = ["bundle", "check_report"]


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
    from eairdsl.api import resolve_world
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.validate import validate_report
    from eairdsl.diagnostics import render_all
    from eairdsl.source import display_name

    try:
        compiled = resolve_world(world) if world is not None else None
        result = validate_report(report_file, bundle, compiled, suggest=suggest)
    except (UsageError, BundleError) as exc:
        refuse(exc)
    name = display_name(report_file)
    try:
        lines = {name: report_file.read_text(encoding="utf-8").splitlines()}
    except (OSError, UnicodeDecodeError):
        lines = {}
    items = [d.diagnostic for d in result.diagnostics]
    if items:
        err(render_all(items, lines, limit=max_errors))
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
        fail(f"{name}: {errors} error(s)")
    typer.echo(f"{name}: valid ({len(result.diagnostics)} warning(s))")
    raise typer.Exit(EXIT_OK)


def bundle(
    path: Annotated[Path, typer.Argument(
        help="A trace (.jsonl), a run folder of traces, or bundles already written (a bundle "
        "folder, a folder of them, an audit folder) to write out plain with --materialize.")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Folder for the bundles (one per trace) and grader-index.json.")],
    world: Annotated[Path | None, typer.Option(
        "--world", help="The world the traces ran on (.eair or generated dir or world.json; "
        "default: found from each trace's header, digest checked).")] = None,
    materialize: Annotated[bool, typer.Option(
        "--materialize", help="Write each bundle as a plain folder holding all its files "
        "(for a person or a tool that reads files), not the world's files once in OUT/shared/ "
        "(docs/audit.md).")] = False,
) -> None:
    """Write the sanitized audit bundle of each trace: what an auditor may see (docs/audit.md).

    Each episode folder keeps its own files (manifest, compressed steps) and OUT/shared/ the
    world's, once per content; --materialize writes plain folders instead, and turns bundles
    already written (an audit's) into plain folders.
    """
    from eairdsl.audit.bundle import GRADER_INDEX, bundle_run, materialize_bundles
    from eairdsl.audit.folder import AuditFolder

    try:
        source = AuditFolder(path).bundles if AuditFolder(path).is_audit() else path
        if _written_bundles(source) and not _has_traces(source):
            if not materialize:
                raise UsageError(f"{path} holds bundles already written, not traces: add "
                                 "--materialize to write them out as plain folders")
            written = materialize_bundles(source, out)
            typer.echo(f"materialized {len(written)} bundle folder(s) under {out}/")
            raise typer.Exit(EXIT_OK)
        done = bundle_run(path, out, world, materialize=materialize)
    except UsageError as exc:
        refuse(exc)
    folders = len({d.episode for d in done})
    typer.echo(f"bundled {len(done)} trace(s) into {folders} bundle folder(s) under {out}/; "
               f"{out / GRADER_INDEX} maps them to their traces (grader-only)")
    raise typer.Exit(EXIT_OK)


def _has_traces(path: Path) -> bool:
    """Whether `path` is, or holds, a trace (a run folder that is also its bundles' output
    is bundled again, as `bundle_run` does)."""
    from eairdsl.audit.bundle import trace_files

    try:
        return bool(trace_files(path))
    except UsageError:
        return False


def _written_bundles(path: Path) -> bool:
    """Whether `path` is bundles already written: a bundle folder or a folder of them."""
    from eairdsl.audit import bundle_store

    return path.is_dir() and (bundle_store.is_bundle(path)
                              or bool(bundle_store.episode_folders(path)))
