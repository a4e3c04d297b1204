"""The package's shape in figures: import cycles, climbing imports, long functions, and
the back half's reach-ins (issue 25's before/after).

Reads the source with `ast` only (nothing is imported or run) and prints:

- import cycles, counting every import of an `eairdsl` module: top-level, inside
  functions (loaded on first use) — those under `if TYPE_CHECKING:` are listed apart,
  since they never run;
- climbing imports: a module importing a later pipeline stage (the stages of
  `tests/test_episode_parts.py`), at any level;
- functions over 80 lines, in the whole package and in the back half
  (audit/, repair/, signals/, study/, external/);
- modules that import `eairdsl.api` only to raise or catch its errors;
- reads of an audit report's findings as dicts (`x["findings"]`, `x.get("findings")`,
  `finding["..."]`, `f.get("...")` on a finding);
- the size of the CLI.

    python benchmarks/architecture.py [--list]
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "eairdsl"
sys.path.insert(0, str(ROOT / "tests"))

from test_episode_parts import STAGES, _stage  # noqa: E402

BACK_HALF = ("eairdsl.audit", "eairdsl.repair", "eairdsl.signals", "eairdsl.study",
             "eairdsl.external")
ERRORS = {"UsageError", "WorldHasErrors", "EairError"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> list[tuple[str, int, str, list[str]]]:
    """(target, line, where, imported names) for every eairdsl import of a module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int, str, list[str]]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                here = "function" if where == "top" else where
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                here = "type-checking"
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, here, []) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parent = parts[:len(parts) - (child.level - 1)]
                    base = ".".join([*parent, *([base] if base else [])])
                names = [a.name for a in child.names]
                subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
                if subs:
                    out.extend((t, child.lineno, here, [t.rpartition(".")[2]]) for t in subs)
                else:
                    out.append((base, child.lineno, here, names))
            visit(child, here)

    visit(ast.parse(path.read_text(encoding="utf-8")), "top")
    return [i for i in out if i[0] == "eairdsl" or i[0].startswith("eairdsl.")]


def resolve(target: str) -> str:
    """A target that names no module (a package attribute) is its package."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def long_functions(limit: int = 80) -> list[tuple[str, str, int]]:
    out = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    out.append((name, node.name, length))
    return sorted(out, key=lambda t: -t[2])


_DICT_READS = re.compile(
    r"""\[\s*["'](findings|leads)["']\s*\]|\.get\(\s*["'](findings|leads)["']"""
    r"""|\b(finding|f|lead)\s*\[\s*["']\w+["']\s*\]|\b(finding|lead)\.get\(\s*["']""")


def dict_reads() -> list[str]:
    out = []
    for name, path in MODULES.items():
        if not name.startswith(BACK_HALF) and name != "eairdsl.cli" \
                and not name.startswith("eairdsl.cli."):
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _DICT_READS.search(line):
                out.append(f"{name}:{no}: {line.strip()}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--list", action="store_true", help="list every item counted")
    args = parser.parse_args()
    graph = {name: imports(name) for name in MODULES}
    run_edges: dict[str, set[str]] = defaultdict(set)
    all_edges: dict[str, set[str]] = defaultdict(set)
    climbs: list[str] = []
    api_for_errors: list[str] = []
    for name, found in graph.items():
        rank = _stage(name)
        for target, line, where, names in found:
            t = resolve(target)
            if t != name:
                all_edges[name].add(t)
                if where != "type-checking":
                    run_edges[name].add(t)
            trank = _stage(t)
            if rank is not None and trank is not None and trank > rank:
                climbs.append(f"{name}:{line} ({STAGES[rank][0]}) imports {t} "
                              f"({STAGES[trank][0]}) [{where}]")
            if t == "eairdsl.api" and names and set(names) <= ERRORS:
                api_for_errors.append(f"{name}:{line}")
    run_cycles = cycles(run_edges)
    all_cycles = cycles(all_edges)
    longs = long_functions()
    back = [f for f in longs if f[0].startswith(BACK_HALF)]
    cli_files = [p for n, p in MODULES.items()
                 if n == "eairdsl.cli" or n.startswith("eairdsl.cli.")]
    cli_lines = {module_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in cli_files}
    reads = dict_reads()
    print(f"import cycles (top-level and function-level): {len(run_cycles)} "
          f"({sum(len(c) for c in run_cycles)} modules)")
    print(f"import cycles (with TYPE_CHECKING imports too): {len(all_cycles)}")
    print(f"climbing imports (any level): {len(climbs)}")
    print(f"functions over 80 lines: {len(longs)} (back half: {len(back)})")
    api_modules = {a.split(":")[0] for a in api_for_errors}
    print(f"modules importing eairdsl.api for an error: {len(api_modules)}")
    print(f"dict reads of findings: {len(reads)}")
    print(f"cli: {sum(cli_lines.values())} lines in {len(cli_lines)} module(s); "
          f"largest {max(cli_lines.values()) if cli_lines else 0}")
    if args.list:
        for c in run_cycles:
            print("cycle:", " ".join(c))
        for c in climbs:
            print("climb:", c)
        for m, f, n in longs:
            print(f"long: {m}.{f} {n}")
        for a in api_for_errors:
            print("api-for-error:", a)
        for r in reads:
            print("dict-read:", r)


if __name__ == "__main__":
    main()
