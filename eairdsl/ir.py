"""The IR: a checked world lowered to plain, versioned, JSON-serializable data.

This is the contract between the compiler and everything after it (runtime,
studies, audit, repair). Names are resolved (each reference says what it
refers to), `let` definitions are expanded inline, conditions are complete
lever assignments, data files are loaded, and role cards are rendered per role
and condition. Nothing here needs the source files again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Annotated, Any, ClassVar, Literal, assert_never

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from eairdsl import __version__

__all__ = [
    "SCHEMA_VERSION", "Expr", "EXPR_NODES", "Lit", "Ref", "Attr", "Index", "Call", "Unary",
    "Binary", "ListExpr", "RecordExpr", "Comp", "Agg", "Quant", "LetCall", "RefKind", "LitType",
    "UnaryOp", "BinaryOp", "AggFunc", "QuantKind", "children", "TypeKind", "TypeIR", "FieldIR",
    "RecordKind", "RecordIR", "StateIR", "DocumentIR", "AuthRuleIR", "AuthorizationIR",
    "PolicyIR", "LeverIR", "ExpectationIR", "ConditionIR", "CALENDAR_DEFAULT",
    "InducerKind", "InducerIR", "INDUCER_CLASSES",
    "PromptClauseInducer", "DashboardInducer", "WarningInducer", "DeadlineInducer",
    "CostLedgerInducer", "PowerInducer", "IncentiveInducer", "GuardIR", "EffectIR",
    "AppendEffect", "SetEffect", "ParamIR", "ToolKind", "ToolIR", "ToolRefIR", "EventKind",
    "EventIR", "PartyKind", "PartyIR", "ChannelKind", "ChannelIR", "DirectChannel",
    "DelegationChannel", "ForkChannel", "MergeChannel", "RelayChannel", "channel_via",
    "MeasureIR", "StudyMeasureKind", "StudyMeasureIR", "RegretMeasure", "RatingGapMeasure",
    "CalibrationCellIR", "RatingIR", "EnumMeaningsIR", "WorldMeta", "SourceIR", "World",
    "LetIR", "dump_world",
    "load_world", "walk_expr", "IR_DIGEST_FIELD", "WorldFileError", "ir_sha256",
]

#: Bumped whenever the shape of World changes; the runtime refuses other versions.
SCHEMA_VERSION = 7


class _Model(BaseModel):
    model_config = ConfigDict(frozen=False, extra="forbid")


class _Variant(_Model):
    """One class of a tagged union of IR nodes (channels, effects, inducers): always written
    with its tag, the discriminator named by `TAG`, which `exclude_defaults` would drop."""

    TAG: ClassVar[str]

    @model_serializer(mode="wrap")
    def _with_tag(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        data[self.TAG] = getattr(self, self.TAG)
        return data


class _Node(BaseModel):
    """An IR expression node: frozen, and always written with its `op` (the discriminator)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _with_op(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        data["op"] = self.op  # type: ignore[attr-defined]  # exclude_defaults would drop it
        return data


#: what a name refers to (the checker's resolution); `unknown` only in unchecked IR
RefKind = Literal["local", "param", "measure", "instance", "context", "lever", "state",
                  "record", "document", "party", "tool", "enum_value", "enum", "unknown"]
#: a literal's type (its value is normalised: durations in minutes, money in dollars)
LitType = Literal["int", "number", "money", "duration", "percent", "date", "text", "bool",
                  "none"]
UnaryOp = Literal["not", "-"]
BinaryOp = Literal["and", "or", "==", "!=", "<", "<=", ">", ">=", "contains", "contains_any",
                   "in", "+", "-", "*", "/"]
AggFunc = Literal["sum", "count", "max", "min", "avg", "distinct"]
QuantKind = Literal["all", "any", "exists"]


class Lit(_Node):
    """A literal value of a given type."""

    op: Literal["lit"] = "lit"
    type: LitType
    value: Any = None


class Ref(_Node):
    """A resolved name: what it refers to (`kind`) and its name."""

    op: Literal["ref"] = "ref"
    kind: RefKind
    name: str


class Attr(_Node):
    """`obj.name`: a field of a row or record, a group of a table, an enum member."""

    op: Literal["attr"] = "attr"
    obj: Expr
    name: str


class Index(_Node):
    """`obj[index]`: an item of a list (none when out of range)."""

    op: Literal["index"] = "index"
    obj: Expr
    index: Expr


class Call(_Node):
    """A builtin call; `keys` name keyword arguments ("" for positional), `unit` is how
    `text`/`join` render their argument ($40, 6 min)."""

    op: Literal["call"] = "call"
    func: str
    args: list[Expr] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)
    unit: str | None = None


