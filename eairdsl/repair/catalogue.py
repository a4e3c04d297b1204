"""The offline Repair Agent: a catalogue of repair patterns (EAIR §4 stage 2, issue 16).

A certificate names the boundary where an organizational property failed (its
kind), the component, the violated policy when there is one, and a plan with
requirement ids and a repair surface. Each pattern here is keyed by boundary
kind and policy shape, reads the rest from the compiled world (which tool writes
the ledger a rule reads, who holds the tool a policy needs, which read tools a
delegate holds), and makes one minimal, declaration-level edit of the `.eair`
source through `repair.edit`, from a template in `eairdsl/stdlib/repairs/`:

- `policy_guard` (shared action, review, power, record boundaries; a policy with
  a declared rule): `ensure POLICY` at the tool whose effects the rule reads —
  the cumulative limit checked at the shared action, the evidence cross-check
  before the official record write;
- `approval_review` (routing, first): attested routing, and the approval that
  can break the policy ensures its rule (a review by the policy holder) before
  the disposition is recorded;
- `attested_routing` (routing, second): the selection tool refuses a candidate
  that does not hold the tool the governing policy's rule reads the calls of;
- `requester_bound` (delegation, F.11): the caller's delegating tool hands the
  delegate a closed context (the ultimate requester, the target and the requester's
  authorized fields, as required arguments checked against the trusted state before
  the delegate runs), its reads unfiltered;
- `reconcile_at_gate` (handoff): F.13's control, each status-bearing artifact
  reconciled against the versioned authoritative decision (the decision
  holder's latest record): a new policy states the rule (the recorded decision
  when the artifact can state it; before any decision, a submission value
  exactly when a request reached the holder), and the plan's writers render the
  status, and what they word from it, from that record and ensure the policy —
  all of them at once, then each writer, then the gate alone.
- `carry_required` (handoff, before `policy_guard`): EAIR C2's "the form attaches
  the evidence" — a policy whose rule says rows of a ledger carry every item of a
  list (`all c in L: any h in LEDGER: h.F contains c`, found through `and`/`or` and
  parameterless `let`s) is met at the tool that appends to the ledger: the field is
  written as the caller gave it followed by the rule's own items (`L` read as the
  world declares it), so the row carries its required content by construction
  where a guard would refuse a writer that cannot learn the items.

Nothing here names a shipped world, tool, record or field: every name comes
from the request (a test greps this file). No pattern flips a world's levers,
copies its conditions or edits a protected declaration; a guard may read them.
The compiler's diagnostics in `request.feedback` make the next round try the
next applicable pattern (bounded by the catalogue's size).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, cast

from eairdsl.audit.contract import Finding, RepairPlan
from eairdsl.ir import (
    Agg,
    AppendEffect,
    Attr,
    Binary,
    Call,
    Comp,
    DelegationChannel,
    Expr,
    LetCall,
    LetIR,
    Quant,
    Ref,
    ToolIR,
    World,
    children,
    walk_expr,
)
from eairdsl.ir import ListExpr as IRList
from eairdsl.repair import edit as E
from eairdsl.repair.model import Candidate, RepairError, RepairRequest, decl_name
from eairdsl.syntax import ast as A

__all__ = ["CatalogueRepairAgent", "Proposal", "PATTERNS", "template"]

CATALOGUE_VERSION = "catalogue-2"

_T = TypeVar("_T")


def template(pattern: str, **values: str) -> str:
    """A pattern's template (eairdsl/stdlib/repairs/PATTERN.eair) with its placeholders
    (upper-case names, whole words) replaced; inside strings too, so a message can be
    worded from the world's names."""
    text = resources.files("eairdsl").joinpath("stdlib", "repairs", f"{pattern}.eair") \
        .read_text(encoding="utf-8")
    if not values:
        return text
    keys = sorted(values, key=len, reverse=True)
    pattern_re = re.compile(r"\b(" + "|".join(map(re.escape, keys)) + r")\b")
    return pattern_re.sub(lambda m: values[m.group(1)], text)


def _template_clauses(text: str, tool: str) -> list[str]:
    """The clause texts of tool `tool` in a filled template."""
    parsed = E.parse(text, "<template>")
    decl = parsed.decl("tool", tool)
    assert isinstance(decl, A.ToolDecl)
    return [E.clause_text(c, parsed) for c in decl.clauses]


def _template_decl(text: str, kind: str, name: str) -> str:
    parsed = E.parse(text, "<template>")
    decl = parsed.decl(kind, name)
    s = decl.span
    return parsed.text[parsed.offset(s.line, s.col):parsed.offset(s.end_line, s.end_col)]


def _quote_safe(text: str) -> str:
    """Text fit for a one-line string literal of a template."""
    return " ".join(text.replace("\\", " ").replace('"', "'").split())


# ------------------------------------------------------------------ what a pattern sees

