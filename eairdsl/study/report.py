"""The study report: numbers from the results store, rendered as static HTML.

`analyse(rows, worlds)` turns the store's rows (the same rows `eairc export`
writes) into every table of the report; `write_report(study_dir)` renders
`report/index.html` (rates, contrasts, model comparisons, spend, correlations,
inline SVG charts from `charts`), `report/episodes.html` (every attempt,
filtered, sorted and paged in the page, its rows loaded from compressed chunk
files under `report/episodes/`, `episode_list`) and the trace viewer: one page,
`report/trace.html`, that shows any trace with its model calls, loading it on
demand from the compressed chunk files under `report/traces/` (`viewer`; one
HTML page per trace weighed 219 MB at 5,000 episodes). The pages use no
server, no external script or stylesheet: they open from disk.

Audit findings (`eairdsl.study.audits`): the audits of the study found under
`audit/*/` (`eairc audit`) and `*/arms/*/` beside a `cohort.json` (`eairc
audit-study`) add a column per arm to episodes.html (verdict, findings, leads,
valid or invalid report) and a findings panel to the trace viewer; the
report indexes them in the store's `audits` table. The audit files are read as
plain JSON: the study stage comes before the audit stage and imports nothing
of it.

Study measures (`cohort`): the measures a world declares with `study measure`
(routing regret, the self-rating gap: EAIR C.5, F.8) are recomputed from the
store's episodes and their declarations in its `study_measures` table, kept
there, and shown per world after the condition table.

Comparing models (`compare`): per world a model × condition table of every
endpoint, paired model contrasts for every pair of models (exact McNemar on
cells matched by condition, instance, seed and replicate), and each model's
calls, tokens and cost.

Where an offline contrast comes from. Sim agents move with the trait
`shift`s a world declares, so a sim contrast can be the world's mechanics or
only the hypothesis its author wrote in. With `eairc study --shifts both` each
sim model runs beside its mechanics twin (`sim` and `sim:mechanics`), and each
contrast (endpoint × condition against the reference, per model family) is
marked by `provenance`: a contrast is *present* in a set of episodes when its
Fisher exact p < 0.05 (`PRESENT_P`); it is **mechanical** when present with
the mechanics twin (the shifts are not needed), **declared** when present only
with the shifts and the twin shows less than half of it (or the other sign),
**unclear** when present only with the shifts but the twin shows half of it or
more, and **none** when present in neither. Offline results are a
model of a world's mechanics plus its declared hypotheses, never evidence about
LLMs; the report says so whenever sim agents produced them.

Condition contrasts are unpaired (`CONDITION_TEST`): a seed drives a different
random stream in each condition (docs/sim.md), so an episode under one condition
is no pair of the same seed's episode under another. Each condition is compared
with the world's first condition over the model × instance cells both have:
events / assessed episodes on each side, the difference of the rates, Fisher's
exact p, and a bootstrap interval that draws instances as clusters (seeds when
the world has one instance; never models or profiles, which are not a sample)
and resamples each condition's episodes independently within them; with one
instance and one seed no interval is shown and the report says why. Model contrasts (`compare`)
stay paired: there two models run the same condition, instance, seed and
replicate.

Which episodes count: a cell's *retained* episode is its first
execution-valid attempt (the first-success rule); invalid attempts are listed
but never counted. A measurement that is unassessed (NULL) is left out of
that endpoint's denominator. Every rate is shown with k/n and its Wilson 95%
interval; a cohort with no assessed episode shows no rate.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from markupsafe import Markup

from eairdsl.errors import UsageError
from eairdsl.study.audits import AuditCell, discover_audits, episode_audits
from eairdsl.study.charts import svg_bubbles, svg_rates
from eairdsl.study.cohort import StudyMeasureResult, compute
from eairdsl.study.compare import ALL, ModelContrast, Spend, model_contrasts, spend_by_model
from eairdsl.study.stats import (
    BootstrapResult,
    Rate,
    fisher_exact,
    kendall_tau_b,
    pass_hat_k,
    rate,
    spearman,
    unpaired_bootstrap_diff,
)
from eairdsl.study.store import MEASUREMENTS, STORE_FILE, Store

TRACES_DIR = "traces"  # as in eairdsl.study.executor (not imported: it pulls in the runtime)

__all__ = [
    "CONDITION_TEST",
    "CONTRAST_ENDPOINTS",
    "ENDPOINT_LABELS",
    "ENDPOINT_POLARITY",
    "OFFLINE_NOTE",
    "PRESENT_P",
    "PRIMARY",
    "Provenance",
    "REPORT_DIR",
    "RateCell",
    "analyse",
    "fmt_minutes",
    "provenance",
    "summary_rows",
    "svg_bubbles",
    "svg_rates",
    "write_report",
]

#: a condition contrast is *present* in a set of episodes when its Fisher exact p
#: (unpaired: conditions do not share draws) is below this
PRESENT_P = 0.05
MECHANICS = ":mechanics"  # as eairdsl.study.grid.MECHANICS
OFFLINE_NOTE = ("These results come from the offline sim agents: they are a model of the "
                "world's mechanics plus the hypotheses declared in it as trait shifts, not "
                "evidence about how LLMs behave.")
PRIMARY = "realized"
CONTRAST_ENDPOINTS = ("realized", "utility")
REPORT_DIR = "report"
#: how the episode list names each verdict of an audit report (contract v1's verdicts)
AUDIT_VERDICTS = {"findings": "findings", "no_supported_problem": "no supported problem",
                  "insufficient_evidence": "insufficient evidence"}
ENDPOINT_LABELS = {
    "opportunity": "structural opportunity", "anomaly": "process anomaly",
    "realized": "realized risk", "terminal_harm": "terminal harm",
    "interception": "interception", "utility": "task utility",
}
#: what a yes and a no of each endpoint are: `bad` (a risk happened, the task was not done),
#: `good` (the task got done, a risk was caught or did not happen) or `neutral` (an
#: opportunity is neither; no interception is no failure); the report colours outcomes by it
ENDPOINT_POLARITY = {
    "opportunity": ("neutral", "neutral"), "anomaly": ("bad", "good"),
    "realized": ("bad", "good"), "terminal_harm": ("bad", "good"),
    "interception": ("good", "neutral"), "utility": ("good", "bad"),
}


@dataclass
class RateCell:
    """One endpoint over one cohort: k of n assessed, how many unassessed, and the rate."""

    k: int = 0
    n: int = 0
    unassessed: int = 0

    @property
    def rate(self) -> Rate | None:
        return rate(self.k, self.n)

    def add(self, value: int | None) -> None:
        if value is None:
            self.unassessed += 1
        else:
            self.n += 1
            self.k += int(bool(value))


def _cells(rows: Iterable[dict[str, Any]]) -> dict[str, RateCell]:
    out = {m: RateCell() for m in MEASUREMENTS}
    for r in rows:
        for m in MEASUREMENTS:
            out[m].add(r[m])
    return out


#: how the report names the test of a condition contrast (HTML and `Contrast.test`)
CONDITION_TEST = "Fisher exact, unpaired: conditions do not share draws"


@dataclass
class Contrast:
    """An unpaired condition contrast on one endpoint: the retained, assessed episodes of
    the reference and of the condition over the model × instance cells both have.

    Conditions do not share random draws (a seed drives a different stream in each
    condition, docs/sim.md), so episodes are not paired across conditions: the test is
    Fisher's exact test on the 2×2 table of counts and the interval draws instances (or,
    with one instance, seeds) as clusters and resamples each condition's episodes
    independently within a drawn cluster."""

    endpoint: str
    reference: str
    condition: str
    #: events and assessed episodes under the reference condition
    k_ref: int
    n_ref: int
    #: events and assessed episodes under the condition
    k: int
    n: int
    p: float
    boot: BootstrapResult | None
    test: str = CONDITION_TEST
    #: what the interval's clusters are (`CLUSTER_UNITS`), None without an interval
    unit: str | None = None
    #: why no interval is shown, when none is
    no_interval: str | None = None

    @property
    def diff(self) -> float:
        """The condition's rate minus the reference's."""
        return self.k / self.n - self.k_ref / self.n_ref

    @property
    def episodes(self) -> int:
        return self.n_ref + self.n


@dataclass
class Provenance:
    """Where one offline contrast comes from: the same contrast with and without shifts.

    `family` is the model without its `:mechanics` suffix (`sim`, `sim:reckless`, an
    alias); `shifted` and `mechanics` are the contrast among its runs with the world's
    shifts and among its mechanics twin's runs (None when that side was not run).
    """

    endpoint: str
    condition: str
    family: str
    shifted: Contrast | None
    mechanics: Contrast | None

    @property
    def verdict(self) -> str:
        """`mechanical`, `declared`, `unclear`, `none`, or `unclassified` (no mechanics runs).

        `declared` also needs the twin's difference to be of the other sign or under
        half the shifted one; a contrast present with the shifts whose twin shows
        most of it just short of p < PRESENT_P is `unclear`, not declared."""
        if _present(self.mechanics):
            return "mechanical"
        if self.mechanics is None:
            return "unclassified"
        if self.shifted is not None and _present(self.shifted):
            shifted, mech = self.shifted.diff, self.mechanics.diff
            if shifted * mech <= 0 or abs(mech) < abs(shifted) / 2:
                return "declared"
            return "unclear"
        return "none"


def _present(c: Contrast | None) -> bool:
    return c is not None and c.diff != 0 and c.p < PRESENT_P


@dataclass
class WorldResult:
    name: str
    title: str
    risk: str
    digest: str
    conditions: list[str]
    attempts: int = 0
    retained: int = 0
    invalid_attempts: int = 0
    invalid_cells: int = 0
    endpoints: dict[str, RateCell] = field(default_factory=dict)
    by_model: list[tuple[str, dict[str, RateCell], float | None]] = field(default_factory=list)
    by_condition: list[tuple[str, dict[str, RateCell]]] = field(default_factory=list)
    contrasts: list[Contrast] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    #: (condition, model, cells) in the world's condition order, then model order
    by_model_condition: list[tuple[str, str, dict[str, RateCell]]] = field(
        default_factory=list)
    #: every pair of models × endpoint × condition (then all conditions) on matched cells
    model_contrasts: list[ModelContrast] = field(default_factory=list)
    #: LLM spend per model over every attempt (sim models: no figures)
    spend: list[Spend] = field(default_factory=list)
    #: each condition's description and lever values (the store's, else the traces')
    condition_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the world's study measures on these episodes (`eairdsl.study.cohort`)
    study_measures: list[StudyMeasureResult] = field(default_factory=list)


@dataclass
class Analysis:
    worlds: list[WorldResult]
    models: list[str]
    bubbles: dict[tuple[str, str], RateCell]
    correlations: list[dict[str, Any]]
    attempts: int
    retained: int
    invalid_cells: int
    resamples: int
    #: whether any retained episode ran sim agents (the report then says what they are)
    offline: bool = False
    #: whether any ran a mechanics twin (the provenance tables are then complete)
    mechanics: bool = False


def _retained(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if int(r["retained"]) == 1]


def analyse(rows: Sequence[dict[str, Any]], worlds: Sequence[dict[str, Any]],
            resamples: int = 20_000, seed: int = 0) -> Analysis:
    """Every number of the report from the store's rows (see `Store.rows`)."""
    info = {w["name"]: w for w in worlds}
    names = sorted({r["world"] for r in rows} | set(info))
    models = sorted({r["model"] for r in rows})
    kept = _retained(rows)
    results: list[WorldResult] = []
    bubbles: dict[tuple[str, str], RateCell] = {}
    for name in names:
        w = info.get(name, {"title": "", "risk": "", "digest": "", "conditions": []})
        all_rows = [r for r in rows if r["world"] == name]
        mine = [r for r in kept if r["world"] == name]
        present = {r["condition"] for r in all_rows}
        order = [c for c in w["conditions"] if c in present]
        order += sorted(present - set(order))
        cells_seen = {_cell(r) for r in all_rows}
        res = WorldResult(name=name, title=w["title"], risk=w["risk"], digest=w["digest"],
                          conditions=order, attempts=len(all_rows), retained=len(mine),
                          invalid_attempts=sum(1 for r in all_rows if not int(r["valid"])),
                          invalid_cells=len(cells_seen) - len(mine))
        res.endpoints = _cells(mine)
        for model in models:
            theirs = [r for r in mine if r["model"] == model]
            if not theirs:
                continue
            cells = _cells(theirs)
            bubbles[(model, name)] = cells[PRIMARY]
            res.by_model.append((model, cells, _pass_k(theirs)))
        for condition in order:
            res.by_condition.append((condition, _cells(
                r for r in mine if r["condition"] == condition)))
        world_models = [m for m in models if any(r["model"] == m for r in all_rows)]
        for condition in order:
            for model in world_models:
                theirs = [r for r in mine if r["condition"] == condition and r["model"] == model]
                if theirs:
                    res.by_model_condition.append((condition, model, _cells(theirs)))
        res.model_contrasts = model_contrasts(mine, world_models, order)
        res.spend = spend_by_model(all_rows, world_models)
        res.contrasts = _contrasts(mine, order, resamples, seed)
        res.provenance = provenance(mine, order)
        results.append(res)
    correlations = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = [m for m in models if (m, a) in bubbles and (m, b) in bubbles
                      and bubbles[(m, a)].n and bubbles[(m, b)].n]
            x = [bubbles[(m, a)].k / bubbles[(m, a)].n for m in shared]
            y = [bubbles[(m, b)].k / bubbles[(m, b)].n for m in shared]
            correlations.append({"a": a, "b": b, "models": len(shared),
                                 "rho": spearman(x, y) if len(shared) >= 3 else None,
                                 "tau": kendall_tau_b(x, y) if len(shared) >= 3 else None})
    cells_total = len({_cell(r) for r in rows})
    return Analysis(worlds=results, models=models, bubbles=bubbles, correlations=correlations,
                    attempts=len(rows), retained=len(kept), invalid_cells=cells_total - len(kept),
                    resamples=resamples,
                    offline=any(_offline(r) for r in kept),
                    mechanics=any(_offline(r) and _mechanics(r) for r in kept))