class Unary(_Node):
    """`not x` or `-x`."""

    op: Literal["unary"] = "unary"
    operator: UnaryOp
    operand: Expr


class Binary(_Node):
    """An arithmetic, comparison, boolean, membership or text operator."""

    op: Literal["binary"] = "binary"
    operator: BinaryOp
    left: Expr
    right: Expr


class ListExpr(_Node):
    """`[a, b, ...]`."""

    op: Literal["list"] = "list"
    items: list[Expr] = Field(default_factory=list)


class RecordExpr(_Node):
    """`{key: value, ...}`: `keys` and `values` in the same order."""

    op: Literal["record"] = "record"
    keys: list[str] = Field(default_factory=list)
    values: list[Expr] = Field(default_factory=list)


class Comp(_Node):
    """`[body for var in source where ... group by ...]`."""

    op: Literal["comp"] = "comp"
    var: str
    source: Expr
    body: Expr
    where: Expr | None = None
    group_by: list[Expr] = Field(default_factory=list)


class Agg(_Node):
    """`func(body)` over a list, or `func(body for var in source where ... group by ...)`."""

    op: Literal["agg"] = "agg"
    func: AggFunc
    body: Expr
    var: str | None = None
    source: Expr | None = None
    where: Expr | None = None
    group_by: list[Expr] = Field(default_factory=list)


class Quant(_Node):
    """`all|any|exists var in source: body` (three-valued)."""

    op: Literal["quant"] = "quant"
    kind: QuantKind
    var: str
    source: Expr
    body: Expr


class LetCall(_Node):
    """A call of the `let` definition World.lets[name], arguments in parameter order."""

    op: Literal["let"] = "let"
    name: str
    args: list[Expr] = Field(default_factory=list)


#: every expression node class, for `isinstance` (`Expr` itself is an annotated union)
EXPR_NODES = (Lit, Ref, Attr, Index, Call, Unary, Binary, ListExpr, RecordExpr, Comp, Agg, Quant,
              LetCall)
#: a lowered expression: one of the node classes, told apart by `op` in JSON
Expr = Annotated[Lit | Ref | Attr | Index | Call | Unary | Binary | ListExpr | RecordExpr | Comp
                 | Agg | Quant | LetCall, Field(discriminator="op")]

for _cls in (Attr, Index, Call, Unary, Binary, ListExpr, RecordExpr, Comp, Agg, Quant, LetCall):
    _cls.model_rebuild()


def children(e: Expr) -> list[Expr]:
    """The direct sub-expressions of `e`, in source order (a `let` call's are its arguments)."""
    match e:
        case Lit() | Ref():
            return []
        case Attr(obj=obj):
            return [obj]
        case Index(obj=obj, index=index):
            return [obj, index]
        case Call(args=args) | ListExpr(items=args) | RecordExpr(values=args) | LetCall(args=args):
            return list(args)
        case Unary(operand=operand):
            return [operand]
        case Binary(left=left, right=right):
            return [left, right]
        case Comp(source=source, body=body, where=where, group_by=group_by):
            return [source, body, *([where] if where is not None else []), *group_by]
        case Agg(source=source, body=body, where=where, group_by=group_by):
            return [x for x in (source, body, where) if x is not None] + list(group_by)
        case Quant(source=source, body=body):
            return [source, body]
        case _:
            assert_never(e)


class LetIR(_Model):
    """A `let` definition: its body sees only its parameters and the world."""

    name: str
    params: list[str]
    body: Expr


#: every kind of checker type a lowered type may have
TypeKind = Literal["bool", "int", "number", "money", "duration", "percent", "date", "text",
                   "none", "any", "row", "fields", "party", "tool", "document", "message",
                   "call", "context", "list", "record", "enum", "schema", "instance",
                   "enum_type"]


class TypeIR(_Model):
    """A type: kind (text, money, list, enum, record, ...), the enum/record name, list element."""

    kind: TypeKind
    name: str = ""
    arg: TypeIR | None = None
    max: int | None = None
    members: list[str] = Field(default_factory=list)