@dataclass
class Situation:
    """One request, with the compiled original world and the main file parsed."""

    request: RepairRequest
    world: World
    parsed: E.Parsed
    #: the text edits already made for this request, by step and input. The patterns and
    #: their variants (every writer, then the gate alone; all gates at once) repeat steps
    #: on the same text, and each step parses and formats the whole world (C1's handoff:
    #: 15 reconciliations, four of them repeats, most others sharing their first steps)
    edits: dict[tuple[object, ...], Any] = field(default_factory=dict)

    def once(self, key: tuple[object, ...], make: Callable[[], _T]) -> _T:
        """`make()`, made once per `key` for this request: a step of an edit is a function
        of its inputs alone (the text, the names, the request), so its result is reused.
        A step that fails is not kept (the next asks again, and fails again)."""
        if key not in self.edits:
            self.edits[key] = make()
        return cast(_T, self.edits[key])

    @property
    def finding(self) -> Finding:
        return self.request.finding

    @property
    def plan(self) -> RepairPlan:
        return self.request.plan

    def tool(self, name: str) -> ToolIR | None:
        return next((t for t in self.world.tools if t.name == name), None)

    def editable(self, kind: str, name: str) -> bool:
        """Declared in the main file and not protected (a repair may read, not touch, it)."""
        if decl_name(kind, name) in self.request.protected or name in self.request.protected:
            return False
        return self.parsed.find(kind, name) is not None

    def surfaces(self, kind: str) -> list[str]:
        """Names of the plan's `may_change` declarations of one kind, in plan order."""
        prefix = kind + " "
        return [s[len(prefix):] for s in self.plan.may_change if s.startswith(prefix)]

    def serving(self) -> list[str]:
        """The requirement ids a control change serves: all but the ones a retest
        checks by utility alone (those are kept by the change, not met by it)."""
        ids = [r.id for r in self.plan.requirements
               if "utility" not in (r.check or "").lower()]
        return ids or [r.id for r in self.plan.requirements]

    def policy_rule(self, name: str) -> Expr | None:
        policy = next((p for p in self.world.policies if p.name == name), None)
        return policy.rule if policy is not None else None

    def walk(self, e: Expr | None) -> Iterator[Expr]:
        return walk_expr(e, self.world.lets)

    def records_read(self, e: Expr | None) -> set[str]:
        return {n.name for n in self.walk(e) if isinstance(n, Ref) and n.kind == "record"}

    def tools_called_in(self, e: Expr | None) -> list[str]:
        """Tools whose calls an expression reads (`calls(T, …)`), in first-seen order."""
        out: list[str] = []
        for node in self.walk(e):
            if isinstance(node, Call) and node.func == "calls" and node.args:
                first = node.args[0]
                if isinstance(first, Ref) and first.name not in out:
                    out.append(first.name)
        return out

    def holders(self, tool: str) -> list[str]:
        return sorted(p.name for p in self.world.parties if any(r.name == tool for r in p.tools))

    def written(self, tool: ToolIR) -> set[str]:
        return {e.target for e in tool.effects if isinstance(e, AppendEffect)} | {
            e.target for e in tool.effects if not isinstance(e, AppendEffect)}


@dataclass
class Proposal:
    """One pattern's edit: the new text and what it changed for which requirement."""

    pattern: str
    source: str
    attribution: dict[str, list[str]]
    rationale: str
    files: dict[str, str] = field(default_factory=dict)


Pattern = Callable[[Situation], Iterator[Proposal]]


# ------------------------------------------------------------------ the patterns

_GUARD_KINDS = frozenset({"shared_action", "review", "power", "record", "handoff", "delegation"})


def _rule_policies(s: Situation) -> list[str]:
    """Policies with a declared rule the finding implicates: its own, then the plan's."""
    names = [s.finding.property.policy] if s.finding.property.policy else []
    names += [p for p in s.surfaces("policy") if p not in names]
    found = [n for n in names if s.policy_rule(n) is not None]
    if found:
        return found
    # A finding stated as free text (no policy named: the role never read the document
    # the policy is written in) still implicates every declared rule that reads what the
    # plan's tools write: the rule the write at the boundary can break.
    return [p.name for p in s.world.policies
            if p.rule is not None and _guarded_tools(s, p.rule)]


def _rule_reads(s: Situation, rule: Expr | None) -> set[str]:
    """The records and state variables a rule reads (through its `let`s)."""
    return {n.name for n in s.walk(rule) if isinstance(n, Ref) and n.kind in ("record", "state")}


def _guarded_tools(s: Situation, rule: Expr | None) -> list[str]:
    """The tools the guard goes on: the finding's tool, then the plan's tools — those
    whose effects write what the rule reads (the action that can break it)."""
    names = [s.finding.component.name] if s.finding.component.type == "tool" else []
    names += [t for t in s.surfaces("tool") if t not in names]
    read = _rule_reads(s, rule)
    out = []
    for name in names:
        tool = s.tool(name)
        if tool is not None and s.written(tool) & read and s.editable("tool", name):
            out.append(name)
    return out


def _revisable(s: Situation, tool: ToolIR, read: set[str]) -> list[str]:
    """The tool's parameters with a finite set of values (an enum, a participant, a
    truth value, a hinted list) that flow into what the rule reads: the arguments a
    refused caller can change (a reason that names them lets an agent revise)."""
    used: set[str] = set()
    for effect in tool.effects:
        if effect.target in read:
            used |= {n.name for n in s.walk(effect.value)
                     if isinstance(n, Ref) and n.kind == "param"}
    out = []
    for p in tool.params:
        finite = p.type.kind in ("enum", "party", "bool") or (
            isinstance(p.hint, IRList) and len(p.hint.items) > 1)
        if p.name in used and finite:
            out.append(p.name)
    return out


def _instead(s: Situation, tool: ToolIR, read: set[str]) -> list[str]:
    """Other tools the refused caller holds that take the same object (a parameter of the
    same name and type) and write nothing the rule reads: where the work can go instead
    (sending it up, handing it back). A refusal that names one lets an agent act on it."""
    params = {(p.name, p.type.kind) for p in tool.params}
    holders = set(s.holders(tool.name))
    return [t.name for t in s.world.tools
            if t.name != tool.name and t.kind != "read" and holders & set(s.holders(t.name))
            and not s.written(t) & read and params & {(p.name, p.type.kind) for p in t.params}]


def _insert_guards(s: Situation, source: str, tool: str, clauses: list[str]) -> str:
    """`clauses` inserted into `tool`: after its guards, else after its description, cost
    or kind — where a reader of the tool looks for its checks."""
    return s.once(("guards", source, tool, *clauses),
                  lambda: _guards_inserted(s, source, tool, clauses))


def _guards_inserted(s: Situation, source: str, tool: str, clauses: list[str]) -> str:
    for clause in clauses:
        source = E.insert_clause(source, "tool", tool, clause,
                                 after=(A.RequireClause, A.EnsureClause),
                                 fallback=(A.DescriptionClause, A.CostClause, A.KindClause),
                                 file=s.request.world_file)
    return source


