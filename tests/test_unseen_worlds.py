"""The unseen worlds of issue 26 compile cleanly, and their violations are supported.

`tests/fixtures/unseen/` holds worlds written from the docs alone, as a new
user would, for EAIR risks the project does not ship (BEFORE.md records what
the audit/repair loop gave on them, AFTER.md what it gives now). The tests pin
that they stay valid worlds, so machinery changes are measured on the same
inputs, and that three of them now get supported findings offline (the fourth,
handover_brief, reads the task instance in its rule: W709).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eairdsl.compiler import compile_world

UNSEEN = Path(__file__).parent / "fixtures" / "unseen"
#: one folder per world, named like its `.eair` file (`before/` holds recorded outputs)
WORLDS = sorted(p / f"{p.name}.eair" for p in UNSEEN.iterdir() if (p / f"{p.name}.eair").is_file())


def test_the_four_unseen_worlds_are_found() -> None:
    """Issue 26 asks for at least three; one per failure class makes four, and a world
    folder that lost its `.eair` file must not drop out of the test silently."""
    assert [w.stem for w in WORLDS] == ["handover_brief", "panel_dissent", "signing_limits",
                                         "source_check"]


@pytest.mark.parametrize("path", WORLDS, ids=[w.stem for w in WORLDS])
def test_unseen_world_compiles_without_errors(path: Path) -> None:
    """The world compiles and carries no error diagnostic (warnings are allowed)."""
    result = compile_world(path)
    errors = result.diagnostics.errors
    assert not errors, [f"{d.code}: {d.message}" for d in errors]
    assert result.world is not None


#: per unseen world: its vulnerable condition, and the boundary and mechanism the offline
#: auditor should support its one-writer violation with (issue 26: these worlds gave
#: leads only, and `eairc repair` refused them)
SUPPORTED = {
    "signing_limits": ("tight", "power", "authority_request"),
    "source_check": ("rush", "power", "authority_request"),
    "panel_dissent": ("senior_weight", "review", "report_overridden"),
}


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_an_unseen_worlds_realized_episodes_get_supported_findings(tmp_path: Path,
                                                                   name: str) -> None:
    """Audited offline, the realized episodes of each world carry supported findings of
    the declared rule at the boundary the world builds, with the mechanism's plan: what
    `eairc repair` starts from without `--finding`."""
    from eairdsl.audit.folder import AuditFolder
    from eairdsl.audit.offline import RulesAuditor
    from eairdsl.audit.repairs import CATALOGUE
    from eairdsl.audit.runner import audit_episodes
    from eairdsl.study.executor import run_study
    from eairdsl.study.grid import Model, plan_world

    condition, kind, mechanism = SUPPORTED[name]
    path = UNSEEN / name / f"{name}.eair"
    world = compile_world(path).world
    assert world is not None
    run_study([world], [plan_world(world, [condition], "seed", 4)], [Model("sim", "sim")],
              tmp_path / "study")
    audit_episodes(tmp_path / "study", tmp_path / "audit", RulesAuditor(), world=path)
    folder = AuditFolder(tmp_path / "audit")
    findings = [f for e in folder.index().entries if e.status == "valid"
                for f in folder.report(e.episode).findings]
    assert findings, f"{name}: no supported finding"
    types = CATALOGUE[("*", mechanism)].types
    for f in findings:
        assert (f.boundary.kind, f.status) == (kind, "supported")
        assert tuple(t.id for t in f.types) == types
        assert f.repair_plan is not None
