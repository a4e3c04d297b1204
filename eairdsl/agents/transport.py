"""litellm in a helper process (opt-in): the episodes' event loop spends no litellm CPU.

Each live LLM call costs litellm about 5 ms of CPU (request transformation,
tool-schema sanitising, response objects, cost and logging), and the episodes
of a study share one event loop under one GIL: at 32 or 64 requests in flight
that CPU, not the API, paces the study. With a transport started, `LLMClient`
hands each attempt's `litellm.acompletion` keyword arguments to a child
process (`python -m eairdsl.agents.transport`) as one JSON line on its stdin;
the child runs every request it has concurrently in its own event loop and
answers, also as JSON lines, with the response already normalised by the same
`_normalise` the in-process path uses (or the error's description and whether
it is retryable). Answers are therefore the same data whichever path carried
them, and retries, backoff, timeouts, semaphores and cassettes stay in the
parent, unchanged.

The child imports litellm as soon as it starts, on the other core, while the
parent compiles worlds and opens the store: the parent never imports litellm.
Off by default. Measured with benchmarks/llm_study.py on this 2-core machine
(shared with other work), in-process calls kept 88.6-92.8% of ideal at 32
requests in flight and 70.8-82.7% at 64, one or two transport processes
85.7-91.8% and 73.5-81.3%, with a later first request and about twice the
CPU: the child serialises litellm's work just as the loop did, and the IPC
comes on top. It is meant for machines
with cores to spare, with `EAIR_LLM_TRANSPORTS=N` (N children share the calls,
each new call going to the ready child with the fewest in flight; each starts
when the one before is ready, so the first request waits for one import only)
or `LLMSettings.transport=True`. A child ignores Ctrl-C (the parent decides),
dies with its parent (Linux), and exits when its stdin closes. If it dies,
calls in flight fail as retryable transport errors and their retries, like
later calls, go in-process.

Models that go through the native OpenAI-compatible client
(`eairdsl.agents.openai_http`: `openai/...` with a key) never use a transport —
they cost the loop a fraction of litellm's CPU — and a run whose models all go that
way starts none (`llm.needs_litellm`).

Even then a transport is started only where it cannot change an answer: this
process has not imported litellm itself (so configured nothing in it a child
would miss: custom providers, callbacks, registered models) and
`completion_kwargs` is JSON; `transport_usable` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

__all__ = ["TRANSPORTS_ENV", "Transport", "TransportError", "active", "json_only", "start",
           "stop", "transport_usable"]


class TransportError(Exception):
    """An attempt that failed in the transport (or the transport itself failed)."""

    def __init__(self, description: str, retryable: bool,
                 retry_after: float | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.retryable = retryable
        #: the seconds the provider asked to wait (its Retry-After), read in the child
        self.retry_after = retry_after


class Transport:
    """The parent's end: a child process, a reader thread, the futures of calls in flight."""

    def __init__(self, on_ready: Any = None) -> None:
        self.ready = False
        self._on_ready = on_ready
        env = dict(os.environ)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eairdsl.agents.transport", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._lock = threading.Lock()
        self._write = threading.Lock()
        self._next = 0
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self.alive = True
        self._reader = threading.Thread(target=self._read, name="eair-llm-transport",
                                        daemon=True)
        self._reader.start()

    async def call(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One attempt: the normalised response, or TransportError."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if not self.alive:
                raise TransportError("the litellm transport process is gone", True)
            self._next += 1
            ident = self._next
            self._pending[ident] = (loop, future)
        try:
            self._send({"id": ident, "kwargs": kwargs})
            kind, value = await future
        except asyncio.CancelledError:  # a timeout or a cancelled episode: tell the child
            with self._lock:
                self._pending.pop(ident, None)
            with contextlib.suppress(OSError, ValueError):
                self._send({"cancel": ident})
            raise
        if kind == "response":
            response: dict[str, Any] = value
            return response
        after = value.get("retry_after")
        raise TransportError(str(value["error"]), bool(value["retryable"]),
                             float(after) if isinstance(after, (int, float)) else None)

    def _send(self, message: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            with self._write:  # whole lines, whichever thread's loop sends
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError):
            self._gone()
            raise TransportError("the litellm transport process is gone", True) from None

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for line in stdout:
            try:
                message = json.loads(line)
                if message.get("ready"):
                    self.ready = True
                    if self._on_ready is not None:
                        self._on_ready()
                    continue
                ident = int(message["id"])
            except (ValueError, KeyError, TypeError):
                continue
            with self._lock:
                entry = self._pending.pop(ident, None)
            if entry is None:
                continue  # cancelled meanwhile
            loop, future = entry
            value = ("response", message["response"]) if "response" in message \
                else ("error", message)
            with contextlib.suppress(RuntimeError):  # a closed loop
                loop.call_soon_threadsafe(_settle, future, value)
        self._gone()

    def _gone(self) -> None:
        with self._lock:
            self.alive = False
            pending, self._pending = self._pending, {}
        for loop, future in pending.values():
            value = ("error", {"error": "TransportError: the litellm transport process "
                               "exited", "retryable": True})
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, value)

    async def wait_ready(self, limit: float = 120.0) -> None:
        """Until the child has imported litellm (or died, or `limit` seconds passed): a
        call's timeout starts when the child can answer, not while it imports."""
        waited = 0.0
        while not self.ready and self.alive and waited < limit:
            await asyncio.sleep(0.02)
            waited += 0.02

    @property
    def load(self) -> int:
        """Calls in flight."""
        return len(self._pending)

    def close(self) -> None:
        """Close the child's stdin (it exits) and reap it."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


#: How many transport processes a run starts: unset or 0, none (every call in-process).
TRANSPORTS_ENV = "EAIR_LLM_TRANSPORTS"
_POOL: list[Transport] = []
_POOL_LOCK = threading.Lock()


def start(count: int | None = None) -> list[Transport]:
    """Start this process's transports (idempotent): the first now, its child importing
    litellm at once; each further one (up to `count`, default `EAIR_LLM_TRANSPORTS`, or 1)
    when the one before is ready, so the first request is not slowed by a second import."""
    if count is None:
        env = os.environ.get(TRANSPORTS_ENV, "")
        count = int(env) if env.isdigit() else 1
    want = max(1, count)
    with _POOL_LOCK:
        _POOL[:] = [t for t in _POOL if t.alive]
        if not _POOL:
            _POOL.append(_spawn(want))
        return list(_POOL)


def _spawn(want: int) -> Transport:
    def next_one() -> None:
        with _POOL_LOCK:
            if _POOL and len(_POOL) < want:
                with contextlib.suppress(OSError):
                    _POOL.append(_spawn(want))

    return Transport(on_ready=next_one)


def active() -> Transport | None:
    """The transport for the next call — the ready one with the fewest calls in flight —
    or None when none runs (calls then go in-process)."""
    live = [t for t in _POOL if t.alive]
    if not live:
        return None
    ready = [t for t in live if t.ready] or live[:1]  # before any is ready: queue at the first
    return min(ready, key=lambda t: t.load)


def stop() -> None:
    """Stop every transport."""
    with _POOL_LOCK:
        pool = list(_POOL)
        _POOL.clear()
    for transport in pool:
        transport.close()


def transport_usable(completion_kwargs: dict[str, Any], force: bool | None = None) -> bool:
    """Whether a run may start the transport: a child must answer exactly as this process.

    `force` False: never; True: whenever the extra kwargs are JSON. None (the default):
    only with `EAIR_LLM_TRANSPORTS` set to 1 or more (measured here, it did not pay on
    2 cores: see the module docstring), and only if this process has not imported
    litellm itself — a process that did may have configured it (custom providers,
    callbacks, registered models, keys) and a child would not see that.
    """
    if force is False:
        return False
    if force is None:
        env = os.environ.get(TRANSPORTS_ENV, "").strip()
        if not env.isdigit() or int(env) < 1 or "litellm" in sys.modules:
            return False
    return json_only(completion_kwargs)


def json_only(value: Any) -> bool:
    """Whether `value` crosses to a child as it is (JSON)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- the child
