"""Diagnostics for a buffer: what `eairc check` reports, as the editor shows it.

The buffer is checked through the compiler with `source_overlay`, so unsaved text
(of this buffer and of the other open ones it imports) is what is checked and
nothing is written into the user's folder. A diagnostic in another file is shown
on the `import` that brings that file in, its own place named in the message.
A diagnostic whose hint names one replacement ("did you mean 'x'?") carries the
edit in its `data`, for the quick fix (`actions`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from lsprotocol import types as T

from eairdsl.check.loader import source_overlay
from eairdsl.compiler import compile_world
from eairdsl.diagnostics import Diagnostic, Severity
from eairdsl.lsp.index import ProgramIndex, index_program
from eairdsl.lsp.text import lsp_range, words
from eairdsl.source import Span, display_name

__all__ = ["SOURCE", "ERRORS_DOC", "diagnostics_for", "card_diagnostics", "replacement"]

#: The `source` every published diagnostic names, so editors can tell ours apart.
SOURCE = "eairc"
#: where each code is explained, a section per code (present in a checkout, not in a wheel)
ERRORS_DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
_HEADING = re.compile(r"^### ([EWV]\d{3}) — (.*)$", re.M)

_SEVERITY = {
    Severity.ERROR: T.DiagnosticSeverity.Error,
    Severity.WARNING: T.DiagnosticSeverity.Warning,
}
_DID_YOU_MEAN = re.compile(r"did you mean '([A-Za-z_][A-Za-z0-9_]*)'\?")
_QUOTED = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)'")


def _import_spans(index: ProgramIndex) -> dict[str, Span]:
    """For every module the buffer reaches, the buffer's own `import` that brings it in
    (directly or through other modules), by the file name its diagnostics carry: where
    a problem inside it is shown, since an editor shows only the open file's problems."""
    main = index.main
    if main is None:
        return {}
    shown: dict[str, Span] = {}
    for decl, target in main.imports:
        pending = [target] if target is not None else []
        while pending:
            path = pending.pop()
            name = display_name(path)
            if name in shown:
                continue
            shown[name] = decl.span
            module = index.module_of(path)
            if module is not None:
                pending.extend(t for _, t in module.imports if t is not None)
    return shown


@lru_cache(maxsize=1)
def _doc_links() -> dict[str, str]:
    """Each code's section of docs/errors.md as a `file:` URI with the anchor Markdown
    viewers give its heading; empty when the document is not installed (a wheel)."""
    try:
        text = ERRORS_DOC.read_text(encoding="utf-8")
    except OSError:
        return {}
    uri = ERRORS_DOC.as_uri()
    links = {}
    for match in _HEADING.finditer(text):
        heading = f"{match.group(1)} — {match.group(2)}".lower()
        slug = re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")
        links[match.group(1)] = f"{uri}#{slug}"
    return links


def replacement(diagnostic: Diagnostic, text: str) -> tuple[T.Range, str] | None:
    """The one edit a diagnostic's hint names: the misspelt word (quoted in its message,
    found inside its span) and the declared spelling. None when there is no such hint."""
    if diagnostic.span is None or not diagnostic.hint:
        return None
    suggested = _DID_YOU_MEAN.search(diagnostic.hint)
    wrong = _QUOTED.search(diagnostic.message)
    if suggested is None or wrong is None:
        return None
    span = diagnostic.span
    for word in words(text):
        if word.name == wrong.group(1) and word.within(span):
            return word.range(), suggested.group(1)
    return None


def _to_lsp(diagnostic: Diagnostic, here: str, text: str,
            imports: dict[str, Span]) -> T.Diagnostic:
    message = diagnostic.message
    if diagnostic.hint:
        message += f"\nhint: {diagnostic.hint}"
    span = diagnostic.span
    data = None
    if span is not None and span.file == here:
        where = lsp_range(span)
        fix = replacement(diagnostic, text)
        if fix is not None:
            data = {"range": {"start": {"line": fix[0].start.line,
                                        "character": fix[0].start.character},
                              "end": {"line": fix[0].end.line, "character": fix[0].end.character}},
                    "newText": fix[1]}
    else:
        at = imports.get(span.file) if span is not None else None
        if span is not None:
            message = f"{span}: {message}"
        where = lsp_range(at) if at is not None else T.Range(
            start=T.Position(line=0, character=0), end=T.Position(line=0, character=0))
    link = _doc_links().get(diagnostic.code)
    return T.Diagnostic(
        range=where, message=message, code=diagnostic.code, source=SOURCE,
        code_description=T.CodeDescription(href=link) if link else None,
        severity=_SEVERITY.get(diagnostic.severity, T.DiagnosticSeverity.Information),
        data=data)


def diagnostics_for(path: Path, text: str, overlay: Mapping[Path, str] | None = None,
                    index: ProgramIndex | None = None) -> list[T.Diagnostic]:
    """Check `text` as the file at `path` (its imports and data read from disk, or from
    `overlay`, the other open buffers) and return what `eairc check` would report."""
    with source_overlay({**(overlay or {}), path: text}):
        result = compile_world(path)
    here = display_name(path)
    elsewhere = any(d.span is None or d.span.file != here for d in result.diagnostics)
    imports = _import_spans(index or index_program(path, text, overlay)) if elsewhere else {}
    return [_to_lsp(d, here, text, imports) for d in result.diagnostics]


def card_diagnostics(card: Path, text: str, worlds: list[Path],
                     overlay: Mapping[Path, str] | None = None) -> list[T.Diagnostic]:
    """What checking the worlds that use a card reports inside it (a misspelt variable,
    a forbidden word), each problem once however many worlds or conditions find it."""
    here = display_name(card)
    found: list[T.Diagnostic] = []
    seen: set[tuple[str, str, int, int]] = set()
    with source_overlay({**(overlay or {}), card: text}):
        for world in worlds:
            for diagnostic in compile_world(world).diagnostics:
                span = diagnostic.span
                if span is None or span.file != here:
                    continue
                key = (diagnostic.code, diagnostic.message, span.line, span.col)
                if key not in seen:
                    seen.add(key)
                    found.append(_to_lsp(diagnostic, here, text, {}))
    return found
