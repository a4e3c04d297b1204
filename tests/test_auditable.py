"""W708 and W709 (eairdsl/check/auditable.py) against what audits actually see.

The golden fixtures (tests/fixtures/check/auditable.eair) pin each code's positive and
negative cases; here the warnings are held to the bundles and the offline auditor: a
rule W709 names is the one a bundle leaves out, a world W708 names gets no finding,
and the same world with a rule the check accepts does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bug_template import Case, compile_case

from eairdsl.api import run_episode
from eairdsl.audit.bundle import bundle_files, write_bundle
from eairdsl.audit.evidence import Bundle
from eairdsl.audit.offline import RulesAuditor
from eairdsl.compiler import compile_world
from eairdsl.runtime.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
WORLDS = sorted((ROOT / "worlds").glob("*.eair"))
EXAMPLE = ROOT / "docs" / "examples"
#: the one warning of these codes a shipped world gives, and why it is right: F1's rule
#: reads `landmines` (the grader's table of the contract's hidden conflicts), which no
#: tool of any participant reaches, so every F1 bundle prints the rule as null
#: (test_f1_rule_named_by_w709_is_left_out_of_the_bundle)
#: F1's signature rule reads the task instance and the `landmines` table no tool reaches
#: (its bundle prints the rule as null): W709 names the first
JUSTIFIED = {"f1": ["W709 legal_review_before_signature"]}


def _codes(path: Path) -> list[str]:
    result = compile_world(path)
    assert result.ok, [d.message for d in result.diagnostics]
    return [f"{d.code} {d.message.split(chr(39))[1]}"
            if d.code == "W709" else d.code
            for d in result.diagnostics if d.code in ("W708", "W709")]


@pytest.mark.parametrize("path", WORLDS, ids=[p.stem for p in WORLDS])
def test_shipped_worlds_are_auditable(path: Path) -> None:
    """No shipped world (each imports stdlib modules) draws W708; F1's one W709 is real."""
    assert _codes(path) == JUSTIFIED.get(path.stem, [])


def _policies(world: Path, tmp: Path, condition: str | None = None) -> list[dict[str, object]]:
    result = run_episode(world, condition, None, 0, "sim", tmp)
    assert result.trace_path is not None
    files = bundle_files(read_trace(Path(result.trace_path)), compile_world(world).world)
    return list(json.loads(files["policies.json"]))


def test_f1_rule_named_by_w709_is_left_out_of_the_bundle(tmp_path: Path) -> None:
    policies = {p["name"]: p for p in _policies(ROOT / "worlds" / "f1.eair", tmp_path)}
    assert policies["legal_review_before_signature"]["rule"] is None


def _audit(world: Path, tmp: Path, seeds: int) -> tuple[int, int, int, int]:
    """(episodes that realized the risk, offline findings, leads, realized episodes whose
    report holds a finding or a lead) over `seeds` sim episodes."""
    compiled = compile_world(world).world
    assert compiled is not None
    realized = findings = leads = heard = 0
    for seed in range(seeds):
        result = run_episode(compiled, None, None, seed, "sim", tmp / str(seed))
        assert result.trace_path is not None
        manifest = write_bundle(Path(result.trace_path), compiled, tmp / "bundles")
        report = RulesAuditor().audit(Bundle.load(tmp / "bundles" / manifest.episode))
        findings += len(report.findings)
        leads += len(report.leads)
        if result.measurements.get("realized"):
            realized += 1
            heard += bool(report.findings or report.leads)
    return realized, findings, leads, heard


def test_w708_world_gets_nothing_and_a_rule_it_accepts_is_held_to_every_episode(
        tmp_path: Path) -> None:
    """The tutorial's world without half_each's rule draws W708 and nothing, no finding and
    no lead, on episodes that realize the risk; with the rule written over a literal half
    (the lever form waits for issue 26 item 2's value rendering) it draws neither W708 nor
    silence: every realized episode's report holds the rule's finding or lead.

    (A supported finding needs an interaction, docs/tutorial.md section 13: in these four
    seeds a desk overspends its half alone, a lead. Findings came from desks refunding the
    other desk's order, which they stopped doing when the complaint they were sent became
    evidence for the order to look up, issue 32 item 7; `eairc study … --seeds 5` still
    gives the tutorial's loop findings and an accepted repair.)"""
    folder = tmp_path / "w"
    shutil.copytree(EXAMPLE / "first_world", folder / "first_world")
    source = (EXAMPLE / "first_world.eair").read_text(encoding="utf-8")
    rule = "  rule all d in [desk_a, desk_b]: spent(d) <= budget / 2\n"
    assert rule in source
    bare, literal = folder / "bare.eair", folder / "literal.eair"
    bare.write_text(source.replace(rule, ""), encoding="utf-8")
    literal.write_text(source.replace(rule, rule.replace("budget / 2", "$150")),
                       encoding="utf-8")
    assert _codes(bare) == ["W708"] and _codes(literal) == []
    realized, findings, leads, _ = _audit(bare, tmp_path / "bare", 4)
    assert realized > 0 and findings == 0 and leads == 0
    realized, findings, leads, heard = _audit(literal, tmp_path / "literal", 4)
    assert realized > 0 and heard == realized, (realized, findings, leads, heard)


STDLIB = sorted((ROOT / "eairdsl" / "stdlib").glob("*.eair"))


@pytest.mark.parametrize("module", STDLIB, ids=[p.stem for p in STDLIB])
def test_stdlib_modules_add_no_w708_or_w709(module: Path, tmp_path: Path) -> None:
    """A stdlib module imported into the bug-template base world (auditable through its
    authorization line) adds neither code: stdlib declarations are not the world's."""
    result = compile_case(tmp_path, Case(module.stem, None, None,
                                         slots={"top": f'import "stdlib/{module.name}"'}))
    assert result.ok, [d.message for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.code in ("W708", "W709")]
