"""Running a study: the grid against its results store, on local processes or on Dask.

The parent process owns the store. It works out which cells are still open
(no execution-valid attempt yet and fewer attempts than the bound), hands one
attempt at a time per free worker to a backend, and writes each result in its
own transaction as it arrives. An execution-invalid attempt is followed by the
cell's next attempt with a fresh seed (the paper's first-success rule) until
one is valid or `max_attempts` have been recorded; every attempt is a row.

Backends:

* serial — in this process (`--workers 1`); a world the caller gives compiled
  (`compiled`) runs as it is, in memory (the repair's retest runs about a hundred
  small studies of the same two worlds), any other is compiled once per call from
  its world.json text, as a worker does;
* local — `concurrent.futures.ProcessPoolExecutor`; each worker receives the
  worlds once as world.json text (cheap to pickle), compiles each on first use
  and writes its traces straight into the study folder. A worker that dies
  breaks the pool: the episodes in flight are lost, the pool is restarted and
  they are submitted again (an episode that keeps killing workers is left for
  the next run);
* dask — `distributed.Client` on `--scheduler ADDR` (or a LocalCluster on this
  machine). Workers return each trace's text and the client writes it, so the
  study folder stays on the client. dask is imported only here and only then
  (`pip install eairdsl[dask]`);
* async — the episodes of LLM models (`Model.llm`), whatever `--executor`:
  one asyncio event loop on a thread of this process runs many episodes at
  once (each waits on the API while the others advance), requests bounded per
  provider and endpoint by `max_connections` (shared by every model column on
  that provider) and episodes in flight by `max_episodes` (default
  max(64, 8 × max_connections), as `eairdsl.api.run_episodes_concurrently`).
  litellm is imported on a background thread as the study begins (after the
  pool's fork in a mixed study), or, opted in with EAIR_LLM_TRANSPORTS=N, runs
  in transport processes (`eairdsl.agents.transport`). The sim models'
  episodes run first on the chosen backend, then the LLM ones.

Resuming an LLM study. The first run keeps its LLM options in the store (meta
`llm_options`: each LLM column's model, the counterpart, judge and role
models, temperature, max tokens, seed, api base); a later run with other
options is refused with one line naming each difference (`check_llm_options`).
New model columns may join; connections, timeouts and retries may change.

Cassettes. With `LLMSettings.record` set (a folder: `eairc study --record`
gives `OUT/cassettes`) each LLM model records its exchanges to
`<folder>/<model slug>.jsonl`; a run writes to a part file first and, when it
ends (or, after a kill, when the study is next run), appends to the model's
cassette the exchanges of episodes that reached the store, so a resumed study
records each retained episode's exchanges exactly once. With `replay` (a
folder of such cassettes) every answer comes from them: a study replays
offline, trace for trace, byte for byte.

Whatever happens to a worker, an episode without a row is simply run again
when the same command is repeated.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import importlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from eairdsl.api import run_episode, run_episode_async
from eairdsl.errors import UsageError
from eairdsl.ir import World, dump_world, load_world
from eairdsl.names import safe_filename
from eairdsl.runtime.engine import CompiledWorld
from eairdsl.study.cohort import StudyMeasureResult, record_study_measures
from eairdsl.study.grid import LLM_PREFIX, Attempt, Cell, Model, WorldPlan, cells, slug
from eairdsl.study.store import STORE_FILE, Store

if TYPE_CHECKING:
    from eairdsl.agents.llm import LLMSettings

__all__ = [
    "CASSETTES_DIR",
    "EXECUTORS",
    "LLM_OPTIONS_KEY",
    "Budget",
    "MAX_LOSSES",
    "TRACES_DIR",
    "StudyError",
    "StudyProgress",
    "StudySummary",
    "WorkerLost",
    "begin_llm",
    "check_llm_options",
    "compiled_for_study",
    "llm_options",
    "run_study",
    "run_task",
    "spend",
    "warm_llm",
]

EXECUTORS = ("local", "dask")
TRACES_DIR = "traces"
#: where `eairc study --record` keeps the study's cassettes (one per LLM model)
CASSETTES_DIR = "cassettes"
_PARTS_DIR = ".parts"
#: how often one episode may be lost with a dying worker before it is left for the next run
MAX_LOSSES = 3
MAX_POOL_RESTARTS = 20
#: most attempts sent to a worker in one round trip
MAX_CHUNK = 8


class StudyError(UsageError):
    """A study cannot start or continue (bad settings, no Dask, workers that keep dying)."""


class WorkerLost(Exception):
    """The worker running an episode died; the episode has no result and must be redone."""


# ---------------------------------------------------------------------- worker side
_TEXTS: dict[str, str] = {}
_COMPILED: dict[str, CompiledWorld] = {}
TaskFn = Callable[[dict[str, Any]], dict[str, Any]]


def _init_worker(texts: dict[str, str], parent: int | None = None) -> None:
    """Process-pool initializer: the worlds as world.json text, keyed by digest."""
    _TEXTS.clear()
    _TEXTS.update(texts)
    _COMPILED.clear()
    if parent is not None and sys.platform == "linux":
        # Die with the parent: a study killed with SIGKILL leaves no orphan workers.
        try:
            import ctypes
            import signal

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:
            os._exit(0)


def compiled_for_study(world: World) -> CompiledWorld:
    """`world` compiled as a study's workers compile it, from its world.json text: the
    canonical form (sorted keys: a table's rows list their fields in name order) is what
    every study episode reads, on any backend, and its traces show it. For
    `run_study(compiled=…)`: a caller running many small studies of one world pays for
    this once instead of once per call."""
    return CompiledWorld(load_world(dump_world(world)))


def _compiled(digest: str) -> CompiledWorld:
    compiled = _COMPILED.get(digest)
    if compiled is None:
        compiled = _COMPILED[digest] = CompiledWorld(load_world(_TEXTS[digest]))
    return compiled


def run_task(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one episode from a payload; return `EpisodeResult` as a JSON-ready dict.

    With `out` the trace is written there; with `return_trace` it is written to
    a scratch folder and returned as `trace_text` (+ `trace_rel`) instead.
    """
    compiled = _compiled(payload["digest"])
    scratch = tempfile.mkdtemp(prefix="eair-trace-") if payload.get("return_trace") else None
    out = Path(scratch) if scratch else (Path(payload["out"]) if payload.get("out") else None)
    try:
        result = run_episode(compiled, payload["condition"], payload["instance"],
                             payload["seed"], payload["agents"], out)
        data = result.model_dump(mode="json")
        if scratch and result.trace_path:
            path = Path(result.trace_path)
            data["trace_text"] = path.read_text(encoding="utf-8")
            data["trace_rel"] = path.relative_to(scratch).as_posix()
            data["trace_path"] = None
        return data
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _dask_chunk(texts: dict[str, str], payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dask entry point: world texts arrive as scattered data, each compiled once per worker."""
    for digest, text in texts.items():
        _TEXTS.setdefault(digest, text)
    return _run_chunk(run_task, payloads)


def _ping() -> int:
    return os.getpid()


#: a worker's answer for an episode that must stop the study instead of being recorded
_STOP = "stop"


def _run_chunk(task: TaskFn, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several episodes in one round trip (amortises inter-process overhead for short ones).

    A UsageError is the study's surroundings failing, not the episode (the trace cannot
    be written: a file where the traces folder goes, a full disk, no permission): recorded
    as execution-invalid attempts it used up every cell's attempts, so fixing the folder
    and resuming ran nothing. It answers `_STOP` for that episode and the rest of the
    chunk (not run); the parent stops the study without recording them."""
    out: list[dict[str, Any]] = []
    for payload in payloads:
        try:
            out.append(task(payload))
        except UsageError as exc:
            out += [{_STOP: str(exc)}] * (len(payloads) - len(out))
            break
        except Exception as exc:
            out.append(_error_result(exc))
    return out


def _error_result(exc: BaseException) -> dict[str, Any]:
    return {"measurements": {}, "valid": False,
            "validity_reason": f"worker error: {type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------------- backends
class _Done:
    """A finished chunk (the serial backend's handle)."""

    def __init__(self, value: list[dict[str, Any]]) -> None:
        self.value = value


class _Serial:
    """Runs each episode in this process as it is submitted: on the caller's compiled
    worlds as they are (`compiled`), the others compiled once from their world.json text
    (`texts`), as a worker does (one that does not compile: each episode says why)."""

    capacity = 1
    writes_files = True
    name = "serial"

    def __init__(self, texts: dict[str, str], task: TaskFn,
                 compiled: Mapping[str, CompiledWorld] | None = None) -> None:
        _init_worker(texts)
        _COMPILED.update(compiled or {})
        self.task = task

    def submit(self, payloads: list[dict[str, Any]]) -> _Done:
        return _Done(_run_chunk(self.task, payloads))

    def wait(self, handles: list[Any]) -> list[Any]:
        return handles

    def result(self, handle: Any) -> list[dict[str, Any]]:
        value: list[dict[str, Any]] = handle.value
        return value

    def close(self, cancel: bool = False) -> None:
        _COMPILED.clear()  # the caller's worlds are not kept past the study


class _Pool:
    """A process pool (fork on Linux) whose workers hold the worlds; restarted if one dies."""

    writes_files = True
    name = "local"

    def __init__(self, texts: dict[str, str], workers: int, task: TaskFn) -> None:
        self.texts, self.workers, self.task = texts, workers, task
        self.capacity = 2 * workers  # chunks in flight
        self.restarts = 0
        self.generation = 0
        self.broken = False
        self.born: dict[Any, int] = {}
        self._start()

    def _start(self) -> None:
        _litellm_settled()  # never fork in the middle of the litellm prefetch's import
        ctx = multiprocessing.get_context("fork") if sys.platform == "linux" else None
        self.pool = cf.ProcessPoolExecutor(self.workers, mp_context=ctx,
                                           initializer=_init_worker,
                                           initargs=(self.texts, os.getpid()))
        # Start every worker now, before a progress display starts its thread.
        self.pool.submit(_ping).result()
        self.broken = False

    def _restart(self) -> None:
        self.restarts += 1
        if self.restarts > MAX_POOL_RESTARTS:
            raise StudyError(f"workers died {self.restarts} times; stopping (rerun the same "
                             "command to resume, perhaps with --workers 1)")
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.generation += 1
        self._start()

    def submit(self, payloads: list[dict[str, Any]]) -> Any:
        if self.broken:
            self._restart()
        try:
            future = self.pool.submit(_run_chunk, self.task, payloads)
        except cf.process.BrokenProcessPool:
            self._restart()
            future = self.pool.submit(_run_chunk, self.task, payloads)
        self.born[future] = self.generation
        return future

    def wait(self, handles: list[Any]) -> list[Any]:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, handle: Any) -> list[dict[str, Any]]:
        generation = self.born.pop(handle, self.generation)
        try:
            value: list[dict[str, Any]] = handle.result()
        except cf.process.BrokenProcessPool as exc:
            if generation == self.generation:
                self.broken = True
            raise WorkerLost(str(exc) or "a worker process died") from None
        except cf.CancelledError:
            raise WorkerLost("cancelled with its pool") from None
        return value

    def close(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class _Dask:
    """A dask.distributed client; the worlds are scattered once, traces come back as text."""

    writes_files = False
    name = "dask"

    def __init__(self, texts: dict[str, str], workers: int, scheduler: str | None) -> None:
        try:
            distributed: Any = importlib.import_module("distributed")
        except ImportError:
            raise StudyError("--executor dask needs dask.distributed, which is not installed: "
                             "pip install 'eairdsl[dask]'") from None
        self.distributed = distributed
        self.cluster: Any = None
        self.client: Any
        try:
            if scheduler:
                self.client = distributed.Client(scheduler, timeout=10)
            else:
                self.cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                                        processes=True, dashboard_address=None)
                self.client = distributed.Client(self.cluster)
        except (OSError, TimeoutError) as exc:
            raise StudyError(f"cannot reach the Dask scheduler {scheduler or '(local)'}: "
                             f"{exc}") from None
        self.texts = self.client.scatter(texts, broadcast=True)
        threads = sum(self.client.nthreads().values()) or workers
        self.capacity = max(2, 2 * threads)

    def submit(self, payloads: list[dict[str, Any]]) -> Any:
        texts = {p["digest"]: self.texts[p["digest"]] for p in payloads}
        return self.client.submit(_dask_chunk, texts, payloads, pure=False)

    def wait(self, handles: list[Any]) -> list[Any]:
        done, _ = self.distributed.wait(handles, return_when="FIRST_COMPLETED")
        return list(done)

    def result(self, handle: Any) -> list[dict[str, Any]]:
        killed_worker: type[Exception] = self.distributed.KilledWorker
        try:
            value: list[dict[str, Any]] = handle.result()
        except killed_worker as exc:
            raise WorkerLost(f"dask worker died: {exc}") from None
        except (OSError, cf.CancelledError) as exc:
            raise WorkerLost(f"lost contact with the dask cluster: {exc}") from None
        return value

    def close(self, cancel: bool = False) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


class _Async:
    """LLM episodes in one asyncio event loop on a thread of this process.

    `settings` holds one `LLMSettings` per LLM model (its own client, semaphores
    and cassette); a payload's `agents` is `llm:<model string>` and its `model`
    the model column, which picks the settings.
    """

    writes_files = True
    name = "async"

    def __init__(self, compiled: dict[str, CompiledWorld], settings: dict[str, LLMSettings],
                 capacity: int) -> None:
        self.compiled = compiled
        self.settings = settings
        self.capacity = max(1, capacity)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="eair-llm-study",
                                       daemon=True)
        self.thread.start()

    async def _one(self, payload: dict[str, Any]) -> dict[str, Any]:
        result = await run_episode_async(self.compiled[payload["digest"]],
                                         payload["condition"], payload["instance"],
                                         payload["seed"], "llm", Path(payload["out"]),
                                         llm=self.settings[payload["model"]])
        return result.model_dump(mode="json")

    async def _chunk(self, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for payload in payloads:
            try:
                out.append(await self._one(payload))
            except UsageError:  # a replay miss: stop the study, never record it
                raise
            except Exception as exc:
                out.append(_error_result(exc))
        return out

    def submit(self, payloads: list[dict[str, Any]]) -> Any:
        return asyncio.run_coroutine_threadsafe(self._chunk(payloads), self.loop)

    def wait(self, handles: list[Any]) -> list[Any]:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, handle: Any) -> list[dict[str, Any]]:
        try:
            value: list[dict[str, Any]] = handle.result()
        except cf.CancelledError:
            raise WorkerLost("cancelled") from None
        return value

    def close(self, cancel: bool = False) -> None:
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:  # episodes in flight (on cancel) and what litellm left behind
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=60)
            if not self.thread.is_alive():
                self.loop.close()


