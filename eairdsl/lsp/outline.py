"""The outline of a buffer: its declarations in order, a record's fields under it."""

from __future__ import annotations

from typing import Any

from lsprotocol import types as T

from eairdsl.lsp.text import lsp_range
from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import parse_text

__all__ = ["document_symbols", "label"]

#: Outline kinds: the closest LSP symbol kind for each declaration (by its `decl` tag).
_SYMBOL_KIND = {
    "world": T.SymbolKind.Module, "import": T.SymbolKind.File, "enum": T.SymbolKind.Enum,
    "schema": T.SymbolKind.Interface, "record": T.SymbolKind.Struct,
    "state": T.SymbolKind.Variable, "document": T.SymbolKind.File,
    "authorization": T.SymbolKind.Object, "policy": T.SymbolKind.Object,
    "lever": T.SymbolKind.Boolean, "condition": T.SymbolKind.Event,
    "inducer": T.SymbolKind.Event, "tool": T.SymbolKind.Function,
    "party": T.SymbolKind.Class, "channel": T.SymbolKind.Operator,
    "instances": T.SymbolKind.Array, "instance": T.SymbolKind.Object,
    "measure": T.SymbolKind.Property, "study_measure": T.SymbolKind.Property,
    "let": T.SymbolKind.Constant, "protected": T.SymbolKind.Key,
}


def label(decl: Any) -> str:
    """How the outline names a declaration: its kind word and its name, when it has one."""
    kind = getattr(decl, "kind", None) if isinstance(decl, A.RecordDecl | A.PartyDecl) else None
    kind = kind or str(getattr(decl, "decl", "declaration")).replace("_", " ")
    name = getattr(decl, "name", None)
    if isinstance(decl, A.ImportDecl):
        name = getattr(decl, "path", None)
    return f"{kind} {name}" if isinstance(name, str) and name else str(kind)


def document_symbols(text: str, name: str) -> list[T.DocumentSymbol]:
    """The module's declarations, in order, with their spans (none when it does not parse)."""
    module, _ = parse_text(text, name)
    if module is None:
        return []
    symbols = []
    for decl in module.decls:
        where = lsp_range(decl.span)
        symbols.append(T.DocumentSymbol(
            name=label(decl), kind=_SYMBOL_KIND.get(decl.decl, T.SymbolKind.Object),
            range=where, selection_range=where, children=_members(decl) or None))
    return symbols


def _members(decl: Any) -> list[T.DocumentSymbol]:
    """A record's fields and groups, nested under it in the outline."""
    if not isinstance(decl, A.RecordDecl):
        return []
    members = []
    for item in decl.items:
        where = lsp_range(item.span)
        grouped = isinstance(item, A.GroupDecl)
        members.append(T.DocumentSymbol(
            name=f"group {item.name}" if grouped else item.name,
            kind=T.SymbolKind.Array if grouped else T.SymbolKind.Field,
            range=where, selection_range=where))
    return members
