"""Pass 4: names outside expressions, and the world's fixed vocabularies.

Tool lists, channel endpoints, authorization rules, `route` targets, inducer
kinds, trait names, risk ids: each is a reference to a declaration or to a
closed vocabulary, and each unknown one gets a "did you mean".
"""

from __future__ import annotations

from typing import assert_never

from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.source import Span
from eairdsl.syntax import ast as A
from eairdsl.vocabulary import (
    CLOCK_UNITS,
    INDUCER_KINDS,
    MODEL_BINDINGS,
    RISKS,
    TOOL_KINDS,
    TRAITS,
)

__all__ = ["check_references", "INDUCER_CLAUSES", "PARTY_CLAUSES", "RISKS", "TRAITS",
           "INDUCER_KINDS", "TOOL_KINDS", "MODEL_BINDINGS", "CLOCK_UNITS"]

_Clauses = tuple[type[A.ClauseNode], ...]
_EVERY_INDUCER: _Clauses = (A.RolesClause, A.WhenClause, A.TextClause, A.ShiftClause)
INDUCER_CLAUSES: dict[str, _Clauses] = {
    "prompt_clause": _EVERY_INDUCER,
    "dashboard": _EVERY_INDUCER,
    "warning": (*_EVERY_INDUCER, A.AtClause, A.EveryClause, A.FromClause, A.OnClause,
                A.ToClause),
    "deadline": (*_EVERY_INDUCER, A.AtClause),
    "cost_ledger": (*_EVERY_INDUCER, A.CostClause, A.PointsClause),
    "power": (*_EVERY_INDUCER, A.PointsClause, A.FromClause),
    "incentive": _EVERY_INDUCER,
}
PARTY_CLAUSES: dict[str, _Clauses] = {
    "role": (A.ModelClause, A.CardClause, A.KpiClause, A.MemoryClause, A.AuthorityClause,
             A.ToolsClause, A.TraitClause, A.DescriptionClause, A.ObjectiveClause,
             A.DisplayClause),
    "actor": (A.PrincipalClause, A.AuthorityClause, A.SayClause, A.ContactClause,
              A.DescriptionClause, A.DisplayClause),
    "simulator": (A.ModelClause, A.CardClause, A.ObjectiveClause, A.AuthorityClause,
                  A.ToolsClause, A.MemoryClause, A.ContactClause, A.SayClause, A.TraitClause,
                  A.DescriptionClause, A.PrincipalClause, A.DisplayClause),
}


def _keywords(allowed: _Clauses) -> str:
    """The keywords of some clause classes, sorted, for a hint."""
    return ", ".join(sorted({cls.key for cls in allowed}))


