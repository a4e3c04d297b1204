"""`eairc diff`: the semantic change between two versions of a world, gated on `protected`.

The shipped repairs (the source patches the world tests apply) must come out as
small, unprotected changes; edits to ground truth — directly or through a `let`
a measurement reads — and dropping protection must be flagged. Disguised edits
of every other kind of read are in test_diff_protected.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_eairc
from world_patch import ROOT, SHIPPED_REPAIRS, patched_world

from eairdsl.api import resolve_world
from eairdsl.diff import diff_worlds

REPAIRS = SHIPPED_REPAIRS
A1_REPAIR, F1_REPAIR = REPAIRS["a1"], REPAIRS["f1"]


def _world(name: str):  # type: ignore[no-untyped-def]
    return resolve_world(ROOT / "worlds" / f"{name}.eair")


@pytest.mark.parametrize("name", sorted(REPAIRS))
def test_a_world_equals_itself_and_its_reformatted_copy(tmp_path: Path, name: str) -> None:
    """Comments, moved lines and layout are not changes."""
    world = _world(name)
    assert diff_worlds(world, world).changes == []
    header = f"world {name} {{"
    moved = patched_world(tmp_path, name, [(header, f"// A reviewer's note.\n\n\n{header}")])
    assert diff_worlds(world, moved).changes == []


@pytest.mark.parametrize("name", sorted(REPAIRS))
def test_shipped_repairs_are_unprotected_changes(tmp_path: Path, name: str) -> None:
    result = diff_worlds(_world(name), patched_world(tmp_path, name, REPAIRS[name]))
    assert result.changes, "a repair changes something"
    assert result.violations == [], [c.model_dump() for c in result.violations]


def test_a1_repair_is_one_lever_not_every_condition(tmp_path: Path) -> None:
    """Flipping a default changes the lever, not each condition that left it at its default."""
    result = diff_worlds(_world("a1"), patched_world(tmp_path, "a1", A1_REPAIR))
    assert [(c.kind, c.name, c.details) for c in result.changes] == [
        ("lever", "cumulative_check", ["default: false -> true"])]


def test_changing_ground_truth_through_a_let_is_flagged(tmp_path: Path) -> None:
    """`quarterly_cap` is protected, and the measurements that read it are touched too."""
    patched = patched_world(tmp_path, "a1", [("let quarterly_cap() = $40",
                                              "let quarterly_cap() = $60")])
    result = diff_worlds(_world("a1"), patched)
    flagged = {(c.kind, c.name) for c in result.violations}
    assert ("let", "quarterly_cap") in flagged
    assert ("measure", "realized") in flagged  # via emergent_violation -> cap_exceeded
    realized = next(c for c in result.changes if c.name == "realized")
    assert "quarterly_cap" in (realized.protected or "")
    assert ("measure", "utility") not in flagged  # reads no cap


def test_dropping_protection_is_flagged(tmp_path: Path) -> None:
    patched = patched_world(tmp_path, "d1", [(
        "protected measure, instances, authorization, employee, project, incident, requester, "
        "disclosure_rubric",
        "protected measure, instances, employee, project, incident, requester, "
        "disclosure_rubric")])
    result = diff_worlds(_world("d1"), patched)
    assert [c.protected for c in result.violations] == ["no longer protects authorization"]


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    (tmp_path / "worlds").mkdir()
    base = ROOT / "worlds" / "a1.eair"
    ok = run_eairc("diff", base, base, cwd=ROOT)
    assert ok.returncode == 0 and "0 declaration(s) changed" in ok.stdout
    patched_world(tmp_path, "a1", [("let quarterly_cap() = $40", "let quarterly_cap() = $60")])
    bad = run_eairc("diff", base, tmp_path / "a1.eair", "--json", cwd=ROOT)
    assert bad.returncode == 1
    data = json.loads(bad.stdout)
    assert data["violations"] >= 2 and data["old"] == data["new"] == "a1"
    # A disguised edit: the protected dashboards' count is an unprotected `let`.
    disguised = tmp_path / "disguised"
    disguised.mkdir()
    patched_world(disguised, "a1", [(
        "let missed_so_far() = count(c for c in closures where not c.kpi_met)",
        "let missed_so_far() = count(c for c in closures where not c.kpi_met) - 1")])
    hidden = run_eairc("diff", base, disguised / "a1.eair", "--json", cwd=ROOT)
    assert hidden.returncode == 1
    reasons = {c["name"]: c["protected"] for c in json.loads(hidden.stdout)["changes"]}
    assert reasons == {"missed_so_far": None,
                       "dashboard_mild": "inducer 'dashboard_mild' is protected and reads "
                                         "missed_so_far, which changed",
                       "dashboard_strong": "inducer 'dashboard_strong' is protected and reads "
                                           "missed_so_far, which changed"}
    missing = run_eairc("diff", base, tmp_path / "nope.eair", cwd=ROOT)
    assert missing.returncode == 1 and "nope.eair" in missing.stderr


def test_changed_cards_show_their_changed_lines(tmp_path: Path) -> None:
    """F1's repair (its lever's default flipped) gives the approver a tool; its cards list
    it, and the diff says so."""
    result = diff_worlds(_world("f1"), patched_world(tmp_path, "f1", F1_REPAIR))
    approver = next(c for c in result.changes if c.name == "approver")
    assert any(d.startswith("cards.standard: + ") and "legal_approval_check" in d
               for d in approver.details)
    lever = next(c for c in result.changes if c.kind == "lever")
    assert (lever.name, lever.details) == ("bound_legal_approval", ["default: false -> true"])


def test_a_scheduled_message_moved_in_time_is_a_change(tmp_path: Path) -> None:
    """An event's `at` is when it happens (compared); a guard's `at` is where it is written."""
    patched = patched_world(tmp_path, "a1", [("at 8 days say opening(service_recovery)",
                                              "at 9 days say opening(service_recovery)")])
    result = diff_worlds(_world("a1"), patched)
    assert [(c.kind, c.name) for c in result.changes] == [("participant", "customer")]
    assert result.changes[0].details == ["events[3].at: expression changed"]
