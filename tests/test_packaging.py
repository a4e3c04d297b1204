"""The package works from a built wheel: everything it reads at run time ships inside it.

CI builds the wheel and runs `eairc compile` + `eairc run` from outside the
checkout (`.ci/run`); this test catches the cause of that failure earlier: a
data file under `eairdsl/` that no `package-data` glob covers.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from eairdsl.check.loader import stdlib_root
from eairdsl.syntax.parser import GRAMMAR_PATH

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "eairdsl"


def _globs() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs: list[str] = config["tool"]["setuptools"]["package-data"]["eairdsl"]
    return globs


def test_every_data_file_in_the_package_is_shipped() -> None:
    """Each non-Python file under eairdsl/ matches a package-data glob of pyproject.toml."""
    data = [p.relative_to(PACKAGE).as_posix() for p in sorted(PACKAGE.rglob("*"))
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "syntax/eair.lark" in data and "stdlib/delegation.eair" in data
    unshipped = [d for d in data if not any(fnmatch.fnmatch(d, g) for g in _globs())]
    assert unshipped == []


def test_grammar_and_stdlib_are_read_from_inside_the_package() -> None:
    """The parser's grammar and the stdlib folder live under the package, not the checkout."""
    assert GRAMMAR_PATH.is_relative_to(PACKAGE) and GRAMMAR_PATH.is_file()
    assert stdlib_root().resolve().is_relative_to(PACKAGE)
    assert sorted(p.name for p in stdlib_root().glob("*.eair"))
