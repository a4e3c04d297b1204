"""Defects a user hit from the outside in `eairc export`, `report`, `rescore` and `study`.

Each test runs the command the way a user did and asserts what they should have seen;
each failed before its fix (the commit message of the fix says what the user saw).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.api import resolve_world
from eairdsl.cli import app
from eairdsl.study.executor import run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.store import STORE_FILE, Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A four-episode sim study of d1 (canonical, two instances, two seeds)."""
    base = tmp_path_factory.mktemp("qa_study")
    d1 = resolve_world(ROOT / "worlds" / "d1.eair")
    plan = plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 2)
    run_study([d1], [plan], parse_models("sim"), base / "study", workers=1)
    return base / "study"


def _copy(study: Path, tmp_path: Path, name: str = "study") -> Path:
    target = tmp_path / name
    shutil.copytree(study, target)
    return target


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ export -o

@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_refuses_to_overwrite_the_results_store(study: Path, tmp_path: Path,
                                                       fmt: str) -> None:
    """`eairc export S -o S/results.sqlite` replaced the store with a CSV file (exit 0)."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    s = _copy(study, tmp_path)
    before = _sha(s / STORE_FILE)
    result = CliRunner().invoke(app, ["export", str(s), "--format", fmt,
                                      "-o", str(s / STORE_FILE)])
    assert result.exit_code == 1, result.output
    assert "is the study's results store" in result.output
    assert _sha(s / STORE_FILE) == before
    with Store.open(s / STORE_FILE, create=False) as store:
        assert store.count() == 4


def test_export_refuses_another_sqlite_database(study: Path, tmp_path: Path) -> None:
    """-o naming another study's store overwrote that store too."""
    s = _copy(study, tmp_path)
    other = _copy(study, tmp_path, "other")
    before = _sha(other / STORE_FILE)
    result = CliRunner().invoke(app, ["export", str(s), "-o", str(other / STORE_FILE)])
    assert result.exit_code == 1
    assert "is a SQLite database" in result.output
    assert _sha(other / STORE_FILE) == before


