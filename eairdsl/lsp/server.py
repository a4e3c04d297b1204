"""The pygls wiring: open buffers, debounced diagnostics, and one handler per request.

Every answer is computed by a plain function of the buffer (`diagnose`, `outline`,
`hover`, `complete`, `tokens`, `actions`, `cards`); this module only turns the
protocol's positions into ours and back (the client counts UTF-16 units unless it
negotiated otherwise; our columns count code points) and keeps the session's state:
the open buffers (checked instead of the files on disk, so unsaved imports count),
one index per buffer text, the pending diagnostics timers, and which open buffers
read which files (an edit to an imported module re-checks its importers).

A half-typed file is the normal case in an editor, so every handler answers
(possibly with nothing) rather than raising: an exception in a handler would reach
the client as an error message on every keystroke.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlparse

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

from eairdsl import __version__
from eairdsl.check.loader import stdlib_root
from eairdsl.lsp.actions import quick_fixes
from eairdsl.lsp.cards import card_definition, card_hover, is_card, worlds_using
from eairdsl.lsp.complete import completions
from eairdsl.lsp.diagnose import card_diagnostics, diagnostics_for
from eairdsl.lsp.hover import hover_markdown
from eairdsl.lsp.index import Definition, ModuleIndex, ProgramIndex, index_program
from eairdsl.lsp.links import document_links
from eairdsl.lsp.outline import document_symbols
from eairdsl.lsp.signature import signature_help
from eairdsl.lsp.text import Word, whole_range
from eairdsl.lsp.tokens import LEGEND, semantic_tokens
from eairdsl.source import display_name
from eairdsl.syntax.fmt import format_text
from eairdsl.syntax.textmate import grammar_keywords

__all__ = ["build_server", "diagnostics_for", "serve", "path_of", "DEFAULT_DELAY"]

_log = logging.getLogger(__name__)

#: seconds of quiet after an edit before the buffer is checked (initializationOptions
#: `diagnosticsDelay` overrides it): typing does not queue one check per keystroke
DEFAULT_DELAY = 0.25

#: the files whose change on disk can change a check (modules, cards, data files)
WATCHED = "**/*.{eair,j2,json,jsonl,csv,md}"

Answer = TypeVar("Answer")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the closest LSP symbol kind of each kind of declaration, for workspace symbols
_SYMBOLS = {
    "record": T.SymbolKind.Struct, "table": T.SymbolKind.Struct, "ledger": T.SymbolKind.Struct,
    "schema": T.SymbolKind.Interface, "enum": T.SymbolKind.Enum,
    "enum member": T.SymbolKind.EnumMember, "field": T.SymbolKind.Field,
    "group": T.SymbolKind.Field, "tool": T.SymbolKind.Method, "let": T.SymbolKind.Function,
    "role": T.SymbolKind.Class, "actor": T.SymbolKind.Class, "simulator": T.SymbolKind.Class,
    "condition": T.SymbolKind.Event, "inducer": T.SymbolKind.Event,
    "policy": T.SymbolKind.Object, "world": T.SymbolKind.Module,
}


def grammar_words() -> set[str]:
    """Every word the grammar reserves (keywords, operators, constants)."""
    return {w for words in grammar_keywords().values() for w in words}


def path_of(uri: str) -> Path:
    """The file a `file:` URI names; other schemes (an untitled buffer) get a name in the
    working directory, so imports resolve from there as they would for a new file."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path.cwd() / (Path(unquote(parsed.path)).name or "untitled.eair")


def _safely(default: Answer, work: Callable[[], Answer]) -> Answer:
    """Run a handler's work; on any failure log it and answer `default`, never raise."""
    try:
        return work()
    except Exception:  # a half-typed buffer must not turn into an error on each keystroke
        _log.exception("eairc lsp: a request failed; answering with nothing")
        return default


