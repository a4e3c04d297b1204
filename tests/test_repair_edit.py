"""eairdsl/repair/edit.py: declaration-level edits that keep everything else, comments too."""

from __future__ import annotations

import difflib

import pytest

from eairdsl.repair import edit as E
from eairdsl.syntax import ast as A

SOURCE = '''// A small world for edits.
world w {
  risk A1
  operation "payments"
  preserves "the cap"
}

import "stdlib/ledger.eair"

// the cap lives here
policy cap unenforced {
  text "At most $40."
  rule sum(p.amount for p in payments) <= $40
}

tool pay(customer_id: text, amount: money) -> text {
  kind act
  cost 1 min // a minute
  // only known customers
  require customer_id != "" else reject "unknown customer" // guard one
  append payments {customer: customer_id, amount: amount}
  returns "paid"
}

tool look() -> text {
  kind read
  acl context.principal when strict
  returns "x"
}
'''


def _changed(old: str, new: str) -> list[str]:
    return [line for line in difflib.ndiff(old.splitlines(), new.splitlines())
            if line[:1] in "+-"]


def test_formatter_round_trip_is_the_identity_on_formatted_text() -> None:
    assert E.format_source(SOURCE) == SOURCE


def test_insert_a_guard_after_the_last_require_keeps_comments() -> None:
    out = E.insert_clause(SOURCE, "tool", "pay", 'ensure cap else reject "over the cap"',
                          after=(A.RequireClause,))
    assert _changed(SOURCE, out) == ['+   ensure cap else reject "over the cap"']
    lines = out.splitlines()
    guard = lines.index('  require customer_id != "" else reject "unknown customer" // guard one')
    assert lines[guard + 1] == '  ensure cap else reject "over the cap"'
    for comment in ("// A small world for edits.", "// the cap lives here", "// a minute",
                    "// only known customers", "// guard one"):
        assert comment in out
    parsed = E.parse(out)
    tool = parsed.decl("tool", "pay")
    assert isinstance(tool, A.ToolDecl)
    assert [c.key for c in tool.clauses] == ["kind", "cost", "require", "ensure", "append",
                                            "returns"]


def test_insert_falls_back_when_there_is_no_anchor() -> None:
    out = E.insert_clause(SOURCE, "tool", "look", 'require true else reject "no"',
                          after=(A.RequireClause,), fallback=(A.KindClause,))
    tool = E.parse(out).decl("tool", "look")
    assert isinstance(tool, A.ToolDecl)
    assert [c.key for c in tool.clauses] == ["kind", "require", "acl", "returns"]


def test_replace_and_remove_a_clause() -> None:
    out = E.replace_clause(SOURCE, "tool", "look", lambda c: isinstance(c, A.AclClause),
                           "acl context.requester")
    assert _changed(SOURCE, out) == ["-   acl context.principal when strict",
                                     "+   acl context.requester"]
    removed = E.replace_clause(SOURCE, "tool", "look", lambda c: isinstance(c, A.AclClause),
                               None)
    assert _changed(SOURCE, removed) == ["-   acl context.principal when strict"]


COMPACT = '''tool pay(amount: money) -> text { kind act; cost 1 min; returns "paid" }

tool look() -> text {
  kind read; acl context.principal when strict
  returns "x"
}
'''


@pytest.mark.parametrize(("tool", "key", "expected"), [
    ("pay", "kind", 'tool pay(amount: money) -> text { cost 1 min; returns "paid" }'),
    ("pay", "cost", 'tool pay(amount: money) -> text { kind act; returns "paid" }'),
    ("pay", "returns", "tool pay(amount: money) -> text { kind act; cost 1 min }"),
    ("look", "acl", 'tool look() -> text {\n  kind read\n  returns "x"\n}'),
])
def test_remove_a_clause_that_shares_its_line(tool: str, key: str, expected: str) -> None:
    """In the compact form a removed clause takes one `;` with it: the one after it, or
    the one before when it was the last on its line (a `;` left alone is E114)."""
    out = E.replace_clause(COMPACT, "tool", tool, lambda c: c.key == key, None)
    assert expected in out


def test_insert_a_clause_into_a_compact_tool_parses() -> None:
    out = E.insert_clause(COMPACT, "tool", "pay", 'ensure cap else reject "over the cap"',
                          after=(A.KindClause,))
    tool = E.parse(out).decl("tool", "pay")
    assert [c.key for c in tool.clauses] == ["kind", "ensure", "cost", "returns"]  # type: ignore[union-attr]


def test_add_an_import_once_after_the_last_import() -> None:
    out = E.add_import(SOURCE, "stdlib/approval.eair")
    assert _changed(SOURCE, out) == ["+ ", '+ import "stdlib/approval.eair"'] or _changed(
        SOURCE, out) == ['+ import "stdlib/approval.eair"', "+ "]
    lines = out.splitlines()
    assert lines.index('import "stdlib/approval.eair"') > lines.index(
        'import "stdlib/ledger.eair"')
    assert E.add_import(out, "stdlib/approval.eair") == out


def test_add_a_declaration_after_another() -> None:
    out = E.add_declaration(SOURCE, 'policy other unenforced {\n  text "x"\n}',
                            after=("policy", "cap"))
    parsed = E.parse(out)
    kinds = [(E.decl_kind(d), getattr(d, "name", None)) for d in parsed.module.decls]
    assert kinds.index(("policy", "other")) == kinds.index(("policy", "cap")) + 1
    assert "// the cap lives here" in out


def test_edits_that_do_not_parse_or_miss_their_target_are_refused() -> None:
    with pytest.raises(E.EditError, match="does not parse"):
        E.insert_clause(SOURCE, "tool", "pay", "ensure else reject")
    with pytest.raises(E.EditError, match="no tool 'nope'"):
        E.insert_clause(SOURCE, "tool", "nope", 'require true else reject "x"')
    with pytest.raises(E.EditError, match="no such clause"):
        E.replace_clause(SOURCE, "tool", "pay", lambda c: isinstance(c, A.AclClause), "acl x")
