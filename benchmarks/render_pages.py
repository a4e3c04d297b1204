"""Render pages and diagrams to PNG with headless Chromium, to look at them.

Tests check what can be checked without a browser (contrast of the CSS colours,
the rules that keep tables from scrolling the page); whether a diagram reads, or a
page fits a phone, is seen. This script turns every `.svg` and `.html` it is
given (files, or folders searched recursively) into a PNG beside it in `--out`,
at one or more window widths, so a change can be looked at before and after:

    python benchmarks/render_pages.py generated runs/demo/report --out /tmp/png \
        --widths 1280,390

It also prints, per page and width, whether the page scrolls sideways
(`document.documentElement.scrollWidth > innerWidth`), which Chromium can tell by
dumping the DOM after a small script has written the figure into the title.
Needs `chromium` (Debian: `apt-get install chromium`); nothing else.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_PROBE = """<script>addEventListener('load',()=>setTimeout(()=>{const d=document.documentElement;
document.title='overflow:'+(d.scrollWidth>innerWidth?'yes':'no')+':'+d.scrollWidth},300));
</script>"""


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("render_pages: no chromium on PATH (Debian: apt-get install chromium)")


def _inputs(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix in (".svg", ".html"))
        elif p.suffix in (".svg", ".html"):
            out.append(p)
    return out


def _run(browser: str, args: list[str]) -> str:
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    return done.stdout


def _svg_size(path: Path) -> tuple[int, int]:
    head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    m = re.search(r'<svg[^>]*?width="([\d.]+)(?:pt|px)?"[^>]*?height="([\d.]+)(?:pt|px)?"', head,
                  re.S)
    if not m:
        return 1280, 900
    scale = 4 / 3 if 'pt"' in head[m.start():m.end()] else 1.0
    return int(float(m.group(1)) * scale) + 16, int(float(m.group(2)) * scale) + 16


def render(path: Path, out: Path, width: int, browser: str) -> str:
    """One PNG of `path` at `width` (a diagram at its own size); the overflow verdict."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".svg":
        w, h = _svg_size(path)
        _run(browser, [f"--screenshot={out}", f"--window-size={w},{h}", path.resolve().as_uri()])
        return ""
    _run(browser, [f"--screenshot={out}", f"--window-size={width},900",
                   path.resolve().as_uri()])
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(path.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"),
                         encoding="utf-8")
        # the probe must resolve the page's relative links: it is written next to the page
        beside = path.with_name(f".probe-{path.name}")
        shutil.copyfile(probe, beside)
        try:
            dom = _run(browser, [f"--window-size={width},900", "--virtual-time-budget=3000",
                                 "--dump-dom", beside.resolve().as_uri()])
        finally:
            beside.unlink(missing_ok=True)
    m = re.search(r"<title>overflow:(\w+):(\d+)</title>", dom)
    return f"scrolls sideways: {m.group(1)} ({m.group(2)} px)" if m else "overflow: unknown"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("png"))
    ap.add_argument("--widths", default="1280,390", help="window widths for pages")
    args = ap.parse_args(argv)
    browser = _browser()
    widths = [int(w) for w in args.widths.split(",")]
    for path in _inputs(args.paths):
        stem = "_".join(path.with_suffix("").parts[-3:])
        for width in widths if path.suffix == ".html" else [0]:
            png = args.out / (f"{stem}-{width}.png" if width else f"{stem}.png")
            verdict = render(path, png, width, browser)
            print(f"{png}  {verdict}".rstrip())


if __name__ == "__main__":
    main()
