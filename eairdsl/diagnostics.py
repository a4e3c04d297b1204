"""Diagnostics as data: code, severity, message, span, hint.

Every stage reports problems by adding to a `Diagnostics` collection instead of
raising, so one run can show several independent errors, and tests can assert
on fields rather than on rendered text. The codes are stable and catalogued in
docs/errors.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from enum import Enum
from typing import Any

from pydantic import BaseModel

from eairdsl.source import Span

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "Severity", "Diagnostic", "Diagnostics", "as_data",
           "did_you_mean", "render", "render_all", "sarif_log"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


class Severity(str, Enum):
    """An error stops compilation; a warning is reported and compilation goes on."""

    ERROR = "error"
    WARNING = "warning"


class Diagnostic(BaseModel):
    """One located finding about a world."""

    code: str
    severity: Severity = Severity.ERROR
    message: str
    span: Span | None = None
    hint: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


class Diagnostics:
    """An ordered, de-duplicated collection that every pass appends to."""

    def __init__(self) -> None:
        self._items: list[Diagnostic] = []
        self._seen: set[tuple[str, str, str]] = set()

    def add(self, diagnostic: Diagnostic) -> None:
        key = (diagnostic.code, str(diagnostic.span), diagnostic.message)
        if key not in self._seen:
            self._seen.add(key)
            self._items.append(diagnostic)

    def error(self, code: str, message: str, span: Span | None, hint: str | None = None) -> None:
        self.add(Diagnostic(code=code, message=message, span=span, hint=hint))

    def warning(self, code: str, message: str, span: Span | None, hint: str | None = None) -> None:
        self.add(Diagnostic(code=code, severity=Severity.WARNING, message=message, span=span,
                            hint=hint))

    def extend(self, items: Iterable[Diagnostic]) -> None:
        for item in items:
            self.add(item)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self._items)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self._items if d.is_error]

    def sorted(self) -> list[Diagnostic]:
        """Errors before warnings, then by file and position."""
        def key(d: Diagnostic) -> tuple[int, str, int, int]:
            s = d.span
            return (0 if d.is_error else 1, s.file if s else "", s.line if s else 0,
                    s.col if s else 0)
        return sorted(self._items, key=key)

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A hint naming the closest known spelling, if any is close enough."""
    matches = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


def render(diagnostic: Diagnostic, source_lines: dict[str, list[str]] | None = None) -> str:
    """Render like a compiler: `file:line:col: error[E301]: message`, the line, a caret."""
    d = diagnostic
    where = f"{d.span}: " if d.span else ""
    out = [f"{where}{d.severity.value}[{d.code}]: {d.message}"]
    if d.span and source_lines is not None:
        lines = source_lines.get(d.span.file)
        if lines is not None and 0 < d.span.line <= len(lines):
            text = lines[d.span.line - 1].expandtabs(1)
            width = 1
            if d.span.end_line == d.span.line:
                width = max(1, d.span.end_col - d.span.col)
            width = min(width, max(1, len(text) - d.span.col + 1))
            text, col, width = _window(text, d.span.col, width)
            gutter = f"{d.span.line:>4} | "
            out.append(gutter + text)
            out.append(" " * (len(gutter) + col - 1) + "^" * width)
    if d.hint:
        out.append(f"  hint: {d.hint}")
    return "\n".join(out)


#: the most characters of a source line a diagnostic shows; a longer line (a compact
#: JSON report, a long `let`) is shown as a window around the column, cut with "…"
MAX_SHOWN = 240
#: characters shown before the column in such a window
_BEFORE = 80


def _window(text: str, col: int, width: int) -> tuple[str, int, int]:
    """`text` cut to at most MAX_SHOWN characters around 1-based column `col`, and the
    column and caret width within what is shown."""
    if len(text) <= MAX_SHOWN:
        return text, col, width
    start = max(0, min(col - 1 - _BEFORE, len(text) - MAX_SHOWN))
    end = min(len(text), start + MAX_SHOWN)
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    shown_col = col - start + len(head)
    return head + text[start:end] + tail, shown_col, max(1, min(width, end - (col - 1)))


def render_all(diagnostics: Iterable[Diagnostic], source_lines: dict[str, list[str]],
               limit: int = 20) -> str:
    """Render up to `limit` diagnostics (none below 0) and say how many more there were."""
    items = list(diagnostics)
    limit = max(0, limit)
    shown = [render(d, source_lines) for d in items[:limit]]
    if len(items) > limit:
        shown.append(f"... and {len(items) - limit} more")
    return "\n\n".join(shown)


def as_data(diagnostic: Diagnostic) -> dict[str, Any]:
    """One diagnostic as plain data (`eairc check --format json`): code, severity, message,
    hint, file and range (1-based lines and columns, end exclusive), None where absent."""
    s = diagnostic.span
    return {"code": diagnostic.code, "severity": diagnostic.severity.value,
            "message": diagnostic.message, "hint": diagnostic.hint,
            "file": s.file if s else None,
            "range": {"start": {"line": s.line, "col": s.col},
                      "end": {"line": s.end_line, "col": s.end_col}} if s else None}


def sarif_log(diagnostics: Iterable[Diagnostic], version: str) -> dict[str, Any]:
    """Diagnostics as a SARIF 2.1.0 log (`eairc check --format sarif`), so GitHub code
    scanning and editors read them: one run of the tool `eairc`, one rule per code (its
    entry in docs/errors.md as its help), one result per diagnostic with its region; the
    hint is the result's `properties.hint` and follows the message after a blank line."""
    items = list(diagnostics)
    codes = sorted({d.code for d in items})
    index = {code: i for i, code in enumerate(codes)}
    # no helpUri: the project has no published address; the catalogue ships in the repo
    rules = [{"id": code, "name": code,
              "shortDescription": {"text": f"eairc diagnostic {code}"},
              "help": {"text": f"docs/errors.md, section {code}"}}
             for code in codes]
    results: list[dict[str, Any]] = []
    for d in items:
        text = d.message + (f"\n\nhint: {d.hint}" if d.hint else "")
        result: dict[str, Any] = {
            "ruleId": d.code, "ruleIndex": index[d.code],
            "level": "error" if d.is_error else "warning", "message": {"text": text}}
        if d.span is not None:
            s = d.span
            result["locations"] = [{"physicalLocation": {
                "artifactLocation": {"uri": s.file.replace("\\", "/")},
                "region": {"startLine": s.line, "startColumn": s.col,
                           "endLine": max(s.end_line, s.line),
                           "endColumn": max(s.end_col, s.col + 1 if s.end_line <= s.line
                                            else s.end_col)}}}]
        if d.hint:
            result["properties"] = {"hint": d.hint}
        results.append(result)
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION,
            "runs": [{"tool": {"driver": {"name": "eairc", "version": version,
                                          "rules": rules}},
                      "columnKind": "unicodeCodePoints",
                      "results": results}]}