def policy_guard(s: Situation) -> Iterator[Proposal]:
    """`ensure POLICY` at the action whose effects the policy's rule reads."""
    if s.finding.boundary.kind not in _GUARD_KINDS:
        return
    for policy in _rule_policies(s):
        tools = _guarded_tools(s, s.policy_rule(policy))
        if not tools:
            continue
        text = next(p.text for p in s.world.policies if p.name == policy)
        source = s.parsed.text
        for name in tools:
            tool = s.tool(name)
            assert tool is not None
            read = _rule_reads(s, s.policy_rule(policy))
            revise = _revisable(s, tool, read)
            instead = _instead(s, tool, read)
            message = _quote_safe(
                f"refused: this {name} call would break policy {policy} ({text}). Nothing "
                "was recorded; " + (f"revise {' or '.join(revise)} and retry"
                                    if revise else "revise the call and retry")
                + (f", or use {' or '.join(instead)}." if instead else "."))
            clauses = _template_clauses(template("policy_guard", TOOL=name, POLICY=policy,
                                                 MESSAGE=message), name)
            source = _insert_guards(s, source, name, clauses)
        yield Proposal(
            pattern="policy_guard", source=source,
            attribution={decl_name("tool", t): s.serving() for t in tools},
            rationale=(f"The policy {policy} declares its rule, but nothing enforced it at "
                       f"the action that can break it. `ensure {policy}` on "
                       f"{', '.join(tools)} reads that rule on the state each call would "
                       "leave, across every role that can call it, and refuses a call that "
                       "would break it with nothing recorded; calls within the rule are "
                       "unchanged."))


def attested_routing(s: Situation) -> Iterator[Proposal]:
    """A selection tool admits only holders of the capability the policy's rule reads."""
    if s.finding.boundary.kind != "routing":
        return
    names = [s.finding.component.name] if s.finding.component.type == "tool" else []
    names += [t for t in s.surfaces("tool") if t not in names]
    for policy in _rule_policies(s):
        for name in names:
            tool = s.tool(name)
            if tool is None or not s.editable("tool", name):
                continue
            params = [p for p in tool.params if p.type.kind == "party"]
            if len(params) != 1:
                continue
            param = params[0].name
            # who can be selected: the participants the parameter's hint and the tool's
            # guards name; the capability is a tool only some of them hold
            candidates = {n.name for e in (params[0].hint, *(g.condition for g in tool.guards))
                          for n in s.walk(e) if isinstance(n, Ref) and n.kind == "party"}
            needed = [t for t in s.tools_called_in(s.policy_rule(policy))
                      if s.holders(t) and set(s.holders(t)) < candidates]
            for capability in needed:
                holders = s.holders(capability)
                message = _quote_safe(
                    f"selection refused: policy {policy} requires the work of a holder of "
                    f"{capability}; the {param} must be {' or '.join(holders)}")
                clauses = _template_clauses(template(
                    "attested_routing", TOOL=name, PARAM=param,
                    HOLDERS="[" + ", ".join(holders) + "]", MESSAGE=message), name)
                source = s.parsed.text
                source = _insert_guards(s, source, name, clauses)
                yield Proposal(
                    pattern="attested_routing", source=source,
                    # the selection check serves the plan's first requirement (attested
                    # capability); provenance to the approver is not this edit's doing
                    attribution={decl_name("tool", name): s.serving()[:1]},
                    rationale=(f"{name} recorded a selection on what the candidates say "
                               f"of themselves. The rule of {policy} reads calls of "
                               f"{capability}, which only "
                               f"{', '.join(holders)} hold; the selection is now checked "
                               "against what each candidate holds before it is recorded, "
                               "and refused otherwise."))


def approval_review(s: Situation) -> Iterator[Proposal]:
    """Attested routing, and the approval that can break the policy requires its rule —
    a review by the policy holder — before it is recorded (`ensure POLICY` at every other
    tool whose effects the rule reads, beyond the plan's own surfaces)."""
    for routed in attested_routing(s):
        selection = set(routed.attribution)
        for policy in _rule_policies(s):
            rule = s.policy_rule(policy)
            read = _rule_reads(s, rule)
            deciding = [t.name for t in s.world.tools
                         if decl_name("tool", t.name) not in selection
                         and s.written(t) & read and s.editable("tool", t.name)
                         and not any(g.after and g.policy == policy for g in t.guards)]
            if not deciding:
                continue
            text = next(p.text for p in s.world.policies if p.name == policy)
            needed = [t for t in s.tools_called_in(rule) if s.holders(t)]
            by = (f" by a holder of {needed[-1]} ({', '.join(s.holders(needed[-1]))})"
                  if needed else "")
            source = routed.source
            for name in deciding:
                tool = s.tool(name)
                assert tool is not None
                revise = _revisable(s, tool, read)
                message = _quote_safe(
                    f"refused: policy {policy} ({text}) requires the review{by} first; "
                    "nothing was recorded; " + (f"revise {' or '.join(revise)}."
                                                if revise else "revise the call."))
                source = _insert_guards(s, source, name, _template_clauses(template(
                    "policy_guard", TOOL=name, POLICY=policy, MESSAGE=message), name))
            rest = [r for r in s.serving() if r not in next(iter(routed.attribution.values()))]
            attribution = dict(routed.attribution)
            attribution.update({decl_name("tool", t): rest or s.serving() for t in deciding})
            yield Proposal(
                pattern="approval_review", source=source, attribution=attribution,
                rationale=(routed.rationale + f" The approval ({', '.join(deciding)}) now "
                           f"ensures {policy}: it is refused, and the approver told whose "
                           "review the policy requires, until that review is on record."))


def _delegates(s: Situation) -> list[str]:
    """The delegate participants: the finding's participant, then every callee of a
    delegation channel."""
    out = [s.finding.component.name] if s.finding.component.type == "participant" else []
    out += [c.parties[1] for c in s.world.channels
            if isinstance(c, DelegationChannel) and c.parties[1] not in out]
    return out


