"""The deterministic matcher (Signals §6.1): normalisation, canonical maximum matching,
P/R/F1 and coverage by hand, and `eairc signals match` on two audits of one sim study."""

from __future__ import annotations

import itertools
import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from cli_helpers import make_workspace, run_eairc

from eairdsl.signals.matcher import (
    MatchOccurrence,
    MatchSet,
    MatchSignal,
    match,
    maximum_matching,
    normalise_name,
    result_json,
    signals_of,
    summary_lines,
)


def occ(session: str, name: str, *types: str, ctype: str = "tool", signal: str | None = None,
        id: str = "") -> MatchOccurrence:
    return MatchOccurrence(session=session, component_type=ctype, component_name=name,
                           types=types, signal=signal, id=id)


# -- normalisation ---------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "issue_credit", "IssueCredit", "issue-credit", "Issue Credit", "issueCredit",
    "ISSUE_CREDIT", "  issue__credit. ", "ＩｓｓｕｅＣｒｅｄｉｔ", "issue/credit",
    "Issue\u00a0Credit",
])
def test_names_that_normalise_to_issue_credit(name: str) -> None:
    assert normalise_name(name) == "issue_credit"


@pytest.mark.parametrize(("name", "expected"), [
    ("HTTPServer", "http_server"), ("getHTTPResponse", "get_http_response"),
    ("v2Api", "v2_api"), ("Straße", "strasse"), ("ÉtatCivil", "état_civil"),
    ("ﬁle_reader", "file_reader"),          # NFKC: the ligature is two letters
    ("issuecredit", "issuecredit"),          # no boundary to find: a different name
])
def test_normalisation_cases(name: str, expected: str) -> None:
    assert normalise_name(name) == expected


# -- the matching rule -----------------------------------------------------------------

def test_equal_names_in_other_spellings_match() -> None:
    pred = MatchSet(occurrences=(occ("s1", "IssueCredit", "a"),))
    ref = MatchSet(occurrences=(occ("s1", "issue-credit", "a"),))
    assert match(pred, ref).occurrences.matched == 1


def test_cross_session_never_matches() -> None:
    pred = MatchSet(occurrences=(occ("s1", "issue_credit", "a", "b"),))
    ref = MatchSet(occurrences=(occ("s2", "issue_credit", "a", "b"),))
    res = match(pred, ref)
    assert res.occurrences.matched == 0 and res.pairs == ()
    assert res.unmatched_pred == ("s1:tool:issue_credit",)
    assert (res.occurrences.precision, res.occurrences.recall, res.occurrences.f1) == (0, 0, 0)


def test_no_shared_type_never_matches() -> None:
    pred = MatchSet(occurrences=(occ("s1", "x", "a", "b", "c"),))
    ref = MatchSet(occurrences=(occ("s1", "x", "d", "e", "f"),))
    assert match(pred, ref).occurrences.matched == 0
    # a lower-ranked shared type is enough (the paper's caveat)
    ref2 = MatchSet(occurrences=(occ("s1", "x", "d", "e", "c"),))
    assert match(pred, ref2).pairs[0].shared_types == ("c",)


def test_component_type_must_be_equal_and_known() -> None:
    pred = MatchSet(occurrences=(occ("s1", "x", "a", ctype="tool"),))
    ref = MatchSet(occurrences=(occ("s1", "x", "a", ctype="participant"),))
    assert match(pred, ref).occurrences.matched == 0
    unknown = MatchSet(occurrences=(occ("s1", "x", "a", ctype="unknown"),))
    assert match(unknown, unknown).occurrences.matched == 0


def test_an_occurrence_without_types_never_matches() -> None:
    side = MatchSet(occurrences=(occ("s1", "x"),))
    assert match(side, side).occurrences.matched == 0


def test_more_than_three_ranked_types_is_refused() -> None:
    with pytest.raises(ValueError, match="at most three"):
        occ("s1", "x", "a", "b", "c", "d")


