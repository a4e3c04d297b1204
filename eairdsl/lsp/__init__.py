"""`eairc lsp`: a language server for `.eair` files and their cards over stdio (issue 30).

Editors get what `eairc check` and `eairc fmt` already know, at the cursor. The
server holds no language knowledge of its own: every answer is built from the
compiler's diagnostics, AST, loader and builtins table. Read it in this order:

- `text`: positions, and the identifiers of a buffer outside strings and comments;
- `index`: a tolerant parse of a buffer and its imports, what each name declares
  and where each is used (definition, references);
- `diagnose`, `outline`, `hover`, `complete`, `tokens`, `actions`, `cards`: one
  module per kind of answer, each a plain function of the buffer;
- `server`: the pygls wiring, the only part that knows about the protocol's
  sessions (open buffers, debouncing, client position encodings).

pygls is an optional dependency (the `lsp` extra); only this package imports it.
"""

from eairdsl.lsp.server import build_server, diagnostics_for, serve

__all__ = ["build_server", "diagnostics_for", "serve"]
