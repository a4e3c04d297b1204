"""The repair loop (EAIR §4 stages 2–4, Appendix D.1): plan -> candidate -> review -> retest.

`repair(world, audit_dir, out, agent, reviewer)` takes the first supported
finding with a repair plan of an audit (or the one named `EPISODE:FINDING`),
and runs rounds:

1. the Repair Agent proposes a whole candidate `.eair` (`RepairAgent.propose`);
2. **guarded apply** (`apply.py`): the candidate is written into a copy of the
   world folder, formatted and compiled; on diagnostics it is not applied and
   the located diagnostics plus the would-be text go back to the agent
   (`Feedback(stage="compile")`), at most `compile_tries` times;
3. **ScopeOK** (`scope.py`): nothing protected touched, every changed
   declaration attributed to a plan requirement; otherwise feedback `scope`;
4. **ReviewOK**: the Reviewer's four-dimension review; a review whose verdict
   contradicts its dimensions (`Review.contradictions()`) is refused and
   recorded; a rejection goes back with its required changes (`review`);
5. **retest** of an approved candidate (`retest.py`): AuditPass, the target
   outcome with its Wilson interval, Retain; a failed retest goes back to the
   agent (`retest`) while rounds remain.

A round runs `ROUND_STAGES`, the checker's `PASSES` shape used a second time:
`propose`, `apply_guarded`, `check_in_scope`, `review`, `retest_candidate`, each a
function `(RoundContext) -> RoundOutcome | None` that reads what the stages before
it set in the context; the first to return an outcome ends the round (the retest
always does). A round is one compiled candidate; at most `max_rounds` (default 4).
Accepted exactly when ScopeOK ∧ ReviewOK ∧ AuditPass ∧ Retain ≥ 0.95.

Everything is kept in `OUT/`, read and written through `folder.RepairFolder`:
`plan.json`, `rounds/NN/` (the agent's text, the formatted candidate and its
world folder, attribution, diagnostics, `diff.json`, `scope.json`,
`review.json`, `feedback.json`, `outcome.json`), `retest/NN/`,
`acceptance.json`, the accepted world folder `world/` (its main file
`world/<main>.eair` beside its data), and `review.html`. Every write is
atomic, and a round is complete once its
`outcome.json` exists: running the same repair again continues after the last
completed round (an agent's answer already on disk is not asked again, a
retest resumes its studies), and a finished repair is only re-rendered.

Cassettes. `llm.record` (a folder: `eairc repair --record` gives
`OUT/cassettes`) records every LLM exchange of the repair, one cassette per
consumer and round, so no consumer truncates another's and a resumed repair
never truncates what a finished round recorded:

    cassettes/round-NN/agent.jsonl         the LLM Repair Agent's (when it was asked)
    cassettes/round-NN/reviewer.jsonl      the LLM Reviewer's
    cassettes/round-NN/retest/before/      the retest's W study (<model>.jsonl)
    cassettes/round-NN/retest/after/       its W′ study
    cassettes/round-NN/retest/audit.jsonl  the retest's LLM auditor

`llm.replay` (such a folder, from an earlier repair) answers every request of
every consumer from it, with no network and no litellm; a request it does not
hold stops the repair with the located `CassetteMiss` message (`UsageError`),
never recorded as a failed round. An agent or reviewer takes its round's
cassette through `use_cassette(record=..., replay=...)` (`Taped`: the LLM roles
of `llm.py`); the offline ones make no model call and need none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from eairdsl.audit.contract import Finding, Report
from eairdsl.audit.folder import AuditEntry
from eairdsl.diff import FileChange
from eairdsl.errors import UsageError
from eairdsl.ir import World
from eairdsl.repair.apply import Applied, apply_candidate
from eairdsl.repair.audited import AuditRead
from eairdsl.repair.folder import (
    ACCEPTANCE,
    AGENT_TAPE,
    CASSETTES,
    LOOP,
    OUTCOME,
    PLAN,
    RETEST_TAPES,
    REVIEWER_TAPE,
    RepairFolder,
    RoundFolder,
    round_tapes,
)
from eairdsl.repair.model import (
    DIMENSIONS,
    Acceptance,
    Candidate,
    Feedback,
    RepairAgent,
    RepairError,
    RepairRequest,
    RetestResult,
    Review,
    Reviewer,
    ReviewRequest,
    RoundOutcome,
    Selected,
    Stage,
    Target,
)
from eairdsl.repair.retest import FindingKey, key_of, matches, retest, target_of
from eairdsl.repair.scope import ScopeResult, check_scope

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["LOOP", "PLAN", "ACCEPTANCE", "OUTCOME", "CASSETTES", "Selected", "Acceptance",
           "RoundOutcome", "Stage", "Taped", "RepairSetup", "RoundContext", "RoundStage",
           "ROUND_STAGES", "select_finding", "repair", "run_round"]


@runtime_checkable
class Taped(Protocol):
    """A Repair Agent or Reviewer whose model exchanges go through a cassette."""

    def use_cassette(self, record: Path | None = None,
                     replay: Path | None = None) -> LLMSettings:
        """Record the next exchanges to `record` or answer them from `replay`; the settings
        in use (`replay_error()` says whether the replay missed)."""
        ...


def _round_tapes(llm: LLMSettings | None, n: int) -> tuple[Path | None, Path | None]:
    """Round `n`'s cassette folders inside `llm.record` / `llm.replay`."""
    return (round_tapes(llm.record if llm else None, n),
            round_tapes(llm.replay if llm else None, n))


