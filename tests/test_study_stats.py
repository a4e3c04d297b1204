"""The study statistics against the EAIR paper's published values and hand-computed cases."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eairdsl.study.stats import (
    clustered_bootstrap_diff,
    fisher_exact,
    kendall_tau_b,
    mcnemar_exact,
    pass_at_k,
    pass_hat_k,
    quantile,
    ranks,
    rate,
    rate_of,
    spearman,
    unpaired_bootstrap_diff,
    wilson_interval,
)


def _pct(interval: tuple[float, float] | None) -> tuple[float, float]:
    assert interval is not None
    return round(100 * interval[0], 1), round(100 * interval[1], 1)


@pytest.mark.parametrize(("k", "n", "lo", "hi"), [
    (47, 60, 66.4, 86.9),    # A1 shared-cap violations (§5.2, F.1)
    (70, 90, 68.2, 85.1),    # D1 disclosure
    (45, 120, 29.4, 46.4),   # B1 VP-with-power arm
    (38, 150, 19.0, 32.8),   # C1 terminal drift
    (149, 240, 55.8, 68.0),  # F1 misrouting
    (0, 20, 0.0, 16.1),      # repair retests (F.10)
    (3, 100, 1.0, 8.5),      # five-arm retest batch
    (3, 20, 5.2, 36.0),      # C1 retest arm
    (44, 44, 92.0, 100.0),   # audit recovery (F.14)
])
def test_wilson_matches_published_intervals(k: int, n: int, lo: float, hi: float) -> None:
    """Wilson 95% intervals reproduce the paper's published percentages to one decimal."""
    assert _pct(wilson_interval(k, n)) == (lo, hi)


def test_wilson_edges_and_empty_cohort() -> None:
    """k = 0 starts at exactly 0, k = n ends at exactly 1, and n = 0 has no interval."""
    assert wilson_interval(0, 5)[0] == 0.0  # type: ignore[index]
    assert wilson_interval(5, 5)[1] == 1.0  # type: ignore[index]
    assert wilson_interval(0, 0) is None
    assert rate(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_rates_exclude_unassessed_from_the_denominator() -> None:
    """An unassessed (None) episode is left out of n, never counted as a zero."""
    r = rate_of([True, None, False, None, True])
    assert r is not None and (r.k, r.n) == (2, 3)
    assert rate_of([None, None]) is None
    assert str(rate(47, 60)) == "47/60 (78.3%; 95% CI 66.4–86.9%)"


@pytest.mark.parametrize(("b", "c", "p"), [(7, 1, 0.0703), (1, 7, 0.0703), (0, 4, 0.125),
                                           (0, 0, 1.0), (5, 5, 1.0)])
def test_mcnemar_exact_matches_published_p_values(b: int, c: int, p: float) -> None:
    """Two-sided exact McNemar on discordant pairs: (7, 1) → 0.0703 and (0, 4) → 0.125."""
    assert round(mcnemar_exact(b, c), 4) == p


def test_mcnemar_small_sample_by_hand() -> None:
    """(0, 1) gives p = 1 and (0, 6) gives 2/64, the binomial tail doubled."""
    assert mcnemar_exact(0, 1) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)


def test_ranks_average_ties() -> None:
    """Tied values share the average of the ranks they occupy."""
    assert ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    assert ranks([3, 1, 3, 3]) == [3.0, 1.0, 3.0, 3.0]


def test_spearman_with_ties_by_hand() -> None:
    """ρ on average ranks: [1,2,2,3] vs [1,3,2,4] is 3/√10; [1,1,2,3] vs [2,1,1,3] is 0.5."""
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / 10**0.5)
    assert spearman([1, 1, 2, 3], [2, 1, 1, 3]) == pytest.approx(0.5)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1], [2]) is None


