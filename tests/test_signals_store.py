"""The Signals store: grouping, idempotent updates, lifecycle, merges, identification.

Everything runs offline on real audits: sim studies of the repository's worlds
audited by the offline auditor, and a real offline repair of A1. Regressions
are made by copying a study and giving its traces the repaired world's digest
(what a run of the repaired world would record), so the lifecycle rule is
checked on its own terms.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import make_workspace, run_eairc

from eairdsl.signals.grouping import fingerprint, fingerprint_inputs, normalise_name
from eairdsl.signals.html import list_rows, ranked_views, viewer_links, write_report
from eairdsl.signals.mapping import BOUNDARY_TYPES, RISK_TYPES, factors
from eairdsl.signals.remediation import signal_view
from eairdsl.signals.store import SignalsStore, SignalsStoreError
from eairdsl.taxonomy import load_taxonomy


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A1 studied twice (seeds 1 and 2 into two folders), both audited; an A1 repair."""
    ws = make_workspace(tmp_path_factory.mktemp("signals"))
    for name, seeds in (("s1", "1"), ("s2", "2")):
        proc = run_eairc("study", "worlds/a1.eair", "--seeds", seeds, "--out", f"runs/{name}",
                         "--workers", "1", cwd=ws)
        assert proc.returncode == 0, proc.stderr
        proc = run_eairc("audit", f"runs/{name}", cwd=ws)
        assert proc.returncode == 0, proc.stderr
    proc = run_eairc("repair", "worlds/a1.eair", "--audit", "runs/s1/audit/offline", "-o",
                     "runs/rep", "--seeds", "3", cwd=ws)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ws


def _store(tmp_path: Path, name: str = "signals.sqlite") -> SignalsStore:
    return SignalsStore.open(tmp_path / name)


def _partition(store: SignalsStore) -> set[frozenset[str]]:
    """Which occurrences share a Signal (ids aside)."""
    return {frozenset(o.key for o, _ in store.occurrences(sid)) for sid in store.signal_ids()}


def _with_digest(src: Path, dest: Path, digest: str) -> Path:
    """A copy of a study whose traces record another world digest in their header."""
    shutil.copytree(src, dest)
    for trace in (dest / "traces").rglob("*.jsonl"):
        lines = trace.read_text(encoding="utf-8").split("\n")
        head = json.loads(lines[0])
        head["digest"] = digest
        lines[0] = json.dumps(head, sort_keys=True)
        trace.write_text("\n".join(lines), encoding="utf-8")
    return dest


def test_mapping_names_only_catalogued_types() -> None:
    known = {t.id for t in load_taxonomy().types}
    for table in (RISK_TYPES, BOUNDARY_TYPES):
        for ids in table.values():
            assert 1 <= len(ids) <= 3 and len(set(ids)) == len(ids)
            assert set(ids) <= known, set(ids) - known
    assert set(RISK_TYPES) == {r.id for r in load_taxonomy().eair.risks}
    # Table 1 levels by the fixed rules
    assert factors("realized_defect", boundary_kind="power", effect_step="s9",
                   resolved_later=None, path_steps=3).points("realized_defect") == 40
    assert factors("realized_defect", boundary_kind="power", effect_step="s9",
                   resolved_later="s10", path_steps=3).consequence == 25
    exposure = factors("risk_exposure", boundary_kind="review", effect_step=None,
                       resolved_later=None, path_steps=1)
    assert (exposure.consequence, exposure.reachability) == (40, 0.6)
    assert exposure.points("risk_exposure") == 24  # ⌈40 × 0.6⌉


def test_normalised_names() -> None:
    assert normalise_name("IssueCredit") == normalise_name("issue-credit") == "issue_credit"
    assert normalise_name("ＩＳＳＵＥ credit") == "issue_credit"  # NFKC
    assert normalise_name("HTTPServer.v2") == "http_server_v2"


