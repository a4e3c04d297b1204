"""Pass 10: whether an offline audit of the world can find anything (issue 26, item 1).

The offline auditor (`eairdsl.audit.rules`) reads a sanitized bundle, never the
world's source, and holds an episode only to what that bundle shows: declared
policy rules it can evaluate, and a few mechanisms its other rules key on. A world
that gives it none of them gets no finding on any episode, realized or not, and
`eairc repair` has nothing to start from. This pass says so at check time.

- W708: the world is not auditable offline. It is auditable when it has at least one
  of the following; each is what one offline rule needs before it can report a
  supported finding (a necessary condition, so the warning never fires on a world
  an audit could hold to something):

  1. `policy_rule`: a policy `rule` the offline auditor evaluates: it reads at least
     one record some held tool writes (the rule is re-evaluated only when what it
     reads changes), and otherwise only records a held tool reaches, levers (the
     bundle shows a rule with the lever's value, not its name), enum values,
     participants, literals, and definitions of these, through the builtins the
     auditor evaluates (`PURE` and `lookup`). The trace, the clock, state variables,
     documents, the judge and the authorization builtins are not evaluated offline;
  2. `authorization`: an `authorization` block that hides something from someone
     and shows something to someone (a matrix that allows all, or nothing, flags
     nothing);
  3. `status_drift`, `evidence_not_sought`: a tool that writes (`append`, `set`)
     and has a parameter of a closed vocabulary (an enum of two or more values);
  4. `self_report_routing`: a policy with a `text`, a tool that appends rows and is
     held by two or more roles, and a tool one role holds and another does not.

  (`hedge` gives leads only, never a supported finding, so it does not count.)
  Located at the `realized` measurement (what an audit should be able to show),
  else at the world block.
- W709: a policy rule that reads what every bundle withholds, whatever the episode, so
  no auditor, offline or LLM, can hold an episode to it: a measurement, a record or
  document no tool any participant holds reaches (the bundle leaves the whole rule
  out), or the grader-side builtins (`canary_hits`, `canary_exact`, `pattern_hits`:
  grader markers; `judged`: judge rubrics). Levers are not withheld: the bundle prints
  a rule with the lever's value for the episode's condition (issue 26, item 2). The
  call's context is withheld: the bundle prints it `⟨withheld⟩` and the rule is not
  assessed. An instance field is printed as its value only where the episode showed
  that value to a participant (a message, a tool's arguments or result, a card), else
  withheld like the context; W709 says so at the read (a rule reading the instance
  used to hold on every episode, evaluated against a missing instance).

Both skip worlds with errors (what a name means is then not settled) and the
declarations of `stdlib/`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics
from eairdsl.source import Span
from eairdsl.syntax import ast as A
from eairdsl.syntax.build import iter_exprs

__all__ = ["WITHHELD_CALLS", "check_auditable"]

#: builtins that read what every bundle withholds (grader markers, judge rubrics)
WITHHELD_CALLS = frozenset({"canary_hits", "canary_exact", "pattern_hits", "judged"})
#: name kinds a bundle withholds whatever the world
_WITHHELD_KINDS = {"measure": "a measurement", "context": "a tool call's context",
                   "instance": "the task instance"}
#: how a name the offline evaluator does not read is named in W708's message
_KIND_WORDS = {"state": "a state variable", "instance": "the task instance",
               "document": "a document"}
#: name kinds the offline evaluator reads from the bundle (records are checked apart)
_EVALUATED_KINDS = frozenset({"lever", "enum_value", "enum", "party", "tool", "local",
                              "param"})


@cache
def _evaluated_calls() -> frozenset[str]:
    """The builtins the offline policy evaluator computes from a bundle alone: the pure
    ones and `lookup` (`eairdsl.audit.policy_eval`); loaded on first use."""
    from eairdsl.runtime.builtins import PURE

    return PURE | {"lookup"}


@dataclass
class _Reach:
    """What the tools the participants hold reach: the bundle shows these and no more."""

    held: set[str] = field(default_factory=set)
    records: set[str] = field(default_factory=set)
    documents: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)


@dataclass
class _RuleReads:
    """A policy rule's reads, through the definitions it calls."""

    withheld: list[tuple[str, Span]] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)
    records: set[str] = field(default_factory=set)