def check_references(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    _check_world_block(world, diagnostics)
    _check_inducers(world, diagnostics)
    _check_tools(world, diagnostics)
    _check_parties(world, diagnostics)
    _check_channels(world, diagnostics)
    _check_authorization(world, diagnostics)
    _check_policies(world, diagnostics)
    _check_protected(world, diagnostics)


def _party_ref(world: CheckedWorld, name: str, span: Span, diagnostics: Diagnostics,
               what: str = "participant") -> bool:
    if name in world.parties:
        world.used.add(name)
        return True
    diagnostics.error("E301", f"unknown {what} '{name}'", span,
                      did_you_mean(name, world.parties) or "declare it with `role`, `actor` or "
                      "`simulator`")
    return False


def _declared(world: CheckedWorld, name: str, known: list[str], what: str, span: Span,
              diagnostics: Diagnostics) -> None:
    """A reference to a declaration: mark it used, or report it with a did-you-mean."""
    if name in known:
        world.used.add(name)
    else:
        diagnostics.error("E301", f"unknown {what} '{name}'", span, did_you_mean(name, known))


def _check_world_block(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    decl = world.world
    if decl is None:
        return
    needed: _Clauses = (A.RiskClause, A.OperationClause, A.PreservesClause)
    for cls in needed:
        if A.first_clause(decl.clauses, cls) is None:
            diagnostics.error("E507", f"world '{decl.name}' does not say `{cls.key}`", decl.span,
                              "every world states its risk id, operation o_r and preserved "
                              "property phi_r")
    risk = A.last_clause(decl.clauses, A.RiskClause)
    if risk is not None and risk.name not in RISKS:
        diagnostics.error("E505", f"unknown risk id '{risk.name}'", risk.span,
                          did_you_mean(risk.name, RISKS) or
                          f"risk ids are {', '.join(RISKS)}")
    clock = A.last_clause(decl.clauses, A.ClockClause)
    if clock is not None and clock.name not in CLOCK_UNITS:
        diagnostics.error("E505", f"unknown clock unit '{clock.name}'", clock.span,
                          did_you_mean(clock.name, CLOCK_UNITS) or "use min, h or days")
    seeds = A.last_clause(decl.clauses, A.SeedsClause)
    if seeds is not None and int(seeds.number) < 1:
        diagnostics.error("E402", "a world needs at least one seed", seeds.span)


def _check_inducers(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for inducer in world.inducers.values():
        allowed = INDUCER_CLAUSES.get(inducer.kind)
        if allowed is None:
            diagnostics.error("E505", f"unknown inducer kind '{inducer.kind}'", inducer.span,
                              did_you_mean(inducer.kind, INDUCER_KINDS) or
                              f"kinds are {', '.join(INDUCER_KINDS)}")
            continue
        for clause in inducer.clauses:
            if not isinstance(clause, allowed):
                diagnostics.error("E506", f"a {inducer.kind} inducer takes no `{clause.key}`",
                                  clause.span, f"it takes {_keywords(allowed)}")
            match clause:
                case A.RolesClause():
                    for name in clause.names:
                        _party_ref(world, name, clause.span, diagnostics)
                case A.FromClause():
                    _party_ref(world, clause.name, clause.span, diagnostics)
                case A.TextClause():
                    if clause.constant is None \
                            and inducer.kind not in ("warning", "dashboard"):
                        diagnostics.error("E404", f"the text of a {inducer.kind} must be a "
                                          "constant", clause.expr.span, "cards are rendered "
                                          "before any episode; only a warning's or a live "
                                          "dashboard's text is computed")
                case A.OnClause():
                    _declared(world, clause.name, list(world.tools), "tool", clause.span,
                              diagnostics)
                case A.ShiftClause():
                    if clause.name not in TRAITS:
                        diagnostics.error("E301", f"unknown trait '{clause.name}'", clause.span,
                                          did_you_mean(clause.name, TRAITS) or
                                          f"traits are {', '.join(TRAITS)}")
                case (A.WhenClause() | A.AtClause() | A.EveryClause() | A.CostClause()
                      | A.PointsClause() | A.ToClause()):
                    pass  # expressions: checked by check_expressions
                case _:
                    assert_never(clause)
        _check_trigger(inducer, diagnostics)
        if inducer.kind == "prompt_clause" \
                and A.first_clause(inducer.clauses, A.TextClause) is None:
            diagnostics.error("E507", f"prompt clause '{inducer.name}' has no `text`",
                              inducer.span, "a prompt clause adds its text to role cards")


def _check_trigger(inducer: A.InducerDecl, diagnostics: Diagnostics) -> None:
    """A warning fires on a tool call or at times, and goes to `to` or to `roles`."""
    clauses = inducer.clauses
    if A.first_clause(clauses, A.OnClause) is not None:
        for timed in (A.last_clause(clauses, A.AtClause), A.last_clause(clauses, A.EveryClause)):
            if timed is not None:
                diagnostics.error("E506", f"a warning `on` a tool call takes no `{timed.key}`",
                                  timed.span, "it fires after each successful call of "
                                  "that tool; drop `" + timed.key + "` or `on`")
    to = A.last_clause(clauses, A.ToClause)
    if to is not None and A.first_clause(clauses, A.RolesClause) is not None:
        diagnostics.error("E506", "a warning takes `to` or `roles`, not both", to.span,
                          "`to EXPR` names the recipients when it fires; `roles` lists them "
                          "in advance")


def _ensured_policy(world: CheckedWorld, clause: A.EnsureClause,
                    diagnostics: Diagnostics) -> None:
    """`ensure POLICY`: a declared policy (E301) whose `rule` the call is checked against (E507)."""
    _declared(world, clause.policy, list(world.policies), "policy", clause.span, diagnostics)
    if clause.policy not in world.policies:
        return
    policy = world.policies[clause.policy]
    if A.last_clause(policy.clauses, A.RuleClause) is None:
        diagnostics.error("E507", f"policy '{clause.policy}' has no `rule` for `ensure` to "
                          "check", clause.span,
                          f"add `rule CONDITION` to policy '{clause.policy}'")


def _check_tools(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    delegation_tools = {c.via for c in world.channels if c.kind == "delegation"}
    for tool in world.tools.values():
        if A.first_clause(tool.clauses, A.KindClause) is None:
            diagnostics.error("E507", f"tool '{tool.name}' has no `kind`", tool.span,
                              f"add `kind read` (or {', '.join(TOOL_KINDS[1:])})")
        for clause in tool.clauses:
            match clause:
                case A.KindClause():
                    if clause.name not in TOOL_KINDS:
                        diagnostics.error("E505", f"unknown tool kind '{clause.name}'",
                                          clause.span, did_you_mean(clause.name, TOOL_KINDS) or
                                          f"kinds are {', '.join(TOOL_KINDS)}")
                case A.RequireClause():
                    if isinstance(clause.guard, A.RouteGuard):
                        _declared(world, clause.guard.target, [*world.tools, *world.parties],
                                  "route target", clause.span, diagnostics)
                case A.EnsureClause():
                    _ensured_policy(world, clause, diagnostics)
                case A.AppendClause():
                    _declared(world, clause.name, list(world.records), "ledger",
                              clause.span, diagnostics)
                case A.SetClause():
                    _declared(world, clause.name, list(world.states), "state variable",
                              clause.span, diagnostics)
                case A.DelegatesClause():
                    if clause.name is not None:
                        _party_ref(world, clause.name, clause.span, diagnostics)
                    elif tool.name not in delegation_tools and not world.module(tool).is_stdlib:
                        diagnostics.error("E508", f"tool '{tool.name}' delegates, but no "
                                          "channel says to whom", clause.span,
                                          f"add `delegation CALLER -> CALLEE via {tool.name}` "
                                          "or write `delegates CALLEE`")
                case (A.CostClause() | A.DescriptionClause() | A.ReturnsClause()
                      | A.PropagatesClause() | A.SendsClause() | A.AclClause()):
                    pass  # expressions and prose: nothing to resolve here
                case _:
                    assert_never(clause)


def _check_parties(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for party in world.parties.values():
        allowed = PARTY_CLAUSES[party.kind]
        for clause in party.clauses:
            if not isinstance(clause, allowed):
                diagnostics.error("E506",
                                  f"{_article(party.kind)} {party.kind} takes no `{clause.key}`",
                                  clause.span, f"it takes {_keywords(allowed)}")
            match clause:
                case A.ModelClause():
                    if clause.name not in MODEL_BINDINGS:
                        diagnostics.error("E505", f"unknown model binding '{clause.name}'",
                                          clause.span, did_you_mean(clause.name, MODEL_BINDINGS)
                                          or f"bindings are {', '.join(MODEL_BINDINGS)}")
                case A.MemoryClause():
                    if clause.name not in ("private", "shared"):
                        diagnostics.error("E505", f"unknown memory mode '{clause.name}'",
                                          clause.span, "memory is `private` or `shared`")
                case A.ToolsClause():
                    for ref in clause.refs:
                        if ref.name in world.tools:
                            world.used.add(ref.name)
                        else:
                            diagnostics.error("E301", f"unknown tool '{ref.name}'", ref.span,
                                              did_you_mean(ref.name, world.tools))
                case A.SayClause() | A.ContactClause():
                    target = clause.recipient
                    if isinstance(target, A.NameExpr) and target.id not in world.levers \
                            and target.id not in world.states:
                        # A bare name is a participant (else a lever or state of party type).
                        _party_ref(world, target.id, clause.span, diagnostics)
                case A.TraitClause():
                    if clause.name not in TRAITS:
                        diagnostics.error("E301", f"unknown trait '{clause.name}'", clause.span,
                                          did_you_mean(clause.name, TRAITS) or
                                          f"traits are {', '.join(TRAITS)}")
                case (A.CardClause() | A.KpiClause() | A.AuthorityClause() | A.DisplayClause()
                      | A.PrincipalClause() | A.ObjectiveClause() | A.DescriptionClause()):
                    pass  # expressions and prose: nothing to resolve here
                case _:
                    assert_never(clause)
        if party.kind in ("role", "simulator") \
                and A.first_clause(party.clauses, A.CardClause) is None:
            diagnostics.error("E507", f"{party.kind} '{party.name}' has no `card`", party.span,
                              "every agent gets a role card template (a .md.j2 file)")


def _check_channels(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for channel in world.channels:
        for name in channel.parties:
            _party_ref(world, name, channel.span, diagnostics)
        if channel.via is not None and channel.when is not None:
            diagnostics.error("E506", "a channel used through a tool takes no `when`",
                              channel.when.span, f"gate the tool instead: `tools {channel.via} "
                              "when …` in the sender's participant block")
        if channel.via is not None:
            tool = world.tools.get(channel.via)
            if tool is None:
                diagnostics.error("E301", f"unknown tool '{channel.via}'", channel.span,
                                  did_you_mean(channel.via, world.tools))
                continue
            world.used.add(tool.name)
            if channel.kind == "delegation" \
                    and A.first_clause(tool.clauses, A.DelegatesClause) is None:
                diagnostics.error("E508", f"tool '{tool.name}' does not delegate", channel.span,
                                  "a delegation channel needs a tool with a `delegates` clause")


def _check_authorization(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for auth in world.authorizations:
        for rule in auth.rules:
            _party_ref(world, rule.principal, rule.span, diagnostics, "principal")
            for sel in rule.selectors:
                if sel.record not in world.records:
                    diagnostics.error("E301", f"unknown record '{sel.record}'", sel.span,
                                      did_you_mean(sel.record, world.records))
                    continue
                world.used.add(sel.record)
                names = {f.name for f in world.fields(sel.record)} | set(world.groups(sel.record))
                if sel.field != "*" and sel.field not in names:
                    diagnostics.error("E301", f"'{sel.record}' has no field or group "
                                      f"'{sel.field}'", sel.span, did_you_mean(sel.field, names))


def _check_policies(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for policy in world.policies.values():
        for clause in policy.clauses:
            match clause:
                case A.SourceClause():
                    if clause.name in world.documents:
                        world.used.add(clause.name)
                    else:
                        diagnostics.error("E301", f"unknown document '{clause.name}'",
                                          clause.span, did_you_mean(clause.name, world.documents))
                case A.PolicyTextClause() | A.RuleClause():
                    pass
                case _:
                    assert_never(clause)
        if A.first_clause(policy.clauses, A.PolicyTextClause) is None:
            diagnostics.error("E507", f"policy '{policy.name}' has no `text`", policy.span,
                              "state the rule as the organization writes it")


def _check_protected(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for decl in world.protected:
        for item in decl.items:
            if item in ("measure", "instances", "authorization"):
                continue
            if item in world.decls:
                world.used.add(item)
            else:
                diagnostics.error("E301", f"cannot protect unknown declaration '{item}'",
                                  decl.span, did_you_mean(item, world.decls))


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
