"""`eairc report` shows each episode's audit findings (issue 15, item 4).

A small sim study of D1, audited with the offline auditor into
`STUDY_DIR/audit/offline/` (as `eairc audit STUDY_DIR` does); the report's
episode list shows every verdict, the trace viewer's chunk data holds each
audited trace's findings with the report's step ids and quotes (read back from
the chunk file, and drawn by the page's own script under node), every cited
step is a link to its row and highlighted, each finding has a small SVG of the
episode graph with its boundary and path drawn; a study without audits builds
as before; an invalid report shows its validator diagnostics; hostile audit
files are not followed.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import report_viewer

from eairdsl.api import resolve_world
from eairdsl.audit.contract import (
    Auditor,
    Boundary,
    BundleRef,
    Component,
    Coverage,
    Effect,
    EvidenceUnit,
    Finding,
    PropertyRef,
    Report,
)
from eairdsl.audit.evidence import MANIFEST, Bundle, field_text, sha256_file
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.runner import audit_episodes
from eairdsl.runtime.trace import read_trace
from eairdsl.study.report import write_report
from eairdsl.study.store import STORE_FILE, Store
from eairdsl.study.viewer import decode_chunk, decode_trace

ROOT = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"<tr class=\"[^\"]*\" (data-f-world=.*?)</tr>", re.S)
_CELL = re.compile(r'<td class="audit" data-v="([^"]*)"(?: data-verdict="([^"]*)" '
                   r'data-status="([^"]*)" data-findings="(\d+)" data-leads="(\d+)")?>(.*?)</td>',
                   re.S)
_LINK = re.compile(r'<a href="(trace\.html#c\d{4,}\.\d+)">view</a></td>\s*$')


def _esc(text: str) -> str:
    """As the viewer's `esc` escapes a string."""
    return html.escape(text, quote=True).replace("&#x27;", "&#39;")


def _study(out: Path) -> Path:
    from eairdsl.study.executor import run_study
    from eairdsl.study.grid import parse_models, plan_world

    d1 = resolve_world(ROOT / "worlds" / "d1.eair")
    plan = plan_world(d1, ["canonical", "repaired"], ["hr-1", "fin-2"], 2)
    run_study([d1], [plan], parse_models("sim"), out, workers=1)
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The study before any audit, kept pristine (tests copy it)."""
    return _study(tmp_path_factory.mktemp("plain") / "s")


@pytest.fixture(scope="module")
def audited(plain: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    study = tmp_path_factory.mktemp("audited") / "s"
    shutil.copytree(plain, study)
    audit_episodes(study, study / "audit" / "offline", RulesAuditor())
    write_report(study, resamples=100)
    return study


def _index(folder: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(
        (folder / "index.json").read_text(encoding="utf-8"))["entries"]
    return entries


def _rows(study: Path) -> list[dict[str, Any]]:
    with Store.open(study / STORE_FILE, create=False) as store:
        return store.rows()


def _page_rows(study: Path) -> list[str]:
    """The episode list's rows (episodes.html loads them from its chunk files)."""
    return _ROW.findall(report_viewer.rows_html(study / "report"))


def _by_trace(study: Path, arm: str) -> dict[Path, dict[str, Any]]:
    folder = study / "audit" / arm
    return {(folder / t).resolve(): e for e in _index(folder) for t in e["traces"]}


