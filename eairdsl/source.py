"""Source files and spans: where every diagnostic and every AST node points.

Reading a world file is the first place bad input arrives (a directory, a
binary blob, Latin-1 text), so decoding failures become diagnostics here
instead of exceptions further down the pipeline.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from pydantic import BaseModel, ConfigDict

__all__ = ["Span", "SourceFile", "SourceError", "LineIndex", "BadName", "name_problem",
           "read_source", "read_bounded", "display_name", "real_path", "write_source",
           "write_atomic", "open_atomic", "shown_name", "MAX_SOURCE_BYTES", "MAX_DATA_BYTES",
           "MAX_NAME_BYTES", "MAX_PATH_BYTES"]

#: The largest `.eair` file read (real worlds are tens of kilobytes).
MAX_SOURCE_BYTES = 2 * 1024 * 1024
#: The largest data file or document read.
MAX_DATA_BYTES = 50 * 1024 * 1024
#: The longest file name (one component of a path), and the longest path, in UTF-8 bytes,
#: that a world may write (Linux's NAME_MAX and PATH_MAX; most systems allow no more).
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


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


class LineIndex:
    """Where each line of a text starts, so an offset's line and column cost a bisect.

    Counting the newlines before an offset for every diagnostic made locating many
    diagnostics in one large file quadratic; the starts are found once per text.
    """

    def __init__(self, text: str) -> None:
        starts = [0]
        at = text.find("\n")
        while at != -1:
            starts.append(at + 1)
            at = text.find("\n", at + 1)
        self.starts = starts

    def position(self, offset: int) -> tuple[int, int]:
        """The 1-based (line, column) of a 0-based character offset."""
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def span(self, file: str, offset: int, length: int) -> Span:
        """A span of `length` characters from `offset`, on the line where it starts."""
        line, col = self.position(offset)
        return Span(file=file, line=line, col=col, end_line=line, end_col=col + length)


class SourceFile(BaseModel):
    """A decoded source file. `name` is how diagnostics print it (relative when possible)."""

    name: str
    path: str
    text: str


class SourceError(Exception):
    """A file could not be read as UTF-8 text; carries a diagnostic code and hint."""

    def __init__(self, code: str, message: str, hint: str, line: int = 1, col: int = 1,
                 size: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.line = line
        self.col = col
        self.size = size  # of a file too large (E209), in bytes, when known


#: characters no written path may hold: the control characters (Unicode category Cc, NUL
#: included) and lone surrogates (Cs, which no file name can be encoded with)
_UNNAMEABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class BadName(NamedTuple):
    """Why a written path can name no file: the diagnostic's code, message and hint."""

    code: str
    message: str
    hint: str


def name_problem(written: str, what: str = "path") -> BadName | None:
    """Why a path a world writes (a data file, document, card, partial or import) can name
    no file, decided before any file system call: a control character (NUL included) or a
    lone surrogate, which a file name cannot hold portably and which made `os.stat` raise
    (`ValueError`, `UnicodeEncodeError`), or a name over 255 bytes or a path over 4096,
    which made `Path.is_file` raise `OSError`. None when it may name a file."""
    bad = _UNNAMEABLE.search(written)
    if bad is not None:
        char = bad.group(0)
        kind = "a NUL byte" if char == "\x00" else (
            f"the lone surrogate U+{ord(char):04X}" if "\ud800" <= char <= "\udfff"
            else f"the control character U+{ord(char):04X}")
        return BadName("E210", f"{what} {shown_name(written)!r} holds {kind}",
                       "a file name holds no control characters (nor lone surrogates): "
                       "rename the file and write its name as it is")
    for part in written.replace("\\", "/").split("/"):
        size = len(part.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            return BadName("E202", f"cannot read {what} {shown_name(written)!r}: a name in it "
                           f"is {size} bytes long", "shorten the path: a file name has at "
                           f"most {MAX_NAME_BYTES} bytes")
    size = len(written.encode("utf-8"))
    if size > MAX_PATH_BYTES:
        return BadName("E202", f"cannot read {what} {shown_name(written)!r}: the path is "
                       f"{size} bytes long", f"shorten the path: a path has at most "
                       f"{MAX_PATH_BYTES} bytes")
    return None


def shown_name(written: str) -> str:
    """A path as a message quotes it: long ones shortened."""
    return written if len(written) <= 120 else written[:60] + "…" + written[-40:]


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
    except (ValueError, UnicodeError):  # a NUL byte or a lone surrogate in the name
        bad = name_problem(str(path), what)
        raise SourceError("E210", bad.message if bad else f"{name!r} can name no file",
                          bad.hint if bad else "rename the file") from None
    if stat.S_ISDIR(info.st_mode):
        raise SourceError("E202", f"{name} is a directory, not a file", f"name the {what} itself")
    if not stat.S_ISREG(info.st_mode):
        raise SourceError("E202", f"{name} is not a regular file (a pipe, socket or device)",
                          f"name an ordinary {what}")
    if info.st_size > limit:
        raise SourceError("E209", f"{name} is too large ({info.st_size:,} bytes; the limit is "
                          f"{_size(limit)})", f"a {what} may hold at most {_size(limit)}",
                          size=info.st_size)
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
                          f"a {what} may hold at most {_size(limit)}", size=total)
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
