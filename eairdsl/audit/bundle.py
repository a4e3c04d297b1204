"""Trace + compiled world -> a sanitized bundle: what an Auditor Agent may see of an episode.

EAIR §4 starts diagnosis from a sanitized workflow record (τ̃, K̃): the steps
and the organisational knowledge the roles had, with nothing that tells the
auditor what was manipulated or what the ground truth is. A bundle therefore
holds the episode's events (no header, no result line, no judge events) and
the world as the roles could reach it — participants, each role's card as that
role saw it, policies, the authorization matrix, the documents and records
reachable through the tools the roles held, the tools as offered to an LLM
agent, and what the world declares some enum members mean (`vocabularies.json`:
its `submission` and `intercepted` values, members the roles see in the tool
schemas and the steps anyway) — and withholds condition names, lever names and values, seeds,
instance ids, measurement names, the world's source, judge rubrics, grader
markers on record fields and the risk id (`WITHHELD`, which the manifest
lists whatever the world: the list itself must not say what a world has).

Everything role-visible is taken from the runtime, not re-derived: the cards,
display names, ranks, principals and tool lists come from an `Episode` built
for the trace's condition, instance and seed and never run (the state as the
episode started), and the tool schemas from the LLM agents' schema builder
(`eairdsl.agents.schema`). Policy rules are printed by `rule_text`.

Bundles are written atomically (a temporary folder renamed into place) and
deterministically: the same trace and world give byte-identical files, and the
folder's name, the opaque episode id, is a digest of the sanitized files.
`OUT/grader-index.json` maps each id back to its trace for graders; it is not
part of any bundle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter

from eairdsl.agents.protocol import ToolSpec
from eairdsl.agents.schema import tool_definition
from eairdsl.api import resolve_world
from eairdsl.audit import bundle_store
from eairdsl.audit.bundle_facts import DOTTED as _DOTTED
from eairdsl.audit.bundle_facts import Facts as _Facts
from eairdsl.audit.bundle_facts import dump as _dump
from eairdsl.audit.bundle_facts import facts as _facts
from eairdsl.audit.bundle_facts import fold_ir as _fold_ir
from eairdsl.audit.bundle_facts import lever_key as _lever_key
from eairdsl.audit.bundle_facts import made as _made
from eairdsl.audit.evidence import (
    EVENTS,
    MANIFEST,
    VOCABULARIES,
    Authorization,
    AuthorizationEntry,
    Manifest,
    Participant,
    PolicyCard,
    RecordView,
    ToolCard,
    Vocabularies,
    Withheld,
)
from eairdsl.audit.rule_text import RuleWithheld, rule_text, setting_literal
from eairdsl.errors import UsageError
from eairdsl.ir import (
    AppendEffect,
    Call,
    Expr,
    LetCall,
    LetIR,
    PartyIR,
    RecordIR,
    Ref,
    ToolIR,
    World,
    children,
)
from eairdsl.names import safe_filename
from eairdsl.reads import expr_reads
from eairdsl.runtime.engine import CompiledWorld, Episode
from eairdsl.runtime.evaluate import is_stable, reads_trace_or_clock, truthy
from eairdsl.runtime.trace import (
    Trace,
    TraceEvent,
    TraceHeader,
    TraceLabel,
    encode_line,
    read_trace,
)
from eairdsl.source import write_atomic
from eairdsl.study.store import STORE_FILE, Store, StoreError
from eairdsl.syntax import ast as A
from eairdsl.syntax.fmt import format_expr

__all__ = ["WITHHELD", "GRADER_INDEX", "IMPORTED_WITHHELD", "BundledTrace", "bundle_files",
           "bundle_run", "episode_identity", "find_world", "grader_labels", "GraderIndex",
           "read_grader_index",
           "imported_bundle_files", "trace_files", "write_bundle", "materialize_bundles",
           "write_imported_bundle"]

GRADER_INDEX = "grader-index.json"
#: what a source location in an event's text becomes
SOURCE_MARK = "⟨world.source⟩"
#: what the index says about itself, in the file
GRADER_NOTE = ("grader-only: maps each bundle's opaque episode id to the trace(s) it was made "
               "from (paths relative to this file), and each trace to its label (cell, agents, "
               "realized, utility). It is not part of any bundle; never give it to an auditor.")

#: What every bundle withholds, and why. The same list for every world and episode, so
#: the manifest never tells an auditor what a particular world has (which fields carry
#: grader markers, which tables are judge rubrics).
WITHHELD: tuple[Withheld, ...] = tuple(sorted((
    Withheld(locator="header.world", reason="the world's name identifies the risk under study"),
    Withheld(locator="header.digest", reason="identifies the world under study"),
    Withheld(locator="header.condition",
             reason="the experimental condition: naming it tells what was manipulated"),
    Withheld(locator="header.levers",
             reason="lever names and values: the manipulation under study"),
    Withheld(locator="header.instance", reason="the task instance id, which graders key on"),
    Withheld(locator="header.seed", reason="the episode seed"),
    Withheld(locator="header.agents",
             reason="which agent backend or behaviour profile played each participant"),
    Withheld(locator="header.eairdsl_version", reason="part of the trace header"),
    Withheld(locator="header.trace_schema", reason="part of the trace header"),
    Withheld(locator="header.usage", reason="model usage and cost of the run"),
    Withheld(locator="header.llm", reason="the models and sampling options of the run"),
    Withheld(locator="header.model_calls",
             reason="the run's model call records (models, replies, cost)"),
    Withheld(locator="result",
             reason="the ground truth: measurements, metrics, judges, validity, witness steps"),
    Withheld(locator="events.judgment", reason="judge events score the episode"),
    Withheld(locator="world.source",
             reason="the world's source and data files name the levers, conditions, "
             "measurements and the risk"),
    Withheld(locator="world.meta",
             reason="the world's name, title, operation and preserved property name the risk"),
    Withheld(locator="world.meta.risk", reason="the risk id under study"),
    Withheld(locator="world.measures",
             reason="measurement and metric names and definitions: the ground truth"),
    Withheld(locator="world.levers", reason="lever names, defaults and documentation"),
    Withheld(locator="world.conditions", reason="condition names and their lever settings"),
    Withheld(locator="world.inducers",
             reason="which card clauses, dashboards and warnings apply under which settings "
             "(their texts are in the cards and events as the roles saw them)"),
    Withheld(locator="world.instances",
             reason="the task instance table: other instances and grader fields"),
    Withheld(locator="world.lets",
             reason="definition names, which may be measurement names; policy rules show "
             "definitions inlined where they can"),
    Withheld(locator="world.judge_rubrics", reason="judge rubrics score the episode"),
    Withheld(locator="world.records.unreached",
             reason="records and documents no tool the participants held reads or writes"),
    Withheld(locator="world.records.fields.unauthorized",
             reason="fields no participant's principal may see"),
    Withheld(locator="world.records.fields.markers",
             reason="grader markers on record fields (the flag and the match patterns)"),
    Withheld(locator="world.documents.source", reason="documents' file paths in the world"),
    Withheld(locator="world.parties.description",
             reason="participants' descriptions are the world author's notes, shown to no "
             "agent; they may describe the experimental design"),
    Withheld(locator="events.source_locations",
             reason="locations in the world's files inside event fields (a routing decision "
             f"names its source line) are replaced by {SOURCE_MARK}"),
    Withheld(locator="policies.rule.settings",
             reason="a lever in a policy rule prints as the value the episode's condition "
             "gave it, never its name (⟨withheld⟩ when the value has no literal); "
             "measurement names print as ⟨withheld⟩"),
    Withheld(locator="policies.rule.unprintable",
             reason="a rule that is too long once inlined, or names withheld material, is "
             "left out (rule: null)"),
), key=lambda w: w.locator))


class BundledTrace(BaseModel):
    """One trace and the bundle written from it."""

    trace: str
    episode: str
    folder: str
    steps: int


# ------------------------------------------------------------------ finding the world

def find_world(header: TraceHeader, world: Path | None = None,
               generated: Path = Path("generated"), worlds: Path = Path("worlds"),
               trace: Path | None = None) -> World:
    """The compiled world a trace was run on, checked against the header's digest.

    `world` (a .eair file, compiled now, or a generated folder or world.json) when
    given; otherwise, for a `trace` inside a study folder, the source file the study
    compiled the world from (its store's `world_sources`, so a world kept anywhere
    needs no `--world`), then what `eairc compile` writes for the header's world
    name, `generated/<name>/world.json`, then the source `worlds/<name>.eair`
    (which `eairc run worlds/<name>.eair` compiles without writing generated/). A
    digest that differs is refused: the bundle would show another world; a
    recorded source that changed since the study is named in the message.
    """
    if world is not None:
        w = _load(world)
        if w.digest != header.digest:
            raise UsageError(f"{world} is not the world this trace ran on: its digest is "
                             f"{w.digest[:12]}…, the trace's is {header.digest[:12]}… "
                             f"(world '{header.world}')")
        return w
    name = safe_filename(header.world)
    tried: list[str] = []
    recorded = _recorded_source(header, trace, tried)
    candidates = [(generated / name / "world.json", ""), (worlds / f"{name}.eair", "")]
    if recorded is not None:
        candidates.insert(0, recorded)
    for candidate, study in candidates:
        if not candidate.is_file():
            if study:
                tried.append(f"{study}: the study ran world '{header.world}' from "
                             f"{candidate}, which no longer exists")
            continue
        try:
            w = _load(candidate)
        except UsageError:
            tried.append(f"{candidate} does not load")
            continue
        if w.digest == header.digest:
            return w
        tried.append(f"{study}: the study ran world '{header.world}' from {candidate}, "
                     f"which has changed since (digest now {w.digest[:12]}…)" if study
                     else f"{candidate} has digest {w.digest[:12]}…")
    found = "; ".join(tried) if tried else (f"neither {generated / name / 'world.json'} nor "
                                            f"{worlds / (name + '.eair')} exists")
    raise UsageError(f"no world with the trace's digest {header.digest[:12]}… (world "
                     f"'{header.world}'): {found}; pass the world it ran on with --world")


def _recorded_source(header: TraceHeader, trace: Path | None,
                     tried: list[str]) -> tuple[Path, str] | None:
    """The source file the study holding `trace` recorded for the header's world, with
    that study's store (None when the trace is in no study folder, or its store keeps no
    source for the world: a study written before sources were kept). The nearest folder
    above the trace with a results store is its study; a store that cannot be read is
    noted in `tried`."""
    if trace is None:
        return None
    for folder in Path(trace).absolute().parents:
        store_file = folder / STORE_FILE
        if not store_file.is_file():
            continue
        try:
            with Store.open(store_file, create=False) as store:
                found = store.world_sources().get(header.world)
        except StoreError as exc:
            tried.append(str(exc))
            return None
        if found is None or found[1] != header.digest:
            return None  # another version of the world ran this trace
        return found[0], str(store_file)
    return None


def _load(path: Path) -> World:
    from eairdsl.errors import WorldHasErrors

    try:
        return resolve_world(path)
    except WorldHasErrors:
        raise UsageError(f"{path} does not compile (run `eairc check {path}`)") from None


# ------------------------------------------------------------------ what the roles could see

def _start(compiled: CompiledWorld, trace: Trace) -> Episode:
    """The trace's episode as it started, built by the runtime and never run."""
    h = trace.header
    if h.condition not in compiled.conditions:
        raise UsageError("the trace's condition is not one of the world's")
    instance = next((i for i in compiled.world.instances if str(i.get("id")) == h.instance),
                    None)
    if instance is None:
        raise UsageError("the trace's instance is not one of the world's")
    try:
        return Episode(compiled, h.condition, instance, h.seed, {}, {}, Trace(h),
                       shift_traits=False)
    except Exception as exc:  # a malformed world: an expression that fails at the start
        raise UsageError(f"cannot rebuild the episode's start state: "
                         f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _could_hold(compiled: CompiledWorld, episode: Episode, party: PartyIR) -> list[ToolIR]:
    """The tools `party` holds at some point of this episode, as far as the start tells.

    A `tools … when` that reads only what cannot change (levers, the instance,
    static tables) is decided as the episode starts, as the runtime decides it;
    one that reads the state, the trace or the clock (B1's evidence tools open
    once an assessment is on file) may open later, so the tool is listed.
    """
    out = []
    w = compiled.world
    decided = _facts(w).decided
    for n, ref in enumerate(party.tools):
        tool = compiled.tools.get(ref.name)
        if tool is None:
            continue
        if ref.when is None:
            out.append(tool)
            continue
        at_start = decided.get((party.name, n))
        if at_start is None:  # a property of the world: worked out once per world
            at_start = decided[(party.name, n)] = \
                is_stable(ref.when, w.lets, compiled.mutable) \
                and not reads_trace_or_clock(ref.when, w.lets)
        if not at_start or truthy(compiled.eval(ref.when, episode.state.scope())):
            out.append(tool)
    return out


def _judge_rubrics(world: World) -> set[str]:
    """Records a `judged(rubric, ...)` in a measurement reads its rubric from."""
    return _facts(world).rubrics


#: what each tool of a world reaches, by (world digest, tool, lever values)
_TOOL_REACH: dict[tuple[str, str, str], tuple[frozenset[str], frozenset[str]]] = {}


def _live_exprs(tool: ToolIR, levers: dict[str, Any], lets: dict[str, LetIR]) -> list[Expr]:
    """The tool's expressions an episode under these lever values can evaluate: a guard,
    effect, ACL or propagation whose `when` the levers decide false is left out, and so
    is the branch of a `choose(c, a, b)` they decide against (A1's search_document reads
    one of two handbooks by a lever: the other is not within the tool's reach)."""
    def off(when: Expr | None) -> bool:
        return when is not None and _fold_ir(when, levers, lets) is False

    out: list[Expr | None] = [tool.cost, tool.result, tool.sends_to]
    out += [] if off(tool.propagates_when) else [tool.propagates, tool.propagates_when]
    out += [] if off(tool.acl_when) else [tool.acl, tool.acl_when]
    for prm in tool.params:
        out += [prm.default, prm.hint]
    for g in tool.guards:
        out += [] if off(g.when) else [g.condition, g.when]
    for e in tool.effects:
        out += [] if off(e.when) else [e.value, e.when]
    stack = [e for e in out if e is not None]
    live: list[Expr] = []
    seen: set[str] = set()
    while stack:  # walk_expr's order, pruning the branches the levers decide against
        node = stack.pop()
        live.append(node)
        if type(node) is LetCall and node.name in lets and node.name not in seen:
            seen.add(node.name)
            stack.append(lets[node.name].body)
        if type(node) is Call and node.func == "choose" and len(node.args) == 3 \
                and not any(node.keys):
            taken = _fold_ir(node.args[0], levers, lets)
            if taken is True or taken is False:
                stack.append(node.args[1] if taken else node.args[2])
                continue
        stack.extend(reversed(children(node)))
    return live


def _tool_reach(world: World, tool: ToolIR, levers: dict[str, Any],
                lever_key: str | None = None) -> tuple[frozenset[str], frozenset[str]]:
    """Records and documents one tool reads or writes under these lever values (its live
    expressions through `let`s, its effects, and every document a document parameter
    offers). `lever_key`: `_lever_key(levers)`, when the caller has it."""
    key = (world.digest, tool.name, lever_key if lever_key is not None else _lever_key(levers))
    found = _TOOL_REACH.get(key)
    if found is None:
        records: set[str] = set()
        documents: set[str] = set()
        for x in _live_exprs(tool, levers, world.lets):
            if isinstance(x, Ref) and x.kind == "record":
                records.add(x.name)
            elif isinstance(x, Ref) and x.kind == "document":
                documents.add(x.name)
        records |= {e.target for e in tool.effects if isinstance(e, AppendEffect)}
        if any(p.type.kind == "document" for p in tool.params):  # the runtime offers them all
            documents |= {d.name for d in world.documents}
        if len(_TOOL_REACH) >= 4096:
            _TOOL_REACH.clear()
        found = _TOOL_REACH[key] = (frozenset(records), frozenset(documents))
    return found


def _reach(world: World, tools: list[ToolIR], levers: dict[str, Any],
           rubrics: set[str] | None = None, lever_key: str | None = None
           ) -> tuple[list[str], list[str]]:
    """Records and documents the given tools read or write under the episode's lever
    values, in declaration order."""
    records: set[str] = set()
    documents: set[str] = set()
    key = lever_key if lever_key is not None else _lever_key(levers)
    for tool in tools:
        r, d = _tool_reach(world, tool, levers, key)
        records |= r
        documents |= d
    records -= _judge_rubrics(world) if rubrics is None else rubrics
    return ([r.name for r in world.records if r.name in records],
            [d.name for d in world.documents if d.name in documents])


#: record views by (world digest, record, fields): the same bytes for every episode of a
#: world, and most of a bundle's size; bounded, so a long-lived process cannot grow it
_RECORD_VIEWS: dict[tuple[str, str, tuple[str, ...]], bytes] = {}
_RECORD_VIEWS_MAX = 256


def _record_view(w: World, rec: RecordIR, fields: list[str]) -> bytes:
    key = (w.digest, rec.name, tuple(fields))
    data = _RECORD_VIEWS.get(key)
    if data is None:
        view = RecordView(name=rec.name, kind=rec.kind,
                          key=rec.key if rec.key in fields else None, fields=fields,
                          rows=[{f: row[f] for f in fields if f in row} for row in rec.rows])
        data = _dump(view.model_dump(mode="json"))
        if len(_RECORD_VIEWS) >= _RECORD_VIEWS_MAX:
            _RECORD_VIEWS.clear()
        _RECORD_VIEWS[key] = data
    return data


def _redact(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        # a pattern whose every alternative has a "." cannot match text without one
        # (`_DOTTED`: the common case, file names with a suffix), so skip the search
        if "." not in value and pattern in _DOTTED:
            return value
        return pattern.sub(SOURCE_MARK, value)
    if isinstance(value, dict):
        return {k: _redact(v, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, pattern) for v in value]
    return value


def _event_line(event: TraceEvent, pattern: re.Pattern[str],
                needles: tuple[str, ...] | None = None) -> str:
    # the trace writer's encoding (sorted keys, UTF-8, absent fields omitted), from the
    # validated model: keys a hostile trace added are dropped
    data = event.model_dump(mode="json", exclude_none=True)
    line = encode_line(data)
    if needles is not None and not any(n in line for n in needles):
        return line  # no string of the step can hold a location: nothing to redact
    return encode_line(_redact(data, pattern))


def bundle_files(trace: Trace, world: World | CompiledWorld) -> dict[str, bytes]:
    """Every file of the trace's bundle but the manifest, by relative path.

    In the order the files are added: the events, the tools the participants held
    (`_held_tools`, `_tool_cards`), the participants and their cards
    (`_participant_files`), the records and documents those tools reach with the
    authorization matrix over them (`_knowledge_files`), the policies with
    what they name withheld (`_policy_cards`), and the meanings the world declares for
    some enum members (`vocabularies.json`, only when it declares any)."""
    compiled = world if isinstance(world, CompiledWorld) else CompiledWorld(world)
    w = compiled.world
    episode = _start(compiled, trace)
    steps = [e for e in trace.events if e.kind != "judgment"]
    facts = _facts(w)
    sources = facts.sources
    files: dict[str, bytes] = {
        EVENTS: "".join(_event_line(e, sources, facts.needles) + "\n"
                        for e in steps).encode()}
    tools = _held_tools(compiled, episode, steps)
    rubrics = facts.rubrics  # walks every measurement: once per world, not per bundle
    levers = episode.state.levers
    lever_key = _lever_key(levers)
    held = tuple((t.name, tools.specs[t.name].model_dump_json(), tuple(tools.offered[t.name]))
                 for t in tools.held)
    files["tools.json"] = _made(facts, ("tools", lever_key, held), lambda: _dump(
        [c.model_dump(mode="json") for c in _tool_cards(w, tools, levers, rubrics)]))
    _participant_files(w, episode, tools, files)
    records, documents = _knowledge_files(
        w, episode, _reach(w, tools.held, levers, rubrics, lever_key), files)
    shown = _shown_instance(episode.instance, files)
    said = tuple((k, type(v).__name__, format_expr(v)) for k, v in sorted(shown.items()))
    files["policies.json"] = _made(
        facts, ("policies", lever_key, tuple(records), tuple(documents), said),
        lambda: _dump([p.model_dump(mode="json")
                       for p in _policy_cards(w, records, documents, levers, shown)]))
    vocabularies = Vocabularies(submission=w.meaning("submission"),
                                intercepted=w.meaning("interception"))
    if vocabularies != Vocabularies():  # none declared: no file, read as empty
        files[VOCABULARIES] = _dump(vocabularies.model_dump(mode="json"))
    return files


@dataclass
class _HeldTools:
    """The tools of one episode the participants held: who was offered (or called)
    each, its spec as the runtime made it, and the held ones in declaration order."""

    offered: dict[str, list[str]]
    specs: dict[str, ToolSpec]
    held: list[ToolIR]


def _held_tools(compiled: CompiledWorld, episode: Episode,
                steps: list[TraceEvent]) -> _HeldTools:
    """Those each participant could hold in this episode, and any it called: an auditor
    sees a tool the trace shows in use even where the start did not tell it was held."""
    w = compiled.world
    offered: dict[str, list[str]] = {}
    specs: dict[str, ToolSpec] = {}
    try:
        for party in w.parties:
            for tool in _could_hold(compiled, episode, party):
                if tool.name not in specs:
                    specs[tool.name] = episode.tools.spec(tool)  # how the runtime specs one
                offered.setdefault(tool.name, []).append(party.name)
        for e in steps:
            called = compiled.tools.get(e.tool or "") if e.kind == "tool_call" else None
            if called is None or e.actor not in compiled.parties:
                continue
            if called.name not in specs:
                specs[called.name] = episode.tools.spec(called)
            if e.actor not in offered.setdefault(called.name, []):
                offered[called.name].append(e.actor)
    except Exception as exc:
        raise UsageError(f"cannot list the tools the participants held: "
                         f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return _HeldTools(offered, specs, [t for t in w.tools if t.name in specs])


def _tool_cards(w: World, tools: _HeldTools, levers: dict[str, Any],
                rubrics: set[str]) -> list[ToolCard]:
    """Each held tool as an LLM agent was offered it (the agents' schema builder), with
    the roles that held it and the documents it reaches."""
    order = [p.name for p in w.parties]
    facts = _facts(w)
    lever_key = _lever_key(levers)
    cards: list[ToolCard] = []
    for tool in tools.held:
        fn = tool_definition(tools.specs[tool.name], w)["function"]
        cards.append(ToolCard(name=tool.name, kind=tool.kind, description=fn["description"],
                              parameters=fn["parameters"],
                              roles=sorted(tools.offered[tool.name], key=order.index),
                              documents=_reach(w, [tool], levers, rubrics, lever_key)[1],
                              reveals=_reveals(w, tool, facts),
                              writes=sorted({e.target for e in tool.effects})))
    return cards


def _reveals(w: World, tool: ToolIR, facts: _Facts) -> list[str]:
    """The records a tool's result reads, directly or through the `let`s it calls."""
    found = facts.reveals.get(tool.name)
    if found is None:
        found = facts.reveals[tool.name] = _find_reveals(tool, facts.graph)
    return list(found)


def _find_reveals(tool: ToolIR, graph: dict[Any, set[Any]]) -> list[str]:
    start = set(expr_reads(tool.result))
    seen: set[Any] = set()
    while start:
        ref = start.pop()
        if ref in seen:
            continue
        seen.add(ref)
        if ref[0] == "let":
            start |= graph.get(ref, set())
    return sorted(name for kind, name in seen if kind == "record")


def _participant_files(w: World, episode: Episode, tools: _HeldTools,
                       files: dict[str, bytes]) -> None:
    """Each participant's card as it saw it (`cards/<name>.md`) and `participants.json`:
    names, ranks and principals from the started episode, so nothing is re-derived."""
    participants: list[Participant] = []
    for party in w.parties:
        card = episode.card(party.name)
        card_file = f"cards/{safe_filename(party.name)}.md" if card else None
        if card_file is not None:
            files[card_file] = card.encode()
        principal = episode.state.principal_of(party.name) if party.principal else None
        participants.append(Participant(
            name=party.name, kind=party.kind, display=episode.names.get(party.name),
            authority=episode.authority.get(party.name), principal=principal,
            tools=[t for t in dict.fromkeys([*(r.name for r in party.tools),
                                             *(x.name for x in tools.held)])
                   if party.name in tools.offered.get(t, ())],
            card=card_file))
    files["participants.json"] = _dump([p.model_dump(mode="json") for p in participants])


def _knowledge_files(w: World, episode: Episode, reach: tuple[list[str], list[str]],
                     files: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """The records and documents the held tools reach (`reach`), and who may see which
    field: `authorization.json`, each record's visible fields, each document's text.
    Returns `reach` for the policies, which show only what is shown here."""
    records, documents = reach
    order = [p.name for p in w.parties]
    auth = episode.state.authorizer
    entries = [AuthorizationEntry(principal=p, record=r, fields=list(auth.allowed(p, r)))
               for p in sorted(order) for r in sorted(records)]
    files["authorization.json"] = _dump(Authorization(
        default=w.authorization.default, visible=entries).model_dump(mode="json"))
    ruled = {r.record for r in w.authorization.rules}
    for rec in w.records:
        if rec.name not in records:
            continue
        # A record the matrix's rules name shows the fields some participant may see; one
        # they do not name (A1 declares no authorization at all) is returned whole by the
        # tools that read it, so all its fields are reachable.
        seen = ({f for e in entries if e.record == rec.name for f in e.fields}
                if rec.name in ruled else {f.name for f in rec.fields})
        fields = [f.name for f in rec.fields if f.name in seen]
        if not fields:
            continue
        files[f"records/{safe_filename(rec.name)}.json"] = _record_view(w, rec, fields)
    for doc in w.documents:
        if doc.name in documents:
            files[f"documents/{safe_filename(doc.name)}"] = doc.text.encode()
    return records, documents


def _settings(w: World, levers: dict[str, Any],
              hidden_names: frozenset[str]) -> dict[str, A.Expr]:
    """Each lever's value for the episode's condition as the literal a rule prints in its
    place: the roles saw the setting (a threshold in a card or a guard's reason), so the
    auditor does too, but never the lever's name. A value with no literal, or whose
    printed form would say a withheld name (an enum member named like a condition), is
    left out, so it still prints as withheld."""
    out: dict[str, A.Expr] = {}
    for lever in w.levers:
        literal = setting_literal(lever.type.kind, levers.get(lever.name, lever.default))
        if literal is None:
            continue
        if _names_any(format_expr(literal), hidden_names):
            continue
        out[lever.name] = literal
    return out


def _names_any(printed: str, names: frozenset[str]) -> bool:
    """Whether a printed literal says one of `names` as a whole identifier."""
    pattern = _names_pattern(names)
    return pattern is not None and pattern.search(printed) is not None


@functools.lru_cache(maxsize=64)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern for `_names_any` (a world's hidden names, compiled once)."""
    if not names:
        return None
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(re.escape(n) for n in sorted(names))
                      + r")(?![A-Za-z0-9_])")


def _folder(w: World, levers: dict[str, Any]) -> Callable[[LetCall], A.Expr | None]:
    """A `let` call's value for the episode where literals and lever values decide it
    (the checker's folder: no state, record, trace or clock is read), as a literal."""
    from eairdsl.check.static import UNKNOWN  # the checker's folder

    def fold(call: LetCall) -> A.Expr | None:
        value = _fold_ir(call, levers, w.lets)
        if value is UNKNOWN:
            return None
        kind = {bool: "bool", int: "int", float: "number", str: "text"}.get(type(value))
        return None if kind is None else setting_literal(kind, value)

    return fold


#: the shortest instance text that counts as shown (a shorter one matches by chance)
_SHOWN_MIN = 3


def _shown_instance(instance: dict[str, Any], files: dict[str, bytes]) -> dict[str, A.Expr]:
    """The task instance's fields the episode showed its participants, as the literals a
    rule prints in their place: a text of at least `_SHOWN_MIN` characters, or a number
    of two or more, said verbatim (a number as a whole number) in the bundle's events or
    cards — a message, a tool's arguments or result, a rendered card. What no participant
    saw (a grader flag, an answer key, another field) stays withheld: the instance table
    itself is never in a bundle."""
    seen = "\n".join(data.decode("utf-8", "replace") for rel, data in sorted(files.items())
                     if rel == EVENTS or rel.startswith("cards/"))
    out: dict[str, A.Expr] = {}
    for name, value in sorted(instance.items()):
        if name == "id" or isinstance(value, bool):
            continue
        if isinstance(value, str) and len(value) >= _SHOWN_MIN:
            said = json.dumps(value, ensure_ascii=False)[1:-1] in seen or value in seen
            literal = setting_literal("text", value) if said else None
        elif isinstance(value, int | float) and len(str(value)) >= 2:
            said = re.search(r"(?<![\d.])" + re.escape(str(value)) + r"(?![\d]|\.\d)",
                             seen) is not None
            literal = setting_literal("number" if isinstance(value, float) else "int",
                                      value) if said else None
        else:
            continue
        if literal is not None:
            out[f"instance.{name}"] = literal
    return out


def _policy_cards(w: World, records: list[str], documents: list[str],
                  levers: dict[str, Any] | None = None,
                  instance: dict[str, A.Expr] | None = None) -> list[PolicyCard]:
    """Each policy's text and, where it can be printed without naming a measurement,
    lever, condition or a record or document the bundle does not show, its rule, with
    the episode's lever values in place of the levers (`_settings`, `_folder`)."""
    hidden_names = frozenset({m.name for m in w.measures} | {lv.name for lv in w.levers}
                             | {c.name for c in w.conditions})
    shown_records, shown_docs = set(records), set(documents)
    settings = {**_settings(w, levers or {}, hidden_names),
                **{k: v for k, v in (instance or {}).items()
                   if not _names_any(format_expr(v), hidden_names)}}
    fold = _folder(w, levers or {})

    def shown(ref: Ref) -> bool:
        match ref.kind:
            case "record":
                return ref.name in shown_records
            case "document":
                return ref.name in shown_docs
            case _:
                return ref.name not in hidden_names

    policies: list[PolicyCard] = []
    for pol in w.policies:
        rule = None
        if pol.rule is not None:
            try:
                # the task instance and the call context are not in the bundle: a rule
                # reading them prints them withheld (but for instance fields the episode
                # showed its participants, `_shown_instance`) and stays unassessed,
                # rather than evaluating them as missing (an empty list made it hold)
                rule = rule_text(pol.rule, w.lets,
                                 frozenset({"lever", "measure", "instance", "context"}),
                                 hidden_names, shown, settings=settings, fold=fold)
            except RuleWithheld:
                rule = None
        policies.append(PolicyCard(name=pol.name, text=pol.text, enforced=pol.enforced,
                                   document=pol.document, rule=rule))
    return policies


def _episode_id(files: dict[str, bytes], digests: dict[str, str] | None = None) -> str:
    """Opaque: a digest of the sanitized files, so never of the world, condition or seed."""
    digests = digests if digests is not None else _digests(files)
    listing = "".join(f"{rel}\0{digests[rel]}\n" for rel in sorted(files))
    return "ep-" + hashlib.sha256(listing.encode()).hexdigest()[:20]


def _digests(files: dict[str, bytes]) -> dict[str, str]:
    """Each file's sha256, by path, sorted: what the manifest lists."""
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())}


# ------------------------------------------------------------------ writing

def _read(trace_path: Path) -> Trace:
    try:
        return read_trace(trace_path)
    except OSError as exc:
        raise UsageError(f"{trace_path}: cannot be read: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        bad = _bad_line(trace_path)
        if bad is not None:
            raise UsageError(f"{trace_path}: {bad[0]}: not a trace ({bad[1]})") from None
        raise UsageError(f"{trace_path}: not a trace ({why[:200]})") from None


def _bad_line(trace_path: Path) -> tuple[str, str] | None:
    """Where (`line N, column C`) the first line that is not JSON is, and why, for a
    trace cut short or damaged: the reader's own message counts lines and columns within
    that one line, so a trace cut at line 8 said "line 1 column 149"."""
    try:
        text = trace_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError as exc:
            return f"line {n}, column {exc.colno}", exc.msg
        except (ValueError, RecursionError) as exc:
            return f"line {n}", (str(exc) or type(exc).__name__)[:200]
    return None


def write_bundle(trace_path: Path, world: World | CompiledWorld, out_dir: Path,
                 index: bool = True, materialize: bool = False) -> Manifest:
    """Write the sanitized bundle of one trace to `out_dir/<episode id>/`; return its manifest.

    `world` must be the world the trace ran on (same digest). With `index`,
    `out_dir/grader-index.json` gets the episode id -> trace entry. The folder keeps
    the episode's own files and `out_dir/shared/` the world's, once per content
    (`bundle_store`); with `materialize`, the folder holds every file itself.
    """
    return _write_trace(_read(Path(trace_path)), Path(trace_path), world, Path(out_dir),
                        index, materialize)


def episode_identity(trace_path: Path, world: World | CompiledWorld) -> str:
    """The episode id the trace's bundle would have (its content identity), computed
    without writing the bundle: what a retest needs to tell a fresh case from an
    audited one."""
    _, _, episode = _sealed(_read(Path(trace_path)), Path(trace_path), world)
    return episode


def _sealed(trace: Trace, trace_path: Path, world: World | CompiledWorld
            ) -> tuple[dict[str, bytes], dict[str, str], str]:
    """The bundle's files but the manifest, their digests and the episode id."""
    w = world.world if isinstance(world, CompiledWorld) else world
    if w.digest != trace.header.digest:
        raise UsageError(f"{trace_path}: the trace ran on a world with digest "
                         f"{trace.header.digest[:12]}…, not this one ({w.digest[:12]}…)")
    try:
        files = bundle_files(trace, world)
    except UsageError as exc:
        raise UsageError(f"{trace_path}: {exc}") from None
    digests = _digests(files)
    return files, digests, _episode_id(files, digests)


def _write_trace(trace: Trace, trace_path: Path, world: World | CompiledWorld, out_dir: Path,
                 index: bool, materialize: bool) -> Manifest:
    """`write_bundle` of a trace already read."""
    files, digests, episode = _sealed(trace, trace_path, world)
    manifest = Manifest(episode=episode,
                        steps=sum(1 for e in trace.events if e.kind != "judgment"),
                        files=digests, withheld=list(WITHHELD))
    files[MANIFEST] = _dump(manifest.model_dump(mode="json"), keep=False)
    _write_folder(out_dir, episode, files, materialize, digests)
    if index:
        _update_index(out_dir, {episode: [trace_path]},
                      {trace_path: TraceLabel.of(trace.header, trace.result)})
    return manifest


# ------------------------------------------------------------------ imported traces

#: what a bundle of an imported trace (a header with `source`, docs/external.md) withholds
#: besides `WITHHELD`: the source block and the importer's grader side file
IMPORTED_WITHHELD: tuple[Withheld, ...] = (
    Withheld(locator="grader.json",
             reason="the importer's grader-only side file: the dataset's labels, answers, "
             "rewards and reference solutions"),
    Withheld(locator="header.source",
             reason="the source file, its digest, the importer and the fields it withheld "
             "(which name the dataset's labels)"),
)


_LINE_BREAKS = {0x2028: "\\u2028", 0x2029: "\\u2029", 0x85: "\\u0085"}


def imported_bundle_files(trace: Trace) -> dict[str, bytes]:
    """Every file but the manifest of an imported trace's bundle, made without a world.

    The log is all there is: participants are the trace's own, tools those its
    steps name, and there are no cards, policies, records, documents or
    authorization rules to show, so none is invented (an empty list, a matrix
    with no entries).
    """
    steps = [e for e in trace.events if e.kind != "judgment"]
    # U+2028, U+2029 and U+0085 escaped: a reader that splits lines with `splitlines`
    # (Bundle.load) would cut a line at them; the parsed text is the same
    events = "".join(json.dumps(e.model_dump(mode="json", exclude_none=True), sort_keys=True,
                                ensure_ascii=False).translate(_LINE_BREAKS) + "\n"
                     for e in steps)
    callers: dict[str, list[str]] = {}
    for e in steps:
        if e.kind in ("tool_call", "tool_result") and e.tool:
            roles = callers.setdefault(e.tool, [])
            if e.kind == "tool_call" and e.actor not in roles:
                roles.append(e.actor)
    participants = [Participant(name=name, kind="role",
                                tools=[t for t, roles in callers.items() if name in roles])
                    for name in trace.header.agents]
    return {EVENTS: events.encode(),
            "participants.json": _dump([p.model_dump(mode="json") for p in participants]),
            "tools.json": _dump([ToolCard(name=t, kind="external", roles=roles)
                                 .model_dump(mode="json") for t, roles in callers.items()]),
            "policies.json": _dump([]),
            "authorization.json": _dump(Authorization(default="deny").model_dump(mode="json"))}


def write_imported_bundle(trace_path: Path, out_dir: Path, index: bool = True,
                          materialize: bool = False) -> Manifest:
    """`write_bundle` for an imported trace (header `source`): no world, nothing invented."""
    return _write_imported(_read(Path(trace_path)), Path(trace_path), Path(out_dir), index,
                           materialize)


def _write_imported(trace: Trace, trace_path: Path, out_dir: Path, index: bool,
                    materialize: bool) -> Manifest:
    if trace.header.source is None:
        raise UsageError(f"{trace_path}: not an imported trace (its header has no source)")
    files = imported_bundle_files(trace)
    digests = _digests(files)
    episode = _episode_id(files, digests)
    manifest = Manifest(episode=episode,
                        steps=sum(1 for e in trace.events if e.kind != "judgment"),
                        files=digests,
                        withheld=sorted([*WITHHELD, *IMPORTED_WITHHELD],
                                        key=lambda w: w.locator))
    files[MANIFEST] = _dump(manifest.model_dump(mode="json"), keep=False)
    _write_folder(out_dir, episode, files, materialize, digests)
    if index:
        _update_index(out_dir, {episode: [trace_path]},
                      {trace_path: TraceLabel.of(trace.header, trace.result)})
    return manifest


def _write_folder(out: Path, name: str, files: dict[str, bytes], materialize: bool,
                  digests: dict[str, str]) -> None:
    """`out/name/`: every file in it (`materialize`), or the episode's own files in it and
    the others once each in `out/shared/` (`bundle_store`)."""
    if materialize:
        bundle_store.write_plain(out, name, files)
    else:
        bundle_store.write_compact(out, name, files, digests)


def _update_index(out: Path, new: dict[str, list[Path]],
                  labels: dict[Path, TraceLabel] | None = None) -> None:
    """Merge entries into `out/grader-index.json`, dropping ids whose folder is gone, with
    the label of each trace (`labels`, kept from the file for traces it already had)."""
    path = out / GRADER_INDEX
    old = read_grader_index(out)
    episodes = {key: set(traces) for key, traces in old.episodes.items()
                if bundle_store.is_bundle(out / key)}
    known: dict[str, Any] = {t: label.model_dump(mode="json") for t, label in old.labels.items()}
    base = out.resolve()
    for key, traces in new.items():
        episodes.setdefault(key, set()).update(
            os.path.relpath(Path(t).resolve(), base) for t in traces)
    for trace, label in (labels or {}).items():
        known[os.path.relpath(Path(trace).resolve(), base)] = label.model_dump(mode="json")
    named = {t for traces in episodes.values() for t in traces}
    data = {"about": GRADER_NOTE,
            "episodes": {k: sorted(v) for k, v in sorted(episodes.items())},
            "labels": {t: known[t] for t in sorted(named) if t in known}}
    try:
        write_atomic(path, _dump(data))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# ------------------------------------------------------------------ a trace or a run folder

def _header_line(path: Path | str) -> str | None:
    """The file's first line when it is a trace header (cassettes, sidecars and bundles'
    own events.jsonl are not), else None. Read whole: an LLM trace's header carries its
    model calls and may be long."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
        data = json.loads(first)
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("type") == "header":
        return first.decode("utf-8")
    return None


def trace_files(path: Path, out_dir: Path | None = None) -> list[Path]:
    """The traces under a run folder (or the one trace file), sorted, so bundling goes in
    a fixed order. Hidden folders (our temporary ones) are skipped, and so is `out_dir`
    when it lies inside the run folder; symbolic links to folders are not followed."""
    return [Path(name) for name in trace_file_names(path, out_dir)]


def trace_file_names(path: Path, out_dir: Path | None = None) -> list[str]:
    """`trace_files` as text: a Path object per trace is ~0.9 KB more, 18 MB of an
    export's peak at 20,000 traces."""
    if path.is_file():
        if _header_line(path) is None:
            raise UsageError(f"{path} is not a trace (its first line is not a trace header)")
        return [str(path)]
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is not a regular file or a folder")
    if not path.is_dir():
        raise UsageError(f"{path}: no such trace file or run folder")
    root = path.resolve()
    skip = out_dir.resolve() if out_dir is not None else None
    if skip is not None and root not in skip.parents:
        skip = None  # the output is the run folder itself or outside it: nothing to skip
    found = []
    for folder, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and (skip is None or (Path(folder) / d).resolve() != skip))
        for name in names:
            p = os.path.join(folder, name)
            if name.endswith(".jsonl") and os.path.isfile(p) and _header_line(p) is not None:
                found.append(p)
    if not found:
        raise UsageError(f"{path}: no traces found (files *.jsonl whose first line is a trace "
                         "header)")
    # sorted as the Paths were: by their parts, not by the text ("a/b" before "a-b/c");
    # the separator made the lowest character gives that order with one string per path
    # (a list of parts each was 10 MB of an export's peak at 20,000 traces)
    return sorted(found, key=lambda p: p.replace(os.sep, "\x00"))


def bundle_run(path: Path | Sequence[Path], out_dir: Path,
               world: Path | None = None, materialize: bool = False) -> list[BundledTrace]:
    """Bundle a trace, every trace under a run folder, or the given traces into `out_dir`.

    The world of each trace is found from its header (`find_world`), or is
    `world` for all of them; an imported trace (header `source`) needs none.
    `out_dir` may lie inside the run folder; it is skipped.
    `out_dir/grader-index.json` maps every episode id to its trace(s). The world's
    files are kept once in `out_dir/shared/` unless `materialize` (`write_bundle`).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        # it was "cannot write the bundle OUT/ep-…: File exists"
        raise UsageError(f"{out_dir} is a file, not a bundle folder: use another -o")
    if isinstance(path, (str, Path)):
        traces = trace_files(Path(path), out_dir)
    else:
        traces = [q for p in path for q in trace_files(Path(p))]
    worlds: dict[str, CompiledWorld] = {}
    done: list[BundledTrace] = []
    index: dict[str, list[Path]] = {}
    labels: dict[Path, TraceLabel] = {}
    for trace_path in traces:
        trace = _read(trace_path)  # once: the header finds the world, the rest is bundled
        header = trace.header
        if header.source is not None and world is None:  # imported: no world (external)
            manifest = _write_imported(trace, trace_path, out_dir, False, materialize)
        else:
            compiled = worlds.get(header.digest)
            if compiled is None:
                try:
                    found = find_world(header, world, trace=trace_path)
                except UsageError as exc:
                    raise UsageError(f"{trace_path}: {exc}") from None
                compiled = worlds[header.digest] = CompiledWorld(found)
            manifest = _write_trace(trace, trace_path, compiled, out_dir, False, materialize)
        index.setdefault(manifest.episode, []).append(trace_path)
        labels[trace_path] = TraceLabel.of(header, trace.result)
        done.append(BundledTrace(trace=str(trace_path), episode=manifest.episode,
                                 folder=str(out_dir / manifest.episode), steps=manifest.steps))
    _update_index(out_dir, index, labels)
    return done


def materialize_bundles(path: Path, out_dir: Path) -> list[Path]:
    """Bundles already written (one bundle folder, or a bundles folder: `eairc bundle -o`,
    an audit's `bundles/`) as plain folders under `out_dir`, each byte for byte what
    `write_bundle(..., materialize=True)` writes, with the grader index's entries for
    them. Returns the folders written."""
    path, out_dir = Path(path), Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir} is a file, not a bundle folder: use another -o")
    folders = [path] if bundle_store.is_bundle(path) else bundle_store.episode_folders(path)
    if not folders:
        raise UsageError(f"{path}: no bundle folders found (folders holding a {MANIFEST})")
    if any(out_dir.resolve() == f.parent.resolve() for f in folders):
        raise UsageError(f"{out_dir} is the folder the bundles are in: choose another -o")
    written: list[Path] = []
    for folder in folders:
        try:
            manifest = Manifest.model_validate_json((folder / MANIFEST).read_bytes())
            written.append(bundle_store.materialize(folder, manifest.files, out_dir))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{folder}: not a readable bundle ({exc})") from None
    source = folders[0].parent
    index = read_grader_index(source)
    traces = {k: [source / t for t in v] for k, v in index.episodes.items()}
    chosen = {f.name: traces[f.name] for f in folders if f.name in traces}
    labels = {source / rel: label for rel, label in index.labels.items()}
    _update_index(out_dir, chosen, {t: labels[t] for ts in chosen.values() for t in ts
                                    if t in labels})
    return written


@dataclass(frozen=True)
class GraderIndex:
    """What a bundles folder's `grader-index.json` holds: each opaque episode id's trace
    paths and each trace's label, the paths relative to the resolved bundles folder (as
    `_update_index` writes them). The one reader of the file (`read_grader_index`)."""

    episodes: dict[str, list[str]]
    labels: dict[str, TraceLabel]


_EPISODES: TypeAdapter[dict[str, list[str]]] = TypeAdapter(dict[str, list[str]])
_LABELS: TypeAdapter[dict[str, TraceLabel]] = TypeAdapter(dict[str, TraceLabel])
_V = TypeVar("_V")


def read_grader_index(bundles: Path, strict: bool = False) -> GraderIndex:
    """A bundles folder's grader index. A missing file is an empty index; one that cannot
    be read or is not JSON is empty too, or with `strict` raises that error (an `OSError`
    or `ValueError`: the audit's own readers want to know). An entry that is not one (an
    id without a list of paths, a label that is not a `TraceLabel`) is left out: labels
    of an index written before they were kept are read from the traces instead
    (`read_trace_label`)."""
    path = Path(bundles) / GRADER_INDEX
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        if strict:
            raise
        data = {}
    if not isinstance(data, dict):
        return GraderIndex(episodes={}, labels={})
    return GraderIndex(episodes=_valid(data.get("episodes"), _EPISODES),
                       labels=_valid(data.get("labels"), _LABELS))


def _valid(found: Any, adapter: TypeAdapter[dict[str, _V]]) -> dict[str, _V]:
    """`found` validated all at once (the common case: 6,000 labels one by one cost 10x),
    else entry by entry, dropping those that are not valid."""
    if not isinstance(found, dict):
        return {}
    try:
        return adapter.validate_python(found)
    except ValueError:
        pass
    out: dict[str, _V] = {}
    for key, value in found.items():
        try:
            out.update(adapter.validate_python({str(key): value}))
        except ValueError:
            continue
    return out


def grader_labels(bundles: Path) -> dict[str, TraceLabel]:
    """A bundles folder's grader index as trace path (relative to `bundles`, as the index
    names it) -> its label (empty when the index keeps none or cannot be read)."""
    return read_grader_index(bundles).labels
