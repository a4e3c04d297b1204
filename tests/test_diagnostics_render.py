"""A diagnostic shows its source line with a caret; a very long line (a compact JSON
report on one line, a long `let`) is shown as a window around the column, so a schema
error in a 200 KB one-line report prints a few hundred characters, not the whole line
twice (once as text, once as the caret line's padding)."""

from __future__ import annotations

from pathlib import Path

from eairdsl.diagnostics import MAX_SHOWN, Diagnostic, render, render_all
from eairdsl.source import Span


def _at(col: int, width: int = 3, line: int = 1) -> Diagnostic:
    return Diagnostic(code="V801", message="not the schema",
                      span=Span(file="r.json", line=line, col=col, end_line=line,
                                end_col=col + width))


def _caret(rendered: str) -> tuple[str, str]:
    text, caret = rendered.splitlines()[1:3]
    return text, caret


def test_a_short_line_is_shown_whole() -> None:
    line = '{"verdict": "maybe"}'
    text, caret = _caret(render(_at(13, 7), {"r.json": [line]}))
    assert text == f"   1 | {line}"
    assert caret.index("^") == text.index('"maybe"') and caret.count("^") == 7


def test_a_long_line_is_a_window_with_the_caret_under_the_column() -> None:
    line = '{"findings": [' + ", ".join(f'{{"id": "F{i}"}}' for i in range(20000)) + ']}'
    col = line.index('"F12345"') + 1
    rendered = render(_at(col, 8), {"r.json": [line]})
    text, caret = _caret(rendered)
    assert len(text) < MAX_SHOWN + 20 and len(caret) < MAX_SHOWN + 20
    assert text.startswith("   1 | …") and text.endswith("…")
    at = caret.index("^")
    assert text[at:at + 8] == '"F12345"' and caret.count("^") == 8


def test_the_ends_of_a_long_line_keep_their_side() -> None:
    line = "x" * 1000 + "END"
    text, caret = _caret(render(_at(1001), {"r.json": [line]}))
    assert text.endswith("END") and not text.endswith("…") and "…" in text
    assert text[caret.index("^"):] == "END"
    text, caret = _caret(render(_at(1, 1), {"r.json": ["BEGIN" + "y" * 1000]}))
    assert text.startswith("   1 | BEGIN") and caret.index("^") == text.index("BEGIN")


def test_render_all_never_counts_a_negative_limit_as_more() -> None:
    items = [_at(1), _at(2)]
    lines = {"r.json": ["abcdef"]}
    assert render_all(items, lines, limit=-1) == "... and 2 more"
    assert render_all(items, lines, limit=0) == "... and 2 more"
    assert "and" not in render_all(items, lines, limit=5)


def test_a_field_sharing_a_line_gets_the_caret(tmp_path: Path) -> None:
    """Fields written compactly (a list, or `;` between fields) are each located at their own
    name: the caret of a duplicate field is under that field, not the line or the list."""
    from eairdsl.compiler import compile_world

    world = tmp_path / "w.eair"
    world.write_text('world w { risk A1; operation "o"; preserves "p" }\n'
                     "record staff { id, name, id, team: text; team: int }\n", encoding="utf-8")
    result = compile_world(world)
    shown = {d.message: _caret(render(d, result.sources))
             for d in result.diagnostics if d.code == "E302"}
    line = "record staff { id, name, id, team: text; team: int }"
    text, caret = shown["field 'id' is declared twice"]
    assert text == f"   2 | {line}"
    assert caret.index("^") == text.index("id, team") and caret.count("^") == 2
    text, caret = shown["field 'team' is declared twice"]
    assert caret.index("^") == text.index("team: int") and caret.count("^") == len("team: int")
