"""Pass: study measures — the grid cells and metrics a measure over a study's episodes reads.

A `study measure` is computed after the episodes, from their stored metrics
(eairdsl/study/cohort.py), so nothing in it is an expression: it names
conditions (the grid cells), participants and metrics. Each name is resolved
here with a located error, and each metric's type is the one the checker gave
its expression, so a score that is text or a "selected" metric that is not a
participant is refused before any study runs (EAIR C.5, F.8: routing regret and
the self-rating gap compare routed episodes with solo calibration runs).

Runs after `check_expressions` (metric types) and `resolve_conditions` (the
world's condition names, `default` when it declares none).
"""

from __future__ import annotations

from typing import NamedTuple, assert_never

from eairdsl.check import types as T
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.syntax import ast as A

__all__ = ["STUDY_MEASURE_KINDS", "check_study_measures"]

_Clauses = tuple[type[A.StudyClauseNode], ...]
#: each kind's required and optional clauses
STUDY_MEASURE_KINDS: dict[str, tuple[_Clauses, _Clauses]] = {
    "regret": ((A.ScoreClause, A.CalibrationClause, A.SelectedClause, A.ExpertClause),
               (A.RoutedClause,)),
    "rating_gap": ((A.ScoreClause, A.CalibrationClause, A.RatingClause), (A.RoutedClause,)),
}
#: a clause with a known keyword (the parser's `A.UnknownStudyClause` is the other kind)
_Known = (A.ScoreClause | A.CalibrationClause | A.RoutedClause | A.SelectedClause
          | A.ExpertClause | A.RatingClause)


class _Form(NamedTuple):
    """How a clause's refs are written, for `_shape` and its messages."""

    #: the clause names exactly one thing
    single: bool
    #: what each ref names
    noun: str
    #: the shape of its `a -> b` pairs, where refs are pairs (None: plain names)
    pairs: str | None


def _form(clause: _Known) -> _Form:
    match clause:
        case A.ScoreClause() | A.SelectedClause():
            return _Form(True, "metric", None)
        case A.ExpertClause():
            return _Form(True, "participant", None)
        case A.RoutedClause():
            return _Form(False, "condition", None)
        case A.CalibrationClause():
            return _Form(False, "name", "CONDITION -> PARTICIPANT")
        case A.RatingClause():
            return _Form(False, "name", "PARTICIPANT -> METRIC")
        case _:
            assert_never(clause)


