"""What a buffer declares and uses: the index behind go-to-definition, references,
hover, completion and semantic tokens.

An editor's buffer is usually half typed, so the index is built from a *tolerant*
parse: each top-level declaration is parsed on its own, at its own lines (so every
position stays true), and one with a syntax error is left out; parsed declarations
are kept by their text, so a keystroke re-parses only the declaration it is in. The
buffer's imports are loaded as the compiler loads them (`load_program`, the same
resolution into `stdlib/`).

Declarations come from the AST; *uses* are the identifiers of the text (`text.words`),
resolved by name, since clause names (`tools a, b`, `on TOOL`) carry no span of their
own. Resolution prefers the closest meaning: a parameter inside its tool or `let`, a
record's field after `.`, then a top-level declaration, an enum member, a field.
Bound variables (`for x in ...`) are not declarations and resolve to nothing.
"""

from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from eairdsl.check.loader import (
    load_program,
    module_ref,
    resolve_import,
    source_overlay,
    stdlib_root,
)
from eairdsl.diagnostics import Diagnostics
from eairdsl.lsp.text import Word, span_contains, words
from eairdsl.source import Span, display_name
from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import TOP_LEVEL_KEYWORDS, parse_text
from eairdsl.syntax.textmate import grammar_keywords

__all__ = ["Definition", "ModuleIndex", "ProgramIndex", "index_program", "tolerant_module"]

_TOP = re.compile(r"^(?:{})\b".format("|".join(TOP_LEVEL_KEYWORDS)), re.M)

_RULE = re.compile(r"^[-=*#~_ ]*[-=*#~_]{4}")


@dataclass(frozen=True)
class Definition:
    """A declared name: what it is, where its name is written, what it declares."""

    name: str
    kind: str
    path: Path
    word: Word
    span: Span
    header: str
    doc: str | None = None
    container: str | None = None
    module: str = ""

    @property
    def label(self) -> str:
        """`record employee`, `field rating of employee`, `parameter amount of refund`."""
        of = f" of {self.container}" if self.container else ""
        return f"{self.kind} {self.name}{of}"


@dataclass
class ModuleIndex:
    """One file of the program: its text (the buffer's, for the open one), what it
    declares, and its identifiers."""

    path: Path
    ref: str
    text: str
    module: A.Module
    definitions: list[Definition] = field(default_factory=list)
    scopes: list[tuple[Span, dict[str, Definition]]] = field(default_factory=list)
    imports: list[tuple[A.ImportDecl, Path | None]] = field(default_factory=list)

    @property
    def words(self) -> tuple[Word, ...]:
        return words(self.text)

    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")


@dataclass
class ProgramIndex:
    """The open file and every module it imports, with one table of names."""

    entry: Path
    modules: list[ModuleIndex]
    by_name: dict[str, list[Definition]] = field(default_factory=dict)

    def module_of(self, path: Path) -> ModuleIndex | None:
        return next((m for m in self.modules if m.path == path), None)

    @property
    def main(self) -> ModuleIndex | None:
        return self.module_of(self.entry)

    def definitions(self) -> Iterator[Definition]:
        for module in self.modules:
            yield from module.definitions

    def top_level(self, name: str) -> list[Definition]:
        return [d for d in self.by_name.get(name, ()) if d.container is None]

    def resolve(self, module: ModuleIndex, word: Word) -> list[Definition]:
        """What `word`, written in `module`, names (several when it cannot be told apart,
        none for a keyword, a bound variable or a misspelling)."""
        named = self.by_name.get(word.name, [])
        if not named or _keyword_here(module.lines, word):
            return []
        if word.dotted:
            return self.field_of(module, word, named)
        for span, params in module.scopes:
            if word.within(span) and word.name in params:
                return [params[word.name]]
        for kinds in (_TOPS, ("enum member",), ("field", "group"), ("measure", "metric")):
            found = [d for d in named if d.kind in kinds]
            if found:
                return found
        return []

    def field_of(self, module: ModuleIndex, word: Word,
                 named: list[Definition]) -> list[Definition]:
        """`obj.name`: a field of obj's record when obj names one (or is a variable bound
        over one, `for r in obj`), else every field so named."""
        fields = [d for d in named if d.kind in ("field", "group")]
        container = word.obj
        if container is not None and not self.top_level(container):
            container = _bound_over(module.lines, word, container)
        if container is not None:
            own = [d for d in fields if d.container == container]
            if own:
                return own
        return fields

    def at(self, path: Path, line: int, col: int) -> tuple[ModuleIndex, Word] | None:
        """The module and identifier at a 0-based position of `path`."""
        module = self.module_of(path)
        if module is None:
            return None
        for word in module.words:
            if word.line == line and word.col <= col <= word.end:
                return module, word
            if word.line > line:
                break
        return None

    def references(self, target: Definition) -> list[tuple[ModuleIndex, Word]]:
        """Every identifier of the program that names `target`, its declaration included."""
        found = []
        for module in self.modules:
            for word in module.words:
                if word.name == target.name and target in self.resolve(module, word):
                    found.append((module, word))
        return found

    def import_at(self, path: Path, line: int, col: int) -> Path | None:
        """The file an `import "..."` under the cursor names, when it resolves."""
        module = self.module_of(path)
        if module is None:
            return None
        for decl, target in module.imports:
            if target is not None and span_contains(decl.span, line, col):
                return target
        return None


