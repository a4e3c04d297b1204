"""What changed between two versions of a world, and whether a repair touched what it may not.

A repair edits the `.eair` source; a reviewer needs the *semantic* change, not a
text diff full of moved lines and reworded comments. Both versions are compared
as compiled IR, declaration by declaration (levers, conditions, records, tools,
participants, channels, inducers, `let`s, measurements, …), ignoring source
positions, so only what the runtime would do differently shows up.

The original world's `protected` list names what a repair may not change. A
protected declaration counts as touched when it changed, when a `let` it reads
(directly or through other `let`s) changed, or when the new world drops it from
`protected`: the ground truth of a measurement is its predicate *and* every
definition the predicate calls.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel

from eairdsl.ir import Expr, World, walk_expr

__all__ = ["Change", "WorldDiff", "diff_worlds"]

#: Protected keywords that stand for a whole block
_BLOCKS = frozenset({"measure", "instances", "authorization"})


class Change(BaseModel):
    """One declaration that differs between the two versions."""

    kind: str
    name: str
    change: Literal["added", "removed", "changed"]
    #: what differs, as paths into the declaration (`guards[2].condition`, `default`)
    details: list[str] = []
    #: why this change touches a protected declaration, if it does
    protected: str | None = None


class WorldDiff(BaseModel):
    """The semantic difference between two worlds; `violations` gate a repair review."""

    old: str
    new: str
    old_digest: str
    new_digest: str
    changes: list[Change]

    @property
    def violations(self) -> list[Change]:
        return [c for c in self.changes if c.protected]


def diff_worlds(old: World, new: World) -> WorldDiff:
    """Every declaration added, removed or changed from `old` to `new`."""
    before, after = _declarations(old), _declarations(new)
    changes: list[Change] = []
    for key in sorted(before.keys() | after.keys()):
        kind, name = key
        if key not in after:
            changes.append(Change(kind=kind, name=name, change="removed"))
        elif key not in before:
            changes.append(Change(kind=kind, name=name, change="added"))
        elif kind == "condition":
            details = _condition_changes(old, new, name)
            if details:
                changes.append(Change(kind=kind, name=name, change="changed", details=details))
        elif before[key] != after[key]:
            changes.append(Change(kind=kind, name=name, change="changed",
                                  details=list(_paths(before[key], after[key]))))
    _mark_protected(old, new, changes)
    return WorldDiff(old=old.meta.name, new=new.meta.name, old_digest=old.digest,
                     new_digest=new.digest, changes=changes)


# ---------------------------------------------------------------- declarations

def _plain(model: Any) -> Any:
    """JSON data of an IR piece, without source positions."""
    data = model.model_dump(mode="json", exclude_defaults=True) if isinstance(
        model, BaseModel) else model
    return _strip(data)


def _strip(data: Any) -> Any:
    if isinstance(data, dict):
        # A guard's or measurement's `at` says where it is written ("a1.eair:268:3");
        # an event's or warning's `at` is an expression (when it happens), and counts.
        return {k: _strip(v) for k, v in data.items() if not (k == "at" and isinstance(v, str))}
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


def _declarations(world: World) -> dict[tuple[str, str], Any]:
    """(kind, name) -> the declaration's meaning as plain data."""
    out: dict[tuple[str, str], Any] = {("world", world.meta.name): _plain(world.meta)}
    for condition in world.conditions:
        out[("condition", condition.name)] = _plain(condition)
    for kind, items in (("lever", world.levers),
                        ("record", world.records), ("state", world.states),
                        ("document", world.documents), ("policy", world.policies),
                        ("inducer", world.inducers), ("tool", world.tools),
                        ("measure", world.measures)):
        for item in items:
            out[(kind, item.name)] = _plain(item)
    for party in world.parties:
        data = _plain(party)
        data["cards"] = world.prompts.get(party.name, {})  # what the agent is told
        out[("participant", party.name)] = data
    for name, let in world.lets.items():
        out[("let", name)] = _plain(let)
    for name, members in world.enums.items():
        out[("enum", name)] = members
    for name, fields in world.schemas.items():
        out[("schema", name)] = {"fields": [_plain(f) for f in fields],
                                 "closed": name in world.closed_schemas}
    for channel in world.channels:
        label = f"{channel.kind} " + " -> ".join(channel.parties) + (
            f" via {channel.via}" if channel.via else "")
        out[("channel", label)] = _plain(channel)
    out[("authorization", "authorization")] = _plain(world.authorization)
    out[("instances", "instances")] = world.instances
    out[("protected", "protected")] = sorted(world.protected)
    return out


def _condition_changes(old: World, new: World, name: str) -> list[str]:
    """How a condition's lever values changed, beyond following a changed default.

    A repair that flips a lever's default changes every condition that left the
    lever at its default; that is the lever's change, reported once, not a
    change of each (possibly protected) condition.
    """
    a = next(c for c in old.conditions if c.name == name)
    b = next(c for c in new.conditions if c.name == name)
    old_defaults = {lever.name: lever.default for lever in old.levers}
    new_defaults = {lever.name: lever.default for lever in new.levers}
    out = [f"doc: {json.dumps(a.doc)} -> {json.dumps(b.doc)}"] if a.doc != b.doc else []
    for lever in sorted(a.levers.keys() | b.levers.keys()):
        before, after = a.levers.get(lever), b.levers.get(lever)
        if before == after:
            continue
        # A lever the condition leaves at its default: added, removed, or re-defaulted.
        followed = ((lever not in old_defaults or before == old_defaults[lever])
                    and (lever not in new_defaults or after == new_defaults[lever]))
        if not followed:
            out.append(f"levers.{lever}: {json.dumps(before)} -> {json.dumps(after)}")
    return out


