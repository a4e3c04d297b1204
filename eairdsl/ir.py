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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from eairdsl import __version__
from eairdsl.check import types as T
from eairdsl.check.cards import forbidden_words
from eairdsl.check.references import RISKS
from eairdsl.check.signatures import resolve_type
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics
from eairdsl.syntax import ast as A

__all__ = [
    "SCHEMA_VERSION", "Expr", "TypeIR", "FieldIR", "RecordIR", "StateIR", "DocumentIR",
    "AuthRuleIR", "AuthorizationIR", "PolicyIR", "LeverIR", "ConditionIR", "InducerIR", "GuardIR",
    "EffectIR", "ParamIR", "ToolIR", "ToolRefIR", "EventIR", "PartyIR", "ChannelIR", "MeasureIR",
    "WorldMeta", "SourceIR", "World", "LetIR", "lower", "dump_world", "load_world", "walk_expr",
    "IR_DIGEST_FIELD", "WorldFileError", "ir_sha256",
]

#: Bumped whenever the shape of World changes; the runtime refuses other versions.
SCHEMA_VERSION = 3


class _Model(BaseModel):
    model_config = ConfigDict(frozen=False, extra="forbid")


class Expr(_Model):
    """A lowered expression. `op` says which slots are used:

    lit(kind, value) · ref(kind, name) · attr(name; args=[obj]) · index(args=[obj, i]) ·
    call(name; args; keys = keyword names, "" for positional) · unary(kind; args=[x]) ·
    binary(kind; args=[l, r]) · list(args) · record(keys; args) ·
    comp(name=var; source, body, where, group_by) · agg(kind=func; name=var?; source?, body,
    where, group_by) · quant(kind=all|any|exists; name=var; source, body) ·
    let(name = a `let` definition in World.lets; args in parameter order)
    """

    op: str
    kind: str | None = None
    name: str | None = None
    value: Any = None
    args: list[Expr] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)
    source: Expr | None = None
    body: Expr | None = None
    where: Expr | None = None
    group_by: list[Expr] = Field(default_factory=list)


class LetIR(_Model):
    """A `let` definition: its body sees only its parameters and the world."""

    name: str
    params: list[str]
    body: Expr


class TypeIR(_Model):
    """A type: kind (text, money, list, enum, record, ...), the enum/record name, list element."""

    kind: str
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


class RecordIR(_Model):
    """A record, table or ledger with its rows (empty for ledgers written by tools)."""

    name: str
    kind: str
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

    effect: str
    principal: str
    record: str
    fields: list[str]


class AuthorizationIR(_Model):
    default: str = "deny"
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


class ConditionIR(_Model):
    """A named condition: the value of every lever."""

    name: str
    doc: str | None = None
    levers: dict[str, Any]


class InducerIR(_Model):
    name: str
    kind: str
    roles: list[str] = Field(default_factory=list)
    when: Expr | None = None
    text: str | None = None
    at: Expr | None = None
    every: Expr | None = None
    sender: str | None = None
    shifts: dict[str, float] = Field(default_factory=dict)
    cost: Expr | None = None
    points: Expr | None = None
    #: a warning that fires after each successful call of this tool (in its scope)
    on: str | None = None
    #: a warning's recipients, evaluated when it fires (else `roles`)
    to: Expr | None = None
    #: a text computed when shown: a warning's when it fires, a live dashboard's each step
    text_expr: Expr | None = None


class GuardIR(_Model):
    """`require condition else reject message | route target`, active `when`."""

    condition: Expr
    action: str
    message: str | None = None
    target: str | None = None
    when: Expr | None = None
    at: str


class EffectIR(_Model):
    op: str
    target: str
    value: Expr
    when: Expr | None = None


class ParamIR(_Model):
    name: str
    type: TypeIR
    default: Expr | None = None
    hint: Expr | None = None


class ToolIR(_Model):
    name: str
    kind: str
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


class EventIR(_Model):
    """A scheduled event of an actor or simulator."""

    kind: str
    at: Expr
    #: the recipient when the world names it; else `to_expr`, evaluated when it fires
    to: str
    message: Expr | None = None
    when: Expr | None = None
    to_expr: Expr | None = None


class PartyIR(_Model):
    name: str
    kind: str
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


class ChannelIR(_Model):
    kind: str
    parties: list[str]
    via: str | None = None
    when: Expr | None = None


class MeasureIR(_Model):
    """A measurement or metric; unassessed when `when` is false."""

    name: str
    metric: bool = False
    expr: Expr
    when: Expr | None = None
    at: str


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


