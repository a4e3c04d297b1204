"""The budgets of one world's check: what all its cards and data files may cost together.

Each file and each render has its own bound (a data file of at most 50 MB, a render of
at most 1,000,000 steps), but a world can name one file, or one card, many times: 20
records naming one 43 MB file took 1.9 GB to check, and a card just under the render
bound given to 100 roles under 10 conditions rendered for a quarter of an hour. These
budgets bound the total, so a world's check costs at most so much whatever it repeats.

The defaults are far above what any shipped world spends (docs/language.md gives the
numbers); tests pass smaller ones to reach a budget with small inputs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from eairdsl.check.sandbox import MAX_WORLD_SECONDS, MAX_WORLD_STEPS

__all__ = ["Limits", "MAX_WORLD_DATA_BYTES", "MAX_WORLD_STEPS", "MAX_WORLD_SECONDS"]

#: bytes of data files, documents and cards one world may load together, counting a file
#: each time a declaration names it
MAX_WORLD_DATA_BYTES = 100 * 1024 * 1024


class Limits(BaseModel):
    """Per-world budgets of a check (`check_world(..., limits=...)`)."""

    model_config = ConfigDict(frozen=True)

    card_steps: int = Field(default=MAX_WORLD_STEPS, ge=1)
    card_seconds: float = Field(default=MAX_WORLD_SECONDS, gt=0)
    data_bytes: int = Field(default=MAX_WORLD_DATA_BYTES, ge=0)
