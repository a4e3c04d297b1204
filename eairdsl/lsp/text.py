"""Positions and words: how the language server reads a buffer's text.

The compiler's spans are 1-based with an exclusive end; LSP positions are 0-based.
Names inside clauses (`roles a, b`, `tools x, y`, `on TOOL`) are plain strings in
the AST, located only by their clause's span, so finding *where* a name is written
is done here, on the text: `words` lists every identifier outside strings and
comments, with its position and whether it follows a `.` (a field access).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from lsprotocol import types as T

from eairdsl.source import Span

__all__ = ["Word", "lsp_range", "whole_range", "words", "word_at", "span_contains",
           "line_prefix"]

_TOKEN = re.compile(
    r'(?P<long>"""[\s\S]*?(?:"""|\Z))'
    r'|(?P<string>"(?:[^"\\\n]|\\.)*(?:"|$))'
    r"|(?P<comment>//[^\n]*)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>\d[\w.:-]*)"
    r"|(?P<newline>\n)",
    re.M)


@dataclass(frozen=True)
class Word:
    """An identifier written in a buffer: 0-based line and start column (code points),
    and, when it follows a `.`, the word before the dot (`obj` of `obj.name`)."""

    name: str
    line: int
    col: int
    dotted: bool = False
    obj: str | None = None

    @property
    def end(self) -> int:
        return self.col + len(self.name)

    def range(self) -> T.Range:
        return T.Range(start=T.Position(line=self.line, character=self.col),
                       end=T.Position(line=self.line, character=self.end))

    def within(self, span: Span) -> bool:
        """Is this word inside `span` (same file assumed)?"""
        return span_contains(span, self.line, self.col)


def span_contains(span: Span, line: int, col: int) -> bool:
    """Is the 0-based position (line, col) inside the 1-based, end-exclusive `span`?"""
    at = (line + 1, col + 1)
    return (span.line, span.col) <= at < (span.end_line, span.end_col) or (
        span.end_line == span.line and span.end_col == span.col and at == (span.line, span.col))


@lru_cache(maxsize=64)
def words(text: str) -> tuple[Word, ...]:
    """Every identifier of `text` outside strings and comments, in order (cached: the
    server asks for the same buffer's words for each request on it)."""
    found: list[Word] = []
    line, line_start = 0, 0
    previous: Word | None = None
    previous_end = -1
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind in ("long", "string", "comment"):
            piece = match.group()
            newlines = piece.count("\n")
            if newlines:
                line += newlines
                line_start = match.start() + piece.rindex("\n") + 1
            previous = None
            continue
        if kind == "newline":
            line, line_start = line + 1, match.end()
            continue
        if kind == "number":
            previous = None
            continue
        start = match.start()
        attribute = previous is not None and text[previous_end:start].strip() == "."
        before = start - 1
        while before >= 0 and text[before] in " \t":
            before -= 1
        dotted = attribute or (before >= 0 and text[before] == ".")
        word = Word(match.group(), line, start - line_start, dotted,
                    previous.name if attribute and previous is not None else None)
        found.append(word)
        previous, previous_end = word, match.end()
    return tuple(found)


def word_at(text: str, line: int, col: int) -> Word | None:
    """The identifier under (or just before) a 0-based position, or None."""
    for word in words(text):
        if word.line == line and word.col <= col <= word.end:
            return word
        if word.line > line:
            break
    return None


def line_prefix(text: str, line: int, col: int) -> str:
    """The text of `line` before column `col` ('' past the end of the buffer)."""
    lines = text.split("\n")
    return lines[line][:col] if 0 <= line < len(lines) else ""


def lsp_range(span: Span) -> T.Range:
    """Our spans are 1-based with an exclusive end; LSP positions are 0-based."""
    start = T.Position(line=max(span.line - 1, 0), character=max(span.col - 1, 0))
    end = T.Position(line=max(span.end_line - 1, 0), character=max(span.end_col - 1, 0))
    if (end.line, end.character) < (start.line, start.character):
        end = start
    return T.Range(start=start, end=end)


def whole_range(text: str) -> T.Range:
    """The range of all of `text` (for a whole-document edit)."""
    lines = text.split("\n")
    return T.Range(start=T.Position(line=0, character=0),
                   end=T.Position(line=len(lines) - 1, character=len(lines[-1])))
