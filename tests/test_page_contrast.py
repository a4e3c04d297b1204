"""Every page we write is readable: WCAG AA contrast and no sideways scroll (issue 29).

The report's pages (eairdsl/study/templates), the Signals page and the repair review
carry their CSS inline. This test parses every rule that sets a text colour and checks
it against the rule's background (or the page's white, or a header cell's grey) for the
WCAG 2.1 AA ratio of 4.5:1 for normal text. It also checks, without a browser, the rules
that keep a wide table from scrolling the page at 390 px (`benchmarks/render_pages.py`
shows it in Chromium).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eairdsl.repair import html as repair_html
from eairdsl.signals import html as signals_html

TEMPLATES = Path(__file__).resolve().parents[1] / "eairdsl" / "study" / "templates"
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_TEXT_SVG = ("svg .ct", "svg .lb", "svg .ax", "svg .sm", "svg .na")


def _pages() -> dict[str, str]:
    out = {p.name: p.read_text(encoding="utf-8") for p in sorted(TEMPLATES.glob("*.j2"))}
    out["signals"] = signals_html._CSS
    out["review.html"] = repair_html._CSS
    return out


def _css(text: str) -> str:
    blocks = re.findall(r"<style>(.*?)</style>", text, re.S)
    css = "\n".join(blocks) if blocks else text
    return re.sub(r"/\*.*?\*/", "", css, flags=re.S)


def _rgb(colour: str) -> tuple[float, float, float] | None:
    c = colour.strip().lower()
    named = {"white": "#ffffff", "black": "#000000"}
    c = named.get(c, c)
    if not re.fullmatch(r"#[0-9a-f]{3}|#[0-9a-f]{6}", c):
        return None
    if len(c) == 4:
        c = "#" + "".join(ch * 2 for ch in c[1:])
    return tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


def _luminance(rgb: tuple[float, float, float]) -> float:
    def lin(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: str, bg: str) -> float:
    """The WCAG contrast ratio of two hex colours."""
    a, b = _rgb(fg), _rgb(bg)
    assert a is not None and b is not None, (fg, bg)
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _decl(body: str, name: str) -> str | None:
    m = re.search(rf"(?:^|;)\s*{name}\s*:\s*([^;]+)", body)
    return m.group(1).strip() if m else None


def _pairs(css: str) -> list[tuple[str, str, str]]:
    """(selector, text colour, background) of every rule that sets a text colour."""
    header_bg = "#ffffff"
    for sel, body in _RULE.findall(css):
        if re.fullmatch(r"\s*th\s*", sel) and (bg := _decl(body, "background")):
            header_bg = bg
    out = []
    for raw, body in _RULE.findall(css):
        sel = " ".join(raw.split())
        fg = _decl(body, "color")
        if sel.startswith(_TEXT_SVG):
            fg = _decl(body, "fill")
        if fg is None or _rgb(fg) is None:
            continue
        bg = _decl(body, "background") or _decl(body, "background-color")
        if bg is None or _rgb(bg) is None:
            bg = header_bg if re.search(r"(^|[\s,])th\b", sel) else "#ffffff"
        out.append((sel, fg, bg))
    return out


def test_the_ratio_is_wcag_s() -> None:
    """Black on white is 21:1, a colour on itself 1:1, #777 on white just under 4.5."""
    assert contrast("#000", "#fff") == pytest.approx(21.0)
    assert contrast("#5b6575", "#5b6575") == pytest.approx(1.0)
    assert contrast("#777777", "#ffffff") < 4.5 < contrast("#595959", "#ffffff")


@pytest.mark.parametrize("page", sorted(_pages()))
def test_every_text_colour_meets_wcag_aa(page: str) -> None:
    """Each text colour a page's CSS sets is at least 4.5:1 against its background."""
    low = [(sel, fg, bg, round(contrast(fg, bg), 2)) for sel, fg, bg in _pairs(_css(_pages()[page]))
           if contrast(fg, bg) < 4.5]
    assert not low, low


@pytest.mark.parametrize("page", ["_base.html.j2", "signals", "review.html"])
def test_wide_tables_scroll_inside_their_own_box(page: str) -> None:
    """A table is a block that scrolls sideways itself (overflow-x: auto, max-width 100%), and
    preformatted text wraps, so a 390 px window never scrolls the whole page sideways."""
    css = _css(_pages()[page]).replace(" ", "")
    assert re.search(r"table\{[^}]*display:block[^}]*\}", css), page
    assert re.search(r"table\{[^}]*overflow-x:auto[^}]*\}", css), page
    assert re.search(r"table\{[^}]*max-width:100%[^}]*\}", css), page
    assert re.search(r"pre\{[^}]*white-space:pre-wrap[^}]*\}", css), page


def test_the_episode_lists_link_column_stays_in_view() -> None:
    """The episode table's last column (trace and audit "view" links) is sticky at the
    right edge, so it is on screen at 1,280 px however many columns the study has."""
    css = _css(_pages()["_base.html.j2"]).replace(" ", "")
    assert re.search(r"#episodestd:last-child\{[^}]*position:sticky;right:0", css)
