"""`audit.bundle.read_grader_index`: the one reader of a bundles folder's
grader-index.json, tolerant of what a damaged or older index holds, strict on request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eairdsl.audit.bundle import GRADER_INDEX, read_grader_index
from eairdsl.audit.folder import AuditFolder

LABEL = {"condition": "base", "instance": "i1", "seed": 3, "agents": {"clerk": "sim"},
         "digest": "d", "realized": False, "utility": True}


def _write(folder: Path, data: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / GRADER_INDEX).write_text(json.dumps(data), encoding="utf-8")


def test_a_missing_index_is_empty(tmp_path: Path) -> None:
    index = read_grader_index(tmp_path)
    assert index.episodes == {} and index.labels == {}


def test_bad_entries_are_left_out_and_good_ones_kept(tmp_path: Path) -> None:
    _write(tmp_path, {"episodes": {"e1": ["../runs/a.jsonl"], "e2": "not a list", "e3": []},
                      "labels": {"../runs/a.jsonl": LABEL, "../runs/b.jsonl": {"seed": "x"}}})
    index = read_grader_index(tmp_path)
    assert index.episodes == {"e1": ["../runs/a.jsonl"], "e3": []}
    assert list(index.labels) == ["../runs/a.jsonl"]
    assert index.labels["../runs/a.jsonl"].seed == 3


def test_not_json_is_empty_unless_strict(tmp_path: Path) -> None:
    tmp_path.joinpath(GRADER_INDEX).write_text("{ not json", encoding="utf-8")
    assert read_grader_index(tmp_path).episodes == {}
    with pytest.raises(ValueError):
        read_grader_index(tmp_path, strict=True)
    _write(tmp_path, ["a", "list"])
    assert read_grader_index(tmp_path, strict=True).episodes == {}


def test_an_audit_folder_reads_names_and_labels_in_one_go(tmp_path: Path) -> None:
    bundles = tmp_path / "audit" / "bundles"
    _write(bundles, {"episodes": {"e1": ["../../runs/a.jsonl"]},
                     "labels": {"../../runs/a.jsonl": LABEL}})
    names, labels = AuditFolder(tmp_path / "audit").grader_index()
    expected = str((tmp_path / "runs" / "a.jsonl").resolve())
    assert names == {"e1": [expected]}
    assert list(labels) == [expected] and labels[expected].instance == "i1"