# ---------------------------------------------------------------------- the study
class StudyProgress(Protocol):
    """Callbacks a front end implements to show a study's progress.

    The study library never prints: `run_study` reports through these calls and
    the front end renders them (`eairc study` draws a rich progress bar on
    stderr, in eairdsl/cli/progress.py). Any object with these methods will do;
    subclassing this protocol gives do-nothing defaults for the rest.
    """

    def start(self, total: int, done: int, todo: int) -> None:
        """`total` cells in the grid, `done` already complete in the store, `todo` to run."""
        return None

    def attempt(self, attempt: Attempt, result: dict[str, Any], cell_done: bool) -> None:
        """An attempt was recorded; `cell_done` when its cell needs no further attempt."""
        return None

    def lost(self, attempt: Attempt, reason: str, requeued: bool) -> None:
        """An attempt was lost with its worker."""
        return None


class _Silent(StudyProgress):
    """No progress shown (the default)."""


@dataclass
class StudySummary:
    """What one `run_study` call did."""

    store: Path
    cells: int
    skipped: int
    attempts: int = 0
    invalid_attempts: int = 0
    exhausted: int = 0
    lost: int = 0
    seconds: float = 0.0
    executor: str = "serial"
    workers: int = 1
    #: why scheduling stopped before the grid was done (a budget), or None
    stopped: str | None = None
    #: cells left open by the stop (rerun to run them)
    left: int = 0
    #: the worlds' study measures on the store's episodes, as this run left them
    study_measures: list[StudyMeasureResult] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every cell has a retained episode or has used up its attempts."""
        return self.lost == 0 and self.stopped is None


@dataclass
class Budget:
    """Limits on the LLM spend of a whole study (None: no limit)."""

    usd: float | None = None
    #: tokens in + tokens out, every call (agents and judges) counted
    tokens: int | None = None
    cost: float = 0.0
    used: int = 0
    #: attempts recorded (with or without LLM calls), for the mean spend per episode
    seen: int = 0

    def add(self, usage: dict[str, Any] | None) -> None:
        total = (usage or {}).get("total") or {}
        self.cost += float(total.get("cost") or 0.0)
        self.used += int(total.get("tokens_in") or 0) + int(total.get("tokens_out") or 0)
        self.seen += 1

    def admits(self, in_flight: int) -> bool:
        """Whether one more episode may start with `in_flight` running: always when none
        is; else only if the spend so far plus the mean episode's spend for each running
        one and the new one stays within every limit (so concurrency does not overshoot
        a budget by many episodes; before any episode is recorded, one at a time)."""
        if in_flight == 0 or (self.usd is None and self.tokens is None):
            return True
        if self.seen == 0:
            return False
        n = in_flight + 1
        if self.usd is not None and self.cost + n * self.cost / self.seen > self.usd:
            return False
        return self.tokens is None or self.used + n * self.used / self.seen <= self.tokens

    def reached(self) -> str | None:
        """The message saying which limit is reached, or None."""
        if self.usd is not None and self.cost >= self.usd:
            return f"budget reached: ${self.cost:.4f} spent of --budget-usd {self.usd:g}"
        if self.tokens is not None and self.used >= self.tokens:
            return f"budget reached: {self.used} tokens spent of --budget-tokens {self.tokens}"
        return None


def spend(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """LLM spend per (world, model) over store rows (`Store.rows()`): calls, tokens, cost."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        raw = r.get("usage")
        usage = json.loads(raw) if isinstance(raw, str) else (raw or {})
        total = usage.get("total") or {}
        if not total:
            continue
        acc = out.setdefault((str(r["world"]), str(r["model"])),
                             {"episodes": 0, "calls": 0, "tokens_in": 0, "tokens_out": 0,
                              "cost": 0.0})
        acc["episodes"] += 1
        for k in ("calls", "tokens_in", "tokens_out"):
            acc[k] += int(total.get(k) or 0)
        acc["cost"] = round(acc["cost"] + float(total.get("cost") or 0.0), 10)
    return out


