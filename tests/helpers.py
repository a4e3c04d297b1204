"""Test helpers: a sqlglot-style fixture loader and a compact S-expression view of the AST.

A fixture file is a list of sections separated by `# ---` lines. A section starts
with `# key: value` header lines (a key may repeat); everything after the last
header is the body, whose line 1 is the line right after the headers. A chunk
without headers (such as a file's opening comment) is not a section.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
_HEADER = re.compile(r"#\s*([\w-]+):\s*(.*?)\s*$")


@dataclass
class Section:
    """One fixture section: where it starts, its headers (key -> values) and its body."""

    file: str
    line: int
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: str = ""

    def first(self, key: str, default: str | None = None) -> str | None:
        return self.headers.get(key, [default])[0]


def load_sections(path: Path) -> list[Section]:
    """Split a fixture file into its sections, in order."""
    sections: list[Section] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    start, chunk = 1, []
    for number, line in enumerate([*lines, "# ---"], start=1):
        if line.strip() != "# ---":
            chunk.append(line)
            continue
        while chunk and not chunk[0].strip():
            chunk, start = chunk[1:], start + 1
        section = Section(file=path.name, line=start)
        while chunk and (match := _HEADER.match(chunk[0])):
            section.headers.setdefault(match[1], []).append(match[2])
            chunk = chunk[1:]
        section.body = "\n".join(chunk).rstrip() + "\n"
        if section.headers:
            sections.append(section)
        start, chunk = number + 1, []
    return sections


def sexpr(e: Any) -> str:
    """An AST expression as `(op args...)`; literals print as `kind:value` (value normalised)."""
    n, s = e.node, sexpr
    tail = ""
    if getattr(e, "tail", None) is not None:
        t = e.tail
        where = f" (where {s(t.where)})" if t.where is not None else ""
        by = f" (by {' '.join(s(g) for g in t.group_by)})" if t.group_by else ""
        tail = f" (for {t.var} {s(t.source)}{where}{by})"
    simple = {
        "literal": lambda: f"{e.kind}:{json.dumps(e.value)}",
        "name": lambda: e.id,
        "attr": lambda: f"(. {s(e.obj)} {e.name})",
        "index": lambda: f"(index {s(e.obj)} {s(e.index)})",
        "call": lambda: f"(call {e.func}" + "".join(
            f" {a.name}={s(a.value)}" if a.name else f" {s(a.value)}" for a in e.args) + ")",
        "unary": lambda: f"({'neg' if e.op == '-' else 'not'} {s(e.operand)})",
        "binary": lambda: f"({e.op} {s(e.left)} {s(e.right)})",
        "list": lambda: "(list" + "".join(f" {s(i)}" for i in e.items) + ")",
        "record": lambda: "(record" + "".join(f" {f.name}={s(f.value)}" for f in e.fields) + ")",
        "comprehension": lambda: f"(comp {s(e.body)}{tail})",
        "aggregate": lambda: f"({e.func} {s(e.body)}{tail})",
        "quantifier": lambda: f"({e.kind} {e.var} {s(e.source)} {s(e.body)})",
    }
    return simple[n]()


def sim_fixture(name: str, tmp_path: Path, text: str | None = None) -> Path:
    """`fixtures/sim/<name>/` copied into `tmp_path` (its data folder and main file), the
    main file's text replaced by `text` when given; the copy's main file."""
    import shutil

    source = FIXTURES / "sim" / name
    shutil.copytree(source / name, tmp_path / name)
    path = tmp_path / f"{name}.eair"
    path.write_text(text if text is not None else (source / f"{name}.eair").read_text(
        encoding="utf-8"), encoding="utf-8")
    return path