def check_study_measures(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for decl in world.study_measures.values():
        world.used.add(decl.name)  # read by the study, not by another declaration
        if _check_clauses(decl, diagnostics):
            _check_names(world, decl, diagnostics)


def _check_clauses(decl: A.StudyMeasureDecl, diagnostics: Diagnostics) -> bool:
    """The measure's kind and the clauses it takes: each known to the kind, once, of the
    right shape, and every required one present. False for an unknown kind, whose
    clauses mean nothing (nothing more is checked)."""
    kinds = STUDY_MEASURE_KINDS.get(decl.kind)
    if kinds is None:
        diagnostics.error("E505", f"unknown study measure kind '{decl.kind}'", decl.span,
                          did_you_mean(decl.kind, STUDY_MEASURE_KINDS) or
                          f"kinds are {', '.join(STUDY_MEASURE_KINDS)}")
        return False
    required, optional = kinds
    keys = [cls.key for cls in required + optional]
    seen: set[type[A.StudyClauseNode]] = set()
    takes = ", ".join(sorted(keys))
    for clause in decl.clauses:
        if isinstance(clause, A.UnknownStudyClause):
            diagnostics.error("E506", f"unknown study measure clause `{clause.key}`",
                              clause.span, did_you_mean(clause.key, keys)
                              or f"a {decl.kind} study measure takes {takes}")
            continue
        if type(clause) not in required + optional:
            diagnostics.error("E506", f"a {decl.kind} study measure takes no `{clause.key}`",
                              clause.span, f"it takes {takes}")
            continue
        if type(clause) in seen:
            diagnostics.error("E302", f"`{clause.key}` is given twice in study measure "
                              f"'{decl.name}'", clause.span, "merge the two clauses")
            continue
        seen.add(type(clause))
        _shape(clause, diagnostics)
    for cls in required:
        if cls not in seen:
            diagnostics.error("E507", f"study measure '{decl.name}' has no `{cls.key}`",
                              decl.span, f"a {decl.kind} study measure needs "
                              f"{', '.join(f'`{k.key}`' for k in required)}")
    return True


def _check_names(world: CheckedWorld, decl: A.StudyMeasureDecl,
                 diagnostics: Diagnostics) -> None:
    """Every name the clauses read: conditions, participants and metrics resolved, each
    condition in one role (calibration or routed), each participant with one
    calibration cell, and each metric of the type its clause needs."""
    calibrated = _check_cells(world, decl, diagnostics)
    metrics = {item.name: item for item in world.measure_items if item.metric}
    for ref in decl.refs(A.ScoreClause):
        _metric(decl, A.ScoreClause.key, ref, metrics, world.expr_types, diagnostics,
                numeric=True)
    for ref in decl.refs(A.SelectedClause):
        _metric(decl, A.SelectedClause.key, ref, metrics, world.expr_types, diagnostics,
                numeric=False)
    for ref in decl.refs(A.ExpertClause):
        if _party(world, ref.name, ref, diagnostics):
            _calibrated(decl, ref.name, ref, calibrated, diagnostics)
    rated: set[str] = set()
    for ref in decl.refs(A.RatingClause):
        if _party(world, ref.name, ref, diagnostics):
            if ref.name in rated:
                diagnostics.error("E302", f"participant '{ref.name}' is rated twice in study "
                                  f"measure '{decl.name}'", ref.span)
            rated.add(ref.name)
            _calibrated(decl, ref.name, ref, calibrated, diagnostics)
        if ref.to is not None:
            _metric(decl, A.RatingClause.key, A.StudyRef(span=ref.span, name=ref.to), metrics,
                    world.expr_types, diagnostics, numeric=True)


def _check_cells(world: CheckedWorld, decl: A.StudyMeasureDecl,
                 diagnostics: Diagnostics) -> dict[str, str]:
    """The grid cells: calibration pairs and routed conditions, no condition in both and
    some condition left to route. Returns each participant's calibration condition."""
    conditions = list(world.condition_values)
    calibrated: dict[str, str] = {}  # participant -> its calibration condition
    named: set[str] = set()
    for ref in decl.refs(A.CalibrationClause):
        if _condition(world, ref.name, ref, conditions, diagnostics):
            if ref.name in named:
                diagnostics.error("E302", f"condition '{ref.name}' is named twice in study "
                                  f"measure '{decl.name}'", ref.span)
            named.add(ref.name)
        if ref.to is not None and _party(world, ref.to, ref, diagnostics):
            if ref.to in calibrated:
                diagnostics.error("E302", f"participant '{ref.to}' has two calibration cells "
                                  f"({calibrated[ref.to]}, {ref.name})", ref.span,
                                  "each participant's solo baseline is one condition")
            else:
                calibrated[ref.to] = ref.name
    for ref in decl.refs(A.RoutedClause):
        if not _condition(world, ref.name, ref, conditions, diagnostics):
            continue
        if ref.name in named:
            diagnostics.error("E302", f"condition '{ref.name}' is named twice in study measure "
                              f"'{decl.name}'", ref.span, "a calibration cell is not routed")
        named.add(ref.name)
    if (decl.clause(A.RoutedClause) is None and conditions
            and all(c in named for c in conditions)):
        diagnostics.error("E507", f"study measure '{decl.name}' has no routed condition",
                          decl.span, "every condition of the world is a calibration cell; "
                          "declare the routed conditions it compares them with")
    return calibrated


def _shape(clause: _Known, diagnostics: Diagnostics) -> None:
    """Pairs where pairs belong, one name where one belongs."""
    form = _form(clause)
    if form.single and len(clause.refs) != 1:
        diagnostics.error("E506", f"`{clause.key}` names one {form.noun}, not "
                          f"{len(clause.refs)}", clause.span)
    for ref in clause.refs:
        if form.pairs is not None and ref.to is None:
            diagnostics.error("E506", f"`{clause.key}` takes pairs: `{form.pairs}`", ref.span)
        elif form.pairs is None and ref.to is not None:
            diagnostics.error("E506", f"`{clause.key}` takes {form.noun} names, not "
                              "`a -> b` pairs", ref.span)


def _condition(world: CheckedWorld, name: str, ref: A.StudyRef, conditions: list[str],
               diagnostics: Diagnostics) -> bool:
    if name in conditions:
        world.used.add(name)
        return True
    diagnostics.error("E301", f"unknown condition '{name}'", ref.span,
                      did_you_mean(name, conditions) or
                      f"the world's conditions are {', '.join(conditions)}")
    return False


def _party(world: CheckedWorld, name: str, ref: A.StudyRef, diagnostics: Diagnostics) -> bool:
    if name in world.parties:
        world.used.add(name)
        return True
    diagnostics.error("E301", f"unknown participant '{name}'", ref.span,
                      did_you_mean(name, world.parties))
    return False


def _calibrated(decl: A.StudyMeasureDecl, party: str, ref: A.StudyRef,
                calibrated: dict[str, str], diagnostics: Diagnostics) -> None:
    cells = decl.refs(A.CalibrationClause)
    if cells and all(r.to is not None for r in cells) and party not in calibrated:
        diagnostics.error("E507", f"participant '{party}' has no calibration cell in study "
                          f"measure '{decl.name}'", ref.span,
                          f"add `CONDITION -> {party}` to its `calibration`")


def _metric(decl: A.StudyMeasureDecl, key: str, ref: A.StudyRef,
            metrics: dict[str, A.MeasureItem], types: dict[int, T.Type],
            diagnostics: Diagnostics, *, numeric: bool) -> None:
    """A `metric` of the measure block, of a number (or bool) type, or of participant type."""
    item = metrics.get(ref.name)
    if item is None:
        diagnostics.error("E301", f"unknown metric '{ref.name}'", ref.span,
                          did_you_mean(ref.name, metrics) or
                          "name a `metric` of the world's measure block")
        return
    # the checker's type of the metric's expression (absent when it was already wrong)
    found = types.get(id(item.expr))
    if found is None or found.kind in ("any", "none"):
        return
    if numeric and not (T.is_numeric(found) or found.kind == "bool"):
        diagnostics.error("E402", f"the `{key}` of study measure '{decl.name}' must be a "
                          f"number metric, not {found}", ref.span,
                          f"metric '{ref.name}' is {found}")
    elif not numeric and found.kind != "party":
        diagnostics.error("E402", f"the `{key}` of study measure '{decl.name}' must name a "
                          f"participant, not {found}", ref.span,
                          f"metric '{ref.name}' is {found}")

