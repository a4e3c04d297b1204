"""`eairc graph`: a world's topology, one episode's interactions, or its audit graph.

The drawing itself is the library's (eairdsl.graph, eairdsl.audit.graph); this
module picks what to draw from the input and writes the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eairdsl.cli.output import EXIT_INPUT, EXIT_OK, EXIT_USAGE, fail, refuse
from eairdsl.cli.world import report_diagnostics
from eairdsl.errors import UsageError

__all__ = ["graph"]


def _audit_graph(source: Path, layer: str, world: Path | None, output: Path, uses: str
                 ) -> None:
    """`eairc graph BUNDLE|TRACE --layer ...`: the audit graph as node-link JSON or a drawing."""
    from eairdsl.api import resolve_world
    from eairdsl.audit.evidence import BundleError
    from eairdsl.audit.graph import LAYERS, build_graph, node_link, open_episode, summary
    from eairdsl.graph import draw, mark_crossings, to_dot

    if layer not in LAYERS:
        fail(f"error: unknown --layer {layer!r}; use {' or '.join(LAYERS)}", EXIT_USAGE)
    try:
        compiled = resolve_world(world) if world is not None else None
        bundle = open_episode(source, compiled)
    except (UsageError, BundleError) as exc:
        refuse(exc)
    g = build_graph(bundle, layer)
    title = f"episode {bundle.manifest.episode} · {layer}"
    drawn = summary(g)
    if layer == "annotated":  # the red edges of restricted fields, and rows by authority
        mark_crossings(drawn, g)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.suffix == ".json":
            output.write_text(json.dumps(node_link(g), indent=1, sort_keys=True,
                                         ensure_ascii=False) + "\n", encoding="utf-8")
        elif output.suffix == ".dot":
            output.write_text(to_dot(drawn, title, uses), encoding="utf-8")
        else:
            output.write_bytes(draw(drawn, title, uses)[0])
    except OSError as exc:
        fail(f"error: cannot write {output}: {exc.strerror or exc}", EXIT_USAGE)
    typer.echo(f"wrote {output} ({layer}: {g.number_of_nodes()} nodes, "
               f"{g.number_of_edges()} edges over {len(bundle.steps)} steps)")
    raise typer.Exit(EXIT_OK)


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
    uses: Annotated[str, typer.Option(
        "--uses", help="How to draw which participant may use which tool: auto (bundled, or a "
        "matrix when still dense), bundled (one edge per tool group used whole), edges (one "
        "per participant and tool) or matrix (a participant × tool table).")] = "auto",
    of_world: Annotated[Path | None, typer.Option(
        "--world", help="With --layer and a trace: the episode's world, to bundle the trace "
        "with its records, documents and authorization.")] = None,
) -> None:
    """Draw a world's topology, what one episode did, or an episode's audit graph."""
    from eairdsl.graph import USES_MODES, draw, to_dot, topology_graph

    if uses not in ("auto", *USES_MODES):
        fail(f"error: unknown --uses {uses!r}; use auto, {', '.join(USES_MODES)}", EXIT_USAGE)
    if layer is not None or (world.is_dir() and (world / "manifest.json").is_file()):
        if output.suffix not in (".svg", ".dot", ".json"):
            fail(f"error: cannot write {output.suffix or 'a file without extension'}; use "
                 ".json, .svg or .dot", EXIT_USAGE)
        _audit_graph(world, layer or "topology", of_world, output, uses)
    if output.suffix not in (".svg", ".dot"):
        fail(f"error: cannot write {output.suffix or 'a file without extension'}; use .svg or "
             ".dot", EXIT_USAGE)
    if world.suffix == ".jsonl":
        from pydantic import ValidationError

        from eairdsl.interaction import episode_graph
        from eairdsl.runtime.trace import read_trace

        try:
            trace = read_trace(world)
        except (OSError, ValueError, ValidationError) as exc:
            fail(f"{world}: error: not a readable trace ({type(exc).__name__}: "
                 f"{str(exc).splitlines()[0] if str(exc) else ''})")
        h = trace.header
        drawn = episode_graph(trace)
        title = f"{h.world} · {h.condition} · {h.instance} · seed {h.seed}"
    else:
        from eairdsl.compiler import compile_world

        result = compile_world(world)
        report_diagnostics(result, 20)
        if not result.ok or result.world is None:
            raise typer.Exit(EXIT_INPUT)
        title = f"{result.world.meta.name}: {result.world.meta.title}"
        drawn = topology_graph(result.world)
    if output.is_dir() or (output.parent.exists() and not output.parent.is_dir()):
        fail(f"error: cannot write {output}", EXIT_USAGE)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.suffix == ".dot":
            output.write_text(to_dot(drawn, title, uses), encoding="utf-8")
        else:
            svg, renderer = draw(drawn, title, uses)
            output.write_bytes(svg)
    except OSError as exc:
        fail(f"error: cannot write {output}: {exc.strerror or exc}", EXIT_USAGE)
    typer.echo(f"wrote {output}")
    if output.suffix != ".dot" and renderer != "graphviz":
        typer.echo("  note: graphviz's `dot` is not installed: drew the SVG with the built-in "
                   "renderer (install the Debian package `graphviz` for graphviz's layout)")
    raise typer.Exit(EXIT_OK)