#: kinds of top-level declarations (what a bare name names first)
_TOPS = ("world", "enum", "schema", "record", "table", "ledger", "state", "document",
         "policy", "lever", "condition", "inducer", "tool", "role", "actor", "simulator",
         "instance", "let", "study measure")


@lru_cache(maxsize=1)
def _keywords() -> frozenset[str]:
    """The language's clause and declaration keywords (the parser's word terminals)."""
    return frozenset(grammar_keywords()["keywords"])


def _keyword_here(lines: list[str], word: Word) -> bool:
    """Is `word` written as a keyword: first on its line, followed by neither `:` (a field
    declaration) nor `=`, `.`, `(` or `,` (a use)? A record may have a field named like a
    clause (`text`, `record`), but the clause's keyword is never a reference to it."""
    if word.name not in _keywords():
        return False
    row = lines[word.line] if word.line < len(lines) else ""
    if row[:word.col].strip():
        return False
    rest = row[word.end:].lstrip()
    return not rest[:1] or rest[:1] not in ":=.(,"


def _bound_over(lines: list[str], word: Word, variable: str) -> str | None:
    """The collection `variable` is bound over before `word` (`for v in X`, `all v in X`,
    `exists v in X`), on the same or earlier lines: the container of `v.field`."""
    here = lines[word.line][:word.col] if word.line < len(lines) else ""
    before = "\n".join([*lines[max(0, word.line - 20):word.line], here])
    found = None
    for match in re.finditer(rf"\b{re.escape(variable)}\s+in\s+([A-Za-z_][A-Za-z0-9_]*)", before):
        found = match.group(1)
    return found


# ------------------------------------------------------------------ tolerant parsing

#: parsed declarations by (file name, first line, text of the declaration): an edit
#: re-parses only the declaration it is in (and those after it, when it adds a line)
_CHUNKS: OrderedDict[tuple[str, int, str], A.Module | None] = OrderedDict()
_CHUNKS_KEPT = 8192


def _chunk(name: str, line: int, text: str) -> A.Module | None:
    key = (name, line, text)
    if key in _CHUNKS:
        _CHUNKS.move_to_end(key)
        return _CHUNKS[key]
    module, _ = parse_text("\n" * line + text, name)  # parsed where it is: spans stay true
    _CHUNKS[key] = module
    while len(_CHUNKS) > _CHUNKS_KEPT:
        _CHUNKS.popitem(last=False)
    return module


