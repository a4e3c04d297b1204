"""Generic code names no world's vocabulary: no enum member and no one-word string literal
of a shipped world is a string literal anywhere in `eairdsl/` (issue 26, item 7).

`tests/test_audit_offline.py` holds the auditor modules to the shipped worlds'
declaration names (roles, tools, records, fields, policies). This extends the guard to
the values a world declares — enum members (`submitted`, `escalate`) and string
literals (`"L3"`) — and to every module of the package. A value is compared only when
it is one word (letters, digits, `_`, `-`): a world's sentences and separators (`", "`)
are not vocabulary. Words the package uses in a role of its own that happen to equal a
world's value are allowed below, each with the reason; what is left must be empty,
except the offenders already known (`KNOWN_OFFENDERS`), which are to move into the
worlds' declarations and must be taken off the list when they do.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from world_vocabulary import code_literals

from eairdsl.syntax import ast as A
from eairdsl.syntax.parser import parse_text

ROOT = Path(__file__).resolve().parents[1]
WORLDS = sorted((ROOT / "worlds").glob("*.eair"))
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

#: words the package uses for its own purposes, whatever a world also calls them
GENERIC = {
    "none": "the language's none literal and JSON's null spelled out",
    "error": "an LLM call's, a cassette's or a run's error field",
    "failed": "the status of an audit, a rule or a remediation check",
    "timeout": "the LLM request timeout option",
    "max_connections": "the LLM connection-limit option",
    "scope": "a cassette's or an LLM call's scope key",
    "decision": "the trace event kind `decision` (docs/trace.md)",
    "self": "the Python name the card sandbox refuses",
    "evidence": "the audit contract's R4 evidence component",
    "before": "a repair's before/after arms and the Signals matcher's side",
    "after": "a repair's before/after arms",
    "both": "a study grid's `both` agents option",
    "open": "a Signals issue's status",
    "yes": "the CLI's rendering of a true measurement",
    "no": "the CLI's rendering of a false one, and a stop word of the routing rule",
    "high": "the CLI's repair severity option",
    "low": "the CLI's repair severity option",
    "send": "a sim agent's plan step (call, send, act)",
    "L1": "the oracle's lead numbering (L1, L2, ...)",
    "submission": "the language's enum meaning keyword (`enum E { ... } submission a`), "
                  "its IR field and the bundle's vocabularies.json key",
}
#: a word allowed in one module only, where it plays a role of the package's own
ALLOWED_IN = {
    ("eairdsl/signals/remediation.py", "pending"): "a remediation check not yet run",
    ("eairdsl/agents/llm.py", "pending"): "a tool call with no result yet",
}
#: world vocabulary generic code still carries (issue 26 item 7): the hedge lexicon's
#: "pending" (a word of English hedging that C1 also uses as a status). C1's submission
#: and interception statuses left `status_drift` when worlds came to declare them
#: (`enum E { ... } submission a interception b`)
KNOWN_OFFENDERS = {
    ("eairdsl/audit/rules/hedge.py", "pending"),
}


@functools.cache
def world_values() -> frozenset[str]:
    """Every enum member and one-word text literal of the shipped worlds."""
    values: set[str] = set()
    for path in WORLDS:
        module, _ = parse_text(path.read_text(encoding="utf-8"), path.name)
        for decl in module.decls:
            if isinstance(decl, A.EnumDecl):
                values |= set(decl.members)
            for expr in A.walk_exprs(decl):
                if isinstance(expr, A.LiteralExpr) and expr.kind == "text":
                    values.add(str(expr.value))
    return frozenset(v for v in values if _WORD.fullmatch(v))


def offenders(values: frozenset[str]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "eairdsl").rglob("*.py")):
        module = str(path.relative_to(ROOT))
        for word in code_literals(path.read_text(encoding="utf-8")) & values:
            if word not in GENERIC and (module, word) not in ALLOWED_IN:
                found.add((module, word))
    return found


def test_generic_code_carries_no_world_values_but_the_known_ones() -> None:
    found = offenders(world_values())
    assert found - KNOWN_OFFENDERS == set(), "generic code names world values"
    assert KNOWN_OFFENDERS - found == set(), "fixed: take these off KNOWN_OFFENDERS"


def test_the_values_check_can_fail() -> None:
    values = world_values()
    assert {"submitted", "escalate", "sign", "L3"} <= values  # enum members and literals
    assert "Selected " not in values  # a sentence fragment is not vocabulary
    assert code_literals('"""doc"""\nx = row.get("escalate")\n') == {"escalate"}
    assert all(word in values for word in set(GENERIC) | {w for _, w in ALLOWED_IN}), \
        "an allowance no world needs any more"
