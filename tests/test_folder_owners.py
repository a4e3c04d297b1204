"""The audit and repair folders have one owner each: `eairdsl/audit/folder.py` and
`eairdsl/repair/folder.py` name their files (and `eairdsl/audit/bundle_store.py` the
bundles folder's shared files and compressed steps).

Issue 25, item 3: the audit folder's paths (index.json, reports/, bundles/,
cassettes/auditor.jsonl, an audit study's arms/, cohort.json, summary.json) were
composed by hand in six modules and parsed three ways. Every reader and writer now goes
through `eairdsl.audit.folder.AuditFolder`; this test fails when a module composes one
of those paths itself again. It reads the source with `ast` (nothing is imported) and
flags, outside the owners:

- a string constant naming one of the files as a path part: an operand of `/`, an
  argument of `Path(...)`, `.joinpath(...)`, `.glob(...)` or `.rglob(...)` (a glob
  pattern counts when one of its `/`-separated parts is such a name);
- the folder's name constants (`REPORTS`, `BUNDLES`, `AUDIT_INDEX`, …) as an operand
  of `/` or an argument of `.joinpath(...)`.

Messages that mention a file to a person (`"no index.json"`) are not paths and pass.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eairdsl"
#: the audit folder's file and folder names (eairdsl.audit.folder), and the repair
#: folder's (eairdsl.repair.folder)
NAMES = frozenset({"index.json", "reports", "bundles", "cassettes", "auditor.jsonl", "arms",
                   "cohort.json", "summary.json",
                   "loop.json", "plan.json", "acceptance.json", "outcome.json", "result.json",
                   "original.eair", "review.html", "rounds", "retest", "world.eair",
                   "shared", "events.jsonl.gz"})
#: the names the two owners give them
CONSTANTS = frozenset({"AUDIT_INDEX", "REPORTS", "BUNDLES", "AUDITOR_CASSETTE",
                       "ARMS", "COHORT", "SUMMARY",
                       "LOOP", "PLAN", "ACCEPTANCE", "OUTCOME", "RESULT", "ORIGINAL",
                       "REVIEW_PAGE", "ROUNDS", "RETESTS", "ACCEPTED_WORLD",
                       "SHARED", "EVENTS_GZ"})
OWNERS = {PACKAGE / "audit" / "folder.py", PACKAGE / "repair" / "folder.py",
          PACKAGE / "audit" / "bundle_store.py"}
_PATH_CALLS = {"joinpath", "glob", "rglob"}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p not in OWNERS)


def _names_a_file(node: ast.AST, glob: bool = False) -> bool:
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    parts = node.value.split("/") if glob else [node.value]
    return any(part in NAMES for part in parts)


def _is_constant(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else None
    return name in CONSTANTS


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _reach_ins(tree: ast.AST, names_too: bool) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if _names_a_file(side, glob=True) or (names_too and _is_constant(side)):
                    yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call):
            called = _call_name(node)
            if called == "Path" or called in _PATH_CALLS:
                for arg in node.args:
                    if _names_a_file(arg, glob=called != "Path") or (
                            names_too and called == "joinpath" and _is_constant(arg)):
                        yield node.lineno, ast.unparse(node)


def _found(names_too: bool) -> list[str]:
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out += [f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
                for line, text in _reach_ins(tree, names_too)]
    return sorted(set(out))


def test_the_check_sees_a_reach_in() -> None:
    """The walk flags each shape it is meant to, and leaves messages alone."""
    src = ('p = out / "reports" / f"{e}.json"\n'
           'q = Path(out, "index.json")\n'
           'r = out.joinpath(BUNDLES, e)\n'
           'g = root.glob("audit/*/index.json")\n'
           's = out / runner.REPORTS\n'
           'm = f"{out}: no index.json"\n'
           'n = out / "report.html"\n')
    lines = sorted({line for line, _ in _reach_ins(ast.parse(src), True)})
    assert lines == [1, 2, 3, 4, 5]
    assert sorted({line for line, _ in _reach_ins(ast.parse(src), False)}) == [1, 2, 4]


def test_the_owners_name_the_files() -> None:
    """The owners themselves compose them (else the check below would prove nothing)."""
    for owner in sorted(OWNERS):
        assert list(_reach_ins(ast.parse(owner.read_text(encoding="utf-8")), True)), owner


def test_no_module_composes_an_audit_folder_path_from_its_file_names() -> None:
    assert _found(names_too=False) == []


def test_no_module_joins_the_folder_name_constants() -> None:
    assert _found(names_too=True) == []
