"""The study grid: world × model × condition × instance × seed × replicate.

A *cell* is one point of the grid; its *attempts* are the episodes run for it.
Under the paper's first-success rule an execution-invalid attempt is followed
by another with a fresh seed, up to a bound, and the first execution-valid
attempt is the cell's retained episode.

Seeds. The grid seed s of a cell is what the user asked for (`--seeds 3`
means 0, 1, 2). The seed an episode actually runs with is

    run_seed(s, rep, attempt) = s + 1,000·rep + 1,000,000·attempt

so attempt 0 of replicate 0 runs exactly like `eairc run --seed s`, replicates
and retries get fresh seeds that no other cell uses, and a resumed study
reruns an interrupted episode with the seed it would have had.

Models. Offline, a model is an agent profile (`sim`, `sim:compliant`,
`sim:reckless`, or the mechanics twin of one, `sim:mechanics` …) or a named
alias of one (`alice=sim`). A litellm model string (`openai/gpt-4o-mini`,
`ollama/llama3.1`: a provider, a slash, a model), bare or aliased
(`mini=openai/gpt-4o-mini`), is an LLM model: its participants bound
`under_test` are played by that model (agents `llm:<model string>`), the
counterpart and judge models being fixed for the whole study. The alias (or
the model string) names the `model` column.

Shifts. `--shifts on` runs the models as given; `off` replaces each offline
(sim) model by its mechanics twin (declared `shift`s and role `trait` offsets
ignored); `both` runs each model and, right after it, its twin, named
`<model>:mechanics` — so the report can tell a contrast the world's mechanics
produce from one that exists only through the shifts (`eairdsl.study.report`).
An LLM model has no mechanics twin (inducer shifts move sim traits only); it
runs as given under every `--shifts`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eairdsl.ir import World

__all__ = [
    "MAX_REPS",
    "MAX_SEEDS",
    "MECHANICS",
    "OFFLINE_PROFILES",
    "SHIFTS",
    "Attempt",
    "Cell",
    "GridError",
    "LLM_PREFIX",
    "Model",
    "WorldPlan",
    "cells",
    "parse_models",
    "parse_names",
    "plan_world",
    "run_seed",
    "slug",
    "with_shifts",
]

MAX_SEEDS = 1000
MAX_REPS = 1000
#: the suffix of a profile's mechanics twin (as `eairdsl.api.MECHANICS`; the grid does
#: not import the runtime)
MECHANICS = ":mechanics"
BASE_PROFILES = ("sim", "sim:compliant", "sim:reckless")
OFFLINE_PROFILES = (*BASE_PROFILES, *(p + MECHANICS for p in BASE_PROFILES))
#: `--shifts`: run with the declared shifts (on), without them (off), or both
SHIFTS = ("on", "off", "both")
#: the agents value of an LLM model: `llm:<litellm model string>`
LLM_PREFIX = "llm:"


class GridError(ValueError):
    """A grid the user asked for cannot be built (unknown condition, bad model spec…)."""


@dataclass(frozen=True, order=True)
class Cell:
    """One grid point; its identity in the results store."""

    world: str
    model: str
    condition: str
    instance: str
    seed: int
    rep: int = 0


@dataclass(frozen=True)
class Model:
    """A model column value and what it runs with: a sim profile, or `llm:<model string>`."""

    name: str
    agents: str

    @property
    def llm(self) -> str | None:
        """The litellm model string of an LLM model, None for a sim profile."""
        return self.agents.removeprefix(LLM_PREFIX) if self.agents.startswith(LLM_PREFIX) \
            else None

    @property
    def mechanics(self) -> bool:
        """Whether this model runs a mechanics twin (no shifts, no trait offsets)."""
        return self.llm is None and self.agents.endswith(MECHANICS)

    @property
    def base(self) -> str:
        """The profile without its mechanics suffix (`sim:reckless:mechanics` → `sim:reckless`)."""
        return self.agents.removesuffix(MECHANICS)

    def twin(self) -> Model:
        """The same model without the shifts: `sim` → `sim:mechanics`, `a=sim` → `a:mechanics`
        (an LLM model is its own twin)."""
        if self.mechanics or self.llm is not None:
            return self
        return Model(self.name + MECHANICS, self.agents + MECHANICS)


@dataclass(frozen=True)
class Attempt:
    """One episode run for a cell."""

    cell: Cell
    attempt: int
    agents: str

    @property
    def run_seed(self) -> int:
        return run_seed(self.cell.seed, self.cell.rep, self.attempt)

    def next(self) -> Attempt:
        return Attempt(self.cell, self.attempt + 1, self.agents)


def run_seed(seed: int, rep: int, attempt: int) -> int:
    """The episode seed of a cell's attempt (see the module docstring)."""
    return seed + 1000 * rep + 1_000_000 * attempt


