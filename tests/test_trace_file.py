"""A trace file is written whole or not at all, and a damaged one is refused at its own
line: `read_trace` said "line 1 column 149" for a trace cut at line 8 (the position in
the bad line, from json), and pydantic's many-line dump for a wrong field."""

from __future__ import annotations

from pathlib import Path

import pytest

from eairdsl.api import resolve_world, run_episode
from eairdsl.runtime.trace import read_trace, read_trace_ends

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    result = run_episode(resolve_world(ROOT / "worlds" / "d1.eair"), "canonical", None, 0,
                         "sim", out)
    return Path(result.trace_path or "")


def test_a_cut_trace_is_refused_at_the_line_where_it_was_cut(trace_file: Path,
                                                             tmp_path: Path) -> None:
    lines = trace_file.read_text(encoding="utf-8").split("\n")
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:7]) + "\n" + lines[7][:40], encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        read_trace(cut)
    assert str(caught.value).startswith(f"{cut}:8: not JSON (")
    assert "\n" not in str(caught.value)


def test_a_wrong_field_names_its_line_and_field(trace_file: Path, tmp_path: Path) -> None:
    lines = trace_file.read_text(encoding="utf-8").split("\n")
    lines[2] = lines[2].replace('"kind": "', '"kind": "bogus_', 1)
    assert '"kind": "bogus_' in lines[2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        read_trace(bad)
    message = str(caught.value)
    assert message.startswith(f"{bad}:3: kind: ") and "\n" not in message
    lines[0] = "[1, 2]"
    bad.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=r":1: not a trace header"):
        read_trace(bad)


def test_writing_a_trace_replaces_the_file_whole(trace_file: Path, tmp_path: Path) -> None:
    trace = read_trace(trace_file)
    out = tmp_path / "t.jsonl"
    out.write_text("an older trace\n", encoding="utf-8")
    trace.write(out)
    assert out.read_bytes() == trace_file.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no part file left
    trace.header.world = "\ud800"  # cannot be encoded: nothing is written
    with pytest.raises(UnicodeEncodeError):
        trace.write(out)
    assert out.read_bytes() == trace_file.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_the_ends_of_a_trace_are_its_header_and_result(trace_file: Path,
                                                        tmp_path: Path) -> None:
    """`read_trace_ends` (the repair's read of an audit's traces) gives what `read_trace`
    gives of the header and result, without the events; a trace without a result line
    has none, a damaged end is refused with its file named."""
    whole = read_trace(trace_file)
    header, result = read_trace_ends(trace_file)
    assert header == whole.header and result == whole.result and result is not None
    lines = trace_file.read_text(encoding="utf-8").split("\n")
    open_ended = tmp_path / "no-result.jsonl"
    open_ended.write_text("\n".join(lines[:5]) + "\n", encoding="utf-8")
    assert read_trace_ends(open_ended) == (whole.header, None)
    alone = tmp_path / "header.jsonl"
    alone.write_text(lines[0] + "\n\n", encoding="utf-8")
    assert read_trace_ends(alone) == (whole.header, None)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:7]) + "\n" + lines[7][:40], encoding="utf-8")
    with pytest.raises(ValueError, match=r"cut\.jsonl: last line: not JSON"):
        read_trace_ends(cut)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="is empty"):
        read_trace_ends(empty)
    # a result line longer than one read from the end
    big = tmp_path / "big.jsonl"
    padded = result.model_copy(update={"validity_reason": "x" * 200_000})
    big.write_text("\n".join(lines[:-2]) + "\n" + padded.model_dump_json() + "\n",
                   encoding="utf-8")
    assert read_trace_ends(big)[1] == padded
