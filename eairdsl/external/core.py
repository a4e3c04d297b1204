"""The input adapter that invents nothing (EAIR §5.6, F.17): `ImportedTrace`.

Every importer reads one source format and feeds an `ImportedTrace`; the
builder, not the importer, writes the project trace (docs/trace.md) and a
grader-only side file, and it enforces the rules that make the same auditor
usable on other frameworks' logs:

- a recipient is recorded only with the source's own statement of it (a
  `basis`: a role arrow `(-> X)`, a span tree's parent, a tool call id); the
  builder never derives one from the previous speaker, so consecutive speakers
  are never an edge;
- tool-output pseudo-speakers (AG2's `Computer_terminal`) are `tool_result`
  events without a call, never participants;
- absent content stays absent (`None`), an empty string stays `""`;
- a nested agent span is a delegation (`tool: "delegation"`, caller->callee)
  and the reply edge is the child's final answer;
- each event keeps its source index and id (`src_index`, `src_id`);
- labels, answers, rewards and reference solutions are withheld: they go to
  `<instance>.grader.json`, never into the trace, and the header's `source`
  block says what was withheld and why.

No result line is written: an imported log has no measurements, and
`read_trace` accepts a trace without one.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from eairdsl import __version__
from eairdsl.external.stream import (
    MAX_WHOLE_BYTES,
    JsonStreamError,
    TooLarge,
    json_values,
    read_whole,
    sha256_of,
)
from eairdsl.registry import Registry
from eairdsl.runtime.trace import Event, Trace, TraceHeader

__all__ = ["EdgeBasis", "SourceError", "ImportedTrace", "Importer", "IMPORTERS",
           "GRADER_SUFFIX", "RoleHeader", "SourceBlock", "Withheld", "explicit_recipient",
           "grader_path", "import_path", "importers", "neutral_name", "register",
           "role_header", "safe_file_name", "sha256_file", "source_files", "json_where",
           "read_json", "read_records", "read_text", "MAX_WHOLE_BYTES"]

#: what states a recipient in the source; anything else is not an edge
EdgeBasis = Literal["role-arrow", "span-parent", "source-field", "tool-call"]
#: the grader-only side file beside `<instance>.jsonl`
GRADER_SUFFIX = ".grader.json"
_QUALIFIED = re.compile(r"^(?P<speaker>[^()]*?)\s*\((?P<inner>[^()]*)\)$")
_ARROW = re.compile(r"^->\s*(?P<recipient>\S.*)$")
_NEUTRAL = re.compile(r"[^a-z0-9]+")


class SourceError(ValueError):
    """A source file the importer cannot read: located (file, and where in it)."""

    def __init__(self, file: Path | str, where: str, why: str) -> None:
        self.file, self.where, self.why = str(file), where, why
        super().__init__(f"{file}: {where}: {why}" if where else f"{file}: {why}")


class Withheld(BaseModel):
    """One source field kept out of the trace, and why (listed in the header's `source`)."""

    field: str
    why: str


class SourceBlock(BaseModel):
    """The header's `source` block: where the events came from."""

    format: str
    file: str
    sha256: str
    importer: str
    framework: str
    withheld: list[Withheld] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def json_where(exc: ValueError) -> str:
    """Where a JSON parse failed (`line L, column C`), for a located SourceError."""
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}"
    return ""


def _too_large(path: Path, exc: TooLarge) -> SourceError:
    return SourceError(path, "", f"too large to read whole ({exc}): this format is one "
                       "document, read at once; split the source into several files (JSON "
                       "lists and JSON lines of records are read one record at a time)")


def read_text(path: Path) -> str:
    """A source file's text, or a SourceError saying why not (an unreadable file, bytes
    that are not UTF-8, a file over MAX_WHOLE_BYTES): the importers that read text, not
    JSON, use this one opener.
    A leading UTF-8 byte-order mark (Windows tools write one) is not text: it is dropped,
    as RFC 8259 allows for JSON, so it is neither "text before the first log entry" nor
    "not JSON". The source's sha256 is still of its bytes."""
    try:
        return read_whole(path)
    except TooLarge as exc:
        raise _too_large(path, exc) from None
    except OSError as exc:
        raise SourceError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SourceError(path, "", f"not UTF-8 text ({exc})") from None


