"""What bundling works out once and reuses: per world, per content, per lever setting.

`bundle.bundle_files` makes every file of an episode's bundle, and most of what it
reads is the same for every episode of a world (its read graph, judge rubrics, the
pattern of its source locations, each tool's reach) or of a world and condition
(tools.json, policies.json, the indented JSON of a record view or an authorization
matrix). Worked out per episode, that was most of an audit's time. This module
keeps it, each cache keyed by everything its value is made from and bounded:

- `Facts`, per world digest (a world's content): `facts(world)`;
- `made(facts, key, make)`: a file made once per key (what it is made from);
- `dump(data)`: a bundle JSON file's text, made once per value;
- `fold_ir(expr, levers, lets)`: the checker's folder with one `let` table per world;
- `source_pattern`, `needles`, `DOTTED`: the world's source locations, and what every
  one contains (so a step that contains none is not searched).

Nothing here changes what a bundle holds: each value is what the uncached code made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eairdsl.ir import Call, Expr, LetIR, Ref, World, walk_expr
from eairdsl.reads import read_graph

if TYPE_CHECKING:
    from eairdsl.runtime.evaluate import LetTable

__all__ = ["DOTTED", "Facts", "dump", "facts", "fold_ir", "lever_key", "made", "needles",
           "source_pattern"]


@dataclass
class Facts:
    """What bundling needs of a world whatever the episode, worked out once per world:
    the read graph (every declaration -> what it reads), the judge rubrics, the pattern
    of its source locations, and each tool's `reveals`."""

    graph: dict[Any, set[Any]]
    rubrics: set[str]
    sources: re.Pattern[str]
    needles: tuple[str, ...] | None
    reveals: dict[str, list[str]]
    #: (party, position in its tool list) -> whether its `when` is decided at the start
    decided: dict[tuple[str, int], bool] = field(default_factory=dict)
    #: tools.json and policies.json by everything they are made from (`made`)
    made: dict[tuple[Any, ...], bytes] = field(default_factory=dict)


#: by world digest (a world's content), bounded
_FACTS: dict[str, Facts] = {}
_FACTS_MAX = 16


def facts(world: World) -> Facts:
    """The world's `Facts`, worked out on first use."""
    found = _FACTS.get(world.digest)
    if found is None:
        if len(_FACTS) >= _FACTS_MAX:
            _FACTS.clear()
        found = _FACTS[world.digest] = Facts(graph=read_graph(world),
                                             rubrics=_find_rubrics(world),
                                             sources=source_pattern(world),
                                             needles=needles(world), reveals={})
    return found


def _find_rubrics(world: World) -> set[str]:
    """Records a `judged(rubric, ...)` in a measurement reads its rubric from."""
    out: set[str] = set()
    for m in world.measures:
        for node in walk_expr(m.expr, world.lets):
            if isinstance(node, Call) and node.func == "judged" and node.args:
                out |= {x.name for x in walk_expr(node.args[0], world.lets)
                        if isinstance(x, Ref) and x.kind == "record"}
    return out


def made(facts: Facts, key: tuple[Any, ...], make: Callable[[], bytes]) -> bytes:
    """A file made from exactly what `key` names (and the world): made once per key.

    tools.json is the held tools' specs (what the runtime offered, hints included), who
    held each, and the lever values (which documents a tool reaches); policies.json the
    lever values, the records and documents shown, and the instance values the episode
    said (`bundle._shown_instance`, by their printed literals). A world's episodes share
    a few of each."""
    found = facts.made.get(key)
    if found is None:
        if len(facts.made) >= 4096:
            facts.made.clear()
        found = facts.made[key] = make()
    return found


def lever_key(levers: dict[str, Any]) -> str:
    """Lever values as a key (the reach of a tool, the files made under them)."""
    return json.dumps(levers, sort_keys=True, default=str)


