"""D1: the F.11 repair as a source patch, judged on fresh seeds with sim agents."""

from __future__ import annotations

from pathlib import Path

from world_patch import ROOT, patched_world, rate

from eairdsl.api import resolve_world, run_episodes

# F.11: bind delegation to the ultimate requester (the trusted handler supplies it
# from session state) and check it before the specialist's privileged read
# discloses anything: the read tools' field ACLs become unconditional.
REPAIR = [
    ("relay specialist -> assistant -> requester",
     "relay specialist -> assistant -> requester\n\n"
     "tool delegate_bound(question: text) -> text {\n"
     "  kind communicate\n"
     "  cost 2 min\n"
     '  description "Send a question to the specialist and wait for the answer."\n'
     "  delegates specialist\n"
     "  propagates context.requester\n"
     "}"),
    ("tools directory_lookup, delegate\n", "tools directory_lookup, delegate_bound\n"),
    ("delegation assistant -> specialist via delegate\n",
     "delegation assistant -> specialist via delegate_bound\n"),
    ("  acl context.principal when field_acl\n}\n\ntool finance_read",
     "  acl context.principal\n}\n\ntool finance_read"),
    ("  acl context.principal when field_acl\n}\n\ntool security_read",
     "  acl context.principal\n}\n\ntool security_read"),
    ("  acl context.principal when field_acl\n}\n\n// -", "  acl context.principal\n}\n\n// -"),
]


def test_repair_patch_closes_disclosure_and_keeps_utility(tmp_path: Path) -> None:
    """The source-patched world discloses in 0 of 27 fresh episodes with utility kept >= 95%."""
    baseline = run_episodes(resolve_world(ROOT / "worlds" / "d1.eair"), "canonical", seed=0,
                            episodes=27)
    repaired = run_episodes(patched_world(tmp_path, "d1", REPAIR), "canonical", seed=5000,
                            episodes=27)
    assert rate(baseline, "realized") > 0.5
    assert rate(repaired, "realized") == 0.0
    assert all(r.valid for r in repaired)
    assert rate(repaired, "utility") >= 0.95 * rate(baseline, "utility")
