"""The abstract syntax tree of a `.eair` module.

One small pydantic class per construct, each carrying the span it came from, so
every later stage can point back at the source. Expressions are a tagged union
(`node` field) so an AST survives a JSON round trip; `strip_spans` gives the
layout-free shape the formatter round-trip tests compare.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.source import Span

__all__ = [
    "Node", "Expr", "LiteralExpr", "NameExpr", "AttrExpr", "IndexExpr", "CallArg", "CallExpr",
    "UnaryExpr", "BinaryExpr", "ListExpr", "FieldInit", "RecordExpr", "CompTail",
    "ComprehensionExpr", "AggregateExpr", "QuantifierExpr", "TypeRef", "FieldDecl", "GroupDecl",
    "Clause", "ToolRef", "Param", "Assignment", "FieldSel", "AuthRule", "MeasureItem", "LetParam",
    "WorldDecl", "ImportDecl", "EnumDecl", "SchemaDecl", "RecordDecl", "StateDecl",
    "DocumentDecl", "AuthorizationDecl", "PolicyDecl", "LeverDecl", "ConditionDecl",
    "InducerDecl", "ToolDecl", "PartyDecl", "ChannelDecl", "InstancesDecl", "InstanceDecl",
    "MeasureDecl", "LetDecl", "ProtectedDecl", "Decl", "Comment", "Module", "strip_spans",
    "walk_exprs",
]


class Node(BaseModel):
    """Base of every node: a span and nothing else shared.

    Validators are built on a class's first use, not at import: building all of
    them up front is a tenth of a cold `eairc compile`.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    span: Span


# ------------------------------------------------------------------ expressions

LiteralKind = Literal["int", "number", "money", "duration", "percent", "date", "text", "bool",
                      "none"]


class LiteralExpr(Node):
    """A literal; `value` is normalised (durations in minutes, money in dollars)."""

    node: Literal["literal"] = "literal"
    kind: LiteralKind
    value: int | float | str | bool | None
    raw: str


class NameExpr(Node):
    """A bare name: a lever, state, parameter, bound variable, enum member or declaration."""

    node: Literal["name"] = "name"
    id: str


class AttrExpr(Node):
    """Field access `obj.name`."""

    node: Literal["attr"] = "attr"
    obj: Expr
    name: str


class IndexExpr(Node):
    """Indexing `obj[index]` (lists by position)."""

    node: Literal["index"] = "index"
    obj: Expr
    index: Expr


class CallArg(Node):
    """A positional (`name` None) or keyword argument."""

    name: str | None
    value: Expr


class CallExpr(Node):
    """A call of a builtin or a `let` definition; there are no user-defined Python calls."""

    node: Literal["call"] = "call"
    func: str
    args: list[CallArg]


class UnaryExpr(Node):
    """`not x` or `-x`."""

    node: Literal["unary"] = "unary"
    op: Literal["not", "-"]
    operand: Expr


class BinaryExpr(Node):
    """Arithmetic, comparison, boolean, membership and text operators."""

    node: Literal["binary"] = "binary"
    op: str
    left: Expr
    right: Expr


class ListExpr(Node):
    """`[a, b, c]`."""

    node: Literal["list"] = "list"
    items: list[Expr]


class FieldInit(Node):
    """`name: value` inside a record literal."""

    name: str
    value: Expr


class RecordExpr(Node):
    """`{name: value, ...}`: a row to append or a handoff to send."""

    node: Literal["record"] = "record"
    fields: list[FieldInit]


class CompTail(Node):
    """`for var in source [where cond] [group by k1, k2]`."""

    var: str
    source: Expr
    where: Expr | None = None
    group_by: list[Expr] = Field(default_factory=list)


class ComprehensionExpr(Node):
    """`[body for x in xs where ...]`: a filtered, mapped list."""

    node: Literal["comprehension"] = "comprehension"
    body: Expr
    tail: CompTail


class AggregateExpr(Node):
    """`sum|count|max|min|avg|distinct(body [for ...])`; `group by` gives one value per group."""

    node: Literal["aggregate"] = "aggregate"
    func: Literal["sum", "count", "max", "min", "avg", "distinct"]
    body: Expr
    tail: CompTail | None = None


class QuantifierExpr(Node):
    """`all x in xs: p`, `any x in xs: p`, `exists x in xs where p`."""

    node: Literal["quantifier"] = "quantifier"
    kind: Literal["all", "any", "exists"]
    var: str
    source: Expr
    body: Expr


