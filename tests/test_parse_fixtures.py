"""Golden parse fixtures (tests/fixtures/parse/*.eair): diagnostics, AST shapes, literal values."""

from __future__ import annotations

import re

import pytest
from helpers import FIXTURES, Section, load_sections, sexpr
from lark import Token, Tree

from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import get_parser, parse_text

SECTIONS = [s for path in sorted((FIXTURES / "parse").glob("*.eair")) for s in load_sections(path)]
_EXPECT = re.compile(r"^(E\d{3}) (\d+):(\d+)$")


def _params() -> list[object]:
    params = []
    for s in SECTIONS:
        marks = []
        if "xfail" in s.headers:
            marks.append(pytest.mark.xfail(strict=True, reason=s.headers["xfail"][0]))
        params.append(pytest.param(s, id=f"{s.file}:{s.line}", marks=marks))
    return params


def _expected(section: Section) -> list[tuple[str, int, int]]:
    wanted: list[tuple[str, int, int]] = []
    for value in section.headers["expect"]:
        if value == "ok":
            continue
        for item in value.split(","):
            match = _EXPECT.match(item.strip())
            assert match, f"bad expect header {item!r} in {section.file}:{section.line}"
            wanted.append((match[1], int(match[2]), int(match[3])))
    return sorted(wanted)


def _describe(decl: A.Decl) -> str:
    kind = getattr(decl, "kind", None)
    return f"{decl.decl}:{kind}" if isinstance(kind, str) else decl.decl


@pytest.mark.parametrize("section", _params())
def test_parse_fixture(section: Section) -> None:
    """Each fixture parses to exactly its expected diagnostics and, when given, its AST shape."""
    module, diagnostics = parse_text(section.body, section.file)
    got = sorted((d.code, d.span.line, d.span.col) for d in diagnostics if d.span is not None)
    assert got == _expected(section), [d.message for d in diagnostics]
    assert all(d.span is not None for d in diagnostics)
    assert all(d.span.file == section.file for d in diagnostics if d.span is not None)
    for hint in section.headers.get("hint", []):
        assert hint in (diagnostics.errors[0].hint or ""), diagnostics.errors[0].hint
    if not _expected(section):
        assert module is not None
    else:
        assert module is None
        return
    if "decls" in section.headers:
        assert " ".join(_describe(d) for d in module.decls) == section.first("decls")
    if "clauses" in section.headers:
        first = next(d for d in module.decls if hasattr(d, "clauses"))
        assert " ".join(c.key for c in first.clauses) == section.first("clauses")
    if "fields" in section.headers:
        first = next(d for d in module.decls if hasattr(d, "fields") or hasattr(d, "items"))
        items = getattr(first, "fields", None) or getattr(first, "items", [])
        names = [f.name for f in items if isinstance(f, A.FieldDecl)]
        assert " ".join(names) == section.first("fields")
    if "ast" in section.headers:
        first_expr = next(A.walk_exprs(module))
        assert sexpr(first_expr) == section.first("ast")


def test_fixture_inventory() -> None:
    """The fixtures hold at least 25 sections, every one with a name and an expect header."""
    assert len(SECTIONS) >= 25
    for s in SECTIONS:
        assert "name" in s.headers and "expect" in s.headers, f"{s.file}:{s.line}"
    assert sum(1 for s in SECTIONS if "ast" in s.headers) >= 10


def _tree_names(tree: Tree[Token], names: set[str], terminals: set[str]) -> None:
    names.add(str(tree.data))
    for child in tree.children:
        if isinstance(child, Tree):
            _tree_names(child, names, terminals)
        elif isinstance(child, Token):
            terminals.add(child.type)


def test_fixtures_cover_every_grammar_construct() -> None:
    """Every rule alternative and named terminal of the grammar occurs in an `ok` fixture."""
    parser = get_parser()
    wanted: set[str] = set()
    for rule in parser.rules:
        name = rule.alias or rule.origin.name
        if rule.alias or not (str(name).startswith("_") or rule.options.expand1):
            wanted.add(str(name))
    seen: set[str] = set()
    terminals: set[str] = set()
    for s in SECTIONS:
        if s.headers["expect"] == ["ok"]:
            _tree_names(parser.parse(s.body), seen, terminals)
    assert sorted(wanted - seen) == []
    named = {"NAME", "INT", "DECIMAL", "MONEY", "DURATION", "PERCENT", "DATE", "STRING",
             "LONG_STRING", "SIGNED_NUM"}
    assert sorted(named - terminals) == []


def test_enum_meanings_are_one_closed_vocabulary() -> None:
    """The meaning keywords the grammar takes after an enum are `vocabulary.ENUM_MEANINGS`,
    the AST's `EnumMeaning.meaning` and the IR's `EnumMeaningsIR` fields, all alike."""
    from typing import get_args

    from eairdsl.ir import EnumMeaningsIR
    from eairdsl.vocabulary import ENUM_MEANINGS

    grammar = {str(t.pattern.value) for t in get_parser().terminals
               if t.pattern.type == "str"}
    assert set(ENUM_MEANINGS) <= grammar
    assert set(get_args(A.EnumMeaning.model_fields["meaning"].annotation)) == set(ENUM_MEANINGS)
    assert set(EnumMeaningsIR.model_fields) == set(ENUM_MEANINGS)


def test_comments_are_kept_with_positions() -> None:
    """Line comments do not affect parsing and are kept on the module with their positions."""
    module, diagnostics = parse_text('enum e { a } // one\n// two\nenum f { b }\n')
    assert module is not None and len(diagnostics) == 0
    assert [(c.line, c.col, c.text) for c in module.comments] == [(1, 14, "// one"),
                                                                  (2, 1, "// two")]


def test_spans_cover_the_source_text() -> None:
    """A node's span covers exactly the text it was parsed from."""
    text = "let e() = lookup(employee, instance.target).name == \"x\"\n"
    module, _ = parse_text(text)
    assert module is not None
    expr = next(A.walk_exprs(module))
    span = expr.span
    assert (span.line, span.col, span.end_line, span.end_col) == (1, 11, 1, 56)
    left = expr.left  # type: ignore[union-attr]
    assert text[left.span.col - 1:left.span.end_col - 1] == "lookup(employee, instance.target).name"


def test_huge_integer_literal_is_a_diagnostic_not_an_exception() -> None:
    """An integer literal of over 4300 digits gives a module or a diagnostic, not an exception."""
    module, diagnostics = parse_text("let e() = " + "9" * 5000 + "\n")
    assert module is not None or len(diagnostics) > 0