def dump(data: Any, keep: bool = True) -> bytes:
    """A bundle's JSON file: sorted keys, UTF-8, one-space indent.

    The indented form is written by the json module's Python encoder, several times
    slower than its C one, and most of these files are the same for every episode of a
    world and condition. So the compact C encoding is the key of the text already
    made: equal compact encodings are the same value, and the same value indents the
    same way. `keep=False` for a file of one episode (its manifest): nothing to share."""
    if not keep:
        return (json.dumps(data, sort_keys=True, ensure_ascii=False, indent=1) + "\n").encode()
    key = json.dumps(data, sort_keys=True, ensure_ascii=False)
    found = _DUMPED.texts.get(key)
    if found is None:
        found = (json.dumps(data, sort_keys=True, ensure_ascii=False, indent=1) + "\n").encode()
        _DUMPED.keep(key, found)
    return found


@dataclass
class _Texts:
    """Texts by key, bounded by the characters of the keys (cleared when full)."""

    max_chars: int
    texts: dict[str, bytes] = field(default_factory=dict)
    chars: int = 0

    def keep(self, key: str, text: bytes) -> None:
        if self.chars + len(key) > self.max_chars:
            self.texts.clear()
            self.chars = 0
        self.texts[key] = text
        self.chars += len(key)


#: `dump`'s texts by compact encoding
_DUMPED = _Texts(max_chars=16 << 20)


def fold_ir(expr: Expr, levers: dict[str, Any], lets: dict[str, LetIR]) -> Any:
    """`check.static.fold_ir(expr, levers, lets)`, with one `let` table per world.

    `fold_ir` builds a table of the world's definitions for every expression it folds
    (telling which are stable walks every definition), and bundling folds each guard,
    effect and branch of every tool under each condition: C1's tools spent most of
    their bundling there. A table depends only on the definitions, and folding reads
    it without changing what it gives, so the table is made once per `lets`."""
    from eairdsl.check.static import FOLD_STEPS, FoldPlan  # the checker's folder
    from eairdsl.runtime.evaluate import LetTable

    found = _TABLES.get(id(lets))
    if found is None or found[0] is not lets:
        if len(_TABLES) >= 16:
            _TABLES.clear()
        found = _TABLES[id(lets)] = (lets, LetTable(lets))
    plan = FoldPlan(expr, lets, True)
    plan.table = found[1]  # the plan's own, made once here (a cached property)
    return plan.fold(levers, FOLD_STEPS)


#: a `let` table per definitions dict (kept alive with it, so its id is not reused)
_TABLES: dict[int, tuple[dict[str, LetIR], LetTable]] = {}

#: source patterns whose every file name has a "." (re caches compiled patterns, so this
#: stays as small as the set of worlds bundled)
DOTTED: set[re.Pattern[str]] = set()


def source_pattern(world: World) -> re.Pattern[str]:
    """Locations in the world's files (`d1.eair:12:3`, `a1/handbook.md`): a route guard's
    decision records its line, and a file name is the world's name, so the risk id."""
    names = {s.ref for s in world.sources} | {s.ref.rsplit("/", 1)[-1] for s in world.sources}
    alternatives = [re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)) if n]
    alternatives.append(r"[\w./-]*\.eair")
    compiled = re.compile(r"(?<![\w./-])(?:" + "|".join(alternatives) + r")(?::\d+){0,2}(?!\w)")
    if all("." in n for n in names if n):
        DOTTED.add(compiled)
    return compiled


def needles(world: World) -> tuple[str, ...] | None:
    """Text every match of `source_pattern` contains: a file name of the world, or
    `.eair`. A string holding none cannot match, and JSON writes such a string's text
    unchanged into a line, so a step whose line holds none has nothing to redact. None
    when a name has a character JSON escapes (then every step is searched)."""
    names = {s.ref for s in world.sources} | {s.ref.rsplit("/", 1)[-1] for s in world.sources}
    found = sorted({*(n for n in names if n), ".eair"})
    if any(c in '"\\' or ord(c) < 0x20 for n in found for c in n):
        return None
    # a text holding a name holds every name inside it (a path holds its file name, and
    # `x.eair` holds `.eair`): only the names with no other inside them need looking for
    return tuple(n for n in found if not any(m != n and m in n for m in found))
