"""The catalogue's `carry_required` pattern and the reviewer's reading of it.

A policy whose rule says that rows of a ledger carry every item of a list
(`all c in L: any h in LEDGER: h.F contains c`, here under `count(LEDGER) == 0 or
(…)`) is repaired at the tool that appends to the ledger: the field keeps what the
caller wrote and is followed by the rule's own items (EAIR C2, "the form attaches
the evidence"). The driving world is the unseen `handover_brief`
(tests/fixtures/unseen/handover_brief): its only other pattern, `ensure` at the
writer, refuses a handover the shift lead cannot complete (Retain 0.262).

The finding in tests/fixtures/repair_carry/finding.json is the first supported
finding of `eairc audit` on a 3-seed offline study of that world (a handoff
`eng_south -> shift_lead`, tool `file_handover`, policy `handover_complete`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.audit.contract import Finding
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.diff import diff_worlds
from eairdsl.ir import Attr, Binary, Comp, LetCall, Quant, Ref, Unary, World
from eairdsl.repair.catalogue import CatalogueRepairAgent, carry_demands
from eairdsl.repair.model import RepairRequest, ReviewRequest
from eairdsl.repair.review import MechanicalReviewer

ROOT = Path(__file__).resolve().parent.parent
UNSEEN = ROOT / "tests" / "fixtures" / "unseen"
SOURCE = UNSEEN / "handover_brief" / "handover_brief.eair"
ORIGINAL = SOURCE.read_text(encoding="utf-8")
FINDING = Finding.model_validate(json.loads(
    (ROOT / "tests" / "fixtures" / "repair_carry" / "finding.json").read_text(encoding="utf-8")))
PLAN = FINDING.repair_plan
assert PLAN is not None
WRITTEN = ('summary: summary + choose(attach_log, " Inspection log: " + log_text(), "")}')


def _ref(name: str, kind: str = "local") -> Ref:
    return Ref(kind=kind, name=name)


def _carry_rule(test: Binary, items: object = None, outer: str = "all") -> Binary:
    """`count(LEDGER) == 0 or (all c in ITEMS: any h in handover: TEST)`."""
    inner = Quant(kind="any", var="h", source=_ref("handover", "record"), body=test)
    quant = Quant(kind=outer, var="c", source=items or LetCall(name="codes"),
                  body=inner)
    empty = Binary(operator="==", left=_ref("handover", "record"), right=_ref("handover", "record"))
    return Binary(operator="or", left=empty, right=quant)


CONTAINS = Binary(operator="contains", left=Attr(obj=_ref("h"), name="summary"), right=_ref("c"))


@pytest.fixture(scope="module")
def world() -> World:
    result = compile_world(SOURCE)
    assert result.world is not None
    return result.world


# ------------------------------------------------------------------ shape detection

def test_the_carry_shape_is_found_under_an_or_and_through_a_let(world: World) -> None:
    policy = next(p for p in world.policies if p.name == "handover_complete")
    (found,) = carry_demands(policy.rule, world.lets, ("policy", "handover_complete"))
    assert (found.ledger, found.field, found.var, found.where) == (
        "handover", "summary", "c", ("policy", "handover_complete"))
    assert found.items == LetCall(name="critical_codes")
    # `c in h.F` says the same; one row carrying them all (`any h: all c: …`) too
    member = Binary(operator="in", left=_ref("c"), right=Attr(obj=_ref("h"), name="summary"))
    assert [c.field for c in carry_demands(_carry_rule(member), {}, ("policy", "p"))] == [
        "summary"]
    flipped = Quant(kind="any", var="h", source=_ref("handover", "record"),
                    body=Quant(kind="all", var="c", source=LetCall(name="codes"), body=CONTAINS))
    assert [c.ledger for c in carry_demands(flipped, {}, ("policy", "p"))] == ["handover"]


def test_other_rules_are_not_the_carry_shape() -> None:
    where = ("policy", "p")
    # a comparison, not "carries"
    equal = Binary(operator="==", left=Attr(obj=_ref("h"), name="summary"), right=_ref("c"))
    assert carry_demands(_carry_rule(equal), {}, where) == []
    # `any` over the items (one of them, not every one)
    assert carry_demands(_carry_rule(CONTAINS, outer="any"), {}, where) == []
    # the items depend on a variable bound outside them (C2's shape: per release)
    per_unit = Comp(var="f", source=_ref("findings", "record"), body=_ref("f"),
                    where=Binary(operator="==", left=Attr(obj=_ref("f"), name="unit"),
                                 right=Attr(obj=_ref("r"), name="unit")))
    outer = Quant(kind="all", var="r", source=_ref("releases", "record"),
                  body=_carry_rule(CONTAINS, items=per_unit))
    assert carry_demands(outer, {}, where) == []
    # under a `not`: the opposite demand
    assert carry_demands(Unary(operator="not", operand=_carry_rule(CONTAINS)), {}, where) == []


def test_no_shipped_world_has_the_carry_shape() -> None:
    """The pattern applies to the carry-every-item shape only: no shipped world's policy
    has it, so each gets the pattern it got before (test_repair_catalogue pins five)."""
    for path in sorted((ROOT / "worlds").glob("*.eair")):
        w = compile_world(path).world
        assert w is not None, path
        for policy in w.policies:
            assert carry_demands(policy.rule, w.lets, ("policy", policy.name)) == [], \
                (path.name, policy.name)


# ------------------------------------------------------------------ the proposal

def _request() -> RepairRequest:
    files = {}
    for path in sorted(SOURCE.parent.rglob("*")):
        if path.is_file() and path.suffix in (".eair", ".j2", ".md", ".json"):
            files[str(path.relative_to(SOURCE.parent))] = path.read_text(encoding="utf-8")
    assert PLAN is not None
    return RepairRequest(world_file="handover_brief.eair", source=ORIGINAL, files=files,
                         finding=FINDING, plan=PLAN,
                         protected=["measure", "instances", "inspections", "critical_codes"])


def test_the_catalogue_makes_the_writer_carry_the_rules_items() -> None:
    candidate = CatalogueRepairAgent().propose(_request())
    assert candidate.produced_by["pattern"] == "carry_required"
    assert candidate.attribution == {"tool file_handover": ["rule-enforced"]}
    assert WRITTEN not in candidate.source
    assert ('summary: summary + choose(attach_log, " Inspection log: " + log_text(), "") + '
            'choose(count(critical_codes()) > 0, " Required by handover_complete: " + '
            'join(critical_codes(), sep: "; "), "")}') in candidate.source
    # only the append changed: comments and every other line kept
    before, after = ORIGINAL.splitlines(), candidate.source.splitlines()
    assert len(before) == len(after)
    assert len([a for a, b in zip(before, after, strict=True) if a != b]) == 1


# ------------------------------------------------------------------ the reviewer

def _review_request(tmp_path: Path, candidate: str) -> ReviewRequest:
    original = tmp_path / "original"
    folder = tmp_path / "candidate"
    for dest in (original, folder):
        shutil.copytree(SOURCE.parent / "handover_brief", dest / "handover_brief")
        shutil.copy(SOURCE, dest / "handover_brief.eair")
    (folder / "handover_brief.eair").write_text(candidate, encoding="utf-8")
    old, new = compile_world(original / "handover_brief.eair"), \
        compile_world(folder / "handover_brief.eair")
    assert old.world is not None and new.ok and new.world is not None, \
        [d.message for d in new.diagnostics]
    assert PLAN is not None
    return ReviewRequest(world_file="handover_brief.eair", original=ORIGINAL, candidate=candidate,
                         finding=FINDING, plan=PLAN,
                         diff=diff_worlds(old.world, new.world).model_dump(mode="json"),
                         attribution={"tool file_handover": ["rule-enforced"]},
                         original_dir=str(original), candidate_dir=str(folder))


def test_the_reviewer_accepts_the_carried_items(tmp_path: Path) -> None:
    candidate = CatalogueRepairAgent().propose(_request())
    review = MechanicalReviewer().review(_review_request(tmp_path, candidate.source))
    assert review.verdict == "approve", review.model_dump()
    assert "tool file_handover" in review.risk_resolution.reason
    assert "let critical_codes" in review.risk_resolution.reason


@pytest.mark.parametrize("value, why", [
    # a stamp: the effect changed, but nothing it now writes is what the rule reads
    ('summary + choose(attach_log, " Inspection log: " + log_text(), "") + " Filed."',
     "reads nothing the rule reads"),
    # the items, but what the caller wrote is dropped (and the log the world's lever adds)
    ('join(critical_codes(), sep: "; ")', "drops what the caller wrote"),
])
def test_the_reviewer_rejects_an_effect_change_that_does_not_carry_the_items(
        tmp_path: Path, value: str, why: str) -> None:
    candidate = ORIGINAL.replace(WRITTEN, f"summary: {value}}}")
    assert candidate != ORIGINAL
    review = MechanicalReviewer().review(_review_request(tmp_path, candidate))
    assert review.verdict == "reject", why
    assert not review.risk_resolution.passed, why
    assert "no guard, acl, propagation or channel changed" in review.risk_resolution.reason


def test_without_the_compiled_worlds_an_effect_change_is_not_enforcement(
        tmp_path: Path) -> None:
    """From the diff alone the reviewer cannot tell what the new value reads: it stays
    strict and does not count the change."""
    candidate = CatalogueRepairAgent().propose(_request())
    request = _review_request(tmp_path, candidate.source).model_copy(
        update={"original_dir": None, "candidate_dir": None})
    review = MechanicalReviewer().review(request)
    assert review.verdict == "reject" and not review.risk_resolution.passed


# ------------------------------------------------------------------ end to end

def test_study_audit_repair_is_accepted_with_the_task_kept(tmp_path: Path) -> None:
    """study -> audit -> repair, offline, small: the catalogue's first pattern is
    `carry_required`, accepted in round 1 with the target at 0 and Retain 1."""
    runner = CliRunner()
    s, r = tmp_path / "s", tmp_path / "r"
    out = runner.invoke(app, ["study", str(SOURCE), "--seeds", "2", "--out", str(s)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["audit", str(s), "-o", str(s / "audit")])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["repair", str(SOURCE), "--audit", str(s / "audit"), "-o", str(r),
                              "--seeds", "6"])
    assert out.exit_code == 0, out.output
    acc = json.loads((r / "acceptance.json").read_text())
    assert acc["accepted"] and acc["scope_ok"] and acc["review_ok"] and acc["audit_pass"]
    assert acc["rounds"] == 1 and acc["retain"] >= 0.95
    assert acc["target"]["k"] == 0 and acc["target_before"]["k"] > 0
    produced = json.loads((r / "rounds" / "01" / "candidate.json").read_text())["produced_by"]
    assert produced["pattern"] == "carry_required"
    assert "join(critical_codes()" in (r / "world" / "handover_brief.eair").read_text()
