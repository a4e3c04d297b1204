"""Source files and spans: where every diagnostic and every AST node points.

Reading a world file is the first place bad input arrives (a directory, a
binary blob, Latin-1 text), so decoding failures become diagnostics here
instead of exceptions further down the pipeline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict

__all__ = ["Span", "SourceFile", "SourceError", "read_source", "read_bounded", "display_name",
           "real_path", "write_source", "write_atomic", "open_atomic", "MAX_SOURCE_BYTES",
           "MAX_DATA_BYTES"]

#: The largest `.eair` file read (real worlds are tens of kilobytes).
MAX_SOURCE_BYTES = 2 * 1024 * 1024
#: The largest data file or document read.
MAX_DATA_BYTES = 50 * 1024 * 1024


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


def real_path(path: Path) -> Path | None:
    """`path` with its symbolic links resolved, or None when they form a loop.

    `Path.resolve` raises RuntimeError on a loop before Python 3.13 (OSError after),
    which reached `eairc check LOOP.eair` as an internal error.
    """
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def display_name(path: Path) -> str:
    """Paths relative to the working directory read better in diagnostics."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):
        return str(path)


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MB"


def read_bounded(path: Path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them, or SourceError.

    Nothing but a regular file is opened for reading (a FIFO would block, a device
    never ends), the check is repeated on the open descriptor so the file cannot be
    swapped in between, and no more than `limit + 1` bytes are ever read.
    """
    name = display_name(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SourceError("E201", f"file not found: {name}",
                          "check the path and its spelling") from None
    except OSError as exc:
        raise SourceError("E202", f"cannot read {name}: {exc.strerror or exc}",
                          _os_hint(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise SourceError("E202", f"{name} is a directory, not a file", f"name the {what} itself")
    if not stat.S_ISREG(info.st_mode):
        raise SourceError("E202", f"{name} is not a regular file (a pipe, socket or device)",
                          f"name an ordinary {what}")
    if info.st_size > limit:
        raise SourceError("E209", f"{name} is too large ({info.st_size:,} bytes; the limit is "
                          f"{_size(limit)})", f"a {what} may hold at most {_size(limit)}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceError("E202", f"cannot read {name}: {exc.strerror or exc}",
                          _os_hint(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SourceError("E202", f"{name} is not a regular file", f"name an ordinary {what}")
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise SourceError("E202", f"cannot read {name}: {exc.strerror or exc}",
                          _os_hint(exc)) from None
    finally:
        os.close(fd)
    if total > limit:  # it grew after the stat
        raise SourceError("E209", f"{name} is too large (over {_size(limit)})",
                          f"a {what} may hold at most {_size(limit)}")
    return b"".join(chunks)


def _os_hint(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "shorten the path: a file name has at most 255 bytes"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "check permissions"
    if exc.errno == errno.ELOOP:
        return "the path goes through a symbolic link loop"
    return "check the path"


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace `path` with `data` (a str as UTF-8) all at once: written to a temporary
    file beside it and renamed over it, so a failed or interrupted write leaves the
    earlier file (or none), never half a file. Makes the parent folders. Raises OSError,
    the temporary file removed, for the caller to word (every output of the project
    that a reader may find half-written goes through here or `open_atomic`)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with open_atomic(path) as fh:
        fh.write(raw)


@contextlib.contextmanager
def open_atomic(path: Path) -> Iterator[BinaryIO]:
    """`write_atomic` for an output written as a stream (an export of any size, never
    whole in memory): the block writes to a temporary file beside `path`, renamed over
    it when the block ends; an error or interrupt in the block removes the temporary
    file and leaves the earlier `path` (or none). Makes the parent folders. Raises
    OSError for the caller to word."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        if not tmp.is_dir():
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise


def write_source(path: Path, text: str) -> None:
    """Replace the file `path` with `text` (UTF-8) all at once, or raise SourceError.

    `eairc fmt` wrote in place: an interrupted or failed write (a full disk) left the
    user's world truncated, and a file it could not write (read-only, immutable) was
    an internal error. The text goes to a temporary file beside the real file (a
    symbolic link is followed, not replaced), keeps the file's permission bits, and
    is renamed over it.
    """
    name = display_name(path)
    target = real_path(path) or path
    tmp = target.with_name(f".{target.name}.fmt-{os.getpid()}")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
        if not os.access(target, os.W_OK):  # a rename would replace a read-only file
            raise PermissionError(errno.EACCES, "the file is read-only")
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise SourceError("E202", f"cannot write {name}: {exc.strerror or exc}",
                          _os_hint(exc)) from None


def read_source(path: Path) -> SourceFile:
    """Read `path` as UTF-8 text or raise SourceError with the offending position."""
    name = display_name(path)
    data = read_bounded(path, MAX_SOURCE_BYTES, ".eair file")
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
