"""The paper's statistics (EAIR §5, Appendix F.1 and F.9) as pure functions.

Nothing here touches a store, a file or numpy: every function takes plain
numbers or sequences and returns plain numbers (or `None` when the quantity
does not exist). The policies that the report follows are fixed here:

* A rate always carries its denominator (`Rate.k`, `Rate.n`). Unassessed
  episodes (a measurement of `None`) are excluded from the denominator, never
  counted as zeros: `rate_of([True, None, False])` is 1/2.
* An empty cohort has no rate: `rate(0, 0)` and `wilson_interval(0, 0)` are
  `None`, not 0% and not an interval.
* Intervals are Wilson score intervals at z = 1.96 (95%); paired binary
  contrasts (the same cell under two models) use the exact two-sided McNemar
  test; unpaired ones (two conditions, which do not share random draws) use
  Fisher's exact test on the 2×2 table of counts. Both are computed without
  floats that can overflow, at any study size. Aggregate differences use a
  bootstrap that resamples clusters (20,000 resamples, seeded) — the caller
  says what a cluster is; the report uses instances or seeds, never models —
  and the unpaired one also resamples each arm's episodes within a drawn cluster.
"""

from __future__ import annotations

import bisect
import functools
import math
import operator
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Z95",
    "BootstrapResult",
    "Rate",
    "clustered_bootstrap_diff",
    "fisher_exact",
    "kendall_tau_b",
    "mcnemar_exact",
    "pass_at_k",
    "pass_hat_k",
    "quantile",
    "ranks",
    "rate",
    "rate_of",
    "spearman",
    "unpaired_bootstrap_diff",
    "wilson_interval",
]

Z95 = 1.96


@dataclass(frozen=True)
class Rate:
    """k events among n assessed episodes, with a Wilson interval."""

    k: int
    n: int
    lo: float
    hi: float

    @property
    def value(self) -> float:
        return self.k / self.n

    def pct(self, digits: int = 1) -> str:
        return f"{100 * self.value:.{digits}f}%"

    def ci(self, digits: int = 1) -> str:
        return f"{100 * self.lo:.{digits}f}–{100 * self.hi:.{digits}f}%"

    def __str__(self) -> str:
        return f"{self.k}/{self.n} ({self.pct()}; 95% CI {self.ci()})"


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for k successes in n trials; None when n == 0.

        p̂ = k/n,  centre = (p̂ + z²/2n) / (1 + z²/n),
        half-width = z·sqrt(p̂(1−p̂)/n + z²/4n²) / (1 + z²/n)

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not empty
    at k = 0 or k = n: 0/20 gives 0–16.1%.
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def rate(k: int, n: int, z: float = Z95) -> Rate | None:
    """A `Rate` for k of n, or None for an empty cohort."""
    interval = wilson_interval(k, n, z)
    if interval is None:
        return None
    return Rate(k, n, *interval)