class FieldIR(_Model):
    name: str
    type: TypeIR
    canary: bool = False
    patterns: list[str] = Field(default_factory=list)
    epistemic: str | None = None
    default: Expr | None = None


RecordKind = Literal["record", "table", "ledger"]


class RecordIR(_Model):
    """A record, table or ledger with its rows (empty for ledgers written by tools)."""

    name: str
    kind: RecordKind
    key: str | None = None
    source: str | None = None
    fields: list[FieldIR]
    groups: dict[str, list[str]] = Field(default_factory=dict)
    rows: list[dict[str, Any]] = Field(default_factory=list)


class StateIR(_Model):
    name: str
    type: TypeIR
    value: Expr


class DocumentIR(_Model):
    name: str
    source: str
    text: str
    epistemic: str | None = None


class AuthRuleIR(_Model):
    """One rule with groups and `*` expanded to field names."""

    effect: Literal["allow", "deny"]
    principal: str
    record: str
    fields: list[str]


class AuthorizationIR(_Model):
    default: Literal["allow", "deny"] = "deny"
    rules: list[AuthRuleIR] = Field(default_factory=list)


class PolicyIR(_Model):
    name: str
    enforced: bool
    text: str
    document: str | None = None
    rule: Expr | None = None


class LeverIR(_Model):
    name: str
    type: TypeIR
    default: Any
    doc: str | None = None


class ExpectationIR(_Model):
    """`expect SUBJECT OUTCOME "reason"`: what `eairc validate` checks under a condition
    instead of the default (`eairdsl.vocabulary.EXPECTATIONS`)."""

    subject: Literal["compliant", "reckless", "opportunity"]
    outcome: Literal["keeps", "avoids", "realizes", "can_realize", "absent"]
    reason: str


class ConditionIR(_Model):
    """A named condition: the value of every lever, and its declared self-test expectations
    (none: the defaults)."""

    name: str
    doc: str | None = None
    levers: dict[str, Any]
    expectations: list[ExpectationIR] = Field(default_factory=list)


InducerKind = Literal["prompt_clause", "dashboard", "warning", "deadline", "cost_ledger",
                      "power", "incentive"]


class _Inducer(_Variant):
    """What every inducer has: its roles (none: every role), `when`, text and trait shifts."""

    TAG: ClassVar[str] = "kind"
    name: str
    roles: list[str] = Field(default_factory=list)
    when: Expr | None = None
    text: str | None = None
    #: a text computed when shown: a warning's when it fires, a live dashboard's each step
    text_expr: Expr | None = None
    shifts: dict[str, float] = Field(default_factory=dict)


class PromptClauseInducer(_Inducer):
    """A clause of the role cards."""

    kind: Literal["prompt_clause"] = "prompt_clause"


class DashboardInducer(_Inducer):
    """A dashboard; live (re-read every step) when its text is computed."""

    kind: Literal["dashboard"] = "dashboard"


class WarningInducer(_Inducer):
    """A warning: at a time (then `every`), when `when` turns true, or after a tool call."""

    kind: Literal["warning"] = "warning"
    at: Expr | None = None
    every: Expr | None = None
    sender: str | None = None
    #: fires after each successful call of this tool (in its scope)
    on: str | None = None
    #: the recipients, evaluated when it fires (else `roles`)
    to: Expr | None = None


class DeadlineInducer(_Inducer):
    kind: Literal["deadline"] = "deadline"
    at: Expr | None = None


class CostLedgerInducer(_Inducer):
    kind: Literal["cost_ledger"] = "cost_ledger"
    cost: Expr | None = None
    points: Expr | None = None


class PowerInducer(_Inducer):
    kind: Literal["power"] = "power"
    points: Expr | None = None
    sender: str | None = None


class IncentiveInducer(_Inducer):
    kind: Literal["incentive"] = "incentive"


#: an inducer: one class per kind, told apart by `kind` in JSON
InducerIR = Annotated[PromptClauseInducer | DashboardInducer | WarningInducer | DeadlineInducer
                      | CostLedgerInducer | PowerInducer | IncentiveInducer,
                      Field(discriminator="kind")]
#: the class of each inducer kind
INDUCER_CLASSES: dict[InducerKind, type[_Inducer]] = {
    "prompt_clause": PromptClauseInducer, "dashboard": DashboardInducer,
    "warning": WarningInducer, "deadline": DeadlineInducer, "cost_ledger": CostLedgerInducer,
    "power": PowerInducer, "incentive": IncentiveInducer}