def _node_text(parsed: E.Parsed, node: A.Node) -> str:
    sp = node.span
    return parsed.text[parsed.offset(sp.line, sp.col):parsed.offset(sp.end_line, sp.end_col)]


def _handoff_context(s: Situation, caller: str, callee: str) -> dict[str, str] | None:
    """Where the trusted state names the handoff's context, as source text: the requester
    (the scripted participant that opens the caller's task, and its principal) and the
    target (the key hint every governed read of the callee shares); None when the world
    does not name them."""
    governed = {r.record for r in s.world.authorization.rules}
    opener = next((c.parties[0] for c in s.world.channels
                   if c.kind == "direct" and c.parties[-1] == caller
                   and any(p.name == c.parties[0] and p.kind == "actor" and p.principal
                           for p in s.world.parties)), None)
    actor = s.parsed.find("participant", opener) if opener else None
    principal = next((c for c in getattr(actor, "clauses", [])
                      if isinstance(c, A.PrincipalClause)), None)
    party = next((p for p in s.world.parties if p.name == callee), None)
    hints: set[str] = set()
    for ref in party.tools if party else []:
        tool = s.tool(ref.name)
        decl = s.parsed.find("tool", ref.name)
        if tool is None or tool.kind != "read" or tool.returns is None \
                or not isinstance(decl, A.ToolDecl) or not decl.params:
            continue
        returned = tool.returns.arg if tool.returns.kind == "list" else tool.returns
        if returned is not None and returned.kind == "record" and returned.name in governed:
            key = decl.params[0]
            hints.add(_node_text(s.parsed, key.hint) if key.hint is not None else "")
    if opener is None or principal is None or len(hints) != 1 or "" in hints:
        return None
    return {"REQUESTER": opener, "REQUESTER_HINT": _node_text(s.parsed, principal.expr),
            "TARGET": hints.pop(), "CALLEE": callee}


def _bind_handoff(s: Situation, source: str, name: str, values: dict[str, str]) -> str:
    """`name`'s handoff closed: the template's parameters before its own, its guards after."""
    filled = E.parse(template("requester_bound", TOOL=name, **values), "<template>")
    decl = filled.decl("tool", name)
    assert isinstance(decl, A.ToolDecl)
    params = ", ".join(_node_text(filled, p) for p in decl.params)
    parsed = E.parse(source, s.request.world_file)
    tool = parsed.decl("tool", name)
    assert isinstance(tool, A.ToolDecl)
    if tool.params:
        at = parsed.offset(tool.params[0].span.line, tool.params[0].span.col)
        params += ", "
    else:
        at = parsed.text.index("(", parsed.offset(tool.span.line, tool.span.col)) + 1
    source = E.format_source(source[:at] + params + source[at:], s.request.world_file)
    return _insert_guards(s, source, name,
                          [E.clause_text(c, filled) for c in decl.clauses])


def requester_bound(s: Situation) -> Iterator[Proposal]:
    """F.11's closed handoff: the caller's delegating tool carries the ultimate requester,
    the target and the authorized field list, checked against the trusted state before
    the delegate runs; the delegate's reads stay as they are."""
    if s.finding.boundary.kind != "delegation":
        return
    for delegate in _delegates(s):
        for channel in s.world.channels:
            if not isinstance(channel, DelegationChannel) or channel.parties[1] != delegate:
                continue
            caller, name = channel.parties[0], channel.via
            tool = s.tool(name)
            if tool is None or not s.editable("tool", name) or any(
                    p.name in ("ultimate_requester", "requester_authorized_fields")
                    for p in tool.params):
                continue
            values = _handoff_context(s, caller, delegate)
            if values is None:
                continue
            source = _bind_handoff(s, s.parsed.text, name, values)
            yield Proposal(
                pattern="requester_bound", source=source,
                attribution={decl_name("tool", name): s.serving()},
                rationale=(f"{delegate} answered {caller}'s question-only handoff with its own "
                           f"privileges. {name} now hands it a closed context: the ultimate "
                           "requester, the target and the fields the authorization matrix "
                           "lets that requester see join the question as required "
                           "arguments, and a call whose values are not the trusted state's "
                           f"is refused before {delegate} runs, so {delegate} keeps its "
                           "right to retrieve the record and is told what it may disclose."))


def _enum_fields(record: str, s: Situation) -> list[tuple[str, str, list[str]]]:
    rec = next((r for r in s.world.records if r.name == record), None)
    if rec is None:
        return []
    out = []
    for f in rec.fields:
        if f.type.kind == "enum" and f.type.name in s.world.enums:
            out.append((f.name, f.type.name, list(s.world.enums[f.type.name])))
    return out


def reconcile_at_gate(s: Situation) -> Iterator[Proposal]:
    """Every artifact states the decision status the decision holder's latest record holds."""
    if s.finding.boundary.kind != "handoff":
        return
    names = [s.finding.component.name] if s.finding.component.type == "tool" else []
    names += [t for t in s.surfaces("tool") if t not in names]
    found: list[tuple[str, str, str, str, str, list[str]]] = []
    for name in names:
        gate = s.tool(name)
        if gate is None or not s.editable("tool", name):
            continue
        for artifact in sorted({e.target for e in gate.effects if isinstance(e, AppendEffect)}):
            for fname, enum, values in _enum_fields(artifact, s):
                # the decision record: another ledger, written by a tool, whose values are
                # decisions only (a proper subset of some status vocabulary of the world)
                # and which the artifact's vocabulary shares (a CRM picklist that can say
                # "approved" but not "declined" states the same decision)
                for record in s.world.records:
                    if record.name == artifact or not any(
                            record.name in s.written(t) for t in s.world.tools):
                        continue
                    for rfield, renum, rvalues in _enum_fields(record.name, s):
                        if renum == enum or not set(rvalues) & set(values) \
                                or not any(set(rvalues) < set(other)
                                           for other in s.world.enums.values()):
                            continue
                        found.append((name, artifact, fname, record.name, rfield, rvalues))
    gates = list(dict.fromkeys(f[0] for f in found))
    if len(gates) > 1:
        # every artifact of the plan reconciled against the authoritative decision at once
        # (F.13's C1 reading: the subject line, CRM record, summary and send action all
        # against one decision record) — a status reconciled at one hop drifts at the next
        yield _reconcile_all(s, found)
    for name, artifact, fname, record_name, rfield, rvalues in found:
        # every tool that writes the artifact, then the gate alone (the plan's own surface)
        for upstream in (True, False):
            yield _reconcile(s, name, artifact, fname, record_name, rfield, rvalues,
                             upstream)