class EairServer(LanguageServer):
    """The session: open `.eair` buffers by URI, their indexes and check timers."""

    def __init__(self) -> None:
        super().__init__("eairc", __version__,
                         text_document_sync_kind=T.TextDocumentSyncKind.Full)
        self.delay = DEFAULT_DELAY
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.reads: dict[str, set[Path]] = {}  # open buffer -> the files its check read
        self.indexes: dict[str, tuple[str, ProgramIndex]] = {}

    # ---------------------------------------------------------------- buffers

    def text_of(self, uri: str) -> str:
        return self.workspace.get_text_document(uri).source

    def open_eair(self) -> list[str]:
        return [uri for uri in self.workspace.text_documents if uri.endswith(".eair")]

    def overlay(self) -> dict[Path, str]:
        """Every open buffer (worlds, modules, cards) by its path: what is checked
        instead of the disk."""
        return {path_of(uri): self.text_of(uri) for uri in self.workspace.text_documents}

    def index(self, uri: str) -> ProgramIndex:
        """The index of the buffer as it is now (rebuilt only when its text changed)."""
        text = self.text_of(uri)
        if is_card(path_of(uri)):  # a template, not a module: `cards` answers for it
            return ProgramIndex(entry=path_of(uri), modules=[])
        kept = self.indexes.get(uri)
        if kept is not None and kept[0] == text:
            return kept[1]
        built = index_program(path_of(uri), text, self.overlay())
        self.indexes[uri] = (text, built)
        return built

    # ---------------------------------------------------------------- positions

    def to_ours(self, text: str, position: T.Position) -> T.Position:
        at = self.workspace.position_codec.position_from_client_units(
            text.split("\n"), position)
        return T.Position(line=at.line, character=at.character)

    def to_client(self, text: str, where: T.Range) -> T.Range:
        """Our columns count code points; the client's count the negotiated encoding's
        units (UTF-16 unless it said otherwise), which differ past the first emoji."""
        return self.workspace.position_codec.range_to_client_units(text.split("\n"), where)

    def location(self, path: Path, text: str, where: T.Range) -> T.Location:
        return T.Location(uri=path.as_uri(), range=self.to_client(text, where))

    # ---------------------------------------------------------------- diagnostics

    def publish(self, uri: str) -> None:
        """Check the buffer and send its diagnostics (none when it is closed)."""
        self.timers.pop(uri, None)
        document = self.workspace.text_documents.get(uri)
        if document is None:
            return
        text = document.source

        def work() -> list[T.Diagnostic]:
            path = path_of(uri)
            if is_card(path):
                worlds = worlds_using(path, self.overlay())
                found = card_diagnostics(path, text, worlds, self.overlay())
                self.reads[uri] = set(worlds)
            else:
                index = self.index(uri)
                found = diagnostics_for(path, text, self.overlay(), index)
                self.reads[uri] = {m.path.resolve() for m in index.modules}
            for diagnostic in found:
                diagnostic.range = self.to_client(text, diagnostic.range)
            return found
        self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(
            uri=uri, version=document.version, diagnostics=_safely([], work)))

    def schedule(self, uri: str, now: bool = False) -> None:
        """Check `uri` after `delay` seconds of quiet (at once when `now` or no delay)."""
        pending = self.timers.pop(uri, None)
        if pending is not None:
            pending.cancel()
        if now or self.delay <= 0:
            self.publish(uri)
            return
        self.timers[uri] = asyncio.get_running_loop().call_later(self.delay, self.publish, uri)

    def dependents(self, uri: str) -> list[str]:
        """The other open buffers to check again after `uri` changed: those whose last
        check read it, and for a card, the open worlds that use it."""
        changed = path_of(uri).resolve()
        found = [other for other, read in self.reads.items()
                 if changed in read and other != uri]
        if is_card(changed):
            found += [world.as_uri() for world in self.reads.get(uri, ())]
        return [other for other in dict.fromkeys(found)
                if other in self.workspace.text_documents and other != uri]

    # ---------------------------------------------------------------- definitions

    def name_at(self, uri: str, position: T.Position
                ) -> tuple[ProgramIndex, ModuleIndex, Word] | None:
        """The identifier under the client's cursor, with the index it is read in."""
        text = self.text_of(uri)
        at = self.to_ours(text, position)
        index = self.index(uri)
        found = index.at(path_of(uri), at.line, at.character)
        return None if found is None else (index, *found)

    def definitions_at(self, uri: str, position: T.Position
                       ) -> tuple[ProgramIndex, list[Definition]] | None:
        found = self.name_at(uri, position)
        if found is None:
            return None
        index, module, word = found
        return index, index.resolve(module, word)

    def uses_at(self, uri: str, position: T.Position
                ) -> list[tuple[Definition, ModuleIndex, Word]]:
        """Every use in the program of what the name under the cursor declares."""
        found = self.definitions_at(uri, position)
        if found is None:
            return []
        index, resolved = found
        return [(target, module, word) for target in resolved
                for module, word in index.references(target)]

    def renameable(self, uri: str, position: T.Position
                   ) -> tuple[ProgramIndex, Definition, Word] | None:
        """The one declaration under the cursor, when every use of it is in a file the
        user owns: a name a stdlib module declares or uses is not renamed from a world."""
        found = self.name_at(uri, position)
        if found is None:
            return None
        index, module, word = found
        resolved = index.resolve(module, word)
        if len(resolved) != 1:
            return None
        target = resolved[0]
        stdlib = stdlib_root().resolve()
        if any(module.path.resolve().is_relative_to(stdlib)
               for module, _ in index.references(target)):
            return None
        return index, target, word