def _tape(who: object, llm: LLMSettings | None, n: int, name: str) -> LLMSettings | None:
    """Point `who` (an agent or reviewer) at round `n`'s cassette `name`, when the repair
    records or replays and `who` talks to a model; the settings it then uses."""
    record, replay = _round_tapes(llm, n)
    if (record is None and replay is None) or not isinstance(who, Taped):
        return None
    from eairdsl.agents.cassette import CassetteError

    try:
        return who.use_cassette(record=record / name if record else None,
                                replay=replay / name if replay else None)
    except CassetteError as exc:
        raise UsageError(f"round {n}: {exc}") from None


def _missed(used: LLMSettings | None) -> None:
    """A replay that asked what its cassette does not hold stops the repair (UsageError)
    instead of being recorded as the round's failure."""
    miss = used.replay_error() if used is not None else None
    if miss:
        raise UsageError(miss)


def select_finding(audit_dir: Path, world: World, finding: str | None = None, *,
                   audit: AuditRead | None = None) -> Selected:
    """`--finding EPISODE:FINDING_ID`, or the first supported finding with a repair plan of
    this world's audited episodes (reports in episode-id order, findings in report order).

    A lead is never chosen on its own, but the user may name one (`EP:lead-N`): the
    offline auditor's support is conservative, and a lead the user has read and judged
    real is a fair seed. The selection keeps the lead's status, so the review page says
    the repair started from a lead (`repair/html.py`). `audit` is the audit as the repair
    read it (`AuditRead`), else it is read here."""
    audit_dir = Path(audit_dir)
    read = audit if audit is not None else AuditRead(audit_dir)
    folder = read.folder
    index = read.index()
    if not index.entries:
        raise UsageError(f"{audit_dir} is not an audit folder (no {folder.index_path} "
                         "entries); run `eairc audit … -o` first")
    traces = read.episodes()
    mine = {a.episode for a in traces if a.digest == world.digest}
    conditions_of: dict[str, set[str]] = {}
    for a in traces:
        conditions_of.setdefault(a.episode, set()).add(a.condition)
    want_episode, _, want_id = (finding or "").partition(":")
    if finding is not None and not want_id:
        raise UsageError(f"--finding {finding!r}: use EPISODE:FINDING_ID (e.g. "
                         "ep-0123…:finding-1, or a lead: ep-0123…:lead-1)")
    # one pass over the reports (shared with naming the auditor): the first candidate,
    # and what every valid report of this world found, to know where the target was seen
    chosen: Selected | None = None
    found: dict[str, list[FindingKey]] = {}

    def visit(entry: AuditEntry, report: Report) -> None:
        nonlocal chosen
        if entry.status != "valid" or entry.episode not in mine:
            return
        found[entry.episode] = [key_of(f) for f in [*report.findings, *report.leads]]
        if chosen is not None or (finding is not None and entry.episode != want_episode):
            return
        f = next((f for f in _candidates(report, named=finding is not None)
                  if f.repair_plan and (finding is None or f.id == want_id)), None)
        if f is not None:
            chosen = Selected(episode=entry.episode, finding=f, plan=f.repair_plan,
                              report=folder.report_path(entry.episode)
                              .relative_to(folder.path).as_posix())

    read.reports(visit, only=mine)
    if chosen is None:
        if finding is not None:
            raise UsageError(f"--finding {finding}: no supported finding or lead with a repair "
                             f"plan of that id in a valid report of this world in {audit_dir}")
        raise UsageError(f"{audit_dir}: no valid report of {world.meta.name} (digest "
                         f"{world.digest[:12]}…) has a supported finding with a repair plan")
    target = target_of(chosen.finding)
    conds: set[str] = set()
    for episode, keys in found.items():
        if any(matches(k, target) for k in keys):
            conds |= conditions_of.get(episode, set())
    return chosen.model_copy(update={"conditions": sorted(conds)})


