"""Agent backends behind one protocol: `sim` (offline, the default) and `llm` (litellm).

`llm` is imported only when a run asks for a model, so importing this package
never loads litellm. Replay of recorded LLM runs lives in `cassette.py`.
"""

from __future__ import annotations

from eairdsl.agents.protocol import Agent, Observation, Reply, ToolCall

__all__ = ["Agent", "Observation", "Reply", "ToolCall"]
