"""Rescoring a study: new measurements and metrics from its stored traces.

When only `measure`, `metric` or `let` declarations changed between the world a
study ran and a new version (checked with `eairdsl.diff.diff_worlds`), the
episodes need not run again: every stored trace is read back, the episode's
final state is rebuilt from the trace's `state_update` events on top of the
world's initial state, and the new world's measurements are evaluated on it.

The store keeps only each world's digest, not its text, so the world the study
ran is given as well (`original`) and must have the stored digest.

The result is a new store (`OUT/results.sqlite`): a copy of the original whose
episode rows carry the new measurements, unassessed reasons and metrics, the
new world's digest, and trace paths that point at OUT's own copies of the traces
(hard links where the file system allows), so OUT is a study folder of its own:
`eairc report OUT` shows them. The new store is written as a part file and renamed
into place when complete. The original study is only read, never written.
`judged(...)` measurements are not rejudged: without a judge they are unassessed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import simpy

from eairdsl.errors import UsageError
from eairdsl.ir import World
from eairdsl.measure import measure_episode
from eairdsl.runtime.engine import AGENT_FAILED, CompiledWorld
from eairdsl.runtime.evaluate import Scope
from eairdsl.runtime.state import EpisodeState
from eairdsl.runtime.trace import Trace, read_trace
from eairdsl.runtime.values import Row
from eairdsl.study.store import STORE_FILE, Store
from eairdsl.vocabulary import MEASUREMENTS

if TYPE_CHECKING:
    from eairdsl.diff import Change

__all__ = ["RescoreError", "RescoreSummary", "default_out", "rescore", "rescore_changes"]

#: declaration kinds a rescore may see changed
ALLOWED = frozenset({"measure", "let"})


class RescoreError(UsageError):
    """The study cannot be rescored with this world (and why)."""

    def __init__(self, message: str, changes: list[Change] | None = None) -> None:
        super().__init__(message)
        self.changes = changes or []


@dataclass
class RescoreSummary:
    store: Path
    rescored: int = 0
    kept: list[str] = field(default_factory=list)  # rows left as stored, with why


def rescore_changes(old: World, new: World) -> tuple[list[Change], list[Change]]:
    """All changes, and those a rescore refuses (anything but measures and lets, or a
    changed `let` that something other than a measurement or `let` reads)."""
    # The semantic diff is a repair-review tool beside the pipeline: loaded on first use.
    from eairdsl.diff import Change, diff_worlds
    from eairdsl.reads import declarations, reads

    result = diff_worlds(old, new)
    refused = [c for c in result.changes if c.kind not in ALLOWED]
    lets = {("let", c.name) for c in result.changes if c.kind == "let"}
    if lets:
        for world in (old, new):
            for ref in declarations(world):
                if ref[0] in ALLOWED or any(ref == (c.kind, c.name) for c in refused):
                    continue
                hit = sorted(name for kind, name in set(reads(world, ref)) & lets)
                if hit:
                    refused.append(Change(kind=ref[0], name=ref[1], change="changed", details=[
                        f"reads let {', '.join(hit)}, which changed: the episodes would differ"]))
    return result.changes, refused


class _Replayed:
    """What `measure_episode` needs of an episode, rebuilt from its trace."""

    def __init__(self, compiled: CompiledWorld, trace: Trace, invalid: list[str]) -> None:
        header = trace.header
        result = trace.result
        self.compiled = compiled
        self.trace = trace
        self.invalid = invalid
        self.env = simpy.Environment(initial_time=result.end_time if result else 0.0)
        instance = next((i for i in compiled.world.instances
                         if str(i.get("id")) == header.instance), None)
        if instance is None:
            raise ValueError(f"instance {header.instance!r} is not in the world")
        if header.condition not in compiled.conditions:
            raise ValueError(f"condition {header.condition!r} is not in the world")
        models = frozenset(p for p, label in header.agents.items()
                           if str(label).startswith("llm:"))  # as the episode saw them
        self.state = EpisodeState(compiled, header.condition, instance, trace, self.env,
                                  models)
        for event in trace.events:
            if event.kind != "state_update" or not event.diff:
                continue
            for record, row in (event.diff.get("append") or {}).items():
                self.state.append(record, Row(record, dict(row)))
            for state, change in (event.diff.get("set") or {}).items():
                self.state.assign(state, change.get("to"))

    def scope(self) -> Scope:
        return self.state.scope()


def default_out(study_dir: Path, new: World) -> Path:
    """`STUDY-rescored-<digest>` beside the study: the folder a rescore writes without
    --out. The study is named by its resolved path, so `.` or `runs/d1/` work too."""
    folder = Path(study_dir).resolve()
    return folder.with_name(f"{folder.name}-rescored-{new.digest[:8]}")


def _own_trace(root: Path, home: Path, stored: Path) -> Path:
    """The rescored study's own copy of a stored trace (and of its `.calls.ndjson` sidecar):
    a trace inside the original study is hard-linked (copied where the file system cannot
    link) to the same place under `home`, so the rescored folder is a study of its own —
    `eairc report OUT` follows only traces inside OUT. A trace that is missing or outside
    the original study is named as it was (absolute)."""
    source = (stored if stored.is_absolute() else root / stored).resolve()
    if not source.is_relative_to(root) or not source.is_file():
        return source
    own = home / source.relative_to(root)
    sidecar = source.with_name(source.name.removesuffix(".jsonl") + ".calls.ndjson")
    for src in (source, sidecar):
        if not src.is_file():
            continue
        dst = home / src.relative_to(root)
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.exists():
                if dst.samefile(src):
                    continue
                dst.unlink()
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
        except OSError as exc:
            raise RescoreError(f"cannot copy trace {src} into {home}: "
                               f"{exc.strerror or exc}") from None
    return own


def rescore(study_dir: Path, original: World, new: World, out: Path) -> RescoreSummary:
    """Rescore `study_dir`'s episodes of world `new.meta.name` into `out/results.sqlite`.

    In stages: check that the study ran `original` and that only measures, metrics
    and lets changed (`_stored_digest`), copy its store to a part file in `out`
    (`_copy_store`), rescore the rows in one transaction (`_rescore_rows`), then
    rename the part file into place; a failure removes the part file."""
    source = study_dir / STORE_FILE
    digest = _stored_digest(source, original, new)
    target = out / STORE_FILE
    if target.exists() or out.resolve() == study_dir.resolve():
        raise RescoreError(f"{target} exists (or is the original); choose another --out")
    part, sidecars = _copy_store(source, out, target)
    job = _Rescoring(compiled=CompiledWorld(new), new=new, root=study_dir.resolve(),
                     home=out.resolve(), summary=RescoreSummary(store=target))
    conn = sqlite3.connect(part, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN IMMEDIATE")
        _rescore_rows(conn, job)
        name = new.meta.name
        conn.execute("UPDATE worlds SET digest = ? WHERE name = ?", (new.digest, name))
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                     (f"rescored_from:{name}", json.dumps(
                         {"study": str(job.root), "digest": digest, "new_digest": new.digest})))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        for stale in (part, *sidecars):
            stale.unlink(missing_ok=True)
        raise
    conn.close()
    for stale in sidecars:
        stale.unlink(missing_ok=True)
    os.replace(part, target)
    return job.summary


@dataclass
class _Rescoring:
    """What rescoring each row needs: the new world compiled, the original study's
    folder (`root`) and the rescored one's (`home`), and the summary being filled."""

    compiled: CompiledWorld
    new: World
    root: Path
    home: Path
    summary: RescoreSummary