def _candidates(report: Report, named: bool) -> list[Finding]:
    """What a repair may start from: supported findings, and the leads when the user names
    one (a lead is never picked by default)."""
    return [f for f in report.findings if f.status == "supported"] \
        + ([f for f in report.leads if f.status == "lead"] if named else [])


Progress = Callable[[str], None]


@dataclass(frozen=True)
class RepairSetup:
    """What every round of one repair reads, fixed before the first: the world, the
    audit, the chosen finding, the agent and reviewer, the retest's options and where it
    is all kept."""

    world_file: Path
    audit_dir: Path
    #: the audit, each part read once for the whole repair (not once per round)
    audit: AuditRead
    folder: RepairFolder
    original: World
    #: the original main file's text and the world's other own text files (for the agent)
    source: str
    files: dict[str, str]
    selected: Selected
    protected: list[str]
    #: the world's own files a candidate's folder copy holds (`apply_candidate(only=)`)
    only: list[str]
    target: Target
    agent: RepairAgent
    reviewer: Reviewer
    seeds: int
    validate_episodes: int | None
    llm: LLMSettings | None
    say: Progress


@dataclass
class RoundContext:
    """One round in progress: what it was given (`setup`, the feedback of the rounds before
    and the latest candidate text), and what its stages have established so far — each
    stage reads what the ones before it set, as the checker's passes do."""

    setup: RepairSetup
    n: int
    folder: RoundFolder
    feedback: list[Feedback]
    previous: str | None
    #: set by `propose`
    candidate: Candidate | None = None
    #: set by `apply_guarded` (a compiled candidate only)
    applied: Applied | None = None
    world: World | None = None
    #: set by `check_in_scope`
    diff: dict[str, Any] = field(default_factory=dict)
    scope: ScopeResult | None = None

    def proposed(self) -> Candidate:
        """The round's candidate (a stage after `propose`)."""
        assert self.candidate is not None, "a stage ran before propose"
        return self.candidate

    def compiled(self) -> tuple[Applied, World]:
        """The applied candidate and its world (a stage after `apply_guarded`)."""
        assert self.applied is not None and self.world is not None, \
            "a stage ran before apply_guarded"
        return self.applied, self.world

    def passed(self) -> dict[str, Any]:
        """The fields of an outcome past the guarded apply: round, compiled, digest."""
        return {"round": self.n, "compiled": True, "digest": self.compiled()[1].digest}

    def refuse(self, stage: Literal["compile", "scope", "review", "retest"],
               problems: list[str], *, told: list[str] | None = None,
               required_changes: list[str] | None = None, **fields: Any) -> RoundOutcome:
        """The round ends at `stage` with `problems`, which go back to the agent as that
        stage's feedback (`feedback.json`; `told` when it says more than `problems`)."""
        fb = Feedback(round=self.n, stage=stage, problems=problems if told is None else told,
                      required_changes=required_changes or [])
        self.folder.write_feedback(fb)
        base = self.passed() if stage != "compile" else {"round": self.n}
        return RoundOutcome(**base, stage=stage, ok=False, problems=problems, feedback=fb,
                            **fields)


