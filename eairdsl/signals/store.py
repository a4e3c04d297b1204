"""The Signals store: one SQLite file of occurrences, Signals and their lifecycle.

`eairc signals update AUDIT_DIR|STUDY_DIR|REPAIR_DIR` adds what a folder says to
the store (default `runs/signals.sqlite`):

- an audit folder (or every audit folder of a study): the sessions it analysed
  (`sessions`, `analyses`: the population severity's scope is counted over)
  and its occurrences (`occurrences`, keyed by content, so updating twice adds
  nothing); each occurrence's fingerprint (`eairdsl.signals.grouping`) is
  stored with its inputs in `fingerprints`, which maps it to a Signal — a new
  fingerprint starts a new Signal;
- a repair folder (`acceptance.json`): its audit folder first, then the repair
  in `repairs`; an accepted repair resolves the Signal of the repaired finding
  at the candidate world's digest, and its retest becomes the Signal's check.

Lifecycle (`transitions` records every change): open → resolved at a world
digest (an accepted repair) → regressed when a supported occurrence arrives from
a run of that digest or of a digest first seen after the resolution; won't-fix
(`wontfix`) is kept whatever arrives. Digests have no order of their own, so
"later" is the update in which the store first saw the digest (`digests`).
Explicit merges move a Signal's fingerprints into another (`merges` records
which), and an unmerge moves exactly those back.

Identification as `eairdsl.study.store`: `PRAGMA application_id = 0x45414953`
("EAIS"), `PRAGMA user_version = SCHEMA_VERSION` and `meta(app_id,
schema_version)`, checked read-only before anything is written: a foreign,
corrupt or newer file raises `SignalsStoreError` and is left untouched.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eairdsl.errors import UsageError
from eairdsl.signals.grouping import GROUPING_VERSION, explain, fingerprint, fingerprint_inputs
from eairdsl.signals.occurrences import AuditRead, Occurrence, Session, audit_dirs, read_audit
from eairdsl.signals.remediation import signal_view
from eairdsl.study.sqlite_file import FileKind, connect
from eairdsl.study.sqlite_file import transaction as _transaction

__all__ = ["APP_ID", "SCHEMA_VERSION", "DEFAULT_STORE", "SignalsStore", "SignalsStoreError",
           "UpdateSummary", "STATES"]

SCHEMA_VERSION = 1
APP_ID = "eairdsl.signals"
SQLITE_APPLICATION_ID = 0x45414953  # "EAIS"
DEFAULT_STORE = Path("runs/signals.sqlite")
STATES = ("open", "resolved", "regressed", "wontfix", "merged")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE updates (seq INTEGER PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL,
  study TEXT, at REAL NOT NULL, added TEXT NOT NULL);
CREATE TABLE sessions (id TEXT PRIMARY KEY, study TEXT NOT NULL, world TEXT,
  world_digest TEXT, trace_sha256 TEXT, data TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE analyses (session TEXT NOT NULL, audit TEXT NOT NULL, auditor TEXT NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (session, audit));
CREATE TABLE digests (world TEXT NOT NULL, digest TEXT NOT NULL, seq INTEGER NOT NULL,
  PRIMARY KEY (world, digest));
CREATE TABLE signals (id TEXT PRIMARY KEY, number INTEGER NOT NULL UNIQUE,
  state TEXT NOT NULL, resolved_digest TEXT, resolved_seq INTEGER, merged_into TEXT,
  created_seq INTEGER NOT NULL, severity TEXT);
CREATE TABLE fingerprints (fingerprint TEXT PRIMARY KEY, version TEXT NOT NULL,
  inputs TEXT NOT NULL, signal TEXT NOT NULL REFERENCES signals(id), seq INTEGER NOT NULL);
CREATE TABLE occurrences (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL
  REFERENCES fingerprints(fingerprint), session TEXT NOT NULL, status TEXT NOT NULL,
  nature TEXT, world_digest TEXT, seq INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX occurrences_fp ON occurrences (fingerprint);
CREATE TABLE transitions (id INTEGER PRIMARY KEY, signal TEXT NOT NULL, seq INTEGER NOT NULL,
  from_state TEXT, to_state TEXT NOT NULL, digest TEXT, reason TEXT NOT NULL);
CREATE TABLE merges (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, kind TEXT NOT NULL,
  target TEXT NOT NULL, source TEXT NOT NULL, fingerprints TEXT NOT NULL);
CREATE TABLE repairs (repair TEXT NOT NULL, candidate_digest TEXT NOT NULL,
  signal TEXT NOT NULL, accepted INTEGER NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (repair, candidate_digest, signal));
"""


