"""The offline Repair Reviewer: Appendix D.1's four dimensions, checked mechanically.

EAIR §4, stage 3: an independent reviewer compares W and W′ before anything is
rerun. `MechanicalReviewer` decides each dimension from the semantic diff
(`eairdsl/diff.py`, the request's `diff`), the finding, the plan and the
candidate's attribution, and — when the request names both world folders —
from the two compiled worlds (who holds which tool, channels, the
authorization matrix, what a guard reads). It is deterministic: the same
request gives the same review, with reasons in sorted order.

- **plan_fidelity**: every requirement of the plan is served by a changed
  declaration attributed to it, and every changed declaration is a plan
  surface (`may_change`) or attributed to a requirement of the plan; the
  attribution names only declarations the diff shows changed and only the
  plan's requirement ids. *Preservation* requirements — the ones that ask that
  legitimate work still completes (id `task-kept`, or a check that measures
  task utility against the baseline) — are decided by the retest's Retain,
  not by an edit, so no change needs to serve them (one may).
- **risk_resolution**: the violated property is now enforced at the
  boundary's action. The boundary's actions are the tool on the finding's edge
  (`tool:NAME->state`, `actor->tool:NAME`, `tool:NAME->actor`), the finding's
  component tool, and for an edge between participants (`a->b`) the channels
  between them and the tools they are used through (with the compiled worlds:
  the tools one of them holds that delegate to the other, or that send
  messages). Enforcement is a changed or added guard, `ensure`, `acl`,
  propagation, `sends to` or parameter list on such a tool, on a tool the plan
  names as a surface, or on a tool held by a participant the plan or the edge
  names; a changed channel on the edge; or (compiled) a guard, `acl` or
  propagation of such a tool that a changed lever switches on or a changed
  `let` it calls tightens. With the compiled worlds and a finding that names a
  policy with a rule, enforcement is also an effect of such a tool on a ledger or
  state the rule reads that is kept (same target, kind and `when`, still reading
  all its old value read) and now reads something more the rule reads (not that
  ledger, not the task instance alone): the written row satisfies the rule by
  construction (the catalogue's `carry_required`). A card that only *asks* a role
  to behave is not enforcement. When the finding names a policy with a rule, a new
  guard must be about what the rule is about: read something it reads (the
  policy's ledger, its limit, …) or name a participant or tool it names (a
  routing rule is about who); `ensure POLICY` checks the rule itself. A repair that rewrites or
  drops that policy redefines the property instead of enforcing it and fails.
- **introduced_risk**: nothing is granted that the original did not have — no
  new participant or tool, no tool newly held by a participant, no new
  channel, no new `allow` in the authorization matrix, no raised authority, no
  tool whose kind changed — and no existing control is weakened (a guard
  removed or made conditional, an `acl` or propagation removed). Nothing the
  task needs is removed: a removed participant or tool fails.
- **proportionality**: the edit is the size and kind the plan asks for: every
  changed declaration other than helpers (`let`s, schemas, enums, and new
  ledgers, states, levers or policies a control keeps its bookkeeping in or
  ensures, e.g. from an imported stdlib module) is a plan surface, one of the
  boundary's actions, or a tool of a participant the plan or the edge names (the
  same control on each of a role's tools); helpers are at most `helper_limit`;
  nothing but a helper or a channel on the boundary edge is removed (never a
  role, a tool, a record or a policy).

Approve iff all four pass; a rejection lists one required change per problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from eairdsl.audit.contract import Finding, RepairPlan, Requirement
from eairdsl.diff import Change
from eairdsl.ir import GuardIR, ToolIR, World, channel_via, walk_expr
from eairdsl.ir import Ref as RefNode
from eairdsl.reads import INSTANCES, Ref, channel_label, expr_reads, read_graph, reads
from eairdsl.repair.model import (
    DimensionVerdict,
    RepairError,
    Review,
    ReviewRequest,
    decl_name,
    parse_entry,
)

__all__ = ["MechanicalReviewer", "REVIEWER_VERSION", "is_preservation", "boundary_parties",
           "parse_entry"]

#: bumped when a rule of the mechanical review changes (recorded in `Review.reviewer`);
#: 2: an effect change at the boundary that writes what the violated rule reads enforces
REVIEWER_VERSION = 2
#: kinds that only support a control: always proportionate, never a surface
_HELPER_KINDS = frozenset({"let", "schema", "enum"})
#: kinds a control may *add*: its bookkeeping (a ledger of checks, a flag, a switch) or the
#: rule it ensures (a new policy grants nothing)
_HELPER_ADDED = frozenset({"record", "state", "lever", "policy"})
#: paths of a tool's declaration that enforce something at its call
_ENFORCING = ("guards", "acl", "acl_when", "propagates", "propagates_when", "sends_to",
              "params")
_UTILITY = re.compile(r"\butility\b", re.IGNORECASE)


def is_preservation(requirement: Requirement) -> bool:
    """A requirement that asks that legitimate work still completes (task-kept): decided by
    the retest's utility retention, so no edit has to serve it."""
    return requirement.id == "task-kept" or bool(_UTILITY.search(requirement.check or ""))


