"""benchmarks/audit_llm.py's core on one D1 episode: the figures are computed, and honestly.

The benchmark (issue 15, LLM part) counts the characters an LLM auditor sends with
each graph arm against a full-trace dump, with a scripted model that reads only
what its report quotes. These tests run it on the committed D1 fixture bundle
(offline, a second or two) and check the counts against an independent count of
the same messages, not against expected timings or ratios.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from eairdsl.audit.evidence import Bundle
from eairdsl.audit.llm import system_prompt

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "tests" / "fixtures" / "audit" / "d1" / "bundle"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("audit_llm_bench",
                                                  ROOT / "benchmarks" / "audit_llm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def figures(bench: ModuleType) -> object:
    return bench.measure_bundle("d1", Bundle.load(BUNDLE))


def test_every_arm_is_measured_and_its_report_validates(bench: ModuleType,
                                                        figures: object) -> None:
    figs = figures
    assert figs.verdict == "findings"  # type: ignore[attr-defined]
    arms = figs.arms  # type: ignore[attr-defined]
    assert sorted(arms) == sorted(bench.ARMS)
    system = len(system_prompt("full"))
    for name, arm in arms.items():
        assert arm.valid, name
        assert arm.quotes > 0 and arm.quotes_read == arm.quotes, name
        assert arm.requests >= 1 and arm.chars > arm.system_chars > 0, name
        assert arm.system_chars == system * arm.requests, name
    # the graph arms read before they submit: a turn of reads, then the report
    for name in ("annotated", "topology"):
        assert arms[name].requests == 2 and arms[name].tool_calls >= 2, name
        assert arms[name].session_chars > arms[name].chars  # the JSON around the contents


def test_the_dump_is_one_request_of_the_whole_record(bench: ModuleType, figures: object) -> None:
    bundle = Bundle.load(BUNDLE)
    dump = figures.arms["dump"]  # type: ignore[attr-defined]
    message = bench.dump_message(bundle, 12000)
    assert dump.requests == 1
    assert dump.chars == len(system_prompt("full")) + len(message)
    for step in bundle.steps:
        assert f'"step":"{step.step}"' in message


def test_the_summary_has_the_ratios(bench: ModuleType, figures: object) -> None:
    summary = bench.summarize([figures])
    assert summary["dump"]["ratio_total"] == 1.0
    for arm in ("annotated", "topology", "none"):
        row = summary[arm]
        assert row["audits"] == row["valid"] == 1
        assert row["ratio_total"] is not None and row["ratio_total"] > 0
        assert row["chars_total"] == figures.arms[arm].chars  # type: ignore[attr-defined]
    lines = bench.report_lines([figures], 12000)
    assert any("annotated/dump" in line and "target <= 50%" in line for line in lines)
