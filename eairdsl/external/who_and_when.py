"""Who&When (ag2ai/Agents_Failure_Attribution): failure-attribution traces, both subsets.

One JSON object per file: `history` (the ordered steps) and top-level fields.
The two subsets write a step differently:

- Algorithm-Generated (AG2 CaptainAgent group chats): `{"content", "role", "name"}`,
  the speaker in `name`, `role` only user/assistant. No step states a recipient
  (a group chat broadcasts), so none is recorded. `Computer_terminal` is the code
  executor: its turns are tool output, imported as `tool_result` events without a
  call (which message's code it ran is not stated).
- Hand-Crafted (Magentic-One): `{"content", "role"}` with the speaker in `role` and
  a qualifier: `Orchestrator (-> WebSurfer)` states the recipient (an edge),
  `Orchestrator (thought)` / `(termination condition)` are the orchestrator's own
  steps (decisions), a bare name is a message to no stated recipient.

Step `i` of the trace is `history[i]` (`src_index` = i, `src_id` = "history[i]").
Everything else in the file — `mistake_agent`, `mistake_step` (a string in the
source), `mistake_reason`, `ground_truth`, `is_correct`/`is_corrected`, the
question and its id, `level`, the AG2 `system_prompt` cards — goes to the grader
side file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    neutral_name,
    read_json,
    register,
    role_header,
)

__all__ = ["IMPORTER", "TOOL_SPEAKERS", "read"]

VERSION = "1"
#: speakers whose turns are tool output, not a participant's message (AG2's code executor)
TOOL_SPEAKERS = frozenset({"Computer_terminal"})
#: the orchestrator's own steps in Hand-Crafted traces: no one is addressed
_OWN_STEP = frozenset({"thought", "termination condition"})
_WHY = {
    "mistake_agent": "the failure-attribution label (which agent)",
    "mistake_step": "the failure-attribution label (which step; a string in the source)",
    "mistake_reason": "the failure-attribution label (why)",
    "ground_truth": "the task's reference answer",
    "is_correct": "the run's outcome",
    "is_corrected": "the run's outcome",
    "question": "task metadata (the task text itself is in the trace where the log has it)",
    "question_ID": "task metadata: the benchmark question id",
    "level": "task metadata: the benchmark difficulty level",
    "system_prompt": "the roles' cards; a trace has no place for them and a bundle of an "
                     "imported trace has no cards",
}


def _subset(path: Path, data: dict[str, Any]) -> str:
    for part in reversed(path.parts[:-1]):
        if part in ("Algorithm-Generated", "Hand-Crafted"):
            return part
    # not in a subset folder: the step shape tells
    history = data.get("history") or []
    named = any(isinstance(h, dict) and "name" in h for h in history)
    return "Algorithm-Generated" if named else "Hand-Crafted"


def _load(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise SourceError(path, "", "not a Who&When trace: no `history` list")
    return data


def _text(value: Any) -> str | None:
    """Content as the source has it: absent stays None, "" stays ""."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def read(path: Path) -> list[ImportedTrace]:
    data = _load(path)
    subset = _subset(path, data)
    b = ImportedTrace(format="who-and-when", src=path, instance=path.stem,
                      world=neutral_name("who_and_when", subset),
                      framework="AG2" if subset == "Algorithm-Generated" else "Magentic-One",
                      importer_version=VERSION)
    b.note(f"subset {subset}")
    for i, h in enumerate(data["history"]):
        where = f"history[{i}]"
        if not isinstance(h, dict):
            raise SourceError(path, where, "a step is not an object")
        content = _text(h.get("content"))
        if subset == "Algorithm-Generated":
            speaker = h.get("name")
            if not isinstance(speaker, str) or not speaker:
                raise SourceError(path, where, "an Algorithm-Generated step without `name`")
            if speaker in TOOL_SPEAKERS:
                b.tool_output(speaker, content, src_index=i, src_id=where)
            else:
                b.message(speaker, content, src_index=i, src_id=where)
            continue
        role = h.get("role")
        if not isinstance(role, str) or not role.strip():
            raise SourceError(path, where, "a Hand-Crafted step without `role`")
        header = role_header(role)
        if header.recipient is not None:
            b.message(header.speaker, content, recipient=header.recipient, basis="role-arrow",
                      src_index=i, src_id=where)
        elif header.qualifier in _OWN_STEP:
            b.decision(header.speaker, content, src_index=i, src_id=where)
        else:
            if header.qualifier is not None:
                b.note(f"role qualifier {header.qualifier!r} kept as a message without a "
                       "recipient")
            b.message(header.speaker, content, src_index=i, src_id=where)
    for key in sorted(data):
        if key != "history":
            b.withhold(key, data[key], _WHY.get(key, "not part of the ordered steps"))
    b.grader["steps"] = len(data["history"])
    b.grader["subset"] = subset
    return [b]


def _accepts(path: Path) -> bool:
    return path.suffix == ".json"


IMPORTER = register(Importer(format="who-and-when", version=VERSION,
                             summary="Who&When failure-attribution traces (both subsets)",
                             read=read, accepts=_accepts))
