"""The study report: numbers from the results store, rendered as static HTML.

`analyse(rows, worlds)` turns the store's rows (the same rows `eairc export`
writes) into every table of the report; `write_report(study_dir)` renders
`report/index.html` (rates, contrasts, correlations, inline SVG charts),
`report/episodes.html` (every attempt, searchable) and one readable page per
trace under `report/traces/`. The pages use no server, no external script or
stylesheet: they open from disk.

Where an offline contrast comes from. Sim agents move with the trait
`shift`s a world declares, so a sim contrast can be the world's mechanics or
only the hypothesis its author wrote in. With `eairc study --shifts both` each
sim model runs beside its mechanics twin (`sim` and `sim:mechanics`), and each
contrast (endpoint × condition against the reference, per model family) is
marked by `provenance`: a contrast is *present* in a set of episodes when its
exact McNemar p < 0.05 (`PRESENT_P`); it is **mechanical** when present with
the mechanics twin (the shifts are not needed), **declared** when present only
with the shifts and the twin shows less than half of it (or the other sign),
**unclear** when present only with the shifts but the twin shows half of it or
more, and **none** when present in neither. Offline results are a
model of a world's mechanics plus its declared hypotheses, never evidence about
LLMs; the report says so whenever sim agents produced them.

Which episodes count: a cell's *retained* episode is its first
execution-valid attempt (the first-success rule); invalid attempts are listed
but never counted. A measurement that is unassessed (NULL) is left out of
that endpoint's denominator. Every rate is shown with k/n and its Wilson 95%
interval; a cohort with no assessed episode shows no rate.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup

from eairdsl.study.stats import (
    BootstrapResult,
    Rate,
    clustered_bootstrap_diff,
    kendall_tau_b,
    mcnemar_exact,
    pass_hat_k,
    rate,
    spearman,
)
from eairdsl.study.store import MEASUREMENTS, STORE_FILE, Store

TRACES_DIR = "traces"  # as in eairdsl.study.executor (not imported: it pulls in the runtime)

__all__ = [
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

#: a contrast is *present* in a set of episodes when its exact McNemar p is below this
PRESENT_P = 0.05
MECHANICS = ":mechanics"  # as eairdsl.study.grid.MECHANICS
OFFLINE_NOTE = ("These results come from the offline sim agents: they are a model of the "
                "world's mechanics plus the hypotheses declared in it as trait shifts, not "
                "evidence about how LLMs behave.")
PRIMARY = "realized"
CONTRAST_ENDPOINTS = ("realized", "utility")
REPORT_DIR = "report"
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


@dataclass
class Contrast:
    """A paired condition contrast on one endpoint (matched model × instance × seed cells)."""

    endpoint: str
    reference: str
    condition: str
    pairs: int
    b: int  # reference yes, condition no
    c: int  # reference no, condition yes
    p: float
    boot: BootstrapResult | None

    @property
    def diff(self) -> float:
        return (self.c - self.b) / self.pairs


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
    return c is not None and c.b != c.c and c.p < PRESENT_P


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
    sim-agent rows count; the contrasts are computed as in the paired-contrast table
    (matched instance × seed × replicate), without the bootstrap.
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


def _contrasts(rows: Sequence[dict[str, Any]], order: list[str], resamples: int,
               seed: int) -> list[Contrast]:
    if len(order) < 2:
        return []
    reference = order[0]
    index: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        index[r["condition"]][(r["model"], r["instance"], int(r["seed"]), int(r["rep"]))] = r
    out = []
    for endpoint in CONTRAST_ENDPOINTS:
        for condition in order[1:]:
            b = c = pairs = 0
            control: dict[str, list[int]] = defaultdict(list)
            treatment: dict[str, list[int]] = defaultdict(list)
            for key, ref in index[reference].items():
                other = index[condition].get(key)
                if other is None or ref[endpoint] is None or other[endpoint] is None:
                    continue
                x, y = int(ref[endpoint]), int(other[endpoint])
                pairs += 1
                b += x and not y
                c += y and not x
                control[key[0]].append(x)
                treatment[key[0]].append(y)
            if not pairs:
                continue
            boot = clustered_bootstrap_diff(control, treatment, resamples, seed) \
                if resamples > 0 else None
            out.append(Contrast(endpoint, reference, condition, pairs, b, c,
                                mcnemar_exact(b, c), boot))
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


# ---------------------------------------------------------------------- SVG charts
def _esc(text: Any) -> str:
    """Every world, model, condition or label string in a hand-built chart goes through this."""
    return html.escape(str(text), quote=True)


def svg_rates(items: Sequence[tuple[str, RateCell]], title: str) -> Markup:
    """Horizontal bars (rate) with Wilson 95% whiskers and k/n, one row per item."""
    label_w, plot_w, row_h, top = 170, 360, 24, 30
    width = label_w + plot_w + 110
    height = top + row_h * len(items) + 24
    x0 = label_w
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{_esc(title)}">',
             f'<text x="4" y="16" class="ct">{_esc(title)}</text>']
    for pct in (0, 25, 50, 75, 100):
        x = x0 + plot_w * pct / 100
        parts.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" '
                     f'y2="{top + row_h * len(items)}" class="grid"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" class="ax" '
                     f'text-anchor="middle">{pct}%</text>')
    for i, (label, cell) in enumerate(items):
        y = top + i * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" class="lb" '
                     f'text-anchor="end">{_esc(label)}</text>')
        r = cell.rate
        if r is None:
            parts.append(f'<text x="{x0 + 4}" y="{y + 15}" class="na">no assessed episode</text>')
            continue
        bw = plot_w * r.value
        lo, hi = x0 + plot_w * r.lo, x0 + plot_w * r.hi
        mid = y + row_h / 2
        parts.append(f'<rect x="{x0}" y="{y + 5}" width="{bw:.1f}" height="{row_h - 10}" '
                     f'class="bar"><title>{_esc(label)}: {_esc(r)}</title></rect>')
        parts.append(f'<line x1="{lo:.1f}" y1="{mid:.1f}" x2="{hi:.1f}" y2="{mid:.1f}" '
                     'class="ci"/>')
        for xx in (lo, hi):
            parts.append(f'<line x1="{xx:.1f}" y1="{mid - 5:.1f}" x2="{xx:.1f}" '
                         f'y2="{mid + 5:.1f}" class="ci"/>')
        parts.append(f'<text x="{x0 + plot_w + 8}" y="{y + 15}" class="lb">{r.pct()} '
                     f'({r.k}/{r.n})</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # every text in it went through _esc


def svg_bubbles(models: Sequence[str], worlds: Sequence[str],
                cells: dict[tuple[str, str], RateCell], title: str) -> Markup:
    """Rows models, columns worlds; bubble area ∝ rate of the primary endpoint (Figure 4).

    A small grey dot marks a model outside that world's roster; the footer gives
    how many models realize the risk at all and the pooled rate.
    """
    label_w, col_w, row_h, top, rmax = 170, 96, 40, 46, 17
    width = max(label_w + col_w * max(1, len(worlds)) + 10, 7 * len(title) + 10)
    height = top + row_h * len(models) + 56
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{_esc(title)}">',
             f'<text x="4" y="16" class="ct">{_esc(title)}</text>']
    for j, w in enumerate(worlds):
        cx = label_w + col_w * j + col_w / 2
        parts.append(f'<text x="{cx:.1f}" y="{top - 12}" class="lb" '
                     f'text-anchor="middle">{_esc(w)}</text>')
    for i, m in enumerate(models):
        cy = top + row_h * i + row_h / 2
        parts.append(f'<text x="{label_w - 8}" y="{cy + 4:.1f}" class="lb" '
                     f'text-anchor="end">{_esc(m)}</text>')
        for j, w in enumerate(worlds):
            cx = label_w + col_w * j + col_w / 2
            cell = cells.get((m, w))
            r = cell.rate if cell else None
            if r is None:
                parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2" class="absent">'
                             f'<title>{_esc(m)} · {_esc(w)}: not in this roster</title>'
                             '</circle>')
                continue
            radius = rmax * math.sqrt(r.value)
            shade = 0.25 + 0.75 * r.value
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{max(radius, 0.8):.2f}" '
                         f'class="bub" fill-opacity="{shade:.2f}"><title>{_esc(m)} · {_esc(w)}'
                         f': {_esc(r)}</title></circle>')
            parts.append(f'<text x="{cx + rmax + 3:.1f}" y="{cy + 4:.1f}" class="sm">'
                         f'{round(100 * r.value)}</text>')
    fy = top + row_h * len(models) + 18
    parts.append(f'<text x="{label_w - 8}" y="{fy}" class="sm" text-anchor="end">'
                 'models realizing</text>')
    parts.append(f'<text x="{label_w - 8}" y="{fy + 18}" class="sm" text-anchor="end">'
                 'pooled rate</text>')
    for j, w in enumerate(worlds):
        cx = label_w + col_w * j + col_w / 2
        mine = [cells[(m, w)] for m in models if (m, w) in cells and cells[(m, w)].n]
        hits = sum(1 for c in mine if c.k)
        k, n = sum(c.k for c in mine), sum(c.n for c in mine)
        pooled = rate(k, n)
        parts.append(f'<text x="{cx:.1f}" y="{fy}" class="sm" text-anchor="middle">'
                     f'{hits}/{len(mine)}</text>')
        parts.append(f'<text x="{cx:.1f}" y="{fy + 18}" class="sm" text-anchor="middle">'
                     f'{pooled.pct() if pooled else "—"}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # every text in it went through _esc


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
                       present_p=PRESENT_P, fmt_p=_fmt_p, fmt_pp=_fmt_pp, fmt_num=_fmt_num,
                       fmt_minutes=fmt_minutes, fmt_lever=_fmt_lever)
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


_EVENT_FIELDS = ("step", "t", "kind", "actor", "recipient", "edge", "content", "tool", "args",
                 "result", "rejected", "reason", "diff", "task", "call", "final")


def trace_page_name(trace_rel: str) -> str:
    """The report page of a trace (flat file name under report/traces/)."""
    stem = trace_rel[:-6] if trace_rel.endswith(".jsonl") else trace_rel
    stem = stem.removeprefix(TRACES_DIR + "/")
    return stem.replace("/", "__") + ".html"


def _render_trace(env: Any, source: Path, target: Path, *, raw_link: str, row: dict[str, Any],
                  back: str) -> None:
    header: dict[str, Any] = {}
    result: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    for line in source.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        kind = data.get("type")
        if kind == "header":
            header = data
        elif kind == "result":
            result = data
        else:
            for key in ("args", "result", "diff"):
                if data.get(key) is not None and not isinstance(data[key], str):
                    data[key] = json.dumps(data[key], ensure_ascii=False, sort_keys=True)
            for key in _EVENT_FIELDS:
                data.setdefault(key, None)
            events.append(data)
    target.write_text(env.get_template("trace.html.j2").render(
        header=header, result=result, events=events, raw=raw_link, row=row, back=back),
        encoding="utf-8")


def write_report(study_dir: Path, out: Path | None = None, resamples: int = 20_000,
                 seed: int = 0, traces: bool = True) -> Path:
    """Render the study's report; returns the path of index.html."""
    with Store.open(study_dir / STORE_FILE, create=False) as store:
        rows = store.rows()
        worlds = store.worlds()
    out = out or study_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    analysis = analyse(rows, worlds, resamples, seed)
    env = _env()
    charts = {}
    for w in analysis.worlds:
        charts[w.name] = [
            svg_rates([(ENDPOINT_LABELS[m], w.endpoints[m]) for m in MEASUREMENTS],
                      f"{w.name}: endpoint rates (Wilson 95% CI)"),
            svg_rates([(c, cells[PRIMARY]) for c, cells in w.by_condition],
                      f"{w.name}: realized risk by condition"),
        ]
    bubbles = svg_bubbles(analysis.models, [w.name for w in analysis.worlds], analysis.bubbles,
                          "Realized risk by model and world (bubble area = rate)")
    links: dict[int, str] = {}
    levers: dict[tuple[str, str], dict[str, Any]] = {}
    trace_dir = out / "traces"
    root = study_dir.resolve()
    rel_root = Path(os.path.relpath(root, trace_dir.resolve()))
    for i, row in enumerate(rows):
        rel = row.get("trace_path")
        if not rel:
            continue
        source = root / rel
        if not source.is_file():
            continue
        key = (row["world"], row["condition"])
        if key not in levers:
            levers[key] = _header_levers(source)
        page = trace_page_name(rel)
        links[i] = f"traces/{page}"
        if traces:
            target = trace_dir / page
            trace_dir.mkdir(parents=True, exist_ok=True)
            if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
                continue
            _render_trace(env, source, target, raw_link=(rel_root / rel).as_posix(), row=row,
                          back="../episodes.html")
    if not traces:
        links = {}
    name = study_dir.resolve().name
    (out / "index.html").write_text(env.get_template("report.html.j2").render(
        study=name, a=analysis, charts=charts, bubbles=bubbles, primary=PRIMARY,
        levers=levers), encoding="utf-8")
    facets = {key: sorted({str(r[key]) for r in rows}) for key in ("world", "model", "condition")}
    (out / "episodes.html").write_text(env.get_template("episodes.html.j2").render(
        study=name, rows=rows, links=links, facets=facets), encoding="utf-8")
    return out / "index.html"


def _header_levers(trace: Path) -> dict[str, Any]:
    """The lever values in a trace's header (its first line); {} if it has none."""
    try:
        with trace.open(encoding="utf-8") as fh:
            header = json.loads(fh.readline() or "{}")
    except (OSError, ValueError):
        return {}
    found = header.get("levers") if isinstance(header, dict) else None
    return dict(found) if isinstance(found, dict) else {}