def _offline(r: dict[str, Any]) -> bool:
    return str(r.get("agents") or "").startswith("sim")


def _mechanics(r: dict[str, Any]) -> bool:
    return str(r.get("agents") or "").endswith(MECHANICS)


def provenance(rows: Sequence[dict[str, Any]], order: list[str]) -> list[Provenance]:
    """Each offline contrast per model family, with and without the world's shifts.

    A family is a model name without its `:mechanics` suffix: `sim` and
    `sim:mechanics` (what `--shifts both` runs) are one family. Only retained
    sim-agent rows count; the contrasts are computed as in the condition-contrast table
    (unpaired, Fisher's exact p over the model × instance cells both conditions have),
    without the bootstrap.
    """
    families: dict[str, dict[bool, list[dict[str, Any]]]] = defaultdict(
        lambda: {False: [], True: []})
    for r in rows:
        if _offline(r):
            families[str(r["model"]).removesuffix(MECHANICS)][_mechanics(r)].append(r)
    out: list[Provenance] = []
    for family in sorted(families):
        sides = {m: {(c.endpoint, c.condition): c for c in _contrasts(rs, order, 0, 0)}
                 for m, rs in families[family].items()}
        for endpoint in CONTRAST_ENDPOINTS:
            for condition in order[1:]:
                key = (endpoint, condition)
                shifted, mech = sides[False].get(key), sides[True].get(key)
                if shifted is None and mech is None:
                    continue
                out.append(Provenance(endpoint, condition, family, shifted, mech))
    return out


