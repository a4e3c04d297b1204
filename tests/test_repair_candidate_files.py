"""A repair candidate is its reviewed edit and nothing else (issue 28 item 5).

Every file a candidate adds, changes or removes is listed in the diff, ScopeOK
and review.html; a file the repaired world does not read is refused (a planted
`generated/<w>/world.json` was carried into the accepted world folder); a
candidate's files are bounded in number and size; and hostile input — a NUL
byte or a 300-byte part in a file name, a lone surrogate, an answer nested
200,000 deep from the Repair Agent or the Reviewer — is a located refusal of
that candidate, never an internal error.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from repair_helpers import A1, CORRECT, StubAgent, StubReviewer, approve, audited_a1, correct
from scripted_llm import Scripted, scripted_provider
from typer.testing import CliRunner

from eairdsl.agents.llm import LLMSettings
from eairdsl.audit.contract import Finding
from eairdsl.cli import app
from eairdsl.compiler import compile_world
from eairdsl.diff import diff_worlds
from eairdsl.repair.apply import apply_candidate
from eairdsl.repair.files import MAX_CANDIDATE_FILES, MAX_CANDIDATE_TOTAL
from eairdsl.repair.folder import RepairFolder
from eairdsl.repair.llm import (
    MAX_ANSWER_DEPTH,
    LLMRepairAgent,
    LLMReviewer,
    parse_candidate,
    parse_review,
)
from eairdsl.repair.loop import repair
from eairdsl.repair.model import Candidate, RepairError, RepairRequest, ReviewRequest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = A1.read_text(encoding="utf-8")
PLANTED = "generated/a1/world.json"
#: an answer nested 200,000 deep: json's C scanner ends in a RecursionError on it
DEEP = "[" * 200_000 + "]" * 200_000
DEEP_OBJECT = '{"a": ' * 200_000 + "1" + "}" * 200_000
SMALL: dict[str, Any] = {"seeds": 2, "validate_episodes": 2}
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def _apply(tmp_path: Path, files: dict[str, str], source: str = SOURCE) -> Any:
    return apply_candidate(A1, Candidate(source=source, files=files), tmp_path / "world")


# ---------------------------------------------------------------- names, texts, bounds

@pytest.mark.parametrize(("name", "why"), [
    ("a1/notes\x00.md", "control character (U+0000)"),
    ("a1/tab\there.md", "control character (U+0009)"),
    ("a1/" + "x" * 300 + ".md", "a part of the file name is 303 bytes; at most 200"),
    ("a1/\udc80.md", "not UTF-8 text"),
    ("/etc/passwd", "not a relative path"),
    ("a1/../../escape.md", "not a relative path"),
    ("a1.eair", "this is the main file"),
])
def test_a_hostile_file_name_is_a_located_refusal(tmp_path: Path, name: str, why: str) -> None:
    applied = _apply(tmp_path, {name: "x"})
    assert not applied.ok
    assert len(applied.problems) == 1 and why in applied.problems[0], applied.problems
    shown = applied.problems[0]
    assert shown.startswith("files[\"") and "\x00" not in shown and "\t" not in shown
    written = {p.relative_to(tmp_path / "world").as_posix()
               for p in (tmp_path / "world").rglob("*") if p.is_file()}
    assert all("notes" not in w and "escape" not in w and "x" * 300 not in w
               for w in written), "nothing of a refused candidate is written"


def test_a_lone_surrogate_in_a_text_or_a_name_that_cannot_be_written(tmp_path: Path) -> None:
    applied = _apply(tmp_path, {"a1/notes.md": "half a pair: \udc80"})
    assert not applied.ok and "not UTF-8 text" in applied.problems[0]
    applied = _apply(tmp_path, {}, source=SOURCE + "// \udc80\n")
    assert not applied.ok and applied.problems[0].startswith("a1.eair: error: ")
    # a file where the world's data folder is: refused where it is named
    applied = _apply(tmp_path, {"a1": "not a folder"})
    assert not applied.ok
    assert applied.problems[0].startswith('files["a1"]: error: cannot be written')


def test_a_candidates_files_are_bounded_in_number_and_size(tmp_path: Path) -> None:
    many = {f"a1/extra/{i:05d}.md": "x" for i in range(5000)}
    applied = _apply(tmp_path, many)
    assert not applied.ok and f"at most {MAX_CANDIDATE_FILES}" in applied.problems[0]
    assert not (tmp_path / "world" / "a1" / "extra").exists(), "refused before any write"
    chunk = "y" * (1024 * 1024 + 1)  # each under the per-file bound, together over 8 MB
    big = {f"a1/big{i}.md": chunk for i in range(MAX_CANDIDATE_TOTAL // len(chunk) + 1)}
    applied = _apply(tmp_path, big)
    assert not applied.ok and "bytes together" in applied.problems[-1]
    assert not (tmp_path / "world" / "a1" / "big0.md").exists()


def test_files_the_world_does_not_read_are_named_and_never_kept(tmp_path: Path) -> None:
    applied = _apply(tmp_path, {PLANTED: "{}", "a1/unused.md": "nobody reads me"},
                     source=correct(SOURCE))
    assert applied.ok, applied.problems
    assert applied.unread == ["a1/unused.md", PLANTED]
    folder = tmp_path / "world"
    assert not (folder / "generated").exists() and not (folder / "a1" / "unused.md").exists()
    assert applied.world is not None
    kept = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert kept == {s.ref for s in applied.world.sources if not s.ref.startswith("stdlib/")}


# ---------------------------------------------------------------- the diff lists files

def test_the_diff_lists_every_file_added_changed_or_removed(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    shutil.copytree(A1.parent / "a1", folder / "a1")
    (folder / "a1.eair").write_text(SOURCE, encoding="utf-8")
    card = folder / "a1" / "support.md.j2"
    card.write_text(card.read_text(encoding="utf-8") + "\nBe brief.\n", encoding="utf-8")
    old, new = compile_world(A1).world, compile_world(folder / "a1.eair").world
    assert old is not None and new is not None
    files = diff_worlds(old, new).files
    assert [(f.path, f.change, f.read) for f in files] == [
        ("a1/support.md.j2", "changed", True)]
    shown = CliRunner().invoke(app, ["diff", str(A1), str(folder / "a1.eair")])
    assert "~ file a1/support.md.j2" in shown.output
    assert "1 file(s) added, removed or changed" in shown.output
    as_json = json.loads(CliRunner().invoke(
        app, ["diff", str(A1), str(folder / "a1.eair"), "--json"]).output)
    assert as_json["files"] == [{"path": "a1/support.md.j2", "change": "changed",
                                 "read": True}]


# ---------------------------------------------------------------- through the loop

@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return audited_a1(tmp_path_factory.mktemp("a1"), seeds=4)


def _planted(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source), attribution=CORRECT,
                     files={PLANTED: '{"planted": true}'}, rationale="with a passenger")


def _good(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source), attribution=CORRECT,
                     rationale="the lever")


def test_a_planted_unread_file_is_refused_by_scope_and_never_installed(
        audit: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent = StubAgent(_planted, _good)
    acc = repair(A1, audit, out, agent, StubReviewer(approve()), **SMALL, max_rounds=2)
    first = out / "rounds" / "01"
    scope = json.loads((first / "scope.json").read_text(encoding="utf-8"))
    assert scope["ok"] is False and scope["unread"] == [PLANTED]
    assert f"{PLANTED}: added, not read by the world" in scope["files"]
    assert any(PLANTED in p and "does not read" in p for p in scope["problems"])
    diff = json.loads((first / "diff.json").read_text(encoding="utf-8"))
    assert {"path": PLANTED, "change": "added", "read": False} in diff["files"]
    assert {"path": "a1.eair", "change": "changed", "read": True} in diff["files"]
    assert not (first / "world" / "generated").exists()
    feedback = agent.requests[1].feedback[0]
    assert feedback.stage == "scope" and any(PLANTED in p for p in feedback.problems)
    # round 2 without it is accepted; the accepted folder holds exactly what W′ reads
    assert acc.accepted and acc.round == 2, acc.reason
    world = RepairFolder(out).path / "world"
    assert not (world / "generated").exists()
    repaired = compile_world(world / "a1.eair").world
    assert repaired is not None
    assert {p.relative_to(world).as_posix() for p in world.rglob("*") if p.is_file()} == {
        s.ref for s in repaired.sources if not s.ref.startswith("stdlib/")}
    html = (out / "review.html").read_text(encoding="utf-8")
    assert PLANTED in html and "<h3>Files</h3>" in html


def _nul(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source), attribution=CORRECT,
                     files={"a1/x\x00y.md": "x"})


def _long(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source), attribution=CORRECT,
                     files={"a1/" + "n" * 300: "x"})


def _thousands(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source), attribution=CORRECT,
                     files={f"a1/f{i}.md": "x" for i in range(5000)})


def _surrogate(request: RepairRequest) -> Candidate:
    return Candidate(source=correct(request.source) + "// \udc80\n", attribution=CORRECT)


def test_hostile_candidates_end_their_round_never_the_repair(audit: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "r"
    agent = StubAgent(_nul, _long, _thousands, _surrogate)
    acc = repair(A1, audit, out, agent, StubReviewer(approve()), **SMALL, compile_tries=4)
    assert not acc.accepted and acc.rounds == 0 and len(agent.requests) == 4
    folder = RepairFolder(out)
    problems = [folder.round(n).read_outcome().problems for n in (1, 2, 3, 4)]
    assert problems[0] == ['files["a1/x\\u0000y.md"]: error: the file name holds a control '
                           "character (U+0000); name the file with printable characters"]
    assert "a part of the file name is 300 bytes" in problems[1][0]
    assert "writes 5000 files" in problems[2][0]
    assert "not UTF-8 text" in problems[3][0]
    assert not list((out / "rounds" / "03" / "world" / "a1").glob("f*.md"))
    # each went back to the agent as its round's feedback
    assert agent.requests[1].feedback[0].stage == "compile"
    assert (out / "review.html").is_file()


# ---------------------------------------------------------------- model answers

def test_an_answer_nested_200000_deep_is_a_repair_error() -> None:
    for text in (DEEP, DEEP_OBJECT, "Here it is:\n" + DEEP_OBJECT + "\nthanks"):
        with pytest.raises(RepairError, match=f"at most {MAX_ANSWER_DEPTH}"):
            parse_candidate(text, "a1.eair")
        with pytest.raises(RepairError, match=f"at most {MAX_ANSWER_DEPTH}"):
            parse_review(text)
    # brackets inside strings are text, not nesting
    src = "[[[[ " * 100
    source, _, _, _ = parse_candidate(json.dumps({"source": src}), "a1.eair")
    assert source.startswith("[[[[")


def test_a_hostile_file_name_from_the_model_is_sent_back() -> None:
    bad = json.dumps({"source": SOURCE, "files": {"a1/x\u0000.md": "x"}})
    with pytest.raises(RepairError, match=r"control character \(U\+0000\)"):
        parse_candidate(bad, "a1.eair")
    many = json.dumps({"source": SOURCE, "files": {f"a1/{i}.md": "x" for i in range(100)}})
    with pytest.raises(RepairError, match="writes 100 files"):
        parse_candidate(many, "a1.eair")


provider = scripted_provider("filesscripted", messages_only=True, text_tokens=(100, 20))
FINDING = Finding.model_validate(json.loads(
    (ROOT / "tests" / "fixtures" / "audit" / "a1" / "report.json").read_text(
        encoding="utf-8"))["findings"][0])


def _settings() -> LLMSettings:
    return LLMSettings(timeout=5.0, retries=0, backoff_base=0.001, backoff_max=0.01)


def test_the_llm_agent_and_reviewer_refuse_a_deep_answer(provider: Scripted) -> None:
    assert FINDING.repair_plan is not None
    provider.scripts = [lambda m: DEEP] * 2
    request = RepairRequest(world_file="a1.eair", source=SOURCE, finding=FINDING,
                            plan=FINDING.repair_plan, protected=[])
    with pytest.raises(RepairError, match="nests JSON 200000 levels deep"):
        LLMRepairAgent("filesscripted/agent", settings=_settings()).propose(request)
    retry = provider.requests[1]["messages"][-1]["content"]
    assert "could not be used" in retry and "nests JSON" in retry
    provider.scripts = [lambda m: DEEP_OBJECT] * 2
    review = ReviewRequest(world_file="a1.eair", original=SOURCE, candidate=SOURCE,
                           finding=FINDING, plan=FINDING.repair_plan, diff={"changes": []})
    with pytest.raises(RepairError, match="nests JSON 200000 levels deep"):
        LLMReviewer("filesscripted/reviewer", settings=_settings()).review(review)


def test_eairc_repair_with_a_model_answering_200000_deep_exits_1(
        provider: Scripted, audit: Path, tmp_path: Path) -> None:
    """The issue's report: such an answer ended `eairc repair` in an internal error."""
    provider.script = lambda m: DEEP
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["repair", str(A1), "--audit", str(audit), "-o",
                                      str(out), "--agent", "llm", "--model",
                                      "filesscripted/agent", "--seeds", "2",
                                      "--retries", "0"])
    assert result.exit_code == 1, result.output
    assert "nests JSON 200000 levels deep" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    outcome = RepairFolder(out).round(1).read_outcome()
    assert outcome.stage == "propose" and "nests JSON" in outcome.problems[0]
