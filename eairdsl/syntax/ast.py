"""The abstract syntax tree of a `.eair` module.

One small pydantic class per construct, each carrying the span it came from, so
every later stage can point back at the source. Expressions are a tagged union
(`node` field) so an AST survives a JSON round trip; `strip_spans` gives the
layout-free shape the formatter round-trip tests compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.source import Span

__all__ = [
    "Node", "Expr", "LiteralExpr", "NameExpr", "AttrExpr", "IndexExpr", "CallArg", "CallExpr",
    "UnaryExpr", "BinaryExpr", "ListExpr", "FieldInit", "RecordExpr", "CompTail",
    "ComprehensionExpr", "AggregateExpr", "QuantifierExpr", "TypeRef", "FieldDecl",
    "GroupDecl", "Clause", "WorldClause", "PolicyClause", "InducerClause", "ToolClause",
    "PartyClause", "ClauseNode", "CLAUSE_CLASSES", "Guard", "RejectGuard", "RouteGuard",
    "TitleClause", "RiskClause", "OperationClause", "PreservesClause", "ClockClause",
    "StartClause", "SeedsClause", "ForbidClause", "DescriptionClause", "PolicyTextClause",
    "SourceClause",
    "RuleClause", "RolesClause", "WhenClause", "TextClause", "AtClause", "EveryClause",
    "FromClause", "ShiftClause", "CostClause", "PointsClause", "OnClause", "ToClause",
    "KindClause", "RequireClause", "EnsureClause", "ReturnsClause", "AppendClause", "SetClause",
    "DelegatesClause", "PropagatesClause", "SendsClause", "AclClause", "ModelClause",
    "CardClause", "KpiClause", "MemoryClause", "AuthorityClause", "DisplayClause",
    "PrincipalClause", "ObjectiveClause", "ToolsClause", "TraitClause", "SayClause",
    "ContactClause", "ToolRef", "Param", "Assignment", "Expectation",
    "FieldSel", "AuthRule", "MeasureItem",
    "LetParam", "WorldDecl", "ImportDecl", "MemberRef", "EnumMeaning", "EnumDecl", "SchemaDecl",
    "RecordDecl",
    "StateDecl", "DocumentDecl", "AuthorizationDecl", "PolicyDecl", "LeverDecl",
    "ConditionDecl", "InducerDecl", "ToolDecl", "PartyDecl", "ChannelDecl", "InstancesDecl",
    "InstanceDecl", "MeasureDecl", "StudyRef", "StudyClause", "StudyKey", "STUDY_KEYS",
    "StudyClauseNode", "ScoreClause", "CalibrationClause", "RoutedClause", "SelectedClause",
    "ExpertClause", "RatingClause", "UnknownStudyClause", "STUDY_CLAUSE_CLASSES",
    "StudyMeasureDecl",
    "LetDecl", "ProtectedDecl", "Decl", "Comment", "Module",
    "strip_spans", "walk_exprs", "first_clause", "last_clause",
]


class Node(BaseModel):
    """Base of every node: a span and nothing else shared.

    Validators are not built when a class is defined but at the end of the module,
    all in definition order (see `_BUILT`): with forward references, a class built
    before what it contains regenerates the schemas of everything it reaches.
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

class ClauseNode(Node):
    """Base of the clause classes: `key` is the keyword a clause is written with."""

    key: ClassVar[str]


class RejectGuard(Node):
    """`else reject "message"`: a failed guard refuses the call with this message."""

    guard: Literal["reject"] = "reject"
    message: str


class RouteGuard(Node):
    """`else route NAME`: a failed guard sends the call to a tool or participant instead."""

    guard: Literal["route"] = "route"
    target: str


Guard = Annotated[RejectGuard | RouteGuard, Field(discriminator="guard")]


class ToolRef(Node):
    """An entry of a `tools` list, optionally available only `when` a condition holds."""

    name: str
    when: Expr | None = None


class TitleClause(ClauseNode):
    """`title "..."`: the world's human title."""

    key: ClassVar[str] = "title"
    clause: Literal["title"] = "title"
    text: str


class RiskClause(ClauseNode):
    """`risk A1`: the EAIR risk id the world studies."""

    key: ClassVar[str] = "risk"
    clause: Literal["risk"] = "risk"
    name: str


