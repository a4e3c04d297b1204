"""What a folder of results holds: its studies, runs, audits, audit studies, repairs and
Signals stores (`eairc ls`).

Every stage writes its own kind of folder (`eairc study -o`, `eairc run`, `eairc audit
-o`, `eairc audit-study -o`, `eairc repair -o`, `eairc signals update --store`), and
after a few weeks a `runs/` folder holds dozens of them; finding last Tuesday's audit
meant opening folders. `inventory` walks a folder once and names each result by what
its owner module says makes it one — a study by its results store's SQLite
application id, an audit by its index and reports folder, a repair by its
`loop.json`, a Signals store by its application id, a run by the traces directly in
its condition folders — with its size, when it last changed and a one-line summary
read from its own index (never from every file in it).

The walk is bounded (`max_folders`), skips hidden folders and does not descend into
what it has already named (a study's traces, an audit's bundles, a repair's rounds);
audits inside a study (`STUDY/audit/…`) are listed under it. Nothing is written.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from eairdsl.audit.bundle import trace_file_names
from eairdsl.audit.folder import (
    BUNDLES,
    REPORTS,
    AuditFolder,
    AuditFolderError,
    AuditStudyFolder,
)
from eairdsl.errors import UsageError
from eairdsl.repair.folder import RepairFolder
from eairdsl.signals import store as signals_store
from eairdsl.study import store as study_store

__all__ = ["Kind", "Result", "dumps", "inventory"]

Kind = Literal["study", "run", "audit", "audit-study", "repair", "signals"]

#: folders a walk never enters below a named result: they hold its parts, not results
_PARTS = frozenset({"traces", BUNDLES, REPORTS, "rounds", "retest", "cassettes", "world",
                    "shared", "generated", "node_modules", "__pycache__"})


class Result(BaseModel):
    """One result found: its kind, where it is (relative to the folder listed), its size on
    disk (every file under it), when it last changed and what it holds in one line."""

    kind: Kind
    path: str
    bytes: int
    files: int
    #: the newest modification time of its defining file, UTC ISO 8601 to the second
    modified: str
    summary: str


def _sqlite_app_id(path: Path) -> int | None:
    """The SQLite header's application id (offset 68), without opening the database."""
    try:
        with path.open("rb") as fh:
            head = fh.read(72)
    except OSError:
        return None
    if len(head) < 72 or not head.startswith(b"SQLite format 3\x00"):
        return None
    return int(struct.unpack(">I", head[68:72])[0])


