"""Pass 2: resolve every written type (`TypeRef`) to a checker `Type`.

Levers, state variables, record and schema fields, instance fields, tool
parameters and `let` parameters all get their types here, before any
expression is checked, so expressions can refer to declarations in any order.
"""

from __future__ import annotations

from eairdsl.check import types as T
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.syntax import ast as A

__all__ = ["resolve_signatures", "resolve_type"]

_BUILTIN_TYPES = {**T.SCALARS}


def resolve_type(world: CheckedWorld, ref: A.TypeRef, diagnostics: Diagnostics,
                 owner: str = "") -> T.Type:
    """The Type a TypeRef denotes; unknown names are E301 and become `any`."""
    if ref.kind == "enum":
        if not owner or "." in owner:
            diagnostics.error("E405", "inline enums `{a, b}` are only for levers", ref.span,
                              "declare `enum NAME { a, b }` and use NAME as the type")
            return T.ANY
        if ref.max is not None:
            diagnostics.error("E405", "`max` limits text length, not an enum", ref.span)
        if len(set(ref.members)) != len(ref.members):
            diagnostics.error("E406", "an enum lists the same value twice", ref.span,
                              "remove the duplicate")
        return T.enum_of(owner or "<inline>")
    if ref.kind == "app":
        assert ref.arg is not None
        if ref.name == "list":
            if ref.max is not None:
                diagnostics.error("E405", "`max` limits text length, not a list", ref.span,
                                  "use `text max N` for the element type instead")
            return T.list_of(resolve_type(world, ref.arg, diagnostics))
        if ref.name in world.records:
            world.used.add(ref.name)
            group = ref.arg.name
            if ref.arg.kind != "name" or group not in world.groups(ref.name):
                diagnostics.error("E301", f"record '{ref.name}' has no group '{group}'",
                                  ref.arg.span,
                                  did_you_mean(group, world.groups(ref.name)))
            return T.record_row(ref.name)
        diagnostics.error("E401", f"'{ref.name}[...]' is not a type constructor", ref.span,
                          "use list[T] or RECORD[GROUP]")
        return T.ANY
    if ref.kind == "field":
        assert ref.field is not None
        if ref.name in world.records or ref.name in world.schemas:
            world.used.add(ref.name)
            key = (ref.name, ref.field)
            if key in world.field_types:
                return world.field_types[key]
            names = [f for (r, f) in world.field_types if r == ref.name]
            diagnostics.error("E301", f"'{ref.name}' has no field '{ref.field}'", ref.span,
                              did_you_mean(ref.field, names))
            return T.ANY
        diagnostics.error("E301", f"unknown record '{ref.name}'", ref.span,
                          did_you_mean(ref.name, [*world.records, *world.schemas]))
        return T.ANY
    name = ref.name
    if name in _BUILTIN_TYPES:
        result = _BUILTIN_TYPES[name]
    elif name in world.enums:
        world.used.add(name)
        result = T.enum_of(name)
    elif name in world.schemas:
        world.used.add(name)
        result = T.schema_of(name)
    elif name in world.records:
        world.used.add(name)
        result = T.record_row(name)
    else:
        candidates = [*_BUILTIN_TYPES, *world.enums, *world.schemas, *world.records, "list"]
        diagnostics.error("E301", f"unknown type '{name}'", ref.span,
                          did_you_mean(name, candidates) or "types are bool, int, number, money, "
                          "duration, percent, date, text, list[T], enums, schemas and records")
        return T.ANY
    if ref.max is not None:
        if result.kind != "text":
            diagnostics.error("E405", f"`max` limits text length, not {result}", ref.span,
                              "use `text max N`")
        return T.Type(result.kind, result.name, result.arg, max=ref.max)
    return result


def resolve_signatures(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    # Field types first: other types may name `record.field`.
    for owner_name, fields in [
        *((r.name, [f for f in r.items if isinstance(f, A.FieldDecl)])
          for r in world.records.values()),
        *((s.name, s.fields) for s in world.schemas.values()),
    ]:
        seen: set[str] = set()
        for f in fields:
            if f.name in seen:
                diagnostics.error("E302", f"field '{f.name}' is declared twice", f.span,
                                  "remove one of them")
            seen.add(f.name)
            if f.type.kind != "field":
                world.field_types[(owner_name, f.name)] = resolve_type(
                    world, f.type, diagnostics, f"{owner_name}.{f.name}")
    for owner_name, fields in [
        *((r.name, [f for f in r.items if isinstance(f, A.FieldDecl)])
          for r in world.records.values()),
        *((s.name, s.fields) for s in world.schemas.values()),
    ]:
        for f in fields:
            if f.type.kind == "field":
                world.field_types[(owner_name, f.name)] = resolve_type(world, f.type, diagnostics)
    for record in world.records.values():
        names = {f.name for f in world.fields(record.name)}
        if record.key is not None and record.key not in names:
            diagnostics.error("E301", f"key '{record.key}' is not a field of '{record.name}'",
                              record.span, did_you_mean(record.key, names))
        for group in record.items:
            if isinstance(group, A.GroupDecl):
                for member in group.fields:
                    if member not in names:
                        diagnostics.error("E301", f"group '{group.name}' names unknown field "
                                          f"'{member}'", group.span, did_you_mean(member, names))
        for f in world.fields(record.name):
            if f.canary and world.field_types.get((record.name, f.name), T.ANY).kind not in (
                    "text", "any", "money", "int", "number"):
                diagnostics.error("E405", f"canary field '{f.name}' must hold text or a number",
                                  f.span, "canary values are matched against message text")
    for lever in world.levers.values():
        world.lever_types[lever.name] = resolve_type(world, lever.type, diagnostics, lever.name)
    for state in world.states.values():
        world.state_types[state.name] = resolve_type(world, state.type, diagnostics)
    for decl, _ in world.instances_from:
        for f in decl.fields:
            world.instance_types[f.name] = resolve_type(world, f.type, diagnostics)
    for tool in world.tools.values():
        for param in tool.params:
            resolve_type(world, param.type, diagnostics)
        if tool.returns is not None:
            resolve_type(world, tool.returns, diagnostics)
