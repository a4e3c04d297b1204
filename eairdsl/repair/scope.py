"""ScopeOK (EAIR §4 stage 3, D.1): the candidate touches nothing protected, and every change
serves the plan.

Three checks on the semantic diff of W and W′ (`diff.diff_worlds`, which follows
reads through `let`s, levers, data files and cards):

1. no protected declaration of W is touched, directly or through what it reads;
2. every changed declaration (`KIND NAME`) is attributed, in the candidate's
   `attribution`, to at least one requirement id the plan has. A change with no
   attribution, or attributed only to ids the plan does not have, is rejected:
   a repair may not carry unrelated edits;
3. every file the candidate adds or changes is one W′ reads (`WorldDiff.files`,
   with the candidate's unread files marked by the guarded apply): a file nobody
   reads was never reviewed, and would ship with the accepted world (a planted
   `generated/<w>/world.json`, thousands of files). Every file added, changed or
   removed is listed (`ScopeResult.files`).

Attribution keys may name a declaration by its keyword (`role x`, `ledger y`): they
are read in the diff's kinds (`participant x`, `record y`). An attribution of a
declaration that did not change is harmless and reported
as a note (the agent's bookkeeping is off, not the world). An empty diff is
out of scope too: a candidate that changes nothing repairs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from eairdsl.audit.contract import RepairPlan
from eairdsl.repair.files import shown
from eairdsl.repair.model import canonical_key, decl_name

if TYPE_CHECKING:
    from eairdsl.diff import WorldDiff

__all__ = ["ScopeResult", "check_scope"]


class ScopeResult(BaseModel):
    """ScopeOK and, when false, why: one line per problem (the agent's feedback)."""

    ok: bool
    problems: list[str] = Field(default_factory=list)
    #: `KIND NAME` of every changed declaration
    changed: list[str] = Field(default_factory=list)
    #: changed declarations with no attribution to an existing requirement
    unattributed: list[str] = Field(default_factory=list)
    #: protected declarations touched, with the diff's reason
    violations: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    #: every file the candidate added, changed or removed (`PATH: added`, `PATH: changed,
    #: not read by the world`, …)
    files: list[str] = Field(default_factory=list)
    #: the files the candidate wrote that the world does not read (refused)
    unread: list[str] = Field(default_factory=list)


def check_scope(diff: WorldDiff, attribution: dict[str, list[str]],
                plan: RepairPlan) -> ScopeResult:
    """ScopeOK of a candidate whose semantic diff from the original is `diff`."""
    ids = {r.id for r in plan.requirements}
    keyed: dict[str, list[str]] = {}
    for key, given_ids in attribution.items():
        keyed.setdefault(canonical_key(key), []).extend(given_ids)
    attribution = keyed
    changed = [decl_name(c.kind, c.name) for c in diff.changes]
    violations = [f"{decl_name(c.kind, c.name)}: {c.protected}" for c in diff.violations]
    problems = [f"touches a protected declaration: {v}" for v in violations]
    unattributed: list[str] = []
    for name in changed:
        given = attribution.get(name, [])
        known = [i for i in given if i in ids]
        unknown = sorted(set(given) - ids)
        if not known:
            unattributed.append(name)
            if unknown:
                problems.append(f"{name} changed but is attributed only to "
                                f"{', '.join(unknown)}, which the plan does not have "
                                f"(its requirements: {', '.join(sorted(ids))})")
            else:
                problems.append(f"{name} changed but is attributed to no plan requirement "
                                f"(an unattributed change; the plan's requirements: "
                                f"{', '.join(sorted(ids))})")
    notes = [f"{name} is attributed but did not change" for name in sorted(attribution)
             if name not in changed]
    if not changed:
        problems.append("the candidate changes no declaration of the world")
    files = [f"{f.path}: {f.change}" + ("" if f.read or f.change == "removed"
                                         else ", not read by the world")
             for f in diff.files]
    unread = [f.path for f in diff.files if not f.read and f.change != "removed"]
    problems += [f"files[{shown(path)}]: the candidate writes a file the repaired world does "
                 "not read; a candidate may add or change only the files its world reads "
                 "(modules it imports, cards, data files): drop it from `files`"
                 for path in unread]
    return ScopeResult(ok=not problems, problems=problems, changed=changed,
                       unattributed=unattributed, violations=violations, notes=notes,
                       files=files, unread=unread)
