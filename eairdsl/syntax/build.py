"""Lark parse tree -> AST.

A lark Transformer with one method per grammar alias. Positions come from
`propagate_positions`, so each node's span covers exactly the text it was
parsed from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from lark import Discard, Token, Transformer, Tree, v_args
from lark.tree import Meta
from pydantic import BaseModel

from eairdsl.source import Span
from eairdsl.syntax import ast as A

__all__ = ["AstBuilder", "decode_string", "DURATION_UNITS", "MAX_NESTING", "too_deep",
           "same_shape", "iter_exprs"]

#: How deeply expressions (and types) may nest. Every pass after the parser
#: (checker, lowering, evaluation, formatter, JSON output) walks expressions
#: recursively, so the parser refuses deeper ones (E111) before any of them run.
#: Each operator of a chain is one level: `a + b + c` nests two deep.
MAX_NESTING = 100

#: Grammar rules that make one level of expression or type nesting (arguments,
#: field initialisers and comprehension tails hang off one of these).
_NESTING_RULES = frozenset({
    "or_op", "and_op", "not_op", "neg_op", "compare_op", "text_test", "in_op", "add_op",
    "sub_op", "mul_op", "div_op", "attr", "index", "call", "aggregate", "list_lit",
    "comprehension", "record_lit", "quantifier", "exists", "type_app", "type_max",
})

#: Minutes per duration unit; the clock of every world counts minutes.
DURATION_UNITS: dict[str, float] = {
    "s": 1 / 60, "sec": 1 / 60, "second": 1 / 60, "seconds": 1 / 60,
    "min": 1, "mins": 1, "minute": 1, "minutes": 1,
    "h": 60, "hour": 60, "hours": 60,
    "d": 1440, "day": 1440, "days": 1440,
    "week": 10080, "weeks": 10080,
}


#: a study measure's clause class by its keyword (`A.UnknownStudyClause` for any other)
_STUDY_CLAUSES: dict[str, type[A.StudyClauseNode]] = {
    cls.key: cls for cls in A.STUDY_CLAUSE_CLASSES}


def decode_string(raw: str) -> str:
    """Decode a string token: JSON escapes for "...", verbatim (dedented) for triple quotes."""
    if raw.startswith('"""'):
        body = raw[3:-3]
        if body.startswith("\n"):
            body = body[1:]
        lines = body.split("\n")
        indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()]
        cut = min(indents) if indents else 0
        return "\n".join(ln[cut:] for ln in lines).rstrip(" ").rstrip("\n")
    return str(json.loads(raw))


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


class _FieldList(list[A.FieldDecl]):
    """The fields of one `a, b: type` list, until the block that holds it flattens it."""