class SignalsStoreError(UsageError):
    """The Signals file cannot be used (foreign, corrupt, newer), or a bad request."""


#: what identifies this store's file (`study.sqlite_file.identify`)
_KIND = FileKind(app_id=APP_ID, sqlite_id=SQLITE_APPLICATION_ID, schema_version=SCHEMA_VERSION,
                 noun="Signals store", schema_noun="Signals", option="--store",
                 error=SignalsStoreError, also="")


def _grader_side(audit: Path) -> bool:
    """Whether an audit folder's index says its auditor read grader-side data."""
    from eairdsl.audit.folder import AuditFolder

    try:
        auditor = AuditFolder(audit).index().auditor
    except (OSError, UsageError):
        return False
    return auditor.get("grader_side") is True or auditor.get("kind") == "oracle"


@dataclass
class UpdateSummary:
    """What one `update` added (all zero for an update that found nothing new)."""

    source: str
    kind: str
    seq: int | None = None
    audits: int = 0
    sessions: int = 0
    occurrences: int = 0
    signals: int = 0
    resolved: list[str] = field(default_factory=list)
    regressed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    analyses: int = 0
    repairs: int = 0

    @property
    def added(self) -> bool:
        return bool(self.sessions or self.occurrences or self.signals or self.resolved
                    or self.regressed or self.analyses or self.repairs)


