"""Document links: the files a buffer names become clickable.

`import "…"` opens the module (next to the file or in `stdlib/`); `from "…"` of a
record, table, ledger, document or instance set opens the data file; `card "…"` opens
the role card. Each is resolved as the checker resolves it (`resolve_import`,
`resolve_data_path`: nothing outside the world's folder or the stdlib), and linked
only when the file is there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lsprotocol import types as T

from eairdsl.check.loader import resolve_data_path
from eairdsl.diagnostics import Diagnostics
from eairdsl.lsp.index import ModuleIndex, ProgramIndex
from eairdsl.source import Span
from eairdsl.syntax import ast as A

__all__ = ["document_links"]


def _named(module: ModuleIndex) -> Iterator[tuple[Span, str, Path | None]]:
    """Each path the module writes, where, and the file it resolves to (or None)."""
    imports = {id(decl): target for decl, target in module.imports}
    folder = module.path.parent
    for decl in module.module.decls:
        match decl:
            case A.ImportDecl():
                yield decl.span, decl.path, imports.get(id(decl))
            case A.RecordDecl() | A.DocumentDecl() | A.InstancesDecl() if decl.source:
                yield decl.span, decl.source, resolve_data_path(
                    folder, decl.source, decl.span, Diagnostics())
            case A.PartyDecl():
                for clause in decl.clauses:
                    if isinstance(clause, A.CardClause):
                        yield clause.span, clause.text, resolve_data_path(
                            folder, clause.text, clause.span, Diagnostics())


def document_links(index: ProgramIndex, path: Path) -> list[T.DocumentLink]:
    """A link on the text of each path the buffer names that resolves to a file."""
    module = index.module_of(path)
    if module is None:
        return []
    links = []
    for span, written, target in _named(module):
        if target is None or not target.is_file():
            continue
        quoted = f'"{written}"'
        for line in range(span.line - 1, min(span.end_line, len(module.lines))):
            at = module.lines[line].find(quoted)
            if at >= 0:
                links.append(T.DocumentLink(
                    range=T.Range(start=T.Position(line=line, character=at + 1),
                                  end=T.Position(line=line, character=at + 1 + len(written))),
                    target=target.resolve().as_uri(), tooltip=f"open {written}"))
                break
    return links
