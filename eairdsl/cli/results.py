"""`eairc export`, `report`, `rescore` and `ls`: what a study's results store becomes, and
what results a folder holds.

They read a finished (or interrupted) study folder; none runs an episode or
calls a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eairdsl.cli.output import EXIT_INPUT, EXIT_OK, EXIT_USAGE, err, fail, refuse, usage_message
from eairdsl.errors import UsageError

__all__ = ["export", "ls", "report", "rescore"]

_EXPORT_FORMATS = ("csv", "parquet")


def export(
    study_dir: Annotated[Path, typer.Argument(help="A study folder (holding results.sqlite).")],
    format_: Annotated[str, typer.Option(
        "--format", help="csv, or parquet (needs pyarrow).")] = "csv",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="File to write (default: STUDY/results.<format>).")] = None,
) -> None:
    """Export every episode attempt of a study (with a `retained` column) to CSV or Parquet."""
    if format_ not in _EXPORT_FORMATS:
        fail(f"error: unknown format '{format_}'; choose csv or parquet", EXIT_USAGE)
    from eairdsl.study.store import STORE_FILE, Store, export_csv, export_parquet

    target = output or study_dir / f"results.{format_}"
    try:
        with Store.open(study_dir / STORE_FILE, create=False) as store:
            count = (export_csv if format_ == "csv" else export_parquet)(store, target)
    except UsageError as exc:
        refuse(exc)
    typer.echo(f"wrote {count} episode attempt(s) to {target}")
    raise typer.Exit(EXIT_OK)


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
    from eairdsl.api import resolve_world
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
        err(usage_message(exc))
        for c in exc.changes:
            mark = {"added": "+", "removed": "-", "changed": "~"}[c.change]
            err(f"  {mark} {c.kind} {c.name}")
            for detail in c.details[:8]:
                err(f"      {detail}")
        raise typer.Exit(EXIT_INPUT) from None
    except UsageError as exc:
        refuse(exc)
    typer.echo(f"rescored {summary.rescored} episode attempt(s) of {new.meta.name} into "
               f"{summary.store} ({len(summary.kept)} kept as stored)")
    for why in summary.kept[:20]:
        typer.echo(f"  kept {why}")
    raise typer.Exit(EXIT_OK)


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
    from eairdsl.study.report import write_report

    try:
        index = write_report(study_dir, out, resamples, seed, traces)
    except UsageError as exc:
        refuse(exc)
    typer.echo(f"wrote {index}")
    raise typer.Exit(EXIT_OK)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def ls(
    folder: Annotated[Path, typer.Argument(
        help="The folder to list (default: the current one).")] = Path("."),
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the listing as JSON (kind, path, bytes, files, modified, "
        "summary).")] = False,
    max_folders: Annotated[int, typer.Option(
        "--max-folders", min=1, help="Stop with an error past this many folders walked.")
    ] = 20_000,
) -> None:
    """List the studies, runs, audits, audit studies, repairs and Signals stores under a
    folder, with their sizes, when each last changed, and what each holds."""
    from eairdsl.inventory import dumps, inventory

    try:
        found = inventory(folder, max_folders)
    except UsageError as exc:
        fail(f"error: {exc}", EXIT_USAGE)
    if json_out:
        typer.echo(dumps(found))
        return
    if not found:
        typer.echo(f"{folder}: no studies, runs, audits, repairs or Signals stores")
        return
    # plain aligned columns, paths whole (a table that wraps or elides them at 80
    # columns in a pipe hides the one thing a user copies from it)
    rows = [("kind", "path", "size", "modified (UTC)", "holds")] + [
        (r.kind, r.path, _human(r.bytes), r.modified.replace("T", " ")[:16], r.summary)
        for r in found]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        typer.echo("  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1]),
                              row[2].rjust(widths[2]), row[3].ljust(widths[3]), row[4]]))
