"""Severity by code: Signals §3.3, Tables 1 and 2, equations 1–3, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from eairdsl.signals import severity_score
from eairdsl.signals.severity import (
    Consequence,
    Reachability,
    ScopeBand,
    Waste,
    calculate,
    exposure_points,
    level_of,
    scope_points,
    signal_severity,
)


def test_the_paper_s_worked_example() -> None:
    """'a task failure affecting five of 30 analyzed sessions ... 40 + 7 = 47, High'."""
    assert severity_score("realized_defect", consequence="task_failure",
                          affected_sessions=5, analyzed_sessions=30) == (47, "High")
    c = calculate("realized_defect", consequence=40, affected_sessions=5, analyzed_sessions=30)
    # "Both the count of five and the 16.7% affected share select the repeated band"
    assert (c.count_band, c.share_band, c.band, c.scope_points) == \
        ("repeated", "repeated", "repeated", 7)
    assert (c.factor_points, c.score, c.level) == (40, 47, "High")
    # "the calculation records the counts and population alongside the score"
    assert (c.affected_sessions, c.analyzed_sessions, c.share_applies) == (5, 30, True)
    assert c.arithmetic() == "40 + 7 = 47 (High)"


# Table 2's count column at every band edge (analysed < 20: the share never applies)
@pytest.mark.parametrize(("affected", "band", "points"), [
    (1, "isolated", 0), (2, "limited", 3), (3, "limited", 3), (4, "repeated", 7),
    (10, "repeated", 7), (11, "broad", 12), (100, "broad", 12), (101, "widespread", 15),
])
def test_count_band_edges(affected: int, band: str, points: int) -> None:
    # a large population keeps the share band at or below the count band
    analyzed = max(19, affected * 10_000)
    chosen, by_count, _ = scope_points(affected, analyzed)
    assert by_count.name.lower() == band and int(by_count) == points
    assert chosen == by_count


# Table 2's share column at its lower edges (analysed ≥ 20)
@pytest.mark.parametrize(("affected", "analyzed", "band"), [
    (1, 101, "isolated"),   # 0.99% < 1%
    (1, 100, "limited"),    # exactly 1%
    (1, 20, "limited"),     # 5%
    (2, 21, "limited"),     # 9.5%
    (3, 31, "limited"),     # 9.7%
    (2, 20, "repeated"),    # exactly 10%
])
def test_share_band_edges(affected: int, analyzed: int, band: str) -> None:
    _, _, by_share = scope_points(affected, analyzed)
    assert by_share is not None and by_share.name.lower() == band


@pytest.mark.parametrize(("affected", "analyzed", "share"), [
    (29, 100, ScopeBand.REPEATED),    # 29%
    (30, 100, ScopeBand.BROAD),       # exactly 30%
    (59, 100, ScopeBand.BROAD),       # 59%
    (60, 100, ScopeBand.WIDESPREAD),  # exactly 60%
    (20, 20, ScopeBand.WIDESPREAD),   # 100%
    (1, 3, None),                     # 33% of 3: fewer than 20 analysed, no share band
])
def test_share_band_upper_edges(affected: int, analyzed: int, share: ScopeBand | None) -> None:
    assert scope_points(affected, analyzed)[2] == share


def test_share_needs_at_least_20_analysed_sessions() -> None:
    # 2 of 19 (10.5%) and 2 of 20 (10%): the count says limited, the share repeated
    below = calculate("realized_defect", consequence="small", affected_sessions=2,
                      analyzed_sessions=19)
    at = calculate("realized_defect", consequence="small", affected_sessions=2,
                   analyzed_sessions=20)
    assert (below.share_applies, below.share_band, below.band, below.score) == \
        (False, None, "limited", 13)
    assert (at.share_applies, at.share_band, at.band, at.score) == \
        (True, "repeated", "repeated", 17)


def test_the_higher_band_wins() -> None:
    # share higher: 15 of 20 is 75% (widespread) though the count says broad
    c = calculate("inefficiency", waste="small", affected_sessions=15, analyzed_sessions=20)
    assert (c.count_band, c.share_band, c.band, c.scope_points) == \
        ("broad", "widespread", "widespread", 15)
    # count higher: 150 of 100,000 is 0.15% (isolated) though the count is widespread
    c = calculate("inefficiency", waste="small", affected_sessions=150,
                  analyzed_sessions=100_000)
    assert (c.count_band, c.share_band, c.band, c.scope_points) == \
        ("widespread", "isolated", "widespread", 15)


# eq. 1 and eq. 3 over every Table 1 value, with one isolated session (A = 0)
@pytest.mark.parametrize(("points", "consequence", "waste"), [
    (10, Consequence.SMALL, Waste.SMALL), (25, Consequence.MATERIAL, Waste.MEANINGFUL),
    (40, Consequence.TASK_FAILURE, Waste.SUBSTANTIAL), (65, Consequence.MAJOR, Waste.DOMINANT),
    (85, Consequence.SEVERE, Waste.UNBOUNDED),
])
def test_table_1_values_by_name_member_or_points(points: int, consequence: Consequence,
                                                 waste: Waste) -> None:
    for given in (consequence, consequence.name.lower(), points):
        assert severity_score("realized_defect", consequence=given, affected_sessions=1,
                              analyzed_sessions=1)[0] == points
    for given_w in (waste, waste.name.lower(), points):
        assert severity_score("inefficiency", waste=given_w, affected_sessions=1,
                              analyzed_sessions=1)[0] == points


# eq. 2: ⌈Cp·R⌉ + A
@pytest.mark.parametrize(("cp", "r", "adjusted"), [
    ("severe", "privileged", 34), ("severe", 0.6, 51), ("major", "interactive", 39),
    ("major", 0.8, 52), ("material", 0.4, 10), ("task_failure", "public", 40),
    ("small", Reachability.PRIVILEGED, 4),
])
def test_exposure_scores(cp: Any, r: Any, adjusted: int) -> None:
    c = calculate("risk_exposure", consequence=cp, reachability=r, affected_sessions=2,
                  analyzed_sessions=3)
    assert (c.equation, c.adjusted_points, c.scope_points, c.score) == (2, adjusted, 3,
                                                                        adjusted + 3)


@pytest.mark.parametrize(("cp", "tenths", "ceiled"), [
    (33, 6, 20),   # 19.8 rounds up
    (31, 4, 13),   # 12.4 rounds up
    (65, 6, 39),   # exact: 39, not 40 (a float 65 * 0.6 could tip the ceiling)
    (85, 10, 85),
    (1, 4, 1),     # 0.4 rounds up to 1
])
def test_the_ceiling_of_eq_2(cp: int, tenths: int, ceiled: int) -> None:
    assert exposure_points(cp, tenths) == ceiled


def test_every_table_value_and_band_stays_within_100_and_the_cap_is_applied() -> None:
    worst = calculate("realized_defect", consequence="severe", affected_sessions=101,
                      analyzed_sessions=101)
    assert (worst.score, worst.level) == (100, "Critical")  # 85 + 15: the cap does not bind
    assert worst.arithmetic() == "85 + 15 = 100 (Critical)"
    for c in Consequence:
        for band_sessions in (1, 2, 4, 11, 101):
            s, _ = severity_score("realized_defect", consequence=c,
                                  affected_sessions=band_sessions,
                                  analyzed_sessions=band_sessions)
            assert 1 <= s <= 100


def test_clamping_at_100(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later table change must not exceed 100: raise A and check the min() holds."""
    import eairdsl.signals.severity as sev

    monkeypatch.setattr(sev, "scope_points", lambda a, n: (_Fake(40), _Fake(40), None))
    c = sev.calculate("realized_defect", consequence="severe", affected_sessions=1,
                      analyzed_sessions=1)
    assert (c.score, c.level) == (100, "Critical")
    assert c.arithmetic().endswith("= 100 (capped at 100) (Critical)")


