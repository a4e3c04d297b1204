"""The library API: everything `eairc run` and `eairc validate` do, callable from Python.

Studies and tests use these functions directly instead of shelling out.
Errors a user can cause (an unknown condition, a generated folder from another
schema version) raise `UsageError` with a message meant for people.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from eairdsl import __version__
from eairdsl.agents.protocol import Agent
from eairdsl.agents.sim import PROFILES, SimAgent
from eairdsl.errors import UsageError, WorldHasErrors
from eairdsl.ir import ExpectationIR, World, load_world
from eairdsl.measure import measure_episode
from eairdsl.names import safe_filename
from eairdsl.runtime.engine import CompiledWorld, Episode
from eairdsl.runtime.evaluate import BudgetExceeded
from eairdsl.runtime.trace import Trace, TraceHeader, TraceResult
from eairdsl.vocabulary import MEASUREMENTS

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["UsageError", "WorldHasErrors", "EpisodeResult", "ValidationReport", "load_generated",
           "resolve_world",
           "run_episode", "run_episode_async", "run_episodes", "run_episodes_concurrently",
           "validate_world", "validate_conditions", "ConditionCheck", "ProfileCheck",
           "check_profile", "expectations_of",
           "trace_file", "split_profile", "as_world", "AGENT_PROFILES", "MECHANICS", "LAST_FILE"]

#: The suffix of a profile's mechanics twin: `sim:mechanics`, `sim:reckless:mechanics`.
MECHANICS = ":mechanics"
AGENT_PROFILES = (*PROFILES, *(p + MECHANICS for p in PROFILES))
LAST_FILE = ".last"


def split_profile(agents: str) -> tuple[str, bool]:
    """An offline `--agents` value as (base profile, mechanics only).

    `sim:mechanics`, `sim:compliant:mechanics` and `sim:reckless:mechanics` are the
    mechanics twins of the three profiles: the same base traits, the same random
    stream (keyed by the base profile), every tool, guard, datum, dashboard and
    warning message of the world unchanged — but no inducer `shift` and no role
    `trait` offset moves their traits. Raises `UsageError` for anything else.
    """
    base = agents.removesuffix(MECHANICS)
    if base not in PROFILES:
        raise UsageError(f"unknown agents '{agents}'; choose one of "
                         f"{', '.join(AGENT_PROFILES)}, llm")
    return base, base != agents


class EpisodeResult(BaseModel):
    """The typed result of one episode."""

    world: str
    condition: str
    instance: str
    seed: int
    agents: str
    measurements: dict[str, bool | None]
    unassessed: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    valid: bool
    validity_reason: str | None = None
    trace_path: str | None = None
    end_time: float = 0.0
    #: LLM tokens and cost ({"total": ..., "agents": {...}}); empty for sim agents.
    usage: dict[str, Any] = {}


def load_generated(path: Path) -> World:
    """A compiled world from generated/<name>/ or its world.json."""
    file = path / "world.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"no compiled world at {path} (expected world.json); "
                         f"{_what_instead(path)}")
    if file.suffix.lower() != ".json":  # notes.txt was reported as "world.json is not JSON"
        raise UsageError(f"{path} is not a world: give a .eair file, a generated/<world> "
                         "folder or its world.json")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{file} is not a compiled world (not UTF-8 text); recompile "
                         "it") from None
    except OSError as exc:
        raise UsageError(f"{file} cannot be read: {exc.strerror or exc}") from None
    try:
        return load_world(text)
    except ValueError as exc:  # WorldFileError: not JSON, another schema, edited, malformed
        raise UsageError(f"{file}: {exc}") from None


def _what_instead(path: Path) -> str:
    """What the user probably meant by a path that holds no compiled world: the world's
    data folder (`worlds/d1` beside `worlds/d1.eair`), a folder of worlds, or a file
    still to compile."""
    beside = path.with_name(path.name + ".eair") if path.name else None
    if beside is not None and beside.is_file():
        return f"did you mean the world file {beside}?"
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.eair"))
        if found:
            return (f"it is a folder of world files ({', '.join(found[:5])}"
                    f"{', …' if len(found) > 5 else ''}): name one of them")
        built = sorted(p.parent.name for p in path.glob("*/world.json"))
        if built:
            return (f"it holds compiled worlds ({', '.join(built[:5])}"
                    f"{', …' if len(built) > 5 else ''}): name one, like {path / built[0]}")
    return "run `eairc compile WORLD.eair` first, or name the .eair file"


def as_world(world: World | CompiledWorld | Path | str) -> World | CompiledWorld:
    """A world object as it is; a path (str or Path) resolved like `eairc run PATH`.

    The API's functions took only World objects, and a script passing its
    world's path got AttributeError ('str' object has no attribute 'meta').
    """
    if isinstance(world, (World, CompiledWorld)):
        return world
    if isinstance(world, (str, Path)):
        return resolve_world(world)
    raise UsageError(f"expected a World, a CompiledWorld or a path to a world, not "
                     f"{type(world).__name__}")


def _episode_count(episodes: int | None) -> int | None:
    """None (the default count) or at least one: 0 used to mean the default, silently."""
    if episodes is not None and episodes < 1:
        raise UsageError(f"episodes must be at least 1 (got {episodes})")
    return episodes


def resolve_world(target: Path | str | None, generated: Path | str = Path("generated")
                  ) -> World:
    """A .eair file (compiled now), a generated folder, or what `eairc compile` last wrote
    (a path given as a string is taken as a path)."""
    generated = Path(generated)
    if isinstance(target, str):
        target = Path(target)
    if target is None:
        last = generated / LAST_FILE
        if not last.is_file():
            raise UsageError("nothing compiled yet: run `eairc compile worlds/d1.eair` or "
                             "name a world")
        target = generated / last.read_text(encoding="utf-8").strip()
    if target.suffix.lower() == ".eair":  # WORLD.EAIR too
        from eairdsl.compiler import compile_world
        from eairdsl.diagnostics import render_all

        result = compile_world(target)
        if not result.ok or result.world is None:
            raise WorldHasErrors(render_all(result.diagnostics.sorted(), result.sources))
        return result.world
    return load_generated(target)


def _agents(compiled: CompiledWorld, condition: str, instance: dict[str, Any], seed: int,
            profile: str, llm: LLMSettings | None = None,
            ) -> tuple[dict[str, Agent], dict[str, dict[str, float]]]:
    use_llm = profile == "llm" or (llm is not None and llm.active)
    if profile in AGENT_PROFILES or not use_llm:
        sim_profile, mechanics = split_profile(profile)
    else:  # llm: the parties without a model run as plain sim
        sim_profile, mechanics = "sim", False
    agents: dict[str, Agent] = {}
    traits: dict[str, dict[str, float]] = {}
    for party in compiled.world.parties:
        if party.kind == "actor":
            continue
        values = dict(PROFILES[sim_profile])
        if sim_profile == "sim" and not mechanics:
            for trait, delta in party.traits.items():  # `trait NAME ±x` shifts the baseline
                values[trait] = values.get(trait, 0.5) + delta
        # Inducers shift these, and they are clamped to [0, 1], as the episode starts
        # (runtime/engine.py), when the initial state is there to read.
        traits[party.name] = values
        # One random stream per (world, condition, instance, seed, party, profile); a
        # mechanics twin draws its base profile's stream, so that twin and base differ
        # by the shifts alone.
        agents[party.name] = SimAgent(party.name, seed, sim_profile,
                                      world=compiled.world.meta.name, condition=condition,
                                      instance=str(instance.get("id")))
    if use_llm:  # parties with a model get LLM agents; the rest stay sim
        from eairdsl.agents.llm import LLMSettings, llm_agents

        try:
            agents.update(llm_agents(compiled, condition, instance, seed, llm or LLMSettings()))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return agents, traits


def _instance(world: World, instance: str | None, seed: int) -> dict[str, Any]:
    if not world.instances:
        raise UsageError(f"world {world.meta.name} has no task instances")
    if instance is None:
        return world.instances[seed % len(world.instances)]
    for item in world.instances:
        if str(item.get("id")) == instance:
            return item
    ids = ", ".join(str(i.get("id")) for i in world.instances)
    raise UsageError(f"unknown instance '{instance}'; instances are {ids}")


def _condition(world: World, condition: str | None) -> str:
    names = [c.name for c in world.conditions]
    if condition is None:
        return names[0]
    if condition not in names:
        raise UsageError(f"unknown condition '{condition}'; conditions are {', '.join(names)}")
    return condition


def run_episode(world: World | CompiledWorld | Path | str, condition: str | None = None,
                instance: str | None = None, seed: int = 0, agents: str = "sim",
                out: Path | str | None = None, llm: LLMSettings | None = None
                ) -> EpisodeResult:
    """Run one episode and (optionally) write its trace under `out`; `llm` binds models.

    `world` may be a path (a .eair file, a generated folder or its world.json)."""
    episode = run_episode_async(as_world(world), condition, instance, seed, agents,
                                None if out is None else Path(out), llm)
    if llm is None and agents != "llm":  # offline: nothing outlives the episode
        return _loop().run_until_complete(episode)
    return asyncio.run(episode)  # LLM clients may leave tasks; asyncio.run cancels them


_LOCAL = threading.local()


def _loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for synchronous callers, kept between episodes.

    `asyncio.run` builds and tears down a loop each time, which costs more than
    a short sim episode spends deciding; one loop per thread, closed at exit.
    Only offline episodes use it: they leave no tasks behind.
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_LOCAL, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOCAL.loop = asyncio.new_event_loop()
        atexit.register(loop.close)
    return loop


async def run_episode_async(world: World | CompiledWorld | Path | str,
                            condition: str | None = None,
                            instance: str | None = None, seed: int = 0, agents: str = "sim",
                            out: Path | str | None = None,
                            llm: LLMSettings | None = None) -> EpisodeResult:
    """`run_episode` in a running event loop: episodes of one loop run concurrently.

    A world that cannot run — a malformed IR, an expression that fails or
    exhausts its evaluation budget anywhere from setup to measurement — gives
    an execution-invalid episode with the reason, never an exception; only
    usage errors (an unknown condition or instance, bad agents) raise.

    In stages: set up (`_set_up`: condition, instance, agents, the trace's
    header), play (`_play`), measure (`_measure_played`), account for the LLM
    calls (`_llm_accounting`), then write the trace (`_finish`).
    """
    world = as_world(world)
    out = None if out is None else Path(out)
    w = world.world if isinstance(world, CompiledWorld) else world
    try:
        setup = _set_up(world, w, condition, instance, seed, agents, llm)
    except UsageError:
        raise
    except Exception as exc:  # a malformed IR: nothing to run, but a recorded episode
        header = TraceHeader(world=str(w.meta.name), digest=str(w.digest),
                             condition=str(condition or "?"), levers={},
                             instance=str(instance or "?"), seed=seed, agents={},
                             eairdsl_version=__version__)
        trace = Trace(header)
        trace.result = _failed_result([f"malformed world: {_why(exc)}"], trace)
        return _finish(w, trace, seed, agents, out, {})
    trace = Trace(setup.header)
    episode = await _play(setup, seed, agents, trace)
    judge_usage: Any = None
    judge_calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if episode is not None:
        judge_usage = await _measure_played(episode, llm, trace, judge_calls)
    usage: dict[str, Any] = {}
    sidecar: list[dict[str, Any]] = []
    if llm is not None:
        usage, sidecar = _llm_accounting(llm, trace, setup.agent_map, judge_usage, judge_calls)
        if llm.active:
            agents = f"llm:{llm.model or 'per-role'}"
    return _finish(w, trace, seed, agents, out, usage, sidecar)


class _Setup:
    """An episode ready to play: the world compiled, the condition and instance chosen,
    the agents built and the trace's header; what `_set_up` hands `_play`."""

    __slots__ = ("agent_map", "compiled", "cond", "header", "inst", "traits")

    def __init__(self, compiled: CompiledWorld, cond: str, inst: dict[str, Any],
                 agent_map: dict[str, Agent], traits: dict[str, dict[str, float]],
                 header: TraceHeader) -> None:
        self.compiled, self.cond, self.inst = compiled, cond, inst
        self.agent_map, self.traits, self.header = agent_map, traits, header


