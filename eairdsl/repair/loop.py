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

A round is one compiled candidate; at most `max_rounds` (default 4).
Accepted exactly when ScopeOK ∧ ReviewOK ∧ AuditPass ∧ Retain ≥ 0.95.

Everything is kept in `OUT/`:
`plan.json`, `rounds/NN/` (the agent's text, the formatted candidate and its
world folder, attribution, diagnostics, `diff.json`, `scope.json`,
`review.json`, `feedback.json`, `outcome.json`), `retest/NN/`,
`acceptance.json`, the accepted `world.eair` with its folder `world/`, and
`review.html`. Every write is atomic, and a round is complete once its
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

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from eairdsl.audit.contract import Finding, RepairPlan
from eairdsl.audit.runner import REPORTS, read_index
from eairdsl.errors import UsageError
from eairdsl.ir import World
from eairdsl.repair.apply import apply_candidate, write_atomic
from eairdsl.repair.model import (
    DIMENSIONS,
    Candidate,
    Feedback,
    RepairAgent,
    RepairError,
    RepairRequest,
    Review,
    Reviewer,
    ReviewRequest,
)
from eairdsl.repair.retest import RETAIN, RetestResult, matches, retest, target_of
from eairdsl.repair.scope import check_scope

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = ["LOOP", "PLAN", "ACCEPTANCE", "CASSETTES", "Selected", "Acceptance",
           "RoundOutcome", "Taped", "select_finding", "repair"]

LOOP = "loop.json"
PLAN = "plan.json"
ACCEPTANCE = "acceptance.json"
#: a round's last file: the round is complete once it exists
OUTCOME = "outcome.json"
#: where `eairc repair --record` keeps the repair's cassettes (module docstring)
CASSETTES = "cassettes"


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
    name = f"round-{n:02d}"
    return (Path(llm.record) / name if llm and llm.record else None,
            Path(llm.replay) / name if llm and llm.replay else None)


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


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class Selected(BaseModel):
    """The finding a repair starts from, and where it came from (grader-side)."""

    episode: str
    finding: Finding
    plan: RepairPlan
    report: str
    #: the conditions of the audited episodes with a supported finding of the same property
    conditions: list[str] = Field(default_factory=list)


def select_finding(audit_dir: Path, world: World, finding: str | None = None) -> Selected:
    """`--finding EPISODE:FINDING_ID`, or the first supported finding with a repair plan of
    this world's audited episodes (reports in episode-id order, findings in report order)."""
    from eairdsl.repair.retest import audited_episodes

    audit_dir = Path(audit_dir)
    index = read_index(audit_dir)
    if not index.entries:
        raise UsageError(f"{audit_dir} is not an audit folder (no {audit_dir / 'index.json'} "
                         "entries); run `eairc audit … -o` first")
    traces = audited_episodes(audit_dir)
    mine = {a.episode for a in traces
            if _digest_of(a.trace) == world.digest}
    conditions_of: dict[str, set[str]] = {}
    for a in traces:
        conditions_of.setdefault(a.episode, set()).add(a.condition)
    want_episode, _, want_id = (finding or "").partition(":")
    if finding is not None and not want_id:
        raise UsageError(f"--finding {finding!r}: use EPISODE:FINDING_ID (e.g. "
                         "ep-0123…:finding-1)")
    chosen: Selected | None = None
    reports: dict[str, dict[str, Any]] = {}
    for entry in index.entries:
        if entry.status != "valid" or entry.episode not in mine:
            continue
        data = _read(audit_dir / REPORTS / f"{entry.episode}.json")
        if not isinstance(data, dict):
            continue
        reports[entry.episode] = data
        if chosen is not None or (finding is not None and entry.episode != want_episode):
            continue
        for f in data.get("findings") or []:
            if not isinstance(f, dict) or f.get("status") != "supported" \
                    or not f.get("repair_plan"):
                continue
            if finding is not None and f.get("id") != want_id:
                continue
            try:
                parsed = Finding.model_validate(f)
            except ValueError:
                continue
            assert parsed.repair_plan is not None
            chosen = Selected(episode=entry.episode, finding=parsed, plan=parsed.repair_plan,
                              report=str(Path(REPORTS) / f"{entry.episode}.json"))
            break
    if chosen is None:
        if finding is not None:
            raise UsageError(f"--finding {finding}: no supported finding with a repair plan of "
                             f"that id in a valid report of this world in {audit_dir}")
        raise UsageError(f"{audit_dir}: no valid report of {world.meta.name} (digest "
                         f"{world.digest[:12]}…) has a supported finding with a repair plan")
    target = target_of(chosen.finding)
    conds: set[str] = set()
    for episode, data in reports.items():
        if any(isinstance(f, dict) and matches(f, target) for f in data.get("findings") or []):
            conds |= conditions_of.get(episode, set())
    return chosen.model_copy(update={"conditions": sorted(conds)})