class GuardIR(_Model):
    """`require condition else reject message | route target`, active `when`.

    `ensure POLICY` lowers to a guard with `after` set: its condition is the policy's
    rule, read on the state the call's effects would leave (docs/language.md, tool)."""

    condition: Expr
    action: Literal["reject", "route"]
    message: str | None = None
    target: str | None = None
    when: Expr | None = None
    at: str
    #: checked on the state after the call's effects (then undone if it fails): `ensure`
    after: bool = False
    #: the policy whose rule an `ensure` checks
    policy: str | None = None


class _Effect(_Variant):
    TAG: ClassVar[str] = "op"
    target: str
    value: Expr
    when: Expr | None = None


class AppendEffect(_Effect):
    """`append LEDGER <- row`: a row added to a ledger."""

    op: Literal["append"] = "append"


class SetEffect(_Effect):
    """`set STATE <- value`: a state variable assigned."""

    op: Literal["set"] = "set"


#: a tool's effect on the state, told apart by `op` in JSON
EffectIR = Annotated[AppendEffect | SetEffect, Field(discriminator="op")]


class ParamIR(_Model):
    name: str
    type: TypeIR
    default: Expr | None = None
    hint: Expr | None = None


ToolKind = Literal["read", "act", "communicate", "verify"]


class ToolIR(_Model):
    name: str
    kind: ToolKind
    description: str = ""
    cost: Expr | None = None
    params: list[ParamIR] = Field(default_factory=list)
    returns: TypeIR | None = None
    guards: list[GuardIR] = Field(default_factory=list)
    result: Expr | None = None
    effects: list[EffectIR] = Field(default_factory=list)
    delegates_to: list[str] = Field(default_factory=list)
    propagates: Expr | None = None
    propagates_when: Expr | None = None
    sends_to: Expr | None = None
    acl: Expr | None = None
    acl_when: Expr | None = None


class ToolRefIR(_Model):
    name: str
    when: Expr | None = None


EventKind = Literal["say", "contact"]


class EventIR(_Model):
    """A scheduled event of an actor or simulator."""

    kind: EventKind
    at: Expr
    #: the recipient when the world names it; else `to_expr`, evaluated when it fires
    to: str
    message: Expr | None = None
    when: Expr | None = None
    to_expr: Expr | None = None
    #: a simulator's `say … verbatim`: sent as written, never worded by its model
    verbatim: bool = False


PartyKind = Literal["role", "actor", "simulator"]


class PartyIR(_Model):
    name: str
    kind: PartyKind
    model: str | None = None
    card: str | None = None
    kpi: str | None = None
    objective: str | None = None
    memory: str = "private"
    authority: int = 0
    #: an authority computed as the episode starts (levers, instance, initial state)
    authority_expr: Expr | None = None
    #: the name other agents see for this participant (else its name)
    display: Expr | None = None
    principal: Expr | None = None
    description: str | None = None
    tools: list[ToolRefIR] = Field(default_factory=list)
    traits: dict[str, float] = Field(default_factory=dict)
    events: list[EventIR] = Field(default_factory=list)


ChannelKind = Literal["direct", "delegation", "fork", "merge", "relay"]


class _Channel(_Variant):
    TAG: ClassVar[str] = "kind"
    parties: list[str]


class DirectChannel(_Channel):
    """`channel A -> B`: B receives A's answers (while `when` holds); `via TOOL`: only
    through that tool."""

    kind: Literal["direct"] = "direct"
    via: str | None = None
    when: Expr | None = None


class DelegationChannel(_Channel):
    """`delegation A -> B via TOOL`: A hands a task to B by calling TOOL."""

    kind: Literal["delegation"] = "delegation"
    via: str


class ForkChannel(_Channel):
    """`fork A -> B, C`: every answer of A goes to each of the others."""

    kind: Literal["fork"] = "fork"
    when: Expr | None = None


class MergeChannel(_Channel):
    """`merge A, B -> C`: one answer per source, delivered to the last party together."""

    kind: Literal["merge"] = "merge"
    when: Expr | None = None


class RelayChannel(_Channel):
    """`relay A -> B -> C`: B's answer to a task A sent goes on to C."""

    kind: Literal["relay"] = "relay"
    when: Expr | None = None


