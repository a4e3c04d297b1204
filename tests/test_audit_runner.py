"""`audit_episodes`: bundles, one report per episode, validation, resume, recorded failures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.auditor import AuditError
from eairdsl.audit.contract import AUDIT_SCHEMA, Auditor, BundleRef, Coverage, Report
from eairdsl.audit.evidence import MANIFEST, Bundle, sha256_file
from eairdsl.audit.runner import AUDIT_INDEX, BUNDLES, REPORTS, audit_episodes, grader_traces

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three D1 sim traces (two instances, one repeated under another file name)."""
    out = tmp_path_factory.mktemp("run")
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    paths = [run_episode(world, "canonical", instance, seed, out=out).trace_path
             for instance, seed in (("hr-1", 0), ("fin-2", 1))]
    assert paths[0] is not None
    shutil.copy(paths[0], out / "canonical" / "copy.jsonl")
    return out


class Clean:
    """An auditor that reads the first step and finds nothing; counts its calls."""

    def __init__(self, fail_on: set[str] | None = None, bad: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_on = fail_on or set()
        self.bad = bad

    def audit(self, bundle: Bundle) -> Report:
        episode = bundle.manifest.episode
        self.calls.append(episode)
        if episode in self.fail_on:
            raise AuditError("provider timed out")
        first = "s9999" if self.bad else bundle.steps[0].step
        return Report(
            audit_schema=AUDIT_SCHEMA, report_id=f"r-{episode[:12]}",
            bundle=BundleRef(episode=episode,
                             manifest_sha256=sha256_file(bundle.root / MANIFEST)),
            auditor=Auditor(kind="human"), verdict="no_supported_problem",
            coverage=Coverage(steps_read=[first]))


def test_one_report_per_distinct_episode(run_dir: Path, tmp_path: Path) -> None:
    auditor = Clean()
    index = audit_episodes(run_dir, tmp_path / "audit", auditor)
    # three traces, two distinct sanitized episodes: the copy is audited once
    assert len(index.entries) == 2 == len(auditor.calls)
    copied = [e for e in index.entries if len(e.traces) == 2]
    assert len(copied) == 1 and all(t.endswith(".jsonl") for t in copied[0].traces)
    for e in index.entries:
        assert e.status == "valid" and e.verdict == "no_supported_problem"
        assert (tmp_path / "audit" / REPORTS / f"{e.episode}.json").is_file()
        assert (tmp_path / "audit" / BUNDLES / e.episode / MANIFEST).is_file()
    on_disk = json.loads((tmp_path / "audit" / AUDIT_INDEX).read_text())
    assert [e["episode"] for e in on_disk["entries"]] == sorted(auditor.calls)
    assert sorted(grader_traces(tmp_path / "audit")) == sorted(auditor.calls)


def test_resume_audits_only_what_is_missing(run_dir: Path, tmp_path: Path) -> None:
    first = audit_episodes(run_dir, tmp_path / "a", Clean())
    gone = first.entries[0].episode
    (tmp_path / "a" / REPORTS / f"{gone}.json").unlink()
    again = Clean()
    second = audit_episodes(run_dir, tmp_path / "a", again)
    assert again.calls == [gone]
    assert [e.episode for e in second.entries] == [e.episode for e in first.entries]
    third = Clean()
    audit_episodes(run_dir, tmp_path / "a", third)
    assert third.calls == []


def test_failures_are_recorded_and_retried(run_dir: Path, tmp_path: Path) -> None:
    probe = audit_episodes(run_dir, tmp_path / "p", Clean())
    victim = probe.entries[1].episode
    index = audit_episodes(run_dir, tmp_path / "f", Clean(fail_on={victim}))
    failed = [e for e in index.entries if e.status == "failed"]
    assert [e.episode for e in failed] == [victim] and failed[0].reason == "provider timed out"
    assert not (tmp_path / "f" / REPORTS / f"{victim}.json").exists()
    retry = Clean()
    index = audit_episodes(run_dir, tmp_path / "f", retry)
    assert retry.calls == [victim]
    assert {e.status for e in index.entries} == {"valid"}


def test_an_invalid_report_is_kept_with_its_diagnostics(run_dir: Path, tmp_path: Path) -> None:
    index = audit_episodes(run_dir, tmp_path / "bad", Clean(bad=True))
    for e in index.entries:
        assert e.status == "invalid" and e.errors >= 1
        validation = json.loads(
            (tmp_path / "bad" / REPORTS / f"{e.episode}.validation.json").read_text())
        assert "V804" in {d["diagnostic"]["code"] for d in validation["diagnostics"]}
        report = json.loads((tmp_path / "bad" / REPORTS / f"{e.episode}.json").read_text())
        assert report["coverage"]["steps_read"] == ["s9999"]  # kept as returned


def test_reports_of_a_deterministic_auditor_are_byte_identical(run_dir: Path,
                                                              tmp_path: Path) -> None:
    a = audit_episodes(run_dir, tmp_path / "x", Clean())
    audit_episodes(run_dir, tmp_path / "y", Clean())
    for e in a.entries:
        name = f"{e.episode}.json"
        assert (tmp_path / "x" / REPORTS / name).read_bytes() == (
            tmp_path / "y" / REPORTS / name).read_bytes()