def _digest_of(trace: str) -> str | None:
    try:
        with open(trace, encoding="utf-8") as fh:
            head = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    return head.get("digest") if isinstance(head, dict) else None


Stage = Literal["propose", "compile", "scope", "review", "retest", "accepted"]


class RoundOutcome(BaseModel):
    """How a round ended: the stage it reached and whether it passed there."""

    round: int
    stage: Stage
    ok: bool
    compiled: bool = False
    scope_ok: bool | None = None
    review_ok: bool | None = None
    #: a review refused because it contradicts itself
    refused: list[str] = Field(default_factory=list)
    audit_pass: bool | None = None
    retain: float | None = None
    problems: list[str] = Field(default_factory=list)
    #: the candidate world's digest (when it compiled)
    digest: str | None = None
    feedback: Feedback | None = None


class Acceptance(BaseModel):
    accepted: bool
    scope_ok: bool | None
    review_ok: bool | None
    audit_pass: bool | None
    retain: float | None
    rounds: int
    target: dict[str, Any] | None
    #: the round decided on (the accepted one, or the last that compiled)
    round: int | None = None
    reason: str = ""
    finding: str = ""
    retest: str | None = None
    target_before: dict[str, Any] | None = None
    realized_after: int | None = None
    other_findings: int | None = None
    world_digest: str = ""
    candidate_digest: str | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)


