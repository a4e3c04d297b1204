"""A JSON reader that remembers where every value is, so a report's diagnostics are located.

The standard library's `json` gives values without positions. A validator
diagnostic must point at the offending value (`report.json:41:18`), so this
reader parses RFC 8259 JSON with `json.decoder.scanstring` and the standard
number pattern and records, for each value, its span keyed by the path to it
(`("findings", 0, "evidence", 2, "quote")`). It is strict where `json` is
lenient: a repeated object key is an error (json keeps the last one silently),
as are NaN and Infinity. Reports are untrusted input: nesting is bounded.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
from collections.abc import Callable
from typing import Any, Protocol

from eairdsl.source import Span

__all__ = ["JsonPath", "PositionedJson", "JsonSyntaxError", "parse_positioned", "MAX_DEPTH",
           "format_path", "Positions", "LazyPositions", "parse_fast"]

JsonPath = tuple[str | int, ...]
#: deeper nesting than any report needs; beyond it the reader stops (no recursion blow-up)
MAX_DEPTH = 64
_WHITESPACE = " \t\n\r"
_NUMBER = json.scanner.NUMBER_RE
#: the standard library's string scanner (the C one when available); untyped in typeshed
_SCANSTRING: Callable[[str, int, bool], tuple[str, int]] = (
    json.decoder.scanstring)  # type: ignore[attr-defined]


class JsonSyntaxError(ValueError):
    """Text that is not JSON, at a line and column."""

    def __init__(self, message: str, span: Span) -> None:
        super().__init__(f"{span}: {message}")
        self.message = message
        self.span = span


class PositionedJson:
    """A parsed JSON value, the span of every value in it, and keys repeated in an object."""

    def __init__(self, value: Any, spans: dict[JsonPath, Span], keys: dict[JsonPath, Span],
                 repeated: list[tuple[JsonPath, Span]]) -> None:
        self.value = value
        self.spans = spans
        #: the span of the key naming each object member
        self.keys = keys
        self.repeated = repeated

    def locate(self, path: JsonPath, key: bool = False) -> tuple[JsonPath, Span]:
        """The deepest recorded prefix of `path` and its span (a missing member: its object)."""
        found: JsonPath = ()
        for part in path:
            if (*found, part) in self.spans:
                found = (*found, part)
        if key and found in self.keys:
            return found, self.keys[found]
        return found, self.spans[found]


def format_path(path: JsonPath) -> str:
    """`findings[0].evidence[2].quote`; the whole report is `report`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "report"


def parse_positioned(text: str, file: str) -> PositionedJson:
    """Parse `text`; raise JsonSyntaxError located at the first offending character."""
    return _Parser(text, file).parse()


class Positions(Protocol):
    """What a validator asks of a parsed report: keys repeated, and where a path is."""

    @property
    def repeated(self) -> list[tuple[JsonPath, Span]]: ...

    def locate(self, path: JsonPath, key: bool = False) -> tuple[JsonPath, Span]: ...


class LazyPositions:
    """The positions of a text the standard reader parsed whole (no repeated key, no NaN,
    no nesting past MAX_DEPTH): found by `parse_positioned` only when one is asked for,
    which a valid report without warnings never does."""

    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.file = file
        self._parsed: PositionedJson | None = None

    @property
    def repeated(self) -> list[tuple[JsonPath, Span]]:
        return []  # `parse_fast` takes this path only when no key repeats

    def locate(self, path: JsonPath, key: bool = False) -> tuple[JsonPath, Span]:
        if self._parsed is None:
            self._parsed = parse_positioned(self.text, self.file)
        return self._parsed.locate(path, key=key)


class _NotPlain(Exception):
    """The fast reader's way out: the text needs the positioned reader's verdict."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotPlain  # a repeated key: the positioned reader reports it
    return out


def _constant(name: str) -> Any:
    raise _NotPlain  # NaN or Infinity: an error here


def _too_deep(value: Any, depth: int = 0) -> bool:
    """Whether some value lies deeper than MAX_DEPTH (the root is at depth 0): a non-empty
    container at it (its members are one deeper). `json.loads` makes plain dicts and
    lists, and stops at its own recursion limit first, so this recursion is bounded."""
    if depth >= MAX_DEPTH:
        return bool(value) and type(value) in (dict, list)
    members = value.values() if type(value) is dict else value if type(value) is list else ()
    return any(_too_deep(m, depth + 1) for m in members if type(m) in (dict, list))


def parse_fast(text: str, file: str) -> tuple[Any, Positions]:
    """`parse_positioned`'s value and positions, the value read by the standard library's
    C reader when the text is plain JSON (what `parse_positioned` would accept with no key
    repeated: the same value), the positions then found only if asked for. Any other
    text goes to `parse_positioned`, which raises or reports as it always did."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
        if not _too_deep(value):
            return value, LazyPositions(text, file)
    except (_NotPlain, ValueError, RecursionError):
        pass
    positioned = parse_positioned(text, file)
    return positioned.value, positioned


