"""Golden fixtures for the check and compile stages (tests/fixtures/{check,compile}/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, Section, load_sections

from eairdsl.compiler import compile_world
from eairdsl.ir import dump_world


def _sections(stage: str) -> list[Any]:
    return [pytest.param(s, id=f"{s.file}:{s.line}")
            for path in sorted((FIXTURES / stage).glob("*.eair")) for s in load_sections(path)]


#: what a file a section's `# file: NAME` header names holds (a card for its roles)
CARD = "You are {{ role.name }}.\n"


def _compile(section: Section, tmp_path: Path) -> Any:
    for name in section.headers.get("file", []):
        (tmp_path / name).write_text(CARD, encoding="utf-8")
    entry = tmp_path / "world.eair"
    entry.write_text(section.body, encoding="utf-8")
    return compile_world(entry)


@pytest.mark.parametrize("section", _sections("check"))
def test_check_fixture(section: Section, tmp_path: Path) -> None:
    """The checker reports exactly the expected codes at the expected positions."""
    result = _compile(section, tmp_path)
    got = sorted(f"{d.code} {d.span.line}:{d.span.col}" if d.span else d.code
                 for d in result.diagnostics)
    expected = sorted(e for e in section.headers["expect"] if e != "ok")
    assert got == expected, [d.message for d in result.diagnostics]
    assert result.ok == (not any(e.startswith("E") for e in expected))


def _select(value: Any, path: str) -> Any:
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("["):
            name = part[1:-1]
            value = next(item for item in value if item.get("name") == name)
        elif isinstance(value, list):
            value = value[int(part)]
        else:
            value = value[part]
    return value


@pytest.mark.parametrize("section", _sections("compile"))
def test_compile_fixture(section: Section, tmp_path: Path) -> None:
    """The compiled world.json holds the expected values at the named paths."""
    result = _compile(section, tmp_path)
    assert result.ok and result.world is not None, [d.message for d in result.diagnostics]
    data = json.loads(dump_world(result.world))
    for line in section.headers["ir"]:
        path, _, expected = line.partition(" = ")
        assert _select(data, path) == json.loads(expected), path
