"""Severity by code: Signals §3.3, Tables 1 and 2, equations 1–3.

The paper splits the work: "The model assesses the semantic factors from the
evidence. Code derives scope, looks up the fixed values, performs the
arithmetic, and determines the display level." So a finding supplies only the
semantic factor (the consequence that occurred, the potential consequence and
the reachability of the harmful path, or the avoidable waste) and this module
does everything else, the same way every time:

- affected-scope points A from Table 2: the count band of distinct affected
  sessions and, when at least 20 sessions were analysed, the share band; the
  higher band wins; the denominator is the sessions actually analysed;
- s_d = min(100, C + A) (eq. 1), s_r = min(100, ⌈Cp·R⌉ + A) (eq. 2),
  s_i = min(100, W + A) (eq. 3);
- a Signal's S = max over the natures its occurrences represent (never a sum or
  mean: a sum depends on how many natures were recorded, a mean hides a rare
  severe defect);
- display levels Low 1–39, High 40–79, Critical 80–100.

Factors are given either by Table 1's points (10, 25, 40, 65, 85; R as 0.4,
0.6, 0.8, 1.0) or by this module's level names (`Consequence`, `Waste`,
`Reachability` members, or their lower-case names such as "task_failure").
Consequence and waste share point values but not meanings, so they are
separate enums. Every calculation is kept as a `SeverityCalculation`, which
records "the counts and population alongside the score so that later
assessments can be interpreted against their evidence".
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum, IntEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.audit.contract import Nature

__all__ = ["NATURES", "FACTORS", "Consequence", "Waste", "Reachability", "ScopeBand", "Level",
           "SCORE_CAP", "MIN_SESSIONS_FOR_SHARE", "scope_points", "exposure_points", "level_of",
           "SeverityCalculation", "SignalSeverity", "calculate", "severity_score",
           "signal_severity"]

#: the three natures (§3.1), in the order that breaks ties in `signal_severity`
NATURES: tuple[Nature, ...] = ("realized_defect", "risk_exposure", "inefficiency")
#: the keyword arguments of `severity_score` (the semantic factors and the two counts)
FACTORS = ("consequence", "reachability", "waste", "affected_sessions", "analyzed_sessions")
#: the explicit cap of equations 1–3 (the current tables reach at most 85 + 15)
SCORE_CAP = 100
#: "The percentage applies only when at least 20 sessions were analyzed"
MIN_SESSIONS_FOR_SHARE = 20

Level = Literal["Low", "High", "Critical"]


class Consequence(IntEnum):
    """Table 1, consequence for a defect or credible exposure (points)."""

    SMALL = 10          # small, localized adverse effect
    MATERIAL = 25       # material but reversible degradation
    TASK_FAILURE = 40   # task failure or a materially wrong result
    MAJOR = 65          # major supported harm in a high-consequence domain
    SEVERE = 85         # severe, permanent, or irreversible harm


class Waste(IntEnum):
    """Table 1, avoidable waste for an inefficiency (points)."""

    SMALL = 10          # small avoidable work bounded to one operation
    MEANINGFUL = 25     # meaningful but bounded avoidable work
    SUBSTANTIAL = 40    # substantial or repeated avoidable work
    DOMINANT = 65       # waste dominates cost or latency, or persists across stages or turns
    UNBOUNDED = 85      # work continues until intervention or a hard limit, threatens viability


class Reachability(Enum):
    """§3.3's reachability multiplier R for a risk exposure; the value is R in tenths."""

    PRIVILEGED = 4      # privileged access with several uncommon preconditions
    INTERACTIVE = 6     # authentication or active user interaction
    ORDINARY = 8        # ordinary application behavior
    PUBLIC = 10         # a public or reliably automatable path

    @property
    def multiplier(self) -> float:
        return self.value / 10


class ScopeBand(IntEnum):
    """Table 2's bands; the value is the affected-scope points A."""

    ISOLATED = 0
    LIMITED = 3
    REPEATED = 7
    BROAD = 12
    WIDESPREAD = 15


def _count_band(affected: int) -> ScopeBand:
    """Table 2, distinct affected sessions: 1, 2–3, 4–10, 11–100, more than 100."""
    if affected <= 1:
        return ScopeBand.ISOLATED
    if affected <= 3:
        return ScopeBand.LIMITED
    if affected <= 10:
        return ScopeBand.REPEATED
    if affected <= 100:
        return ScopeBand.BROAD
    return ScopeBand.WIDESPREAD


