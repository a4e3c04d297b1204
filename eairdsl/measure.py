"""The measure stage: a finished episode's trace and final state -> the six measurements.

Each measurement is true, false or unassessed (None). Unassessed comes from a
`when` guard that does not hold, from three-valued logic over missing
evidence, or from an evaluation error — insufficient evidence is never
counted as a zero. Execution validity is reported beside the measurements,
because an invalid episode must not be counted as a clean one.

Beside each value the result records its *witnesses*, the trace steps that
decided it (`eairdsl.runtime.witness`): computed here and only here, from the
same measurement expressions, after the ordinary evaluation gave the value —
guards and tools during the episode never pay for them, and a witness can
never change a value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eairdsl.ir import MeasureIR, Ref, walk_expr
from eairdsl.runtime.engine import Episode
from eairdsl.runtime.evaluate import EvalError
from eairdsl.runtime.trace import TraceResult, to_json
from eairdsl.runtime.witness import EMPTY
from eairdsl.runtime.witness_eval import WitnessRun, is_same, judge_key
from eairdsl.vocabulary import MEASUREMENTS

__all__ = ["measure_episode", "MEASUREMENTS"]


Judge = Callable[[list[Any], str, int], Any]


def measure_episode(episode: Episode, judge: Judge | None = None,
                    judge_name: str = "llm", witnesses: bool = True) -> TraceResult:
    """Evaluate every measurement; `judge` answers `judged(...)` (None: unassessed).

    `witnesses` (default on) records each measurement's and metric's witness
    steps in the result; a pass whose result is thrown away (the judge's first,
    asking pass) may turn it off.
    """
    world = episode.compiled.world
    scope = episode.scope()
    judged_by: set[str] = set()
    current = [""]
    answers: dict[str, Any] = {}  # the judge's answers, replayed by the witness pass

    def recording(rubric: list[Any], artifact: str, positive: int) -> Any:
        judged_by.add(current[0])
        answer = None if judge is None else judge(rubric, artifact, positive)
        if witnesses and judge is not None:  # no judge: the witness pass answers none too
            answers[judge_key(rubric, artifact, positive)] = answer
        return answer

    scope.judge = recording
    values: dict[str, bool | None] = {}
    unassessed: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    judges: dict[str, str] = {}
    run = WitnessRun(episode.compiled, episode.trace, episode.state.ledgers, scope, answers) \
        if witnesses else None
    found: dict[str, list[str]] = {}
    for m in world.measures:
        current[0] = m.name
        held: bool | None = None  # whether the `when` held (None: no `when`, or it failed)
        try:
            if m.when is not None:
                held = episode.compiled.eval(m.when, scope) is True
            if held is False:
                value: Any = None
                unassessed[m.name] = f"`when` did not hold ({m.at})"
            else:
                value = episode.compiled.eval(m.expr, scope)
                if value is None:
                    unassessed[m.name] = (
                        f"no judge model configured for `judged` ({m.at})"
                        if judge is None and m.name in judged_by
                        else f"insufficient evidence ({m.at})")
        # ArithmeticError: round() of an infinity, a date past year 9999 (OverflowError);
        # round() of a NaN (ValueError) was already unassessed, and so is this now
        except (EvalError, TypeError, ValueError, KeyError, ArithmeticError) as exc:
            value = None
            unassessed[m.name] = f"evaluation failed at {m.at}: {exc}"
        scope.measures[m.name] = value
        if run is not None:
            _witness(run, m, value, held, found)
        judges[m.name] = judge_name if m.name in judged_by and judge else "deterministic"
        if m.metric:
            metrics[m.name] = to_json(value)
        else:
            values[m.name] = value if isinstance(value, bool) or value is None else bool(value)
    for name in MEASUREMENTS:
        if name not in values:
            values[name] = None
            unassessed.setdefault(name, "not defined by the world")
    return TraceResult(
        measurements={n: values[n] for n in MEASUREMENTS}, unassessed=unassessed,
        metrics=metrics, judges=judges, valid=not episode.invalid,
        validity_reason="; ".join(episode.invalid) or None,
        end_time=float(episode.env.now), steps=len(episode.trace.events),
        witnesses={name: found[name] for name in sorted(found)})


def _witness(run: WitnessRun, m: MeasureIR, value: Any, held: bool | None,
             found: dict[str, list[str]]) -> None:
    """Witness one measurement; kept only when the witness pass reproduced `value`.

    A measurement left without a witness (the witness pass failed or disagreed,
    which the tests check never happens in the shipped worlds) is missing from
    the result's `witnesses`; later measurements that refer to it read no steps
    from it, and are dropped too, so no witness is ever incomplete.
    """
    got = run.measure(m, held)
    if got is None or not is_same(got[0], value) or _reads_dropped(m, run, found):
        run.keep(m.name, EMPTY)
        run.dropped.add(m.name)
        return
    run.keep(m.name, got[1])
    found[m.name] = run.step_ids(got[1])


def _reads_dropped(m: MeasureIR, run: WitnessRun, found: dict[str, list[str]]) -> bool:
    if not run.dropped:
        return False
    lets = run.world.lets
    return any(isinstance(x, Ref) and x.kind == "measure" and x.name in run.dropped
               for e in (m.when, m.expr) for x in walk_expr(e, lets))