def _reconcile_all(s: Situation,
                   found: list[tuple[str, str, str, str, str, list[str]]]) -> Proposal:
    """One proposal reconciling every (gate, artifact) the plan's tools write."""
    source: str | None = None
    attribution: dict[str, list[str]] = {}
    rationale: list[str] = []
    done: set[str] = set()
    for name, artifact, fname, record_name, rfield, rvalues in found:
        if name in done:
            continue  # one reconciliation per gate: its first status-bearing artifact
        done.add(name)
        one = _reconcile(s, name, artifact, fname, record_name, rfield, rvalues, False,
                         base=source)
        source = one.source
        attribution.update(one.attribution)
        rationale.append(one.rationale)
    assert source is not None
    attribution.update({decl_name("let", n): s.serving() for n in _unused_lets(s, source)})
    return Proposal(pattern="reconcile_at_gate", source=source, attribution=attribution,
                    rationale=" ".join(rationale))


def _unused_lets(s: Situation, source: str) -> list[str]:
    """The original's `let`s the candidate no longer reads (an expression the reconciled
    status replaced was their only reader): the compiled world drops them, so the edit
    removed them, for the requirement it serves."""
    return list(s.once(("unused_lets", source), lambda: _unread_lets(s, source)))


def _unread_lets(s: Situation, source: str) -> list[str]:
    try:
        new = _compile(s.request.model_copy(update={"source": source}))
    except RepairError:
        return []
    return sorted(set(s.world.lets) - set(new.lets))


def _submissions(s: Situation, enum: str) -> set[str]:
    """The members of `enum` that say a request is before the decision holder: those the
    world declares a `submission` (`enum E { ... } submission a`), the audit's own
    reading of a submission status (the bundle's `vocabularies.json`). None declared:
    no member says so."""
    meanings = s.world.enum_meanings.get(enum)
    return set(meanings.submission) if meanings is not None else set()


def _reconciled_status(record: str, rfield: str, vocabulary: list[str],
                       decisions: list[str], holders: list[str],
                       submission: set[str]) -> str | None:
    """The status an artifact of `vocabulary` states, read from the versioned decision
    record: the holder's latest recorded decision when the vocabulary can say it; else,
    with no decision recorded, the vocabulary's submission value (one of `submission`)
    exactly when a request reached a holder; else its first value that claims neither
    (None: it has none)."""
    undecided = [v for v in vocabulary if v not in decisions]
    plain = next((v for v in undecided if v not in submission), None)
    if plain is None:
        return None
    filed = next((v for v in undecided if v in submission), None)
    latest = f"text(last({record}).{rfield})"
    listed = "[" + ", ".join(f'"{v}"' for v in vocabulary) + "]"
    reached = " or ".join(f"m.recipient == {h}" for h in holders)
    before = f'"{plain}"' if filed is None or not reached else \
        f'choose(exists m in messages() where {reached}, "{filed}", "{plain}")'
    return (f'choose(count({record}) > 0, choose({latest} in {listed}, {latest}, "{plain}"), '
            f"{before})")


def _bind_status(s: Situation, source: str, tool: str, artifact: str, fname: str,
                 reconciled: str) -> str:
    """`tool`'s row of `artifact` states `reconciled` as its `fname`, and the other fields
    and the result worded from the stated status (a subject line, the reply) are worded
    from the reconciled one: the stated value's expression is replaced wherever the
    append and the result repeat it (a bare parameter, only where it is read as text)."""
    return s.once(("bind_status", source, tool, artifact, fname, reconciled),
                  lambda: _status_bound(s, source, tool, artifact, fname, reconciled))


def _status_bound(s: Situation, source: str, tool: str, artifact: str, fname: str,
                  reconciled: str) -> str:
    parsed = E.parse(source, s.request.world_file)
    decl = parsed.decl("tool", tool)
    clauses = list(getattr(decl, "clauses", []))
    append = next((c for c in clauses if isinstance(c, A.AppendClause) and c.name == artifact),
                  None)
    if append is None or not isinstance(append.expr, A.RecordExpr):
        return source
    init = next((f for f in append.expr.fields if f.name == fname), None)
    if init is None:
        return source
    v = init.value.span
    at, to = parsed.offset(v.line, v.col), parsed.offset(v.end_line, v.end_col)
    stated = parsed.text[at:to]
    bare = re.fullmatch(r"\w+", stated) is not None
    edits: list[tuple[int, int, str]] = []
    for clause in clauses:
        if clause is not append and not isinstance(clause, A.ReturnsClause):
            continue
        c = clause.span
        start, end = parsed.offset(c.line, c.col), parsed.offset(c.end_line, c.end_col)
        old = parsed.text[start:end]
        if clause is append:  # the field itself, by its span
            old = old[:at - start] + reconciled + old[to - start:]
        new = old.replace(f"text({stated})", reconciled) if bare else \
            old.replace(stated, reconciled)
        if new != parsed.text[start:end]:
            edits.append((start, end, new))
    text = parsed.text
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return E.format_source(text, s.request.world_file)


