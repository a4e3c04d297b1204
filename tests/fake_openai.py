"""An OpenAI-compatible fake server on loopback for tests and benchmarks (stdlib only).

`FakeServer(latency)` answers `POST …/chat/completions` after `latency` seconds,
one thread per request, keep-alive, with a listen backlog a real server has.
It plays two scripted models that behave differently in D1:

* a model whose name ends in `steady` delegates to the specialist, which reads
  the record with its tool and answers, and the assistant relays it (4
  requests in a chain per episode);
* any other model answers at once in text, without a tool (1 request).

With `close=True` it closes every connection after its answer, as a server
without keep-alive does. It counts requests, the most in flight at once, and when the first arrived
(with the CPU a watched process had used by then, Linux /proc), so a benchmark
can tell start-up from concurrency. Used by benchmarks/llm_study.py and
tests/test_llm_transport.py; it never leaves 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time
from pathlib import Path
from typing import Any


def _results(messages: list[dict[str, Any]]) -> list[Any]:
    """The tool results of the task the model is handling now (after its last request)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "user"
              and str(m.get("content", "")).startswith(("Message from", "Request delegated"))]
    turn = messages[starts[-1]:] if starts else messages
    return [m.get("content") for m in turn if m.get("role") == "tool"]


def _steady(body: dict[str, Any]) -> tuple[str | None, list[tuple[str, dict[str, Any]]]]:
    """A careful assistant: delegate, read the record, relay it."""
    tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
    results = _results(body.get("messages") or [])
    if body.get("tool_choice") == "none":
        tools = {}
    if "delegate" in tools:
        if not results:
            return None, [("delegate", {"question": "How is the person in question doing?"})]
        return f"The specialist says: {results[-1]}", []
    read = next((name for name in tools if name.endswith("_read")), None)
    if read is None:
        return "Nothing to look up.", []
    if not results:
        hint = tools[read]["parameters"]["properties"]["id"].get("description", "")
        return None, [(read, {"id": hint.removeprefix("e.g. ") or "unknown"})]
    return f"Record: {results[-1]}", []


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """The answer, a function of the request alone (ids too: the same request, the same
    bytes, whatever else the server was asked meanwhile)."""
    model = str(body.get("model", ""))
    n = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
    if model.endswith("steady"):
        content, calls = _steady(body)
    else:
        content, calls = "I cannot look that up, sorry.", []
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"call_{n}_{i}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for i, (name, args) in enumerate(calls)]
    prompt = len(json.dumps(body.get("messages"))) // 4
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 20,
                      "total_tokens": prompt + 20}}


class FakeServer(http.server.ThreadingHTTPServer):
    """`/v1/chat/completions` answered after `latency` seconds, one thread per request."""

    daemon_threads = True
    allow_reuse_address = True
    #: a real server's listen backlog: with http.server's default of 5, connections
    #: opened at once beyond it wait for the client's SYN retransmit (1 s)
    request_queue_size = 1024

    def __init__(self, latency: float, close: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.latency = latency
        #: answer with `Connection: close` and close every connection (a server or
        #: proxy without keep-alive): each request then opens a new connection
        self.close = close
        self.lock = threading.Lock()
        self.reset()

    def reset(self, child: int | None = None, target: int = 0) -> None:
        with self.lock:
            self.child = child
            self.requests = 0
            self.in_flight = self.peak = 0
            self.first: float | None = None
            self.first_cpu: float | None = None
            #: when `in_flight` first reached `target` (the ramp-up's end)
            self.target = target
            self.full: float | None = None
            #: when the last answer was sent
            self.last: float | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])


def _cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of a live process and its live descendants (Linux
    /proc: the study's litellm transport process counts with it), or None."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stats[int(entry.name)] = (int(fields[1]),
                                  (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    if pid not in stats:
        return None
    tree, total, frontier = {pid}, 0.0, [pid]
    while frontier:
        parent = frontier.pop()
        total += stats[parent][1]
        for child, (ppid, _) in stats.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return total


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server
    # headers and body go out in two writes: with Nagle's algorithm the body waits for
    # the client's delayed ACK (40 ms a response on Linux), which no real server adds
    disable_nagle_algorithm = True
    server: FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        arrived = time.monotonic()
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        with srv.lock:
            srv.requests += 1
            srv.in_flight += 1
            srv.peak = max(srv.peak, srv.in_flight)
            if srv.full is None and srv.in_flight >= srv.target:
                srv.full = arrived
            if srv.first is None:
                srv.first = arrived
                srv.first_cpu = _cpu_of(srv.child) if srv.child else None
        try:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(raw or b"{}")
            time.sleep(srv.latency)
            self._send(200, _reply(body))
        finally:
            with srv.lock:
                srv.in_flight -= 1
                srv.last = time.monotonic()

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.server.close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)
