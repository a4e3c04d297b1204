"""Signature help: while the arguments of a call are typed, the callee's parameters.

A builtin's signature comes from `runtime/builtins.py`; a `let` definition's or a
tool's from its declaration. The call is found on the text before the cursor (the
innermost `(` not yet closed, on this line or the ones just above), the active
parameter by counting the commas at that depth.
"""

from __future__ import annotations

import re

from lsprotocol import types as T

from eairdsl.lsp.hover import parameters, signature
from eairdsl.lsp.index import ProgramIndex
from eairdsl.runtime.builtins import BUILTINS

__all__ = ["signature_help"]

_CALLEE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*$")
#: how far back (lines) an unclosed `(` is looked for
_LINES_BACK = 8


def _open_call(before: str) -> tuple[str, int] | None:
    """The name called by the innermost unclosed `(` in `before`, and how many commas
    at its depth follow it (the 0-based active argument)."""
    depth = 0
    commas = 0
    quoted = False
    for at in range(len(before) - 1, -1, -1):
        char = before[at]
        if char == '"' and (at == 0 or before[at - 1] != "\\"):
            quoted = not quoted
        if quoted:
            continue
        if char in ")]}":
            depth += 1
        elif char in "[{":
            depth -= 1
        elif char == "(":
            if depth == 0:
                callee = _CALLEE.search(before[:at])
                return (callee.group(1), commas) if callee else None
            depth -= 1
        elif char == "," and depth == 0:
            commas += 1
        if depth < 0:
            return None
    return None


def signature_help(index: ProgramIndex, text: str, line: int, col: int
                   ) -> T.SignatureHelp | None:
    """The signature of the call the 0-based position is in the arguments of, or None."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return None
    before = "\n".join([*lines[max(0, line - _LINES_BACK):line], lines[line][:col]])
    found = _open_call(before)
    if found is None:
        return None
    name, active = found
    builtin = BUILTINS.get(name)
    if builtin is not None:
        params, label, doc = parameters(builtin), signature(builtin), builtin.doc
    else:
        declared = [d for d in index.top_level(name) if d.kind in ("let", "tool")]
        if not declared:
            return None
        label = declared[0].header
        opened = label.find("(")
        closed = label.rfind(")")
        inside = label[opened + 1:closed] if 0 <= opened < closed else ""
        params = [p.strip() for p in _split(inside)] if inside.strip() else []
        doc = declared[0].doc or ""
    information = T.SignatureInformation(
        label=label, documentation=doc or None,
        parameters=[T.ParameterInformation(label=p) for p in params])
    return T.SignatureHelp(signatures=[information], active_signature=0,
                           active_parameter=min(active, max(len(params) - 1, 0)))


def _split(params: str) -> list[str]:
    """A parameter list split at its top-level commas (`list[text]` keeps its own)."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(params):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(params[start:at])
            start = at + 1
    parts.append(params[start:])
    return parts