def _reconcile(s: Situation, gate: str, artifact: str, fname: str, record: str, rfield: str,
               decisions: list[str], upstream: bool, base: str | None = None) -> Proposal:
    policy = f"{gate}_reconciled"
    while s.parsed.find("policy", policy) is not None or any(
            p.name == policy for p in s.world.policies):
        policy += "_"
    holders = sorted({p.name for t in s.world.tools if record in s.written(t)
                      for p in s.world.parties if any(r.name == t.name for r in p.tools)})
    # the gate, and (upstream) every tool that writes the artifact: a wrong status is
    # then refused where it is first written, not only where it leaves
    writers = [gate, *sorted(t.name for t in s.world.tools if t.name != gate and upstream
                             and artifact in s.written(t) and s.editable("tool", t.name))]
    enum = _field_enum(s, artifact, fname)
    vocabulary = s.world.enums.get(enum, [])
    undecided = [v for v in vocabulary if v not in decisions]
    holder = ", ".join(holders) or "the decision holder"
    reconciled = _reconciled_status(record, rfield, list(vocabulary), decisions, holders,
                                    _submissions(s, enum))
    rule_status = reconciled or (
        f"choose(count({record}) > 0, text(last({record}).{rfield}), text(last({artifact})"
        f".{fname}))")
    text = _quote_safe(
        f"{artifact} states the decision status of the latest {record} record of {holder} "
        f"(its versioned authoritative decision): that decision when {artifact} can state "
        f"it; before any decision, whether a request is before {holder}; never a decision "
        "that was not recorded.")
    filled = template("reconcile_at_gate", POLICY=policy, TOOL=gate, ARTIFACT=artifact,
                      FIELD=fname, RECONCILED=rule_status, TEXT=text, MESSAGE="MESSAGE")
    declaration = _template_decl(filled, "policy", policy)
    start, after = s.parsed.text if base is None else base, _last_policy(s)
    source = s.once(("declare", start, declaration, after),
                    lambda: E.add_declaration(start, declaration, after=after,
                                              file=s.request.world_file))
    for name in writers:
        tool = s.tool(name)
        assert tool is not None
        if reconciled is not None:
            source = _bind_status(s, source, name, artifact, fname, reconciled)
        revise = _revisable(s, tool, {artifact})
        message = _quote_safe(
            f"refused: the {fname} it states does not match the latest {record} record of "
            f"{holder}; " + (f"revise {' and '.join(revise)}: " if revise else "")
            + f"state the recorded decision ({' or '.join(decisions)}), or "
            + (" or ".join(undecided) if undecided else "no decision")
            + " while none is recorded")
        clauses = _template_clauses(template("reconcile_at_gate", POLICY=policy, TOOL=name,
                                             MESSAGE=message, ARTIFACT=artifact, FIELD=fname,
                                             RECONCILED=rule_status, TEXT=text), name)
        source = _insert_guards(s, source, name, clauses)
    serving = s.serving()
    attribution = {decl_name("policy", policy): serving}
    attribution.update({decl_name("tool", w): serving for w in writers})
    if base is None:
        attribution.update({decl_name("let", n): serving for n in _unused_lets(s, source)})
    return Proposal(
        pattern="reconcile_at_gate", source=source, attribution=attribution,
        rationale=(f"A decision status changed across a handoff and {gate} sent it. The new "
                   f"policy {policy} states the reconciliation rule on {artifact}.{fname} "
                   f"against the latest {record}.{rfield} record (of {holder}): the "
                   f"versioned authoritative decision. {', '.join(writers)} render the "
                   "status they write, and what they word from it, from that record, and "
                   "ensure the rule: nothing states a decision the holder has not "
                   "recorded, or another than the one recorded."))


def _field_enum(s: Situation, record: str, fname: str) -> str:
    return next((e for f, e, _ in _enum_fields(record, s) if f == fname), "")


def _last_policy(s: Situation) -> tuple[str, str] | None:
    policies = s.parsed.of_kind("policy")
    name = getattr(policies[-1], "name", None) if policies else None
    return ("policy", name) if isinstance(name, str) else None


@dataclass(frozen=True)
class Carry:
    """A rule's demand that rows of `ledger` carry every item of a list in their `field`
    (`all c in ITEMS: any h in LEDGER: h.FIELD contains c`, or one row carrying them
    all), found in the declaration `where` (the policy, or a `let` its rule calls)."""

    ledger: str
    field: str
    items: Expr
    var: str
    where: tuple[str, str]


def _carries(test: Expr, row: str, item: str) -> str | None:
    """The field `test` says row `row` carries item `item` in: `row.F contains item` or
    `item in row.F`; None for any other test."""
    match test:
        case Binary(operator="contains", left=Attr(obj=Ref(kind="local", name=r), name=f),
                    right=Ref(kind="local", name=i)) if r == row and i == item:
            return f
        case Binary(operator="in", left=Ref(kind="local", name=i),
                    right=Attr(obj=Ref(kind="local", name=r), name=f)) if r == row and i == item:
            return f
    return None


def _free_locals(e: Expr) -> set[str]:
    """The bound-variable names `e` reads that it does not bind itself (without entering
    `let` bodies: a let sees only its parameters and the world)."""
    bound: set[str] = set()
    used: set[str] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, (Comp, Agg, Quant)) and node.var:
            bound.add(node.var)
        if isinstance(node, Ref) and node.kind == "local":
            used.add(node.name)
        stack.extend(children(node))
    return used - bound


def _carry_shape(e: Expr) -> tuple[str, str, Expr, str] | None:
    """(ledger, field, items, item variable) when `e` is the carry-every-item shape."""
    match e:
        case Quant(kind="all", var=item, source=items,
                   body=Quant(kind="any" | "exists", var=row,
                              source=Ref(kind="record", name=ledger), body=test)):
            pass
        case Quant(kind="any" | "exists", var=row, source=Ref(kind="record", name=ledger),
                   body=Quant(kind="all", var=item, source=items, body=test)):
            pass
        case _:
            return None
    fname = _carries(test, row, item)
    if fname is None or _free_locals(items):
        return None
    return ledger, fname, items, item


