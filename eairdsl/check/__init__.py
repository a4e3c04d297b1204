"""The check stage: load a world and its imports, then run the passes in order.

Like sqlglot's optimizer RULES, the passes are an ordered tuple of functions
with one signature; each reads what earlier passes established. Every pass
runs, even after errors in earlier ones, so one run reports independent
problems; nothing stops the loop. A pass that would only repeat an earlier
error skips what that error touched instead (the lints do not fold a
measurement the checker already rejected).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from eairdsl.check.auditable import check_auditable
from eairdsl.check.cards import render_cards
from eairdsl.check.conditions import resolve_conditions
from eairdsl.check.data import load_data
from eairdsl.check.declarations import collect_declarations
from eairdsl.check.exprs import check_expressions
from eairdsl.check.limits import Limits
from eairdsl.check.lints import lint_world
from eairdsl.check.loader import load_program
from eairdsl.check.references import check_references
from eairdsl.check.signatures import resolve_signatures
from eairdsl.check.study_measures import check_study_measures
from eairdsl.check.traps import check_traps
from eairdsl.check.world import CheckedWorld, Pass
from eairdsl.diagnostics import Diagnostics
from eairdsl.source import SourceFile

__all__ = ["PASSES", "Pass", "check_world", "CheckedWorld", "Limits"]

#: The default pipeline, in order; `check_world(..., passes=...)` runs another.
PASSES: tuple[Pass, ...] = (
    collect_declarations,
    resolve_signatures,
    check_references,
    check_expressions,
    resolve_conditions,
    check_study_measures,
    load_data,
    render_cards,
    lint_world,
    check_traps,
    check_auditable,
)


def check_world(entry: Path, diagnostics: Diagnostics,
                sources: dict[str, SourceFile] | None = None,
                passes: Sequence[Pass] = PASSES,
                limits: Limits | None = None) -> CheckedWorld | None:
    """Load, parse and check a world. None when it cannot even be parsed.

    `sources` (if given) receives every file read, even when parsing failed, so
    diagnostics can always be shown with their source line. `passes` are run in
    order on the loaded world (default `PASSES`); a pass reads what the ones
    before it established, so a subset must keep the ones it depends on (most
    need `collect_declarations` first). `limits` are the world's budgets (the
    defaults when None): what its cards and data files may cost together.
    """
    program = load_program(entry, diagnostics, sources)
    if program is None:
        return None
    world = CheckedWorld(program=program, limits=limits or Limits())
    for run in passes:
        run(world, diagnostics)
    return world
