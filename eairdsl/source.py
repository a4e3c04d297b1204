"""Source files and spans: where every diagnostic and every AST node points.

Reading a world file is the first place bad input arrives (a directory, a
binary blob, Latin-1 text), so decoding failures become diagnostics here
instead of exceptions further down the pipeline.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

__all__ = ["Span", "SourceFile", "SourceError", "read_source", "display_name"]


class Span(BaseModel):
    """A region of one source file; lines and columns are 1-based, end exclusive."""

    model_config = ConfigDict(frozen=True)

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    @classmethod
    def point(cls, file: str, line: int = 1, col: int = 1) -> Span:
        return cls(file=file, line=line, col=col, end_line=line, end_col=col + 1)


class SourceFile(BaseModel):
    """A decoded source file. `name` is how diagnostics print it (relative when possible)."""

    name: str
    path: str
    text: str


class SourceError(Exception):
    """A file could not be read as UTF-8 text; carries a diagnostic code and hint."""

    def __init__(self, code: str, message: str, hint: str, line: int = 1, col: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.line = line
        self.col = col


def display_name(path: Path) -> str:
    """Paths relative to the working directory read better in diagnostics."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read_source(path: Path) -> SourceFile:
    """Read `path` as UTF-8 text or raise SourceError with the offending position."""
    name = display_name(path)
    if not path.exists():
        raise SourceError("E201", f"file not found: {name}", "check the path and its spelling")
    if path.is_dir():
        raise SourceError("E202", f"{name} is a directory, not a file", "name a .eair file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError("E202", f"cannot read {name}: {exc.strerror}",
                          "check permissions") from None
    if b"\x00" in data[:8192]:
        raise SourceError(
            "E101", f"{name} looks like a binary file (it contains NUL bytes)",
            "world files are UTF-8 text",
        )
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        line_start = before.rfind(b"\n") + 1
        col = len(data[line_start: exc.start].decode("utf-8", errors="replace")) + 1
        raise SourceError(
            "E102", f"{name} is not valid UTF-8 (byte 0x{data[exc.start]:02x})",
            "re-save the file as UTF-8", line, col,
        ) from None
    return SourceFile(name=name, path=str(path), text=text.replace("\r\n", "\n"))