def _dump(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class SignalsStore:
    """A Signals file; use `SignalsStore.open(path)`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self._known: set[str] | None = None
        #: analysed sessions by world, for as long as `analyses` has this many rows
        self._by_world: tuple[int, dict[str | None, set[str]]] | None = None

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: Path, create: bool = True) -> SignalsStore:
        """Open (or, with `create`, start) a store; SignalsStoreError for a foreign file."""
        path = Path(path)
        return cls(path, connect(path, _KIND, schema=_SCHEMA, create=create,
                                 meta=(("grouping_version", GROUPING_VERSION),),
                                 missing=f"no Signals store at {path}; run `eairc signals "
                                         f"update AUDIT_DIR --store {path}` first"))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SignalsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ updating
    def known_types(self) -> set[str]:
        if self._known is None:
            from eairdsl.taxonomy import load_taxonomy

            self._known = {t.id for t in load_taxonomy().types}
        return self._known

    @staticmethod
    def audits_of(target: Path) -> list[Path]:
        """The audit folders an update of `target` reads ([] for a repair folder); raises
        SignalsStoreError for a target that holds neither, so a caller can check its
        targets before it creates a store."""
        target = Path(target)
        if not target.is_dir():
            raise SignalsStoreError(f"{target} is not a folder; give an audit folder "
                                    "(index.json), a study folder or a repair folder "
                                    "(acceptance.json)")
        from eairdsl.repair.folder import RepairFolder

        if RepairFolder(target).is_finished():
            return []
        found = audit_dirs(target)
        # a study's grader-side audits (the oracle reads the witness steps) are the answer
        # key, not findings: gathered with the study they doubled its occurrences and
        # added Signals of their own. Named on their own they are still read.
        dirs = found if found == [target] else [d for d in found if not _grader_side(d)]
        if not dirs:
            why = (f"its only audits are grader-side ({', '.join(d.name for d in found)}: "
                   "the oracle); name one on its own to add it anyway" if found else
                   "no index.json with reports/, no STUDY_DIR/audit/*/ and no "
                   f"acceptance.json; run `eairc audit {target}` first")
            raise SignalsStoreError(f"{target} holds no audit: {why}")
        return dirs

    def update(self, target: Path) -> UpdateSummary:
        """Add an audit folder, a study's audit folders or a repair folder; idempotent."""
        target = Path(target)
        dirs = self.audits_of(target)
        if not dirs:
            return self._update_repair(target)
        reads = [read_audit(d, self.known_types()) for d in dirs]
        kind = "audit" if dirs == [target] else "study"
        summary = UpdateSummary(source=target.resolve().as_posix(), kind=kind,
                                audits=len(reads))
        if kind == "study":
            summary.problems += [f"{d.relative_to(target).as_posix()}: a grader-side audit "
                                 "(the oracle), not read with the study"
                                 for d in audit_dirs(target) if d not in dirs]
        with _transaction(self.conn):
            seq = self._next_seq()
            for read in reads:
                self._ingest(read, seq, summary)
                summary.problems += [f"{read.audit.name}: {p}" for p in read.problems]
            self._finish(seq, summary, reads[0].study if reads else None)
        return summary

    def _next_seq(self) -> int:
        row = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM updates").fetchone()
        return int(row[0]) + 1

    def _finish(self, seq: int, summary: UpdateSummary, study: str | None) -> None:
        """Record the update (only one that added something: a repeat leaves no trace)."""
        if not summary.added:
            return
        summary.seq = seq
        self.conn.execute("INSERT INTO updates VALUES (?, ?, ?, ?, ?, ?)", (
            seq, summary.source, summary.kind, study, time.time(), _dump({
                "sessions": summary.sessions, "analyses": summary.analyses,
                "occurrences": summary.occurrences, "signals": summary.signals,
                "repairs": summary.repairs, "resolved": summary.resolved,
                "regressed": summary.regressed})))
        self._cache_severity()

    def _ingest(self, read: AuditRead, seq: int, summary: UpdateSummary) -> None:
        for s in read.sessions:
            if self.conn.execute("INSERT OR IGNORE INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)", (
                    s.id, s.study, s.world, s.world_digest, s.trace_sha256,
                    _dump(s.model_dump(mode="json")), seq)).rowcount:
                summary.sessions += 1
            if self.conn.execute("INSERT OR IGNORE INTO analyses VALUES (?, ?, ?, ?)", (
                    s.id, read.audit.as_posix(), read.auditor, seq)).rowcount:
                summary.analyses += 1
            if s.world and s.world_digest:
                self.conn.execute("INSERT OR IGNORE INTO digests VALUES (?, ?, ?)",
                                  (s.world, s.world_digest, seq))
        for o in sorted(read.occurrences, key=lambda o: o.key):
            self._add_occurrence(o, seq, summary)

    def _add_occurrence(self, o: Occurrence, seq: int, summary: UpdateSummary) -> None:
        if self.conn.execute("SELECT 1 FROM occurrences WHERE key = ?", (o.key,)).fetchone():
            return
        inputs = fingerprint_inputs(o)
        fp = fingerprint(inputs)
        row = self.conn.execute("SELECT signal FROM fingerprints WHERE fingerprint = ?",
                                (fp,)).fetchone()
        if row is None:
            signal = self._new_signal(seq)
            summary.signals += 1
            self.conn.execute("INSERT INTO fingerprints VALUES (?, ?, ?, ?, ?)",
                              (fp, GROUPING_VERSION, _dump(inputs), signal, seq))
        else:
            signal = row["signal"]
        self.conn.execute("INSERT INTO occurrences VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (
            o.key, fp, o.session, o.status, o.nature, o.world_digest, seq,
            _dump(o.model_dump(mode="json"))))
        summary.occurrences += 1
        if o.status == "supported":
            self._maybe_regress(signal, o, seq, summary)

    def _new_signal(self, seq: int) -> str:
        row = self.conn.execute("SELECT COALESCE(MAX(number), 0) FROM signals").fetchone()
        number = int(row[0]) + 1
        sid = f"SIG-{number}"
        self.conn.execute("INSERT INTO signals (id, number, state, created_seq) "
                          "VALUES (?, ?, 'open', ?)", (sid, number, seq))
        self._transition(sid, seq, None, "open", None, "first occurrence")
        return sid

    def _transition(self, signal: str, seq: int, old: str | None, new: str,
                    digest: str | None, reason: str) -> None:
        self.conn.execute("INSERT INTO transitions (signal, seq, from_state, to_state, digest, "
                          "reason) VALUES (?, ?, ?, ?, ?, ?)",
                          (signal, seq, old, new, digest, reason))
        self.conn.execute("UPDATE signals SET state = ? WHERE id = ?", (new, signal))

    def _maybe_regress(self, signal: str, o: Occurrence, seq: int,
                       summary: UpdateSummary) -> None:
        row = self.conn.execute("SELECT state, resolved_digest, resolved_seq FROM signals "
                                "WHERE id = ?", (signal,)).fetchone()
        if row is None or row["state"] != "resolved" or not o.world_digest:
            return
        first = self.conn.execute("SELECT seq FROM digests WHERE world = ? AND digest = ?",
                                  (o.world or "", o.world_digest)).fetchone()
        later = first is not None and int(first["seq"]) > int(row["resolved_seq"] or 0)
        if o.world_digest == row["resolved_digest"] or later:
            how = "the resolved digest" if o.world_digest == row["resolved_digest"] else \
                "a digest first seen after the resolution"
            self._transition(signal, seq, "resolved", "regressed", o.world_digest,
                             f"{o.short} in {o.session}: a run of {how}")
            summary.regressed.append(signal)

    # ------------------------------------------------------------ repairs
    def _update_repair(self, folder: Path) -> UpdateSummary:
        from eairdsl.audit.folder import AuditFolder
        from eairdsl.repair.folder import RepairFolder

        repair = RepairFolder(folder)
        try:
            acc = repair.read_acceptance()
            audit = repair.read_audit_dir()
            plan = repair.read_plan()
        except (OSError, ValueError) as exc:
            raise SignalsStoreError(f"{folder} is not a finished repair folder "
                                    f"({str(exc).splitlines()[0]})") from None
        summary = UpdateSummary(source=folder.resolve().as_posix(), kind="repair")
        reads = []
        if AuditFolder(audit).has_index():
            reads = [read_audit(audit, self.known_types())]
        retest: dict[str, Any] | None = None
        if acc.retest and repair.retest_at(acc.retest).is_done():
            retest = repair.retest_at(acc.retest).read_result().model_dump(mode="json")
        with _transaction(self.conn):
            seq = self._next_seq()
            for read in reads:
                summary.audits += 1
                self._ingest(read, seq, summary)
            rows = self.conn.execute(
                "SELECT DISTINCT f.signal FROM occurrences o JOIN fingerprints f "
                "ON o.fingerprint = f.fingerprint WHERE json_extract(o.data, '$.audit') = ? "
                "AND json_extract(o.data, '$.episode') = ? "
                "AND json_extract(o.data, '$.finding_id') = ?",
                (audit.resolve().as_posix(), plan.episode, plan.finding.id)).fetchall()
            signals = sorted({r["signal"] for r in rows})
            if not signals:
                summary.problems.append(f"the repaired finding {acc.finding} is in no Signal "
                                        f"(its audit {audit} is not readable)")
            digest = acc.candidate_digest or ""
            for sid in signals:
                record = {"repair": summary.source, "accepted": acc.accepted,
                          "finding": acc.finding, "world_digest": acc.world_digest,
                          "candidate_digest": acc.candidate_digest,
                          "acceptance": acc.model_dump(mode="json"),
                          "plan": plan.plan.model_dump(mode="json"), "retest": retest}
                done = self.conn.execute(
                    "INSERT OR IGNORE INTO repairs VALUES (?, ?, ?, ?, ?, ?)",
                    (summary.source, digest, sid, int(acc.accepted), seq,
                     _dump(record))).rowcount
                if not done:
                    continue
                summary.repairs += 1
                state = self._state(sid)
                if acc.accepted and acc.candidate_digest and state in ("open", "regressed"):
                    world = self.conn.execute(
                        "SELECT json_extract(inputs, '$.system') FROM fingerprints "
                        "WHERE signal = ? LIMIT 1", (sid,)).fetchone()[0]
                    self.conn.execute("INSERT OR IGNORE INTO digests VALUES (?, ?, ?)",
                                      (world or "", acc.candidate_digest, seq))
                    self.conn.execute("UPDATE signals SET resolved_digest = ?, resolved_seq = ?"
                                      " WHERE id = ?", (acc.candidate_digest, seq, sid))
                    self._transition(sid, seq, state, "resolved", acc.candidate_digest,
                                     f"accepted repair {folder.name} ({acc.reason})")
                    summary.resolved.append(sid)
            self._finish(seq, summary, reads[0].study if reads else None)
        return summary

    def _state(self, sid: str) -> str:
        row = self.conn.execute("SELECT state FROM signals WHERE id = ?", (sid,)).fetchone()
        if row is None:
            raise SignalsStoreError(f"no Signal {sid} in {self.path}; `eairc signals list` "
                                    "shows the ids")
        return str(row["state"])

    # ------------------------------------------------------------ explicit records
    def wontfix(self, sid: str, reason: str = "marked won't-fix") -> None:
        state = self._state(sid)
        if state == "merged":
            raise SignalsStoreError(f"{sid} is merged into another Signal; mark that one")
        if state == "wontfix":
            return
        with _transaction(self.conn):
            self._transition(sid, self._next_seq() - 1, state, "wontfix", None, reason)

    def merge(self, target: str, source: str) -> list[str]:
        """Merge Signal `source` into `target`: its fingerprints (and future occurrences
        of them) belong to `target`; returns the fingerprints moved."""
        if target == source:
            raise SignalsStoreError("a Signal cannot be merged into itself")
        t_state, s_state = self._state(target), self._state(source)
        if "merged" in (t_state, s_state):
            raise SignalsStoreError(f"{target if t_state == 'merged' else source} is already "
                                    "merged; merge into the Signal it was merged into")
        with _transaction(self.conn):
            seq = self._next_seq() - 1
            fps = [r[0] for r in self.conn.execute(
                "SELECT fingerprint FROM fingerprints WHERE signal = ? ORDER BY fingerprint",
                (source,))]
            self.conn.execute("UPDATE fingerprints SET signal = ? WHERE signal = ?",
                              (target, source))
            self.conn.execute("INSERT INTO merges (seq, kind, target, source, fingerprints) "
                              "VALUES (?, 'merge', ?, ?, ?)", (seq, target, source, _dump(fps)))
            self.conn.execute("UPDATE signals SET merged_into = ? WHERE id = ?",
                              (target, source))
            self._transition(source, seq, s_state, "merged", None, f"merged into {target}")
            self._cache_severity()
        return fps

    def unmerge(self, source: str) -> list[str]:
        """Undo the last merge of `source`: the fingerprints it brought go back to it."""
        if self._state(source) != "merged":
            raise SignalsStoreError(f"{source} is not merged into another Signal")
        row = self.conn.execute("SELECT target, fingerprints FROM merges WHERE source = ? AND "
                                "kind = 'merge' ORDER BY id DESC LIMIT 1", (source,)).fetchone()
        target, fps = row["target"], json.loads(row["fingerprints"])
        with _transaction(self.conn):
            seq = self._next_seq() - 1
            for fp in fps:
                self.conn.execute("UPDATE fingerprints SET signal = ? WHERE fingerprint = ?",
                                  (source, fp))
            self.conn.execute("INSERT INTO merges (seq, kind, target, source, fingerprints) "
                              "VALUES (?, 'unmerge', ?, ?, ?)",
                              (seq, target, source, _dump(fps)))
            self.conn.execute("UPDATE signals SET merged_into = NULL WHERE id = ?", (source,))
            before = self.conn.execute(
                "SELECT from_state FROM transitions WHERE signal = ? AND to_state = 'merged' "
                "ORDER BY id DESC LIMIT 1", (source,)).fetchone()
            self._transition(source, seq, "merged", str(before[0] or "open"), None,
                             f"unmerged from {target}")
            self._cache_severity()
        return list(fps)

    # ------------------------------------------------------------ reading
    def signal_ids(self, include_merged: bool = False) -> list[str]:
        rows = self.conn.execute("SELECT id, state FROM signals ORDER BY number").fetchall()
        return [r["id"] for r in rows if include_merged or r["state"] != "merged"]

    def signal_row(self, sid: str) -> dict[str, Any]:
        row = self.conn.execute("SELECT * FROM signals WHERE id = ?", (sid,)).fetchone()
        if row is None:
            raise SignalsStoreError(f"no Signal {sid} in {self.path}; `eairc signals list` "
                                    "shows the ids")
        return dict(row)

    def occurrences(self, sid: str) -> list[tuple[Occurrence, int]]:
        """The Signal's occurrences (with the update that added each), by session and key."""
        rows = self.conn.execute(
            "SELECT o.data, o.seq FROM occurrences o JOIN fingerprints f "
            "ON o.fingerprint = f.fingerprint WHERE f.signal = ? ORDER BY o.session, o.key",
            (sid,)).fetchall()
        return [(Occurrence.model_validate_json(r["data"]), int(r["seq"])) for r in rows]

    def fingerprints(self, sid: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self.conn.execute("SELECT fingerprint, inputs FROM fingerprints WHERE signal = ? "
                                 "ORDER BY fingerprint", (sid,)).fetchall()
        return [(r["fingerprint"], json.loads(r["inputs"])) for r in rows]

    def why(self, o: Occurrence) -> str:
        return explain(fingerprint_inputs(o))

    def sessions(self, ids: set[str] | None = None, worlds: set[str] | None = None
                 ) -> list[Session]:
        rows = self.conn.execute("SELECT data, world FROM sessions ORDER BY id").fetchall()
        return [Session.model_validate_json(r["data"]) for r in rows
                if (ids is None or json.loads(r["data"])["id"] in ids)
                and (worlds is None or r["world"] in worlds)]

    def analysed(self, worlds: set[str | None]) -> set[str]:
        """The sessions of these worlds that some audit analysed (the scope's population)."""
        count = self.conn.execute("SELECT COUNT(*) FROM analyses").fetchone()[0]
        if self._by_world is None or self._by_world[0] != count:
            by_world: dict[str | None, set[str]] = {}
            for r in self.conn.execute("SELECT DISTINCT a.session, s.world FROM analyses a "
                                       "JOIN sessions s ON a.session = s.id"):
                by_world.setdefault(r["world"], set()).add(r["session"])
            self._by_world = (count, by_world)
        return set().union(*(self._by_world[1].get(w, set()) for w in worlds))

    def transitions(self, sid: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(
            "SELECT seq, from_state, to_state, digest, reason FROM transitions "
            "WHERE signal = ? ORDER BY id", (sid,))]

    def repairs(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(r["data"]) | {"seq": r["seq"]} for r in self.conn.execute(
            "SELECT data, seq FROM repairs WHERE signal = ? ORDER BY seq, repair", (sid,))]

    def merges(self, sid: str) -> list[dict[str, Any]]:
        return [dict(r) | {"fingerprints": json.loads(r["fingerprints"])}
                for r in self.conn.execute(
                    "SELECT seq, kind, target, source, fingerprints FROM merges "
                    "WHERE target = ? OR source = ? ORDER BY id", (sid, sid))]

    def studies_by_seq(self) -> dict[int, str]:
        return {int(r["seq"]): str(r["study"] or "") for r in self.conn.execute(
            "SELECT seq, study FROM updates")}

    def counts(self) -> dict[str, int]:
        """Rows per table (what an idempotence check compares)."""
        tables = ("updates", "sessions", "analyses", "digests", "signals", "fingerprints",
                  "occurrences", "transitions", "merges", "repairs")
        return {t: int(self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
                for t in tables}

    def _cache_severity(self) -> None:
        """Keep each Signal's current severity in `signals.severity` (for SQL readers)."""
        for sid in self.signal_ids():
            view = signal_view(self, sid)
            sev = view.severity
            self.conn.execute("UPDATE signals SET severity = ? WHERE id = ?", (
                None if sev is None else _dump(sev.model_dump(mode="json")), sid))
