"""The LLM auditor's own request settings are recorded with its audit, offline.

A report's `auditor` block names the model, prompt version and seed only, so an
audit folder read later could not say at what temperature or answer length the
auditor was sampled, nor rerun it so. These tests run LLM audits against the
scripted litellm provider (tests/scripted_llm.py: it records every request it
is sent) with a temperature and max_tokens set, and check that what the provider
received is what `index.json`, the session transcript and `eairc audit`'s output
say; and that a folder holding reports of one sampling is never silently resumed
under another.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from scripted_llm import Scripted, fast_settings, read_then_report_clean, scripted_provider
from typer.testing import CliRunner

from eairdsl.api import UsageError, resolve_world, run_episode
from eairdsl.audit.auditor import AuditorSettings, SampledAuditor
from eairdsl.audit.llm import AuditSession, LLMAuditor
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import AUDIT_INDEX, REPORTS, audit_episodes, read_index
from eairdsl.cli import app

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
MODEL = "settingsscripted/auditor"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

provider = scripted_provider("settingsscripted")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One D1 episode under the sim backend."""
    run = run_episode(resolve_world(D1), "canonical", None, 0, "sim",
                      tmp_path_factory.mktemp("runs"))
    return Path(run.trace_path or "")


def audit(trace: Path, out: Path, auditor: Any) -> Any:
    return audit_episodes(trace, out, auditor, world=D1, describe={"kind": "llm"})