def propose(ctx: RoundContext) -> RoundOutcome | None:
    """The Repair Agent's candidate: read back when the agent answered before an
    interruption (not asked again), else asked with the feedback so far."""
    s, rf, n = ctx.setup, ctx.folder, ctx.n
    if rf.has_candidate():
        ctx.candidate = rf.read_candidate()
        return None
    request = RepairRequest(world_file=s.world_file.name, source=s.source, files=s.files,
                            finding=s.selected.finding, plan=s.selected.plan,
                            protected=s.protected, round=n, feedback=list(ctx.feedback),
                            previous=ctx.previous)
    rf.write_request(request)
    used = _tape(s.agent, s.llm, n, AGENT_TAPE)
    try:
        candidate = s.agent.propose(request)
    except RepairError as exc:
        _missed(used)
        return RoundOutcome(round=n, stage="propose", ok=False,
                            problems=[f"the Repair Agent produced no candidate: {exc}"])
    unreadable = _not_text(candidate)
    if unreadable is not None:  # it cannot even be recorded: refused here, not written
        return RoundOutcome(round=n, stage="propose", ok=False,
                            problems=[f"the Repair Agent's candidate is refused: {unreadable}"])
    rf.write_candidate(candidate)
    ctx.candidate = candidate
    return None


def _not_text(candidate: Candidate) -> str | None:
    """Why a candidate cannot be recorded as the round's JSON (a lone surrogate anywhere
    in it is not UTF-8), None when it can: an agent's answer is untrusted input."""
    try:
        candidate.model_dump_json()
    except ValueError as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"it is not UTF-8 text ({why.removeprefix('Error serializing to JSON: ')})"
    return None


def apply_guarded(ctx: RoundContext) -> RoundOutcome | None:
    """The guarded apply: the candidate written into a copy of the world folder, formatted
    and compiled; with diagnostics it is not applied and they go back to the agent."""
    s = ctx.setup
    applied = apply_candidate(s.world_file, ctx.proposed(), ctx.folder.world, only=s.only)
    ctx.folder.write_applied(applied.text, applied.diagnostics)
    if not applied.ok or applied.world is None:
        return ctx.refuse("compile", applied.problems)
    ctx.applied, ctx.world = applied, applied.world
    return None


def check_in_scope(ctx: RoundContext) -> RoundOutcome | None:
    """ScopeOK on the semantic diff of W and W′: nothing protected touched, every changed
    declaration attributed to a plan requirement."""
    from eairdsl.diff import diff_worlds

    s = ctx.setup
    applied, world = ctx.compiled()
    diff = diff_worlds(s.original, world)
    diff = diff.model_copy(update={"files": _with_unread(diff.files, applied.unread)})
    ctx.diff = diff.model_dump(mode="json")
    ctx.diff["violations"] = [c.model_dump(mode="json") for c in diff.violations]
    ctx.folder.write_diff(ctx.diff)
    ctx.scope = check_scope(diff, ctx.proposed().attribution, s.selected.plan)
    ctx.folder.write_scope(ctx.scope)
    if not ctx.scope.ok:
        return ctx.refuse("scope", ctx.scope.problems, scope_ok=False)
    return None


