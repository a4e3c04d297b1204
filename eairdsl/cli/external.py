"""`eairc import`, `import-eval` and `export-otel`: traces to and from other frameworks.

The converters and the grading are the library's (eairdsl.external); this
module prints what was written and the evaluation tables.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from eairdsl.cli.output import EXIT_OK, EXIT_USAGE, fail

__all__ = ["export_otel_command", "import_command", "import_eval"]


def export_otel_command(
    target: Annotated[Path, typer.Argument(
        metavar="TRACE|RUN_DIR|STUDY_DIR", help="A trace, a run folder or a study folder.")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="The file to write (or --endpoint).")] = None,
    audit_dir: Annotated[Path | None, typer.Option(
        "--audit", metavar="AUDIT_DIR", help="An `eairc audit` folder: its findings become "
        "gen_ai.evaluation.result events on the boundary step's span and the root.")] = None,
    include_grader: Annotated[bool, typer.Option(
        "--include-grader", help="Also export the result line (measurements, witnesses): "
        "grader-side, off by default.")] = False,
    format_: Annotated[str, typer.Option(
        "--format", metavar="otlp-json|otlp-proto|jsonl", help="otlp-json: one OTLP JSON "
        "document (the default); jsonl: OTLP JSON Lines, one ExportTraceServiceRequest per "
        "line; otlp-proto: binary requests, each length-delimited.")] = "otlp-json",
    batch: Annotated[int | None, typer.Option(
        "--batch", min=1, help="Episodes per request (jsonl: 1 by default; otlp-proto and "
        "--endpoint: no limit but --max-spans).")] = None,
    max_spans: Annotated[int | None, typer.Option(
        "--max-spans", min=1, help="Spans per request, at most (otlp-proto and --endpoint: "
        "512 by default).")] = None,
    epoch: Annotated[str, typer.Option(
        "--epoch", metavar="recorded|now|fixed", help="Span times: recorded (wall clock, "
        "each episode ending when its trace was written, model calls lasting their measured "
        "latency; the default), now (the same, ending at the export), fixed (simulated "
        "minutes from 2026-01-01: byte-identical output).")] = "recorded",
    content: Annotated[str, typer.Option(
        "--content", metavar="on|off", help="Model calls' prompts and answers (from the "
        ".calls.ndjson sidecar and the trace) on chat spans.")] = "on",
    endpoint: Annotated[str | None, typer.Option(
        "--endpoint", metavar="URL", help="POST protobuf batches to this OTLP/HTTP endpoint "
        "(`/v1/traces` appended unless given); headers from OTEL_EXPORTER_OTLP_HEADERS.")
    ] = None,
    annotations: Annotated[str | None, typer.Option(
        "--annotations", metavar="phoenix|langfuse", help="Also post the audit's findings "
        "as Phoenix span annotations or Langfuse scores (needs --audit).")] = None,
    annotations_endpoint: Annotated[str | None, typer.Option(
        "--annotations-endpoint", metavar="URL", help="The backend's base URL for "
        "--annotations (default: from --endpoint).")] = None,
) -> None:
    """Export episodes as OTLP (OpenTelemetry GenAI + OpenInference spans, one trace per
    episode) for Phoenix or Langfuse, to a file or an OTLP/HTTP endpoint, episode by
    episode in bounded memory; `eairc import otel-genai` reads the JSON back
    (docs/external.md)."""
    from eairdsl.external.annotations import BACKENDS
    from eairdsl.external.otel import EPOCHS, FORMATS, OtelError, export_otel

    if format_ not in FORMATS:
        fail(f"error: unknown format '{format_}'; choose {', '.join(FORMATS)}", EXIT_USAGE)
    if epoch not in EPOCHS:
        fail(f"error: unknown epoch '{epoch}'; choose {', '.join(EPOCHS)}", EXIT_USAGE)
    if content not in ("on", "off"):
        fail(f"error: --content is on or off, not '{content}'", EXIT_USAGE)
    if (output is None) == (endpoint is None):
        fail("error: give -o FILE or --endpoint URL (one of them)", EXIT_USAGE)
    if endpoint is not None and format_ != "otlp-json":
        fail("error: --format picks a file's framing; an --endpoint takes protobuf",
             EXIT_USAGE)
    if format_ == "otlp-json" and endpoint is None and (batch is not None
                                                        or max_spans is not None):
        fail("error: --batch and --max-spans size the requests of --format jsonl, "
             "otlp-proto or --endpoint; the otlp-json document has no requests", EXIT_USAGE)
    if annotations is not None and annotations not in BACKENDS:
        fail(f"error: unknown annotation backend '{annotations}'; choose "
             f"{' or '.join(BACKENDS)}", EXIT_USAGE)
    if annotations is not None and audit_dir is None:
        fail("error: --annotations posts an audit's findings: give --audit AUDIT_DIR",
             EXIT_USAGE)
    if annotations is not None and endpoint is None and annotations_endpoint is None:
        fail("error: --annotations needs --endpoint or --annotations-endpoint", EXIT_USAGE)
    try:
        done = export_otel(target, output, audit_dir, include_grader=include_grader,
                           format=format_, batch=batch, max_spans=max_spans, epoch=epoch,
                           content=content == "on", endpoint=endpoint,
                           annotations=annotations,
                           annotations_endpoint=annotations_endpoint)
    except OtelError as exc:
        fail(f"error: {exc}")
    dup = f" ({done.duplicates} duplicate trace(s) exported once)" if done.duplicates else ""
    found = f", {done.findings} finding(s) and lead(s) attached" if audit_dir else ""
    where = f"sent to {done.endpoint}" if endpoint else f"to {output}"
    lines = (f" in {done.requests} line(s)" if format_ == "jsonl" and not endpoint else
             f" in {done.requests} request(s)" if format_ != "otlp-json" or endpoint else "")
    verb = "" if endpoint else "wrote "
    typer.echo(f"{verb}{done.traces} trace(s), {done.spans} span(s), {done.events} event(s)"
               f"{found} {where}{lines}{dup}")
    if annotations is not None:
        typer.echo(f"posted {done.annotations} annotation(s) to {annotations}")
    raise typer.Exit(EXIT_OK)


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
        fail(f"error: unknown format {format!r}; use one of {', '.join(sorted(known))}", EXIT_USAGE)
    try:
        written = import_path(format, src, out)
    except SourceError as exc:
        fail(f"{exc}")
    traces = [p for p in written if p.suffix == ".jsonl"]
    typer.echo(f"imported {len(traces)} trace(s) as {format} into {out}/; "
               f"{len(written) - len(traces)} grader side file(s) (*.grader.json, grader-only)")
    raise typer.Exit(EXIT_OK)


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
        fail(f"error: {out} is not a folder", EXIT_USAGE)
    try:
        result = evaluate(out, audit_dir, predictions, k)
    except ValueError as exc:
        fail(f"error: {exc}")

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
            fail(f"error: cannot write {json_out}: {exc.strerror or exc}", EXIT_USAGE)
        typer.echo(f"wrote {json_out} (grader-side)")
    raise typer.Exit(EXIT_OK)
