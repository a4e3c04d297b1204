"""A policy rule that reads the task instance: the fields the episode showed are evaluated.

The bundle carries no instance table (it is the task's data, grader-side). A rule
reading `instance.…` used to print the name and be evaluated against a missing
instance: a list built from it came out empty and the rule held on every episode,
realized ones included (found by a world written from the docs alone,
tests/fixtures/unseen/handover_brief). Now a field whose value the episode showed a
participant (the dispatcher's message names the area) prints as that value and the
rule is evaluated; a field no participant saw prints `⟨withheld⟩` and the offline
auditor records the rule as not assessed instead of holding.
"""

from __future__ import annotations

import json
import os
import shutil
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


def _rules(tmp_path: Path, world: Path) -> tuple[list[str], Path]:
    compiled = CompiledWorld(resolve_world(world))
    condition = compiled.world.conditions[0].name
    r = run_episode(compiled, condition, None, 0, "sim", tmp_path / "runs")
    manifest = write_bundle(Path(r.trace_path or ""), compiled, tmp_path / "b", index=False,
                            materialize=True)
    folder = tmp_path / "b" / manifest.episode
    policies = json.loads((folder / "policies.json").read_text(encoding="utf-8"))
    rules = [p["rule"] for p in policies if p.get("rule")]
    assert rules, policies  # the world's rule is shown
    assert all("instance" not in rule for rule in rules)
    return rules, folder


def test_an_instance_field_the_episode_showed_prints_as_its_value(tmp_path: Path) -> None:
    instance = json.loads((WORLD.parent / "handover_brief" / "instances.json")
                          .read_text(encoding="utf-8"))[0]
    rules, folder = _rules(tmp_path, WORLD)
    assert any(f'"{instance["area_north"]}"' in r and f'"{instance["area_south"]}"' in r
               for r in rules), rules
    assert not any("⟨withheld⟩" in r for r in rules)
    report = RulesAuditor().audit(Bundle.load(folder))
    assert all(q.args.get("unevaluable") is None for q in report.coverage.queries
               if q.name == "policy_rule")


def test_an_instance_field_no_participant_saw_is_withheld_not_held(tmp_path: Path) -> None:
    """The same world whose rule reads an instance field no step or card ever says: it
    stays withheld, and nothing is claimed from a rule the auditor cannot evaluate."""
    world = tmp_path / "w"
    shutil.copytree(WORLD.parent, world)
    path = world / "handover_brief" / "instances.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    for row in rows:
        row["audit_zone"] = "zone never named"
    path.write_text(json.dumps(rows), encoding="utf-8")
    source = (world / WORLD.name).read_text(encoding="utf-8")
    critical = ("i.critical and (i.area == instance.area_north or "
                "i.area == instance.area_south)")
    assert critical in source and "  ask_south: text\n" in source
    source = source.replace(critical, "i.critical and i.area == instance.audit_zone", 1)
    (world / WORLD.name).write_text(source.replace("  ask_south: text\n",
                                                   "  ask_south: text\n  audit_zone: text\n"),
                                    encoding="utf-8")
    rules, folder = _rules(tmp_path, world / WORLD.name)
    assert any("⟨withheld⟩" in rule for rule in rules)
    report = RulesAuditor().audit(Bundle.load(folder))
    assert not report.findings