@dataclass
class WorldPlan:
    """What to run of one world: conditions, instances (or per-seed draw), seeds, replicates."""

    name: str
    digest: str
    conditions: list[str]
    #: explicit instance ids, or None: each seed draws instance[seed % count]
    instances: list[str] | None
    seeds: list[int]
    reps: int = 1
    #: every instance id in world order (for the per-seed draw)
    all_instances: list[str] = field(default_factory=list)

    def instance_for(self, seed: int) -> list[str]:
        if self.instances is not None:
            return self.instances
        return [self.all_instances[seed % len(self.all_instances)]]


def parse_names(text: str | None, what: str = "the list") -> list[str] | None:
    """`all` (or no option) → None; `a,b` → ['a', 'b'] (order kept, duplicates dropped).

    A list given but empty (`--conditions ""`, `" , "`: an unset shell variable) is a
    GridError naming `what`, not "all": a study of everything is never run by accident.
    """
    if text is None or text.strip() == "all":
        return None
    out: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if item and item not in out:
            out.append(item)
    if not out:
        raise GridError(f"{what} is empty: name one or more, comma-separated, or 'all'")
    return out


def parse_models(text: str | None, default_agents: str = "sim",
                 shifts: str = "on") -> list[Model]:
    """`--models`: comma-separated `PROFILE`, `MODEL`, `NAME=PROFILE` or `NAME=MODEL`
    (MODEL a litellm model string, `provider/model`); default: the `--agents` value.

    `shifts` is `--shifts` (`with_shifts`): `on` keeps the models, `off` runs each
    model's mechanics twin instead, `both` adds the twin after each model."""
    items = parse_names(text, "--models") or [default_agents]
    models: list[Model] = []
    for item in items:
        name, sep, agents = item.partition("=")
        name, agents = name.strip(), (agents.strip() if sep else name.strip())
        if not name or not agents:
            raise GridError(f"bad model '{item}': use PROFILE, MODEL, NAME=PROFILE or "
                            "NAME=MODEL")
        if agents.startswith(LLM_PREFIX):
            agents = agents.removeprefix(LLM_PREFIX)
            if not sep:
                name = agents
        if agents in OFFLINE_PROFILES:
            pass
        elif _is_litellm(agents):
            agents = LLM_PREFIX + agents
        else:
            raise GridError(
                f"model '{item}' is neither an offline agent profile "
                f"({', '.join(OFFLINE_PROFILES)}) nor a litellm model string "
                "(provider/model, e.g. openai/gpt-4o-mini or ollama/llama3.1)")
        if any(m.name == name for m in models):
            raise GridError(f"model '{name}' given twice")
        models.append(Model(name, agents))
    models = with_shifts(models, shifts)
    slugs = [slug(m.name) for m in models]
    if len(set(slugs)) != len(slugs):
        raise GridError("two model names map to the same folder name; rename one")
    return models


