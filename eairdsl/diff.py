"""What changed between two versions of a world, and whether a repair touched what it may not.

A repair edits the `.eair` source; a reviewer needs the *semantic* change, not a
text diff full of moved lines and reworded comments. Both versions are compared
as compiled IR, declaration by declaration (levers, conditions, records, tools,
participants, channels, inducers, `let`s, measurements, …), ignoring source
positions, so only what the runtime would do differently shows up.

The original world's `protected` list names what a repair may not change. A
protected declaration counts as touched when it changed, when the new world
drops it from `protected`, or when anything it reads changed (eairdsl/reads.py
finds the reads of every kind of declaration the same way, by walking its
expressions): a `let` it calls (through any number of `let`s), a lever (its
default, or its value in a condition), a record, table or document (and so the
data file it is loaded from), a state, a measurement, an enum or schema, the
instances, the authorization matrix. The walk goes through every `let` and
every unprotected declaration; a protected one it reaches is checked on its
own. A participant's cards, rendered per condition, are part of it, so a
changed card or partial touches a protected participant. The reason names the
read ("inducer 'x' is protected and reads y, which changed"): the ground truth
of a measurement is its predicate *and* every definition the predicate calls.

A participant or tool named in an expression (`calls(issue_credit)`,
`messages(customer, r)`) is an identity, not a read of its definition: what a
ledger holds at run time is the tools' doing, and a repair may change tools.

Besides the declarations, `files` lists every file of the world's folder that
either version reads (`World.sources`: the main file, its modules, cards and
data files) and that was added, removed or changed (by content digest), so a
change to a file shows by name even where no declaration reads it differently.
The stdlib's modules are the package's, not the world's, and are not listed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel

from eairdsl.ir import World
from eairdsl.reads import (
    INSTANCES,
    DeclKind,
    Ref,
    declarations,
    describe,
    read_graph,
    reads,
)

__all__ = ["Change", "FileChange", "WorldDiff", "diff_worlds", "file_changes"]

#: Protected keywords that stand for a whole block
_BLOCKS = frozenset({"measure", "instances", "authorization"})


class Change(BaseModel):
    """One declaration that differs between the two versions."""

    kind: DeclKind
    name: str
    change: Literal["added", "removed", "changed"]
    #: what differs, as paths into the declaration (`guards[2].condition`, `default`)
    details: list[str] = []
    #: why this change touches a protected declaration, if it does
    protected: str | None = None


class FileChange(BaseModel):
    """One file of the world's folder that differs between the two versions."""

    path: str
    change: Literal["added", "removed", "changed"]
    #: whether the new version reads it (a removed file, or a file a repair candidate
    #: wrote that its world does not read: False)
    read: bool = True


class WorldDiff(BaseModel):
    """The semantic difference between two worlds; `violations` gate a repair review."""

    old: str
    new: str
    old_digest: str
    new_digest: str
    changes: list[Change]
    #: the files either version reads that were added, removed or changed
    files: list[FileChange] = []

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
                     new_digest=new.digest, changes=changes, files=file_changes(old, new))


def file_changes(old: World, new: World) -> list[FileChange]:
    """The world's own files (not the stdlib's) that `old` or `new` reads, added, removed
    or changed from one to the other, by path."""
    before, after = _own_files(old), _own_files(new)
    gone = [p for p in before.keys() - after.keys() if _main_like(p)]
    came = [p for p in after.keys() - before.keys() if _main_like(p)]
    if len(gone) == 1 and len(came) == 1:
        # Two versions kept side by side under different names (`first_world.eair`,
        # `first_world_scored.eair`): the one top-level world file of each is the main
        # file, renamed, not one file removed and another added.
        before[came[0]] = before.pop(gone[0])
    out: list[FileChange] = []
    for path in sorted(before.keys() | after.keys()):
        if path not in after:
            out.append(FileChange(path=path, change="removed", read=False))
        elif path not in before:
            out.append(FileChange(path=path, change="added"))
        elif before[path] != after[path]:
            out.append(FileChange(path=path, change="changed"))
    return out


def _main_like(ref: str) -> bool:
    return "/" not in ref and ref.endswith(".eair")


def _own_files(world: World) -> dict[str, str]:
    return {s.ref: s.sha256 for s in world.sources if not s.ref.startswith("stdlib/")}


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


