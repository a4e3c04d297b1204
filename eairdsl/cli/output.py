"""Exit codes and the error exits every command shares.

The cli package is the only printer of the package and the only chooser of exit
codes: 0 success, 1 the input has errors (diagnostics were printed), 2 usage
errors, 130 interrupted. A failure is one call here, so every command words and
exits the same way.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from eairdsl.errors import WorldHasErrors

EXIT_OK, EXIT_INPUT, EXIT_USAGE = 0, 1, 2
#: What a shell reports for Ctrl-C; typer would exit with it without a word.
EXIT_INTERRUPTED = 130


def err(text: str) -> None:
    """One message on stderr: stdout is kept for results a script may read."""
    sys.stderr.write(text + "\n")


def usage_message(exc: Exception) -> str:
    """Compile diagnostics print as they are; other usage errors get an `error:` prefix."""
    return str(exc) if isinstance(exc, WorldHasErrors) else f"error: {exc}"


def fail(text: str, code: int = EXIT_INPUT) -> NoReturn:
    """Print `text` on stderr and exit with `code` (no traceback: the message says it all)."""
    err(text)
    raise typer.Exit(code) from None


def refuse(exc: Exception) -> NoReturn:
    """A library refused the input (a UsageError and kin): its message, then exit 1."""
    fail(usage_message(exc))


def interrupted(text: str) -> NoReturn:
    """Ctrl-C: say what was kept, then exit 130."""
    fail(f"interrupted: {text}", EXIT_INTERRUPTED)