def _stored_digest(source: Path, original: World, new: World) -> str:
    """The digest the study stored for the world, once it is known that `original` is
    the world the study ran and that `new` changes only what a rescore can recompute;
    each refusal says which, so the user knows whether to fix the arguments or rerun."""
    with Store.open(source, create=False) as store:
        stored = {w["name"]: w["digest"] for w in store.worlds()}
    name = new.meta.name
    if name not in stored:
        raise RescoreError(f"{source} holds no results of world {name} (it holds "
                           f"{', '.join(sorted(stored)) or 'none'})")
    if original.meta.name != name or original.digest != stored[name]:
        raise RescoreError(
            f"the study ran world {name} with digest {stored[name][:12]}…; the original world "
            f"given ({original.meta.name}, digest {original.digest[:12]}…) is not it")
    _, refused = rescore_changes(original, new)
    if refused:
        raise RescoreError(f"world {name} changed beyond measures, metrics and lets; rescoring "
                           "needs the episodes to be the same — run a new study", refused)
    return str(stored[name])


def _copy_store(source: Path, out: Path, target: Path) -> tuple[Path, list[Path]]:
    """Copy the study's store (with its committed WAL pages) to a part file beside
    `target`; the part file and its WAL/SHM sidecars' paths.

    Built as a part file renamed into place at the end: an interrupted rescore leaves
    no unrescored copy behind that a rerun would refuse as "exists" and a reader take
    for the rescored results."""
    part = target.with_name(f".{target.name}.part")
    sidecars = [part.with_name(part.name + suffix) for suffix in ("-wal", "-shm")]
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in (part, *sidecars):
            stale.unlink(missing_ok=True)
        shutil.copyfile(source, part)
        wal = source.with_name(source.name + "-wal")
        if wal.exists() and wal.stat().st_size:  # committed pages not yet in the main file
            shutil.copyfile(wal, sidecars[0])
    except OSError as exc:
        raise RescoreError(f"cannot write {out}: {exc.strerror or exc}") from None
    return part, sidecars


