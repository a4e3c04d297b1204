"""What each declaration of a compiled world reads: the other declarations its meaning depends on.

A declaration is named by a `Ref`, (kind, name), with the kinds `eairc diff`
reports: `let`, `lever`, `record`, `state`, `document`, `policy`, `inducer`,
`tool`, `participant`, `measure`, `study_measure`, `enum`, `schema`, `condition`,
`channel`, and
the blocks (`instances`, `instances`) and (`authorization`, `authorization`).

A declaration *reads* what its expressions evaluate or its data is built from:

- a `let` it calls (the `let`'s body, with its own reads),
- a lever, state, record/table/ledger, document or measurement it names,
- `instance` (the `instances` block) and `authorized`/`unauthorized` (the
  authorization matrix),
- the schemas and enums its types name, and a policy's `source` document;
- for a `study measure`, the conditions (grid cells) and the metrics it names:
  it has no expressions, its reads are its names.

A name used as an identity — a participant or tool passed to `messages(…)` or
`calls(…)`, an inducer's `roles`, a tool's delegate — is not a read: what it
compares is the name, not the other declaration's definition. Every expression
of a declaration is found by walking the IR model, so a new clause of any kind
is covered without a list of slots per kind.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic import BaseModel

from eairdsl.ir import (
    EXPR_NODES,
    Call,
    ChannelIR,
    Expr,
    LetCall,
    PolicyIR,
    RatingGapMeasure,
    RegretMeasure,
    TypeIR,
    World,
    channel_via,
    children,
)
from eairdsl.ir import Ref as RefNode

__all__ = ["AUTHORIZATION", "INSTANCES", "DeclKind", "Ref", "channel_label", "declarations",
           "describe", "direct_reads", "expr_reads", "read_graph", "reads"]

#: what kind of declaration a `Ref` names (`protected`: the world's protected list)
DeclKind = Literal["world", "condition", "lever", "record", "state", "document", "policy",
                   "inducer", "tool", "measure", "participant", "let", "enum", "schema",
                   "channel", "authorization", "instances", "protected", "study_measure"]
Ref = tuple[DeclKind, str]

#: expression `ref` kinds that read another declaration (the rest are identities or locals)
_REF_KINDS: dict[str, DeclKind] = {"lever": "lever", "state": "state", "record": "record",
              "document": "document", "measure": "measure", "enum": "enum"}
#: builtins that read the authorization matrix
_AUTHORIZATION_CALLS = frozenset({"authorized", "unauthorized"})

INSTANCES: Ref = ("instances", "instances")
AUTHORIZATION: Ref = ("authorization", "authorization")


def channel_label(channel: ChannelIR) -> str:
    """How a channel is named: `channel a -> b via tool`."""
    via = channel_via(channel)
    return f"{channel.kind} " + " -> ".join(channel.parties) + (f" via {via}" if via else "")


def declarations(world: World) -> dict[Ref, Any]:
    """Every declaration of `world`, (kind, name) -> its IR piece."""
    out: dict[Ref, Any] = {("world", world.meta.name): world.meta}
    groups: tuple[tuple[DeclKind, list[Any]], ...] = (
        ("condition", world.conditions), ("lever", world.levers), ("record", world.records),
        ("state", world.states), ("document", world.documents), ("policy", world.policies),
        ("inducer", world.inducers), ("tool", world.tools), ("measure", world.measures),
        ("participant", world.parties), ("study_measure", world.study_measures))
    for kind, items in groups:
        for item in items:
            out[(kind, item.name)] = item
    out.update({("let", name): let for name, let in world.lets.items()})
    out.update({("enum", name): members for name, members in world.enums.items()})
    out.update({("schema", name): fields for name, fields in world.schemas.items()})
    out.update({("channel", channel_label(c)): c for c in world.channels})
    out[AUTHORIZATION] = world.authorization
    out[INSTANCES] = world.instances
    return out


def expr_reads(e: Expr | None) -> Iterator[Ref]:
    """What one expression reads directly (a `let` call is one read; its body is the let's)."""
    if e is None:
        return
    match e:
        case LetCall(name=name):
            yield "let", name
        case RefNode(kind=kind, name=name) if name:
            if kind in _REF_KINDS:
                yield _REF_KINDS[kind], name
            elif kind == "instance":
                yield INSTANCES
        case Call(func=func) if func in _AUTHORIZATION_CALLS:
            yield AUTHORIZATION
    for child in children(e):
        yield from expr_reads(child)


def _value_reads(value: Any, world: World) -> Iterator[Ref]:
    """Every read in an IR piece: its expressions, the types it names, a policy's source."""
    if isinstance(value, EXPR_NODES):
        yield from expr_reads(value)
    elif isinstance(value, TypeIR):
        if value.name in world.schemas:
            yield "schema", value.name
        elif value.name in world.enums:
            yield "enum", value.name
        yield from _value_reads(value.arg, world)
    elif isinstance(value, (RegretMeasure, RatingGapMeasure)):
        yield from _study_reads(value)
    elif isinstance(value, BaseModel):
        if isinstance(value, PolicyIR) and value.document:
            yield "document", value.document
        for field in type(value).model_fields:
            yield from _value_reads(getattr(value, field), world)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _value_reads(item, world)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _value_reads(item, world)


def _study_reads(measure: RegretMeasure | RatingGapMeasure) -> Iterator[Ref]:
    """A study measure's reads: its cells' conditions and the metrics it takes figures from
    (participants are identities, as in `messages(…)`)."""
    for cell in measure.calibration:
        yield "condition", cell.condition
    for name in measure.routed:
        yield "condition", name
    yield "measure", measure.score
    if isinstance(measure, RegretMeasure):
        yield "measure", measure.selected
    else:
        for rating in measure.ratings:
            yield "measure", rating.metric


def direct_reads(world: World, ref: Ref) -> set[Ref]:
    """What the declaration `ref` reads itself (not through what it reads)."""
    piece = declarations(world).get(ref)
    return set(_value_reads(piece, world)) - {ref} if piece is not None else set()


def read_graph(world: World) -> dict[Ref, set[Ref]]:
    """Every declaration -> what it reads directly."""
    return {ref: set(_value_reads(piece, world)) - {ref}
            for ref, piece in declarations(world).items()}


def reads(world: World, ref: Ref, through: Callable[[Ref], bool] = lambda r: True,
          graph: dict[Ref, set[Ref]] | None = None) -> dict[Ref, tuple[Ref, ...]]:
    """Everything `ref` reads, directly or through what it reads.

    Each read maps to the chain of declarations it is read through (empty when
    read directly; the shortest chain when there are several). The walk
    continues past a read only where `through(read)` is true.
    """
    graph = graph if graph is not None else read_graph(world)
    found: dict[Ref, tuple[Ref, ...]] = {}
    queue: deque[tuple[Ref, tuple[Ref, ...]]] = deque([(ref, ())])
    seen = {ref}
    while queue:
        current, chain = queue.popleft()
        for read in sorted(graph.get(current, ())):
            if read in seen:
                continue
            seen.add(read)
            found[read] = chain
            if through(read):
                queue.append((read, (*chain, read)))
    return found


def describe(ref: Ref) -> str:
    """A read in a few words: a `let` by its name, anything else as `kind name`."""
    kind, name = ref
    if kind == "let":
        return name
    if kind == name:  # the instances and authorization blocks
        return kind
    return f"{kind} {name}"