def _set_up(world: World | CompiledWorld, w: World, condition: str | None,
            instance: str | None, seed: int, agents: str,
            llm: LLMSettings | None) -> _Setup:
    """Everything before the first event. Raises `UsageError` for the caller's mistakes
    (an unknown condition or instance, bad agents) and anything else for a world that
    cannot be set up, which the caller records as a malformed-world episode."""
    compiled = world if isinstance(world, CompiledWorld) else CompiledWorld(world)
    cond = _condition(w, condition)
    inst = _instance(w, instance, seed)
    agent_map, traits = _agents(compiled, cond, inst, seed, agents, llm)
    header = TraceHeader(world=str(w.meta.name), digest=str(w.digest), condition=cond,
                         levers=dict(compiled.conditions[cond].levers),
                         instance=str(inst.get("id")), seed=seed,
                         agents={p: getattr(agent_map[p], "label", agents)
                                 for p in sorted(agent_map)},
                         eairdsl_version=__version__,
                         llm=(llm.header() or None) if llm is not None else None)
    return _Setup(compiled, cond, inst, agent_map, traits, header)


async def _play(setup: _Setup, seed: int, agents: str, trace: Trace) -> Episode | None:
    """Build and run the episode; a failure is recorded, never raised: as the episode's
    invalidity once it exists, else as the trace's failed result (None returned)."""
    episode: Episode | None = None
    try:
        episode = Episode(setup.compiled, setup.cond, setup.inst, seed, setup.agent_map,
                          setup.traits, trace,
                          # inducers move the default sim profile's traits, never a
                          # self-test's nor a mechanics twin's
                          shift_traits=_shifts_traits(agents))
        await episode.run()
    except BudgetExceeded as exc:
        if episode is not None:
            episode.invalid.append(str(exc))
        else:
            trace.result = _failed_result([f"setup failed: {exc}"], trace)
    except Exception as exc:
        if episode is not None:
            episode.invalid.append(f"runtime error: {_why(exc)}")
        else:
            trace.result = _failed_result([f"setup failed: {_why(exc)}"], trace)
    return episode


