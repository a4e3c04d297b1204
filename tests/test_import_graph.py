"""The runtime reads the IR alone: importing it never loads the front end.

`eairdsl.ir` is the schema, `eairdsl.lower` the lowering from the checked AST.
Running a compiled world.json must not import the parser (lark), the card
renderer (jinja2), the checker, the syntax tree or the lowering.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FRONT_END = ("lark", "jinja2", "eairdsl.check", "eairdsl.syntax", "eairdsl.lower")

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(*modules: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True,
                          text=True, check=True, timeout=120)
    return set(json.loads(proc.stdout))


def _front_end(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded
                  if any(m == f or m.startswith(f + ".") for f in FRONT_END))


@pytest.mark.parametrize("module", ["eairdsl.runtime.engine", "eairdsl.ir",
                                    "eairdsl.runtime.evaluate", "eairdsl.api"])
def test_runtime_never_imports_the_front_end(module: str) -> None:
    """The runtime and the IR schema load without lark, jinja2, the checker or lowering."""
    loaded = _loaded(module)
    assert module in loaded  # the probe really imported it
    assert _front_end(loaded) == []


def test_the_compiler_does_import_the_front_end() -> None:
    """The probe can see the front end: the compiler imports lowering, checker and parser."""
    loaded = _loaded("eairdsl.compiler")
    assert {"eairdsl.lower", "lark"} <= loaded
    assert any(m.startswith("eairdsl.check") for m in loaded)


def test_the_audit_contract_loads_no_front_end() -> None:
    """The report contract is data a consumer reads without the compiler: importing it loads
    neither lark nor jinja2 nor any checker module (it took `RISKS` from the checker)."""
    loaded = _loaded("eairdsl.audit.contract")
    assert "eairdsl.audit.contract" in loaded
    assert _front_end(loaded) == []
    assert not any(m.startswith(("eairdsl.runtime", "eairdsl.api", "eairdsl.study"))
                   for m in loaded)


@pytest.mark.parametrize("module", ["eairdsl.signals.store", "eairdsl.repair.apply",
                                    "eairdsl.study.sqlite_file"])
def test_raising_a_usage_error_loads_no_runtime(module: str) -> None:
    """`UsageError` lives in `eairdsl.errors` at the bottom: a module that only needs to raise
    it does not pull in the API and, through it, the runtime and the agents."""
    loaded = _loaded(module)
    assert module in loaded
    assert "eairdsl.api" not in loaded
    assert "eairdsl.runtime.engine" not in loaded


def _test_module(name: str) -> bool:
    return name == "tests" or name.startswith("tests.") or name.startswith("test_")


def test_no_test_module_imports_another() -> None:
    """A test module imports helper modules of tests/ (`cli_helpers`, `scripted_llm`, ...),
    never a test module: importing one ran its module code twice under another name
    (`tests.test_cli` beside `test_cli`) and tied collection to the working directory."""
    import ast
    from pathlib import Path

    found = []
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                      if _test_module(n)]
    assert found == []