class _Fake(int):
    """A stand-in scope band worth `int` points (what a larger Table 2 would give)."""

    @property
    def name(self) -> str:
        return "hypothetical"


@pytest.mark.parametrize(("score", "level"), [
    (1, "Low"), (39, "Low"), (40, "High"), (79, "High"), (80, "Critical"), (100, "Critical"),
])
def test_level_edges(score: int, level: str) -> None:
    assert level_of(score) == level


@pytest.mark.parametrize("score", [0, 101, -1, True, 40.0])
def test_level_of_out_of_range(score: Any) -> None:
    with pytest.raises(ValueError, match="integer in 1–100"):
        level_of(score)


def test_levels_from_scores_at_the_edges() -> None:
    # 25 + 12 = 37 Low; 25 + 15 = 40 High; 65 + 12 = 77 High; 65 + 15 = 80 Critical
    assert severity_score("realized_defect", consequence="material", affected_sessions=11,
                          analyzed_sessions=200) == (37, "Low")
    assert severity_score("realized_defect", consequence="material", affected_sessions=101,
                          analyzed_sessions=200) == (40, "High")
    assert severity_score("inefficiency", waste="dominant", affected_sessions=11,
                          analyzed_sessions=11) == (77, "High")
    assert severity_score("inefficiency", waste="dominant", affected_sessions=20,
                          analyzed_sessions=20) == (80, "Critical")


