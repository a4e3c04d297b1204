"""The one interface between the runtime and whatever decides for an agent.

The runtime hands an `Observation` to `decide` and gets an `Action` back; it
never knows whether a seeded rule set, an LLM or a replayed cassette answered.
Both models are pydantic so they can be logged, recorded and replayed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Annotated, Any, Literal, Protocol, overload

from pydantic import BaseModel, Field, GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["ParamSpec", "ToolSpec", "MemoryItem", "MemoryView", "Request", "Observation",
           "ToolCall", "Reply", "Action", "Agent"]


class ParamSpec(BaseModel):
    """A tool parameter as an agent sees it; `hint` lists values the world suggests."""

    name: str
    type: str
    required: bool
    members: list[str] = Field(default_factory=list)
    hint: list[Any] | None = None


class ToolSpec(BaseModel):
    """A tool available to the agent right now."""

    name: str
    kind: str
    description: str = ""
    params: list[ParamSpec] = Field(default_factory=list)
    delegates: bool = False
    reads: list[str] = Field(default_factory=list)
    writes: list[str] = Field(default_factory=list)


class MemoryItem(BaseModel):
    """One entry of an agent's private memory."""

    kind: Literal["message", "tool_result", "note"]
    task: int
    sender: str | None = None
    text: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    result: Any = None
    rejected: bool = False


class MemoryView(Sequence[MemoryItem]):
    """The first `length` items of an agent's memory, shared rather than copied.

    The runtime appends to one list per participant and never changes an item
    once written, so an observation holds that list and the length it had when
    the observation was made: building one is O(1) however long the memory is,
    and it reads exactly the items a copy taken then would hold. A list given to
    `Observation(memory=...)` is validated and wrapped; serialized, a view is
    the list of its items.
    """

    __slots__ = ("_length", "base")

    def __init__(self, base: list[MemoryItem], length: int | None = None) -> None:
        #: the shared, append-only list; items past `len(self)` are not part of the view
        self.base = base
        self._length = len(base) if length is None else length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> MemoryItem: ...
    @overload
    def __getitem__(self, index: slice) -> list[MemoryItem]: ...
    def __getitem__(self, index: int | slice) -> MemoryItem | list[MemoryItem]:
        if isinstance(index, slice):
            return [self.base[i] for i in range(*index.indices(self._length))]
        i = index + self._length if index < 0 else index
        if not 0 <= i < self._length:
            raise IndexError("memory index out of range")
        return self.base[i]

    def __iter__(self) -> Iterator[MemoryItem]:
        return islice(self.base, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (MemoryView, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MemoryView({list(self)!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        items = handler.generate_schema(list[MemoryItem])
        return core_schema.union_schema(
            [core_schema.is_instance_schema(cls),
             core_schema.no_info_after_validator_function(cls, items)],
            serialization=core_schema.plain_serializer_function_ser_schema(
                list, return_schema=items))


class Request(BaseModel):
    """The message the agent is currently handling."""

    sender: str
    text: str
    sender_authority: int = 0
    #: "message" for a delivered artifact, "delegation" for a question asked by a delegator.
    via: Literal["message", "delegation"] = "message"
    #: The sender's kind: an upstream role's output is information to pass on.
    sender_kind: str = "actor"
    #: A simulator's scripted line for this turn (`say`): offline agents say it as it
    #: is, a generative one words its own message from it (`text` is its brief).
    script: str | None = None


class Observation(BaseModel):
    """Everything an agent may know when it decides."""

    party: str
    kind: str
    card: str
    time: float
    task: int
    step: int
    request: Request
    #: the agent's memory when it decides (shared with the runtime, see `MemoryView`)
    memory: MemoryView
    tools: list[ToolSpec]
    traits: dict[str, float] = Field(default_factory=dict)
    principal: str | None = None
    authority: int = 0
    #: participants' display names where the world gives them (`display`), by name
    names: dict[str, str] = Field(default_factory=dict)
    #: live dashboard lines as they read now (dashboards whose text reads the state)
    dashboard: list[str] = Field(default_factory=list)
    #: who holds enacted power over this agent's consequences (its staffing, evaluation,
    #: career points): the `from` participant of every `power` inducer that covers its
    #: role and is on in this episode. None when the world declares no `power` inducer
    #: with `from` for the role at all (then rank, `authority`, is the only signal).
    power_holders: list[str] | None = None


class ToolCall(BaseModel):
    kind: Literal["tool_call"] = "tool_call"
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class Reply(BaseModel):
    kind: Literal["reply"] = "reply"
    text: str


Action = Annotated[ToolCall | Reply, Field(discriminator="kind")]


class Agent(Protocol):
    """Anything that can decide for a participant."""

    async def decide(self, observation: Observation) -> ToolCall | Reply: ...
