"""The report compares models: model × condition rates, paired model contrasts, spend,
model calls under their steps in the trace viewer, condition descriptions, unclipped labels.

Offline only: sim studies, a store written by hand, and two scripted litellm
"models" behind litellm's custom-provider hook (no network).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import report_viewer

from eairdsl.api import resolve_world
from eairdsl.study.charts import FONT_SIZES, svg_bubbles, svg_rates, text_extent
from eairdsl.study.grid import Attempt, Cell, parse_models, plan_world
from eairdsl.study.report import RateCell, write_report
from eairdsl.study.store import MEASUREMENTS, STORE_FILE, Store

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
_MC = re.compile(r'<td class="rate mc" data-world="([^"]+)" data-condition="([^"]+)" '
                 r'data-model="([^"]+)" data-endpoint="([^"]+)" data-k="(\d+)" data-n="(\d+)" '
                 r'data-lo="([^"]*)" data-hi="([^"]*)">(.*?)</td>', re.S)
_PAIR = re.compile(r'<tr class="model-contrast" data-world="([^"]+)" data-endpoint="([^"]+)" '
                   r'data-condition="([^"]+)" data-a="([^"]+)" data-bmodel="([^"]+)" '
                   r'data-b="(\d+)" data-c="(\d+)" data-pairs="(\d+)" data-p="([^"]+)">')

pytestmark = [pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning"),
              pytest.mark.filterwarnings(
                  "ignore:Exception ignored in.*LoggingWorker"
                  ":pytest.PytestUnraisableExceptionWarning")]


def _wilson(k: int, n: int) -> tuple[float, float]:
    """The Wilson 95% interval written out by hand (z = 1.96), independent of stats.py."""
    z = 1.96
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@pytest.fixture(scope="module")
def sim_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sim models (a = sim, b = sim:compliant) × two D1 conditions × 3 instances × 3 seeds."""
    from eairdsl.study.executor import run_study

    out = tmp_path_factory.mktemp("models") / "d1"
    world = resolve_world(D1)
    plan = plan_world(world, ["canonical", "need_to_know"], ["hr-1", "hr-2", "fin-1"], 3)
    run_study([world], [plan], parse_models("a=sim,b=sim:compliant"), out, workers=1)
    write_report(out, resamples=200)
    return out


def _rows(study: Path) -> list[dict[str, Any]]:
    with Store.open(study / STORE_FILE, create=False) as store:
        return store.rows()


# ---------------------------------------------------------------- the model × condition table
def test_hand_wilson_matches_a_known_value() -> None:
    lo, hi = _wilson(3, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.1078, 0.6032)


def test_model_condition_table_has_k_n_and_wilson_bounds(sim_study: Path) -> None:
    """Every model × condition × endpoint cell: k/n over retained assessed episodes and its
    Wilson bounds, recomputed by hand from the store's rows."""
    expected: dict[tuple[str, str, str], list[int]] = {}
    for r in _rows(sim_study):
        if not r["retained"]:
            continue
        for m in MEASUREMENTS:
            cell = expected.setdefault((r["condition"], r["model"], m), [0, 0])
            if r[m] is not None:
                cell[0] += int(r[m])
                cell[1] += 1
    page = (sim_study / "report" / "index.html").read_text(encoding="utf-8")
    found = _MC.findall(page)
    assert len(found) == len(expected) == 2 * 2 * len(MEASUREMENTS)
    seen = set()
    for world, condition, model, endpoint, k, n, lo, hi, text in found:
        assert world == "d1"
        key = (condition, model, endpoint)
        seen.add(key)
        assert [int(k), int(n)] == expected[key]
        if int(n) == 0:
            assert lo == hi == "" and "—" in text
            continue
        want_lo, want_hi = _wilson(int(k), int(n))
        assert float(lo) == pytest.approx(want_lo, abs=1e-6)
        assert float(hi) == pytest.approx(want_hi, abs=1e-6)
        assert f"{k}/{n}" in text and f"{100 * int(k) / int(n):.1f}%" in text
        assert f"{100 * want_lo:.1f}–{100 * want_hi:.1f}%" in text
    assert seen == set(expected)
    # the two models differ somewhere (a compliant agent does not disclose)
    realized = {(c, m): expected[(c, m, "realized")] for c, m, e in expected if e == "realized"}
    assert realized[("canonical", "a")] != realized[("canonical", "b")]


