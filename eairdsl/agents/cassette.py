"""Record and replay LLM exchanges: a JSONL cassette keyed by a stable request hash.

Every line is one exchange:

    {"v": 1, "key": "<sha256>", "scope": "d1/canonical/hr-1/s0/assistant",
     "occurrence": 0, "request": {...canonical request...},
     "response": {"content": ..., "tool_calls": [...], "usage": {...}, "cost": ...}}

or, for a call that failed for good (retries exhausted), `"error": "<reason>"`
instead of `"response"`, so a replay reproduces the failure too. An exchange
that took more than one attempt carries `"attempts": N`, so the retries a
trace records replay too.

The key is the SHA-256 of the canonical JSON (sorted keys, no whitespace) of
`{"request": REQUEST, "scope": SCOPE}`. REQUEST holds what decides the answer
— model, messages, tools, tool choice, sampling options — and never keys,
endpoints or timeouts. SCOPE names the episode and participant, so episodes
that happen to send an identical request (same world, another seed) never
trade answers, whatever order concurrent episodes ran in. A scope that asks
the same request twice gets its recorded answers in order (`occurrence`).

Replay needs no network and no litellm import. A request that is not in the
cassette raises `CassetteMiss` with a message that says which cassette, which
episode and participant, and where the request departs from the nearest
recorded one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["CASSETTE_VERSION", "Cassette", "CassetteError", "CassetteMiss", "canonical_json",
           "check_recordable", "request_key"]

CASSETTE_VERSION = 1


class _Strict(BaseModel):
    # strict: a replayed answer is used as it is, so "5" is not a token count; extra keys
    # are allowed, so a newer eairdsl's cassette still reads
    model_config = ConfigDict(strict=True, extra="allow")


class _CallShape(_Strict):
    id: str = ""
    name: str = ""
    arguments: str | dict[str, Any] | None = None


class _UsageShape(_Strict):
    tokens_in: int = Field(ge=0)
    tokens_out: int = Field(ge=0)


class _ResponseShape(_Strict):
    content: str | None = None
    tool_calls: list[_CallShape] = []
    usage: _UsageShape
    cost: float | int
    finish_reason: str | None = None


class _EntryShape(_Strict):
    """One cassette line as `store` writes it: what a replay relies on, checked on load
    (a cassette is a file a user may have edited, cut or been sent)."""

    key: str
    scope: str = ""
    occurrence: int = Field(default=0, ge=0)
    attempts: int = Field(default=1, ge=1)
    response: _ResponseShape | None = None
    error: str | None = None


def _shape_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "the entry"
    message = str(first.get("msg", "invalid")).split(" or instance of ")[0]
    return f"{where}: {message}"


class CassetteError(ValueError):
    """A cassette cannot be read or written (bad file, wrong version)."""


class CassetteMiss(CassetteError):
    """Replay met a request that was never recorded."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: dict[str, Any], scope: str) -> str:
    return hashlib.sha256(canonical_json({"request": request, "scope": scope})
                          .encode("utf-8")).hexdigest()