Progress = Callable[[str], None]


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
    from eairdsl.compiler import compile_world  # tool modules: loaded on first use

    say = progress or (lambda _m: None)
    world_file, audit_dir, out = Path(world_file), Path(audit_dir), Path(out)
    if max_rounds < 1 or compile_tries < 1 or seeds < 1:
        raise UsageError("--max-rounds, --seeds and the compile tries must be at least 1")
    if llm is not None and llm.record is not None and llm.replay is not None:
        raise UsageError("--record and --replay exclude each other")
    if llm is not None and llm.replay is not None and not Path(llm.replay).is_dir():
        # a mistyped --replay was never opened by an offline repair, which then reported
        # success as if it had replayed; an LLM role met it only as a cassette miss
        raise UsageError(f"--replay {llm.replay}: no such folder (give an earlier repair "
                         "folder recorded with --record, or its cassettes/ folder)")
    result = compile_world(world_file)
    if not result.ok or result.world is None:
        first = result.diagnostics.errors
        why = f": {first[0].message}" if first else ""
        raise UsageError(f"{world_file} does not compile{why}; run `eairc check "
                         f"{world_file}`")
    original = result.world
    loop_id = {"world": world_file.name, "digest": original.digest,
               "audit": str(audit_dir.resolve()), "finding": finding, "seeds": seeds,
               "max_rounds": max_rounds, "compile_tries": compile_tries,
               "agents": describe or {}}
    previous = _read(out / LOOP)
    if previous is not None and previous != loop_id:
        raise UsageError(f"{out} holds another repair ({out / LOOP} differs: "
                         f"{_difference(previous, loop_id)}); rerun it as it was or use "
                         "another -o")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a repair folder: use another -o")
    plan_path = out / PLAN
    if plan_path.is_file():
        try:
            selected = Selected.model_validate_json(plan_path.read_bytes())
        except (OSError, ValueError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"{plan_path}: not a repair plan ({why}); remove {out} to "
                             "repair afresh, or use another -o") from None
    else:
        # the finding is chosen, and the audit checked, before OUT records this repair:
        # a mistyped --finding or an audit without one is refused without a loop.json
        # that would then refuse the corrected command as "another repair"
        selected = select_finding(audit_dir, original, finding)
        _retestable(audit_dir)  # refused now, before any agent is asked
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the repair folder {out}: {exc.strerror or exc}") \
            from None
    write_atomic(out / LOOP, _dump(loop_id))
    if not plan_path.is_file():
        write_atomic(plan_path, _dump(selected.model_dump(mode="json")))
    say(f"finding {selected.episode}:{selected.finding.id} ({selected.finding.risk}, "
        f"{selected.finding.boundary.kind}); plan: {selected.plan.objective}")
    main = world_file.name
    refs = _world_files(original, main)
    only = sorted(refs)
    source = world_file.read_text(encoding="utf-8")
    write_atomic(out / "original.eair", source)
    files = _texts(world_file.parent, refs)
    protected = sorted(_protected(original))
    target = target_of(selected.finding)
    feedback: list[Feedback] = []
    history: list[RoundOutcome] = []
    last_text: str | None = None
    accepted: RoundOutcome | None = None
    accepted_retest: RetestResult | None = None
    last_retest: tuple[int, RetestResult] | None = None
    failures = rounds = 0
    n = 0
    stop: str | None = None
    while accepted is None and stop is None:
        if rounds >= max_rounds:
            stop = f"no candidate accepted in {max_rounds} round(s)"
            break
        if failures >= compile_tries:
            last = history[-1] if history else None
            stop = (f"{failures} tries without a compiled candidate; last: "
                    f"{last.problems[0] if last and last.problems else 'no candidate'}")
            break
        n += 1
        rdir = out / "rounds" / f"{n:02d}"
        done = rdir / OUTCOME
        if done.is_file():
            outcome = RoundOutcome.model_validate_json(done.read_bytes())
        else:
            say(f"round {n}: asking the Repair Agent")
            outcome = _round(n, rdir, world_file, audit_dir, out, original, source, files,
                             selected, protected, feedback, last_text, agent, reviewer, only,
                             target, seeds, validate_episodes, llm, say)
            write_atomic(done, _dump(outcome.model_dump(mode="json")))
        history.append(outcome)
        if outcome.stage == "accepted":
            say(f"round {n}: accepted")
        else:
            say(f"round {n}: {outcome.stage} {'passed' if outcome.ok else 'failed'}"
                + (f" ({outcome.problems[0]})" if outcome.problems and not outcome.ok else ""))
        text_path = rdir / "candidate.eair"
        if text_path.is_file():
            last_text = text_path.read_text(encoding="utf-8")
        if outcome.compiled:
            rounds += 1
        else:
            failures += 1
        if outcome.stage in {"retest", "accepted"}:
            done_rt = RetestResult.model_validate_json(
                (out / "retest" / f"{n:02d}" / "result.json").read_bytes())
            last_retest = (n, done_rt)
            if outcome.ok:
                accepted, accepted_retest = outcome, done_rt
                break
        if outcome.stage == "review" and not outcome.ok and outcome.feedback is None:
            stop = outcome.problems[0] if outcome.problems else "the reviewer failed"
            break
        if outcome.feedback is not None:
            feedback.append(outcome.feedback)
    decided = accepted or next((h for h in reversed(history) if h.compiled), None)
    rt = accepted_retest or (last_retest[1] if last_retest and decided
                             and last_retest[0] == decided.round else None)
    acc = Acceptance(
        accepted=accepted is not None,
        scope_ok=decided.scope_ok if decided else None,
        review_ok=decided.review_ok if decided else None,
        audit_pass=rt.audit_pass if rt else None,
        retain=rt.retain if rt else None,
        rounds=rounds,
        target=rt.target_after.model_dump() if rt else None,
        target_before=rt.target_before.model_dump() if rt else None,
        realized_after=rt.target_after.k if rt else None,
        other_findings=rt.other_findings if rt else None,
        round=decided.round if decided else None,
        reason=("ScopeOK, ReviewOK, AuditPass and Retain >= 0.95" if accepted
                else stop or "not accepted"),
        finding=f"{selected.episode}:{selected.finding.id}",
        retest=f"retest/{decided.round:02d}" if rt and decided else None,
        world_digest=original.digest,
        candidate_digest=decided.digest if decided else None,
        history=[{"round": h.round, "stage": h.stage, "ok": h.ok,
                  "problems": h.problems[:6], "refused": h.refused} for h in history])
    if accepted is not None:
        _install(out, accepted.round, main)
    write_atomic(out / ACCEPTANCE, _dump(acc.model_dump(mode="json")))
    from eairdsl.repair.html import write_review

    write_review(out, audit_dir)
    return acc


