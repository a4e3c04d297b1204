"""Comparing models within a world: rates per model × condition, paired model contrasts,
and what each model's episodes cost.

The paper compares model implementations on the same cells (§5.1, F.1): two
models are *paired* on a cell when both have a retained episode (the first
execution-valid attempt, the first-success rule) for the same condition,
instance, seed and replicate, and the endpoint was assessed in both. On those
pairs `b` counts cells where model A had the event and B did not, `c` the
reverse, and p is the two-sided exact McNemar test on b and c; the difference
is (c − b) / pairs, B's rate minus A's. Besides each condition, the pairs of all
conditions together form one more contrast (condition `ALL`).

Spend counts every attempt, valid or not (an invalid attempt's calls were
paid for too): calls, tokens in and out and cost from the store's `usage`
column (the trace header's `usage.total`, judge calls included). Sim episodes
have no usage; their figures are None and the report shows "—".
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eairdsl.study.stats import mcnemar_exact
from eairdsl.vocabulary import MEASUREMENTS

__all__ = ["ALL", "ModelContrast", "Spend", "model_contrasts", "spend_by_model"]

#: the condition name of the contrast over all conditions' pairs together
ALL = "all conditions"


@dataclass(frozen=True)
class ModelContrast:
    """Model `a` against model `b` on one endpoint, over matched retained cells."""

    endpoint: str
    condition: str
    a: str
    b_model: str
    pairs: int
    b: int  # a yes, b_model no
    c: int  # a no, b_model yes
    p: float

    @property
    def diff(self) -> float:
        """b_model's rate minus a's on the matched pairs."""
        return (self.c - self.b) / self.pairs


def model_contrasts(rows: Sequence[dict[str, Any]], models: Sequence[str],
                    conditions: Sequence[str]) -> list[ModelContrast]:
    """Every pair of `models` (in that order) × endpoint × condition (then `ALL`) with at
    least one matched pair, from one world's retained rows."""
    index: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        index[r["model"]][(r["condition"], r["instance"], int(r["seed"]), int(r["rep"]))] = r
    out: list[ModelContrast] = []
    for i, a in enumerate(models):
        for b_model in models[i + 1:]:
            shared = sorted(set(index[a]) & set(index[b_model]),
                            key=lambda k: (str(k[0]), str(k[1]), k[2], k[3]))
            for endpoint in MEASUREMENTS:
                by_condition: dict[str, list[tuple[int, int]]] = defaultdict(list)
                for key in shared:
                    x, y = index[a][key][endpoint], index[b_model][key][endpoint]
                    if x is None or y is None:
                        continue
                    by_condition[key[0]].append((int(x), int(y)))
                groups = [(c, by_condition[c]) for c in conditions if by_condition.get(c)]
                if len(groups) > 1:
                    groups.append((ALL, [p for _, ps in groups for p in ps]))
                for condition, pairs in groups:
                    b = sum(1 for x, y in pairs if x and not y)
                    c = sum(1 for x, y in pairs if y and not x)
                    out.append(ModelContrast(endpoint, condition, a, b_model, len(pairs), b, c,
                                             mcnemar_exact(b, c)))
    return out


@dataclass
class Spend:
    """One model's LLM spend in one world (None: no attempt reported usage, e.g. sim)."""

    model: str
    attempts: int = 0
    with_usage: int = 0
    calls: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    by_participant: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, usage: dict[str, Any]) -> None:
        total = usage.get("total") or {}
        if not total:
            return
        self.with_usage += 1
        self.calls = (self.calls or 0) + int(total.get("calls") or 0)
        self.tokens_in = (self.tokens_in or 0) + int(total.get("tokens_in") or 0)
        self.tokens_out = (self.tokens_out or 0) + int(total.get("tokens_out") or 0)
        self.cost = round((self.cost or 0.0) + float(total.get("cost") or 0.0), 10)
        parts = dict(usage.get("agents") or {})
        if usage.get("judge"):
            parts["judge"] = usage["judge"]
        for who, figures in sorted(parts.items()):
            acc = self.by_participant.setdefault(who, {"calls": 0, "tokens_in": 0,
                                                       "tokens_out": 0, "cost": 0.0})
            for k in ("calls", "tokens_in", "tokens_out"):
                acc[k] += int(figures.get(k) or 0)
            acc["cost"] = round(acc["cost"] + float(figures.get("cost") or 0.0), 10)


def _usage(row: dict[str, Any]) -> dict[str, Any]:
    raw = row.get("usage")
    if isinstance(raw, str) and raw:
        try:
            found = json.loads(raw)
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}
    return raw if isinstance(raw, dict) else {}


def spend_by_model(rows: Iterable[dict[str, Any]], models: Sequence[str],
                   usage: Callable[[dict[str, Any]], dict[str, Any]] = _usage) -> list[Spend]:
    """Per model (in `models` order, those with an attempt): spend over all attempts."""
    found: dict[str, Spend] = {}
    for r in rows:
        s = found.setdefault(str(r["model"]), Spend(str(r["model"])))
        s.attempts += 1
        s.add(usage(r))
    return [found[m] for m in models if m in found]
