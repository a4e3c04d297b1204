"""Audit many episodes: a trace, a run folder or a study folder -> one report per episode.

`audit_episodes(target, out, auditor)` bundles every trace under `target`
(`bundle.bundle_run`, which names each bundle by a digest of its sanitized
content, so two traces that read the same are audited once: F.14's "drawn by
content identity"), hands each bundle — and only the bundle — to the auditor,
validates the report with the strict validator, and writes:

    OUT/bundles/<episode>/        the sanitized bundle (what the auditor saw): its manifest
                                  and steps; the world's files once in OUT/bundles/shared/
    OUT/bundles/grader-index.json episode -> trace(s): grader-only
    OUT/reports/<episode>.json    the report, exactly as the auditor returned it
    OUT/reports/<episode>.validation.json   the validator's diagnostics and rates
    OUT/index.json                one entry per episode (grader-side: it names traces)

Every file is written atomically (temporary file, then rename), so an
interrupted audit loses at most the report in flight; running the same command
again resumes: an episode whose report and validation are already on disk is
not audited again. The index is rewritten every few seconds (less often as it
grows: its writes stay a few percent of the run) and when the run ends (also when
it fails), not after every episode; a run killed outright leaves an index that
lags its reports, and the next run brings it up to date from them.
A report that fails validation is kept, with its diagnostics, and counted as
invalid: never dropped, never repaired here. An auditor that produces no report
(`AuditError`: a provider failure, a spent budget) is recorded with its reason
and retried on the next run.

Wall-clock seconds per audit are kept in the index only; reports of a
deterministic auditor are byte-identical from run to run.

An LLM auditor (`auditor.SampledAuditor`) also leaves its request settings in the
index (`settings`: the model, the sampling options that were set, the timeout and
retries, and the budgets that differ from the defaults), since the report's `auditor`
block names only model, prompt version and seed; and its arm (`contract`, `graph`)
and `prompt_version` in the index's `auditor` block, where the caller's `describe`
does not already say them (a rules or oracle audit's index is as it always was).

A folder holds the reports of one auditor, arm, sampling and budget. Resuming into a
folder that keeps reports is refused, never reused, with one `UsageError` naming
every difference, when the recorded auditor (the index's `auditor` block and every
kept report's) differs from this one (`auditor.identity_of`) in kind, model,
prompt version, contract or graph; when its sampling differs (another model,
temperature, max_tokens, seed or extra provider parameter, or an LLM auditor into
an index whose sampling was not recorded); or when any budget differs
(`auditor.AuditBudgets`), larger ones too: the first message tells the model its
tool-call budget, and a kept report that stopped on a budget is what that budget
gives, so under another budget every report could read otherwise. A longer timeout
or more retries is the same audit and resumes. An auditor the runner cannot
identify (a test's) is checked on sampling only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eairdsl.audit.auditor import (
    AuditError,
    AuditorAgent,
    AuditorIdentity,
    AuditorSettings,
    SampledAuditor,
    identity_of,
)
from eairdsl.audit.bundle import bundle_run
from eairdsl.audit.contract import Report
from eairdsl.audit.evidence import Bundle
from eairdsl.audit.folder import (
    AUDIT_INDEX,
    BUNDLES,
    REPORTS,
    AuditEntry,
    AuditFolder,
    AuditFolderError,
    AuditIndex,
    report_json,
)
from eairdsl.audit.validate import ValidationResult, validate_report
from eairdsl.errors import UsageError

__all__ = ["AUDIT_INDEX", "BUNDLES", "REPORTS", "AuditEntry", "AuditIndex", "Progress",
           "report_json", "audit_episodes", "read_index", "grader_traces"]

#: progress callback: (done, total, entry) after each episode
Progress = Callable[[int, int, "AuditEntry"], None]
#: seconds between two writes of the index during an audit, at least; and at least this
#: many times as long as the last write took (so writing it stays a few % of the audit)
_INDEX_EVERY = 2.0
_INDEX_SHARE = 25.0


def _shown(value: str) -> str:
    """A recorded value in a one-line message (reports are untrusted: no line breaks,
    nothing long)."""
    text = " ".join(value.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _recorded_identity(folder: AuditFolder, earlier: AuditIndex) -> dict[str, set[str]]:
    """Every value the folder records of each identity field: the index's `auditor`
    block and each kept report's `auditor` block (unreadable ones name nothing)."""
    found: dict[str, set[str]] = {}
    blocks: list[object] = [earlier.auditor]
    for episode in folder.kept_episodes():
        try:
            blocks.append(folder.report(episode).auditor.model_dump(mode="json"))
        except UsageError:
            continue
    for block in blocks:
        for field, value in AuditorIdentity.of_block(block).known().items():
            found.setdefault(field, set()).add(value)
    return found


