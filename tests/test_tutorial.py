"""docs/tutorial.md is executable: every `eairc` command it shows prints what it says.

Each ```sh block holding one `eairc …` command and followed by a ```text block is
run in a temporary copy of docs/examples, and its output compared with the
block (trailing spaces aside). The located-error example is replayed by making
the edit the tutorial describes. A change to the language, the example world or
the CLI's output that makes the tutorial wrong fails here.
"""

from __future__ import annotations

import re
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from cli_helpers import run_eairc

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)


def _shown_commands() -> list[tuple[str, str]]:
    """(command, expected output) for each `sh` block directly followed by a `text` block."""
    text = TUTORIAL.read_text(encoding="utf-8")
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in BLOCK.finditer(text)]
    pairs = []
    for (lang, body, _, end), (next_lang, next_body, start, _) in pairwise(blocks):
        lines = [ln for ln in body.strip().splitlines() if ln.strip()]
        if (lang == "sh" and next_lang == "text" and len(lines) == 1
                and lines[0].startswith("eairc ") and not text[end:start].strip()):
            pairs.append((lines[0], next_body))
    return pairs


def _normalise(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    _make_section_12_versions(tmp_path / "docs" / "examples")
    return tmp_path


def _make_section_12_versions(folder: Path) -> None:
    """The two edited copies section 12 asks for, built from the tutorial's own snippets."""
    text = TUTORIAL.read_text(encoding="utf-8")
    section = text[text.index("## 12."):]
    lever, guard = [m.group(2).strip("\n") for m in BLOCK.finditer(section)
                    if m.group(1) == "eair"][:2]
    halved = re.search(r"`(let spent\(.*?\) = .*?)`", section.replace("\n", " "), re.S)
    assert halved is not None
    source = (folder / "first_world.eair").read_text(encoding="utf-8")
    kpi = next(ln for ln in source.splitlines() if ln.startswith("lever kpi_pressure"))
    budget = next(ln for ln in source.splitlines()
                  if ln.strip().startswith("require amount <= budget_left"))
    spent = next(ln for ln in source.splitlines() if ln.startswith("let spent("))
    repaired = source.replace(kpi, f"{kpi}\n\n{lever}").replace(budget, f"{budget}\n{guard}")
    (folder / "first_world_repaired.eair").write_text(repaired, encoding="utf-8")
    (folder / "first_world_scored.eair").write_text(
        source.replace(spent, re.sub(r"\s+", " ", halved.group(1))), encoding="utf-8")


def test_the_tutorial_shows_commands_to_check() -> None:
    commands = [c.split()[1] for c, _ in _shown_commands()]
    assert {"check", "compile", "run", "diff"} <= set(commands)


@pytest.mark.parametrize("command,expected", _shown_commands(),
                         ids=[c.split()[1] for c, _ in _shown_commands()])
def test_tutorial_command_prints_what_the_tutorial_shows(workspace: Path, command: str,
                                                          expected: str) -> None:
    args = command.split()[1:]
    proc = run_eairc(*args, cwd=workspace, env={"COLUMNS": "120"})
    assert _normalise(proc.stdout + proc.stderr) == _normalise(expected)
    if args[0] == "diff":  # the repair passes review; the rescoring does not
        assert proc.returncode == (1 if "scored" in args[-1] else 0)


def test_validate_reports_what_the_tutorial_shows(workspace: Path) -> None:
    text = TUTORIAL.read_text(encoding="utf-8")
    marker = text.index("`eairc validate` runs every instance")
    expected = next(m.group(2) for m in BLOCK.finditer(text, marker) if m.group(1) == "text")
    proc = run_eairc("validate", "docs/examples/first_world.eair", cwd=workspace)
    assert proc.returncode == 1  # the compliant profile fails, as the tutorial explains
    assert _normalise(proc.stdout + proc.stderr) == _normalise(expected)


def test_located_error_example_matches(workspace: Path) -> None:
    """The guard written without its unit gives the diagnostic the tutorial prints."""
    text = TUTORIAL.read_text(encoding="utf-8")
    marker = text.index("Writing the budget guard without its unit")
    expected = next(m.group(2) for m in BLOCK.finditer(text, marker) if m.group(1) == "text")
    world = workspace / "docs" / "examples" / "first_world.eair"
    source = world.read_text(encoding="utf-8")
    guard = '  require amount <= budget_left else reject "the refund budget is exhausted"'
    assert guard in source
    world.write_text(source.replace(guard, guard.replace("budget_left", "300")),
                     encoding="utf-8")
    proc = run_eairc("check", "docs/examples/first_world.eair", cwd=workspace)
    assert proc.returncode == 1
    assert _normalise(proc.stdout + proc.stderr) == _normalise(expected)