def _cell(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["world"], r["model"], r["condition"], r["instance"], int(r["seed"]), int(r["rep"]))


def _pass_k(rows: Sequence[dict[str, Any]]) -> float | None:
    """Consistency across seeds: the mean over (condition, instance, replicate) groups of
    pass^k for "not realized" with k = the group's seeds — the share of groups that stay
    safe in every seed. When each seed drew its own instance (`--instances seed`) the
    groups are (condition, replicate). None when no group has two seeds."""
    for key in (("condition", "instance", "rep"), ("condition", "rep")):
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for r in rows:
            if r[PRIMARY] is not None:
                groups[tuple(r[k] for k in key)].append(int(r[PRIMARY]))
        values = [pass_hat_k(len(v), len(v) - sum(v), len(v))
                  for v in groups.values() if len(v) > 1]
        if values:
            return sum(values) / len(values)
    return None


#: the real units a condition contrast's bootstrap may draw as clusters, in order of
#: preference: never models or profiles (two profiles are not a sample of anything)
CLUSTER_UNITS = ("instance", "seed")


def _cluster_unit(episodes: Sequence[tuple[Any, ...]]) -> str | None:
    """The first of `CLUSTER_UNITS` with at least two values among both arms' episodes
    (`(instance, seed, value)` tuples), else None: one cluster cannot be resampled."""
    for i, unit in enumerate(CLUSTER_UNITS):
        if len({e[i] for e in episodes}) >= 2:
            return unit
    return None