def _same_auditor(out: Path, earlier: AuditIndex, identity: AuditorIdentity,
                  settings: AuditorSettings | None) -> None:
    """Refuse to resume into a folder whose reports another auditor, arm, sampling or
    budget made (a report of one arm, or at one temperature, is not a report of
    another); one line naming each difference."""
    folder = AuditFolder(out)
    if not folder.kept_episodes() and not any(e.status != "failed" for e in earlier.entries):
        return  # no report of an earlier run stays in the folder
    differences: list[str] = []
    recorded = _recorded_identity(folder, earlier)
    for field, now in identity.known().items():
        other = sorted(v for v in recorded.get(field, set()) if v != now)
        if other:
            shown = " and ".join(_shown(v) for v in other[:3]) + (
                f" and {len(other) - 3} more" if len(other) > 3 else "")
            differences.append(f"{field} {shown}, not {_shown(now)}")
    was = earlier.settings.sampling() if earlier.settings is not None else None
    now_sampling = settings.sampling() if settings is not None else None

    def say(sampling: dict[str, Any] | None) -> str:
        if sampling is None:
            return "none recorded"
        return AuditorSettings.model_validate(sampling).describe()

    if was != now_sampling:
        differences.append(f"sampling '{say(was)}', not '{say(now_sampling)}'")
    elif earlier.settings is not None and settings is not None:
        before, after = earlier.settings.budgets.effective(), settings.budgets.effective()
        differences += [f"budget {k} {'no cap' if before[k] is None else before[k]}, not "
                        f"{'no cap' if after[k] is None else after[k]}"
                        for k in before if before[k] != after[k]]
    if differences:
        raise UsageError(
            f"{folder.index_path}: its reports were made by another auditor than this "
            f"audit's ({'; '.join(differences)}); reports are not reused across auditors, "
            "arms, samplings or budgets: rerun with the recorded ones, choose another -o, "
            f"or remove {out} to audit afresh")


def read_index(out: Path) -> AuditIndex:
    """The audit folder's index (empty when there is none yet): `AuditFolder.index`."""
    return AuditFolder(out).index()


def grader_traces(out: Path) -> dict[str, list[Path]]:
    """Episode id -> the trace paths it was made from (grader-side):
    `AuditFolder.grader_traces`."""
    return AuditFolder(out).grader_traces()


def _done(folder: AuditFolder, episode: str) -> AuditEntry | None:
    """The entry of an episode already audited in an earlier run, if its files are whole:
    its validation reads as one and its report as contract v1 (one that no longer does
    was damaged after the fact, and its validation and verdict would be stale)."""
    if not folder.whole(episode):
        return None
    try:
        result = folder.validation(episode)
        report = folder.report(episode)
    except AuditFolderError:
        return None
    return _entry(episode, [], report, result, None)


def _entry(episode: str, traces: list[str], report: Report, result: ValidationResult,
           seconds: float | None) -> AuditEntry:
    usage = report.usage
    return AuditEntry(
        episode=episode, traces=traces, status="valid" if result.ok else "invalid",
        verdict=report.verdict, findings=len(report.findings), leads=len(report.leads),
        schema_valid=result.schema_valid,
        errors=sum(1 for d in result.diagnostics if d.is_error),
        findings_resolvable=result.findings_resolvable, findings_total=result.findings_total,
        units_resolvable=result.units_resolvable, units_total=result.units_total,
        tokens_in=usage.tokens_in, tokens_out=usage.tokens_out,
        tool_calls=usage.tool_calls, seconds=seconds)


