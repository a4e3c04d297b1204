"""The canonical formatter behind `eairc fmt`: one layout for every `.eair` module.

The grammar ignores whitespace, so two authors can write the same world in many
shapes; diffs of worlds (and repairs proposed by a model) are only readable when
everyone's text is printed the same way. The formatter prints the AST, not the
text, and puts the comments back by position. Its contract, checked by
`format_text` on every call and by tests/test_fmt.py over every world:

* `strip_spans(parse(format(src)).decls) == strip_spans(parse(src).decls)`;
* the comment texts come back complete, in the same order, none duplicated;
* `format(format(src)) == format(src)`.

Layout
------
* Two-space indentation; a file ends with exactly one newline; no trailing
  whitespace outside comments and long strings.
* Exactly one blank line between top-level declarations; no blank lines inside
  a block.
* Block declarations (world, schema, record/table/ledger, authorization, policy,
  condition, inducer, tool, role/actor/simulator, instances, instance, measure,
  study measure)
  print `header {`, one clause, field, rule, assignment or measurement per line,
  then `}`. A block with nothing inside (not even a comment) prints `header { }`.
* The compact form (docs/language.md, Compact form) is kept where the author
  wrote it, and only there, so a module without `;` or field lists prints as it
  always has:
  - a field list `a, b: type attrs` prints as one list; fields written apart stay
    apart (the parser gives a list's fields equal copies of the one type, spans
    included, which is how the list is told);
  - items the author joined with `;` on one line stay on one line, `a; b`; a `;`
    between items on different lines is dropped;
  - a block written on one line stays `header { a; b }` when its items are all
    joined by `;`, or it is a single field list; otherwise it opens up, one item
    (or one joined line) per line;
  - an item that prints over several lines (a long string) is never joined.
* Every other declaration (import, enum, state, document, lever, let, protected,
  channels) prints on one line; `enum e { a, b }` keeps its members inline.
* Separators: `name: type` in fields and parameters, `lever x : type = v`,
  `state x : type = v` and `inducer i : kind` (the spacing the stdlib uses),
  `, ` between list items, ` -> ` in signatures, channels and rules.
* Field attributes print in one order: `canary`, `patterns [...]`,
  `epistemic X`, `default expr`.
* Expressions get the fewest parentheses that reparse to the same tree, from the
  grammar's precedence (loosest first): quantifiers (`all`/`any`/`exists`, which
  extend to the end), `or`, `and`, `not`, comparisons/`contains`/`in`
  (non-associative), `+ -`, `* /` (both left-associative), unary `-`, postfix
  `.name`/`[i]`. A quantifier stays bare only where it runs to the end of its
  clause (or of an enclosing quantifier); anywhere else (an operand, an argument,
  a list item, before `when`/`else`/`say`/a doc string) it is parenthesised.
* Literals: integers and decimals without redundant zeros (`7`, `1.5`, `2.0`);
  money `$40`, `$12.5`; percentages `18%`; durations `<number> <unit>` with the
  unit as written (`6 min`, `12 days`); dates as written.
* Strings print with JSON escapes (`json.dumps(..., ensure_ascii=False)`, plus
  `\\u` escapes for control and separator characters). A string holding a
  newline prints as a `\"\"\"` long string whose lines are indented one step past
  the line it starts on, closing at that line's indentation, when
  `decode_string` gives back exactly the same value; otherwise it stays escaped.
* Long lines are not wrapped.

Comments
--------
* An own-line comment is printed just before the declaration, clause, field or
  measurement that follows it, at that item's indentation. At top level, blank
  lines that separated comment groups from each other or from the next
  declaration are kept (collapsed to one), so a file header stays detached.
* A trailing comment (code before it on its line) stays at the end of the line
  printing the item it follows; one after a block's `{` stays after the `{`;
  one after `}` stays after the `}`.
* Comments after the last item of a block print before its `}`; comments after
  the last declaration print at the end of the file, after one blank line.
* Comments that sat inside an item the formatter prints on one line (inside an
  expression, a parameter list, a block header before `{`) move, in order, onto
  their own lines just before that item: a line comment cannot survive the
  joining of lines, and this placement is stable on the next run.
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, assert_never

from eairdsl.diagnostics import Diagnostics
from eairdsl.source import Span
from eairdsl.syntax import ast as A
from eairdsl.syntax.build import same_shape
from eairdsl.syntax.parser import parse_text

__all__ = ["INDENT", "FormatterError", "format_expr", "format_module", "format_string",
           "format_text", "format_type"]

#: One indentation step.
INDENT = "  "

# Precedence levels, loosest first. An expression whose level is below the level its
# position requires is parenthesised.
_QUANT, _OR, _AND, _NOT, _CMP, _SUM, _PROD, _NEG, _POST, _ATOM = range(10)
#: Required level where an expression runs to the end of its clause (bare quantifiers).
_TOP = _QUANT
#: Required level where more syntax follows (arguments, list items, `... when`):
#: any expression but a quantifier may appear bare.
_DELIMITED = _OR

_COMPARE_OPS = frozenset({"==", "!=", "<", "<=", ">", ">=", "contains", "contains_any", "in"})
_BINARY: dict[str, tuple[int, int, int]] = {
    # op: (own level, level required of the left operand, of the right operand)
    "or": (_OR, _OR, _AND),
    "and": (_AND, _AND, _NOT),
    "+": (_SUM, _SUM, _PROD),
    "-": (_SUM, _SUM, _PROD),
    "*": (_PROD, _PROD, _NEG),
    "/": (_PROD, _PROD, _NEG),
    **dict.fromkeys(_COMPARE_OPS, (_CMP, _SUM, _SUM)),
}

_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)[ \t]*([A-Za-z]+)")


class FormatterError(RuntimeError):
    """The formatter produced text that does not mean what the input meant.

    Raised instead of returning such text, so `eairc fmt` never overwrites a world
    with a changed one; it always signals a bug in this module.
    """


# ------------------------------------------------------------------ literals and strings

def _digits(whole: str, frac: str | None, keep_point: bool) -> str:
    """Canonical decimal digits: no leading zeros, no trailing fractional zeros."""
    whole = whole.lstrip("0") or "0"
    frac = (frac or "").rstrip("0")
    if frac:
        return f"{whole}.{frac}"
    return f"{whole}.0" if keep_point else whole


def _number_text(raw: str, value: object, keep_point: bool = False) -> str:
    """Digits of a number literal from its raw token, or from its value if raw is unusable.

    `keep_point` keeps a decimal a decimal (`2.0`): dropping the point would turn
    it into an integer literal, a different AST.
    """
    match = _NUMBER.fullmatch(raw)
    if match is not None:
        return _digits(match.group(1), match.group(2), keep_point)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormatterError(f"cannot print number literal {raw!r} ({value!r})")
    text = format(Decimal(repr(value)), "f") if isinstance(value, float) else str(value)
    whole, _, frac = text.partition(".")
    return _digits(whole, frac or None, keep_point)


def _needs_escape(ch: str) -> bool:
    """Characters kept out of printed strings: controls, surrogates, line separators."""
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")


def _escaped_string(value: str) -> str:
    """A one-line `"..."` string that `json.loads` reads back as `value`."""
    text = json.dumps(value, ensure_ascii=False)
    if not any(_needs_escape(ch) for ch in text):
        return text
    return "".join(f"\\u{ord(ch):04x}" if _needs_escape(ch) else ch for ch in text)


def _long_string(value: str, indent: str) -> str | None:
    """`value` as a `\"\"\"` block that `decode_string` reads back exactly, or None.

    `decode_string` drops the first newline, dedents by the smallest indentation
    of a non-blank line and strips trailing newlines, so a value survives only if
    it has no `\"\"\"`, does not end in a newline, and has a non-blank line that
    does not start with a space. Values with control characters (a stray `\\r`
    would not survive an editor) stay escaped as well.
    """
    if "\n" not in value or '"""' in value or value.endswith("\n"):
        return None
    if any(ch not in "\n\t" and _needs_escape(ch) for ch in value):
        return None
    lines = value.split("\n")
    if not any(line.strip() and not line.startswith(" ") for line in lines):
        return None
    inner = indent + INDENT
    body = "\n".join(inner + line if line else "" for line in lines)
    return f'"""\n{body}\n{indent}"""'


