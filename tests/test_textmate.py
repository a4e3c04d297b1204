"""The VS Code extension's TextMate grammar (issue 30, item 3): generated from the parser's
terminals, checked in, and able to highlight every shipped world.

The tokenizer here is a small Python port of how a TextMate engine walks a line: at each
position the earliest match of the top-level patterns wins (ties to the first pattern),
a `begin`/`end` rule opens a region that may span lines. A shipped world must come out
with every non-blank character inside some token and no region left open; keywords the
parser knows must come out as keywords.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eairdsl.syntax.textmate import GRAMMAR_FILE, grammar_keywords, textmate_json

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "worlds").glob("*.eair"),
                  *(ROOT / "eairdsl" / "stdlib").rglob("*.eair")])


def test_the_checked_in_grammar_is_the_generated_one() -> None:
    assert (ROOT / GRAMMAR_FILE).read_text(encoding="utf-8") == textmate_json(), \
        "stale: run python editors/vscode/generate_grammar.py"
    script = ROOT / "editors" / "vscode" / "generate_grammar.py"
    check = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                           text=True, timeout=300, check=False)
    assert check.returncode == 0, check.stderr


def test_the_keyword_lists_are_the_parsers_words() -> None:
    grammar = (ROOT / "eairdsl" / "syntax" / "eair.lark").read_text(encoding="utf-8")
    quoted = set(re.findall(r'"([a-z_]+)"', grammar))
    kw = grammar_keywords()
    listed = set(kw["keywords"]) | set(kw["operators"]) | set(kw["constants"])
    # every word the grammar quotes as a terminal is highlighted, and nothing else
    assert listed <= quoted
    assert {"world", "role", "tool", "record", "policy", "condition"} <= set(kw["keywords"])
    assert set(kw["constants"]) == {"true", "false", "none"}
    package = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text("utf-8"))
    languages = {lang["id"]: lang for lang in package["contributes"]["languages"]}
    assert languages["eair"]["extensions"] == [".eair"]
    assert languages["eair-card"]["extensions"] == [".md.j2"]  # cards: hover, definition
    assert sorted(package["activationEvents"]) == ["onLanguage:eair", "onLanguage:eair-card"]
    assert package["contributes"]["grammars"][0]["scopeName"] == "source.eair"
    config = json.loads((ROOT / "editors" / "vscode" / "language-configuration.json")
                        .read_text("utf-8"))
    assert config["comments"]["lineComment"] == "//"


def _rules(grammar: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    repo = grammar["repository"]
    return [(p["include"][1:], repo[p["include"][1:]]) for p in grammar["patterns"]]


def _tokenize(text: str, grammar: dict[str, Any]) -> tuple[list[tuple[int, int, str]], bool]:
    """Tokens (start, end, rule) over the whole text, and whether a region was left open."""
    rules = [(name, rule, re.compile(rule.get("match") or rule["begin"]))
             for name, rule in _rules(grammar)]
    tokens: list[tuple[int, int, str]] = []
    lines = text.split("\n")
    offset = 0
    open_region: tuple[str, re.Pattern[str], int] | None = None
    for line in lines:
        pos = 0
        while pos <= len(line):
            if open_region is not None:
                name, end, start = open_region
                m = end.search(line, pos)
                if m is None:
                    pos = len(line) + 1
                    break
                tokens.append((start, offset + m.end(), name))
                open_region, pos = None, m.end()
                continue
            best: tuple[int, int, str, dict[str, Any], re.Match[str]] | None = None
            for i, (name, rule, rx) in enumerate(rules):
                m = rx.search(line, pos)
                if m is not None and m.end() > m.start() and (
                        best is None or (m.start(), i) < (best[0], best[1])):
                    best = (m.start(), i, name, rule, m)
            if best is None:
                break
            start, _, name, rule, m = best
            if "begin" in rule:
                end_rx = re.compile(rule["end"])
                if name == "string":  # escapes inside: skip them when looking for the end
                    end_rx = re.compile(r'(?:[^"\\]|\\.)*"')
                open_region, pos = (name, end_rx, offset + start), m.end()
                continue
            tokens.append((offset + start, offset + m.end(), name))
            pos = m.end()
        offset += len(line) + 1
    return tokens, open_region is not None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_source_tokenizes_without_gaps(path: Path) -> None:
    grammar = json.loads((ROOT / GRAMMAR_FILE).read_text(encoding="utf-8"))
    text = path.read_text(encoding="utf-8")
    tokens, left_open = _tokenize(text, grammar)
    assert not left_open, "a string or region is still open at the end of the file"
    covered = bytearray(len(text))
    for start, end, _ in tokens:
        covered[start:end] = b"\x01" * (end - start)
    gaps = [(i, c) for i, c in enumerate(text)
            if not covered[i] and not text[i].isspace()]
    assert gaps[:5] == [], f"{len(gaps)} character(s) in no token"
    kinds = {name for _, _, name in tokens}
    assert {"keyword", "identifier", "comment"} <= kinds
    words = {text[s:e] for s, e, name in tokens if name == "keyword"}
    assert "world" in words or "stdlib" in path.parts