class World(_Model):
    """A compiled world (generated/<name>/world.json)."""

    schema_version: int = SCHEMA_VERSION
    eairdsl_version: str = __version__
    meta: WorldMeta
    digest: str
    sources: list[SourceIR]
    enums: dict[str, list[str]] = Field(default_factory=dict)
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
    lets: dict[str, LetIR] = Field(default_factory=dict)
    protected: list[str] = Field(default_factory=list)
    prompts: dict[str, dict[str, str]] = Field(default_factory=dict)


# ---------------------------------------------------------------- lowering

class _Lowerer:
    def __init__(self, world: CheckedWorld) -> None:
        self.w = world
        self.used_lets: set[str] = set()

    def type(self, t: A.TypeRef, owner: str = "") -> TypeIR:
        checked = resolve_type(self.w, t, Diagnostics(), owner)
        members = t.members if t.kind == "enum" else []
        if checked.kind == "enum" and checked.name in self.w.enums:
            members = self.w.enums[checked.name].members
        return _type_ir(checked, members)

    def expr(self, e: A.Expr, subst: dict[str, Expr] | None = None) -> Expr:
        s = subst or {}
        x = self.expr
        if isinstance(e, A.LiteralExpr):
            return Expr(op="lit", kind=e.kind, value=e.value)
        if isinstance(e, A.NameExpr):
            if e.id in s:
                return s[e.id]
            res = self.w.resolutions.get(id(e))
            return Expr(op="ref", kind=res.kind if res else "unknown", name=e.id)
        if isinstance(e, A.AttrExpr):
            return Expr(op="attr", name=e.name, args=[x(e.obj, s)])
        if isinstance(e, A.IndexExpr):
            return Expr(op="index", args=[x(e.obj, s), x(e.index, s)])
        if isinstance(e, A.CallExpr):
            if e.func in self.w.lets:
                let = self.w.lets[e.func]
                self.used_lets.add(let.name)
                return Expr(op="let", name=let.name, args=[x(a.value, s) for a in e.args])
            # `text(x)` renders with x's unit ($40, 6 min), which only the checker knows.
            unit = None
            if e.func in ("text", "join") and e.args:
                t = self.w.expr_types.get(id(e.args[0].value))
                if t is not None:
                    unit = t.arg.kind if t.kind == "list" and t.arg is not None else t.kind
            return Expr(op="call", name=e.func, kind=unit, args=[x(a.value, s) for a in e.args],
                        keys=[a.name or "" for a in e.args])
        if isinstance(e, A.UnaryExpr):
            return Expr(op="unary", kind=e.op, args=[x(e.operand, s)])
        if isinstance(e, A.BinaryExpr):
            return Expr(op="binary", kind=e.op, args=[x(e.left, s), x(e.right, s)])
        if isinstance(e, A.ListExpr):
            return Expr(op="list", args=[x(i, s) for i in e.items])
        if isinstance(e, A.RecordExpr):
            return Expr(op="record", keys=[f.name for f in e.fields],
                        args=[x(f.value, s) for f in e.fields])
        if isinstance(e, A.ComprehensionExpr):
            inner = {k: v for k, v in s.items() if k != e.tail.var}
            return Expr(op="comp", name=e.tail.var, source=x(e.tail.source, s),
                        body=x(e.body, inner),
                        where=x(e.tail.where, inner) if e.tail.where else None,
                        group_by=[x(g, inner) for g in e.tail.group_by])
        if isinstance(e, A.AggregateExpr):
            if e.tail is None:
                return Expr(op="agg", kind=e.func, body=x(e.body, s))
            inner = {k: v for k, v in s.items() if k != e.tail.var}
            return Expr(op="agg", kind=e.func, name=e.tail.var, source=x(e.tail.source, s),
                        body=x(e.body, inner),
                        where=x(e.tail.where, inner) if e.tail.where else None,
                        group_by=[x(g, inner) for g in e.tail.group_by])
        assert isinstance(e, A.QuantifierExpr)
        inner = {k: v for k, v in s.items() if k != e.var}
        return Expr(op="quant", kind=e.kind, name=e.var, source=x(e.source, s),
                    body=x(e.body, inner))

    def opt(self, e: A.Expr | None) -> Expr | None:
        return self.expr(e) if e is not None else None


def _type_ir(t: T.Type, members: list[str] | None = None) -> TypeIR:
    return TypeIR(kind=t.kind, name=t.name, arg=_type_ir(t.arg) if t.arg else None, max=t.max,
                  members=list(members or []))


def _digest(world: CheckedWorld) -> tuple[str, list[SourceIR]]:
    items: dict[str, bytes] = {}
    for module in world.program.modules:
        items[module.ref] = module.source.text.encode("utf-8")
    items.update(world.data_files)
    sources = [SourceIR(ref=ref, sha256=hashlib.sha256(items[ref]).hexdigest())
               for ref in sorted(items)]
    whole = hashlib.sha256("\n".join(f"{s.ref} {s.sha256}" for s in sources).encode())
    return whole.hexdigest(), sources


