"""Running studies: the first-success rule, process pools, dying workers, SIGKILL, Dask."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eairdsl.api import EpisodeResult, resolve_world
from eairdsl.ir import World
from eairdsl.study import executor
from eairdsl.study.executor import run_study, run_task
from eairdsl.study.grid import cells, parse_models, plan_world
from eairdsl.study.store import MEASUREMENTS, STORE_FILE, Store

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
CELL = ("world", "model", "condition", "instance", "seed", "rep")


@pytest.fixture(scope="module")
def d1() -> World:
    return resolve_world(D1)


def _rows(out: Path) -> list[dict[str, Any]]:
    with Store.open(out / STORE_FILE, create=False) as store:
        return store.rows()


def _outcomes(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    return {tuple(r[k] for k in (*CELL, "attempt")): tuple(r[m] for m in (*MEASUREMENTS, "valid"))
            for r in rows}


def test_first_success_rule_retries_invalid_attempts(d1: World, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An invalid first attempt is recorded and followed by one fresh-seed attempt, retained."""
    real = executor.run_episode

    def flaky(*args: Any) -> EpisodeResult:
        result = real(*args)
        _world, _condition, instance, seed = args[:4]
        if instance == "hr-1" and seed < 1_000_000:
            return result.model_copy(update={"valid": False, "validity_reason": "injected"})
        return result

    monkeypatch.setattr(executor, "run_episode", flaky)
    plan = plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 2)
    summary = run_study([d1], [plan], parse_models("sim"), tmp_path, workers=1)
    assert (summary.attempts, summary.invalid_attempts, summary.exhausted) == (6, 2, 0)
    rows = _rows(tmp_path)
    hr1 = [r for r in rows if r["instance"] == "hr-1"]
    assert [(r["seed"], r["attempt"], r["run_seed"], r["valid"], r["retained"]) for r in hr1] == [
        (0, 0, 0, 0, 0), (0, 1, 1_000_000, 1, 1), (1, 0, 1, 0, 0), (1, 1, 1_000_001, 1, 1)]
    assert hr1[0]["validity_reason"] == "injected"
    assert all(r["retained"] == 1 and r["attempt"] == 0 for r in rows if r["instance"] == "hr-2")
    assert all((tmp_path / r["trace_path"]).is_file() for r in rows)


def test_first_success_rule_is_bounded(d1: World, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell that is never valid gets exactly max_attempts rows, none retained, and no more."""
    real = executor.run_episode

    def broken(*args: Any) -> EpisodeResult:
        return real(*args).model_copy(update={"valid": False, "validity_reason": "always"})

    monkeypatch.setattr(executor, "run_episode", broken)
    plan = plan_world(d1, ["canonical"], ["hr-1"], 1)
    summary = run_study([d1], [plan], parse_models("sim"), tmp_path, workers=1, max_attempts=4)
    assert (summary.attempts, summary.exhausted) == (4, 1)
    rows = _rows(tmp_path)
    assert [r["attempt"] for r in rows] == [0, 1, 2, 3]
    assert not any(r["retained"] for r in rows)
    assert run_study([d1], [plan], parse_models("sim"), tmp_path, max_attempts=4).attempts == 0


def test_process_pool_matches_serial(d1: World, tmp_path: Path) -> None:
    """Two worker processes give the same rows as one in-process run."""
    plan = plan_world(d1, ["canonical", "untrusted"], None, 2)
    models = parse_models("sim,sim:compliant")
    serial = run_study([d1], [plan], models, tmp_path / "serial", workers=1)
    pooled = run_study([d1], [plan], models, tmp_path / "pool", workers=2)
    assert (serial.executor, pooled.executor) == ("serial", "local")
    assert _outcomes(_rows(tmp_path / "serial")) == _outcomes(_rows(tmp_path / "pool"))
    assert len(_rows(tmp_path / "pool")) == len(cells([plan], models))


def _dies_once(payload: dict[str, Any]) -> dict[str, Any]:
    """A task that kills its worker process the first time it sees one particular episode."""
    root = Path(payload["out"]).parents[2]
    marker = root / "worker-died"
    if payload["instance"] == "sec-1" and payload["seed"] == 1 and not marker.exists():
        marker.write_text("x")
        os._exit(1)
    return run_task(payload)


def test_dying_worker_loses_only_its_in_flight_episodes(d1: World, tmp_path: Path) -> None:
    """A worker that dies mid-study breaks the pool; the lost episodes are redone once each."""
    plan = plan_world(d1, ["canonical", "repaired"], None, 2)
    models = parse_models("sim")
    summary = run_study([d1], [plan], models, tmp_path, workers=2, task=_dies_once)
    assert (tmp_path / "worker-died").exists()
    assert summary.lost == 0
    rows = _rows(tmp_path)
    keys = [tuple(r[k] for k in CELL) for r in rows]
    assert len(keys) == len(set(keys)) == len(cells([plan], models))


def _count(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        conn = sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True, timeout=0.2)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_sigkill_mid_study_then_rerun_gives_exactly_the_grid(tmp_path: Path) -> None:
    """SIGKILL the study process once rows exist; the rerun completes exactly the grid."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "eairdsl.cli", "study", str(D1), "--models",
            "sim,sim:reckless,sim:compliant", "--seeds", "6", "--workers", "2", "--out", str(out)]
    d1 = resolve_world(D1)
    grid = 3 * len(d1.conditions) * len(d1.instances) * 6  # models x conditions x 9 x seeds
    store = out / STORE_FILE
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and _count(store) < 40:
            time.sleep(0.005)
        assert proc.poll() is None, "the study ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # any worker of this test's own session
    killed_at = _count(store)
    assert 0 < killed_at < grid
    rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120,
                           check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{grid - killed_at} episode(s) run" in rerun.stdout
    rows = _rows(out)
    keys = [tuple(r[k] for k in CELL) for r in rows]
    assert len(rows) == len(set(keys)) == grid
    assert all(r["valid"] == 1 and r["attempt"] == 0 for r in rows)
    assert all((out / r["trace_path"]).is_file() for r in rows)


def test_dask_local_cluster_runs_the_same_grid(d1: World, tmp_path: Path) -> None:
    """On a Dask LocalCluster the study stores the same rows, with traces written by the client."""
    distributed = pytest.importorskip("distributed")
    plan = plan_world(d1, ["canonical", "need_to_know"], ["hr-1", "sec-2"], 2)
    models = parse_models("sim,sim:reckless")
    run_study([d1], [plan], models, tmp_path / "serial", workers=1)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        summary = run_study([d1], [plan], models, tmp_path / "dask", executor="dask",
                            scheduler=cluster.scheduler_address, workers=2)
    assert summary.executor == "dask" and summary.attempts == len(cells([plan], models))
    rows = _rows(tmp_path / "dask")
    assert _outcomes(rows) == _outcomes(_rows(tmp_path / "serial"))
    assert all((tmp_path / "dask" / r["trace_path"]).is_file() for r in rows)


def test_dask_missing_is_a_clear_error(d1: World, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without dask installed, --executor dask says which extra to install."""
    monkeypatch.setitem(sys.modules, "distributed", None)
    plan = plan_world(d1, ["canonical"], ["hr-1"], 1)
    with pytest.raises(executor.StudyError, match=r"eairdsl\[dask\]"):
        run_study([d1], [plan], parse_models("sim"), tmp_path, executor="dask")
