"""Audit findings as a backend's own annotations: Phoenix span annotations, Langfuse scores.

An OTLP file can carry a finding only as a span event (`gen_ai.evaluation.result`),
which Phoenix lists among a span's events but not as an annotation ("Annotations
0") and Langfuse does not score. Both take feedback through their REST APIs:

- Phoenix: `POST /v1/span_annotations` with `{"data": [SpanAnnotationData…]}`, each
  `{span_id, name, annotator_kind, result: {label, score, explanation}, metadata,
  identifier}` (`identifier` makes a re-export update the annotation, not add one);
- Langfuse: `POST /api/public/scores`, one score per request, `{id, traceId,
  observationId, name, value, dataType, comment, metadata}` (the `id` makes a
  re-export update the score).

The export's builder makes a `FindingNote` beside each evaluation event (the same
span, name, label and confidence); this module turns notes into those bodies and
posts them with the transport's retries. The note's ids are the export's ids, so
the annotation lands on the span the OTLP request created.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from eairdsl.external.otlp_transport import DEFAULT_POLICY, RetryPolicy, post

__all__ = ["BACKENDS", "FindingNote", "annotations_url", "langfuse_score", "phoenix_annotation",
           "send_annotations"]

#: the backends whose annotation API `send_annotations` speaks
BACKENDS = ("phoenix", "langfuse")
#: span annotations per Phoenix request
PHOENIX_BATCH = 100


class FindingNote(BaseModel):
    """One verdict or finding of an audit report, addressed to a span of the export."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace_id: str
    span_id: str
    #: the root span's: a verdict is about the whole episode
    trace_level: bool = False
    name: str
    label: str
    score: float | None = None
    explanation: str | None = None
    #: who judged: an LLM auditor, or code (the offline rules, the oracle)
    annotator: Literal["LLM", "CODE"] = "CODE"
    #: a stable key: the report and the finding it comes from
    identifier: str
    metadata: dict[str, Any] = {}


def phoenix_annotation(note: FindingNote) -> dict[str, Any]:
    """A Phoenix `SpanAnnotationData` for a note."""
    result: dict[str, Any] = {"label": note.label}
    if note.score is not None:
        result["score"] = note.score
    if note.explanation:
        result["explanation"] = note.explanation
    return {"span_id": note.span_id, "name": note.name, "annotator_kind": note.annotator,
            "result": result, "metadata": note.metadata, "identifier": note.identifier}


def _uuid_like(text: str) -> str:
    h = hashlib.sha256(text.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def langfuse_score(note: FindingNote) -> dict[str, Any]:
    """A Langfuse `CreateScoreRequest` for a note: a finding's confidence as a NUMERIC
    score on its span (the label in the comment's first words and the metadata), a
    verdict as a CATEGORICAL score on the trace."""
    body: dict[str, Any] = {"id": _uuid_like(note.identifier), "traceId": note.trace_id,
                            "name": note.name, "metadata": {**note.metadata,
                                                            "label": note.label}}
    if note.trace_level or note.score is None:
        body.update(value=note.label, dataType="CATEGORICAL")
    else:
        body.update(value=note.score, dataType="NUMERIC")
    if not note.trace_level:
        body["observationId"] = note.span_id
    comment = f"{note.label}: {note.explanation}" if note.explanation else note.label
    body["comment"] = comment
    return body


def annotations_url(backend: str, endpoint: str) -> str:
    """The annotation API's URL for a backend, from its base or its OTLP endpoint:
    Phoenix's `http://host:6006[/v1/traces]` -> `http://host:6006/v1/span_annotations`;
    Langfuse's `https://host[/api/public/otel[/v1/traces]]` -> `https://host/api/public/
    scores`."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{endpoint!r} is not an http:// or https:// URL")
    path = parts.path.rstrip("/").removesuffix("/v1/traces")
    if backend == "phoenix":
        path += "/v1/span_annotations"
    elif backend == "langfuse":
        path = path.removesuffix("/api/public/otel").removesuffix("/api/public")
        path += "/api/public/scores"
    else:
        raise ValueError(f"unknown annotation backend {backend!r}; use one of "
                         f"{', '.join(BACKENDS)}")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _chunks(items: Sequence[Any], n: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def send_annotations(backend: str, url: str, notes: Sequence[FindingNote],
                     headers: Mapping[str, str], policy: RetryPolicy = DEFAULT_POLICY, *,
                     sleep: Callable[[float], None] | None = None) -> int:
    """POST every note to the backend's annotation API; the requests made. Phoenix takes
    them a hundred at a time, Langfuse one score per request."""
    extra: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    requests = 0
    if backend == "phoenix":
        for chunk in _chunks(list(notes), PHOENIX_BATCH):
            body = {"data": [phoenix_annotation(n) for n in chunk]}
            post(url, json.dumps(body, sort_keys=True).encode(), "application/json", headers,
                 policy, **extra)
            requests += 1
    elif backend == "langfuse":
        for note in notes:
            post(url, json.dumps(langfuse_score(note), sort_keys=True).encode(),
                 "application/json", headers, policy, **extra)
            requests += 1
    else:
        raise ValueError(f"unknown annotation backend {backend!r}")
    return requests
