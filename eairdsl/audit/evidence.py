"""The sanitized bundle's layout and the one way a step's fields are rendered as text.

A quote in an audit report is checked against the text of one field of one
recorded step. The query API shows an auditor that same text, so what an
auditor reads is exactly what the validator compares: `field_text` is the only
rendering, and `normalize` (Unicode NFC, whitespace runs to one space, ends
trimmed) the only leniency. There is no fuzzy matching anywhere in the audit
stage.

Layout of a bundle folder (`BUNDLE_FILES`; every file's sha256 is in the manifest):

    manifest.json       Manifest: schema, sanitizer version, opaque episode id,
                        file digests, what was withheld and why
    events.jsonl        the episode's steps (TraceEvent lines, no header, no result,
                        no judge events)
    participants.json   list[Participant]
    cards/<name>.md     each role's card as that role saw it
    policies.json       list[PolicyCard]
    authorization.json  Authorization: the principal x record -> visible fields matrix
    records/<name>.json RecordView: the rows and fields the roles could reach
    documents/<name>    the documents the roles could reach, as text
    tools.json          list[ToolCard]
    vocabularies.json   Vocabularies: the closed-vocabulary values the world declares a
                        meaning for (`enum ... submission a interception b`: `submission`,
                        `intercepted`); absent when it declares none (and for an imported
                        trace): read as empty

That is the plain (materialized) folder. Written into a bundles folder, an episode
folder keeps only its manifest and `events.jsonl.gz`, and the other files are in the
folder's `shared/<sha256>` (`bundle_store`); `Bundle.load` reads both the same way.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from eairdsl.runtime.trace import TraceEvent

__all__ = ["BUNDLE_SCHEMA", "SANITIZER_VERSION", "Withheld", "Manifest", "Participant",
           "PolicyCard", "AuthorizationEntry", "Authorization", "RecordView", "ToolCard",
           "Vocabularies",
           "Bundle", "BundleError", "field_text", "field_names", "normalize", "edge_ref",
           "canonical_json", "sha256_file", "MANIFEST", "EVENTS", "VOCABULARIES"]

BUNDLE_SCHEMA = 1
#: bumped whenever the sanitizer withholds or renders something differently
SANITIZER_VERSION = "1"
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
VOCABULARIES = "vocabularies.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Withheld(_Model):
    """Something of the episode or world the auditor is not shown.

    `locator` names it the way a citation would (`header.condition`, `result`,
    `world.source`, `record.employee.rating:canary`); a citation whose field is a
    withheld locator is rejected by the validator.
    """

    locator: str
    reason: str


class Manifest(_Model):
    bundle_schema: int = BUNDLE_SCHEMA
    sanitizer_version: str = SANITIZER_VERSION
    #: opaque: a digest of the sanitized events, never the world, condition or seed
    episode: str
    steps: int
    #: relative path -> sha256 of every other file in the bundle
    files: dict[str, str]
    withheld: list[Withheld] = Field(default_factory=list)


class Participant(_Model):
    name: str
    kind: Literal["role", "actor", "simulator"]
    display: str | None = None
    authority: int | None = None
    principal: str | None = None
    description: str | None = None
    tools: list[str] = Field(default_factory=list)
    #: the card file under cards/, when the participant has one
    card: str | None = None


class PolicyCard(_Model):
    name: str
    text: str
    enforced: bool
    document: str | None = None
    #: the rule as DSL expression text, when the policy has one
    rule: str | None = None


class AuthorizationEntry(_Model):
    principal: str
    record: str
    fields: list[str]


class Authorization(_Model):
    default: Literal["allow", "deny"]
    #: the fields each principal may see, after rules and groups are applied
    visible: list[AuthorizationEntry] = Field(default_factory=list)


class RecordView(_Model):
    name: str
    kind: Literal["record", "table", "ledger"]
    key: str | None = None
    fields: list[str]
    rows: list[dict[str, Any]] = Field(default_factory=list)


class ToolCard(_Model):
    name: str
    kind: str
    description: str = ""
    #: JSON Schema of the arguments, as offered to an LLM agent
    parameters: dict[str, Any] = Field(default_factory=dict)
    #: the participants that may call it
    roles: list[str] = Field(default_factory=list)
    #: the documents it can return text from (a document argument's choices, documents
    #: its result reads); empty when unknown. The audit graph's obligations come from it:
    #: a role that holds the tool could read these
    documents: list[str] = Field(default_factory=list)
    #: the records its result can show the caller (read by its `returns`, directly or
    #: through `let`s): what a holder could learn without being told. Empty when unknown
    #: (an imported trace), which the rules read as "could have read anything"
    reveals: list[str] = Field(default_factory=list)
    #: the records and states its effects write (`append`, `set`): who could have
    #: performed a duty the rules find omitted
    writes: list[str] = Field(default_factory=list)


class Vocabularies(_Model):
    """The values the world declares a meaning for, across its enums (`vocabulary.
    ENUM_MEANINGS`; docs/language.md, `enum`), sorted. The rules read a world's statuses only
    through these: with none declared, no value says a request is filed or an artifact
    was held. The values are enum members, which the tool schemas and the steps show
    the roles anyway; only their meaning is added."""

    #: values that say a request is filed and awaits its decision (before the holder)
    submission: list[str] = Field(default_factory=list)
    #: values by which an artifact's own record says it was stopped before its endpoint
    #: (the language's `interception` clause; not named so here, because `interception`
    #: is a measurement, and no bundle names a measurement)
    intercepted: list[str] = Field(default_factory=list)


class BundleError(ValueError):
    """A bundle folder that cannot be read: missing files, bad JSON, digests that differ."""


def canonical_json(value: Any) -> str:
    """The text of a structured field value: sorted keys, UTF-8, `, ` and `: `."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def normalize(text: str) -> str:
    """NFC, whitespace runs to one space, ends trimmed: the validator's only leniency."""
    return " ".join(unicodedata.normalize("NFC", text).split())