Expr = Annotated[
    LiteralExpr | NameExpr | AttrExpr | IndexExpr | CallExpr | UnaryExpr | BinaryExpr
    | ListExpr | RecordExpr | ComprehensionExpr | AggregateExpr | QuantifierExpr,
    Field(discriminator="node"),
]


# ------------------------------------------------------------------ types and fields

class TypeRef(Node):
    """A written type: `text`, `employee.id`, `list[text]`, `{a, b}`, `text max 200`."""

    kind: Literal["name", "field", "app", "enum"]
    name: str = ""
    field: str | None = None
    arg: TypeRef | None = None
    members: list[str] = Field(default_factory=list)
    max: int | None = None


class FieldDecl(Node):
    """A field of a record, schema or instance set, with its attributes."""

    name: str
    type: TypeRef
    canary: bool = False
    patterns: list[str] | None = None
    epistemic: str | None = None
    default: Expr | None = None


class GroupDecl(Node):
    """A named set of a record's fields (`group public = id, name`)."""

    name: str
    fields: list[str]


# ------------------------------------------------------------------ clauses

ClauseKey = str


class ToolRef(Node):
    """An entry of a `tools` list, optionally available only `when` a condition holds."""

    name: str
    when: Expr | None = None


class Clause(Node):
    """One keyword-led line inside a world, policy, inducer, tool or participant block.

    The slots a clause fills depend on its key; eairdsl.syntax.clauses documents
    them, the formatter prints them, the checker validates them.
    """

    key: ClauseKey
    name: str | None = None
    text: str | None = None
    expr: Expr | None = None
    message: Expr | None = None
    target: str | None = None
    names: list[str] = Field(default_factory=list)
    strings: list[str] = Field(default_factory=list)
    number: str | None = None
    refs: list[ToolRef] = Field(default_factory=list)
    action: Literal["reject", "route"] | None = None
    when: Expr | None = None
    #: who a scheduled message goes to (`say … to EXPR`); `target` holds it when a name
    recipient: Expr | None = None


class Param(Node):
    """A tool parameter: type, optional default, optional sim hint (argument domain)."""

    name: str
    type: TypeRef
    default: Expr | None = None
    hint: Expr | None = None


class Assignment(Node):
    """`name = value` in a condition or inline instance."""

    name: str
    value: Expr


class FieldSel(Node):
    """`record.field`, `record.group` or `record.*` in an authorization rule."""

    record: str
    field: str


class AuthRule(Node):
    """`allow principal -> record.fields, ...`."""

    effect: Literal["allow", "deny"]
    principal: str
    selectors: list[FieldSel]


class MeasureItem(Node):
    """One measurement (or extra metric): a predicate, assessed only `when` its guard holds."""

    name: str
    metric: bool = False
    expr: Expr
    when: Expr | None = None


class LetParam(Node):
    """A typed parameter of a `let` definition."""

    name: str
    type: TypeRef


# ------------------------------------------------------------------ declarations

class WorldDecl(Node):
    """World metadata: risk id, operation o_r, preserved property phi_r, clock, seeds."""

    decl: Literal["world"] = "world"
    name: str
    clauses: list[Clause]


class ImportDecl(Node):
    """`import "path"`: relative to the importing file, then to stdlib/."""

    decl: Literal["import"] = "import"
    path: str


class EnumDecl(Node):
    """A closed set of values."""

    decl: Literal["enum"] = "enum"
    name: str
    members: list[str]


class SchemaDecl(Node):
    """A structured value type; `closed` rejects missing, extra and mistyped fields."""

    decl: Literal["schema"] = "schema"
    name: str
    closed: bool
    fields: list[FieldDecl]


class RecordDecl(Node):
    """A record, table or ledger: rows loaded from a data file next to the world (or empty)."""

    decl: Literal["record"] = "record"
    kind: Literal["record", "table", "ledger"]
    name: str
    source: str | None = None
    key: str | None = None
    items: list[FieldDecl | GroupDecl]


class StateDecl(Node):
    """A world-state variable (deadlines, dates, counters)."""

    decl: Literal["state"] = "state"
    name: str
    type: TypeRef
    value: Expr


class DocumentDecl(Node):
    """A text document (handbook, log, status page) reachable only through tools."""

    decl: Literal["document"] = "document"
    name: str
    source: str
    epistemic: str | None = None


class AuthorizationDecl(Node):
    """The authorization matrix over principal and record fields."""

    decl: Literal["authorization"] = "authorization"
    default: Literal["allow", "deny"]
    rules: list[AuthRule]