def tolerant_module(text: str, name: str) -> A.Module:
    """The declarations of `text` that parse, each parsed on its own (a top-level keyword
    at the start of a line begins one), at its own lines; a declaration with a syntax
    error is left out, the rest kept. Comments come along for doc comments."""
    starts = [m.start() for m in _TOP.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    decls: list[A.Decl] = []
    comments: list[A.Comment] = []
    line = 0
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        piece = text[start:end]
        module = _chunk(name, line, piece)
        if module is not None:
            decls.extend(module.decls)
            comments.extend(module.comments)
        line += piece.count("\n")
    return A.Module(file=name, decls=decls, comments=comments)


# ------------------------------------------------------------------ building


def index_program(path: Path, text: str, overlay: Mapping[Path, str] | None = None
                  ) -> ProgramIndex:
    """The index of the buffer `text` of `path` and of what it imports (read from disk,
    or from `overlay`, the other open buffers). The buffer itself is parsed tolerantly,
    one declaration at a time; each import is loaded as the compiler loads it."""
    name = display_name(path)
    module = tolerant_module(text, name)
    index = ProgramIndex(entry=path, modules=[])
    stdlib = stdlib_root()
    seen = {path.resolve()}
    with source_overlay(overlay or {}):
        for decl in module.decls:
            if not isinstance(decl, A.ImportDecl):
                continue
            try:
                target = resolve_import(path, decl, stdlib, Diagnostics())
            except OSError:
                target = None
            program = load_program(target, Diagnostics()) if target is not None else None
            for loaded in program.modules if program is not None else ():
                if loaded.path.resolve() not in seen:
                    seen.add(loaded.path.resolve())
                    index.modules.append(_module_index(
                        loaded.path, module_ref(loaded.path, path, stdlib),
                        loaded.source.text, loaded.module))
    index.modules.append(_module_index(path, module_ref(path, path, stdlib), text, module))
    for indexed in index.modules:
        for definition in indexed.definitions:
            index.by_name.setdefault(definition.name, []).append(definition)
        for _, params in indexed.scopes:
            for definition in params.values():
                index.by_name.setdefault(definition.name, []).append(definition)
    return index


def _module_index(path: Path, ref: str, text: str, module: A.Module) -> ModuleIndex:
    index = ModuleIndex(path=path, ref=ref, text=text, module=module)
    found = _Finder(index)
    stdlib = stdlib_root()
    for decl in module.decls:
        match decl:
            case A.ImportDecl():
                try:
                    target = resolve_import(path, decl, stdlib, Diagnostics())
                except OSError:
                    target = None
                index.imports.append((decl, target))
            case A.RecordDecl() | A.SchemaDecl():
                owner = found.declare(decl, _kind(decl))
                items = decl.items if isinstance(decl, A.RecordDecl) else decl.fields
                for item in items:
                    kind = "group" if isinstance(item, A.GroupDecl) else "field"
                    found.inline(item, found.declare(item, kind, container=decl.name,
                                                     after=owner))
            case A.InstancesDecl():
                for item in decl.fields:
                    found.inline(item, found.declare(item, "field", container="instances"))
            case A.EnumDecl():
                owner = found.declare(decl, "enum")
                for member in decl.members:
                    found.member(decl, decl.name, member, owner)
            case A.ToolDecl() | A.LetDecl():
                owner = found.declare(decl, _kind(decl))
                params = {}
                for param in decl.params:
                    made = found.declare(param, "parameter", container=decl.name, after=owner,
                                         keep=False)
                    if made is not None:
                        params[param.name] = made
                        found.inline(param, made)
                index.scopes.append((decl.span, params))
            case A.MeasureDecl():
                for measured in decl.items:
                    found.declare(measured, "metric" if measured.metric else "measure")
            case A.LeverDecl() | A.StateDecl():
                found.inline(decl, found.declare(decl, _kind(decl)))
            case _:
                if isinstance(getattr(decl, "name", None), str):
                    found.declare(decl, _kind(decl))
    return index


def _kind(decl: A.Decl) -> str:
    """The word a declaration is written with: `table`, `role`, `study measure`, ..."""
    match decl:
        case A.RecordDecl() | A.PartyDecl():
            return decl.kind
        case A.StudyMeasureDecl():
            return "study measure"
        case _:
            return str(decl.decl)


@dataclass
class _Finder:
    """Locates declared names in a module's text and records their definitions."""

    index: ModuleIndex

    def _word(self, span: Span, name: str, after: Word | None = None) -> Word | None:
        """The first `name` written inside `span` (after `after`): the words are in
        order, so the search starts at the span's first line, not the file's."""
        words = self.index.words
        at = bisect.bisect_left(words, span.line - 1, key=lambda w: w.line)
        for word in words[at:]:
            if word.line > span.end_line - 1:
                break
            if word.name == name and word.within(span) and (
                    after is None or (word.line, word.col) > (after.line, after.col)):
                return word
        return None

    def declare(self, node: A.Node, kind: str, container: str | None = None,
                after: Definition | None = None, keep: bool = True) -> Definition | None:
        name = getattr(node, "name", None)
        if not isinstance(name, str):
            return None
        word = self._word(node.span, name, after.word if after is not None else None)
        if word is None:
            return None
        definition = Definition(
            name=name, kind=kind, path=self.index.path, word=word, span=node.span,
            header=_header(self.index.lines, node.span), doc=_doc(self.index, node),
            container=container, module=self.index.ref)
        if keep:
            self.index.definitions.append(definition)
        return definition

    def member(self, node: A.Node, container: str, member: str,
               owner: Definition | None) -> None:
        """An enum member: of an `enum` declaration, or of a closed set written as a
        lever's, state's, field's or parameter's type (`{peer, untrusted_client}`)."""
        word = self._word(node.span, member, owner.word if owner is not None else None)
        if word is None:
            return
        self.index.definitions.append(Definition(
            name=member, kind="enum member", path=self.index.path, word=word, span=node.span,
            header=_header(self.index.lines, node.span), container=container,
            module=self.index.ref))

    def inline(self, node: A.Node, owner: Definition | None) -> None:
        """The members of the closed set `node` is declared with, if it is one."""
        written = getattr(node, "type", None)
        name = getattr(node, "name", None)
        if isinstance(written, A.TypeRef) and written.kind == "enum" and isinstance(name, str):
            for member in written.members:
                self.member(node, name, member, owner)


def _header(lines: list[str], span: Span) -> str:
    """The first line of a declaration as written (what hover shows as its signature)."""
    if not 0 < span.line <= len(lines):
        return ""
    line = lines[span.line - 1][span.col - 1:] if span.col > 0 else lines[span.line - 1]
    return line.rstrip().removesuffix("{").rstrip()


def _doc(index: ModuleIndex, node: A.Node) -> str | None:
    """A declaration's doc: its `doc` string, else the `//` comment lines right above it."""
    doc = getattr(node, "doc", None)
    if isinstance(doc, str) and doc:
        return doc
    comments = {c.line: c.text for c in index.module.comments if c.col <= node.span.col}
    lines: list[str] = []
    line = node.span.line - 1
    while line in comments:
        said = comments[line].removeprefix("//").strip()
        if _RULE.match(said):  # a section rule (`// ---- tools`) is no one's doc
            break
        lines.insert(0, said)
        line -= 1
    return "\n".join(lines) or None