class OperationClause(ClauseNode):
    """`operation "..."`: the operation o_r under test."""

    key: ClassVar[str] = "operation"
    clause: Literal["operation"] = "operation"
    text: str


class PreservesClause(ClauseNode):
    """`preserves "..."`: the property phi_r the operation must keep."""

    key: ClassVar[str] = "preserves"
    clause: Literal["preserves"] = "preserves"
    text: str


class ClockClause(ClauseNode):
    """`clock min|h|days`: the unit of the world's clock."""

    key: ClassVar[str] = "clock"
    clause: Literal["clock"] = "clock"
    name: str


class StartClause(ClauseNode):
    """`start EXPR`: the calendar's first day (`today()` is it plus the elapsed time), a
    date read as the episode starts from levers, the instance and state variables."""

    key: ClassVar[str] = "start"
    clause: Literal["start"] = "start"
    expr: Expr


class SeedsClause(ClauseNode):
    """`seeds N`: how many seeds an experiment runs (`number` as written)."""

    key: ClassVar[str] = "seeds"
    clause: Literal["seeds"] = "seeds"
    number: str


class ForbidClause(ClauseNode):
    """`forbid ["...", ...]`: words no rendered prompt may contain."""

    key: ClassVar[str] = "forbid"
    clause: Literal["forbid"] = "forbid"
    strings: list[str]


class DescriptionClause(ClauseNode):
    """`description "..."` of a world, a tool or a participant."""

    key: ClassVar[str] = "description"
    clause: Literal["description"] = "description"
    text: str


class PolicyTextClause(ClauseNode):
    """`text "..."` of a policy: the rule as the organization writes it."""

    key: ClassVar[str] = "text"
    clause: Literal["policy_text"] = "policy_text"
    text: str


class SourceClause(ClauseNode):
    """`source DOC`: the document a policy is written in."""

    key: ClassVar[str] = "source"
    clause: Literal["source"] = "source"
    name: str


class RuleClause(ClauseNode):
    """`rule EXPR`: the predicate a policy means."""

    key: ClassVar[str] = "rule"
    clause: Literal["rule"] = "rule"
    expr: Expr


class RolesClause(ClauseNode):
    """`roles a, b`: the participants an inducer addresses."""

    key: ClassVar[str] = "roles"
    clause: Literal["roles"] = "roles"
    names: list[str]


class WhenClause(ClauseNode):
    """`when EXPR`: an inducer applies only while this holds."""

    key: ClassVar[str] = "when"
    clause: Literal["when"] = "when"
    expr: Expr


class TextClause(ClauseNode):
    """`text EXPR` of an inducer: a text literal, or an expression computed when shown."""

    key: ClassVar[str] = "text"
    clause: Literal["text"] = "text"
    expr: Expr

    @property
    def constant(self) -> str | None:
        """The text when it is a literal (cards can show it); None when it is computed."""
        e = self.expr
        return e.value if isinstance(e, LiteralExpr) and isinstance(e.value, str) \
            and e.kind == "text" else None


class AtClause(ClauseNode):
    """`at EXPR`: when an inducer fires."""

    key: ClassVar[str] = "at"
    clause: Literal["at"] = "at"
    expr: Expr


class EveryClause(ClauseNode):
    """`every EXPR`: how often an inducer fires."""

    key: ClassVar[str] = "every"
    clause: Literal["every"] = "every"
    expr: Expr


class FromClause(ClauseNode):
    """`from PARTY`: who an inducer's message comes from."""

    key: ClassVar[str] = "from"
    clause: Literal["from"] = "from"
    name: str


class ShiftClause(ClauseNode):
    """`shift TRAIT +0.2`: an inducer's push on a sim trait (`number` as written)."""

    key: ClassVar[str] = "shift"
    clause: Literal["shift"] = "shift"
    name: str
    number: str


class CostClause(ClauseNode):
    """`cost EXPR` of an inducer or a tool."""

    key: ClassVar[str] = "cost"
    clause: Literal["cost"] = "cost"
    expr: Expr


class PointsClause(ClauseNode):
    """`points EXPR`: what an inducer's ledger or power counts."""

    key: ClassVar[str] = "points"
    clause: Literal["points"] = "points"
    expr: Expr


class OnClause(ClauseNode):
    """`on TOOL`: a warning fires after each successful call of that tool."""

    key: ClassVar[str] = "on"
    clause: Literal["on"] = "on"
    name: str