def _flat(items: list[Any]) -> list[Any]:
    """A block's items with each field list spliced in as its fields, in order."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, _FieldList):
            out.extend(item)
        else:
            out.append(item)
    return out


class AstBuilder(Transformer[Token, Any]):
    """Builds `eairdsl.syntax.ast` nodes; `file` is put into every span."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file

    # ------------------------------------------------------------ helpers
    def _span(self, meta: Meta | Token) -> Span:
        if isinstance(meta, Token):
            return Span(file=self.file, line=meta.line or 1, col=meta.column or 1,
                        end_line=meta.end_line or meta.line or 1,
                        end_col=meta.end_column or (meta.column or 1) + 1)
        if getattr(meta, "empty", True):
            return Span.point(self.file)
        return Span(file=self.file, line=meta.line, col=meta.column, end_line=meta.end_line,
                    end_col=meta.end_column)

    # ------------------------------------------------------------ leaves
    def string(self, children: list[Token]) -> str:
        return decode_string(str(children[0]))

    def string_list(self, children: list[str | None]) -> list[str]:
        return [c for c in children if c is not None]

    def name_list(self, children: list[Token]) -> list[str]:
        return [str(c) for c in children]

    def signed(self, children: list[Token]) -> str:
        return str(children[0])

    def when_clause(self, children: list[Any]) -> Any:
        return children[0]

    def _kw(self, children: list[Token]) -> str:
        return str(children[0])

    record_kind = auth_effect = enforcement = aggregate_fn = quantifier_kw = _kw
    comp_op = text_op = closed = enum_meaning_kw = _kw

    # ------------------------------------------------------------ literals
    @v_args(meta=True)
    def int_lit(self, meta: Meta, c: list[Token]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="int", value=int(c[0]), raw=str(c[0]))

    @v_args(meta=True)
    def number_lit(self, meta: Meta, c: list[Token]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="number", value=float(c[0]),
                             raw=str(c[0]))

    @v_args(meta=True)
    def money_lit(self, meta: Meta, c: list[Token]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="money", value=_number(str(c[0])[1:]),
                             raw=str(c[0]))

    @v_args(meta=True)
    def duration_lit(self, meta: Meta, c: list[Token]) -> A.LiteralExpr:
        raw = str(c[0])
        i = 0
        while i < len(raw) and (raw[i].isdigit() or raw[i] == "."):
            i += 1
        amount, unit = float(raw[:i]), raw[i:].strip()
        minutes = amount * DURATION_UNITS[unit]
        value: int | float = int(minutes) if float(minutes).is_integer() else minutes
        return A.LiteralExpr(span=self._span(meta), kind="duration", value=value, raw=raw)

    @v_args(meta=True)
    def percent_lit(self, meta: Meta, c: list[Token]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="percent",
                             value=_number(str(c[0])[:-1]), raw=str(c[0]))

    @v_args(meta=True)
    def date_lit(self, meta: Meta, c: list[Token]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="date", value=str(c[0]), raw=str(c[0]))

    @v_args(meta=True)
    def string_lit(self, meta: Meta, c: list[str]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="text", value=c[0], raw=json.dumps(c[0]))

    @v_args(meta=True)
    def true_lit(self, meta: Meta, c: list[Any]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="bool", value=True, raw="true")

    @v_args(meta=True)
    def false_lit(self, meta: Meta, c: list[Any]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="bool", value=False, raw="false")

    @v_args(meta=True)
    def none_lit(self, meta: Meta, c: list[Any]) -> A.LiteralExpr:
        return A.LiteralExpr(span=self._span(meta), kind="none", value=None, raw="none")

    # ------------------------------------------------------------ expressions
    @v_args(meta=True)
    def name(self, meta: Meta, c: list[Token]) -> A.NameExpr:
        return A.NameExpr(span=self._span(meta), id=str(c[0]))

    @v_args(meta=True)
    def attr(self, meta: Meta, c: list[Any]) -> A.AttrExpr:
        return A.AttrExpr(span=self._span(meta), obj=c[0], name=str(c[1]))

    @v_args(meta=True)
    def index(self, meta: Meta, c: list[Any]) -> A.IndexExpr:
        return A.IndexExpr(span=self._span(meta), obj=c[0], index=c[1])

    @v_args(meta=True)
    def pos_arg(self, meta: Meta, c: list[Any]) -> A.CallArg:
        return A.CallArg(span=self._span(meta), name=None, value=c[0])

    @v_args(meta=True)
    def kw_arg(self, meta: Meta, c: list[Any]) -> A.CallArg:
        return A.CallArg(span=self._span(meta), name=str(c[0]), value=c[1])

    @v_args(meta=True)
    def call(self, meta: Meta, c: list[Any]) -> A.CallExpr:
        args = [a for a in c[1:] if a is not None]
        return A.CallExpr(span=self._span(meta), func=str(c[0]), args=args)

    def _binary(self, meta: Meta, op: str, left: Any, right: Any) -> A.BinaryExpr:
        return A.BinaryExpr(span=self._span(meta), op=op, left=left, right=right)

    @v_args(meta=True)
    def or_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "or", c[0], c[1])

    @v_args(meta=True)
    def and_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "and", c[0], c[1])

    @v_args(meta=True)
    def not_op(self, meta: Meta, c: list[Any]) -> A.UnaryExpr:
        return A.UnaryExpr(span=self._span(meta), op="not", operand=c[0])

    @v_args(meta=True)
    def neg_op(self, meta: Meta, c: list[Any]) -> A.UnaryExpr:
        return A.UnaryExpr(span=self._span(meta), op="-", operand=c[0])

    @v_args(meta=True)
    def compare_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, c[1], c[0], c[2])

    @v_args(meta=True)
    def text_test(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, c[1], c[0], c[2])

    @v_args(meta=True)
    def in_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "in", c[0], c[1])

    @v_args(meta=True)
    def add_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "+", c[0], c[1])

    @v_args(meta=True)
    def sub_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "-", c[0], c[1])

    @v_args(meta=True)
    def mul_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "*", c[0], c[1])

    @v_args(meta=True)
    def div_op(self, meta: Meta, c: list[Any]) -> A.BinaryExpr:
        return self._binary(meta, "/", c[0], c[1])

    @v_args(meta=True)
    def list_lit(self, meta: Meta, c: list[Any]) -> A.ListExpr:
        return A.ListExpr(span=self._span(meta), items=[x for x in c if x is not None])

    @v_args(meta=True)
    def field_init(self, meta: Meta, c: list[Any]) -> A.FieldInit:
        return A.FieldInit(span=self._span(meta), name=str(c[0]), value=c[1])

    @v_args(meta=True)
    def record_lit(self, meta: Meta, c: list[Any]) -> A.RecordExpr:
        return A.RecordExpr(span=self._span(meta), fields=[x for x in c if x is not None])

    @v_args(meta=True)
    def comp_tail(self, meta: Meta, c: list[Any]) -> A.CompTail:
        var, source, where, *group = c
        return A.CompTail(span=self._span(meta), var=str(var), source=source, where=where,
                          group_by=[g for g in group if g is not None])

    @v_args(meta=True)
    def comprehension(self, meta: Meta, c: list[Any]) -> A.ComprehensionExpr:
        return A.ComprehensionExpr(span=self._span(meta), body=c[0], tail=c[1])

    @v_args(meta=True)
    def aggregate(self, meta: Meta, c: list[Any]) -> A.AggregateExpr:
        return A.AggregateExpr(span=self._span(meta), func=c[0], body=c[1], tail=c[2])

    @v_args(meta=True)
    def quantifier(self, meta: Meta, c: list[Any]) -> A.QuantifierExpr:
        return A.QuantifierExpr(span=self._span(meta), kind=c[0], var=str(c[1]), source=c[2],
                                body=c[3])

    @v_args(meta=True)
    def exists(self, meta: Meta, c: list[Any]) -> A.QuantifierExpr:
        return A.QuantifierExpr(span=self._span(meta), kind="exists", var=str(c[0]),
                                source=c[1], body=c[2])

    # ------------------------------------------------------------ types
    @v_args(meta=True)
    def type_name(self, meta: Meta, c: list[Token]) -> A.TypeRef:
        return A.TypeRef(span=self._span(meta), kind="name", name=str(c[0]))

    @v_args(meta=True)
    def type_field(self, meta: Meta, c: list[Token]) -> A.TypeRef:
        return A.TypeRef(span=self._span(meta), kind="field", name=str(c[0]), field=str(c[1]))

    @v_args(meta=True)
    def type_app(self, meta: Meta, c: list[Any]) -> A.TypeRef:
        return A.TypeRef(span=self._span(meta), kind="app", name=str(c[0]), arg=c[1])

    @v_args(meta=True)
    def type_enum(self, meta: Meta, c: list[Any]) -> A.TypeRef:
        return A.TypeRef(span=self._span(meta), kind="enum", members=c[0])

    @v_args(meta=True)
    def type_max(self, meta: Meta, c: list[Any]) -> A.TypeRef:
        inner: A.TypeRef = c[0]
        return inner.model_copy(update={"max": int(c[1]), "span": self._span(meta)})

    # ------------------------------------------------------------ fields
    @v_args(meta=True)
    def field_decl(self, meta: Meta, c: list[Any]) -> A.FieldDecl:
        attrs: dict[str, Any] = {}
        for key, value in c[2:]:
            attrs[key] = value
        return A.FieldDecl(span=self._span(meta), name=str(c[0]), type=c[1], **attrs)

    @v_args(meta=True)
    def field_list(self, meta: Meta, c: list[Any]) -> _FieldList:
        """`a, b, c: type attrs`: one field per name, each with its own span.

        Past the parser a list is just its fields, so every later stage (and the IR)
        sees what `a: type attrs`, `b: type attrs`, ... would give. A field's span is
        its name; the last one's runs on over the shared type and attributes, as if it
        were written alone. The fields hold equal copies of the one type and attribute
        text, with its spans: equal type spans are how the formatter tells a list.
        """
        names = [t for t in c if isinstance(t, Token)]
        rest = c[len(names):]
        template = self.field_decl(meta, [names[-1], *rest])
        fields = _FieldList()
        for token in names[:-1]:
            fields.append(template.model_copy(deep=True, update={
                "name": str(token), "span": self._span(token)}))
        last = self._span(names[-1])
        fields.append(template.model_copy(update={"span": last.model_copy(update={
            "end_line": template.span.end_line, "end_col": template.span.end_col})}))
        return fields

    def attr_canary(self, c: list[Any]) -> tuple[str, Any]:
        return ("canary", True)

    def attr_patterns(self, c: list[Any]) -> tuple[str, Any]:
        return ("patterns", c[0])

    def attr_epistemic(self, c: list[Any]) -> tuple[str, Any]:
        return ("epistemic", str(c[0]))

    def attr_default(self, c: list[Any]) -> tuple[str, Any]:
        return ("default", c[0])

    @v_args(meta=True)
    def group_decl(self, meta: Meta, c: list[Any]) -> A.GroupDecl:
        return A.GroupDecl(span=self._span(meta), name=str(c[0]), fields=c[1])

    # ------------------------------------------------------------ declarations
    @v_args(meta=True)
    def world_decl(self, meta: Meta, c: list[Any]) -> A.WorldDecl:
        return A.WorldDecl(span=self._span(meta), name=str(c[0]), clauses=c[1:])

    @v_args(meta=True)
    def world_title(self, meta: Meta, c: list[Any]) -> A.TitleClause:
        return A.TitleClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def world_risk(self, meta: Meta, c: list[Any]) -> A.RiskClause:
        return A.RiskClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def world_operation(self, meta: Meta, c: list[Any]) -> A.OperationClause:
        return A.OperationClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def world_preserves(self, meta: Meta, c: list[Any]) -> A.PreservesClause:
        return A.PreservesClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def world_clock(self, meta: Meta, c: list[Any]) -> A.ClockClause:
        return A.ClockClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def world_start(self, meta: Meta, c: list[Any]) -> A.StartClause:
        return A.StartClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def world_seeds(self, meta: Meta, c: list[Any]) -> A.SeedsClause:
        return A.SeedsClause(span=self._span(meta), number=str(c[0]))

    @v_args(meta=True)
    def world_forbid(self, meta: Meta, c: list[Any]) -> A.ForbidClause:
        return A.ForbidClause(span=self._span(meta), strings=c[0])

    @v_args(meta=True)
    def world_description(self, meta: Meta, c: list[Any]) -> A.DescriptionClause:
        return A.DescriptionClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def import_decl(self, meta: Meta, c: list[Any]) -> A.ImportDecl:
        return A.ImportDecl(span=self._span(meta), path=c[0])

    @v_args(meta=True)
    def enum_decl(self, meta: Meta, c: list[Any]) -> A.EnumDecl:
        return A.EnumDecl(span=self._span(meta), name=str(c[0]), members=c[1],
                          meanings=c[2:])

    @v_args(meta=True)
    def enum_meaning(self, meta: Meta, c: list[Any]) -> A.EnumMeaning:
        return A.EnumMeaning(span=self._span(meta), meaning=c[0], members=c[1:])

    @v_args(meta=True)
    def member_ref(self, meta: Meta, c: list[Token]) -> A.MemberRef:
        return A.MemberRef(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def schema_decl(self, meta: Meta, c: list[Any]) -> A.SchemaDecl:
        return A.SchemaDecl(span=self._span(meta), name=str(c[0]), closed=c[1] is not None,
                            fields=_flat(c[2:]))

    @v_args(meta=True)
    def record_decl(self, meta: Meta, c: list[Any]) -> A.RecordDecl:
        kind, name, source, key, *items = c
        return A.RecordDecl(span=self._span(meta), kind=kind, name=str(name), source=source,
                            key=str(key) if key is not None else None, items=_flat(items))

    @v_args(meta=True)
    def state_decl(self, meta: Meta, c: list[Any]) -> A.StateDecl:
        return A.StateDecl(span=self._span(meta), name=str(c[0]), type=c[1], value=c[2])

    @v_args(meta=True)
    def document_decl(self, meta: Meta, c: list[Any]) -> A.DocumentDecl:
        return A.DocumentDecl(span=self._span(meta), name=str(c[0]), source=c[1],
                              epistemic=str(c[2]) if c[2] is not None else None)

    @v_args(meta=True)
    def authorization_decl(self, meta: Meta, c: list[Any]) -> A.AuthorizationDecl:
        return A.AuthorizationDecl(span=self._span(meta), default=c[0], rules=c[1:])

    @v_args(meta=True)
    def auth_rule(self, meta: Meta, c: list[Any]) -> A.AuthRule:
        return A.AuthRule(span=self._span(meta), effect=c[0], principal=str(c[1]),
                          selectors=c[2:])

    @v_args(meta=True)
    def field_sel_name(self, meta: Meta, c: list[Token]) -> A.FieldSel:
        return A.FieldSel(span=self._span(meta), record=str(c[0]), field=str(c[1]))

    @v_args(meta=True)
    def field_sel_all(self, meta: Meta, c: list[Token]) -> A.FieldSel:
        return A.FieldSel(span=self._span(meta), record=str(c[0]), field="*")

    @v_args(meta=True)
    def policy_decl(self, meta: Meta, c: list[Any]) -> A.PolicyDecl:
        return A.PolicyDecl(span=self._span(meta), name=str(c[0]), enforcement=c[1],
                            clauses=c[2:])

    @v_args(meta=True)
    def policy_text(self, meta: Meta, c: list[Any]) -> A.PolicyTextClause:
        return A.PolicyTextClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def policy_source(self, meta: Meta, c: list[Any]) -> A.SourceClause:
        return A.SourceClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def policy_rule(self, meta: Meta, c: list[Any]) -> A.RuleClause:
        return A.RuleClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def lever_decl(self, meta: Meta, c: list[Any]) -> A.LeverDecl:
        return A.LeverDecl(span=self._span(meta), name=str(c[0]), type=c[1], default=c[2],
                           doc=c[3])

    @v_args(meta=True)
    def condition_decl(self, meta: Meta, c: list[Any]) -> A.ConditionDecl:
        name, doc, extends, *items = c
        return A.ConditionDecl(span=self._span(meta), name=str(name), doc=doc,
                               extends=str(extends) if extends is not None else None,
                               assignments=[i for i in items if isinstance(i, A.Assignment)],
                               expectations=[i for i in items if isinstance(i, A.Expectation)])

    @v_args(meta=True)
    def expectation(self, meta: Meta, c: list[Any]) -> A.Expectation:
        return A.Expectation(span=self._span(meta), subject=str(c[0]), outcome=str(c[1]),
                             reason=c[2])

    @v_args(meta=True)
    def assignment(self, meta: Meta, c: list[Any]) -> A.Assignment:
        return A.Assignment(span=self._span(meta), name=str(c[0]), value=c[1])

    @v_args(meta=True)
    def inducer_decl(self, meta: Meta, c: list[Any]) -> A.InducerDecl:
        return A.InducerDecl(span=self._span(meta), name=str(c[0]), kind=str(c[1]),
                             clauses=c[2:])

    @v_args(meta=True)
    def inducer_roles(self, meta: Meta, c: list[Any]) -> A.RolesClause:
        return A.RolesClause(span=self._span(meta), names=c[0])

    @v_args(meta=True)
    def inducer_when(self, meta: Meta, c: list[Any]) -> A.WhenClause:
        return A.WhenClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def inducer_text(self, meta: Meta, c: list[Any]) -> A.TextClause:
        return A.TextClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def inducer_at(self, meta: Meta, c: list[Any]) -> A.AtClause:
        return A.AtClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def inducer_every(self, meta: Meta, c: list[Any]) -> A.EveryClause:
        return A.EveryClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def inducer_from(self, meta: Meta, c: list[Any]) -> A.FromClause:
        return A.FromClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def inducer_shift(self, meta: Meta, c: list[Any]) -> A.ShiftClause:
        return A.ShiftClause(span=self._span(meta), name=str(c[0]), number=c[1])

    @v_args(meta=True)
    def inducer_cost(self, meta: Meta, c: list[Any]) -> A.CostClause:
        return A.CostClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def inducer_points(self, meta: Meta, c: list[Any]) -> A.PointsClause:
        return A.PointsClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def inducer_on(self, meta: Meta, c: list[Any]) -> A.OnClause:
        return A.OnClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def inducer_to(self, meta: Meta, c: list[Any]) -> A.ToClause:
        return A.ToClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def tool_decl(self, meta: Meta, c: list[Any]) -> A.ToolDecl:
        # Children: NAME, (None | param+), (None | return type), clause*
        i = 1
        params: list[A.Param] = []
        if c[i] is None:
            i += 1
        else:
            while i < len(c) and isinstance(c[i], A.Param):
                params.append(c[i])
                i += 1
        returns = c[i]
        return A.ToolDecl(span=self._span(meta), name=str(c[0]), params=params, returns=returns,
                          clauses=c[i + 1:])

    @v_args(meta=True)
    def param(self, meta: Meta, c: list[Any]) -> A.Param:
        return A.Param(span=self._span(meta), name=str(c[0]), type=c[1], default=c[2], hint=c[3])

    @v_args(meta=True)
    def tool_kind(self, meta: Meta, c: list[Any]) -> A.KindClause:
        return A.KindClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def tool_cost(self, meta: Meta, c: list[Any]) -> A.CostClause:
        return A.CostClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def tool_description(self, meta: Meta, c: list[Any]) -> A.DescriptionClause:
        return A.DescriptionClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def tool_require(self, meta: Meta, c: list[Any]) -> A.RequireClause:
        return A.RequireClause(span=self._span(meta), expr=c[0], guard=c[1], when=c[2])

    @v_args(meta=True)
    def tool_ensure(self, meta: Meta, c: list[Any]) -> A.EnsureClause:
        return A.EnsureClause(span=self._span(meta), policy=str(c[0]), message=c[1], when=c[2])

    @v_args(meta=True)
    def guard_reject(self, meta: Meta, c: list[Any]) -> A.RejectGuard:
        return A.RejectGuard(span=self._span(meta), message=c[0])

    @v_args(meta=True)
    def guard_route(self, meta: Meta, c: list[Any]) -> A.RouteGuard:
        return A.RouteGuard(span=self._span(meta), target=str(c[0]))

    @v_args(meta=True)
    def tool_returns(self, meta: Meta, c: list[Any]) -> A.ReturnsClause:
        return A.ReturnsClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def tool_append(self, meta: Meta, c: list[Any]) -> A.AppendClause:
        return A.AppendClause(span=self._span(meta), name=str(c[0]), expr=c[1], when=c[2])

    @v_args(meta=True)
    def tool_set(self, meta: Meta, c: list[Any]) -> A.SetClause:
        return A.SetClause(span=self._span(meta), name=str(c[0]), expr=c[1], when=c[2])

    @v_args(meta=True)
    def tool_delegates(self, meta: Meta, c: list[Any]) -> A.DelegatesClause:
        return A.DelegatesClause(span=self._span(meta),
                                 name=str(c[0]) if c[0] is not None else None)

    @v_args(meta=True)
    def tool_propagates(self, meta: Meta, c: list[Any]) -> A.PropagatesClause:
        return A.PropagatesClause(span=self._span(meta), expr=c[0], when=c[1])

    @v_args(meta=True)
    def tool_sends(self, meta: Meta, c: list[Any]) -> A.SendsClause:
        return A.SendsClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def tool_acl(self, meta: Meta, c: list[Any]) -> A.AclClause:
        return A.AclClause(span=self._span(meta), expr=c[0], when=c[1])

    def _party(self, kind: str, meta: Meta, c: list[Any]) -> A.PartyDecl:
        return A.PartyDecl(span=self._span(meta), kind=kind, name=str(c[0]),
                           clauses=c[1:])

    @v_args(meta=True)
    def role_decl(self, meta: Meta, c: list[Any]) -> A.PartyDecl:
        return self._party("role", meta, c)

    @v_args(meta=True)
    def actor_decl(self, meta: Meta, c: list[Any]) -> A.PartyDecl:
        return self._party("actor", meta, c)

    @v_args(meta=True)
    def simulator_decl(self, meta: Meta, c: list[Any]) -> A.PartyDecl:
        return self._party("simulator", meta, c)

    @v_args(meta=True)
    def party_model(self, meta: Meta, c: list[Any]) -> A.ModelClause:
        return A.ModelClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def party_card(self, meta: Meta, c: list[Any]) -> A.CardClause:
        return A.CardClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def party_kpi(self, meta: Meta, c: list[Any]) -> A.KpiClause:
        return A.KpiClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def party_memory(self, meta: Meta, c: list[Any]) -> A.MemoryClause:
        return A.MemoryClause(span=self._span(meta), name=str(c[0]))

    @v_args(meta=True)
    def party_authority(self, meta: Meta, c: list[Any]) -> A.AuthorityClause:
        return A.AuthorityClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def party_display(self, meta: Meta, c: list[Any]) -> A.DisplayClause:
        return A.DisplayClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def party_principal(self, meta: Meta, c: list[Any]) -> A.PrincipalClause:
        return A.PrincipalClause(span=self._span(meta), expr=c[0])

    @v_args(meta=True)
    def party_objective(self, meta: Meta, c: list[Any]) -> A.ObjectiveClause:
        return A.ObjectiveClause(span=self._span(meta), text=c[0])

    @v_args(meta=True)
    def party_tools(self, meta: Meta, c: list[Any]) -> A.ToolsClause:
        return A.ToolsClause(span=self._span(meta), refs=c)

    @v_args(meta=True)
    def tool_ref(self, meta: Meta, c: list[Any]) -> A.ToolRef:
        return A.ToolRef(span=self._span(meta), name=str(c[0]), when=c[1])

    @v_args(meta=True)
    def party_trait(self, meta: Meta, c: list[Any]) -> A.TraitClause:
        return A.TraitClause(span=self._span(meta), name=str(c[0]), number=c[1])

    @v_args(meta=True)
    def party_say(self, meta: Meta, c: list[Any]) -> A.SayClause:
        return A.SayClause(span=self._span(meta), at=c[0], message=c[1], recipient=c[2],
                           verbatim=c[3] is not None, when=c[4])

    @v_args(meta=True)
    def party_contact(self, meta: Meta, c: list[Any]) -> A.ContactClause:
        return A.ContactClause(span=self._span(meta), at=c[0], recipient=c[1], when=c[2])

    @v_args(meta=True)
    def party_description(self, meta: Meta, c: list[Any]) -> A.DescriptionClause:
        return A.DescriptionClause(span=self._span(meta), text=c[0])

    # ------------------------------------------------------------ topology
    @v_args(meta=True)
    def channel_direct(self, meta: Meta, c: list[Any]) -> A.ChannelDecl:
        return A.ChannelDecl(span=self._span(meta), kind="direct", parties=[str(c[0]), str(c[1])],
                             via=str(c[2]) if c[2] is not None else None, when=c[3])

    @v_args(meta=True)
    def channel_delegation(self, meta: Meta, c: list[Any]) -> A.ChannelDecl:
        return A.ChannelDecl(span=self._span(meta), kind="delegation",
                             parties=[str(c[0]), str(c[1])], via=str(c[2]))

    @v_args(meta=True)
    def channel_fork(self, meta: Meta, c: list[Any]) -> A.ChannelDecl:
        return A.ChannelDecl(span=self._span(meta), kind="fork", parties=[str(c[0]), *c[1]],
                             when=c[2])

    @v_args(meta=True)
    def channel_merge(self, meta: Meta, c: list[Any]) -> A.ChannelDecl:
        return A.ChannelDecl(span=self._span(meta), kind="merge", parties=[*c[0], str(c[1])],
                             when=c[2])

    @v_args(meta=True)
    def channel_relay(self, meta: Meta, c: list[Any]) -> A.ChannelDecl:
        return A.ChannelDecl(span=self._span(meta), kind="relay",
                             parties=[str(x) for x in c[:3]], when=c[3])

    # ------------------------------------------------------------ tasks and ground truth
    @v_args(meta=True)
    def instances_decl(self, meta: Meta, c: list[Any]) -> A.InstancesDecl:
        return A.InstancesDecl(span=self._span(meta), source=c[0], fields=_flat(c[1:]))

    @v_args(meta=True)
    def instance_decl(self, meta: Meta, c: list[Any]) -> A.InstanceDecl:
        return A.InstanceDecl(span=self._span(meta), name=str(c[0]), assignments=c[1:])

    @v_args(meta=True)
    def measure_decl(self, meta: Meta, c: list[Any]) -> A.MeasureDecl:
        return A.MeasureDecl(span=self._span(meta), items=c)

    @v_args(meta=True)
    def measurement(self, meta: Meta, c: list[Any]) -> A.MeasureItem:
        return A.MeasureItem(span=self._span(meta), name=str(c[0]), expr=c[1], when=c[2])

    @v_args(meta=True)
    def metric(self, meta: Meta, c: list[Any]) -> A.MeasureItem:
        return A.MeasureItem(span=self._span(meta), name=str(c[0]), metric=True, expr=c[1],
                             when=c[2])

    @v_args(meta=True)
    def study_measure_decl(self, meta: Meta, c: list[Any]) -> A.StudyMeasureDecl:
        return A.StudyMeasureDecl(span=self._span(meta), name=str(c[0]), kind=str(c[1]),
                                  doc=c[2], clauses=c[3:])

    @v_args(meta=True)
    def study_clause(self, meta: Meta,
                     c: list[Any]) -> A.StudyClauseNode | A.UnknownStudyClause:
        # the keyword is parsed as a name; past the parser, a clause is its class
        cls = _STUDY_CLAUSES.get(str(c[0]))
        if cls is None:
            return A.UnknownStudyClause(span=self._span(meta), key=str(c[0]), refs=c[1:])
        return cls(span=self._span(meta), refs=c[1:])

    @v_args(meta=True)
    def study_ref(self, meta: Meta, c: list[Any]) -> A.StudyRef:
        return A.StudyRef(span=self._span(meta), name=str(c[0]),
                          to=str(c[1]) if c[1] is not None else None)

    @v_args(meta=True)
    def let_decl(self, meta: Meta, c: list[Any]) -> A.LetDecl:
        params = [p for p in c[1:-1] if p is not None]
        return A.LetDecl(span=self._span(meta), name=str(c[0]), params=params, body=c[-1])

    @v_args(meta=True)
    def let_param(self, meta: Meta, c: list[Any]) -> A.LetParam:
        return A.LetParam(span=self._span(meta), name=str(c[0]), type=c[1])

    @v_args(meta=True)
    def protected_decl(self, meta: Meta, c: list[Any]) -> A.ProtectedDecl:
        return A.ProtectedDecl(span=self._span(meta), items=c)

    def protected_name(self, c: list[Token]) -> str:
        return str(c[0])

    def protected_measure(self, c: list[Any]) -> str:
        return "measure"

    def protected_instances(self, c: list[Any]) -> str:
        return "instances"

    def protected_authorization(self, c: list[Any]) -> str:
        return "authorization"

    def start(self, c: list[Any]) -> list[Any]:
        return c

    def __default__(self, data: str, children: list[Any], meta: Meta) -> Any:
        raise ValueError(f"no AST rule for grammar rule {data!r}")  # pragma: no cover


def too_deep(tree: Tree[Token], limit: int = MAX_NESTING) -> list[Tree[Token]]:
    """Subtrees at nesting level `limit + 1`: the first one of each declaration that has one.

    Walks the parse tree with an explicit stack: the point is to refuse deep input
    before anything recursive touches it.
    """
    found: list[Tree[Token]] = []
    for decl in tree.children if tree.data == "start" else [tree]:
        if not isinstance(decl, Tree):
            continue
        stack: list[tuple[Tree[Token], int]] = [(decl, 0)]
        while stack:
            node, depth = stack.pop()
            if node.data in _NESTING_RULES:
                depth += 1
                if depth > limit:
                    found.append(node)
                    break
            stack.extend((c, depth) for c in reversed(node.children) if isinstance(c, Tree))
    return found


def tree_to_decls(tree: Tree[Token], file: str) -> list[Any]:
    """Transform a parse tree into declarations.

    Post-order with an explicit stack instead of lark's recursive `transform`, so
    the depth of the input never turns into Python recursion here.
    """
    builder = AstBuilder(file)
    stack: list[tuple[Tree[Token], Iterator[Any]]] = [(tree, iter(tree.children))]
    results: list[list[Any]] = [[], []]  # the finished children of each open node
    while stack:
        node, children = stack[-1]
        child = next(children, _DONE)
        if isinstance(child, Tree):
            stack.append((child, iter(child.children)))
            results.append([])
            continue
        if child is _DONE:
            stack.pop()
            value = builder._call_userfunc(node, results.pop())  # type: ignore[no-untyped-call]
        elif isinstance(child, Token):
            value = builder._call_userfunc_token(child)  # type: ignore[no-untyped-call]
        else:
            value = child
        if value is not Discard:
            results[-1].append(value)
    result: list[Any] = results[0][0]
    return result


_DONE = object()


def same_shape(a: Any, b: Any) -> bool:
    """`ast.strip_spans(a) == ast.strip_spans(b)` without recursion (spans and raw text ignored)."""
    stack: list[tuple[Any, Any]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, BaseModel) or isinstance(y, BaseModel):
            if type(x) is not type(y):
                return False
            stack.extend((value, getattr(y, key)) for key, value in x
                         if key not in ("span", "raw"))
        elif isinstance(x, list) or isinstance(y, list):
            if not (isinstance(x, list) and isinstance(y, list)) or len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def iter_exprs(value: Any) -> Iterator[Any]:
    """Like `ast.walk_exprs` (every expression node, parents first) without recursion."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseModel):
            if isinstance(getattr(item, "node", None), str):
                yield item
            stack.extend(reversed([child for _, child in item]))
        elif isinstance(item, list):
            stack.extend(reversed(item))

