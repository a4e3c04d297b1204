"""The canonical formatter: same meaning, same comments, one layout, stable on a second run."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eairdsl.syntax.ast import strip_spans
from eairdsl.syntax.build import decode_string
from eairdsl.syntax.fmt import (
    INDENT,
    FormatterError,
    format_module,
    format_string,
    format_text,
)
from eairdsl.syntax.parser import parse_text

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted({*ROOT.glob("worlds/**/*.eair"), *ROOT.glob("eairdsl/stdlib/**/*.eair")})
CORPUS_TEXTS = [p.read_text(encoding="utf-8") for p in CORPUS]

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def fmt(text: str) -> str:
    """Format text that must parse."""
    out, diagnostics = format_text(text)
    assert out is not None, [d.message for d in diagnostics.errors]
    return out


def assert_canonical(text: str) -> str:
    """The formatter's contract on one valid input; returns the formatted text."""
    module, _ = parse_text(text)
    assert module is not None
    out = format_module(module, text)
    again, diagnostics = parse_text(out)
    assert again is not None, (out, [(d.message, str(d.span)) for d in diagnostics.errors])
    assert strip_spans(again.decls) == strip_spans(module.decls), out
    assert [c.text for c in again.comments] == [c.text for c in module.comments], out
    assert format_module(again, out) == out
    return out


def rule_of(expr: str) -> str:
    """The formatted text of `expr` as a policy rule."""
    out = fmt(f"policy p {{ rule {expr} }}")
    return out.split("rule ", 1)[1].rsplit("\n}", 1)[0]


# ------------------------------------------------------------------ the corpus

def test_corpus_is_found() -> None:
    """The globs find worlds and stdlib files, so the corpus tests below are not vacuous."""
    assert any(p.parent.name == "stdlib" for p in CORPUS)
    assert any("worlds" in p.relative_to(ROOT).parts for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=[str(p.relative_to(ROOT)) for p in CORPUS])