def format_string(value: str, indent: str = "") -> str:
    """A string literal for `value`; `indent` is the indentation of the line it starts on.

    Multi-line text reads best as a long string; everything else (and text a long
    string cannot carry exactly) is a JSON-escaped one-line string.
    """
    if "\n" in value:
        long = _long_string(value, indent)
        if long is not None:
            return long
    return _escaped_string(value)


def _literal(lit: A.LiteralExpr, indent: str) -> str:
    """A literal in canonical spelling; the value (what the AST compares) is unchanged."""
    kind, value, raw = lit.kind, lit.value, lit.raw
    if kind == "int":
        return str(value) if isinstance(value, int) else _number_text(raw, value)
    if kind == "number":
        return _number_text(raw, value, keep_point=True)
    if kind == "money":
        return "$" + _number_text(raw[1:] if raw.startswith("$") else "", value)
    if kind == "percent":
        return _number_text(raw[:-1] if raw.endswith("%") else "", value) + "%"
    if kind == "duration":
        match = _DURATION.fullmatch(raw.strip())
        if match is not None:
            return f"{_number_text(match.group(1), None)} {match.group(2)}"
        return f"{_number_text('', value)} min"
    if kind == "date":
        return str(value)
    if kind == "text":
        return format_string(str(value), indent)
    if kind == "bool":
        return "true" if value else "false"
    return "none"


