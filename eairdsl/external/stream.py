"""Reading import sources in bounded memory: JSON values one at a time, whole files capped.

A 200 MB source took 605 MB to import: the file's text, every record parsed from it
and every trace built from them were all held at once. Where a format is a sequence
of records (a JSON list of records, JSON lines), `json_values` parses one record at a
time off a buffer refilled from the file, so memory follows the largest record, not
the file. Where a format is one document (a Who&When or TRAIL trace, an OTLP
document, a ChatDev log), it is read whole, and only up to `MAX_WHOLE_BYTES`; a
larger file is refused with what to do instead.

Errors are `ValueError`s that say where (`line L, column C`) for the caller to
wrap: this module knows files and JSON, not importers.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["MAX_WHOLE_BYTES", "JsonStreamError", "TooLarge", "json_values", "read_whole",
           "sha256_of"]

#: the largest source file read whole (one document); sequences of records are streamed
MAX_WHOLE_BYTES = 64 * 1024 * 1024
#: bytes read from a streamed file at a time
_CHUNK = 1 << 20
_WHITESPACE = " \t\n\r"


class JsonStreamError(ValueError):
    """A streamed JSON source is malformed at `where` (`line L, column C`)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


class TooLarge(ValueError):
    """A source that is read whole is larger than `MAX_WHOLE_BYTES`."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes, over the {limit // (1024 * 1024)} MB read whole")
        self.size = size
        self.limit = limit


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes, read a chunk at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_whole(path: Path, limit: int | None = None) -> str:
    """A one-document source's text (a leading byte-order mark dropped), refused with
    `TooLarge` over `limit` bytes (MAX_WHOLE_BYTES) before anything is read. Raises
    OSError and UnicodeDecodeError as `Path.read_text` does."""
    limit = MAX_WHOLE_BYTES if limit is None else limit
    size = os.stat(path).st_size
    if size > limit:
        raise TooLarge(size, limit)
    return path.read_text(encoding="utf-8-sig")


class _Buffer:
    """A text file decoded a chunk at a time; `text[pos:]` is what is not parsed yet.

    The parsed part is dropped once it is most of the buffer (so the buffer stays about
    as large as the record being parsed), keeping the line and column where the
    buffer starts, for error positions."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()
        self.text = ""
        self.pos = 0
        self.eof = False
        self.line = 1  # of text[0]
        self.col = 1  # of text[0]

    def more(self, at_least: int = 0) -> bool:
        """Read `at_least` more bytes, or a chunk; False at the end of the file."""
        if self.eof:
            return False
        if self.pos > len(self.text) // 2:
            self._drop()
        data = self.handle.read(max(at_least, _CHUNK))
        self.text += self.decoder.decode(data, final=not data)
        if not data:
            self.eof = True
        return bool(data)

    def _drop(self) -> None:
        gone = self.text[:self.pos]
        newlines = gone.count("\n")
        if newlines:
            self.line += newlines
            self.col = len(gone) - gone.rfind("\n")
        else:
            self.col += len(gone)
        self.text = self.text[self.pos:]
        self.pos = 0

    def where(self, pos: int) -> str:
        before = self.text[:pos]
        newlines = before.count("\n")
        if newlines:
            return f"line {self.line + newlines}, column {len(before) - before.rfind(chr(10))}"
        return f"line {self.line}, column {self.col + pos}"

    def peek(self) -> str | None:
        """The next character that is not whitespace (the position moved to it), or None
        at the end of the file."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return None

    def value(self, decoder: json.JSONDecoder, limit: int) -> Any:
        """Parse one JSON value at the position. A value that fails to parse, or that ends
        where the buffer does (a number may go on), is parsed again with twice as much
        text, so a record is parsed O(1) times on average however it falls on chunks; a
        value that needs more than `limit` characters is refused (`JsonStreamError`)."""
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:  # (positions are of the text as it is now)
                    raise JsonStreamError(self.where(exc.pos),
                                          f"not JSON ({exc.msg})") from None
                self._grow(limit)
                continue
            if end == len(self.text) and not self.eof:
                self._grow(limit)
                continue
            if end - self.pos > limit:
                raise self._too_long(limit)
            self.pos = end
            return value

    def _too_long(self, limit: int) -> JsonStreamError:
        return JsonStreamError(self.where(self.pos), f"a record (a list item, a document, "
                               f"a line) over {limit:,} characters: records are read one "
                               "at a time, each whole; split it")

    def _grow(self, limit: int) -> None:
        """Read as much again as the text after the position (or up to the file's end)."""
        pending = len(self.text) - self.pos
        if pending > limit:
            raise self._too_long(limit)
        self.more(pending)


def json_values(path: Path, *, lines: bool, limit: int | None = None) -> Iterator[Any]:
    """The records of a JSON source, one at a time: the items of a top-level list, else
    the one top-level value; with `lines`, also each of several top-level values (JSON
    lines). A record longer than `limit` characters (MAX_WHOLE_BYTES) is refused. Raises
    `JsonStreamError` (located), OSError, UnicodeDecodeError, and RecursionError for
    values nested deeper than the parser can go."""
    limit = MAX_WHOLE_BYTES if limit is None else limit
    decoder = json.JSONDecoder()
    with path.open("rb") as handle:
        buffer = _Buffer(handle)
        first = buffer.peek()
        if first is None:
            raise JsonStreamError("line 1, column 1", "not JSON (Expecting value)")
        if first == "[":
            buffer.pos += 1
            yield from _items(buffer, decoder, limit)
        else:
            yield buffer.value(decoder, limit)
            while lines and buffer.peek() is not None:
                yield buffer.value(decoder, limit)
        if buffer.peek() is not None:
            raise JsonStreamError(buffer.where(buffer.pos), "not JSON (Extra data)")


def _items(buffer: _Buffer, decoder: json.JSONDecoder, limit: int) -> Iterator[Any]:
    """The items of a list whose `[` was just read, through its `]`."""
    if buffer.peek() == "]":
        buffer.pos += 1
        return
    while True:
        if buffer.peek() is None:
            raise JsonStreamError(buffer.where(buffer.pos), "not JSON (Expecting value)")
        yield buffer.value(decoder, limit)
        after = buffer.peek()
        if after == "]":
            buffer.pos += 1
            return
        if after != ",":
            raise JsonStreamError(buffer.where(buffer.pos),
                                  "not JSON (Expecting ',' delimiter)")
        buffer.pos += 1