def test_update_is_idempotent(ws: Path, tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        first = store.update(ws / "runs/s1/audit")
        assert first.seq == 1 and first.occurrences > 0 and first.signals > 0
        counts = store.counts()
        again = store.update(ws / "runs/s1/audit/offline")  # the same audit, named directly
        also = store.update(ws / "runs/s1")  # and through its study
        assert again.seq is None and also.seq is None
        assert not again.occurrences and not also.sessions
        assert store.counts() == counts


def test_population_is_every_analysed_session(ws: Path, tmp_path: Path) -> None:
    index = json.loads((ws / "runs/s1/audit/offline/index.json").read_text())
    traces = {t for e in index["entries"] if e["status"] == "valid" for t in e["traces"]}
    with _store(tmp_path) as store:
        store.update(ws / "runs/s1")
        views = ranked_views(store)
        assert views, "an A1 study has supported findings"
        top = views[0]
        # the denominator counts sessions without findings too
        assert top.analysed == len(traces) > top.sessions
        sev = top.severity
        assert sev is not None
        calc = sev.calculations[0]
        assert calc.analyzed_sessions == len(traces)
        assert calc.affected_sessions == top.sessions
        assert sev.score == min(100, calc.adjusted_points + calc.scope_points)
        rows = list_rows(views)
        assert rows == sorted(rows, key=lambda r: -(r["score"] or 0))


def test_grouping_is_stable_across_updates_and_orders(ws: Path, tmp_path: Path) -> None:
    with _store(tmp_path, "a.sqlite") as a:
        a.update(ws / "runs/s1")
        before = {sid: {o.key for o, _ in a.occurrences(sid)} for sid in a.signal_ids()}
        fps = {fp for sid in a.signal_ids() for fp, _ in a.fingerprints(sid)}
        a.update(ws / "runs/s2")
        after = {sid: {o.key for o, _ in a.occurrences(sid)} for sid in a.signal_ids()}
        # every occurrence keeps its Signal; the second study's join existing Signals
        for sid, keys in before.items():
            assert keys <= after[sid]
        grown = [sid for sid in before if after[sid] > before[sid]]
        assert grown, "s2's occurrences of known fingerprints join the existing Signals"
        # a Signal is one fingerprint of grouping-1 unless merged: none was created twice
        new_fps = {fp for sid in a.signal_ids() for fp, _ in a.fingerprints(sid)} - fps
        assert len(a.signal_ids()) == len(fps) + len(new_fps)
        for sid in a.signal_ids():
            for o, _ in a.occurrences(sid):
                assert (fingerprint(fingerprint_inputs(o)),) == tuple(
                    fp for fp, _ in a.fingerprints(sid))
        partition = _partition(a)
    with _store(tmp_path, "b.sqlite") as b:
        b.update(ws / "runs/s2")
        b.update(ws / "runs/s1")
        assert _partition(b) == partition  # the order of updates does not change groups


def test_resolved_then_regressed(ws: Path, tmp_path: Path) -> None:
    acceptance = json.loads((ws / "runs/rep/acceptance.json").read_text())
    assert acceptance["accepted"]
    digest = acceptance["candidate_digest"]
    with _store(tmp_path) as store:
        store.update(ws / "runs/s1")
        done = store.update(ws / "runs/rep")
        assert len(done.resolved) == 1
        sid = done.resolved[0]
        view = signal_view(store, sid)
        assert view.state == "resolved" and view.resolved_digest == digest
        # the accepted repair's retest is the Signal's check, on both cohorts
        assert [c.status for c in view.checks] == ["passed", "passed"]
        assert any(a.repaired_by for a in view.actions)
        assert store.update(ws / "runs/rep").seq is None  # idempotent as well
        # more runs of the original world (its digest was seen before the repair): no regression
        old = store.update(ws / "runs/s2")
        assert old.occurrences and sid not in old.regressed
        assert signal_view(store, sid).state == "resolved"
        # a run of the repaired digest with the same failure: regressed
        _with_digest(ws / "runs/s1", tmp_path / "s3", digest)
        back = store.update(tmp_path / "s3")
        assert sid in back.regressed
        view = signal_view(store, sid)
        assert view.state == "regressed"
        assert view.checks[0].status == "failed" and "regressed" in view.checks[0].detail
        states = [t["to_state"] for t in store.transitions(sid)]
        assert states == ["open", "resolved", "regressed"]


def test_a_repair_not_accepted_resolves_nothing(ws: Path, tmp_path: Path) -> None:
    rejected = tmp_path / "rejected"
    shutil.copytree(ws / "runs/rep", rejected)
    acc = json.loads((rejected / "acceptance.json").read_text())
    acc.update(accepted=False, reason="Retain 0.5 < 0.95")
    (rejected / "acceptance.json").write_text(json.dumps(acc))
    with _store(tmp_path) as store:
        store.update(ws / "runs/s1")
        done = store.update(rejected)
        assert done.repairs == 1 and not done.resolved
        sid = ranked_views(store)[0].id
        view = signal_view(store, sid)
        assert view.state == "open" and not any(a.repaired_by for a in view.actions)
        assert store.repairs(sid)[0]["accepted"] is False
        assert view.checks[0].status == "failed" and "not accepted" in view.checks[0].detail


def test_a_later_digest_regresses_and_wontfix_holds(ws: Path, tmp_path: Path) -> None:
    # a digest the store first sees after the resolution is a later version
    later = _with_digest(ws / "runs/s1", tmp_path / "s4", "f" * 64)
    with _store(tmp_path, "a.sqlite") as store:
        store.update(ws / "runs/s1")
        sid = store.update(ws / "runs/rep").resolved[0]
        assert sid in store.update(later).regressed
    with _store(tmp_path, "b.sqlite") as store:
        store.update(ws / "runs/s1")
        sid = store.update(ws / "runs/rep").resolved[0]
        store.wontfix(sid, "accepted business risk")
        back = store.update(later)
        assert back.occurrences and not back.regressed
        assert signal_view(store, sid).state == "wontfix"
        assert store.transitions(sid)[-1]["reason"] == "accepted business risk"


def test_merge_and_unmerge(ws: Path, tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        store.update(ws / "runs/s1")
        ids = [v.id for v in ranked_views(store, everything=True)]
        a, b = ids[0], ids[1]
        a_keys = {o.key for o, _ in store.occurrences(a)}
        b_keys = {o.key for o, _ in store.occurrences(b)}
        moved = store.merge(a, b)
        assert moved and b not in store.signal_ids()
        assert {o.key for o, _ in store.occurrences(a)} == a_keys | b_keys
        with pytest.raises(SignalsStoreError):
            store.merge(a, b)
        # new occurrences of B's fingerprints go to A while merged
        store.update(ws / "runs/s2")
        merged_keys = {o.key for o, _ in store.occurrences(a)}
        assert not store.occurrences(b)
        store.unmerge(b)
        assert b in store.signal_ids()
        restored = {o.key for o, _ in store.occurrences(b)}
        assert b_keys <= restored and restored | {o.key for o, _ in store.occurrences(a)} \
            == merged_keys
        assert [m["kind"] for m in store.merges(b)] == ["merge", "unmerge"]


def test_a_foreign_file_is_refused_and_left_untouched(ws: Path, tmp_path: Path) -> None:
    results = ws / "runs/s1/results.sqlite"
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database\n")
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    for path in (results, text, other):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        with pytest.raises(SignalsStoreError, match="untouched"):
            SignalsStore.open(path)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    proc = run_eairc("signals", "update", "runs/s1", "--store", "runs/s1/results.sqlite",
                     cwd=ws)
    assert proc.returncode == 1 and "another application" in proc.stderr, proc.stderr
    proc = run_eairc("signals", "show", "SIG-999", "--store", str(tmp_path / "none.sqlite"),
                     cwd=ws)
    assert proc.returncode == 1 and "no Signals store" in proc.stderr


def test_report_links_occurrences_to_the_trace_viewer(ws: Path, tmp_path: Path) -> None:
    from eairdsl.study.viewer import decode_chunk, decode_trace

    assert run_eairc("report", "runs/s1", cwd=ws).returncode == 0
    links = viewer_links(ws / "runs/s1")
    assert links
    for rel, target in sorted(links.items())[::7]:
        chunk, i = target.split(".")
        trace = decode_trace(decode_chunk(ws / "runs/s1/report/traces" / f"{chunk}.js"),
                             int(i))
        assert trace["raw"].endswith(rel)
    with _store(tmp_path) as store:
        store.update(ws / "runs/s1")
        out = tmp_path / "page" / "signals.html"
        n = write_report(store, out)
        page = out.read_text(encoding="utf-8")
    assert n >= 1 and "report/trace.html#c" in page and ":s0" in page
    assert "Why grouped" in page and "Checks" in page and "<script" not in page


def test_done_when_five_worlds(tmp_path: Path) -> None:
    """The issue's done-when: study and audit the five worlds, update, list. One seed
    (every condition and instance: 210 sessions) where docs/signals.md's recipe has
    three: what is asserted, Signals of at least four worlds and one grouping several
    occurrences, needs no more (one seed gave all five worlds, the largest Signal 41
    occurrences), and the audit took most of the suite's longest test."""
    ws = make_workspace(tmp_path / "ws")
    # the paper's five (the suite's other worlds have their own loop tests)
    worlds = [f"worlds/{w}.eair" for w in ("a1", "b1", "c1", "d1", "f1")]
    assert all((ws / w).is_file() for w in worlds)
    proc = run_eairc("study", *worlds, "--seeds", "1", "--out", "runs/s", "--workers", "1",
                     cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert run_eairc("audit", "runs/s", cwd=ws).returncode == 0
    proc = run_eairc("signals", "update", "runs/s/audit", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    again = run_eairc("signals", "update", "runs/s/audit", cwd=ws)
    assert "nothing new" in again.stdout
    proc = run_eairc("signals", "list", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "severity", "nature"]
    rows = json.loads(run_eairc("signals", "list", "--json", cwd=ws).stdout)
    seen = {w for r in rows for w in r["worlds"]}
    assert len(seen) >= 4, seen
    assert all(r["score"] and r["level"] in ("Low", "High", "Critical") for r in rows)
    assert any(r["occurrences"] > 1 for r in rows), "occurrences group across sessions"
    shown = run_eairc("signals", "show", rows[0]["id"], cwd=ws)
    assert shown.returncode == 0 and "why grouped" in shown.stdout
    assert "S = max over natures" in shown.stdout
    traces = [line.split()[1] for line in shown.stdout.splitlines()
              if line.startswith("    trace ")]
    assert traces and all(not Path(t).is_absolute() and (ws / t).is_file() for t in traces)


def test_a_refused_target_creates_no_store(tmp_path: Path) -> None:
    """`eairc signals update` checks its targets before it creates the store file."""
    (tmp_path / "empty").mkdir()
    proc = run_eairc("signals", "update", "empty", "--store", "s.sqlite", cwd=tmp_path)
    assert proc.returncode == 1 and "holds no audit" in proc.stderr
    assert not (tmp_path / "s.sqlite").exists()


def test_report_shows_each_remediation_once_and_no_absolute_path(ws: Path,
                                                                   tmp_path: Path) -> None:
    """A repair plan that several Signals share is written once, in the page's Remediations,
    with the Signals it applies to; each Signal's section links to it (R1, …) instead of
    repeating its text. The page names no absolute local path: its links are relative to
    its folder, so it reads the same moved, copied or opened on another machine."""
    import re

    with _store(tmp_path) as store:
        store.update(ws / "runs/s1")
        store.update(ws / "runs/s2")
        views = ranked_views(store, everything=True)
        out = tmp_path / "page" / "signals.html"
        write_report(store, out, everything=True)
        page = out.read_text(encoding="utf-8")
    from html import escape

    users: dict[str, dict[str, None]] = {}  # objective -> the Signals proposing it, in order
    for v in views:
        for a in v.actions:
            users.setdefault(a.objective, {})[v.id] = None
    assert users and max(len(ids) for ids in users.values()) > 1, users  # a shared plan
    for objective, ids in users.items():
        assert page.count(escape(objective, quote=True)) == 1, objective
        entry = page.split(escape(objective, quote=True))[1].split("</div>")[0]
        assert f"applies to {len(ids)} Signal(s)" in entry
        assert [f"#{sid}" for sid in ids] == re.findall(r"href='(#SIG-\d+)'", entry)
    sections = page.split("<section ")[1:]
    assert len(sections) == len(views)
    for v, section in zip(views, sections, strict=True):
        plans = {(a.objective, repr(a.requirements), repr(a.must_not_change)) for a in v.actions}
        assert len(re.findall(r"href='#remediation-\d+'", section)) == len(plans)
    # a study's audit copied out of its study: its sessions' ids are the traces' absolute
    # paths, which the page shows from its own folder
    loose = tmp_path / "loose" / "s1"
    shutil.copytree(ws / "runs/s1", loose)
    (loose / "results.sqlite").unlink()
    with _store(tmp_path, "loose.sqlite") as store:
        store.update(loose / "audit" / "offline")
        sessions = {o.session for sid in store.signal_ids() for o, _ in store.occurrences(sid)}
        write_report(store, out, everything=True)
        outside = out.read_text(encoding="utf-8")
    assert sessions and all(s.startswith(str(loose.resolve())) for s in sessions)
    for html in (page, outside):
        for prefix in {str(tmp_path.resolve()), str(tmp_path), str(ws.resolve()), str(ws)}:
            assert prefix not in html
        hrefs = re.findall(r'href="([^"#]+)', html)
        assert hrefs and all(not h.startswith(("/", "file:")) for h in hrefs)
    assert ">../loose/s1/traces/" in outside and 'href="../loose/s1/traces/' in outside


def test_a_plan_proposed_for_several_surfaces_is_written_once() -> None:
    """D1's delegation fix is proposed once per read tool (`tool finance_read`, `tool
    hr_read`, …): the same objective and requirements three times over. The page writes the
    plan once, its shared surfaces once and each occurrence group's own surface beside the
    Signals and occurrence counts that proposed it."""
    from eairdsl.signals.html import _Remediations
    from eairdsl.signals.remediation import Action, SignalView

    req = [{"id": "principal-bound", "text": "The call carries the requester", "check": "Retest"}]

    def plan(tool: str, n: int, repaired: str | None = None) -> Action:
        return Action(objective="Bind the requester's principal", categories=["instructions"],
                      surfaces=["participant specialist", f"tool {tool}"], requirements=req,
                      must_not_change=["the task"], occurrences=n, repaired_by=repaired)

    other = Action(objective="Warn the reviewer", categories=["context"], occurrences=1)
    views = [SignalView.model_construct(id="SIG-1", actions=[plan("finance_read", 25),
                                                             plan("hr_read", 24), other]),
             SignalView.model_construct(id="SIG-4", actions=[plan("hr_read", 2, "rep-1")])]
    r = _Remediations()
    r.collect(views)
    page = r.html()
    assert page.count("Bind the requester&#x27;s principal") == 1
    assert page.count("The call carries the requester") == 1
    first = page.split("id='remediation-2'")[0]
    assert ("applies to 2 Signal(s): <a href='#SIG-1'>SIG-1</a> (49 occurrence(s)); "
            "<a href='#SIG-4'>SIG-4</a> (2 occurrence(s), repaired by rep-1)") in first
    assert ("may change: <code>participant specialist</code> and, by occurrence:</p>"
            "<ul class='surfaces'><li><code>tool finance_read</code> (SIG-1: 25)</li>"
            "<li><code>tool hr_read</code> (SIG-1: 24, SIG-4: 2)</li></ul>") in first
    assert "id='remediation-2'" in page and "Warn the reviewer" in page.split(
        "id='remediation-2'")[1]
    assert [r.number(a) for a in views[0].actions] == [1, 1, 2]
