"""A resumed audit keeps only the reports of the auditor, arm and budget it resumes.

`audit_episodes` reuses every report already in its folder. Before these checks a
rerun into the same folder with another auditor kind, another LLM arm (contract
full/none, graph annotated/topology/none) or another prompt version kept the old
reports and mixed two auditors in one index; and the LLM auditor's budgets, which
decide when an audit stops, were recorded nowhere. These tests run the rules and
oracle auditors and LLM audits against the scripted litellm provider
(tests/scripted_llm.py), offline, and check that such a resume is refused with one
line naming each difference (reports, index and provider untouched), that an
identical rerun still resumes byte for byte, and that non-default budgets are
recorded, read back, and compared like sampling.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from litellm import ModelResponse
from scripted_llm import Scripted, fast_settings, respond, scripted_provider, tool_names
from typer.testing import CliRunner

from eairdsl.api import UsageError, resolve_world, run_episode
from eairdsl.audit.auditor import AuditBudgets, AuditorIdentity, AuditorSettings
from eairdsl.audit.auditors import identity_of, make_auditor
from eairdsl.audit.llm import AuditSession, LLMAuditor
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import AUDIT_INDEX, REPORTS, audit_episodes, read_index
from eairdsl.cli import app

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
MODEL = "armsscripted/auditor"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

provider = scripted_provider("armsscripted")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One D1 episode under the sim backend."""
    run = run_episode(resolve_world(D1), "canonical", None, 0, "sim",
                      tmp_path_factory.mktemp("runs"))
    return Path(run.trace_path or "")


