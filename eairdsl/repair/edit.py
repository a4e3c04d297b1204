"""Declaration-level edits of `.eair` source text, for Repair Agents.

A repair changes a few declarations of a world and nothing else, and a reviewer
reads the result as source. So edits are made where the parser says a
declaration or clause is (its span), as text splices that leave every other
byte — comments included — where it was, and the result is re-formatted with
the project's formatter, which re-parses its own output and refuses to change
the meaning or lose a comment (`syntax.fmt.format_text`). An edit that does not
parse raises `EditError` with the located diagnostics, so a bad pattern fails
at the edit, not at the compiler.

Declarations are addressed as plan surfaces and `diff.Change` name them: a kind
(`tool`, `policy`, `participant`, `let`, `record`, …) and a name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eairdsl.syntax import ast as A
from eairdsl.syntax.fmt import FormatterError, format_text
from eairdsl.syntax.parser import parse_text

__all__ = ["EditError", "Parsed", "decl_kind", "parse", "format_source", "insert_clause",
           "replace_clause", "add_declaration", "add_import", "clause_text"]


class EditError(ValueError):
    """An edit that cannot be made: the target is missing, or the result does not parse."""


def decl_kind(decl: A.Decl) -> str:
    """The kind a declaration has in `KIND NAME` (the form plans and diffs use)."""
    match decl:
        case A.PartyDecl():
            return "participant"
        case A.RecordDecl():
            return "record"
        case A.InstancesDecl() | A.InstanceDecl():
            return "instances"
        case A.MeasureDecl():
            return "measure"
        case _:
            return str(getattr(decl, "decl", type(decl).__name__.lower()))


def _name(decl: A.Decl) -> str | None:
    name = getattr(decl, "name", None)
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class Parsed:
    """A source text with its module: what the edits locate things in."""

    text: str
    name: str
    module: A.Module

    def decl(self, kind: str, name: str) -> A.Decl:
        for decl in self.module.decls:
            if decl_kind(decl) == kind and _name(decl) == name:
                return decl
        raise EditError(f"{self.name}: no {kind} '{name}' in this file")

    def find(self, kind: str, name: str) -> A.Decl | None:
        try:
            return self.decl(kind, name)
        except EditError:
            return None

    def of_kind(self, kind: str) -> list[A.Decl]:
        return [d for d in self.module.decls if decl_kind(d) == kind]

    def offset(self, line: int, col: int) -> int:
        """The character offset of a 1-based line and column."""
        lines = self.text.splitlines(keepends=True)
        return sum(len(x) for x in lines[:line - 1]) + col - 1

    def line_end(self, line: int) -> int:
        """The offset just before the newline that ends `line` (1-based)."""
        lines = self.text.splitlines(keepends=True)
        start = sum(len(x) for x in lines[:line - 1])
        return start + len(lines[line - 1].rstrip("\r\n")) if line <= len(lines) else len(
            self.text)


def parse(text: str, name: str = "<world>") -> Parsed:
    """Parse `text`; EditError with the first located diagnostics when it does not parse."""
    module, diagnostics = parse_text(text, name)
    if module is None or diagnostics.errors:
        problems = "; ".join(f"{d.span}: {d.code} {d.message}" for d in diagnostics.errors[:3])
        raise EditError(f"{name} does not parse: {problems}")
    return Parsed(text=text, name=name, module=module)


def format_source(text: str, name: str = "<world>") -> str:
    """The canonical layout of `text` (comments kept), verified by the formatter."""
    try:
        formatted, diagnostics = format_text(text, name)
    except FormatterError as exc:  # pragma: no cover - a formatter bug, reported as such
        raise EditError(str(exc)) from exc
    if formatted is None:
        problems = "; ".join(f"{d.span}: {d.code} {d.message}" for d in diagnostics.errors[:3])
        raise EditError(f"{name}: the edited text does not parse: {problems}")
    return formatted


def clause_text(clause: A.ClauseNode, parsed: Parsed) -> str:
    """The source text of one clause, as written."""
    s = clause.span
    return parsed.text[parsed.offset(s.line, s.col):parsed.offset(s.end_line, s.end_col)]


def _clauses(decl: A.Decl) -> Sequence[A.ClauseNode]:
    clauses = getattr(decl, "clauses", None)
    if clauses is None:
        raise EditError(f"a {decl_kind(decl)} has no clauses to edit")
    return list(clauses)


def _after_line(parsed: Parsed, node: A.Node) -> int:
    """Where text goes after `node`: the end of its last line when only a comment or
    nothing follows it there (so a trailing comment stays with its own clause)."""
    s = node.span
    end = parsed.offset(s.end_line, s.end_col)
    rest = parsed.text[end:parsed.line_end(s.end_line)].strip()
    return parsed.line_end(s.end_line) if rest == "" or rest.startswith("//") else end


def _with_separator(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of an item with the `;` that joins it to the next item on its line, or
    else to the previous one: removing the item alone would leave a `;` that separates
    nothing (E114)."""
    after = len(text[end:]) - len(text[end:].lstrip(" \t"))
    if text[end + after:end + after + 1] == ";":
        return start, end + after + 1
    before = text[:start].rstrip(" \t")
    if before.endswith(";"):
        return len(before) - 1, end
    return start, end


