"""The HTML report: its numbers equal a recomputation from the exported CSV; it opens offline."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from eairdsl.api import resolve_world
from eairdsl.cli import app
from eairdsl.study.executor import run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.report import _contrasts, svg_bubbles, svg_rates
from eairdsl.study.stats import fisher_exact, mcnemar_exact, wilson_interval
from eairdsl.study.store import MEASUREMENTS

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
_TD = re.compile(r'<td class="rate" data-world="([^"]+)" data-group="([^"]+)" '
                 r'data-endpoint="([^"]+)" data-k="(\d+)" data-n="(\d+)" '
                 r'data-unassessed="(\d+)">(.*?)</td>', re.S)
_CONTRAST = re.compile(r'<tr data-world="([^"]+)" data-endpoint="([^"]+)" '
                       r'data-condition="([^"]+)" data-k-ref="(\d+)" data-n-ref="(\d+)" '
                       r'data-k="(\d+)" data-n="(\d+)" data-p="([^"]+)" '
                       r'data-test="fisher-unpaired">(.*?)</tr>', re.S)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small D1 study with three models and three conditions, reported and exported."""
    out = tmp_path_factory.mktemp("study") / "d1"
    world = resolve_world(D1)
    plan = plan_world(world, ["canonical", "need_to_know", "repaired"], None, 2)
    run_study([world], [plan], parse_models("sim,sim:reckless,sim:compliant"), out, workers=2)
    runner = CliRunner()
    assert runner.invoke(app, ["report", str(out), "--resamples", "500"]).exit_code == 0
    assert runner.invoke(app, ["export", str(out)]).exit_code == 0
    return out