def is_name(text: str) -> bool:
    """Can `text` name a declaration (an identifier, not one of the language's words)?"""
    return bool(_NAME.fullmatch(text)) and text not in grammar_words()


def build_server() -> LanguageServer:
    """A pygls server with the handlers registered (full text sync: a world is small)."""
    server = EairServer()

    @server.feature(T.INITIALIZE)
    def initialize(ls: EairServer, params: T.InitializeParams) -> None:
        options = params.initialization_options
        if isinstance(options, dict):
            delay = options.get("diagnosticsDelay")
            if isinstance(delay, int | float) and 0 <= delay <= 10:
                server.delay = float(delay)

    @server.feature(T.INITIALIZED)
    def initialized(ls: EairServer, params: T.InitializedParams) -> None:
        """Ask the client to tell of files changed on disk (a module, a data file, a card
        edited elsewhere or by `git checkout`), when it can be asked; VS Code's extension
        sends them unasked."""
        capabilities = server.client_capabilities.workspace
        watched = capabilities.did_change_watched_files if capabilities else None
        if watched is None or not watched.dynamic_registration:
            return
        server.client_register_capability(T.RegistrationParams(registrations=[T.Registration(
            id="eair-watched-files", method=T.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=T.DidChangeWatchedFilesRegistrationOptions(watchers=[
                T.FileSystemWatcher(glob_pattern=WATCHED)]))]))

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: EairServer, params: T.DidOpenTextDocumentParams) -> None:
        server.schedule(params.text_document.uri, now=True)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: EairServer, params: T.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        server.schedule(uri)
        for other in server.dependents(uri):
            server.indexes.pop(other, None)  # what it imports from `uri` changed
            server.schedule(other)

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: EairServer, params: T.DidSaveTextDocumentParams) -> None:
        for uri in server.workspace.text_documents:  # a saved file may change any check
            server.schedule(uri)

    @server.feature(T.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched(ls: EairServer, params: T.DidChangeWatchedFilesParams) -> None:
        server.indexes.clear()  # a module or data file changed on disk
        for uri in server.workspace.text_documents:
            server.schedule(uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: EairServer, params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        pending = server.timers.pop(uri, None)
        if pending is not None:
            pending.cancel()
        server.reads.pop(uri, None)
        server.indexes.pop(uri, None)
        server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(T.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: EairServer, params: T.DocumentFormattingParams) -> list[T.TextEdit]:
        def work() -> list[T.TextEdit]:
            uri = params.text_document.uri
            text = server.text_of(uri)
            formatted, _ = format_text(text, display_name(path_of(uri)))
            if formatted is None or formatted == text:
                return []
            return [T.TextEdit(range=server.to_client(text, whole_range(text)),
                               new_text=formatted)]
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(ls: EairServer, params: T.DocumentSymbolParams) -> list[T.DocumentSymbol]:
        uri = params.text_document.uri

        def work() -> list[T.DocumentSymbol]:
            text = server.text_of(uri)
            found = document_symbols(text, display_name(path_of(uri)))
            pending = list(found)
            while pending:
                symbol = pending.pop()
                symbol.range = symbol.selection_range = server.to_client(text, symbol.range)
                pending.extend(symbol.children or ())
            return found
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    def hover(ls: EairServer, params: T.HoverParams) -> T.Hover | None:
        uri = params.text_document.uri

        def work() -> T.Hover | None:
            text = server.text_of(uri)
            at = server.to_ours(text, params.position)
            path = path_of(uri)
            if is_card(path):
                shown = card_hover(path, text, at.line, at.character, server.overlay())
            else:
                shown = hover_markdown(server.index(uri), path, at.line, at.character)
            if shown is None:
                return None
            return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=shown))
        return _safely(None, work)

    @server.feature(T.TEXT_DOCUMENT_DEFINITION)
    def definition(ls: EairServer, params: T.DefinitionParams) -> list[T.Location]:
        uri = params.text_document.uri

        def work() -> list[T.Location]:
            text = server.text_of(uri)
            at = server.to_ours(text, params.position)
            if is_card(path_of(uri)):
                return [server.location(path, _disk_or_open(server, path), where)
                        for path, where in card_definition(path_of(uri), text, at.line,
                                                           at.character, server.overlay())]
            index = server.index(uri)
            target = index.import_at(path_of(uri), at.line, at.character)
            if target is not None:
                start = T.Position(line=0, character=0)
                return [T.Location(uri=target.as_uri(), range=T.Range(start=start, end=start))]
            found = server.definitions_at(uri, params.position)
            if found is None:
                return []
            index, resolved = found
            return [server.location(d.path, _text(index, d.path), d.word.range())
                    for d in resolved]
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_REFERENCES)
    def references(ls: EairServer, params: T.ReferenceParams) -> list[T.Location]:
        uri = params.text_document.uri

        def work() -> list[T.Location]:
            include = params.context.include_declaration
            return [server.location(module.path, module.text, word.range())
                    for target, module, word in server.uses_at(uri, params.position)
                    if include or word != target.word or module.path != target.path]
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
    def highlight(ls: EairServer, params: T.DocumentHighlightParams
                  ) -> list[T.DocumentHighlight]:
        uri = params.text_document.uri

        def work() -> list[T.DocumentHighlight]:
            here = path_of(uri)
            return [T.DocumentHighlight(range=server.to_client(module.text, word.range()))
                    for _, module, word in server.uses_at(uri, params.position)
                    if module.path == here]
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_PREPARE_RENAME)
    def prepare_rename(ls: EairServer, params: T.PrepareRenameParams) -> T.Range | None:
        uri = params.text_document.uri

        def work() -> T.Range | None:
            found = server.renameable(uri, params.position)
            return None if found is None else server.to_client(server.text_of(uri),
                                                              found[2].range())
        return _safely(None, work)

    @server.feature(T.TEXT_DOCUMENT_RENAME)
    def rename(ls: EairServer, params: T.RenameParams) -> T.WorkspaceEdit | None:
        uri = params.text_document.uri

        def work() -> T.WorkspaceEdit | None:
            found = server.renameable(uri, params.position)
            if found is None or not is_name(params.new_name):
                return None
            index, target, _ = found
            changes: dict[str, list[T.TextEdit]] = {}
            for module, word in index.references(target):
                changes.setdefault(module.path.as_uri(), []).append(T.TextEdit(
                    range=server.to_client(module.text, word.range()),
                    new_text=params.new_name))
            return T.WorkspaceEdit(changes=changes)
        return _safely(None, work)

    @server.feature(T.TEXT_DOCUMENT_COMPLETION,
                    T.CompletionOptions(trigger_characters=["."]))
    def complete(ls: EairServer, params: T.CompletionParams) -> T.CompletionList:
        uri = params.text_document.uri

        def work() -> T.CompletionList:
            text = server.text_of(uri)
            at = server.to_ours(text, params.position)
            items = completions(server.index(uri), text, at.line, at.character)
            return T.CompletionList(is_incomplete=False, items=items)
        return _safely(T.CompletionList(is_incomplete=False, items=[]), work)

    @server.feature(T.WORKSPACE_SYMBOL)
    def workspace_symbols(ls: EairServer, params: T.WorkspaceSymbolParams
                          ) -> list[T.WorkspaceSymbol]:
        def work() -> list[T.WorkspaceSymbol]:
            wanted = params.query.lower()
            seen: set[tuple[str, str, int]] = set()
            out: list[T.WorkspaceSymbol] = []
            for uri in server.open_eair():  # the open worlds and what they import
                index = server.index(uri)
                for d in index.definitions():
                    key = (str(d.path), d.name, d.word.line)
                    if key in seen or wanted not in d.name.lower():
                        continue
                    seen.add(key)
                    out.append(T.WorkspaceSymbol(
                        name=d.name, kind=_SYMBOLS.get(d.kind, T.SymbolKind.Variable),
                        container_name=d.container or d.module,
                        location=server.location(d.path, _text(index, d.path), d.word.range())))
            return out
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_LINK)
    def links(ls: EairServer, params: T.DocumentLinkParams) -> list[T.DocumentLink]:
        uri = params.text_document.uri

        def work() -> list[T.DocumentLink]:
            text = server.text_of(uri)
            found = document_links(server.index(uri), path_of(uri))
            for link in found:
                link.range = server.to_client(text, link.range)
            return found
        return _safely([], work)

    @server.feature(T.TEXT_DOCUMENT_SIGNATURE_HELP,
                    T.SignatureHelpOptions(trigger_characters=["(", ","]))
    def signature(ls: EairServer, params: T.SignatureHelpParams) -> T.SignatureHelp | None:
        uri = params.text_document.uri

        def work() -> T.SignatureHelp | None:
            text = server.text_of(uri)
            at = server.to_ours(text, params.position)
            return signature_help(server.index(uri), text, at.line, at.character)
        return _safely(None, work)

    @server.feature(T.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
    def tokens(ls: EairServer, params: T.SemanticTokensParams) -> T.SemanticTokens:
        uri = params.text_document.uri

        def work() -> T.SemanticTokens:
            index = server.index(uri)
            data = semantic_tokens(index, path_of(uri))
            return T.SemanticTokens(data=_client_columns(server, server.text_of(uri), data))
        return _safely(T.SemanticTokens(data=[]), work)

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                    T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix]))
    def actions(ls: EairServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        uri = params.text_document.uri
        return _safely([], lambda: quick_fixes(uri, list(params.context.diagnostics)))

    return server


def _disk_or_open(server: EairServer, path: Path) -> str:
    """A file's text as the editor has it (open buffer) or as it is on disk."""
    for uri in server.workspace.text_documents:
        if path_of(uri).resolve() == path.resolve():
            return server.text_of(uri)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _text(index: ProgramIndex, path: Path) -> str:
    module = index.module_of(path)
    return module.text if module is not None else ""


def _client_columns(server: EairServer, text: str, data: list[int]) -> list[int]:
    """Semantic tokens in the client's column units (only lines with a wide character
    differ; names themselves are ASCII, so a token's length never changes)."""
    lines = text.split("\n")
    if all(line.isascii() for line in lines):
        return data
    out: list[int] = []
    line = col = 0
    previous_line = previous_col = 0
    for at in range(0, len(data), 5):
        delta_line, delta_col, length, kind, modifiers = data[at:at + 5]
        line += delta_line
        col = col + delta_col if delta_line == 0 else delta_col
        start = server.to_client(text, T.Range(start=T.Position(line=line, character=col),
                                               end=T.Position(line=line, character=col)))
        client_col = start.start.character
        out.extend((line - previous_line,
                    client_col - previous_col if line == previous_line else client_col,
                    length, kind, modifiers))
        previous_line, previous_col = line, client_col
    return out


def serve() -> None:
    """Speak LSP on stdin/stdout until the client says exit."""
    build_server().start_io()

