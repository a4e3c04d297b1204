"""A policy rule that reads the task instance prints it withheld and is not assessed.

The bundle carries no instance (it is the task's data, grader-side). A rule reading
`instance.…` used to print the name and be evaluated against a missing instance: a
list built from it came out empty and the rule held on every episode, realized ones
included (found by a world written from the docs alone, tests/fixtures/unseen/
handover_brief). Now the reference prints as `⟨withheld⟩` and the offline auditor
records the rule as not assessed instead of holding.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.bundle import write_bundle
from eairdsl.audit.evidence import Bundle
from eairdsl.audit.offline import RulesAuditor
from eairdsl.runtime.engine import CompiledWorld

WORLD = Path(__file__).resolve().parent / "fixtures" / "unseen" / "handover_brief" / \
    "handover_brief.eair"


def test_a_rule_reading_the_instance_is_withheld_not_held(tmp_path: Path) -> None:
    compiled = CompiledWorld(resolve_world(WORLD))
    condition = compiled.world.conditions[0].name
    r = run_episode(compiled, condition, None, 0, "sim", tmp_path / "runs")
    manifest = write_bundle(Path(r.trace_path or ""), compiled, tmp_path / "b", index=False)
    folder = tmp_path / "b" / manifest.episode
    policies = json.loads((folder / "policies.json").read_text(encoding="utf-8"))
    rules = [p["rule"] for p in policies if p.get("rule")]
    assert rules, policies  # the world's rule is shown
    assert all("instance" not in rule for rule in rules)
    assert any("⟨withheld⟩" in rule for rule in rules)
    report = RulesAuditor().audit(Bundle.load(folder))
    assert not report.findings  # nothing is claimed from a rule it cannot evaluate
