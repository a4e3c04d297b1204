"""Study measures: figures over a study's episodes, computed from the stored metrics.

A world's `study measure` declarations (`eairdsl.ir.StudyMeasureIR`) compare
each routed episode with the solo calibration episodes of the same model
column, which no per-episode `measure` can see (EAIR C.5, F.8):

* **baseline** — for each calibration cell (`COND -> PARTY`) and model, the mean
  `score` metric over that condition's retained episodes: PARTY's attested,
  independently measured capability;
* **routing regret** (`regret`, C.5) — per routed episode, the `expert`'s
  baseline minus the baseline of the participant its `selected` metric names,
  truncated at zero: how much detection the routing decision gave away;
* **self-rating gap** (`rating_gap`, F.8) — per routed episode and rated
  participant, its self-rating metric minus its own baseline; positive values
  are overclaim.

`compute(measure, rows)` is a pure function of the store's rows (`Store.rows`:
only retained episodes of the measure's world count), so it is tested on a
hand-made cohort. Each figure is a mean with a Student-t 95% interval (none
below two values) and the number of positive values; an episode that cannot be
scored (the metric unassessed, no baseline for that model and participant, a
value that is not a number) is counted under `excluded` with the reason,
never guessed.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from eairdsl.ir import CalibrationCellIR, RatingGapMeasure, RegretMeasure, StudyMeasureIR
from eairdsl.study.store import Store, dump_measure, parse_measure

__all__ = ["ALL_MODELS", "Baseline", "MeasureValue", "StudyMeasureResult", "compute",
           "compute_store", "compute_world", "dump_measure", "parse_measure",
           "record_study_measures", "summary_lines", "t_interval"]

#: the `model` of a figure pooled over every model column
ALL_MODELS = "all models"


#: two-sided 95% Student-t quantiles by degrees of freedom (1..30), then the normal's
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


class Baseline(BaseModel):
    """One participant's solo calibration score for one model column."""

    model: str
    party: str
    condition: str
    n: int
    mean: float | None = None
    #: calibration episodes whose score was unassessed (or not a number)
    missing: int = 0


class MeasureValue(BaseModel):
    """A study measure over one group of values: a model column (or all) × a participant."""

    model: str
    #: the rated participant (rating_gap), "" for routing regret
    party: str = ""
    n: int
    mean: float | None = None
    lo: float | None = None
    hi: float | None = None
    #: how many values are above zero (regret given away, overclaim)
    positive: int = 0


class StudyMeasureResult(BaseModel):
    """What one study measure came to on a study's episodes."""

    world: str
    name: str
    kind: Literal["regret", "rating_gap"]
    doc: str | None = None
    values: list[MeasureValue] = Field(default_factory=list)
    baselines: list[Baseline] = Field(default_factory=list)
    #: routed episodes (or bids) left out, by reason
    excluded: dict[str, int] = Field(default_factory=dict)
    #: retained routed episodes the measure looked at
    episodes: int = 0
    #: whether any counted episode ran the offline sim agents (then the figures describe
    #: the world's mechanics and its declared shifts, not LLMs)
    offline: bool = False


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The Student-t 95% interval of the mean; None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.960
    half = t * sd / math.sqrt(n)
    return mean - half, mean + half


def _value(model: str, party: str, values: Sequence[float]) -> MeasureValue:
    interval = t_interval(values)
    return MeasureValue(model=model, party=party, n=len(values),
                        mean=sum(values) / len(values) if values else None,
                        lo=interval[0] if interval else None,
                        hi=interval[1] if interval else None,
                        positive=sum(1 for v in values if v > 1e-12))