def _with_unread(files: list[FileChange], unread: list[str]) -> list[FileChange]:
    """The diff's files with those the candidate wrote that W′ does not read: `changed`
    where W read it (it was in the folder), `added` otherwise; `read` false, for ScopeOK
    to refuse."""
    if not unread:
        return files
    by_path = {f.path: f for f in files}
    for path in unread:
        was = by_path.get(path)
        by_path[path] = FileChange(path=path, change="changed" if was is not None else "added",
                                   read=False)
    return [by_path[p] for p in sorted(by_path)]


def review(ctx: RoundContext) -> RoundOutcome | None:
    """ReviewOK: the Reviewer's four dimensions and verdict. A review that contradicts
    itself is refused; a rejection goes back with its required changes; a reviewer that
    cannot answer ends the round without feedback (the loop then stops)."""
    s, n, candidate = ctx.setup, ctx.n, ctx.proposed()
    applied, world = ctx.compiled()
    assert ctx.scope is not None
    request = ReviewRequest(
        world_file=s.world_file.name, original=s.source, candidate=applied.text,
        files_changed=dict(candidate.files), finding=s.selected.finding,
        plan=s.selected.plan, diff=ctx.diff, attribution=candidate.attribution,
        rationale=candidate.rationale, round=n,
        original_dir=str(s.world_file.parent.resolve()),
        candidate_dir=str(ctx.folder.world.resolve())).with_worlds(s.original, world)
    s.say(f"round {n}: candidate compiled and in scope ({len(ctx.scope.changed)} "
          "declaration(s) changed); asking the Reviewer")
    used = _tape(s.reviewer, s.llm, n, REVIEWER_TAPE)
    try:
        verdict: Review = s.reviewer.review(request)
    except RepairError as exc:
        _missed(used)
        problem = f"the Reviewer produced no review: {exc}"
        ctx.folder.write_review_error(problem)
        return RoundOutcome(**ctx.passed(), stage="review", ok=False, scope_ok=True,
                            review_ok=None, problems=[problem])
    refused = verdict.contradictions()
    ctx.folder.write_review(verdict, refused)
    failed = [f"{d}: {verdict.dimension(d).reason}" for d in DIMENSIONS
              if not verdict.dimension(d).passed]
    if refused or verdict.verdict != "approve":
        problems = ([f"the review was refused: {r}" for r in refused] + failed) or \
            ["the reviewer rejected the candidate"]
        return ctx.refuse("review", problems, scope_ok=True, review_ok=False,
                          refused=refused,
                          required_changes=list(verdict.required_changes))
    return None


def retest_candidate(ctx: RoundContext) -> RoundOutcome | None:
    """The behavioural retest of the approved candidate (`retest.py`): AuditPass and
    Retain decide; a failed retest goes back to the agent. Always ends the round."""
    s, n = ctx.setup, ctx.n
    applied, world = ctx.compiled()
    s.say(f"round {n}: approved; retesting on a fresh cohort")
    rt = retest(s.original, world, applied.main, s.audit_dir, s.target,
                s.folder.retest(n).path, seeds=s.seeds,
                conditions=s.selected.conditions or None,
                validate_episodes=s.validate_episodes, llm=_retest_llm(s.llm, n),
                progress=s.say, audit=s.audit)
    problems = list(rt.audit_problems[:10])
    retain_failed = rt.retain_problem()
    if retain_failed is not None:
        problems.append(retain_failed)
    ok = rt.audit_pass and retain_failed is None
    if not ok:
        return ctx.refuse("retest", problems, told=problems or ["the retest did not pass"],
                          scope_ok=True, review_ok=True, audit_pass=rt.audit_pass,
                          retain=rt.retain)
    return RoundOutcome(**ctx.passed(), stage="accepted", ok=True, scope_ok=True,
                        review_ok=True, audit_pass=rt.audit_pass, retain=rt.retain,
                        problems=problems)


