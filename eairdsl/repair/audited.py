"""The audit as a repair reads it: who played its episodes, what they realized, who audited.

A repair reads its audit at three moments: choosing the finding
(`loop.select_finding`: which audited episodes are this world's, under which
conditions the target was seen), refusing an audit the retest cannot rerun
(`loop._retestable`: one cohort, one auditor) and planning each round's retest
(`retest.plan_retest`: the audited seeds, instances and regression cases). Each
used to read the audit afresh, and read every trace behind it whole: 1,800 trace
reads for 600 audited episodes, a repair whose cost grew with the audit it was
given. `AuditRead` reads each part once per repair and only what is needed:

- the index and the grader index (`AuditFolder.index`, `grader_traces`);
- of each trace its label (`runtime.trace.TraceLabel`: the condition, instance,
  seed, agents and LLM record, the world's digest, and `realized` / `utility`;
  `AuditedEpisode`), as the grader index keeps it — one file, whatever the
  audit's size — or, for an audit written before, from the trace's header and
  result lines, never its events;
- each report of the world repaired once (`AuditRead.reports`): for its `auditor`
  block (`auditor_of`) and, for a new repair, for the finding to repair and where
  it was seen.

Who played (`Cohort`, `cohort_of`) and who audited (`AuditorUsed`) are decided
from those; `retest.py` reruns them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from eairdsl.audit.auditor import AuditBudgets
from eairdsl.audit.contract import Report
from eairdsl.audit.folder import AuditEntry, AuditFolder, AuditFolderError, AuditIndex
from eairdsl.errors import UsageError
from eairdsl.runtime.trace import TraceLabel, read_trace_label
from eairdsl.study.grid import LLM_PREFIX, OFFLINE_PROFILES, Model

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["AuditRead", "AuditedEpisode", "AuditorUsed", "Cohort", "audited_episodes",
           "auditor_of", "cohort_of"]


def _fresh(base: LLMSettings | None, update: dict[str, Any]) -> LLMSettings:
    """`base` (default settings when None) with `update`, as a new object with no client yet
    (`model_copy` would share `base`'s client, and with it its cassette)."""
    from eairdsl.agents.llm import LLMSettings

    fields = {name: getattr(base, name) for name in LLMSettings.model_fields} \
        if base is not None else {}
    return LLMSettings(**{**fields, **update})



class AuditedEpisode(BaseModel):
    """One audited trace, grader-side: its header and its label."""

    episode: str
    trace: str
    condition: str
    instance: str
    seed: int
    #: the sim profile of every party, or "llm" for an episode played by LLM models
    profile: str
    realized: bool | None
    utility: bool | None
    #: LLM episodes: the header's models and sampling options (TraceHeader.llm)
    llm: dict[str, Any] | None = None
    #: the digest of the world the episode ran (TraceHeader.digest)
    digest: str | None = None


def _profile(agents: dict[str, str]) -> str:
    values = sorted(set(agents.values()))
    if len(values) != 1:
        raise UsageError(f"the audited episodes ran with mixed agents ({', '.join(values)}); "
                         "the offline retest runs one sim profile for every party")
    return values[0]


def _profile_of(agents: dict[str, str], llm: dict[str, Any] | None) -> str:
    """An episode's profile: its one sim profile, or "llm" when models played it (the
    parties without a model being plain sim, as in an LLM study)."""
    if not llm:
        return _profile(agents)
    others = sorted({v for v in agents.values() if not v.startswith(LLM_PREFIX)}
                    - {"llm", "sim"})
    if others:
        raise UsageError(f"the audited episodes ran LLM models beside {', '.join(others)} "
                         "parties; the retest runs LLM episodes as a study does (the "
                         "parties without a model plain sim)")
    return "llm"


class Cohort(BaseModel):
    """Who played the audited episodes, as their headers record it; the retest runs W and
    W′ with the same."""

    kind: Literal["sim", "llm"]
    #: the sim profile ("llm" for an LLM cohort: its parties without a model run plain sim)
    profile: str
    #: LLM cohorts: the header's `llm` record (model, counterpart_model, judge_model,
    #: role_models, temperature, max_tokens, seed; those set)
    llm: dict[str, Any] | None = None

    def model(self) -> Model:
        """The study model column the retest runs."""
        if self.llm is None:
            return Model(self.profile, self.profile)
        name = str(self.llm["model"])
        return Model(name, LLM_PREFIX + name)

    def settings(self, transport: LLMSettings | None, record: Path | None = None,
                 replay: Path | None = None) -> LLMSettings | None:
        """The LLM options of the retest's studies: the cohort's models and sampling options
        over `transport`'s endpoint and limits, recording to or replaying from the study
        cassette folder `record` / `replay` (None for a sim cohort)."""
        if self.llm is None:
            return None
        h = self.llm
        return _fresh(transport, {
            "model": None, "counterpart_model": h.get("counterpart_model"),
            "judge_model": h.get("judge_model"),
            "role_models": dict(h.get("role_models") or {}),
            "temperature": h.get("temperature"), "max_tokens": h.get("max_tokens"),
            "seed": h.get("seed"), "record": record, "replay": replay})


def _describe_llm(llm: dict[str, Any]) -> str:
    parts = [f"{k.removesuffix('_model')} {v}" for k, v in sorted(llm.items())
             if k.endswith("_model")]
    roles = llm.get("role_models") or {}
    parts += [f"{k} {v}" for k, v in sorted(roles.items())]
    parts += [f"{k} {llm[k]}" for k in ("temperature", "max_tokens", "seed") if k in llm]
    return f"LLM model {llm.get('model') or '(none)'}" + (
        f" ({', '.join(parts)})" if parts else "")


def cohort_of(audited: list[AuditedEpisode]) -> Cohort:
    """The one cohort the retest reruns (see the module docstring); a mix that cannot be
    rerun as it ran is a `UsageError` naming each group."""
    if not audited:
        raise UsageError("the audit names no traces (bundles/grader-index.json)")
    if all(a.llm is None for a in audited):
        profile = sorted(Counter(a.profile for a in audited).items(),
                         key=lambda kv: -kv[1])[0][0]
        if profile not in OFFLINE_PROFILES:
            raise UsageError(f"the audited episodes ran with {profile}; the retest runs sim "
                             "profiles or LLM models recorded in the trace headers")
        return Cohort(kind="sim", profile=profile)
    groups = Counter(json.dumps(a.llm, sort_keys=True) if a.llm else a.profile
                     for a in audited)
    if len(groups) > 1:
        found = "; ".join(
            f"{n} with {_describe_llm(json.loads(key)) if key.startswith('{') else key}"
            for key, n in sorted(groups.items()))
        raise UsageError(f"the audited episodes ran with different agents ({found}); the "
                         "retest reruns one cohort as it ran: audit one model's episodes "
                         "(e.g. a study of that model alone) and repair from that audit")
    llm = audited[0].llm or {}
    if not llm.get("model"):
        raise UsageError(f"the audited episodes ran with {_describe_llm(llm)}, without a model "
                         "under test; the retest reruns an LLM study's model column (--model)")
    return Cohort(kind="llm", profile="llm", llm=llm)


class AuditorUsed(BaseModel):
    """The auditor an audit ran, from its reports' `auditor` blocks and its index."""

    kind: Literal["rules", "oracle", "llm"]
    model: str | None = None
    contract: str | None = None
    graph: str | None = None
    seed: int | None = None
    prompt_version: str | None = None
    #: the LLM auditor's sampling as its audit recorded it (`AuditIndex.settings`; None
    #: when unset, or in an audit written before the settings were kept)
    temperature: float | None = None
    max_tokens: int | None = None
    #: the LLM auditor's budgets as its audit recorded them (`AuditorSettings.budgets`;
    #: the defaults when none differed, or in an audit written before they were kept)
    budgets: AuditBudgets = Field(default_factory=AuditBudgets)


def auditor_of(audit_dir: Path) -> AuditorUsed:
    """Who audited `audit_dir`: the one auditor its reports name (the index's arm for an LLM
    auditor's contract and graph); an audit with no readable report counts as the index
    says (offline when it says nothing)."""
    return AuditRead(Path(audit_dir)).auditor()


def _auditor_key(report: Report) -> dict[str, Any]:
    """What tells one auditor from another in a report's `auditor` block."""
    named = report.auditor
    return {"kind": named.kind, "model": named.model, "seed": named.seed,
            "prompt_version": named.prompt_version}


def _auditor_used(audit_dir: Path, index: AuditIndex,
                  seen: dict[str, dict[str, Any]]) -> AuditorUsed:
    """`auditor_of` from the index and the distinct auditor blocks of its readable reports
    (`seen`, in index order)."""
    recorded = index.auditor
    if len(seen) > 1:
        found = ", ".join(f"{b['kind']}" + (f" {b['model']}" if b.get("model") else "")
                          + (f" seed {b['seed']}" if b.get("seed") is not None else "")
                          for b in seen.values())
        raise UsageError(f"{audit_dir}: the audit's reports come from several auditors "
                         f"({found}); AuditPass reruns the one auditor an audit used")
    block = next(iter(seen.values()), None) or {
        "kind": {"offline": "rules"}.get(str(recorded.get("kind") or "offline"),
                                         recorded.get("kind")),
        "model": recorded.get("model")}
    kind = block.get("kind")
    if kind not in ("rules", "oracle", "llm"):
        raise UsageError(f"{audit_dir}: the audit was made by a {kind} auditor; AuditPass "
                         "reruns the rules, oracle or LLM auditor an audit used")
    if kind != "llm":
        return AuditorUsed(kind=kind, prompt_version=block.get("prompt_version"))
    prompt = str(block.get("prompt_version") or "")
    contract = recorded.get("contract") or (prompt.split("-", 1)[0] if "-" in prompt
                                            else "full")
    sampled = index.settings
    return AuditorUsed(kind="llm", model=block.get("model") or recorded.get("model"),
                       contract=str(contract), graph=str(recorded.get("graph") or "annotated"),
                       seed=block.get("seed"), prompt_version=block.get("prompt_version"),
                       temperature=sampled.temperature if sampled else None,
                       max_tokens=sampled.max_tokens if sampled else None,
                       budgets=sampled.budgets if sampled else AuditBudgets())


def audited_episodes(audit_dir: Path) -> list[AuditedEpisode]:
    """Every trace behind the audit's bundles (grader index), with its header and label."""
    return AuditRead(Path(audit_dir)).episodes()


def _episodes(traces: dict[str, list[str]],
              labels: dict[str, TraceLabel]) -> list[AuditedEpisode]:
    """Each trace's label, in episode then path order: as the grader index keeps it
    (`labels`), else from the trace's header and result lines (never its events; an
    audit written before the index kept labels). An unreadable trace is a `UsageError`
    naming it."""
    out: list[AuditedEpisode] = []
    for episode, paths in sorted(traces.items()):
        for path in sorted(paths, key=lambda p: p.split(os.sep)):  # as Paths sort
            label = labels.get(path)
            if label is None:
                try:
                    label = read_trace_label(Path(path))
                except (OSError, ValueError) as exc:
                    raise UsageError(f"{path}: the audited trace cannot be read ({exc})"
                                     ) from None
            out.append(AuditedEpisode.model_construct(  # from a validated label
                episode=episode, trace=path, condition=label.condition,
                instance=label.instance, seed=label.seed,
                profile=_profile_of(label.agents, label.llm), llm=label.llm,
                realized=label.realized, utility=label.utility, digest=label.digest))
    return out


class AuditRead:
    """One audit folder read once for a whole repair (module docstring): each part on
    first use, then kept. The audit is not expected to change while it is repaired from;
    a repair resumed later reads it afresh."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.folder = AuditFolder(self.path)
        self._index: AuditIndex | None = None
        self._episodes: list[AuditedEpisode] | None = None
        self._auditor: AuditorUsed | None = None
        #: the distinct auditor blocks of the reports, once `reports()` has read them
        self._seen: dict[str, dict[str, Any]] | None = None

    def index(self) -> AuditIndex:
        """The audit's index (`AuditFolder.index`; a `UsageError` when damaged)."""
        if self._index is None:
            self._index = self.folder.index()
        return self._index

    def episodes(self) -> list[AuditedEpisode]:
        """Every trace behind the audit's bundles, with its header and label."""
        if self._episodes is None:
            self._episodes = _episodes(*self.folder.grader_index())
        return self._episodes

    def reports(self, visit: Callable[[AuditEntry, Report], None] | None = None,
                only: Collection[str] | None = None) -> None:
        """Read every report of the index once (those of the episodes `only` names, when
        given: a repair reads its own world's), in the index's order, handing each
        readable one to `visit` (an unreadable one is passed over); their auditor blocks
        are kept for `auditor()`, so choosing the finding and naming the auditor read
        each report once between them, and the auditor named is the one of the reports
        read."""
        seen: dict[str, dict[str, Any]] = {}
        for entry in self.index().entries:
            if only is not None and entry.episode not in only:
                continue
            try:
                report = self.folder.report(entry.episode)
            except AuditFolderError:
                continue
            key = _auditor_key(report)
            seen.setdefault(json.dumps(key, sort_keys=True), key)
            if visit is not None:
                visit(entry, report)
        if self._seen is None:
            self._seen = seen

    def auditor(self) -> AuditorUsed:
        """The one auditor the audit's reports name (`auditor_of`)."""
        if self._auditor is None:
            if self._seen is None:
                self.reports()
            assert self._seen is not None
            self._auditor = _auditor_used(self.path, self.index(), self._seen)
        return self._auditor
