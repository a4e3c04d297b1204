"""Signals (the Signals paper): findings across many runs as engineering issues.

Occurrences come from any auditor's findings; they are grouped into Signals by
a versioned fingerprint; each Signal has a severity computed by code from
fixed tables (equations 1–3), remediations with checks, and a lifecycle (open,
resolved at a world digest, regressed, won't-fix). A deterministic matcher
(§6.1) compares two sets of occurrences or Signals.

- `taxonomy()`: the 45 problem types in eight families (Appendix A) and the 13
  EAIR risks, as versioned data shipped with the package (`eairdsl.taxonomy`, at the
  top of the package, since the audit stage reads it too);
- `severity`: equations 1–3 with Tables 1 and 2;
- `occurrences`, `grouping`, `store`: from audit reports to a persistent store;
- `matcher`: occurrence and Signal precision, recall and F1.

It is the last stage: it reads audit reports and repair results, and nothing
earlier imports it.
"""

from __future__ import annotations

from typing import Any

from eairdsl.taxonomy import Taxonomy, load_taxonomy

__all__ = ["severity_score", "taxonomy"]


def taxonomy() -> Taxonomy:
    """The versioned taxonomy (its `types`, `families` and `risks`), read once."""
    return load_taxonomy()


def severity_score(nature: str, **factors: Any) -> tuple[int, str]:
    """(score, level) for one nature; see `eairdsl.signals.severity.severity_score`.

    Factors: `consequence`, `reachability`, `waste`, `affected_sessions`,
    `analyzed_sessions`; any other name is a ValueError (not a TypeError), like
    every other bad input to severity.
    """
    from eairdsl.signals.severity import FACTORS
    from eairdsl.signals.severity import severity_score as score

    unknown = sorted(set(factors) - set(FACTORS))
    if unknown:
        raise ValueError(f"unknown severity factor(s) {', '.join(unknown)}; "
                         f"use {', '.join(FACTORS)}")
    missing = [k for k in ("affected_sessions", "analyzed_sessions") if k not in factors]
    if missing:
        raise ValueError(f"severity needs {' and '.join(missing)}")
    result: tuple[int, str] = score(nature, **factors)
    return result
