"""Data out (issue 29 item 6): a study's events and messages as frames, and `eairc ls`.

`eairdsl.study.events()` / `messages()` are Inspect's `events_df` / `messages_df` for a
study: checked against the traces themselves (every event a row, in step order, keyed
like `episodes()`); `eairc ls` names every result under a folder by its owner's defining
file, with a summary read from its index.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_eairc

from eairdsl.compiler import compile_world
from eairdsl.inventory import inventory
from eairdsl.ir import World
from eairdsl.repair.folder import RepairFolder
from eairdsl.repair.model import Acceptance
from eairdsl.study import episodes, events, messages
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world
from eairdsl.study.store import STORE_FILE, StoreError

ROOT = Path(__file__).resolve().parents[1]

pd = pytest.importorskip("pandas")


def _world() -> World:
    world = compile_world(ROOT / "worlds" / "d1.eair").world
    assert world is not None
    return world


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as a user's `runs/` looks after a week: a study with its audit, a run, a
    repair and a Signals store."""
    root = tmp_path_factory.mktemp("results")
    world = _world()
    plan = plan_world(world, [c.name for c in world.conditions][:2], "seed", 2)
    run_study([world], [plan], [Model("sim", "sim")], root / "study",
              sources={world.meta.name: ROOT / "worlds" / "d1.eair"})
    audited = run_eairc("audit", root / "study", "-o", root / "study" / "audit" / "offline",
                        cwd=root)
    assert audited.returncode == 0, audited.stderr
    run = root / "runs" / "d1" / "canonical"
    run.mkdir(parents=True)
    for i, trace in enumerate(sorted((root / "study" / "traces").rglob("*.jsonl"))[:3]):
        shutil.copy(trace, run / f"{i}-{trace.name}")
    repair = RepairFolder(root / "repair-d1")
    repair.path.mkdir()
    repair.write_loop({"world": str(ROOT / "worlds" / "d1.eair")})
    repair.write_acceptance(Acceptance(accepted=True, scope_ok=True, review_ok=True,
                                       audit_pass=True, retain=1.0, rounds=2, target=None))
    result = run_eairc("signals", "update", root / "study" / "audit" / "offline",
                       "--store", root / "signals.sqlite", cwd=root)
    assert result.returncode == 0, result.stderr
    return root


def test_events_are_every_trace_event_keyed_like_episodes(results: Path) -> None:
    study = results / "study"
    frame = events(study)
    attempts = episodes(study)
    want = []
    for rel in attempts.trace_path:
        lines = (study / str(rel)).read_text(encoding="utf-8").splitlines()
        want += [json.loads(line) for line in lines[1:] if json.loads(line)["type"] == "event"]
    assert len(frame) == len(want) > 0
    assert list(frame.step) == [e["step"] for e in want]
    assert list(frame.kind) == [e["kind"] for e in want]
    # a tool call's arguments: JSON text with sorted keys, parsed back to the trace's
    calls = [(i, e) for i, e in enumerate(want) if e.get("args")]
    assert calls
    i, e = calls[0]
    assert json.loads(frame.args.iloc[i]) == e["args"]
    # the key columns join with episodes()
    keys = ["world", "model", "condition", "instance", "seed", "rep", "attempt"]
    joined = frame.merge(attempts[[*keys, "realized"]], on=keys, how="left")
    assert len(joined) == len(frame) and joined.realized.notna().any()
    assert str(frame.t.dtype) == "Float64" and str(frame.seed.dtype) == "Int64"


def test_messages_are_the_message_events(results: Path) -> None:
    frame, all_events = messages(results / "study"), events(results / "study")
    sent = all_events[all_events.kind == "message"]
    assert len(frame) == len(sent) > 0
    assert list(frame.content) == list(sent.content)
    assert "kind" not in frame.columns and {"actor", "recipient", "edge"} <= set(frame.columns)


def test_a_trace_path_out_of_the_study_is_refused(results: Path, tmp_path: Path) -> None:
    import sqlite3

    study = tmp_path / "study"
    shutil.copytree(results / "study", study)
    conn = sqlite3.connect(study / STORE_FILE)
    conn.execute("UPDATE episodes SET trace_path = '../../etc/passwd' WHERE id = "
                 "(SELECT MIN(id) FROM episodes)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="leaves the study folder"):
        events(study)


def test_inventory_names_every_result(results: Path) -> None:
    found = {(r.kind, r.path): r for r in inventory(results)}
    assert set(found) == {("study", "study"), ("audit", "study/audit/offline"),
                          ("run", "runs/d1"), ("repair", "repair-d1"),
                          ("signals", "signals.sqlite")}
    study = found["study", "study"]
    n = len(episodes(results / "study"))
    assert study.summary.startswith(f"{n} attempts; worlds d1; models sim")
    assert study.bytes > 0 and study.files > n and study.modified.endswith("Z")
    assert found["run", "runs/d1"].summary == "3 traces; conditions canonical"
    assert found["repair", "repair-d1"].summary == "repair of d1.eair: accepted after 2 rounds"
    assert found["audit", "study/audit/offline"].summary.startswith(
        f"{n} episodes audited by the offline auditor; ")
    assert found["signals", "signals.sqlite"].summary.split()[1] in ("issue", "issues")


def test_eairc_ls_prints_the_listing_and_json(results: Path) -> None:
    text = run_eairc("ls", results, cwd=results)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["kind", "path", "size"]
    assert any(line.startswith("audit ") and "study/audit/offline" in line for line in lines)
    data = json.loads(run_eairc("ls", results, "--json", cwd=results).stdout)
    assert {d["kind"] for d in data} == {"study", "audit", "run", "repair", "signals"}
    missing = run_eairc("ls", results / "nowhere", cwd=results)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    assert "Traceback" not in missing.stderr
    bounded = run_eairc("ls", results, "--max-folders", "2", cwd=results)
    assert bounded.returncode == 2 and "more than 2 folders" in bounded.stderr
