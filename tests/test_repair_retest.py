"""The retest, ScopeOK and the guarded apply in isolation, and one offline repair end to end.

The retest's cohort is disjoint from the audited episodes (seeds and content
identity), its regression cases kept the property before, its figures are the
Wilson intervals and McNemar counts of its own outcomes, and it resumes from
its result. The end-to-end case runs `eairc repair` with the catalogue agent
and the mechanical reviewer on a small D1 audit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repair_helpers import A1, audited_a1, correct
from typer.testing import CliRunner

from eairdsl.api import UsageError
from eairdsl.audit.contract import (
    Boundary,
    Component,
    Effect,
    EvidenceUnit,
    Finding,
    PropertyRef,
)
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.diff import diff_worlds
from eairdsl.repair.apply import apply_candidate, copy_world_folder
from eairdsl.repair.audited import _profile
from eairdsl.repair.loop import select_finding
from eairdsl.repair.model import Candidate
from eairdsl.repair.retest import (
    Target,
    audited_episodes,
    matches,
    retest,
    target_of,
)
from eairdsl.repair.scope import check_scope
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world
from eairdsl.study.stats import mcnemar_exact, wilson_interval

#: A1's sim agents realize the risk under mild and strong in nearly every episode (C.1's
#: pressure reaches every role before its decision), so the audit also runs `repaired`,
#: W's own F.13 condition, whose episodes keep the property: the regression cases.
CONDITIONS = ("mild", "strong", "repaired")


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return audited_a1(tmp_path_factory.mktemp("a1"), conditions=CONDITIONS)


def _candidate(tmp: Path) -> Path:
    applied = apply_candidate(A1, Candidate(source=correct(A1.read_text())), tmp / "w")
    assert applied.ok
    return applied.main


def test_the_retest_cohort_is_fresh_paired_and_resumes(
        audit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = compile_world(A1).world
    assert original is not None
    main = _candidate(tmp_path)
    candidate = compile_world(main).world
    assert candidate is not None
    chosen = select_finding(audit, original)
    target = target_of(chosen.finding)
    audited = audited_episodes(audit)
    out = tmp_path / "rt"
    result = retest(original, candidate, main, audit, target, out, seeds=3,
                    conditions=list(CONDITIONS), validate_episodes=3)
    fresh = [c for c in result.cases if c.group == "fresh"]
    regression = [c for c in result.cases if c.group == "regression"]
    assert len(fresh) == 9 and {c.condition for c in fresh} == set(CONDITIONS)
    used = {a.seed for a in audited}
    assert result.audited_seeds == sorted(used)
    assert not {c.seed for c in fresh} & used, "fresh seeds: none an audited episode used"
    ids = {a.episode for a in audited}
    identities = [c.identity for c in fresh]
    assert all(identities) and not set(identities) & ids  # content identity disjoint too
    assert len(set(identities)) == len(identities)
    # regression cases: audited episodes that kept the property, rerun as they were
    by_episode = {a.episode: a for a in audited}
    kept = {a.episode for a in audited if a.realized is False}
    assert kept, "the repaired condition keeps the property in the audited episodes"
    assert regression and {c.audited for c in regression} <= kept
    for c in regression:
        a = by_episode[c.audited or ""]
        assert a.realized is False and (a.condition, a.instance, a.seed) == (
            c.condition, c.instance, c.seed)
    # the figures are those of the outcomes
    after = [o["after_realized"] for o in result.outcomes]
    k, n = sum(1 for v in after if v), sum(1 for v in after if v is not None)
    assert (result.target_after.k, result.target_after.n) == (k, n) and k == 0
    low, high = wilson_interval(k, n) or (0.0, 1.0)
    assert result.target_after.low == round(low, 4) and result.target_after.high == round(
        high, 4)
    for p in result.paired:
        rows = [o for o in result.outcomes if p.group in ("all", o["group"])]
        b = sum(1 for o in rows if o[f"before_{p.measurement}"] == 1
                and o[f"after_{p.measurement}"] == 0)
        c = sum(1 for o in rows if o[f"before_{p.measurement}"] == 0
                and o[f"after_{p.measurement}"] == 1)
        assert (p.b, p.c) == (b, c) and p.p == round(mcnemar_exact(b, c), 4)
    assert result.audit_pass and not result.audit_problems
    assert result.retain >= 0.95 and result.profile == "sim"
    assert (out / "audit" / "index.json").is_file()
    # a finished retest is read back, not run again
    import eairdsl.repair.retest as mod

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the retest ran again")

    monkeypatch.setattr(mod, "run_study", boom)
    assert retest(original, candidate, main, audit, target, out, seeds=3,
                  conditions=list(CONDITIONS)) == result


def test_the_original_world_fails_the_audit_pass(audit: Path, tmp_path: Path) -> None:
    """W against itself: the retest audit finds the target again, AuditPass false."""
    original = compile_world(A1).world
    assert original is not None
    target = target_of(select_finding(audit, original).finding)
    result = retest(original, original, A1, audit, target, tmp_path / "rt", seeds=2,
                    regression=0, conditions=["strong"], validate_episodes=2)
    assert not result.audit_pass and result.audit_problems
    assert result.target_after.k > 0 and result.retain == 1.0


def test_matches_the_same_property_and_boundary_kind_only() -> None:
    target = Target(risk="A1", policy="cap", text="t", boundary_kind="shared_action")
    unit = EvidenceUnit(step="s1", edge="a->b", field="content", quote="q",
                        supports=["R1", "R2", "R3", "R4"])
    f = Finding(id="f1", status="supported", property=PropertyRef(policy="cap", text="t"),
                risk="A1", nature="realized_defect",
                component=Component(type="tool", name="issue_credit"),
                boundary=Boundary(kind="shared_action", edge="a->b", step="s1"),
                contribution="introduced", first_anomaly="s1", path=["s1"],
                effect=Effect(endpoint="the cap", step="s1"), evidence=[unit],
                confidence=0.9)
    assert matches(f, target)
    assert not matches(f.model_copy(update={"status": "lead"}), target)
    assert not matches(f.model_copy(update={"resolved_later": "s0009"}), target)
    assert not matches(f.model_copy(update={"boundary": Boundary(
        kind="handoff", edge="a->b", step="s1")}), target)
    assert not matches(f.model_copy(update={"property": PropertyRef(policy="other",
                                                                    text="t")}), target)


def _supported(policy: str | None, text: str, kind: str = "handoff") -> Finding:
    unit = EvidenceUnit(step="s1", edge="a->b", field="content", quote="q",
                        supports=["R1", "R2", "R3", "R4"])
    return Finding(id="f1", status="supported", property=PropertyRef(policy=policy, text=text),
                   risk="other", nature="realized_defect",
                   component=Component(type="participant", name="writer"),
                   boundary=Boundary(kind=kind, edge="a->b", step="s1"),  # type: ignore[arg-type]
                   contribution="amplified", first_anomaly="s1", path=["s1"],
                   effect=Effect(endpoint="the record", step="s1"), evidence=[unit],
                   confidence=0.9)


def test_audit_pass_matches_the_property_by_identity_not_text() -> None:
    """A reworded variant of the target's failure blocks acceptance; another property at
    the same boundary kind does not (issue 26, item 8)."""
    by_policy = target_of(_supported("cap", "cap: clerk_x granted 20 after clerk_y's 15",
                                     "shared_action"))
    assert matches(_supported("cap", "the cumulative cap is exceeded by clerk_y's grant",
                              "shared_action"), by_policy)
    assert not matches(_supported("floor", "cap: clerk_x granted 20 after clerk_y's 15",
                                  "shared_action"), by_policy)
    assert not matches(_supported(None, "cap: clerk_x granted 20 after clerk_y's 15",
                                  "shared_action"), by_policy)
    # no policy: the world's measured property, whatever the text says of the instance
    measured = target_of(_supported(None, "status 'won' is stated as 'open' by w2"))
    assert matches(_supported(None, "w1 states 'approved' where the holder did not record "
                                    "a decision"), measured)
    assert not matches(_supported("cap", "status 'won' is stated as 'open' by w2"), measured)
    assert not matches(_supported(None, "status 'won' is stated as 'open' by w2", "routing"),
                       measured)


def test_one_profile_for_every_party() -> None:
    assert _profile({"a": "sim", "b": "sim"}) == "sim"
    with pytest.raises(UsageError, match="mixed agents"):
        _profile({"a": "sim", "b": "sim:reckless"})


def test_scope_refuses_an_empty_candidate() -> None:
    world = compile_world(A1).world
    assert world is not None
    from eairdsl.audit.contract import RepairPlan, Requirement

    plan = RepairPlan(objective="o", requirements=[Requirement(id="r1", text="t")])
    result = check_scope(diff_worlds(world, world), {"lever x": ["r1"]}, plan)
    assert not result.ok and result.problems == ["the candidate changes no declaration of "
                                                 "the world"]
    assert result.notes == ["lever x is attributed but did not change"]


def test_the_world_copy_takes_regular_files_inside_only(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "w.eair").write_text("world w\n")
    (src / "data" / "t.json").write_text("[]")
    (tmp_path / "secret.txt").write_text("outside")
    (src / "link.txt").symlink_to(tmp_path / "secret.txt")
    (src / ".hidden").mkdir()
    (src / ".hidden" / "x").write_text("x")
    (src / "generated").mkdir()
    (src / "generated" / "g.json").write_text("{}")
    main = copy_world_folder(src / "w.eair", tmp_path / "copy")
    got = sorted(p.relative_to(tmp_path / "copy").as_posix()
                 for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert main == tmp_path / "copy" / "w.eair" and got == ["data/t.json", "w.eair"]
    only = copy_world_folder(src / "w.eair", tmp_path / "copy2",
                             only=["data/t.json", "../secret.txt", "link.txt"])
    assert sorted(p.name for p in only.parent.rglob("*") if p.is_file()) == ["t.json",
                                                                           "w.eair"]


def test_a_candidate_file_outside_the_folder_is_not_applied(tmp_path: Path) -> None:
    applied = apply_candidate(A1, Candidate(source=A1.read_text(),
                                            files={"../evil.eair": "x"}), tmp_path / "w")
    assert not applied.ok and "not a relative path inside the world folder" in \
        applied.problems[0]
    assert not (tmp_path / "evil.eair").exists()


@pytest.mark.parametrize(("name", "condition", "seeds"), [
    ("d1", "canonical", 4), ("a1", "strong", 4), ("b1", "E", 4),
    # F1's sim W reaches the correct disposition in 2 of 30 `standard` episodes: on 4
    # retest cases it has no utility to retain (Retain undefined, not accepted: D.1);
    # on 20 it has (1/20 before, 20/20 after)
    ("f1", "standard", 20),
    # C1 on one condition and a small audit (the 20-seed recipe over every
    # condition is accepted too, retest 0/80: docs/worlds/c1.md)
    ("c1", "weak_merge_rule", 4),
])
def test_offline_repair_end_to_end(name: str, condition: str, seeds: int,
                                   tmp_path: Path) -> None:
    """`eairc repair` with the catalogue agent and the mechanical reviewer on a small
    audit: accepted, the retest realizes the target 0 times, Retain >= 0.95."""
    d1 = A1.with_name(f"{name}.eair")
    world = compile_world(d1).world
    assert world is not None
    plan = plan_world(world, [condition], "seed", 6)
    run_study([world], [plan], [Model("sim", "sim")], tmp_path / "s")
    audit_episodes(tmp_path / "s", tmp_path / "audit", RulesAuditor(), world=d1)
    out = tmp_path / "repair"
    result = CliRunner().invoke(app, ["repair", str(d1), "--audit", str(tmp_path / "audit"),
                                      "-o", str(out), "--agent", "offline", "--reviewer",
                                      "offline", "--seeds", str(seeds)])
    assert result.exit_code == 0, result.output
    assert "accepted: ScopeOK True, ReviewOK True, AuditPass True" in result.output
    acc = json.loads((out / "acceptance.json").read_text())
    assert acc["accepted"] and acc["target"]["k"] == 0 and acc["retain"] >= 0.95
    assert acc["target_before"]["k"] > 0
    assert compile_world(out / "world" / f"{name}.eair").ok
    produced = json.loads((out / "rounds" / f"{acc['round']:02d}" / "candidate.json")
                          .read_text())["produced_by"]
    assert produced, "the catalogue names the pattern it used"