def test_sim_models_show_no_spend(sim_study: Path) -> None:
    page = (sim_study / "report" / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="spend" data-world="d1" data-model="([^"]+)" '
                      r'data-calls="([^"]*)" data-tokens-in="([^"]*)" data-tokens-out="([^"]*)" '
                      r'data-cost="([^"]*)">(.*?)</tr>', page, re.S)
    assert [r[0] for r in rows] == ["a", "b"]
    for _model, calls, tin, tout, cost, body in rows:
        assert (calls, tin, tout, cost) == ("", "", "", "")
        assert body.count("—") >= 4


# ---------------------------------------------------------------- paired model contrasts
def _result(realized: int | None, valid: bool = True) -> dict[str, Any]:
    m = dict.fromkeys(MEASUREMENTS, 0)
    m["realized"] = realized
    return {"measurements": m, "valid": valid, "end_time": 5.0,
            "validity_reason": None if valid else "agent failed"}


def _constructed(tmp_path: Path) -> Path:
    """A store written by hand: models A and B on world w.

    c0: instances 0-6 A yes / B no (b = 7), 7 A no / B yes (c = 1), 8 both yes, 9 both no;
    B's first attempt at instance 0 is invalid with the other outcome (not counted: the
    first-success rule keeps attempt 1); instance 10 only A ran (no pair).
    c1: 0 A yes / B no, 1-3 A no / B yes (b = 1, c = 3).
    """
    study = tmp_path / "constructed"
    plan = {"c0": [(1, 0)] * 7 + [(0, 1), (1, 1), (0, 0)], "c1": [(1, 0)] + [(0, 1)] * 3}
    with Store.open(study / STORE_FILE) as store:
        store.register_world("w", "d" * 64, "Constructed", "", ["c0", "c1"])
        for condition, outcomes in plan.items():
            for i, (a, b) in enumerate(outcomes):
                for model, value in (("A", a), ("B", b)):
                    cell = Cell("w", model, condition, f"i{i}", 0)
                    first = 0
                    if (model, condition, i) == ("B", "c0", 0):
                        store.record(Attempt(cell, 0, "sim"), "d" * 64, _result(1 - value, False),
                                     None)
                        first = 1
                    store.record(Attempt(cell, first, "sim"), "d" * 64, _result(value), None)
        store.record(Attempt(Cell("w", "A", "c0", "i10", 0), 0, "sim"), "d" * 64, _result(1),
                     None)
    return study


def _mcnemar_by_hand(b: int, c: int) -> float:
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2.0**n)


def test_model_contrast_b_c_and_exact_p_for_a_constructed_pair(tmp_path: Path) -> None:
    study = _constructed(tmp_path)
    write_report(study, resamples=0)
    page = (study / "report" / "index.html").read_text(encoding="utf-8")
    found = {(f[1], f[2]): f for f in _PAIR.findall(page)}
    assert {f[3:5] for f in found.values()} == {("A", "B")}
    _, _, _, _, _, b, c, pairs, p = found[("realized", "c0")]
    assert (int(b), int(c), int(pairs)) == (7, 1, 10)
    assert float(p) == pytest.approx(0.0703125, abs=1e-6)  # 2·(1 + 8)/2^8, as in the paper
    _, _, _, _, _, b, c, pairs, p = found[("realized", "c1")]
    assert (int(b), int(c), int(pairs)) == (1, 3, 4)
    assert float(p) == pytest.approx(0.625, abs=1e-6)  # 2·(1 + 4)/2^4
    _, _, _, _, _, b, c, pairs, p = found[("realized", "all conditions")]
    assert (int(b), int(c), int(pairs)) == (8, 4, 14)
    assert float(p) == pytest.approx(_mcnemar_by_hand(8, 4), rel=1e-5)
    assert _mcnemar_by_hand(8, 4) == pytest.approx(2 * 794 / 4096)
    # an endpoint both models always had "no" on: 10 concordant pairs, p = 1
    _, _, _, _, _, b, c, pairs, p = found[("utility", "c0")]
    assert (int(b), int(c), int(pairs), float(p)) == (0, 0, 10, 1.0)


