"""Semantic tokens: each declared name coloured by what it declares.

The TextMate grammar already colours keywords, strings, numbers and comments by
their shape; what only the compiler knows is what a *name* is: a tool, a lever, a
record, a field, a parameter, a builtin. Those are the tokens served here (the
editor keeps the grammar's colours everywhere else), the declaring occurrence
marked `declaration`, builtins marked `defaultLibrary`.
"""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as T

from eairdsl.lsp.index import ProgramIndex
from eairdsl.lsp.text import Word
from eairdsl.runtime.builtins import BUILTINS

__all__ = ["LEGEND", "semantic_tokens"]

_TYPES = ["namespace", "type", "struct", "enum", "enumMember", "class", "function", "method",
          "variable", "parameter", "property", "event", "interface"]
_MODIFIERS = ["declaration", "readonly", "defaultLibrary"]
LEGEND = T.SemanticTokensLegend(token_types=_TYPES, token_modifiers=_MODIFIERS)

_TYPE_OF = {
    "world": "namespace", "schema": "type", "record": "struct", "table": "struct",
    "ledger": "struct", "enum": "enum", "enum member": "enumMember", "role": "class",
    "actor": "class", "simulator": "class", "tool": "method", "let": "function",
    "lever": "variable", "state": "variable", "document": "variable", "instance": "variable",
    "parameter": "parameter", "field": "property", "group": "property", "measure": "property",
    "metric": "property", "study measure": "property", "condition": "event",
    "inducer": "event", "policy": "interface",
}
_READONLY = frozenset({"lever", "document", "enum member"})


def semantic_tokens(index: ProgramIndex, path: Path) -> list[int]:
    """The LSP's relative encoding (5 integers per token) of the names in `path`."""
    module = index.module_of(path)
    if module is None:
        return []
    data: list[int] = []
    last_line = last_col = 0
    for word in module.words:
        resolved = index.resolve(module, word)
        modifiers = 0
        if resolved:
            kind = _TYPE_OF.get(resolved[0].kind)
            if kind is None:
                continue
            if any(d.word == word and d.path == path for d in resolved):
                modifiers |= 1
            if resolved[0].kind in _READONLY:
                modifiers |= 2
        elif word.name in BUILTINS and not word.dotted and _called(module.lines, word):
            kind, modifiers = "function", 4
        else:
            continue
        delta_line = word.line - last_line
        delta_col = word.col - last_col if delta_line == 0 else word.col
        data.extend((delta_line, delta_col, len(word.name), _TYPES.index(kind), modifiers))
        last_line, last_col = word.line, word.col
    return data


def _called(lines: list[str], word: Word) -> bool:
    """Is a `(` next after the word on its line (a builtin used as a call)?"""
    row = lines[word.line] if word.line < len(lines) else ""
    return row[word.end:].lstrip().startswith("(")
