"""The package's own exceptions, at the bottom of the import graph.

Every stage may raise a user's error; none should import a later stage to do so
(sqlglot keeps `errors.py` at the bottom for the same reason). `UsageError` is
bad input a user can fix — the CLI prints its message and exits non-zero — and
`WorldHasErrors` is a world that did not compile, its message the rendered
diagnostics. `eairdsl.api` re-exports both, so `from eairdsl.api import
UsageError` keeps working for library users.

This module imports nothing of the package.
"""

from __future__ import annotations

__all__ = ["EairError", "UsageError", "WorldHasErrors"]


class EairError(Exception):
    """The base of every error this package raises on purpose (never a bug)."""


class UsageError(EairError):
    """Bad input a user can fix; the CLI prints it and exits non-zero."""


class WorldHasErrors(UsageError):
    """The world did not compile; the message is the rendered diagnostics."""