def test_the_sampling_sent_is_the_sampling_recorded(provider: Scripted, trace: Path,
                                                    tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    auditor = LLMAuditor(MODEL, seed=7, transcripts=tmp_path / "sessions",
                         settings=fast_settings(temperature=0.3, max_tokens=321,
                                                api_base="http://127.0.0.1:9",
                                                completion_kwargs={"api_key": "sk-not-recorded"}))
    assert isinstance(auditor, SampledAuditor)
    index = audit(trace, tmp_path / "a", auditor)
    [entry] = index.entries
    assert entry.status == "valid" and entry.tool_calls == 2
    # every request the provider received carried the auditor's sampling
    assert len(provider.requests) == 2
    for request in provider.requests:
        params = request["params"]
        assert (params.get("temperature"), params.get("max_tokens"), params.get("seed")) \
            == (0.3, 321, 7), params
    # ... and the index on disk says so, with only the options that were set
    text = (tmp_path / "a" / AUDIT_INDEX).read_text(encoding="utf-8")
    recorded = json.loads(text)["settings"]
    assert recorded == {"model": MODEL, "temperature": 0.3, "max_tokens": 321, "seed": 7,
                        "timeout": 5.0, "retries": 0, "completion_params": ["api_key"]}
    # never an endpoint or a key's value
    assert "127.0.0.1" not in text and "sk-not-recorded" not in text
    # it reads back as the model, and so does the session transcript
    assert read_index(tmp_path / "a").settings == AuditorSettings.model_validate(recorded)
    [session_file] = (tmp_path / "sessions").iterdir()
    session = AuditSession.model_validate_json(session_file.read_bytes())
    assert session.settings is not None
    assert session.settings.sampling() == {"model": MODEL, "temperature": 0.3,
                                           "max_tokens": 321, "seed": 7,
                                           "completion_params": ["api_key"]}


def test_unset_options_are_absent_and_the_defaults_are_not_invented(
        provider: Scripted, trace: Path, tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    audit(trace, tmp_path / "a", LLMAuditor(MODEL, settings=fast_settings()))
    for request in provider.requests:
        assert not {"temperature", "max_tokens", "seed"} & set(request["params"])
    recorded = json.loads((tmp_path / "a" / AUDIT_INDEX).read_text())["settings"]
    assert recorded == {"model": MODEL, "timeout": 5.0, "retries": 0}


def test_a_provider_keyword_that_overrides_the_temperature_is_what_is_recorded(
        provider: Scripted, trace: Path, tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    audit(trace, tmp_path / "a", LLMAuditor(MODEL, settings=fast_settings(
        temperature=0.3, completion_kwargs={"temperature": 0.9})))
    assert {r["params"].get("temperature") for r in provider.requests} == {0.9}
    recorded = json.loads((tmp_path / "a" / AUDIT_INDEX).read_text())["settings"]
    assert recorded["temperature"] == 0.9 and "completion_params" not in recorded


def test_eairc_audit_prints_the_auditor_requests(provider: Scripted, trace: Path,
                                                 tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    out = tmp_path / "a"
    result = CliRunner().invoke(app, [
        "audit", str(trace), "-o", str(out), "--world", str(D1), "--auditor", "llm",
        "--model", MODEL, "--temperature", "0.25", "--max-tokens", "400", "--llm-seed", "3",
        "--timeout", "5", "--retries", "0"])
    assert result.exit_code == 0, result.output
    assert (f"auditor requests: model {MODEL}, temperature 0.25, max_tokens 400, seed 3 "
            "(timeout 5s, 0 retries)") in result.output
    assert {(r["params"].get("temperature"), r["params"].get("max_tokens"))
            for r in provider.requests} == {(0.25, 400)}
    index = json.loads((out / AUDIT_INDEX).read_text())
    assert index["settings"]["temperature"] == 0.25 and index["auditor"]["model"] == MODEL


def test_resuming_under_another_sampling_is_refused(provider: Scripted, trace: Path,
                                                   tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    out = tmp_path / "a"
    audit(trace, out, LLMAuditor(MODEL, settings=fast_settings(temperature=0.3, max_tokens=321)))
    reports = {p.name: p.read_bytes() for p in (out / REPORTS).iterdir()}
    index_before = (out / AUDIT_INDEX).read_bytes()
    asked = len(provider.requests)
    # another temperature, another max_tokens, another model, no sampling at all
    for auditor in (LLMAuditor(MODEL, settings=fast_settings(temperature=0.9, max_tokens=321)),
                    LLMAuditor(MODEL, settings=fast_settings(temperature=0.3)),
                    LLMAuditor("settingsscripted/other",
                               settings=fast_settings(temperature=0.3, max_tokens=321)),
                    RulesAuditor()):
        with pytest.raises(UsageError) as caught:
            audit(trace, out, auditor)
        assert "temperature 0.3, max_tokens 321" in str(caught.value)
        assert "another -o" in str(caught.value)
    assert len(provider.requests) == asked  # nothing was re-asked
    assert {p.name: p.read_bytes() for p in (out / REPORTS).iterdir()} == reports
    assert (out / AUDIT_INDEX).read_bytes() == index_before
    # the same sampling with a longer timeout and more retries resumes, asking nothing
    index = audit(trace, out, LLMAuditor(MODEL, settings=fast_settings(
        temperature=0.3, max_tokens=321, timeout=30.0, retries=2)))
    assert len(provider.requests) == asked and index.entries[0].status == "valid"
    assert index.settings is not None and index.settings.timeout == 30.0


def test_an_index_written_before_settings_were_kept_reads_but_is_not_resumed_by_an_llm(
        provider: Scripted, trace: Path, tmp_path: Path) -> None:
    provider.script = read_then_report_clean
    out = tmp_path / "a"
    audit(trace, out, LLMAuditor(MODEL, settings=fast_settings(temperature=0.3)))
    data = json.loads((out / AUDIT_INDEX).read_text())
    del data["settings"]
    (out / AUDIT_INDEX).write_text(json.dumps(data), encoding="utf-8")
    old = read_index(out)
    assert old.settings is None and old.entries[0].status == "valid"
    with pytest.raises(UsageError, match="none recorded"):
        audit(trace, out, LLMAuditor(MODEL, settings=fast_settings(temperature=0.3)))


def test_an_offline_audit_records_no_settings_and_resumes_as_before(trace: Path,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "a"
    audit_episodes(trace, out, RulesAuditor(), world=D1, describe={"kind": "offline"})
    first = (out / AUDIT_INDEX).read_bytes()
    assert "settings" not in json.loads(first)
    audit_episodes(trace, out, RulesAuditor(), world=D1, describe={"kind": "offline"})
    assert json.loads((out / AUDIT_INDEX).read_bytes())["entries"][0]["status"] == "valid"