def _contrasts(rows: Sequence[dict[str, Any]], order: list[str], resamples: int,
               seed: int) -> list[Contrast]:
    """Each condition against the reference (`order[0]`) on each contrast endpoint,
    unpaired: conditions do not share random draws, so episodes are compared as two
    samples, not matched seed for seed. Only the model × instance cells with an assessed
    episode in both conditions count, so the two samples cover the same models and
    instances; within them every retained, assessed episode counts, whatever its seed
    or replicate and however many each side has.

    The interval's clusters are a real unit of the design (`CLUSTER_UNITS`): instances
    when at least two are shared, else seeds; a contrast with one instance and one seed
    gets no interval and says why (`Contrast.no_interval`)."""
    if len(order) < 2:
        return []
    reference = order[0]
    out = []
    for endpoint in CONTRAST_ENDPOINTS:
        by: dict[str, dict[tuple[Any, ...], list[tuple[Any, ...]]]] = \
            defaultdict(lambda: defaultdict(list))
        for r in rows:
            if r[endpoint] is not None:
                by[r["condition"]][(r["model"], r["instance"])].append(
                    (r["instance"], int(r["seed"]), int(r[endpoint])))
        for condition in order[1:]:
            shared = sorted(set(by[reference]) & set(by[condition]), key=repr)
            if not shared:
                continue
            ref_eps = [e for key in shared for e in by[reference][key]]
            eps = [e for key in shared for e in by[condition][key]]
            k_ref, n_ref = sum(e[2] for e in ref_eps), len(ref_eps)
            k, n = sum(e[2] for e in eps), len(eps)
            unit = _cluster_unit(ref_eps + eps)
            boot, why = None, None
            if resamples <= 0:
                why = "no bootstrap requested"
            elif unit is None:
                why = "one instance and one seed: no cluster to resample"
            else:
                at = CLUSTER_UNITS.index(unit)
                control: dict[str, list[int]] = defaultdict(list)
                treatment: dict[str, list[int]] = defaultdict(list)
                for e in ref_eps:
                    control[repr(e[at])].append(e[2])
                for e in eps:
                    treatment[repr(e[at])].append(e[2])
                boot = unpaired_bootstrap_diff(control, treatment, resamples, seed)
                if boot is None:
                    why = f"no {unit} has episodes under both conditions"
            out.append(Contrast(endpoint, reference, condition, k_ref, n_ref, k, n,
                                fisher_exact(k_ref, n_ref - k_ref, k, n - k), boot,
                                unit=unit if boot is not None else None, no_interval=why))
    return out


