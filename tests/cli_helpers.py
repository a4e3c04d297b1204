"""`eairc` as a user runs it, for every test module that drives the CLI in a subprocess.

`run_eairc` runs `python -m eairdsl.cli` (the console script's entry point) offline and
fails the test on any traceback or internal error; `make_workspace` copies the
repository's `worlds/` somewhere a test may write, so nothing in the repository is
ever modified. A helper module, not a test module: tests import it, never each other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_eairc(*args: object, cwd: Path, env: dict[str, str] | None = None,
              python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run `python -m eairdsl.cli ARGS` in `cwd`; no run may ever show a traceback."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("EAIR_DEBUG", "EAIR_STDLIB")}
    full_env.update(LITELLM_OFFLINE_MODE="true", LITELLM_LOCAL_MODEL_COST_MAP="True")
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, *python_flags, "-m", "eairdsl.cli", *map(str, args)],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout
    assert "internal error" not in proc.stderr, proc.stderr
    return proc


def make_workspace(dest: Path) -> Path:
    """A copy of the repository's worlds/ under `dest` (an eairdsl/ would shadow the package)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "worlds", dest / "worlds")  # stdlib imports come from the package
    return dest