def _declarations(world: World) -> dict[Ref, Any]:
    """(kind, name) -> the declaration's meaning as plain data."""
    out: dict[Ref, Any] = {}
    for ref, piece in declarations(world).items():
        if ref[0] == "schema":
            out[ref] = {"fields": [_plain(f) for f in piece],
                        "closed": ref[1] in world.closed_schemas}
        elif ref[0] == "participant":
            data = _plain(piece)
            data["cards"] = world.prompts.get(ref[1], {})  # what the agent is told
            out[ref] = data
        elif ref[0] == "enum" and ref[1] in world.enum_meanings:
            # what its members mean to the offline auditor is part of the enum
            out[ref] = {"members": piece, "meanings": _plain(world.enum_meanings[ref[1]])}
        elif ref == INSTANCES:
            out[ref] = piece  # task data: an `at` here is a value, not a position
        else:
            out[ref] = _plain(piece)
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

    def is_protected(ref: Ref) -> bool:
        return ref[1] in protected or (ref[0] in _BLOCKS and ref[0] in protected)

    for change in changes:
        if change.kind == "protected":
            dropped = sorted(set(old.protected) - set(new.protected))
            if dropped:
                change.protected = f"no longer protects {', '.join(dropped)}"
            continue
        if is_protected((change.kind, change.name)):
            change.protected = _direct_reason(old, new, change)
    # A protected declaration also changes when anything it reads changes: a
    # `let` it calls (through any number of `let`s), a lever, a record and its
    # data file, a state, a document, a measurement, an enum or schema, the
    # instances, the authorization matrix. The walk goes through every `let`
    # and every unprotected declaration; a protected one it reaches is checked
    # (and flagged) on its own, so the walk stops there.
    before, after = _declarations(old), _declarations(new)
    graph = read_graph(old)
    how: dict[Ref, list[str] | None] = {}
    for ref in sorted(graph):
        if not is_protected(ref) or ref[0] in ("channel", "world"):
            continue
        found = reads(old, ref, graph=graph,
                      through=lambda r: r[0] == "let" or not is_protected(r))
        touched: list[tuple[Ref, tuple[Ref, ...], list[str]]] = []
        for read, chain in found.items():
            if read not in how:
                how[read] = _read_change(old, new, before, after, read)
            detail = how[read]
            if detail is not None:
                touched.append((read, chain, detail))
        if touched:
            _flag_reads(changes, ref, touched)


def _flag_reads(changes: list[Change], ref: Ref,
                touched: list[tuple[Ref, tuple[Ref, ...], list[str]]]) -> None:
    kind, name = ref
    labels = [describe(read) + _via(chain) for read, chain, _ in touched]
    reason = f"{kind} '{name}' is protected and reads {', '.join(labels)}, which changed"
    details = [f"reads changed {read[0]} {read[1]}{_via(chain)}"
               + (f" ({'; '.join(how[:2])})" if read[0] != "let" and how else "")
               for read, chain, how in touched]
    existing = next((c for c in changes if c.kind == kind and c.name == name), None)
    if existing is None:
        changes.append(Change(kind=kind, name=name, change="changed", details=details,
                              protected=reason))
        return
    existing.details.extend(d for d in details if d not in existing.details)
    if existing.protected is None:
        existing.protected = reason


def _via(chain: tuple[Ref, ...]) -> str:
    return f" (through {' -> '.join(describe(r) for r in chain)})" if chain else ""


def _read_change(old: World, new: World, before: dict[Ref, Any], after: dict[Ref, Any],
                 ref: Ref) -> list[str] | None:
    """How a declaration that something reads changed, or None if it did not."""
    if ref not in after:
        return ["removed"]
    if ref[0] == "condition":  # read by a study measure: as the condition's own change, a
        # lever that only follows its changed default is the lever's change, not the cell's
        return _condition_changes(old, new, ref[1]) or None
    out = list(_paths(before.get(ref), after[ref])) if before.get(ref) != after[ref] else []
    if ref[0] == "lever":  # what a reader sees is the lever's value in each condition
        new_values = {c.name: c.levers.get(ref[1]) for c in new.conditions}
        moved = [c.name for c in old.conditions
                 if c.name in new_values and c.levers.get(ref[1]) != new_values[c.name]]
        if moved:
            out.append(f"value under {', '.join(moved)} changed")
    source = _changed_source(old, new, _source_of(old, ref))
    if out and source:
        out.insert(0, f"data file {source} changed")
    return out or None


def _direct_reason(old: World, new: World, change: Change) -> str:
    """Why a change of a protected declaration is one, naming the file or card behind it."""
    reason = f"{change.kind} '{change.name}' is protected"
    if change.change != "changed":
        return reason
    source = _changed_source(old, new, _source_of(old, (change.kind, change.name)))
    if source:
        return f"{reason}; its data file {source} changed"
    if change.kind == "participant":
        party = next(p for p in old.parties if p.name == change.name)
        renders = sorted({d.split(":", 1)[0].split(".")[1] for d in change.details
                          if d.startswith("cards.")})
        if renders:
            card = f"card {party.card}" if party.card else "card"
            return f"{reason}; its {card} renders differently under {', '.join(renders)}"
    return reason


def _source_of(world: World, ref: Ref) -> str | None:
    """The data file a record, table or document is loaded from, as written."""
    if ref[0] == "record":
        return next((r.source for r in world.records if r.name == ref[1]), None)
    if ref[0] == "document":
        return next((d.source for d in world.documents if d.name == ref[1]), None)
    return None


def _changed_source(old: World, new: World, written: str | None) -> str | None:
    """The `world.sources` ref of a data file whose sha256 differs, if it does."""
    if not written:
        return None
    a = {s.ref: s.sha256 for s in old.sources}
    b = {s.ref: s.sha256 for s in new.sources}
    for ref in sorted(a.keys() | b.keys()):
        if (ref == written or ref.endswith("/" + written)) and a.get(ref) != b.get(ref):
            return ref
    return None
