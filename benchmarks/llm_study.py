"""Does `eairc study` keep LLM episodes concurrent through the real litellm path?

FIGURES (filled in below)

What it does. An OpenAI-compatible fake server on loopback (stdlib
`ThreadingHTTPServer`, `/v1/chat/completions`, a fixed injected latency per
request) plays two "models" that behave differently:

* `steady` delegates to the specialist, which reads the record with its tool
  and answers, and the assistant relays it: 4 requests in a chain per episode;
* `terse` answers at once without a tool: 1 request per episode.

For each concurrency N the script starts `eairc study worlds/d1.eair --models
steady=openai/steady,terse=openai/terse --api-base http://127.0.0.1:PORT/v1
--max-connections N` as a fresh process (a dummy API key, LITELLM_OFFLINE_MODE
and LITELLM_LOCAL_MODEL_COST_MAP set) into a fresh study folder, half the
episodes per model (condition canonical, one instance per seed), and prints:

* wall: the study process's lifetime, from its start to its exit;
* ideal: max(⌈requests / N⌉, the longest chain of one episode) × latency:
  every request takes `latency` s at the server, at most N are in flight,
  and one episode's requests come one after another;
* of ideal: ideal / (wall − start), where start is the time from the
  process's start to the first request the server receives (the import and
  setup, shown in its own column, not charged to concurrency);
* first req: that time, process start → first request at the server;
* cpu/call: the study process's CPU (user + system) after the first request,
  divided by the requests answered: what one LLM call costs on the client,
  litellm, the episode's simulation, the trace and the store together;
* ramp: from the first request until min(N, episodes) were in flight at once;
* tail: from the last answer to the process's exit (closing the store, the
  cassettes, the summary);
* peak: the most requests the server had in flight at once (the real
  concurrency: `--max-connections` bounds requests per provider, and both
  models share one provider and endpoint).

    python benchmarks/llm_study.py                    # 200 episodes, 1 s, N = 1, 8, 32, 64
    python benchmarks/llm_study.py --episodes 20 --latency 0.2 --concurrency 1,8   # smoke

The machine has 2 cores shared with other work: CPU-bound figures move with
the load. No network beyond loopback; the server stops with the script.
"""

from __future__ import annotations

import argparse
import http.server
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = "steady=openai/steady,terse=openai/terse"
#: how long one study may take before the benchmark gives up on it
STUDY_TIMEOUT = 3600.0


# ---------------------------------------------------------------- the fake server
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


