"""`eairc lsp`: run the language server on stdin/stdout (eairdsl.lsp).

pygls is the optional `lsp` extra, so it is imported only when the command
runs: every other command works without it, and a missing extra is a usage
error that says how to install it rather than a traceback.
"""

from __future__ import annotations

from eairdsl.cli.output import EXIT_USAGE, fail

__all__ = ["lsp"]


def lsp() -> None:
    """Run the .eair language server over stdio (for editors; see docs/editors.md)."""
    try:
        from eairdsl.lsp import serve
    except ImportError as exc:
        fail(f"error: eairc lsp needs pygls ({exc}); install it with "
             "`pip install 'eairdsl[lsp]'`", EXIT_USAGE)
    serve()
