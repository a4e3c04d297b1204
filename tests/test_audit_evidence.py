"""The bundle's one field rendering, its normalisation, and line splitting on "\\n" only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from eairdsl.audit.evidence import Bundle, Manifest, edge_ref, field_text, normalize
from eairdsl.runtime.trace import TraceEvent


def _bundle(tmp_path: Path, events: list[dict[str, object]]) -> Bundle:
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events)
    (tmp_path / "events.jsonl").write_text(text, encoding="utf-8")
    manifest = Manifest(episode="ep-x", steps=len(events),
                        files={"events.jsonl": hashlib.sha256(text.encode()).hexdigest()})
    (tmp_path / "manifest.json").write_text(manifest.model_dump_json(), encoding="utf-8")
    return Bundle.load(tmp_path)


def test_a_line_separator_inside_text_is_text_not_a_new_line(tmp_path: Path) -> None:
    b = _bundle(tmp_path, [
        {"type": "event", "step": "s0001", "t": 0.0, "kind": "message", "actor": "a",
         "recipient": "b", "edge": "a->b", "content": "first\u2028second\u0085third"},
        {"type": "event", "step": "s0002", "t": 1.0, "kind": "message", "actor": "b",
         "recipient": "a", "edge": "b->a", "content": "ok"}])
    assert [s.step for s in b.steps] == ["s0001", "s0002"]
    assert b.steps[0].content == "first\u2028second\u0085third"


def test_field_text_renders_paths_and_structures_canonically() -> None:
    step = TraceEvent(step="s0003", t=1.0, kind="tool_result", actor="a", tool="read",
                      call="s0002", result=[{"b": 2, "a": "x"}], rejected=False)
    assert field_text(step, "result") == '[{"a": "x", "b": 2}]'
    assert field_text(step, "result.0.a") == "x"
    assert field_text(step, "result.0.b") == "2"
    assert field_text(step, "result.1") is None and field_text(step, "content") is None
    assert edge_ref(step) == "tool:read->a"


def test_normalize_is_nfc_and_whitespace_runs_only() -> None:
    assert normalize(" e\u0301\t\n  x ") == "\u00e9 x"
    assert normalize("Belov") != normalize("below")  # no fuzzy leniency