def test_empty_inputs() -> None:
    res = match(MatchSet(), MatchSet())
    assert res.occurrences.matched == 0
    assert res.occurrences.precision is None and res.occurrences.recall is None
    assert res.occurrences.f1 is None and res.coverage.fraction_at_least_one is None
    one = MatchSet(occurrences=(occ("s1", "x", "a"),))
    only_ref = match(MatchSet(), one).occurrences
    assert (only_ref.precision, only_ref.recall, only_ref.f1) == (None, 0.0, None)
    only_pred = match(one, MatchSet()).occurrences
    assert (only_pred.precision, only_pred.recall) == (0.0, None)
    assert summary_lines(res)[0].startswith("occurrences: precision n/a, recall n/a, F1 n/a")


# -- maximum, not greedy; a canonical tie-break ----------------------------------------

def greedy(adj: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """First come, first served: each left vertex takes its first free right vertex."""
    used: set[int] = set()
    out = []
    for i, cands in enumerate(adj):
        for j in sorted(cands):
            if j not in used:
                used.add(j)
                out.append((i, j))
                break
    return out


def brute(adj: Sequence[Sequence[int]], n_right: int) -> list[tuple[int, int]]:
    """The definition itself: maximum size, then lexicographically smallest right indices
    by left vertex (an unmatched left vertex counts as after every right one)."""
    best: tuple[int, tuple[int, ...]] | None = None
    for choice in itertools.product(*[[*a, n_right] for a in adj]):
        taken = [j for j in choice if j < n_right]
        if len(taken) != len(set(taken)):
            continue
        key = (-len(taken), tuple(choice))
        if best is None or key < best:
            best = key
    assert best is not None
    return [(i, j) for i, j in enumerate(best[1]) if j < n_right]


def test_greedy_is_worse_than_the_maximum_matching() -> None:
    # pred 0 shares a with ref 0 and b with ref 1; pred 1 shares only a with ref 0
    pred = MatchSet(occurrences=(occ("s", "x", "a", "b", id="p0"), occ("s", "x", "a", id="p1")))
    ref = MatchSet(occurrences=(occ("s", "x", "a", id="r0"), occ("s", "x", "b", id="r1")))
    adj = [[0, 1], [0]]
    assert len(greedy(adj)) == 1
    res = match(pred, ref)
    assert res.occurrences.matched == 2 > len(greedy(adj))
    assert {(p.pred, p.ref) for p in res.pairs} == {("p0", "r1"), ("p1", "r0")}
    assert res.occurrences.f1 == 1.0


def test_canonical_matching_equals_its_definition_on_random_graphs() -> None:
    rng = random.Random(7)
    for _ in range(400):
        nl, nr = rng.randint(0, 5), rng.randint(0, 5)
        adj = [[j for j in range(nr) if rng.random() < 0.45] for _ in range(nl)]
        got = maximum_matching(adj, nr)
        assert got == brute(adj, nr), adj
        assert len(greedy(adj)) <= len(got)


def test_tie_break_gives_each_prediction_its_earliest_feasible_reference() -> None:
    # canonical order ends with the id: r0 < r1 < r2, p0 < p1
    refs = (occ("s", "x", "a", id="r2"), occ("s", "x", "a", "b", id="r1"),
            occ("s", "x", "a", id="r0"))
    pred = (occ("s", "x", "b", id="p1"), occ("s", "x", "a", id="p0"))
    res = match(MatchSet(occurrences=pred), MatchSet(occurrences=refs))
    # p0 takes r0 (it could take any); p1 can only take r1
    assert [(q.pred, q.ref) for q in res.pairs] == [("p0", "r0"), ("p1", "r1")]
    assert res.unmatched_ref == ("r2",)
    # earliest only among maximum matchings: left 0 gives up right 0 so left 1 gets one;
    # with a third left vertex for right 1, left 0 keeps right 0 and left 1 goes unmatched
    assert maximum_matching([[0, 1], [0]], 2) == [(0, 1), (1, 0)]
    assert maximum_matching([[0, 1], [0], [1]], 2) == [(0, 0), (2, 1)]


def test_tie_break_is_stable_under_permutation() -> None:
    # four interchangeable-looking occurrences on one component: many maximum matchings
    preds = [occ("s", "Issue Credit", "a", "b", id="p-a"), occ("s", "issue_credit", "a", id="p-b"),
             occ("s", "issueCredit", "b", "c", id="p-c"), occ("t", "ledger", "a", id="p-d"),
             occ("s", "issue-credit", "c", id="p-e")]
    refs = [occ("s", "issue_credit", "a", "c", id="r-a"), occ("s", "IssueCredit", "b", id="r-b"),
            occ("s", "issue credit", "a", "b", id="r-c"), occ("t", "Ledger", "a", id="r-d")]
    first = result_json(match(MatchSet(occurrences=tuple(preds)),
                              MatchSet(occurrences=tuple(refs))))
    rng = random.Random(3)
    for _ in range(30):
        rng.shuffle(preds)
        rng.shuffle(refs)
        again = result_json(match(MatchSet(occurrences=tuple(preds)),
                                  MatchSet(occurrences=tuple(refs))))
        assert again == first
    assert json.loads(first)["occurrences"]["matched"] == 4


# -- rates and coverage by hand --------------------------------------------------------

def test_precision_recall_f1_and_coverage_by_hand() -> None:
    # references: Signal R1 has 4 occurrences, R2 has 2, R3 has 1
    refs = [occ(f"s{k}", "issue_credit", "a", signal="R1", id=f"r1-{k}") for k in range(4)]
    refs += [occ("s0", "ledger", "b", signal="R2", id="r2-0"),
             occ("s1", "ledger", "b", signal="R2", id="r2-1"),
             occ("s5", "mailer", "c", signal="R3", id="r3-0")]
    # predictions: 3 of R1's (one in P1, two in P2), 1 of R2's, and 2 that match nothing
    preds = [occ("s0", "IssueCredit", "z", "a", signal="P1", id="p-0"),
             occ("s1", "issue-credit", "a", signal="P2", id="p-1"),
             occ("s2", "issue credit", "a", signal="P2", id="p-2"),
             occ("s1", "Ledger", "b", signal="P3", id="p-3"),
             occ("s5", "mailer", "d", signal="P4", id="p-4"),
             occ("s9", "issue_credit", "a", signal="P2", id="p-5")]
    res = match(MatchSet(occurrences=tuple(preds)), MatchSet(occurrences=tuple(refs)))
    o = res.occurrences
    assert (o.matched, o.predicted, o.reference) == (4, 6, 7)
    assert o.precision == round(4 / 6, 6) and o.recall == round(4 / 7, 6)
    p, r = 4 / 6, 4 / 7
    assert o.f1 == round(2 * p * r / (p + r), 6) == round(8 / 13, 6)
    assert set(res.unmatched_pred) == {"p-4", "p-5"}
    assert set(res.unmatched_ref) == {"r1-3", "r2-0", "r3-0"}
    c = res.coverage
    # R1 3/4 matched, R2 1/2 (exactly half counts), R3 0/1
    assert (c.reference_signals, c.at_least_one, c.at_least_half) == (3, 2, 2)
    assert c.fraction_at_least_one == round(2 / 3, 6)
    # Signals by tags in batch "": P1 and P2 are issue_credit/a (P1 ranks z first), P3
    # ledger/b, P4 mailer/d; refs R1 issue_credit/a, R2 ledger/b, R3 mailer/c
    s = res.signals
    assert (s.matched, s.predicted, s.reference) == (2, 4, 3)
    assert {(q.pred, q.ref) for q in res.signal_pairs} == {("P1", "R1"), ("P3", "R2")}
    assert res.unmatched_pred_signals == ("P2", "P4")
    # sessions: predictions in s0 s1 s2 s5 s9; references in s0..s3, s5
    ss = res.sessions
    assert (ss.matched, ss.predicted, ss.reference) == (4, 5, 5)
    lines = summary_lines(res)
    assert lines[0] == ("occurrences: precision 66.67%, recall 57.14%, F1 61.54% "
                        "(4 matched of 6 predicted, 7 reference)")
    assert lines[1].startswith("signal coverage: 2/3 reference Signals with at least one")


def test_signals_match_only_within_a_batch() -> None:
    def sig(id: str, batch: str, *types: str) -> MatchSignal:
        return MatchSignal(id=id, batch=batch, component_type="tool",
                           component_name="issue_credit", types=types)
    pred = MatchSet(signals=(sig("P1", "b1", "a"), sig("P2", "b2", "a")))
    ref = MatchSet(signals=(sig("R1", "b1", "a", "x"), sig("R2", "b3", "a")))
    res = match(pred, ref)
    assert [(q.pred, q.ref, q.batch) for q in res.signal_pairs] == [("P1", "R1", "b1")]
    assert res.signals.precision == 0.5 and res.signals.recall == 0.5


def test_signals_of_takes_the_majority_component_and_best_ranked_types() -> None:
    members = [occ("s1", "a_tool", "t2", "t1", signal="S"),
               occ("s2", "a_tool", "t1", "t3", signal="S"),
               occ("s3", "b_tool", "t4", signal="S")]
    (s,) = signals_of(members)
    assert (s.component_name, s.types) == ("a_tool", ("t1", "t2", "t4"))


# -- the CLI on two audits of one sim study --------------------------------------------

@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-seed D1+A1 sim study, audited offline and by the oracle."""
    ws = make_workspace(tmp_path_factory.mktemp("ws"))
    proc = run_eairc("study", "worlds/d1.eair", "worlds/a1.eair", "--seeds", "1", "--out",
                     "runs/s", "--workers", "1", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    for arm in ("offline", "oracle"):
        proc = run_eairc("audit", "runs/s", "--auditor", arm, "-o", f"runs/s/audit/{arm}",
                         cwd=ws)
        assert proc.returncode == 0, proc.stderr
    return ws


def _rate(line: str, what: str) -> float:
    return float(line.split(f"{what} ")[1].split("%", maxsplit=1)[0]) / 100


def test_cli_match_of_two_audits_prints_pr_f1(study: Path) -> None:
    proc = run_eairc("signals", "match", "runs/s/audit/offline", "runs/s/audit/oracle",
                     cwd=study)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["occurrences", "signal coverage", "signals",
                                                  "sessions"]
    js = run_eairc("signals", "match", "runs/s/audit/offline", "runs/s/audit/oracle", "--json",
                   cwd=study)
    data = json.loads(js.stdout)
    o = data["occurrences"]
    assert o["predicted"] > 0 and o["reference"] > 0
    # the printed lines are the JSON's rates, and the rates are the counts' ratios
    assert _rate(lines[0], "precision") == pytest.approx(o["matched"] / o["predicted"], abs=5e-5)
    assert _rate(lines[0], "recall") == pytest.approx(o["matched"] / o["reference"], abs=5e-5)
    assert f"({o['matched']} matched of {o['predicted']} predicted" in lines[0]
    # on supported findings the offline rules and the oracle agree on this study
    assert lines[0].startswith("occurrences: precision 100.00%, recall 100.00%, F1 100.00%")
    # leads widen the prediction side: precision falls, every pair is same-session
    leads = json.loads(run_eairc("signals", "match", "runs/s/audit/offline",
                                 "runs/s/audit/oracle", "--json", "--leads", cwd=study).stdout)
    assert leads["occurrences"]["predicted"] > o["predicted"]
    assert leads["occurrences"]["precision"] < 1.0
    assert all(p["session"].startswith("s:traces/") for p in leads["pairs"])


def test_cli_json_is_byte_stable(study: Path) -> None:
    args = ("signals", "match", "runs/s/audit/oracle", "runs/s/audit/offline", "--json",
            "--leads")
    a, b = run_eairc(*args, cwd=study), run_eairc(*args, cwd=study)
    assert a.returncode == 0 and a.stdout == b.stdout
    assert a.stdout.endswith("}\n") and '"matcher": "signals-matcher-1"' in a.stdout


def test_sessions_pair_by_trace_path_not_bundle_id(study: Path) -> None:
    """A copy of the oracle audit with every episode renamed still matches all of it."""
    src, dst = study / "runs/s/audit/oracle", study / "runs/s/audit/renamed"
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "reports").mkdir(parents=True)
    (dst / "bundles").mkdir()
    index = json.loads((src / "index.json").read_text())
    rename = {e["episode"]: "ep-" + e["episode"][3:][::-1] for e in index["entries"]}
    for e in index["entries"]:
        e["episode"] = rename[e["episode"]]
    (dst / "index.json").write_text(json.dumps(index))
    grader = json.loads((src / "bundles/grader-index.json").read_text())
    grader["episodes"] = {rename[k]: v for k, v in grader["episodes"].items()}
    (dst / "bundles/grader-index.json").write_text(json.dumps(grader))
    for old, new in rename.items():
        for suffix in (".json", ".validation.json"):
            shutil.copy(src / "reports" / f"{old}{suffix}", dst / "reports" / f"{new}{suffix}")
    proc = run_eairc("signals", "match", "runs/s/audit/renamed", "runs/s/audit/oracle", "--json",
                     cwd=study)
    assert proc.returncode == 0, proc.stderr
    o = json.loads(proc.stdout)["occurrences"]
    assert o["predicted"] == o["reference"] == o["matched"] > 0
    shutil.rmtree(dst)


def test_cli_json_files_and_bad_input(study: Path, tmp_path: Path) -> None:
    pred = tmp_path / "pred.json"
    ref = tmp_path / "ref.json"
    pred.write_text(json.dumps([{"session": "s1", "component": {"type": "tool",
                                 "name": "IssueCredit"}, "types": ["a", "b"], "id": "p"}]))
    ref.write_text(json.dumps({"occurrences": [
        {"session": "s1", "component": {"type": "tool", "name": "issue-credit"},
         "types": ["b"], "signal": "R", "id": "r"},
        {"session": "s2", "component": {"type": "tool", "name": "issue-credit"},
         "types": ["b"], "signal": "R", "id": "r2"}]}))
    proc = run_eairc("signals", "match", pred, ref, cwd=study)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == ("occurrences: precision 100.00%, recall 50.00%, "
                                           "F1 66.67% (1 matched of 1 predicted, 2 reference)")
    assert "1/1 reference Signals with at least one matched occurrence (100.00%), 1/1 with " \
           "at least half (100.00%)" in proc.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"session": "s1", "component": {"type": "tool"}}]))
    proc = run_eairc("signals", "match", bad, ref, cwd=study)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "bad.json: occurrences.0.component.name: Field required" in proc.stderr
    proc = run_eairc("signals", "match", "runs/s", ref, cwd=study)
    assert proc.returncode == 1 and "holds 2 audits" in proc.stderr
    proc = run_eairc("signals", "match", tmp_path / "nope.json", ref, cwd=study)
    assert proc.returncode == 1 and "no such file" in proc.stderr


def test_cli_match_reads_a_signals_store(study: Path) -> None:
    """A store updated from the oracle audit matches exactly as the audit folder does."""
    from eairdsl.signals.store import SignalsStore

    path = study / "runs/oracle-signals.sqlite"
    with SignalsStore.open(path) as store:
        store.update(study / "runs/s/audit/oracle")
    via_store = run_eairc("signals", "match", "runs/s/audit/offline", path, "--json", "--leads",
                          cwd=study)
    via_audit = run_eairc("signals", "match", "runs/s/audit/offline", "runs/s/audit/oracle",
                          "--json", "--leads", cwd=study)
    assert via_store.returncode == 0, via_store.stderr
    a, b = json.loads(via_store.stdout), json.loads(via_audit.stdout)
    assert a["occurrences"] == b["occurrences"] and a["pairs"] == b["pairs"]
    # the store's Signals carry its own ids, but group as the fingerprints do: same rates
    assert a["signals"] == b["signals"] and a["coverage"] == b["coverage"]
    assert {p["ref"] for p in a["signal_pairs"]}.isdisjoint(
        {p["ref"] for p in b["signal_pairs"]})
