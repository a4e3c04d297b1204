"""`eairc`: the command line, a thin typer layer over the library.

This package is the only one that prints or chooses exit codes: 0 success, 1 the
input has errors (diagnostics were printed), 2 usage errors (eairdsl.cli.output).
One module per command group; this one builds the application and lists the
commands in the order `eairc --help` shows them. Heavy modules are imported
inside commands so `eairc --help` stays fast (and litellm is never imported by
compile/check/fmt/graph).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from eairdsl.cli import (
    audit,
    bundle,
    external,
    graph,
    lsp,
    repair,
    results,
    run,
    signals,
    study,
    world,
)
from eairdsl.cli.output import err

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Compile, run and study EAIR micro-worlds written in the .eair language.",
)


def _version(value: bool) -> None:
    """`--version`: print it and exit before any command is parsed."""
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


#: Every command, in the order of `eairc --help`: the language, episodes, studies and
#: their results, audits, repair, the language server (then the `signals` group).
_COMMANDS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("check", world.check), ("compile", world.compile), ("fmt", world.fmt),
    ("graph", graph.graph), ("diff", world.diff),
    ("run", run.run), ("validate", run.validate),
    ("study", study.study), ("export", results.export),
    ("export-otel", external.export_otel_command), ("rescore", results.rescore),
    ("report", results.report), ("ls", results.ls),
    ("check-report", bundle.check_report), ("bundle", bundle.bundle),
    ("import", external.import_command), ("import-eval", external.import_eval),
    ("audit", audit.audit), ("audit-study", audit.audit_study_command),
    ("repair", repair.repair), ("lsp", lsp.lsp),
)
for _name, _command in _COMMANDS:
    app.command(_name)(_command)
app.add_typer(signals.signals_app, name="signals")


def main() -> None:
    """Console entry point: never show a Python traceback for a failure of ours."""
    try:
        app()
    except KeyboardInterrupt:
        err("interrupted")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("EAIR_DEBUG"):
            raise
        err(f"internal error: {type(exc).__name__}: {exc}\n"
            "  this is a bug in eairc; rerun with EAIR_DEBUG=1 for the traceback and report it")
        sys.exit(3)