def boundary_parties(edge: str) -> tuple[list[str], list[str]]:
    """The tools and participants an edge ref names (`tool:X->state` -> (["X"], []))."""
    tools: list[str] = []
    parties: list[str] = []
    for raw in edge.split("->"):
        side = raw.strip()
        if side.startswith("tool:"):
            tools.append(side[len("tool:"):])
        elif side and side != "state":
            parties.append(side)
    return tools, parties


@dataclass
class _Worlds:
    old: World
    new: World


@dataclass
class _Dim:
    """One dimension's findings: problems (each with what must change) and notes."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, problem: str, change: str) -> None:
        if (problem, change) not in self.problems:
            self.problems.append((problem, change))

    def verdict(self, passed_reason: str) -> DimensionVerdict:
        if self.problems:
            return DimensionVerdict(passed=False,
                                    reason="; ".join(p for p, _ in self.problems))
        return DimensionVerdict(passed=True,
                                reason="; ".join([passed_reason, *self.notes]))


class MechanicalReviewer:
    """`Reviewer` that decides D.1's four dimensions by rule (module docstring).

    `helper_limit` bounds the helper declarations (lets, schemas, enums, new
    ledgers/states/levers) one repair may add or change. With `compile=False`, or
    when the request names no folders, only the diff is read (grants, holders
    and what a guard reads are then judged from the diff's paths alone).
    """

    def __init__(self, helper_limit: int = 12, compile: bool = True) -> None:
        if helper_limit < 0:
            raise ValueError(f"helper_limit must be 0 or more, not {helper_limit}")
        self.helper_limit = helper_limit
        self.compile = compile

    def review(self, request: ReviewRequest) -> Review:
        changes = _changes(request.diff)
        worlds = self._worlds(request) if self.compile else None
        ctx = _Context(request.finding, request.plan, changes, request.attribution, worlds)
        fidelity = ctx.plan_fidelity()
        resolution = ctx.risk_resolution()
        introduced = ctx.introduced_risk()
        proportion = ctx.proportionality(self.helper_limit)
        dims = {"risk_resolution": resolution, "plan_fidelity": fidelity,
                "introduced_risk": introduced, "proportionality": proportion}
        verdicts = {
            "risk_resolution": resolution.verdict(ctx.resolution_summary()),
            "plan_fidelity": fidelity.verdict(ctx.fidelity_summary()),
            "introduced_risk": introduced.verdict(
                "grants no new participant, tool, holder, channel, permission or authority, "
                "weakens no control and removes nothing the task needs"),
            "proportionality": proportion.verdict(ctx.proportion_summary()),
        }
        required = list(dict.fromkeys(c for d in dims.values() for _, c in d.problems))
        approve = all(v.passed for v in verdicts.values())
        return Review(**verdicts, verdict="approve" if approve else "reject",
                      required_changes=[] if approve else required,
                      reviewer={"kind": "mechanical", "version": REVIEWER_VERSION,
                                "compiled": worlds is not None})

    @staticmethod
    def _worlds(request: ReviewRequest) -> _Worlds | None:
        if request.original_dir is None or request.candidate_dir is None:
            return None
        given = request.compiled_worlds()
        if given is not None:  # the loop compiled both this round: not compiled again
            return _Worlds(*given)
        from eairdsl.compiler import compile_world

        out: list[World] = []
        for label, folder in (("original", request.original_dir),
                              ("candidate", request.candidate_dir)):
            path = Path(folder) / request.world_file
            result = compile_world(path)
            if not result.ok or result.world is None:
                first = next((d for d in result.diagnostics if d.is_error), None)
                raise RepairError(f"the {label} world {path} does not compile"
                                  + (f": {first.message}" if first is not None else ""))
            out.append(result.world)
        return _Worlds(out[0], out[1])


def _changes(diff: dict[str, Any]) -> list[Change]:
    """The diff's changes (diff.WorldDiff as data, or `eairc diff --json`)."""
    raw = diff.get("changes") if isinstance(diff, dict) else None
    if not isinstance(raw, list):
        raise RepairError("the review request's diff has no `changes` list (expected "
                          "eairc diff --json / diff.WorldDiff data)")
    try:
        return [Change.model_validate(c) for c in raw]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RepairError(f"the review request's diff has a malformed change at {where}: "
                          f"{first['msg']}") from None


def _label(ref: tuple[str, str]) -> str:
    return decl_name(*ref)


class _Context:
    """What every dimension reads: the diff by ref, the plan's surfaces, the boundary."""

    def __init__(self, finding: Finding, plan: RepairPlan, changes: list[Change],
                 attribution: dict[str, list[str]], worlds: _Worlds | None) -> None:
        self.finding = finding
        self.plan = plan
        self.worlds = worlds
        self.changes: dict[tuple[str, str], Change] = {
            (c.kind, c.name): c for c in changes if c.kind != "protected"}
        self.surfaces = {parse_entry(e) for e in plan.may_change}
        self.attribution: dict[tuple[str, str], list[str]] = {}
        for key, ids in attribution.items():
            self.attribution.setdefault(parse_entry(key), []).extend(ids)
        self.edge_tools, self.edge_parties = boundary_parties(finding.boundary.edge)
        self.actions = self._actions()
        self.reach = self._reach()
        #: filled in by the dimensions, read by the summaries
        self.enforcing: list[str] = []
        self.property_note: str | None = None
        self.served: dict[str, list[str]] = {}
        self.touched: tuple[list[str], list[str]] = ([], [])

    # ------------------------------------------------------------ lookups
    def in_entries(self, ref: tuple[str, str], entries: set[tuple[str, str]]) -> bool:
        return ref in entries or ("*", ref[1]) in entries

    def attributed(self, ref: tuple[str, str]) -> list[str]:
        return self.attribution.get(ref, []) + self.attribution.get(("*", ref[1]), []) \
            if ref[0] != "*" else self.attribution.get(ref, [])

    def _actions(self) -> set[tuple[str, str]]:
        """The boundary's actions: the tools and channels where the property must hold."""
        out: set[tuple[str, str]] = {("tool", t) for t in self.edge_tools}
        if self.finding.component.type == "tool":
            out.add(("tool", self.finding.component.name))
        pair = set(self.edge_parties)
        if len(pair) == 2:
            for kind, name in self.changes:
                if kind == "channel" and pair <= _channel_parties(name):
                    out.add((kind, name))
        if self.worlds is not None:
            for world in (self.worlds.old, self.worlds.new):
                out |= _edge_actions(world, self.edge_parties)
        return out

    def _reach(self) -> set[tuple[str, str]]:
        """Tools held by a participant the plan names as a surface or the edge names: the
        same control on each of a role's tools is a change of that role's actions."""
        if self.worlds is None:
            return set()
        parties = {n for k, n in self.surfaces if k in ("participant", "*")}
        parties |= set(self.edge_parties)
        out: set[tuple[str, str]] = set()
        for world in (self.worlds.old, self.worlds.new):
            for party in world.parties:
                if party.name in parties:
                    out |= {("tool", t.name) for t in party.tools}
        return out

    def is_surface(self, ref: tuple[str, str]) -> bool:
        return self.in_entries(ref, self.surfaces)

    # ------------------------------------------------------------ plan fidelity
    def plan_fidelity(self) -> _Dim:
        dim = _Dim()
        ids = {r.id for r in self.plan.requirements}
        for ref, claimed in sorted(self.attribution.items()):
            for rid in sorted(set(claimed) - ids):
                dim.fail(f"{_label(ref)} is attributed to {rid!r}, which is not a requirement "
                         f"of the plan ({', '.join(sorted(ids))})",
                         f"attribute {_label(ref)} to one of the plan's requirement ids")
            if ref[0] == "*":
                known = any(name == ref[1] for _, name in self.changes)
            else:
                known = ref in self.changes
            if not known:
                dim.fail(f"the attribution names {_label(ref)}, which the diff does not show "
                         "changed",
                         f"drop {_label(ref)} from the attribution or make the change it "
                         "claims")
        served: dict[str, list[str]] = {}
        for ref in self.changes:
            for rid in self.attributed(ref):
                served.setdefault(rid, []).append(_label(ref))
        for req in self.plan.requirements:
            if is_preservation(req) or req.id in served:
                continue
            dim.fail(f"requirement {req.id} ({req.text}) is served by no changed declaration",
                     f"make the change requirement {req.id} asks for and attribute it to "
                     f"{req.id}")
        for ref in sorted(self.changes):
            if not self.is_surface(ref) and not (set(self.attributed(ref)) & ids):
                dim.fail(f"{_label(ref)} changed but is neither a plan surface nor attributed "
                         "to a requirement",
                         f"attribute the change of {_label(ref)} to the requirement it serves, "
                         "or revert it")
        self.served = served
        return dim

    def fidelity_summary(self) -> str:
        parts = [f"{rid} by {', '.join(sorted(refs))}"
                 for rid, refs in sorted(self.served.items())]
        kept = [r.id for r in self.plan.requirements if is_preservation(r)]
        out = "every requirement is served by a changed declaration (" + "; ".join(parts) + ")"
        if kept:
            out += f"; {', '.join(kept)} (task preserved) is left to the retest's Retain"
        return out

    # ------------------------------------------------------------ risk resolution
    def risk_resolution(self) -> _Dim:
        dim = _Dim()
        policy = self.finding.property.policy
        if policy is not None:
            change = self.changes.get(("policy", policy))
            if change is not None and (change.change == "removed" or any(
                    d.startswith(("rule", "text")) for d in change.details)):
                dim.fail(f"policy {policy}, the violated property, is "
                         f"{'removed' if change.change == 'removed' else 'rewritten'} instead "
                         "of enforced",
                         f"leave policy {policy}'s rule and text as they are and enforce it at "
                         "the boundary's action")
        where = sorted(self.actions | self.reach | {r for r in self.surfaces if r[0] == "tool"})
        found: list[str] = []
        for ref in where:
            change = self.changes.get(ref)
            if change is None or ref[0] not in ("tool", "channel"):
                continue
            if ref[0] == "channel" and change.change == "changed":
                found.append(f"{_label(ref)} ({'; '.join(change.details[:2])})")
            elif ref[0] == "tool" and change.change == "changed":
                paths = [d for d in change.details if d.startswith(_ENFORCING)]
                if paths:
                    found.append(f"{_label(ref)} ({'; '.join(paths[:2])})")
                elif policy is not None and any(d.startswith("effects") for d in
                                                change.details):
                    carried = self._carried(ref[1], policy)
                    if carried is not None:
                        found.append(f"{_label(ref)} ({carried})")
        if self.worlds is not None:
            found.extend(self._switched_on(where))
        self.enforcing = found
        if not found:
            named = ", ".join(_label(r) for r in sorted(self.actions)) or \
                f"the edge {self.finding.boundary.edge}"
            dim.fail(f"no guard, acl, propagation or channel changed at the boundary's action "
                     f"({named}); the property is not enforced where it failed",
                     f"enforce {self._property()} at {named}: a guard that refuses or escalates "
                     "the action that breaks it")
        elif policy is not None and self.worlds is not None:
            self._reads_property(dim, policy)
        return dim

    def _carried(self, name: str, policy: str) -> str | None:
        """An effect change that makes what the tool writes satisfy the rule by construction:
        an effect of tool `name` on a ledger or state the policy's rule reads, kept (same
        target, kind and `when`, its old value's reads all still read) and now reading
        something more that the rule reads (an item list, a record, a `let` of the rule;
        not the written ledger itself, not the task instance alone). Only with both
        compiled worlds; None otherwise."""
        if self.worlds is None:
            return None
        old, new = self.worlds.old, self.worlds.new
        declared = next((p for p in new.policies if p.name == policy), None)
        before, after = _tool(old, name), _tool(new, name)
        if declared is None or declared.rule is None or before is None or after is None:
            return None
        graph_old, graph_new = read_graph(old), read_graph(new)
        wanted = {r for r in reads(new, ("policy", policy), graph=graph_new)
                  if r != INSTANCES and r[0] != "document"}
        for target in sorted({e.target for e in after.effects}):
            was = [e for e in before.effects if e.target == target]
            now = [e for e in after.effects if e.target == target]
            if not ({("record", target), ("state", target)} & wanted) or len(was) != len(now) \
                    or any((a.op, a.when) != (b.op, b.when) for a, b in zip(was, now, strict=True)):
                continue
            kept = set(_through_lets({r for e in was for r in expr_reads(e.value)}, graph_old))
            read = set(_through_lets({r for e in now for r in expr_reads(e.value)}, graph_new))
            added = (read - kept) & (wanted - {("record", target), ("state", target)})
            if kept <= read and added:
                shown = ", ".join(_label(r) for r in sorted(added)[:4])
                return (f"what it writes to {target} now carries {shown}, read as policy "
                        f"{policy}'s rule reads it")
        return None

    def _property(self) -> str:
        prop = self.finding.property
        if prop.policy:
            return f"policy {prop.policy}"
        return f"the property ({prop.text})" if prop.text else "the property"

    def _switched_on(self, where: list[tuple[str, str]]) -> list[str]:
        """Controls of the boundary's tools that a changed lever or `let` now changes."""
        assert self.worlds is not None
        new = self.worlds.new
        changed_levers = {n for k, n in self.changes if k == "lever"}
        changed_lets = {n for k, n in self.changes if k == "let"}
        graph = read_graph(new)
        out: list[str] = []
        for kind, name in where:
            tool = _tool(new, name) if kind == "tool" else None
            if tool is None:
                continue
            for what, expr in _controls(tool):
                direct = set(expr_reads(expr))
                levers = sorted(n for k, n in direct if k == "lever" and n in changed_levers)
                lets = sorted(n for k, n in _through_lets(direct, graph)
                              if k == "let" and n in changed_lets)
                if levers:
                    out.append(f"tool {name} ({what} switched by lever {', '.join(levers)})")
                elif lets:
                    out.append(f"tool {name} ({what} through changed let {', '.join(lets)})")
        return list(dict.fromkeys(out))

    def _reads_property(self, dim: _Dim, policy: str) -> None:
        """A new guard must be about what the policy's rule is about: read something it
        reads, or name a participant or tool it names (a routing rule is about who)."""
        assert self.worlds is not None
        old, new = self.worlds.old, self.worlds.new
        rule = next((p for p in new.policies if p.name == policy), None)
        if rule is None or rule.rule is None:
            return
        graph = read_graph(new)
        wanted = set(reads(new, ("policy", policy), graph=graph)) - {INSTANCES}
        wanted = {r for r in wanted if r[0] != "document"} | _identities(rule.rule, new)
        fresh: list[tuple[str, GuardIR]] = []
        for kind, name in sorted(self.actions | self.surfaces | self.reach):
            if kind != "tool":
                continue
            before, after = _tool(old, name), _tool(new, name)
            if after is None:
                continue
            kept = {_guard_key(g, when=True) for g in before.guards} \
                if before is not None else set()
            fresh.extend((name, g) for g in after.guards
                         if _guard_key(g, when=True) not in kept)
        if not fresh:
            return  # enforcement by acl, propagation, channel, lever or let: checked above
        for name, guard in fresh:
            if getattr(guard, "policy", None) == policy:  # `ensure POLICY`: its own rule
                self.property_note = f"tool {name} ensures policy {policy}'s rule"
                return
            seen = set(_through_lets(set(expr_reads(guard.condition)), graph)) \
                | _identities(guard.condition, new)
            if seen & wanted:
                shared = ", ".join(_label(r) for r in sorted(seen & wanted)[:6])
                self.property_note = (f"the new guard on tool {name} is about {shared}, "
                                      f"as policy {policy}'s rule is")
                return
        shown = sorted(wanted)
        names = ", ".join(_label(r) for r in shown[:8]) + (" …" if len(shown) > 8 else "")
        dim.fail(f"the new guard(s) decide on nothing policy {policy}'s rule is about "
                 f"({names or 'nothing'})",
                 f"make the guard decide on what policy {policy} is about ({names})")

    def resolution_summary(self) -> str:
        out = f"{self._property()} is now enforced at " + ", ".join(self.enforcing)
        return out + (f"; {self.property_note}" if self.property_note else "")

    # ------------------------------------------------------------ introduced risk
    def introduced_risk(self) -> _Dim:
        dim = _Dim()
        for (kind, name), change in sorted(self.changes.items()):
            ref = _label((kind, name))
            if kind in ("participant", "tool") and change.change == "added":
                what = "participant" if kind == "participant" else "capability"
                dim.fail(f"adds {ref}: a new {what} the original did not have",
                         f"remove the new {ref}; enforce the plan with the existing ones")
            elif kind in ("participant", "tool") and change.change == "removed":
                dim.fail(f"removes {ref}, which the task needs",
                         f"keep {ref}")
            elif kind == "channel" and change.change == "added":
                dim.fail(f"adds {ref}: a new path for messages",
                         f"remove the new {ref}")
            if change.change != "changed":
                continue
            if self.worlds is None:
                self._risk_from_paths(dim, kind, name, change)
        if self.worlds is not None:
            self._risk_from_worlds(dim)
        return dim

    def _risk_from_paths(self, dim: _Dim, kind: str, name: str, change: Change) -> None:
        """Without the compiled worlds: what the diff's paths show was granted or dropped."""
        ref = _label((kind, name))
        for d in change.details:
            if kind == "participant" and d.startswith("tools") and (": +" in d or "->" in d):
                dim.fail(f"{ref}: its tools changed ({d}); a participant may gain no tool",
                         f"leave {ref}'s tools as they are")
            elif kind == "participant" and d.startswith(("authority", "authority_expr")):
                dim.fail(f"{ref}: its authority changed ({d})", f"keep {ref}'s authority")
            elif kind == "tool" and d.startswith(("guards", "acl", "propagates")) \
                    and (": -" in d or d.endswith(": removed")):
                dim.fail(f"{ref}: a control is removed ({d})",
                         f"keep {ref}'s existing controls")
            elif kind == "tool" and d.startswith("kind"):
                dim.fail(f"{ref}: its kind changed ({d})", f"keep {ref}'s kind")
            elif kind == "authorization":
                dim.fail(f"the authorization matrix changed ({d}); a new allow cannot be ruled "
                         "out from the diff alone", "leave the authorization matrix as it is")

    def _risk_from_worlds(self, dim: _Dim) -> None:
        assert self.worlds is not None
        old, new = self.worlds.old, self.worlds.new
        before = {p.name: p for p in old.parties}
        for party in new.parties:
            was = before.get(party.name)
            if was is None:
                continue
            held = {t.name for t in was.tools}
            for gained in sorted({t.name for t in party.tools} - held):
                dim.fail(f"participant {party.name} now holds tool {gained}, which it did not",
                         f"do not give tool {gained} to participant {party.name}")
            expr = party.authority_expr
            if party.authority > was.authority or (expr is not None
                                                   and expr != was.authority_expr):
                dim.fail(f"participant {party.name}'s authority is raised",
                         f"keep participant {party.name}'s authority")
        granted = _allowed(old)
        for (principal, record), fields in sorted(_allowed(new).items()):
            extra = sorted(fields - granted.get((principal, record), set()))
            if extra:
                dim.fail(f"the authorization matrix now lets {principal} see {record}."
                         f"{', '.join(extra)}",
                         f"grant {principal} no new fields of {record}")
        old_tools = {t.name: t for t in old.tools}
        for tool in new.tools:
            was_tool = old_tools.get(tool.name)
            if was_tool is None:
                continue
            if tool.kind != was_tool.kind:
                dim.fail(f"tool {tool.name}'s kind changed ({was_tool.kind} -> {tool.kind})",
                         f"keep tool {tool.name}'s kind")
            now = {_guard_key(g): g for g in tool.guards}
            for guard in was_tool.guards:
                key = _guard_key(guard)
                if key not in now:
                    dim.fail(f"tool {tool.name}: a guard is removed or rewritten "
                             f"({guard.message or guard.target or 'at ' + guard.at})",
                             f"keep tool {tool.name}'s existing guards; add a new one instead")
                elif guard.when is None and now[key].when is not None:
                    dim.fail(f"tool {tool.name}: a guard that always applied is now "
                             f"conditional ({guard.message or guard.target})",
                             f"keep tool {tool.name}'s guard unconditional")
            for what in ("acl", "propagates"):
                if getattr(was_tool, what) is not None and getattr(tool, what) is None:
                    dim.fail(f"tool {tool.name}: its {what} is removed",
                             f"keep tool {tool.name}'s {what}")

    # ------------------------------------------------------------ proportionality
    def proportionality(self, helper_limit: int) -> _Dim:
        dim = _Dim()
        helpers: list[str] = []
        controls: list[str] = []
        for (kind, name), change in sorted(self.changes.items()):
            ref = (kind, name)
            helper = kind in _HELPER_KINDS or (kind in _HELPER_ADDED and change.change == "added")
            if change.change == "removed" and not (kind in _HELPER_KINDS or (
                    kind == "channel" and ref in self.actions)):
                role = "a role" if kind == "participant" else kind
                dim.fail(f"removes {_label(ref)}: a repair adds or tightens a control, it does "
                         f"not remove {role}",
                         f"restore {_label(ref)}")
                continue
            if helper:
                helpers.append(_label(ref))
            elif self.is_surface(ref) or ref in self.actions or ref in self.reach:
                controls.append(_label(ref))
            else:
                dim.fail(f"changes {_label(ref)}, which is neither a plan surface nor the "
                         "boundary's action",
                         f"confine the edit to the plan's surfaces "
                         f"({', '.join(self.plan.may_change) or 'none named'}) and helpers")
        if len(helpers) > helper_limit:
            dim.fail(f"touches {len(helpers)} helper declarations (at most {helper_limit})",
                     "make the repair smaller: fewer new or changed helper declarations")
        self.touched = (controls, helpers)
        return dim

    def proportion_summary(self) -> str:
        controls, helpers = self.touched
        out = f"{len(controls)} control declaration(s) ({', '.join(controls) or 'none'})"
        if helpers:
            out += f" and {len(helpers)} helper(s) ({', '.join(helpers)})"
        return out + ", within the plan's surfaces and the boundary's actions; nothing removed"


# ---------------------------------------------------------------- world helpers

def _channel_parties(label: str) -> set[str]:
    """The participants of a channel label (`delegation a -> b via t` -> {a, b})."""
    body = label.split(" ", 1)[1] if " " in label else label
    body = body.split(" via ", 1)[0]
    return {p.strip() for part in body.split("->") for p in part.split(",") if p.strip()}


def _edge_actions(world: World, parties: list[str]) -> set[tuple[str, str]]:
    """Channels between the edge's participants, the tools they go through, and the tools
    one of them holds that delegate to or message the other."""
    out: set[tuple[str, str]] = set()
    if not parties:
        return out
    pair = set(parties)
    for channel in world.channels:
        if len(pair) == 2 and pair <= set(channel.parties):
            out.add(("channel", channel_label(channel)))
            via = channel_via(channel)
            if via:
                out.add(("tool", via))
    holders = {p.name: {t.name for t in p.tools} for p in world.parties}
    tools = {t.name: t for t in world.tools}
    for party in parties:
        others = pair - {party}
        for name in sorted(holders.get(party, set())):
            tool = tools.get(name)
            if tool is None:
                continue
            if others & set(tool.delegates_to) or (others and tool.sends_to is not None):
                out.add(("tool", name))
            if not others and tool.kind == "act":  # `actor->state`: the actor's actions
                out.add(("tool", name))
    return out


def _tool(world: World, name: str) -> ToolIR | None:
    return next((t for t in world.tools if t.name == name), None)


def _controls(tool: ToolIR) -> list[tuple[str, Any]]:
    """A tool's enforcing expressions: guard conditions and their `when`, acl, propagation."""
    out: list[tuple[str, Any]] = []
    for i, guard in enumerate(tool.guards):
        out.append((f"guard {i + 1}", guard.condition))
        if guard.when is not None:
            out.append((f"guard {i + 1}", guard.when))
    for what in ("acl", "acl_when", "propagates", "propagates_when"):
        if getattr(tool, what) is not None:
            out.append((what.split("_")[0], getattr(tool, what)))
    return out


def _identities(expr: Any, world: World) -> set[Ref]:
    """The participants and tools an expression names (through the `let`s it calls)."""
    out: set[Ref] = set()
    for node in walk_expr(expr, world.lets):
        if isinstance(node, RefNode) and node.kind in ("party", "tool") and node.name:
            out.add(("participant" if node.kind == "party" else "tool", node.name))
    return out


def _through_lets(direct: set[Ref], graph: dict[Ref, set[Ref]]) -> list[Ref]:
    """`direct` and everything read through the `let`s in it."""
    seen = set(direct)
    queue = [r for r in direct if r[0] == "let"]
    while queue:
        current = queue.pop()
        for read in graph.get(current, ()):
            if read not in seen:
                seen.add(read)
                if read[0] == "let":
                    queue.append(read)
    return sorted(seen)


def _guard_key(guard: GuardIR, when: bool = False) -> str:
    """A guard's identity across versions: what it checks and what it does (not its
    message or position; its `when` only if asked: a guard that lost its `when` is a
    new, stronger control, one that kept its check is not removed)."""
    blank: dict[str, Any] = {"message": None, "at": ""} | ({} if when else {"when": None})
    return GuardIR.model_validate(guard.model_dump() | blank).model_dump_json()


def _allowed(world: World) -> dict[tuple[str, str], set[str]]:
    """(principal, record) -> the fields the authorization matrix lets it see."""
    auth = world.authorization
    fields = {r.name: [f.name for f in r.fields] for r in world.records}
    principals = {r.principal for r in auth.rules} | {p.name for p in world.parties}
    out: dict[tuple[str, str], set[str]] = {}
    for principal in principals:
        for record, names in fields.items():
            allowed = set(names) if auth.default == "allow" else set()
            for rule in auth.rules:
                if rule.record == record and rule.principal == principal:
                    if rule.effect == "allow":
                        allowed |= set(rule.fields)
                    else:
                        allowed -= set(rule.fields)
            if allowed:
                out[(principal, record)] = allowed
    return out

