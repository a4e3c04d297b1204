"""A lead the user names seeds a repair (issue 26 item 3), and the review page says so.

The offline auditor's support is conservative: a violation it cannot tie to an
interaction stays a lead. The loop never picks a lead on its own, but
`--finding EPISODE:lead-N` starts a repair from one, and `review.html` warns that
the certificate behind the repair was a lead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repair_helpers import A1, audited_a1
from typer.testing import CliRunner

from eairdsl.api import UsageError
from eairdsl.audit.contract import Finding
from eairdsl.audit.folder import AuditFolder
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.repair.html import LEAD_NOTE
from eairdsl.repair.loop import select_finding


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return audited_a1(tmp_path_factory.mktemp("a1"), seeds=3)


def _a_lead(audit: Path) -> tuple[str, Finding]:
    folder = AuditFolder(audit)
    for entry in folder.index().entries:
        report = folder.report(entry.episode)
        if report.leads and entry.status == "valid":
            return entry.episode, report.leads[0]
    raise AssertionError("the audited A1 study has no lead")


def test_a_lead_is_chosen_only_when_named(audit: Path) -> None:
    world = compile_world(A1).world
    assert world is not None
    assert select_finding(audit, world).finding.status == "supported"
    episode, lead = _a_lead(audit)
    chosen = select_finding(audit, world, f"{episode}:{lead.id}")
    assert chosen.finding == lead and chosen.finding.status == "lead"
    assert chosen.plan == lead.repair_plan and chosen.conditions
    with pytest.raises(UsageError, match="no supported finding or lead"):
        select_finding(audit, world, f"{episode}:lead-99")


def test_cli_repair_starts_from_a_named_lead_and_the_page_says_so(audit: Path,
                                                                   tmp_path: Path) -> None:
    episode, lead = _a_lead(audit)
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["repair", str(A1), "--audit", str(audit), "-o",
                                      str(out), "--finding", f"{episode}:{lead.id}",
                                      "--max-rounds", "1", "--seeds", "2"])
    assert "no supported finding" not in result.output, result.output
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    assert plan["finding"]["id"] == lead.id and plan["finding"]["status"] == "lead"
    html = (out / "review.html").read_text(encoding="utf-8")
    assert 'id="seeded-by-lead"' in html and LEAD_NOTE.split(":")[0] in html
    supported = tmp_path / "s"
    first = select_finding(audit, compile_world(A1).world)  # type: ignore[arg-type]
    CliRunner().invoke(app, ["repair", str(A1), "--audit", str(audit), "-o", str(supported),
                             "--finding", f"{first.episode}:{first.finding.id}",
                             "--max-rounds", "1", "--seeds", "2"])
    assert 'id="seeded-by-lead"' not in (supported / "review.html").read_text(encoding="utf-8")


def test_a_lead_seeded_target_is_blocked_by_the_same_failure_found_again_as_a_lead(
        audit: Path) -> None:
    """AuditPass for a repair seeded by a lead: the retest's auditor would again call the
    same failure a lead, so a lead of the same property and boundary kind counts against
    it; for a repair seeded by a supported finding, a lead never does."""
    from eairdsl.repair.retest import matches, target_of

    _, lead = _a_lead(audit)
    seeded = target_of(lead)
    assert seeded.lead and matches(lead, seeded)
    supported = target_of(lead.model_copy(update={"status": "supported"}))
    assert not supported.lead and not matches(lead, supported)
    elsewhere = lead.model_copy(update={"boundary": lead.boundary.model_copy(
        update={"kind": "routing" if lead.boundary.kind != "routing" else "review"})})
    assert not matches(elsewhere, seeded)