def run_study(worlds: Sequence[World], plans: Sequence[WorldPlan], models: Sequence[Model],
              out: Path, *, workers: int = 1, executor: str = "local",
              scheduler: str | None = None, max_attempts: int = 3,
              progress: StudyProgress | None = None,
              task: TaskFn | None = None, llm: LLMSettings | None = None,
              budget: Budget | None = None,
              sources: Mapping[str, Path] | None = None,
              compiled: Mapping[str, CompiledWorld] | None = None) -> StudySummary:
    """Run (or resume) the grid of `plans` × `models` into `out/results.sqlite`.

    `sources` names the file each world was compiled from (by world name): the store
    keeps it with the world's digest, so `eairc audit STUDY` finds the world there.
    `compiled` holds worlds already compiled (`CompiledWorld`, by digest) for the
    backends that run in this process (serial, async): a caller running many small
    studies of one world compiles it once, and nothing is written out as world.json
    and read back for each call. Make them with `compiled_for_study`: world.json's
    canonical form (its tables' keys sorted) is what a study's episodes read, and
    their traces show it.

    `task` replaces `run_task` in the workers (tests use it to inject faults).
    `llm` holds the options of the LLM models (`Model.llm`): counterpart, judge
    and role models, endpoint, limits, and `record`/`replay` as cassette
    *folders* (see the module docstring); its `model` is set per model column.
    `budget` stops scheduling once the study's LLM spend reaches it.

    The stages, in order: check the arguments, make the folder, lock it and open
    the store, prepare the store (LLM options, cassettes, worlds), plan the open
    cells' attempts, run the sim episodes on their backend, then the LLM ones on
    the event loop, and finish (study measures; in any case stop the transport,
    merge the cassettes, close the store and drop the lock).
    """
    started = time.perf_counter()
    by_name = _check_arguments(worlds, plans, workers=workers, executor=executor,
                               scheduler=scheduler, max_attempts=max_attempts)
    root = _make_folder(out)
    settings = _llm_settings(models, llm)
    run = _Run(worlds=by_name, models=models, out=out, root=root, workers=workers,
               executor=executor, scheduler=scheduler, max_attempts=max_attempts,
               progress=progress or _Silent(), task=task or run_task, llm=llm,
               budget=budget, settings=settings, sources=dict(sources or {}),
               compiled=dict(compiled or {}),
               live=bool(settings) and (llm is None or llm.replay is None),
               summary=StudySummary(store=out / STORE_FILE, cells=0, skipped=0))
    lock, store = _lock_and_open(out)
    try:
        _prepare_store(run, store, worlds, plans)
        todo, llm_todo = _plan_attempts(run, store, plans)
        _run_sim(run, store, todo, llm_todo)
        _run_llm(run, store, llm_todo, after_sim=bool(todo))
        run.summary.study_measures = record_study_measures(store)
    finally:
        _finish(run, store, lock)
    run.summary.seconds = time.perf_counter() - started
    return run.summary


