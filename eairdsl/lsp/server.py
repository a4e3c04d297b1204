"""`eairc lsp`: a language server for `.eair` files over stdio (issue 30, item 2).

Editors get what `eairc check` and `eairc fmt` already know, at the cursor:
diagnostics as the buffer changes, whole-document formatting, the outline of a
world's declarations, and hover for builtins and declared names. The server
holds no language knowledge of its own: it checks the editor's (often unsaved)
text through the compiler with `source_overlay`, so it never writes into the
user's folder, and every answer is built from the compiler's own diagnostics,
AST and builtins table.

A half-typed file is the normal case in an editor, so every handler answers
(possibly with nothing) rather than raising: an exception in a handler would
reach the client as an error message on every keystroke.

pygls is an optional dependency (the `lsp` extra); only this module imports it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

from eairdsl import __version__
from eairdsl.check.loader import load_program, source_overlay
from eairdsl.compiler import compile_world
from eairdsl.diagnostics import Diagnostic, Diagnostics, Severity
from eairdsl.runtime.builtins import BUILTINS, BuiltinDef
from eairdsl.source import Span, display_name
from eairdsl.syntax import ast as A
from eairdsl.syntax.fmt import format_text
from eairdsl.syntax.parser import parse_text

__all__ = ["build_server", "diagnostics_for", "serve"]

_log = logging.getLogger(__name__)

#: The `source` every published diagnostic names, so editors can tell ours apart.
SOURCE = "eairc"

_SEVERITY = {
    Severity.ERROR: T.DiagnosticSeverity.Error,
    Severity.WARNING: T.DiagnosticSeverity.Warning,
}

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

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Answer = TypeVar("Answer")


def path_of(uri: str) -> Path:
    """The file a `file:` URI names; other schemes (an untitled buffer) get a name in the
    working directory, so imports resolve from there as they would for a new file."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path.cwd() / (Path(unquote(parsed.path)).name or "untitled.eair")


# ------------------------------------------------------------------ positions


def _range(span: Span) -> T.Range:
    """Our spans are 1-based with an exclusive end; LSP positions are 0-based."""
    start = T.Position(line=max(span.line - 1, 0), character=max(span.col - 1, 0))
    end = T.Position(line=max(span.end_line - 1, 0), character=max(span.end_col - 1, 0))
    if (end.line, end.character) < (start.line, start.character):
        end = start
    return T.Range(start=start, end=end)


def _whole(text: str) -> T.Range:
    """The range of all of `text` (for a whole-document edit)."""
    lines = text.split("\n")
    return T.Range(start=T.Position(line=0, character=0),
                   end=T.Position(line=len(lines) - 1, character=len(lines[-1])))


# ------------------------------------------------------------------ diagnostics


def _import_spans(text: str, name: str) -> dict[str, Span]:
    """This file's `import` declarations by the file name each names (empty when the
    text does not parse): where a problem inside an imported module is shown."""
    module, _ = parse_text(text, name)
    if module is None:
        return {}
    return {Path(d.path).name: d.span for d in module.decls if isinstance(d, A.ImportDecl)}


def _to_lsp(diagnostic: Diagnostic, here: str, imports: dict[str, Span]) -> T.Diagnostic:
    """One compiler diagnostic as LSP shows it. One located in another file is shown on
    the import of that file (else at the top), its own place named in the message:
    an editor shows only the open file's diagnostics."""
    message = diagnostic.message
    if diagnostic.hint:
        message += f"\nhint: {diagnostic.hint}"
    span = diagnostic.span
    if span is not None and span.file == here:
        where = _range(span)
    else:
        at = imports.get(Path(span.file).name) if span is not None else None
        if span is not None:
            message = f"{span}: {message}"
        where = _range(at) if at is not None else T.Range(
            start=T.Position(line=0, character=0), end=T.Position(line=0, character=0))
    return T.Diagnostic(range=where, message=message, code=diagnostic.code, source=SOURCE,
                        severity=_SEVERITY.get(diagnostic.severity,
                                               T.DiagnosticSeverity.Information))


def diagnostics_for(path: Path, text: str) -> list[T.Diagnostic]:
    """Check `text` as the file at `path` (its imports and data read from disk) and return
    what `eairc check` would report, as LSP diagnostics."""
    with source_overlay({path: text}):
        result = compile_world(path)
    here = display_name(path)
    elsewhere = any(d.span is None or d.span.file != here for d in result.diagnostics)
    imports = _import_spans(text, here) if elsewhere else {}
    return [_to_lsp(d, here, imports) for d in result.diagnostics]


# ------------------------------------------------------------------ outline and hover


def _label(decl: Any) -> str:
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
        where = _range(decl.span)
        symbols.append(T.DocumentSymbol(
            name=_label(decl), kind=_SYMBOL_KIND.get(decl.decl, T.SymbolKind.Object),
            range=where, selection_range=where, children=_members(decl) or None))
    return symbols


