"""OpenAI-compatible chat completions over httpx, without importing litellm.

Why: litellm's import costs about 5 s of CPU before the first request of a run,
and each `litellm.acompletion` about 5 ms of CPU on the episodes' event loop
(request transformation, response objects, logging, cost), which paces a study
at 32 or 64 requests in flight. `openai/...` models against an OpenAI-compatible
endpoint (llama.cpp, vLLM, a gateway, or OpenAI itself) need none of it: one
POST of the request's JSON, one JSON answer.

What it must keep: the answer an agent gets is *exactly* the one the litellm path
gives (`provider._normalise` of litellm's response), so traces and cassettes do
not depend on which path carried a call; errors are classified and described as
litellm describes them; Retry-After is read the same way. It does so by
construction for the answers it understands and by handing everything else to
litellm:

- `route` says whether a model goes this way: an `openai/` model, an API key
  (litellm refuses to start without one, and so the litellm path keeps doing),
  no option litellm alone understands (`mock_response`, ...), not a reasoning
  model whose parameters litellm rewrites, and `EAIR_LLM_LITELLM` unset (the
  escape hatch: every model through litellm);
- `request_body` is the JSON litellm sends for our requests (it drops an
  assistant message's null `content`; the rest as we built it);
- `plain` normalises the answers whose shape it fully knows (a choice with
  string or null content, well-formed function tool calls, an OpenAI finish
  reason, integer usage). Anything else — reasoning tags, other finish reasons,
  an `error` object in a 200, no choices — returns None and the caller asks
  litellm to convert that very JSON (`litellm_normalise`), importing it then;
- the cost is 0 for a model the bundled cost map does not price (litellm's own
  answer: such a model costs 0), read from litellm's bundled
  `model_prices_and_context_window_backup.json` without importing litellm; a
  priced model's cost comes from `litellm.completion_cost`, as on the litellm
  path (pricing has tiers, caches and regions that only litellm should know);
- an HTTP error becomes an exception named and worded as litellm's
  (`RateLimitError: litellm.RateLimitError: RateLimitError: OpenAIException -
  Rate limit reached`) with the status and headers, so `provider._retryable`,
  `_describe` and `_retry_after` treat it exactly as before. The statuses litellm
  names by status alone (429, 5xx, 408, 401, 404, a dropped connection) are named
  here; a final failure whose name litellm reads from its message (a 400 may be a
  context window exceeded or a content policy violation) is named by litellm's
  own mapping (`litellm_error`), importing it then.

Connections: pooled per event loop and endpoint, keep-alive, HTTP/1.1, at most the
per-provider cap (`max_connections`) open, through the small client `http1` (about
a tenth of httpx's CPU per request), or through one `httpx.AsyncClient` per
endpoint where the environment sets a proxy for it. A server that closes every
connection costs a new connection per request and nothing else.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_BASE", "LITELLM_ENV", "NativeError", "Route", "cost", "forced_litellm",
           "litellm_error", "litellm_normalise", "needs_litellm_cost", "plain", "post",
           "request_body", "route", "uses_litellm", "warm_prices"]

#: Set to 1 (or true/yes): every model goes through litellm, this client is never used.
LITELLM_ENV = "EAIR_LLM_LITELLM"
DEFAULT_BASE = "https://api.openai.com/v1"
#: completion_kwargs this client understands; any other key is litellm's business
_KWARGS = frozenset({"api_key", "api_base"})
#: models whose parameters litellm rewrites (max_completion_tokens, no temperature)
_REASONING = re.compile(r"^(o\d|gpt-5|codex)", re.IGNORECASE)
_FINISH = frozenset({"stop", "length", "tool_calls", "function_call", "content_filter"})
_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens",
                         "prompt_tokens_details", "completion_tokens_details"})


def forced_litellm() -> bool:
    """Whether the escape hatch sends every model through litellm."""
    return os.environ.get(LITELLM_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Route:
    """Where and how an `openai/...` request goes without litellm."""

    #: the model name the endpoint knows (the model string without `openai/`)
    name: str
    url: str
    headers: tuple[tuple[str, str], ...]
    #: a proxy applies (the environment's): httpx carries the request
    proxied: bool = False


def route(model: str, api_base: str | None,
          completion_kwargs: dict[str, Any]) -> Route | None:
    """The native route of `model`, or None when litellm must carry it."""
    if forced_litellm() or not model.startswith("openai/"):
        return None
    name = model[len("openai/"):]
    if not name or _REASONING.match(name) or set(completion_kwargs) - _KWARGS:
        return None
    configured = sys.modules.get("litellm")
    if configured is not None and any(getattr(configured, attr, None) for attr in (
            "api_base", "api_key", "openai_key", "headers")):
        return None  # a library user configured litellm globally: it answers as configured
    key = completion_kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY")
    if not key or not isinstance(key, str):
        return None  # litellm reports the missing key, as it always did
    base = (completion_kwargs.get("api_base") or api_base or os.environ.get("OPENAI_BASE_URL")
            or os.environ.get("OPENAI_API_BASE") or DEFAULT_BASE)
    headers = [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json"),
               ("Accept", "application/json")]
    if os.environ.get("OPENAI_ORGANIZATION"):
        headers.append(("OpenAI-Organization", os.environ["OPENAI_ORGANIZATION"]))
    url = f"{str(base).rstrip('/')}/chat/completions"
    return Route(name, url, tuple(headers), _proxied(url))


def uses_litellm(models: list[str], api_base: str | None,
                 completion_kwargs: dict[str, Any]) -> bool:
    """Whether any of a run's models goes through litellm (so it is worth importing early)."""
    return any(route(m, api_base, completion_kwargs) is None for m in models if m)