@dataclass
class _Run:
    """One `run_study` call's settled inputs and what it has done so far.

    The stages of `run_study` take this one object rather than a dozen parameters
    each, so a stage's signature says which store or queue it works on and the
    rest is the run's."""

    worlds: dict[str, World]
    models: Sequence[Model]
    out: Path
    #: `out` resolved: traces are recorded relative to it
    root: Path
    workers: int
    executor: str
    scheduler: str | None
    max_attempts: int
    progress: StudyProgress
    task: TaskFn
    llm: LLMSettings | None
    budget: Budget | None
    #: one settings object per LLM model column (`_llm_settings`)
    settings: dict[str, LLMSettings]
    #: LLM episodes will call a provider (not replayed from cassettes)
    live: bool
    summary: StudySummary
    #: the part files this run records its cassettes to (merged when it ends)
    parts: dict[str, Path] = field(default_factory=dict)
    #: world name -> the file it was compiled from (kept in the store)
    sources: dict[str, Path] = field(default_factory=dict)
    #: digest -> the caller's compiled world (`run_study(compiled=…)`)
    compiled: dict[str, CompiledWorld] = field(default_factory=dict)


def _check_arguments(worlds: Sequence[World], plans: Sequence[WorldPlan], *, workers: int,
                     executor: str, scheduler: str | None,
                     max_attempts: int) -> dict[str, World]:
    """Refuse bad settings before anything is created on disk; the worlds by name.

    Every refusal here is a usage error a front end shows as one line, and none
    may leave a folder or lock behind."""
    if executor not in EXECUTORS:
        raise StudyError(f"unknown executor '{executor}'; choose {' or '.join(EXECUTORS)}")
    if workers < 1:
        raise StudyError("--workers must be at least 1")
    if max_attempts < 1:
        raise StudyError("--max-attempts must be at least 1")
    if scheduler and executor != "dask":
        raise StudyError("--scheduler is for --executor dask")
    names = [w.meta.name for w in worlds]
    if len(set(names)) != len(names):
        raise StudyError(f"the same world is given twice ({', '.join(names)})")
    if [p.name for p in plans] != names:
        raise StudyError("one plan per world, in the same order")
    return {w.meta.name: w for w in worlds}