class ToClause(ClauseNode):
    """`to EXPR`: the recipients of a warning when it fires."""

    key: ClassVar[str] = "to"
    clause: Literal["to"] = "to"
    expr: Expr


class KindClause(ClauseNode):
    """`kind read|act|communicate|verify` of a tool."""

    key: ClassVar[str] = "kind"
    clause: Literal["kind"] = "kind"
    name: str


class RequireClause(ClauseNode):
    """`require EXPR else GUARD [when EXPR]`: a tool's guard."""

    key: ClassVar[str] = "require"
    clause: Literal["require"] = "require"
    expr: Expr
    guard: Guard
    when: Expr | None = None


class EnsureClause(ClauseNode):
    """`ensure POLICY else reject "message" [when EXPR]`: the named policy's `rule` must
    hold on the state the call would leave; otherwise nothing of the call is applied and
    it is rejected. Why: a cumulative rule (a running total, a record's consistency) can
    only be broken by the call that changes it, so the rule is checked there, once,
    instead of restated as a precondition per tool."""

    key: ClassVar[str] = "ensure"
    clause: Literal["ensure"] = "ensure"
    policy: str
    message: str
    when: Expr | None = None


class ReturnsClause(ClauseNode):
    """`returns EXPR`: a tool's result."""

    key: ClassVar[str] = "returns"
    clause: Literal["returns"] = "returns"
    expr: Expr


class AppendClause(ClauseNode):
    """`append LEDGER EXPR [when EXPR]`: a tool's effect on a ledger."""

    key: ClassVar[str] = "append"
    clause: Literal["append"] = "append"
    name: str
    expr: Expr
    when: Expr | None = None


class SetClause(ClauseNode):
    """`set STATE = EXPR [when EXPR]`: a tool's effect on a state variable."""

    key: ClassVar[str] = "set"
    clause: Literal["set"] = "set"
    name: str
    expr: Expr
    when: Expr | None = None


class DelegatesClause(ClauseNode):
    """`delegates [PARTY]`: the tool hands on (to whom a channel says, when unnamed)."""

    key: ClassVar[str] = "delegates"
    clause: Literal["delegates"] = "delegates"
    name: str | None = None


class PropagatesClause(ClauseNode):
    """`propagates EXPR [when EXPR]`: the principal a delegating tool passes on."""

    key: ClassVar[str] = "propagates"
    clause: Literal["propagates"] = "propagates"
    expr: Expr
    when: Expr | None = None


class SendsClause(ClauseNode):
    """`sends to EXPR`: who a communicating tool's message goes to."""

    key: ClassVar[str] = "sends"
    clause: Literal["sends"] = "sends"
    expr: Expr


class AclClause(ClauseNode):
    """`acl EXPR [when EXPR]`: the principal a tool's reads are checked as."""

    key: ClassVar[str] = "acl"
    clause: Literal["acl"] = "acl"
    expr: Expr
    when: Expr | None = None


class ModelClause(ClauseNode):
    """`model under_test|counterpart|judge|fixed`: what drives a participant."""

    key: ClassVar[str] = "model"
    clause: Literal["model"] = "model"
    name: str


class CardClause(ClauseNode):
    """`card "path.md.j2"`: a participant's role card template."""

    key: ClassVar[str] = "card"
    clause: Literal["card"] = "card"
    text: str


class KpiClause(ClauseNode):
    """`kpi "..."`: the figure a role is judged by, shown on its card."""

    key: ClassVar[str] = "kpi"
    clause: Literal["kpi"] = "kpi"
    text: str


class MemoryClause(ClauseNode):
    """`memory private|shared` of a participant."""

    key: ClassVar[str] = "memory"
    clause: Literal["memory"] = "memory"
    name: str


class AuthorityClause(ClauseNode):
    """`authority EXPR`: a participant's authority level (a literal int, or computed)."""

    key: ClassVar[str] = "authority"
    clause: Literal["authority"] = "authority"
    expr: Expr

    @property
    def constant(self) -> int | None:
        """The level when it is a literal int; None when it is computed."""
        e = self.expr
        return e.value if isinstance(e, LiteralExpr) and e.kind == "int" \
            and isinstance(e.value, int) and not isinstance(e.value, bool) else None