class _Parser:
    def __init__(self, text: str, file: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.file = file
        self.starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        self.spans: dict[JsonPath, Span] = {}
        self.keys: dict[JsonPath, Span] = {}
        self.repeated: list[tuple[JsonPath, Span]] = []

    def _where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def span(self, start: int, end: int) -> Span:
        line, col = self._where(start)
        end_line, end_col = self._where(max(start + 1, end))
        return Span(file=self.file, line=line, col=col, end_line=end_line, end_col=end_col)

    def fail(self, message: str, at: int | None = None) -> JsonSyntaxError:
        at = self.i if at is None else at
        return JsonSyntaxError(message, self.span(at, at + 1))

    def ws(self) -> None:
        while self.i < self.n and self.s[self.i] in _WHITESPACE:
            self.i += 1

    def parse(self) -> PositionedJson:
        if self.s.startswith("\ufeff"):
            self.i = 1
        self.ws()
        value = self.value((), 0)
        self.ws()
        if self.i != self.n:
            raise self.fail("unexpected text after the JSON value")
        return PositionedJson(value, self.spans, self.keys, self.repeated)

    def value(self, path: JsonPath, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        start = self.i
        c = self.s[self.i] if self.i < self.n else ""
        value: Any
        if c == "{":
            value = self.obj(path, depth)
        elif c == "[":
            value = self.arr(path, depth)
        elif c == '"':
            value = self.string()
        elif c == "-" or c.isdigit():
            m = _NUMBER.match(self.s, self.i)
            if m is None:
                raise self.fail("malformed number")
            integer, frac, exp = m.groups()
            value = float(integer + (frac or "") + (exp or "")) if frac or exp else int(integer)
            self.i = m.end()
        else:
            for word, const in (("true", True), ("false", False), ("null", None)):
                if self.s.startswith(word, self.i):
                    self.i += len(word)
                    value = const
                    break
            else:
                raise self.fail("expected a JSON value" if c else "unexpected end of the file")
        self.spans[path] = self.span(start, self.i)
        return value

    def string(self) -> str:
        try:
            text, end = _SCANSTRING(self.s, self.i + 1, True)
        except json.JSONDecodeError as e:
            raise self.fail(e.msg, e.pos) from None
        self.i = end
        return text

    def obj(self, path: JsonPath, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self.i += 1
        self.ws()
        if self.i < self.n and self.s[self.i] == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            if self.i >= self.n or self.s[self.i] != '"':
                raise self.fail("expected a member name in double quotes")
            key_start = self.i
            key = self.string()
            key_span = self.span(key_start, self.i)
            self.ws()
            if self.i >= self.n or self.s[self.i] != ":":
                raise self.fail("expected ':' after the member name")
            self.i += 1
            self.ws()
            member = (*path, key)
            if key in out:
                self.repeated.append((member, key_span))
                self.value((*path, f"{key}#repeated"), depth + 1)
            else:
                self.keys[member] = key_span
                out[key] = self.value(member, depth + 1)
            self.ws()
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
                continue
            if self.i < self.n and self.s[self.i] == "}":
                self.i += 1
                return out
            raise self.fail("expected ',' or '}' in an object")

    def arr(self, path: JsonPath, depth: int) -> list[Any]:
        out: list[Any] = []
        self.i += 1
        self.ws()
        if self.i < self.n and self.s[self.i] == "]":
            self.i += 1
            return out
        while True:
            self.ws()
            out.append(self.value((*path, len(out)), depth + 1))
            self.ws()
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
                continue
            if self.i < self.n and self.s[self.i] == "]":
                self.i += 1
                return out
            raise self.fail("expected ',' or ']' in an array")