_SCALAR_FIELDS = ("actor", "recipient", "edge", "content", "tool", "reason", "call")
_STRUCTURED_FIELDS = ("args", "result", "diff")


def _render(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def field_text(step: TraceEvent, field: str) -> str | None:
    """The text of `field` of `step`, or None when the step has no such field.

    `field` is a scalar field (`content`, `reason`, …), a structured field
    (`args`, `result`, `diff`, rendered as canonical JSON), or a dotted path into
    one (`args.amount`, `result.0.name`, `diff.ledger`): strings as they are,
    anything else as canonical JSON.
    """
    head, _, rest = field.partition(".")
    if head in _SCALAR_FIELDS and not rest:
        value = getattr(step, head)
        return None if value is None else str(value)
    if head not in _STRUCTURED_FIELDS:
        return None
    value = getattr(step, head)
    if value is None:
        return None
    for part in rest.split(".") if rest else ():
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return _render(value)


def field_names(step: TraceEvent) -> list[str]:
    """The top-level fields a quote may name for this step (those it has)."""
    names = [f for f in _SCALAR_FIELDS if getattr(step, f) is not None]
    names += [f for f in _STRUCTURED_FIELDS if getattr(step, f) is not None]
    return names


def edge_ref(step: TraceEvent) -> str | None:
    """The interaction-graph edge a step is: how a citation names its edge.

    message `sender->recipient`; tool call `actor->tool:NAME`; tool result
    `tool:NAME->actor`; state update `tool:NAME->state` (or `actor->state`);
    decisions and anything else have no edge.
    """
    match step.kind:
        case "message":
            return step.edge or (f"{step.actor}->{step.recipient}" if step.recipient else None)
        case "tool_call":
            return f"{step.actor}->tool:{step.tool}"
        case "tool_result":
            return f"tool:{step.tool}->{step.actor}"
        case "state_update":
            return f"tool:{step.tool}->state" if step.tool else f"{step.actor}->state"
        case _:
            return None


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Bundle:
    """A bundle folder, loaded and checked against its manifest's digests."""

    def __init__(self, root: Path, manifest: Manifest, steps: list[TraceEvent],
                 participants: list[Participant], policies: list[PolicyCard],
                 authorization: Authorization, records: dict[str, RecordView],
                 documents: dict[str, str], tools: list[ToolCard],
                 cards: dict[str, str], vocabularies: Vocabularies | None = None) -> None:
        self.root = root
        self.manifest = manifest
        self.steps = steps
        self.by_step = {s.step: s for s in steps}
        self.participants = participants
        self.policies = policies
        self.authorization = authorization
        self.records = records
        self.documents = documents
        self.tools = tools
        self.cards = cards
        self.vocabularies = vocabularies or Vocabularies()
        self.withheld = {w.locator for w in manifest.withheld}

    @classmethod
    def load(cls, root: Path) -> Bundle:
        """The bundle folder `root`, every file checked against the manifest's sha256.

        A file the folder does not hold itself is read from the bundles folder's shared
        files (`bundle_store`: `../shared/<sha256>`), and the steps from
        `events.jsonl.gz`; what is read is the same either way. Every file is read and
        checked; what it parses to is kept by its sha256 (the same bytes give the same
        frozen models), so an audit parses one world's records, documents, cards and
        tools once, not once per episode.
        """
        from eairdsl.audit import bundle_store

        root = Path(root)
        try:
            manifest = Manifest.model_validate_json((root / MANIFEST).read_bytes())
        except (OSError, ValueError) as e:
            raise BundleError(f"{root / MANIFEST}: not a bundle manifest ({e})") from e
        raw: dict[str, bytes] = {}  # every listed file's bytes, checked
        try:
            listing = frozenset(os.listdir(root))
        except OSError as e:
            raise BundleError(f"{root}: cannot be read ({e.strerror or e})") from None
        store = bundle_store.shared_dir(root)
        for rel, digest in sorted(manifest.files.items()):
            if _outside(rel):
                raise BundleError(f"{root / MANIFEST}: file {rel!r} is outside the bundle")
            try:
                raw[rel] = bundle_store.read(
                    bundle_store.source(root, rel, digest, listing, store), digest)
            except bundle_store.StoreError as e:
                raise BundleError(str(e)) from None

        def data(rel: str) -> bytes | None:
            """A listed file's checked bytes; an unlisted one's as it is (None if absent)."""
            if rel in raw:
                return raw[rel]
            path = root / rel
            return path.read_bytes() if path.is_file() else None

        def parsed(rel: str, kind: str, parse: Callable[[bytes], Any]) -> Any:
            """`rel` parsed by `parse`: a listed file once per process and content (its
            bytes were checked against the digest, so the digest names what they parse to)."""
            digest = manifest.files.get(rel)
            if digest is not None and (kind, digest) in _PARSED:
                return _PARSED[(kind, digest)]
            found = data(rel)
            value = parse(found if found is not None else b"")
            if digest is not None:
                if len(_PARSED) >= _PARSED_MAX:
                    _PARSED.clear()
                _PARSED[(kind, digest)] = value
            return value

        def json_of(rel: str, default: Any, kind: str, model: Callable[[Any], Any]) -> Any:
            if rel not in manifest.files and not (root / rel).is_file():
                return model(default)

            def parse(found: bytes) -> Any:
                try:
                    value = json.loads(found.decode("utf-8"))
                except ValueError as e:
                    raise BundleError(f"{root / rel}: not JSON ({e})") from e
                return model(value)

            return parsed(rel, kind, parse)

        def text_of(rel: str) -> str:
            def parse(found: bytes) -> str:
                try:
                    return found.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise BundleError(f"{root / rel}: not UTF-8 text ({e})") from e

            return str(parsed(rel, "text", parse))

        steps: list[TraceEvent] = []
        events = data(EVENTS)
        if events is not None:
            try:
                text = events.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BundleError(f"{root / EVENTS}: not UTF-8 text ({e})") from e
            for n, line in enumerate(text.split("\n"), 1):
                if not line:
                    continue  # the final newline (lines are split on "\n" only: U+2028 is text)
                try:
                    steps.append(TraceEvent.model_validate_json(line))
                except ValueError as e:
                    raise BundleError(f"{root / EVENTS}:{n}: not a step ({e})") from e
        try:
            participants = list(json_of("participants.json", [], "participants",
                                        lambda d: tuple(_PARTICIPANTS.validate_python(d))))
            policies = list(json_of("policies.json", [], "policies",
                                    lambda d: tuple(_POLICIES.validate_python(d))))
            authorization = json_of("authorization.json", {"default": "deny"}, "authorization",
                                    Authorization.model_validate)
            tools = list(json_of("tools.json", [], "tools",
                                 lambda d: tuple(_TOOLS.validate_python(d))))
            vocabularies = json_of(VOCABULARIES, {}, "vocabularies", Vocabularies.model_validate)
            records = {}
            for rel in sorted(manifest.files):
                if rel.startswith("records/") and rel.endswith(".json"):
                    view = json_of(rel, {}, "record", RecordView.model_validate)
                    records[view.name] = view
        except BundleError:
            raise
        except ValueError as e:
            raise BundleError(f"{root}: {e}") from e
        documents = {rel.removeprefix("documents/"): text_of(rel)
                     for rel in sorted(manifest.files) if rel.startswith("documents/")}
        cards = {rel.removeprefix("cards/").removesuffix(".md"): text_of(rel)
                 for rel in sorted(manifest.files) if rel.startswith("cards/")}
        return cls(root, manifest, steps, participants, policies, authorization, records,
                   documents, tools, cards, vocabularies)


@functools.lru_cache(maxsize=4096)
def _outside(rel: str) -> bool:
    """Whether a manifest's path leaves the bundle folder (the same few names in every
    bundle: decided once each)."""
    return ".." in Path(rel).parts or Path(rel).is_absolute()


#: bundle files parsed, by (what they were parsed as, sha256): frozen models, tuples of
#: them and strings, never changed by a reader; bounded
_PARSED: dict[tuple[str, str], Any] = {}
_PARSED_MAX = 4096
_PARTICIPANTS: TypeAdapter[list[Participant]] = TypeAdapter(list[Participant])
_POLICIES: TypeAdapter[list[PolicyCard]] = TypeAdapter(list[PolicyCard])
_TOOLS: TypeAdapter[list[ToolCard]] = TypeAdapter(list[ToolCard])