def _child(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(0)
    # The answers go down a private copy of stdout; whatever litellm prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from eairdsl.agents.provider import load_litellm

    litellm = load_litellm()
    out.write(b'{"ready": true}\n')
    out.flush()
    asyncio.run(_serve(litellm, out))
    out.flush()
    os._exit(0)  # skip tearing down litellm's heap: nothing is left to flush


async def _serve(litellm: Any, out: Any) -> None:
    from eairdsl.agents.provider import _describe, _normalise, _retry_after, _retryable

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 30)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: dict[int, asyncio.Task[None]] = {}

    def answer(message: dict[str, Any]) -> None:
        out.write((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8"))
        out.flush()

    async def one(ident: int, kwargs: dict[str, Any]) -> None:
        try:
            raw = await litellm.acompletion(**kwargs)
            answer({"id": ident, "response": _normalise(raw, kwargs["model"], litellm)})
        except asyncio.CancelledError:
            return
        except Exception as exc:
            answer({"id": ident, "error": _describe(exc), "retryable": _retryable(exc),
                    "retry_after": _retry_after(exc)})
        finally:
            tasks.pop(ident, None)

    while line := await reader.readline():
        message = json.loads(line)
        if "cancel" in message:
            task = tasks.get(int(message["cancel"]))
            if task is not None:
                task.cancel()
            continue
        ident = int(message["id"])
        tasks[ident] = asyncio.create_task(one(ident, message["kwargs"]))
    for task in list(tasks.values()):
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)


if __name__ == "__main__":
    _child(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())
