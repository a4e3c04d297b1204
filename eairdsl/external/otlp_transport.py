"""OTLP on the wire: protobuf requests, their file framing and OTLP/HTTP with retries.

The export builds each `ExportTraceServiceRequest` as its OTLP JSON mapping (what
the `otlp-json` and `jsonl` files hold). Backends that take only protobuf on
`/v1/traces` (Arize Phoenix; Langfuse takes both) need the binary encoding, and
OTLP JSON differs from protobuf's canonical JSON in one place: trace and span ids
are hex in OTLP JSON but base64 `bytes` to protobuf's JSON parser, which would
read a 32-digit hex id as 24 bytes. `to_protobuf` converts the ids to their 16
and 8 raw bytes first, then lets `opentelemetry-proto` encode the request.

`opentelemetry-proto` (the OpenTelemetry project's generated message classes, on
`protobuf`) is imported only here and only when a protobuf format is asked for:
the JSON formats and the rest of the package do not need it (`pip install
'eairdsl[otel]'`).

POSTs go through `post`: stdlib `urllib.request` (no extra client), a bounded
number of attempts with exponential backoff on 429 and 5xx (and on a connection
that failed), honouring `Retry-After` up to the backoff ceiling, and a total time
budget; a request that still fails raises `TransportError` naming the endpoint
and the status.
"""

from __future__ import annotations

import base64
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol


class OtlpBatch(Protocol):
    """What a sink here reads of a batch (`otel.OtlpBatch`): its request in the JSON mapping.
    A protocol, not an import: `otel` builds batches and imports this module to send them."""

    @property
    def request(self) -> dict[str, Any]: ...

__all__ = ["DEFAULT_POLICY", "HttpSink", "ProtobufFileSink", "RetryPolicy", "TransportError",
           "env_headers", "post", "read_delimited", "to_protobuf", "traces_url"]

PROTOBUF = "application/x-protobuf"
#: statuses worth another attempt: rate limiting and the server's transient failures
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class TransportError(RuntimeError):
    """A request a backend did not take: endpoint, status and the server's words."""


def _proto() -> Any:
    """The ExportTraceServiceRequest class and protobuf's json_format, imported lazily."""
    try:
        from google.protobuf import json_format  # type: ignore[import-untyped]
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError:
        raise TransportError("the protobuf formats need opentelemetry-proto: "
                             "pip install 'eairdsl[otel]'") from None
    return trace_service_pb2.ExportTraceServiceRequest, json_format


def _b64(hex_id: Any) -> Any:
    """A hex id of OTLP JSON as the base64 text protobuf's JSON parser reads as bytes."""
    if isinstance(hex_id, str) and hex_id:
        return base64.b64encode(bytes.fromhex(hex_id)).decode("ascii")
    return hex_id


