"""Import resolution: the world file plus every module it imports, parsed once.

Imports resolve relative to the importing file, then to `stdlib/`. A cycle is
an error (it would make declaration order meaningless), and no import or data
path may escape the folder of the file that names it — worlds are shared and
repaired as self-contained folders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from eairdsl.diagnostics import Diagnostics
from eairdsl.source import SourceError, SourceFile, Span, read_source
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
    try:
        child.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def resolve_data_path(base: Path, written: str, span: Span,
                      diagnostics: Diagnostics) -> Path | None:
    """Resolve a data/card/import path; paths escaping `base` are errors (E204)."""
    if os.path.isabs(written) or written.startswith("~"):
        diagnostics.error("E204", f"path {written!r} is absolute", span,
                          "write paths relative to the world's folder")
        return None
    path = base / written
    if not _within(path, base):
        diagnostics.error("E204", f"path {written!r} escapes the world's folder", span,
                          "keep data, cards and imports inside the folder of the .eair file")
        return None
    return path


def _read(path: Path, diagnostics: Diagnostics, span: Span | None) -> SourceFile | None:
    try:
        return read_source(path)
    except SourceError as err:
        where = span
        if err.code in ("E101", "E102"):
            where = Span(file=str(path), line=err.line, col=err.col, end_line=err.line,
                         end_col=err.col + 1)
        diagnostics.error(err.code, err.message, where, err.hint)
        return None


def load_program(entry: Path, diagnostics: Diagnostics,
                 sources: dict[str, SourceFile] | None = None) -> Program | None:
    """Load and parse `entry` and its imports; None if any file could not be parsed."""
    program = Program(entry=entry)
    if sources is not None:
        program.sources = sources
    stdlib = stdlib_root()
    ok = True
    done: set[Path] = set()
    active: list[Path] = []

    def ref_of(path: Path) -> str:
        if _within(path, stdlib):
            return "stdlib/" + path.resolve().relative_to(stdlib.resolve()).as_posix()
        try:
            return path.resolve().relative_to(entry.parent.resolve()).as_posix()
        except ValueError:
            return path.name

    def visit(path: Path, span: Span | None) -> None:
        nonlocal ok
        key = path.resolve()
        if key in done:
            return
        if key in active:
            cycle = " -> ".join(ref_of(p) for p in [*active[active.index(key):], key])
            diagnostics.error("E203", f"import cycle: {cycle}", span,
                              "move the shared declarations into a module both can import")
            ok = False
            return
        source = _read(path, diagnostics, span)
        if source is None:
            ok = False
            return
        program.sources[source.name] = source
        module = parse_source(source, diagnostics)
        if module is None:
            ok = False
            return
        active.append(key)
        for decl in module.decls:
            if isinstance(decl, A.ImportDecl):
                target = _resolve_import(path, decl, stdlib, diagnostics)
                if target is None:
                    ok = False
                    continue
                visit(target, decl.span)
        active.pop()
        done.add(key)
        program.modules.append(LoadedModule(path=path, ref=ref_of(path), source=source,
                                            module=module, is_stdlib=_within(path, stdlib)))

    visit(entry, None)
    return program if ok else None


def _resolve_import(importer: Path, decl: A.ImportDecl, stdlib: Path,
                    diagnostics: Diagnostics) -> Path | None:
    written = decl.path
    if os.path.isabs(written):
        diagnostics.error("E204", f"import path {written!r} is absolute", decl.span,
                          "import by a path relative to this file, or a stdlib module")
        return None
    local = importer.parent / written
    candidates = [local]
    if written.startswith("stdlib/"):
        candidates.append(stdlib / written[len("stdlib/"):])
    candidates.append(stdlib / written)
    for candidate in candidates:
        if candidate.is_file():
            if candidate is local and not _within(candidate, importer.parent):
                diagnostics.error("E204", f"import {written!r} escapes the world's folder",
                                  decl.span, "import modules from this folder or stdlib/")
                return None
            return candidate
    known = sorted(p.name for p in stdlib.glob("*.eair")) if stdlib.is_dir() else []
    diagnostics.error("E205", f"cannot find module {written!r}", decl.span,
                      f"looked next to this file and in stdlib/ ({', '.join(known)})"
                      if known else "looked next to this file and in stdlib/")
    return None