#: A round's stages in order, the checker's `PASSES` shape used a second time: each
#: reads what the ones before it set in the `RoundContext`, and the first to return an
#: outcome ends the round (`retest_candidate` always does).
RoundStage = Callable[[RoundContext], RoundOutcome | None]
ROUND_STAGES: tuple[RoundStage, ...] = (
    propose,
    apply_guarded,
    check_in_scope,
    review,
    retest_candidate,
)


def run_round(ctx: RoundContext, stages: tuple[RoundStage, ...] = ROUND_STAGES
              ) -> RoundOutcome:
    """One round: `stages` in order until one returns the round's outcome."""
    ctx.folder.make()
    for stage in stages:
        outcome = stage(ctx)
        if outcome is not None:
            return outcome
    raise AssertionError(f"round {ctx.n}: no stage decided (the last must)")


def _retest_llm(llm: LLMSettings | None, n: int) -> LLMSettings | None:
    """The retest's transport, recording to or replaying from `round-NN/retest` (its
    fields only are read: the retest makes its own settings objects)."""
    record, replay = _round_tapes(llm, n)
    if llm is None or (record is None and replay is None):
        return llm
    return llm.model_copy(update={"record": record / RETEST_TAPES if record else None,
                                  "replay": replay / RETEST_TAPES if replay else None})


def _world_files(world: World, main: str) -> dict[str, str]:
    """The world's own text files besides the main file (imports, cards), for the agent."""
    return {s.ref: "" for s in world.sources if not s.ref.startswith("stdlib/")
            and s.ref != main}