def summary_rows(rows: Sequence[dict[str, Any]],
                 worlds: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Per world × condition (in the world's condition order): retained episodes, cells
    without a valid attempt, and the realized and utility rate cells."""
    order = {w["name"]: w["conditions"] for w in worlds}
    kept = _retained(rows)
    keys = sorted({(r["world"], r["condition"]) for r in rows},
                  key=lambda k: (k[0], order[k[0]].index(k[1])
                                 if k[1] in order.get(k[0], []) else 1 << 30, k[1]))
    out = []
    for world, condition in keys:
        mine = [r for r in kept if r["world"] == world and r["condition"] == condition]
        cells = {_cell(r) for r in rows if r["world"] == world and r["condition"] == condition}
        c = _cells(mine)
        out.append({"world": world, "condition": condition, "retained": len(mine),
                    "invalid_cells": len(cells) - len(mine), "realized": c["realized"],
                    "utility": c["utility"]})
    return out


def summary_table(rows: Sequence[dict[str, Any]], worlds: Sequence[dict[str, Any]],
                  title: str) -> Any:
    """The end-of-study table (a rich Table): per world × condition, realized and utility."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("world", "condition", "episodes", "no valid", "realized", "95% CI", "utility"):
        table.add_column(col, no_wrap=True)
    for r in summary_rows(rows, worlds):
        real, util = r["realized"].rate, r["utility"].rate
        table.add_row(r["world"], r["condition"], str(r["retained"]), str(r["invalid_cells"]),
                      f"{real.k}/{real.n} {real.pct()}" if real else "—",
                      real.ci() if real else "—",
                      f"{util.k}/{util.n} {util.pct()}" if util else "—")
    return table


# ---------------------------------------------------------------------- rendering
def _env() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        # World, trace and store strings are untrusted (worlds and agents' messages may
        # come from an LLM): escape every substitution; charts arrive as Markup.
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined)
    env.globals.update(label=ENDPOINT_LABELS, endpoints=MEASUREMENTS,
                       polarity=ENDPOINT_POLARITY, offline_note=OFFLINE_NOTE,
                       present_p=PRESENT_P, condition_test=CONDITION_TEST,
                       fmt_p=_fmt_p, fmt_pp=_fmt_pp, fmt_num=_fmt_num,
                       fmt_minutes=fmt_minutes, fmt_lever=_fmt_lever,
                       all_conditions=ALL, audit_verdicts=AUDIT_VERDICTS)
    return env


def _fmt_lever(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def fmt_minutes(minutes: Any) -> str:
    """Simulated minutes as days, hours and minutes: 0m, 45m, 1h 30m, 2d 0h 5m, 1.5m."""
    if minutes is None or minutes == "":
        return "—"
    try:
        total = float(minutes)
    except (TypeError, ValueError):
        return str(minutes)
    if not math.isfinite(total):
        return str(minutes)
    sign, total = ("-" if total < 0 else ""), abs(total)
    days, rest = divmod(total, 1440.0)
    hours, mins = divmod(rest, 60.0)
    mins = round(mins, 1)
    if mins >= 60:  # 59.96 rounds to 60.0
        hours, mins = hours + 1, 0.0
    if hours >= 24:
        days, hours = days + 1, 0.0
    text = f"{int(mins)}m" if mins == int(mins) else f"{mins:.1f}m"
    if days:
        text = f"{int(days)}d {int(hours)}h {text}"
    elif hours:
        text = f"{int(hours)}h {text}"
    return sign + text


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.4f}".rstrip("0").rstrip(".") if p < 1 else "1"


def _fmt_pp(x: float) -> str:
    return f"{100 * x:+.1f}pp"


def _fmt_num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


VIEWER_PAGE = "trace.html"


def write_report(study_dir: Path, out: Path | None = None, resamples: int = 20_000,
                 seed: int = 0, traces: bool = True) -> Path:
    """Render the study's report; returns the path of index.html.

    Writes index.html, episodes.html with its rows' chunk files under episodes/ (see
    `eairdsl.study.episode_list`) and, with `traces`, the trace viewer (trace.html and
    its chunk files under traces/, see `eairdsl.study.viewer`); without, an earlier
    report's viewer is removed."""
    from eairdsl.study.episode_list import EPISODES_DIR, write_episode_chunks
    from eairdsl.study.viewer import TraceItem, remove_viewer, write_chunks

    with Store.open(study_dir / STORE_FILE, create=False) as store:
        rows = store.rows()
        worlds = store.worlds()
        stored_conditions = store.conditions()
        declared = store.study_measures()
    out = out or study_dir / REPORT_DIR
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder; the report is a folder "
                         "(index.html, episodes.html, episodes/, trace.html, traces/) — "
                         "choose another -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the report folder {out}: "
                         f"{exc.strerror or exc}") from None
    root = study_dir.resolve()
    items: list[TraceItem] = []
    header_levers: dict[tuple[str, str], dict[str, Any]] = {}
    home = out.resolve()  # the raw trace links are relative to it (a rescored store's
    # trace paths are absolute), so the report folder can move with its study
    audits = discover_audits(root)
    audit_cells: dict[int, dict[str, AuditCell]] = {}
    for i, row in enumerate(rows):
        cells = audits.cells((root / str(row.get("trace_path") or "")).resolve()) \
            if row.get("trace_path") else {}
        if cells:
            audit_cells[i] = cells
        source = _trace_source(root, row.get("trace_path"))
        if source is None:
            continue
        key = (str(row["world"]), str(row["condition"]))
        if key not in header_levers and key not in stored_conditions:
            header_levers[key] = _header_levers(source)
        doc = stored_conditions.get(key, {}).get("doc")
        items.append(TraceItem(i, row, source, Path(os.path.relpath(source, home)).as_posix(),
                               doc, partial(episode_audits, cells, source, out)
                               if traces and cells else None))
    _record_audits(study_dir / STORE_FILE, root, rows, audit_cells)
    analysis = analyse(rows, worlds, resamples, seed)
    measures = [compute(measure, world, rows) for world, measure, _ in declared]
    _record_study_measures(study_dir / STORE_FILE, measures)
    for w in analysis.worlds:
        w.study_measures = [m for m in measures if m.world == w.name]
        for condition in w.conditions:
            info = stored_conditions.get((w.name, condition))
            w.condition_info[condition] = info if info is not None else {
                "doc": None, "levers": header_levers.get((w.name, condition), {})}
    env = _env()
    charts = {w.name: _world_charts(w) for w in analysis.worlds}
    bubbles = svg_bubbles(analysis.models, [w.name for w in analysis.worlds], analysis.bubbles,
                          "Realized risk by model and world (bubble area = rate)")
    links: dict[int, str] = {}
    # An earlier report's episode list links chunk numbers that the chunks written next
    # reuse for other traces: it goes first, and is written again last, so a report that
    # is interrupted in between has no list rather than one opening the wrong traces.
    (out / "episodes.html").unlink(missing_ok=True)
    if traces:
        links = {i: f"{VIEWER_PAGE}#{target}"
                 for i, target in write_chunks(items, out / TRACES_DIR).items()}
        (out / VIEWER_PAGE).write_text(env.get_template("trace.html.j2").render(
            study=root.name), encoding="utf-8")
    else:  # no viewer: an earlier report's would show traces this report does not link
        remove_viewer(out, VIEWER_PAGE, TRACES_DIR)
    name = root.name
    (out / "index.html").write_text(env.get_template("report.html.j2").render(
        study=name, a=analysis, charts=charts, bubbles=bubbles, primary=PRIMARY),
        encoding="utf-8")
    facets = {key: sorted({str(r[key]) for r in rows}) for key in ("world", "model", "condition")}
    # the rows go to chunk files the page loads (`episode_list`): the page's size does not
    # grow with the study (one table row per attempt was 4.4 MiB at 5,460 episodes)
    episode_row = env.get_template("_episode_row.html.j2").module.episode_row
    row_html = [str(episode_row(r, audit_cells.get(i, {}), links.get(i), audits.arms))
                for i, r in enumerate(rows)]
    chunks = write_episode_chunks(row_html, out / EPISODES_DIR)
    (out / "episodes.html").write_text(env.get_template("episodes.html.j2").render(
        study=name, total=len(rows), chunks=chunks, facets=facets, audits=audits),
        encoding="utf-8")
    return out / "index.html"


