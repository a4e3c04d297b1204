"""TRAIL (patronus-ai): GAIA traces as OpenInference span trees, with per-span annotations.

A trace file `GAIA/<trace id>.json` is OpenInference span JSON (a manager
`CodeAgent` and a managed `search_agent` as nested AGENT spans), imported by
`eairdsl.external.openinference`. Its annotations, `processed_annotations_*/<trace
id>.json` beside the trace folder, go to the grader side file only: per error a
`category`, a `location` (a span id: the trace events keep span ids as `src_id`),
`evidence`, `description` and `impact`, and the trace's `scores`.

Annotation files are not always strict JSON: TRAIL's upstream notes trailing
commas. `load_annotation` parses strictly first; only when that fails does it
remove commas that stand directly before a closing `]` or `}` (outside strings)
and try again, and it records how many it removed. Any other defect is a located
error, never repaired.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    json_where,
    neutral_name,
    read_json,
    read_text,
    register,
)
from eairdsl.external.openinference import build, load_spans

__all__ = ["IMPORTER", "annotation_path", "load_annotation", "read", "strip_trailing_commas"]

VERSION = "1"
_ANNOTATIONS = "processed_annotations"


def strip_trailing_commas(text: str) -> tuple[str, int]:
    """`text` without commas directly before `]`/`}` (whitespace between allowed), outside
    JSON strings; and how many were removed. Nothing else is changed."""
    out: list[str] = []
    removed = 0
    in_string = escaped = False
    pending: int | None = None  # index in `out` of a comma that may be trailing
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch in "]}" and pending is not None:
            del out[pending]
            removed += 1
            pending = None
        elif not ch.isspace():
            pending = None
        if ch == '"':
            in_string = True
        elif ch == ",":
            pending = len(out)
        out.append(ch)
    return "".join(out), removed


def load_annotation(path: Path) -> tuple[Any, str | None]:
    """An annotation file's JSON and, when trailing commas had to be removed, a note
    saying so. Raises `SourceError` (line and column) for anything else."""
    text = read_text(path)
    try:
        return json.loads(text), None
    except ValueError as first:
        fixed, removed = strip_trailing_commas(text)
        if removed == 0:
            raise SourceError(path, json_where(first), f"not JSON ({first})") from None
        try:
            data = json.loads(fixed)
        except ValueError:
            raise SourceError(path, json_where(first), f"not JSON ({first}), and not only "
                              "because of trailing commas") from None
        return data, (f"annotation file {path.name} is not strict JSON: {removed} trailing "
                      "comma(s) before a closing bracket removed to read it (no other change)")


def annotation_path(trace_path: Path) -> Path | None:
    """`<root>/GAIA/<id>.json` -> `<root>/processed_annotations_gaia/<id>.json` (the one
    sibling folder starting `processed_annotations` that has the file)."""
    root = trace_path.parent.parent
    try:
        folders = sorted(p for p in root.iterdir()
                         if p.is_dir() and p.name.startswith(_ANNOTATIONS))
    except OSError:
        return None
    hits = [f / trace_path.name for f in folders if (f / trace_path.name).is_file()]
    return hits[0] if len(hits) == 1 else None


def read(path: Path) -> list[ImportedTrace]:
    data = read_json(path)
    trace_id, roots = load_spans(data, path)
    split = path.parent.name
    b = ImportedTrace(format="trail", src=path, instance=trace_id or path.stem,
                      world=neutral_name("trail", split), framework="smolagents",
                      importer_version=VERSION)
    build(b, roots)
    ann = annotation_path(path)
    if ann is None:
        b.note("no annotation file found beside the trace folder: nothing to grade")
        return [b]
    labels, note = load_annotation(ann)
    if note is not None:
        b.note(note)
    if not isinstance(labels, dict):
        raise SourceError(ann, "", "an annotation file is not an object")
    if labels.get("trace_id") not in (None, trace_id or path.stem):
        raise SourceError(ann, "trace_id", f"names trace {labels.get('trace_id')!r}, not "
                          f"{trace_id or path.stem!r}")
    if "trace_id" not in labels:
        b.note(f"annotation file {ann.name} has no trace_id: matched by file name")
    b.withhold("errors", labels.get("errors", []),
               "TRAIL's annotations: per-span error category, location, evidence, impact")
    if "scores" in labels:
        b.withhold("scores", labels["scores"], "TRAIL's per-trace scores")
    b.grader["annotation_file"] = ann.name
    if note is not None:
        b.grader["annotation_note"] = note
    return [b]


def _accepts(path: Path) -> bool:
    return path.suffix == ".json" and not path.parent.name.startswith(_ANNOTATIONS)


IMPORTER = register(Importer(format="trail", version=VERSION,
                             summary="TRAIL traces (OpenInference span trees) with annotations",
                             read=read, accepts=_accepts))