#: a channel of the message topology, told apart by `kind` in JSON
ChannelIR = Annotated[DirectChannel | DelegationChannel | ForkChannel | MergeChannel
                      | RelayChannel, Field(discriminator="kind")]


def channel_via(channel: ChannelIR) -> str | None:
    """The tool a channel is used through (direct `via TOOL`, delegation), else None."""
    match channel:
        case DirectChannel(via=via) | DelegationChannel(via=via):
            return via
        case ForkChannel() | MergeChannel() | RelayChannel():
            return None
        case _:
            assert_never(channel)


class MeasureIR(_Model):
    """A measurement or metric; unassessed when `when` is false."""

    name: str
    metric: bool = False
    expr: Expr
    when: Expr | None = None
    at: str


StudyMeasureKind = Literal["regret", "rating_gap"]


class CalibrationCellIR(_Model):
    """A solo calibration cell: the condition whose episodes give `party`'s baseline score."""

    condition: str
    party: str


class RatingIR(_Model):
    """A participant and the metric holding its self-rating in a routed episode."""

    party: str
    metric: str


class _StudyMeasure(_Variant):
    """A measure over a study's episodes (`study measure`), computed from stored metrics.

    `score` is read in the `calibration` cells: each participant's baseline is the
    mean score of its solo condition's retained episodes, per model column. The
    measure is taken over the retained episodes of the `routed` conditions
    (resolved: every other condition when the world does not list them)."""

    TAG: ClassVar[str] = "kind"
    name: str
    doc: str | None = None
    score: str
    calibration: list[CalibrationCellIR]
    routed: list[str]
    at: str


class RegretMeasure(_StudyMeasure):
    """Routing regret (EAIR C.5): the `expert`'s solo score minus the solo score of the
    participant the routed episode's `selected` metric names, truncated at zero."""

    kind: Literal["regret"] = "regret"
    selected: str
    expert: str


class RatingGapMeasure(_StudyMeasure):
    """Self-rating gap (EAIR F.8): each participant's self-rating in a routed episode
    minus its solo baseline; positive values are overclaim."""

    kind: Literal["rating_gap"] = "rating_gap"
    ratings: list[RatingIR]


#: a study measure, told apart by `kind` in JSON
StudyMeasureIR = Annotated[RegretMeasure | RatingGapMeasure, Field(discriminator="kind")]


class WorldMeta(_Model):
    name: str
    title: str = ""
    risk: str = ""
    risk_name: str = ""
    operation: str = ""
    preserves: str = ""
    description: str = ""
    clock: str = "min"
    seeds: int = 1
    forbid: list[str] = Field(default_factory=list)


class SourceIR(_Model):
    ref: str
    sha256: str


class EnumMeaningsIR(_Model):
    """What some members of one enum mean to the offline auditor (`enum E { ... }
    submission a interception b`; `vocabulary.ENUM_MEANINGS`): the members of each
    meaning, in the order the world names them."""

    submission: list[str] = Field(default_factory=list)
    interception: list[str] = Field(default_factory=list)


#: The calendar's first day in a world without `start` (docs/language.md, `world`).
CALENDAR_DEFAULT = "2026-01-01"


class World(_Model):
    """A compiled world (generated/<name>/world.json)."""

    schema_version: int = SCHEMA_VERSION
    eairdsl_version: str = __version__
    meta: WorldMeta
    digest: str
    sources: list[SourceIR]
    enums: dict[str, list[str]] = Field(default_factory=dict)
    #: enum name -> what some of its members mean, for the enums that declare meanings
    enum_meanings: dict[str, EnumMeaningsIR] = Field(default_factory=dict)
    schemas: dict[str, list[FieldIR]] = Field(default_factory=dict)
    closed_schemas: list[str] = Field(default_factory=list)
    records: list[RecordIR] = Field(default_factory=list)
    states: list[StateIR] = Field(default_factory=list)
    documents: list[DocumentIR] = Field(default_factory=list)
    authorization: AuthorizationIR = AuthorizationIR()
    policies: list[PolicyIR] = Field(default_factory=list)
    levers: list[LeverIR] = Field(default_factory=list)
    conditions: list[ConditionIR] = Field(default_factory=list)
    inducers: list[InducerIR] = Field(default_factory=list)
    tools: list[ToolIR] = Field(default_factory=list)
    parties: list[PartyIR] = Field(default_factory=list)
    channels: list[ChannelIR] = Field(default_factory=list)
    instances: list[dict[str, Any]] = Field(default_factory=list)
    measures: list[MeasureIR] = Field(default_factory=list)
    #: measures over a study's episodes; an older world.json has none (the field is new)
    study_measures: list[StudyMeasureIR] = Field(default_factory=list)
    lets: dict[str, LetIR] = Field(default_factory=dict)
    protected: list[str] = Field(default_factory=list)
    #: the world's `start`: the calendar's first day, evaluated as an episode starts;
    #: None is `CALENDAR_DEFAULT`
    calendar_start: Expr | None = None
    prompts: dict[str, dict[str, str]] = Field(default_factory=dict)

    def meaning(self, which: Literal["submission", "interception"]) -> list[str]:
        """Every enum member declared with meaning `which` (`submission`,
        `interception`), each once, sorted; empty when no enum declares it."""
        return sorted({m for e in self.enum_meanings.values() for m in getattr(e, which)})


