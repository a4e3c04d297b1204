"""Import resolution: the world file plus every module it imports, parsed once.

Imports resolve relative to the importing file, then to `stdlib/`. A cycle is
an error (it would make declaration order meaningless), and no import or data
path may escape the folder of the file that names it — worlds are shared and
repaired as self-contained folders.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from eairdsl.diagnostics import Diagnostics
from eairdsl.source import (
    MAX_SOURCE_BYTES,
    SourceError,
    SourceFile,
    Span,
    display_name,
    name_problem,
    read_source,
    real_path,
    shown_name,
)
from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import parse_source

__all__ = ["LoadedModule", "Program", "load_program", "stdlib_root", "resolve_data_path",
           "source_overlay", "resolve_import", "overlay_bytes", "module_ref"]


def stdlib_root() -> Path:
    """`eairdsl/stdlib/`, shipped inside the package (overridable with EAIR_STDLIB)."""
    env = os.environ.get("EAIR_STDLIB")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "stdlib"


@dataclass
class LoadedModule:
    """A parsed module with where it came from (`ref` is its stable, machine-independent name)."""

    path: Path
    ref: str
    source: SourceFile
    module: A.Module
    is_stdlib: bool


@dataclass
class Program:
    """The entry module and its imports, in dependency order (imports first)."""

    entry: Path
    modules: list[LoadedModule] = field(default_factory=list)
    sources: dict[str, SourceFile] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.entry.parent

    def decls(self) -> list[tuple[LoadedModule, A.Decl]]:
        return [(m, d) for m in self.modules for d in m.module.decls]


def _within(child: Path, parent: Path) -> bool:
    """Is `child`, symbolic links resolved, inside `parent`? (False when it cannot be told.)"""
    try:
        child.resolve().relative_to(parent.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def resolve_data_path(base: Path, written: str, span: Span,
                      diagnostics: Diagnostics) -> Path | None:
    """Resolve a data/card/import path; paths escaping `base` are errors (E204), names no
    file can have (a control character, a name over 255 bytes) are E210 and E202."""
    bad = name_problem(written)
    if bad is not None:
        diagnostics.error(bad.code, bad.message, span, bad.hint)
        return None
    if os.path.isabs(written) or written.startswith("~"):
        diagnostics.error("E204", f"path {_shown(written)!r} is absolute", span,
                          "write paths relative to the world's folder")
        return None
    path = base / written
    if real_path(path) is None:
        diagnostics.error("E202", _LOOP.format(_shown(written)), span, _LOOP_HINT)
        return None
    if not _within(path, base):
        diagnostics.error("E204", f"path {_shown(written)!r} escapes the world's folder", span,
                          "keep data, cards and imports inside the folder of the .eair file")
        return None
    return path


_LOOP = "cannot read {!r}: its symbolic links form a loop"
_LOOP_HINT = "point the link at a real file"


_shown = shown_name


#: How deeply imports may nest, and how many modules and source bytes one world may load.
MAX_IMPORT_DEPTH = 64
MAX_MODULES = 500
MAX_PROGRAM_BYTES = 16 * 1024 * 1024


#: Texts that stand in for files on disk, by resolved path (`source_overlay`).
_OVERLAY: ContextVar[Mapping[Path, str] | None] = ContextVar("eair_source_overlay", default=None)


@contextmanager
def source_overlay(texts: Mapping[Path, str]) -> Iterator[None]:
    """Within the block, the modules at these paths are read from `texts`, not the disk.

    A language server checks the buffer an editor holds, which is often unsaved;
    writing it to a file beside the user's would touch their folder. Imports and
    data files still resolve relative to the path, as they will once it is saved.
    """
    resolved = {p.resolve(): text for p, text in texts.items()}
    token = _OVERLAY.set(resolved)
    try:
        yield
    finally:
        _OVERLAY.reset(token)


def _overlaid(path: Path) -> SourceFile | None:
    """The overlay's text for `path` as `read_source` would decode it (None when it has
    none), refused with the same SourceError a file on disk would be (too large, NUL)."""
    texts = _OVERLAY.get()
    if not texts:
        return None
    key = real_path(path)
    text = texts.get(key) if key is not None else None
    if text is None:
        return None
    name = display_name(path)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:  # as read_source refuses the file on disk
        limit = f"{MAX_SOURCE_BYTES // (1024 * 1024)} MB"
        raise SourceError("E209", f"{name} is too large ({size:,} bytes; the limit is {limit})",
                          f"a .eair file may hold at most {limit}")
    if "\x00" in text[:8192]:
        raise SourceError("E101", f"{name} looks like a binary file (it contains NUL bytes)",
                          "world files are UTF-8 text")
    return SourceFile(name=name, path=str(path),
                      text=text.removeprefix("\ufeff").replace("\r\n", "\n"))


def module_ref(path: Path, entry: Path, stdlib: Path) -> str:
    """A module's stable name: `stdlib/...`, else relative to the entry's folder."""
    if _within(path, stdlib):
        return "stdlib/" + path.resolve().relative_to(stdlib.resolve()).as_posix()
    try:
        return path.resolve().relative_to(entry.parent.resolve()).as_posix()
    except (ValueError, OSError):
        return path.name


def overlay_bytes(path: Path) -> bytes | None:
    """The overlay's text for another file a world names (a card, a data file), as the
    UTF-8 bytes the file would hold once saved; None when the overlay has none."""
    texts = _OVERLAY.get()
    if not texts:
        return None
    key = real_path(path)
    text = texts.get(key) if key is not None else None
    return None if text is None else text.encode("utf-8", "surrogatepass")


def _read(path: Path, diagnostics: Diagnostics, span: Span | None) -> SourceFile | None:
    try:
        overlaid = _overlaid(path)
        if overlaid is not None:
            return overlaid
        return read_source(path)
    except SourceError as err:
        where = span
        if err.code in ("E101", "E102"):
            where = Span(file=display_name(path), line=err.line, col=err.col,
                         end_line=err.line, end_col=err.col + 1)
        diagnostics.error(err.code, err.message, where, err.hint)
        return None


def load_program(entry: Path, diagnostics: Diagnostics,
                 sources: dict[str, SourceFile] | None = None) -> Program | None:
    """Load and parse `entry` and its imports; None if any file could not be parsed.

    A depth-first walk with an explicit stack (an import chain is input, so its
    length must not become Python recursion); modules are appended after their
    imports, so `program.modules` is in dependency order. The walk's state (what
    is open, done, counted against the limits) lives in a `_Loader`.
    """
    program = Program(entry=entry)
    if sources is not None:
        program.sources = sources
    loader = _Loader(program, diagnostics, stdlib_root())
    loader.walk()
    return program if loader.ok else None


@dataclass
class _Open:
    """A module being loaded: parsed, its imports followed one at a time (`next`)."""

    path: Path
    key: Path
    source: SourceFile
    module: A.Module
    imports: list[A.ImportDecl]
    next: int = 0


@dataclass
class _Loader:
    """One `load_program` walk: the modules open on the import chain (`active`, to tell
    a cycle), those done, and the running counts the limits are checked against; `ok`
    turns False at the first error, though the walk goes on to report the others."""

    program: Program
    diagnostics: Diagnostics
    stdlib: Path
    ok: bool = True
    done: set[Path] = field(default_factory=set)
    active: list[Path] = field(default_factory=list)
    loaded_bytes: int = 0
    seen_files: int = 0

    def walk(self) -> None:
        """Depth first from the entry: each module is appended once its imports are."""
        first = self.open_module(self.program.entry, None)
        stack = [first] if first is not None else []
        while stack:
            top = stack[-1]
            if top.next < len(top.imports):
                decl = top.imports[top.next]
                top.next += 1
                target = resolve_import(top.path, decl, self.stdlib, self.diagnostics)
                if target is None:
                    self.ok = False
                    continue
                child = self.open_module(target, decl.span)
                if child is not None:
                    stack.append(child)
                continue
            stack.pop()
            self.active.pop()
            self.done.add(top.key)
            self.program.modules.append(LoadedModule(
                path=top.path, ref=self.ref_of(top.path), source=top.source,
                module=top.module, is_stdlib=_within(top.path, self.stdlib)))

    def ref_of(self, path: Path) -> str:
        return module_ref(path, self.program.entry, self.stdlib)

    def open_module(self, path: Path, span: Span | None) -> _Open | None:
        """Read and parse a module the chain reaches, unless it is done already or
        refused (a link loop, a cycle, a limit, unreadable, unparsable: reported)."""
        key = real_path(path)
        if key is None:
            self._fail("E202", _LOOP.format(display_name(path)), span, _LOOP_HINT)
            return None
        if key in self.done:
            return None
        refused = self._refused(key, span)
        if refused:
            self._fail(*refused)
            return None
        source = _read(path, self.diagnostics, span)
        if source is None:
            self.ok = False
            return None
        self.loaded_bytes += len(source.text)
        if self.loaded_bytes > MAX_PROGRAM_BYTES:
            self._fail("E209", f"the world's modules together hold more than "
                       f"{MAX_PROGRAM_BYTES // (1024 * 1024)} MB", span,
                       "a world is a small program; move bulk text into documents")
            return None
        self.program.sources[source.name] = source
        module = parse_source(source, self.diagnostics)
        if module is None:
            self.ok = False
            return None
        self.active.append(key)
        imports = [d for d in module.decls if isinstance(d, A.ImportDecl)]
        return _Open(path, key, source, module, imports)

    def _refused(self, key: Path,
                 span: Span | None) -> tuple[str, str, Span | None, str] | None:
        """Why a module may not be opened before it is read (a cycle, nesting too deep,
        too many modules), as the error's code, message, span and hint; None if it may.
        A module that passes counts against the number of modules."""
        if key in self.active:
            cycle = " -> ".join(self.ref_of(p)
                                for p in [*self.active[self.active.index(key):], key])
            return ("E203", f"import cycle: {cycle}", span,
                    "move the shared declarations into a module both can import")
        if len(self.active) >= MAX_IMPORT_DEPTH:
            return ("E209", f"imports nest more than {MAX_IMPORT_DEPTH} modules deep", span,
                    "import the modules from fewer levels")
        self.seen_files += 1
        if self.seen_files > MAX_MODULES:
            return ("E209", f"the world imports more than {MAX_MODULES} modules", span,
                    "merge small modules")
        return None

    def _fail(self, code: str, message: str, span: Span | None, hint: str) -> None:
        """Report the error; the program is not returned."""
        self.diagnostics.error(code, message, span, hint)
        self.ok = False


def resolve_import(importer: Path, decl: A.ImportDecl, stdlib: Path,
                    diagnostics: Diagnostics) -> Path | None:
    """The file an import names: next to the importer, else in stdlib/.

    A candidate is only looked at when it lies (symbolic links resolved) inside its
    own root, the importer's folder or the stdlib; nothing outside either is ever
    opened, so neither its content nor its existence can show in a diagnostic.
    """
    written = decl.path
    bad = name_problem(written, "import path")
    if bad is not None:
        diagnostics.error(bad.code, bad.message, decl.span, bad.hint)
        return None
    if os.path.isabs(written) or written.startswith("~"):
        diagnostics.error("E204", f"import path {_shown(written)!r} is absolute", decl.span,
                          "import by a path relative to this file, or a stdlib module")
        return None
    candidates = [(importer.parent / written, importer.parent)]
    if written.startswith("stdlib/"):
        candidates.append((stdlib / written[len("stdlib/"):], stdlib))
    candidates.append((stdlib / written, stdlib))
    escaped = looped = False
    failure: OSError | None = None
    for candidate, root in candidates:
        if real_path(candidate) is None:
            looped = True
            continue
        if not _within(candidate, root):
            escaped = True
            continue
        try:
            if candidate.exists():  # a directory or a pipe is E202 when read, not E205
                return candidate
        except OSError as exc:  # a name over 255 bytes, a path over PATH_MAX...
            failure = failure or exc
    if looped:
        diagnostics.error("E202", _LOOP.format(_shown(written)), decl.span, _LOOP_HINT)
        return None
    if escaped:
        diagnostics.error("E204", f"import {_shown(written)!r} escapes the world's folder",
                          decl.span, "import modules from this folder or stdlib/")
        return None
    if failure is not None:
        diagnostics.error("E202", f"cannot read module {_shown(written)!r}: "
                          f"{failure.strerror or failure}", decl.span,
                          "shorten the path: a file name has at most 255 bytes"
                          if failure.errno == errno.ENAMETOOLONG else "check the path")
        return None
    try:
        known = sorted(p.name for p in stdlib.glob("*.eair")) if stdlib.is_dir() else []
    except OSError:
        known = []
    diagnostics.error("E205", f"cannot find module {_shown(written)!r}", decl.span,
                      f"looked next to this file and in stdlib/ ({', '.join(known)})"
                      if known else "looked next to this file and in stdlib/")
    return None
