"""Names and words of the shipped worlds, for the guards that keep generic code and
hand-written fixtures free of them.

`shipped_names` are the declaration names of the audited shipped worlds (roles, tools,
records, fields, policies); `own_vocabulary` the words the language, the trace and the
audit contract define themselves, which a world may also use; `code_literals` a
module's string constants. The auditor's guard (tests/test_audit_offline.py), the
rule fixtures' guard (tests/test_audit_rules.py) and the vocabulary guard
(tests/test_world_vocabulary_guard.py) read them from here.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import get_args

from eairdsl.api import resolve_world
from eairdsl.audit import contract
from eairdsl.audit.evidence import Participant
from eairdsl.runtime.trace import EventKind, TraceEvent

ROOT = Path(__file__).resolve().parents[1]
#: the shipped worlds the offline auditor is graded on
AUDITED_WORLDS = ("a1", "b1", "c1", "d1", "f1")


@functools.cache
def shipped_names(worlds: tuple[str, ...] = AUDITED_WORLDS) -> frozenset[str]:
    """Every declaration name of `worlds`: the world, its parties, tools, records,
    documents, fields and policies."""
    names: set[str] = set()
    for w in worlds:
        world = resolve_world(ROOT / "worlds" / f"{w}.eair")
        names |= {world.meta.name}
        names |= {p.name for p in world.parties} | {t.name for t in world.tools}
        names |= {r.name for r in world.records} | {d.name for d in world.documents}
        names |= {f.name for r in world.records for f in r.fields}
        names |= {f.name for fields in world.schemas.values() for f in fields}
        names |= {p.name for p in world.policies}
    return frozenset(names)


def own_vocabulary() -> set[str]:
    """Words the language, the trace and the contract define (an event kind, a trace
    field, a boundary kind): a shipped name equal to one of them is not a world's."""
    words: set[str] = set(TraceEvent.model_fields) | set(get_args(EventKind))
    words |= set(get_args(Participant.model_fields["kind"].annotation))
    for model in (contract.Finding, contract.Boundary, contract.Component, contract.Report,
                  contract.EvidenceUnit):
        words |= set(model.model_fields)
    words |= set(get_args(contract.BoundaryKind)) | set(get_args(contract.Contribution))
    return words


def code_literals(source: str) -> set[str]:
    """The string constants of a module, docstrings left out."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs}