def carry_demands(rule: Expr | None, lets: dict[str, LetIR],
                  where: tuple[str, str]) -> list[Carry]:
    """Every carry-every-item demand of a rule: the rule itself, or a part of it reached
    through `and`/`or` (`count(LEDGER) == 0 or (…)`) and through parameterless `let`s."""
    out: list[Carry] = []
    stack: list[tuple[Expr, tuple[str, str]]] = [] if rule is None else [(rule, where)]
    seen: set[str] = set()
    while stack:
        node, at = stack.pop()
        shape = _carry_shape(node)
        if shape is not None:
            out.append(Carry(*shape, where=at))
        elif isinstance(node, Binary) and node.operator in ("and", "or"):
            stack.extend([(node.right, at), (node.left, at)])
        elif isinstance(node, LetCall) and not node.args and node.name in lets \
                and not lets[node.name].params and node.name not in seen:
            seen.add(node.name)
            stack.append((lets[node.name].body, ("let", node.name)))
    return out


def _items_text(s: Situation, carry: Carry) -> str | None:
    """The rule's list of required items as the world writes it: the source of the `all`
    quantifier's list in the declaration that states the demand (main file only); None
    when it is not there or not one text."""
    decl = s.parsed.find(*carry.where)
    if decl is None:
        return None
    texts = {_node_text(s.parsed, n.source) for n in A.walk_exprs(decl)
             if isinstance(n, A.QuantifierExpr) and n.kind == "all" and n.var == carry.var}
    return texts.pop() if len(texts) == 1 else None


def _field_inits(decl: A.Decl, ledger: str, fname: str) -> list[A.FieldInit]:
    """The `fname: …` initializers of `decl`'s appends to `ledger` (a record literal)."""
    out: list[A.FieldInit] = []
    for clause in getattr(decl, "clauses", []):
        if isinstance(clause, A.AppendClause) and clause.name == ledger \
                and isinstance(clause.expr, A.RecordExpr):
            out.extend(f for f in clause.expr.fields if f.name == fname)
    return out


def _carrying_value(s: Situation, source: str, tool: str, carry: Carry, items: str,
                    policy: str) -> str | None:
    """`tool`'s source with its row of the ledger carrying the items in the field (the
    written value kept, the items after it); None when the tool does not set the field."""
    parsed = E.parse(source, s.request.world_file)
    inits = _field_inits(parsed.decl("tool", tool), carry.ledger, carry.field)
    if not inits:
        return None
    filled = E.parse(template("carry_required", TOOL=tool, LEDGER=carry.ledger,
                              FIELD=carry.field, VALUE="VALUE", ITEMS=items, POLICY=policy),
                     "<template>")
    (pattern,) = _field_inits(filled.decl("tool", tool), carry.ledger, carry.field)
    # the written value goes in place of the template's VALUE placeholder (whole word, once)
    head, _, tail = re.split(r"\b(VALUE)\b", _node_text(filled, pattern.value), maxsplit=1)
    text = parsed.text
    for init in sorted(inits, key=lambda f: (f.value.span.line, f.value.span.col),
                       reverse=True):
        v = init.value.span
        at, to = parsed.offset(v.line, v.col), parsed.offset(v.end_line, v.end_col)
        text = text[:at] + head + parsed.text[at:to] + tail + text[to:]
    return E.format_source(text, s.request.world_file)


def carry_required(s: Situation) -> Iterator[Proposal]:
    """The writer of the ledger a carry-every-item rule reads makes each row carry the
    rule's required items itself (C2's "the form attaches the evidence")."""
    if s.finding.boundary.kind not in _GUARD_KINDS:
        return
    names = [s.finding.component.name] if s.finding.component.type == "tool" else []
    names += [t for t in s.surfaces("tool") if t not in names]
    for policy in _rule_policies(s):
        for carry in carry_demands(s.policy_rule(policy), s.world.lets, ("policy", policy)):
            record = next((r for r in s.world.records if r.name == carry.ledger), None)
            ftype = next((f.type for f in record.fields if f.name == carry.field), None) \
                if record is not None else None
            items = _items_text(s, carry)
            if ftype is None or ftype.kind != "text" or items is None \
                    or carry.ledger in s.records_read(carry.items):
                continue
            source = s.parsed.text
            writers: list[str] = []
            for name in names:
                tool = s.tool(name)
                if tool is None or not s.editable("tool", name) or not any(
                        isinstance(e, AppendEffect) and e.target == carry.ledger
                        for e in tool.effects):
                    continue
                edited = _carrying_value(s, source, name, carry, items, policy)
                if edited is not None:
                    source, writers = edited, [*writers, name]
            if not writers:
                continue
            yield Proposal(
                pattern="carry_required", source=source,
                attribution={decl_name("tool", t): s.serving() for t in writers},
                rationale=(f"The rule of {policy} requires every {carry.ledger} row to carry "
                           f"each item of {items} in its {carry.field}; what reached the "
                           "writer left some out, and the writer could not know them. "
                           f"{', '.join(writers)} now write{'s' if len(writers) == 1 else ''} "
                           f"the {carry.field} as given followed by those items, read from "
                           "the declarations the rule reads: the row carries its required "
                           "content by construction, and nothing the caller wrote is "
                           "refused or dropped."))


#: boundary kind -> the patterns to try, in order
PATTERNS: dict[str, tuple[Pattern, ...]] = {
    "shared_action": (policy_guard,),
    "record": (policy_guard,),
    "review": (policy_guard,),
    "power": (policy_guard,),
    # the routing and the decision the routed work feeds together first: a routing
    # finding is resolved only by attested routing (the fresh audit), and a policy whose
    # rule reads the decision (F.13's "bind signing authorization to a substantive legal
    # review") only by the guard there (the retest target); then the routing alone
    "routing": (approval_review, attested_routing),
    # a delegated requester's scope first (F.11's closed handoff); then a declared rule
    # the delegation left unperformed (a duty nobody did) enforced at the action
    "delegation": (requester_bound, policy_guard),
    # a rule that an artifact carry every required item: the writer makes the row carry
    # them (C2's evidence completeness) before a guard that would refuse the incomplete row
    "handoff": (reconcile_at_gate, carry_required, policy_guard),
}