def _csv(study: Path) -> list[dict[str, str]]:
    with (study / "results.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_report_rates_equal_a_recomputation_from_the_csv(study: Path) -> None:
    """Every rate cell's k, n, percentage and Wilson interval match the exported CSV."""
    rows = [r for r in _csv(study) if r["retained"] == "1"]
    expected: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        for group in ("all", f"model:{r['model']}", f"condition:{r['condition']}"):
            for m in MEASUREMENTS:
                cell = expected[(group, m, r["world"])]
                if r[m] == "":
                    cell[2] += 1
                else:
                    cell[0] += int(r[m])
                    cell[1] += 1
    page = (study / "report" / "index.html").read_text(encoding="utf-8")
    found = _TD.findall(page)
    assert len(found) == len(expected) == (1 + 3 + 3) * len(MEASUREMENTS)
    for world, group, endpoint, k, n, unassessed, text in found:
        assert expected[(group, endpoint, world)] == [int(k), int(n), int(unassessed)]
        lo, hi = wilson_interval(int(k), int(n))  # type: ignore[misc]
        assert f"{100 * int(k) / int(n):.1f}%" in text
        assert f"{int(k)}/{int(n)}" in text
        assert f"{100 * lo:.1f}–{100 * hi:.1f}%" in text


def test_report_contrasts_equal_a_recomputation_from_the_csv(study: Path) -> None:
    """Condition contrasts are unpaired: each condition's retained, assessed episodes
    against the reference's over the model × instance cells both have, with Fisher's
    exact p (conditions do not share draws, so seeds are no pairs)."""
    rows = [r for r in _csv(study) if r["retained"] == "1"]
    page = (study / "report" / "index.html").read_text(encoding="utf-8")
    assert "Fisher exact, unpaired: conditions do not share draws" in page
    found = _CONTRAST.findall(page)
    assert {(f[1], f[2]) for f in found} == {(e, c) for e in ("realized", "utility")
                                             for c in ("need_to_know", "repaired")}
    for _world, endpoint, condition, k_ref, n_ref, k, n, p, text in found:
        by: dict[str, dict[tuple[str, str], list[int]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            if r[endpoint] != "":
                by[r["condition"]][(r["model"], r["instance"])].append(int(r[endpoint]))
        shared = set(by["canonical"]) & set(by[condition])
        x = [v for key in shared for v in by["canonical"][key]]
        y = [v for key in shared for v in by[condition][key]]
        assert (int(k_ref), int(n_ref), int(k), int(n)) == (sum(x), len(x), sum(y), len(y))
        assert f"{100 * (sum(y) / len(y) - sum(x) / len(x)):+.1f}pp" in text
        expected = fisher_exact(sum(x), len(x) - sum(x), sum(y), len(y) - sum(y))
        assert float(p) == pytest.approx(expected, rel=1e-5)
        assert "McNemar" not in text


def test_condition_contrasts_are_unpaired_over_shared_model_instance_cells() -> None:
    """Conditions with different episode counts and cells the other lacks: every assessed
    episode of a shared model × instance cell counts on its own side (no seed matching),
    cells of one side only are left out, and p is Fisher's, not McNemar's."""
    def row(condition: str, model: str, instance: str, seed: int, realized: int | None,
            utility: int | None = 1) -> dict[str, Any]:
        return {"world": "w", "model": model, "condition": condition, "instance": instance,
                "seed": seed, "rep": 0, "realized": realized, "utility": utility}

    rows = [row("ref", "m1", "i1", s, v) for s, v in enumerate([1, 1, 1, 0])]      # 3/4
    rows += [row("ref", "m2", "i1", s, v) for s, v in enumerate([1, 0])]           # 1/2
    rows += [row("ref", "m1", "i9", 0, 1)]                     # only in ref: not counted
    rows += [row("new", "m1", "i1", s, v) for s, v in enumerate([0, 0, 0, 0, 1, 0])]  # 1/6
    rows += [row("new", "m2", "i1", 7, 0), row("new", "m2", "i1", 8, None)]       # 0/1
    rows += [row("new", "m3", "i1", 0, 0)]                     # model only in new
    contrasts = {c.endpoint: c for c in _contrasts(rows, ["ref", "new"], 200, 0)}
    c = contrasts["realized"]
    assert (c.k_ref, c.n_ref, c.k, c.n) == (4, 6, 1, 7)
    assert c.diff == pytest.approx(1 / 7 - 4 / 6)
    assert c.p == pytest.approx(fisher_exact(4, 2, 1, 6))
    assert c.p != pytest.approx(mcnemar_exact(3, 0))  # what seed-matched "pairs" gave
    assert c.test == "Fisher exact, unpaired: conditions do not share draws"
    # one instance: the interval's clusters are the seeds both conditions ran (0–3)
    assert c.boot is not None and c.unit == "seed" and c.boot.clusters == 4
    assert c.boot.lo <= c.diff <= c.boot.hi and c.boot.lo < c.boot.hi


def _contrast_row(condition: str, model: str, instance: str, seed: int,
                  realized: int) -> dict[str, Any]:
    return {"world": "w", "model": model, "condition": condition, "instance": instance,
            "seed": seed, "rep": 0, "realized": realized, "utility": 1}


def test_contrast_intervals_draw_instances_never_models() -> None:
    """One model over three instances gets an interval of nonzero width whose clusters are
    the instances (issue 28 item 1: not a zero-width interval from one model)."""
    rows = [_contrast_row("ref", "sim", i, s, int(s < 3)) for i in ("a", "b", "c")
            for s in range(5)]
    rows += [_contrast_row("new", "sim", i, s, int(s < n)) for i, n in
             (("a", 1), ("b", 2), ("c", 0)) for s in range(5)]
    c = {c.endpoint: c for c in _contrasts(rows, ["ref", "new"], 500, 0)}["realized"]
    assert c.boot is not None and c.unit == "instance" and c.boot.clusters == 3
    assert c.boot.lo < c.diff < c.boot.hi and c.no_interval is None


def test_contrast_with_one_instance_and_one_seed_says_why_it_has_no_interval() -> None:
    """Two profiles (a profile and its `:mechanics` twin, say) on one instance and one seed
    are not a sample: no interval, and a reason instead of a dash alone."""
    rows = [_contrast_row(cond, m, "a", 0, v) for cond, v in (("ref", 1), ("new", 0))
            for m in ("sim:reckless", "sim:reckless:mechanics")]
    c = {c.endpoint: c for c in _contrasts(rows, ["ref", "new"], 500, 0)}["realized"]
    assert c.boot is None and c.unit is None
    assert c.no_interval == "one instance and one seed: no cluster to resample"
    assert (c.k_ref, c.n_ref, c.k, c.n) == (2, 2, 0, 2)


def test_report_is_self_contained_with_charts_and_trace_pages(study: Path) -> None:
    """index, episodes and the trace viewer load nothing from outside; every episode links
    to the viewer, whose chunk files hold its trace."""
    import report_viewer

    folder = study / "report"
    index = (folder / "index.html").read_text(encoding="utf-8")
    episodes = (folder / "episodes.html").read_text(encoding="utf-8")
    viewer = (folder / "trace.html").read_text(encoding="utf-8")
    assert index.count("<svg") >= 3  # bubbles + two charts for the world
    for page in (index, episodes, viewer):
        assert not re.search(r'(src|href)="(https?:)?//', page)
        assert "<link" not in page and "<script src" not in page
    assert not list((folder / "traces").glob("*.html"))  # no page per trace any more
    links = re.findall(r'href="(trace\.html#c\d{4}\.\d+)"', report_viewer.rows_html(folder))
    assert len(links) == len(set(links)) == len(_csv(study))
    for link, row in zip(links, _csv(study), strict=True):
        trace = report_viewer.decode(folder, link)
        assert (trace["row"]["model"], trace["row"]["instance"]) == (row["model"], row["instance"])
        assert (folder / trace["raw"]).resolve() == (study / row["trace_path"]).resolve()
    first = report_viewer.decode(folder, links[0])
    assert first["events"][0]["step"] == "s0001"


def test_a_report_without_traces_removes_the_earlier_viewer(study: Path,
                                                             tmp_path: Path) -> None:
    """--no-traces after a report with the viewer: trace.html and its chunk files are gone
    (they showed traces the new episode list does not link); other files stay."""
    import report_viewer

    out = tmp_path / "r"
    runner = CliRunner()
    assert runner.invoke(app, ["report", str(study), "-o", str(out), "--resamples", "200"]
                         ).exit_code == 0
    assert (out / "trace.html").is_file() and list((out / "traces").glob("c*.js"))
    (out / "traces" / "notes.txt").write_text("mine", encoding="utf-8")
    assert runner.invoke(app, ["report", str(study), "-o", str(out), "--resamples", "200",
                               "--no-traces"]).exit_code == 0
    assert not (out / "trace.html").exists()
    assert [p.name for p in (out / "traces").iterdir()] == ["notes.txt"]
    rows = report_viewer.rows_html(out)
    assert "trace.html#" not in rows and rows.count("<tr ") == len(_csv(study))
    (out / "traces" / "notes.txt").unlink()
    assert runner.invoke(app, ["report", str(study), "-o", str(out), "--resamples", "200",
                               "--no-traces"]).exit_code == 0
    assert not (out / "traces").exists()  # an emptied chunk folder goes too


def test_charts_handle_empty_and_absent_cells() -> None:
    """A chart row without assessed episodes says so; an absent model gets a grey dot."""
    from eairdsl.study.report import RateCell

    empty = svg_rates([("x", RateCell()), ("y", RateCell(k=1, n=2))], "t")
    assert "no assessed episode" in empty and "1/2" in empty
    bubbles = svg_bubbles(["m1", "m2"], ["a1", "d1"], {("m1", "a1"): RateCell(k=3, n=6)}, "t")
    assert bubbles.count('class="absent"') == 3 and "3/6" in bubbles


def test_cli_stays_light_and_lists_study_commands() -> None:
    """`eairc --help` lists study, export and report without importing the study machinery."""
    code = ("import sys, eairdsl.cli\n"
            "heavy = [m for m in ('eairdsl.study.executor', 'eairdsl.study.report', 'simpy',"
            " 'jinja2', 'sqlite3', 'distributed') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("study", "export", "report"):
        assert command in result.output


def _summary_row(output: str, condition: str) -> Any:
    return next(line for line in output.splitlines() if f" {condition} " in line)


def test_study_command_prints_a_summary_and_resumes(tmp_path: Path) -> None:
    """`eairc study` ends with a summary table; the same command again runs nothing new."""
    out = tmp_path / "run"
    # read_acl filters the specialist's reads, which stops even a reckless specialist (the
    # F.11 `repaired` binds disclosure by the handoff and an instruction, which it ignores)
    args = ["study", str(D1), "--models", "sim:reckless", "--conditions", "canonical,read_acl",
            "--instances", "hr-1,fin-1", "--seeds", "2", "--workers", "1", "--out", str(out)]
    runner = CliRunner()
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "4/4 100.0%" in _summary_row(first.output, "canonical")
    assert "0/4 0.0%" in _summary_row(first.output, "read_acl")
    second = runner.invoke(app, args)
    assert second.exit_code == 0 and "0 episode(s) run" in second.output
    bad = runner.invoke(app, [*args[:-2], "--out", str(out), "--conditions", "nope"])
    assert bad.exit_code == 1 and "no condition 'nope'" in bad.output
    assert runner.invoke(app, [*args, "--executor", "ray"]).exit_code == 2


_SCRIPT = "<script>alert(1)</script>"
_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_report_escapes_world_titles_and_trace_messages(tmp_path: Path) -> None:
    """A world title and an instance's message holding `<script>` reach the report as text."""
    import json
    import shutil

    folder = tmp_path / "world"
    shutil.copytree(ROOT / "docs" / "examples", folder)
    entry = folder / "first_world.eair"
    entry.write_text(entry.read_text(encoding="utf-8").replace(
        'title "Two desks, one refund budget"', f'title "Desks {_SCRIPT}"'), encoding="utf-8")
    instances = folder / "first_world" / "instances.json"
    rows = json.loads(instances.read_text(encoding="utf-8"))
    rows[0]["complaint_a"] = f"Refund me {_SCRIPT} now."
    instances.write_text(json.dumps(rows), encoding="utf-8")
    world = resolve_world(entry)
    plan = plan_world(world, ["baseline"], [rows[0]["id"]], 1)
    out = tmp_path / "study"
    run_study([world], [plan], parse_models("sim"), out, workers=1)
    assert CliRunner().invoke(app, ["report", str(out), "--resamples", "100"]).exit_code == 0
    report = out / "report"
    pages = {p.name: p.read_text(encoding="utf-8") for p in report.rglob("*.html")}
    assert set(pages) == {"index.html", "episodes.html", "trace.html"}
    for name, page in pages.items():
        assert "<script>alert" not in page, name
    assert _ESCAPED in pages["index.html"]
    import report_viewer

    rows = report_viewer.rows_html(report)
    assert "<script>alert" not in rows
    link = re.search(r'href="(trace\.html#[^"]+)"', rows)
    assert link
    trace = report_viewer.decode(report, link.group(1))  # the data keeps the text as it was
    assert any(f"Refund me {_SCRIPT} now." in str(e.get("content")) for e in trace["events"])
    if report_viewer.node() is None:
        pytest.skip("node is not installed: the viewer's escaping is not exercised")
    shown = report_viewer.render(report, link.group(1))["html"]  # what the viewer puts on screen
    assert "<script>alert" not in shown and f"Refund me {_ESCAPED} now." in shown


def test_charts_escape_their_labels_and_titles() -> None:
    """Chart titles, row labels, model and world names with HTML come out escaped."""
    from eairdsl.study.report import RateCell

    rates = svg_rates([(_SCRIPT, RateCell(k=1, n=2))], f"t {_SCRIPT}")
    bubbles = svg_bubbles([_SCRIPT], [f'w"{_SCRIPT}'], {(_SCRIPT, f'w"{_SCRIPT}'):
                                                        RateCell(k=1, n=2)}, _SCRIPT)
    for chart in (rates, bubbles):
        assert "<script>" not in chart and _ESCAPED in chart
    assert 'w&quot;&lt;script&gt;' in bubbles


_ROW = re.compile(r'<tr class="[^"]*"((?: data-f-[a-z_]+="[^"]*")+)>(.*?)</tr>', re.S)


def test_episode_list_filters_sorts_and_colours_by_meaning(study: Path) -> None:
    """Each row carries its model, condition and measurements for the filters, the headings
    sort, and an outcome is coloured by what it means (utility yes good, realized yes bad)."""
    import report_viewer

    from eairdsl.study.report import ENDPOINT_POLARITY

    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    csv_rows = _csv(study)
    found = _ROW.findall(report_viewer.rows_html(study / "report"))
    assert len(found) == len(csv_rows)
    for (attrs, body), r in zip(found, csv_rows, strict=True):
        data = dict(re.findall(r'data-f-([a-z_]+)="([^"]*)"', attrs))
        assert (data["world"], data["model"], data["condition"]) == (
            r["world"], r["model"], r["condition"])
        assert (data["valid"], data["retained"]) == (r["valid"], r["retained"])
        marks = re.findall(r'<span class="(yes|no) (good|bad|neutral)">', body)
        assert len(marks) + body.count('<span class="none">') == len(MEASUREMENTS)
        for m in MEASUREMENTS:
            assert data[m] == (r[m] or "-")
        assessed = [m for m in MEASUREMENTS if r[m] != ""]
        for m, (word, colour) in zip(assessed, marks, strict=True):
            assert word == ("yes" if r[m] == "1" else "no")
            assert colour == ENDPOINT_POLARITY[m][0 if r[m] == "1" else 1]
    assert ENDPOINT_POLARITY["utility"] == ("good", "bad")
    assert ENDPOINT_POLARITY["realized"] == ("bad", "good")
    for key in ("world", "model", "condition", *MEASUREMENTS, "valid", "retained"):
        assert f'<select data-filter="{key}">' in page
    for model in {r["model"] for r in csv_rows}:
        assert f'<option value="{model}">' in page
    assert 'class="searchable sortable"' in page and page.count("<th data-sort=") >= 16
    assert "simulated end" in page


def test_report_pages_script_is_valid_javascript(study: Path, tmp_path: Path) -> None:
    """The filter and sort script parses (checked with node when it is installed)."""
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    assert script
    (tmp_path / "page.js").write_text(script.group(1), encoding="utf-8")
    subprocess.run([node, "--check", str(tmp_path / "page.js")], check=True)


def test_report_shows_each_conditions_lever_values(study: Path) -> None:
    """The by-condition table lists the levers of each condition as its traces record them."""
    import json

    index = (study / "report" / "index.html").read_text(encoding="utf-8")
    cells = dict(re.findall(r'<td class="levers" data-levers-condition="([^"]+)">(.*?)</td>',
                            index, re.S))
    assert set(cells) == {"canonical", "need_to_know", "repaired"}
    for r in _csv(study):
        with (study / r["trace_path"]).open(encoding="utf-8") as fh:
            levers = json.loads(fh.readline())["levers"]
        assert levers
        for k, v in levers.items():
            shown = ("true" if v else "false") if isinstance(v, bool) else str(v)
            assert f"<code>{k} = {shown}</code>" in cells[r["condition"]]
    assert cells["canonical"] != cells["repaired"]


def test_times_read_as_days_hours_and_minutes(study: Path) -> None:
    from eairdsl.study.report import fmt_minutes

    assert [fmt_minutes(x) for x in (None, 0, 0.0, 4.0, 45, 1.5, 90, 1440, 1500.25, 2 * 1440 + 5,
                                     59.96, -30)] == [
        "—", "0m", "0m", "4m", "45m", "1.5m", "1h 30m", "1d 0h 0m", "1d 1h 0.2m", "2d 0h 5m",
        "1h 0m", "-30m"]
    import report_viewer

    if report_viewer.node() is None:
        pytest.skip("node is not installed: the viewer's times are not exercised")
    link = re.search(r'href="(trace\.html#[^"]+)"', report_viewer.rows_html(study / "report"))
    assert link
    values = [None, 0, 4.0, 45, 1.5, 90, 1440, 1500.25, 2 * 1440 + 5, 59.96, -30, 0.25, 61.75]
    shown = report_viewer.render(study / "report", link.group(1), values)
    assert shown["minutes"] == [fmt_minutes(x) for x in values]  # the viewer's = Python's
    assert 'simulated minutes">0m</td>' in shown["html"]
    assert " min</td>" not in shown["html"]


#: columns of the episode list: world, model, condition, instance, seed, …, simulated end
_SEED, _END = 4, 8 + len(MEASUREMENTS) + 1


def test_episode_list_page_is_bounded_and_its_script_pages_filters_and_sorts_every_row(
        study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """episodes.html held one table row per attempt and grew with the study (4.4 MiB and
    142k elements at 5,460 episodes). Now its rows are in chunk files under episodes/
    and the page's size does not depend on the study's; the page's script loads every
    chunk, then filters, sorts and pages over all rows, one page in the table."""
    import shutil
    import sqlite3

    import report_viewer

    from eairdsl.study import episode_list
    from eairdsl.study.report import write_report

    csv_rows = _csv(study)
    rows = episode_list.episode_rows(study / "report")
    assert len(rows) == len(csv_rows) > 100
    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    assert "<tr class=" not in page and "data-f-world" not in page  # no row in the page
    # a study twice as large: the same page, apart from its row and chunk counts
    bigger = tmp_path / "bigger" / study.name  # (the page names the study folder)
    shutil.copytree(study, bigger)
    shutil.rmtree(bigger / "report")
    with sqlite3.connect(bigger / "results.sqlite") as db:
        columns = [r[1] for r in db.execute("PRAGMA table_info(episodes)") if r[1] != "id"]
        names = ", ".join(columns)
        db.execute(f"INSERT INTO episodes ({names}) SELECT "
                   + ", ".join("seed + 1000" if c == "seed" else c for c in columns)
                   + " FROM episodes")
    monkeypatch.setattr(episode_list, "CHUNK_ROWS", 40)  # several chunk files
    write_report(bigger, resamples=0)
    out = bigger / "report"
    grown = (out / "episodes.html").read_text(encoding="utf-8")
    counts = re.compile(r'data-rows="\d+" data-chunks="\d+"')
    assert counts.sub("", grown) == counts.sub("", page)
    assert f'data-rows="{2 * len(rows)}" data-chunks="{-(-2 * len(rows) // 40)}"' in grown
    big_rows = episode_list.episode_rows(out)
    assert len(big_rows) == 2 * len(rows)
    assert len(list((out / "episodes").glob("e*.js"))) == -(-len(big_rows) // 40)
    if report_viewer.node() is None:
        pytest.skip("node is not installed: the list page's script is not exercised")
    from eairdsl.study.store import STORE_FILE, Store

    with Store.open(bigger / STORE_FILE, create=False) as store:
        stored = store.rows()
    index = {html: i for i, html in enumerate(big_rows)}
    assert len(index) == len(big_rows)

    def seed(html: str) -> int:
        return int(stored[index[html]]["seed"])

    def end(html: str) -> float:
        return float(stored[index[html]]["end_time"])

    steps: list[list[Any]] = [["per-page", 25], ["next"], ["next"], ["sort", _SEED],
                              ["sort", _SEED], ["filter", "model", "sim:reckless"],
                              ["text", "need_to_know"], ["filter", "model", ""], ["text", ""],
                              ["sort", _END]]
    shown = report_viewer.episode_page(out, steps)
    opened = shown[0]
    n = len(big_rows)
    assert opened["loaded"] == [f"episodes/e{i:04d}.js" for i in range(1, -(-n // 40) + 1)]
    assert opened["count"] == f"{n} of {n} shown" and opened["rows"] == big_rows[:100]
    assert opened["page"] == f"page 1 of {-(-n // 100)} (rows 1–100)" and opened["prev"]
    per, first, third = shown[1], shown[2], shown[3]
    assert per["rows"] == big_rows[:25] and per["page"].startswith(f"page 1 of {-(-n // 25)}")
    assert first["rows"] == big_rows[25:50] and third["rows"] == big_rows[50:75]
    up = sorted(big_rows, key=seed)  # stable, as the page's sort
    assert shown[4]["rows"] == up[:25] and shown[4]["sorted"][_SEED] == "ascending"
    assert seed(up[-1]) >= 1000  # the sort ran over every chunk's rows, not one page
    down = sorted(up, key=lambda h: -seed(h))
    assert shown[5]["rows"] == down[:25] and shown[5]["sorted"][_SEED] == "descending"
    reckless = [h for h in down if stored[index[h]]["model"] == "sim:reckless"]
    assert shown[6]["count"] == f"{len(reckless)} of {n} shown"
    assert shown[6]["rows"] == reckless[:25]
    ntk = [h for h in reckless if stored[index[h]]["condition"] == "need_to_know"]
    assert 0 < len(ntk) < len(reckless) and shown[7]["rows"] == ntk[:25]
    assert shown[7]["count"] == f"{len(ntk)} of {n} shown"
    assert shown[9]["count"] == f"{n} of {n} shown" and shown[9]["rows"] == down[:25]
    by_end = sorted(big_rows, key=end)  # from the list's own order, not the previous sort's
    assert shown[10]["rows"] == by_end[:25] and shown[10]["sorted"][_SEED] is None
    # episodes.html#words opens filtered; a missing chunk file is said, not a blank list
    (opened,) = report_viewer.episode_page(out, [], hash="#need_to_know%20sim:reckless")
    assert opened["count"] == f"{len(ntk)} of {n} shown"
    (out / "episodes" / "e0002.js").unlink()
    (opened,) = report_viewer.episode_page(out, [])
    assert opened["count"].startswith("Cannot load episodes/e0002.js: rebuild the report")
    assert opened["rows"] == []


_HEAD = re.compile(r'<th data-sort="([^"]+)"(?: class="[^"]*")?><button type="button">'
                   r'([^<]*)</button></th>')


def test_sortable_headings_are_buttons_and_links_name_the_view(study: Path) -> None:
    """Every sortable heading of the report and the episode list holds a <button> (Tab
    reaches it; Enter and Space sort, as a click does) in a th whose data-sort names the
    column for the address (#sort=KEY:asc); no heading is sortable by mouse alone, and the
    report's per-world link opens the list filtered by world (#world=NAME)."""
    report = study / "report"
    page = (report / "episodes.html").read_text(encoding="utf-8")
    head = page.split("<thead>")[1].split("</thead>")[0]
    keys = [k for k, _ in _HEAD.findall(head)]
    assert keys == ["world", "model", "condition", "instance", "seed", "rep", "attempt",
                    "run_seed", *MEASUREMENTS, "valid", "end"]
    # and the trace links' column, not sortable
    assert len(re.findall(r"<th[ >]", head)) == len(keys) + 1
    assert "<th data-sort>" not in page and 'aria-sort=' not in head  # none sorted at first
    index = (report / "index.html").read_text(encoding="utf-8")
    assert 'href="episodes.html#world=d1"' in index
    for table in re.findall(r'<table class="sortable">(.*?)</table>', index, re.S):
        heads = table.split("</thead>")[0]
        assert len(re.findall(r"<th[ >]", heads)) == len(_HEAD.findall(heads)) == 9
    assert "th.querySelector(\"button\")" in index  # the report's own tables' script too
    # the same inputs, the same bytes (the pages carry no state of their own)
    from eairdsl.study.report import write_report

    before = {p.name: p.read_bytes() for p in report.glob("*.html")}
    write_report(study, resamples=500)
    assert {p.name: p.read_bytes() for p in report.glob("*.html")} == before


def test_episode_list_keeps_its_filters_and_sort_in_the_address(
        study: Path, tmp_path: Path) -> None:
    """The list's view is in the URL hash: a shared address (#model=…&condition=…&sort=
    realized:desc) opens with those filters chosen, that column sorted (aria-sort) and the
    rows in that order; every change rewrites the hash (replaceState: no history entry per
    keystroke), a hashchange restores the view it names, and an older #words link still
    fills the text box."""
    import shutil
    import sqlite3

    import report_viewer

    from eairdsl.study import episode_list
    from eairdsl.study.report import write_report
    from eairdsl.study.store import STORE_FILE, Store

    if report_viewer.node() is None:
        pytest.skip("node is not installed: the list page's script is not exercised")
    copy = tmp_path / study.name
    shutil.copytree(study, copy)
    with sqlite3.connect(copy / "results.sqlite") as db:  # a few unassessed: sorted last
        db.execute("UPDATE episodes SET realized = NULL WHERE id % 5 = 0")
    write_report(copy, resamples=0)
    report = copy / "report"
    rows = episode_list.episode_rows(report)
    with Store.open(copy / STORE_FILE, create=False) as store:
        stored = store.rows()
    row_of = {html: stored[i] for i, html in enumerate(rows)}
    head = (report / "episodes.html").read_text(encoding="utf-8").split("</thead>")[0]
    keys = [k for k, _ in _HEAD.findall(head)]
    realized, seed = keys.index("realized"), keys.index("seed")

    def key(html: str, column: str) -> int:
        value = row_of[html][column]
        return -1 if value is None else int(value)

    shared = "#model=sim%3Areckless&condition=need_to_know&sort=realized:desc"
    steps: list[list[Any]] = [["sort", seed], ["hash", "#q=canonical"], ["hash", "#d1"],
                              ["text", ""], ["filter", "valid", "1"]]
    shown = report_viewer.episode_page(report, steps, shared)
    opened = shown[0]
    mine = [h for h in rows if row_of[h]["model"] == "sim:reckless"
            and row_of[h]["condition"] == "need_to_know"]
    assert 0 < len(mine) < len(rows)
    # realized: 1 before 0 before unassessed (empty keys sort last either way), stable
    expected = sorted((h for h in mine if row_of[h]["realized"] is not None),
                      key=lambda h: -key(h, "realized"))
    expected += [h for h in mine if row_of[h]["realized"] is None]
    assert 0 < sum(row_of[h]["realized"] is None for h in mine) < len(mine)
    assert opened["filters"] == {"model": "sim:reckless", "condition": "need_to_know"}
    assert opened["sorted"][realized] == "descending"
    assert [s for i, s in enumerate(opened["sorted"]) if i != realized] == [None] * (
        len(opened["sorted"]) - 1)
    assert opened["rows"] == expected[:100]
    assert opened["count"] == f"{len(mine)} of {len(rows)} shown"
    assert opened["hash"] == shared and opened["replaced"] == 0  # opening writes nothing
    resorted = shown[1]
    assert resorted["hash"] == "#model=sim%3Areckless&condition=need_to_know&sort=seed:asc"
    assert resorted["rows"] == sorted(mine, key=lambda h: key(h, "seed"))[:100]
    assert resorted["sorted"][seed] == "ascending" and resorted["sorted"][realized] is None
    other = shown[2]  # someone pasted another view's address
    assert other["filters"] == {} and other["text"] == "canonical"
    assert other["sorted"] == [None] * len(other["sorted"])
    assert other["rows"] == [h for h in rows if row_of[h]["condition"] == "canonical"][:100]
    assert shown[3]["text"] == "d1" and shown[3]["count"] == f"{len(rows)} of {len(rows)} shown"
    assert shown[4]["hash"] == "" and shown[4]["rows"] == rows[:100]  # nothing left to keep
    assert shown[5]["hash"] == "#valid=1"
