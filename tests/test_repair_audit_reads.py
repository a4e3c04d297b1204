"""A repair reads what it needs of its audit, once (issue 28 item 3).

It used to read every trace behind the audit whole three times (choosing the
finding, refusing an audit it cannot rerun, planning each round's retest), every
report twice or three times, and each of the retest's ~100 study calls wrote the
world out as world.json and compiled it again. Counted here, not timed: each
trace is read once and only at its ends, each report once; a study given the
world compiled runs it in memory, with the same traces byte for byte.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from repair_helpers import A1, audited_a1

import eairdsl.audit.folder as audit_folder
import eairdsl.runtime.trace as trace_module
from eairdsl.compiler import compile_world
from eairdsl.ir import World, dump_world
from eairdsl.repair import audited
from eairdsl.repair.audited import AuditRead
from eairdsl.repair.loop import select_finding
from eairdsl.repair.retest import plan_retest
from eairdsl.study import executor
from eairdsl.study.executor import compiled_for_study, run_study
from eairdsl.study.grid import Model, plan_world


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return audited_a1(tmp_path_factory.mktemp("a1"), seeds=4)


@pytest.fixture(scope="module")
def world() -> World:
    compiled = compile_world(A1).world
    assert compiled is not None
    return compiled


def test_a_repair_reads_each_trace_at_its_ends_and_each_report_once(
        audit: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    ends: Counter[str] = Counter()
    reports: Counter[str] = Counter()
    real_ends, real_report = trace_module.read_trace_ends, audit_folder.AuditFolder.report

    def count_ends(path: Path) -> Any:
        ends[str(path)] += 1
        return real_ends(path)

    def count_report(self: audit_folder.AuditFolder, episode: str,
                     limit: int | None = None) -> Any:
        reports[episode] += 1
        return real_report(self, episode, limit)

    def whole(path: Path) -> Any:
        raise AssertionError(f"{path} was read whole")

    monkeypatch.setattr(audited, "read_trace_ends", count_ends)
    monkeypatch.setattr(audit_folder.AuditFolder, "report", count_report)
    monkeypatch.setattr(trace_module, "read_trace", whole)
    read = AuditRead(audit)
    chosen = select_finding(audit, world, audit=read)  # choosing the finding
    read.auditor()  # refusing an audit the retest cannot rerun
    for _ in range(3):  # three rounds' retest plans
        plan = plan_retest(world, world, audit, chosen.conditions, None, audit=read)
    traces = read.folder.grader_traces()
    assert set(ends) == {str(p) for paths in traces.values() for p in paths}
    assert set(ends.values()) == {1}, "each trace read once"
    assert set(reports) == {e.episode for e in read.index().entries}
    assert set(reports.values()) == {1}, "each report read once"
    assert plan.seeds_used and plan.used.kind == "rules"


def test_a_study_given_the_world_compiled_runs_it_in_memory(
        tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_world(world, ["mild"], "seed", 3)
    run_study([world], [plan], [Model("sim", "sim")], tmp_path / "text")
    dumped: list[str] = []

    def count_dump(w: World) -> str:
        dumped.append(w.meta.name)
        return dump_world(w)

    compiled = compiled_for_study(world)
    monkeypatch.setattr(executor, "dump_world", count_dump)
    for seeds in ([0], [1, 2]):  # two study calls on the one compiled world
        part = plan_world(world, ["mild"], "seed", 3)
        part.seeds = seeds
        run_study([world], [part], [Model("sim", "sim")], tmp_path / "memory",
                  compiled={world.digest: compiled})
    assert dumped == [], "no world.json written for a world given compiled"
    text = sorted((tmp_path / "text" / "traces").rglob("*.jsonl"))
    memory = sorted((tmp_path / "memory" / "traces").rglob("*.jsonl"))
    assert [p.name for p in text] == [p.name for p in memory] and len(text) == 3
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(text, memory, strict=True))
