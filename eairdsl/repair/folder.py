"""The repair folder, `OUT/` of `eairc repair`: the only module that knows its layout.

    OUT/loop.json            what repair this is (world, digest, audit, options):
                             a rerun with other settings is refused
    OUT/plan.json            the finding and its plan (`Selected`)
    OUT/original.eair        the original main file's text
    OUT/rounds/NN/           one round (`RoundFolder`): request.json, agent.eair,
                             candidate.json, attribution.json, candidate.eair and its
                             world/, diagnostics.txt, diff.json, scope.json,
                             review.json, feedback.json, outcome.json (last)
    OUT/retest/NN/           round NN's retest (`RetestFolder`): before/, after/
                             (study stores), audit/, result.json
    OUT/acceptance.json      the decision (`Acceptance`)
    OUT/world/               the accepted round's world folder: its main file
                             (`world/<main>.eair`, `accepted_world`) beside its data,
                             so it compiles and diffs where it lands
    OUT/review.html          the page a reviewer reads
    OUT/cassettes/           `eairc repair --record`'s cassettes (loop.py's docstring)

Why one module: the loop, the retest, the review page and the Signals store each
composed these paths by hand and parsed the JSON as dicts, so a renamed file
had five places to change and a reader could not say what it got. Here every
read returns a typed model (or None where a missing file is an answer, as on
the review page, which renders whatever a stopped repair left), and every write
is atomic. It imports no tool module (the records are in `repair.model`), so a
reader of finished repairs loads neither the compiler nor the runtime.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from eairdsl.errors import UsageError
from eairdsl.repair.model import (
    Acceptance,
    Candidate,
    Feedback,
    RepairRequest,
    RetestResult,
    Review,
    RoundOutcome,
    Selected,
)
from eairdsl.source import write_atomic as source_write_atomic

__all__ = ["LOOP", "PLAN", "ACCEPTANCE", "OUTCOME", "CASSETTES", "RESULT", "AGENT_TAPE",
           "REVIEWER_TAPE", "RETEST_TAPES", "BEFORE_TAPES", "AFTER_TAPES", "AUDIT_TAPE",
           "RepairFolder", "RoundFolder", "RetestFolder", "ReviewRecord", "round_tapes",
           "write_atomic", "dump_json"]

LOOP = "loop.json"
PLAN = "plan.json"
ACCEPTANCE = "acceptance.json"
#: a round's last file: the round is complete once it exists
OUTCOME = "outcome.json"
#: where `eairc repair --record` keeps the repair's cassettes (loop.py's docstring)
CASSETTES = "cassettes"
#: a retest's last file: the retest is done once it exists
RESULT = "result.json"
ORIGINAL = "original.eair"
#: inside a cassettes folder (`OUT/cassettes`, or an earlier repair's given to --replay):
#: round NN's agent, reviewer and retest cassettes (loop.py's docstring)
AGENT_TAPE, REVIEWER_TAPE, RETEST_TAPES = "agent.jsonl", "reviewer.jsonl", "retest"
#: inside a retest's cassette folder: W's study, W′'s study, the re-audit's auditor
BEFORE_TAPES, AFTER_TAPES, AUDIT_TAPE = "before", "after", "audit.jsonl"
REVIEW_PAGE = "review.html"
#: what earlier versions wrote beside `world/`: a copy of the main file whose data and
#: card paths resolved against OUT/ (E206 for each); `install` removes it
ACCEPTED_WORLD = "world.eair"
ROUNDS = "rounds"
RETESTS = "retest"
WORLD = "world"


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write a file through a temporary file and a rename (an interrupted write leaves the
    old file or none, never half a file); a failure is a `UsageError` naming the file."""
    try:
        source_write_atomic(path, data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def dump_json(data: Any) -> str:
    """The repair folder's JSON form: indented, sorted keys, UTF-8 as is, a final newline
    (stable bytes, so a rerun that changes nothing rewrites the same files)."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _write_model(path: Path, model: BaseModel) -> None:
    write_atomic(path, dump_json(model.model_dump(mode="json")))


def _read_json(path: Path) -> Any:
    """The JSON in `path`, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def round_tapes(cassettes: Path | str | None, n: int) -> Path | None:
    """Round `n`'s cassette folder inside a repair's cassettes folder (None for none): the
    cassettes may be another repair's (`--replay`), so this takes the folder, not OUT."""
    return Path(cassettes) / f"round-{n:02d}" if cassettes else None


class ReviewRecord(BaseModel):
    """A round's `review.json`: the Reviewer's review with the contradictions the loop
    refused it for, or the error that stood in for a review."""

    review: Review | None = None
    refused: list[str] = Field(default_factory=list)
    error: str | None = None


class RoundFolder:
    """`OUT/rounds/NN/`: everything one round wrote, `outcome.json` last."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def name(self) -> str:
        """`NN`, as the review page heads the round."""
        return self.path.name

    @property
    def world(self) -> Path:
        """The copy of the world folder the candidate is applied into (`apply_candidate`)."""
        return self.path / WORLD

    def make(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    # the agent's answer: once on disk, a resumed round does not ask again
    def has_candidate(self) -> bool:
        return (self.path / "candidate.json").is_file()

    def read_candidate(self) -> Candidate:
        return Candidate.model_validate_json((self.path / "candidate.json").read_bytes())

    def read_candidate_or_none(self) -> Candidate | None:
        try:
            return self.read_candidate()
        except (OSError, ValueError):
            return None

    def write_request(self, request: RepairRequest) -> None:
        """What the agent was asked, without the sources (they are in the world folder)."""
        write_atomic(self.path / "request.json", dump_json(request.model_dump(
            mode="json", exclude={"source", "files"})))

    def write_candidate(self, candidate: Candidate) -> None:
        """The agent's text, its candidate record (the resume point) and its attribution."""
        write_atomic(self.path / "agent.eair", candidate.source)
        _write_model(self.path / "candidate.json", candidate)
        write_atomic(self.path / "attribution.json", dump_json(candidate.attribution))

    def read_attribution(self) -> dict[str, list[str]]:
        data = _read_json(self.path / "attribution.json")
        return data if isinstance(data, dict) else {}

    # the guarded apply
    def write_applied(self, text: str, diagnostics: list[str]) -> None:
        """The formatted candidate text and the compiler's located diagnostics."""
        write_atomic(self.path / "candidate.eair", text)
        write_atomic(self.path / "diagnostics.txt", "\n\n".join(diagnostics) + (
            "\n" if diagnostics else ""))

    def read_candidate_text(self) -> str | None:
        """The formatted candidate (the agent's next `previous`), None before the apply."""
        path = self.path / "candidate.eair"
        return path.read_text(encoding="utf-8") if path.is_file() else None

    # the gates
    def write_diff(self, data: dict[str, Any]) -> None:
        write_atomic(self.path / "diff.json", dump_json(data))

    def read_diff(self) -> dict[str, Any]:
        """`eairc diff --json` of W and W′ with its violations ({} when not written)."""
        data = _read_json(self.path / "diff.json")
        return data if isinstance(data, dict) else {}

    def write_scope(self, scope: BaseModel) -> None:
        _write_model(self.path / "scope.json", scope)

    def write_review(self, review: Review, refused: list[str]) -> None:
        write_atomic(self.path / "review.json", dump_json({
            **review.model_dump(mode="json"), "refused": refused}))

    def write_review_error(self, problem: str) -> None:
        write_atomic(self.path / "review.json", dump_json({"error": problem}))

    def read_review(self) -> ReviewRecord | None:
        """The review (None when the round did not reach one or it cannot be read)."""
        data = _read_json(self.path / "review.json")
        if not isinstance(data, dict):
            return None
        if "verdict" not in data:
            error = data.get("error")
            return ReviewRecord(error=str(error)) if error is not None else None
        refused = data.pop("refused", None) or []
        try:
            return ReviewRecord(review=Review.model_validate(data),
                                refused=[str(r) for r in refused])
        except ValueError:
            return None

    def write_feedback(self, feedback: Feedback) -> None:
        _write_model(self.path / "feedback.json", feedback)

    # the round's end
    def is_done(self) -> bool:
        return (self.path / OUTCOME).is_file()

    def read_outcome(self) -> RoundOutcome:
        return RoundOutcome.model_validate_json((self.path / OUTCOME).read_bytes())

    def read_outcome_or_none(self) -> RoundOutcome | None:
        """The outcome, None for a round an interruption left open."""
        try:
            return self.read_outcome()
        except (OSError, ValueError):
            return None

    def write_outcome(self, outcome: RoundOutcome) -> None:
        _write_model(self.path / OUTCOME, outcome)


class RetestFolder:
    """`OUT/retest/NN/` (or any folder `retest()` is given): W's and W′'s study stores,
    W′'s audit, and `result.json` last."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def before(self) -> Path:
        """W's study store (`run_study` writes and resumes it)."""
        return self.path / "before"

    @property
    def after(self) -> Path:
        """W′'s study store."""
        return self.path / "after"

    @property
    def audit(self) -> Path:
        """The audit of W′'s retest traces (an audit folder: `eairdsl.audit`'s layout)."""
        return self.path / "audit"

    def is_done(self) -> bool:
        return (self.path / RESULT).is_file()

    def read_result(self) -> RetestResult:
        """The finished retest's result (OSError or ValueError when missing or unreadable:
        a round that reached the retest has one)."""
        return RetestResult.model_validate_json((self.path / RESULT).read_bytes())

    def read_result_or_none(self) -> RetestResult | None:
        """The result, None when the retest is not finished (or its result unreadable)."""
        try:
            return self.read_result()
        except (OSError, ValueError):
            return None

    def write_result(self, result: RetestResult) -> None:
        _write_model(self.path / RESULT, result)


class RepairFolder:
    """`OUT/` of one repair (the module docstring has the layout)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def loop_path(self) -> Path:
        """`loop.json`: what makes a folder a repair's (`eairc ls` finds repairs by it)."""
        return self.path / LOOP

    def is_repair(self) -> bool:
        return self.loop_path.is_file()

    @property
    def cassettes(self) -> Path:
        """Where `eairc repair --record` records the repair's exchanges."""
        return self.path / CASSETTES

    @property
    def acceptance_path(self) -> Path:
        """`acceptance.json`'s path, for messages and links."""
        return self.path / ACCEPTANCE

    @property
    def review_page(self) -> Path:
        """`review.html`'s path, for messages and links."""
        return self.path / REVIEW_PAGE

    @property
    def accepted_world(self) -> Path:
        """The accepted world's main file, `world/<main>.eair` (`loop.json`'s `world`), for
        messages and links: it compiles where it is, its data beside it (`world/` when the
        loop names no main file)."""
        main = (self.read_loop() or {}).get("world")
        return self.path / WORLD / Path(main).name if isinstance(main, str) and main \
            else self.path / WORLD

    def replay_source(self) -> Path:
        """The cassettes a replay of this folder reads: its `cassettes/`, or the folder
        itself when it is a cassettes folder already."""
        return self.cassettes if self.cassettes.is_dir() else self.path

    def create(self) -> None:
        """Make the folder (a `UsageError` when it cannot be made)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot make the repair folder {self.path}: "
                             f"{exc.strerror or exc}") from None

    def is_file(self) -> bool:
        """Whether `OUT` is a file, not a folder (refused as a repair folder)."""
        return self.path.exists() and not self.path.is_dir()

    def is_finished(self) -> bool:
        """Whether a repair decided here (`acceptance.json`): how the Signals store tells a
        repair folder from an audit."""
        return (self.path / ACCEPTANCE).is_file()

    # what repair this is
    def loop_file(self) -> Path:
        """`loop.json`'s path, for messages."""
        return self.path / LOOP

    def read_loop(self) -> dict[str, Any] | None:
        """The recorded repair identity (None when missing or unreadable)."""
        data = _read_json(self.path / LOOP)
        return data if isinstance(data, dict) else None

    def read_loop_raw(self) -> Any:
        """`loop.json` as stored, whatever it holds (the loop refuses anything but its own
        identity, a non-object included)."""
        return _read_json(self.path / LOOP)

    def read_audit_dir(self) -> Path:
        """The audit folder the repair started from (`loop.json`'s `audit`, as resolved
        when it ran); OSError or ValueError when `loop.json` is missing or unreadable."""
        data = json.loads((self.path / LOOP).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{self.path / LOOP} is not a repair's identity")
        return Path(str(data.get("audit") or ""))

    def write_loop(self, identity: dict[str, Any]) -> None:
        write_atomic(self.path / LOOP, dump_json(identity))

    # the plan
    def plan_file(self) -> Path:
        """`plan.json`'s path, for messages."""
        return self.path / PLAN

    def has_plan(self) -> bool:
        return (self.path / PLAN).is_file()

    def read_plan(self) -> Selected:
        """The selected finding and plan (OSError or ValueError when unreadable)."""
        return Selected.model_validate_json((self.path / PLAN).read_bytes())

    def read_plan_or_none(self) -> Selected | None:
        try:
            return self.read_plan()
        except (OSError, ValueError):
            return None

    def write_plan(self, selected: Selected) -> None:
        _write_model(self.path / PLAN, selected)

    # the original world's main file
    def write_original(self, text: str) -> None:
        write_atomic(self.path / ORIGINAL, text)

    def read_original(self) -> str | None:
        path = self.path / ORIGINAL
        return path.read_text(encoding="utf-8") if path.is_file() else None

    # rounds and retests
    def round(self, n: int) -> RoundFolder:
        return RoundFolder(self.path / ROUNDS / f"{n:02d}")

    def rounds(self) -> list[RoundFolder]:
        """Every round folder on disk, in order (finished or not)."""
        return [RoundFolder(p) for p in sorted((self.path / ROUNDS).glob("[0-9][0-9]"))]

    @staticmethod
    def retest_ref(n: int) -> str:
        """Round `n`'s retest as `acceptance.json` names it (relative to the folder)."""
        return f"{RETESTS}/{n:02d}"

    def retest(self, n: int) -> RetestFolder:
        return RetestFolder(self.path / self.retest_ref(n))

    def retest_at(self, ref: str) -> RetestFolder:
        """The retest `acceptance.json` names (`Acceptance.retest`)."""
        return RetestFolder(self.path / ref)

    # the decision
    def read_acceptance(self) -> Acceptance:
        """The decision (OSError or ValueError when missing or unreadable)."""
        return Acceptance.model_validate_json((self.path / ACCEPTANCE).read_bytes())

    def read_acceptance_or_none(self) -> Acceptance | None:
        try:
            return self.read_acceptance()
        except (OSError, ValueError):
            return None

    def write_acceptance(self, acceptance: Acceptance) -> None:
        _write_model(self.path / ACCEPTANCE, acceptance)

    def install(self, n: int, main: str) -> None:
        """The accepted round's world: `OUT/world/` (its folder, replaced whole through a
        temporary copy), whose main file `main` compiles there (its data and card paths
        resolve against its own folder). No copy of the main file is written outside it:
        one there (`world.eair`, as earlier versions wrote) compiled with E206 for every
        data path, so an old one is removed."""
        folder = self.round(n).world
        if not (folder / main).is_file():
            raise UsageError(f"{folder / main}: the accepted round's main file is missing")
        dest = self.path / WORLD
        tmp = self.path / ".world.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(folder, tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
        (self.path / ACCEPTED_WORLD).unlink(missing_ok=True)

    def write_review_page(self, html: str) -> Path:
        path = self.path / REVIEW_PAGE
        write_atomic(path, html)
        return path