# ------------------------------------------------------------------ expressions and types

def _level(expr: A.Expr) -> int:
    """How tightly `expr` binds as printed bare (see the precedence table above)."""
    if isinstance(expr, A.QuantifierExpr):
        return _QUANT
    if isinstance(expr, A.BinaryExpr):
        return _BINARY[expr.op][0]
    if isinstance(expr, A.UnaryExpr):
        return _NOT if expr.op == "not" else _NEG
    if isinstance(expr, A.AttrExpr | A.IndexExpr):
        return _POST
    return _ATOM


def format_expr(expr: A.Expr, indent: str = "", need: int = _TOP) -> str:
    """Print `expr` with minimal parentheses for a position requiring level `need`.

    `indent` is the indentation of the line the expression is printed on; only
    long strings use it.
    """
    text = _bare_expr(expr, indent)
    return f"({text})" if _level(expr) < need else text


def _tail(tail: A.CompTail, indent: str) -> str:
    """`for x in source [where cond] [group by k, ...]` with the grammar's operand levels."""
    text = f"for {tail.var} in {format_expr(tail.source, indent, _SUM)}"
    if tail.where is not None:
        text += f" where {format_expr(tail.where, indent, _OR)}"
    if tail.group_by:
        text += " group by " + ", ".join(format_expr(g, indent, _SUM) for g in tail.group_by)
    return text


def _bare_expr(expr: A.Expr, indent: str) -> str:
    """`expr` without outer parentheses; operands get theirs from `format_expr`."""
    if isinstance(expr, A.LiteralExpr):
        return _literal(expr, indent)
    if isinstance(expr, A.NameExpr):
        return expr.id
    if isinstance(expr, A.AttrExpr):
        return f"{format_expr(expr.obj, indent, _POST)}.{expr.name}"
    if isinstance(expr, A.IndexExpr):
        obj = format_expr(expr.obj, indent, _POST)
        return f"{obj}[{format_expr(expr.index, indent, _DELIMITED)}]"
    if isinstance(expr, A.CallExpr):
        args = ", ".join((f"{a.name}: " if a.name is not None else "")
                         + format_expr(a.value, indent, _DELIMITED) for a in expr.args)
        return f"{expr.func}({args})"
    if isinstance(expr, A.UnaryExpr):
        if expr.op == "not":
            return f"not {format_expr(expr.operand, indent, _NOT)}"
        return f"-{format_expr(expr.operand, indent, _NEG)}"
    if isinstance(expr, A.BinaryExpr):
        _, left_need, right_need = _BINARY[expr.op]
        left = format_expr(expr.left, indent, left_need)
        return f"{left} {expr.op} {format_expr(expr.right, indent, right_need)}"
    if isinstance(expr, A.ListExpr):
        return "[" + ", ".join(format_expr(i, indent, _DELIMITED) for i in expr.items) + "]"
    if isinstance(expr, A.RecordExpr):
        return "{" + ", ".join(f"{f.name}: {format_expr(f.value, indent, _DELIMITED)}"
                               for f in expr.fields) + "}"
    if isinstance(expr, A.ComprehensionExpr):
        return f"[{format_expr(expr.body, indent, _DELIMITED)} {_tail(expr.tail, indent)}]"
    if isinstance(expr, A.AggregateExpr):
        body = format_expr(expr.body, indent, _DELIMITED)
        tail = f" {_tail(expr.tail, indent)}" if expr.tail is not None else ""
        return f"{expr.func}({body}{tail})"
    if isinstance(expr, A.QuantifierExpr):
        source = format_expr(expr.source, indent, _SUM)
        body = format_expr(expr.body, indent, _TOP)
        if expr.kind == "exists":
            return f"exists {expr.var} in {source} where {body}"
        return f"{expr.kind} {expr.var} in {source}: {body}"
    raise FormatterError(f"no printer for expression node {type(expr).__name__}")