def _reply(body: dict[str, Any], n: int) -> dict[str, Any]:
    model = str(body.get("model", ""))
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

    def __init__(self, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.latency = latency
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
    """User + system CPU seconds of a live process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server
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
            n = srv.requests
            srv.in_flight += 1
            srv.peak = max(srv.peak, srv.in_flight)
            if srv.full is None and srv.in_flight >= srv.target:
                srv.full = arrived
            if srv.first is None:
                srv.first = arrived
                srv.first_cpu = _cpu_of(srv.child) if srv.child else None
        try:
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(raw or b"{}")
            time.sleep(srv.latency)
            self._send(200, _reply(body, n))
        finally:
            with srv.lock:
                srv.in_flight -= 1
                srv.last = time.monotonic()

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# ---------------------------------------------------------------- one study
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "OPENAI_API_KEY": "sk-dummy-benchmark-key", "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost"})
    return env


def study_command(out: Path, port: int, episodes: int, concurrency: int,
                  source: Path = ROOT) -> list[str]:
    """`eairc study` over D1 with both fake models, `episodes` in all (run with `source`
    as the working folder, so `python -m eairdsl.cli` imports that checkout's package)."""
    return [sys.executable, "-m", "eairdsl.cli", "study", str(source / "worlds" / "d1.eair"),
            "--models", MODELS,
            "--conditions", "canonical", "--instances", "seed",
            "--seeds", str(max(1, episodes // 2)), "--api-base", f"http://127.0.0.1:{port}/v1",
            "--max-connections", str(concurrency), "--retries", "0", "--timeout", "600",
            "--out", str(out)]


def _calls_per_episode(out: Path) -> list[int]:
    with sqlite3.connect(out / "results.sqlite") as db:
        rows = db.execute("SELECT usage, valid FROM episodes").fetchall()
    calls = []
    for usage, _valid in rows:
        total = (json.loads(usage) if usage else {}).get("total") or {}
        calls.append(int(total.get("calls") or 0))
    return calls


def run_one(server: FakeServer, episodes: int, concurrency: int, keep: Path | None,
            profile: bool = False, source: Path = ROOT) -> dict[str, Any]:
    """One study at one concurrency; its figures."""
    folder = (keep / f"c{concurrency}") if keep else Path(tempfile.mkdtemp(prefix="eair-llm-"))
    shutil.rmtree(folder, ignore_errors=True)
    cmd = study_command(folder, server.port, episodes, concurrency, source)
    if profile:
        cmd = [*cmd[:1], "-m", "cProfile", "-o", str(folder.parent / f"c{concurrency}.prof"),
               "-m", *cmd[2:]]
    with tempfile.TemporaryFile() as log:
        started = time.monotonic()
        child = subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                 cwd=source)
        server.reset(child.pid, min(concurrency, episodes))
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            child.kill()
            raise
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        log.seek(0)
        output = log.read().decode(errors="replace")
    if child.returncode != 0:
        raise SystemExit(f"the study failed (exit {child.returncode}):\n{output[-3000:]}")
    try:
        calls = _calls_per_episode(folder)
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    cpu = usage.ru_utime + usage.ru_stime
    first = (server.first - started) if server.first is not None else float("nan")
    cpu_after = cpu - (server.first_cpu or 0.0)
    # every request takes `latency`: at most N at once, one episode's one after another
    ideal = max(math.ceil(sum(calls) / concurrency), max(calls, default=0)) * server.latency
    return {"concurrency": concurrency, "episodes": len(calls), "requests": server.requests,
            "calls": sum(calls), "wall": wall, "first": first, "ideal": ideal,
            "of_ideal": ideal / max(1e-9, wall - first), "cpu": cpu,
            "cpu_per_call": cpu_after / max(1, server.requests), "peak": server.peak,
            "startup_cpu": server.first_cpu,
            "ramp": (server.full - server.first) if server.full and server.first else None,
            "tail": (started + wall - server.last) if server.last else None}


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200,
                        help="episodes per study, half per model (default 200)")
    parser.add_argument("--latency", type=float, default=1.0,
                        help="seconds the server takes per request (default 1)")
    parser.add_argument("--concurrency", default="1,8,32,64",
                        help="comma-separated --max-connections values (default 1,8,32,64)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep each study in KEEP/cN instead of a scratch folder")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="a checkout (eairdsl/ and worlds/) to run instead of this one, "
                        "e.g. an older commit unpacked by `git archive` for a before/after")
    parser.add_argument("--profile", action="store_true",
                        help="run each study under cProfile (KEEP/cN.prof; needs --keep)")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    if args.profile and args.keep is None:
        parser.error("--profile needs --keep")
    server = FakeServer(args.latency)
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    print(f"fake OpenAI server on 127.0.0.1:{server.port}, {args.latency:g}s per request; "
          f"{args.episodes} D1 episodes ({MODELS})", flush=True)
    print(f"{'N':>3} {'episodes':>8} {'calls':>6} {'wall s':>8} {'first req s':>11} "
          f"{'ideal s':>8} {'of ideal':>8} {'cpu/call ms':>11} {'peak':>5} {'ramp s':>7} "
          f"{'tail s':>7}", flush=True)
    try:
        for n in levels:
            r = run_one(server, args.episodes, n, args.keep, args.profile,
                        args.source.resolve())
            print(f"{n:>3} {r['episodes']:>8} {r['calls']:>6} {r['wall']:>8.1f} "
                  f"{r['first']:>11.2f} {r['ideal']:>8.1f} {r['of_ideal']:>8.1%} "
                  f"{1000 * r['cpu_per_call']:>11.1f} {r['peak']:>5} "
                  f"{_secs(r['ramp']):>7} {_secs(r['tail']):>7}", flush=True)
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