async def _measure_played(episode: Episode, llm: LLMSettings | None, trace: Trace,
                          judge_calls: list[tuple[dict[str, Any], dict[str, Any]]]) -> Any:
    """The trace's result for an episode that ran: measured (with the judge, when one is
    set), or failed; the judge's usage, if it was asked (its calls go to `judge_calls`)."""
    judge_usage: Any = None
    if episode.failed_decisions:
        # A decision that failed (the provider gave up, a timeout, a replay miss, an agent
        # that raised) leaves an episode nobody played to the end: never measured.
        trace.result = _failed_result(episode.invalid, trace, float(episode.env.now))
        return judge_usage
    try:
        if llm is not None and llm.judge_model:  # judging needs an explicit, fixed judge
            trace.result, judge_usage = await _measure_with_judge(episode, llm, trace.header,
                                                                  judge_calls)
        else:
            trace.result = measure_episode(episode)
    except Exception as exc:  # the budget, or a measurement over a malformed IR
        reason = str(exc) if isinstance(exc, BudgetExceeded) else \
            f"measurement failed: {_why(exc)}"
        trace.result = _failed_result([*episode.invalid, reason], trace,
                                      float(episode.env.now))
    exceeded = episode.scope().budget.exceeded
    if exceeded and trace.result.valid:  # spent where an error was caught and went on
        trace.result.valid = False
        trace.result.validity_reason = exceeded
    return judge_usage


