"""Lowering: a checked world (AST plus the checker's tables) to the IR of `eairdsl.ir`.

It reads both the front end (`eairdsl.syntax`, `eairdsl.check`) and the IR; the
runtime imports the IR alone. Expressions are lowered by `lower_expr`
(`eairdsl.check.lower_expr`, which the checker's constant folder uses too; see
`_Lowerer.expr`); declarations and their clauses by the `_tool`, `_party`,
`_inducer`, ... functions below.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, assert_never, cast, get_args

from eairdsl.check import types as T
from eairdsl.check.cards import forbidden_words
from eairdsl.check.lower_expr import lower_expr
from eairdsl.check.signatures import resolve_type
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics
from eairdsl.ir import (
    INDUCER_CLASSES,
    AppendEffect,
    AuthorizationIR,
    AuthRuleIR,
    CalibrationCellIR,
    ChannelIR,
    ConditionIR,
    DelegationChannel,
    DirectChannel,
    DocumentIR,
    EnumMeaningsIR,
    EventIR,
    ExpectationIR,
    Expr,
    FieldIR,
    ForkChannel,
    GuardIR,
    InducerIR,
    InducerKind,
    LetIR,
    LeverIR,
    MeasureIR,
    MergeChannel,
    ParamIR,
    PartyIR,
    PolicyIR,
    RatingGapMeasure,
    RatingIR,
    RecordIR,
    Ref,
    RegretMeasure,
    RelayChannel,
    SetEffect,
    SourceIR,
    StateIR,
    StudyMeasureIR,
    ToolIR,
    ToolKind,
    ToolRefIR,
    TypeIR,
    TypeKind,
    World,
    WorldMeta,
)
from eairdsl.syntax import ast as A
from eairdsl.vocabulary import RISKS

__all__ = ["lower", "lower_expr"]


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
        return lower_expr(self.w, e, self.used_lets, subst)

    def opt(self, e: A.Expr | None) -> Expr | None:
        return self.expr(e) if e is not None else None


_TYPE_KINDS: frozenset[str] = frozenset(get_args(TypeKind))
_TOOL_KINDS: frozenset[str] = frozenset(get_args(ToolKind))
_INDUCER_KINDS: frozenset[str] = frozenset(get_args(InducerKind))


def _type_kind(kind: str) -> TypeKind:
    """The checker's type kind as the IR's (every checker type has one of these)."""
    assert kind in _TYPE_KINDS, kind
    return cast(TypeKind, kind)


def _tool_kind(kind: str) -> ToolKind:
    """A tool's `kind` clause as the IR's (the checker allows no other, E-code otherwise)."""
    assert kind in _TOOL_KINDS, kind
    return cast(ToolKind, kind)


def _inducer_kind(kind: str) -> InducerKind:
    """An inducer's kind as the IR's (the checker allows no other)."""
    assert kind in _INDUCER_KINDS, kind
    return cast(InducerKind, kind)


def _channel(lo: _Lowerer, c: A.ChannelDecl) -> ChannelIR:
    parties, when = list(c.parties), lo.opt(c.when)
    match c.kind:
        case "direct":
            return DirectChannel(parties=parties, via=c.via, when=when)
        case "delegation":
            assert c.via is not None and when is None, "the grammar gives a delegation a tool"
            return DelegationChannel(parties=parties, via=c.via)
        case "fork":
            return ForkChannel(parties=parties, when=when)
        case "merge":
            return MergeChannel(parties=parties, when=when)
        case "relay":
            return RelayChannel(parties=parties, when=when)
        case _:
            assert_never(c.kind)


def _type_ir(t: T.Type, members: list[str] | None = None) -> TypeIR:
    return TypeIR(kind=_type_kind(t.kind), name=t.name, arg=_type_ir(t.arg) if t.arg else None,
                  max=t.max, members=list(members or []))


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
        match c:
            case A.TitleClause():
                meta.title = c.text
            case A.OperationClause():
                meta.operation = c.text
            case A.PreservesClause():
                meta.preserves = c.text
            case A.DescriptionClause():
                meta.description = c.text
            case A.RiskClause():
                meta.risk = c.name
                meta.risk_name = RISKS.get(meta.risk, "")
            case A.ClockClause():
                meta.clock = c.name or "min"
            case A.SeedsClause():
                meta.seeds = int(c.number or 1)
            case A.StartClause():
                pass  # lower() lowers it: World.calendar_start
            case A.ForbidClause():
                pass  # forbidden_words reads it
            case _:
                assert_never(c)
    return meta


def _expand(world: CheckedWorld, record: str, field: str) -> list[str]:
    if field == "*":
        return [f.name for f in world.fields(record)]
    groups = world.groups(record)
    return list(groups[field]) if field in groups else [field]


def _meanings(enum: A.EnumDecl) -> EnumMeaningsIR:
    """An enum's meaning clauses as one set of members per meaning (the checker refused a
    meaning given twice)."""
    return EnumMeaningsIR(**{c.meaning: [r.name for r in c.members] for c in enum.meanings})


def lower(world: CheckedWorld) -> World:
    """Lower a world that checked without errors."""
    lo = _Lowerer(world)
    digest, sources = _digest(world)
    out = World(meta=_meta(world), digest=digest, sources=sources)
    out.enums = {name: list(e.members) for name, e in world.enums.items()}
    out.enum_meanings = {name: _meanings(e) for name, e in world.enums.items() if e.meanings}
    start = A.last_clause(world.world.clauses, A.StartClause) if world.world else None
    out.calendar_start = lo.expr(start.expr) if start is not None else None
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
        source = A.last_clause(policy.clauses, A.SourceClause)
        rule = A.last_clause(policy.clauses, A.RuleClause)
        out.policies.append(PolicyIR(
            name=policy.name, enforced=policy.enforcement == "enforced",
            text="\n".join(c.text for c in policy.clauses if isinstance(c, A.PolicyTextClause)),
            document=source.name if source is not None else None,
            rule=lo.opt(rule.expr) if rule is not None else None))
    for lever in world.levers.values():
        out.levers.append(LeverIR(name=lever.name, type=lo.type(lever.type, lever.name),
                                  default=_first_condition_default(world, lever.name),
                                  doc=lever.doc))
    for name, values in world.condition_values.items():
        decl = world.conditions.get(name)
        out.conditions.append(ConditionIR(
            name=name, doc=decl.doc if decl else None, levers=values,
            expectations=[ExpectationIR.model_validate(
                {"subject": e.subject, "outcome": e.outcome, "reason": e.reason})
                for e in (decl.expectations if decl else [])]))
    for inducer in world.inducers.values():
        out.inducers.append(_inducer(lo, inducer))
    for tool in world.tools.values():
        out.tools.append(_tool(lo, world, tool))
    for party in world.parties.values():
        out.parties.append(_party(lo, party))
    out.channels = [_channel(lo, c) for c in world.channels]
    out.instances = list(world.instances)
    out.measures = [MeasureIR(name=m.name, metric=m.metric, expr=lo.expr(m.expr),
                              when=lo.opt(m.when), at=_at(m.span))
                    for m in world.measure_items]
    out.study_measures = [_study_measure(world, m) for m in world.study_measures.values()]
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


def _study_measure(world: CheckedWorld, m: A.StudyMeasureDecl) -> StudyMeasureIR:
    """A checked `study measure`: its cells resolved, `routed` defaulting to every condition
    that is not a calibration cell (in the world's condition order)."""
    calibration = [CalibrationCellIR(condition=r.name, party=r.to or "")
                   for r in m.refs(A.CalibrationClause)]
    solo = {c.condition for c in calibration}
    routed = ([r.name for r in m.refs(A.RoutedClause)] if m.clause(A.RoutedClause) is not None
              else [c for c in world.condition_values if c not in solo])
    score = m.refs(A.ScoreClause)[0].name
    if m.kind == "regret":
        return RegretMeasure(name=m.name, doc=m.doc, score=score, calibration=calibration,
                             routed=routed, at=_at(m.span),
                             selected=m.refs(A.SelectedClause)[0].name,
                             expert=m.refs(A.ExpertClause)[0].name)
    if m.kind == "rating_gap":
        return RatingGapMeasure(name=m.name, doc=m.doc, score=score, calibration=calibration,
                                routed=routed, at=_at(m.span),
                                ratings=[RatingIR(party=r.name, metric=r.to or "")
                                         for r in m.refs(A.RatingClause)])
    raise ValueError(f"unchecked study measure kind {m.kind!r}")  # the checker's E505


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
    """The inducer's class for its kind, with the slots its clauses fill (the checker allows
    each kind only its clauses; a slot the class lacks is a validation error)."""
    slots: dict[str, Any] = {}
    roles: list[str] = []
    shifts: dict[str, float] = {}
    for c in inducer.clauses:
        match c:
            case A.RolesClause():
                roles.extend(c.names)
            case A.TextClause() if c.constant is None:
                slots["text_expr"] = lo.opt(c.expr)
            case A.TextClause():
                slots["text"] = c.constant
            case A.FromClause():
                slots["sender"] = c.name
            case A.OnClause():
                slots["on"] = c.name
            case A.ShiftClause():
                shifts[c.name] = float(c.number or 0)
            case A.WhenClause():
                slots["when"] = lo.opt(c.expr)
            case A.AtClause():
                slots["at"] = lo.opt(c.expr)
            case A.EveryClause():
                slots["every"] = lo.opt(c.expr)
            case A.CostClause():
                slots["cost"] = lo.opt(c.expr)
            case A.PointsClause():
                slots["points"] = lo.opt(c.expr)
            case A.ToClause():
                slots["to"] = lo.opt(c.expr)
            case _:
                assert_never(c)
    cls = INDUCER_CLASSES[_inducer_kind(inducer.kind)]
    return cast(InducerIR, cls(name=inducer.name, roles=roles, shifts=shifts, **slots))


def _tool(lo: _Lowerer, world: CheckedWorld, tool: A.ToolDecl) -> ToolIR:
    out = ToolIR(name=tool.name, kind="read",
                 params=[ParamIR(name=p.name, type=lo.type(p.type), default=lo.opt(p.default),
                                 hint=lo.opt(p.hint)) for p in tool.params],
                 returns=lo.type(tool.returns) if tool.returns else None)
    for c in tool.clauses:
        match c:
            case A.KindClause():
                out.kind = _tool_kind(c.name or "read")
            case A.DescriptionClause():
                out.description = c.text
            case A.CostClause():
                out.cost = lo.opt(c.expr)
            case A.RequireClause():
                reject = c.guard if isinstance(c.guard, A.RejectGuard) else None
                route = c.guard if isinstance(c.guard, A.RouteGuard) else None
                out.guards.append(GuardIR(
                    condition=lo.expr(c.expr), action="route" if route else "reject",
                    message=reject.message if reject else None,
                    target=route.target if route else None, when=lo.opt(c.when),
                    at=_at(c.span)))
            case A.EnsureClause():
                rule = A.last_clause(world.policies[c.policy].clauses, A.RuleClause)
                assert rule is not None  # the checker reports a policy without a rule (E507)
                out.guards.append(GuardIR(condition=lo.expr(rule.expr), action="reject",
                                          message=c.message, when=lo.opt(c.when),
                                          at=_at(c.span), after=True, policy=c.policy))
            case A.ReturnsClause():
                out.result = lo.opt(c.expr)
            case A.AppendClause():
                out.effects.append(AppendEffect(target=c.name, value=lo.expr(c.expr),
                                                when=lo.opt(c.when)))
            case A.SetClause():
                out.effects.append(SetEffect(target=c.name, value=lo.expr(c.expr),
                                             when=lo.opt(c.when)))
            case A.DelegatesClause():
                if c.name:
                    out.delegates_to = [c.name]
                else:
                    out.delegates_to = sorted({ch.parties[1] for ch in world.channels
                                               if ch.kind == "delegation" and ch.via == tool.name})
            case A.PropagatesClause():
                out.propagates, out.propagates_when = lo.opt(c.expr), lo.opt(c.when)
            case A.SendsClause():
                out.sends_to = lo.opt(c.expr)
            case A.AclClause():
                out.acl, out.acl_when = lo.opt(c.expr), lo.opt(c.when)
            case _:
                assert_never(c)
    return out


def _party(lo: _Lowerer, party: A.PartyDecl) -> PartyIR:
    out = PartyIR(name=party.name, kind=party.kind)
    for c in party.clauses:
        match c:
            case A.ModelClause():
                out.model = c.name
            case A.MemoryClause():
                out.memory = c.name
            case A.CardClause():
                out.card = c.text
            case A.KpiClause():
                out.kpi = c.text
            case A.ObjectiveClause():
                out.objective = c.text
            case A.DescriptionClause():
                out.description = c.text
            case A.AuthorityClause() if c.constant is not None:
                out.authority = c.constant
            case A.AuthorityClause():
                out.authority_expr = lo.opt(c.expr)
            case A.DisplayClause():
                out.display = lo.opt(c.expr)
            case A.PrincipalClause():
                out.principal = lo.opt(c.expr)
            case A.ToolsClause():
                out.tools.extend(ToolRefIR(name=r.name, when=lo.opt(r.when)) for r in c.refs)
            case A.TraitClause():
                out.traits[c.name] = float(c.number or 0)
            case A.SayClause():
                out.events.append(_event(lo, "say", c, lo.opt(c.message)))
            case A.ContactClause():
                out.events.append(_event(lo, "contact", c, None))
            case _:
                assert_never(c)
    return out


def _event(lo: _Lowerer, kind: Literal["say", "contact"], c: A.SayClause | A.ContactClause,
           message: Expr | None) -> EventIR:
    """A scheduled event; a recipient naming a participant is kept by name."""
    to = lo.opt(c.recipient)
    named = to.name if isinstance(to, Ref) and to.kind == "party" else None
    written = c.recipient.id if isinstance(c.recipient, A.NameExpr) else ""
    return EventIR(kind=kind, at=lo.expr(c.at), to=named if named is not None else written,
                   message=message, when=lo.opt(c.when),
                   to_expr=None if named is not None else to,
                   verbatim=isinstance(c, A.SayClause) and c.verbatim)
