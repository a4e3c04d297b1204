"""Grouping occurrences into Signals: a versioned fingerprint stored with its inputs.

Occurrences that a developer would fix with one change group into one Signal
(§3.2): one failure mechanism in one world is one Signal. Two occurrences group
exactly when they agree on every input of `fingerprint_inputs` —

    grouping version, system (the world),
    property: its identity, never its text — the declared policy the finding
    names (`policy:ID`), else the world's measured property (`measured`: a
    finding that names no policy is about what the world measures),
    boundary kind,
    mechanism: the top-ranked Signals type (the mechanism the auditor names, or
    the versioned mapping's type for its risk and boundary)

— and the store keeps those inputs beside the fingerprint, so `eairc signals
show` can say why an occurrence grouped. The instance's values (the states a
record drifted between, the roles of one edge, the participant that wrote) are
not inputs: they vary from one episode of the same failure to the next, and
under `grouping-1` they split one C1 failure into 10 Signals and one B1 failure
into 18 (docs/signals.md has the figures).

A later grouping version is a new fingerprint space: occurrences grouped under
`grouping-1` keep their Signal and their stored inputs (a store written before
`grouping-2` stays readable as it is; an occurrence already stored is never
regrouped, and a new one gets a `grouping-2` fingerprint, so the first new
occurrence of an old failure opens a new Signal that a `merge` can join to the
old one). Explicit merge and unmerge records (the store) move fingerprints
between Signals without touching this function.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from eairdsl.signals.matcher import normalise_name
from eairdsl.signals.occurrences import Occurrence

__all__ = ["GROUPING_VERSION", "normalise_name", "fingerprint_inputs", "fingerprint",
           "explain"]

GROUPING_VERSION = "grouping-2"


def _property(o: Occurrence) -> str:
    """The property's identity: the policy id the finding names, else the world's
    measured property (its text names the instance's values, so it is no identity)."""
    if o.property_policy:
        return f"policy:{o.property_policy}"
    return "measured"


def fingerprint_inputs(o: Occurrence) -> dict[str, Any]:
    """What the fingerprint is computed from (kept with it in the store)."""
    return {
        "version": GROUPING_VERSION,
        "system": o.world or "unknown",
        "property": _property(o),
        "boundary": o.boundary_kind or "none",
        "mechanism": o.types[0] if o.types else "outside_catalogue",
    }


def fingerprint(inputs: dict[str, Any]) -> str:
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def explain(inputs: dict[str, Any]) -> str:
    """One line: why occurrences with these inputs group together (either version's)."""
    if inputs.get("version") == "grouping-1":
        return (f"{inputs.get('version')}: system {inputs.get('system')}, "
                f"{inputs.get('property')}, {inputs.get('component_type')} "
                f"{inputs.get('component')}, {inputs.get('boundary')} boundary "
                f"{inputs.get('roles')}, top type {inputs.get('top_type')}")
    return (f"{inputs.get('version')}: system {inputs.get('system')}, "
            f"{inputs.get('property')}, {inputs.get('boundary')} boundary, "
            f"mechanism {inputs.get('mechanism')}")