def _retestable(audit_dir: Path) -> None:
    """Refuse an audit whose episodes or auditor the retest cannot rerun as they ran."""
    from eairdsl.repair.retest import audited_episodes, auditor_of, cohort_of

    cohort_of(audited_episodes(audit_dir))
    auditor_of(audit_dir)


def _difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys) or "unreadable"


def _protected(world: World) -> list[str]:
    from eairdsl.reads import declarations

    names = set(world.protected)
    out = [f"{kind} {name}" for (kind, name) in declarations(world)
           if name in names or kind in names]
    return sorted(set(out))


def _install(out: Path, n: int, main: str) -> None:
    """The accepted round's world: `OUT/world/` (its folder) and `OUT/world.eair`."""
    folder = out / "rounds" / f"{n:02d}" / "world"
    dest = out / "world"
    tmp = out / ".world.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(folder, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    write_atomic(out / "world.eair", (folder / main).read_bytes())


def _round(n: int, rdir: Path, world_file: Path, audit_dir: Path, out: Path, original: World,
           source: str, files: dict[str, str], selected: Selected, protected: list[str],
           feedback: list[Feedback], last_text: str | None, agent: RepairAgent,
           reviewer: Reviewer, only: list[str], target: Any, seeds: int,
           validate_episodes: int | None, llm: LLMSettings | None,
           say: Progress) -> RoundOutcome:
    """One round, from the agent's proposal to its review and retest."""
    rdir.mkdir(parents=True, exist_ok=True)
    cand_path = rdir / "candidate.json"
    if cand_path.is_file():  # the agent answered before an interruption: not asked again
        candidate = Candidate.model_validate_json(cand_path.read_bytes())
    else:
        request = RepairRequest(world_file=world_file.name, source=source, files=files,
                                finding=selected.finding, plan=selected.plan,
                                protected=protected, round=n, feedback=list(feedback),
                                previous=last_text)
        write_atomic(rdir / "request.json", _dump(request.model_dump(
            mode="json", exclude={"source", "files"})))
        used = _tape(agent, llm, n, "agent.jsonl")
        try:
            candidate = agent.propose(request)
        except RepairError as exc:
            _missed(used)
            return RoundOutcome(round=n, stage="propose", ok=False,
                                problems=[f"the Repair Agent produced no candidate: {exc}"])
        write_atomic(rdir / "agent.eair", candidate.source)
        write_atomic(cand_path, _dump(candidate.model_dump(mode="json")))
        write_atomic(rdir / "attribution.json", _dump(candidate.attribution))
    applied = apply_candidate(world_file, candidate, rdir / "world", only=only)
    write_atomic(rdir / "candidate.eair", applied.text)
    write_atomic(rdir / "diagnostics.txt", "\n\n".join(applied.diagnostics) + (
        "\n" if applied.diagnostics else ""))
    if not applied.ok or applied.world is None:
        fb = Feedback(round=n, stage="compile", problems=applied.problems)
        write_atomic(rdir / "feedback.json", _dump(fb.model_dump(mode="json")))
        return RoundOutcome(round=n, stage="compile", ok=False, problems=applied.problems,
                            feedback=fb)
    from eairdsl.diff import diff_worlds

    cand_world = applied.world
    diff = diff_worlds(original, cand_world)
    diff_data = diff.model_dump(mode="json")
    diff_data["violations"] = [c.model_dump(mode="json") for c in diff.violations]
    write_atomic(rdir / "diff.json", _dump(diff_data))
    scope = check_scope(diff, candidate.attribution, selected.plan)
    write_atomic(rdir / "scope.json", _dump(scope.model_dump(mode="json")))
    base = {"round": n, "compiled": True, "digest": cand_world.digest}
    if not scope.ok:
        fb = Feedback(round=n, stage="scope", problems=scope.problems)
        write_atomic(rdir / "feedback.json", _dump(fb.model_dump(mode="json")))
        return RoundOutcome(stage="scope", ok=False, scope_ok=False, problems=scope.problems,
                            feedback=fb, **base)
    review_req = ReviewRequest(
        world_file=world_file.name, original=source, candidate=applied.text,
        files_changed=dict(candidate.files), finding=selected.finding, plan=selected.plan,
        diff=diff_data, attribution=candidate.attribution, rationale=candidate.rationale,
        round=n, original_dir=str(world_file.parent.resolve()),
        candidate_dir=str((rdir / "world").resolve()))
    say(f"round {n}: candidate compiled and in scope ({len(scope.changed)} declaration(s) "
        "changed); asking the Reviewer")
    used = _tape(reviewer, llm, n, "reviewer.jsonl")
    try:
        review: Review = reviewer.review(review_req)
    except RepairError as exc:
        _missed(used)
        problem = f"the Reviewer produced no review: {exc}"
        write_atomic(rdir / "review.json", _dump({"error": problem}))
        return RoundOutcome(stage="review", ok=False, scope_ok=True, review_ok=None,
                            problems=[problem], **base)
    refused = review.contradictions()
    write_atomic(rdir / "review.json", _dump({**review.model_dump(mode="json"),
                                              "refused": refused}))
    failed = [f"{d}: {review.dimension(d).reason}" for d in DIMENSIONS
              if not review.dimension(d).passed]
    if refused or review.verdict != "approve":
        problems = ([f"the review was refused: {r}" for r in refused] + failed) or \
            ["the reviewer rejected the candidate"]
        fb = Feedback(round=n, stage="review", problems=problems,
                      required_changes=list(review.required_changes))
        write_atomic(rdir / "feedback.json", _dump(fb.model_dump(mode="json")))
        return RoundOutcome(stage="review", ok=False, scope_ok=True, review_ok=False,
                            refused=refused, problems=problems, feedback=fb, **base)
    say(f"round {n}: approved; retesting on a fresh cohort")
    rt = retest(original, cand_world, applied.main, audit_dir, target,
                out / "retest" / f"{n:02d}", seeds=seeds,
                conditions=selected.conditions or None,
                validate_episodes=validate_episodes, llm=_retest_llm(llm, n), progress=say)
    problems = list(rt.audit_problems[:10])
    if rt.retain < RETAIN:
        problems.append(f"Retain {rt.retain:.3f} < {RETAIN}: utility {rt.utility_after:.0%} "
                        f"after vs {rt.utility_before:.0%} before on the same cases")
    ok = rt.audit_pass and rt.retain >= RETAIN
    retest_fb: Feedback | None = None
    if not ok:
        retest_fb = Feedback(round=n, stage="retest",
                             problems=problems or ["the retest did not pass"])
        write_atomic(rdir / "feedback.json", _dump(retest_fb.model_dump(mode="json")))
    return RoundOutcome(stage="accepted" if ok else "retest", ok=ok, scope_ok=True,
                        review_ok=True, audit_pass=rt.audit_pass, retain=rt.retain,
                        problems=problems, feedback=retest_fb, **base)


def _retest_llm(llm: LLMSettings | None, n: int) -> LLMSettings | None:
    """The retest's transport, recording to or replaying from `round-NN/retest` (its
    fields only are read: the retest makes its own settings objects)."""
    record, replay = _round_tapes(llm, n)
    if llm is None or (record is None and replay is None):
        return llm
    return llm.model_copy(update={"record": record / "retest" if record else None,
                                  "replay": replay / "retest" if replay else None})