def format_type(ref: A.TypeRef) -> str:
    """A written type: `text`, `employee.id`, `list[text]`, `{a, b}`, `text max 200`."""
    if ref.kind == "field":
        text = f"{ref.name}.{ref.field}"
    elif ref.kind == "app":
        if ref.arg is None:
            raise FormatterError(f"type application {ref.name!r} without an argument")
        text = f"{ref.name}[{format_type(ref.arg)}]"
    elif ref.kind == "enum":
        text = "{" + ", ".join(ref.members) + "}"
    else:
        text = ref.name
    return text if ref.max is None else f"{text} max {ref.max}"


# ------------------------------------------------------------------ items inside blocks

def _when(expr: A.Expr | None, indent: str) -> str:
    return "" if expr is None else f" when {format_expr(expr, indent)}"


def _then(following: A.Expr | None) -> int:
    """The level a clause expression needs: bare quantifiers only when nothing follows."""
    return _TOP if following is None else _DELIMITED


def _clause(c: A.Clause, indent: str) -> str:
    """One keyword-led clause, printed from the slots of its class."""
    key = c.key

    def text(value: str) -> str:
        return format_string(value, indent)

    def expr(slot: A.Expr, need: int = _TOP) -> str:
        return format_expr(slot, indent, need)

    match c:
        case (A.TitleClause() | A.OperationClause() | A.PreservesClause() | A.DescriptionClause()
              | A.PolicyTextClause() | A.CardClause() | A.KpiClause() | A.ObjectiveClause()):
            return f"{key} {text(c.text)}"
        case (A.RiskClause() | A.ClockClause() | A.KindClause() | A.SourceClause()
              | A.FromClause() | A.ModelClause() | A.MemoryClause() | A.OnClause()):
            return f"{key} {c.name}"
        case A.SeedsClause():
            return f"seeds {c.number}"
        case A.ShiftClause() | A.TraitClause():
            return f"{key} {c.name} {c.number}"
        case A.ForbidClause():
            return "forbid [" + ", ".join(text(s) for s in c.strings) + "]"
        case A.RolesClause():
            return "roles " + ", ".join(c.names)
        case (A.RuleClause() | A.StartClause() | A.WhenClause() | A.TextClause() | A.AtClause()
              | A.EveryClause()
              | A.CostClause() | A.PointsClause() | A.ReturnsClause() | A.PrincipalClause()
              | A.ToClause() | A.AuthorityClause() | A.DisplayClause()):
            return f"{key} {expr(c.expr)}"
        case A.RequireClause():
            match c.guard:
                case A.RejectGuard():
                    guard = f"reject {text(c.guard.message)}"
                case A.RouteGuard():
                    guard = f"route {c.guard.target}"
                case _:
                    assert_never(c.guard)
            return f"require {expr(c.expr, _DELIMITED)} else {guard}{_when(c.when, indent)}"
        case A.EnsureClause():
            return f"ensure {c.policy} else reject {text(c.message)}{_when(c.when, indent)}"
        case A.AppendClause():
            return f"append {c.name} {expr(c.expr, _then(c.when))}{_when(c.when, indent)}"
        case A.SetClause():
            return f"set {c.name} = {expr(c.expr, _then(c.when))}{_when(c.when, indent)}"
        case A.PropagatesClause() | A.AclClause():
            return f"{key} {expr(c.expr, _then(c.when))}{_when(c.when, indent)}"
        case A.DelegatesClause():
            return "delegates" if c.name is None else f"delegates {c.name}"
        case A.SendsClause():
            return f"sends to {expr(c.expr)}"
        case A.ToolsClause():
            return "tools " + ", ".join(
                r.name + ("" if r.when is None
                          else f" when {format_expr(r.when, indent, _DELIMITED)}")
                for r in c.refs)
        case A.SayClause():
            return (f"at {expr(c.at, _DELIMITED)} say {expr(c.message, _DELIMITED)} "
                    f"to {expr(c.recipient, _DELIMITED)}{' verbatim' if c.verbatim else ''}"
                    f"{_when(c.when, indent)}")
        case A.ContactClause():
            return (f"at {expr(c.at, _DELIMITED)} contact {expr(c.recipient, _DELIMITED)}"
                    f"{_when(c.when, indent)}")
        case _:
            assert_never(c)


def _field(f: A.FieldDecl, indent: str) -> str:
    """`name: type` then the attributes in one fixed order, `default` last."""
    text = f"{f.name}: {format_type(f.type)}"
    if f.canary:
        text += " canary"
    if f.patterns is not None:
        text += " patterns [" + ", ".join(format_string(p, indent) for p in f.patterns) + "]"
    if f.epistemic is not None:
        text += f" epistemic {f.epistemic}"
    if f.default is not None:
        text += f" default {format_expr(f.default, indent)}"
    return text


