"""`eairc audit --record` / `--replay`: the LLM auditor's cassette in an audit folder.

An audit records to OUT/cassettes/auditor.jsonl, and `--replay` takes the audit
folder, its cassettes/ folder or the file, and gives byte-identical reports with
no model. Before, `--record` wrote a file named `cassettes` and `--replay OUT`
refused the folder ("is not a regular file"). A resumed `--record` keeps the
exchanges of the reports it keeps: the cassette is emptied when opened, and a
replay of the resumed folder needs every episode's exchanges. Offline: the
scripted litellm provider of tests/scripted_llm.py and its clean auditor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from scripted_llm import Scripted, read_then_report_clean, scripted_provider
from typer.testing import CliRunner

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.cassettes import AUDITOR_CASSETTE, replay_cassette
from eairdsl.audit.runner import REPORTS
from eairdsl.cli import app

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
MODEL = "cassettescripted/auditor"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

provider = scripted_provider("cassettescripted")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two D1 episodes under the sim backend."""
    out = tmp_path_factory.mktemp("runs")
    world = resolve_world(D1)
    for seed in (0, 1):
        run_episode(world, "canonical", None, seed, "sim", out)
    return out


def _audit(runs: Path, out: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["audit", str(runs), "-o", str(out), "--world", str(D1),
                                      "--auditor", "llm", "--model", MODEL, "--timeout", "5",
                                      "--retries", "0", *extra])
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def _reports(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / REPORTS).iterdir())}


def _scopes(cassette: Path) -> set[str]:
    return {json.loads(line)["scope"].split("/")[1]
            for line in cassette.read_text(encoding="utf-8").splitlines()}


def test_an_audit_recorded_replays_from_its_folder(provider: Scripted, runs: Path,
                                                  tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    code, said = _audit(runs, tmp_path / "a", "--record")
    assert code == 0, said
    cassette = tmp_path / "a" / AUDITOR_CASSETTE
    assert cassette.is_file() and len(_scopes(cassette)) == 2
    asked = len(provider.requests)
    provider.refuse = True  # a live request would now fail the audit
    for n, source in enumerate((tmp_path / "a", tmp_path / "a" / "cassettes", cassette)):
        out = tmp_path / f"replay{n}"
        code, said = _audit(runs, out, "--replay", str(source))
        assert code == 0, said
        assert _reports(out) == _reports(tmp_path / "a")  # byte for byte
    assert len(provider.requests) == asked


def test_a_resumed_recording_keeps_the_exchanges_of_the_reports_it_keeps(
        provider: Scripted, runs: Path, tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    out = tmp_path / "a"
    assert _audit(runs, out, "--record")[0] == 0
    first = sorted(p.name for p in (out / REPORTS).glob("*.validation.json"))[0]
    episode = first.removesuffix(".validation.json")
    # an interrupted run: one episode's report never finished
    (out / REPORTS / f"{episode}.json").unlink()
    (out / REPORTS / first).unlink()
    asked = len(provider.requests)
    assert _audit(runs, out, "--record")[0] == 0
    assert len(provider.requests) > asked  # the unfinished episode was asked again ...
    cassette = out / AUDITOR_CASSETTE
    assert len(_scopes(cassette)) == 2  # ... and the finished one's exchanges were kept
    provider.refuse = True
    code, said = _audit(runs, tmp_path / "replay", "--replay", str(out))
    assert code == 0, said
    assert _reports(tmp_path / "replay") == _reports(out)


def test_a_replay_miss_is_a_located_message(provider: Scripted, runs: Path,
                                           tmp_path: Path) -> None:
    (tmp_path / "empty" / "cassettes").mkdir(parents=True)
    (tmp_path / "empty" / AUDITOR_CASSETTE).write_text("", encoding="utf-8")
    provider.refuse = True
    code, said = _audit(runs, tmp_path / "b", "--replay", str(tmp_path / "empty"))
    assert code == 1 and "Traceback" not in said
    assert "0 valid report(s), 0 invalid, 2 without a report" in said
    # located: which cassette, which episode's request, and what to do
    assert f"replay: cassette {tmp_path / 'empty' / AUDITOR_CASSETTE} has no response" in said
    assert "Re-record with --record" in said
    assert not [p for p in (tmp_path / "b" / REPORTS).glob("*.json")
                if not p.name.endswith(".validation.json")]  # no report is made up


def test_the_cassette_a_replay_names(tmp_path: Path) -> None:
    """The file, an audit folder, its cassettes/ folder, an audit study's arm, and an
    audit recorded before the cassette had its name (OUT/cassettes as the file)."""
    audit = tmp_path / "audit"
    (audit / "cassettes").mkdir(parents=True)
    (audit / AUDITOR_CASSETTE).write_text("", encoding="utf-8")
    assert replay_cassette(audit) == audit / AUDITOR_CASSETTE
    assert replay_cassette(audit / "cassettes") == audit / AUDITOR_CASSETTE
    assert replay_cassette(audit / AUDITOR_CASSETTE) == audit / AUDITOR_CASSETTE
    study = tmp_path / "study"
    arm = study / "arms" / "llm-x" / "cassettes"
    arm.mkdir(parents=True)
    (arm / "auditor.jsonl").write_text("", encoding="utf-8")
    assert replay_cassette(study, "llm-x") == arm / "auditor.jsonl"
    older = tmp_path / "older"
    older.mkdir()
    (older / "cassettes").write_text("", encoding="utf-8")
    assert replay_cassette(older) == older / "cassettes"
    assert replay_cassette(tmp_path / "nothing") == tmp_path / "nothing"
