"""A loopback OpenAI-compatible server whose every answer is picked by the model's name.

`tests/test_llm_native.py` sends the same requests through litellm and through the
native client (`eairdsl.agents.openai_http`) to this server and compares what comes
back: the normalised answers, the error descriptions, the retry advice, and the
request bodies the server received (each request is recorded, so a test can check
that both clients sent the same JSON). Each scenario is one way a server can answer:
well-formed text and tool calls, the malformed answers a model gives, odd shapes
(reasoning tags, other finish reasons, no usage), and HTTP failures with and without
Retry-After. It never leaves 127.0.0.1 and stops with the test.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


def _message(content: Any = None, calls: list[tuple[str, Any]] | None = None,
             **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, **extra}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                  "function": {"name": name, "arguments": args}}
                                 for i, (name, args) in enumerate(calls)]
    return message


def _completion(body: dict[str, Any], message: dict[str, Any], finish: Any = "stop",
                usage: Any = "default", model: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                           "model": model if model is not None else body.get("model"),
                           "choices": [{"index": 0, "message": message,
                                        "finish_reason": finish}]}
    if usage == "default":
        out["usage"] = {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}
    elif usage is not None:
        out["usage"] = usage
    return out


#: scenario name -> (status, headers, body: JSON data, bytes, or a function of the request)
SCENARIOS: dict[str, Any] = {
    "text": lambda b: _completion(b, _message("Hello there.")),
    "tools": lambda b: _completion(b, _message(None, [("lookup", '{"id": "e-1"}'),
                                                      ("delegate", '{"q": "x"}')]),
                                   "tool_calls"),
    "tools-and-text": lambda b: _completion(b, _message("Let me check.",
                                                        [("lookup", '{"id": 5}')]), "stop"),
    "bad-json": lambda b: _completion(b, _message(None, [("lookup", '{"id": "e-1"')]),
                                      "tool_calls"),
    "empty": lambda b: _completion(b, _message("")),
    "null": lambda b: _completion(b, _message(None)),
    "surrogate": lambda b: b'{"id": "x", "object": "chat.completion", "created": 1, '
                           b'"model": "surrogate", "choices": [{"index": 0, "message": '
                           b'{"role": "assistant", "content": "bad \\ud800 text", '
                           b'"tool_calls": [{"id": "c\\udfff", "type": "function", '
                           b'"function": {"name": "lookup", "arguments": '
                           b'"{\\"id\\": \\"\\\\ud800\\"}"}}]}, "finish_reason": '
                           b'"tool_calls"}], "usage": {"prompt_tokens": 3, '
                           b'"completion_tokens": 4, "total_tokens": 7}}',
    "no-usage": lambda b: _completion(b, _message("No usage."), usage=None),
    "length": lambda b: _completion(b, _message("Cut off"), "length"),
    "eos": lambda b: _completion(b, _message("Done."), "eos"),
    "no-finish": lambda b: _completion(b, _message("Done."), None),
    "think": lambda b: _completion(b, _message("<think>hmm</think>The answer.")),
    "reasoning": lambda b: _completion(b, _message("The answer.", reasoning_content="hmm")),
    "refusal": lambda b: _completion(b, _message(None, refusal="I will not.")),
    "other-model": lambda b: _completion(b, _message("Hi."), model="gpt-4o-2024-08-06"),
    "gpt-4o-mini": lambda b: _completion(b, _message("Priced.")),
    "gpt-4o": lambda b: _completion(b, _message("Priced.", [("lookup", "{}")]), "tool_calls"),
    "gpt-3.5-turbo": lambda b: _completion(b, _message("Priced.")),
    "cached": lambda b: _completion(b, _message("Cached."), usage={
        "prompt_tokens": 2000, "completion_tokens": 10, "total_tokens": 2010,
        "prompt_tokens_details": {"cached_tokens": 1024}}),
    "no-choices": lambda b: {"id": "x", "object": "chat.completion", "created": 1,
                             "model": "m", "choices": []},
    "error-in-body": lambda b: {"error": {"message": "upstream failed", "code": 502}},
    "not-json": (200, {}, b"<html>gateway</html>"),
    "429": (429, {"Retry-After": "2"}, {"error": {"message": "Rate limit reached",
                                                   "type": "rate_limit"}}),
    "429-ms": (429, {"retry-after-ms": "1500"}, {"error": {"message": "slow down"}}),
    "429-bare": (429, {}, {"error": {"message": "Too many"}}),
    "500": (500, {}, {"error": {"message": "boom"}}),
    "502": (502, {}, b"Bad gateway"),
    "503": (503, {"Retry-After": "1"}, {"error": {"message": "overloaded"}}),
    "400": (400, {}, {"error": {"message": "bad request: context too long",
                                "type": "invalid_request_error"}}),
    "401": (401, {}, {"error": {"message": "Incorrect API key"}}),
    "404": (404, {}, {"error": {"message": "no such model"}}),
    "422": (422, {}, {"detail": "unprocessable"}),
    "400-context": (400, {}, {"error": {
        "message": "This model's maximum context length is 8192 tokens. However, your "
                   "messages resulted in 9000 tokens.", "code": "context_length_exceeded",
        "type": "invalid_request_error"}}),
    "400-policy": (400, {}, {"error": {"message": "Your request was rejected as a result of "
                                                  "our safety system. content_policy_violation",
                                       "code": "content_policy_violation"}}),
    "401-text": (401, {}, b"Unauthorized"),
    "403": (403, {}, {"error": {"message": "forbidden"}}),
    "408": (408, {}, {"error": {"message": "request timeout"}}),
    "409": (409, {}, {"error": {"message": "conflict"}}),
    "413": (413, {}, {"error": {"message": "too large"}}),
    "418": (418, {}, {"error": {"message": "teapot"}}),
    "504": (504, {}, {"error": {"message": "gateway timeout"}}),
    "529": (529, {}, {"error": {"message": "overloaded"}}),
    "500-text": (500, {}, b"Internal Server Error"),
    "500-str-error": (500, {}, {"error": "a plain string"}),
    "500-message": (500, {}, {"message": "top-level message"}),
    "500-empty": (500, {}, b""),
    "error-in-body-400": lambda b: {"error": {"message": "bad thing", "code": 400}},
    "error-in-body-str": lambda b: {"error": "went wrong"},
    "error-in-body-nocode": lambda b: {"error": {"message": "no code"}},
    "choices-not-list": lambda b: {"id": "x", "choices": None},
    "empty-tool-list": lambda b: _completion(b, _message("Fine.", tool_calls=[])),
    "dict-arguments": lambda b: _completion(b, {"role": "assistant", "content": None,
                                                "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "lookup",
                                                                             "arguments": {
                                                                                 "id": 1}}}]},
                                            "tool_calls"),
    "not-an-object": lambda b: [1, 2, 3],
    "chunked": lambda b: _completion(b, _message("Sent in chunks.", [("lookup", "{}")])),
    "until-close": lambda b: _completion(b, _message("Read to the end.")),
    # a server that refuses a parameter it does not know, naming it as FastAPI does, in
    # the error's message; without it the request goes through. litellm's drop_params
    # would resend without it on its OpenAI-SDK path, but `openai/` models with an
    # api_base fail at once (checked: one request reaches the server), and so does the
    # native client
    "422-seed": lambda b: (422, {}, {"error": {"message": json.dumps({"detail": [
        {"loc": ["body", "seed"], "msg": "extra fields not permitted",
         "type": "value_error.extra"}]})}}) if "seed" in b
    else _completion(b, _message("Answered without a seed.")),
    "422-always": lambda b: (422, {}, {"error": {"message": json.dumps({"detail": [
        {"loc": ["body", "seed"], "msg": "extra fields not permitted"}]})}}),
}


class ScenarioServer(http.server.ThreadingHTTPServer):
    """Answers `POST …/chat/completions` by the scenario named by the model; records bodies."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[dict[str, Any]] = []
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: ScenarioServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        with self.server.lock:
            self.server.bodies.append(body)
        name = str(body.get("model", ""))
        with self.server.lock:
            count = self.server.seen[name] = self.server.seen.get(name, 0) + 1
        if name.startswith("flaky"):  # every other request fails: 503, then an answer
            name = "503" if count % 2 else "text"
        scenario = SCENARIOS.get(name, SCENARIOS["text"])
        answer = scenario if isinstance(scenario, tuple) else scenario(body)
        status, headers, payload = answer if isinstance(answer, tuple) else (200, {}, answer)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for key, value in headers.items():
            self.send_header(key, value)
        if name.startswith("chunked"):  # the body in chunks of 7 bytes
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 7):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data[i:i + 7]), data[i:i + 7]))
            self.wfile.write(b"0\r\n\r\n")
            return
        if name.startswith("until-close"):  # no length: the body ends with the connection
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