def _record_item(item: A.FieldDecl | A.GroupDecl, indent: str) -> str:
    if isinstance(item, A.GroupDecl):
        return f"group {item.name} = {', '.join(item.fields)}"
    return _field(item, indent)


def _auth_rule(rule: A.AuthRule, indent: str) -> str:
    sels = ", ".join(f"{s.record}.{s.field}" for s in rule.selectors)
    return f"{rule.effect} {rule.principal} -> {sels}"


def _assignment(a: A.Assignment, indent: str) -> str:
    return f"{a.name} = {format_expr(a.value, indent)}"


def _condition_item(item: A.Assignment | A.Expectation, indent: str) -> str:
    """A lever assignment or an `expect` clause, in source order."""
    if isinstance(item, A.Expectation):
        return f"expect {item.subject} {item.outcome} {format_string(item.reason, indent)}"
    return _assignment(item, indent)


def _measure_item(m: A.MeasureItem, indent: str) -> str:
    head = f"metric {m.name}" if m.metric else m.name
    return f"{head} = {format_expr(m.expr, indent, _then(m.when))}{_when(m.when, indent)}"


def _study_clause(c: A.StudyClause, indent: str) -> str:
    refs = (r.name if r.to is None else f"{r.name} -> {r.to}" for r in c.refs)
    return f"{c.key} {', '.join(refs)}"


def _param(p: A.Param) -> str:
    text = f"{p.name}: {format_type(p.type)}"
    if p.default is not None:
        text += f" = {format_expr(p.default, '', _DELIMITED)}"
    if p.hint is not None:
        text += f" hint {format_expr(p.hint, '', _DELIMITED)}"
    return text


# ------------------------------------------------------------------ entries

#: One printed entry of a block: an item, or the fields of one `a, b: type` list.
_Entry = list[A.Node]


def _entries(items: Sequence[A.Node]) -> list[_Entry]:
    """A block's items with the fields of each list together.

    The parser gives every field of `a, b: type attrs` an equal copy of the one type
    text, spans included; fields written apart never share a type span.
    """
    entries: list[_Entry] = []
    for item in items:
        prev = entries[-1][-1] if entries else None
        if (isinstance(item, A.FieldDecl) and isinstance(prev, A.FieldDecl)
                and item.type.span == prev.type.span):
            entries[-1].append(item)
        else:
            entries.append([item])
    return entries


def _entry_span(entry: _Entry) -> Span:
    """From the entry's first name to the end of its last field (or of its one item)."""
    first, last = entry[0].span, entry[-1].span
    return first.model_copy(update={"end_line": last.end_line, "end_col": last.end_col})


def _entry_text(entry: _Entry, printer: ItemPrinter, indent: str) -> str:
    """An item as its printer prints it; a field list as `a, b, ` then its last field."""
    names = [f.name for f in entry[:-1] if isinstance(f, A.FieldDecl)]
    if len(names) != len(entry) - 1:
        raise FormatterError("a field list holds something other than fields")
    return "".join(f"{name}, " for name in names) + printer(entry[-1], indent)


# ------------------------------------------------------------------ comment placement

Pos = tuple[int, int]


@dataclass
class _Comment:
    """A source comment with what placement needs: position and whether it owns its line."""

    line: int
    col: int
    text: str
    own_line: bool

    @property
    def pos(self) -> Pos:
        return (self.line, self.col)


@dataclass
class _Unit:
    """Comments attached to one declaration or block item, in source order per slot."""

    start: Pos
    end: Pos
    leading: list[_Comment] = field(default_factory=list)
    inner: list[_Comment] = field(default_factory=list)
    trailing: list[_Comment] = field(default_factory=list)


@dataclass
class _Placement:
    """Where each comment of a region goes: per unit, after an opening `{`, or at the end."""

    units: list[_Unit]
    head: list[_Comment] = field(default_factory=list)
    tail: list[_Comment] = field(default_factory=list)


def _start(span: Span) -> Pos:
    return (span.line, span.col)


def _end(span: Span) -> Pos:
    return (span.end_line, span.end_col)


