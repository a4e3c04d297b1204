"""Study measures (`study measure`): routing regret and the self-rating gap over a cohort.

The computation is a pure function of the store's rows, so it is tested on a
hand-made cohort whose numbers are worked out by hand below (EAIR C.5: regret
is the expert's solo score minus the selected reviewer's, truncated at zero;
F.8: the gap is a self-rating minus the same model and delegate's mean solo
score). The language side: formatting, a located error for a bad reference,
protection in `diff`, and the store's table (an older store reads as empty).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, load_sections

from eairdsl.compiler import compile_world
from eairdsl.diff import diff_worlds
from eairdsl.ir import CalibrationCellIR, RatingGapMeasure, RatingIR, RegretMeasure, World
from eairdsl.study.cohort import ALL_MODELS, compute, t_interval
from eairdsl.study.executor import run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.report import write_report
from eairdsl.study.store import STORE_FILE, Store
from eairdsl.syntax.fmt import format_text

CELLS = [CalibrationCellIR(condition="solo_legal", party="legal_counsel"),
         CalibrationCellIR(condition="solo_commercial", party="commercial_manager"),
         CalibrationCellIR(condition="solo_analyst", party="general_analyst")]
REGRET = RegretMeasure(name="routing_regret", score="solo_score", calibration=CELLS,
                       routed=["standard"], at="f1.eair:1:1", selected="selected_reviewer",
                       expert="legal_counsel")
GAP = RatingGapMeasure(name="self_rating_gap", score="solo_score", calibration=CELLS,
                       routed=["standard"], at="f1.eair:2:1",
                       ratings=[RatingIR(party="legal_counsel", metric="bid_legal"),
                                RatingIR(party="general_analyst", metric="bid_analyst")])


def _row(model: str, condition: str, retained: int = 1, world: str = "f1",
         **metrics: Any) -> dict[str, Any]:
    return {"world": world, "model": model, "agents": "llm:x", "condition": condition,
            "retained": retained, "metrics": json.dumps(metrics)}


def _cohort() -> list[dict[str, Any]]:
    """Model m1: solo scores legal 1.0 and 0.5 (mean 0.75), commercial 0.5, analyst 0.25 and
    0.25. Model m2: legal 0.5, analyst 1.0, no commercial calibration run."""
    return [
        _row("m1", "solo_legal", solo_score=1.0),
        _row("m1", "solo_legal", solo_score=0.5),
        _row("m1", "solo_legal", retained=0, solo_score=0.0),  # a non-retained attempt
        _row("m1", "solo_commercial", solo_score=0.5),
        _row("m1", "solo_analyst", solo_score=0.25),
        _row("m1", "solo_analyst", solo_score=0.25),
        _row("m1", "solo_analyst", solo_score=None),  # unassessed: no baseline value
        _row("m2", "solo_legal", solo_score=0.5),
        _row("m2", "solo_analyst", solo_score=1.0),
        # routed episodes of m1
        _row("m1", "standard", selected_reviewer="general_analyst", bid_legal=0.33,
             bid_analyst=1.0),
        _row("m1", "standard", selected_reviewer="commercial_manager", bid_legal=0.66,
             bid_analyst=0.66),
        _row("m1", "standard", selected_reviewer="legal_counsel", bid_legal=None,
             bid_analyst="high"),
        _row("m1", "standard", selected_reviewer="general_analyst"),
        _row("m1", "standard", selected_reviewer=None),
        _row("m1", "standard", retained=0, selected_reviewer="general_analyst"),
        _row("m1", "standard", world="d1", selected_reviewer="general_analyst"),
        _row("m1", "generic_brief", selected_reviewer="general_analyst"),  # not routed here
        # routed episodes of m2
        _row("m2", "standard", selected_reviewer="general_analyst"),
        _row("m2", "standard", selected_reviewer="commercial_manager"),
    ]


def test_routing_regret_on_a_hand_made_cohort() -> None:
    """m1's regrets: analyst 0.75 - 0.25 = 0.5, commercial 0.75 - 0.5 = 0.25, legal 0,
    analyst 0.5; m2's analyst pick is 0.5 - 1.0, truncated to 0; m2's commercial pick has
    no baseline and an unassessed selection is left out, each with its reason."""
    result = compute(REGRET, "f1", _cohort())
    base = {(b.model, b.party): (b.mean, b.n, b.missing) for b in result.baselines}
    assert base[("m1", "legal_counsel")] == (0.75, 2, 0)
    assert base[("m1", "general_analyst")] == (0.25, 2, 1)
    assert base[("m2", "general_analyst")] == (1.0, 1, 0)
    assert ("m2", "commercial_manager") not in base
    assert result.episodes == 7  # retained, world f1, condition standard
    assert result.excluded == {"no calibration baseline for commercial_manager": 1,
                               "selected_reviewer unassessed": 1}
    values = {v.model: v for v in result.values}
    pooled = values[ALL_MODELS]
    assert pooled.n == 5 and pooled.positive == 3
    assert pooled.mean == pytest.approx((0.5 + 0.25 + 0 + 0.5 + 0) / 5)  # 0.25
    # sample sd of (0.5, 0.25, 0, 0.5, 0) about 0.25 is sqrt(0.25 / 4) = 0.25; t(4) = 2.776
    half = 2.776 * 0.25 / math.sqrt(5)
    assert (pooled.lo, pooled.hi) == (pytest.approx(0.25 - half), pytest.approx(0.25 + half))
    assert values["m1"].n == 4 and values["m1"].mean == pytest.approx(0.3125)
    assert values["m2"].n == 1 and values["m2"].mean == 0.0 and values["m2"].lo is None
    assert not result.offline


def test_self_rating_gap_on_a_hand_made_cohort() -> None:
    """Per bid: m1 legal 0.33 - 0.75 = -0.42 and 0.66 - 0.75 = -0.09 (no overclaim); m1
    analyst 1.0 - 0.25 = 0.75 and 0.66 - 0.25 = 0.41 (both overclaim). An unassessed bid,
    a bid that is not a number and m2 (no bids) are left out."""
    result = compute(GAP, "f1", _cohort())
    by_party = {v.party: v for v in result.values if v.model == ALL_MODELS}
    legal, analyst = by_party["legal_counsel"], by_party["general_analyst"]
    assert legal.n == 2 and legal.positive == 0
    assert legal.mean == pytest.approx((-0.42 - 0.09) / 2)
    assert analyst.n == 2 and analyst.positive == 2
    assert analyst.mean == pytest.approx((0.75 + 0.41) / 2)
    # t(1) = 12.706; sd of (0.75, 0.41) is 0.34 / sqrt(2)
    half = 12.706 * (0.34 / math.sqrt(2)) / math.sqrt(2)
    assert analyst.lo == pytest.approx(0.58 - half) and analyst.hi == pytest.approx(0.58 + half)
    # of the 7 routed episodes, 2 have both bids; one has no legal bid and the text "high"
    # for the analyst; the other 4 (m1's last two, m2's two) have neither
    assert result.episodes == 7
    assert result.excluded == {"bid_analyst not a number": 1, "bid_analyst unassessed": 4,
                               "bid_legal unassessed": 5}
    # per-model rows only for models that have values (m2 bid nothing)
    assert {v.model for v in result.values} == {ALL_MODELS, "m1"}


def test_t_interval_edges() -> None:
    assert t_interval([]) is None and t_interval([0.4]) is None
    lo, hi = t_interval([0.0, 1.0]) or (0, 0)
    assert (lo + hi) / 2 == pytest.approx(0.5)
    many = [float(i % 2) for i in range(100)]  # beyond the table: the normal's 1.96
    lo, hi = t_interval(many) or (0, 0)
    assert hi - 0.5 == pytest.approx(1.96 * math.sqrt(0.25 * 100 / 99) / 10)


# ---------------------------------------------------------------------- the language

def _fixture_world() -> str:
    section = next(s for s in load_sections(FIXTURES / "compile" / "study_measures.eair"))
    return section.body


def test_formatter_prints_the_canonical_layout() -> None:
    text = ('study measure   r : regret "doc" { score s // why\n'
            '  calibration a->x,b -> y routed c selected m expert x }\n')
    out, diagnostics = format_text(text)
    assert not diagnostics.errors
    assert out == ('study measure r : regret "doc" {\n'
                   '  score s // why\n'
                   '  calibration a -> x, b -> y\n'
                   '  routed c\n'
                   '  selected m\n'
                   '  expert x\n'
                   '}\n')
    assert format_text(out)[0] == out


def test_bad_reference_is_a_located_error(tmp_path: Path) -> None:
    text = _fixture_world().replace("routed main", "routed mian")
    (tmp_path / "world.eair").write_text(text, encoding="utf-8")
    result = compile_world(tmp_path / "world.eair")
    assert not result.ok
    [error] = result.diagnostics.errors
    line = next(i for i, ln in enumerate(text.split("\n"), 1) if "routed mian" in ln)
    assert (error.code, error.span.line, error.span.col) == ("E301", line, 10)
    assert error.message == "unknown condition 'mian'" and error.hint == "did you mean 'main'?"


def _compiled(tmp_path: Path, text: str, name: str) -> World:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "world.eair").write_text(text, encoding="utf-8")
    result = compile_world(folder / "world.eair")
    assert result.ok and result.world is not None, [d.message for d in result.diagnostics]
    return result.world


def test_protected_study_measure_in_diff(tmp_path: Path) -> None:
    """A protected study measure is touched when it changes and when a metric or condition
    it reads changes; an unprotected one is an ordinary change."""
    base = _fixture_world() + "protected regret_of_routing\n"
    old = _compiled(tmp_path, base, "old")
    same = _compiled(tmp_path, base.replace("  routed main\n", ""), "same")
    # `routed` left out defaults to every non-calibration condition: the same cells
    assert diff_worlds(old, same).changes == []
    redoc = _compiled(tmp_path, base.replace("the chosen one's", "the chosen's"), "redoc")
    [change] = diff_worlds(old, redoc).changes
    assert (change.kind, change.name, change.protected) == (
        "study_measure", "regret_of_routing", "study_measure 'regret_of_routing' is protected")
    rescored = _compiled(tmp_path, base.replace("metric score = len(messages()) / 4",
                                                "metric score = len(messages()) / 2"), "scored")
    flagged = {(c.kind, c.name): c.protected for c in diff_worlds(old, rescored).changes}
    assert "reads measure score" in (flagged[("study_measure", "regret_of_routing")] or "")
    assert flagged[("measure", "score")] is None
    # a calibration cell that now runs something else touches it; a lever default that the
    # routed condition only follows is the lever's change (as for a protected condition)
    recell = _compiled(tmp_path, base.replace("condition expert_solo {\n  solo = expert_alone",
                                              "condition expert_solo {\n  solo = novice_alone"),
                       "recell")
    flagged = {(c.kind, c.name): c.protected for c in diff_worlds(old, recell).changes}
    assert "reads condition expert_solo" in (flagged[("study_measure", "regret_of_routing")]
                                             or "")
    default = _compiled(tmp_path, base.replace("= routed\n", "= novice_alone\n"), "default")
    assert [(c.kind, c.name, c.protected) for c in diff_worlds(old, default).changes] == [
        ("lever", "solo", None)]
    added = _compiled(tmp_path, base.replace("protected regret_of_routing\n", "").replace(
        "study measure gap", "study measure gap2"), "renamed")
    kinds = {(c.kind, c.name, c.change) for c in diff_worlds(old, added).changes}
    assert ("study_measure", "gap2", "added") in kinds
    assert ("study_measure", "gap", "removed") in kinds


def test_store_keeps_declarations_and_results_and_old_stores_read_empty(
        tmp_path: Path) -> None:
    with Store.open(tmp_path / STORE_FILE) as store:
        store.register_world("f1", "d" * 64, conditions=["standard"])
        assert store.study_measures() == []  # never declared: no table at all
        assert store.conn.execute("SELECT name FROM sqlite_master WHERE name = "
                                  "'study_measures'").fetchone() is None
        store.register_world("f1", "d" * 64, study_measures=[REGRET, GAP])
        [(w1, m1, r1), (w2, m2, r2)] = store.study_measures()
        assert (w1, m1, r1, w2, m2, r2) == ("f1", REGRET, None, "f1", GAP, None)
        result = compute(REGRET, "f1", _cohort()).model_dump(mode="json")
        store.record_study_measure_results([result])
        assert store.study_measures()[0][2] == result
        store.conn.execute("UPDATE study_measures SET declaration = '{\"kind\": 1}'")
    with Store.open(tmp_path / STORE_FILE) as store, pytest.raises(Exception) as info:
        store.study_measures()
    assert "not readable" in str(info.value)
    with sqlite3.connect(tmp_path / STORE_FILE) as conn:
        conn.execute("DROP TABLE study_measures")  # as written before the table existed
    with Store.open(tmp_path / STORE_FILE) as store:
        assert store.study_measures() == []


def test_study_and_report_compute_and_show_them(tmp_path: Path) -> None:
    """`run_study` stores each declared measure's result; the report recomputes and shows it
    (the fixture world's actors score the same everywhere: regret 0, gap 0.66 - 0.25)."""
    world = _compiled(tmp_path, _fixture_world(), "w")
    summary = run_study([world], [plan_world(world, seeds=2)], parse_models("sim"),
                        tmp_path / "study", workers=1)
    [regret, gap] = summary.study_measures
    assert regret.name == "regret_of_routing" and regret.episodes == 2
    pooled = regret.values[0]
    assert (pooled.model, pooled.n, pooled.mean, pooled.positive) == (ALL_MODELS, 2, 0.0, 0)
    with Store.open(tmp_path / "study" / STORE_FILE, create=False) as store:
        stored = {m.name: r for _, m, r in store.study_measures()}
    assert stored["regret_of_routing"] == regret.model_dump(mode="json")
    score = 2 / 4  # two scripted messages in every episode
    assert {v.party: v.mean for v in gap.values} == {"expert": pytest.approx(0.66 - score),
                                                     "novice": pytest.approx(0.66 - score)}
    index = write_report(tmp_path / "study", traces=False)
    html = index.read_text(encoding="utf-8")
    assert 'id="study-measures-f1"' not in html and 'id="study-measures-w"' in html
    assert "regret_of_routing" in html and "self-rating gap" in html
    assert "describe the offline agents" in html


def test_repair_prompt_marks_a_protected_study_measure() -> None:
    """The LLM repair agent sees a protected study measure marked read-only; protecting the
    `measure` block does not mark it (it is its own declaration)."""
    from eairdsl.repair.llm import READ_ONLY_MARK, mark_protected

    source = "study measure r : regret {\n}\nmeasure {\n}\n"
    assert mark_protected(source, ["study_measure r"]).startswith(
        READ_ONLY_MARK + "\nstudy measure r")
    assert mark_protected(source, ["measure"]) == (
        f"study measure r : regret {{\n}}\n{READ_ONLY_MARK}\nmeasure {{\n}}\n")


def test_summary_lines_for_the_end_of_a_study() -> None:
    from eairdsl.study.cohort import summary_lines

    lines = summary_lines([compute(REGRET, "f1", _cohort())])
    assert lines[0].startswith("study measure f1.routing_regret: 0.250, 95% CI -0.060 to 0.560, "
                               "3/5 above zero")
    assert "study measure f1.routing_regret [m2]: 0.000, 0/1 above zero" in lines
    assert lines[-1] == ("study measure f1.routing_regret: left out 1 no calibration baseline "
                         "for commercial_manager; 1 selected_reviewer unassessed")