def read_json(path: Path) -> Any:
    """A source file's JSON, read whole, or a SourceError saying why not and where (an
    unreadable file, bytes that are not UTF-8, malformed JSON at line and column, a
    file over MAX_WHOLE_BYTES)."""
    try:
        return json.loads(read_whole(path))
    except TooLarge as exc:
        raise _too_large(path, exc) from None
    except OSError as exc:
        raise SourceError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise SourceError(path, json_where(exc), f"not JSON ({exc})") from None


def read_records(path: Path, *, lines: bool) -> Iterator[Any]:
    """A JSON source's records one at a time (`stream.json_values`: the items of a
    top-level list, else the top-level value, with `lines` each of several), so memory
    follows the largest record, not the file; SourceErrors located as `read_json`'s.
    RecursionError passes through (`import_path` words it)."""
    try:
        yield from json_values(path, lines=lines)
    except JsonStreamError as exc:
        raise SourceError(path, exc.where, exc.why) from None
    except OSError as exc:
        raise SourceError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SourceError(path, "", f"not UTF-8 text ({exc})") from None


def sha256_file(path: Path) -> str:
    return sha256_of(path)


def neutral_name(*parts: str) -> str:
    """A neutral world name from source-file parts: lower case, `_` between words."""
    joined = "_".join(_NEUTRAL.sub("_", p.lower()).strip("_") for p in parts if p)
    return joined or "imported"


@dataclass(frozen=True)
class RoleHeader:
    """A role string split into its parts: `Name`, `Name (qualifier)` or `Name (-> X)`."""

    speaker: str
    recipient: str | None = None
    qualifier: str | None = None


def role_header(role: str) -> RoleHeader:
    """`"Orchestrator (-> WebSurfer)"` names a recipient; `"Orchestrator (thought)"` a
    qualifier; anything else is the speaker's name as written."""
    text = role.strip()
    m = _QUALIFIED.match(text)
    if m is None or not m.group("speaker"):
        return RoleHeader(text)
    speaker, inner = m.group("speaker"), m.group("inner").strip()
    arrow = _ARROW.match(inner)
    if arrow is not None:
        return RoleHeader(speaker, recipient=arrow.group("recipient").strip())
    return RoleHeader(speaker, qualifier=inner)


def explicit_recipient(role: str) -> tuple[str, str | None]:
    """`"Orchestrator (-> WebSurfer)"` -> ("Orchestrator", "WebSurfer"); a role without an
    explicit arrow names no recipient."""
    h = role_header(role)
    return h.speaker, h.recipient


@dataclass
class _Delegation:
    caller: str
    callee: str
    task: int


