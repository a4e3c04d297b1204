"""Shared ground of the repair-loop tests: a small audited A1 study and stub agents.

The stubs stand in for the Repair Agent and Reviewer (the loop must work with
any implementation of the two protocols). The hand-written "correct" A1
candidate turns the world's own F.13 lever (`cumulative_check`) on by default:
a declaration-level change a *test stub* may make; the offline catalogue agent
writes its own guard instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.compiler import compile_world
from eairdsl.repair.model import (
    Candidate,
    DimensionVerdict,
    RepairRequest,
    Review,
    ReviewRequest,
)
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world

ROOT = Path(__file__).resolve().parents[1]
A1 = ROOT / "worlds" / "a1.eair"
LEVER_OFF = "lever cumulative_check : bool = false"
LEVER_ON = "lever cumulative_check : bool = true"
CORRECT = {"lever cumulative_check": ["cumulative-check"]}


def audited_a1(root: Path, seeds: int = 6,
               conditions: tuple[str, ...] = ("mild", "strong")) -> Path:
    """An A1 study (mild and strong by default, one instance per seed, sim) audited
    offline; the audit folder."""
    world = compile_world(A1).world
    assert world is not None
    plan = plan_world(world, list(conditions), "seed", seeds)
    run_study([world], [plan], [Model("sim", "sim")], root / "study")
    audit_episodes(root / "study", root / "audit", RulesAuditor(), world=A1)
    return root / "audit"


def correct(source: str) -> str:
    assert LEVER_OFF in source
    return source.replace(LEVER_OFF, LEVER_ON)


Edit = Callable[[RepairRequest], Candidate]


class StubAgent:
    """A Repair Agent answering from a list of edits, one per round (the last repeats);
    it keeps every request it got."""

    def __init__(self, *edits: Edit) -> None:
        self.edits = list(edits)
        self.requests: list[RepairRequest] = []

    def propose(self, request: RepairRequest) -> Candidate:
        self.requests.append(request)
        edit = self.edits[min(len(self.requests), len(self.edits)) - 1]
        return edit(request)


def good(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source), attribution=CORRECT,
                     rationale="check the customer's quarter total at issue_credit",
                     produced_by={"stub": "good"})


def verdict(ok: bool = True, reason: str = "checked") -> DimensionVerdict:
    return DimensionVerdict(passed=ok, reason=reason)


class StubReviewer:
    """A Reviewer answering from a list of reviews (the last repeats)."""

    def __init__(self, *reviews: Review) -> None:
        self.reviews = list(reviews) or [approve()]
        self.requests: list[ReviewRequest] = []

    def review(self, request: ReviewRequest) -> Review:
        self.requests.append(request)
        return self.reviews[min(len(self.requests), len(self.reviews)) - 1]


def approve() -> Review:
    return Review(risk_resolution=verdict(), plan_fidelity=verdict(),
                  introduced_risk=verdict(), proportionality=verdict(), verdict="approve")