def _meta(world: CheckedWorld) -> WorldMeta:
    decl = world.world
    assert decl is not None
    meta = WorldMeta(name=decl.name, forbid=forbidden_words(world))
    for c in decl.clauses:
        if c.key in ("title", "operation", "preserves", "description"):
            setattr(meta, c.key, c.text or "")
        elif c.key == "risk":
            meta.risk = c.name or ""
            meta.risk_name = RISKS.get(meta.risk, "")
        elif c.key == "clock":
            meta.clock = c.name or "min"
        elif c.key == "seeds":
            meta.seeds = int(c.number or 1)
    return meta


def _expand(world: CheckedWorld, record: str, field: str) -> list[str]:
    if field == "*":
        return [f.name for f in world.fields(record)]
    groups = world.groups(record)
    return list(groups[field]) if field in groups else [field]


def lower(world: CheckedWorld) -> World:
    """Lower a world that checked without errors."""
    lo = _Lowerer(world)
    digest, sources = _digest(world)
    out = World(meta=_meta(world), digest=digest, sources=sources)
    out.enums = {name: list(e.members) for name, e in world.enums.items()}
    for schema in world.schemas.values():
        out.schemas[schema.name] = [_field(lo, schema.name, f) for f in schema.fields]
        if schema.closed:
            out.closed_schemas.append(schema.name)
    for record in world.records.values():
        out.records.append(RecordIR(
            name=record.name, kind=record.kind, key=record.key, source=record.source,
            fields=[_field(lo, record.name, f) for f in world.fields(record.name)],
            groups=world.groups(record.name), rows=world.rows.get(record.name, [])))
    for state in world.states.values():
        out.states.append(StateIR(name=state.name, type=lo.type(state.type),
                                  value=lo.expr(state.value)))
    for doc in world.documents.values():
        out.documents.append(DocumentIR(name=doc.name, source=doc.source,
                                        text=world.document_texts.get(doc.name, ""),
                                        epistemic=doc.epistemic))
    if world.authorizations:
        auth = world.authorizations[0]
        out.authorization = AuthorizationIR(default=auth.default, rules=[
            AuthRuleIR(effect=rule.effect, principal=rule.principal, record=sel.record,
                       fields=_expand(world, sel.record, sel.field))
            for rule in auth.rules for sel in rule.selectors])
    for policy in world.policies.values():
        keys = {c.key: c for c in policy.clauses}
        out.policies.append(PolicyIR(
            name=policy.name, enforced=policy.enforcement == "enforced",
            text="\n".join(c.text or "" for c in policy.clauses if c.key == "text"),
            document=keys["source"].name if "source" in keys else None,
            rule=lo.opt(keys["rule"].expr) if "rule" in keys else None))
    for lever in world.levers.values():
        out.levers.append(LeverIR(name=lever.name, type=lo.type(lever.type, lever.name),
                                  default=_first_condition_default(world, lever.name),
                                  doc=lever.doc))
    for name, values in world.condition_values.items():
        decl = world.conditions.get(name)
        out.conditions.append(ConditionIR(name=name, doc=decl.doc if decl else None,
                                          levers=values))
    for inducer in world.inducers.values():
        out.inducers.append(_inducer(lo, inducer))
    for tool in world.tools.values():
        out.tools.append(_tool(lo, world, tool))
    for party in world.parties.values():
        out.parties.append(_party(lo, party))
    out.channels = [ChannelIR(kind=c.kind, parties=list(c.parties), via=c.via,
                              when=lo.opt(c.when)) for c in world.channels]
    out.instances = list(world.instances)
    out.measures = [MeasureIR(name=m.name, metric=m.metric, expr=lo.expr(m.expr),
                              when=lo.opt(m.when), at=_at(m.span))
                    for m in world.measure_items]
    done: set[str] = set()
    while lo.used_lets - done:  # lowering a body may reach further definitions
        name = sorted(lo.used_lets - done)[0]
        done.add(name)
        let = world.lets[name]
        out.lets[name] = LetIR(name=name, params=[p.name for p in let.params],
                               body=lo.expr(let.body))
    out.lets = dict(sorted(out.lets.items()))
    out.protected = sorted({item for p in world.protected for item in p.items})
    out.prompts = {role: dict(sorted(by_cond.items()))
                   for role, by_cond in sorted(world.prompts.items())}
    return out


def _first_condition_default(world: CheckedWorld, lever: str) -> Any:
    from eairdsl.check.conditions import constant_value
    decl = world.levers[lever]
    try:
        return constant_value(decl.default, world.lever_types.get(lever, T.ANY), world)
    except Exception:
        return None