class ImportedTrace:
    """Build one project trace from one source trace, under the no-invention rules."""

    def __init__(self, *, format: str, src: Path, instance: str, world: str,
                 framework: str, importer_version: str, sha256: str | None = None) -> None:
        self.src = src
        self.instance = instance
        self.world = world
        digest = sha256 if sha256 is not None else sha256_file(src)
        self.source = SourceBlock(format=format, file=src.name, sha256=digest,
                                  importer=f"{format}/{importer_version}",
                                  framework=framework)
        self.participants: list[str] = []
        self.tools_seen: list[str] = []
        self.events: list[Event] = []
        self.grader: dict[str, Any] = {}
        self.explicit_edges = 0
        self._tasks = 0
        self._open: list[_Delegation] = []
        self._calls: dict[str, Event] = {}  # tool_call events by step

    # ------------------------------------------------------------ who
    def participant(self, name: str) -> str:
        if not name:
            raise ValueError("a participant needs a name")
        if name not in self.participants:
            self.participants.append(name)
        return name

    # ------------------------------------------------------------ events
    def _add(self, kind: Any, actor: str, *, t: float | None, src_index: int | None,
             src_id: str | None, **fields: Any) -> str:
        step = f"s{len(self.events) + 1:04d}"
        when = float(len(self.events)) if t is None else float(t)
        if "task" in fields:
            task = fields.pop("task")
        else:  # inside a delegation every event belongs to the child's task
            task = self._open[-1].task if self._open else None
        event = Event(step=step, t=when, kind=kind, actor=actor, task=task,
                      src_index=src_index, src_id=src_id, **fields)
        self.events.append(event)
        if kind == "tool_call":
            self._calls[step] = event
        return step

    def message(self, actor: str, content: str | None, *, recipient: str | None = None,
                basis: EdgeBasis | None = None, src_index: int | None = None,
                src_id: str | None = None, t: float | None = None,
                final: bool | None = None) -> str:
        """A message; `recipient` only with the `basis` on which the source states it."""
        self._check_recipient(actor, recipient, basis)
        self.participant(actor)
        edge = None
        if recipient is not None:
            self.participant(recipient)
            edge = f"{actor}->{recipient}"
            self.explicit_edges += 1
        return self._add("message", actor, t=t, src_index=src_index, src_id=src_id,
                         recipient=recipient, edge=edge, content=content, final=final)

    @staticmethod
    def _check_recipient(actor: str, recipient: str | None, basis: EdgeBasis | None) -> None:
        if recipient is None:
            if basis is not None:
                raise ValueError("a basis without a recipient")
            return
        if basis is None:
            raise ValueError(f"recipient {recipient!r} of {actor!r} without the source's "
                             "statement of it (basis): recipients are never inferred")
        if recipient == actor:
            raise ValueError(f"{actor!r} cannot be its own recipient")

    def tool_call(self, actor: str, tool: str, args: dict[str, Any] | None, *,
                  src_index: int | None = None, src_id: str | None = None,
                  t: float | None = None) -> str:
        self.participant(actor)
        if tool not in self.tools_seen:
            self.tools_seen.append(tool)
        return self._add("tool_call", actor, t=t, src_index=src_index, src_id=src_id,
                         tool=tool, args=args)

    def tool_result(self, actor: str, result: Any, *, tool: str | None = None,
                    call: str | None = None, rejected: bool | None = None,
                    src_index: int | None = None, src_id: str | None = None,
                    t: float | None = None) -> str:
        """A tool's output. `call` is the step of the call it answers, None when the source
        shows output without a call (a `Computer_terminal` speaker)."""
        if call is not None:
            # the index, not a scan of the events (quadratic in a long trace); the scan is
            # kept for events an importer appended itself
            called = self._calls.get(call) or next(
                (e for e in self.events if e.step == call and e.kind == "tool_call"), None)
            if called is None:
                raise ValueError(f"tool result answers {call!r}, which is not a tool call")
            tool = tool if tool is not None else called.tool
        if tool is not None and tool not in self.tools_seen:
            self.tools_seen.append(tool)
        return self._add("tool_result", actor, t=t, src_index=src_index, src_id=src_id,
                         tool=tool, call=call, result=result, rejected=rejected)

    def tool_output(self, speaker: str, content: str | None, *, src_index: int | None = None,
                    src_id: str | None = None, t: float | None = None) -> str:
        """A tool-output pseudo-speaker's turn: a `tool_result` without a call, whose actor
        is the pseudo-speaker (the caller is not stated), never a participant."""
        return self.tool_result(speaker, content, tool=speaker, src_index=src_index,
                                src_id=src_id, t=t)

    def decision(self, actor: str, content: str | None, *, src_index: int | None = None,
                 src_id: str | None = None, t: float | None = None) -> str:
        """A participant's own step that addresses no one (a thought, a plan, a log line)."""
        self.participant(actor)
        return self._add("decision", actor, t=t, src_index=src_index, src_id=src_id,
                         content=content)

    # ------------------------------------------------------------ delegations
    def delegate(self, caller: str, callee: str, content: str | None, *,
                 src_index: int | None = None, src_id: str | None = None,
                 t: float | None = None) -> str:
        """A nested agent span opens: the caller's request to the managed agent (an edge the
        span tree states), with a task of its own for the child's events."""
        self._check_recipient(caller, callee, "span-parent")
        self.participant(caller)
        self.participant(callee)
        self._tasks += 1
        task = self._tasks
        step = self._add("message", caller, t=t, src_index=src_index, src_id=src_id,
                         recipient=callee, edge=f"{caller}->{callee}", content=content,
                         tool="delegation", task=task)
        self.explicit_edges += 1
        self._open.append(_Delegation(caller, callee, task))
        return step

    def reply(self, content: str | None, *, src_index: int | None = None,
              src_id: str | None = None, t: float | None = None) -> str:
        """The innermost open delegation closes: the child's final answer is the reply edge."""
        if not self._open:
            raise ValueError("a reply without an open delegation")
        d = self._open[-1]
        step = self._add("message", d.callee, t=t, src_index=src_index, src_id=src_id,
                         recipient=d.caller, edge=f"{d.callee}->{d.caller}", content=content,
                         task=d.task)
        self.explicit_edges += 1
        self._open.pop()
        return step

    def unanswered(self) -> None:
        """The innermost delegation ends without a final answer: no reply is invented."""
        if not self._open:
            raise ValueError("no open delegation")
        d = self._open.pop()
        self.note(f"delegation {d.caller}->{d.callee} (task {d.task}) has no final answer "
                  "in the source; no reply edge recorded")

    def close_unanswered(self) -> None:
        """Delegations whose child never answered stay open: no reply is invented."""
        for d in self._open:
            self.note(f"delegation {d.caller}->{d.callee} (task {d.task}) has no final answer "
                      "in the source; no reply edge recorded")
        self._open.clear()

    # ------------------------------------------------------------ withheld, notes
    def withhold(self, field: str, value: Any, why: str) -> None:
        """Keep a source field out of the trace: it goes to the grader side file."""
        self.grader[field] = value
        if not any(w.field == field for w in self.source.withheld):
            self.source.withheld.append(Withheld(field=field, why=why))

    def note(self, text: str) -> None:
        if text not in self.source.notes:
            self.source.notes.append(text)

    # ------------------------------------------------------------ files
    def header(self) -> TraceHeader:
        return TraceHeader(world=self.world, digest=self.source.sha256, condition="imported",
                           levers={}, instance=self.instance, seed=0,
                           agents=dict.fromkeys(self.participants, "external"),
                           eairdsl_version=__version__,
                           source=self.source.model_dump(mode="json"))

    def trace(self) -> Trace:
        self.close_unanswered()
        trace = Trace(self.header())
        for e in self.events:
            trace._index(e)
        return trace

    def target(self, out: Path) -> Path:
        """Where `write` puts the trace: `<out>/<world>/<instance>.jsonl`."""
        return out / safe_file_name(self.world) / f"{safe_file_name(self.instance)}.jsonl"

    def write(self, out: Path) -> list[Path]:
        """Write `<out>/<world>/<instance>.jsonl` and, when anything was withheld, its
        grader side file. Returns the paths written."""
        path = self.target(out)
        self.trace().write(path)
        written = [path]
        if self.grader:
            side = grader_path(path)
            side.write_text(json.dumps({"format": self.source.format,
                                        "file": self.source.file,
                                        "sha256": self.source.sha256,
                                        "instance": self.instance,
                                        "framework": self.source.framework,
                                        "labels": self.grader}, sort_keys=True,
                                       ensure_ascii=False, indent=1) + "\n",
                            encoding="utf-8")
            written.append(side)
        return written


def safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "trace"


def grader_path(trace_path: Path) -> Path:
    """`<instance>.jsonl` -> `<instance>.grader.json` (grader-only, never bundled)."""
    return trace_path.with_name(trace_path.name.removesuffix(".jsonl") + GRADER_SUFFIX)


# ---------------------------------------------------------------- registry
#: reads one source file into one or more builders (a generator, for a format whose
#: records are read one at a time: each builder is written before the next is read)
ReadFile = Callable[[Path], Iterable[ImportedTrace]]


@dataclass(frozen=True)
class Importer:
    """One source format: which files in a folder it reads, and how."""

    format: str
    version: str
    summary: str
    read: ReadFile
    accepts: Callable[[Path], bool]


#: the source formats, filled by the importer modules as they are imported (each calls
#: `register`); the first lookup imports them all (`eairdsl.registry`)
IMPORTERS: Registry[Importer] = Registry("format", option="FORMAT", load=tuple(
    f"eairdsl.external.{name}" for name in ("who_and_when", "trail", "openinference",
                                            "tau_bench", "chatdev", "mad", "otel")))


def register(importer: Importer) -> Importer:
    """Register `importer` under its format name (an importer module's last line)."""
    return IMPORTERS.add(importer.format, importer, origin=importer.read.__module__)


def importers() -> dict[str, Importer]:
    """Every source format, by name (the modules imported on first use)."""
    return IMPORTERS.as_dict()