# ---------------------------------------------------------------- the request
def request_body(request: dict[str, Any], name: str) -> dict[str, Any]:
    """The JSON litellm sends for our canonical request: the same keys, the endpoint's
    model name, and no `content: null` beside an assistant message's tool calls."""
    body = {k: v for k, v in request.items() if k != "model"}
    body["model"] = name
    messages = request.get("messages") or []
    if any(m.get("content", "") is None for m in messages):
        body["messages"] = [{k: v for k, v in m.items() if not (k == "content" and v is None)}
                            for m in messages]
    return body


# ---------------------------------------------------------------- errors
class NativeError(Exception):
    """An HTTP failure, as litellm would have raised it (see `_error`)."""

    def __init__(self, message: str, status_code: int, headers: Any = None,
                 text: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.headers = headers
        #: what the server said (the error body's message)
        self.text = text

    @property
    def litellm_words(self) -> bool:
        """Whether litellm should name this failure: a final one (400, 403, 422, ...),
        whose wording litellm reads from the message (a context window exceeded, a
        content policy violation). Retryable statuses and 401/404 are named here: they
        are frequent, and litellm names them by status alone."""
        return self.status_code not in _OWN_WORDS


#: status -> (litellm's exception name, how its message reads): measured against litellm
_BY_STATUS: dict[int, tuple[str, str]] = {
    400: ("BadRequestError", "litellm.BadRequestError: OpenAIException - {}"),
    422: ("BadRequestError", "litellm.BadRequestError: OpenAIException - {}"),
    401: ("AuthenticationError",
          "litellm.AuthenticationError: AuthenticationError: OpenAIException - {}"),
    404: ("NotFoundError", "litellm.NotFoundError: NotFoundError: OpenAIException - {}"),
    408: ("Timeout", "litellm.Timeout: Timeout Error: OpenAIException - {}"),
    504: ("Timeout", "litellm.Timeout: Timeout Error: OpenAIException - {}"),
    429: ("RateLimitError", "litellm.RateLimitError: RateLimitError: OpenAIException - {}"),
    500: ("InternalServerError",
          "litellm.InternalServerError: InternalServerError: OpenAIException - {}"),
    502: ("BadGatewayError", "litellm.BadGatewayError: BadGatewayError: OpenAIException - {}"),
    503: ("ServiceUnavailableError",
          "litellm.ServiceUnavailableError: ServiceUnavailableError: OpenAIException - {}"),
}
_OTHER = ("APIError", "litellm.APIError: APIError: OpenAIException - {}")
#: statuses whose exception litellm names by the status alone (measured)
_OWN_WORDS = frozenset({0, 401, 404, 408, 429, 500, 502, 503, 504})
_CLASSES: dict[str, type[NativeError]] = {}


def _error(status: int, text: str, headers: Any = None) -> NativeError:
    """The exception litellm raises for `status` with `text`, named as litellm names it
    (`_retryable` reads the name, `_describe` prints it)."""
    name, template = _BY_STATUS.get(status, _OTHER)
    cls = _CLASSES.get(name)
    if cls is None:
        cls = _CLASSES[name] = type(name, (NativeError,), {"__module__": __name__})
    return cls(template.format(text), status, headers, text)


def _error_text(status: int, raw: bytes) -> str:
    """What litellm quotes of an error body: its `error.message` (or top-level `message`),
    else `Error code: N`."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        body = None
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return f"Error code: {status}"


# ---------------------------------------------------------------- connections
#: the attribute under which an event loop keeps its httpx clients (proxied endpoints)
_ATTRIBUTE = "_eair_httpx_clients"


def _proxied(url: str) -> bool:
    """Whether the environment sends `url` through a proxy (HTTPS_PROXY, NO_PROXY, ...):
    httpx then carries it; otherwise the small client (`http1`) does."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    bypass: Any = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009 - untyped
    return not bypass(parts.netloc, proxies)


async def _httpx_client(url: str, limit: int) -> Any:
    """This event loop's httpx client for the endpoint: held by the loop (not a module
    table that would keep loops alive) and closed as `asyncio.run` shuts it down, by an
    async generator suspended meanwhile (as `http1` closes its pools)."""
    import httpx

    loop = asyncio.get_running_loop()
    table: dict[Any, Any] | None = getattr(loop, _ATTRIBUTE, None)
    if table is None:
        table = {}
        setattr(loop, _ATTRIBUTE, table)
        closer = table["closer"] = _close_clients(table)
        await closer.__anext__()
    key = (url.rsplit("/chat/completions", 1)[0], limit)
    client = table.get(key)
    if client is None:
        client = table[key] = httpx.AsyncClient(
            http1=True, http2=False, timeout=None, follow_redirects=False,
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit,
                                keepalive_expiry=30.0))
    return client