def test_kendall_tau_b_with_ties_by_hand() -> None:
    """τ_b = (nc − nd)/√((n0 − n1)(n0 − n2)): 5/√30 and 2/√25 for the tied cases."""
    assert kendall_tau_b([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(5 / 30**0.5)
    assert kendall_tau_b([1, 1, 2, 3], [2, 1, 1, 3]) == pytest.approx(0.4)
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau_b([2, 2, 2], [1, 2, 3]) is None


def test_pass_at_k_and_pass_hat_k() -> None:
    """pass@k = 1 − C(n−c,k)/C(n,k); pass^k = C(c,k)/C(n,k)."""
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(3, 0, 3) == 0.0
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_hat_k(3, 2, 3) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(3, 1, 4)


def test_quantile_interpolates() -> None:
    """Quantiles interpolate linearly between order statistics (numpy's default)."""
    assert quantile([0.0, 10.0], 0.25) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0


def test_clustered_bootstrap_is_seeded_and_pooled() -> None:
    """The model-clustered bootstrap is deterministic per seed and pools each arm's episodes."""
    control = {"m1": [0, 0, 1], "m2": [0, 0, 0], "m3": [1, 0, 0], "m4": [0, 1, 0]}
    treatment = {"m1": [1, 1, 1], "m2": [0, 1, 1], "m3": [1, 1, 0], "m4": [1, 1, 1]}
    start = time.perf_counter()
    a = clustered_bootstrap_diff(control, treatment)
    elapsed = time.perf_counter() - start
    b = clustered_bootstrap_diff(control, treatment)
    assert a is not None and a == b
    assert a.resamples == 20_000 and a.clusters == 4
    assert a.diff == pytest.approx(10 / 12 - 3 / 12)
    assert a.lo <= a.diff <= a.hi
    assert elapsed < 60  # a hang guard, not a timing (CI shares 2 cores)


def test_clustered_bootstrap_degenerate_cases() -> None:
    """Identical arms give a zero-width interval; no shared cluster gives None."""
    same = clustered_bootstrap_diff({"a": [1, 0]}, {"a": [1, 0]}, resamples=100)
    assert same is not None and (same.diff, same.lo, same.hi) == (0.0, 0.0, 0.0)
    assert clustered_bootstrap_diff({"a": [1]}, {"b": [0]}) is None
    full = clustered_bootstrap_diff({"a": [0], "b": [0]}, {"a": [1], "b": [1]}, resamples=50)
    assert full is not None and (full.lo, full.hi) == (1.0, 1.0)


def test_mcnemar_exact_does_not_overflow_for_large_studies() -> None:
    """Issue 28: `eairc report` on a 20,169-episode study ended in OverflowError (2.0**n
    for b + c > 1023). b + c in the tens of thousands gives a p in [0, 1]."""
    assert mcnemar_exact(15_000, 15_000) == 1.0
    p = mcnemar_exact(15_000, 15_300)
    assert 0.05 < p < 0.2  # normal approximation: z = 300/sqrt(30300) = 1.72, p ≈ 0.085
    assert p == pytest.approx(0.0858, abs=0.002)
    assert mcnemar_exact(10, 40_000) == 0.0  # below the smallest float, not an error
    assert mcnemar_exact(20_000, 20_500) == pytest.approx(mcnemar_exact(20_500, 20_000))


@pytest.mark.parametrize(("table", "p"), [
    ((3, 1, 1, 3), 0.4857),   # Fisher's tea-tasting experiment
    ((1, 9, 11, 3), 0.0028),  # R's fisher.test on the job-satisfaction example (two-sided)
    ((0, 5, 5, 0), 0.0079),   # 2/C(10, 5)
    ((2, 3, 2, 3), 1.0),
    ((0, 0, 3, 4), 1.0),      # an empty row: nothing to test
])
def test_fisher_exact_matches_textbook_values(table: tuple[int, int, int, int],
                                              p: float) -> None:
    assert round(fisher_exact(*table), 4) == p


def test_fisher_exact_is_symmetric_and_overflow_free() -> None:
    """Transposing the table, swapping its rows or its columns leaves p unchanged; a
    20,000-episode table gives a p in [0, 1] (log space), agreeing with the normal
    approximation of the difference of two rates."""
    for a, b, c, d in [(3, 1, 1, 3), (7, 2, 3, 9), (0, 4, 6, 1), (12, 30, 5, 2)]:
        p = fisher_exact(a, b, c, d)
        for other in [(a, c, b, d), (c, d, a, b), (b, a, d, c), (d, c, b, a)]:
            assert fisher_exact(*other) == pytest.approx(p, rel=1e-9)
    big = fisher_exact(3_000, 7_000, 3_200, 6_800)
    # two-proportion z = 0.02 / sqrt(0.31 · 0.69 · 2 / 10,000) = 3.06: p ≈ 0.0022
    assert 0.001 < big < 0.004
    assert fisher_exact(5_000, 5_000, 5_000, 5_000) == pytest.approx(1.0)
    assert fisher_exact(10_000, 0, 0, 10_000) == 0.0
    with pytest.raises(ValueError):
        fisher_exact(-1, 0, 0, 0)


def test_unpaired_bootstrap_resamples_each_arm_independently() -> None:
    """Arms of different sizes per model; seeded; one model still gives an interval of
    nonzero width (episodes are resampled within it); constant arms give none."""
    control = {"m1": [0, 0, 1, 0], "m2": [0, 1], "m3": [1, 0, 0]}
    treatment = {"m1": [1, 1, 0], "m2": [1, 1, 1, 0, 1], "m3": [1]}
    a = unpaired_bootstrap_diff(control, treatment, resamples=2_000)
    assert a is not None and a == unpaired_bootstrap_diff(control, treatment, resamples=2_000)
    assert a.diff == pytest.approx(7 / 9 - 3 / 9) and a.clusters == 3
    assert a.lo <= a.diff <= a.hi
    one = unpaired_bootstrap_diff({"m": [0, 1] * 20}, {"m": [0, 1, 1] * 20}, resamples=2_000)
    assert one is not None and one.lo < one.diff < one.hi
    flat = unpaired_bootstrap_diff({"m": [0, 0]}, {"m": [1, 1, 1]}, resamples=100)
    assert flat is not None and (flat.lo, flat.hi) == (1.0, 1.0)
    assert unpaired_bootstrap_diff({"a": [1]}, {"b": [0]}) is None
    payments = unpaired_bootstrap_diff({"m": [2.5, 3.0]}, {"m": [4.0, 1.5, 2.0]}, resamples=200)
    assert payments is not None and payments.lo <= payments.hi


# ---------------------------------------------------------------- scipy as an oracle
@pytest.mark.parametrize("b,c", [(0, 1), (7, 1), (3, 9), (120, 150), (2_000, 2_200),
                                 (4_096, 4_000), (15_000, 15_300), (250_000, 251_500),
                                 (1_000_000, 1_003_000), (2_000_000, 1_990_000)])
def test_mcnemar_exact_equals_scipys_exact_binomial_test(b: int, c: int) -> None:
    """Exact McNemar is the two-sided exact binomial test of min(b, c) among b + c at
    1/2; scipy's `binomtest` is the oracle, up to n in the millions (issue 28 item 1)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    expected = scipy_stats.binomtest(min(b, c), b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-7, abs=1e-300)


@pytest.mark.parametrize("table", [(3, 1, 1, 3), (1, 9, 11, 3), (0, 5, 5, 0),
                                   (3_000, 7_000, 3_200, 6_800), (10, 1_000_000, 30, 999_980),
                                   (500_000, 500_000, 501_500, 498_500), (40, 2, 1, 60)])
def test_fisher_exact_equals_scipys(table: tuple[int, int, int, int]) -> None:
    """Two-sided Fisher exact p against scipy's, including tables of two million."""
    scipy_stats = pytest.importorskip("scipy.stats")
    a, b, c, d = table
    expected = scipy_stats.fisher_exact([[a, b], [c, d]]).pvalue
    assert fisher_exact(*table) == pytest.approx(expected, rel=1e-7, abs=1e-300)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=4, max_size=4))
def test_fisher_exact_equals_scipy_on_random_tables(table: list[int]) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    a, b, c, d = table
    expected = scipy_stats.fisher_exact([[a, b], [c, d]]).pvalue
    assert fisher_exact(a, b, c, d) == pytest.approx(expected, rel=1e-7, abs=1e-290)
