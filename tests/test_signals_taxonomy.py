"""The Signals taxonomy data: Appendix A's 45 types in Table 4's families, and EAIR Table 1."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from eairdsl.audit.contract import EAIR_TAXONOMY_VERSION, SIGNALS_TAXONOMY_VERSION
from eairdsl.check.references import RISKS
from eairdsl.signals import taxonomy
from eairdsl.taxonomy import TAXONOMY_FILE, Taxonomy, load_taxonomy, parse_taxonomy

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "eairdsl" / "data" / TAXONOMY_FILE
PAPER = ROOT.parent / "shared" / "seeds" / "003_41a7d29a5e9ad091.txt"

#: Table 4, in order: (name, number of types)
TABLE_4 = [
    ("Instruction and specification", 5),
    ("Knowledge, context, and retrieval", 6),
    ("Reasoning, decision, and output", 8),
    ("Tool, action, and integration", 8),
    ("Orchestration, coordination, and state", 5),
    ("Runtime and platform reliability", 3),
    ("Safety, security, privacy, and policy", 6),
    ("Efficiency and resource use", 4),
]


@pytest.fixture(scope="module")
def tax() -> Taxonomy:
    return taxonomy()


def _raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text("utf-8"))
    return data


def test_versions_are_the_ones_reports_pin(tax: Taxonomy) -> None:
    assert tax.version == SIGNALS_TAXONOMY_VERSION == "signals-1"
    assert tax.eair_version == EAIR_TAXONOMY_VERSION == "eair-1"


def test_45_types_with_unique_ids(tax: Taxonomy) -> None:
    ids = [t.id for t in tax.types]
    assert len(ids) == 45
    assert len(set(ids)) == 45
    assert tax.type_ids() == frozenset(ids)


def test_family_counts_are_table_4(tax: Taxonomy) -> None:
    assert [(f.name, len(f.types)) for f in tax.families] == TABLE_4
    assert [f.ref for f in tax.families] == [f"A.{i}" for i in range(1, 9)]
    for f in tax.families:
        assert [t.family for t in tax.types_in(f.id)] == [f.id] * len(f.types)
        assert [t.ref for t in tax.types_in(f.id)] == [f"{f.ref}.{i}"
                                                      for i in range(1, len(f.types) + 1)]


def test_ids_are_the_names_in_snake_case(tax: Taxonomy) -> None:
    for t in tax.types:
        assert t.id == re.sub(r"[^a-z0-9]+", "_", t.name.lower()).strip("_")
    # the ids the audit contract's examples and §3.5 use
    assert tax.type("sensitive_information_disclosure").family == \
        "safety_security_privacy_and_policy"
    assert tax.type("factual_or_logical_error").ref == "A.3.2"


def test_every_neighbour_exists_is_symmetric_and_not_itself(tax: Taxonomy) -> None:
    for t in tax.types:
        assert t.id not in t.neighbours
        assert len(set(t.neighbours)) == len(t.neighbours)
        for n in t.neighbours:
            assert tax.has_type(n), (t.id, n)
            assert t.id in tax.type(n).neighbours, (t.id, n)
    # §4.2's own boundary: invocation, response, subsequent decision
    args = tax.type("invalid_tool_arguments").neighbours
    assert {"tool_result_invalid", "tool_result_misinterpreted_or_ignored"} <= set(args)
    # "tool arguments are a separate type"
    assert "invalid_tool_arguments" in tax.type("output_schema_or_format_violation").neighbours


def test_split_fields_are_the_entry_s_own_words(tax: Taxonomy) -> None:
    for t in tax.types:
        assert t.text.startswith(t.definition), t.id
        for piece in (*t.required_evidence, *t.exclusions):
            clause = piece.rstrip(".")
            assert clause in t.text or clause[0].lower() + clause[1:] in t.text, (t.id, piece)
        assert t.required_evidence or t.exclusions, t.id
    drift = tax.type("goal_drift")
    assert drift.exclusions == ("Authorized user revisions are excluded.",)


@pytest.mark.skipif(not PAPER.exists(), reason="the Signals paper is not beside the checkout")
def test_text_is_the_paper_s_appendix_a(tax: Taxonomy) -> None:
    paper = PAPER.read_text("utf-8")
    appendix = paper[paper.index("**A.1**"):]
    # drop the page footers ("10", "Signals") that split an entry across pages
    appendix = re.sub(r"\n\s*\d+\s*\n\s*Signals\s*\n", "\n", appendix)
    # compare without whitespace or bold markers: the PDF splits words ("exe cuted")
    flat = re.sub(r"\s+", "", appendix.replace("**", "")).replace("ci-tation", "citation")
    for t in tax.types:
        assert re.sub(r"\s+", "", f"{t.name}.{t.text}") in flat, t.id


def test_thirteen_eair_risks_match_the_checker(tax: Taxonomy) -> None:
    assert [r.id for r in tax.risks] == ["A1", "A2", "A3", "B1", "B2", "C1", "C2", "C3",
                                         "D1", "D2", "D3", "F1", "F2"]
    assert {r.id: r.name for r in tax.risks} == RISKS
    assert {r.family for r in tax.risks} == {"A", "B", "C", "D", "F"}
    for r in tax.risks:
        assert r.id[0] == r.family
        assert r.operation and r.preserved_properties
    d1 = tax.risk("D1")
    assert d1.operation == "Delegation to role-specialized or privileged agents"
    assert "permission scope" in d1.preserved_properties
    assert tax.risk("A1").preserved_properties[0] == "global policy constraints"


def test_lookups_name_the_unknown_id(tax: Taxonomy) -> None:
    with pytest.raises(KeyError, match="'no_such_type' is not a signals-1 problem type id"):
        tax.type("no_such_type")
    with pytest.raises(KeyError, match="'E1' is not an eair-1 risk id"):
        tax.risk("E1")
    with pytest.raises(KeyError, match="not a signals-1 family id"):
        tax.family("no_family")
    assert tax.family_of("retry_thrash").id == "efficiency_and_resource_use"


def test_loaded_once() -> None:
    assert load_taxonomy() is load_taxonomy() is taxonomy()


def test_the_file_is_byte_stable() -> None:
    raw = DATA.read_text("utf-8")
    assert raw == json.dumps(json.loads(raw), indent=1, ensure_ascii=False,
                             sort_keys=True) + "\n"


def _mutated(edit: Any) -> dict[str, Any]:
    data = copy.deepcopy(_raw())
    edit(data)
    return data


def _type(data: dict[str, Any], type_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in data["types"] if t["id"] == type_id)
    return found


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: _type(d, "goal_drift")["neighbours"].append("no_such_type"),
     "goal_drift.*unknown neighbour 'no_such_type'"),
    (lambda d: _type(d, "goal_drift")["neighbours"].remove("user_intent_misinterpreted"),
     "symmetric"),
    (lambda d: d["types"].append(copy.deepcopy(d["types"][0])), "not unique"),
    (lambda d: _type(d, "retry_thrash").update(family="runtime_and_platform_reliability"),
     "not listed by its family"),
    (lambda d: d["families"][0]["types"].pop(), "not listed by its family"),
    (lambda d: _type(d, "retry_thrash").update(family="nowhere"), "unknown family"),
    (lambda d: d["eair"]["risks"].append(d["eair"]["risks"][0]), "EAIR risk ids"),
    (lambda d: d.update(extra=1), "extra"),
])
def test_a_broken_catalogue_is_refused(edit: Any, message: str) -> None:
    assert parse_taxonomy(_raw()).version == "signals-1"
    with pytest.raises(ValueError, match=message):
        parse_taxonomy(_mutated(edit))


def test_the_wheel_ships_the_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["eairdsl"]
    rel = DATA.relative_to(ROOT / "eairdsl").as_posix()
    assert any(fnmatch.fnmatch(rel, g) for g in globs), globs


@pytest.mark.parametrize("first", ["import eairdsl.taxonomy",
                                   "from eairdsl.taxonomy import load_taxonomy",
                                   "import eairdsl.signals"])
def test_the_function_survives_importing_its_submodule(first: str) -> None:
    """`eairdsl.signals.taxonomy()` is the function whatever was imported first."""
    code = (f"{first}\nimport eairdsl.signals, eairdsl.taxonomy\n"
            "print(eairdsl.signals.taxonomy().version, eairdsl.signals.taxonomy().version)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["signals-1", "signals-1"]