def _place(spans: Sequence[Span], comments: Sequence[_Comment], in_block: bool) -> _Placement:
    """Attach each comment of a region (top level or a block body) to exactly one slot.

    Inside an item's span: `inner`. On the line an item ends, after it: that
    item's `trailing`. After code that is not an item (a block's `{`): `head`.
    Otherwise (own line): `leading` of the next item, or `tail` if none follows.
    """
    placement = _Placement(units=[_Unit(_start(s), _end(s)) for s in spans])
    units = placement.units
    for c in comments:
        pos = c.pos
        inside = next((u for u in units if u.start <= pos < u.end), None)
        if inside is not None:
            inside.inner.append(c)
            continue
        before = [u for u in units if u.end <= pos]
        prev = before[-1] if before else None
        if not c.own_line and prev is not None and prev.end[0] == c.line:
            prev.trailing.append(c)
        elif not c.own_line and in_block:
            placement.head.append(c)
        else:
            nxt = next((u for u in units if u.start > pos), None)
            (nxt.leading if nxt is not None else placement.tail).append(c)
    return placement


# ------------------------------------------------------------------ the module printer

ItemPrinter = Callable[[Any, str], str]


class _ModulePrinter:
    """Prints one module, owning the source positions that place its comments."""

    def __init__(self, module: A.Module, source_text: str) -> None:
        self.module = module
        self.text = source_text
        self.line_starts = [0]
        for i, ch in enumerate(source_text):
            if ch == "\n":
                self.line_starts.append(i + 1)
        comments = sorted(module.comments, key=lambda c: (c.line, c.col))
        self.comments = [_Comment(c.line, c.col, c.text, self._own_line(c.line, c.col))
                         for c in comments]
        # Offset of each comment's last character -> offset of its first, for scanning back.
        self.comment_ends: dict[int, int] = {}
        for c in self.comments:
            if c.text:
                start = self._offset(c.line, c.col)
                self.comment_ends[start + len(c.text) - 1] = start

    # ------------------------------------------------------------ positions
    def _offset(self, line: int, col: int) -> int:
        if not 1 <= line <= len(self.line_starts):
            raise FormatterError(f"position {line}:{col} is outside the source text")
        return self.line_starts[line - 1] + col - 1

    def _pos(self, offset: int) -> Pos:
        line = bisect_right(self.line_starts, offset)
        return (line, offset - self.line_starts[line - 1] + 1)

    def _own_line(self, line: int, col: int) -> bool:
        start = self._offset(line, 1)
        return not self.text[start:start + col - 1].strip()

    def _open_brace(self, before: Pos) -> Pos:
        """The block's `{`: the last code before `before` (its first item, or its `}`)."""
        i = self._offset(*before) - 1
        while i >= 0:
            if self.text[i].isspace():
                i -= 1
            elif i in self.comment_ends:
                i = self.comment_ends[i] - 1
            else:
                break
        if i < 0 or self.text[i] != "{":
            raise FormatterError(f"no '{{' before {before[0]}:{before[1]}; spans and text differ")
        return self._pos(i)

    # ------------------------------------------------------------ layout
    def format(self) -> str:
        placement = _place([d.span for d in self.module.decls], self.comments, in_block=False)
        out: list[str] = []
        for decl, unit in zip(self.module.decls, placement.units, strict=True):
            if out:
                out.append("")
            self._comment_groups(unit.leading, out)
            if unit.leading and unit.start[0] > unit.leading[-1].line + 1:
                out.append("")
            out.extend(self._decl(decl, unit))
        if placement.tail:
            if out:
                out.append("")
            self._comment_groups(placement.tail, out)
        self._check_all_placed(placement)
        return "\n".join(out) + "\n" if out else ""

    @staticmethod
    def _comment_groups(comments: list[_Comment], out: list[str]) -> None:
        """Top-level comment lines, one blank line wherever the source had blank lines."""
        for i, c in enumerate(comments):
            if i and c.line > comments[i - 1].line + 1:
                out.append("")
            out.append(c.text)

    def _check_all_placed(self, placement: _Placement) -> None:
        placed = len(placement.tail) + sum(
            len(u.leading) + len(u.inner) + len(u.trailing) for u in placement.units)
        if placed != len(self.comments):
            raise FormatterError(f"placed {placed} of {len(self.comments)} comments")

    def _decl(self, decl: A.Decl, unit: _Unit) -> list[str]:
        """The lines of one top-level declaration with its inner and trailing comments."""
        block = self._block_parts(decl)
        if block is None:
            lines = [c.text for c in unit.inner] + [self._line_decl(decl)]
        else:
            header, items, printer = block
            lines = self._block(decl.span, header, items, printer, unit.inner)
        if len(unit.trailing) > 1:
            raise FormatterError(f"several trailing comments on line {unit.end[0]}")
        if unit.trailing:
            lines[-1] += " " + unit.trailing[0].text
        return lines

    def _block(self, span: Span, header: str, items: Sequence[A.Node], printer: ItemPrinter,
               comments: list[_Comment]) -> list[str]:
        """`header {`, its lines with their comments, `}`; `header { }` when empty.

        A line is one entry, or several the author joined with `;` on one line
        (`kind read; cost 1 min`); a block written on one line in the compact form
        stays `header { a; b }` (see the module docstring).
        """
        close = (span.end_line, span.end_col - 1)
        brace = self._open_brace(_start(items[0].span) if items else close)
        hoisted = [c for c in comments if c.pos < brace]
        body = [c for c in comments if c.pos > brace]
        lines = [c.text for c in hoisted]
        if not items and not body:
            return [*lines, f"{header} {{ }}"]
        entries = _entries(items)
        texts = [_entry_text(e, printer, INDENT) for e in entries]
        joined = [self._joined(a, b, ta, tb) for a, b, ta, tb
                  in zip(entries, entries[1:], texts, texts[1:], strict=False)]
        if (brace[0] == close[0] and all(joined) and not body
                and (len(entries) > 1 or len(entries[0]) > 1)
                and not any("\n" in t for t in texts)):
            return [*lines, f"{header} {{ {'; '.join(texts)} }}"]
        placement = _place([_entry_span(e) for e in entries], body, in_block=True)
        opener = f"{header} {{"
        if placement.head:
            opener += " " + placement.head[0].text
        lines.append(opener)
        lines.extend(INDENT + c.text for c in placement.head[1:])
        runs: list[list[int]] = []
        for k in range(len(entries)):
            if k and joined[k - 1]:
                runs[-1].append(k)
            else:
                runs.append([k])
        for run in runs:
            units = [placement.units[k] for k in run]
            lines.extend(INDENT + c.text for u in units for c in [*u.leading, *u.inner])
            text = INDENT + "; ".join(texts[k] for k in run)
            if any(u.trailing for u in units[:-1]) or len(units[-1].trailing) > 1:
                raise FormatterError(f"several trailing comments on line {units[-1].end[0]}")
            if units[-1].trailing:
                text += " " + units[-1].trailing[0].text
            lines.append(text)
        lines.extend(INDENT + c.text for c in placement.tail)
        lines.append("}")
        return lines

    def _joined(self, first: _Entry, second: _Entry, first_text: str, second_text: str) -> bool:
        """Whether `second` stays on `first`'s line: the author wrote `first; second` on one
        line, and neither prints over several lines (a long string)."""
        end, start = _end(_entry_span(first)), _start(_entry_span(second))
        if end[0] != start[0] or "\n" in first_text or "\n" in second_text:
            return False
        return ";" in self.text[self._offset(*end):self._offset(*start)]

    @staticmethod
    def _block_parts(decl: A.Decl) -> tuple[str, Sequence[A.Node], ItemPrinter] | None:
        """Header, items and item printer of a block declaration; None for one-line ones."""
        clause: ItemPrinter = _clause
        if isinstance(decl, A.WorldDecl):
            return f"world {decl.name}", decl.clauses, clause
        if isinstance(decl, A.SchemaDecl):
            header = f"schema {decl.name}" + (" closed" if decl.closed else "")
            return header, decl.fields, _field
        if isinstance(decl, A.RecordDecl):
            header = f"{decl.kind} {decl.name}"
            if decl.source is not None:
                header += f" from {format_string(decl.source)}"
            if decl.key is not None:
                header += f" key {decl.key}"
            return header, decl.items, _record_item
        if isinstance(decl, A.AuthorizationDecl):
            return (f"authorization default {decl.default}", decl.rules,
                    _auth_rule)
        if isinstance(decl, A.PolicyDecl):
            header = f"policy {decl.name}"
            if decl.enforcement is not None:
                header += f" {decl.enforcement}"
            return header, decl.clauses, clause
        if isinstance(decl, A.ConditionDecl):
            header = f"condition {decl.name}"
            if decl.doc is not None:
                header += f" {format_string(decl.doc)}"
            if decl.extends is not None:
                header += f" extends {decl.extends}"
            items = sorted([*decl.assignments, *decl.expectations],
                           key=lambda i: (i.span.line, i.span.col))
            return header, items, _condition_item
        if isinstance(decl, A.InducerDecl):
            return f"inducer {decl.name} : {decl.kind}", decl.clauses, clause
        if isinstance(decl, A.ToolDecl):
            header = f"tool {decl.name}({', '.join(_param(p) for p in decl.params)})"
            if decl.returns is not None:
                header += f" -> {format_type(decl.returns)}"
            return header, decl.clauses, clause
        if isinstance(decl, A.PartyDecl):
            header = f"{decl.kind} {decl.name}" + (" scripted" if decl.kind == "actor" else "")
            return header, decl.clauses, clause
        if isinstance(decl, A.InstancesDecl):
            return (f"instances from {format_string(decl.source)}", decl.fields,
                    _field)
        if isinstance(decl, A.InstanceDecl):
            return (f"instance {decl.name}", decl.assignments,
                    _assignment)
        if isinstance(decl, A.MeasureDecl):
            return "measure", decl.items, _measure_item
        if isinstance(decl, A.StudyMeasureDecl):
            header = f"study measure {decl.name} : {decl.kind}"
            if decl.doc is not None:
                header += f" {format_string(decl.doc)}"
            return header, decl.clauses, _study_clause
        return None

    @staticmethod
    def _line_decl(decl: A.Decl) -> str:
        """A declaration printed on one line (long strings aside)."""
        if isinstance(decl, A.ImportDecl):
            return f"import {format_string(decl.path)}"
        if isinstance(decl, A.EnumDecl):
            meanings = "".join(f" {m.meaning} {', '.join(r.name for r in m.members)}"
                               for m in decl.meanings)
            return f"enum {decl.name} {{ {', '.join(decl.members)} }}{meanings}"
        if isinstance(decl, A.StateDecl):
            return (f"state {decl.name} : {format_type(decl.type)} = "
                    f"{format_expr(decl.value)}")
        if isinstance(decl, A.DocumentDecl):
            text = f"document {decl.name} from {format_string(decl.source)}"
            return text if decl.epistemic is None else f"{text} epistemic {decl.epistemic}"
        if isinstance(decl, A.LeverDecl):
            need = _TOP if decl.doc is None else _DELIMITED
            text = (f"lever {decl.name} : {format_type(decl.type)} = "
                    f"{format_expr(decl.default, '', need)}")
            return text if decl.doc is None else f"{text} {format_string(decl.doc)}"
        if isinstance(decl, A.LetDecl):
            params = ", ".join(f"{p.name}: {format_type(p.type)}" for p in decl.params)
            return f"let {decl.name}({params}) = {format_expr(decl.body)}"
        if isinstance(decl, A.ProtectedDecl):
            return "protected " + ", ".join(decl.items)
        if isinstance(decl, A.ChannelDecl):
            p = decl.parties
            when = "" if decl.when is None else f" when {format_expr(decl.when)}"
            if decl.kind == "direct":
                return f"channel {p[0]} -> {p[1]}" + ("" if decl.via is None
                                                       else f" via {decl.via}") + when
            if decl.kind == "delegation":
                return f"delegation {p[0]} -> {p[1]} via {decl.via}"
            if decl.kind == "fork":
                return f"fork {p[0]} -> {', '.join(p[1:])}{when}"
            if decl.kind == "merge":
                return f"merge {', '.join(p[:-1])} -> {p[-1]}{when}"
            return "relay " + " -> ".join(p) + when
        raise FormatterError(f"no printer for declaration {type(decl).__name__}")