class Cassette:
    """One cassette file, opened for `record` (truncated, then appended) or `replay`."""

    def __init__(self, path: Path, mode: str) -> None:
        if mode not in ("record", "replay"):
            raise ValueError(f"cassette mode must be record or replay, not {mode!r}")
        self.path = Path(path)
        self.mode = mode
        self.entries: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.by_scope: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.served = 0
        self.recorded = 0
        if mode == "record":
            check_recordable(self.path)
            try:
                self.path.write_text("", encoding="utf-8")
            except OSError as exc:
                raise CassetteError(f"cassette {self.path} cannot be written: "
                                    f"{exc.strerror or exc}") from None
        else:
            self._load()

    def _load(self) -> None:
        if self.path.exists() and not self.path.is_file():  # a folder, a FIFO, a device
            raise CassetteError(f"cassette {self.path} is not a regular file (a cassette is "
                                "the .jsonl file --record wrote)")
        if not self.path.is_file():
            raise CassetteError(f"cassette {self.path} does not exist (record one with "
                                "--record)")
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CassetteError(f"cassette {self.path} cannot be read: {exc}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CassetteError(f"{self.path}:{number}: not JSON ({exc.msg})") from None
            except RecursionError:
                raise CassetteError(f"{self.path}:{number}: not a cassette entry (nested too "
                                    "deep to read)") from None
            if not isinstance(entry, dict) or "key" not in entry or (
                    "response" not in entry and "error" not in entry):
                raise CassetteError(f"{self.path}:{number}: not a cassette entry (needs key "
                                    "and response or error)")
            if entry.get("v", CASSETTE_VERSION) != CASSETTE_VERSION:
                raise CassetteError(f"{self.path}:{number}: cassette version {entry.get('v')}, "
                                    f"this eairdsl reads version {CASSETTE_VERSION}")
            try:
                _EntryShape.model_validate(entry)
            except ValidationError as exc:
                raise CassetteError(f"{self.path}:{number}: not a cassette entry "
                                    f"({_shape_problem(exc)})") from None
            self.entries.setdefault(entry["key"], []).append((number, entry))
            self.by_scope.setdefault(str(entry.get("scope", "")), []).append((number, entry))
        for items in self.entries.values():
            items.sort(key=lambda item: int(item[1].get("occurrence", 0)))

    # ------------------------------------------------------------ replay
    def lookup(self, request: dict[str, Any], scope: str, occurrence: int,
               where: str = "") -> dict[str, Any]:
        """The recorded entry for this request (its `response` or `error`)."""
        key = request_key(request, scope)
        items = self.entries.get(key, [])
        if occurrence < len(items):
            self.served += 1
            return items[occurrence][1]
        raise CassetteMiss(self._miss_message(request, scope, key, occurrence=occurrence,
                                              recorded=len(items), where=where))

    def _miss_message(self, request: dict[str, Any], scope: str, key: str, *,
                      occurrence: int, recorded: int, where: str) -> str:
        head = (f"replay: cassette {self.path} has no response for the request of "
                f"{where or scope} (model {request.get('model')}, key {key[:12]})")
        if recorded:
            return (f"{head}: this request was recorded {recorded} time(s) but is asked a "
                    f"{occurrence + 1}th time")
        same_scope = self.by_scope.get(scope, [])
        if not same_scope:
            return (f"{head}: the cassette holds nothing for {scope}; it was recorded for "
                    "other episodes, participants or worlds. Re-record with --record.")
        best_line, best_path, best_depth = 0, "", -1
        for line, entry in same_scope:
            path, depth = _first_difference(entry.get("request", {}), request)
            if depth > best_depth:
                best_line, best_path, best_depth = line, path, depth
        return (f"{head}: nearest recorded request ({self.path}:{best_line}) differs at "
                f"{best_path or 'the top level'}. The world, condition, model or options "
                "changed since recording; re-record with --record.")

    # ------------------------------------------------------------ record
    def store(self, request: dict[str, Any], scope: str, occurrence: int,
              response: dict[str, Any] | None = None, error: str | None = None,
              attempts: int = 1) -> None:
        entry: dict[str, Any] = {"v": CASSETTE_VERSION, "key": request_key(request, scope),
                                 "scope": scope, "occurrence": occurrence, "request": request}
        if attempts > 1:  # retries happened live; a replay reports the same
            entry["attempts"] = attempts
        if error is not None:
            entry["error"] = error
        else:
            entry["response"] = response
        with self.path.open("a", encoding="utf-8") as f:
            f.write(canonical_json(entry) + "\n")
        self.recorded += 1


def check_recordable(path: Path) -> None:
    """Refuse a cassette path that cannot be recorded to, without touching what it holds.

    Opening a cassette to record empties it; a command checks with this first, so that
    a run refused before any model call (a mistyped --condition) leaves an earlier
    recording as it was. Creates the parent folder, as recording would.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise CassetteError(f"cassette {path} exists and is not a regular file; "
                            "record to a .jsonl file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise CassetteError(f"cassette {path} cannot be written: "
                            f"{exc.strerror or exc}") from None


def _first_difference(recorded: Any, asked: Any, path: str = "") -> tuple[str, int]:
    """Where two requests first differ, and how deep the common part goes."""
    if isinstance(recorded, dict) and isinstance(asked, dict):
        depth = 0
        for k in sorted(set(recorded) | set(asked)):
            sub = f"{path}.{k}" if path else k
            if k not in recorded or k not in asked:
                return f"{sub} (present in only one)", depth
            if recorded[k] != asked[k]:
                inner, d = _first_difference(recorded[k], asked[k], sub)
                return inner, depth + d
            depth += 1
        return path, depth
    if isinstance(recorded, list) and isinstance(asked, list):
        for i, (a, b) in enumerate(zip(recorded, asked, strict=False)):
            if a != b:
                inner, d = _first_difference(a, b, f"{path}[{i}]")
                return inner, i + d
        if len(recorded) != len(asked):
            n = min(len(recorded), len(asked))
            return f"{path}[{n}] (recorded {len(recorded)} items, asked {len(asked)})", n
        return path, len(recorded)
    return f"{path} (recorded {str(recorded)[:60]!r}, asked {str(asked)[:60]!r})", 0
