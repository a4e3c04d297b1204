"""The one interface between the runtime and whatever decides for an agent.

The runtime hands an `Observation` to `decide` and gets an `Action` back; it
never knows whether a seeded rule set, an LLM or a replayed cassette answered.
Both models are pydantic so they can be logged, recorded and replayed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, Field

__all__ = ["ParamSpec", "ToolSpec", "MemoryItem", "Request", "Observation", "ToolCall",
           "Reply", "Action", "Agent"]


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


class Request(BaseModel):
    """The message the agent is currently handling."""

    sender: str
    text: str
    sender_authority: int = 0
    #: "message" for a delivered artifact, "delegation" for a question asked by a delegator.
    via: Literal["message", "delegation"] = "message"
    #: The sender's kind: an upstream role's output is information to pass on.
    sender_kind: str = "actor"


class Observation(BaseModel):
    """Everything an agent may know when it decides."""

    party: str
    kind: str
    card: str
    time: float
    task: int
    step: int
    request: Request
    memory: list[MemoryItem]
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