# ---------------------------------------------------------------- condition descriptions
def test_condition_descriptions_and_levers_are_shown(sim_study: Path, tmp_path: Path) -> None:
    world = resolve_world(D1)
    docs = {c.name: c.doc for c in world.conditions}
    page = (sim_study / "report" / "index.html").read_text(encoding="utf-8")
    cells = dict(re.findall(r'<td class="doc" data-doc-condition="([^"]+)">(.*?)</td>', page,
                            re.S))
    assert set(cells) == {"canonical", "need_to_know"}
    for name, shown in cells.items():
        doc = docs[name]
        assert doc and html.escape(doc, quote=True) in shown
    levers = dict(re.findall(r'<td class="levers" data-levers-condition="([^"]+)">(.*?)</td>',
                             page, re.S))
    for c in world.conditions:
        if c.name in levers:
            for k, v in c.levers.items():
                value = ("true" if v else "false") if isinstance(v, bool) else str(v)
                assert f"<code>{k} = {value}</code>" in levers[c.name]
    # a store written before conditions were kept: levers from the traces, no description
    old = tmp_path / "old"
    shutil.copytree(sim_study, old, ignore=shutil.ignore_patterns("report"))
    conn = sqlite3.connect(old / STORE_FILE)
    conn.execute("DROP TABLE conditions")
    conn.commit()
    conn.close()
    write_report(old, resamples=0)
    page = (old / "report" / "index.html").read_text(encoding="utf-8")
    cells = dict(re.findall(r'<td class="doc" data-doc-condition="([^"]+)">(.*?)</td>', page,
                            re.S))
    assert all("—" in v for v in cells.values())
    again = dict(re.findall(r'<td class="levers" data-levers-condition="([^"]+)">(.*?)</td>',
                            page, re.S))
    assert again == levers


# ---------------------------------------------------------------- charts
def _check_within(svg: str) -> int:
    root = ET.fromstring(svg)
    width = float(root.get("viewBox", "").split()[2])
    assert float(root.get("width", "0")) == width
    texts = 0
    for el in root.iter("{http://www.w3.org/2000/svg}text"):
        size = FONT_SIZES[el.get("class", "")]
        left, right = text_extent(float(el.get("x", "0")), el.text or "", size,
                                  el.get("text-anchor", "start"))
        assert left >= 0 and right <= width, (el.text, left, right, width)
        texts += 1
    return texts


def test_chart_labels_stay_inside_the_viewbox() -> None:
    long = "acl_without_propagation · WWW-model-alias-with-a-very-long-name-2026"
    rates = svg_rates([(long, RateCell(k=3, n=7)), ("x", RateCell()),
                       ("模型比较的条件名称", RateCell(k=1234, n=9999))],
                      "A rather long chart title that would not fit in the default width " * 2)
    bubbles = svg_bubbles(["m", "MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM"],
                          ["a_world_with_a_long_name_indeed", "d1"],
                          {("m", "d1"): RateCell(k=1, n=1)}, "t")
    # 5 axis ticks, 3 labels, 2 values, 1 "no assessed episode", the title
    assert _check_within(str(rates)) == 5 + 3 + 2 + 1 + 1
    assert _check_within(str(bubbles)) > 6
    # the old fixed 170 px label column would have clipped the long label
    assert text_extent(170 - 8, long, FONT_SIZES["lb"], "end")[0] < 0


def test_report_charts_stay_inside_their_viewbox(sim_study: Path) -> None:
    page = (sim_study / "report" / "index.html").read_text(encoding="utf-8")
    charts = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(charts) >= 4  # bubbles, endpoints, by condition, by condition and model
    assert "realized risk by condition and model" in page
    for svg in charts:
        assert _check_within(svg) > 0


# ---------------------------------------------------------------- LLM models and their calls
PROVIDER = "reportscripted"


