"""One episode with some participants scripted, for a world's own tests.

`Script` is a participant that makes fixed tool calls (those it holds in the task),
then replies; `run_scripted` runs an episode of a compiled world with the sim
profile's agents for everyone else and the scripts in place of the named
participants, and measures it. `ready_episode` builds such an episode without
running it, for tests that drive its tools or its loop by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

from eairdsl.agents.protocol import Observation, Reply, ToolCall
from eairdsl.api import _agents
from eairdsl.ir import World
from eairdsl.measure import measure_episode
from eairdsl.runtime.engine import CompiledWorld, Episode
from eairdsl.runtime.trace import Trace, TraceHeader, TraceResult


class Script:
    """A participant that makes fixed tool calls (those it holds in the task), then replies."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = [ToolCall(tool=t, args=a) for t, a in calls]
        self.queues: dict[int, list[ToolCall]] = {}

    async def decide(self, obs: Observation) -> ToolCall | Reply:
        held = {t.name for t in obs.tools}
        queue = self.queues.setdefault(obs.task, [c for c in self.calls if c.tool in held])
        return queue.pop(0) if queue else Reply(text="Done.")


def run_scripted(world: World, condition: str, instance: dict[str, Any], seed: int,
                 profile: str, scripts: dict[str, Script], judge: Any = None,
                 shift_traits: bool = False) -> tuple[Episode, TraceResult]:
    """The episode of `world` under `condition` on `instance` and `seed`, every party but
    the scripted ones played by `profile`'s agents; the episode and its measurements."""
    compiled = CompiledWorld(world)
    agents, traits = _agents(compiled, condition, instance, seed, profile)
    agents.update(scripts)
    header = TraceHeader(world=world.meta.name, digest=world.digest, condition=condition,
                         levers={}, instance=str(instance["id"]), seed=seed, agents={},
                         eairdsl_version="test")
    episode = Episode(compiled, condition, instance, seed, agents, traits, Trace(header),
                      shift_traits=shift_traits)
    asyncio.run(episode.run())
    return episode, measure_episode(episode, judge)


def ready_episode(world: World, condition: str = "baseline", instance: str | None = None,
                  profile: str = "sim", agents: dict[str, Any] | None = None) -> Episode:
    """An episode ready to run on seed 0: `profile`'s agents (some replaced by `agents`),
    an empty trace; `instance` by id, the world's first when None."""
    compiled = CompiledWorld(world)
    inst = next(i for i in world.instances if instance in (None, i["id"]))
    sims, traits = _agents(compiled, condition, inst, 0, profile)
    sims.update(agents or {})
    header = TraceHeader(world=world.meta.name, digest=world.digest, condition=condition,
                         levers={}, instance=str(inst["id"]), seed=0, agents={},
                         eairdsl_version="test")
    return Episode(compiled, condition, inst, 0, sims, traits, Trace(header),
                   shift_traits=profile == "sim")
