"""Grouping occurrences into Signals: a versioned fingerprint stored with its inputs.

Occurrences that a developer would fix with one change group into one Signal
(§3.2). Sharing a taxonomy type alone does not establish a common cause, so the
fingerprint is narrower than the type: two occurrences group exactly when they
agree on every input of `fingerprint_inputs` —

    grouping version, system (the world), property (the policy id; else the
    EAIR risk id, whose preserved property failed; else the property's text with
    numbers masked), component type and normalised name,
    boundary kind, sender role -> receiver role (the boundary edge's ends),
    top-ranked type

— and the store keeps those inputs beside the fingerprint, so `eairc signals
show` can say why an occurrence grouped. A later grouping version is a new
fingerprint space: occurrences grouped under `grouping-1` keep their Signal.
Explicit merge and unmerge records (the store) move fingerprints between Signals
without touching this function.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any

from eairdsl.signals.matcher import normalise_name
from eairdsl.signals.occurrences import Occurrence

__all__ = ["GROUPING_VERSION", "normalise_name", "fingerprint_inputs", "fingerprint",
           "explain"]

GROUPING_VERSION = "grouping-1"

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _property(o: Occurrence) -> str:
    if o.property_policy:
        return f"policy:{o.property_policy}"
    if o.risk and o.risk != "other":
        # a free-text property of a catalogued risk names the instance's values (the states
        # a record drifted between); the property that failed is the risk's (EAIR Table 1)
        return f"risk:{o.risk}"
    if o.property_text:
        masked = _NUMBER.sub("#", unicodedata.normalize("NFKC", o.property_text).casefold())
        return "text:" + " ".join(masked.split())
    return "none"


def fingerprint_inputs(o: Occurrence) -> dict[str, Any]:
    """What the fingerprint is computed from (kept with it in the store)."""
    return {
        "version": GROUPING_VERSION,
        "system": o.world or "unknown",
        "property": _property(o),
        "component_type": o.component_type,
        "component": normalise_name(o.component_name),
        "boundary": o.boundary_kind or "none",
        "roles": f"{o.sender or '?'}->{o.receiver or '?'}",
        "top_type": o.types[0] if o.types else "outside_catalogue",
    }


def fingerprint(inputs: dict[str, Any]) -> str:
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def explain(inputs: dict[str, Any]) -> str:
    """One line: why occurrences with these inputs group together."""
    return (f"{inputs.get('version')}: system {inputs.get('system')}, {inputs.get('property')}, "
            f"{inputs.get('component_type')} {inputs.get('component')}, "
            f"{inputs.get('boundary')} boundary {inputs.get('roles')}, "
            f"top type {inputs.get('top_type')}")