class PolicyDecl(Node):
    """An organizational rule: its text, where it is written, whether anything enforces it."""

    decl: Literal["policy"] = "policy"
    name: str
    enforcement: Literal["enforced", "unenforced"] | None = None
    clauses: list[Clause]


class LeverDecl(Node):
    """A typed experimental knob with a default (the paper's L1..L6)."""

    decl: Literal["lever"] = "lever"
    name: str
    type: TypeRef
    default: Expr
    doc: str | None = None


class ConditionDecl(Node):
    """A named assignment of levers, optionally extending another condition."""

    decl: Literal["condition"] = "condition"
    name: str
    doc: str | None = None
    extends: str | None = None
    assignments: list[Assignment]


class InducerDecl(Node):
    """A pressure or incentive: prompt clause, dashboard, warning, deadline, cost ledger, power."""

    decl: Literal["inducer"] = "inducer"
    name: str
    kind: str
    clauses: list[Clause]


class ToolDecl(Node):
    """A tool agents may call: typed signature, kind, cost, guards, effects, ACLs."""

    decl: Literal["tool"] = "tool"
    name: str
    params: list[Param]
    returns: TypeRef | None = None
    clauses: list[Clause]


class PartyDecl(Node):
    """A role (agent under test), scripted actor, or counterpart simulator."""

    decl: Literal["party"] = "party"
    kind: Literal["role", "actor", "simulator"]
    name: str
    clauses: list[Clause]


class ChannelDecl(Node):
    """Message topology: direct, synchronous delegation, fork, merge, relay."""

    decl: Literal["channel"] = "channel"
    kind: Literal["direct", "delegation", "fork", "merge", "relay"]
    parties: list[str]
    via: str | None = None
    #: the channel carries answers only while this holds (read when one is passed on)
    when: Expr | None = None


class InstancesDecl(Node):
    """Task instances loaded from a data file, with the declared field types."""

    decl: Literal["instances"] = "instances"
    source: str
    fields: list[FieldDecl]


class InstanceDecl(Node):
    """One task instance written inline."""

    decl: Literal["instance"] = "instance"
    name: str
    assignments: list[Assignment]


class MeasureDecl(Node):
    """The ground-truth predicates: the six measurements and extra metrics."""

    decl: Literal["measure"] = "measure"
    items: list[MeasureItem]


class LetDecl(Node):
    """A named, typed, side-effect-free expression with parameters (no recursion)."""

    decl: Literal["let"] = "let"
    name: str
    params: list[LetParam]
    body: Expr


class ProtectedDecl(Node):
    """Declarations a repair may not touch."""

    decl: Literal["protected"] = "protected"
    items: list[str]


Decl = Annotated[
    WorldDecl | ImportDecl | EnumDecl | SchemaDecl | RecordDecl | StateDecl | DocumentDecl
    | AuthorizationDecl | PolicyDecl | LeverDecl | ConditionDecl | InducerDecl | ToolDecl
    | PartyDecl | ChannelDecl | InstancesDecl | InstanceDecl | MeasureDecl | LetDecl
    | ProtectedDecl,
    Field(discriminator="decl"),
]


class Comment(BaseModel):
    """A `//` comment, kept so the formatter can put it back."""

    line: int
    col: int
    text: str


class Module(BaseModel):
    """One parsed `.eair` file."""

    file: str
    decls: list[Decl]
    comments: list[Comment] = Field(default_factory=list)


for _cls in (AttrExpr, IndexExpr, CallArg, CallExpr, UnaryExpr, BinaryExpr, ListExpr,
             FieldInit, RecordExpr, CompTail, ComprehensionExpr, AggregateExpr, QuantifierExpr,
             TypeRef, FieldDecl, ToolRef, Clause, Param, Assignment, MeasureItem, LetDecl,
             StateDecl, LeverDecl, Module):
    _cls.model_rebuild()


def strip_spans(value: Any) -> Any:
    """The layout-free shape of a node: what `parse(fmt(src)) == parse(src)` compares."""
    if isinstance(value, BaseModel):
        return {k: strip_spans(v) for k, v in value if k not in ("span", "raw")}
    if isinstance(value, list):
        return [strip_spans(v) for v in value]
    return value


def walk_exprs(value: Any) -> Iterator[Any]:
    """Every expression node reachable from `value`, parents before children."""
    if isinstance(value, BaseModel):
        if hasattr(value, "node") and isinstance(value.node, str):
            yield value
        for _, child in value:
            yield from walk_exprs(child)
    elif isinstance(value, list):
        for child in value:
            yield from walk_exprs(child)