async def _close_clients(table: dict[Any, Any]) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        for key, client in list(table.items()):
            if key != "closer":
                await client.aclose()


async def post(target: Route, request: dict[str, Any], limit: int) -> Any:
    """Send one request; the answer's JSON (any JSON value), or raise as litellm would.

    No timeout here: the caller's `asyncio.wait_for` bounds the attempt (as it bounds
    litellm's), so a slow answer fails the same way on both paths. Connections are
    pooled per event loop and endpoint, `limit` of them kept alive (the per-provider
    cap: never more are in flight).
    """
    data = json.dumps(request_body(request, target.name)).encode("ascii")
    if target.proxied:
        status, headers, raw = await _via_httpx(target, data, limit)
    else:
        from eairdsl.agents import http1

        try:
            answer = await http1.post(target.url, target.headers, data, limit)
        except ConnectionError as exc:  # refused, reset, closed mid-answer: retryable
            raise _error(500, "Connection error.") from exc
        status, headers, raw = answer.status, answer.headers, answer.body
    if status >= 400:
        raise _error(status, _error_text(status, raw), headers)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # litellm: the SDK's `response.json()` failed; it reports the parser's words
        raise _error(500, str(exc) if isinstance(exc, ValueError) else "invalid JSON",
                     headers) from None


async def _via_httpx(target: Route, data: bytes, limit: int) -> tuple[int, Any, bytes]:
    import httpx

    try:
        response = await (await _httpx_client(target.url, limit)).post(
            target.url, content=data, headers=dict(target.headers))
    except httpx.HTTPError as exc:  # refused, reset, closed mid-answer: retryable
        raise _error(500, "Connection error.") from exc
    return response.status_code, response.headers, response.content


# ---------------------------------------------------------------- the answer
def plain(data: Any) -> dict[str, Any] | None:
    """`provider._normalise` of litellm's response to `data`, for the answers whose shape
    this module fully knows, without the cost (see `cost`); None for any other, which
    litellm then converts (`litellm_normalise`)."""
    from eairdsl.agents.provider import _clean_text

    if not isinstance(data, dict) or data.get("error") is not None:
        return None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict) or "reasoning_content" in message \
            or "reasoning" in message or "thinking_blocks" in message:
        return None
    content = message.get("content")
    if content is not None and (not isinstance(content, str) or content.startswith("<")):
        return None  # a list of parts, or <think> tags litellm would take out
    calls: list[dict[str, Any]] = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or tc.get("type", "function") != "function" \
                or not isinstance(tc.get("id"), str) or not tc["id"] \
                or not isinstance(fn.get("name"), str) \
                or fn["name"] == "multi_tool_use.parallel" \
                or not isinstance(fn.get("arguments"), str):
            return None
        calls.append({"id": _clean_text(tc["id"]), "name": _clean_text(fn["name"]),
                      "arguments": _clean_text(fn["arguments"])})
    if message.get("tool_calls") is not None and not isinstance(message["tool_calls"], list):
        return None
    finish = choice.get("finish_reason")
    if finish is None:
        finish = "stop"
    if finish not in _FINISH:
        return None  # litellm maps other providers' words (eos, end_turn, ...)
    if finish == "stop" and calls:
        finish = "tool_calls"
    usage = data.get("usage")
    tokens_in = tokens_out = 0
    if usage is not None:
        if not isinstance(usage, dict) or set(usage) - _USAGE_KEYS:
            return None
        given = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not all(type(t) is int and t >= 0 for t in given):
            return None
        tokens_in, tokens_out = int(given[0] or 0), int(given[1] or 0)
    return {"content": _clean_text(content) if isinstance(content, str) else None,
            "tool_calls": calls, "usage": {"tokens_in": tokens_in, "tokens_out": tokens_out},
            "cost": 0.0, "finish_reason": finish}


