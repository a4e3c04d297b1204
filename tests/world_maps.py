"""Line citations in the fidelity maps (docs/worlds/*.md), checked and kept current.

A map's tables have a `Lines` (or `Where`) column that says where the world implements each
sentence of the paper. A bare line number goes stale silently when the world is
edited, so every citation carries an *anchor*: verbatim text the cited lines
must hold.

    404–457 (`role deal_agent`: the six roles)      anchor in the parenthesis
    `utility` 680                                     anchor just before
    `instances.json` 12 (`"discount": 18`)            a data file's line
    `stdlib/approval.eair` 45 (`policy`)              a stdlib module's line

An anchor may elide with `…`: every fragment must appear in the cited lines.
Numbers inside parentheses or backticks are not citations. A number in the same
`,`/`;` segment as a backticked file name cites that file (`a1/x.json` under
worlds/, `stdlib/…` in the package's stdlib, a bare `x.json` in the world's
folder); other numbers cite the world.

    python tests/world_maps.py check [MAP…]    list bad citations (exit 1)
    python tests/world_maps.py anchor MAP…     give each bare citation the text
                                               of its first cited line (review!)
    python tests/world_maps.py fix MAP…        move anchored citations whose
                                               lines moved to where the anchor is
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE_NAME = re.compile(r"^[\w./-]+\.(?:eair|json|md|txt|j2|csv)$")
NUMBER = re.compile(r"(?<![\w.§$/:–-])(\d{1,4})(?:\s?[–-]\s?(\d{1,4}))?(?![\w%/$.:]|\.\d)")
COLUMNS = ("Lines", "Where")   # the header of a map's citation column
ELISION = re.compile(r"\s*(?:…|\.\.\.)\s*")


@dataclass(frozen=True)
class Citation:
    """One line citation in a map's `Lines` cell."""

    map_line: int
    start: int            # offsets of the number range within the map line
    end: int
    first: int
    last: int
    anchor: str | None
    target: Path


def _resolve(name: str, world: str) -> Path:
    if name.startswith("stdlib/"):
        return ROOT / "eairdsl" / name
    if "/" in name:
        return ROOT / "worlds" / name
    if name.endswith(".eair"):
        return ROOT / "worlds" / name
    return ROOT / "worlds" / world / name


def _cell_spans(line: str) -> list[tuple[int, int]]:
    """(start, end) of each cell of a table row."""
    bars = [i for i, c in enumerate(line) if c == "|" and (i == 0 or line[i - 1] != "\\")]
    return [(a + 1, b) for a, b in itertools.pairwise(bars)]


def _scan_cell(line: str, lo: int, hi: int, map_line: int, world: str) -> list[Citation]:
    out: list[Citation] = []
    depth = 0
    segment_file: Path | None = None
    last_span: tuple[int, int] | None = None   # the latest backtick span, for `x` N anchors
    i = lo
    while i < hi:
        c = line[i]
        if c == "`":
            close = line.find("`", i + 1, hi)
            if close < 0:
                break
            text = line[i + 1:close]
            if depth == 0:
                if FILE_NAME.match(text):
                    segment_file = _resolve(text, world)
                last_span = (i, close + 1)
            i = close + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and c in ",;":
            segment_file = None
            last_span = None
        elif depth == 0 and c.isdigit():
            m = NUMBER.match(line, i)
            if m and m.end() <= hi:
                first = int(m.group(1))
                last = int(m.group(2) or first)
                anchor = _anchor_after(line, m.end(), hi)
                if anchor is None and last_span is not None and not line[last_span[1]:i].strip():
                    text = line[last_span[0] + 1:last_span[1] - 1]
                    anchor = None if FILE_NAME.match(text) else text
                target = segment_file or ROOT / "worlds" / f"{world}.eair"
                out.append(Citation(map_line, i, m.end(), first, last, anchor, target))
                i = m.end()
                continue
            while i < hi and line[i].isalnum():
                i += 1
            continue
        i += 1
    return out


def _anchor_after(line: str, at: int, hi: int) -> str | None:
    """The anchor in a parenthesis right after a number: `N (`text`…)`."""
    rest = line[at:hi]
    m = re.match(r" \(`([^`]+)`", rest)
    return m.group(1) if m else None


def scan(text: str, world: str) -> list[Citation]:
    """Every citation in the `Lines` columns of a map's tables."""
    out: list[Citation] = []
    column: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("|"):
            column = None
            continue
        cells = _cell_spans(line)
        names = [line[a:b].strip() for a, b in cells]
        if column is None:
            column = next((k for k, n in enumerate(names) if n in COLUMNS), -1)
            continue
        if column < 0 or set(line.replace("|", "").strip()) <= set("-: ") or column >= len(cells):
            continue
        lo, hi = cells[column]
        out.extend(_scan_cell(line, lo, hi, number, world))
    return out


def _lines(path: Path) -> list[str] | None:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None