def _splice(text: str, start: int, end: int, insert: str) -> str:
    return text[:start] + insert + text[end:]


def insert_clause(text: str, kind: str, name: str, clause: str, *,
                  after: tuple[type[A.ClauseNode], ...] = (),
                  fallback: tuple[type[A.ClauseNode], ...] = (),
                  file: str = "<world>") -> str:
    """Add `clause` (one clause's text, e.g. `ensure cap else reject "…"`) to a declaration.

    It goes after the last clause of a class in `after`; if there is none, after the
    last of a class in `fallback`; else after the declaration's last clause (or at
    the start of an empty block). The result is formatted and verified.
    """
    parsed = parse(text, file)
    decl = parsed.decl(kind, name)
    clauses = _clauses(decl)
    anchor: A.ClauseNode | None = None
    for classes in (after, fallback):
        matching = [c for c in clauses if isinstance(c, classes)] if classes else []
        if matching:
            anchor = matching[-1]
            break
    if anchor is None and clauses:
        anchor = clauses[-1]
    if anchor is not None:
        at = _after_line(parsed, anchor)
        indent = " " * (anchor.span.col - 1)
    else:
        brace = parsed.text.index("{", parsed.offset(decl.span.line, decl.span.col))
        at = brace + 1
        indent = " " * (decl.span.col + 1)
    return format_source(_splice(parsed.text, at, at, "\n" + indent + clause), file)


def replace_clause(text: str, kind: str, name: str,
                   which: Callable[[A.ClauseNode], bool], clause: str | None, *,
                   file: str = "<world>") -> str:
    """Replace the first clause `which` selects with `clause` (None: remove it)."""
    parsed = parse(text, file)
    decl = parsed.decl(kind, name)
    for c in _clauses(decl):
        if which(c):
            s = c.span
            start, end = parsed.offset(s.line, s.col), parsed.offset(s.end_line, s.end_col)
            if clause is None:  # the whole line, when the clause is alone on it
                line_start = parsed.offset(s.line, 1)
                rest = parsed.text[end:parsed.line_end(s.end_line)].strip()
                if parsed.text[line_start:start].strip() == "" and rest == "":
                    start, end = line_start, parsed.line_end(s.end_line) + 1
                else:  # on a line with others (`kind act; cost 1 min`): and one `;` by it
                    start, end = _with_separator(parsed.text, start, end)
                return format_source(_splice(parsed.text, start, end, ""), file)
            return format_source(_splice(parsed.text, start, end, clause), file)
    raise EditError(f"{file}: {kind} '{name}' has no such clause")


def add_declaration(text: str, declaration: str, *, after: tuple[str, str] | None = None,
                    file: str = "<world>") -> str:
    """Add a whole declaration after the declaration `after` (KIND, NAME), else at the end."""
    parsed = parse(text, file)
    if after is not None:
        at = _after_line(parsed, parsed.decl(*after))
    else:
        at = len(parsed.text.rstrip("\n"))
    return format_source(_splice(parsed.text, at, at, "\n\n" + declaration.strip() + "\n"),
                         file)


def add_import(text: str, path: str, *, file: str = "<world>") -> str:
    """`import "path"` after the file's last import (else after its `world` block);
    unchanged when the file already imports it."""
    parsed = parse(text, file)
    imports = [d for d in parsed.module.decls if isinstance(d, A.ImportDecl)]
    if any(d.path == path for d in imports):
        return format_source(parsed.text, file)
    anchor: A.Decl | None = imports[-1] if imports else next(
        (d for d in parsed.module.decls if isinstance(d, A.WorldDecl)), None)
    line = f'import "{path}"'
    if anchor is None:
        return format_source(line + "\n\n" + parsed.text, file)
    at = _after_line(parsed, anchor)
    return format_source(_splice(parsed.text, at, at, "\n\n" + line), file)
