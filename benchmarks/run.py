"""Runtime throughput: episodes per second with sim agents and full tracing.

Prints, per shipped world, episodes per wall-clock second and per CPU second
(the CPU figure is the per-core rate, robust to other load on the machine;
traces are built and written to disk as `eairc run` does) and the runtime's
cost per trace event against a bare simpy loop dispatching as many events.
Floor from the runtime issue: >= 100 episodes/s per core for A1 and D1.

    python benchmarks/run.py [--episodes N] [--repeat R] [--world a1 ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import simpy

from eairdsl.api import resolve_world, run_episode
from eairdsl.runtime.engine import CompiledWorld

ROOT = Path(__file__).resolve().parents[1]


def bare_simpy(events: int) -> float:
    """Seconds for simpy alone to dispatch `events` timeouts from one process."""
    env = simpy.Environment()

    def proc(env: simpy.Environment):  # type: ignore[no-untyped-def]
        for _ in range(events):
            yield env.timeout(1)

    env.process(proc(env))
    start = time.perf_counter()
    env.run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--world", action="append", default=[],
                        help="only these worlds (by file stem, e.g. a1); repeatable")
    args = parser.parse_args()
    n, repeat = args.episodes, args.repeat
    print(f"{'world':6} {'episodes/s':>11} {'eps/CPU-s':>13} {'events/ep':>10} {'us/event':>9} "
          f"{'bare simpy us/event':>20} {'ratio':>7}")
    for path in sorted((ROOT / "worlds").glob("*.eair")):
        if args.world and path.stem not in args.world:
            continue
        world = resolve_world(path)
        compiled = CompiledWorld(world)
        conditions = [c.name for c in world.conditions]
        run_episode(compiled, conditions[0], None, 0)  # warm caches
        elapsed = cpu = float("inf")
        for _ in range(repeat):  # best of `repeat` rounds, like timeit: other load only adds
            with tempfile.TemporaryDirectory() as tmp:
                start, cpu_start = time.perf_counter(), time.process_time()
                paths = [run_episode(compiled, conditions[i % len(conditions)], None, i,
                                     out=Path(tmp)).trace_path for i in range(n)]
                elapsed = min(elapsed, time.perf_counter() - start)
                cpu = min(cpu, time.process_time() - cpu_start)
                events = sum(len(Path(p or "").read_text(encoding="utf-8").splitlines()) - 2
                             for p in paths)
        per_episode = events / n
        us_event = elapsed / max(events, 1) * 1e6
        bare = bare_simpy(events) / max(events, 1) * 1e6
        print(f"{world.meta.name:6} {n / elapsed:11.1f} {n / cpu:13.1f} {per_episode:10.1f} "
              f"{us_event:9.1f} {bare:20.2f} {us_event / bare:7.0f}x")
    print("floor: >= 100 episodes/s per core for a1 and d1")


if __name__ == "__main__":
    main()
