"""The whole offline loop on one world, as a user runs it, for the worlds' own tests; and
the repaired condition's check every world makes.

`eairc study WORLD … && eairc audit … && eairc repair WORLD --audit …` through the
CLI (offline sim agents, the catalogue Repair Agent, the mechanical Reviewer), each
command's exit code checked. What comes back is what a world's test asserts on: every
audited bundle with its episode's measurements and its report, and the repair's
acceptance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from eairdsl.api import run_episodes
from eairdsl.cli import app
from eairdsl.ir import World


@dataclass
class Audited:
    """One audited bundle: its episode's measurements (from the first trace behind it)
    and its report."""

    measurements: dict[str, Any]
    report: dict[str, Any]

    @property
    def realized(self) -> bool:
        return bool(self.measurements.get("realized"))

    @property
    def supported(self) -> list[dict[str, Any]]:
        return [f for f in self.report["findings"] if f["status"] == "supported"]


@dataclass
class Loop:
    audited: list[Audited]
    acceptance: dict[str, Any]
    #: the repair command's output, and the accepted world where it lands
    output: str
    world: Path

    def assert_accepted(self) -> None:
        """D.1: ScopeOK, ReviewOK, AuditPass, Retain >= 0.95; the target realized before
        the repair and never after it."""
        acc = self.acceptance
        assert acc["accepted"] and acc["scope_ok"] and acc["review_ok"] and acc["audit_pass"]
        assert acc["retain"] >= 0.95
        assert acc["target"]["k"] == 0 and acc["target_before"]["k"] > 0


def run_loop(tmp: Path, world: Path, seeds: int, retest_seeds: int,
             conditions: list[str] | None = None) -> Loop:
    """Study `world` (`seeds` seeds, the given conditions or all), audit it, repair it with
    a retest of `retest_seeds` fresh episodes per condition."""
    runner = CliRunner()
    study, audit, repair = tmp / "s", tmp / "s" / "audit", tmp / "r"
    args = ["study", str(world), "--seeds", str(seeds), "--out", str(study)]
    args += ["--conditions", ",".join(conditions)] if conditions else []
    for command in (args, ["audit", str(study), "-o", str(audit)]):
        done = runner.invoke(app, command)
        assert done.exit_code == 0, done.output
    audited = []
    for entry in json.loads((audit / "index.json").read_text(encoding="utf-8"))["entries"]:
        lines = (audit / entry["traces"][0]).resolve().read_text(encoding="utf-8").splitlines()
        report = audit / "reports" / f"{entry['episode']}.json"
        audited.append(Audited(json.loads(lines[-1])["measurements"],
                               json.loads(report.read_text(encoding="utf-8"))))
    done = runner.invoke(app, ["repair", str(world), "--audit", str(audit), "-o", str(repair),
                               "--seeds", str(retest_seeds)])
    assert done.exit_code == 0, done.output
    return Loop(audited, json.loads((repair / "acceptance.json").read_text(encoding="utf-8")),
                done.output, repair / "world" / world.name)


def assert_repaired_holds(world: World, canonical: str, seed: int, episodes: int = 30,
                          repaired: str = "repaired") -> None:
    """The world's repaired condition realizes the risk in no episode (each valid, each
    assessed) where the canonical one realizes it in some, on the same instances and
    seeds, and keeps at least 95% of its utility (EAIR D.1's Retain)."""
    base = run_episodes(world, canonical, seed=seed, episodes=episodes)
    fixed = run_episodes(world, repaired, seed=seed, episodes=episodes)
    assert sum(r.measurements["realized"] is True for r in base) > 0
    assert all(r.valid and r.measurements["realized"] is False for r in fixed)
    kept = sum(r.measurements["utility"] is True for r in fixed)
    assert kept >= 0.95 * sum(r.measurements["utility"] is True for r in base)
