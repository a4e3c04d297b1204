"""A repair reads what it needs of its audit, once (issue 28 item 3).

It used to read every trace behind the audit whole three times (choosing the
finding, refusing an audit it cannot rerun, planning each round's retest), every
report twice or three times, and each of the retest's ~100 study calls wrote the
world out as world.json and compiled it again. Counted here, not timed: no trace
is read (the grader index keeps each trace's label; an older audit's traces are
read once, at their ends), each of the world's reports once; a study given the
world compiled runs it in memory, with the same traces byte for byte.
"""

from __future__ import annotations

import json
import shutil
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


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """Count each trace's label read from the trace (its ends) and each report read; a
    trace read whole fails the test."""
    ends: Counter[str] = Counter()
    reports: Counter[str] = Counter()
    real_label, real_report = trace_module.read_trace_label, audit_folder.AuditFolder.report

    def count_label(path: Path) -> Any:
        ends[str(path)] += 1
        return real_label(path)

    def count_report(self: audit_folder.AuditFolder, episode: str,
                     limit: int | None = None) -> Any:
        reports[episode] += 1
        return real_report(self, episode, limit)

    def whole(path: Path) -> Any:
        raise AssertionError(f"{path} was read whole")

    monkeypatch.setattr(audited, "read_trace_label", count_label)
    monkeypatch.setattr(audit_folder.AuditFolder, "report", count_report)
    monkeypatch.setattr(trace_module, "read_trace", whole)
    return ends, reports


def _repair_reads(audit: Path, world: World) -> AuditRead:
    read = AuditRead(audit)
    chosen = select_finding(audit, world, audit=read)  # choosing the finding
    read.auditor()  # refusing an audit the retest cannot rerun
    for _ in range(3):  # three rounds' retest plans
        plan = plan_retest(world, world, audit, chosen.conditions, None, audit=read)
    assert plan.seeds_used and plan.used.kind == "rules"
    return read


def test_a_repair_reads_no_trace_and_each_report_once(
        audit: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grader index keeps every trace's label: the repair reads that one file, and no
    trace, whatever the audit's size."""
    ends, reports = _count_reads(monkeypatch)
    read = _repair_reads(audit, world)
    labels = read.folder.grader_labels()
    traces = read.folder.grader_traces()
    assert set(labels) == {str(p) for paths in traces.values() for p in paths}
    assert not ends, "no trace read: the grader index has every label"
    assert set(reports) == {e.episode for e in read.index().entries}
    assert set(reports.values()) == {1}, "each report read once"
    kept = {a.trace: a for a in read.episodes()}
    for path, label in labels.items():  # the label kept is the one the trace gives
        assert trace_module.read_trace_label(Path(path)) == label
        assert kept[path].realized == label.realized


def test_an_audit_without_labels_reads_each_trace_at_its_ends_once(
        audit: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit written before the grader index kept labels still repairs: each trace is
    read once, at its ends."""
    old = audit.with_name(audit.name + "-without-labels")  # beside it: the same relative paths
    shutil.copytree(audit, old)
    index = old / "bundles" / "grader-index.json"
    data = json.loads(index.read_text(encoding="utf-8"))
    del data["labels"]
    index.write_text(json.dumps(data), encoding="utf-8")
    ends, reports = _count_reads(monkeypatch)
    read = _repair_reads(old, world)
    traces = read.folder.grader_traces()
    assert set(ends) == {str(p) for paths in traces.values() for p in paths}
    assert set(ends.values()) == {1}, "each trace read once"
    assert set(reports.values()) == {1}, "each report read once"


def test_a_repair_reads_only_its_own_worlds_reports(
        audit: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Choosing the finding reads the reports of the repaired world's episodes, not the
    rest of a study's (the other worlds' reports were half a two-world repair's reads)."""
    other = audit.with_name(audit.name + "-two-worlds")
    shutil.copytree(audit, other)
    folder = audit_folder.AuditFolder(other)
    labels = json.loads((other / "bundles" / "grader-index.json").read_text("utf-8"))
    episodes = sorted(labels["episodes"])
    foreign = episodes[: len(episodes) // 2]
    for ep in foreign:  # these episodes now ran on another world (another digest)
        for rel in labels["episodes"][ep]:
            labels["labels"][rel]["digest"] = "0" * 64
    (other / "bundles" / "grader-index.json").write_text(json.dumps(labels), "utf-8")
    _, reports = _count_reads(monkeypatch)
    select_finding(other, world, audit=AuditRead(other))
    assert set(reports) == set(episodes) - set(foreign)
    assert folder.index().entries  # the index still names every episode


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