def litellm_normalise(data: Any, model: str, litellm: Any) -> dict[str, Any]:
    """An answer `plain` does not know, converted by litellm as its OpenAI path converts
    it (its errors raised as that path raises them)."""
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type
    from litellm.litellm_core_utils.llm_response_utils.convert_dict_to_response import (
        convert_to_model_response_object,
    )
    from litellm.llms.openai.common_utils import OpenAIError

    from eairdsl.agents.provider import _normalise

    try:
        if not isinstance(data, dict):  # litellm's words for it
            raise ValueError(f"Empty or invalid response from LLM endpoint. Received: {data}. "
                             "Check the reverse proxy or model server configuration.")
        raw = convert_to_model_response_object(
            response_object=data, model_response_object=litellm.ModelResponse(),
            hidden_params={"headers": {}}, _response_headers={})
    except Exception as exc:
        error = OpenAIError(status_code=getattr(exc, "status_code", 500),
                            message=getattr(exc, "message", str(exc)))
        raise exception_type(  # type: ignore[no-untyped-call]
            model=model.split("/", 1)[1], custom_llm_provider="openai",
            original_exception=error) from None
    out = _normalise(raw, model, litellm)
    out["cost"] = _litellm_cost(raw, model, litellm)
    return out


def litellm_error(error: NativeError, model: str, litellm: Any) -> Exception:
    """The exception litellm's OpenAI path raises for this HTTP failure (its own mapping
    of status and message: `ContextWindowExceededError`, `ContentPolicyViolationError`,
    ...)."""
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type
    from litellm.llms.openai.common_utils import OpenAIError

    original = OpenAIError(status_code=error.status_code, message=error.text,
                           headers=error.headers)
    try:
        exception_type(  # type: ignore[no-untyped-call]
            model=model.split("/", 1)[1], custom_llm_provider="openai",
            original_exception=original)
    except Exception as mapped:
        return mapped
    return error  # pragma: no cover - exception_type always raises


def _litellm_cost(raw: Any, model: str, litellm: Any) -> float:
    try:
        return round(float(litellm.completion_cost(completion_response=raw, model=model,
                                                   custom_llm_provider="openai") or 0.0), 10)
    except Exception:  # a model missing from the cost map costs 0
        return 0.0


def needs_litellm_cost(data: dict[str, Any], model: str) -> bool:
    """Whether the answer's cost is litellm's to compute: the request's or the answer's
    model is priced in the cost map (or the map is not the bundled one). Otherwise it
    costs 0, as litellm says of a model it cannot price."""
    if "litellm" in sys.modules or os.environ.get(
            "LITELLM_LOCAL_MODEL_COST_MAP", "True").strip().lower() != "true":
        return True  # litellm's map is in use (prices registered, or fetched): ask it
    prices = _prices()
    names = [model.split("/", 1)[1]]
    if isinstance(data.get("model"), str) and data["model"]:
        names.append(data["model"])
    return any(n in prices or f"openai/{n}" in prices for n in names)


def cost(data: dict[str, Any], model: str, litellm: Any) -> float:
    """A priced answer's cost, as litellm computes it on its OpenAI path."""
    from litellm.litellm_core_utils.llm_response_utils.convert_dict_to_response import (
        convert_to_model_response_object,
    )

    raw = convert_to_model_response_object(
        response_object=data, model_response_object=litellm.ModelResponse(),
        hidden_params={"headers": {}}, _response_headers={})
    return _litellm_cost(raw, model, litellm)


_PRICES: frozenset[str] | None = None
_PRICES_LOCK = threading.Lock()


def warm_prices() -> None:
    """Read the cost map's names on a thread now (about 0.1 s of CPU), so the first answer
    does not wait for them on the event loop; a no-op once read or under way."""
    if _PRICES is None and not _PRICES_LOCK.locked():
        threading.Thread(target=_prices, name="eair-cost-map", daemon=True).start()


def _prices() -> frozenset[str]:
    """The model names litellm's bundled cost map prices, read from the installed
    package's JSON without importing litellm (once per process, about 0.1 s)."""
    global _PRICES  # noqa: PLW0603 - read once per process
    with _PRICES_LOCK:
        if _PRICES is None:
            names: frozenset[str] = frozenset()
            spec = importlib.util.find_spec("litellm")
            for folder in (spec.submodule_search_locations or []) if spec else []:
                path = Path(folder) / "model_prices_and_context_window_backup.json"
                if path.is_file():
                    table = json.loads(path.read_text(encoding="utf-8"))
                    names = frozenset(k for k, v in table.items() if isinstance(v, dict)
                                      and _prices_anything(v))
                    break
            _PRICES = names
        return _PRICES


def _prices_anything(entry: dict[str, Any]) -> bool:
    return any(isinstance(v, (int, float)) and v > 0 for k, v in entry.items()
               if "cost" in k)
