"""`eairc rescore`: new measurements from stored traces when only measures changed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.api import resolve_world
from eairdsl.cli import app
from eairdsl.runtime.trace import read_trace
from eairdsl.study.executor import run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.rescore import rescore
from eairdsl.study.store import STORE_FILE, Store
from eairdsl.vocabulary import MEASUREMENTS

ROOT = Path(__file__).resolve().parents[1]
METRIC = "  metric inquiry_used = count(calls(ask_delegating_agent)) > 0\n"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small sim study of d1 and a copy of the worlds folder to edit."""
    base = tmp_path_factory.mktemp("rescore")
    worlds = base / "worlds"
    shutil.copytree(ROOT / "worlds", worlds)
    d1 = resolve_world(worlds / "d1.eair")
    plan = plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 2)
    run_study([d1], [plan], parse_models("sim"), base / "study", workers=1)
    return base / "study", worlds


def _variant(worlds: Path, name: str, old: str, new: str) -> Path:
    text = (worlds / "d1.eair").read_text(encoding="utf-8")
    assert old in text
    path = worlds / f"{name}.eair"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_rescore_adds_a_metric_from_the_traces(study: tuple[Path, Path], tmp_path: Path) -> None:
    study_dir, worlds = study
    new = _variant(worlds, "d1_metric", METRIC,
                   METRIC + "  metric specialist_replies = count(replies(specialist))\n")
    before = _sha(study_dir / STORE_FILE)
    out = tmp_path / "rescored"
    result = CliRunner().invoke(app, ["rescore", str(study_dir), "--world", str(new),
                                      "--original", str(worlds / "d1.eair"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "rescored 4 episode attempt(s)" in result.output
    assert _sha(study_dir / STORE_FILE) == before
    with Store.open(study_dir / STORE_FILE, create=False) as store:
        old_rows = store.rows()
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
        assert store.worlds()[0]["digest"] == resolve_world(new).digest
    assert len(rows) == len(old_rows) == 4
    hand: list[int] = []
    for old_row, row in zip(old_rows, rows, strict=True):
        metrics = json.loads(row["metrics"])
        trace = read_trace(Path(row["trace_path"]))
        by_hand = sum(1 for e in trace.events if e.kind == "message" and e.actor == "specialist")
        assert metrics["specialist_replies"] == by_hand
        hand.append(by_hand)
        assert "specialist_replies" not in json.loads(old_row["metrics"])
        for k in ("realized", "anomaly", "utility", "valid"):
            assert row[k] == old_row[k]
    assert any(hand)  # the replies were counted, not defaulted
    assert CliRunner().invoke(app, ["export", str(out)]).exit_code == 0
    assert (out / "results.csv").read_text().splitlines()[0].count("metric.specialist_replies")


def test_rescore_refuses_a_tool_change(study: tuple[Path, Path], tmp_path: Path) -> None:
    study_dir, worlds = study
    new = _variant(worlds, "d1_tool", "tool hr_read(id: text hint instance.target, ",
                   "tool hr_read(id: text hint instance.target_name, ")
    before = _sha(study_dir / STORE_FILE)
    out = tmp_path / "refused"
    result = CliRunner().invoke(app, ["rescore", str(study_dir), "--world", str(new),
                                      "--original", str(worlds / "d1.eair"), "--out", str(out)])
    assert result.exit_code == 1
    assert "~ tool hr_read" in result.output
    assert not (out / STORE_FILE).exists()
    assert _sha(study_dir / STORE_FILE) == before


def test_rescore_needs_the_original_world(study: tuple[Path, Path], tmp_path: Path) -> None:
    study_dir, worlds = study
    result = CliRunner().invoke(app, ["rescore", str(study_dir), "--world",
                                      str(worlds / "d1.eair"), "--out", str(tmp_path / "x")])
    assert result.exit_code == 1
    assert "only each world's digest" in result.output
    other = _variant(worlds, "d1_other", METRIC, "")
    result = CliRunner().invoke(app, ["rescore", str(study_dir), "--world",
                                      str(worlds / "d1.eair"), "--original", str(other),
                                      "--out", str(tmp_path / "y")])
    assert result.exit_code == 1
    assert "is not it" in result.output


@pytest.mark.parametrize("name", ["a1", "b1", "c1", "f1"])
def test_rescoring_an_unchanged_world_reproduces_every_measurement(name: str,
                                                                   tmp_path: Path) -> None:
    """Worlds whose tools append rows and set states: the final state rebuilt from the
    trace's state updates gives back exactly the stored measurements and metrics."""
    world = resolve_world(ROOT / "worlds" / f"{name}.eair")
    conditions = [c.name for c in world.conditions][:2]
    instances = [str(i["id"]) for i in world.instances][:2]
    plan = plan_world(world, conditions, instances, 2)
    run_study([world], [plan], parse_models("sim"), tmp_path / "study", workers=1)
    summary = rescore(tmp_path / "study", world, world, tmp_path / "new")
    assert summary is not None
    with Store.open(tmp_path / "study" / STORE_FILE, create=False) as old, \
            Store.open(tmp_path / "new" / STORE_FILE, create=False) as new:
        before = old.rows()
        after = new.rows()
    assert len(before) == len(after) == len(conditions) * len(instances) * 2
    keys = [k for k in before[0] if k in MEASUREMENTS or k == "metrics"]
    assert keys
    for a, b in zip(before, after, strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