def _record_audits(store_path: Path, root: Path, rows: Sequence[dict[str, Any]],
                   audit_cells: dict[int, dict[str, AuditCell]]) -> None:
    """Index the audits found in the store's `audits` table (best effort: the audit
    folders are the source of truth, and a store that cannot be written, say on read-only
    media, still gets its report)."""
    import sqlite3

    found = []
    for i, cells in sorted(audit_cells.items()):
        for label, cell in cells.items():
            found.append({"trace_path": rows[i]["trace_path"], "arm": label,
                          "episode": cell.episode, "status": cell.status,
                          "verdict": cell.verdict, "findings": cell.findings,
                          "leads": cell.leads, "errors": cell.errors,
                          "report": None if cell.status == "failed" else
                          Path(os.path.relpath(cell.report, root)).as_posix()})
    try:
        with Store.open(store_path, create=False) as store:
            store.record_audits(found)
    except sqlite3.Error:
        pass


def _record_study_measures(store_path: Path, results: Sequence[StudyMeasureResult]) -> None:
    """Keep the recomputed study measures in the store (best effort, as `_record_audits`:
    the episodes are the source of truth and a read-only store still gets its report)."""
    import sqlite3

    if not results:
        return
    try:
        with Store.open(store_path, create=False) as store:
            store.record_study_measure_results([r.model_dump(mode="json") for r in results])
    except sqlite3.Error:
        pass


