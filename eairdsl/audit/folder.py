"""The audit folder on disk: its one reader and writer, returning the contract's models.

`eairc audit` leaves an audit folder, and every later stage reads it: the audit
study, Signals, the OTel export, repair and its retest, the external graders and
the study report. Each used to compose the folder's paths by hand and parse its
files its own way (three readings of `index.json`, findings read back as dicts);
a change of layout had to be found in six modules. This module is the only one
that names the folder's files. It returns the index as `AuditIndex`/`AuditEntry`
and each report as contract v1's `Report` (findings as `Finding`, read by
attribute); paths come out of it only to be linked, validated in place
(`validate.validate_report` locates diagnostics in the file's text) or handed to
a tool that writes there (bundling, a cassette).

The layout (OUT is an audit folder, `AuditFolder(OUT)`)::

    OUT/index.json                          AuditIndex: one AuditEntry per episode
    OUT/bundles/<episode>/                  the sanitized bundle (what the auditor saw):
                                            its manifest and steps (`bundle_store`)
    OUT/bundles/shared/<sha256>             the bundles' other files, once per content
    OUT/bundles/grader-index.json           episode -> trace(s) (`bundle.GRADER_INDEX`)
    OUT/reports/<episode>.json              the report (contract v1), as returned
    OUT/reports/<episode>.validation.json   the strict validator's ValidationResult
    OUT/cassettes/auditor.jsonl             an LLM auditor's recorded exchanges

An audit study (`eairc audit-study -o DIR`, `AuditStudyFolder(DIR)`) keeps one audit
folder per arm, `DIR/arms/<arm>/`, beside its `DIR/cohort.json` and `DIR/summary.json`
(whose contents `eairdsl.audit.cohort` owns). Inside a study folder, audits live in
`STUDY/audit/<arm>/` (`eairc audit STUDY`) and `STUDY/<dir>/arms/<arm>/` beside a cohort
(`study_audits`); `find_audits` finds the audit folders under any target.

Reads: `index()` and `report()` raise `AuditFolderError` (a `UsageError`) naming the
file and why in one line; a missing index reads as an empty one (an audit not yet
run). The study report reads hostile folders entry by entry (`index_entries`), so one
damaged entry is listed rather than hiding the arm. Writes are atomic
(`source.write_atomic`): an interrupted audit loses at most the file in flight.

Public API: `AuditFolder` (`index`, `index_entries`, `report`, `reports`, `validation`,
`whole`, `kept_episodes`, `grader_traces`, `write_index`, `write_report`,
`write_validation`, the path properties `index_path`, `bundles`, `reports_dir`,
`cassette`, and `bundle_dir`, `report_path`, `validation_path`, `is_audit`, `has_index`),
`AuditStudyFolder` (`cohort_path`, `summary_path`, `arm`), `AuditEntry`, `AuditIndex`,
`LenientIndex`, `AuditFolderError`, `find_audits`, `study_audits`, `replay_sources`,
`read_json`, `report_json`, and the file names (`AUDIT_INDEX`, `BUNDLES`, `REPORTS`,
`CASSETTES`, `AUDITOR_CASSETTE`, `ARMS`, `COHORT`, `SUMMARY`) for messages and older
imports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from eairdsl.audit.auditor import AuditorSettings
from eairdsl.audit.contract import Report, Verdict
from eairdsl.errors import UsageError
from eairdsl.source import write_atomic

if TYPE_CHECKING:
    from eairdsl.audit.validate import ValidationResult
    from eairdsl.runtime.trace import TraceLabel

__all__ = ["ARMS", "AUDIT_INDEX", "AUDITOR_CASSETTE", "BUNDLES", "CASSETTES", "COHORT",
           "REPORTS", "SUMMARY",
           "AuditEntry", "AuditFolder", "AuditFolderError", "AuditIndex", "AuditStudyFolder",
           "LenientIndex", "find_audits", "read_json", "replay_sources", "report_json",
           "study_audits"]

AUDIT_INDEX = "index.json"
BUNDLES = "bundles"
REPORTS = "reports"
CASSETTES = "cassettes"
#: the auditor's cassette, relative to the audit folder
AUDITOR_CASSETTE = Path(CASSETTES) / "auditor.jsonl"
#: an audit study's arms, relative to its folder
ARMS = "arms"
_VALIDATION = ".validation.json"
#: where `eairc audit STUDY_DIR` writes its arms, relative to the study
_STUDY_AUDIT = "audit"
#: the audit study's cohort and summary files (their contents: eairdsl.audit.cohort)
COHORT = "cohort.json"
SUMMARY = "summary.json"

_M = TypeVar("_M", bound=BaseModel)


class AuditEntry(BaseModel):
    """One audited episode, as the index records it (grader-side: it names the traces)."""

    episode: str
    #: the trace(s) the bundle was made from, relative to the audit folder
    traces: list[str]
    status: Literal["valid", "invalid", "failed"]
    verdict: Verdict | None = None
    findings: int = 0
    leads: int = 0
    #: whether the report followed contract v1's schema
    schema_valid: bool = False
    #: validator errors (V8xx) of the report
    errors: int = 0
    findings_resolvable: int = 0
    findings_total: int = 0
    units_resolvable: int = 0
    units_total: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    tool_calls: int | None = None
    seconds: float | None = None
    #: why an auditor produced no report
    reason: str | None = None


class AuditIndex(BaseModel):
    """`OUT/index.json`: every episode of the audit, sorted by episode id."""

    about: str = ("grader-side index of an audit: each bundle's opaque episode id, the "
                  "trace(s) it was made from, and the report's verdict and validation; "
                  "never give it to an auditor")
    auditor: dict[str, Any] = Field(default_factory=dict)
    #: how an LLM auditor's requests were sent (model, sampling, transport limits);
    #: absent for auditors that sample nothing and in indexes written before it was kept
    settings: AuditorSettings | None = None
    entries: list[AuditEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class LenientIndex:
    """An index read entry by entry (`AuditFolder.index_entries`): the auditor block (empty
    when it is not an object) and each entry, None where it is not an `AuditEntry`."""

    auditor: dict[str, Any]
    entries: list[AuditEntry | None]


class AuditFolderError(UsageError):
    """A file of the audit folder that cannot be read as what it should be: `path` and
    `why` (one line) apart, so a caller can word its own message around them."""

    def __init__(self, path: Path, why: str, message: str | None = None) -> None:
        super().__init__(message if message is not None else f"{path}: {why}")
        self.path = path
        self.why = why


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _dump(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def report_json(report: Report) -> bytes:
    """A report's file text: the contract's JSON, sorted keys, two-space indent."""
    return _dump(report.model_dump(mode="json"))


def _index_json(index: AuditIndex) -> bytes:
    """The index's file text; `settings` only when there are some, so an offline audit's
    index is byte for byte what it was before settings were recorded."""
    data = index.model_dump(mode="json")
    if data.get("settings") is None:
        data.pop("settings", None)
    return _dump(data)


def _write(path: Path, data: bytes) -> None:
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_json(path: Path, limit: int | None = None) -> Any:
    """A JSON file's value, for files that are untrusted input (an LLM wrote the reports);
    ValueError with a reason for people (`cannot read it`, `it is larger than N bytes`,
    `it is not JSON (…, line N)`) when it cannot be used."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror or exc})") from None
    if limit is not None and size > limit:
        raise ValueError(f"it is larger than {limit} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"it is not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise ValueError("it is not JSON (nested too deeply)") from None


def _size(limit: int) -> str:
    """A size limit for people: whole mebibytes as such (8 MiB), else bytes."""
    return f"{limit >> 20} MiB" if limit and limit % (1 << 20) == 0 else f"{limit} bytes"


def _model(path: Path, model: type[_M], limit: int | None = None) -> _M:
    """A file read as `model`; AuditFolderError(path, why) when it is missing, too large,
    or not one (why: the first line of the parser's message)."""
    try:
        if limit is not None and path.stat().st_size > limit:
            raise AuditFolderError(path, f"larger than {_size(limit)}")
        data = path.read_bytes()
    except OSError as exc:
        raise AuditFolderError(path, _first_line(exc)) from None
    try:
        return model.model_validate_json(data)
    except (ValueError, RecursionError) as exc:
        raise AuditFolderError(path, _first_line(exc)) from None


@dataclass(frozen=True)
class AuditFolder:
    """An audit folder (`eairc audit -o OUT`): see the module docstring for its layout."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # ------------------------------------------------------------------ paths
    @property
    def index_path(self) -> Path:
        return self.path / AUDIT_INDEX

    @property
    def bundles(self) -> Path:
        """The bundles folder (`bundle.bundle_run` writes it, and its grader index)."""
        return self.path / BUNDLES

    @property
    def reports_dir(self) -> Path:
        return self.path / REPORTS

    @property
    def cassette(self) -> Path:
        """Where an audit into this folder records its LLM auditor's exchanges."""
        return self.path / AUDITOR_CASSETTE

    def bundle_dir(self, episode: str) -> Path:
        return self.bundles / episode

    def report_path(self, episode: str) -> Path:
        """The report's file: for links and for the validator, which locates in its text."""
        return self.reports_dir / f"{episode}.json"

    def validation_path(self, episode: str) -> Path:
        return self.reports_dir / f"{episode}{_VALIDATION}"

    def has_index(self) -> bool:
        return self.index_path.is_file()

    def is_audit(self) -> bool:
        """Whether the folder looks like an audit: an index and a reports folder."""
        return self.has_index() and self.reports_dir.is_dir()

    def whole(self, episode: str) -> bool:
        """Whether the episode's report and its validation are both on disk."""
        return self.report_path(episode).is_file() and self.validation_path(episode).is_file()

    def kept_episodes(self) -> list[str]:
        """The episodes a resumed run would reuse: reports with their validation beside."""
        if not self.reports_dir.is_dir():
            return []
        return sorted(p.stem for p in self.reports_dir.glob("*.json")
                      if not p.name.endswith(_VALIDATION)
                      and self.validation_path(p.stem).is_file())

    # ------------------------------------------------------------------ reads
    def index(self) -> AuditIndex:
        """The folder's index (empty when there is none yet); UsageError if damaged."""
        path = self.index_path
        if not path.is_file():
            return AuditIndex()
        try:
            return AuditIndex.model_validate_json(path.read_bytes())
        except ValueError as exc:
            why = _first_line(exc)
            raise AuditFolderError(path, why, f"{path} is not an audit index ({why}); move "
                                   "it away or choose another -o") from None

    def index_entries(self, limit: int | None = None) -> LenientIndex:
        """The index read entry by entry, for readers of untrusted folders (the study
        report): ValueError (a reason for people) when the file is no index at all."""
        data = read_json(self.index_path, limit)
        entries = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ValueError("not an audit index (no list of entries)")
        auditor = data.get("auditor")
        out: list[AuditEntry | None] = []
        for entry in entries:
            try:
                out.append(AuditEntry.model_validate(entry))
            except ValidationError:
                out.append(None)
        return LenientIndex(dict(auditor) if isinstance(auditor, dict) else {}, out)

    def report(self, episode: str, limit: int | None = None) -> Report:
        """The episode's report as contract v1; AuditFolderError (path, why) when it is
        missing, larger than `limit` bytes, or not a contract-v1 report."""
        return _model(self.report_path(episode), Report, limit)

    def reports(self) -> Iterator[tuple[AuditEntry, Report]]:
        """Every audited episode's entry and report, in the index's order: episodes whose
        audit failed, or whose report is absent, are skipped; a damaged one raises."""
        for entry in self.index().entries:
            if entry.status != "failed" and self.report_path(entry.episode).is_file():
                yield entry, self.report(entry.episode)

    def validation(self, episode: str, limit: int | None = None) -> ValidationResult:
        """The validator's result for the episode's report (AuditFolderError if unreadable)."""
        from eairdsl.audit.validate import ValidationResult

        return _model(self.validation_path(episode), ValidationResult, limit)

    def grader_traces(self) -> dict[str, list[Path]]:
        """Episode id -> the trace paths it was made from (grader-side)."""
        return {k: [Path(t) for t in v] for k, v in self.grader_trace_names().items()}

    def grader_trace_names(self) -> dict[str, list[str]]:
        """`grader_traces` as text (`grader_index`'s first half)."""
        return self.grader_index()[0]

    def grader_labels(self) -> dict[str, TraceLabel]:
        """Trace path, as `grader_trace_names` names it -> its label (`grader_index`'s
        second half)."""
        return self.grader_index()[1]

    def grader_index(self) -> tuple[dict[str, list[str]], dict[str, TraceLabel]]:
        """The grader index read once: episode id -> its trace paths, and trace path ->
        its label (for the traces whose label the index keeps; none in an audit written
        before labels were kept). The index holds the paths relative to the resolved
        bundles folder (`bundle._update_index`), so joining and normalising gives the
        resolved path without a `resolve()` per trace (a third of what reading a
        6,000-episode audit cost a repair), and text hashes where a Path would not.
        An index that is not JSON raises its `ValueError`."""
        from eairdsl.audit.bundle import read_grader_index

        index = read_grader_index(self.bundles, strict=True)
        base = str(self.bundles.resolve())

        def full(rel: str) -> str:
            return os.path.normpath(os.path.join(base, rel))
        return ({k: [full(t) for t in v] for k, v in index.episodes.items()},
                {full(rel): label for rel, label in index.labels.items()})

    # ------------------------------------------------------------------ writes
    def write_index(self, index: AuditIndex) -> None:
        _write(self.index_path, _index_json(index))

    def write_report(self, episode: str, report: Report) -> Path:
        """Write the report as the auditor returned it; its path (for the validator)."""
        path = self.report_path(episode)
        _write(path, report_json(report))
        return path

    def write_validation(self, episode: str, result: ValidationResult) -> None:
        _write(self.validation_path(episode), _dump(result.model_dump(mode="json")))


@dataclass(frozen=True)
class AuditStudyFolder:
    """An audit study's folder (`eairc audit-study -o DIR`): the cohort, the summary and
    one audit folder per arm."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def cohort_path(self) -> Path:
        return self.path / COHORT

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    def arm(self, arm: str) -> AuditFolder:
        return AuditFolder(self.path / ARMS / arm)

    def is_audit_study(self) -> bool:
        """Whether the folder looks like an audit study: a cohort and an arms folder."""
        return self.cohort_path.is_file() and (self.path / ARMS).is_dir()

    def arm_names(self) -> list[str]:
        """The arms on disk, sorted (empty when there is no arms folder)."""
        arms = self.path / ARMS
        return sorted(p.name for p in arms.iterdir() if p.is_dir()) if arms.is_dir() else []


def replay_sources(source: Path, arm: str | None = None) -> list[Path]:
    """Where `--replay SOURCE` may find an auditor cassette, in order: an audit folder's,
    the file in a `cassettes/` folder given itself, an audit study's arm `arm`'s (or an
    arm folder named under SOURCE), then the older layout (`OUT/cassettes` as the file)."""
    candidates = [source / AUDITOR_CASSETTE, source / AUDITOR_CASSETTE.name]
    if arm is not None:
        candidates += [AuditStudyFolder(source).arm(arm).cassette,
                       AuditFolder(source / arm).cassette]
    candidates.append(source / AUDITOR_CASSETTE.parent)
    return candidates


def find_audits(target: Path) -> list[AuditFolder]:
    """The audit folders of a target: itself, a study's `audit/*/` and `*/arms/*/`, the
    arms of a study's `audit/` folder, or the arms of an audit-study folder."""
    if AuditFolder(target).is_audit():
        return [AuditFolder(target)]
    globs = (f"{_STUDY_AUDIT}/*/{AUDIT_INDEX}", f"*/{ARMS}/*/{AUDIT_INDEX}",
             f"*/{AUDIT_INDEX}", f"{ARMS}/*/{AUDIT_INDEX}")
    found = sorted({p.parent for glob in globs for p in target.glob(glob)})
    return [AuditFolder(p) for p in found if AuditFolder(p).reports_dir.is_dir()]


def study_audits(root: Path) -> list[tuple[str, AuditFolder]]:
    """A study's audits, each with its label: `audit/<arm>/` (`eairc audit`) by name,
    then every audit study's arms `<dir>/arms/<arm>/` beside a cohort (labelled
    `<dir>/<arm>`). Folders with an index file only; the index is not read here."""
    found = [(index.parent.name, AuditFolder(index.parent))
             for index in sorted(root.glob(f"{_STUDY_AUDIT}/*/{AUDIT_INDEX}"))]
    found += [(f"{index.parents[2].name}/{index.parent.name}", AuditFolder(index.parent))
              for index in sorted(root.glob(f"*/{ARMS}/*/{AUDIT_INDEX}"))
              if AuditStudyFolder(index.parents[2]).cohort_path.is_file()]
    return found
