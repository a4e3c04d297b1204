"""The report's inline SVG charts, sized so that no label is ever clipped.

SVG text does not wrap and a browser clips whatever falls outside the
`viewBox`, so every chart measures its labels before it lays itself out:
`text_width` estimates a string's rendered width from per-character widths of
a typical sans-serif face (generous: wide letters, capitals and characters
outside Latin count wide), and each column of the chart is as wide as its
widest label. `text_extent` gives the box a text element occupies (its anchor
applied); the tests check every text element of a chart lies inside its
`viewBox`.
"""

from __future__ import annotations

import html
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Protocol

from markupsafe import Markup

from eairdsl.study.stats import Rate, rate

__all__ = ["FONT_SIZES", "Cohort", "svg_bubbles", "svg_rates", "text_extent", "text_width"]


class Cohort(Protocol):
    """What a chart reads of a cohort (`eairdsl.study.report.RateCell`)."""

    k: int
    n: int

    @property
    def rate(self) -> Rate | None: ...



#: font size (px) of each text class, as the report's stylesheet sets them
FONT_SIZES = {"ct": 13.0, "lb": 12.0, "ax": 11.0, "sm": 11.0, "na": 11.0}
_NARROW = frozenset("il.,:;|!'`ijtfr()[]{} ")
_WIDE = frozenset("mwMW@%")
_PAD = 6


def _char_em(ch: str) -> float:
    if ch in _NARROW:
        return 0.34
    if ch in _WIDE:
        return 0.92
    if ch.isupper():
        return 0.72
    if ord(ch) < 128:
        return 0.6
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 1.05
    return 0.7


def text_width(text: str, size: float) -> float:
    """An upper estimate of `text`'s width in px at font `size` (sans-serif; bold counts
    as the same, the estimate is generous enough for it)."""
    return size * sum(_char_em(ch) for ch in text) + 1.0


def text_extent(x: float, text: str, size: float, anchor: str = "start") -> tuple[float, float]:
    """(left, right) of a text element drawn at `x` with `text-anchor` `anchor`."""
    w = text_width(text, size)
    if anchor == "end":
        return x - w, x
    if anchor == "middle":
        return x - w / 2, x + w / 2
    return x, x + w


def _esc(text: object) -> str:
    """Every world, model, condition or label string in a chart goes through this."""
    return html.escape(str(text), quote=True)


def _open(width: float, height: float, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
            f'aria-label="{_esc(title)}">',
            f'<text x="4" y="16" class="ct">{_esc(title)}</text>']


def svg_rates(items: Sequence[tuple[str, Cohort]], title: str) -> Markup:
    """Horizontal bars (rate) with Wilson 95% whiskers and k/n, one row per item.

    The label column is as wide as the widest label, the value column as wide as
    the widest "pct (k/n)" text; the chart is at least as wide as its title."""
    plot_w, row_h, top = 360, 24, 30
    lb = FONT_SIZES["lb"]
    values = [f"{r.pct()} ({r.k}/{r.n})" if (r := cell.rate) else "" for _, cell in items]
    label_w = max([60.0, *(text_width(label, lb) + 2 * _PAD for label, _ in items)])
    value_w = max([text_width("100.0% (9999/9999)", lb), *(text_width(v, lb) for v in values)])
    empty_w = text_width("no assessed episode", FONT_SIZES["na"]) + _PAD
    width = math.ceil(max(label_w + max(plot_w + _PAD + value_w, empty_w) + _PAD,
                          text_width(title, FONT_SIZES["ct"]) + 4 + _PAD,
                          label_w + plot_w + text_width("100%", FONT_SIZES["ax"]) / 2 + _PAD))
    height = top + row_h * len(items) + 24
    x0 = label_w
    parts = _open(width, height, title)
    for pct in (0, 25, 50, 75, 100):
        x = x0 + plot_w * pct / 100
        parts.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" '
                     f'y2="{top + row_h * len(items)}" class="grid"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" class="ax" '
                     f'text-anchor="middle">{pct}%</text>')
    for i, ((label, cell), value) in enumerate(zip(items, values, strict=True)):
        y = top + i * row_h
        parts.append(f'<text x="{label_w - _PAD:.1f}" y="{y + 15}" class="lb" '
                     f'text-anchor="end">{_esc(label)}</text>')
        r = cell.rate
        if r is None:
            parts.append(f'<text x="{x0 + 4:.1f}" y="{y + 15}" class="na">no assessed episode'
                         '</text>')
            continue
        bw = plot_w * r.value
        lo, hi = x0 + plot_w * r.lo, x0 + plot_w * r.hi
        mid = y + row_h / 2
        parts.append(f'<rect x="{x0:.1f}" y="{y + 5}" width="{bw:.1f}" height="{row_h - 10}" '
                     f'class="bar"><title>{_esc(label)}: {_esc(r)}</title></rect>')
        parts.append(f'<line x1="{lo:.1f}" y1="{mid:.1f}" x2="{hi:.1f}" y2="{mid:.1f}" '
                     'class="ci"/>')
        for xx in (lo, hi):
            parts.append(f'<line x1="{xx:.1f}" y1="{mid - 5:.1f}" x2="{xx:.1f}" '
                         f'y2="{mid + 5:.1f}" class="ci"/>')
        parts.append(f'<text x="{x0 + plot_w + _PAD:.1f}" y="{y + 15}" class="lb">'
                     f'{_esc(value)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # every text in it went through _esc


def svg_bubbles(models: Sequence[str], worlds: Sequence[str],
                cells: Mapping[tuple[str, str], Cohort], title: str) -> Markup:
    """Rows models, columns worlds; bubble area ∝ rate of the primary endpoint (Figure 4).

    A small grey dot marks a model outside that world's roster; the footer gives
    how many models realize the risk at all and the pooled rate. Columns are as
    wide as the widest world name (and the bubble with its number)."""
    row_h, top, rmax = 40, 46, 17
    lb, sm = FONT_SIZES["lb"], FONT_SIZES["sm"]
    label_w = max([text_width(m, lb) + 2 * _PAD for m in models]
                  + [text_width(t, sm) + 2 * _PAD for t in ("models realizing", "pooled rate")])
    bubble_w = 2 * (rmax + 3 + text_width("100", sm)) + _PAD
    col_w = max([96.0, bubble_w, *(text_width(w, lb) + 2 * _PAD for w in worlds)])
    width = math.ceil(max(label_w + col_w * max(1, len(worlds)) + _PAD,
                          text_width(title, FONT_SIZES["ct"]) + 4 + _PAD))
    height = top + row_h * len(models) + 56
    parts = _open(width, height, title)
    for j, w in enumerate(worlds):
        cx = label_w + col_w * j + col_w / 2
        parts.append(f'<text x="{cx:.1f}" y="{top - 12}" class="lb" '
                     f'text-anchor="middle">{_esc(w)}</text>')
    for i, m in enumerate(models):
        cy = top + row_h * i + row_h / 2
        parts.append(f'<text x="{label_w - _PAD:.1f}" y="{cy + 4:.1f}" class="lb" '
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
    parts.append(f'<text x="{label_w - _PAD:.1f}" y="{fy}" class="sm" text-anchor="end">'
                 'models realizing</text>')
    parts.append(f'<text x="{label_w - _PAD:.1f}" y="{fy + 18}" class="sm" text-anchor="end">'
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