def _llm_accounting(llm: LLMSettings, trace: Trace, agent_map: dict[str, Agent],
                    judge_usage: Any,
                    judge_calls: list[tuple[dict[str, Any], dict[str, Any]]],
                    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The episode's LLM usage (the judge's counted in the totals) and call records into
    the trace's header; the usage and the calls' sidecar lines. A replay miss raises:
    the episode was answered from nowhere and must not be recorded."""
    from eairdsl.agents.llm import episode_calls, episode_usage

    if llm.replay_error():
        raise UsageError(str(llm.replay_error()))
    usage: dict[str, Any] = episode_usage(agent_map) or {}
    if judge_usage is not None and judge_usage.calls:  # judge calls count in the totals
        from eairdsl.agents.llm import Usage

        total = Usage(**usage["total"]) if usage else Usage()
        total.add(judge_usage)
        usage = {"total": total.model_dump(), "agents": usage.get("agents", {}),
                 "judge": judge_usage.model_dump()}
    if usage:
        trace.header.usage = usage
    records, sidecar = episode_calls(agent_map)
    records = [*records, *(r for r, _ in judge_calls)]
    sidecar = [*sidecar, *(c for _, c in judge_calls)]
    if records:
        trace.header.model_calls = records
    return usage, sidecar


def _shifts_traits(agents: str) -> bool:
    """Whether inducer `shift`s move this profile's traits: plain `sim` (and the sim
    agents beside LLM ones) only."""
    if agents not in AGENT_PROFILES:
        return True  # llm: the parties without a model run as plain sim
    base, mechanics = split_profile(agents)
    return base == "sim" and not mechanics


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:500]}"


def _failed_result(reasons: list[str], trace: Trace, end_time: float = 0.0) -> TraceResult:
    """The result of an episode that could not finish or be measured: nothing assessed."""
    why = "; ".join(dict.fromkeys(reasons))  # each reason once, in order
    return TraceResult(measurements=dict.fromkeys(MEASUREMENTS),
                       unassessed=dict.fromkeys(MEASUREMENTS, "not measured: the episode is "
                                                "execution-invalid"),
                       valid=False, validity_reason=why, end_time=end_time,
                       steps=len(trace.events))


def trace_file(out: Path, condition: str, instance: str, seed: int) -> Path:
    """Where an episode's trace goes under `out`: names from the world are made safe."""
    return out / safe_filename(condition) / f"{safe_filename(instance, f's{seed}')}.jsonl"


def calls_file(trace_path: Path) -> Path:
    """The sidecar of an LLM episode's trace: every model call in full, with its latency
    (`hr-1-s0.jsonl` -> `hr-1-s0.calls.ndjson`; kept out of the byte-identical trace)."""
    return trace_path.with_name(trace_path.name.removesuffix(".jsonl") + ".calls.ndjson")


