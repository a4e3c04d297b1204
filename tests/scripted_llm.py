"""A scripted litellm provider for offline tests of every LLM path.

litellm looks a model's provider up in `litellm.custom_provider_map` on every
call, so a `CustomLLM` registered there under a made-up provider name (say
`pathscripted`) answers each `litellm.acompletion` the real code makes for
`pathscripted/<model>` — no network, no mock of our own code. `Scripted` answers
from a per-test script and records what it was sent, so a test can read exactly
what reached the model. One class for all the test modules; what only some of
them need (a queue of one-shot scripts, a script per model, a simulated delay,
a refusal for replays) is an option, not a copy.

    provider = scripted_provider("pathscripted")   # a fixture named `provider`

    def test_x(provider: Scripted) -> None:
        provider.script = lambda messages, params: respond("Nothing to share.")
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm import CustomLLM, ModelResponse

from eairdsl.agents.llm import LLMSettings

# A script answers one request: (messages, params) -> a ModelResponse, a str (sent as a
# plain text answer), or a coroutine giving either; it may raise a litellm error.
Script = Callable[..., Any]


def respond(content: str | None = None, calls: list[tuple[str, Any]] | None = None,
            tokens: tuple[int, int] = (100, 20)) -> ModelResponse:
    """A chat completion with optional tool calls.

    A call's arguments are data (sent as JSON) or a str (sent as it is, raw: how a test
    gives the model malformed JSON); `tokens` is the (prompt, completion) usage.
    """
    tool_calls = [{"id": f"provider-{i}", "type": "function",
                   "function": {"name": name,
                                "arguments": args if isinstance(args, str) else json.dumps(args)}}
                  for i, (name, args) in enumerate(calls or [])]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return ModelResponse(
        choices=[{"message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        usage={"prompt_tokens": tokens[0], "completion_tokens": tokens[1],
               "total_tokens": sum(tokens)})


def tool_names(params: dict[str, Any]) -> list[str]:
    """The names of the tools a request offers the model."""
    return [t["function"]["name"] for t in params.get("tools") or []]


def fast_settings(**kw: Any) -> LLMSettings:
    """Request settings for a scripted provider: a short timeout, no retry, and a backoff
    of milliseconds, so a failing script costs no real wait; `kw` overrides."""
    base: dict[str, Any] = {"timeout": 5.0, "retries": 0, "backoff_base": 0.001,
                            "backoff_max": 0.01}
    return LLMSettings(**(base | kw))


def read_then_report_clean(messages: list[dict[str, Any]],
                           params: dict[str, Any]) -> ModelResponse:
    """An LLM auditor's model: read the whole record once, then file a clean report."""
    if not any(m.get("role") == "tool" for m in messages):
        last = re.findall(r"steps, s\d{4} to (s\d{4})", messages[1]["content"])[0]
        return respond(calls=[("read", {"step": "s0001", "through": last})])
    return respond(calls=[("submit_report", {"verdict": "no_supported_problem",
                                             "findings": [], "leads": [],
                                             "out_of_catalogue": []})])


class Scripted(CustomLLM):
    """Answers each request from a script; records every request and counts the calls.

    Which script answers, first match wins: the head of `scripts` (a queue, each used
    once), then `by_model[name]` (name: the model's last path segment, so
    `studyscripted/flaky` is `flaky`), then `script`. A str answer becomes
    `respond(text, tokens=text_tokens)`.

    Options: `messages_only` calls scripts with the messages alone; `snapshot` records
    deep copies of the messages and params (what was sent, even if the caller later
    mutates its lists) rather than the objects themselves; `refuse` fails any call (a
    replay must not reach the model); `delay` sleeps that long in every call, tracking
    how many are `in_flight` and the `peak` of that.
    """

    def __init__(self, script: Script | None = None, *, scripts: list[Script] | None = None,
                 by_model: dict[str, Script] | None = None, messages_only: bool = False,
                 snapshot: bool = True, text_tokens: tuple[int, int] = (100, 20)) -> None:
        super().__init__()
        self.script = script
        self.scripts: list[Script] = list(scripts or [])
        self.by_model: dict[str, Script] = dict(by_model or {})
        self.messages_only = messages_only
        self.snapshot = snapshot
        self.text_tokens = text_tokens
        self.requests: list[dict[str, Any]] = []
        self.calls: Counter[str] = Counter()   # requests answered or failed, per model name
        self.failed: Counter[str] = Counter()  # requests whose script raised, per model name
        self.refuse = False
        self.delay = 0.0
        self.in_flight = self.peak = 0

    def _pick(self, name: str) -> Script:
        if self.scripts:
            return self.scripts.pop(0)
        chosen = self.by_model.get(name, self.script)
        assert chosen is not None, "the test set no script, or its queue of scripts is spent"
        return chosen

    async def acompletion(  # type: ignore[override]
            self, model: str, messages: list, api_base: str, custom_prompt_dict: dict,
            model_response: ModelResponse, print_verbose: Any, encoding: Any, api_key: Any,
            logging_obj: Any, optional_params: dict, *args: Any, **kwargs: Any) -> ModelResponse:
        assert not self.refuse, "a replay must not call the provider"
        if self.snapshot:
            self.requests.append({"model": model, "messages": copy.deepcopy(messages),
                                  "params": copy.deepcopy(optional_params)})
        else:
            self.requests.append({"model": model, "messages": messages,
                                  "params": optional_params})
        name = model.rsplit("/", 1)[-1]
        self.calls[name] += 1
        if self.delay:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            await asyncio.sleep(self.delay)
            self.in_flight -= 1
        script = self._pick(name)
        try:
            out = script(messages) if self.messages_only else script(messages, optional_params)
            if asyncio.iscoroutine(out):
                out = await out
        except Exception:
            self.failed[name] += 1
            raise
        return respond(out, tokens=self.text_tokens) if isinstance(out, str) else out


def register(provider_name: str, handler: Scripted | None = None, **options: Any) -> Scripted:
    """Install `handler` (a new `Scripted(**options)` by default) as `provider_name`,
    in place of any earlier entry of that name; other modules' providers stay."""
    handler = handler if handler is not None else Scripted(**options)
    unregister(provider_name)
    litellm.custom_provider_map = [*litellm.custom_provider_map,
                                   {"provider": provider_name, "custom_handler": handler}]
    return handler


def unregister(provider_name: str) -> None:
    """Remove `provider_name`: a request for it that reaches litellm now fails."""
    litellm.custom_provider_map = [p for p in litellm.custom_provider_map
                                   if p.get("provider") != provider_name]


@contextmanager
def installed(provider_name: str, handler: Scripted | None = None,
              **options: Any) -> Iterator[Scripted]:
    """`register` for the duration of a block; afterwards the map is as it was before."""
    before = list(litellm.custom_provider_map)
    try:
        yield register(provider_name, handler, **options)
    finally:
        litellm.custom_provider_map = before


def scripted_provider(provider_name: str, name: str = "provider", **options: Any) -> Any:
    """A function-scoped fixture (named `name`) giving each test a fresh `Scripted(**options)`
    installed as `provider_name`, removed again when the test ends."""
    @pytest.fixture(name=name)
    def fixture() -> Iterator[Scripted]:
        with installed(provider_name, **options) as handler:
            yield handler

    return fixture