def holds(lines: list[str], first: int, last: int, anchor: str) -> bool:
    """Do lines first..last (1-based) hold every fragment of the anchor?"""
    if not 1 <= first <= last <= len(lines):
        return False
    body = "\n".join(lines[first - 1:last])
    return all(part in body for part in ELISION.split(anchor) if part.strip())


def problems(doc: Path) -> list[str]:
    """Each bad citation of a map, as `map:line: message`."""
    world = doc.stem
    bad = []
    for c in scan(doc.read_text(encoding="utf-8"), world):
        where = f"{doc.relative_to(ROOT)}:{c.map_line}"
        span = f"{c.first}" if c.first == c.last else f"{c.first}–{c.last}"
        lines = _lines(c.target)
        name = c.target.relative_to(ROOT)
        if lines is None:
            bad.append(f"{where}: {span} cites {name}, which does not exist")
        elif c.anchor is None:
            bad.append(f"{where}: {span} of {name} has no anchor (`N (`text`)`)")
        elif not holds(lines, c.first, c.last, c.anchor):
            bad.append(f"{where}: {name} {span} does not hold `{c.anchor}`")
    return bad


def _first_text(lines: list[str], first: int, last: int) -> str | None:
    for raw in lines[first - 1:last]:
        text = raw.strip().rstrip("{").strip()
        if text and "`" not in text and "…" not in text:
            if len(text) > 48:
                cut = text[:48]
                text = cut[:cut.rfind(" ")] if " " in cut else cut
            return text
    return None


def _edit(doc: Path, rewrite: dict[tuple[int, int, int], str]) -> None:
    lines = doc.read_text(encoding="utf-8").split("\n")
    for (number, start, end), new in sorted(rewrite.items(), reverse=True):
        line = lines[number - 1]
        lines[number - 1] = line[:start] + new + line[end:]
    doc.write_text("\n".join(lines), encoding="utf-8")


#: what a rewrite does with one citation: None to pass it by, else the edit (the end of
#: the text it replaces from the citation's start, and the new text; None for no edit)
#: and the line to report
Step = Callable[[Citation, list[str], str], tuple[tuple[int, str] | None, str] | None]


def _rewrite(doc: Path, step: Step) -> list[str]:
    """Apply `step` to every citation of the map whose file exists; what was done."""
    text = doc.read_text(encoding="utf-8")
    rows = text.split("\n")
    done, edits = [], {}
    for c in scan(text, doc.stem):
        lines = _lines(c.target)
        out = None if lines is None else step(c, lines, rows[c.map_line - 1])
        if out is not None:
            edit, message = out
            done.append(f"{doc.name}:{c.map_line}: {message}")
            if edit is not None:
                edits[(c.map_line, c.start, edit[0])] = edit[1]
    _edit(doc, edits)
    return done


def _anchor_step(c: Citation, lines: list[str], row: str) -> tuple[tuple[int, str], str] | None:
    if c.anchor is not None or not 1 <= c.first <= c.last <= len(lines):
        return None
    found = _first_text(lines, c.first, c.last)
    if found is None:
        return None
    span = row[c.start:c.end]
    if row[c.end:c.end + 2] == " (":  # a parenthesis of words follows: the anchor leads it
        return (c.end + 2, f"{span} (`{found}`: "), f"{span} -> `{found}`"
    return (c.end, f"{span} (`{found}`)"), f"{span} -> `{found}`"


def anchor(doc: Path) -> list[str]:
    """Give each bare citation the text of its first cited line; return what was done."""
    return _rewrite(doc, _anchor_step)


def _fix_step(c: Citation, lines: list[str], row: str) -> tuple[tuple[int, str] | None,
                                                                 str] | None:
    if c.anchor is None or holds(lines, c.first, c.last, c.anchor):
        return None
    head = next(p for p in ELISION.split(c.anchor) if p.strip())
    places = [n for n, raw in enumerate(lines, start=1) if head in raw]
    if not places:
        return None, f"`{c.anchor}` is nowhere in {c.target.name}: fix by hand"
    at = min(places, key=lambda n: abs(n - c.first))
    first, last = at, at + (c.last - c.first)
    if not holds(lines, first, last, c.anchor):
        return None, f"`{c.anchor}` moved, but its range no longer fits: fix by hand"
    new = f"{first}" if first == last else f"{first}–{last}"
    return (c.end, new), f"{row[c.start:c.end]} -> {new} (`{c.anchor}`)"


def fix(doc: Path) -> list[str]:
    """Move each anchored citation whose anchor left its lines to the nearest place holding it."""
    return _rewrite(doc, _fix_step)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("check", "anchor", "fix"):
        print(__doc__)
        return 2
    docs = [Path(a).resolve() for a in argv[1:]] or sorted(
        p for p in (ROOT / "docs" / "worlds").glob("*.md") if p.name != "README.md")
    if argv[0] == "check":
        bad = [p for d in docs for p in problems(d)]
        print("\n".join(bad) or "every citation holds its anchor")
        return 1 if bad else 0
    act = anchor if argv[0] == "anchor" else fix
    for d in docs:
        for line in act(d):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
