"""The measure stage: a finished episode's trace and final state -> the six measurements.

Each measurement is true, false or unassessed (None). Unassessed comes from a
`when` guard that does not hold, from three-valued logic over missing
evidence, or from an evaluation error — insufficient evidence is never
counted as a zero. Execution validity is reported beside the measurements,
because an invalid episode must not be counted as a clean one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eairdsl.runtime.engine import Episode
from eairdsl.runtime.evaluate import EvalError
from eairdsl.runtime.trace import TraceResult, to_json
from eairdsl.vocabulary import MEASUREMENTS

__all__ = ["measure_episode", "MEASUREMENTS"]


Judge = Callable[[list[Any], str, int], Any]


def measure_episode(episode: Episode, judge: Judge | None = None,
                    judge_name: str = "llm") -> TraceResult:
    """Evaluate every measurement; `judge` answers `judged(...)` (None: unassessed)."""
    world = episode.compiled.world
    scope = episode.scope()
    judged_by: set[str] = set()
    current = [""]

    def recording(rubric: list[Any], artifact: str, positive: int) -> Any:
        judged_by.add(current[0])
        return None if judge is None else judge(rubric, artifact, positive)

    scope.judge = recording
    values: dict[str, bool | None] = {}
    unassessed: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    judges: dict[str, str] = {}
    for m in world.measures:
        current[0] = m.name
        try:
            if m.when is not None and episode.compiled.eval(m.when, scope) is not True:
                value: Any = None
                unassessed[m.name] = f"`when` did not hold ({m.at})"
            else:
                value = episode.compiled.eval(m.expr, scope)
                if value is None:
                    unassessed[m.name] = (
                        f"no judge model configured for `judged` ({m.at})"
                        if judge is None and m.name in judged_by
                        else f"insufficient evidence ({m.at})")
        except (EvalError, TypeError, ValueError, KeyError) as exc:
            value = None
            unassessed[m.name] = f"evaluation failed at {m.at}: {exc}"
        scope.measures[m.name] = value
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
        end_time=float(episode.env.now), steps=len(episode.trace.events))
