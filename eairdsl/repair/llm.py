"""The LLM Repair Agent and the LLM Repair Reviewer: any litellm model, JSON in and out.

EAIR §4, stages 2 and 3. Both are one-method protocols of `eairdsl.repair.model`
played by a model through the episode agents' transport (`eairdsl.agents.llm`:
`LLMSettings`, its client's retries with backoff, per-request timeouts,
per-provider semaphores, and the cassette — with `settings.record` every
exchange is stored, with `settings.replay` a repair or review is replayed with
no network and no litellm and gives a byte-identical candidate or review).

`LLMRepairAgent(model, settings=None, max_tries=2)`. Each round is one
self-contained conversation (so a round can be replayed or resumed alone):

- **system** (`prompts/repair_agent.md`): the task, the rules (enforce at the
  boundary's action, stay on the plan's surface, protected declarations are
  read-only, grant nothing new, attribute every change to a requirement id),
  the answer's JSON shape, and the parts of the language reference a repair
  needs (`prompts/language.md`, the sections `LANGUAGE_SECTIONS` of
  docs/language.md, shipped as package data so it works from a wheel);
- **user**: the finding (certificate) and its plan as JSON, the protected
  declarations, the world's source with each protected declaration marked by a
  `// [read-only: protected]` line (the markers are removed from the answer),
  the other files of the world folder (modules and cards in full up to
  `files_chars` characters, a protected participant's card marked read-only;
  data files and the rest by name), and — from the second round on —
  the feedback of every earlier round (the compiler's located diagnostics, scope
  violations, a reviewer's failed dimensions and required changes) and the
  latest candidate it revises.

The answer is a JSON object `{"source", "attribution", "rationale", "files"}`.
One that is not (no JSON, a missing or empty `source`, an attribution that is
not `KIND NAME -> [ids]`, a file path outside the folder) is sent back once
with the reason, up to `max_tries` answers; then `RepairError` with the
reason, which the loop records for the round.

`LLMReviewer(model, settings=None, max_tries=2)` sees the finding, the plan,
`eairc diff --json` of the two compiled worlds, the attribution and rationale,
both sources, the changed lines as a unified diff and the changed files, and
answers D.1's four dimensions as JSON (`prompts/reviewer.md`), parsed into
`Review`. An answer that is not that JSON, or that `Review.contradictions()`
refuses (an approval with a failed dimension, a rejection that names no
required change), is sent back with the reason; after `max_tries` answers a
malformed one raises `RepairError`, a contradictory one is returned as it is
(the loop's validator refuses it and records why).

Use a different model (or instance) for the reviewer than for the agent: no
single agent both writes and accepts a repair (D.1).

`use_cassette(record=..., replay=...)` points either role's next exchanges at
another cassette: the repair loop gives every round its own file (`eairc repair
--record` / `--replay`, `loop.py`), so a resumed repair never truncates what a
finished round recorded.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import random
import re
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from eairdsl.agents.cassette import CassetteError
from eairdsl.agents.llm import LLMSettings, LLMUnavailable, call_record
from eairdsl.repair.files import candidate_problems, shown
from eairdsl.repair.model import (
    DIMENSIONS,
    Candidate,
    Feedback,
    RepairError,
    RepairRequest,
    Review,
    ReviewRequest,
)

__all__ = ["LANGUAGE_SECTIONS", "LLMRepairAgent", "LLMReviewer", "PROMPT_VERSION",
           "MAX_ANSWER_DEPTH", "READ_ONLY_MARK", "agent_messages", "language_excerpt",
           "language_excerpt_from", "mark_protected", "parse_candidate", "parse_review",
           "reviewer_messages", "strip_marks", "with_cassette", "write_language_excerpt"]

#: bumped when the prompts' wording changes; `produced_by`/`reviewer` also carry a digest
#: of the exact system prompt sent
PROMPT_VERSION = "1"
#: the line put before each protected declaration in the source the agent sees
READ_ONLY_MARK = "// [read-only: protected]"
#: the sections of docs/language.md a repair needs (prompts/language.md is built from them)
LANGUAGE_SECTIONS: tuple[str, ...] = (
    "## Files and modules", "### import", "### schema", "### record, table, ledger",
    "### state", "### authorization", "### policy", "### lever", "### tool",
    "### role, actor, simulator", "### channels", "### let", "### protected", "## Types",
    "## Expressions", "## Units", "## Scopes", "## Builtin functions")
#: top-level declaration keywords of a formatted source (eairc fmt puts them in column 0)
_DECL = re.compile(r"^(?:world|import|enum|schema|record|table|ledger|state|document|"
                   r"authorization|policy|lever|condition|inducer|tool|role|actor|simulator|"
                   r"channel|delegation|fork|merge|relay|instances|instance|measure|"
                   r"study[ \t]+measure|let|protected)\b\s*([A-Za-z_][A-Za-z0-9_]*)?")
_MARK_LINE = re.compile(r"^[ \t]*" + re.escape(READ_ONLY_MARK) + r"[ \t]*\r?\n?", re.MULTILINE)
_CARD = re.compile(r'(?:^|[{;])\s*card\s+"([^"]+)"')
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_KEY = re.compile(r"^[a-z]+ \S.*$")
_ERRORS_SHOWN = 3
#: the deepest nesting an answer may have: the answers' shapes need 3; a model answer
#: nested 200,000 deep ended the repair in a RecursionError of json's C scanner
MAX_ANSWER_DEPTH = 32
#: a JSON string (raw newlines allowed: answers are read with strict=False), and a bracket
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


# ---------------------------------------------------------------- prompts

def _prompt(name: str) -> str:
    return resources.files("eairdsl.repair").joinpath("prompts", name).read_text(
        encoding="utf-8")


def language_excerpt_from(doc: str, sections: tuple[str, ...] = LANGUAGE_SECTIONS) -> str:
    """The named sections of docs/language.md, in the document's order: a `###` section up
    to the next heading of level 2 or 3, a `##` section with all its `###` subsections."""
    lines = doc.splitlines()
    heads = [(i, line) for i, line in enumerate(lines) if re.match(r"^#{2,3} ", line)]
    wanted = set(sections)
    out: list[str] = []
    for n, (i, head) in enumerate(heads):
        if head.strip() not in wanted:
            continue
        level = len(head) - len(head.lstrip("#"))
        end = len(lines)
        for j, other in heads[n + 1:]:
            if len(other) - len(other.lstrip("#")) <= level:
                end = j
                break
        body = "\n".join(lines[i:end]).strip()
        body = re.sub(r"\n-{3,}\s*$", "", body).strip()  # the document's section rules
        out.append(body)
    missing = wanted - {h.strip() for _, h in heads}
    if missing:
        raise ValueError(f"docs/language.md has no section {', '.join(sorted(missing))}")
    return "\n\n".join(out) + "\n"


def language_excerpt() -> str:
    """The shipped excerpt (prompts/language.md; tests keep it equal to docs/language.md's
    sections: regenerate with `language_excerpt_from(Path("docs/language.md").read_text())`)."""
    return _prompt("language.md")


def _system(name: str) -> str:
    return _prompt(name).strip().replace("{{LANGUAGE}}", language_excerpt().strip())


def _version(system: str) -> str:
    return f"{PROMPT_VERSION}+{hashlib.sha256(system.encode('utf-8')).hexdigest()[:8]}"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, indent=1)


def mark_protected(source: str, protected: list[str]) -> str:
    """`source` with a READ_ONLY_MARK line before each top-level declaration it protects.

    `protected` holds `KIND NAME` entries (or bare names); the `measure`,
    `instances` and `authorization` blocks are matched by their keyword.
    """
    names = {p.split(" ", 1)[-1].strip() for p in protected}
    blocks = {p.split(" ", 1)[0] for p in protected} | names
    out: list[str] = []
    for line in source.splitlines(keepends=True):
        m = _DECL.match(line)
        if m:
            keyword = line.split(None, 1)[0] if line.split() else ""
            name = m.group(1)
            hit = (keyword in ("measure", "instances", "authorization") and keyword in blocks) \
                or (keyword not in ("import", "protected", "world", "channel", "delegation",
                                    "fork", "merge", "relay") and name in names)
            if hit:
                out.append(READ_ONLY_MARK + "\n")
        out.append(line)
    return "".join(out)


def strip_marks(source: str) -> str:
    """Remove READ_ONLY_MARK lines (the agent may echo them)."""
    return _MARK_LINE.sub("", source)


def _feedback(feedback: list[Feedback]) -> str:
    parts = []
    for f in feedback:
        lines = [f"### Round {f.round}: not taken at the {f.stage} stage"]
        lines += [f"- {p}" for p in f.problems]
        if f.required_changes:
            lines.append("Required changes:")
            lines += [f"- {c}" for c in f.required_changes]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _cards(source: str) -> dict[str, str]:
    """card path -> the name of the top-level declaration whose `card "…"` it is (a card
    clause starts its line or follows a block's `{` or a `;`, as in the compact form)."""
    out: dict[str, str] = {}
    current: str | None = None
    for line in source.splitlines():
        m = _DECL.match(line)
        if m:
            current = m.group(1)
        for card in _CARD.finditer(line):
            if current:
                out[card.group(1)] = current
    return out


def _files_section(request: RepairRequest, budget: int) -> str:
    """The world folder's other files: texts (modules, cards) in full up to `budget`
    characters, the rest (and data files) by name; a protected participant's card is
    marked read-only."""
    protected = {p.split(" ", 1)[-1].strip() for p in request.protected}
    owners = _cards(request.source)
    shown: list[str] = []
    listed: list[str] = []
    left = budget
    for name, text in sorted(request.files.items()):
        owner = owners.get(name)
        note = f" (read-only: the card of protected {owner})" if owner in protected else ""
        if name.endswith((".eair", ".j2", ".md")) and len(text) <= left:
            left -= len(text)
            shown.append(f"### {name}{note}\n```\n{text}\n```")
        else:
            listed.append(f"- {name} ({len(text)} characters){note}")
    body = "\n\n".join(shown)
    if listed:
        body += ("\n\n" if body else "") + "Not shown:\n" + "\n".join(listed)
    return ("## Other files of the world folder (unchanged unless you return them in "
            f"`files`)\n{body}")


def agent_messages(request: RepairRequest, system: str,
                   files_chars: int = 24000) -> list[dict[str, str]]:
    """The Repair Agent's conversation for one round (see the module docstring)."""
    finding = request.finding.model_dump(mode="json", exclude={"repair_plan"})
    parts = [f"# Repair round {request.round}",
             f"## Finding (realization certificate)\n```json\n{_json(finding)}\n```",
             f"## Repair plan\n```json\n{_json(request.plan.model_dump(mode='json'))}\n```",
             "## Protected declarations (read-only)\n"
             + (", ".join(request.protected) or "none"),
             f"## World source: {request.world_file}\nEach protected declaration is preceded "
             f"by a `{READ_ONLY_MARK}` line (leave those declarations as they are; the marks "
             f"are removed from your answer).\n```eair\n"
             f"{mark_protected(request.source, request.protected)}```"]
    if request.files:
        parts.append(_files_section(request, files_chars))
    if request.feedback:
        parts.append("## Feedback on earlier rounds\n" + _feedback(request.feedback))
    if request.previous is not None:
        parts.append("## Your latest candidate (revise it)\n```eair\n"
                     f"{request.previous}\n```")
    parts.append("Answer with the JSON object only.")
    return [{"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join(parts)}]


def reviewer_messages(request: ReviewRequest, system: str) -> list[dict[str, str]]:
    """The Reviewer's conversation: finding, plan, diff, attribution, both sources."""
    finding = request.finding.model_dump(mode="json", exclude={"repair_plan"})
    changed = "".join(difflib.unified_diff(
        request.original.splitlines(keepends=True), request.candidate.splitlines(keepends=True),
        fromfile=f"W/{request.world_file}", tofile=f"W'/{request.world_file}", n=2))
    parts = [f"# Review round {request.round}",
             f"## Finding (realization certificate)\n```json\n{_json(finding)}\n```",
             f"## Repair plan\n```json\n{_json(request.plan.model_dump(mode='json'))}\n```",
             f"## Semantic diff (eairc diff --json)\n```json\n{_json(request.diff)}\n```",
             f"## Attribution (changed declaration -> requirement ids)\n```json\n"
             f"{_json(request.attribution)}\n```",
             f"## Rationale\n{request.rationale or '(none given)'}",
             f"## Changed source lines\n```diff\n{changed or '(no line changed)'}\n```",
             f"## Original world W: {request.world_file}\n```eair\n{request.original}\n```",
             f"## Candidate world W': {request.world_file}\n```eair\n{request.candidate}\n```"]
    for name, text in sorted(request.files_changed.items()):
        parts.append(f"## Changed file of W': {name}\n```\n{text}\n```")
    parts.append("Answer with the JSON object only.")
    return [{"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join(parts)}]


# ---------------------------------------------------------------- answers

class _Answer(BaseModel):
    """The Repair Agent's JSON answer (extra keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    source: str = Field(min_length=1)
    attribution: dict[str, list[str]] = Field(default_factory=dict)
    rationale: str = ""
    files: dict[str, str] = Field(default_factory=dict)


def _load(text: str) -> Any:
    """JSON from a model answer: bare, fenced, or the outermost object in prose; nested at
    most `MAX_ANSWER_DEPTH` deep (deeper is a RepairError, never a RecursionError)."""
    body = _FENCE.sub("", text.strip())
    try:
        return _loads(body)
    except json.JSONDecodeError as first:
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise RepairError(f"the answer is not JSON ({first.msg} at line {first.lineno} "
                              f"column {first.colno})") from None
        try:
            return _loads(body[start:end + 1])
        except json.JSONDecodeError as exc:
            raise RepairError(f"the answer is not JSON ({exc.msg} at line {exc.lineno} "
                              f"column {exc.colno} of its object)") from None


def _loads(body: str) -> Any:
    """`json.loads` (raw newlines in a string are common) after checking the nesting."""
    depth = _depth(body)
    if depth > MAX_ANSWER_DEPTH:
        raise RepairError(f"the answer nests JSON {depth} levels deep; at most "
                          f"{MAX_ANSWER_DEPTH} (answer the one flat object the instructions "
                          "give)")
    try:
        return json.loads(body, strict=False)
    except RecursionError:  # not reached past the check; kept as the last guard
        raise RepairError("the answer nests JSON too deeply to read") from None


def _depth(body: str) -> int:
    """The deepest bracket nesting of `body` outside its strings (a linear scan, bounded
    by the text: no recursion, whatever the answer)."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub("", body)):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _problems(exc: ValidationError) -> str:
    shown = []
    for err in exc.errors()[:_ERRORS_SHOWN]:
        where = ".".join(str(p) for p in err["loc"]) or "the object"
        shown.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - _ERRORS_SHOWN
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _safe_path(name: str) -> bool:
    path = PurePosixPath(name.replace("\\", "/"))
    return bool(name) and not path.is_absolute() and ".." not in path.parts \
        and not name.startswith("~") and ":" not in name


def parse_candidate(text: str, world_file: str) -> tuple[str, dict[str, list[str]], str,
                                                           dict[str, str]]:
    """(source, attribution, rationale, files) from the agent's answer, or RepairError."""
    data = _load(text)
    if not isinstance(data, dict):
        raise RepairError(f"the answer is JSON but not an object (a {type(data).__name__})")
    try:
        answer = _Answer.model_validate(data)
    except ValidationError as exc:
        raise RepairError(f"the answer does not have the required shape: {_problems(exc)}") \
            from None
    source = strip_marks(answer.source)
    if not source.strip():
        raise RepairError("the answer's `source` is empty")
    for key, ids in answer.attribution.items():
        if not _KEY.match(key):
            raise RepairError(f"attribution key {key!r} is not `KIND NAME` (e.g. "
                              "`tool issue_credit`)")
        if not ids:
            raise RepairError(f"attribution of {key!r} names no requirement id")
    for name in answer.files:
        if not _safe_path(name) or name == world_file:
            raise RepairError(f"`files` names {shown(name)}: give a relative path inside the "
                              "world folder other than the main file (which is `source`)")
    problems = candidate_problems(source, dict(answer.files), world_file)
    if problems:
        raise RepairError("; ".join(problems[:_ERRORS_SHOWN])
                          + (f"; and {len(problems) - _ERRORS_SHOWN} more"
                             if len(problems) > _ERRORS_SHOWN else ""))
    if not source.endswith("\n"):
        source += "\n"
    return source, dict(answer.attribution), answer.rationale, dict(answer.files)


def parse_review(text: str) -> Review:
    """A `Review` from the reviewer's JSON answer, or RepairError with the reason."""
    data = _load(text)
    if not isinstance(data, dict):
        raise RepairError(f"the answer is JSON but not an object (a {type(data).__name__})")
    allowed = {*DIMENSIONS, "verdict", "required_changes"}
    body = {k: v for k, v in data.items() if k in allowed}
    missing = [d for d in DIMENSIONS if d not in body]
    if missing:
        raise RepairError(f"the answer has no verdict on {', '.join(missing)}")
    try:
        return Review.model_validate(body)
    except ValidationError as exc:
        raise RepairError(f"the answer does not have the required shape: {_problems(exc)}") \
            from None


# ---------------------------------------------------------------- the two roles

class _Conversation:
    """One model's exchanges for one request: transport, cassette scope, usage, records."""

    def __init__(self, model: str, settings: LLMSettings, scope: str) -> None:
        self.model = model
        self.settings = settings
        self.client = settings.client()
        self.scope = scope
        self.rng = random.Random(f"{scope}:backoff")
        self.counters: dict[str, int] = {}
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.tokens_in = self.tokens_out = 0
        self.cost = 0.0

    async def ask(self, messages: list[dict[str, str]], role: str) -> str:
        request = self.client.request(self.model, messages)
        if self.settings.temperature is None:
            request["temperature"] = 0
        meta: dict[str, Any] = {}
        try:
            response = await self.client.complete(request, self.scope, self.counters,
                                                  self.rng, where=f"{role} of {self.scope}",
                                                  meta=meta)
        except LLMUnavailable as exc:
            self.calls.append(call_record(role, request, None, meta, str(exc)))
            raise RepairError(f"the {role} model could not answer: {exc}") from None
        except CassetteError as exc:
            raise RepairError(f"the {role} model's cassette: {exc}") from None
        self.calls.append(call_record(role, request, response, meta))
        self.tokens_in += response["usage"]["tokens_in"]
        self.tokens_out += response["usage"]["tokens_out"]
        self.cost = round(self.cost + response["cost"], 10)
        return response.get("content") or ""

    def usage(self) -> dict[str, Any]:
        return {"calls": len(self.calls), "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out, "cost_usd": self.cost}


def _check(model: str, max_tries: int) -> None:
    if not model or not isinstance(model, str):
        raise ValueError("an LLM repair role needs a model: a litellm model string, e.g. "
                         "openai/gpt-4o-mini")
    if max_tries < 1:
        raise ValueError(f"max_tries must be 1 or more, not {max_tries}")


def with_cassette(settings: LLMSettings, record: Path | None = None,
                  replay: Path | None = None) -> LLMSettings:
    """A copy of `settings` with its own client on the cassette `record` (truncated now) or
    `replay` (read now: a missing or broken one raises `CassetteError` before any request).

    A new object, not `model_copy`: a copy would share the original's client, and with it
    the original's cassette."""
    fields = {name: getattr(settings, name) for name in type(settings).model_fields}
    fresh = LLMSettings(**{**fields, "record": record, "replay": replay})
    fresh.client()
    return fresh


def _retry_note(problem: str) -> str:
    return (f"Your answer could not be used: {problem}. Answer again with the JSON object "
            "only, in the shape the instructions give.")


class LLMRepairAgent:
    """`RepairAgent` played by a litellm model (module docstring).

    `files_chars` bounds the characters of the world folder's other files shown in full.
    `settings` is the run's `LLMSettings` (api base, temperature — 0 unless set —,
    max_tokens, timeout, retries, `record`/`replay` cassette); its `model` is not used,
    `model` is. `last_calls` holds the call records (`call_record`) of the latest
    `propose`, for the loop to keep beside the round.
    """

    def __init__(self, model: str, settings: LLMSettings | None = None,
                 max_tries: int = 2, files_chars: int = 24000) -> None:
        _check(model, max_tries)
        if files_chars < 0:
            raise ValueError(f"files_chars must be 0 or more, not {files_chars}")
        self.model = model
        self.settings = settings or LLMSettings()
        self.settings.client()  # a bad cassette setting fails here, not in round 1
        self.max_tries = max_tries
        self.files_chars = files_chars
        self.system = _system("repair_agent.md")
        self.prompt_version = _version(self.system)
        self.last_calls: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def use_cassette(self, record: Path | None = None,
                     replay: Path | None = None) -> LLMSettings:
        """Record the next exchanges to `record`, or answer them from `replay`; the settings
        now in use (their `replay_error()` tells a replay miss from a model's failure)."""
        self.settings = with_cassette(self.settings, record, replay)
        return self.settings

    def propose(self, request: RepairRequest) -> Candidate:
        return asyncio.run(self.propose_async(request))

    async def propose_async(self, request: RepairRequest) -> Candidate:
        scope = f"repair/{request.world_file}/{request.finding.id}/round-{request.round}/agent"
        talk = _Conversation(self.model, self.settings, scope)
        messages = agent_messages(request, self.system, self.files_chars)
        try:
            for attempt in range(1, self.max_tries + 1):
                text = await talk.ask(messages, "repair_agent")
                try:
                    source, attribution, rationale, files = parse_candidate(
                        text, request.world_file)
                except RepairError as exc:
                    if attempt == self.max_tries:
                        raise RepairError(f"{self.model}: {exc} (after {attempt} "
                                          f"answer(s))") from None
                    messages = [*messages, {"role": "assistant", "content": text},
                                {"role": "user", "content": _retry_note(str(exc))}]
                    continue
                return Candidate(source=source, files=files, attribution=attribution,
                                 rationale=rationale,
                                 produced_by={"agent": "llm", "model": self.model,
                                              "prompt_version": self.prompt_version,
                                              "answers": attempt, "usage": talk.usage()})
        finally:
            self.last_calls = talk.calls
        raise AssertionError("unreachable: max_tries >= 1")  # pragma: no cover


class LLMReviewer:
    """`Reviewer` played by a litellm model (module docstring); `last_calls` as for
    `LLMRepairAgent`."""

    def __init__(self, model: str, settings: LLMSettings | None = None,
                 max_tries: int = 2) -> None:
        _check(model, max_tries)
        self.model = model
        self.settings = settings or LLMSettings()
        self.settings.client()
        self.max_tries = max_tries
        self.system = _system("reviewer.md")
        self.prompt_version = _version(self.system)
        self.last_calls: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def use_cassette(self, record: Path | None = None,
                     replay: Path | None = None) -> LLMSettings:
        """As `LLMRepairAgent.use_cassette`."""
        self.settings = with_cassette(self.settings, record, replay)
        return self.settings

    def review(self, request: ReviewRequest) -> Review:
        return asyncio.run(self.review_async(request))

    async def review_async(self, request: ReviewRequest) -> Review:
        scope = (f"repair/{request.world_file}/{request.finding.id}/round-{request.round}"
                 "/reviewer")
        talk = _Conversation(self.model, self.settings, scope)
        messages = reviewer_messages(request, self.system)
        try:
            for attempt in range(1, self.max_tries + 1):
                text = await talk.ask(messages, "reviewer")
                try:
                    review = parse_review(text)
                except RepairError as exc:
                    if attempt == self.max_tries:
                        raise RepairError(f"{self.model}: {exc} (after {attempt} "
                                          f"answer(s))") from None
                    problem = str(exc)
                else:
                    problems = review.contradictions()
                    if not problems or attempt == self.max_tries:
                        info = {"kind": "llm", "model": self.model,
                                "prompt_version": self.prompt_version, "answers": attempt,
                                "usage": talk.usage()}
                        return review.model_copy(update={"reviewer": info})
                    problem = "the review " + "; ".join(problems)
                messages = [*messages, {"role": "assistant", "content": text},
                            {"role": "user", "content": _retry_note(problem)}]
        finally:
            self.last_calls = talk.calls
        raise AssertionError("unreachable: max_tries >= 1")  # pragma: no cover


def write_language_excerpt(doc: Path, out: Path) -> None:
    """Rebuild prompts/language.md from docs/language.md (a maintainer's step)."""
    out.write_text(language_excerpt_from(doc.read_text(encoding="utf-8")), encoding="utf-8")