def _members(decl: Any) -> list[T.DocumentSymbol]:
    """A record's fields and groups, nested under it in the outline."""
    if not isinstance(decl, A.RecordDecl):
        return []
    members = []
    for item in decl.items:
        where = _range(item.span)
        grouped = isinstance(item, A.GroupDecl)
        members.append(T.DocumentSymbol(
            name=f"group {item.name}" if grouped else item.name,
            kind=T.SymbolKind.Array if grouped else T.SymbolKind.Field,
            range=where, selection_range=where))
    return members


def _signature(builtin: BuiltinDef) -> str:
    """`name(param: type, optional?: type) -> result`, as the hover shows a builtin."""
    params = ", ".join(f"{p.name}{'?' if p.optional else ''}: {p.type}" for p in builtin.params)
    return f"{builtin.name}({params}) -> {builtin.result}"


def _word_at(text: str, line: int, character: int) -> str | None:
    """The identifier under a 0-based position, or None."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return None
    for match in _WORD.finditer(lines[line]):
        if match.start() <= character <= match.end():
            return match.group()
    return None


def hover_text(text: str, name: str, line: int, character: int,
               path: Path | None = None) -> str | None:
    """Markdown for the word under the cursor: a builtin's signature and doc, else the
    kind of the declaration of that name in this file or (given its `path`, so imports
    resolve) in a module it imports."""
    word = _word_at(text, line, character)
    if word is None:
        return None
    builtin = BUILTINS.get(word)
    if builtin is not None:
        return f"```\n{_signature(builtin)}\n```\n\n{builtin.doc}"
    module, _ = parse_text(text, name)
    if module is None:
        return None
    for decl in module.decls:
        if getattr(decl, "name", None) == word:
            return f"`{_label(decl)}`"
    return _imported(path, text, word)


def _imported(path: Path | None, text: str, word: str) -> str | None:
    """The kind of `word` declared in a module this file imports, and which module."""
    if path is None:
        return None
    with source_overlay({path: text}):
        program = load_program(path, Diagnostics())
    if program is None:
        return None
    for loaded in program.modules:
        for decl in loaded.module.decls:
            if getattr(decl, "name", None) == word:
                return f"`{_label(decl)}` (from `{loaded.ref}`)"
    return None


# ------------------------------------------------------------------ the server


def _safely(default: Answer, work: Callable[[], Answer]) -> Answer:
    """Run a handler's work; on any failure log it and answer `default`, never raise."""
    try:
        return work()
    except Exception:  # a half-typed buffer must not turn into an error on each keystroke
        _log.exception("eairc lsp: a request failed; answering with nothing")
        return default


def build_server() -> LanguageServer:
    """A pygls server with the handlers registered (full text sync: a world is small)."""
    server = LanguageServer("eairc", __version__,
                            text_document_sync_kind=T.TextDocumentSyncKind.Full)

    def text_of(uri: str) -> str:
        return server.workspace.get_text_document(uri).source

    def to_client(text: str, where: T.Range) -> T.Range:
        """Our columns count code points; the client's count the negotiated encoding's
        units (UTF-16 unless it said otherwise), which differ past the first emoji."""
        return server.workspace.position_codec.range_to_client_units(text.split("\n"), where)

    def located(uri: str) -> list[T.Diagnostic]:
        text = text_of(uri)
        found = diagnostics_for(path_of(uri), text)
        for diagnostic in found:
            diagnostic.range = to_client(text, diagnostic.range)
        return found

    def publish(uri: str) -> None:
        none: list[T.Diagnostic] = []
        found = _safely(none, lambda: located(uri))
        server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=uri, diagnostics=found))

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(T.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: LanguageServer,
                   params: T.DocumentFormattingParams) -> list[T.TextEdit]:
        def work() -> list[T.TextEdit]:
            uri = params.text_document.uri
            text = text_of(uri)
            formatted, _ = format_text(text, display_name(path_of(uri)))
            if formatted is None or formatted == text:
                return []
            return [T.TextEdit(range=to_client(text, _whole(text)), new_text=formatted)]
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(ls: LanguageServer,
                params: T.DocumentSymbolParams) -> list[T.DocumentSymbol]:
        uri = params.text_document.uri

        def work() -> list[T.DocumentSymbol]:
            text = text_of(uri)
            found = document_symbols(text, display_name(path_of(uri)))
            pending = list(found)
            while pending:
                symbol = pending.pop()
                symbol.range = symbol.selection_range = to_client(text, symbol.range)
                pending.extend(symbol.children or ())
            return found
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    def hover(ls: LanguageServer, params: T.HoverParams) -> T.Hover | None:
        uri = params.text_document.uri

        def work() -> T.Hover | None:
            text = text_of(uri)
            at = server.workspace.position_codec.position_from_client_units(
                text.split("\n"), params.position)
            path = path_of(uri)
            shown = hover_text(text, display_name(path), at.line, at.character, path)
            if shown is None:
                return None
            return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=shown))
        return _safely(None, work)

    return server


def serve() -> None:
    """Speak LSP on stdin/stdout until the client says exit."""
    build_server().start_io()
