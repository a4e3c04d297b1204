"""Defects a user hit from the outside on the audit / repair / signals / import pipeline
(the QA pass): each test runs the command as a user would and fails on the old code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.cli import app

RUNNER = CliRunner()

#: a Who&When Hand-Crafted trace, the smallest the importer reads
_WHO = {"history": [{"role": "Orchestrator (-> WebSurfer)", "content": "look it up"},
                    {"role": "WebSurfer", "content": "found it"}],
        "mistake_agent": "WebSurfer", "mistake_step": "1", "question": "q"}


def _who(path: Path, content: str) -> Path:
    data = dict(_WHO, history=[dict(_WHO["history"][0], content=content)])  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ------------------------------------------------------------------ eairc import
def test_import_non_utf8_mad_file_is_a_located_error(tmp_path: Path) -> None:
    """`eairc import mad bin.json` on bytes that are not UTF-8 said "internal error:
    UnicodeDecodeError ... this is a bug in eairc" (exit 3)."""
    src = tmp_path / "bin.json"
    src.write_bytes(b"\xff\xfe[")
    res = RUNNER.invoke(app, ["import", "mad", str(src), "-o", str(tmp_path / "o")])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "bin.json: not UTF-8 text" in res.output


def test_import_non_utf8_trail_annotation_is_a_located_error(tmp_path: Path) -> None:
    """A TRAIL annotation file that is not UTF-8 was an internal error too."""
    (tmp_path / "GAIA").mkdir()
    (tmp_path / "processed_annotations_gaia").mkdir()
    (tmp_path / "GAIA" / "t1.json").write_text(json.dumps({"trace_id": "t1", "spans": []}),
                                              encoding="utf-8")
    (tmp_path / "processed_annotations_gaia" / "t1.json").write_bytes(b"\xff{")
    res = RUNNER.invoke(app, ["import", "trail", str(tmp_path), "-o", str(tmp_path / "o")])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "processed_annotations_gaia" in res.output and "not UTF-8 text" in res.output


def test_import_into_a_file_is_a_usage_error(tmp_path: Path) -> None:
    """`eairc import ... -o afile` (an existing file) was "internal error:
    NotADirectoryError"."""
    src = _who(tmp_path / "src" / "Hand-Crafted" / "1.json", "a")
    out = tmp_path / "afile"
    out.write_text("keep me", encoding="utf-8")
    res = RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "afile: the output is not a folder" in res.output
    assert out.read_text(encoding="utf-8") == "keep me"


def test_import_refusing_two_traces_with_one_id_writes_nothing(tmp_path: Path) -> None:
    """Two source files with one trace id were refused with exit 1, but the second had
    already overwritten the first's trace in OUT: the refusal left a trace of the file it
    named as the duplicate. Now nothing is written."""
    _who(tmp_path / "src" / "a" / "Hand-Crafted" / "1.json", "first")
    _who(tmp_path / "src" / "b" / "Hand-Crafted" / "1.json", "second")
    out = tmp_path / "o"
    res = RUNNER.invoke(app, ["import", "who-and-when", str(tmp_path / "src"), "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "two source traces with one id" in res.output
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))


