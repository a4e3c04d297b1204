"""Pass 1: index every declaration by name; duplicates and the world block.

Imported modules share one namespace with the world: a stdlib module's lever
is the world's lever. Two declarations of one name are an error wherever they
come from, because a repair that edits one would silently leave the other.
"""

from __future__ import annotations

from eairdsl.check.world import DECL_KINDS, CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.source import Span
from eairdsl.syntax import ast as A

__all__ = ["collect_declarations"]

_TABLES = {
    A.EnumDecl: "enums", A.SchemaDecl: "schemas", A.RecordDecl: "records",
    A.StateDecl: "states", A.DocumentDecl: "documents", A.PolicyDecl: "policies",
    A.LeverDecl: "levers", A.ConditionDecl: "conditions", A.InducerDecl: "inducers",
    A.ToolDecl: "tools", A.PartyDecl: "parties", A.LetDecl: "lets",
    A.InstanceDecl: "instance_decls", A.StudyMeasureDecl: "study_measures",
}

#: Names the expression language gives a meaning of its own.
RESERVED = frozenset({"instance", "context", "true", "false", "none"})


def collect_declarations(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    for module, decl in world.program.decls():
        world.module_of[id(decl)] = module
        if isinstance(decl, A.WorldDecl):
            if module.path != world.program.entry:
                diagnostics.error("E502", "only the world file may declare `world`", decl.span,
                                  "remove the world block from this imported module")
            elif world.world is not None:
                diagnostics.error("E502", f"second world block '{decl.name}'", decl.span,
                                  f"'{world.world.name}' is already declared at "
                                  f"{world.world.span}")
            else:
                world.world, world.world_module = decl, module
            continue
        if isinstance(decl, A.AuthorizationDecl):
            world.authorizations.append(decl)
        elif isinstance(decl, A.ChannelDecl):
            world.channels.append(decl)
        elif isinstance(decl, A.InstancesDecl):
            world.instances_from.append((decl, module))
        elif isinstance(decl, A.MeasureDecl):
            world.measures.append(decl)
        elif isinstance(decl, A.ProtectedDecl):
            world.protected.append(decl)
        table = _TABLES.get(type(decl))
        if table is None:
            continue
        name: str = decl.name  # type: ignore[union-attr]
        kind = decl.decl
        if name in RESERVED:
            diagnostics.error("E303", f"'{name}' is reserved and cannot name a {DECL_KINDS[kind]}",
                              decl.span, "choose another name")
            continue
        if name in world.decls:
            other_kind, other, _ = world.decls[name]
            diagnostics.error(
                "E302", f"'{name}' is declared twice", decl.span,
                f"the first is the {DECL_KINDS[other_kind]} at {other.span}",
            )
            continue
        world.decls[name] = (kind, decl, module)
        getattr(world, table)[name] = decl
    if world.world is None and world.program.modules:
        entry = world.program.modules[-1]
        diagnostics.error("E501", "the world file has no `world` block",
                          Span.point(entry.source.name),
                          f"add `world NAME {{ risk ... }}` to {entry.source.name}")
    if len(world.authorizations) > 1:
        for extra in world.authorizations[1:]:
            diagnostics.error("E502", "second authorization matrix", extra.span,
                              "merge the rules into one `authorization` block")
    if len(world.instances_from) > 1:
        for second, _ in world.instances_from[1:]:
            diagnostics.error("E502", "second `instances from` declaration", second.span,
                              "keep one instance file, or write extra instances inline")
    for enum in world.enums.values():
        for member in enum.members:
            world.enum_members.setdefault(member, []).append(enum.name)
        _check_meanings(enum, diagnostics)
    for lever in world.levers.values():
        if lever.type.kind == "enum":
            for member in lever.type.members:
                world.enum_members.setdefault(member, []).append(lever.name)


def _check_meanings(enum: A.EnumDecl, diagnostics: Diagnostics) -> None:
    """An enum's meaning clauses name its own members (E306), each member once with one
    meaning, and each meaning in one clause (E512)."""
    given: dict[str, str] = {}
    clauses: dict[str, A.EnumMeaning] = {}
    for clause in enum.meanings:
        if clause.meaning in clauses:
            diagnostics.error("E512", f"enum '{enum.name}' declares `{clause.meaning}` twice",
                              clause.span, f"name every {clause.meaning} member in one clause: "
                              f"the first is at {clauses[clause.meaning].span}")
        clauses.setdefault(clause.meaning, clause)
        for ref in clause.members:
            if ref.name not in enum.members:
                diagnostics.error(
                    "E306", f"'{ref.name}' is not a member of enum '{enum.name}'", ref.span,
                    did_you_mean(ref.name, enum.members)
                    or f"its members are {', '.join(enum.members)}")
            elif ref.name in given:
                again = given[ref.name] == clause.meaning
                diagnostics.error(
                    "E512", f"'{ref.name}' of enum '{enum.name}' is marked "
                    + (f"`{clause.meaning}` twice" if again else
                       f"both `{given[ref.name]}` and `{clause.meaning}`"), ref.span,
                    "name it once" if again else "a member has one meaning: keep the one "
                    "its value states")
            else:
                given[ref.name] = clause.meaning
