"""Agent backends behind one protocol: `sim` (offline, the default) and, later, `llm` and `replay`."""

from __future__ import annotations

from eairdsl.agents.protocol import Agent, Observation, Reply, ToolCall

__all__ = ["Agent", "Observation", "Reply", "ToolCall"]