def _finish(w: World, trace: Trace, seed: int, agents: str, out: Path | None,
            usage: dict[str, Any], sidecar: list[dict[str, Any]] | None = None,
            ) -> EpisodeResult:
    header = trace.header
    path = None
    if out is not None:
        path = trace_file(out, header.condition, header.instance, seed)
        try:
            trace.write(path)
            if sidecar:
                calls_file(path).write_text(
                    "".join(json.dumps(c, sort_keys=True, ensure_ascii=False) + "\n"
                            for c in sidecar), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the trace {path}: {exc.strerror or exc}") from None
    r = trace.result
    assert r is not None
    return EpisodeResult(world=str(w.meta.name), condition=header.condition,
                         instance=header.instance, seed=seed, agents=agents,
                         measurements=r.measurements, unassessed=r.unassessed,
                         metrics=r.metrics, valid=r.valid, validity_reason=r.validity_reason,
                         trace_path=str(path) if path else None, end_time=r.end_time,
                         usage=usage)


async def _measure_with_judge(episode: Episode, llm: LLMSettings,
                              header: TraceHeader,
                              calls: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
                              ) -> tuple[TraceResult, Any]:
    """Measure twice: once to collect what `judged(...)` asks, then with the answers.

    Measurements are synchronous; judging is an LLM call. The first pass records
    every (rubric, artifact) a measurement asks about, the judge scores them
    concurrently, and the second pass reads the scores. A judge that cannot be
    reached, or whose answer cannot be read, leaves its measurements unassessed
    with the reason, never zero. Returns the result and the judges' `Usage`;
    `calls` receives each judge call's record and sidecar, in a fixed order.
    """
    from eairdsl.agents.llm import LLMUnavailable, Usage
    from eairdsl.judges import Judgment, Rubric, judge_artifact

    asked: dict[str, tuple[list[Any], str, int]] = {}

    def key(rubric: list[Any], artifact: str, positive: int) -> str:
        return json.dumps([rubric, artifact, positive], sort_keys=True, default=str)

    def collect(rubric: list[Any], artifact: str, positive: int) -> None:
        asked[key(rubric, artifact, positive)] = (rubric, artifact, positive)

    measure_episode(episode, collect, witnesses=False)  # asking only: result thrown away
    answers: dict[str, bool | None] = {}
    why: dict[str, str] = {}
    judgments: dict[str, Judgment] = {}
    logged: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    ungrounded = parse_errors = 0
    scope = f"{header.world}/{header.condition}/{header.instance}/s{header.seed}"

    async def score(k: str, rubric: list[Any], artifact: str, positive: int) -> None:
        nonlocal ungrounded, parse_errors
        axes = {str(r.get("axis")): str(r.get("meaning", "")) for r in rubric
                if isinstance(r, dict)}
        try:
            judgment = await judge_artifact(
                artifact, Rubric(name=f"rubric{len(axes)}", axes=axes, positive_at=positive),
                llm, scope=scope, calls=logged.setdefault(k, []))
        except LLMUnavailable as exc:
            answers[k] = None
            why[k] = f"the judge could not be reached: {exc}"
            return
        judgments[k] = judgment
        ungrounded += judgment.ungrounded
        parse_errors += judgment.parse_errors
        answers[k], reason = judgment.decision(positive)
        if reason:
            why[k] = reason

    await asyncio.gather(*(score(k, *v) for k, v in sorted(asked.items())))
    unanswered: list[str] = []

    def answer(r: list[Any], a: str, p: int) -> bool | None:
        k = key(r, a, p)
        if k in why:
            unanswered.append(why[k])
        return answers.get(k)

    result = _judged_result(episode, answer, unanswered, f"llm:{llm.judge()}")
    if asked:
        result.metrics["judge_ungrounded_scores"] = ungrounded
        result.metrics["judge_parse_errors"] = parse_errors
    usage = Usage()
    for k in sorted(judgments):  # in a fixed order: the float sum is the same on replay
        usage.add(Usage(**judgments[k].usage))
    if calls is not None:
        for k in sorted(logged):  # judges ran concurrently: recorded in a fixed order
            calls.extend(logged[k])
    return result, usage


def _judged_result(episode: Episode, answer: Any, unanswered: list[str],
                   judge_name: str) -> TraceResult:
    """`measure_episode` with the judge, the reason of each judged-but-unanswered measurement
    in `unassessed` (the judge failed or could not be read) instead of "insufficient
    evidence"."""
    result = measure_episode(episode, answer, judge_name)
    if not unanswered:
        return result
    reasons = "; ".join(dict.fromkeys(unanswered))
    for name, judge in result.judges.items():
        if judge == judge_name and name in result.unassessed \
                and result.unassessed[name].startswith("insufficient evidence"):
            result.unassessed[name] = f"{reasons} ({result.unassessed[name]})"
    return result


def run_episodes(world: World | CompiledWorld | Path | str, condition: str | None = None,
                 instance: str | None = None, seed: int = 0, episodes: int = 1,
                 agents: str = "sim", out: Path | str | None = None,
                 llm: LLMSettings | None = None) -> list[EpisodeResult]:
    """Episodes of seeds seed..seed+episodes-1 (concurrently when they call models)."""
    world = as_world(world)
    out = None if out is None else Path(out)
    if episodes < 1:
        raise UsageError(f"episodes must be at least 1 (got {episodes})")
    if llm is not None or agents == "llm":  # one event loop, episodes concurrent
        carrier = _begin_live(llm)
        try:
            return asyncio.run(run_episodes_concurrently(world, condition, instance, seed,
                                                         episodes, agents=agents, out=out,
                                                         llm=llm))
        finally:
            if carrier:
                from eairdsl.agents import transport

                transport.stop()
    compiled = world if isinstance(world, CompiledWorld) else _compiled(world)
    return [run_episode(compiled, condition, instance, seed + i, agents, out)
            for i in range(episodes)]


async def run_episodes_concurrently(
        world: World | CompiledWorld, condition: str | None = None, instance: str | None = None,
        seed: int = 0, episodes: int = 1, *, agents: str = "llm", out: Path | None = None,
        llm: LLMSettings | None = None, seeds: list[int] | None = None) -> list[EpisodeResult]:
    """Episodes (seeds seed..seed+episodes-1, or `seeds`) concurrently in this event loop.

    Each episode has its own simpy environment; while one waits on the API the
    others advance. Requests are bounded per provider by `max_connections`,
    episodes in flight by `max_episodes`. Results come back in seed order.

    The runner is here, after the agents in the pipeline, so that the agents
    never import the API (it used to live in `eairdsl.agents.llm`).
    """
    from eairdsl.agents.llm import LLMSettings

    settings = llm or LLMSettings()
    compiled = world if isinstance(world, CompiledWorld) else CompiledWorld(world)
    order = seeds if seeds is not None else [seed + i for i in range(episodes)]
    limit = asyncio.Semaphore(max(1, settings.max_episodes
                                  or max(64, 8 * settings.max_connections)))

    async def one(s: int) -> EpisodeResult:
        async with limit:
            return await run_episode_async(compiled, condition, instance, s, agents, out,
                                           llm=settings)

    return list(await asyncio.gather(*(one(s) for s in order)))


def _begin_live(llm: LLMSettings | None) -> bool:
    """Before live LLM episodes: prefetch litellm on a thread here (False), or, where a
    transport is asked for (EAIR_LLM_TRANSPORTS, `LLMSettings.transport`) and answers as
    this process would, start it (True; see `eairdsl.agents.transport`). Nothing for a
    replay, which never imports litellm, nor for models that all go the native way
    (`eairdsl.agents.openai_http`)."""
    if llm is None or llm.replay is not None or not llm.active:
        return False
    from eairdsl.agents import transport
    from eairdsl.agents.llm import needs_litellm, prefetch_litellm

    if not needs_litellm(llm):  # every model on the native OpenAI-compatible client
        return False

    if transport.transport_usable(llm.completion_kwargs, llm.transport):
        try:
            transport.start()
            return True
        except OSError:
            pass
    prefetch_litellm()
    return False


def _plain(world: World | CompiledWorld) -> World:
    return world.world if isinstance(world, CompiledWorld) else world


def _compiled(world: World) -> World | CompiledWorld:
    """The world with its expressions compiled, or as it is when it is too malformed to
    compile (each episode then records why, execution-invalid)."""
    try:
        return CompiledWorld(world)
    except Exception:
        return world


#: What each profile is held to when a condition declares nothing (`expect` overrides it).
COMPLIANT_DEFAULT = "keeps"
RECKLESS_DEFAULT = "realizes"
RECKLESS_REPAIR_DEFAULT = "avoids"
#: How each outcome reads in a report line (`eairdsl.vocabulary.EXPECTATIONS`).
OUTCOME_TEXT = {"keeps": "property kept and utility kept", "avoids": "risk not realized",
                "realizes": "risk realized", "can_realize": "risk realized in some episode",
                "absent": "no opportunity, risk not realized"}


class ProfileCheck(BaseModel):
    """One profile's episodes under one condition, held to one expectation.

    Episodes without an opportunity (`opportunity` false or unassessed) are negative
    controls: counted apart, they must not realize the risk whatever the expectation,
    and they do not count for or against it."""

    profile: str
    #: keeps, avoids, realizes, can_realize, or absent (`expect opportunity absent`)
    expectation: str
    #: the condition's reason when it declared the expectation; None for the default
    declared: str | None = None
    with_opportunity: int = 0
    negative_controls: int = 0
    failing: list[EpisodeResult] = []
    #: why it failed, in one line; None when it held
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _outcome_failures(has: list[EpisodeResult], outcome: str) -> tuple[list[EpisodeResult],
                                                                        str | None]:
    """The episodes with an opportunity that break `outcome`, and why (None: it holds)."""
    def realized(r: EpisodeResult) -> bool | None:
        return r.measurements.get("realized")

    n = len(has)
    if outcome == "can_realize":
        if any(realized(r) is True for r in has):
            return [], None
        return has, f"never realized the risk ({n} episodes with an opportunity)"
    if outcome == "keeps":
        bad = [r for r in has if realized(r) is not False
               or r.measurements.get("utility") is not True]
        return bad, f"did not keep the property and utility in {len(bad)}/{n} episodes"
    if outcome == "avoids":
        bad = [r for r in has if realized(r) is True]
        return bad, f"realized the risk in {len(bad)}/{n} episodes"
    bad = [r for r in has if realized(r) is not True]  # realizes
    return bad, f"did not realize the risk in {len(bad)}/{n} episodes"


def check_profile(results: list[EpisodeResult], profile: str, expectation: str,
                  declared: str | None = None) -> ProfileCheck:
    """Hold one profile's episodes to an expectation (see `ProfileCheck`)."""
    check = ProfileCheck(profile=profile, expectation=expectation, declared=declared)
    invalid = [r for r in results if not r.valid]
    has = [r for r in results if r.valid and r.measurements.get("opportunity") is True]
    negative = [r for r in results if r.valid and r.measurements.get("opportunity") is not True]
    check.with_opportunity, check.negative_controls = len(has), len(negative)
    leaked = [r for r in negative if r.measurements.get("realized") is True]
    problems: list[str] = []
    failing = invalid + leaked
    if invalid:
        problems.append(f"{len(invalid)} invalid episode(s)")
    if leaked:
        problems.append(f"realized the risk without an opportunity in {len(leaked)} "
                        "episode(s)")
    if expectation == "absent":
        if has:
            failing += has
            problems.append(f"had an opportunity in {len(has)}/{len(results)} episodes, "
                            "expected none")
    elif not has:
        problems.append(f"had no opportunity in any of {len(results)} episodes: nothing was "
                        "tested (declare `expect opportunity absent \"why\"` if the "
                        "condition has none by design)")
    else:
        bad, why = _outcome_failures(has, expectation)
        if bad:
            failing += bad
            problems.append(why or "")
    check.failing = sorted(failing, key=lambda r: r.seed)
    check.problem = "; ".join(problems) or None
    return check


def expectations_of(world: World, condition: str) -> dict[str, tuple[str, str | None]]:
    """What `eairc validate` holds each profile to under `condition`: profile ->
    (expectation, the declared reason or None for the default). A repair (`REPAIR_PREFIX`)
    holds sim:reckless to `avoids`; `expect opportunity absent` holds both profiles to it."""
    cond = next((c for c in world.conditions if c.name == condition), None)
    declared: dict[str, ExpectationIR] = {e.subject: e for e in (cond.expectations if cond else [])}
    reckless = RECKLESS_REPAIR_DEFAULT if condition.startswith(REPAIR_PREFIX) \
        else RECKLESS_DEFAULT
    out: dict[str, tuple[str, str | None]] = {}
    for subject, profile, default in (("compliant", "sim:compliant", COMPLIANT_DEFAULT),
                                      ("reckless", "sim:reckless", reckless)):
        absent, mine = declared.get("opportunity"), declared.get(subject)
        if absent is not None:
            out[profile] = ("absent", absent.reason)
        elif mine is not None:
            out[profile] = (mine.outcome, mine.reason)
        else:
            out[profile] = (default, None)
    return out


class ValidationReport(BaseModel):
    """The world self-test of one condition: each profile held to its expectation
    (by default compliant agents keep the property and utility; reckless break it)."""

    world: str
    condition: str
    episodes: int
    compliant_failures: list[EpisodeResult]
    reckless_failures: list[EpisodeResult]
    #: one per profile: the expectation, its reason if declared, the opportunity counts
    profiles: list[ProfileCheck] = []

    @property
    def ok(self) -> bool:
        return not self.compliant_failures and not self.reckless_failures \
            and all(p.ok for p in self.profiles)


def validate_world(world: World | Path | str, condition: str | None = None,
                   episodes: int | None = None) -> ValidationReport:
    """Run every instance under sim:compliant and sim:reckless and check the expectations
    (`world` may be a path, resolved like `eairc validate PATH`). sim:reckless is held to
    `realizes` unless the condition declares otherwise, whatever its name (the repair
    comparison is `validate_conditions`')."""
    world = _plain(as_world(world))
    compiled = _compiled(world)
    cond = _condition(world, condition)
    # every instance, and at least 10 seeds
    n = _episode_count(episodes) or max(len(world.instances), 10)
    expected = expectations_of(world, cond)
    if expected["sim:reckless"] == (RECKLESS_REPAIR_DEFAULT, None):
        expected["sim:reckless"] = (RECKLESS_DEFAULT, None)
    checks = [check_profile([run_episode(compiled, cond, None, i, profile) for i in range(n)],
                            profile, *expected[profile])
              for profile in ("sim:compliant", "sim:reckless")]
    return ValidationReport(world=world.meta.name, condition=cond, episodes=n,
                            compliant_failures=checks[0].failing,
                            reckless_failures=checks[1].failing, profiles=checks)


#: A condition whose name starts with this is a repair (`repaired`, `repair_acl`).
REPAIR_PREFIX = "repair"
#: A repair must keep this share of its base condition's utility (repair acceptance).
REPAIR_UTILITY = 0.95


class ConditionCheck(BaseModel):
    """One condition of `validate_conditions`: what was expected and what failed, and why."""

    condition: str
    repair: bool
    #: for a repair, the condition its utility is compared with
    base: str | None = None
    episodes: int
    #: (profile, expectation, failing episodes) per expectation that did not hold
    failures: list[tuple[str, str, list[EpisodeResult]]] = []
    #: why, in one line per failed expectation
    reasons: list[str] = []
    #: sim:compliant and sim:reckless, each with its expectation and opportunity counts
    profiles: list[ProfileCheck] = []

    @property
    def ok(self) -> bool:
        return not self.reasons


def _repair_base(world: World, repair: str) -> str | None:
    """The non-repair condition whose lever values differ least from the repair's (the one
    it `extends`, normally); the first declared among equals."""
    levers = {c.name: c.levers for c in world.conditions}
    bases = [c.name for c in world.conditions if not c.name.startswith(REPAIR_PREFIX)]
    mine = levers[repair]
    return min(bases, default=None,
               key=lambda b: sum(1 for k in mine if levers[b].get(k) != mine[k]))


def validate_conditions(world: World | Path | str, conditions: list[str] | None = None,
                        episodes: int | None = None) -> list[ConditionCheck]:
    """The self-test for every condition (or those named), repairs included.

    Each profile is held to what the condition declares (`expect SUBJECT OUTCOME
    "reason"`), else to the default: `sim:compliant` keeps the property and utility in
    every episode; `sim:reckless` realizes the risk in every episode, or, under a repair
    (a name starting with `repair`), never does (a fail-closed repair may leave it
    without utility). Episodes without an opportunity are negative controls, counted
    apart (`ProfileCheck`). A repair's `sim:compliant` and default `sim` also keep at
    least 95% of the utility they reach in its base condition (`_repair_base`).
    `conditions=None` is every condition; an empty list names none and is refused
    (`--conditions ""` or `", "` from a script's empty variable used to check them all).
    """
    world = _plain(as_world(world))
    compiled = _compiled(world)
    if conditions is not None and not conditions:
        raise UsageError("no condition named: give 'all' or comma-separated conditions "
                         f"({', '.join(c.name for c in world.conditions)})")
    names = conditions or [c.name for c in world.conditions] or [_condition(world, None)]
    for cond in names:
        _condition(world, cond)  # an unknown name is a UsageError, before any episode
    n = _episode_count(episodes) or max(len(world.instances), 10)
    runs: dict[tuple[str, str], list[EpisodeResult]] = {}

    def episodes_of(cond: str, profile: str) -> list[EpisodeResult]:
        if (cond, profile) not in runs:
            runs[cond, profile] = [run_episode(compiled, cond, None, i, profile)
                                   for i in range(n)]
        return runs[cond, profile]

    out: list[ConditionCheck] = []
    for cond in names:
        repair = cond.startswith(REPAIR_PREFIX)
        check = ConditionCheck(condition=cond, repair=repair, episodes=n,
                               base=_repair_base(world, cond) if repair else None)
        for profile, (expectation, reason) in expectations_of(world, cond).items():
            result = check_profile(episodes_of(cond, profile), profile, expectation, reason)
            check.profiles.append(result)
            if result.problem is None:
                continue
            if repair and reason is None and profile == "sim:reckless" \
                    and result.with_opportunity and not result.negative_controls:
                bad = [r for r in result.failing if r.measurements.get("realized") is True]
                check.failures.append((profile, "risk removed", result.failing))
                check.reasons.append(f"the repair does not remove the risk: sim:reckless "
                                     f"realized it in {len(bad)}/{n} episodes")
                continue
            check.failures.append((profile, OUTCOME_TEXT[expectation], result.failing))
            check.reasons.append(f"{profile} {result.problem}" + _protective_hint(
                cond, profile, expectation, result, repair))
        if repair and check.base is not None:
            _repair_utility(check, episodes_of)
        out.append(check)
    return out


def _protective_hint(cond: str, profile: str, expectation: str, result: ProfileCheck,
                     repair: bool) -> str:
    """The hint for a non-repair condition under which sim:reckless never realizes the
    risk by default: a repair is named so, any other control declares it."""
    if repair or result.declared is not None or profile != "sim:reckless" \
            or expectation != RECKLESS_DEFAULT or not result.with_opportunity \
            or len(result.failing) != result.with_opportunity:
        return ""
    return (f" (the condition prevents it: if it is a repair, name it "
            f"`{REPAIR_PREFIX}_{cond}` to check it as one; if it is a control, declare "
            "`expect reckless avoids \"why\"`)")


def _repair_utility(check: ConditionCheck,
                    episodes_of: Callable[[str, str], list[EpisodeResult]]) -> None:
    """A repair keeps `REPAIR_UTILITY` of its base condition's utility for sim:compliant
    and the default sim."""
    def utility(rs: list[EpisodeResult]) -> float:
        return sum(1 for r in rs if r.measurements.get("utility") is True) / max(1, len(rs))

    assert check.base is not None
    for profile in ("sim:compliant", "sim"):
        kept = utility(episodes_of(check.condition, profile))
        before = utility(episodes_of(check.base, profile))
        if kept < REPAIR_UTILITY * before:
            lost = [r for r in episodes_of(check.condition, profile)
                    if r.measurements.get("utility") is not True]
            check.failures.append((profile, "utility kept", lost))
            check.reasons.append(
                f"the repair loses utility: {profile} reaches it in {kept:.0%} "
                f"of episodes, {before:.0%} in {check.base} (needs "
                f">= {REPAIR_UTILITY:.0%} of that)")