class DisplayClause(ClauseNode):
    """`display EXPR`: the name a participant is shown as."""

    key: ClassVar[str] = "display"
    clause: Literal["display"] = "display"
    expr: Expr


class PrincipalClause(ClauseNode):
    """`principal EXPR`: who an actor acts as."""

    key: ClassVar[str] = "principal"
    clause: Literal["principal"] = "principal"
    expr: Expr


class ObjectiveClause(ClauseNode):
    """`objective "..."` of a participant."""

    key: ClassVar[str] = "objective"
    clause: Literal["objective"] = "objective"
    text: str


class ToolsClause(ClauseNode):
    """`tools a, b when EXPR`: the tools a participant may call."""

    key: ClassVar[str] = "tools"
    clause: Literal["tools"] = "tools"
    refs: list[ToolRef]


class TraitClause(ClauseNode):
    """`trait NAME +0.2`: a sim agent's trait (`number` as written)."""

    key: ClassVar[str] = "trait"
    clause: Literal["trait"] = "trait"
    name: str
    number: str


class SayClause(ClauseNode):
    """`at EXPR say EXPR to EXPR [verbatim] [when EXPR]`: a scripted message (a name is a
    NameExpr). `verbatim`: a simulator's model sends the line as written instead of
    wording its own (B1's byte-identical report)."""

    key: ClassVar[str] = "say"
    clause: Literal["say"] = "say"
    at: Expr
    message: Expr
    recipient: Expr
    verbatim: bool = False
    when: Expr | None = None


class ContactClause(ClauseNode):
    """`at EXPR contact EXPR [when EXPR]`: a scripted contact."""

    key: ClassVar[str] = "contact"
    clause: Literal["contact"] = "contact"
    at: Expr
    recipient: Expr
    when: Expr | None = None


#: One keyword-led line inside a world, policy, inducer, tool or participant block.
Clause = Annotated[
    TitleClause | RiskClause | OperationClause | PreservesClause | ClockClause | SeedsClause
    | ForbidClause | DescriptionClause | PolicyTextClause | SourceClause | RuleClause
    | RolesClause | WhenClause | TextClause | AtClause | EveryClause | FromClause
    | ShiftClause | CostClause | PointsClause | OnClause | ToClause | KindClause
    | RequireClause | EnsureClause | ReturnsClause | AppendClause | SetClause | DelegatesClause
    | PropagatesClause | SendsClause | AclClause | ModelClause | CardClause | KpiClause
    | MemoryClause | AuthorityClause | DisplayClause | PrincipalClause | ObjectiveClause
    | ToolsClause | TraitClause | SayClause | ContactClause,
    Field(discriminator="clause"),
]

#: The clauses of a `world` block.
WorldClause = Annotated[
    TitleClause | RiskClause | OperationClause | PreservesClause | ClockClause | StartClause
    | SeedsClause | ForbidClause | DescriptionClause,
    Field(discriminator="clause"),
]
#: The clauses of a `policy` block.
PolicyClause = Annotated[
    PolicyTextClause | SourceClause | RuleClause,
    Field(discriminator="clause"),
]
#: The clauses of an `inducer` block.
InducerClause = Annotated[
    RolesClause | WhenClause | TextClause | AtClause | EveryClause | FromClause | ShiftClause
    | CostClause | PointsClause | OnClause | ToClause,
    Field(discriminator="clause"),
]
#: The clauses of a `tool` block.
ToolClause = Annotated[
    KindClause | CostClause | DescriptionClause | RequireClause | EnsureClause | ReturnsClause
    | AppendClause | SetClause | DelegatesClause | PropagatesClause | SendsClause | AclClause,
    Field(discriminator="clause"),
]
#: The clauses of a `role`, `actor` or `simulator` block.
PartyClause = Annotated[
    ModelClause | CardClause | KpiClause | MemoryClause | AuthorityClause | DisplayClause
    | PrincipalClause | ObjectiveClause | ToolsClause | TraitClause | SayClause
    | ContactClause | DescriptionClause,
    Field(discriminator="clause"),
]