def _rescore_rows(conn: sqlite3.Connection, job: _Rescoring) -> None:
    """Every episode row: the world's rows get new measurements from their traces, or
    are kept as stored with why (no trace, never measured, unreadable); every row with
    a trace points at the rescored folder's own copy, so OUT is a study of its own."""
    name = job.new.meta.name
    rows = conn.execute("SELECT id, world, valid, validity_reason, trace_path FROM "
                        "episodes ORDER BY id").fetchall()
    for r in rows:
        ident = f"episode row {r['id']}"
        if not r["trace_path"]:
            if r["world"] == name:
                job.summary.kept.append(f"{ident}: no trace")
            continue
        path = _own_trace(job.root, job.home, Path(r["trace_path"]))
        kept = _rescore_row(conn, job, r, path) if r["world"] == name else None
        if kept is not None:
            job.summary.kept.append(f"{ident}: {kept}")
        if r["world"] != name or kept is not None:  # as stored, the trace beside
            conn.execute("UPDATE episodes SET trace_path = ? WHERE id = ?",
                         (str(path), r["id"]))


def _rescore_row(conn: sqlite3.Connection, job: _Rescoring, r: sqlite3.Row,
                 path: Path) -> str | None:
    """Measure one of the world's episodes anew from its trace and write the row; or,
    when it cannot be (the agent failed before measuring, the trace is unreadable),
    leave it and say why (the caller keeps the row as stored)."""
    reason = r["validity_reason"] or ""
    if AGENT_FAILED in reason:
        return f"never measured ({reason})"
    try:
        trace = read_trace(path)
        episode = _Replayed(job.compiled, trace, [] if r["valid"] else [reason])
        result = measure_episode(episode)  # type: ignore[arg-type]
    except (OSError, ValueError) as exc:
        return f"trace {path} unreadable ({exc})"
    m = result.measurements
    conn.execute(
        f"UPDATE episodes SET {', '.join(f'{k} = ?' for k in MEASUREMENTS)},"
        " unassessed = ?, metrics = ?, digest = ?, trace_path = ? WHERE id = ?",
        (*(None if m.get(k) is None else int(bool(m.get(k))) for k in MEASUREMENTS),
         json.dumps(result.unassessed, sort_keys=True),
         json.dumps(result.metrics, sort_keys=True), job.new.digest, str(path), r["id"]))
    job.summary.rescored += 1
    return None