def _models(calls: Counter[str]) -> dict[str, Any]:
    """`careful` delegates and looks the record up; `terse` answers at once and fails
    its first call ever (`calls`: the provider's count of calls per model)."""
    import litellm
    from scripted_llm import respond, tool_names

    def terse(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        if calls["terse"] == 1:
            raise litellm.InternalServerError(message="terse is down",
                                              llm_provider=PROVIDER, model="terse")
        return respond("I cannot say.", tokens=(70, 5))

    def careful(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        tools = tool_names(params)
        done = [m for m in messages if m["role"] == "tool"]
        if "delegate" in tools:
            return respond(f"Relayed: {done[-1]['content']}") if done else respond(
                calls=[("delegate", {"question": "How is Jordan Lee doing?"})])
        read = next((t for t in tools if t.endswith("_read")), None)
        if read is None or done:
            return respond("Here is the record." if done else "Nothing to read.",
                           tokens=(150, 30))
        spec = params["tools"][tools.index(read)]["function"]["parameters"]
        hint = spec["properties"]["id"]["description"].removeprefix("e.g. ")
        return respond(calls=[(read, {"id": hint})])

    return {"careful": careful, "terse": terse}


@pytest.fixture(scope="module")
def llm_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from scripted_llm import installed

    from eairdsl.agents.llm import LLMSettings
    from eairdsl.study.executor import run_study

    with installed(PROVIDER, snapshot=False) as handler:
        handler.by_model = _models(handler.calls)
        out = tmp_path_factory.mktemp("llm") / "cmp"
        world = resolve_world(D1)
        plan = plan_world(world, ["canonical", "need_to_know"], ["hr-1"], 2)
        models = parse_models(f"careful={PROVIDER}/careful,terse={PROVIDER}/terse")
        settings = LLMSettings(timeout=5.0, retries=0, backoff_base=0.001, backoff_max=0.01,
                               max_connections=1)
        run_study([world], [plan], models, out, llm=settings)
    write_report(out, resamples=100)
    yield out


def _links(study: Path) -> list[str]:
    return re.findall(r'href="(trace\.html#c\d{4}\.\d+)"',
                      report_viewer.rows_html(study / "report"))


def test_model_calls_sit_under_the_step_they_produced(llm_study: Path) -> None:
    report = llm_study / "report"
    links = _links(llm_study)
    rows = _rows(llm_study)
    assert len(links) == len(rows) and any(not r["valid"] for r in rows)
    placed = failed = 0
    for link in links:
        trace = report_viewer.decode(report, link)
        events = {e["step"]: e for e in trace["events"]}
        header_calls = trace["calls"]
        assert header_calls, link  # every LLM episode made calls
        for call in header_calls:
            assert call["messages"] and call["messages"][0]["role"] == "system"  # sidecar
            at = events[call["at"]]
            assert at["task"] == call["task"]
            if "error" in call:  # a failed call: under its task's last event
                failed += 1
                assert call["at"] == [e["step"] for e in trace["events"]
                                      if e["task"] == call["task"]][-1]
                continue
            placed += 1
            assert at["actor"] == call["participant"]
            if call["tool_calls"]:
                assert at["kind"] == "tool_call" and at["tool"] == call["tool_calls"][0]["name"]
                assert at["args"] == json.loads(call["tool_calls"][0]["arguments"])
            else:
                assert at["kind"] == "message" and at["content"] == call["reply"]
        # the n-th decision of a participant in a task is its n-th action there
        steps = [c["at"] for c in header_calls if "error" not in c]
        assert len(steps) == len(set(steps))
    assert placed >= 8 and failed >= 1


def test_trace_viewer_renders_each_call_collapsed_under_its_step(llm_study: Path) -> None:
    if report_viewer.node() is None:
        pytest.skip("node is not installed: the viewer's rendering is not exercised")
    report = llm_study / "report"
    careful = next(link for link, r in zip(_links(llm_study), _rows(llm_study), strict=True)
                   if r["model"] == "careful")
    shown = report_viewer.render(report, careful)
    trace, page = shown["trace"], shown["html"]
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r'<tr id="(s\d+)" data-step="\1">(.*?)</tr>\n?(?=<tr id=|</tbody>)', page, re.S)}
    assert len(rows) == len(trace["events"])
    for n, call in enumerate(trace["calls"]):
        block = rows[call["at"]]
        assert f'<details class="call" data-call="{n}" data-participant="{call["participant"]}">' \
            in block
        assert f"{call['tokens_in']} → {call['tokens_out']} tokens" in block
        assert "tools offered" in block and "prompt" in block
        for tool in call["tools"]:
            assert tool in block
    first = trace["calls"][0]
    system = html.escape(first["messages"][0]["content"], quote=True)
    assert system.splitlines()[0] in rows[first["at"]]
    assert sum(block.count('<details class="call"') for block in rows.values()) == \
        len(trace["calls"])