def _when(path: Path) -> str:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return ""
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _size(path: Path) -> tuple[int, int]:
    """Bytes and files under `path` (a file: itself); unreadable entries are skipped."""
    if path.is_file():
        return path.stat().st_size, 1
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
                files += 1
            except OSError:
                continue
    return total, files


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    """A read-only query of a store (empty when it cannot be read: `ls` lists, it does not
    diagnose — `eairc report` or `eairc signals` say what is wrong)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        return list(conn.execute(sql))
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _study(folder: Path) -> str:
    store = folder / study_store.STORE_FILE
    rows = _query(store, "SELECT world, model, COUNT(*) FROM episodes GROUP BY world, model")
    worlds = sorted({str(r[0]) for r in rows})
    models = sorted({str(r[1]) for r in rows})
    n = sum(int(str(r[2])) for r in rows)
    return (f"{_plural(n, 'attempt')}; worlds {', '.join(worlds) or '-'}; "
            f"models {', '.join(models) or '-'}")


def _audit(folder: Path) -> str:
    try:
        index = AuditFolder(folder).index()
    except (AuditFolderError, UsageError):
        return "index unreadable"
    findings = sum(e.findings for e in index.entries)
    failed = sum(1 for e in index.entries if e.status == "failed")
    kind = str(index.auditor.get("kind") or "offline")
    model = index.auditor.get("model")
    return (f"{_plural(len(index.entries), 'episode')} audited by the {kind} auditor"
            + (f" ({model})" if model else "") + f"; {_plural(findings, 'finding')}"
            + (f"; {failed} failed" if failed else ""))


def _audit_study(folder: Path) -> str:
    return f"arms {', '.join(AuditStudyFolder(folder).arm_names()) or '-'}"


def _repair(folder: Path) -> str:
    rf = RepairFolder(folder)
    loop = rf.read_loop() or {}
    world = Path(str(loop.get("world") or "?")).name
    try:
        accepted = rf.read_acceptance_or_none()
    except (OSError, ValueError):
        accepted = None
    if accepted is None:
        return f"repair of {world}: not decided"
    verdict = "accepted" if accepted.accepted else "rejected"
    return f"repair of {world}: {verdict} after {_plural(accepted.rounds, 'round')}"


def _signals(path: Path) -> str:
    rows = _query(path, "SELECT state, COUNT(*) FROM signals GROUP BY state ORDER BY state")
    total = sum(int(str(r[1])) for r in rows)
    states = ", ".join(f"{int(str(n)):,} {state}" for state, n in rows)
    return f"{_plural(total, 'issue')}" + (f" ({states})" if states else "")


def _run(folder: Path, traces: int) -> str:
    conditions = sorted(p.name for p in folder.iterdir() if p.is_dir()
                        and not p.name.startswith("."))
    return f"{_plural(traces, 'trace')}; conditions {', '.join(conditions) or '-'}"


def _named(folder: Path) -> tuple[Kind, Path] | None:
    """What `folder` is, by its defining file (None: nothing of ours)."""
    store = folder / study_store.STORE_FILE
    if _sqlite_app_id(store) == study_store.SQLITE_APPLICATION_ID:
        return "study", store
    repair = RepairFolder(folder)
    if repair.is_repair():
        return "repair", repair.loop_path
    study = AuditStudyFolder(folder)
    if study.is_audit_study():
        return "audit-study", study.cohort_path
    audit = AuditFolder(folder)
    if audit.is_audit():
        return "audit", audit.index_path
    return None


def _traces_here(folder: Path, names: list[str]) -> int:
    """How many traces lie directly in `folder` (0 when its first `.jsonl` is no trace)."""
    jsonl = sorted(n for n in names if n.endswith(".jsonl"))
    if not jsonl:
        return 0
    try:
        trace_file_names(folder / jsonl[0])  # a UsageError when it is no trace
    except UsageError:
        return 0
    return len(jsonl)


def _walk(root: Path, max_folders: int) -> Iterator[tuple[Kind, Path, Path, int]]:
    """(kind, folder or file, defining file, traces) of every result under `root`."""
    runs: dict[Path, int] = {}
    seen = 0
    for here, dirs, names in os.walk(root):
        folder = Path(here)
        seen += 1
        if seen > max_folders:
            raise UsageError(f"{root}: more than {max_folders:,} folders; list a smaller "
                             "folder (or raise --max-folders)")
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        named = _named(folder)
        if named is not None:
            yield named[0], folder, named[1], 0
            dirs[:] = [d for d in dirs if d not in _PARTS]  # audits inside a study: kept
            continue
        for name in sorted(names):
            if name.endswith(".sqlite") and _sqlite_app_id(folder / name) == \
                    signals_store.SQLITE_APPLICATION_ID:
                yield "signals", folder / name, folder / name, 0
        n = _traces_here(folder, names)
        if n:  # a run's condition folder: the run is its parent (`runs/WORLD/CONDITION`)
            runs[folder.parent] = runs.get(folder.parent, 0) + n
            dirs[:] = []
    for parent, n in sorted(runs.items()):
        # the folder listed may itself be a condition folder: then it is the run
        run = parent if parent.is_relative_to(root) else root
        yield "run", run, run, n


def inventory(root: Path, max_folders: int = 20_000) -> list[Result]:
    """Every result under `root` (see the module docstring), sorted by path."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such folder")
    found: list[Result] = []
    for kind, where, defining, traces in _walk(root, max_folders):
        size, files = _size(where)
        match kind:
            case "study":
                summary = _study(where)
            case "audit":
                summary = _audit(where)
            case "audit-study":
                summary = _audit_study(where)
            case "repair":
                summary = _repair(where)
            case "signals":
                summary = _signals(where)
            case "run":
                summary = _run(where, traces)
        rel = where.relative_to(root).as_posix() if where != root else "."
        found.append(Result(kind=kind, path=rel, bytes=size, files=files,
                            modified=_when(defining), summary=summary))
    return sorted(found, key=lambda r: (r.path.split("/"), r.kind))


def dumps(results: list[Result]) -> str:
    """The listing as JSON (`eairc ls --json`)."""
    return json.dumps([r.model_dump() for r in results], indent=2)
