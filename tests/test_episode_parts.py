"""The package's import graph: the agents never import the API, the runtime never imports
the sim agents, and the pipeline stages import only earlier stages.

Each module's imports are read with `ast` — top-level ones, those inside
functions (imported on first use) and those under `if TYPE_CHECKING:` — and
a subprocess confirms what importing a module really loads.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eairdsl"

#: The pipeline, in order; a module may import modules of its own stage or earlier ones.
#: A stage is named by module prefixes, except `foundation` (exact modules): what every
#: stage may use, importing nothing of the others. The longest prefix wins, so a module
#: of runtime/ named in `ir` belongs to `ir`.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("eairdsl", "eairdsl.errors", "eairdsl.registry", "eairdsl.vocabulary",
                    "eairdsl.taxonomy",
                    "eairdsl.source", "eairdsl.diagnostics", "eairdsl.names")),
    ("syntax", ("eairdsl.syntax",)),
    # the IR schema and its one evaluator (values, the witness rules its recording scope
    # applies, the scope, the builtins, the compiler of closures, data conformance): the
    # checker folds constants with it (one semantics, Jinja's `as_const`), so it sits
    # below the checker
    ("ir", ("eairdsl.ir", "eairdsl.runtime.values", "eairdsl.runtime.witness",
            "eairdsl.runtime.scope", "eairdsl.runtime.builtins", "eairdsl.runtime.evaluate",
            "eairdsl.runtime.conform")),
    ("check", ("eairdsl.check",)),
    # the compiler (check + lower, and the topology it draws) and the IR's analyses:
    # what a declaration reads, and the semantic diff the repair stage gates on
    ("lower", ("eairdsl.lower", "eairdsl.compiler", "eairdsl.graph", "eairdsl.diagram",
               "eairdsl.reads", "eairdsl.diff")),
    ("agents", ("eairdsl.agents",)),
    # with the interaction graph of one episode, read from its trace
    ("runtime", ("eairdsl.runtime", "eairdsl.interaction")),
    ("measure", ("eairdsl.measure",)),
    ("api", ("eairdsl.api", "eairdsl.episodes", "eairdsl.judges")),
    ("study", ("eairdsl.study",)),
    ("audit", ("eairdsl.audit",)),
    # the study's HTML report shows each episode's audit findings, so it reads audit
    # folders (through `audit/folder.py`) and comes after the audit stage
    ("report", ("eairdsl.study.report", "eairdsl.study.audits")),
    ("repair", ("eairdsl.repair",)),
    ("signals", ("eairdsl.signals",)),
    ("external", ("eairdsl.external",)),
    # what a folder of results holds (`eairc ls`): it names every stage's folders
    ("inventory", ("eairdsl.inventory",)),
    # the language server for editors: the checker, formatter and builtins at a cursor
    ("lsp", ("eairdsl.lsp",)),
)


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    where: str  # "top", "function" or "type-checking"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str) -> list[Import]:
    """Every `eairdsl` import of a module; `from pkg import sub` counts as importing pkg.sub."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                here = "function" if where == "top" else where
            elif isinstance(child, ast.If) and _is_type_checking(child):
                here = "type-checking"
            if isinstance(child, ast.Import):
                out.extend(Import(a.name, child.lineno, here) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.split(".")[:len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*parent, *([base] if base else [])])
                subs = [f"{base}.{a.name}" for a in child.names if f"{base}.{a.name}" in MODULES]
                out.extend(Import(t, child.lineno, here) for t in subs or [base])
            visit(child, here)

    visit(ast.parse(path.read_text(encoding="utf-8")), "top")
    return [i for i in out if i.target == "eairdsl" or i.target.startswith("eairdsl.")]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _stage(name: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, stage); the longest prefix wins
    for rank, (stage, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            hit = name == prefix if stage == "foundation" else _within(name, prefix)
            if hit and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return None if best is None else best[1]


GRAPH = {name: _imports(name) for name in MODULES}


def test_the_graph_sees_the_modules_and_their_imports() -> None:
    """The walk finds the package and reads function-level and relative imports too."""
    assert {"eairdsl.runtime.engine", "eairdsl.agents.llm", "eairdsl.api",
            "eairdsl.study.executor", "eairdsl.vocabulary"} <= set(MODULES)
    api = {(i.target, i.where) for i in GRAPH["eairdsl.api"]}
    assert ("eairdsl.runtime.engine", "top") in api
    assert ("eairdsl.agents.llm", "function") in api  # LLM agents load on first use
    assert ("eairdsl.agents.llm", "type-checking") in api


def test_no_agent_module_imports_the_api() -> None:
    """Agents plug into the runtime; the episode runner lives after them (eairdsl.api)."""
    bad = [f"{name}:{i.line} imports {i.target} ({i.where})"
           for name, imports in GRAPH.items() if _within(name, "eairdsl.agents")
           for i in imports if _within(i.target, "eairdsl.api")]
    assert bad == []


def test_the_runtime_does_not_import_the_sim_agents() -> None:
    """Trait names come from eairdsl.vocabulary, not from eairdsl.agents.sim."""
    bad = [f"{name}:{i.line} imports {i.target} ({i.where})"
           for name, imports in GRAPH.items() if _within(name, "eairdsl.runtime")
           for i in imports if _within(i.target, "eairdsl.agents.sim")]
    assert bad == []


def test_the_vocabulary_imports_nothing_of_the_package() -> None:
    assert GRAPH["eairdsl.vocabulary"] == []


def test_stages_import_only_their_own_or_earlier_stages() -> None:
    """syntax → ir → check → lower → agents → runtime → measure → api → study → audit →
    repair → signals → external, counting every import: at module level, inside functions
    (loaded on first use: still a dependency, and the way a cycle hides) and under
    TYPE_CHECKING (a type is a dependency too; a later stage's type is named by a Protocol).
    """
    bad = []
    for name, imports in GRAPH.items():
        rank = _stage(name)
        if rank is None:
            continue  # front ends (cli) sit outside
        for i in imports:
            target = _stage(_module(i.target))
            if target is None:
                bad.append(f"{name}:{i.line} imports {i.target}, which is in no stage")
            elif target > rank:
                bad.append(f"{name} ({STAGES[rank][0]}):{i.line} imports {i.target} "
                           f"({STAGES[target][0]}), a later stage [{i.where}]")
    assert bad == []


def test_every_module_is_in_a_stage() -> None:
    """A new module is placed on purpose: outside the cli, every module has a stage."""
    assert [n for n in MODULES if _stage(n) is None and not _within(n, "eairdsl.cli")] == []


def _module(target: str) -> str:
    """An import's module: `from eairdsl.x import name` where name is no module is eairdsl.x."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def _edges(kinds: tuple[str, ...]) -> dict[str, list[str]]:
    return {n: sorted({_module(i.target) for i in GRAPH[n] if i.where in kinds} - {n})
            for n in MODULES}


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node, [node])
    return cycles


def test_no_import_cycle_anywhere() -> None:
    """No import cycle in the package, counting imports inside functions (a cycle hidden in
    a function-level import is still one: neither module can be read without the other)
    and under TYPE_CHECKING."""
    assert _cycles(_edges(("top", "function", "type-checking"))) == []


def test_the_cycle_walk_finds_a_cycle() -> None:
    """The walk is not vacuous: it finds a cycle through a third module, the graph has the
    package's edges, and `from eairdsl.api import UsageError` is an edge to the API."""
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []
    assert sum(len(v) for v in _edges(("top", "function", "type-checking")).values()) > 500
    assert _module("eairdsl.api.UsageError") == "eairdsl.api"


_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.startswith("eairdsl"))))
"""


def _loads(module: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True,
                          text=True, check=True, timeout=120)
    return set(json.loads(proc.stdout))


@pytest.mark.parametrize(("module", "never"), [
    ("eairdsl.runtime.engine", "eairdsl.agents.sim"),
    ("eairdsl.runtime.engine", "eairdsl.api"),
    ("eairdsl.agents.llm", "eairdsl.api"),
    ("eairdsl.agents.sim", "eairdsl.runtime.engine"),
    ("eairdsl.check.references", "eairdsl.agents.sim"),
    ("eairdsl.measure", "eairdsl.agents.sim"),
])
def test_importing_a_module_does_not_load_another(module: str, never: str) -> None:
    loaded = _loads(module)
    assert module in loaded
    assert never not in loaded


def test_one_definition_of_each_vocabulary() -> None:
    """The trait and measurement names every stage uses are the vocabulary's objects."""
    from eairdsl import vocabulary
    from eairdsl.agents import sim
    from eairdsl.check import references
    from eairdsl.measure import MEASUREMENTS
    from eairdsl.runtime import inducers

    assert sim.TRAITS is references.TRAITS is inducers.TRAITS is vocabulary.TRAITS
    assert MEASUREMENTS is vocabulary.MEASUREMENTS
    assert len(vocabulary.MEASUREMENTS) == 6