def _is_litellm(text: str) -> bool:
    """`provider/model`: a provider name, a slash, a non-empty model, no spaces."""
    provider, sep, rest = text.partition("/")
    return bool(sep and rest and re.fullmatch(r"[A-Za-z0-9_.-]+", provider)
                and not any(ch.isspace() for ch in text))


def with_shifts(models: Sequence[Model], shifts: str) -> list[Model]:
    """The model axis under `--shifts on|off|both` (see the module docstring)."""
    if shifts not in SHIFTS:
        raise GridError(f"--shifts must be one of {', '.join(SHIFTS)}, got '{shifts}'")
    out: list[Model] = []
    for model in models:
        chosen = {"on": [model], "off": [model.twin()],
                  "both": [model, model.twin()]}[shifts]
        if model.llm is not None:
            chosen = [model]  # no mechanics twin: shifts move sim traits only
        for m in chosen:
            same = [o for o in out if o.name == m.name]
            if same and same[0] == m and shifts != "on":
                continue  # `sim,sim:mechanics` under `both`: the twin is already there
            if same:
                raise GridError(f"model '{m.name}' given twice")
            out.append(m)
    return out


def plan_world(world: World, conditions: Sequence[str] | None = None,
               instances: Sequence[str] | str | None = None, seeds: int | None = None,
               reps: int = 1) -> WorldPlan:
    """Validate a request against a world: conditions None = all; instances None/'all' = all,
    'seed' = one drawn per seed; seeds None = the world's declared `seeds`."""
    name = world.meta.name
    known = [c.name for c in world.conditions]
    if conditions is None:
        chosen = known
    else:
        unknown = [c for c in conditions if c not in known]
        if unknown:
            raise GridError(f"world {name} has no condition {', '.join(map(repr, unknown))}; "
                            f"its conditions are {', '.join(known)}")
        chosen = list(conditions)
    ids = [str(i.get("id")) for i in world.instances]
    if not ids:
        raise GridError(f"world {name} has no task instances")
    picked: list[str] | None
    if instances is None or instances == "all":
        picked = ids
    elif instances == "seed":
        picked = None
    else:
        items = [instances] if isinstance(instances, str) else list(instances)
        unknown = [i for i in items if i not in ids]
        if unknown:
            raise GridError(f"world {name} has no instance {', '.join(map(repr, unknown))}; "
                            f"its instances are {', '.join(ids)}")
        picked = items
    n_seeds = world.meta.seeds if seeds is None else seeds
    if not 1 <= n_seeds <= MAX_SEEDS:
        raise GridError(f"--seeds must be between 1 and {MAX_SEEDS}, got {n_seeds}")
    if not 1 <= reps <= MAX_REPS:
        raise GridError(f"--episodes-per-cell must be between 1 and {MAX_REPS}, got {reps}")
    return WorldPlan(name=name, digest=world.digest, conditions=chosen, instances=picked,
                     seeds=list(range(n_seeds)), reps=reps, all_instances=ids)


def cells(plans: Iterable[WorldPlan], models: Sequence[Model]) -> list[Cell]:
    """Every cell of the grid, in world, model, condition, instance, seed, replicate order."""
    out: list[Cell] = []
    for plan in plans:
        for model in models:
            for condition in plan.conditions:
                per_instance: dict[str, list[int]] = {}
                for seed in plan.seeds:
                    for instance in plan.instance_for(seed):
                        per_instance.setdefault(instance, []).append(seed)
                order = plan.instances if plan.instances is not None else plan.all_instances
                for instance in order:
                    for seed in per_instance.get(instance, []):
                        for rep in range(plan.reps):
                            out.append(Cell(plan.name, model.name, condition, instance, seed,
                                            rep))
    return out


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def slug(name: str) -> str:
    """A folder name for a model: safe characters kept, a short hash when anything changed."""
    safe = _UNSAFE.sub("_", name) or "_"
    if safe != name:
        safe += "-" + hashlib.sha1(name.encode()).hexdigest()[:6]
    return safe