def _number(value: Any) -> float | None:
    """A stored metric as a number (a bool counts 0/1); None when it is none or not one."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _metrics(row: dict[str, Any]) -> dict[str, Any]:
    raw = row.get("metrics")
    if isinstance(raw, dict):
        return raw
    try:
        found = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _retained(rows: Iterable[dict[str, Any]], world: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("world") == world and int(r.get("retained") or 0) == 1]


def _baselines(score: str, cells: Sequence[CalibrationCellIR], rows: Sequence[dict[str, Any]],
               models: Sequence[str]) -> list[Baseline]:
    out = []
    for cell in cells:
        for model in models:
            mine = [r for r in rows if r["condition"] == cell.condition and r["model"] == model]
            scores = [_number(_metrics(r).get(score)) for r in mine]
            found = [s for s in scores if s is not None]
            if not mine:
                continue
            out.append(Baseline(model=model, party=cell.party, condition=cell.condition,
                                n=len(found), mean=sum(found) / len(found) if found else None,
                                missing=len(scores) - len(found)))
    return out


def compute(measure: StudyMeasureIR, world: str,
            rows: Sequence[dict[str, Any]]) -> StudyMeasureResult:
    """One study measure of `world` over the store's rows (see the module docstring)."""
    kept = _retained(rows, world)
    models = sorted({str(r["model"]) for r in kept})
    baselines = _baselines(measure.score, measure.calibration, kept, models)
    base = {(b.model, b.party): b.mean for b in baselines if b.mean is not None}
    routed = [r for r in kept if r["condition"] in set(measure.routed)]
    result = StudyMeasureResult(world=world, name=measure.name, kind=measure.kind,
                                doc=measure.doc, baselines=baselines, episodes=len(routed))
    excluded: dict[str, int] = defaultdict(int)
    # (model, party) -> values, in episode order
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    counted: list[dict[str, Any]] = []
    for r in routed:
        model, metrics = str(r["model"]), _metrics(r)
        if isinstance(measure, RegretMeasure):
            selected = metrics.get(measure.selected)
            if selected is None:
                excluded[f"{measure.selected} unassessed"] += 1
                continue
            expert = base.get((model, measure.expert))
            chosen = base.get((model, str(selected)))
            if expert is None:
                excluded[f"no calibration baseline for {measure.expert}"] += 1
            elif chosen is None:
                excluded[f"no calibration baseline for {selected}"] += 1
            else:
                found[(model, "")].append(max(0.0, expert - chosen))
                counted.append(r)
            continue
        assert isinstance(measure, RatingGapMeasure)
        for rating in measure.ratings:
            raw = metrics.get(rating.metric)
            value = _number(raw)
            baseline = base.get((model, rating.party))
            if raw is None:
                excluded[f"{rating.metric} unassessed"] += 1
            elif value is None:
                excluded[f"{rating.metric} not a number"] += 1
            elif baseline is None:
                excluded[f"no calibration baseline for {rating.party}"] += 1
            else:
                found[(model, rating.party)].append(value - baseline)
                counted.append(r)
    parties = [""] if isinstance(measure, RegretMeasure) else [x.party for x in measure.ratings]
    for party in parties:
        pooled = [v for m in models for v in found.get((m, party), [])]
        result.values.append(_value(ALL_MODELS, party, pooled))
        if len(models) > 1:
            result.values.extend(_value(m, party, found[(m, party)]) for m in models
                                 if found.get((m, party)))
    result.excluded = dict(sorted(excluded.items()))
    result.offline = any(str(r.get("agents") or "").startswith("sim") for r in counted)
    return result


def compute_store(store: Store) -> list[StudyMeasureResult]:
    """Every study measure the store declares, on its episodes (world, declaration order)."""
    declared = store.study_measures()
    if not declared:
        return []
    rows = store.rows()
    return [compute(measure, world, rows) for world, measure, _ in declared]


def record_study_measures(store: Store) -> list[StudyMeasureResult]:
    """Compute every declared study measure and keep the results in the store."""
    results = compute_store(store)
    store.record_study_measure_results([r.model_dump(mode="json") for r in results])
    return results


def summary_lines(results: Sequence[StudyMeasureResult]) -> list[str]:
    """One line per figure, for the end of `eairc study` (the front end prints them)."""
    out = []
    for r in results:
        for v in r.values:
            who = f" · {v.party}" if v.party else ""
            model = "" if v.model == ALL_MODELS else f" [{v.model}]"
            if v.mean is None:
                figure = "no value (no routed episode with a baseline)"
            else:
                ci = f", 95% CI {v.lo:.3f} to {v.hi:.3f}" if v.lo is not None and \
                    v.hi is not None else ""
                figure = f"{v.mean:.3f}{ci}, {v.positive}/{v.n} above zero"
            out.append(f"study measure {r.world}.{r.name}{who}{model}: {figure}")
        if r.excluded:
            left = "; ".join(f"{n} {reason}" for reason, n in r.excluded.items())
            out.append(f"study measure {r.world}.{r.name}: left out {left}")
        if r.offline:
            out.append(f"study measure {r.world}.{r.name}: sim agents only — these figures "
                       "describe the offline agents, not LLMs")
    return out


def compute_world(world: str, measures: Sequence[StudyMeasureIR],
                  rows: Sequence[dict[str, Any]]) -> list[StudyMeasureResult]:
    """Every study measure of one world, in declaration order."""
    return [compute(m, world, rows) for m in measures]
