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

from eairdsl.check import types as T
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.syntax import ast as A

__all__ = ["STUDY_MEASURE_KINDS", "check_study_measures"]

#: each kind's required and optional clauses
STUDY_MEASURE_KINDS: dict[str, tuple[tuple[A.StudyKey, ...], tuple[A.StudyKey, ...]]] = {
    "regret": (("score", "calibration", "selected", "expert"), ("routed",)),
    "rating_gap": (("score", "calibration", "rating"), ("routed",)),
}
#: clauses whose refs are pairs (`a -> b`), and those that name exactly one thing
_PAIRS: frozenset[str] = frozenset({"calibration", "rating"})
_SINGLE: frozenset[str] = frozenset({"score", "selected", "expert"})


def check_study_measures(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for decl in world.study_measures.values():
        world.used.add(decl.name)  # read by the study, not by another declaration
        _check(world, decl, diagnostics)


def _check(world: CheckedWorld, decl: A.StudyMeasureDecl, diagnostics: Diagnostics) -> None:
    kinds = STUDY_MEASURE_KINDS.get(decl.kind)
    if kinds is None:
        diagnostics.error("E505", f"unknown study measure kind '{decl.kind}'", decl.span,
                          did_you_mean(decl.kind, STUDY_MEASURE_KINDS) or
                          f"kinds are {', '.join(STUDY_MEASURE_KINDS)}")
        return
    required, optional = kinds
    seen: set[str] = set()
    takes = ", ".join(sorted(required + optional))
    for clause in decl.clauses:
        if clause.key not in A.STUDY_KEYS:
            diagnostics.error("E506", f"unknown study measure clause `{clause.key}`",
                              clause.span, did_you_mean(clause.key, required + optional)
                              or f"a {decl.kind} study measure takes {takes}")
            continue
        if clause.key not in required and clause.key not in optional:
            diagnostics.error("E506", f"a {decl.kind} study measure takes no `{clause.key}`",
                              clause.span, f"it takes {takes}")
            continue
        if clause.key in seen:
            diagnostics.error("E302", f"`{clause.key}` is given twice in study measure "
                              f"'{decl.name}'", clause.span, "merge the two clauses")
            continue
        seen.add(clause.key)
        _shape(decl, clause, diagnostics)
    for key in required:
        if key not in seen:
            diagnostics.error("E507", f"study measure '{decl.name}' has no `{key}`", decl.span,
                              f"a {decl.kind} study measure needs "
                              f"{', '.join(f'`{k}`' for k in required)}")
    conditions = list(world.condition_values)
    metrics = {item.name: item for item in world.measure_items if item.metric}
    calibrated: dict[str, str] = {}  # participant -> its calibration condition
    named: set[str] = set()
    for ref in decl.refs("calibration"):
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
    for ref in decl.refs("routed"):
        if not _condition(world, ref.name, ref, conditions, diagnostics):
            continue
        if ref.name in named:
            diagnostics.error("E302", f"condition '{ref.name}' is named twice in study measure "
                              f"'{decl.name}'", ref.span, "a calibration cell is not routed")
        named.add(ref.name)
    if decl.clause("routed") is None and conditions and all(c in named for c in conditions):
        diagnostics.error("E507", f"study measure '{decl.name}' has no routed condition",
                          decl.span, "every condition of the world is a calibration cell; "
                          "declare the routed conditions it compares them with")
    for ref in decl.refs("score"):
        _metric(decl, "score", ref, metrics, world.expr_types, diagnostics, numeric=True)
    for ref in decl.refs("selected"):
        _metric(decl, "selected", ref, metrics, world.expr_types, diagnostics,
                numeric=False)
    for ref in decl.refs("expert"):
        if _party(world, ref.name, ref, diagnostics):
            _calibrated(decl, ref.name, ref, calibrated, diagnostics)
    rated: set[str] = set()
    for ref in decl.refs("rating"):
        if _party(world, ref.name, ref, diagnostics):
            if ref.name in rated:
                diagnostics.error("E302", f"participant '{ref.name}' is rated twice in study "
                                  f"measure '{decl.name}'", ref.span)
            rated.add(ref.name)
            _calibrated(decl, ref.name, ref, calibrated, diagnostics)
        if ref.to is not None:
            _metric(decl, "rating", A.StudyRef(span=ref.span, name=ref.to), metrics,
                    world.expr_types, diagnostics, numeric=True)


def _shape(decl: A.StudyMeasureDecl, clause: A.StudyClause, diagnostics: Diagnostics) -> None:
    """Pairs where pairs belong, one name where one belongs."""
    if clause.key in _SINGLE and len(clause.refs) != 1:
        diagnostics.error("E506", f"`{clause.key}` names one {_noun(clause.key)}, not "
                          f"{len(clause.refs)}", clause.span)
    for ref in clause.refs:
        if clause.key in _PAIRS and ref.to is None:
            diagnostics.error("E506", f"`{clause.key}` takes pairs: "
                              f"`{_pair_hint(clause.key)}`", ref.span)
        elif clause.key not in _PAIRS and ref.to is not None:
            diagnostics.error("E506", f"`{clause.key}` takes {_noun(clause.key)} names, not "
                              "`a -> b` pairs", ref.span)


def _noun(key: str) -> str:
    return {"score": "metric", "selected": "metric", "expert": "participant",
            "routed": "condition"}.get(key, "name")


def _pair_hint(key: str) -> str:
    return "CONDITION -> PARTICIPANT" if key == "calibration" else "PARTICIPANT -> METRIC"


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
    cells = decl.refs("calibration")
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