def _at(span: Any) -> str:
    return f"{span.file.rsplit('/', 1)[-1]}:{span.line}:{span.col}"


def _field(lo: _Lowerer, owner: str, f: A.FieldDecl) -> FieldIR:
    t = lo.w.field_types.get((owner, f.name), T.ANY)
    members = lo.w.enums[t.name].members if t.kind == "enum" and t.name in lo.w.enums else []
    return FieldIR(name=f.name, type=_type_ir(t, members), canary=f.canary,
                   patterns=list(f.patterns or []), epistemic=f.epistemic,
                   default=lo.opt(f.default))


def _inducer(lo: _Lowerer, inducer: A.InducerDecl) -> InducerIR:
    out = InducerIR(name=inducer.name, kind=inducer.kind)
    for c in inducer.clauses:
        if c.key == "roles":
            out.roles.extend(c.names)
        elif c.key == "text" and c.expr is not None:
            out.text_expr = lo.opt(c.expr)
        elif c.key == "text":
            out.text = c.text
        elif c.key == "from":
            out.sender = c.name
        elif c.key == "on":
            out.on = c.name
        elif c.key == "shift" and c.name:
            out.shifts[c.name] = float(c.number or 0)
        elif c.key in ("when", "at", "every", "cost", "points", "to"):
            setattr(out, c.key, lo.opt(c.expr))
    return out


def _tool(lo: _Lowerer, world: CheckedWorld, tool: A.ToolDecl) -> ToolIR:
    out = ToolIR(name=tool.name, kind="read",
                 params=[ParamIR(name=p.name, type=lo.type(p.type), default=lo.opt(p.default),
                                 hint=lo.opt(p.hint)) for p in tool.params],
                 returns=lo.type(tool.returns) if tool.returns else None)
    for c in tool.clauses:
        if c.key == "kind":
            out.kind = c.name or "read"
        elif c.key == "description":
            out.description = c.text or ""
        elif c.key == "cost":
            out.cost = lo.opt(c.expr)
        elif c.key == "require":
            assert c.expr is not None
            out.guards.append(GuardIR(condition=lo.expr(c.expr), action=c.action or "reject",
                                      message=c.text, target=c.target, when=lo.opt(c.when),
                                      at=_at(c.span)))
        elif c.key == "returns":
            out.result = lo.opt(c.expr)
        elif c.key in ("append", "set"):
            assert c.expr is not None
            out.effects.append(EffectIR(op=c.key, target=c.name or "", value=lo.expr(c.expr),
                                        when=lo.opt(c.when)))
        elif c.key == "delegates":
            if c.name:
                out.delegates_to = [c.name]
            else:
                out.delegates_to = sorted({ch.parties[1] for ch in world.channels
                                           if ch.kind == "delegation" and ch.via == tool.name})
        elif c.key == "propagates":
            out.propagates, out.propagates_when = lo.opt(c.expr), lo.opt(c.when)
        elif c.key == "sends":
            out.sends_to = lo.opt(c.expr)
        elif c.key == "acl":
            out.acl, out.acl_when = lo.opt(c.expr), lo.opt(c.when)
    return out


def _party(lo: _Lowerer, party: A.PartyDecl) -> PartyIR:
    out = PartyIR(name=party.name, kind=party.kind)
    for c in party.clauses:
        if c.key in ("model", "memory"):
            setattr(out, c.key, c.name)
        elif c.key in ("card", "kpi", "objective", "description"):
            setattr(out, c.key, c.text)
        elif c.key == "authority" and c.number is not None:
            out.authority = int(c.number)
        elif c.key == "authority":
            out.authority_expr = lo.opt(c.expr)
        elif c.key == "display":
            out.display = lo.opt(c.expr)
        elif c.key == "principal":
            out.principal = lo.opt(c.expr)
        elif c.key == "tools":
            out.tools.extend(ToolRefIR(name=r.name, when=lo.opt(r.when)) for r in c.refs)
        elif c.key == "trait" and c.name:
            out.traits[c.name] = float(c.number or 0)
        elif c.key in ("say", "contact") and c.expr is not None:
            to = lo.opt(c.recipient)
            named = to is not None and to.op == "ref" and to.kind == "party"
            out.events.append(EventIR(kind=c.key, at=lo.expr(c.expr),
                                      to=(to.name or "") if named and to else c.target or "",
                                      message=lo.opt(c.message), when=lo.opt(c.when),
                                      to_expr=None if named else to))
    return out


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
        if node.op == "let" and node.name in lets and node.name not in seen:
            seen.add(node.name)
            stack.append(lets[node.name].body)
        children = [c for c in (*node.args, node.source, node.body, node.where, *node.group_by)
                    if c is not None]
        stack.extend(reversed(children))


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