def policy(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
    """File a clean report at once (contract full), or answer in plain text (none)."""
    if "submit_report" in tool_names(params):
        return respond(calls=[("submit_report", {"verdict": "no_supported_problem",
                                                 "findings": [], "leads": [],
                                                 "out_of_catalogue": []})])
    return respond("I found no supported problem in this record.")


def llm(**kw: Any) -> LLMAuditor:
    options: dict[str, Any] = {"settings": fast_settings(temperature=0.2)} | kw
    return LLMAuditor(options.pop("model", MODEL), **options)


def audit(trace: Path, out: Path, auditor: Any, describe: dict[str, Any] | None = None) -> Any:
    return audit_episodes(trace, out, auditor, world=D1, describe=describe)


def snapshot(out: Path) -> tuple[dict[str, bytes], bytes]:
    """The folder's reports and index, byte for byte."""
    return ({p.name: p.read_bytes() for p in sorted((out / REPORTS).iterdir())},
            (out / AUDIT_INDEX).read_bytes())


def refused(trace: Path, out: Path, auditor: Any, provider: Scripted | None = None,
            describe: dict[str, Any] | None = None) -> str:
    """The one-line refusal of resuming `out` with `auditor`; nothing on disk changed
    and nothing was asked of the model."""
    before = snapshot(out)
    asked = len(provider.requests) if provider is not None else 0
    with pytest.raises(UsageError) as caught:
        audit(trace, out, auditor, describe)
    message = str(caught.value)
    assert "\n" not in message and "another -o" in message and f"remove {out}" in message
    assert snapshot(out) == before
    if provider is not None:
        assert len(provider.requests) == asked
    return message


def named(message: str) -> list[str]:
    """What a refusal names as different, by field (`graph`, `sampling`, `budget` ...)."""
    listed = message.split("than this audit's (", 1)[1].split("); reports are not", 1)[0]
    return [part.split(" ", 1)[0] for part in listed.split("; ")]


# ------------------------------------------------------------------ arms and kinds

def test_an_identical_rerun_resumes_and_the_index_names_the_arm(
        provider: Scripted, trace: Path, tmp_path: Path) -> None:
    provider.script = policy
    out = tmp_path / "a"
    auditor = llm(graph="topology")
    first = audit(trace, out, auditor)
    assert first.entries[0].status != "failed"
    before, asked = snapshot(out), len(provider.requests)
    # the runner records the LLM auditor's arm and prompt version in the index itself
    block = json.loads(before[1])["auditor"]
    assert block == {"kind": "llm", "model": MODEL, "contract": "full", "graph": "topology",
                     "prompt_version": auditor.prompt_version}
    # the same auditor again (a fresh object): reports reused, nothing asked, same bytes
    again = audit(trace, out, llm(graph="topology"))
    assert len(provider.requests) == asked and snapshot(out) == before
    assert again.entries == first.entries


@pytest.mark.parametrize(("arm", "expected"), [
    ({"graph": "none"}, "graph topology, not none"),
    ({"graph": "annotated"}, "graph topology, not annotated"),
    ({"contract": "none"}, "contract full, not none"),
])
def test_another_llm_arm_is_refused(provider: Scripted, trace: Path, tmp_path: Path,
                                    arm: dict[str, str], expected: str) -> None:
    provider.script = policy
    out = tmp_path / "a"
    audit(trace, out, llm(graph="topology"))
    other = llm(**({"graph": "topology"} | arm))
    message = refused(trace, out, other, provider)
    assert expected in message
    # the prompt differs with the arm, and the message names that too
    assert f"prompt_version {llm(graph='topology').prompt_version}, not " \
           f"{other.prompt_version}" in message
    # the model and the sampling are the same: not named as differences
    assert named(message) == [expected.split(" ", 1)[0], "prompt_version"]


def test_the_arm_is_read_from_a_describe_and_the_reports_alone(
        provider: Scripted, trace: Path, tmp_path: Path) -> None:
    """An index written before the runner recorded the arm: the caller's describe
    (`eairc audit`'s) names contract and graph, the kept reports the prompt version."""
    provider.script = policy
    out = tmp_path / "a"
    audit(trace, out, llm(), describe={"kind": "llm", "model": MODEL, "contract": "full",
                                       "graph": "annotated"})
    data = json.loads((out / AUDIT_INDEX).read_text())
    del data["auditor"]["prompt_version"]  # as eairc audit's index was before
    (out / AUDIT_INDEX).write_text(json.dumps(data), encoding="utf-8")
    message = refused(trace, out, llm(graph="none"), provider,
                      describe={"kind": "llm", "model": MODEL, "contract": "full",
                                "graph": "none"})
    assert "graph annotated, not none" in message and "prompt_version" in message
    # with no describe at all, a kept report whose prompt version differs is refused
    data = json.loads((out / AUDIT_INDEX).read_text())
    data["auditor"] = {}
    (out / AUDIT_INDEX).write_text(json.dumps(data), encoding="utf-8")
    [report_path] = [p for p in (out / REPORTS).glob("*.json")
                     if not p.name.endswith(".validation.json")]
    report = json.loads(report_path.read_text())
    report["auditor"]["prompt_version"] = "full-0+\nold"
    report_path.write_text(json.dumps(report), encoding="utf-8")
    message = refused(trace, out, llm(), provider)
    assert f"prompt_version full-0+ old, not {llm().prompt_version}" in message


def test_another_model_is_named_beside_the_sampling(provider: Scripted, trace: Path,
                                                    tmp_path: Path) -> None:
    provider.script = policy
    out = tmp_path / "a"
    audit(trace, out, llm())
    message = refused(trace, out, llm(model="armsscripted/other"), provider)
    assert f"model {MODEL}, not armsscripted/other" in message
    assert "sampling 'model armsscripted/auditor, temperature 0.2'" in message


def test_rules_oracle_and_llm_do_not_resume_each_other(provider: Scripted, trace: Path,
                                                        tmp_path: Path) -> None:
    provider.script = policy
    rules_dir, oracle_dir = tmp_path / "rules", tmp_path / "oracle"
    audit(trace, rules_dir, RulesAuditor(), {"kind": "offline"})
    oracle, describe = make_auditor("oracle", oracle_dir, world=D1)
    audit(trace, oracle_dir, oracle, describe)
    # an oracle into the rules folder, the rules auditor into the oracle's
    message = refused(trace, rules_dir, make_auditor("oracle", rules_dir, world=D1)[0])
    assert "kind rules, not oracle" in message and "prompt_version rules-1, not oracle" in message
    message = refused(trace, oracle_dir, RulesAuditor(), describe={"kind": "offline"})
    assert "kind oracle, not rules" in message
    # an LLM auditor into the rules folder: kind and sampling both named
    message = refused(trace, rules_dir, llm(), provider)
    assert "kind rules, not llm" in message and "sampling 'none recorded'" in message
    # each resumes itself, index byte for byte
    for folder, agent, desc in ((rules_dir, RulesAuditor(), {"kind": "offline"}),
                                (oracle_dir, make_auditor("oracle", oracle_dir, world=D1)[0],
                                 describe)):
        before = snapshot(folder)
        audit(trace, folder, agent, desc)
        assert snapshot(folder) == before


def test_identity_of_the_three_auditors(tmp_path: Path) -> None:
    assert identity_of(RulesAuditor()) == AuditorIdentity(kind="rules",
                                                          prompt_version="rules-1")
    assert identity_of(make_auditor("oracle", tmp_path, world=D1)[0]) == AuditorIdentity(
        kind="oracle", prompt_version="oracle")
    auditor = llm(contract="none", graph="none")
    assert identity_of(auditor) == AuditorIdentity(
        kind="llm", model=MODEL, prompt_version=auditor.prompt_version, contract="none",
        graph="none")
    # a recorded block of eairc audit's offline kind, and an untrusted one
    assert AuditorIdentity.of_block({"kind": "offline", "arm": "offline"}).known() == {
        "kind": "rules"}
    assert AuditorIdentity.of_block(["not", "a", "block"]).known() == {}
    assert AuditorIdentity.of_block({"kind": 3, "model": ""}).known() == {}


def test_eairc_audit_refuses_another_auditor_in_one_line(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "a"
    first = CliRunner().invoke(app, ["audit", str(trace), "-o", str(out), "--world", str(D1)])
    assert first.exit_code == 0, first.output
    before = snapshot(out)
    result = CliRunner().invoke(app, ["audit", str(trace), "-o", str(out), "--world", str(D1),
                                      "--auditor", "oracle"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "kind rules, not oracle" in lines[0], result.output
    assert "another -o" in lines[0] and "Traceback" not in result.output
    assert snapshot(out) == before
    again = CliRunner().invoke(app, ["audit", str(trace), "-o", str(out), "--world", str(D1)])
    assert again.exit_code == 0, again.output
    assert snapshot(out) == before


# ------------------------------------------------------------------------- budgets

def test_the_budgets_defaults_are_the_llm_auditors() -> None:
    params = inspect.signature(LLMAuditor.__init__).parameters
    default = AuditBudgets()
    for name in ("max_tool_calls", "max_revisions", "max_tokens_in", "max_turns",
                 "window_chars", "on_budget"):
        assert params[name].default == getattr(default, name), name
    auditor = LLMAuditor(MODEL)
    assert auditor.budgets.effective() == default.effective()
    assert default.turns == auditor.max_turns == 72
    assert auditor.request_settings.model_dump(mode="json").get("budgets") is None


def test_budgets_other_than_the_defaults_are_recorded(provider: Scripted, trace: Path,
                                                     tmp_path: Path) -> None:
    provider.script = policy
    out = tmp_path / "a"
    auditor = llm(max_tool_calls=10, max_tokens_in=None, max_turns=40,
                  transcripts=tmp_path / "sessions")
    index = audit(trace, out, auditor)
    recorded = json.loads((out / AUDIT_INDEX).read_text())["settings"]
    # only what differs from the defaults; null max_tokens_in is "no cap", kept
    assert recorded["budgets"] == {"max_tool_calls": 10, "max_tokens_in": None,
                                   "max_turns": 40}
    assert index.settings is not None and index.settings.budgets.effective() == {
        "max_tool_calls": 10, "max_revisions": 3, "max_tokens_in": None, "max_turns": 40,
        "window_chars": 12000, "on_budget": "insufficient_evidence"}
    assert read_index(out).settings == index.settings
    [session_file] = (tmp_path / "sessions").iterdir()
    session = AuditSession.model_validate_json(session_file.read_bytes())
    assert session.settings is not None and session.settings.budgets == auditor.budgets
    # sampling is still only the sampling; the people's line names the budgets
    assert "budgets" not in index.settings.sampling()
    assert index.settings.describe().endswith(
        "; budgets max_tool_calls 10, max_tokens_in no cap, max_turns 40")


def test_a_derived_max_turns_given_explicitly_is_not_recorded() -> None:
    explicit = LLMAuditor(MODEL, max_tool_calls=10, max_turns=10 + 2 * 4 + 4)
    assert explicit.budgets.model_dump(mode="json") == {"max_tool_calls": 10}
    assert explicit.budgets.effective() == LLMAuditor(MODEL, max_tool_calls=10
                                                      ).budgets.effective()


@pytest.mark.parametrize(("budget", "expected"), [
    # larger, too (max_turns, derived from it, moves with it)
    ({"max_tool_calls": 20}, "budget max_tool_calls 10, not 20; budget max_turns 22, not 32"),
    ({"max_tool_calls": 10, "max_revisions": 1}, "budget max_revisions 3, not 1"),
    ({"max_tool_calls": 10, "max_tokens_in": None}, "budget max_tokens_in 1000000, not no cap"),
    ({"max_tool_calls": 10, "max_turns": 12}, "budget max_turns 22, not 12"),
    ({"max_tool_calls": 10, "window_chars": 4000}, "budget window_chars 12000, not 4000"),
    ({"max_tool_calls": 10, "on_budget": "error"},
     "budget on_budget insufficient_evidence, not error"),
])
def test_resuming_under_another_budget_is_refused(provider: Scripted, trace: Path,
                                                  tmp_path: Path, budget: dict[str, Any],
                                                  expected: str) -> None:
    provider.script = policy
    out = tmp_path / "a"
    audit(trace, out, llm(max_tool_calls=10))
    other = llm(**budget)
    message = refused(trace, out, other, provider)
    assert expected in message
    # a window is also in the tools' definitions, so the prompt version moves with it
    assert set(named(message)) == ({"budget", "prompt_version"} if "window_chars" in budget
                                   else {"budget"})
    # the same budgets given another way (the derived max_turns spelled out) resume
    before = snapshot(out)
    audit(trace, out, llm(max_tool_calls=10, max_turns=22, settings=fast_settings(
        temperature=0.2, timeout=30.0)))
    assert snapshot(out)[0] == before[0]


def test_an_index_written_before_budgets_were_kept_reads_as_the_defaults(
        provider: Scripted, trace: Path, tmp_path: Path) -> None:
    provider.script = policy
    out = tmp_path / "a"
    audit(trace, out, llm(max_tool_calls=10))
    data = json.loads((out / AUDIT_INDEX).read_text())
    del data["settings"]["budgets"]
    (out / AUDIT_INDEX).write_text(json.dumps(data), encoding="utf-8")
    old = read_index(out)
    assert old.settings is not None and old.settings.budgets == AuditBudgets()
    assert AuditorSettings.model_validate({"model": MODEL}).budgets == AuditBudgets()
    message = refused(trace, out, llm(max_tool_calls=10), provider)
    assert "budget max_tool_calls 60, not 10" in message
    asked = len(provider.requests)
    audit(trace, out, llm())  # the defaults: the same audit, resumed
    assert len(provider.requests) == asked