def test_import_with_a_bad_file_leaves_out_as_it_was(tmp_path: Path) -> None:
    """A folder whose second file is malformed wrote the first file's trace and then
    failed: a half-imported OUT that `import-eval` graded as if complete."""
    _who(tmp_path / "src" / "Hand-Crafted" / "1.json", "fine")
    (tmp_path / "src" / "Hand-Crafted" / "2.json").write_text("{", encoding="utf-8")
    out = tmp_path / "o"
    res = RUNNER.invoke(app, ["import", "who-and-when", str(tmp_path / "src"), "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "2.json: line" in res.output
    assert not out.exists()


# ------------------------------------------------------------------ eairc audit-study
def test_audit_study_of_a_non_study_folder_leaves_nothing_behind(tmp_path: Path) -> None:
    """`eairc audit-study runs/a1` (not a study) refused, but left an empty
    runs/a1/audit-study/ behind."""
    res = RUNNER.invoke(app, ["audit-study", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "is not a study folder" in res.output
    assert list(tmp_path.iterdir()) == []
    # nor does a cohort refused for its sizes
    (tmp_path / "results.sqlite").write_bytes(b"")
    res = RUNNER.invoke(app, ["audit-study", str(tmp_path), "--per-world", "2",
                              "--positives", "3"])
    assert res.exit_code == 1, res.output
    assert "--positives between 0 and it" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


def test_audit_study_of_the_store_file_is_a_usage_error(tmp_path: Path) -> None:
    """`eairc audit-study STUDY/results.sqlite` (the file, not its folder) was
    "internal error: NotADirectoryError"."""
    store = tmp_path / "results.sqlite"
    store.write_bytes(b"")
    res = RUNNER.invoke(app, ["audit-study", str(store)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "is not a study folder" in res.output


def test_audit_study_into_a_file_is_a_usage_error(tmp_path: Path) -> None:
    """`eairc audit-study STUDY -o afile` was "internal error: FileExistsError"."""
    (tmp_path / "results.sqlite").write_bytes(b"")
    out = tmp_path / "afile"
    out.write_text("keep", encoding="utf-8")
    res = RUNNER.invoke(app, ["audit-study", str(tmp_path), "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "afile is a file, not an audit-study folder" in res.output
    assert out.read_text(encoding="utf-8") == "keep"


def test_audit_study_with_a_damaged_cohort_is_a_usage_error(tmp_path: Path) -> None:
    """A cohort.json cut short (an interrupted copy, a hand edit) was an internal error
    with pydantic's traceback text; it is refused with the file named, and kept."""
    (tmp_path / "results.sqlite").write_bytes(b"")
    out = tmp_path / "as"
    out.mkdir()
    for text in ("{", '{"x": 1}'):
        (out / "cohort.json").write_text(text, encoding="utf-8")
        res = RUNNER.invoke(app, ["audit-study", str(tmp_path), "-o", str(out)])
        assert res.exit_code == 1, res.output
        assert "internal error" not in res.output
        assert "cohort.json: not an audit-study cohort" in res.output
        assert (out / "cohort.json").read_text(encoding="utf-8") == text


# ------------------------------------------------------------------ eairc repair
WORLDS = Path(__file__).resolve().parents[1] / "worlds"


def _a1_audit(tmp_path: Path) -> Path:
    """An offline audit of two reckless A1 episodes (supported A1 findings)."""
    runs, audit = tmp_path / "runs", tmp_path / "audit"
    res = RUNNER.invoke(app, ["run", str(WORLDS / "a1.eair"), "--episodes", "2",
                              "--agents", "sim:reckless", "--out", str(runs)])
    assert res.exit_code == 0, res.output
    res = RUNNER.invoke(app, ["audit", str(runs), "-o", str(audit)])
    assert res.exit_code == 0, res.output
    return audit


def test_repair_refused_finding_does_not_block_the_corrected_command(tmp_path: Path) -> None:
    """`eairc repair ... --finding nope` was refused but left OUT/loop.json naming
    'nope'; the corrected command was then refused too ("holds another repair ...
    finding: 'nope' -> None"), until the user deleted the folder."""
    audit, out = _a1_audit(tmp_path), tmp_path / "rep"
    base = ["repair", str(WORLDS / "a1.eair"), "--audit", str(audit), "-o", str(out),
            "--seeds", "1", "--max-rounds", "1"]
    for wrong in ("nope", "ep-0000:finding-99"):
        res = RUNNER.invoke(app, [*base, "--finding", wrong])
        assert res.exit_code == 1, res.output
        assert "--finding" in res.output
        assert not out.exists()
    res = RUNNER.invoke(app, base)
    assert "holds another repair" not in res.output
    assert res.exit_code == 0, res.output
    assert json.loads((out / "loop.json").read_text(encoding="utf-8"))["finding"] is None


def test_repair_into_a_file_and_a_damaged_plan_are_usage_errors(tmp_path: Path) -> None:
    """`-o afile` was "internal error: FileExistsError"; a damaged OUT/plan.json was an
    internal error with pydantic's text. A world path that is a folder or missing said
    only "does not compile"; it now says why."""
    audit = _a1_audit(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("keep", encoding="utf-8")
    res = RUNNER.invoke(app, ["repair", str(WORLDS / "a1.eair"), "--audit", str(audit),
                              "-o", str(afile)])
    assert res.exit_code == 1, res.output
    assert "afile is a file, not a repair folder" in res.output
    assert afile.read_text(encoding="utf-8") == "keep"
    out = tmp_path / "rep"
    out.mkdir()
    (out / "plan.json").write_text("{", encoding="utf-8")
    res = RUNNER.invoke(app, ["repair", str(WORLDS / "a1.eair"), "--audit", str(audit),
                              "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "plan.json: not a repair plan" in res.output
    res = RUNNER.invoke(app, ["repair", str(WORLDS), "--audit", str(audit), "-o",
                              str(tmp_path / "r2")])
    assert res.exit_code == 1, res.output
    assert "is a directory, not a file" in res.output


# ------------------------------------------------------------------ eairc signals
def test_signals_report_into_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    """`eairc signals report -o reports/` (a folder) was "internal error:
    IsADirectoryError" and left `.reports.tmp-PID` beside it; `-o afile/x.html` (under a
    file) was "internal error: NotADirectoryError"."""
    audit, store = _a1_audit(tmp_path), tmp_path / "signals.sqlite"
    res = RUNNER.invoke(app, ["signals", "update", str(audit), "--store", str(store)])
    assert res.exit_code == 0, res.output
    folder = tmp_path / "reports"
    folder.mkdir()
    res = RUNNER.invoke(app, ["signals", "report", "-o", str(folder), "--store", str(store)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "reports is a folder; -o names the HTML page" in res.output
    assert list(folder.iterdir()) == []
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    afile = tmp_path / "afile"
    afile.write_text("keep", encoding="utf-8")
    res = RUNNER.invoke(app, ["signals", "report", "-o", str(afile / "x.html"), "--store",
                              str(store)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "cannot write" in res.output
    res = RUNNER.invoke(app, ["signals", "report", "-o", str(folder / "s.html"), "--store",
                              str(store)])
    assert res.exit_code == 0, res.output
    assert (folder / "s.html").read_text(encoding="utf-8").startswith("<!doctype html>")


# ------------------------------------------------------------------ eairc audit
def test_audit_record_or_replay_without_an_llm_auditor_is_refused(tmp_path: Path) -> None:
    """`eairc audit RUN --replay OLD_AUDIT -o OUT` (forgetting --auditor llm) ran the
    offline rules, ignored the cassette and exited 0, as did `--record`: the user
    believed they had replayed (or recorded) an LLM audit. Both are refused now, for
    `audit` and `audit-study`, and nothing is written."""
    runs = tmp_path / "runs"
    res = RUNNER.invoke(app, ["run", str(WORLDS / "a1.eair"), "--episodes", "1",
                              "--agents", "sim:reckless", "--out", str(runs)])
    assert res.exit_code == 0, res.output
    for extra in (["--replay", str(tmp_path / "old")], ["--record"],
                  ["--record", "--auditor", "oracle"]):
        out = tmp_path / "audit"
        res = RUNNER.invoke(app, ["audit", str(runs), "-o", str(out), *extra])
        assert res.exit_code == 1, (extra, res.output)
        assert "--record and --replay keep an LLM auditor's calls" in res.output
        assert not out.exists()
    (tmp_path / "results.sqlite").write_bytes(b"")
    res = RUNNER.invoke(app, ["audit-study", str(tmp_path), "-o", str(tmp_path / "as"),
                              "--replay", str(tmp_path / "old")])
    assert res.exit_code == 1, res.output
    assert "--record and --replay keep an LLM auditor's calls" in res.output


def test_check_report_max_errors_is_not_negative(tmp_path: Path) -> None:
    """`eairc check-report R --bundle B --max-errors -1` showed all but one diagnostic
    and then "... and 7 more" of 6; a negative count is a usage error now."""
    bundle = sorted((_a1_audit(tmp_path) / "bundles").glob("ep-*"))[0]
    report = tmp_path / "r.json"
    report.write_text("{}", encoding="utf-8")
    res = RUNNER.invoke(app, ["check-report", str(report), "--bundle", str(bundle),
                              "--max-errors", "-1"])
    assert res.exit_code == 2, res.output
    assert "more" not in res.output
    res = RUNNER.invoke(app, ["check-report", str(report), "--bundle", str(bundle),
                              "--max-errors", "0"])
    assert res.exit_code == 1, res.output
    assert "... and 6 more" in res.output


def test_audit_of_a_trace_cut_short_names_the_line(tmp_path: Path) -> None:
    """A trace cut short at line 8 (a run killed mid-write) said "not a trace
    (Unterminated string starting at: line 1 column 149 ...)": the line within the line.
    Now the file's line and column are named."""
    runs = tmp_path / "runs"
    res = RUNNER.invoke(app, ["run", str(WORLDS / "a1.eair"), "--episodes", "1",
                              "--agents", "sim:reckless", "--out", str(runs)])
    assert res.exit_code == 0, res.output
    trace = next(runs.rglob("*.jsonl"))
    lines = trace.read_text(encoding="utf-8").split("\n")
    cut = "\n".join(lines[:7]) + "\n" + lines[7][:40]
    trace.write_text(cut, encoding="utf-8")
    for cmd in (["audit", str(trace), "-o", str(tmp_path / "a")],
                ["bundle", str(trace), "-o", str(tmp_path / "b")]):
        res = RUNNER.invoke(app, cmd)
        assert res.exit_code == 1, res.output
        assert f"{trace.name}: line 8, column " in res.output, res.output
        assert "line 1 column" not in res.output


# ------------------------------------------------------------------ eairc import-eval
def test_import_eval_against_another_folders_audit_is_refused(tmp_path: Path) -> None:
    """`eairc import-eval IMPORT_A --audit AUDIT_OF_B` printed "agent 0.0%, step exact
    0.0%" as if every label had been missed, with "audited 0" in the table; an index.json
    that is not an object was "internal error: AttributeError"."""
    imp_a, imp_b = tmp_path / "a", tmp_path / "b"
    for imp, name in ((imp_a, "1"), (imp_b, "2")):
        src = _who(tmp_path / f"src-{name}" / "Hand-Crafted" / f"{name}.json", "x")
        res = RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(imp)])
        assert res.exit_code == 0, res.output
    audit_b = tmp_path / "audit-b"
    res = RUNNER.invoke(app, ["audit", str(imp_b), "-o", str(audit_b)])
    assert res.exit_code == 0, res.output
    res = RUNNER.invoke(app, ["import-eval", str(imp_a), "--audit", str(audit_b)])
    assert res.exit_code == 1, res.output
    assert "none of the 1 imported trace(s) is in this audit's index" in res.output
    assert "0.0%" not in res.output
    res = RUNNER.invoke(app, ["import-eval", str(imp_b), "--audit", str(audit_b)])
    assert res.exit_code == 0, res.output
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "index.json").write_text("[1]", encoding="utf-8")
    res = RUNNER.invoke(app, ["import-eval", str(imp_a), "--audit", str(bad)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "index.json: not an audit index" in res.output


def test_import_eval_bad_prediction_names_file_and_instance(tmp_path: Path) -> None:
    """A predictions file whose entry has the wrong type printed pydantic's several-line
    dump ("2 validation errors for Prediction ... For further information visit ...")
    naming neither the file nor the instance."""
    src = _who(tmp_path / "src" / "Hand-Crafted" / "7.json", "x")
    imp = tmp_path / "imp"
    res = RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(imp)])
    assert res.exit_code == 0, res.output
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"who_and_when_hand_crafted/7": {"agent": 5, "step": "x"}}),
                     encoding="utf-8")
    res = RUNNER.invoke(app, ["import-eval", str(imp), "--predictions", str(preds)])
    assert res.exit_code == 1, res.output
    assert "p.json: who_and_when_hand_crafted/7: agent: Input should be a valid string" \
        in res.output
    assert "errors.pydantic.dev" not in res.output


def test_import_deeply_nested_json_is_a_located_error(tmp_path: Path) -> None:
    """JSON nested 100,000 levels deep was "internal error: RecursionError" for every
    JSON format (untrusted input)."""
    src = tmp_path / "deep.json"
    src.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    for fmt in ("who-and-when", "trail", "tau-bench", "mad", "otel-genai", "openinference"):
        res = RUNNER.invoke(app, ["import", fmt, str(src), "-o", str(tmp_path / "o")])
        assert res.exit_code == 1, (fmt, res.output)
        assert "internal error" not in res.output
        assert "deep.json: nested too deeply to read" in res.output


def test_import_otel_array_values_of_the_wrong_type(tmp_path: Path) -> None:
    """An OTLP attribute `{"arrayValue": {"values": 5}}` was "internal error: TypeError:
    'int' object is not iterable"; a kvlistValue of non-objects likewise."""
    def doc(value: dict[str, object]) -> dict[str, object]:
        span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "s",
                "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "input.value", "value": value}]}
        return {"resourceSpans": [{"resource": {"attributes": []},
                                   "scopeSpans": [{"scope": {"name": "x"}, "spans": [span]}]}]}
    for n, (value, why) in enumerate((
            ({"arrayValue": {"values": 5}}, "arrayValue.values is a list, not int"),
            ({"kvlistValue": {"values": [5]}}, "a kvlistValue's values are {key, value}"),
            ({"kvlistValue": {"values": "ab"}}, "kvlistValue.values is a list, not str"))):
        src = tmp_path / f"o{n}.json"
        src.write_text(json.dumps(doc(value)), encoding="utf-8")
        res = RUNNER.invoke(app, ["import", "otel-genai", str(src), "-o", str(tmp_path / "o")])
        assert res.exit_code == 1, res.output
        assert "internal error" not in res.output
        assert f"o{n}.json: resourceSpans[0].scopeSpans[0].spans[0].attributes[0] " \
               f"(input.value): {why}" in res.output, res.output


def test_resumed_audit_reaudits_a_damaged_report(tmp_path: Path) -> None:
    """A report that no longer read as JSON (edited by hand, damaged on disk) was kept on
    resume from its stale validation: "4 valid report(s)" but "verdicts: findings 3", the
    damaged file left in place. It is audited again now."""
    audit = _a1_audit(tmp_path)
    report = sorted(p for p in (audit / "reports").glob("ep-*.json")
                    if not p.name.endswith(".validation.json"))[0]
    good = report.read_bytes()
    report.write_text("{", encoding="utf-8")
    res = RUNNER.invoke(app, ["audit", str(tmp_path / "runs"), "-o", str(audit)])
    assert res.exit_code == 0, res.output
    assert report.read_bytes() == good
    assert "verdicts: findings 2" in res.output, res.output


def test_import_of_no_records_is_an_error(tmp_path: Path) -> None:
    """`eairc import tau-bench empty-list.json -o OUT` said "imported 0 trace(s) ... into
    OUT/" and exited 0, naming a folder it never made (`eairc audit OUT` then said "no
    such trace file or run folder")."""
    src = tmp_path / "none.json"
    src.write_text("[]", encoding="utf-8")
    for fmt in ("tau-bench", "mad"):
        res = RUNNER.invoke(app, ["import", fmt, str(src), "-o", str(tmp_path / "o")])
        assert res.exit_code == 1, res.output
        assert "none.json: no traces" in res.output


def test_repair_replay_of_a_missing_folder_is_refused(tmp_path: Path) -> None:
    """`eairc repair ... --replay typo/` with offline roles never opened the folder and
    reported the repair accepted, as if it had replayed an earlier one."""
    audit, out = _a1_audit(tmp_path), tmp_path / "rep"
    res = RUNNER.invoke(app, ["repair", str(WORLDS / "a1.eair"), "--audit", str(audit),
                              "-o", str(out), "--seeds", "1", "--replay",
                              str(tmp_path / "typo")])
    assert res.exit_code == 1, res.output
    assert "--replay" in res.output and "typo: no such folder" in res.output
    assert not out.exists()


def test_interrupted_repair_says_how_to_resume(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during `eairc repair` exited 130 with no word (audit and audit-study say
    what is kept and to rerun); it says so now."""
    from eairdsl.repair import loop

    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "repair", interrupted)
    audit = tmp_path / "audit"
    audit.mkdir()
    (audit / "index.json").write_text("{}", encoding="utf-8")
    res = RUNNER.invoke(app, ["repair", str(WORLDS / "a1.eair"), "--audit", str(audit),
                              "-o", str(tmp_path / "rep")])
    assert res.exit_code == 130, res.output
    assert "interrupted:" in res.output and "rerun the same command to resume" in res.output


def test_check_report_against_another_world_is_refused(tmp_path: Path) -> None:
    """`eairc check-report R --bundle B --world worlds/d1.eair` for an A1 report printed
    12 V815 errors ("repair surface 'policy compensation_cap' names no declaration of
    the world") as if the report were wrong; the bundle is blind, so the wrong world
    is now refused as such. The right world still validates."""
    audit = _a1_audit(tmp_path)
    report = sorted(p for p in (audit / "reports").glob("ep-*.json")
                    if not p.name.endswith(".validation.json"))[0]
    bundle = audit / "bundles" / report.stem
    res = RUNNER.invoke(app, ["check-report", str(report), "--bundle", str(bundle),
                              "--world", str(WORLDS / "d1.eair")])
    assert res.exit_code == 1, res.output
    assert "V815" not in res.output
    assert "--world d1 declares none of this bundle's participants and tools" in res.output
    res = RUNNER.invoke(app, ["check-report", str(report), "--bundle", str(bundle),
                              "--world", str(WORLDS / "a1.eair")])
    assert res.exit_code == 0, res.output


def test_reimport_into_a_folder_inside_the_source(tmp_path: Path) -> None:
    """`eairc import who-and-when data -o data/imported`, run a second time, read its own
    grader side files (`*.grader.json`) as sources and failed ("1.grader.json: not a
    Who&When trace"). Its output is never a source now, and the rerun is identical."""
    src = tmp_path / "data"
    _who(src / "Hand-Crafted" / "1.json", "a")
    out = src / "imported"
    first = RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(out)])
    assert first.exit_code == 0, first.output
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    again = RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert again.output == first.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files


def test_signals_update_of_a_study_skips_its_oracle_audit(tmp_path: Path) -> None:
    """`eairc signals update STUDY` read every STUDY/audit/*/, the oracle's too: its
    grader-side witness reports (the answer key) were added as occurrences beside the
    real audit's, 385 for 265 findings in a 120-episode A1 study, with Signals of their
    own. A study's grader-side audits are skipped with a note; named alone, one is read."""
    runs = tmp_path / "runs"
    res = RUNNER.invoke(app, ["run", str(WORLDS / "a1.eair"), "--episodes", "2",
                              "--agents", "sim:reckless", "--out", str(runs)])
    assert res.exit_code == 0, res.output
    study = tmp_path / "study"
    for auditor in ("offline", "oracle"):
        res = RUNNER.invoke(app, ["audit", str(runs), "--auditor", auditor, "-o",
                                  str(study / "audit" / auditor)])
        assert res.exit_code == 0, res.output
    alone = RUNNER.invoke(app, ["signals", "update", str(study / "audit" / "offline"),
                                "--store", str(tmp_path / "alone.sqlite")])
    assert alone.exit_code == 0, alone.output
    both = RUNNER.invoke(app, ["signals", "update", str(study), "--store",
                               str(tmp_path / "study.sqlite")])
    assert both.exit_code == 0, both.output
    assert "audit/oracle: a grader-side audit (the oracle), not read with the study" \
        in both.output
    counts = alone.output.splitlines()[0].split("update 1: 1 audit(s)")[1]
    assert counts.startswith(", 2 new session(s), ")
    assert f"update 1: 1 audit(s){counts}" in both.output, (alone.output, both.output)
    oracle = RUNNER.invoke(app, ["signals", "update", str(study / "audit" / "oracle"),
                                 "--store", str(tmp_path / "oracle.sqlite")])
    assert oracle.exit_code == 0, oracle.output
    assert "new occurrence(s)" in oracle.output


def test_oracle_on_imported_traces_says_why(tmp_path: Path) -> None:
    """`eairc audit IMPORTED --auditor oracle` failed every episode with "the trace has
    no result line (an unfinished episode)": an imported trace is not unfinished, it
    has no witness steps. The reason says so now."""
    src = _who(tmp_path / "src" / "Hand-Crafted" / "3.json", "x")
    imp = tmp_path / "imp"
    assert RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(imp)]).exit_code == 0
    res = RUNNER.invoke(app, ["audit", str(imp), "--auditor", "oracle", "-o",
                              str(tmp_path / "a")])
    assert res.exit_code == 1, res.output
    assert "unfinished episode" not in res.output
    assert "an imported (who-and-when) trace has no witness steps" in res.output


def test_audit_study_with_a_lost_trace_is_a_usage_error(tmp_path: Path) -> None:
    """A study whose store lists a trace the folder no longer has (deleted, moved) made
    `eairc audit-study` an "internal error: FileNotFoundError"; it names the trace now."""
    study = tmp_path / "study"
    res = RUNNER.invoke(app, ["study", str(WORLDS / "a1.eair"), "--seeds", "1",
                              "--conditions", "mild", "--out", str(study)])
    assert res.exit_code == 0, res.output
    lost = sorted((study / "traces").rglob("*.jsonl"))[0]
    lost.unlink()
    res = RUNNER.invoke(app, ["audit-study", str(study), "--per-world", "40",
                              "--positives", "1"])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert f"{lost.name}: a trace of the study's store cannot be read" in res.output


def test_import_accepts_a_utf8_byte_order_mark(tmp_path: Path) -> None:
    """A source saved with a UTF-8 byte-order mark (PowerShell's Out-File, Notepad) was
    refused: JSON formats with "Unexpected UTF-8 BOM", a ChatDev log with "line 1: text
    before the first log entry" (the mark is invisible). The mark is dropped; the trace
    is the one the same file without it gives, but for the source's own sha256."""
    plain = _who(tmp_path / "a" / "Hand-Crafted" / "5.json", "hello")
    marked = tmp_path / "b" / "Hand-Crafted" / "5.json"
    marked.parent.mkdir(parents=True)
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    outs = []
    for src, out in ((plain, tmp_path / "o1"), (marked, tmp_path / "o2")):
        res = RUNNER.invoke(app, ["import", "who-and-when", str(src), "-o", str(out)])
        assert res.exit_code == 0, res.output
        trace = next(out.rglob("*.jsonl")).read_text(encoding="utf-8").splitlines()
        outs.append(trace[1:])  # the events; the header names the file's own sha256
    assert outs[0] == outs[1] and outs[0]
    log = tmp_path / "chat.log"
    log.write_bytes(b"\xef\xbb\xbf[2023-18-09 11:05:21 INFO] **[Preprocessing]**\n\n"
                    b"**ChatDev Starts** (20230918110521)\n")
    res = RUNNER.invoke(app, ["import", "chatdev", str(log), "-o", str(tmp_path / "o3")])
    assert "text before the first log entry" not in res.output, res.output
    # and a predictions file for import-eval
    preds = tmp_path / "p.json"
    preds.write_bytes(b"\xef\xbb\xbf" + json.dumps(
        {"who_and_when_hand_crafted/5": {"agent": "WebSurfer", "step": 1}}).encode())
    res = RUNNER.invoke(app, ["import-eval", str(tmp_path / "o1"), "--predictions",
                              str(preds)])
    assert res.exit_code == 0, res.output
    assert "agent 100.0%" in res.output, res.output


def test_audit_and_bundle_into_a_file_say_so(tmp_path: Path) -> None:
    """`eairc audit RUN -o afile` said "cannot write the bundle afile/bundles/ep-…: Not a
    directory" and `eairc bundle RUN -o afile` "cannot write the bundle afile/ep-…: File
    exists"; both now say -o names a file, and the file is kept."""
    runs = tmp_path / "runs"
    res = RUNNER.invoke(app, ["run", str(WORLDS / "a1.eair"), "--episodes", "1",
                              "--agents", "sim:reckless", "--out", str(runs)])
    assert res.exit_code == 0, res.output
    afile = tmp_path / "afile"
    afile.write_text("keep", encoding="utf-8")
    for cmd, what in (("audit", "an audit folder"), ("bundle", "a bundle folder")):
        res = RUNNER.invoke(app, [cmd, str(runs), "-o", str(afile)])
        assert res.exit_code == 1, res.output
        assert f"afile is a file, not {what}" in res.output, res.output
        assert afile.read_text(encoding="utf-8") == "keep"