def audit_episodes(target: Path | Sequence[Path], out: Path, auditor: AuditorAgent, *,
                   world: Path | None = None, describe: dict[str, Any] | None = None,
                   only: set[str] | None = None,
                   progress: Progress | None = None) -> AuditIndex:
    """Audit every episode of `target` (a trace, a run or study folder, or a list of
    traces) into `out` (resumable); return the index.

    `only` restricts the audit to those episode ids (the audit study's sample);
    `describe` is what the index records about the auditor (kind, model, arms).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        # it was "cannot write the bundle OUT/bundles/ep-…: Not a directory"
        raise UsageError(f"{out} is a file, not an audit folder: use another -o")
    folder = AuditFolder(out)
    earlier = folder.index()
    settings = auditor.request_settings if isinstance(auditor, SampledAuditor) else None
    known = identity_of(auditor)
    # what this run is: the auditor's own word, else what the caller describes
    identity = AuditorIdentity.model_validate({
        **AuditorIdentity.of_block(describe).known(),
        **(known.known() if known is not None else {})})
    _same_auditor(out, earlier, identity, settings)
    block = dict(describe or {})
    if known is not None and known.contract is not None:
        # an LLM auditor's arm and prompt version, where the caller did not record them
        for field, value in known.known().items():
            block.setdefault(field, value)
    bundled = bundle_run(target if isinstance(target, Path) else list(target), folder.bundles,
                         world)
    traces: dict[str, list[str]] = {}
    base = out.resolve()
    for b in bundled:
        rel = os.path.relpath(Path(b.trace).resolve(), base)
        traces.setdefault(b.episode, []).append(rel)
    episodes = sorted(e for e in traces if only is None or e in only)
    # entries of earlier runs into this folder stay, updated where this run audits them
    entries = {e.episode: e for e in earlier.entries}

    def index() -> AuditIndex:
        return AuditIndex(auditor=block, settings=settings, entries=sorted(
            entries.values(), key=lambda e: e.episode))

    # The index is written every _INDEX_EVERY seconds, or _INDEX_SHARE times as long as
    # its last write took (a 20,000-episode index takes a second), and when the run
    # ends, however it ends: rewriting it after every episode made an audit quadratic in
    # its size. What a killed run did not write, the next run finds again from the
    # reports on disk.
    written, pending, every = time.monotonic(), True, _INDEX_EVERY
    try:
        for n, episode in enumerate(episodes, 1):
            names = sorted(traces[episode])
            entry = _done(folder, episode)
            if entry is not None:
                previous = entries.get(episode)
                entry = entry.model_copy(update={
                    "traces": names, "seconds": previous.seconds if previous else None})
            else:
                entry = _audit_one(folder, episode, names, auditor)
            entries[episode] = entry
            pending = True
            if time.monotonic() - written >= every:
                started = time.monotonic()
                folder.write_index(index())
                written, pending = time.monotonic(), False
                every = max(_INDEX_EVERY, _INDEX_SHARE * (written - started))
            if progress is not None:
                progress(n, len(episodes), entry)
    finally:
        if pending:
            folder.write_index(index())
    return index()


def _audit_one(folder: AuditFolder, episode: str, traces: list[str],
               auditor: AuditorAgent) -> AuditEntry:
    bundle = Bundle.load(folder.bundle_dir(episode))
    started = time.perf_counter()
    try:
        report = auditor.audit(bundle)
    except AuditError as exc:
        return AuditEntry(episode=episode, traces=traces, status="failed",
                          reason=str(exc) or type(exc).__name__,
                          seconds=round(time.perf_counter() - started, 3))
    seconds = round(time.perf_counter() - started, 3)
    report_path = folder.write_report(episode, report)
    result = validate_report(report_path, bundle)
    folder.write_validation(episode, result)
    return _entry(episode, traces, report, result, seconds)