def check_auditable(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    """W709 for each of the world's policy rules that reads withheld material, then W708
    when neither an evaluable rule nor another mechanism gives an offline audit a hold."""
    if world.world is None or diagnostics.has_errors:
        return
    reach = _reach(world)
    evaluable: list[str] = []
    unevaluated: list[str] = []
    for name, policy in world.policies.items():
        rule = A.first_clause(policy.clauses, A.RuleClause)
        if rule is None or not _own(world, policy):
            continue
        reads = _rule_reads(world, rule.expr, reach)
        for what, span in reads.withheld[:1]:
            diagnostics.warning(
                "W709", f"the rule of policy '{name}' reads {what}: no auditor can hold an "
                "episode to it", span,
                "state the rule over records the participants' tools read or write, levers "
                "and enum values, or give a role the tool that reads what it needs "
                "(docs/tutorial.md, \"Make your world auditable and repairable\")")
        if reads.withheld:
            unevaluated.append(f"the rule of '{name}' reads what audit bundles withhold, W709")
        elif reads.offline:
            unevaluated.append(f"the rule of '{name}' reads {reads.offline[0]}, which the "
                               "offline auditor does not evaluate")
        elif not reads.records & reach.written:
            unevaluated.append(f"the rule of '{name}' reads no record a tool writes, so no "
                               "step can break it")
        else:
            evaluable.append(name)
    if evaluable or _other_mechanism(world, reach):
        return
    realized = next((i for i in world.measure_items if i.name == "realized" and not i.metric),
                    None)
    note = f" ({unevaluated[0]})" if unevaluated else ""
    diagnostics.warning(
        "W708", "offline audits of this world will find nothing: no policy rule the auditor "
        f"can evaluate{note}, no authorization that hides a field, no closed vocabulary a "
        "tool records, no policy a routing check could cite",
        realized.span if realized is not None else world.world.span,
        "declare `policy NAME { text \"…\" rule EXPR }` with EXPR over the records the tools "
        "write, true exactly when the preserved property holds (docs/tutorial.md, \"Make your "
        "world auditable and repairable\")")


def _own(world: CheckedWorld, decl: A.Decl) -> bool:
    module = world.module_of.get(id(decl))
    return module is None or not module.is_stdlib


def _let_closure(world: CheckedWorld, root: A.Node) -> Iterator[tuple[A.Node, Span | None]]:
    """Every expression node of `root` and of the definitions it calls, each once, with
    the span of the call in `root` it was reached through (None for `root`'s own)."""
    stack: list[tuple[A.Node, Span | None]] = [(root, None)]
    seen: set[str] = set()
    while stack:
        item, origin = stack.pop()
        for node in iter_exprs(item):
            yield node, origin
            if isinstance(node, A.CallExpr) and node.func in world.lets \
                    and node.func not in seen:
                seen.add(node.func)
                stack.append((world.lets[node.func].body, origin or node.span))


def _reach(world: CheckedWorld) -> _Reach:
    """The tools some participant holds (whatever their `when`), and the records and
    documents they read or write, as the bundle lists them."""
    out = _Reach()
    for party in world.parties.values():
        for clause in party.clauses:
            if isinstance(clause, A.ToolsClause):
                out.held |= {r.name for r in clause.refs if r.name in world.tools}
    for name in sorted(out.held):
        tool = world.tools[name]
        for node, _ in _let_closure(world, tool):
            res = world.resolutions.get(id(node))
            if res is not None and res.kind == "record":
                out.records.add(res.name)
            elif res is not None and res.kind == "document":
                out.documents.add(res.name)
        for effect in tool.clauses:
            if isinstance(effect, A.AppendClause | A.SetClause) and effect.name in world.records:
                out.written.add(effect.name)
        if any(p.type.kind == "name" and p.type.name == "document" for p in tool.params):
            out.documents |= set(world.documents)
    out.records |= out.written
    return out


def _rule_reads(world: CheckedWorld, expr: A.Expr, reach: _Reach) -> _RuleReads:
    """What a rule reads that a bundle withholds, what the offline evaluator does not
    evaluate, and the records it reads. A read inside a definition is located at the
    rule's call of it (the outermost one)."""
    out = _RuleReads()
    for node, origin in _let_closure(world, expr):
        span = origin or node.span
        res = world.resolutions.get(id(node))
        if res is not None:
            if res.kind == "instance":
                out.withheld.append(("the task instance, which a bundle shows only where the "
                                     "episode showed a field's value to a participant (in a "
                                     "message, a tool's arguments or result, a card); "
                                     "elsewhere it is withheld and the rule not assessed",
                                     span))
            elif res.kind in _WITHHELD_KINDS:
                out.withheld.append((f"{_WITHHELD_KINDS[res.kind]} ({res.name}), which every "
                                     "audit bundle withholds", span))
            elif res.kind in ("record", "document") and res.name not in (
                    reach.records if res.kind == "record" else reach.documents):
                out.withheld.append((f"{res.kind} '{res.name}', which no tool a participant "
                                     "holds reaches, so audit bundles leave the rule out",
                                     span))
            elif res.kind == "record":
                out.records.add(res.name)
            elif res.kind not in _EVALUATED_KINDS:
                out.offline.append(_KIND_WORDS.get(res.kind, res.kind) + f" ({res.name})")
        elif isinstance(node, A.CallExpr) and node.func not in world.lets:
            if node.func in WITHHELD_CALLS:
                out.withheld.append((f"`{node.func}(…)`, whose grader-side material (markers, "
                                     "rubrics) every audit bundle withholds", span))
            elif node.func not in _evaluated_calls():
                out.offline.append(f"`{node.func}(…)`")
    return out


def _other_mechanism(world: CheckedWorld, reach: _Reach) -> bool:
    """Whether a rule other than `policy_rule` can key on the world (the module docstring,
    items 2–4)."""
    return _hides_something(world) or _records_a_vocabulary(world, reach) \
        or _routes_on_policy(world, reach)


def _hides_something(world: CheckedWorld) -> bool:
    for auth in world.authorizations:
        effects = {r.effect for r in auth.rules}
        if (auth.default == "deny" and "allow" in effects) or \
                (auth.default == "allow" and "deny" in effects):
            return True
    return False


def _closed(world: CheckedWorld, t: A.TypeRef) -> bool:
    """A type whose JSON schema is an enum of two or more values."""
    if t.kind == "enum":
        return len(t.members) >= 2
    enum = world.enums.get(t.name) if t.kind == "name" else None
    return enum is not None and len(enum.members) >= 2


def _writes(tool: A.ToolDecl) -> bool:
    return any(isinstance(c, A.AppendClause | A.SetClause) for c in tool.clauses)


def _records_a_vocabulary(world: CheckedWorld, reach: _Reach) -> bool:
    return any(_writes(world.tools[t]) and any(_closed(world, p.type)
                                               for p in world.tools[t].params)
               for t in reach.held)


def _routes_on_policy(world: CheckedWorld, reach: _Reach) -> bool:
    if not any(A.first_clause(p.clauses, A.PolicyTextClause) for p in world.policies.values()):
        return False
    holdings = [{r.name for c in p.clauses if isinstance(c, A.ToolsClause) for r in c.refs}
                for p in world.parties.values() if p.kind == "role"]
    bids = any(sum(t in h for h in holdings) >= 2 and any(
        isinstance(c, A.AppendClause) for c in world.tools[t].clauses) for t in reach.held)
    uneven = any(0 < sum(t in h for h in holdings) < len(holdings) for t in reach.held)
    return bids and uneven