#: Every clause class, for code that needs them as values.
CLAUSE_CLASSES: tuple[type[ClauseNode], ...] = (
    TitleClause, RiskClause, OperationClause, PreservesClause, ClockClause, SeedsClause,
    ForbidClause, DescriptionClause, PolicyTextClause, SourceClause, RuleClause, RolesClause,
    WhenClause, TextClause, AtClause, EveryClause, FromClause, ShiftClause, CostClause,
    PointsClause, OnClause, ToClause, KindClause, RequireClause, EnsureClause, ReturnsClause,
    AppendClause,
    SetClause, DelegatesClause, PropagatesClause, SendsClause, AclClause, ModelClause,
    CardClause, KpiClause, MemoryClause, AuthorityClause, DisplayClause, PrincipalClause,
    ObjectiveClause, ToolsClause, TraitClause, SayClause, ContactClause,
)


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
    clauses: list[WorldClause]


class ImportDecl(Node):
    """`import "path"`: relative to the importing file, then to stdlib/."""

    decl: Literal["import"] = "import"
    path: str


class MemberRef(Node):
    """A member an enum's meaning clause names, with its own span (E306 points at it)."""

    name: str


class EnumMeaning(Node):
    """`submission a, b` or `interception c` after an enum's members: what those members
    mean to the offline auditor (`vocabulary.ENUM_MEANINGS`)."""

    meaning: Literal["submission", "interception"]
    members: list[MemberRef]


class EnumDecl(Node):
    """A closed set of values, and what some of them mean (`meanings`, in source order)."""

    decl: Literal["enum"] = "enum"
    name: str
    members: list[str]
    meanings: list[EnumMeaning] = Field(default_factory=list)


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
    clauses: list[PolicyClause]


class LeverDecl(Node):
    """A typed experimental knob with a default (the paper's L1..L6)."""

    decl: Literal["lever"] = "lever"
    name: str
    type: TypeRef
    default: Expr
    doc: str | None = None


class Expectation(Node):
    """`expect SUBJECT OUTCOME "reason"` in a condition: what `eairc validate` checks of a
    sim profile (or of the opportunity) there instead of the default, and why."""

    subject: str
    outcome: str
    reason: str


class ConditionDecl(Node):
    """A named assignment of levers, optionally extending another condition, with the
    self-test expectations it declares (not inherited through `extends`)."""

    decl: Literal["condition"] = "condition"
    name: str
    doc: str | None = None
    extends: str | None = None
    assignments: list[Assignment]
    expectations: list[Expectation] = []


class InducerDecl(Node):
    """A pressure or incentive: prompt clause, dashboard, warning, deadline, cost ledger, power."""

    decl: Literal["inducer"] = "inducer"
    name: str
    kind: str
    clauses: list[InducerClause]


class ToolDecl(Node):
    """A tool agents may call: typed signature, kind, cost, guards, effects, ACLs."""

    decl: Literal["tool"] = "tool"
    name: str
    params: list[Param]
    returns: TypeRef | None = None
    clauses: list[ToolClause]


class PartyDecl(Node):
    """A role (agent under test), scripted actor, or counterpart simulator."""

    decl: Literal["party"] = "party"
    kind: Literal["role", "actor", "simulator"]
    name: str
    clauses: list[PartyClause]


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


class StudyRef(Node):
    """A name a study measure reads (a condition, participant or metric); `to` is the other
    side of a pair: `calibration COND -> PARTY`, `rating PARTY -> METRIC`."""

    name: str
    to: str | None = None


#: the keywords of a study measure's clauses
StudyKey = Literal["score", "calibration", "routed", "selected", "expert", "rating"]
STUDY_KEYS: tuple[StudyKey, ...] = ("score", "calibration", "routed", "selected", "expert",
                                    "rating")


class StudyClauseNode(Node):
    """Base of a study measure's clauses, `KEY ref, ref, ...`, one class per keyword (as
    the other blocks' clauses), so the checker and the lowering match on the class and
    not on the keyword's spelling. `key` is the keyword a clause is written with."""

    key: ClassVar[StudyKey]
    refs: list[StudyRef]


class ScoreClause(StudyClauseNode):
    """`score METRIC`: the per-episode metric the measure compares."""

    key: ClassVar[StudyKey] = "score"
    clause: Literal["score"] = "score"


class CalibrationClause(StudyClauseNode):
    """`calibration COND -> PARTY, ...`: each participant's solo calibration cell."""

    key: ClassVar[StudyKey] = "calibration"
    clause: Literal["calibration"] = "calibration"