def test_corpus_round_trip_and_idempotence(path: Path) -> None:
    """Every world and stdlib file keeps its AST and its comments, and formats to a fixed point."""
    assert_canonical(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ layout

def test_block_layout_and_blank_lines() -> None:
    """Blocks print one item per line, two spaces in; declarations are one blank line apart."""
    src = ('world w { title "T" risk D1 seeds 3 }   lever a:bool=false\n\n\n\n'
           'condition c "doc" extends base { a = true b = 1 }')
    assert fmt(src) == (
        'world w {\n  title "T"\n  risk D1\n  seeds 3\n}\n\n'
        "lever a : bool = false\n\n"
        'condition c "doc" extends base {\n  a = true\n  b = 1\n}\n'
    )


def test_empty_blocks_print_braces_on_one_line() -> None:
    """A block with no items and no comments prints `{ }`; with only a comment it opens up."""
    assert fmt("condition c {\n\n}") == "condition c { }\n"
    assert fmt("measure {}") == "measure { }\n"
    assert fmt("condition c {\n // later\n}") == "condition c {\n  // later\n}\n"


def test_every_declaration_kind_prints_its_canonical_header() -> None:
    """Each declaration and clause form has one spelling, and that spelling reparses."""
    src = """
    import "stdlib/delegation.eair"
    enum e {a,b}
    schema s closed { x: text max 20  y: list[text] }
    table t from "t.json" key id { id: text epistemic known default "x" canary group g = id }
    state s1: int = 3
    document handbook from "h.md" epistemic hearsay
    authorization default deny { allow a -> t.g, t.*  deny b -> t.id }
    policy p unenforced { text "no" source handbook rule a == b }
    inducer i: dashboard { roles a, b when x text "t" at 5 min every 1 h from t
      shift deference -0.2 cost $5 points 3 }
    tool t(a: text = "" hint x.y, b: int) -> {a, b} { kind write cost 1 min description "d"
      require a != "" else route b when c returns a append t {id: a} when c set s1 = 1
      delegates other propagates x sends to y acl z when w }
    tool u() -> text { delegates }
    role r { model m card "c" kpi "k" memory shared authority 2 principal x objective "o"
      tools a when x, b trait caution +0.5 description "d" }
    actor q scripted { at 0 min say "hi" to r when y  at 1 h contact r }
    simulator sim { }
    channel a -> b via c
    channel a -> b
    delegation a -> b via d
    fork a -> b, c
    merge a, b -> c
    relay a -> b -> c
    channel a -> c when   round() ==2
    fork a -> b, c when x
    merge a, b -> c when x
    relay a -> b -> c when x
    inducer w : warning { on t to context.caller }
    inducer board : dashboard { text "Closed: "+text(count(c))+"." }
    actor rep scripted { authority choose(x, 5, 1) display "J. Avery"
      at 0 min say "hi" to instance.who }
    instances from "i.json" { id: text }
    instance one { x = 1 }
    let f(a: int, b: text) = a + 1
    measure { realized = a when b metric m = 1 }
    protected measure, instances, authorization, t
    """
    out = assert_canonical(src)
    for line in [
        'import "stdlib/delegation.eair"', "enum e { a, b }", "schema s closed {",
        "  x: text max 20", "  y: list[text]", 'table t from "t.json" key id {',
        '  id: text canary epistemic known default "x"', "  group g = id",
        "state s1 : int = 3", 'document handbook from "h.md" epistemic hearsay',
        "authorization default deny {", "  allow a -> t.g, t.*", "policy p unenforced {",
        "inducer i : dashboard {", "  roles a, b", "  at 5 min", "  every 1 h",
        "  shift deference -0.2", "  cost $5",
        'tool t(a: text = "" hint x.y, b: int) -> {a, b} {',
        '  require a != "" else route b when c', "  append t {id: a} when c",
        "  set s1 = 1", "  delegates other", "  sends to y", "  acl z when w",
        "tool u() -> text {", "  delegates", "  tools a when x, b", "  trait caution +0.5",
        "actor q scripted {", '  at 0 min say "hi" to r when y', "  at 1 h contact r",
        "simulator sim { }", "channel a -> b via c", "channel a -> b",
        "delegation a -> b via d", "fork a -> b, c", "merge a, b -> c", "relay a -> b -> c",
        "channel a -> c when round() == 2", "fork a -> b, c when x", "merge a, b -> c when x",
        "relay a -> b -> c when x", "  on t", "  to context.caller",
        '  text "Closed: " + text(count(c)) + "."',
        "  authority choose(x, 5, 1)", '  display "J. Avery"',
        '  at 0 min say "hi" to instance.who',
        'instances from "i.json" {', "instance one {", "let f(a: int, b: text) = a + 1",
        "  realized = a when b", "  metric m = 1",
        "protected measure, instances, authorization, t",
    ]:
        assert line in out.split("\n"), line


def test_enum_meanings_print_after_the_members_in_source_order() -> None:
    """An enum's meaning clauses follow its members on the same line, as written (not
    merged or sorted), and neither keyword is reserved where a name is expected."""
    src = ("enum e {a,b,held}\n  interception held , b\n submission a // the filed one\n"
           "enum submission { interception, submission } interception interception\n"
           "measure { interception = 1 }")
    out = assert_canonical(src)
    assert out.split("\n")[:3] == [
        "enum e { a, b, held } interception held, b submission a // the filed one", "",
        "enum submission { interception, submission } interception interception"]


def test_literals_print_canonically() -> None:
    """Money, percentages, durations and numbers lose redundant zeros and spacing; dates stay."""
    assert rule_of("x == $40.00") == "x == $40"
    assert rule_of("x == $12.50") == "x == $12.5"
    assert rule_of("x == 18.0%") == "x == 18%"
    assert rule_of("x == 6min") == "x == 6 min"
    assert rule_of("x == 12   days") == "x == 12 days"
    assert rule_of("x == 1.50 hours") == "x == 1.5 hours"
    assert rule_of("x == 2.50") == "x == 2.5"
    assert rule_of("x == 2.0") == "x == 2.0"
    assert rule_of("x == 007") == "x == 7"
    assert rule_of("x == 2024-01-05") == "x == 2024-01-05"
    assert rule_of("[true, false, none]") == "[true, false, none]"


def test_strings_use_json_escapes() -> None:
    """One-line strings print JSON-escaped, non-ASCII kept as is."""
    assert rule_of(r'x == "tab\there \"q\" \\ é"') == r'x == "tab\there \"q\" \\ é"'
    assert format_string("a\u2028b") == '"a\\u2028b"'


def test_syntax_errors_return_none_with_diagnostics() -> None:
    """Text that does not parse is not formatted; the parser's diagnostics come back."""
    out, diagnostics = format_text("world w { title }", "bad.eair")
    assert out is None
    assert diagnostics.has_errors


def test_format_module_refuses_inconsistent_source() -> None:
    """Spans that do not match the source text are reported, not guessed around."""
    module, _ = parse_text("condition c { a = 1 }")
    assert module is not None
    with pytest.raises(FormatterError):
        format_module(module, "condition c ( a = 1 )")


def test_format_text_never_returns_changed_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    """format_text reparses its output and raises rather than return text meaning something else."""
    import eairdsl.syntax.fmt as fmt_module

    monkeypatch.setattr(fmt_module, "format_module", lambda module, text: "lever a : int = 2\n")
    with pytest.raises(FormatterError, match="meaning"):
        format_text("lever a : int = 1")
    monkeypatch.setattr(fmt_module, "format_module", lambda module, text: "lever a : int = 1\n")
    with pytest.raises(FormatterError, match="comments"):
        format_text("lever a : int = 1 // why")


# ------------------------------------------------------------------ the compact form

def test_field_lists_are_kept_and_never_made() -> None:
    """A field list prints as one list; fields written apart with one type stay apart."""
    src = "record r {\n  a ,b,  c : text  canary\n  d: text canary\n  group g = a, d\n}\n"
    assert fmt(src) == "record r {\n  a, b, c: text canary\n  d: text canary\n  group g = a, d\n}\n"
    module, _ = parse_text(src)
    assert module is not None
    assert [f.name for f in module.decls[0].items[:4]] == ["a", "b", "c", "d"]  # type: ignore[union-attr]


def test_items_joined_by_semicolons_stay_on_their_line() -> None:
    """`;` keeps items on one line, `a; b`; a `;` at the end of a line is dropped; items
    on one line without `;` open up as they always have."""
    src = ("role r {\n  model m;card \"c\" ;  authority 2\n  memory private;\n"
           "  tools a, b kpi \"k\"\n}\n")
    assert fmt(src) == ('role r {\n  model m; card "c"; authority 2\n  memory private\n'
                        '  tools a, b\n  kpi "k"\n}\n')


def test_one_line_blocks_stay_when_compact() -> None:
    """A block on one line stays there when its items are all joined by `;` or it is one
    field list; one plain item, or items without `;`, open up as before."""
    assert fmt("tool t() -> text {kind read;cost 1 min;returns \"x\"}") == (
        'tool t() -> text { kind read; cost 1 min; returns "x" }\n')
    assert fmt("ledger log { who, what: text }") == "ledger log { who, what: text }\n"
    assert fmt("ledger log { who: text }") == "ledger log {\n  who: text\n}\n"
    assert fmt("condition c { a = 1 }") == "condition c {\n  a = 1\n}\n"
    assert fmt("table t { a: text; b: int c: int }") == (
        "table t {\n  a: text; b: int\n  c: int\n}\n")
    assert fmt("measure { a = 1;\n b = 2 }") == "measure {\n  a = 1\n  b = 2\n}\n"
    assert fmt("measure {\n  a = 1; b = 2 }") == "measure {\n  a = 1; b = 2\n}\n"


def test_an_item_over_several_lines_is_never_joined() -> None:
    """A long string opens its block up and gets its own lines; its neighbours stay joined."""
    src = 'role r { model m; card "c"; description "two\\nlines"; memory shared; kpi "k" }'
    assert fmt(src) == ('role r {\n  model m; card "c"\n  description """\n    two\n    lines\n'
                        '  """\n  memory shared; kpi "k"\n}\n')


def test_comments_around_joined_lines() -> None:
    """Own-line comments stay above a joined line, a trailing one ends it, and one inside an
    item of a joined line moves above that line."""
    src = ("tool t() -> text { // head\n  // above\n  kind read; cost 1 min // end\n"
           "  require a and // inner\n b else reject \"x\"; returns \"y\"\n}\n")
    assert fmt(src) == ("tool t() -> text { // head\n  // above\n  kind read; cost 1 min // end\n"
                        '  // inner\n  require a and b else reject "x"; returns "y"\n}\n')
    assert fmt("record r { a, b: text } // why\n") == "record r { a, b: text } // why\n"


_HEAD = re.compile(r"^[a-z].* \{$")
_FIELD = re.compile(r"^([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*): (.+)$")
_FIELD_BLOCKS = ("record ", "table ", "ledger ", "schema ", "instances ")


def compact(text: str, coin: Callable[[], bool]) -> str:
    """Canonical text rewritten in the compact form wherever `coin()` says so: fields with
    the same type and attributes listed, item lines joined with `; `, whole blocks put on
    their header's line. Lines with a comment or a long string are left as they are."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        head = lines[i]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")), None)
        body = lines[i + 1:end] if end is not None else []
        if (not _HEAD.match(head) or "//" in head or end is None or not body
                or any('"""' in b for b in body)):
            out.append(head)
            i += 1
            continue
        entries: list[str] = []
        lists: list[bool] = []
        for item in (b[2:] for b in body):
            prev = entries[-1] if entries else "//"
            one, two = _FIELD.match(prev), _FIELD.match(item)
            if (head.startswith(_FIELD_BLOCKS) and "//" not in prev + item and one and two
                    and "," not in two[1] and one[2] == two[2] and coin()):
                entries[-1], lists[-1] = f"{one[1]}, {item}", True
            else:
                entries.append(item)
                lists.append(False)
        close = lines[end]  # type: ignore[index]
        plain = not any("//" in e for e in entries)
        if plain and (len(entries) > 1 or lists[0]) and coin():
            out.append(f"{head} {'; '.join(entries)} }}{close[1:]}")
        else:
            out.append(head)
            for k, item in enumerate(entries):
                prev = out[-1]
                if (k and not item.startswith("//") and not entries[k - 1].startswith("//")
                        and "//" not in entries[k - 1] and coin()):
                    out[-1] = f"{prev}; {item}"
                else:
                    out.append(INDENT + item)
            out.append(close)
        i = end + 1  # type: ignore[operator]
    return "\n".join(out)


def test_compact_rewrites_the_corpus() -> None:
    """The compactor below is not vacuous: with every coin heads, each world shrinks."""
    for path, text in zip(CORPUS, CORPUS_TEXTS, strict=True):
        if "worlds" in path.parts:
            assert len(compact(text, lambda: True).split("\n")) < len(text.split("\n")) * 0.8


@st.composite
def corpus_window(draw: st.DrawFn) -> str:
    """A few consecutive declarations (with their comments) of a corpus file, formatted."""
    text = draw(st.sampled_from(CORPUS_TEXTS))
    chunks = re.split(r"\n\n(?=[A-Za-z/])", text.rstrip("\n"))
    start = draw(st.integers(0, len(chunks) - 1))
    size = draw(st.integers(1, 8))
    return fmt("\n\n".join(chunks[start:start + size]) + "\n")


@settings(FAST, max_examples=40)
@given(corpus_window(), st.randoms(use_true_random=False), st.sampled_from([0.3, 0.7, 1.0]))
def test_compacted_worlds_keep_meaning_and_layout(text: str, rng: random.Random,
                                                  heads: float) -> None:
    """Parts of every world rewritten in the compact form at random declare the same
    things, and `eairc fmt` leaves them exactly as written (so it is idempotent on them)."""
    compacted = compact(text, lambda: rng.random() < heads)
    before, _ = parse_text(text)
    after, diagnostics = parse_text(compacted)
    assert before is not None
    assert after is not None, (compacted, [d.message for d in diagnostics])
    assert strip_spans(after.decls) == strip_spans(before.decls)
    assert fmt(compacted) == compacted
    assert_canonical(compacted)


# ------------------------------------------------------------------ comments

def test_comments_own_line_trailing_in_blocks_and_at_end() -> None:
    """Own-line comments precede their item; trailing, end-of-block and end-of-file ones stay."""
    src = """// file header

// about w
world w { // opens
  // before title
  title "T"   // after title
  risk D1
  // last in block
} // closes
lever a : bool = false // lever
// end of file
"""
    assert fmt(src) == """// file header

// about w
world w { // opens
  // before title
  title "T" // after title
  risk D1
  // last in block
} // closes

lever a : bool = false // lever

// end of file
"""


def test_comment_blocks_keep_their_separation() -> None:
    """Blank lines between top-level comment groups and before a declaration survive, collapsed."""
    src = "// a\n// b\n\n\n\n// c\n\nlever x : int = 1\n// d\nlever y : int = 2\n"
    assert fmt(src) == "// a\n// b\n\n// c\n\nlever x : int = 1\n\n// d\nlever y : int = 2\n"


def test_comments_inside_joined_lines_move_before_their_item() -> None:
    """Comments inside an expression or a header move, in order, to the lines before the item."""
    src = """tool t(a: text, // first param
         b: int) -> text // after params
{
  returns a + // left
    b // right
}
let f() = 1 + // inner
  2 // tail
"""
    out = fmt(src)
    assert out == """// first param
// after params
tool t(a: text, b: int) -> text {
  // left
  returns a + b // right
}

// inner
let f() = 1 + 2 // tail
"""
    assert fmt(out) == out


def test_comment_only_file_and_empty_file() -> None:
    """A file of comments keeps them with their grouping; an empty file stays empty."""
    assert fmt("// one\n\n\n// two\n// three") == "// one\n\n// two\n// three\n"
    assert fmt("") == ""
    assert fmt("\n\n  \n") == ""


def test_comments_in_one_line_declarations_and_empty_blocks() -> None:
    """A comment after `{` of an empty block stays there; comments inside an enum move above it."""
    assert fmt("condition c { // why\n}") == "condition c { // why\n}\n"
    assert fmt("enum e { a, // first\n b }") == "// first\nenum e { a, b }\n"
    assert fmt("condition c { } // after") == "condition c { } // after\n"


# ------------------------------------------------------------------ precedence

@pytest.mark.parametrize(("source", "expected"), [
    ("(a or b) and c", "(a or b) and c"),
    ("a or (b and c)", "a or b and c"),
    ("not (a and b)", "not (a and b)"),
    ("(not a) and b", "not a and b"),
    ("-(a + b)", "-(a + b)"),
    ("(-a).b", "(-a).b"),
    ("-(a.b)", "-a.b"),
    ("a - (b - c)", "a - (b - c)"),
    ("(a - b) - c", "a - b - c"),
    ("a / (b * c)", "a / (b * c)"),
    ("(a + b) * c", "(a + b) * c"),
    ("(a == b) == c", "(a == b) == c"),
    ("(a in b) in c", "(a in b) in c"),
    ("a contains (b + c)", "a contains b + c"),
    ("not (a == b)", "not a == b"),
    ("(not a) == b", "(not a) == b"),
    ("- -a", "--a"),
    ("a and (all x in xs: x > 0)", "a and (all x in xs: x > 0)"),
    ("(all x in xs: x) and a", "(all x in xs: x) and a"),
    ("all x in (a + b): any y in x: y", "all x in a + b: any y in x: y"),
    ("all x in (xs or ys): x", "all x in (xs or ys): x"),
    ("exists x in xs where (x and y)", "exists x in xs where x and y"),
    ("f((all x in xs: x), k: (a or b))", "f((all x in xs: x), k: a or b)"),
    ("[x for x in (a or b) where (c or d) group by (e + f), g]",
     "[x for x in (a or b) where c or d group by e + f, g]"),
    ("[x for x in xs where (all y in x: y)]", "[x for x in xs where (all y in x: y)]"),
    ("count(x for x in xs) > 0", "count(x for x in xs) > 0"),
    ("{a: (b or c), d: [1, (2)]}[k]", "{a: b or c, d: [1, 2]}[k]"),
    ("((a))", "a"),
])
def test_precedence_minimal_parentheses(source: str, expected: str) -> None:
    """Parentheses appear exactly where the grammar's precedence needs them."""
    assert rule_of(source) == expected


def test_quantifier_before_more_clause_syntax_is_parenthesised() -> None:
    """A quantifier followed by `when`, `else`, `say` or a doc string gets parentheses."""
    out = fmt('tool t() -> x { require all x in xs: x else reject "no" when any y in ys: y '
              "acl all x in xs: x when c }\n"
              'measure { m = all x in xs: x when c }\nlever l : bool = any x in xs: x "doc"')
    assert '  require (all x in xs: x) else reject "no" when any y in ys: y' in out
    assert "  acl (all x in xs: x) when c" in out
    assert "  m = (all x in xs: x) when c" in out
    assert 'lever l : bool = (any x in xs: x) "doc"' in out
    assert_canonical(out)


# ------------------------------------------------------------------ long strings

def test_multiline_strings_print_as_long_strings() -> None:
    """A string with newlines prints as an indented \"\"\" block that decodes to the same value."""
    src = 'role r { card "line one\\n  indented\\n\\nlast" }'
    out = fmt(src)
    assert out == 'role r {\n  card """\n    line one\n      indented\n\n    last\n  """\n}\n'
    module, _ = parse_text(out)
    assert module is not None
    assert module.decls[0].clauses[0].text == "line one\n  indented\n\nlast"  # type: ignore[union-attr]


def test_long_string_with_trailing_comment_and_when() -> None:
    """Code and comments after a long string stay after its closing quotes."""
    src = 'tool t() -> x { require a else reject """\n  x\n  y\n""" when b // why\n}'
    out = assert_canonical(src)
    assert '\n  """ when b // why\n' in out


@pytest.mark.parametrize("value", [
    "ends with newline\n", "  all\n  indented", 'has """ inside\nx', "carriage\r\nreturn",
    "\n", "a\n ",
])
def test_unrepresentable_long_strings_fall_back_to_escapes(value: str) -> None:
    """Values a long string cannot carry exactly fall back to escapes and still decode the same."""
    printed = format_string(value, "  ")
    assert decode_string(printed) == value
    module, _ = parse_text(f"import {printed}")
    assert module is not None and module.decls[0].path == value  # type: ignore[union-attr]


@FAST
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40), st.sampled_from(["", "  "]))
def test_any_string_survives_printing(value: str, indent: str) -> None:
    """format_string gives a token the lexer accepts and decode_string maps back to the value."""
    printed = format_string(value, indent)
    assert decode_string(printed) == value
    module, _ = parse_text(f"world w {{\n{indent}title {printed}\n}}")
    assert module is not None
    assert module.decls[0].clauses[0].text == value  # type: ignore[union-attr]
    assert_canonical(f"world w {{\n{indent}title {printed}\n}}")