def test_signal_severity_is_the_max_over_the_natures_present() -> None:
    defect = calculate("realized_defect", consequence="material", affected_sessions=2,
                       analyzed_sessions=10)                      # 28
    exposure = calculate("risk_exposure", consequence="severe", reachability="ordinary",
                         affected_sessions=1, analyzed_sessions=10)  # 68
    waste = calculate("inefficiency", waste="substantial", affected_sessions=4,
                      analyzed_sessions=10)                       # 47
    s = signal_severity([waste, defect, exposure])
    assert (s.score, s.level, s.nature) == (68, "High", "risk_exposure")
    assert [c.nature for c in s.calculations] == ["realized_defect", "risk_exposure",
                                                  "inefficiency"]
    # only the natures represented: without the exposure, S is the inefficiency's 47
    assert signal_severity([defect, waste]).score == 47
    # not a sum, not a mean
    assert signal_severity([defect, waste]).score != 28 + 47
    assert signal_severity([defect]).score == 28


def test_a_tie_goes_to_the_defect() -> None:
    defect = calculate("realized_defect", consequence="task_failure", affected_sessions=1,
                       analyzed_sessions=1)
    waste = calculate("inefficiency", waste="substantial", affected_sessions=1,
                      analyzed_sessions=1)
    assert signal_severity([waste, defect]).nature == "realized_defect"


def test_signal_severity_errors() -> None:
    c = calculate("inefficiency", waste="small", affected_sessions=1, analyzed_sessions=1)
    with pytest.raises(ValueError, match="at least one"):
        signal_severity([])
    with pytest.raises(ValueError, match="two calculations for inefficiency"):
        signal_severity([c, c])


@pytest.mark.parametrize(("nature", "factors", "message"), [
    ("defect", {"consequence": 40}, "unknown nature 'defect'"),
    ("realized_defect", {}, "needs the consequence factor"),
    ("realized_defect", {"consequence": 40, "reachability": 0.4}, "takes no reachability"),
    ("realized_defect", {"consequence": 40, "waste": 10}, "takes no waste"),
    ("realized_defect", {"consequence": 30}, "30 is not a Table 1 value"),
    ("realized_defect", {"consequence": "huge"}, "'huge' is not a Table 1 value"),
    ("realized_defect", {"consequence": Waste.SUBSTANTIAL}, "not a Table 1 value"),
    ("realized_defect", {"consequence": True}, "not a Table 1 value"),
    ("risk_exposure", {"consequence": 40}, "needs the reachability factor"),
    ("risk_exposure", {"reachability": 0.4}, "needs the consequence"),
    ("risk_exposure", {"consequence": 40, "reachability": 0.5}, "0.5 is not a §3.3 multiplier"),
    ("risk_exposure", {"consequence": 40, "reachability": "likely"}, "not a §3.3 multiplier"),
    ("risk_exposure", {"consequence": 40, "reachability": 1.0, "waste": 10}, "takes no waste"),
    ("inefficiency", {"waste": 10, "consequence": 10}, "takes no consequence"),
    ("inefficiency", {}, "needs the waste factor"),
])
def test_bad_factors(nature: str, factors: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        severity_score(nature, affected_sessions=1, analyzed_sessions=1, **factors)


@pytest.mark.parametrize(("affected", "analyzed", "message"), [
    (-1, 10, "affected_sessions must not be negative"),
    (1, -1, "analyzed_sessions must not be negative"),
    (0, 10, "affected_sessions is 0"),
    (11, 10, r"affected_sessions \(11\) exceeds analyzed_sessions \(10\)"),
    (1.0, 10, "integer session count"),
    (True, 10, "integer session count"),
])
def test_bad_counts(affected: Any, analyzed: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        severity_score("realized_defect", consequence=40, affected_sessions=affected,
                       analyzed_sessions=analyzed)


def test_the_package_surface_refuses_unknown_or_missing_keywords() -> None:
    with pytest.raises(ValueError, match=r"unknown severity factor.*confidence"):
        severity_score("realized_defect", consequence=40, affected_sessions=1,
                       analyzed_sessions=1, confidence=0.9)
    with pytest.raises(ValueError, match="needs analyzed_sessions"):
        severity_score("realized_defect", consequence=40, affected_sessions=1)


def test_the_calculation_is_plain_data() -> None:
    c = calculate("risk_exposure", consequence="major", reachability="interactive",
                  affected_sessions=3, analyzed_sessions=40)
    dumped = c.model_dump()
    assert dumped["reachability"] == "interactive"
    assert dumped["reachability_multiplier"] == 0.6
    assert dumped["factor"] == "potential_consequence" and dumped["factor_level"] == "major"
    # 3 of 40 is 7.5%: limited both ways
    assert (dumped["band"], dumped["scope_points"], dumped["score"]) == ("limited", 3, 42)
    assert type(c).model_validate(dumped) == c
