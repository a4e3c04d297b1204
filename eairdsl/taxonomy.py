"""The Signals taxonomy (45 problem types, eight families) and the EAIR risks, as versioned data.

Signals (Appendix A, Table 4) gives every problem type a definition, the
evidence a diagnosis needs and the cases it excludes, so that a diagnosis can
be checked against the execution and two diagnostic methods can be compared
on the same ids (§6.1 matches occurrences on "at least one shared problem-type
ID"). The catalogue is data, not code: it ships as
`eairdsl/data/taxonomy-1.json`, its version (`signals-1`) is the one an
audit report pins in `RiskType.version`, and a later catalogue is a new file
with a new version rather than an edit that silently changes old reports'
meaning. The same file carries EAIR Table 1 (the 13 interaction risks A1–F2
with the workflow operation and the properties it must preserve), which an
audit report may cite beside or instead of a Signals type.

The paper gives names and definitions but no ids and no neighbour lists; the
file's `note` says how ids (the names in snake_case) and neighbours (this
project's reading of the boundaries the paper draws) were made.

It sits at the top of the package, not inside `signals/`, because the audit stage
reads it too (an auditor's prompt lists the types, the validator holds a report's
`types` to them) and the audit stage comes before Signals: a vocabulary every stage
may use, like `eairdsl.vocabulary`.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

__all__ = ["TAXONOMY_FILE", "ProblemType", "Family", "EairRisk", "Taxonomy", "load_taxonomy",
           "parse_taxonomy"]

#: the package data file of the current catalogue (`signals-1`)
TAXONOMY_FILE = "taxonomy-1.json"

_SLUG = r"^[a-z][a-z0-9_]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ProblemType(_Model):
    """One Appendix A entry: what must be established, and what does not count."""

    id: str = Field(pattern=_SLUG, description="stable id: the name in snake_case")
    ref: str = Field(description="position in Appendix A, e.g. 'A.3.2'")
    family: str = Field(pattern=_SLUG)
    name: str
    text: str = Field(description="the paper's entry, verbatim")
    definition: str = Field(description="the entry's first sentence: the observable behaviour")
    required_evidence: tuple[str, ...] = Field(
        description="what a diagnosis must establish (besides the catalogue's general evidence)")
    exclusions: tuple[str, ...] = Field(description="cases the entry excludes or does not cover")
    neighbours: tuple[str, ...] = Field(
        description="types whose boundary with this one a reviewer must decide (symmetric)")


class Family(_Model):
    """A Table 4 family: organises the catalogue; it does not establish a root cause."""

    id: str = Field(pattern=_SLUG)
    ref: str = Field(description="Appendix A section, e.g. 'A.3'")
    name: str
    focus: str = Field(description="Table 4's diagnostic focus")
    types: tuple[str, ...] = Field(description="its type ids in Appendix A order")


class EairRisk(_Model):
    """An EAIR Table 1 risk: the operation whose organisational property must be preserved."""

    id: str = Field(pattern=r"^[A-F][1-3]$")
    name: str
    family: str = Field(pattern=r"^[A-F]$", description="the operational family letter")
    operation: str = Field(description="Table 1's workflow operation (the family row)")
    preserved_properties: tuple[str, ...] = Field(
        description="Table 1's 'property it must preserve' (given per family row, not per risk)")


class _Eair(_Model):
    version: str
    source: str
    note: str
    risks: tuple[EairRisk, ...]


class Taxonomy(_Model):
    """The versioned catalogue with lookups by id; built once by `load_taxonomy`."""

    version: str
    source: str
    note: str
    general_evidence: str = Field(description="what every diagnosis requires (Appendix A)")
    families: tuple[Family, ...]
    types: tuple[ProblemType, ...]
    eair: _Eair

    _types: dict[str, ProblemType] = PrivateAttr(default_factory=dict)
    _families: dict[str, Family] = PrivateAttr(default_factory=dict)
    _risks: dict[str, EairRisk] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Taxonomy:
        """A catalogue whose ids dangle would make every later lookup lie; refuse it here."""
        types = {t.id: t for t in self.types}
        if len(types) != len(self.types):
            raise ValueError("problem type ids are not unique")
        families = {f.id: f for f in self.families}
        if len(families) != len(self.families):
            raise ValueError("family ids are not unique")
        for t in self.types:
            if t.family not in families:
                raise ValueError(f"type {t.id!r} names unknown family {t.family!r}")
            if t.id not in families[t.family].types:
                raise ValueError(f"type {t.id!r} is not listed by its family {t.family!r}")
            for n in t.neighbours:
                if n not in types:
                    raise ValueError(f"type {t.id!r} names unknown neighbour {n!r}")
                if t.id not in types[n].neighbours:
                    raise ValueError(f"neighbours are symmetric: {n!r} does not list {t.id!r}")
        listed = [i for f in self.families for i in f.types]
        if sorted(listed) != sorted(types):
            raise ValueError("the families do not list every type exactly once")
        risks = {r.id: r for r in self.eair.risks}
        if len(risks) != len(self.eair.risks):
            raise ValueError("EAIR risk ids are not unique")
        self._types, self._families, self._risks = types, families, risks
        return self

    @property
    def risks(self) -> tuple[EairRisk, ...]:
        """EAIR Table 1's thirteen risks, A1…F2."""
        return self.eair.risks

    @property
    def eair_version(self) -> str:
        return self.eair.version

    def type_ids(self) -> frozenset[str]:
        return frozenset(self._types)

    def has_type(self, type_id: str) -> bool:
        return type_id in self._types

    def type(self, type_id: str) -> ProblemType:
        """The problem type `type_id`; KeyError names the id when it is not in the catalogue."""
        try:
            return self._types[type_id]
        except KeyError:
            raise KeyError(f"{type_id!r} is not a {self.version} problem type id") from None

    def family(self, family_id: str) -> Family:
        try:
            return self._families[family_id]
        except KeyError:
            raise KeyError(f"{family_id!r} is not a {self.version} family id") from None

    def family_of(self, type_id: str) -> Family:
        return self._families[self.type(type_id).family]

    def types_in(self, family_id: str) -> tuple[ProblemType, ...]:
        return tuple(self._types[i] for i in self.family(family_id).types)

    def risk(self, risk_id: str) -> EairRisk:
        try:
            return self._risks[risk_id]
        except KeyError:
            raise KeyError(f"{risk_id!r} is not an {self.eair.version} risk id") from None


def parse_taxonomy(data: Any) -> Taxonomy:
    """Validate catalogue data (the parsed JSON): for tests and for a later catalogue file."""
    return Taxonomy.model_validate(data, strict=False)


@cache
def load_taxonomy() -> Taxonomy:
    """The shipped catalogue, read and validated once per process."""
    raw = resources.files("eairdsl").joinpath("data", TAXONOMY_FILE).read_text("utf-8")
    return parse_taxonomy(json.loads(raw))
