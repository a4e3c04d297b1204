"""Hover: what the word under the cursor is.

A declared name shows its declaration's first line as written (kind, name, type,
default), its doc (a `doc` string or the `//` lines above it) and the module it is
in; a builtin shows its signature and doc from `runtime/builtins.py`; a clause or
declaration keyword shows the one-line doc of its AST class; an `import` shows the
file it resolves to.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import get_args

from eairdsl.lsp.index import Definition, ProgramIndex
from eairdsl.runtime.builtins import BUILTINS, BuiltinDef
from eairdsl.syntax import ast as A

__all__ = ["hover_markdown", "signature", "parameters", "keyword_docs", "describe"]

#: keywords that are written differently from their declaration's `decl` tag
_DECL_WORDS = {"party": ("role", "actor", "simulator"), "record": ("record", "table", "ledger"),
               "channel": ("channel", "delegation", "fork", "merge", "relay"),
               "study_measure": ("study",)}


def parameters(builtin: BuiltinDef) -> list[str]:
    """A builtin's parameters as written in its signature (`name: type`, `optional?: type`)."""
    return [f"{p.name}{'?' if p.optional else ''}: {p.type}" for p in builtin.params]


def signature(builtin: BuiltinDef) -> str:
    """`name(param: type, optional?: type) -> result`, as the hover shows a builtin."""
    return f"{builtin.name}({', '.join(parameters(builtin))}) -> {builtin.result}"


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


@lru_cache(maxsize=1)
def keyword_docs() -> dict[str, list[str]]:
    """Each clause and declaration keyword with the one-line docs of the classes that
    are written with it (`text` is a policy's and an inducer's clause)."""
    docs: dict[str, list[str]] = {}
    for cls in (*A.CLAUSE_CLASSES, *A.STUDY_CLAUSE_CLASSES):
        key = getattr(cls, "key", None)
        if isinstance(key, str):
            docs.setdefault(key, []).append(_first_line(cls.__doc__))
    for cls in get_args(get_args(A.Decl)[0]):
        tag = cls.model_fields["decl"].default
        for word in _DECL_WORDS.get(tag, (tag,)):
            docs.setdefault(word, []).append(_first_line(cls.__doc__))
    return docs


def describe(definition: Definition) -> str:
    """Markdown for one declaration."""
    parts = [f"```eair\n{definition.header}\n```", f"*{definition.label}* — `{definition.module}`"]
    if definition.doc:
        parts.append(definition.doc)
    return "\n\n".join(parts)


def hover_markdown(index: ProgramIndex, path: Path, line: int, col: int) -> str | None:
    """Markdown for the 0-based position of `path` in `index`, or None."""
    target = index.import_at(path, line, col)
    if target is not None:
        imported = index.module_of(target)
        return f"imports `{imported.ref if imported else target.name}`"
    found = index.at(path, line, col)
    if found is None:
        return None
    module, word = found
    resolved = index.resolve(module, word)
    if resolved:
        return "\n\n---\n\n".join(describe(d) for d in resolved)
    builtin = BUILTINS.get(word.name)
    if builtin is not None and not word.dotted:
        return f"```\n{signature(builtin)}\n```\n\n{builtin.doc}"
    docs = keyword_docs().get(word.name)
    if docs and not word.dotted:
        return "\n\n".join(f"`{word.name}`: {doc}" for doc in docs)
    return None