# ------------------------------------------------------------------ property tests

@st.composite
def edited(draw: st.DrawFn, base: st.SearchStrategy[str], max_edits: int = 5) -> str:
    """A text from `base` after a few line edits: deletes, duplicates, joins, splits, comments."""
    lines = draw(base).split("\n")
    for n in range(draw(st.integers(1, max_edits))):
        op = draw(st.sampled_from(["delete", "duplicate", "join", "split", "own_comment",
                                   "trailing_comment", "swap", "semicolon"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "join" and i + 1 < len(lines):
            lines[i:i + 2] = [lines[i] + " " + lines[i + 1]]
        elif op == "semicolon" and i + 1 < len(lines):  # the compact form's join
            lines[i:i + 2] = [lines[i] + "; " + lines[i + 1].lstrip()]
        elif op == "split":
            spaces = [k for k, ch in enumerate(lines[i]) if ch == " "]
            if spaces:
                k = draw(st.sampled_from(spaces))
                lines[i:i + 1] = [lines[i][:k], lines[i][k + 1:]]
        elif op == "own_comment":
            lines.insert(i, f"{' ' * draw(st.integers(0, 4))}// own {n}")
        elif op == "trailing_comment":
            lines[i] += f" // trailing {n}"
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


@FAST
@given(edited(st.sampled_from(CORPUS_TEXTS)))
def test_mutated_worlds_round_trip(text: str) -> None:
    """Whenever an edited world still parses, formatting keeps AST and comments and is stable."""
    module, _ = parse_text(text)
    assume(module is not None)
    assert_canonical(text)


@st.composite
def shuffled_declarations(draw: st.DrawFn) -> str:
    """A corpus file with its declarations (each with the comments above it) reordered."""
    text = draw(st.sampled_from(CORPUS_TEXTS))
    module, _ = parse_text(text)
    assert module is not None
    lines = text.split("\n")
    chunks: list[str] = []
    start = 0
    for decl in module.decls:
        chunks.append("\n".join(lines[start:decl.span.end_line]))
        start = decl.span.end_line
    tail = "\n".join(lines[start:])
    picked = draw(st.lists(st.sampled_from(chunks), min_size=1, max_size=len(chunks)))
    glue = draw(st.sampled_from(["\n", "\n\n", " ", "\n\n\n"]))
    return glue.join(picked) + "\n" + tail


@FAST
@given(shuffled_declarations())
def test_reordered_declarations_round_trip(text: str) -> None:
    """Reordered, dropped and duplicated declarations (comments attached) format canonically."""
    module, _ = parse_text(text)
    assume(module is not None)
    assert_canonical(text)


_NAMES = st.sampled_from(["a", "b", "x", "instance.target", "context.principal", "f(a)"])
_LITERALS = st.sampled_from(["1", "007", "2.50", "$40", "$12.50", "18%", "6min", "2 days",
                             "2024-01-05", "true", "none", '"s"', '"q\\"t"',
                             '"""\n  l1\n  l2\n"""'])


def _wrap(pair: tuple[str, int]) -> str:
    text, coin = pair
    return f"({text})" if coin else text


def _expressions() -> st.SearchStrategy[str]:
    """Expression text built from every operator, with parentheses dropped at random."""
    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        operand = st.tuples(children, st.integers(0, 2)).map(_wrap)
        ops = st.sampled_from(["or", "and", "==", "!=", "<", ">=", "contains", "contains_any",
                               "in", "+", "-", "*", "/"])
        return st.one_of(
            st.tuples(operand, ops, operand).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
            operand.map(lambda e: f"not {e}"),
            operand.map(lambda e: f"-{e}"),
            operand.map(lambda e: f"{e}.field"),
            st.tuples(operand, children).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(children, children).map(lambda t: f"g({t[0]}, key: {t[1]})"),
            st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
            st.tuples(children, children).map(lambda t: f"{{k: {t[0]}, v: {t[1]}}}"),
            st.tuples(children, operand, operand).map(
                lambda t: f"[{t[0]} for v in {t[1]} where {t[2]}]"),
            st.tuples(children, operand, operand).map(
                lambda t: f"count({t[0]} for v in {t[1]} group by {t[2]})"),
            st.tuples(operand, children).map(lambda t: f"all v in {t[0]}: {t[1]}"),
            st.tuples(operand, children).map(lambda t: f"exists v in {t[0]} where {t[1]}"),
        )
    return st.recursive(st.one_of(_NAMES, _LITERALS), extend, max_leaves=8)


_CONTEXTS = [
    "policy p {{ rule {0} }}",
    'tool t() -> x {{ require {0} else reject "m" when {1} acl {0} when {1} returns {1} }}',
    "measure {{ m = {0} when {1} metric n = {1} }}",
    'lever l : int = {0} "doc"\nlet f(a: int) = {0}\nstate s : int = {1}',
    'role r {{ tools a when {0}, b when {1} principal {0} }}\n'
    'actor q scripted {{ at {0} say {1} to r }}',
    "tool t(a: int = {0} hint {1}) -> x {{ set s = {0} when {1} }}\ninstance i {{ v = {0} }}",
    'tool t() -> x {{ kind read; require {0} else reject "m" when {1}; returns {1} }}',
    "measure {{ m = {0} when {1}; metric n = {1} }}\ninstance i {{ v = {0}; w = {1} }}",
    "record r {{ a, b: int default {0}; c: int default {1} }}\nschema s {{ x, y: int }}",
]


@FAST
@given(_expressions(), _expressions(), st.sampled_from(_CONTEXTS))
def test_random_expressions_round_trip(first: str, second: str, context: str) -> None:
    """Random expressions in every expression slot reparse to the same tree after formatting."""
    text = context.format(first, second)
    module, _ = parse_text(text)
    assume(module is not None)
    assert_canonical(text)


@FAST
@given(edited(st.tuples(_expressions(), _expressions(), st.sampled_from(_CONTEXTS)).map(
    lambda t: t[2].format(t[0], t[1])), max_edits=8))
def test_random_expressions_with_comments_and_line_breaks(text: str) -> None:
    """Comments and line breaks scattered through expressions are kept and placed stably."""
    module, _ = parse_text(text)
    assume(module is not None)
    assert_canonical(text)
