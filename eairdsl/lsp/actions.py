"""Quick fixes: the one edit a diagnostic's hint names.

`diagnose` puts the edit in a diagnostic's `data` when its hint is a single "did
you mean 'x'?" and the misspelt word is found inside its range; the client sends
the diagnostics back with a code-action request, and each such one becomes a
"replace with" fix. Nothing is guessed here that the compiler did not suggest.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types as T

__all__ = ["quick_fixes"]


def _edit(data: Any) -> tuple[T.Range, str] | None:
    """The (range, new text) a diagnostic's `data` carries, if it is well formed."""
    if not isinstance(data, dict):
        return None
    try:
        where = data["range"]
        start, end = where["start"], where["end"]
        span = T.Range(start=T.Position(line=int(start["line"]), character=int(start["character"])),
                       end=T.Position(line=int(end["line"]), character=int(end["character"])))
        new_text = data["newText"]
    except (KeyError, TypeError, ValueError):
        return None
    return (span, new_text) if isinstance(new_text, str) else None


def quick_fixes(uri: str, diagnostics: list[T.Diagnostic]) -> list[T.CodeAction]:
    """A "replace with" action for each diagnostic that carries a suggested edit."""
    actions = []
    for diagnostic in diagnostics:
        edit = _edit(diagnostic.data)
        if edit is None:
            continue
        where, new_text = edit
        actions.append(T.CodeAction(
            title=f"Replace with '{new_text}'", kind=T.CodeActionKind.QuickFix,
            diagnostics=[diagnostic], is_preferred=True,
            edit=T.WorkspaceEdit(changes={uri: [T.TextEdit(range=where, new_text=new_text)]})))
    return actions
