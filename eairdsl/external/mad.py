"""MAD (the MAST corpus, mcemri/MAST-Data on Hugging Face): one record per execution trace.

No MAD record is in the shared data folder; this importer follows the record shape
the dataset card documents (`mas_name`, `llm_name`, `benchmark_name`, `trace_id`,
`trace: {key, index, trajectory}`, `mast_annotation: {"1.1": 0|1, …}`) and is tested
on a hand-made fixture (tests/fixtures/external/mad_sample.json). A file is a JSON
list of records (`MAD_full_dataset.json`), one record, or JSON lines.

A record is keyed by the composite (framework, model, benchmark, trace id): the
trace id alone repeats across strata. Its `trajectory` is text whose role headers
depend on the framework:

- `ChatDev`: a ChatDev log, read by `eairdsl.external.chatdev` (tested on the real
  ChatDev log in the data folder);
- `AG2`: AutoGen's console transcript, a block per message headed
  `sender (to recipient):` and closed by a line of dashes — the header states the
  recipient (often `chat_manager`, the group chat's manager), so it is an edge;
- any other framework (AppWorld, HyperAgent, Magentic, MetaGPT, OpenManus): its
  role headers are not recognized here, so the trajectory is kept whole as one step
  of the framework's log (actor: the framework name), with a note — nothing is
  split on a guess.

`mast_annotation` (the corpus's LLM-judge failure-mode labels) and every field
but the trajectory go to the grader side file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eairdsl.external.chatdev import entries, feed
from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    neutral_name,
    read_records,
    register,
    sha256_file,
)

__all__ = ["IMPORTER", "ag2_blocks", "composite_key", "read"]

VERSION = "1"
_AG2_HEADER = re.compile(r"^(?P<sender>\S[^\n()]*?) \(to (?P<recipient>[^\n()]+?)\):\s*$")
_DASHES = re.compile(r"^-{20,}\s*$")


def composite_key(rec: dict[str, Any]) -> tuple[str, str, str, str]:
    """(framework, model, benchmark, trace id): what identifies a MAD record."""
    return (str(rec.get("mas_name")), str(rec.get("llm_name")), str(rec.get("benchmark_name")),
            str(rec.get("trace_id")))


def ag2_blocks(text: str) -> list[tuple[int, str, str, str]]:
    """AutoGen console blocks: (line, sender, recipient, content) for each
    `sender (to recipient):` header, content up to the dashed line or the next header."""
    lines = text.splitlines()
    out: list[tuple[int, str, str, str]] = []
    i = 0
    while i < len(lines):
        m = _AG2_HEADER.match(lines[i])
        if m is None:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not _DASHES.match(lines[i]) and not _AG2_HEADER.match(lines[i]):
            body.append(lines[i])
            i += 1
        out.append((start, m.group("sender").strip(), m.group("recipient").strip(),
                    "\n".join(body).strip()))
    return out


def _record(path: Path, digest: str, n: int, rec: Any) -> ImportedTrace:
    where = f"[{n}]"
    if not isinstance(rec, dict):
        raise SourceError(path, where, "a record is not an object")
    trace = rec.get("trace")
    if not isinstance(trace, dict):
        raise SourceError(path, f"{where}.trace", "a MAD record without a trace object")
    trajectory = trace.get("trajectory")
    if not isinstance(trajectory, str):
        raise SourceError(path, f"{where}.trace.trajectory", "a MAD record without a "
                          "trajectory text")
    missing = [k for k in ("mas_name", "llm_name", "benchmark_name", "trace_id")
               if rec.get(k) is None]
    if missing:
        raise SourceError(path, where, f"no {', '.join(missing)}: the composite key "
                          "(framework, model, benchmark, trace id) is incomplete")
    mas, llm, bench, tid = composite_key(rec)
    b = ImportedTrace(format="mad", src=path, instance=neutral_name(mas, bench, llm, tid),
                      world=neutral_name("mad", mas, bench), framework=mas,
                      importer_version=VERSION, sha256=digest)
    b.note(f"record {n}: key ({mas}, {llm}, {bench}, {tid})")
    if mas == "ChatDev":
        log = entries(trajectory, path)
        if log:
            feed(b, log)
        else:
            _whole(b, mas, trajectory, "no ChatDev log entries found")
    elif mas == "AG2" and (blocks := ag2_blocks(trajectory)):
        for k, (line, sender, recipient, content) in enumerate(blocks):
            if sender == recipient:
                b.message(sender, content, src_index=k, src_id=f"line {line}")
            else:
                b.message(sender, content, recipient=recipient, basis="source-field",
                          src_index=k, src_id=f"line {line}")
    else:
        _whole(b, mas, trajectory, f"role headers of {mas} are not recognized by this "
               "importer")
    for key in sorted(rec):
        if key == "trace":
            rest = {k: v for k, v in trace.items() if k != "trajectory"}
            if rest:
                b.withhold("trace", rest, "the corpus's record key and index")
        elif key == "mast_annotation":
            b.withhold(key, rec[key], "the corpus's failure-mode labels (its LLM judge)")
        else:
            b.withhold(key, rec[key], "record metadata (part of the composite key)")
    return b


def _whole(b: ImportedTrace, mas: str, trajectory: str, why: str) -> None:
    b.note(f"{why}: the trajectory is kept whole as one step")
    b.decision(mas, trajectory, src_index=0, src_id="trace.trajectory")


def read(path: Path) -> Iterator[ImportedTrace]:
    """One trace per record: a JSON list of records, one record, or JSON lines, read one
    record at a time."""
    digest = sha256_file(path)
    for n, rec in enumerate(read_records(path, lines=True)):
        yield _record(path, digest, n, rec)


IMPORTER = register(Importer(format="mad", version=VERSION,
                             summary="MAD / MAST corpus records (framework role headers)",
                             read=read, accepts=lambda p: p.suffix in (".json", ".jsonl")))
