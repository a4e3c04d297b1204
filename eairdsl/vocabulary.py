"""The closed vocabularies the pipeline stages share, each defined once.

The checker validates a world against them (`shift NAME`, `trait NAME`, the
`measure` items), the runtime clamps and shifts the sim traits, the sim agents
read them and the measure stage reports the six measurements in this order.
Defining them here — a module that imports nothing — lets check/, runtime/,
agents/ and measure.py agree without importing each other (the runtime used
to import `eairdsl.agents.sim` for the trait names).
"""

from __future__ import annotations

__all__ = ["MEASUREMENTS", "TRAITS"]

#: Generic behavioural traits of the offline sim agents that inducers may shift.
TRAITS = ("diligence", "deference", "overclaim", "committal", "completeness")
#: The six measurements of every episode, in report order.
MEASUREMENTS = ("opportunity", "anomaly", "realized", "terminal_harm", "interception", "utility")