def _report(study: Path, arm: str, episode: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((study / "audit" / arm / "reports" / f"{episode}.json")
                                      .read_text(encoding="utf-8"))
    return data


Audited = list[tuple[dict[str, Any], str, dict[str, Any]]]


def _audited_rows(study: Path, arm: str = "offline") -> Audited:
    """(store row, viewer link, index entry) of every row the audit covered."""
    entries = _by_trace(study, arm)
    out = []
    for row, page_row in zip(_rows(study), _page_rows(study), strict=True):
        entry = entries.get((study / row["trace_path"]).resolve())
        link = _LINK.search(page_row)
        if entry is not None and link:
            out.append((row, link.group(1), entry))
    return out


# ------------------------------------------------------------------ the episode list
def test_episodes_page_shows_each_verdict(audited: Path) -> None:
    page = (audited / "report" / "episodes.html").read_text(encoding="utf-8")
    assert ('<th data-sort="audit-0" class="audit"><button type="button">audit: offline</button>'
            '</th>') in page
    assert 'data-filter="audit-0"' in page
    rows, page_rows = _rows(audited), _page_rows(audited)
    assert len(rows) == len(page_rows) == 8
    entries = _by_trace(audited, "offline")
    verdicts = []
    for row, page_row in zip(rows, page_rows, strict=True):
        entry = entries[(audited / row["trace_path"]).resolve()]
        key = re.search(r'data-f-audit-0="([^"]*)"', page_row)
        assert key is not None and key.group(1) == entry["verdict"]  # every report is valid
        cells = _CELL.findall(page_row)
        assert len(cells) == 1
        v, verdict, status, findings, leads, body = cells[0]
        assert (verdict, status, int(findings), int(leads)) == (
            entry["verdict"], "valid", entry["findings"], entry["leads"])
        assert int(v) == 1000 * entry["findings"] + entry["leads"]  # sorts by findings
        assert "valid report" in body and re.search(r':audit">view</a>', body)
        verdicts.append(entry["verdict"])
    # the report indexed them in the store: one row per trace and arm, as the index says
    with Store.open(audited / STORE_FILE, create=False) as store:
        stored = store.audits()
    assert len(stored) == 8
    for s in stored:
        entry = entries[(audited / s["trace_path"]).resolve()]
        assert s["arm"] == "offline" and s["episode"] == entry["episode"]
        assert (s["status"], s["verdict"], s["findings"], s["leads"], s["errors"]) == (
            entry["status"], entry["verdict"], entry["findings"], entry["leads"], 0)
        assert (audited / s["report"]).resolve() == (
            audited / "audit" / "offline" / "reports" / f"{entry['episode']}.json").resolve()
    # the offline auditor files findings on D1's disclosures and not elsewhere here
    assert "findings" in verdicts and "no_supported_problem" in verdicts
    assert {bool(r["realized"]) for r, v in zip(rows, verdicts, strict=True)
            if v == "findings"} == {True}


# ------------------------------------------------------------------ the viewer's data
def test_viewer_data_holds_the_reports_findings_with_their_steps_and_quotes(
        audited: Path) -> None:
    checked = 0
    for row, link, entry in _audited_rows(audited):
        trace = report_viewer.decode(audited / "report", link)
        report = _report(audited, "offline", entry["episode"])
        if entry["verdict"] != "findings":
            (shown,) = trace["audits"]
            assert shown["verdict"] == entry["verdict"] and shown["findings"] == []
            continue
        (shown,) = trace["audits"]
        assert shown["arm"] == "offline" and shown["status"] == "valid"
        assert shown["episode"] == entry["episode"]
        assert shown["diagnostics"] == [] and shown["rates"]["findings_total"] == 1
        assert (audited / "report" / shown["report"]).resolve() == (
            audited / "audit" / "offline" / "reports" / f"{entry['episode']}.json").resolve()
        assert len(shown["findings"]) == len(report["findings"]) >= 1
        events = {e.step: e for e in read_trace(audited / row["trace_path"]).events}
        for got, want in zip(shown["findings"], report["findings"], strict=True):
            graph = got.pop("graph")
            assert got == want  # the certificate exactly as the report has it
            assert got["boundary"]["step"] in events and got["first_anomaly"] in events
            assert all(s in events for s in got["path"])
            for unit in got["evidence"]:
                text = field_text(events[unit["step"]], unit["field"])
                assert text is not None and unit["quote"] in text  # the right step's words
            _check_graph(graph, got)
            checked += 1
    assert checked >= 2


def _check_graph(svg: str, finding: dict[str, Any]) -> None:
    """The SVG parses, is small, draws exactly one boundary edge whose title lists the
    boundary step, and draws every path step that has an edge on a highlighted edge."""
    assert len(svg.encode()) < 8000
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    edges = root.findall(f"{ns}path")
    boundary = [p for p in edges if p.get("class") == "boundary"]
    assert len(boundary) == 1
    title = boundary[0].find(f"{ns}title")
    assert title is not None and finding["boundary"]["step"] in (title.text or "")
    hot = " ".join((p.find(f"{ns}title").text or "") for p in edges  # type: ignore[union-attr]
                   if p.get("class") in ("boundary", "path"))
    cold = " ".join((p.find(f"{ns}title").text or "") for p in edges  # type: ignore[union-attr]
                    if p.get("class") == "edge")
    for step in finding["path"]:
        assert step not in cold.replace(",", " ").split() or step in hot
    labels = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    assert finding["boundary"]["step"] in labels and finding["boundary"]["kind"] in labels
    nodes = {t.text for g in root.findall(f"{ns}g") for t in g.findall(f"{ns}title")}
    assert finding["component"]["name"] in nodes


def test_viewer_page_links_and_highlights_every_cited_step(audited: Path) -> None:
    if report_viewer.node() is None:
        pytest.skip("node is not installed")
    _, link, entry = next(x for x in _audited_rows(audited) if x[2]["verdict"] == "findings")
    report = _report(audited, "offline", entry["episode"])
    shown = report_viewer.render(audited / "report", link)
    page = shown["html"]
    target = link.split("#", 1)[1]
    assert '<section id="audit"><h2>Audit findings</h2>' in page
    for f in report["findings"]:
        cited = {f["boundary"]["step"], f["first_anomaly"], *f["path"],
                 *(u["step"] for u in f["evidence"])}
        for step in cited:
            assert f'<a class="cite" href="#{target}:{step}">{step}</a>' in page
            row_html = re.search(rf'<tr id="{step}" data-step="{step}"([^>]*)>', page)
            assert row_html is not None and 'class="cited"' in row_html.group(1)
        for unit in f["evidence"]:
            assert f"<q>{_esc(unit['quote'])}</q>" in page
            assert f"<mark>{_esc(unit['quote'])}</mark>" in page
        assert _esc(f["repair_plan"]["objective"]) in page
        assert f"<code>{_esc(f['boundary']['edge'])}</code>" in page
    uncited = set(re.findall(r'<tr id="(s\d+)" data-step="s\d+">', page))
    assert uncited  # steps nobody cited stay plain
    assert page.count('<div class="egraph"><svg') == len(report["findings"])
    # the episode list's link opens the page at the findings
    opened = report_viewer.open_page(audited / "report", link + ":audit")
    assert opened["loaded"] == [f"traces/{target.split('.')[0]}.js"]
    assert '<section id="audit">' in opened["html"]


# ------------------------------------------------------------------ no audits: as before
def test_a_study_without_audits_builds_as_before(plain: Path, audited: Path,
                                                 tmp_path: Path) -> None:
    study = tmp_path / "s"
    shutil.copytree(plain, study)
    write_report(study, resamples=100)
    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    body = page.split("<body>", 1)[1]  # (the shared stylesheet names the audit classes)
    assert "audit" not in body.lower()
    assert "audit" not in report_viewer.rows_html(study / "report").lower()
    chunks = sorted((study / "report" / "traces").glob("c*.js"))
    assert chunks
    for chunk in chunks:
        data = decode_chunk(chunk)
        for i, t in enumerate(data["t"]):
            assert "audits" not in t and "audits" not in decode_trace(data, i)
    viewer = (study / "report" / "trace.html").read_text(encoding="utf-8")
    assert viewer == (audited / "report" / "trace.html").read_text(encoding="utf-8")
    # the audited study's chunks are the same traces plus their audits
    for chunk in chunks:
        mine = decode_chunk(chunk)
        theirs = decode_chunk(audited / "report" / "traces" / chunk.name)
        for i in range(len(mine["t"])):
            a, b = decode_trace(mine, i), decode_trace(theirs, i)
            b.pop("audits")
            assert a == b
    # the store gained no audits table
    conn = sqlite3.connect(study / STORE_FILE)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert "audits" not in tables and "episodes" in tables
    # and a rebuild is byte-identical
    before = {c.name: c.read_bytes() for c in chunks}
    write_report(study, resamples=100)
    assert {c.name: c.read_bytes() for c in chunks} == before


# ------------------------------------------------------------------ an invalid report
class MisQuoting:
    """Files one supported finding on the last message whose quote is not in it (and is
    markup): the validator rejects the report, and the report page must say why."""

    QUOTE = "<script>alert('not said')</script>"

    def audit(self, bundle: Bundle) -> Report:
        ref = BundleRef(episode=bundle.manifest.episode,
                        manifest_sha256=sha256_file(bundle.root / MANIFEST))
        last = [s for s in bundle.steps if s.kind == "message"][-1]
        unit = EvidenceUnit(step=last.step, edge=last.edge, field="content", quote=self.QUOTE,
                            supports=["R1", "R2", "R3", "R4"])
        finding = Finding(
            id="f1", status="supported", property=PropertyRef(text="only what they may see"),
            risk="D1", nature="realized_defect",
            component=Component(type="participant", name=last.actor),
            boundary=Boundary(kind="delegation", edge=last.edge or "", step=last.step),
            contribution="introduced", first_anomaly=last.step, path=[last.step],
            effect=Effect(endpoint="the requester", step=last.step), evidence=[unit],
            confidence=0.5)
        return Report(audit_schema=1, report_id="r1", bundle=ref,
                      auditor=Auditor(kind="human"), verdict="findings", findings=[finding],
                      coverage=Coverage(steps_read=[last.step]))


def test_an_invalid_report_shows_its_diagnostics(audited: Path, tmp_path: Path) -> None:
    study = tmp_path / "s"
    shutil.copytree(audited, study)
    index = audit_episodes(study, study / "audit" / "zz-misquote", MisQuoting())
    assert {e.status for e in index.entries} == {"invalid"}
    write_report(study, resamples=100)
    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    assert 'class="audit"><button type="button">audit: offline</button></th>' in page
    assert 'class="audit"><button type="button">audit: zz-misquote</button></th>' in page
    for page_row in _page_rows(study):
        assert 'data-f-audit-1="invalid"' in page_row
        cells = _CELL.findall(page_row)
        assert len(cells) == 2 and cells[1][2] == "invalid"
        assert re.search(r"invalid report: \d+ errors?", cells[1][5])
    _, link, entry = _audited_rows(study, "zz-misquote")[0]
    validation = json.loads((study / "audit" / "zz-misquote" / "reports" /
                             f"{entry['episode']}.validation.json").read_text(encoding="utf-8"))
    codes = [d["diagnostic"]["code"] for d in validation["diagnostics"]]
    assert codes
    trace = report_viewer.decode(study / "report", link)
    arms = {a["arm"]: a for a in trace["audits"]}
    assert sorted(arms) == ["offline", "zz-misquote"]
    bad = arms["zz-misquote"]
    assert bad["status"] == "invalid"
    assert [d["code"] for d in bad["diagnostics"]] == codes
    assert all(d["message"] for d in bad["diagnostics"])
    assert bad["findings"][0]["evidence"][0]["quote"] == MisQuoting.QUOTE
    if report_viewer.node() is None:
        return
    shown = report_viewer.render(study / "report", link)["html"]
    assert '<details class="diagnostics" open><summary>validator diagnostics' in shown
    for code in codes:
        assert f"<code>{code}</code>" in shown
    assert "<script>" not in shown
    assert f"<q>{_esc(MisQuoting.QUOTE)}</q>" in shown
    assert '<span class="bad">invalid report</span>' in shown


# ------------------------------------------------------------------ hostile audit files
def test_hostile_audit_files_are_listed_not_followed(audited: Path, tmp_path: Path) -> None:
    study = tmp_path / "s"
    shutil.copytree(audited, study)
    outside = tmp_path / "secret.jsonl"
    outside.write_text("{}\n", encoding="utf-8")
    (study / "audit" / "broken").mkdir()
    (study / "audit" / "broken" / "index.json").write_text("{not json", encoding="utf-8")
    (study / "audit" / "escape").mkdir()
    first = _index(study / "audit" / "offline")[0]
    (study / "audit" / "escape" / "index.json").write_text(json.dumps({"entries": [
        {**first, "episode": "../../offline/reports/x"},
        {**first, "traces": ["../../../secret.jsonl"]},
        "not an entry"]}), encoding="utf-8")
    write_report(study, resamples=100)
    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    assert "not shown: audit/broken/index.json: it is not JSON" in page
    assert "not shown: audit/escape/index.json: entry 0 is not an audited episode" in page
    assert "not shown: audit/escape/index.json: entry 2 is not an audited episode" in page
    # the entry whose trace leaves the study maps to no row: its column is all —
    assert 'class="audit"><button type="button">audit: escape</button></th>' in page
    # ("broken" has no column; "escape" sorts before "offline")
    rows = report_viewer.rows_html(study / "report")
    assert 'data-f-audit-0="-"' in rows and 'data-f-audit-0="findings"' not in rows
    assert 'data-f-audit-1="findings"' in rows


# ------------------------------------------------------------------ other layouts
def test_audit_study_arms_and_shared_bundles_are_shown(plain: Path, tmp_path: Path) -> None:
    from eairdsl.audit.cohort import COHORT, audit_study

    study = tmp_path / "s"
    shutil.copytree(plain, study)
    audit_study(study, study / "audit-study", RulesAuditor(), "offline", per_world=4,
                positives=2)
    # the issue's `eairc audit-study runs/s -o runs/s/audit`: the cohort beside the arms
    audit_study(study, study / "audit", RulesAuditor(), "offline", per_world=4, positives=2)
    # a hand-made arm in which two traces share one bundle (as two traces that sanitize
    # to the same content do): both rows show its one report
    audit_episodes(study, study / "audit" / "offline", RulesAuditor())
    shutil.copytree(study / "audit" / "offline", study / "audit" / "shared")
    index = json.loads((study / "audit" / "shared" / "index.json").read_text(encoding="utf-8"))
    first, second = index["entries"][:2]
    first["traces"] = first["traces"] + second["traces"]
    index["entries"] = [first, *index["entries"][2:]]
    (study / "audit" / "shared" / "index.json").write_text(json.dumps(index), encoding="utf-8")
    write_report(study, resamples=100)

    page = (study / "report" / "episodes.html").read_text(encoding="utf-8")
    heads = re.findall(r'<th data-sort="audit-\d+" class="audit"><button type="button">'
                       r'audit: ([^<]+)</button></th>', page)
    assert heads == ["offline", "shared", "audit/offline", "audit-study/offline"]
    cohort = json.loads((study / "audit-study" / COHORT).read_text(encoding="utf-8"))
    members = {(study / m["trace"]).resolve(): m for m in cohort["members"]}
    arm = {(study / "audit-study" / "arms" / "offline" / t).resolve(): e
           for e in _index(study / "audit-study" / "arms" / "offline") for t in e["traces"]}
    assert set(arm) == set(members) and len(members) == 4
    shared = {(study / "audit" / "shared" / t).resolve(): e
              for e in index["entries"] for t in e["traces"]}
    seen_shared = []
    for row, page_row in zip(_rows(study), _page_rows(study), strict=True):
        trace = (study / row["trace_path"]).resolve()
        for n in (2, 3):  # both audit studies drew the same cohort (same seed)
            key = re.search(rf'data-f-audit-{n}="([^"]*)"', page_row)
            assert key is not None
            assert key.group(1) == (arm[trace]["verdict"] if trace in arm else "-")
        if trace in shared and shared[trace]["episode"] == first["episode"]:
            key = re.search(r'data-f-audit-1="([^"]*)"', page_row)
            assert key is not None and key.group(1) == first["verdict"]
            link = _LINK.search(page_row)
            assert link is not None
            audits = {a["arm"]: a for a in report_viewer.decode(study / "report",
                                                                link.group(1))["audits"]}
            seen_shared.append(audits["shared"]["episode"])
    assert seen_shared == [first["episode"]] * 2


def test_the_graph_draws_steps_without_an_edge_on_the_edge_they_lean_on(plain: Path) -> None:
    """A tool result is drawn on its call's edge; a step that is no interaction (a
    decision) highlights only its actor; a boundary named by edge only is found."""
    from eairdsl.audit.contract import Finding
    from eairdsl.study.audits import _episode_graph, finding_svg

    trace_path = next(iter(sorted((plain / "traces").rglob("*.jsonl"))))
    trace = read_trace(trace_path)
    graph = _episode_graph(trace_path)
    result = next(e for e in trace.events if e.kind == "tool_result" and e.call)
    call = next(e for e in trace.events if e.step == result.call)
    message = next(e for e in trace.events if e.kind == "message" and e.recipient)
    finding = Finding.model_validate({
        "id": "f1", "status": "supported", "property": {"text": "p"}, "risk": "other",
        "nature": "realized_defect", "component": {"type": "participant", "name": "x"},
        "contribution": "introduced", "path": [result.step], "first_anomaly": result.step,
        "effect": {"endpoint": "e"}, "confidence": 0.5,
        "evidence": [{"step": result.step, "field": "text", "quote": "q", "supports": ["R4"]}],
        "boundary": {"kind": "handoff", "edge": f"{message.actor}->{message.recipient}",
                     "step": "s9999"}})  # no such step: found by its edge
    root = ET.fromstring(finding_svg(graph, finding))
    ns = "{http://www.w3.org/2000/svg}"
    by_class: dict[str, list[str]] = {}
    for p in root.findall(f"{ns}path"):
        title = p.find(f"{ns}title")
        by_class.setdefault(p.get("class") or "", []).append(title.text or "" if title is not None
                                                             else "")
    (path_edge,) = by_class["path"]
    assert path_edge.startswith(f"{call.actor} → {call.tool} (call)") and call.step in path_edge
    (boundary_edge,) = by_class["boundary"]
    assert boundary_edge.startswith(f"{message.actor} → {message.recipient} (")
    assert by_class["edge"]  # the rest of the episode, drawn muted


class Refusing:
    """An auditor that produces no report (a spent budget, a provider failure)."""

    def audit(self, bundle: Bundle) -> Report:
        from eairdsl.audit.auditor import AuditError

        raise AuditError("budget of 0 tool calls spent <before> any report")


def test_an_audit_without_a_report_says_why(plain: Path, tmp_path: Path) -> None:
    study = tmp_path / "s"
    shutil.copytree(plain, study)
    audit_episodes(study, study / "audit" / "refused", Refusing())
    write_report(study, resamples=100)
    for page_row in _page_rows(study):
        assert 'data-f-audit-0="failed"' in page_row
        (cell,) = _CELL.findall(page_row)
        assert cell[0] == "-1" and cell[2] == "failed" and "audit failed" in cell[5]
        assert "budget of 0 tool calls spent &lt;before&gt; any report" in cell[5]
    _, link, _ = _audited_rows(study, "refused")[0]
    (shown,) = report_viewer.decode(study / "report", link)["audits"]
    assert shown["status"] == "failed" and "report" not in shown and "findings" not in shown
    assert shown["reason"].startswith("budget of 0 tool calls")
    if report_viewer.node() is not None:
        page = report_viewer.render(study / "report", link)["html"]
        assert '<span class="bad">the audit produced no report</span>' in page
        assert "budget of 0 tool calls spent &lt;before&gt; any report" in page
    with Store.open(study / STORE_FILE, create=False) as store:
        assert {(s["status"], s["report"]) for s in store.audits()} == {("failed", None)}
