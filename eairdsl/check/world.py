"""The checked world: every declaration of a program indexed by name, plus what the
passes learn about it (types, name resolutions, loaded data, rendered cards).

Passes fill this in one after another; the IR stage reads it and never looks at
the raw AST lists again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from eairdsl.check.limits import Limits
from eairdsl.check.loader import LoadedModule, Program
from eairdsl.check.types import Type
from eairdsl.diagnostics import Diagnostics
from eairdsl.syntax import ast as A

__all__ = ["CheckedWorld", "Pass", "Resolution", "DECL_KINDS"]

#: Human names of declaration kinds, for messages.
DECL_KINDS = {
    "enum": "enum", "schema": "schema", "record": "record", "state": "state variable",
    "document": "document", "policy": "policy", "lever": "lever", "condition": "condition",
    "inducer": "inducer", "tool": "tool", "party": "participant", "let": "definition",
    "instance": "instance", "study_measure": "study measure",
}


@dataclass(frozen=True)
class Resolution:
    """What a name in an expression refers to: (kind, name)."""

    kind: str
    name: str


@dataclass
class CheckedWorld:
    """Everything the checker knows about one world program."""

    program: Program
    limits: Limits = field(default_factory=Limits)  # what all its cards and data may cost
    world: A.WorldDecl | None = None
    world_module: LoadedModule | None = None
    # declarations by name, with the module that declared them
    decls: dict[str, tuple[str, A.Decl, LoadedModule]] = field(default_factory=dict)
    enums: dict[str, A.EnumDecl] = field(default_factory=dict)
    schemas: dict[str, A.SchemaDecl] = field(default_factory=dict)
    records: dict[str, A.RecordDecl] = field(default_factory=dict)
    states: dict[str, A.StateDecl] = field(default_factory=dict)
    documents: dict[str, A.DocumentDecl] = field(default_factory=dict)
    policies: dict[str, A.PolicyDecl] = field(default_factory=dict)
    levers: dict[str, A.LeverDecl] = field(default_factory=dict)
    conditions: dict[str, A.ConditionDecl] = field(default_factory=dict)
    inducers: dict[str, A.InducerDecl] = field(default_factory=dict)
    tools: dict[str, A.ToolDecl] = field(default_factory=dict)
    parties: dict[str, A.PartyDecl] = field(default_factory=dict)
    lets: dict[str, A.LetDecl] = field(default_factory=dict)
    instance_decls: dict[str, A.InstanceDecl] = field(default_factory=dict)
    study_measures: dict[str, A.StudyMeasureDecl] = field(default_factory=dict)
    authorizations: list[A.AuthorizationDecl] = field(default_factory=list)
    channels: list[A.ChannelDecl] = field(default_factory=list)
    instances_from: list[tuple[A.InstancesDecl, LoadedModule]] = field(default_factory=list)
    measures: list[A.MeasureDecl] = field(default_factory=list)
    protected: list[A.ProtectedDecl] = field(default_factory=list)

    # learned by passes
    module_of: dict[int, LoadedModule] = field(default_factory=dict)
    enum_members: dict[str, list[str]] = field(default_factory=dict)  # member -> enums
    lever_types: dict[str, Type] = field(default_factory=dict)
    state_types: dict[str, Type] = field(default_factory=dict)
    field_types: dict[tuple[str, str], Type] = field(default_factory=dict)  # (record|schema, f)
    instance_types: dict[str, Type] = field(default_factory=dict)
    expr_types: dict[int, Type] = field(default_factory=dict)
    resolutions: dict[int, Resolution] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    document_texts: dict[str, str] = field(default_factory=dict)
    instances: list[dict[str, Any]] = field(default_factory=list)
    condition_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompts: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> condition -> text
    data_files: dict[str, bytes] = field(default_factory=dict)  # ref -> bytes (for the digest)
    data_loaded: int = 0  # bytes of data files, documents and cards read, counting repeats
    data_budget_spent: bool = False  # a file did not fit in `limits.data_bytes` (reported)
    card_steps: int = 0  # steps every render of the world's cards took together

    def module(self, decl: Any) -> LoadedModule:
        return self.module_of[id(decl)]

    def groups(self, record: str) -> dict[str, list[str]]:
        decl = self.records[record]
        return {g.name: g.fields for g in decl.items if isinstance(g, A.GroupDecl)}

    def fields(self, record: str) -> list[A.FieldDecl]:
        decl = self.records.get(record)
        if decl is None:
            return []
        return [f for f in decl.items if isinstance(f, A.FieldDecl)]

    @property
    def measure_items(self) -> list[A.MeasureItem]:
        return [item for m in self.measures for item in m.items]


class Pass(Protocol):
    """A checker pass: reads and extends the CheckedWorld, reports diagnostics."""

    def __call__(self, world: CheckedWorld, diagnostics: Diagnostics) -> None: ...
