"""litellm at arm's length: loading it once, classifying its errors, reading its answers.

Both ways a request leaves the process use these: the in-process client
(`agents/llm.py`) and the transport's worker process (`agents/transport.py`), which
imports litellm itself and answers over a pipe. They lived in `llm.py`, so the
transport imported the client and the client the transport (an import cycle).

- `load_litellm` / `prefetch_litellm` / `litellm_ready`: one import per process, offline
  friendly (the bundled cost map), optionally started early on a thread;
- `_retryable`, `_describe`, `_retry_after`: what an exception means for a retry, and
  its one-line description for the episode's reason (never a traceback);
- `_normalise`: the parts of a litellm response an agent uses, as plain JSON data, with
  every lone surrogate replaced (`_clean_text`): model output is untrusted input.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import json
import os
import re
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = ["load_litellm", "prefetch_litellm", "litellm_ready"]

_RETRYABLE_STATUS = {408, 409, 425, 429}

_LITELLM: Any = None
_IMPORT_LOCK = threading.Lock()
_PREFETCH: threading.Thread | None = None


def load_litellm() -> Any:
    """Import litellm once, offline-friendly: the cost map is the bundled copy.

    Thread-safe: a call while `prefetch_litellm`'s thread imports waits for it.
    """
    global _LITELLM  # noqa: PLW0603 - one import per process
    if _LITELLM is None:
        with _IMPORT_LOCK:
            if _LITELLM is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                litellm.telemetry = False
                # litellm's modules make a heap that the interpreter's last garbage
                # collections walk at exit (0.7 s on this machine); frozen, they are
                # skipped. atexit handlers (litellm's own included) still run.
                atexit.register(gc.freeze)
                _LITELLM = litellm
    return _LITELLM


def prefetch_litellm() -> None:
    """Start importing litellm on a background thread (several seconds of CPU), so the
    first request of a run leaves sooner; `load_litellm` waits for it. Idempotent.

    Call it when a run with live LLM models begins (not for a replay, which never
    imports litellm). A process that forks afterwards calls `litellm_ready()`
    first: a fork in the middle of an import leaves the child's import locks held.
    """
    global _PREFETCH  # noqa: PLW0603 - one prefetch per process
    with _IMPORT_LOCK:
        if _LITELLM is not None or _PREFETCH is not None:
            return
        _PREFETCH = threading.Thread(target=_prefetch, name="eair-litellm-import",
                                     daemon=True)
        _PREFETCH.start()


def _prefetch() -> None:
    with contextlib.suppress(Exception):  # the first real call reports the failure
        load_litellm()


def litellm_ready(timeout: float | None = None) -> None:
    """Wait for a prefetch under way (no-op when none was started)."""
    thread = _PREFETCH
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    retryable = getattr(exc, "retryable", None)  # a TransportError: classified in the child
    if isinstance(retryable, bool):
        return retryable
    if "missing credentials" in str(exc).lower():  # some providers report it as a 500
        return False
    name = type(exc).__name__
    if name in ("Timeout", "APITimeoutError", "APIConnectionError", "RateLimitError",
                "ServiceUnavailableError", "InternalServerError", "BadGatewayError"):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in _RETRYABLE_STATUS or status >= 500)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "Timeout: no answer within the per-request timeout"
    described = getattr(exc, "description", None)  # a TransportError: described in the child
    if isinstance(described, str):
        return described
    text = " ".join(str(_clean_text(str(exc))).split())
    # litellm puts its own traceback in some messages ("Invalid response object
    # Traceback (most recent call last): File \"/…/site-packages/…"): a user reading the
    # episode's reason needs the first words, not our dependencies' file paths
    text, cut, _ = text.partition("Traceback (most recent call last)")
    text = text.rstrip(" :-") + (" (litellm's traceback omitted)" if cut else "")
    return f"{type(exc).__name__}: {text[:200]}"


def _retry_after(exc: BaseException) -> float | None:
    """The seconds a provider asked us to wait before retrying (`Retry-After`, in
    seconds or as an HTTP date, or `retry-after-ms`), or None when it said nothing.

    A 429 from OpenAI, Anthropic, Azure or a gateway usually says how long the rate
    window lasts; retrying sooner only burns an attempt on another 429.
    """
    value = getattr(exc, "retry_after", None)  # a TransportError: read in the child
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, float(value))
    response = getattr(exc, "response", None)
    for headers in (getattr(exc, "litellm_response_headers", None),
                    getattr(response, "headers", None), getattr(exc, "headers", None)):
        found = _retry_after_header(headers)
        if found is not None:
            return found
    return None


def _retry_after_header(headers: Any) -> float | None:
    if headers is None or not hasattr(headers, "get"):
        return None
    lowered: Any = headers
    if isinstance(headers, dict):  # httpx.Headers is case-insensitive, a dict is not
        lowered = {str(k).lower(): v for k, v in headers.items()}
    try:
        ms, seconds = lowered.get("retry-after-ms"), lowered.get("retry-after")
    except Exception:  # an exotic headers object: no advice
        return None
    for raw, scale in ((ms, 0.001), (seconds, 1.0)):
        if raw is None:
            continue
        try:
            return max(0.0, float(str(raw).strip()) * scale)
        except ValueError:
            pass
        try:  # an HTTP date: the wait is until then (wall clock; only a delay)
            return max(0.0, parsedate_to_datetime(str(raw)).timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            continue
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean_text(value: Any, depth: int = 0) -> Any:
    """`value` with every lone UTF-16 surrogate replaced by U+FFFD.

    A model (or a proxy) may send `"\\ud800"` in its JSON: Python decodes it to a
    str that cannot be encoded as UTF-8, so the trace, the cassette and the
    transport pipe could not be written. Model output is untrusted input.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if depth > 100:  # a hostile cassette's nesting: left as it is, not a RecursionError
        return value
    if isinstance(value, dict):
        return {_clean_text(k): _clean_text(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_text(v, depth + 1) for v in value]
    return value


def _normalise(raw: Any, model: str, litellm: Any) -> dict[str, Any]:
    """The parts of a litellm ModelResponse the agent uses, as plain JSON data."""
    choices = getattr(raw, "choices", None) or []
    message = choices[0].message if choices else None
    finish = getattr(choices[0], "finish_reason", None) if choices else None
    content = getattr(message, "content", None) if message is not None else None
    calls = []
    for tc in (getattr(message, "tool_calls", None) or []) if message is not None else []:
        fn = getattr(tc, "function", None)
        arguments = getattr(fn, "arguments", None)
        calls.append({"id": _clean_text(str(getattr(tc, "id", None) or "")),
                      "name": _clean_text(str(getattr(fn, "name", None) or "")),
                      "arguments": None if arguments is None else _clean_text(
                          arguments if isinstance(arguments, str) else _as_text(arguments))})
    usage = getattr(raw, "usage", None)
    tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
    tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
    hidden = getattr(raw, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if cost is None:
        try:
            p, c = litellm.cost_per_token(model=model, prompt_tokens=tokens_in,
                                          completion_tokens=tokens_out)
            cost = float(p) + float(c)
        except Exception:  # a model missing from the cost map costs 0
            cost = 0.0
    out: dict[str, Any] = {"content": _clean_text(content) if isinstance(content, str)
                           else None,
                           "tool_calls": calls,
                           "usage": {"tokens_in": tokens_in, "tokens_out": tokens_out},
                           "cost": round(float(cost or 0.0), 10)}
    if isinstance(finish, str) and finish:
        out["finish_reason"] = finish
    return out


def _as_text(value: Any) -> str:
    """Tool-call arguments a provider gave as data, as the JSON text others give."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)[:10_000]
        except RecursionError:
            return "<arguments nested too deep to show>"