def source_files(importer: Importer, src: Path, out: Path | None = None) -> list[Path]:
    """The files of a source folder the importer reads: never this project's own output
    (grader side files, anything under `out` when OUT is inside SRC), which a rerun of
    `eairc import data -o data/imported` otherwise read as sources and refused."""
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise SourceError(src, "", "no such file or folder")
    skip = out.resolve() if out is not None else None

    def ours(p: Path) -> bool:
        return p.name.endswith(GRADER_SUFFIX) or (
            skip is not None and p.resolve().is_relative_to(skip))

    return sorted(p for p in src.rglob("*")
                  if p.is_file() and importer.accepts(p) and not ours(p))


def import_path(format: str, src: Path, out: Path) -> list[Path]:
    """Import SRC (a file, or every accepted file under a folder) into OUT; the paths
    written, traces and grader side files. Raises `SourceError` (located) on bad input."""
    table = importers()
    if format not in table:
        raise SourceError(src, "", f"unknown format {format!r} (known: "
                           f"{', '.join(sorted(table))})")
    importer = table[format]
    files = source_files(importer, src, out)
    if not files:
        raise SourceError(src, "", f"no {format} source files here")
    if out.exists() and not out.is_dir():
        raise SourceError(out, "", "the output is not a folder (-o names the folder the "
                          "traces go to)")
    # Every source is read, and every id checked, before anything is written to OUT: a bad
    # file or two traces with one id leave OUT as it was, not half imported (or the first
    # trace overwritten by the second). Each trace is written to a staging folder as soon
    # as it is built, so memory holds one trace, not the whole import; the staged files
    # are moved into OUT once every source has been read.
    try:
        staging = Path(tempfile.mkdtemp(prefix=".eairc-import-", dir=_staging_parent(out)))
    except OSError as exc:
        raise SourceError(out, "", f"cannot be written: {exc.strerror or exc}") from None
    try:
        staged = _stage(importer, files, out, staging)
        if not staged:
            # an empty record list (`[]`, an empty JSON-lines file): "imported 0 trace(s)
            # into OUT/" with exit 0 named a folder that was never made
            raise SourceError(src, "", f"no traces: the {format} source file(s) here hold "
                              "no records")
        return _publish(staged, staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _staging_parent(out: Path) -> Path:
    """Where the staging folder is made: in OUT when it exists, else in the nearest
    folder above it that does; on OUT's file system, so staged files move by renaming."""
    folder = out.absolute()
    while not folder.is_dir():
        folder = folder.parent
    return folder


def _stage(importer: Importer, files: list[Path], out: Path,
           staging: Path) -> list[Path]:
    """Read every source file, writing each trace (and grader side file) under `staging`
    as OUT would hold it; the staged paths, relative to `staging`. Raises SourceError."""
    made: dict[Path, Path] = {}
    staged: list[Path] = []
    for f in files:
        try:
            for built in importer.read(f):
                target = built.target(out)
                if target in made:
                    raise SourceError(f, "", f"trace {built.world}/{built.instance} was "
                                      f"already imported from {made[target]}: two source "
                                      "traces with one id")
                made[target] = f
                staged.extend(_write_staged(built, staging))
        except RecursionError:
            # JSON nested deeper than the parser's recursion limit (untrusted input)
            raise SourceError(f, "", "nested too deeply to read (arrays or objects more "
                              "than about 900 levels deep)") from None
    return staged


def _write_staged(built: ImportedTrace, staging: Path) -> list[Path]:
    try:
        return [p.relative_to(staging) for p in built.write(staging)]
    except RecursionError:
        raise SourceError(built.source.file, "", "nested too deeply to write as a trace "
                          "(arrays or objects more than about 900 levels deep)") from None
    except OSError as exc:
        raise SourceError(exc.filename or staging, "", f"cannot be written: "
                          f"{exc.strerror or exc}") from None


def _publish(staged: list[Path], staging: Path, out: Path) -> list[Path]:
    """Move the staged files into OUT (replacing files of the same name); OUT's paths."""
    written: list[Path] = []
    for rel in staged:
        target = out / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).replace(target)
        except OSError as exc:
            raise SourceError(exc.filename or out, "", f"cannot be written: "
                              f"{exc.strerror or exc}") from None
        written.append(target)
    return written