def _make_folder(out: Path) -> Path:
    """Create the study folder (a file in its place is refused); its resolved path.

    The traces are recorded relative to the resolved folder, so a study run
    through a symlink or a relative path stores the same rows."""
    if out.exists() and not out.is_dir():
        raise StudyError(f"{out} exists and is not a folder; choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StudyError(f"cannot create the study folder {out}: {exc.strerror or exc}") from None
    return out.resolve()


def _lock_and_open(out: Path) -> tuple[_StudyLock, Store]:
    """Lock the folder, then open its store; a store that cannot open drops the lock
    (and the lock file if this run made it), so a failed start leaves nothing behind."""
    lock = _lock_study(out)
    try:
        store = Store.open(out / STORE_FILE)
    except BaseException:
        lock.release(remove=True)
        raise
    return lock, store


def _prepare_store(run: _Run, store: Store, worlds: Sequence[World],
                   plans: Sequence[WorldPlan]) -> None:
    """Before any episode: refuse LLM options other than the first run's, settle the
    cassettes (merge what a killed run left, open this run's part files or the replay
    cassettes, so a missing one is refused now) and register the worlds."""
    llm = run.llm
    if run.settings:
        check_llm_options(store, llm_options(run.models, llm))
    if llm is not None and llm.record is not None:
        _merge_cassettes(Path(llm.record), store)  # what a killed run left behind
        run.parts = _open_cassettes(run.settings, Path(llm.record), replay=False)
    elif llm is not None and llm.replay is not None:
        _open_cassettes(run.settings, Path(llm.replay), replay=True)
    for w, plan in zip(worlds, plans, strict=True):
        store.register_world(w.meta.name, w.digest, w.meta.title, w.meta.risk,
                             plan.conditions, w.conditions, w.study_measures)
        source = run.sources.get(w.meta.name)
        if source is not None:
            store.record_world_source(w.meta.name, source, w.digest)


def _plan_attempts(run: _Run, store: Store,
                   plans: Sequence[WorldPlan]) -> tuple[deque[Attempt], deque[Attempt]]:
    """The open cells' next attempts, sim and LLM apart (resuming: a cell with a valid
    attempt, or with its attempts used up, is skipped). The budget is charged with the
    stored episodes' spend, so a resumed study's limit covers every run."""
    grid = cells(plans, run.models)
    agents_of = {m.name: m.agents for m in run.models}
    history = store.attempts()
    todo: deque[Attempt] = deque()
    for cell in grid:
        past = history.get(cell, [])
        if any(valid for _, valid in past) or len(past) >= run.max_attempts:
            run.summary.skipped += 1
        else:
            todo.append(Attempt(cell, len(past), agents_of[cell.model]))
    run.summary.cells = len(grid)
    if run.budget is not None:
        for row in store.rows():
            run.budget.add(json.loads(row["usage"]) if row.get("usage") else None)
    run.progress.start(len(grid), run.summary.skipped, len(todo))
    llm_todo = deque(a for a in todo if a.agents.startswith(LLM_PREFIX))
    return deque(a for a in todo if not a.agents.startswith(LLM_PREFIX)), llm_todo


def _texts(run: _Run, todo: deque[Attempt]) -> dict[str, str]:
    """The worlds the attempts need, as world.json text keyed by digest (what a backend
    ships to its workers)."""
    needed = {a.cell.world for a in todo}
    return {run.worlds[n].digest: dump_world(run.worlds[n]) for n in needed}


def _given(run: _Run, todo: deque[Attempt]) -> tuple[dict[str, CompiledWorld], dict[str, str]]:
    """The worlds the attempts need, for a backend in this process: those the caller gave
    compiled (`run_study(compiled=…)`, by digest) as they are, the others as world.json
    text (each compiled once from it, as a worker does)."""
    compiled: dict[str, CompiledWorld] = {}
    texts: dict[str, str] = {}
    for name in sorted({a.cell.world for a in todo}):
        world = run.worlds[name]
        given = run.compiled.get(world.digest)
        if given is not None and given.world.digest == world.digest:
            compiled[world.digest] = given
        else:
            texts[world.digest] = dump_world(world)
    return compiled, texts


def _run_sim(run: _Run, store: Store, todo: deque[Attempt], llm_todo: deque[Attempt]) -> None:
    """The sim episodes on the chosen backend, starting litellm's import (when LLM
    episodes follow) where it overlaps them: before the backend, or after the pool's
    fork, since forking in the middle of the import is unsafe."""
    pool_first = bool(todo) and run.executor == "local" and run.workers > 1
    begin = run.live and bool(llm_todo)
    models = [m for s in run.settings.values() for m in (
        s.model, s.counterpart_model, s.judge_model, *s.role_models.values()) if m]
    if begin and not pool_first:
        begin_llm(run.llm, models)  # litellm's import overlaps the setup and the sim episodes
    if not todo:
        return
    backend: _Serial | _Pool | _Dask | _Async
    if run.executor == "dask":
        backend = _Dask(_texts(run, todo), run.workers, run.scheduler)
    elif run.workers == 1:
        compiled, texts = _given(run, todo)
        backend = _Serial(texts, run.task, compiled)
    else:
        backend = _Pool(_texts(run, todo), min(run.workers, len(todo)), run.task)
    if begin and pool_first:
        begin_llm(run.llm, models)  # after the fork: the pool's workers have started
    run.summary.executor, run.summary.workers = backend.name, run.workers
    chunk = 1 if backend.name == "serial" else max(
        1, min(MAX_CHUNK, len(todo) // (8 * run.workers)))
    _drive_then_close(run, backend, store, todo, chunk=chunk)


def _run_llm(run: _Run, store: Store, llm_todo: deque[Attempt], *, after_sim: bool) -> None:
    """The LLM episodes on one event loop, as many at once as the first model's
    settings allow (`max_episodes`, else max(64, 8 × max_connections))."""
    if not llm_todo:
        return
    compiled, texts = _given(run, llm_todo)
    compiled |= {d: CompiledWorld(load_world(t)) for d, t in texts.items()}
    first = next(iter(run.settings.values()))
    capacity = first.max_episodes or max(64, 8 * first.max_connections)
    # Episodes set up only once litellm is in: 200 episodes setting up beside the
    # import share the GIL with it and the first request left at 8 s, not 3.
    _litellm_settled()
    backend = _Async(compiled, run.settings, capacity)
    run.summary.executor = f"{run.summary.executor}+async" if after_sim else "async"
    _drive_then_close(run, backend, store, llm_todo, chunk=1)


def _drive_then_close(run: _Run, backend: _Serial | _Pool | _Dask | _Async, store: Store,
                      todo: deque[Attempt], chunk: int) -> None:
    """Drive the backend through the queue and close it, cancelling what is in flight
    if driving failed (an interrupt, a stop), so no worker outlives the run."""
    cancel = True
    try:
        _drive(backend, todo, store, root=run.root, worlds=run.worlds,
               max_attempts=run.max_attempts, chunk=chunk, progress=run.progress,
               summary=run.summary, budget=run.budget)
        cancel = False
    finally:
        backend.close(cancel=cancel)


def _finish(run: _Run, store: Store, lock: _StudyLock) -> None:
    """Whatever happened: stop the transport this run or its front end started
    (`begin_llm`), append the recorded exchanges of stored episodes to the cassettes,
    then close the store and drop the lock, even if the first two fail."""
    try:
        if run.live:
            _stop_transport()
        if run.parts and run.llm is not None and run.llm.record is not None:
            _merge_cassettes(Path(run.llm.record), store)
    finally:
        store.close()
        lock.release()


#: locked (lockf) by the one `eairc study` writing a study folder; empty, left in place
LOCK_FILE = ".study.lock"


class _StudyLock:
    """An exclusive advisory lock on OUT/.study.lock for the length of a run."""

    def __init__(self, path: Path, handle: Any, made: bool) -> None:
        self.path, self.handle, self.made = path, handle, made

    def release(self, remove: bool = False) -> None:
        if self.handle is not None:
            self.handle.close()  # closing the file drops the lock
            self.handle = None
        if remove and self.made:  # this run made the file and wrote nothing else
            self.path.unlink(missing_ok=True)


def _lock_study(out: Path) -> _StudyLock:
    """Two `eairc study` runs into one folder (a second terminal, a script started twice)
    both created the schema or recorded the same cells: the second stopped with 'internal
    error: IntegrityError' (exit 3) while writing the same trace files as the first. The
    second is now refused before it opens the store. The lock is per process (another
    run_study in the same process is not excluded). Where the platform has no fcntl
    (Windows), nothing is locked, as before."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        return _StudyLock(out / LOCK_FILE, None, False)
    path = out / LOCK_FILE
    made = not path.exists()
    try:
        handle = path.open("a")
    except OSError as exc:
        raise StudyError(f"cannot write in the study folder {out}: "
                         f"{exc.strerror or exc}") from None
    try:
        # A POSIX record lock, not flock: the pool's forked workers do not inherit it, so
        # it goes with this process (a flock stayed held by workers still shutting down).
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise StudyError(f"another eairc study is running into {out}; wait for it to finish "
                         "(then rerun to resume) or choose another --out") from None
    return _StudyLock(path, handle, made)


def begin_llm(llm: LLMSettings | None = None, models: Sequence[str] | None = None) -> bool:
    """As live LLM episodes are about to run: prefetch litellm on a thread here (False),
    or, where a transport is asked for and can answer as this process would
    (`eairdsl.agents.transport.transport_usable`), start it (True): its child imports
    litellm on another core.

    `llm` may be None (the models' defaults) or hold no model (the executor sets one per
    column): only its transport choice and extra kwargs matter here. Idempotent: a front
    end calls it as soon as it knows the study has live LLM models and no process pool
    will fork (`warm_llm`); `run_study` calls it again and stops a transport when it
    ends. Nothing when `models` (the study's model strings) all go the native way
    (`eairdsl.agents.openai_http`): litellm is then never needed for a request.
    """
    from eairdsl.agents import transport
    from eairdsl.agents.llm import needs_litellm, prefetch_litellm

    if models is not None and not needs_litellm(llm, models):
        return False

    if transport.transport_usable(llm.completion_kwargs if llm is not None else {},
                                  llm.transport if llm is not None else None):
        try:
            transport.start()
            return True
        except OSError:
            pass
    prefetch_litellm()
    return False


def warm_llm(models: Sequence[Model], workers: int, executor: str = "local") -> None:
    """For a front end, before it compiles the worlds: `begin_llm` now if the study has
    live LLM models and no sim model that the local process pool would run (forking in
    the middle of the import is unsafe; `run_study` then begins after the fork)."""
    if not any(m.llm for m in models):
        return
    if any(m.llm is None for m in models) and executor == "local" and workers > 1:
        return
    begin_llm(None, [m.llm for m in models if m.llm])


def _stop_transport() -> None:
    from eairdsl.agents import transport

    transport.stop()


def _litellm_settled() -> None:
    """Wait for a litellm prefetch under way (only if this process started one)."""
    llm = sys.modules.get("eairdsl.agents.llm")
    if llm is not None:
        llm.litellm_ready()


#: The store's meta key under which a study keeps the LLM options of its first run.
LLM_OPTIONS_KEY = "llm_options"
#: Each LLM option a resumed study must repeat, and the flag that sets it.
_LLM_FLAGS = {"counterpart_model": "--counterpart-model", "judge_model": "--judge-model",
              "role_models": "--role-model", "temperature": "--temperature",
              "max_tokens": "--max-tokens", "seed": "--llm-seed", "api_base": "--api-base"}


def llm_options(models: Sequence[Model], llm: LLMSettings | None) -> dict[str, Any]:
    """What decides an LLM episode's answers besides the world: each LLM model column's
    litellm string, the fixed counterpart, judge and role models, the sampling options
    and the endpoint. Transport limits (connections, timeout, retries) and cassettes are
    not in it: they change how a study runs, not what it measures."""
    out: dict[str, Any] = {"models": {m.name: m.llm for m in models if m.llm is not None}}
    for key in _LLM_FLAGS:
        value = getattr(llm, key, None) if llm is not None else None
        out[key] = (dict(sorted(value.items())) or None) if isinstance(value, dict) else value
    return out


def check_llm_options(store: Store, options: dict[str, Any]) -> None:
    """Refuse to resume a study with LLM options other than its first run's (one line,
    each difference named); otherwise keep them, with any new model column added.

    A model column may be added (it starts its own cells) but not given another model;
    every other option must be the same, since the stored episodes were answered under
    it.
    """
    row = store.conn.execute("SELECT value FROM meta WHERE key = ?",
                             (LLM_OPTIONS_KEY,)).fetchone()
    if row is not None:
        try:
            first: dict[str, Any] = json.loads(row[0])
        except json.JSONDecodeError:
            raise StudyError(f"{store.path}: the stored LLM options are not JSON; the store "
                             "was edited") from None
        diffs = []
        before = first.get("models") or {}
        for name, model in sorted(options["models"].items()):
            if name in before and before[name] != model:
                diffs.append(f"--models {name}={model} (was {name}={before[name]})")
        for key, flag in _LLM_FLAGS.items():
            if first.get(key) != options.get(key):
                diffs.append(f"{flag} {_option_text(options.get(key))} "
                             f"(was {_option_text(first.get(key))})")
        if diffs:
            raise StudyError(f"this study's first run used other LLM options: "
                             f"{'; '.join(diffs)}; rerun with the first run's options or "
                             "choose another --out")
        options = {**options, "models": {**before, **options["models"]}}
        if options == first:
            return
    store.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",  # autocommit
                       (LLM_OPTIONS_KEY, json.dumps(options, sort_keys=True)))


def _option_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)


def _llm_settings(models: Sequence[Model], llm: LLMSettings | None) -> dict[str, LLMSettings]:
    """One settings object (one client, one cassette) per LLM model column."""
    chosen = [m for m in models if m.llm is not None]
    if not chosen:
        return {}
    from eairdsl.agents.llm import LLMSettings

    base = llm or LLMSettings()
    if base.record is not None and base.replay is not None:
        raise StudyError("--record and --replay exclude each other")
    return {m.name: base.model_copy(update={"model": m.llm, "record": None, "replay": None})
            for m in chosen}


def _open_cassettes(settings: dict[str, LLMSettings], folder: Path,
                    replay: bool) -> dict[str, Path]:
    """Give each model its cassette (a part file when recording) and open it now, so a
    missing or broken cassette is refused before any episode."""
    from eairdsl.agents.cassette import CassetteError

    parts: dict[str, Path] = {}
    stamp = f"{os.getpid()}-{time.time_ns()}"
    for name, s in settings.items():
        if replay:
            s.replay = folder / f"{slug(name)}.jsonl"
        else:
            parts[name] = s.record = folder / _PARTS_DIR / slug(name) / f"{stamp}.jsonl"
        try:
            s.client()
        except CassetteError as exc:
            raise StudyError(str(exc)) from None
    return parts


def _episode_scope(scope: str) -> str:
    """`world/condition/instance/sSEED` of a cassette scope (participant or judge dropped)."""
    return "/".join(scope.split("/")[:4])


def _merge_cassettes(folder: Path, store: Store) -> None:
    """Append to each model's cassette the part-file exchanges of episodes in the store.

    Exchanges of episodes that never reached the store (interrupted, killed) are
    dropped: those episodes run again, and record again, when the study resumes.
    """
    root = folder / _PARTS_DIR
    if not root.is_dir():
        return
    done: dict[str, set[str]] = {}
    for r in store.rows():
        done.setdefault(slug(str(r["model"])), set()).add(
            f"{r['world']}/{r['condition']}/{r['instance']}/s{r['run_seed']}")
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        kept: list[str] = []
        part_files = sorted(model_dir.glob("*.jsonl"))
        for part in part_files:
            for line in part.read_text(encoding="utf-8").splitlines():
                try:
                    scope = str(json.loads(line).get("scope", ""))
                except (json.JSONDecodeError, AttributeError):
                    continue  # a line cut short by a kill
                if _episode_scope(scope) in done.get(model_dir.name, set()):
                    kept.append(line)
        if kept:
            with (folder / f"{model_dir.name}.jsonl").open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in kept))
        for part in part_files:
            part.unlink()
        with contextlib.suppress(OSError):
            model_dir.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()


def _trace_dir(root: Path, cell: Cell) -> Path:
    return root / TRACES_DIR / safe_filename(cell.world) / safe_filename(cell.model)


def _drive(backend: _Serial | _Pool | _Dask | _Async, todo: deque[Attempt], store: Store, *,
           root: Path, worlds: dict[str, World], max_attempts: int, chunk: int,
           progress: StudyProgress, summary: StudySummary,
           budget: Budget | None = None) -> None:
    in_flight: dict[Any, list[Attempt]] = {}
    losses: dict[Cell, int] = {}

    def payload(att: Attempt) -> dict[str, Any]:
        cell = att.cell
        data: dict[str, Any] = {"digest": worlds[cell.world].digest,
                                "condition": cell.condition, "instance": cell.instance,
                                "seed": att.run_seed, "agents": att.agents,
                                "model": cell.model}
        if backend.writes_files:
            data["out"] = str(_trace_dir(root, cell))
        else:
            data["return_trace"] = True
        return data

    while todo or in_flight:
        if todo and budget is not None and (why := budget.reached()):
            summary.stopped = why  # schedule nothing more; what is in flight finishes
            summary.left += len({a.cell for a in todo})
            todo.clear()
            if not in_flight:
                break
        while todo and len(in_flight) < backend.capacity and (
                budget is None or budget.admits(sum(map(len, in_flight.values())))):
            batch = [todo.popleft() for _ in range(min(chunk, len(todo)))]
            in_flight[backend.submit([payload(a) for a in batch])] = batch
        for handle in backend.wait(list(in_flight)):
            batch = in_flight.pop(handle)
            try:
                results = backend.result(handle)
            except WorkerLost as exc:
                for att in batch:
                    losses[att.cell] = losses.get(att.cell, 0) + 1
                    again = losses[att.cell] < MAX_LOSSES
                    if again:
                        todo.append(att)
                    else:
                        summary.lost += 1
                    progress.lost(att, str(exc), again)
                continue
            except UsageError:
                raise
            except Exception as exc:
                results = [_error_result(exc)] * len(batch)
            for att, result in zip(batch, results, strict=True):
                if _STOP in result:
                    raise StudyError(f"{result[_STOP]}; the study stopped (nothing was "
                                     "recorded for that episode): fix it and rerun the same "
                                     "command to resume")
                trace = _place_trace(root, att.cell, result)
                store.record(att, worlds[att.cell.world].digest, result, trace)
                if budget is not None:
                    budget.add(result.get("usage"))
                summary.attempts += 1
                valid = bool(result.get("valid"))
                done = valid or att.attempt + 1 >= max_attempts
                if not valid:
                    summary.invalid_attempts += 1
                    if done:
                        summary.exhausted += 1
                    else:
                        todo.appendleft(att.next())
                progress.attempt(att, result, done)


def _place_trace(root: Path, cell: Cell, result: dict[str, Any]) -> str | None:
    """The trace's path relative to the study folder (writing it when it came back as text)."""
    text = result.pop("trace_text", None)
    rel = result.pop("trace_rel", None)
    if text is not None and rel:
        path = _trace_dir(root, cell) / str(rel)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(text), encoding="utf-8")
        except OSError as exc:
            raise StudyError(f"cannot write the trace {path}: {exc.strerror or exc}; the study "
                             "stopped (nothing was recorded for that episode): fix it and "
                             "rerun the same command to resume") from None
        return path.relative_to(root).as_posix()
    raw = str(result.get("trace_path") or "")
    if not raw:
        return None
    try:
        return Path(raw).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(raw)