class RoutedClause(StudyClauseNode):
    """`routed COND, ...`: the conditions compared with the calibration cells (default:
    every condition that is not one)."""

    key: ClassVar[StudyKey] = "routed"
    clause: Literal["routed"] = "routed"


class SelectedClause(StudyClauseNode):
    """`selected METRIC`: the metric naming the participant a routed episode chose."""

    key: ClassVar[StudyKey] = "selected"
    clause: Literal["selected"] = "selected"


class ExpertClause(StudyClauseNode):
    """`expert PARTY`: the participant routing regret measures against."""

    key: ClassVar[StudyKey] = "expert"
    clause: Literal["expert"] = "expert"


class RatingClause(StudyClauseNode):
    """`rating PARTY -> METRIC, ...`: each participant's self-rating metric."""

    key: ClassVar[StudyKey] = "rating"
    clause: Literal["rating"] = "rating"


class UnknownStudyClause(Node):
    """A clause whose keyword is none of `STUDY_KEYS`. The key is parsed as a name (so
    none of the words is reserved); this keeps the word written so the checker can
    refuse it (E506) where it stands and suggest a spelling."""

    clause: Literal["unknown"] = "unknown"
    key: str
    refs: list[StudyRef]


StudyClause = Annotated[
    ScoreClause | CalibrationClause | RoutedClause | SelectedClause | ExpertClause
    | RatingClause | UnknownStudyClause,
    Field(discriminator="clause"),
]
#: the known clause classes, in `STUDY_KEYS` order (the parser looks a keyword up here)
STUDY_CLAUSE_CLASSES: tuple[type[StudyClauseNode], ...] = (
    ScoreClause, CalibrationClause, RoutedClause, SelectedClause, ExpertClause, RatingClause)

_S = TypeVar("_S", bound=StudyClauseNode)


class StudyMeasureDecl(Node):
    """`study measure NAME : KIND ["doc"] { clauses }`: a figure over a study's episodes.

    Why a declaration of its own: routing regret and the self-rating gap (EAIR C.5,
    F.8) compare an episode with *other* episodes (solo calibration runs of the same
    model), which a per-episode `measure` cannot see. This names the grid cells it
    reads, so the study computes it from the store and a repair cannot move it."""

    decl: Literal["study_measure"] = "study_measure"
    name: str
    kind: str
    doc: str | None = None
    clauses: list[StudyClause]

    def clause(self, cls: type[_S]) -> _S | None:
        """The first clause of this class, if any (a second one is E302)."""
        return next((c for c in self.clauses if isinstance(c, cls)), None)

    def refs(self, cls: type[StudyClauseNode]) -> list[StudyRef]:
        """The refs of the clause of this class ([] when it is absent)."""
        found = self.clause(cls)
        return list(found.refs) if found is not None else []


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
    | PartyDecl | ChannelDecl | InstancesDecl | InstanceDecl | MeasureDecl | StudyMeasureDecl
    | LetDecl | ProtectedDecl,
    Field(discriminator="decl"),
]


class Comment(BaseModel):
    """A `//` comment, kept so the formatter can put it back."""

    line: int
    col: int
    text: str


class Module(BaseModel):
    """One parsed `.eair` file."""

    model_config = ConfigDict(defer_build=True)  # built below, after the nodes it contains

    file: str
    decls: list[Decl]
    comments: list[Comment] = Field(default_factory=list)


#: every model of this module in definition order, contained classes before their containers
#: (`Module` last): each build reuses the schemas of the classes built before it, where
#: building them on first use (or `Module` first) generated the shared ones again per class
_BUILT: tuple[type[BaseModel], ...] = tuple(
    v for v in list(globals().values())
    if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == __name__)
for _cls in _BUILT:
    _cls.model_rebuild()


_C = TypeVar("_C", bound=ClauseNode)


def first_clause(clauses: Iterable[ClauseNode], cls: type[_C]) -> _C | None:
    """The first clause of class `cls` in a block, if any."""
    return next((c for c in clauses if isinstance(c, cls)), None)


def last_clause(clauses: Iterable[ClauseNode], cls: type[_C]) -> _C | None:
    """The last clause of class `cls` in a block (the one that wins when repeated), if any."""
    found: _C | None = None
    for c in clauses:
        if isinstance(c, cls):
            found = c
    return found


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
