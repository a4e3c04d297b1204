"""Completion: what may be written at the cursor.

The context is read from the text before the cursor (the buffer is usually half
typed and does not parse), the names from the tolerant index:

- after `obj.`: the fields and groups of obj's record (or of the record a bound
  variable ranges over), else every field;
- first word of a line at the top level: the declaration keywords; inside a block:
  the clause keywords that block takes (the checker's own tables), the levers of a
  `condition`, the fields of an `instance`;
- after a clause keyword that names a declaration (`tools`, `roles`, `on`, `ensure`,
  `append`, `set`, `source`, `extends`, `route`): the declarations of that kind;
- inside the string of an `import`, `from` or `card`: the modules, data files or cards
  the world's folder holds (and the stdlib's modules);
- anywhere else in an expression: the declared names in scope, the builtins and the
  word operators and constants.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import get_args

from lsprotocol import types as T

from eairdsl.check.builtins import BUILTIN_FIELDS
from eairdsl.check.loader import stdlib_root
from eairdsl.check.references import INDUCER_CLAUSES, PARTY_CLAUSES
from eairdsl.check.types import SCALARS
from eairdsl.lsp.hover import describe, signature
from eairdsl.lsp.index import Definition, ProgramIndex
from eairdsl.lsp.text import Word, line_prefix
from eairdsl.runtime.builtins import BUILTINS
from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import TOP_LEVEL_KEYWORDS
from eairdsl.syntax.textmate import grammar_keywords
from eairdsl.vocabulary import (
    CLOCK_UNITS,
    EXPECTATIONS,
    INDUCER_KINDS,
    MEASUREMENTS,
    MODEL_BINDINGS,
    RISKS,
    TOOL_KINDS,
    TRAITS,
)

__all__ = ["completions"]

_KIND = {
    "record": T.CompletionItemKind.Struct, "table": T.CompletionItemKind.Struct,
    "ledger": T.CompletionItemKind.Struct, "schema": T.CompletionItemKind.Interface,
    "enum": T.CompletionItemKind.Enum, "enum member": T.CompletionItemKind.EnumMember,
    "field": T.CompletionItemKind.Field, "group": T.CompletionItemKind.Field,
    "tool": T.CompletionItemKind.Method, "let": T.CompletionItemKind.Function,
    "lever": T.CompletionItemKind.Variable, "state": T.CompletionItemKind.Variable,
    "parameter": T.CompletionItemKind.Variable, "role": T.CompletionItemKind.Class,
    "actor": T.CompletionItemKind.Class, "simulator": T.CompletionItemKind.Class,
    "condition": T.CompletionItemKind.Event, "inducer": T.CompletionItemKind.Event,
    "policy": T.CompletionItemKind.Reference, "document": T.CompletionItemKind.File,
}

#: the clause keywords of each block, by the word the block starts with
_BLOCK_CLAUSES: dict[str, tuple[type[A.ClauseNode], ...]] = {
    "world": get_args(get_args(A.WorldClause)[0]),
    "policy": get_args(get_args(A.PolicyClause)[0]),
    "tool": get_args(get_args(A.ToolClause)[0]),
    **PARTY_CLAUSES,
}
_PARTIES = ("role", "actor", "simulator")
#: clause keywords followed by the name of a declaration of these kinds
_NAMES_AFTER: dict[str, tuple[str, ...]] = {
    "tools": ("tool",), "on": ("tool",), "roles": _PARTIES, "from": _PARTIES,
    "delegates": _PARTIES, "ensure": ("policy",), "append": ("ledger",), "set": ("state",),
    "source": ("document",), "extends": ("condition",), "route": ("tool", *_PARTIES),
    "allow": _PARTIES, "deny": _PARTIES,
}
_VALUE_KINDS = ("lever", "state", "let", "parameter", "enum member", "record", "table",
                "ledger", "document")
#: the scalar types a declaration may name (the checker's), and `list[...]`
_TYPE_NAMES = (*sorted(k for k in SCALARS if k not in ("row", "fields", "any")), "list")
#: after a name and `:` in a field list, parameter list, lever or state, or after `->`
_TYPE_AT = re.compile(
    r"(?:^\s*(?:(?:lever|state)\s+)?|[(,]\s*)[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*:\s*"
    r"(?:list\[)?[A-Za-z_]*$|->\s*(?:list\[)?[A-Za-z_]*$")
#: clause keywords followed by a word of a closed vocabulary
_VOCABULARY_AFTER: dict[str, tuple[str, ...]] = {
    "model": MODEL_BINDINGS, "risk": tuple(RISKS), "clock": CLOCK_UNITS, "shift": TRAITS,
    "trait": TRAITS,
}
_VOCABULARY_AT = re.compile(r"^\s*(model|risk|clock|shift|trait)\s+[A-Za-z_0-9]*$")
#: names every expression may read that no declaration declares
_PROVIDED = {"instance": "the task instance (its fields: `instance.`)",
             "context": "a tool call's context (`context.caller`, `.principal`, ...)"}
#: the keywords a line of these blocks starts with (their other lines declare names)
_LINE_WORDS: dict[str, tuple[str, ...]] = {
    "record": ("group",), "table": ("group",), "ledger": ("group",),
    "authorization": ("allow", "deny"),
}
_GROUP_AT = re.compile(r"^\s+group\s+[A-Za-z_]\w*\s*=\s*(?:[A-Za-z_]\w*\s*,\s*)*[A-Za-z_]*$")
_FIELD_LINE = re.compile(r"^\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*:")
_INDUCER_KIND_AT = re.compile(r"^inducer\s+[A-Za-z_]\w*\s*:\s*[a-z_]*$")
_EXPECT_AT = re.compile(r"^\s*expect\s+(?:([a-z_]+)\s+)?[a-z_]*$")
#: a value after a declaration's own closed set: `lever l : {a, b} = a`
_INLINE_ENUM_AT = re.compile(r":\s*\{([^{}]*)\}\s*=\s*[A-Za-z_]*$")
_HEADER = re.compile(r"^(?:tool|let)\s+[A-Za-z_]\w*\s*\(([^)]*)")
_PATH_AFTER = re.compile(r'\b(import|from|card)\s+"([^"]*)$')
#: what each string names: modules, data files (docs/language.md's formats), cards
_PATH_SUFFIXES = {"import": (".eair",), "from": (".json", ".csv", ".md", ".txt"),
                  "card": (".j2",)}
#: directory entries looked at, at most, for one path completion
_MAX_PATHS = 2000
_AFTER_DOT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)?\s*\.\s*[A-Za-z_0-9]*$")
_LIST_AFTER = re.compile(r"^\s*(?:\w+\s+)*?(\w+)\s+(?:[A-Za-z_]\w*\s*,\s*)*[A-Za-z_0-9]*$")
_TOP_WORD = re.compile(r"^([A-Za-z_]+)\b[^:\n]*?(?::\s*([A-Za-z_]+))?")


def _item(label: str, kind: T.CompletionItemKind, detail: str | None = None,
          doc: str | None = None) -> T.CompletionItem:
    return T.CompletionItem(
        label=label, kind=kind, detail=detail,
        documentation=T.MarkupContent(kind=T.MarkupKind.Markdown, value=doc) if doc else None)


def _of(definition: Definition) -> T.CompletionItem:
    return _item(definition.name, _KIND.get(definition.kind, T.CompletionItemKind.Text),
                 definition.label, describe(definition))


def _unique(items: list[T.CompletionItem]) -> list[T.CompletionItem]:
    seen: set[str] = set()
    kept = []
    for item in items:
        if item.label not in seen:
            seen.add(item.label)
            kept.append(item)
    return kept


def _block(lines: list[str], line: int) -> tuple[str, str | None] | None:
    """The top-level block the cursor's line is in: its first word and, for `inducer X:
    kind`, the kind. None at the top level (after a closing `}` at column 0)."""
    for row in reversed(lines[:line]):
        if not row.strip() or row.lstrip().startswith("//"):
            continue
        if row[:1].isspace():
            continue
        if row.startswith("}"):
            return None
        match = _TOP_WORD.match(row)
        if match is None:
            return None
        return match.group(1), match.group(2)
    return None


def _keywords(block: tuple[str, str | None]) -> list[str]:
    first, kind = block
    if first == "inducer":
        allowed = INDUCER_CLAUSES.get(kind or "", ())
        if not allowed:
            allowed = tuple({c for v in INDUCER_CLAUSES.values() for c in v})
    else:
        allowed = _BLOCK_CLAUSES.get(first, ())
    return sorted({cls.key for cls in allowed})


def completions(index: ProgramIndex, text: str, line: int, col: int) -> list[T.CompletionItem]:
    """What may be written at the 0-based position (line, col) of the buffer `text`."""
    prefix = line_prefix(text, line, col)
    lines = text.split("\n")
    quoted = _PATH_AFTER.search(prefix)
    if quoted is not None:
        return _paths(index.entry, quoted.group(1), quoted.group(2), line, col)
    dotted = _AFTER_DOT.search(prefix)
    if dotted is not None:
        return _fields(index, line, col, dotted.group(1))
    if re.fullmatch(r"\s*[A-Za-z_]*", prefix):
        block = _block(lines, line) if prefix[:1].isspace() else None
        if block is None:
            return [_item(k, T.CompletionItemKind.Keyword) for k in TOP_LEVEL_KEYWORDS]
        return _in_block(index, block)
    listed = _LIST_AFTER.match(prefix)
    if listed is not None and listed.group(1) in _NAMES_AFTER:
        kinds = _NAMES_AFTER[listed.group(1)]
        return _unique([_of(d) for d in index.definitions()
                        if d.kind in kinds and d.container is None])
    if re.search(r"\belse\s+[a-z]*$", prefix):
        return [_item(k, T.CompletionItemKind.Keyword) for k in ("reject", "route")]
    if re.search(r"^\s*kind\s+[a-z_]*$", prefix):
        block = _block(lines, line)
        vocabulary = INDUCER_KINDS if block is not None and block[0] == "inducer" else TOOL_KINDS
        return [_item(k, T.CompletionItemKind.EnumMember) for k in sorted(vocabulary)]
    if _INDUCER_KIND_AT.search(prefix):
        return [_item(k, T.CompletionItemKind.EnumMember) for k in sorted(INDUCER_KINDS)]
    expecting = _EXPECT_AT.search(prefix)
    if expecting is not None:
        subject = expecting.group(1)
        words = EXPECTATIONS.get(subject, ()) if subject else tuple(EXPECTATIONS)
        return [_item(k, T.CompletionItemKind.EnumMember) for k in words]
    if _GROUP_AT.search(prefix):
        return [_item(name, T.CompletionItemKind.Field) for name in _block_fields(lines, line)]
    inline = _INLINE_ENUM_AT.search(prefix)
    if inline is not None:
        return [_item(m.strip(), T.CompletionItemKind.EnumMember)
                for m in inline.group(1).split(",") if m.strip()]
    said = _VOCABULARY_AT.search(prefix)
    if said is not None:
        return [_item(k, T.CompletionItemKind.EnumMember)
                for k in sorted(_VOCABULARY_AFTER[said.group(1)])]
    if _TYPE_AT.search(prefix):
        return _types(index)
    return _expression(index, lines, line, col)


def _types(index: ProgramIndex) -> list[T.CompletionItem]:
    """What a field, parameter, lever or state may be declared as: the scalar types,
    `list[...]`, and the world's records, schemas and enums."""
    items = [_item(name, T.CompletionItemKind.TypeParameter) for name in _TYPE_NAMES]
    items.extend(_of(d) for d in index.definitions()
                 if d.kind in ("record", "table", "ledger", "schema", "enum")
                 and d.container is None)
    return _unique(items)


def _paths(path: Path, keyword: str, typed: str, line: int,
           col: int) -> list[T.CompletionItem]:
    """The files an `import`, `from` or `card` string may name: modules next to the file
    and in the stdlib, data files or cards under the file's folder (names only, nothing
    read, links not followed, at most `_MAX_PATHS` looked at)."""
    folder = path.parent
    suffixes = _PATH_SUFFIXES[keyword]
    found: list[str] = []
    seen = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        depth = Path(root).relative_to(folder).parts
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if len(depth) < 3 else []
        for name in sorted(files):
            seen += 1
            full = Path(root) / name
            if name.endswith(suffixes) and full != path:
                found.append(full.relative_to(folder).as_posix())
        if seen > _MAX_PATHS:
            break
    if keyword == "import":
        found += [f"stdlib/{p.name}" for p in sorted(stdlib_root().glob("*.eair"))]
    start = T.Position(line=line, character=col - len(typed))
    where = T.Range(start=start, end=T.Position(line=line, character=col))
    return [T.CompletionItem(label=name, kind=T.CompletionItemKind.File,
                             text_edit=T.TextEdit(range=where, new_text=name))
            for name in found if name.startswith(typed)]


def _in_block(index: ProgramIndex, block: tuple[str, str | None]) -> list[T.CompletionItem]:
    first = block[0]
    if first in _LINE_WORDS:
        return [_item(k, T.CompletionItemKind.Keyword) for k in _LINE_WORDS[first]]
    if first == "measure":
        return [_item(k, T.CompletionItemKind.Property) for k in MEASUREMENTS] + [
            _item("metric", T.CompletionItemKind.Keyword)]
    if first == "condition":
        return _unique([_of(d) for d in index.definitions() if d.kind == "lever"]
                       + [_item("expect", T.CompletionItemKind.Keyword)])
    if first == "instance":
        return _unique([_of(d) for d in index.definitions()
                        if d.kind == "field" and d.container == "instances"])
    return [_item(k, T.CompletionItemKind.Keyword) for k in _keywords(block)]


def _fields(index: ProgramIndex, line: int, col: int,
            obj: str | None) -> list[T.CompletionItem]:
    fields = [d for d in index.definitions() if d.kind in ("field", "group")]
    if obj in BUILTIN_FIELDS:  # `context.` and the other records the language provides
        return [_item(name, T.CompletionItemKind.Field, str(kind))
                for name, kind in BUILTIN_FIELDS[obj].items()]
    if obj == "instance":
        mine = [d for d in fields if d.container == "instances"]
        if mine:
            return _unique([_of(d) for d in mine])
    if obj is not None:
        main = index.main
        probe = Word(name="_", line=line, col=col, dotted=True, obj=obj)
        owner = obj if index.top_level(obj) else None
        if owner is None and main is not None:
            from_index = index.field_of(main, probe, fields)  # a variable bound over a record
            own = {d.container for d in from_index}
            owner = own.pop() if len(own) == 1 and len(from_index) < len(fields) else None
        mine = [d for d in fields if d.container == owner] if owner else []
        if mine:
            return _unique([_of(d) for d in mine])
    return _unique([_of(d) for d in fields])


def _expression(index: ProgramIndex, lines: list[str], line: int,
                col: int) -> list[T.CompletionItem]:
    """Names an expression may use, nearest first: the parameters of the tool or `let`
    the cursor is in (read from its first line when the block does not parse yet), the
    variables bound before the cursor, the declarations that are values, the
    participants, the builtin names and functions, then the language's words."""
    items: list[T.CompletionItem] = []
    main = index.main
    scoped = False
    if main is not None:
        for span, params in main.scopes:
            if span.line - 1 <= line < span.end_line:
                items.extend(_of(d) for d in params.values())
                scoped = True
    if not scoped:
        items.extend(_item(name, T.CompletionItemKind.Variable, "parameter")
                     for name in _header_params(lines, line))
    items.extend(_item(name, T.CompletionItemKind.Variable, "bound variable")
                 for name in _bound_names(lines, line, col))
    items.extend(_of(d) for d in index.definitions()
                 if d.kind in _VALUE_KINDS and d.kind != "parameter")
    items.extend(_of(d) for d in index.definitions() if d.kind in _PARTIES)
    items.extend(_item(name, T.CompletionItemKind.Variable, doc)
                 for name, doc in _PROVIDED.items())
    items.extend(_item(b.name, T.CompletionItemKind.Function, signature(b), b.doc)
                 for b in BUILTINS.values())
    words = grammar_keywords()
    items.extend(_item(w, T.CompletionItemKind.Keyword)
                 for w in (*words["operators"], *words["constants"], *words["keywords"]))
    kept = _unique(items)
    for rank, item in enumerate(kept):  # the editor keeps this order among equal matches
        item.sort_text = f"{rank:05d}"
    return kept


def _block_fields(lines: list[str], line: int) -> list[str]:
    """The fields declared so far in the record block the cursor's line is in (`name:`
    and `a, b:` lines), for a `group` being written before the block parses."""
    found: list[str] = []
    for row in reversed(lines[:line]):
        if not row[:1].isspace():
            break
        match = _FIELD_LINE.match(row)
        if match is not None:
            found[:0] = [n.strip() for n in match.group(1).split(",")]
    return list(dict.fromkeys(found))


def _header_params(lines: list[str], line: int) -> list[str]:
    """The parameter names on the first line of the tool or `let` block the cursor's line
    is in (`tool refund(id: text, amount: money)`), for a block still being typed."""
    for row in reversed(lines[:line + 1]):
        if row[:1].isspace() or not row.strip():
            continue
        match = _HEADER.match(row)
        if match is None:
            return []
        return re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", match.group(1))
    return []


def _bound_names(lines: list[str], line: int, col: int) -> list[str]:
    """Variables bound before the cursor in its block (`for r in`, `all p in`, `exists
    e in`), nearest first."""
    start = line
    while start > 0 and lines[start][:1].isspace():
        start -= 1
    before = "\n".join([*lines[start:line], lines[line][:col] if line < len(lines) else ""])
    found = re.findall(r"\b(?:for|all|any|exists)\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b", before)
    return list(dict.fromkeys(reversed(found)))
