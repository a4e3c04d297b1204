"""The fidelity maps in docs/worlds/ cite world lines; a citation must still point there.

A map row such as `442 (`quarterly_cap`)` says line 442 of the world holds
`quarterly_cap`. Editing a world shifts lines, and a map that silently points at
the wrong line misleads the reader checking the world against the paper. Every
citation of the form `N (`name`)` or `N–M (`name`)` into the world itself (not
into a data file or a stdlib module named just before it) is checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPS = sorted((ROOT / "docs" / "worlds").glob("*.md"))
CITATION = re.compile(r"(?<![\w.`/])(\d{1,4})(?:–(\d{1,4}))? \(`([a-z_]+)[`(]")
OTHER_FILE = re.compile(r"`[\w/.-]+\.(?:eair|json|md|txt|j2|csv)`[^`|]{0,12}$")


def citations(text: str) -> list[tuple[int, int, int, str]]:
    """(map line, first, last, name) for each citation into the world's own source."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        for m in CITATION.finditer(line):
            if OTHER_FILE.search(line[:m.start()]):
                continue  # a line of a data file or a stdlib module
            first = int(m.group(1))
            out.append((number, first, int(m.group(2) or first), m.group(3)))
    return out


def test_every_world_has_a_fidelity_map() -> None:
    assert {p.stem for p in MAPS} == {p.stem for p in (ROOT / "worlds").glob("*.eair")}


@pytest.mark.parametrize("doc", MAPS, ids=[p.stem for p in MAPS])
def test_cited_world_lines_hold_what_the_map_names(doc: Path) -> None:
    world = (ROOT / "worlds" / f"{doc.stem}.eair").read_text(encoding="utf-8").splitlines()
    found = citations(doc.read_text(encoding="utf-8"))
    assert found, "the map should cite its world's lines"
    wrong = [f"{doc.name}:{n}: {a}–{b} does not hold `{name}`"
             for n, a, b, name in found if name not in "\n".join(world[a - 1:b])]
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_a_shifted_citation() -> None:
    """A citation one line off is reported (the check can fail)."""
    world = ["let a() = 1", "", "let quarterly_cap() = $40"]
    good = citations("| cap | 3 (`quarterly_cap`) |")
    shifted = citations("| cap | 2 (`quarterly_cap`) |")
    assert all(name in world[a - 1] for _, a, _, name in good)
    assert not all(name in world[a - 1] for _, a, _, name in shifted)
    assert citations("| data | `a1/tickets.json` 7 (`sla_target`) |") == []


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