def _share_band(affected: int, analyzed: int) -> ScopeBand:
    """Table 2, affected share: <1%, 1% to <10%, 10% to <30%, 30% to <60%, at least 60%.

    Compared in integers (100·affected against p·analyzed), so 1 of 100 is
    exactly 1% and lands in Limited, with no float rounding at a band edge.
    """
    pct = 100 * affected
    if pct < 1 * analyzed:
        return ScopeBand.ISOLATED
    if pct < 10 * analyzed:
        return ScopeBand.LIMITED
    if pct < 30 * analyzed:
        return ScopeBand.REPEATED
    if pct < 60 * analyzed:
        return ScopeBand.BROAD
    return ScopeBand.WIDESPREAD


def _check_counts(affected_sessions: int, analyzed_sessions: int) -> None:
    for name, value in (("affected_sessions", affected_sessions),
                        ("analyzed_sessions", analyzed_sessions)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer session count, not {value!r}")
        if value < 0:
            raise ValueError(f"{name} must not be negative (got {value})")
    if affected_sessions == 0:
        raise ValueError("affected_sessions is 0: a nature is scored only from the sessions "
                         "where it occurred (Table 2 starts at 1 distinct session)")
    if affected_sessions > analyzed_sessions:
        raise ValueError(f"affected_sessions ({affected_sessions}) exceeds analyzed_sessions "
                         f"({analyzed_sessions}): the denominator is the sessions actually "
                         "analyzed, which include every affected one")


def scope_points(affected_sessions: int, analyzed_sessions: int
                 ) -> tuple[ScopeBand, ScopeBand, ScopeBand | None]:
    """(chosen band, count band, share band or None below 20 analysed sessions)."""
    _check_counts(affected_sessions, analyzed_sessions)
    by_count = _count_band(affected_sessions)
    by_share = (_share_band(affected_sessions, analyzed_sessions)
                if analyzed_sessions >= MIN_SESSIONS_FOR_SHARE else None)
    chosen = by_count if by_share is None else max(by_count, by_share)
    return chosen, by_count, by_share


def exposure_points(potential: int, reachability_tenths: int) -> int:
    """⌈Cp·R⌉ in integers (R given in tenths): the ceiling of eq. 2 without float error."""
    return -(-potential * reachability_tenths // 10)


def level_of(score: int) -> Level:
    """The display level: Low 1–39, High 40–79, Critical 80–100."""
    if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= SCORE_CAP:
        raise ValueError(f"a severity score is an integer in 1–100, not {score!r}")
    if score < 40:
        return "Low"
    if score < 80:
        return "High"
    return "Critical"


def _points(value: object, enum: type[Consequence] | type[Waste], factor: str) -> int:
    """Table 1 points from a member, its name, or its points."""
    if isinstance(value, enum):
        return int(value)
    if isinstance(value, str):
        try:
            return int(enum[value.upper()])
        except KeyError:
            pass
    elif (isinstance(value, int) and not isinstance(value, bool | IntEnum)
          and value in {int(m) for m in enum}):
        return value
    names = ", ".join(f"{m.name.lower()} ({int(m)})" for m in enum)
    raise ValueError(f"{factor} {value!r} is not a Table 1 value; use one of {names}")


def _tenths(value: object) -> int:
    """R in tenths from a member, its name, or the multiplier 0.4/0.6/0.8/1.0."""
    if isinstance(value, Reachability):
        return value.value
    if isinstance(value, str):
        try:
            return Reachability[value.upper()].value
        except KeyError:
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool):
        for m in Reachability:
            if value == m.multiplier:
                return m.value
    names = ", ".join(f"{m.name.lower()} ({m.multiplier})" for m in Reachability)
    raise ValueError(f"reachability {value!r} is not a §3.3 multiplier; use one of {names}")


class SeverityCalculation(BaseModel):
    """One nature's score with everything that produced it, so it can be re-read later."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nature: Nature
    equation: Literal[1, 2, 3]
    factor: Literal["consequence", "potential_consequence", "waste"]
    factor_level: str = Field(description="the Table 1 level name, e.g. 'task_failure'")
    factor_points: int = Field(description="C, Cp or W (Table 1)")
    reachability: str | None = Field(description="the §3.3 reachability level (exposure only)")
    reachability_multiplier: float | None
    adjusted_points: int = Field(description="C, ⌈Cp·R⌉ or W: the points before scope")
    affected_sessions: int = Field(description="distinct affected sessions for this nature")
    analyzed_sessions: int = Field(description="the sessions actually analysed (denominator)")
    share_applies: bool = Field(description="at least 20 sessions analysed")
    count_band: str
    share_band: str | None
    band: str = Field(description="the higher of the count and share bands")
    scope_points: int = Field(description="A (Table 2)")
    score: int
    level: Level

    def arithmetic(self) -> str:
        """The sum as the paper writes it, e.g. '40 + 7 = 47 (High)'."""
        if self.reachability_multiplier is None:
            head = f"{self.factor_points}"
        else:
            head = f"⌈{self.factor_points} × {self.reachability_multiplier}⌉"
        capped = " (capped at 100)" if self.score < self.adjusted_points + self.scope_points \
            else ""
        return f"{head} + {self.scope_points} = {self.score}{capped} ({self.level})"


class SignalSeverity(BaseModel):
    """S = max over the natures a Signal represents, and which nature determined it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    score: int
    level: Level
    nature: Nature = Field(description="the nature whose score is S")
    calculations: tuple[SeverityCalculation, ...]


def calculate(nature: str, *, consequence: object = None, reachability: object = None,
              waste: object = None, affected_sessions: int, analyzed_sessions: int
              ) -> SeverityCalculation:
    """Score one nature (eq. 1, 2 or 3); ValueError for a bad nature, factor or count."""
    if nature not in NATURES:
        raise ValueError(f"unknown nature {nature!r}; use one of {', '.join(NATURES)}")
    band, by_count, by_share = scope_points(affected_sessions, analyzed_sessions)

    def forbid(**given: object) -> None:
        extra = sorted(k for k, v in given.items() if v is not None)
        if extra:
            raise ValueError(f"{nature} takes no {' or '.join(extra)} factor")

    def need(name: str, value: object) -> object:
        if value is None:
            raise ValueError(f"{nature} needs the {name} factor")
        return value

    r_tenths: int | None = None
    match nature:
        case "realized_defect":
            forbid(reachability=reachability, waste=waste)
            points = _points(need("consequence", consequence), Consequence, "consequence")
            adjusted, equation, factor = points, 1, "consequence"
            level_name = Consequence(points).name.lower()
        case "risk_exposure":
            forbid(waste=waste)
            points = _points(need("consequence (the potential consequence)", consequence),
                             Consequence, "potential consequence")
            r_tenths = _tenths(need("reachability", reachability))
            adjusted, equation, factor = exposure_points(points, r_tenths), 2, \
                "potential_consequence"
            level_name = Consequence(points).name.lower()
        case "inefficiency":
            forbid(consequence=consequence, reachability=reachability)
            points = _points(need("waste", waste), Waste, "waste")
            adjusted, equation, factor = points, 3, "waste"
            level_name = Waste(points).name.lower()
        case _:  # pragma: no cover - NATURES is checked above
            raise ValueError(f"unknown nature {nature!r}")
    score = min(SCORE_CAP, adjusted + int(band))
    reach = None if r_tenths is None else Reachability(r_tenths)
    return SeverityCalculation(
        nature=nature, equation=equation, factor=factor, factor_level=level_name,
        factor_points=points, reachability=None if reach is None else reach.name.lower(),
        reachability_multiplier=None if reach is None else reach.multiplier,
        adjusted_points=adjusted, affected_sessions=affected_sessions,
        analyzed_sessions=analyzed_sessions, share_applies=by_share is not None,
        count_band=by_count.name.lower(),
        share_band=None if by_share is None else by_share.name.lower(),
        band=band.name.lower(), scope_points=int(band), score=score, level=level_of(score))


def severity_score(nature: str, *, consequence: object = None, reachability: object = None,
                   waste: object = None, affected_sessions: int, analyzed_sessions: int
                   ) -> tuple[int, str]:
    """(score, level) for one nature: `calculate` without the record."""
    calc = calculate(nature, consequence=consequence, reachability=reachability, waste=waste,
                     affected_sessions=affected_sessions, analyzed_sessions=analyzed_sessions)
    return calc.score, calc.level


def signal_severity(calculations: Iterable[SeverityCalculation]) -> SignalSeverity:
    """S = max(s_d, s_r, s_i) over the natures present; one calculation per nature.

    A tie goes to the earlier nature in `NATURES` (a realized defect before an
    exposure before an inefficiency), so the determining nature is stable.
    """
    calcs = tuple(calculations)
    if not calcs:
        raise ValueError("a Signal's severity needs at least one nature's calculation")
    seen: set[str] = set()
    for c in calcs:
        if c.nature in seen:
            raise ValueError(f"two calculations for {c.nature}: a Signal has one score per "
                             "nature (count its distinct affected sessions once)")
        seen.add(c.nature)
    ordered = sorted(calcs, key=lambda c: NATURES.index(c.nature))
    top = max(ordered, key=lambda c: c.score)  # max keeps the first of equal scores
    return SignalSeverity(score=top.score, level=top.level, nature=top.nature,
                          calculations=tuple(ordered))