def _world_charts(w: WorldResult) -> list[Markup]:
    charts = [
        svg_rates([(ENDPOINT_LABELS[m], w.endpoints[m]) for m in MEASUREMENTS],
                  f"{w.name}: endpoint rates (Wilson 95% CI)"),
        svg_rates([(c, cells[PRIMARY]) for c, cells in w.by_condition],
                  f"{w.name}: realized risk by condition"),
    ]
    # beside the table, a chart of every model × condition while it stays readable
    if len({m for _, m, _ in w.by_model_condition}) > 1 and len(w.by_model_condition) <= 60:
        charts.append(svg_rates([(f"{c} · {m}", cells[PRIMARY])
                                 for c, m, cells in w.by_model_condition],
                                f"{w.name}: realized risk by condition and model"))
    return charts


def _trace_source(root: Path, rel: Any) -> Path | None:
    """The trace file a row names, if it exists inside the study folder (a store is
    untrusted input: a path that leaves the folder is not followed)."""
    if not rel or not isinstance(rel, str):
        return None
    source = (root / rel).resolve()
    if not source.is_relative_to(root) or not source.is_file():
        return None
    return source


def _header_levers(trace: Path) -> dict[str, Any]:
    """The lever values in a trace's header (its first line); {} if it has none."""
    try:
        with trace.open(encoding="utf-8") as fh:
            header = json.loads(fh.readline() or "{}")
    except (OSError, ValueError):
        return {}
    found = header.get("levers") if isinstance(header, dict) else None
    return dict(found) if isinstance(found, dict) else {}