# ------------------------------------------------------------------ entry points

def format_module(module: A.Module, source_text: str) -> str:
    """The canonical text of a parsed module.

    `source_text` must be the text `module` was parsed from: comments are placed
    by comparing their positions with the spans of the declarations and items.
    """
    return _ModulePrinter(module, source_text).format()


def format_text(text: str, name: str = "<text>") -> tuple[str | None, Diagnostics]:
    """Parse and format `text`; None with the diagnostics when it has syntax errors.

    The result is reparsed and compared with the input (declarations without
    spans, comment texts in order) before it is returned, so a formatter bug
    raises FormatterError rather than silently changing a world.
    """
    module, diagnostics = parse_text(text, name)
    if module is None:
        return None, diagnostics
    formatted = format_module(module, text)
    _verify(module, formatted, name)
    return formatted, diagnostics


def _verify(module: A.Module, formatted: str, name: str) -> None:
    """Raise FormatterError unless `formatted` means exactly what `module` does."""
    again, diagnostics = parse_text(formatted, name)
    if again is None:
        first = diagnostics.errors[0] if diagnostics.errors else None
        raise FormatterError(f"formatted text of {name} does not parse: "
                             f"{first.message if first else 'unknown error'} at "
                             f"{first.span if first else '?'}")
    if not same_shape(again.decls, module.decls):  # strip_spans ==, without recursion
        raise FormatterError(f"formatting changed the meaning of {name}")
    if [c.text for c in again.comments] != [c.text for c in module.comments]:
        raise FormatterError(f"formatting lost, duplicated or reordered comments of {name}")