def rate_of(values: Iterable[bool | int | None], z: float = Z95) -> Rate | None:
    """The rate of true values among assessed ones; `None` values are not in the denominator."""
    assessed = [bool(v) for v in values if v is not None]
    return rate(sum(assessed), len(assessed), z)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts b and c.

    Under H0 the b + c discordant pairs split as Binomial(b + c, 1/2), so

        p = min(1, 2 · Σ_{i=0}^{min(b,c)} C(b+c, i) / 2^(b+c))

    Concordant pairs carry no information and are not arguments. With no
    discordant pair the test cannot reject: p = 1. (7, 1) gives 0.0703 and
    (0, 4) gives 0.125, as in the paper.

    Up to `_EXACT_N` discordant pairs the sum is exact integer arithmetic (each
    C(n, i+1) from C(n, i)) divided as integers. Past it the tail is summed in log
    space from its largest term, C(n, min(b, c)), downwards — the terms fall by the
    ratio i / (n − i + 1) < 1 — and stops once a term no longer moves the sum, so
    n in the millions costs O(√n) terms, never overflows and never takes time
    proportional to n²; a p below the smallest float is 0.0.
    """
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    if n <= _EXACT_N:
        term = tail = 1  # C(n, 0)
        for i in range(k):
            term = term * (n - i) // (i + 1)
            tail += term
        return min(1.0, 2 * tail / (1 << n))
    # relative to the largest term C(n, k): Σ_{i<=k} C(n, i) / C(n, k)
    rel = term_rel = 1.0
    for i in range(k, 0, -1):
        term_rel *= i / (n - i + 1)
        rel += term_rel
        if term_rel < rel * 1e-17:
            break
    log_p = math.log(2.0) + _log_comb(n, k) + math.log(rel) - n * math.log(2.0)
    return 1.0 if log_p >= 0.0 else math.exp(log_p)


#: up to this many discordant pairs McNemar's tail is summed as exact integers
_EXACT_N = 4096


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact p-value of the 2×2 table [[a, b], [c, d]].

    With the margins fixed, the top-left count is hypergeometric: rows r1 = a + b,
    r2 = c + d, column c1 = a + c, N = a + b + c + d, and

        P(x) = C(r1, x) · C(r2, c1 − x) / C(N, c1),  max(0, c1 − r2) <= x <= min(r1, c1).

    The two-sided p sums P(x) over every x no more probable than the observed a
    (with a relative tolerance of 1e-7 for ties, as R and SciPy do). The
    distribution is unimodal, so each side of its mode falls monotonically: the
    sum walks out from the mode by the ratio P(x+1)/P(x), relative to P(mode)
    (computed in log space with `math.lgamma`), and stops once a term no longer
    moves it — O(√N) terms for N in the millions, not N, and never an overflow.
    The tea-tasting table [[3, 1], [1, 3]] gives 0.4857; a table with an empty row or
    column gives 1.
    """
    if min(a, b, c, d) < 0:
        raise ValueError("table counts must be non-negative")
    r1, r2, c1 = a + b, c + d, a + c
    n = r1 + r2
    lo, hi = max(0, c1 - r2), min(r1, c1)
    if lo == hi:
        return 1.0
    log_total = _log_comb(n, c1)

    def log_p(x: int) -> float:
        return _log_comb(r1, x) + _log_comb(r2, c1 - x) - log_total

    observed = log_p(a)
    mode = min(max((r1 + 1) * (c1 + 1) // (n + 2), lo), hi)
    log_top = log_p(mode)
    log_cut = observed - log_top + math.log1p(1e-7)
    if log_cut < -700.0:  # relative terms would underflow: sum every term in log space
        cut = observed + math.log1p(1e-7)
        return min(1.0, sum(math.exp(v) for v in map(log_p, range(lo, hi + 1)) if v <= cut))
    cut_rel = math.exp(log_cut)
    total = 1.0 if cut_rel >= 1.0 else 0.0  # the mode, relative to itself

    def up(x: int) -> float:  # P(x + 1) / P(x)
        return (r1 - x) * (c1 - x) / ((x + 1) * (r2 - c1 + x + 1))

    for step in (-1, 1):  # each side of the mode falls monotonically away from it
        rel, x = 1.0, mode
        while lo <= x + step <= hi:
            rel = rel / up(x - 1) if step < 0 else rel * up(x)
            x += step
            if rel <= cut_rel:
                total += rel
                if rel < total * 1e-17:
                    break
    return min(1.0, math.exp(log_top) * total)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of an already sorted sequence."""
    if not sorted_values:
        raise ValueError("quantile of an empty sequence")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True)
class BootstrapResult:
    """Observed difference (treatment − control) with a percentile interval."""

    diff: float
    lo: float
    hi: float
    resamples: int
    clusters: int


def clustered_bootstrap_diff(control: Mapping[str, Sequence[float]],
                             treatment: Mapping[str, Sequence[float]],
                             resamples: int = 20_000, seed: int = 0,
                             level: float = 0.95) -> BootstrapResult | None:
    """Difference of pooled means, treatment − control, with a model-clustered bootstrap CI.

    `control[m]` and `treatment[m]` are the episode outcomes (0/1 for a rate,
    any number for e.g. a payment) of cluster m — in the paper, a model — under
    the two configurations. Only clusters with episodes in both arms enter
    (the contrast is model-paired). Each resample draws that many clusters with
    replacement and recomputes

        diff* = Σ_drawn Σ treatment / Σ_drawn |treatment| − Σ_drawn Σ control / Σ_drawn |control|

    so clusters keep their own episode counts; the interval is the
    (1−level)/2 and (1+level)/2 percentiles of the diff* values (linear
    interpolation). Seeded with `random.Random(seed)`: the same inputs give the
    same interval. None when no cluster is in both arms.
    """
    names = sorted(m for m in control if control[m] and treatment.get(m))
    if not names:
        return None
    c_sum = [float(sum(control[m])) for m in names]
    c_n = [float(len(control[m])) for m in names]
    t_sum = [float(sum(treatment[m])) for m in names]
    t_n = [float(len(treatment[m])) for m in names]

    def total(mult: Sequence[int], values: list[float]) -> float:
        return float(sum(map(operator.mul, mult, values)))

    def diff(mult: Sequence[int]) -> float:
        return total(mult, t_sum) / total(mult, t_n) - total(mult, c_sum) / total(mult, c_n)

    k = len(names)
    observed = diff([1] * k)
    # Each resample is only how often it drew each cluster; resamples that drew the same
    # clusters give the same diff*, so it is computed once per distinct draw.
    pairs = sorted((diff(mult), count) for mult, count in _draws(k, resamples, seed))
    values = [v for v, count in pairs for _ in range(count)]
    alpha = (1 - level) / 2
    return BootstrapResult(observed, quantile(values, alpha), quantile(values, 1 - alpha),
                           resamples, k)


def unpaired_bootstrap_diff(control: Mapping[str, Sequence[float]],
                            treatment: Mapping[str, Sequence[float]],
                            resamples: int = 20_000, seed: int = 0,
                            level: float = 0.95) -> BootstrapResult | None:
    """Difference of pooled means, treatment − control, with a two-stage bootstrap CI for
    arms whose episodes are not paired (two conditions: they share no random draws).

    `control[m]` and `treatment[m]` are cluster m's (an instance's, say) episode outcomes under
    the two arms; they may differ in number. Only clusters with episodes in both arms
    enter. Each resample draws that many clusters with replacement (as
    `clustered_bootstrap_diff`) and then, for every drawn cluster, resamples its
    control episodes and its treatment episodes *independently*, each with
    replacement and keeping its count; diff* is the difference of the pooled means.
    0/1 outcomes are resampled exactly as a Binomial(n, k/n) draw (inverse CDF), so a
    20,000-episode arm costs one draw, not 20,000. The interval is the (1−level)/2
    and (1+level)/2 percentiles. Seeded with `random.Random(seed)`; None when no
    cluster is in both arms. Unlike the cluster-only bootstrap, one model gives an
    interval of nonzero width whenever its arms vary.
    """
    names = sorted(m for m in control if control[m] and treatment.get(m))
    if not names:
        return None
    rng = random.Random(seed)
    c_arm = [_Arm(control[m]) for m in names]
    t_arm = [_Arm(treatment[m]) for m in names]
    c_n = sum(a.n for a in c_arm)
    t_n = sum(a.n for a in t_arm)
    observed = sum(a.total for a in t_arm) / t_n - sum(a.total for a in c_arm) / c_n
    k = len(names)
    draw = rng.randrange
    values: list[float] = []
    for _ in range(resamples):
        ct = cn = tt = tn = 0.0
        for _ in range(k):
            i = draw(k)
            ct += c_arm[i].resample(rng)
            cn += c_arm[i].n
            tt += t_arm[i].resample(rng)
            tn += t_arm[i].n
        values.append(tt / tn - ct / cn)
    values.sort()
    alpha = (1 - level) / 2
    return BootstrapResult(observed, quantile(values, alpha), quantile(values, 1 - alpha),
                           resamples, k)


class _Arm:
    """One cluster's episodes in one arm, and the sum of a resample of them."""

    def __init__(self, values: Sequence[float]) -> None:
        self.values = [float(v) for v in values]
        self.n = len(self.values)
        self.total = sum(self.values)
        self.binary = all(v in (0.0, 1.0) for v in self.values)
        self.cdf: list[float] = []
        ones = int(self.total)
        if self.binary and 0 < ones < self.n:
            p = ones / self.n
            lp, lq = math.log(p), math.log1p(-p)
            acc = 0.0
            for x in range(self.n + 1):
                acc += math.exp(_log_comb(self.n, x) + x * lp + (self.n - x) * lq)
                self.cdf.append(acc)

    def resample(self, rng: random.Random) -> float:
        if not self.binary:
            return sum(rng.choices(self.values, k=self.n))
        if not self.cdf:  # all zeros or all ones: every resample is the same
            return self.total
        return float(min(bisect.bisect_left(self.cdf, rng.random() * self.cdf[-1]), self.n))


@functools.lru_cache(maxsize=32)
def _draws(k: int, resamples: int, seed: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """The bootstrap's draws of k clusters with replacement, `resamples` times, from
    `random.Random(seed)`: each distinct draw as its per-cluster multiplicities, with how
    many resamples drew it. The same for every contrast with k clusters: computed once."""
    rng = random.Random(seed)
    draw = rng.randrange
    found: Counter[tuple[int, ...]] = Counter()
    for _ in range(resamples):
        mult = [0] * k
        for _ in range(k):
            mult[draw(k)] += 1
        found[tuple(mult)] += 1
    return tuple(sorted(found.items()))


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks with ties given their average rank ("fractional ranking")."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        average = (i + j) / 2 + 1
        for t in range(i, j + 1):
            out[order[t]] = average
        i = j + 1
    return out


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ, tie-adjusted: Pearson's r between average ranks.

    None when fewer than two pairs or when either side is constant (ρ is
    undefined, not 0).
    """
    if len(x) != len(y):
        raise ValueError("spearman needs sequences of equal length")
    if len(x) < 2:
        return None
    return _pearson(ranks(x), ranks(y))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's τ_b (tie-adjusted):

        τ_b = (n_c − n_d) / sqrt((n_0 − n_1)(n_0 − n_2))

    with n_c/n_d the concordant/discordant pairs, n_0 = n(n−1)/2, n_1 and n_2
    the pairs tied in x and in y. None when undefined (fewer than two pairs, or
    a constant side).
    """
    if len(x) != len(y):
        raise ValueError("kendall_tau_b needs sequences of equal length")
    n = len(x)
    if n < 2:
        return None
    nc = nd = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (x[i] > x[j]) - (x[i] < x[j])
            dy = (y[i] > y[j]) - (y[i] < y[j])
            if dx == 0:
                tx += 1
            if dy == 0:
                ty += 1
            if dx and dy:
                if dx == dy:
                    nc += 1
                else:
                    nd += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tx) * (n0 - ty))
    if denom == 0:
        return None
    return (nc - nd) / denom


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k: probability that at least one of k episodes drawn from n (c successes) succeeds.

    Unbiased estimator 1 − C(n−c, k)/C(n, k); needs 1 <= k <= n.
    """
    _check_k(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: probability that all k episodes drawn from n (c successes) succeed.

    C(c, k)/C(n, k); with k = n it is 1 only when every seed succeeds — the
    consistency-across-seeds measure.
    """
    _check_k(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_k(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
