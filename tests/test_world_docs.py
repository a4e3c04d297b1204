"""The fidelity maps in docs/worlds/ cite world lines; every citation must still point there.

Each number in a map's `Lines` (or `Where`) column is a citation and carries an
anchor, verbatim text the cited lines must hold (`442 (`quarterly_cap`)`,
`` `utility` 680 ``, `` `instances.json` 12 (`"discount": 18`) ``); the rules and
the `check`/`anchor`/`fix` commands are in tests/world_maps.py. Editing a world
shifts lines, and a map that silently points at the wrong line misleads the
reader checking the world against the paper: a bare number, an anchor the lines
do not hold, or a file that does not exist fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import world_maps
from world_maps import holds, problems, scan

ROOT = Path(__file__).resolve().parents[1]
#: one map per world; README.md is the suite page (the taxonomy table), not a map
MAPS = sorted(p for p in (ROOT / "docs" / "worlds").glob("*.md") if p.name != "README.md")


def test_every_world_has_a_fidelity_map() -> None:
    assert {p.stem for p in MAPS} == {p.stem for p in (ROOT / "worlds").glob("*.eair")}


@pytest.mark.parametrize("doc", MAPS, ids=[p.stem for p in MAPS])
def test_every_citation_is_anchored_and_holds(doc: Path) -> None:
    assert len(scan(doc.read_text(encoding="utf-8"), doc.stem)) > 20, \
        "the map should cite its world's lines"
    bad = problems(doc)
    assert not bad, "\n".join(bad) + "\n(python tests/world_maps.py fix|anchor MAP)"


TABLE = """| Paper | Lines | Note |
| --- | --- | --- |
| cap | 3 (`quarterly_cap`), `utility` 4 | |
| data | `items.json` 2 (`"id": 1`) | not a citation: (5) |
| bare | 1–2 | |
"""


def test_the_check_catches_shifted_bare_and_missing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Shifted anchors, bare numbers and missing files are reported; prose numbers are not
    citations; anchor and fix repair what they can (the check can fail)."""
    root = tmp_path
    (root / "worlds" / "w").mkdir(parents=True)
    (root / "docs" / "worlds").mkdir(parents=True)
    (root / "worlds" / "w.eair").write_text(
        "world w {\n}\nlet quarterly_cap() = $40\nutility = true\n", encoding="utf-8")
    (root / "worlds" / "w" / "items.json").write_text('[\n  {"id": 1}\n]\n', encoding="utf-8")
    doc = root / "docs" / "worlds" / "w.md"
    doc.write_text(TABLE, encoding="utf-8")
    monkeypatch.setattr(world_maps, "ROOT", root)
    found = scan(TABLE, "w")
    assert [(c.first, c.last, c.anchor) for c in found] == [
        (3, 3, "quarterly_cap"), (4, 4, "utility"), (2, 2, '"id": 1'), (1, 2, None)]
    assert found[2].target == root / "worlds" / "w" / "items.json"
    assert problems(doc) == ["docs/worlds/w.md:5: 1–2 of worlds/w.eair has no anchor "
                             "(`N (`text`)`)"]
    # shift the world by one line: both world citations break, fix moves them back
    (root / "worlds" / "w.eair").write_text(
        "// new first line\nworld w {\n}\nlet quarterly_cap() = $40\nutility = true\n",
        encoding="utf-8")
    assert len(problems(doc)) == 3
    world_maps.fix(doc)
    world_maps.anchor(doc)
    assert problems(doc) == []
    text = doc.read_text(encoding="utf-8")
    assert "4 (`quarterly_cap`)" in text and "`utility` 5" in text
    assert "1–2 (`// new first line`)" in text
    lines = (root / "worlds" / "w.eair").read_text(encoding="utf-8").splitlines()
    assert holds(lines, 4, 5, "quarterly_cap … true") and not holds(lines, 1, 2, "utility")


LIMITATION = re.compile(r"LIMITATION(?: comment)?(?: at)? (\d{1,4})(?:–(\d{1,4}))?")


@pytest.mark.parametrize("doc", MAPS, ids=[p.stem for p in MAPS])
def test_cited_limitation_comments_are_where_the_map_says(doc: Path) -> None:
    """"LIMITATION comment at N–M" must point at a `// LIMITATION:` comment of the world."""
    world = (ROOT / "worlds" / f"{doc.stem}.eair").read_text(encoding="utf-8").splitlines()
    wrong = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        for m in LIMITATION.finditer(line):
            first = int(m.group(1))
            last = int(m.group(2) or first)
            if "LIMITATION" not in "\n".join(world[first - 1:last]):
                wrong.append(f"{doc.name}:{number}: {m.group(0)}")
    assert not wrong, "\n".join(wrong)