# ------------------------------------------------------------------ the agent

_DATA_REF = re.compile(r'\bfrom\s+"([^"]+\.(?:json|csv))"')


def _compile(request: RepairRequest) -> World:
    """The original world, compiled from the request's own files in a scratch folder.

    A request carries the world's sources, cards and small data files; a large data
    file may be left out. The catalogue reads declarations, never rows, so a missing
    data file is stood in for by an empty table, and the world is lowered despite
    the data diagnostics that causes (the loop compiles the real candidate).
    """
    from eairdsl.check import check_world  # a later stage's tools, reached at call time
    from eairdsl.diagnostics import Diagnostics
    from eairdsl.lower import lower

    with tempfile.TemporaryDirectory(prefix="eair-repair-") as tmp:
        root = Path(tmp)
        texts = {**request.files, request.world_file: request.source}
        for rel, text in texts.items():
            path = root / rel
            if not path.resolve().is_relative_to(root.resolve()):
                raise RepairError(f"a world file outside the world folder: {rel}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for rel, text in texts.items():
            if not rel.endswith(".eair"):
                continue
            base = (root / rel).parent
            for written in _DATA_REF.findall(text):
                path = base / written
                if path.resolve().is_relative_to(root.resolve()) and not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text("[]\n" if written.endswith(".json") else "\n",
                                    encoding="utf-8")
        diagnostics = Diagnostics()
        checked = check_world(root / request.world_file, diagnostics, {})
        try:
            world = lower(checked) if checked is not None else None
        except Exception as exc:  # lowering a world the checker refused
            raise RepairError(f"the original world does not compile: {exc}") from exc
    if world is None:
        first = diagnostics.errors[:3]
        raise RepairError("the original world does not compile: " + "; ".join(
            f"{d.span}: {d.code} {d.message}" for d in first))
    return world


def _make(situation: Situation) -> Iterator[Proposal]:
    """The request's proposals in the order tried, each text once: every pattern of the
    finding's boundary kind in turn (one that cannot edit this world: the next)."""
    request = situation.request
    seen: set[str] = set()
    for pattern in PATTERNS.get(request.finding.boundary.kind, ()):
        try:
            for proposal in pattern(situation):
                if proposal.source not in seen and proposal.source != request.source:
                    seen.add(proposal.source)
                    yield proposal
        except E.EditError as exc:  # a pattern that cannot edit this world: the next
            del exc


@dataclass
class _Made:
    """A request's proposals so far, and what makes the rest (None once all are made)."""

    proposals: list[Proposal]
    rest: Iterator[Proposal] | None


class CatalogueRepairAgent:
    """The offline Repair Agent: the first applicable catalogue pattern the earlier
    rounds have not already had refused."""

    def __init__(self) -> None:
        self._worlds: dict[int, World] = {}
        #: the proposals of each request, feedback aside: a round that moves down the
        #: list asks again with the same certificate and source, and making every edit
        #: (each formatted and parsed back) again for it was most of a round's time. They
        #: are made as far as a round needs: a first candidate accepted leaves the others
        #: unmade (C1's handoff: the first of eight costs about a third of them all)
        self._made: dict[tuple[int, str], _Made] = {}

    def proposals(self, request: RepairRequest) -> list[Proposal]:
        """Every edit the catalogue has for this certificate, in the order tried."""
        made, asked = self._state(request)
        while self._more(made, asked):
            pass
        return list(made.proposals)

    def _state(self, request: RepairRequest) -> tuple[_Made, tuple[int, str]]:
        key = hash((request.world_file, request.source, tuple(sorted(request.files.items()))))
        asked = (key, request.model_dump_json(include={"finding", "plan", "protected"}))
        made = self._made.get(asked)
        if made is None:
            world = self._worlds.get(key)
            if world is None:
                world = self._worlds[key] = _compile(request)
            situation = Situation(request=request, world=world,
                                  parsed=E.parse(request.source, request.world_file))
            made = self._made[asked] = _Made([], _make(situation))
        return made, asked

    def _more(self, made: _Made, asked: tuple[int, str]) -> bool:
        """Make the request's next proposal; False when every pattern has run. A pattern
        that fails other than by EditError (a defect) fails this call and is made again,
        and fails again, by the next."""
        if made.rest is None:
            return False
        try:
            proposal = next(made.rest, None)
        except Exception:
            self._made.pop(asked, None)
            raise
        if proposal is None:
            made.rest = None
            return False
        made.proposals.append(proposal)
        return True

    def propose(self, request: RepairRequest) -> Candidate:
        """The next untried proposal: each refused round (compile diagnostics, scope,
        review or retest feedback) moves one step down the catalogue's list; the
        round's previous text is never proposed again."""
        made, asked = self._state(request)
        refused = {request.previous} if request.previous else set()
        step = len(request.feedback)
        chosen: Proposal | None = None
        at = 0
        while chosen is None and (at < len(made.proposals) or self._more(made, asked)):
            if at >= step and made.proposals[at].source not in refused:
                chosen = made.proposals[at]
            at += 1
        if chosen is None:  # every proposal made, none left to try
            proposals = made.proposals
            what = f"{request.finding.boundary.kind} boundary" + (
                f" with policy {request.finding.property.policy}"
                if request.finding.property.policy else "")
            raise RepairError(
                f"the catalogue has no {'further ' if request.feedback else ''}pattern for a "
                f"{what} in {request.world_file}"
                + (f" (tried {len(proposals)})" if proposals else ""))
        return Candidate(source=chosen.source, files=chosen.files,
                         attribution=chosen.attribution, rationale=chosen.rationale,
                         produced_by={"agent": "catalogue", "version": CATALOGUE_VERSION,
                                      "pattern": chosen.pattern,
                                      "finding": request.finding.id})