def _texts(folder: Path, refs: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel in sorted(refs):
        path = folder / rel
        if path.suffix in (".eair", ".j2", ".md") or (path.suffix == ".json"
                                                       and path.stat().st_size <= 8192):
            try:
                out[rel] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
    return out


def repair(world_file: Path, audit_dir: Path, out: Path, agent: RepairAgent,
           reviewer: Reviewer, *, finding: str | None = None, seeds: int = 20,
           max_rounds: int = 4, compile_tries: int = 3,
           validate_episodes: int | None = None, describe: dict[str, Any] | None = None,
           llm: LLMSettings | None = None, progress: Progress | None = None) -> Acceptance:
    """Run (or resume) the whole repair loop into `out`; return the acceptance decision.

    `seeds` fresh retest episodes per condition; `validate_episodes` bounds the
    self-test of an approved W′ (default: `eairc validate`'s). The retest reruns the
    audited episodes' agents or models and the audit's auditor (`retest.py`); `llm`
    gives their endpoint and transport limits (timeout, retries, connections)."""
    say = progress or (lambda _m: None)
    world_file, audit_dir = Path(world_file), Path(audit_dir)
    folder = RepairFolder(Path(out))
    _refuse_options(max_rounds, compile_tries, seeds, llm)
    original = _compile(world_file)
    loop_id = {"world": world_file.name, "digest": original.digest,
               "audit": str(audit_dir.resolve()), "finding": finding, "seeds": seeds,
               "max_rounds": max_rounds, "compile_tries": compile_tries,
               "agents": describe or {}}
    audit = AuditRead(audit_dir)
    selected = _open(folder, loop_id, audit, original, finding)
    say(f"finding {selected.episode}:{selected.finding.id} ({selected.finding.risk}, "
        f"{selected.finding.boundary.kind}); plan: {selected.plan.objective}")
    main = world_file.name
    refs = _world_files(original, main)
    source = world_file.read_text(encoding="utf-8")
    folder.write_original(source)
    setup = RepairSetup(
        world_file=world_file, audit_dir=audit_dir, audit=audit, folder=folder,
        original=original,
        source=source, files=_texts(world_file.parent, refs), selected=selected,
        protected=sorted(_protected(original)), only=sorted(refs),
        target=target_of(selected.finding), agent=agent, reviewer=reviewer, seeds=seeds,
        validate_episodes=validate_episodes, llm=llm, say=say)
    rounds = _Rounds()
    while rounds.go_on(max_rounds, compile_tries):
        rounds.record(setup, _next_round(setup, rounds))
    acc = rounds.decide(setup)
    if rounds.accepted is not None:
        folder.install(rounds.accepted.round, main)
    folder.write_acceptance(acc)
    from eairdsl.repair.html import write_review

    write_review(folder.path, audit_dir)
    return acc


def _refuse_options(max_rounds: int, compile_tries: int, seeds: int,
                    llm: LLMSettings | None) -> None:
    """Options no repair can run with, refused before anything is read or written."""
    if max_rounds < 1 or compile_tries < 1 or seeds < 1:
        raise UsageError("--max-rounds, --seeds and the compile tries must be at least 1")
    if llm is not None and llm.record is not None and llm.replay is not None:
        raise UsageError("--record and --replay exclude each other")
    if llm is not None and llm.replay is not None and not Path(llm.replay).is_dir():
        # a mistyped --replay was never opened by an offline repair, which then reported
        # success as if it had replayed; an LLM role met it only as a cassette miss
        raise UsageError(f"--replay {llm.replay}: no such folder (give an earlier repair "
                         "folder recorded with --record, or its cassettes/ folder)")


def _compile(world_file: Path) -> World:
    """The original world W (a `UsageError` when it does not compile)."""
    from eairdsl.compiler import compile_world  # tool modules: loaded on first use

    result = compile_world(world_file)
    if not result.ok or result.world is None:
        first = result.diagnostics.errors
        why = f": {first[0].message}" if first else ""
        raise UsageError(f"{world_file} does not compile{why}; run `eairc check "
                         f"{world_file}`")
    return result.world


def _open(folder: RepairFolder, loop_id: dict[str, Any], audit: AuditRead, original: World,
          finding: str | None) -> Selected:
    """Open `folder` for this repair: refuse another repair's folder, read the plan of a
    resumed one or select the finding of a new one, then record both."""
    previous = folder.read_loop_raw()
    if previous is not None and previous != loop_id:
        raise UsageError(f"{folder.path} holds another repair ({folder.loop_file()} differs: "
                         f"{_difference(previous, loop_id)}); rerun it as it was or use "
                         "another -o")
    if folder.is_file():
        raise UsageError(f"{folder.path} is a file, not a repair folder: use another -o")
    had_plan = folder.has_plan()
    if had_plan:
        try:
            selected = folder.read_plan()
        except (OSError, ValueError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"{folder.plan_file()}: not a repair plan ({why}); remove "
                             f"{folder.path} to repair afresh, or use another -o") from None
    else:
        # the finding is chosen, and the audit checked, before OUT records this repair:
        # a mistyped --finding or an audit without one is refused without a loop.json
        # that would then refuse the corrected command as "another repair"
        selected = select_finding(audit.path, original, finding, audit=audit)
        _retestable(audit)  # refused now, before any agent is asked
    folder.create()
    folder.write_loop(loop_id)
    if not had_plan:
        folder.write_plan(selected)
    return selected


def _next_round(setup: RepairSetup, rounds: _Rounds) -> RoundOutcome:
    """The next round's outcome: read back when it finished before, else run and
    recorded (`outcome.json` last: the round is complete once it exists)."""
    n = len(rounds.history) + 1
    rf = setup.folder.round(n)
    if rf.is_done():
        return rf.read_outcome()
    setup.say(f"round {n}: asking the Repair Agent")
    outcome = run_round(RoundContext(setup=setup, n=n, folder=rf,
                                     feedback=rounds.feedback, previous=rounds.last_text))
    rf.write_outcome(outcome)
    return outcome


@dataclass
class _Rounds:
    """The rounds so far and what they decided: the loop's state between rounds."""

    feedback: list[Feedback] = field(default_factory=list)
    history: list[RoundOutcome] = field(default_factory=list)
    last_text: str | None = None
    accepted: RoundOutcome | None = None
    accepted_retest: RetestResult | None = None
    last_retest: tuple[int, RetestResult] | None = None
    #: rounds with a compiled candidate, and tries without one
    rounds: int = 0
    failures: int = 0
    stop: str | None = None

    def go_on(self, max_rounds: int, compile_tries: int) -> bool:
        """Whether another round runs; when the budget is spent, why not (`stop`)."""
        if self.accepted is not None or self.stop is not None:
            return False
        if self.rounds >= max_rounds:
            self.stop = f"no candidate accepted in {max_rounds} round(s)"
        elif self.failures >= compile_tries:
            last = self.history[-1] if self.history else None
            self.stop = (f"{self.failures} tries without a compiled candidate; last: "
                         f"{last.problems[0] if last and last.problems else 'no candidate'}")
        return self.stop is None

    def record(self, setup: RepairSetup, outcome: RoundOutcome) -> None:
        """Take a round's outcome: report it, count it, keep its retest and feedback."""
        n = outcome.round
        self.history.append(outcome)
        if outcome.stage == "accepted":
            setup.say(f"round {n}: accepted")
        else:
            setup.say(f"round {n}: {outcome.stage} {'passed' if outcome.ok else 'failed'}"
                      + (f" ({outcome.problems[0]})" if outcome.problems and not outcome.ok
                         else ""))
        text = setup.folder.round(n).read_candidate_text()
        if text is not None:
            self.last_text = text
        if outcome.compiled:
            self.rounds += 1
        else:
            self.failures += 1
        if outcome.stage in {"retest", "accepted"}:
            done = setup.folder.retest(n).read_result()
            self.last_retest = (n, done)
            if outcome.ok:
                self.accepted, self.accepted_retest = outcome, done
                return
        if outcome.stage == "review" and not outcome.ok and outcome.feedback is None:
            self.stop = outcome.problems[0] if outcome.problems else "the reviewer failed"
            return
        if outcome.feedback is not None:
            self.feedback.append(outcome.feedback)

    def decide(self, setup: RepairSetup) -> Acceptance:
        """The decision: on the accepted round, else on the last that compiled."""
        accepted = self.accepted
        decided = accepted or next((h for h in reversed(self.history) if h.compiled), None)
        last = self.last_retest
        rt = self.accepted_retest or (last[1] if last and decided
                                      and last[0] == decided.round else None)
        selected = setup.selected
        return Acceptance(
            accepted=accepted is not None,
            scope_ok=decided.scope_ok if decided else None,
            review_ok=decided.review_ok if decided else None,
            audit_pass=rt.audit_pass if rt else None,
            retain=rt.retain if rt else None,
            rounds=self.rounds,
            target=rt.target_after.model_dump() if rt else None,
            target_before=rt.target_before.model_dump() if rt else None,
            realized_after=rt.target_after.k if rt else None,
            other_findings=rt.other_findings if rt else None,
            round=decided.round if decided else None,
            reason=("ScopeOK, ReviewOK, AuditPass and Retain >= 0.95" if accepted
                    else self.stop or "not accepted"),
            finding=f"{selected.episode}:{selected.finding.id}",
            retest=RepairFolder.retest_ref(decided.round) if rt and decided else None,
            world_digest=setup.original.digest,
            candidate_digest=decided.digest if decided else None,
            history=[{"round": h.round, "stage": h.stage, "ok": h.ok,
                      "problems": h.problems[:6], "refused": h.refused}
                     for h in self.history])


def _retestable(audit: AuditRead) -> None:
    """Refuse an audit whose episodes or auditor the retest cannot rerun as they ran."""
    from eairdsl.repair.audited import cohort_of

    cohort_of(audit.episodes())
    audit.auditor()


def _difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys) or "unreadable"


def _protected(world: World) -> list[str]:
    from eairdsl.reads import declarations

    names = set(world.protected)
    out = [f"{kind} {name}" for (kind, name) in declarations(world)
           if name in names or kind in names]
    return sorted(set(out))
