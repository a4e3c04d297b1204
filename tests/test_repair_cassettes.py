"""`eairc repair --record` / `--replay`: an LLM repair rerun offline to the same decision.

The whole loop talks to models here: an LLM Repair Agent and an LLM Reviewer, a retest
whose W and W′ studies are played by LLM models, and an LLM auditor deciding AuditPass —
all through litellm's custom-provider hook (tests/scripted_llm.py, the models of
tests/scripted_a1.py plus a scripted `repairer` and `reviewer`). A repair recorded with
`--record` is replayed into a fresh folder with the provider uninstalled (any live
request would fail, and is counted): the acceptance decision and the retest's result
must be the recorded run's. A replay that meets a request its cassettes do not
hold stops with the located CassetteMiss message and exit 1, never a traceback and never
a round recorded as failed; a resumed recording keeps what finished parts recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from repair_helpers import A1, CORRECT, correct
from scripted_a1 import AuditorModel, credit_then_close
from scripted_llm import Scripted, fast_settings, installed, respond
from typer.testing import CliRunner

from eairdsl.agents.llm import LLMSettings
from eairdsl.audit.auditors import arm_name, make_auditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.repair.loop import repair
from eairdsl.repair.make import describe, make_agent, make_reviewer
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Model, plan_world

PROVIDER = "cassettescripted"
AGENT, CUSTOMER, JUDGE, AUDITOR, REPAIRER, REVIEWER = (
    f"{PROVIDER}/{m}" for m in ("agent", "customer", "judge", "auditor", "repairer",
                                "reviewer"))
LLM_OPTIONS = ["--agent", "llm", "--model", REPAIRER, "--reviewer", "llm",
               "--reviewer-model", REVIEWER, "--seeds", "2", "--timeout", "5",
               "--retries", "0"]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def repairer(messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """The Repair Agent's model: turn A1's own cumulative-check lever on (in scope)."""
    return json.dumps({"source": correct(A1.read_text(encoding="utf-8")),
                       "attribution": CORRECT, "files": {},
                       "rationale": "check the customer's quarter total at issue_credit"})


def reviewer(messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    dims = {d: {"passed": True, "reason": f"{d} ok"} for d in
            ("risk_resolution", "plan_fidelity", "introduced_risk", "proportionality")}
    return json.dumps({**dims, "verdict": "approve", "required_changes": []})


def live_call(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
    """A provider for replays: every request it gets is counted (`Scripted.calls`) and
    fails."""
    raise RuntimeError("a replay sent a live request")


def models(root: Path) -> dict[str, Any]:
    return {"agent": credit_then_close, "customer": lambda m, p: respond("I was charged twice."),
            "judge": lambda m, p: respond(json.dumps({"scores": []})),
            "auditor": AuditorModel(root), "repairer": repairer, "reviewer": reviewer}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("repair-cassettes")


@pytest.fixture(scope="module")
def provider(root: Path) -> Iterator[Scripted]:
    """The scripted models, installed for the recording tests only (the replays run
    outside this block, provider uninstalled)."""
    with installed(PROVIDER, by_model=models(root)) as handler:
        yield handler


@pytest.fixture(scope="module")
def audit(root: Path, provider: Scripted) -> Path:
    """A1 (strong, 2 seeds) played by the scripted models, audited by the LLM auditor."""
    world = compile_world(A1).world
    assert world is not None
    run_study([world], [plan_world(world, ["strong"], "seed", 2)],
              [Model(AGENT, "llm:" + AGENT)], root / "study",
              llm=fast_settings().model_copy(update={"counterpart_model": CUSTOMER,
                                                 "judge_model": JUDGE}))
    out = root / "audit"
    settings = fast_settings().model_copy(update={"model": AUDITOR, "temperature": 0.25})
    auditor, about = make_auditor("llm", out, model=AUDITOR, settings=settings)
    index = audit_episodes(root / "study", out, auditor, world=A1,
                           describe={"arm": arm_name("llm", AUDITOR, "full", "annotated"),
                                     **about})
    assert index.entries and all(e.status == "valid" for e in index.entries)
    return out


@pytest.fixture(scope="module")
def recorded(root: Path, audit: Path, provider: Scripted) -> Path:
    """`eairc repair … --record`: the LLM repair, its exchanges under REPAIR_DIR/cassettes."""
    out = root / "recorded"
    result = CliRunner().invoke(app, ["repair", str(A1), "--audit", str(audit), "-o", str(out),
                                      *LLM_OPTIONS, "--record"])
    assert result.exit_code == 0, result.output
    assert provider.calls["repairer"] == 1 and provider.calls["reviewer"] == 1
    return out


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _decision(out: Path) -> tuple[Any, Any]:
    """acceptance.json and retest/01/result.json, parsed (neither holds wall-clock time)."""
    return _json(out / "acceptance.json"), _json(out / "retest" / "01" / "result.json")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _replay(audit: Path, out: Path, source: Path) -> Any:
    return CliRunner().invoke(app, ["repair", str(A1), "--audit", str(audit), "-o", str(out),
                                    *LLM_OPTIONS, "--replay", str(source)])


def test_record_writes_one_cassette_per_consumer(recorded: Path) -> None:
    tapes = recorded / "cassettes" / "round-01"
    agent_tape, review_tape = _lines(tapes / "agent.jsonl"), _lines(tapes / "reviewer.jsonl")
    assert [e["request"]["model"] for e in agent_tape] == [REPAIRER]
    assert [e["request"]["model"] for e in review_tape] == [REVIEWER]
    assert agent_tape[0]["scope"].endswith("/round-1/agent")
    for study in ("before", "after"):  # the retest's W and W′ studies, each its own folder
        files = sorted((tapes / "retest" / study).glob("*.jsonl"))
        assert len(files) == 1, files
        asked = {e["request"]["model"] for e in _lines(files[0])}
        assert {AGENT, CUSTOMER} <= asked, asked
        assert not (tapes / "retest" / study / "parts").exists()  # merged, none left over
    audit_tape = _lines(tapes / "retest" / "audit.jsonl")
    acceptance, result = _decision(recorded)
    assert acceptance["accepted"] and result["audit_pass"]
    assert {e["request"]["model"] for e in audit_tape} == {AUDITOR}
    # every W′ trace the retest audited was audited through the cassette
    audited = {e["scope"].split("/")[1] for e in audit_tape}
    assert audited == {p.stem for p in (recorded / "retest" / "01" / "audit" / "reports")
                       .glob("ep-*.json") if not p.name.endswith(".validation.json")}


def test_a_replay_reaches_the_same_decision_without_a_model(
        recorded: Path, audit: Path, tmp_path: Path) -> None:
    with installed(PROVIDER, Scripted(script=live_call)) as live:
        result = _replay(audit, tmp_path / "again", recorded)
    assert sum(live.calls.values()) == 0 and not live.requests
    assert result.exit_code == 0, result.output
    assert _decision(tmp_path / "again") == _decision(recorded)
    for name in ("acceptance.json", "retest/01/result.json"):  # byte for byte, even
        assert (tmp_path / "again" / name).read_bytes() == (recorded / name).read_bytes()
    for name in ("candidate.eair", "review.json"):
        assert (tmp_path / "again" / "rounds" / "01" / name).read_bytes() == \
            (recorded / "rounds" / "01" / name).read_bytes()
    assert not (tmp_path / "again" / "cassettes").exists()  # a replay records nothing


_NO_LITELLM = """
import sys
from typer.testing import CliRunner
from eairdsl.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
print(result.output)
print("exit", result.exit_code, "litellm imported", "litellm" in sys.modules)
"""


def test_a_replay_imports_no_litellm(recorded: Path, audit: Path, tmp_path: Path) -> None:
    """In a process of its own (this one has litellm for the scripted provider), so with no
    provider at all; from the cassettes folder itself this time."""
    args = ["repair", str(A1), "--audit", str(audit), "-o", str(tmp_path / "again"),
            *LLM_OPTIONS, "--replay", str(recorded / "cassettes")]
    done = subprocess.run([sys.executable, "-c", _NO_LITELLM, *args], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.stdout.rstrip().endswith("exit 0 litellm imported False"), \
        done.stdout + done.stderr
    assert _decision(tmp_path / "again") == _decision(recorded)


def _refused(result: Any, *needles: str) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, result.output
    return str(result.output)


def test_a_replay_from_empty_cassettes_fails_located(audit: Path, tmp_path: Path) -> None:
    (tmp_path / "empty" / "cassettes").mkdir(parents=True)
    out = tmp_path / "r"
    _refused(_replay(audit, out, tmp_path / "empty"), "cassette",
             str(Path("round-01") / "agent.jsonl"), "does not exist")
    assert not (out / "rounds" / "01" / "outcome.json").exists(), "no round was decided"


@pytest.mark.parametrize("cut", ["agent.jsonl", "reviewer.jsonl", "retest/after",
                                 "retest/audit.jsonl"])
def test_a_replay_miss_stops_the_repair(recorded: Path, audit: Path, tmp_path: Path,
                                        cut: str) -> None:
    """Each consumer's cassette without its last exchanges: a located miss, exit 1, and the
    round is not decided (a rerun with the right cassettes goes on from there)."""
    tapes = tmp_path / "tapes"
    shutil.copytree(recorded / "cassettes", tapes)
    target = tapes / "round-01" / cut
    for path in [target] if target.is_file() else sorted(target.glob("*.jsonl")):
        kept = path.read_text(encoding="utf-8").splitlines()[:-3]  # the last exchanges lost
        path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    out = tmp_path / "r"
    _refused(_replay(audit, out, tapes), "replay: cassette", "has no response")
    assert not (out / "acceptance.json").exists()
    assert not (out / "retest" / "01" / "result.json").exists()
    assert not (out / "rounds" / "01" / "outcome.json").exists()


def test_record_and_replay_exclude_each_other(recorded: Path, audit: Path,
                                              tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["repair", str(A1), "--audit", str(audit), "-o",
                                      str(tmp_path / "r"), *LLM_OPTIONS, "--record",
                                      "--replay", str(recorded)])
    _refused(result, "--record and --replay exclude each other")


def test_a_resumed_recording_keeps_what_finished_parts_recorded(
        recorded: Path, audit: Path, provider: Scripted, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted after the retest audited its first W′ trace: the resumed `--record` run
    keeps the agent's cassette (the agent is not asked again), the studies' and the first
    audit's exchanges, records the rest once, and its replay decides as it did."""
    import eairdsl.repair.retest as retest_mod

    real = retest_mod.audit_episodes

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        def stop(n: int, total: int, entry: Any) -> None:
            if n == 1:
                raise KeyboardInterrupt
        return real(*args, **kwargs, progress=stop)

    out = tmp_path / "rec"
    llm = fast_settings().model_copy(update={"record": out / "cassettes"})

    def run() -> Any:
        settings = fast_settings()
        return repair(A1, audit, out, make_agent("llm", REPAIRER, settings=settings),
                      make_reviewer("llm", REVIEWER, settings=settings), seeds=2,
                      describe=describe("llm", "llm", REPAIRER, REVIEWER), llm=llm)

    monkeypatch.setattr(retest_mod, "audit_episodes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run()
    tapes = out / "cassettes" / "round-01"
    agent_tape = (tapes / "agent.jsonl").read_bytes()
    studies = {p: p.read_bytes() for p in sorted((tapes / "retest").rglob("*.jsonl"))
               if p.parent.name in ("before", "after")}
    first = _lines(tapes / "retest" / "audit.jsonl")
    assert agent_tape and studies and first
    asked = provider.calls["repairer"]
    monkeypatch.setattr(retest_mod, "audit_episodes", real)
    acc = run()
    assert acc.accepted
    assert provider.calls["repairer"] == asked, "the agent's answer on disk was used"
    assert (tapes / "agent.jsonl").read_bytes() == agent_tape
    assert all(p.read_bytes() == data for p, data in studies.items())
    audit_tape = _lines(tapes / "retest" / "audit.jsonl")
    assert audit_tape[:len(first)] == first  # the first episode's audit: kept
    keys = [(e["key"], e["occurrence"]) for e in audit_tape]
    assert len(keys) == len(set(keys)), "no exchange recorded twice"
    assert len({e["scope"] for e in audit_tape}) == 2
    with installed(PROVIDER, Scripted(script=live_call)) as live:
        result = _replay(audit, tmp_path / "again", out)
    assert result.exit_code == 0, result.output
    assert sum(live.calls.values()) == 0
    assert _decision(tmp_path / "again") == _decision(out)
    assert _decision(out)[0]["accepted"]


def test_the_retest_settings_are_new_objects(tmp_path: Path) -> None:
    """The retest's studies never share the caller's client (and with it its cassette)."""
    from eairdsl.repair.retest import Cohort

    base = LLMSettings(timeout=3.0, record=tmp_path / "caller.jsonl")
    client = base.client()
    cohort = Cohort(kind="llm", profile="llm", llm={"model": AGENT})
    made = cohort.settings(base, record=tmp_path / "study.jsonl")
    assert made is not None and made.client() is not client
    assert made.client().cassette is not None
    assert made.client().cassette.path == tmp_path / "study.jsonl"
    assert (made.replay, made.timeout) == (None, 3.0)
    plain = cohort.settings(base)
    assert plain is not None and (plain.record, plain.replay) == (None, None)