def test_export_to_a_folder_is_a_usage_error(study: Path, tmp_path: Path) -> None:
    """`eairc export S -o FOLDER` was 'internal error: IsADirectoryError' (exit 3)."""
    s = _copy(study, tmp_path)
    folder = tmp_path / "a folder"
    folder.mkdir()
    result = CliRunner().invoke(app, ["export", str(s), "-o", str(folder)])
    assert result.exit_code == 1, result.output
    assert "is a folder" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_failed_export_leaves_the_earlier_file_whole(study: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An export interrupted half-way left a truncated CSV where the last good one was."""
    from eairdsl.study import store as store_module

    s = _copy(study, tmp_path)
    target = tmp_path / "out" / "r.csv"
    assert CliRunner().invoke(app, ["export", str(s), "-o", str(target)]).exit_code == 0
    good = target.read_bytes()

    def broken(value: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(store_module, "_csv_cell", broken)
    with Store.open(s / STORE_FILE, create=False) as store, pytest.raises(KeyboardInterrupt):
        store_module.export_csv(store, target)
    assert target.read_bytes() == good
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.csv"]  # no part file left


# ------------------------------------------------------------------ report: damaged traces

def test_report_survives_damaged_traces(study: Path, tmp_path: Path) -> None:
    """A cut, garbled or non-UTF-8 trace file made `eairc report` stop with 'internal error:
    JSONDecodeError' (exit 3) and no episodes.html; now the report is written and the viewer
    shows what it could read of each damaged trace with what is wrong."""
    import re

    from report_viewer import decode, node, render, rows_html

    s = _copy(study, tmp_path)
    traces = sorted((s / "traces").rglob("*.jsonl"))
    assert len(traces) == 4
    whole = traces[0].read_text(encoding="utf-8")
    traces[0].write_text(whole[: len(whole) - 40], encoding="utf-8")  # cut in the result line
    traces[1].write_text("garbage{\n", encoding="utf-8")
    traces[2].write_bytes(b"\xff\xfe not utf-8")
    result = CliRunner().invoke(app, ["report", str(s), "--resamples", "10"])
    assert result.exit_code == 0, result.output
    episodes = rows_html(s / "report")
    links = sorted(set(re.findall(r'href="(trace\.html#c\d+\.\d+)"', episodes)))
    assert len(links) == 4
    decoded = {decode(s / "report", link)["raw"].rsplit("/", 1)[1]: (link, decode(
        s / "report", link)) for link in links}
    cut = decoded[traces[0].name][1]
    assert cut["header"]["condition"] == "canonical"  # the readable lines are kept
    assert cut["events"]
    assert any("line" in d and "not JSON" in d for d in cut["damaged"])
    assert any("not JSON" in d for d in decoded[traces[1].name][1]["damaged"])
    assert any("cannot be read" in d for d in decoded[traces[2].name][1]["damaged"])
    assert "damaged" not in decoded[traces[3].name][1]  # a whole trace: as before
    if node() is not None:
        shown = render(s / "report", decoded[traces[1].name][0])["html"]
        assert "This trace file is damaged" in shown and "not JSON" in shown
        assert "damaged" not in render(s / "report", decoded[traces[3].name][0])["html"]


# ------------------------------------------------------------------ rescore -> report

METRIC = "  metric inquiry_used = count(calls(ask_delegating_agent)) > 0\n"


@pytest.fixture(scope="module")
def two_worlds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A sim study of d1 and c1 (one seed, instances drawn per seed) and a d1 variant with
    one more metric: (study, d1.eair, d1 variant)."""
    base = tmp_path_factory.mktemp("qa_rescore")
    worlds = base / "worlds"
    shutil.copytree(ROOT / "worlds", worlds)
    d1, c1 = (resolve_world(worlds / f"{w}.eair") for w in ("d1", "c1"))
    plans = [plan_world(d1, ["canonical", "repaired"], "seed", 2),
             plan_world(c1, [c.name for c in c1.conditions][:2], "seed", 2)]
    run_study([d1, c1], plans, parse_models("sim"), base / "study", workers=1)
    text = (worlds / "d1.eair").read_text(encoding="utf-8")
    assert METRIC in text
    variant = worlds / "d1_v2.eair"
    variant.write_text(text.replace(METRIC, METRIC + "  metric asks = count(calls("
                                    "ask_delegating_agent))\n"), encoding="utf-8")
    return base / "study", worlds / "d1.eair", variant


def _rescore(study: Path, original: Path, variant: Path, out: Path) -> None:
    result = CliRunner().invoke(app, ["rescore", str(study), "--world", str(variant),
                                      "--original", str(original), "--out", str(out)])
    assert result.exit_code == 0, result.output


def test_a_rescored_study_reports_its_traces(two_worlds: tuple[Path, Path, Path],
                                             tmp_path: Path) -> None:
    """`eairc rescore S --out R` then `eairc report R` (as rescore's help says) linked no
    episode to the trace viewer: R's trace paths named the original study, outside R, which
    the report does not follow; and the other world's rows kept paths relative to S that
    did not exist under R. Now R holds its own copies of the traces and every row of
    every world opens in R's viewer, with raw links relative to the report folder."""
    from report_viewer import decode, rows_html

    study, original, variant = two_worlds
    out = tmp_path / "rescored"
    _rescore(study, original, variant, out)
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
    assert {r["world"] for r in rows} == {"c1", "d1"}
    for row in rows:
        path = Path(row["trace_path"])
        path = path if path.is_absolute() else out / path
        assert path.is_file(), row
        assert path.resolve().is_relative_to(out.resolve())
    result = CliRunner().invoke(app, ["report", str(out), "--resamples", "10"])
    assert result.exit_code == 0, result.output
    report = out / "report"
    episodes = rows_html(report)
    import re

    links = set(re.findall(r'href="(trace\.html#c\d+\.\d+)"', episodes))
    assert len(links) == len(rows)
    for link in links:
        raw = decode(report, link)["raw"]
        assert not raw.startswith("/") and (report / raw).is_file(), raw


def test_a_rescored_study_outlives_its_original(two_worlds: tuple[Path, Path, Path],
                                                tmp_path: Path) -> None:
    """The rescored folder is a study of its own: removing the original leaves its traces."""
    study, original, variant = two_worlds
    copy = _copy(study, tmp_path, "original")
    out = tmp_path / "rescored"
    _rescore(copy, original, variant, out)
    shutil.rmtree(copy)
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
    assert rows and all(Path(r["trace_path"]).is_file() for r in rows)
    assert CliRunner().invoke(app, ["export-otel", str(out), "-o",
                                    str(tmp_path / "o.json")]).exit_code == 0


def test_an_interrupted_rescore_leaves_no_half_store(two_worlds: tuple[Path, Path, Path],
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a rescore left OUT/results.sqlite as an unrescored copy of the original
    (old digest, old metrics) and the rerun refused it as 'exists'. Now nothing is left at
    OUT/results.sqlite and the same command runs again."""
    from eairdsl.study import rescore as rescore_module
    from eairdsl.study.rescore import rescore

    study, original, variant = two_worlds
    out = tmp_path / "rescored"
    real = rescore_module.measure_episode
    calls = []

    def stop_on_the_third(episode: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(episode)  # type: ignore[arg-type]

    monkeypatch.setattr(rescore_module, "measure_episode", stop_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        rescore(study, resolve_world(original), resolve_world(variant), out)
    assert not (out / STORE_FILE).exists()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    monkeypatch.setattr(rescore_module, "measure_episode", real)
    _rescore(study, original, variant, out)
    with Store.open(out / STORE_FILE, create=False) as store:
        assert {w["digest"] for w in store.worlds() if w["name"] == "d1"} == {
            resolve_world(variant).digest}


# ------------------------------------------------------------------ report -o

def test_report_to_a_file_is_a_usage_error(study: Path, tmp_path: Path) -> None:
    """`eairc report S -o FILE` (or -o S/results.sqlite) was 'internal error:
    FileExistsError' (exit 3); a folder under a file likewise."""
    s = _copy(study, tmp_path)
    before = _sha(s / STORE_FILE)
    for target in (s / STORE_FILE, s / STORE_FILE / "report"):
        result = CliRunner().invoke(app, ["report", str(s), "-o", str(target),
                                          "--resamples", "0"])
        assert result.exit_code == 1, result.output
        assert "not a folder" in result.output or "cannot create the report folder" in \
            result.output
        assert "internal error" not in result.output
    assert _sha(s / STORE_FILE) == before


# ------------------------------------------------------------------ study: hints and --replay

def test_the_next_step_hint_can_be_pasted_for_a_folder_with_spaces(tmp_path: Path) -> None:
    """`eairc study … --out "my runs/d1"` ended with "next: `eairc report my runs/d1`",
    which run as printed names two folders; the hint now quotes the folder."""
    import shlex

    out = tmp_path / "my runs" / "d1 ü"
    result = CliRunner().invoke(app, ["study", str(ROOT / "worlds" / "d1.eair"), "--seeds", "1",
                                      "--conditions", "canonical", "--instances", "hr-1",
                                      "--workers", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    hint = result.output.split("next: `", 1)[1].split("`", 1)[0]
    assert shlex.split(hint) == ["eairc", "report", str(out)]


def test_study_replay_of_a_cassette_file_says_what_it_takes(tmp_path: Path) -> None:
    """`eairc study … --replay S/cassettes/m.jsonl` said 'cassette S/cassettes/m.jsonl/m.jsonl
    does not exist'; a file is now refused saying the study takes a folder."""
    cassette = tmp_path / "cassettes" / "m.jsonl"
    cassette.parent.mkdir()
    cassette.write_text("", encoding="utf-8")
    result = CliRunner().invoke(app, ["study", str(ROOT / "worlds" / "d1.eair"), "--models",
                                      "m=openai/x-steady", "--seeds", "1", "--replay",
                                      str(cassette), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "a study replays from a study folder or its cassettes/ folder" in result.output
    assert "m.jsonl/m.jsonl" not in result.output
    assert not (tmp_path / "out").exists()


def test_rescore_of_the_current_folder_finds_its_default_out(
        two_worlds: tuple[Path, Path, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`cd runs/d1 && eairc rescore . --world … --original …` was 'internal error:
    ValueError: PosixPath('.') has an empty name' (exit 3); the default --out is now
    named after the resolved folder, beside it."""
    study, original, variant = two_worlds
    s = _copy(study, tmp_path, "d1 study")
    monkeypatch.chdir(s)
    result = CliRunner().invoke(app, ["rescore", ".", "--world", str(variant),
                                      "--original", str(original)])
    assert result.exit_code == 0, result.output
    made = [p.name for p in tmp_path.iterdir() if p.name.startswith("d1 study-rescored-")]
    assert made == [f"d1 study-rescored-{resolve_world(variant).digest[:8]}"]
    assert (tmp_path / made[0] / STORE_FILE).is_file()


# ------------------------------------------------------------------ study: trace cannot be written

@pytest.mark.parametrize("workers", [1, 2])
def test_a_trace_that_cannot_be_written_stops_the_study_unrecorded(tmp_path: Path,
                                                                   workers: int) -> None:
    """With OUT/traces a file (or a full disk, no permission), every episode was recorded as
    execution-invalid ('worker error: UsageError: cannot write the trace …'), three attempts
    per cell, exit 0; the cells counted as done, so after fixing the folder a resume ran
    nothing and the study was lost. Now the study stops with the message (exit 1), nothing
    is recorded, and the same command afterwards runs every cell."""
    from eairdsl.study.executor import StudyError

    out = tmp_path / "study"
    out.mkdir()
    (out / "traces").write_text("not a folder", encoding="utf-8")
    d1 = resolve_world(ROOT / "worlds" / "d1.eair")
    plan = plan_world(d1, ["canonical"], ["hr-1", "hr-2"], 1)
    with pytest.raises(StudyError, match="cannot write the trace"):
        run_study([d1], [plan], parse_models("sim"), out, workers=workers)
    with Store.open(out / STORE_FILE, create=False) as store:
        assert store.count() == 0
    (out / "traces").unlink()
    run_study([d1], [plan], parse_models("sim"), out, workers=workers)
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
    assert len(rows) == 2 and all(r["valid"] for r in rows)


def test_the_cli_says_why_the_study_stopped(tmp_path: Path) -> None:
    out = tmp_path / "study"
    out.mkdir()
    (out / "traces").write_text("not a folder", encoding="utf-8")
    result = CliRunner().invoke(app, ["study", str(ROOT / "worlds" / "d1.eair"), "--seeds", "1",
                                      "--conditions", "canonical", "--instances", "hr-1",
                                      "--workers", "1", "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "cannot write the trace" in result.output and "rerun the same command" in \
        result.output


# ------------------------------------------------------------------ study: two runs, one folder

def test_a_second_study_into_a_running_folder_is_refused(tmp_path: Path) -> None:
    """Two `eairc study` runs into one --out at once: the second stopped with 'internal
    error: IntegrityError: UNIQUE constraint failed' (exit 3) after writing the same trace
    files as the first. It is now refused up front (exit 1), and runs once the first ends."""
    import subprocess
    import sys

    out = tmp_path / "study"
    out.mkdir()
    args = ["study", str(ROOT / "worlds" / "d1.eair"), "--seeds", "1", "--conditions",
            "canonical", "--instances", "hr-1", "--workers", "1", "--out", str(out)]
    holder = subprocess.Popen(  # another process holding the lock a running study holds
        [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); "
         "fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
         str(out / ".study.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, result.output
        assert "another eairc study is running into" in result.output
        assert not (out / STORE_FILE).exists() and not (out / "traces").exists()
    finally:
        holder.communicate("", timeout=60)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with Store.open(out / STORE_FILE, create=False) as store:
        assert store.count() == 1


def test_two_studies_at_once_record_each_cell_once(tmp_path: Path) -> None:
    """The same study started twice at the same moment, as two processes."""
    import subprocess
    import sys

    out = tmp_path / "study"
    cmd = [sys.executable, "-m", "eairdsl.cli", "study", str(ROOT / "worlds" / "c1.eair"),
           "--seeds", "2", "--workers", "1", "--out", str(out)]
    env = {**__import__("os").environ, "LITELLM_OFFLINE_MODE": "true",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env) for _ in range(2)]
    outputs = [(r.communicate(timeout=300)[0], r.returncode) for r in runs]
    codes = sorted(code for _, code in outputs)
    assert codes in ([0, 0], [0, 1]), outputs  # 0, 0 only if one finished before the other
    for text, code in outputs:
        assert "internal error" not in text, text
        if code == 1:
            assert "another eairc study is running" in text
    with Store.open(out / STORE_FILE, create=False) as store:
        rows = store.rows()
    assert len(rows) == len({(r["condition"], r["instance"], r["seed"]) for r in rows})
