"""The trace viewer's data: every trace of a study in a few compressed script files.

One HTML page per trace made a 5,000-episode report weigh 219 MB. Instead the
report has one viewer page (`trace.html`) that loads the trace it is asked for
(`trace.html#c0003.17`: chunk c0003, trace 17) from `traces/c0003.js`. The
page opens from disk (file://), where browsers refuse `fetch()` of local
files but do run a local `<script>`: each chunk file is one call,
`eairTraceChunk("c0003", "<base64>")`, whose argument is the chunk's JSON,
zlib-compressed (the page inflates it with the browser's DecompressionStream).

A chunk holds up to `CHUNK_SIZE` traces of one world and condition, the same
instance's episodes side by side, and a shared string table: every message,
tool argument, tool result, state diff, header, result, model call part and
prompt message is stored once per chunk as JSON text and referred to by its
index. Episodes of one world repeat the same records, cards and prompts, so
this is 2–15× smaller than compressing each trace alone.

Model calls. An LLM trace's header lists `model_calls`, each with the `task`
and `step` (the participant's decision number within that task) it was made
for, or a judge's `rubric`; the `.calls.ndjson` sidecar beside the trace holds
the same calls in the same order with the full prompt `messages`, the tool
schemas and the latency. `place_calls` ties each call to the trace step of the
action it produced: the participant's n-th action event in that task (a tool
call it made, or its reply message; a call routed by a guard is not a
decision); a call that produced none (it failed) goes under the task's last
event. Judges' calls and calls with no task event stay unplaced (`at` None):
the viewer lists them after the steps.

Audits. A trace that an audit of the study covered (`eairdsl.study.audits`)
carries `audits`, one entry per arm, as one string-table reference: the
verdict, the report's findings and leads with their certificates and a small
SVG of the episode graph each, and the validator's diagnostics. The page draws
them as a findings panel above the steps, each cited step id a link to its row.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHUNK_SIZE", "EVENT_BLOBS", "TraceItem", "decode_chunk", "decode_trace",
           "load_trace", "place_calls", "write_chunks"]

#: traces per chunk file: small enough to load at once, big enough to share strings
CHUNK_SIZE = 48
CHUNK_VERSION = 1
#: event fields kept in the string table (the rest are short and stay inline)
EVENT_BLOBS = ("content", "args", "result", "diff", "reason")
#: model call fields kept in the string table; `messages` is a list of indices
CALL_BLOBS = ("reply", "tool_calls", "error", "tool_schemas", "tools")
_ROW_KEYS = ("world", "model", "agents", "condition", "instance", "seed", "rep", "attempt",
             "run_seed", "retained", "valid")


def _sidecar(trace: Path) -> Path:
    """As eairdsl.api.calls_file (not imported: it would load the runtime)."""
    return trace.with_name(trace.name.removesuffix(".jsonl") + ".calls.ndjson")


def place_calls(events: Sequence[dict[str, Any]],
                calls: Sequence[dict[str, Any]]) -> list[str | None]:
    """The trace step each model call belongs to (None: a judge's, or no event of its task)."""
    actions: dict[tuple[int, str], list[str]] = defaultdict(list)
    last_of_task: dict[int, str] = {}
    previous: dict[tuple[int, str], dict[str, Any]] = {}
    for e in events:
        task, actor, step = e.get("task"), e.get("actor"), e.get("step")
        if not isinstance(task, int) or not isinstance(step, str):
            continue
        last_of_task[task] = step
        key = (task, str(actor))
        before = previous.get(key)
        previous[key] = e
        routed = (before is not None and before.get("kind") == "decision"
                  and str(before.get("content") or "").startswith("routed to"))
        decided = (e.get("kind") == "tool_call" and not routed) or (
            e.get("kind") == "message" and e.get("tool") != "delegation")
        if decided:
            actions[key].append(step)
    out: list[str | None] = []
    for c in calls:
        task, step = c.get("task"), c.get("step")
        if not isinstance(task, int) or not isinstance(step, int):
            out.append(None)
            continue
        mine = actions.get((task, str(c.get("participant"))), [])
        if "error" not in c and 0 <= step < len(mine):
            out.append(mine[step])
        else:
            out.append(last_of_task.get(task))
    return out


@dataclass(frozen=True)
class TraceItem:
    """One stored attempt whose trace the viewer shows."""

    index: int  # the row's position in `Store.rows()`
    row: dict[str, Any]
    source: Path  # the trace file
    raw: str  # the trace's link relative to the report folder
    doc: str | None = None  # the condition's description
    #: reads the trace's audits, one per arm (`eairdsl.study.audits.episode_audits`), when
    #: its chunk is written; None: none. A function, not the list: 20,000 audited
    #: episodes' findings and graphs held until the chunks were written took 600 MB
    audits: Callable[[], list[dict[str, Any]]] | None = None


def load_trace(item: TraceItem) -> dict[str, Any]:
    """A trace as the viewer reads it: row, condition doc, header, events, result, calls."""
    header: dict[str, Any] = {}
    result: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    damaged: list[str] = []  # a trace is untrusted: what could not be read, shown, not fatal
    for _, data in _json_lines(item.source, damaged):
        kind = data.pop("type", None)
        if kind == "header":
            header = data
        elif kind == "result":
            result = data
        else:
            events.append(data)
    listed = header.pop("model_calls", None)
    calls = [dict(c) for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    sidecar = _sidecar(item.source)
    if calls and sidecar.is_file():
        full = [data for _, data in _json_lines(sidecar, damaged)]
        for call, extra in zip(calls, full, strict=False):
            if extra.get("participant") != call.get("participant"):
                break  # not the same sequence: show the digests only
            call["messages"] = extra.get("messages")
            call["tool_schemas"] = extra.get("tools")
            call["latency"] = extra.get("latency")
    for call, at in zip(calls, place_calls(events, calls), strict=True):
        call["at"] = at
    row = {k: item.row.get(k) for k in _ROW_KEYS}
    out: dict[str, Any] = {"row": row, "doc": item.doc, "raw": item.raw, "header": header,
           "events": events, "result": result, "calls": calls}
    audits = item.audits() if item.audits is not None else None
    if audits:
        out["audits"] = audits
    if damaged:  # absent for a whole trace: the chunk bytes stay as they were
        out["damaged"] = damaged
    return out


def _json_lines(path: Path, damaged: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers; an unreadable file or
    line is described in `damaged` (a cut or edited trace must not stop the report)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        damaged.append(f"{path.name}: cannot be read ({exc})")
        return []
    found: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            damaged.append(f"{path.name} line {n}: not JSON ({exc})")
            continue
        if not isinstance(data, dict):
            damaged.append(f"{path.name} line {n}: not a JSON object")
            continue
        found.append((n, data))
    return found


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def ref(self, value: Any) -> int:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.index)
        return found


def _encode(trace: dict[str, Any], s: _Strings) -> dict[str, Any]:
    events = []
    for e in trace["events"]:
        events.append({k: (s.ref(v) if k in EVENT_BLOBS else v) for k, v in e.items()
                       if v is not None})
    calls = []
    for c in trace["calls"]:
        enc: dict[str, Any] = {}
        for k, v in c.items():
            if v is None:
                continue
            if k == "messages":
                enc[k] = [s.ref(m) for m in v]
            elif k in CALL_BLOBS:
                enc[k] = s.ref(v)
            else:
                enc[k] = v
        calls.append(enc)
    out = {"row": trace["row"], "doc": trace["doc"], "raw": trace["raw"],
           "header": s.ref(trace["header"]), "result": s.ref(trace["result"]),
           "events": events, "calls": calls}
    if trace.get("audits"):  # absent, not empty, for a trace no audit saw: same bytes as before
        out["audits"] = s.ref(trace["audits"])
    if trace.get("damaged"):
        out["damaged"] = s.ref(trace["damaged"])
    return out


def _chunk_text(traces: Iterable[dict[str, Any]]) -> str:
    s = _Strings()
    encoded = [_encode(t, s) for t in traces]
    return json.dumps({"v": CHUNK_VERSION, "s": list(s.index), "t": encoded},
                      ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _group_key(item: TraceItem) -> tuple[Any, ...]:
    r = item.row
    return (str(r["world"]), str(r["condition"]), str(r["instance"]), int(r["seed"]),
            int(r["rep"]), str(r["model"]), int(r["attempt"]))


def _ours(path: Path) -> bool:
    """A file the viewer writes: a chunk script (`c0003.js`) or an older per-trace page."""
    return path.is_file() and (path.suffix == ".html" or (
        path.suffix == ".js" and path.name.startswith("c")))


def remove_viewer(report: Path, page: str, folder: str) -> None:
    """Remove an earlier report's trace viewer (its page and chunk files) from `report`, so a
    report written without traces leaves no stale viewer behind; other files stay."""
    (report / page).unlink(missing_ok=True)
    chunks = report / folder
    if chunks.is_dir():
        for old in chunks.iterdir():
            if _ours(old):
                old.unlink()
        if not any(chunks.iterdir()):
            chunks.rmdir()


def write_chunks(items: Sequence[TraceItem], folder: Path,
                 size: int = CHUNK_SIZE) -> dict[int, str]:
    """Write the chunk files of `items` into `folder`; returns each row index's link target
    (`c0003.17`). Chunk files of an earlier report that are not rewritten are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[TraceItem]] = defaultdict(list)
    for item in sorted(items, key=_group_key):
        groups[(str(item.row["world"]), str(item.row["condition"]))].append(item)
    links: dict[int, str] = {}
    written: set[str] = set()
    number = 0
    for key in sorted(groups):
        members = groups[key]
        for start in range(0, len(members), size):
            part = members[start:start + size]
            number += 1
            name = f"c{number:04d}"
            text = _chunk_text(load_trace(i) for i in part)
            packed = base64.b64encode(zlib.compress(text.encode("utf-8"), 6)).decode("ascii")
            (folder / f"{name}.js").write_text(f'eairTraceChunk("{name}","{packed}");\n',
                                               encoding="utf-8")
            written.add(f"{name}.js")
            for i, item in enumerate(part):
                links[item.index] = f"{name}.{i}"
    for old in folder.iterdir():  # an earlier report's chunks and per-trace pages
        if old.name not in written and _ours(old):
            old.unlink()
    return links


def decode_chunk(path: Path) -> dict[str, Any]:
    """A chunk file's JSON (what the viewer page inflates), for tests and tools."""
    text = path.read_text(encoding="utf-8")
    packed = text.split('","', 1)[1].rsplit('")', 1)[0]
    data: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(packed)))
    return data


def decode_trace(chunk: dict[str, Any], i: int) -> dict[str, Any]:
    """Trace `i` of a decoded chunk with every string-table reference resolved."""
    strings = chunk["s"]

    def get(ref: int) -> Any:
        return json.loads(strings[ref])

    t = chunk["t"][i]
    events = [{k: (get(v) if k in EVENT_BLOBS else v) for k, v in e.items()}
              for e in t["events"]]
    calls = []
    for c in t["calls"]:
        calls.append({k: ([get(m) for m in v] if k == "messages" else get(v)
                          if k in CALL_BLOBS else v) for k, v in c.items()})
    out = {**t, "header": get(t["header"]), "result": get(t["result"]), "events": events,
           "calls": calls}
    for key in ("audits", "damaged"):
        if key in t:
            out[key] = get(t[key])
    return out