def walk_expr(e: Expr | None, lets: dict[str, LetIR]) -> Iterator[Expr]:
    """Every node of `e`, parents first, following `let` calls into their bodies.

    Each definition's body is walked once per walk, however often it is called,
    and without recursion: a world.json with a deep expression or definitions
    that call each other twice per level is walked in linear time.
    """
    seen: set[str] = set()
    stack: list[Expr] = [] if e is None else [e]
    while stack:
        node = stack.pop()
        yield node
        if type(node) is LetCall and node.name in lets and node.name not in seen:
            seen.add(node.name)
            stack.append(lets[node.name].body)
        stack.extend(reversed(children(node)))


#: the world.json field holding the SHA-256 of the rest of the file (see `ir_sha256`)
IR_DIGEST_FIELD = "ir_sha256"


class WorldFileError(ValueError):
    """A world.json that cannot be used: not JSON, another schema, edited, malformed."""


def ir_sha256(data: dict[str, Any]) -> str:
    """SHA-256 of a world.json's data without its `ir_sha256` field, as canonical JSON.

    Canonical: sorted keys, no whitespace, UTF-8. It is computed over the data,
    not the text, so re-indenting the file keeps it; changing any value does not.
    """
    body = {k: v for k, v in data.items() if k != IR_DIGEST_FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def dump_world(world: World) -> str:
    """Canonical JSON: sorted keys, no defaults, stable across runs and machines.

    The file carries `ir_sha256`, the digest of everything else in it:
    `load_world` refuses a file edited after it was written.
    """
    data = world.model_dump(mode="json", exclude_defaults=True)
    data["schema_version"] = world.schema_version
    data["eairdsl_version"] = world.eairdsl_version
    data[IR_DIGEST_FIELD] = ir_sha256(data)
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def load_world(text: str) -> World:
    """Read a world.json back; `WorldFileError` (a ValueError) with a one-line reason if it is
    not JSON, of another schema version, edited after it was written, or malformed."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorldFileError(f"world.json is not JSON (line {exc.lineno}, column {exc.colno}: "
                             f"{exc.msg}); recompile the world") from None
    except RecursionError:
        raise WorldFileError("world.json is nested too deeply to read; recompile the "
                             "world") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version is None:
        raise WorldFileError("not a compiled world (no schema_version); compile a .eair file "
                             "with `eairc compile` and pass its generated/<world> folder")
    if version != SCHEMA_VERSION:
        raise WorldFileError(f"world.json has schema version {version}; this eairdsl reads "
                             f"version {SCHEMA_VERSION} — recompile the world")
    assert isinstance(data, dict)
    recorded = data.pop(IR_DIGEST_FIELD, None)
    if recorded is None:
        raise WorldFileError(f"world.json has no {IR_DIGEST_FIELD} (written by an older "
                             "eairdsl, or edited): recompile the world")
    if recorded != ir_sha256(data):
        raise WorldFileError("world.json was edited after compile: recompile the world (its "
                             f"content no longer matches its {IR_DIGEST_FIELD})")
    try:
        return World.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(top)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise WorldFileError(f"world.json is not a valid compiled world: {where}: "
                             f"{first.get('msg', 'invalid')}{more}; recompile the world"
                             ) from None
    except RecursionError:
        raise WorldFileError("world.json is nested too deeply to read; recompile the "
                             "world") from None