def _paths(a: Any, b: Any, path: str = "", depth: int = 0) -> Iterator[str]:
    """Where two plain values differ: short paths, with old -> new for short scalars."""
    if a == b:
        return
    if _is_expr(a) or _is_expr(b):  # an expression: where, not how its tree differs
        yield f"{path or 'value'}: expression changed"
        return
    if isinstance(a, dict) and isinstance(b, dict) and depth < 4:
        for k in sorted(a.keys() | b.keys()):
            sub = f"{path}.{k}" if path else str(k)
            if k not in b:
                yield f"{sub}: removed"
            elif k not in a:
                yield f"{sub}: added"
            else:
                yield from _paths(a[k], b[k], sub, depth + 1)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and depth < 4:
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _paths(x, y, f"{path}[{i}]", depth + 1)
        return
    if isinstance(a, list) and isinstance(b, list):
        removed = [x for x in a if x not in b]
        added = [x for x in b if x not in a]
        if 0 < len(removed) + len(added) <= 3:
            yield from (f"{path or 'value'}: - {_describe(x)}" for x in removed)
            yield from (f"{path or 'value'}: + {_describe(x)}" for x in added)
        else:
            yield f"{path or 'value'}: {len(a)} -> {len(b)} items"
        return
    if _short(a) and _short(b):
        yield f"{path or 'value'}: {json.dumps(a)} -> {json.dumps(b)}"
    elif isinstance(a, str) and isinstance(b, str):  # a card or a description: its lines
        lines = [ln for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), n=0,
                                                   lineterm="")
                 if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        shown = [f"{path}: {ln[0]} {ln[1:].strip()[:100]}" for ln in lines[:4]]
        yield from shown or [f"{path or 'value'}: changed"]
        if len(lines) > 4:
            yield f"{path}: … {len(lines) - 4} more changed line(s)"
    else:
        yield f"{path or 'value'}: changed"


def _describe(item: Any) -> str:
    """A list item in a few words: its name, else what it says, else its value."""
    if isinstance(item, dict):
        for key in ("name", "message", "target", "text"):
            if isinstance(item.get(key), str):
                what = item.get("action") or item.get("op") or key
                return f"{what} {json.dumps(item[key], ensure_ascii=False)}"
        return "an entry"
    return json.dumps(item, ensure_ascii=False) if _short(item) else "an entry"


def _is_expr(value: Any) -> bool:
    return isinstance(value, dict) and "op" in value


def _short(value: Any) -> bool:
    return not isinstance(value, (dict, list)) and len(json.dumps(value)) <= 40


# ---------------------------------------------------------------- protection

def _mark_protected(old: World, new: World, changes: list[Change]) -> None:
    """Flag changes that touch a declaration `old` protects."""
    protected = set(old.protected)
    changed_lets = {c.name for c in changes if c.kind == "let"}
    for change in changes:
        if change.kind == "protected":
            dropped = sorted(set(old.protected) - set(new.protected))
            if dropped:
                change.protected = f"no longer protects {', '.join(dropped)}"
            continue
        if change.name in protected or (change.kind in _BLOCKS and change.kind in protected):
            change.protected = f"{change.kind} '{change.name}' is protected"
    # A protected declaration also changes when a definition it calls changes.
    for kind, name, reads in _protected_reads(old):
        touched = sorted(reads & changed_lets)
        if not touched:
            continue
        existing = next((c for c in changes if c.kind == kind and c.name == name), None)
        reason = f"{kind} '{name}' is protected and reads {', '.join(touched)}, which changed"
        if existing is None:
            changes.append(Change(kind=kind, name=name, change="changed",
                                  details=[f"reads changed let {', '.join(touched)}"],
                                  protected=reason))
        elif existing.protected is None:
            existing.protected = reason


def _protected_reads(world: World) -> Iterator[tuple[str, str, set[str]]]:
    """(kind, name, lets it calls transitively) for each protected declaration."""
    protected = set(world.protected)

    def lets_of(*exprs: Expr | None) -> set[str]:
        return {x.name or "" for e in exprs for x in walk_expr(e, world.lets) if x.op == "let"}

    if "measure" in protected:
        for m in world.measures:
            yield "measure", m.name, lets_of(m.expr, m.when)
    for name in sorted(protected & set(world.lets)):
        let = world.lets[name]
        yield "let", name, lets_of(let.body) - {name}
    for tool in world.tools:
        if tool.name in protected:
            exprs = [tool.result, tool.cost, tool.propagates, tool.propagates_when,
                     tool.sends_to, tool.acl, tool.acl_when,
                     *(x for g in tool.guards for x in (g.condition, g.when)),
                     *(x for e in tool.effects for x in (e.value, e.when)),
                     *(x for p in tool.params for x in (p.default, p.hint))]
            yield "tool", tool.name, lets_of(*exprs)
