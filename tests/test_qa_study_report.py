"""`eairc report` interrupted half-way: what an earlier report's pages still link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eairdsl.api import resolve_world
from eairdsl.study.executor import run_study
from eairdsl.study.grid import parse_models, plan_world
from eairdsl.study.report import write_report

ROOT = Path(__file__).resolve().parents[1]


def test_an_interrupted_report_leaves_no_episode_list_linking_the_wrong_traces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study grew (another condition sorts first), the report was rerun and stopped
    after the chunk files: the earlier episodes.html stayed, and its links (c0001.0, …) now
    opened other episodes' traces. Now the list is removed before the chunks are
    rewritten and written again at the end."""
    from report_viewer import decode, rows_html

    from eairdsl.study import viewer

    d1 = resolve_world(ROOT / "worlds" / "d1.eair")
    study = tmp_path / "study"
    run_study([d1], [plan_world(d1, ["repaired"], ["hr-1"], 2)], parse_models("sim"), study,
              workers=1)
    write_report(study, resamples=0)
    report = study / "report"
    assert (report / "episodes.html").is_file()
    first = rows_html(report)
    link = re.findall(r'href="(trace\.html#c\d+\.\d+)"', first)[0]
    assert "/repaired/" in decode(report, link)["raw"]
    run_study([d1], [plan_world(d1, ["canonical", "repaired"], ["hr-1"], 2)],
              parse_models("sim"), study, workers=1)
    monkeypatch.setattr(viewer, "write_chunks", _then_stop(viewer.write_chunks))
    with pytest.raises(KeyboardInterrupt):
        write_report(study, resamples=0)
    assert "/canonical/" in decode(report, link)["raw"]  # the chunk now holds another trace
    assert not (report / "episodes.html").exists()  # … and no list links it as the old one
    monkeypatch.undo()
    write_report(study, resamples=0)
    assert (report / "episodes.html").is_file()
    links = re.findall(r'href="(trace\.html#c\d+\.\d+)"', rows_html(report))
    assert len(links) == 4


def _then_stop(write_chunks: object) -> object:
    def wrapped(*args: object, **kwargs: object) -> object:
        write_chunks(*args, **kwargs)  # type: ignore[operator]
        raise KeyboardInterrupt

    return wrapped
