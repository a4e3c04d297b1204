"""τ-bench (sierra-research/tau-bench) historical trajectories: OpenAI-style messages.

A file is a JSON list of records `{task_id, trial, reward, info, traj}`; each record
is one trace (instance `task<id>-trial<n>`). `traj` is the agent's message list; a
τ-bench conversation has exactly two parties, the simulated `user` and the agent
(`assistant`), so the role field states both ends of a text turn:

- `system` (the domain policy the agent is given): a message system -> assistant;
- `user`: a message user -> assistant;
- `assistant` without `tool_calls`: a message assistant -> user;
- `assistant` with `tool_calls`: one `tool_call` per call (`src_id` = the call id);
  its `content` is usually `None` — then there is no text step at all (absent stays
  absent); text beside tool calls is the assistant's own `decision` (τ-bench does
  not send it to the user);
- `tool`: the `tool_result` of the call with its `tool_call_id` (by the assistant,
  the caller).

`reward`, `info` (the task's instruction for the user simulator, the expected
actions and outputs, the reward breakdown), `task_id` and `trial` go to the grader
side file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    neutral_name,
    read_records,
    register,
    sha256_file,
)

__all__ = ["IMPORTER", "read"]

VERSION = "1"
_WHY = {"reward": "the benchmark's reward for the episode",
        "info": "the task's user instruction, expected actions and outputs, reward breakdown",
        "task_id": "the benchmark task id", "trial": "the trial number"}


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _record(path: Path, digest: str, n: int, rec: Any) -> ImportedTrace:
    where = f"[{n}]"
    if not isinstance(rec, dict) or not isinstance(rec.get("traj"), list):
        raise SourceError(path, where, "not a τ-bench record: no `traj` list")
    instance = f"task{rec.get('task_id', n)}-trial{rec.get('trial', 0)}"
    b = ImportedTrace(format="tau-bench", src=path, instance=instance,
                      world=neutral_name("tau_bench", path.stem), framework="tau-bench",
                      importer_version=VERSION, sha256=digest)
    b.note(f"record {n} of the file")
    calls: dict[str, str] = {}
    for i, m in enumerate(rec["traj"]):
        at = f"{where}.traj[{i}]"
        if not isinstance(m, dict):
            raise SourceError(path, at, "a message is not an object")
        role = m.get("role")
        content = _text(m.get("content"))
        sid = f"traj[{i}]"
        match role:
            case "system":
                b.message("system", content, recipient="assistant", basis="source-field",
                          src_index=i, src_id=sid)
            case "user":
                b.message("user", content, recipient="assistant", basis="source-field",
                          src_index=i, src_id=sid)
            case "assistant" if m.get("tool_calls"):
                if content is not None:
                    b.decision("assistant", content, src_index=i, src_id=sid)
                for k, call in enumerate(m["tool_calls"]):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                        raise SourceError(path, f"{at}.tool_calls[{k}]", "a tool call without "
                                          "a function name")
                    args = _arguments(fn.get("arguments"), path, f"{at}.tool_calls[{k}]")
                    cid = call.get("id") if isinstance(call.get("id"), str) else None
                    step = b.tool_call("assistant", fn["name"], args, src_index=i,
                                       src_id=cid or f"traj[{i}].tool_calls[{k}]")
                    if cid:
                        calls[cid] = step
            case "assistant":
                b.message("assistant", content, recipient="user", basis="source-field",
                          src_index=i, src_id=sid)
            case "tool":
                cid = m.get("tool_call_id")
                call = calls.get(cid) if isinstance(cid, str) else None
                if call is None:
                    b.note(f"{at}: tool output for unknown call {cid!r}: kept without a call")
                name = m.get("name")
                b.tool_result("assistant", content, tool=name if isinstance(name, str) else None,
                              call=call, src_index=i,
                              src_id=cid if isinstance(cid, str) else f"traj[{i}]")
            case _:
                raise SourceError(path, at, f"unknown role {role!r}")
    for key in sorted(rec):
        if key != "traj":
            b.withhold(key, rec[key], _WHY.get(key, "not part of the conversation"))
    return b


def _arguments(raw: Any, path: Path, where: str) -> dict[str, Any] | None:
    if raw is None or isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise SourceError(path, where, "tool call arguments are not JSON") from None
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    raise SourceError(path, where, "tool call arguments are neither JSON text nor an object")


def read(path: Path) -> Iterator[ImportedTrace]:
    """One trace per record of the file's JSON list (or its one record), read one record
    at a time."""
    digest = sha256_file(path)
    for n, rec in enumerate(read_records(path, lines=False)):
        yield _record(path, digest, n, rec)


IMPORTER = register(Importer(format="tau-bench", version=VERSION,
                             summary="τ-bench historical trajectories (OpenAI-style messages)",
                             read=read, accepts=lambda p: p.suffix == ".json"))