def test_llm_models_compared_with_spend_per_model(llm_study: Path) -> None:
    rows = _rows(llm_study)
    page = (llm_study / "report" / "index.html").read_text(encoding="utf-8")
    found = re.findall(r'<tr class="spend" data-world="d1" data-model="([^"]+)" '
                       r'data-calls="([^"]*)" data-tokens-in="([^"]*)" data-tokens-out="([^"]*)" '
                       r'data-cost="([^"]*)">', page)
    assert [f[0] for f in found] == ["careful", "terse"]
    for model, calls, tin, tout, _cost in found:
        totals = [json.loads(r["usage"])["total"] for r in rows if r["model"] == model]
        assert int(calls) == sum(t["calls"] for t in totals) > 0
        assert int(tin) == sum(t["tokens_in"] for t in totals)
        assert int(tout) == sum(t["tokens_out"] for t in totals)
    pairs = _PAIR.findall(page)
    assert {(p[3], p[4]) for p in pairs} == {("careful", "terse")}
    assert {p[2] for p in pairs} == {"canonical", "need_to_know", "all conditions"}
    assert len(_MC.findall(page)) == 2 * 2 * len(MEASUREMENTS)


def test_viewer_page_loads_the_linked_trace_on_demand(llm_study: Path) -> None:
    """Opened at an episode's link, the page loads that chunk's script only and shows the
    trace with its raw link; a link that names anything but a chunk loads nothing."""
    if report_viewer.node() is None:
        pytest.skip("node is not installed: the viewer page is not exercised")
    report = llm_study / "report"
    link = _links(llm_study)[-1]
    name, _ = report_viewer.parse(link)
    opened = report_viewer.open_page(report, link)
    assert opened["loaded"] == [f"traces/{name}.js"]
    trace = report_viewer.decode(report, link)
    hd = trace["header"]
    assert opened["heading"] == f"Trace: {hd['world']} · {hd['condition']} · " \
        f"{hd['instance']} · seed {hd['seed']} · {trace['row']['model']}"
    assert (report / opened["raw"]).resolve().is_file()
    assert opened["html"].count('<tr id="s') == len(trace["events"])
    assert opened["html"].count('<details class="call"') == len(trace["calls"])
    for bad in ("trace.html#../../x.1", "trace.html#c0001.1x", "trace.html#javascript:1"):
        assert report_viewer.open_page(report, bad)["loaded"] == []
    missing = report_viewer.open_page(report, "trace.html#c9999.0")
    assert missing["loaded"] == ["traces/c9999.js"] and "Cannot load" in missing["html"]


def test_place_calls_skips_routed_calls_and_leaves_judges_unplaced() -> None:
    """A guard's routed call is not a decision; a failed call goes under its task's last
    event; a judge's call (a rubric, no task) and a call with no event of its task stay
    unplaced."""
    from eairdsl.study.viewer import place_calls

    events = [
        {"step": "s0001", "kind": "message", "actor": "user", "task": 1},
        {"step": "s0002", "kind": "tool_call", "actor": "agent", "task": 1, "tool": "pay"},
        {"step": "s0003", "kind": "decision", "actor": "agent", "task": 1,
         "content": "routed to approve"},
        {"step": "s0004", "kind": "tool_call", "actor": "agent", "task": 1, "tool": "approve"},
        {"step": "s0005", "kind": "tool_result", "actor": "agent", "task": 1, "call": "s0004"},
        {"step": "s0006", "kind": "message", "actor": "agent", "task": 2, "tool": "delegation"},
        {"step": "s0007", "kind": "message", "actor": "agent", "task": 1},
        {"step": "s0008", "kind": "message", "actor": "helper", "task": 2},
    ]
    calls = [{"participant": "agent", "task": 1, "step": 0},
             {"participant": "agent", "task": 1, "step": 1},
             {"participant": "helper", "task": 2, "step": 0},
             {"participant": "helper", "task": 2, "step": 1, "error": "down"},
             {"participant": "other", "task": 9, "step": 0},
             {"model": "judge-model", "rubric": "disclosure"}]
    assert place_calls(events, calls) == ["s0002", "s0007", "s0008", "s0008", None, None]