def _proto_json(request: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an OTLP JSON request with every id base64 (the rest is shared, unchanged)."""
    out: list[dict[str, Any]] = []
    for rs in request.get("resourceSpans", []):
        scopes = []
        for ss in rs.get("scopeSpans", []):
            spans = []
            for original in ss.get("spans", []):
                sp = dict(original)
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = _b64(sp[key])
                if "links" in sp:
                    sp["links"] = [{**lk, "traceId": _b64(lk.get("traceId")),
                                    "spanId": _b64(lk.get("spanId"))} for lk in sp["links"]]
                spans.append(sp)
            scopes.append({**ss, "spans": spans})
        out.append({**rs, "scopeSpans": scopes})
    return {"resourceSpans": out}


def to_protobuf(request: Mapping[str, Any]) -> bytes:
    """The binary `ExportTraceServiceRequest` of an OTLP JSON request (ids as raw bytes).
    Deterministic serialization: the same request gives the same bytes."""
    cls, json_format = _proto()
    message = cls()
    json_format.ParseDict(_proto_json(request), message)
    data: bytes = message.SerializeToString(deterministic=True)
    return data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_delimited(data: bytes) -> list[bytes]:
    """The messages of an `otlp-proto` file: each prefixed by its length as a varint (the
    framing of protobuf's `writeDelimitedTo` / `parseDelimitedFrom`)."""
    out, i = [], 0
    while i < len(data):
        shift = size = 0
        while True:
            if i >= len(data):
                raise ValueError("truncated length prefix")
            byte = data[i]
            i += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if i + size > len(data):
            raise ValueError("truncated message")
        out.append(data[i:i + size])
        i += size
    return out


class ProtobufFileSink:
    """The `otlp-proto` format: one binary ExportTraceServiceRequest per batch, each
    length-delimited (a varint of its size, then the message), so a reader takes a
    request at a time (`read_delimited`)."""

    def __init__(self, out: BinaryIO) -> None:
        _proto()  # a missing dependency stops the export before anything is written
        self.out = out

    def send(self, batch: OtlpBatch) -> None:
        body = to_protobuf(batch.request)
        self.out.write(_varint(len(body)) + body)

    def close(self) -> None:
        pass


# ------------------------------------------------------------------ HTTP
def env_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Request headers from the OpenTelemetry exporter variables: `OTEL_EXPORTER_OTLP_HEADERS`
    then `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (which wins), each `key=value,key=value` with
    URL-encoded values — how Langfuse's `Authorization=Basic%20…` is passed, kept off the
    command line."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for item in env.get(name, "").split(","):
            key, sep, value = item.partition("=")
            if sep and key.strip():
                out[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return out


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of `--endpoint`: as given when it ends in `/v1/traces`
    (Langfuse's `…/api/public/otel/v1/traces`), else with `/v1/traces` appended (a base
    such as Phoenix's `http://127.0.0.1:6006`). Not http(s): ValueError."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--endpoint {endpoint!r} is not an http:// or https:// URL")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/traces"):
        path += "/v1/traces"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a POST tries: `attempts` at most, waiting `base`·2ⁿ seconds (at most
    `ceiling`, or what `Retry-After` asks up to the ceiling) between them, and never
    more than `budget` seconds of waiting in all."""

    attempts: int = 5
    base: float = 0.5
    ceiling: float = 10.0
    budget: float = 30.0
    timeout: float = 30.0


#: the default policy (a module-level value: a call in a default argument is evaluated once
#: anyway, and the policy is frozen)
DEFAULT_POLICY = RetryPolicy()


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def post(url: str, body: bytes, content_type: str, headers: Mapping[str, str],
         policy: RetryPolicy = DEFAULT_POLICY, *,
         sleep: Callable[[float], None] = time.sleep) -> int:
    """POST `body`; the final HTTP status (2xx). 429/5xx and connection failures are
    retried within `policy`; other statuses fail at once. TransportError names the
    endpoint, the status (or the connection error) and the attempts made."""
    waited = 0.0
    last = ""
    for attempt in range(1, max(1, policy.attempts) + 1):
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={**headers, "Content-Type": content_type})
        asked: float | None = None
        try:
            with urllib.request.urlopen(req, timeout=policy.timeout) as resp:
                status: int = resp.status
                return status
        except urllib.error.HTTPError as exc:
            said = exc.read(300).decode("utf-8", "replace").strip()
            last = f"HTTP {exc.code}" + (f" ({said})" if said else "")
            if exc.code not in RETRY_STATUSES:
                raise TransportError(f"POST {url}: {last}") from None
            asked = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = f"no response ({reason})"
        delay = min(policy.ceiling, policy.base * 2 ** (attempt - 1))
        if asked is not None:
            delay = min(policy.ceiling, max(delay, asked))
        if attempt >= policy.attempts or waited + delay > policy.budget:
            break
        sleep(delay)
        waited += delay
    raise TransportError(f"POST {url}: {last} after {attempt} attempt(s)")


@dataclass
class HttpSink:
    """OTLP/HTTP: each batch POSTed as a binary ExportTraceServiceRequest to `url`
    (`Content-Type: application/x-protobuf`), retried per `policy`."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    #: requests the endpoint took
    sent: int = 0

    def __post_init__(self) -> None:
        _proto()

    def send(self, batch: OtlpBatch) -> None:
        post(self.url, to_protobuf(batch.request), PROTOBUF, self.headers, self.policy,
             sleep=self.sleep)
        self.sent += 1

    def close(self) -> None:
        pass
