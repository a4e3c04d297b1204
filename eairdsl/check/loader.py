"""Import resolution: the world file plus every module it imports, parsed once.

Imports resolve relative to the importing file, then to `stdlib/`. A cycle is
an error (it would make declaration order meaningless), and no import or data
path may escape the folder of the file that names it — worlds are shared and
repaired as self-contained folders.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from eairdsl.diagnostics import Diagnostics
from eairdsl.source import SourceError, SourceFile, Span, display_name, read_source, real_path
from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import parse_source

__all__ = ["LoadedModule", "Program", "load_program", "stdlib_root", "resolve_data_path"]


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
    """Resolve a data/card/import path; paths escaping `base` are errors (E204)."""
    if os.path.isabs(written) or written.startswith("~") or "\x00" in written:
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


def _shown(written: str) -> str:
    """A path as a message quotes it: long ones shortened."""
    return written if len(written) <= 120 else written[:60] + "…" + written[-40:]


#: How deeply imports may nest, and how many modules and source bytes one world may load.
MAX_IMPORT_DEPTH = 64
MAX_MODULES = 500
MAX_PROGRAM_BYTES = 16 * 1024 * 1024


def _read(path: Path, diagnostics: Diagnostics, span: Span | None) -> SourceFile | None:
    try:
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
    imports, so `program.modules` is in dependency order.
    """
    program = Program(entry=entry)
    if sources is not None:
        program.sources = sources
    stdlib = stdlib_root()
    ok = True
    done: set[Path] = set()
    active: list[Path] = []
    loaded_bytes = 0
    seen_files = 0

    def ref_of(path: Path) -> str:
        if _within(path, stdlib):
            return "stdlib/" + path.resolve().relative_to(stdlib.resolve()).as_posix()
        try:
            return path.resolve().relative_to(entry.parent.resolve()).as_posix()
        except (ValueError, OSError):
            return path.name

    @dataclass
    class Open:
        path: Path
        key: Path
        source: SourceFile
        module: A.Module
        imports: list[A.ImportDecl]
        next: int = 0

    def open_module(path: Path, span: Span | None) -> Open | None:
        nonlocal ok, loaded_bytes, seen_files
        key = real_path(path)
        if key is None:
            diagnostics.error("E202", _LOOP.format(display_name(path)), span, _LOOP_HINT)
            ok = False
            return None
        if key in done:
            return None
        if key in active:
            cycle = " -> ".join(ref_of(p) for p in [*active[active.index(key):], key])
            diagnostics.error("E203", f"import cycle: {cycle}", span,
                              "move the shared declarations into a module both can import")
            ok = False
            return None
        if len(active) >= MAX_IMPORT_DEPTH:
            diagnostics.error("E209", f"imports nest more than {MAX_IMPORT_DEPTH} modules deep",
                              span, "import the modules from fewer levels")
            ok = False
            return None
        seen_files += 1
        if seen_files > MAX_MODULES:
            diagnostics.error("E209", f"the world imports more than {MAX_MODULES} modules", span,
                              "merge small modules")
            ok = False
            return None
        source = _read(path, diagnostics, span)
        if source is None:
            ok = False
            return None
        loaded_bytes += len(source.text)
        if loaded_bytes > MAX_PROGRAM_BYTES:
            diagnostics.error("E209", f"the world's modules together hold more than "
                              f"{MAX_PROGRAM_BYTES // (1024 * 1024)} MB", span,
                              "a world is a small program; move bulk text into documents")
            ok = False
            return None
        program.sources[source.name] = source
        module = parse_source(source, diagnostics)
        if module is None:
            ok = False
            return None
        active.append(key)
        imports = [d for d in module.decls if isinstance(d, A.ImportDecl)]
        return Open(path, key, source, module, imports)

    first = open_module(entry, None)
    stack = [first] if first is not None else []
    while stack:
        top = stack[-1]
        if top.next < len(top.imports):
            decl = top.imports[top.next]
            top.next += 1
            target = _resolve_import(top.path, decl, stdlib, diagnostics)
            if target is None:
                ok = False
                continue
            child = open_module(target, decl.span)
            if child is not None:
                stack.append(child)
            continue
        stack.pop()
        active.pop()
        done.add(top.key)
        program.modules.append(LoadedModule(path=top.path, ref=ref_of(top.path),
                                            source=top.source, module=top.module,
                                            is_stdlib=_within(top.path, stdlib)))
    return program if ok else None


def _resolve_import(importer: Path, decl: A.ImportDecl, stdlib: Path,
                    diagnostics: Diagnostics) -> Path | None:
    """The file an import names: next to the importer, else in stdlib/.

    A candidate is only looked at when it lies (symbolic links resolved) inside its
    own root, the importer's folder or the stdlib; nothing outside either is ever
    opened, so neither its content nor its existence can show in a diagnostic.
    """
    written = decl.path
    if os.path.isabs(written) or written.startswith("~") or "\x00" in written:
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
