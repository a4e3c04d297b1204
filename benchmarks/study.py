"""Paper-scale offline study: wall time with 1 and 2 workers, and the speed-up.

Runs the cohorts of the EAIR paper (§5, Appendix F) with offline `sim` agents
over every shipped world (`worlds/*.eair`), ten model slots each (aliases of
the `sim` profile, `m01=sim` … `m10=sim`):

    A1   60 = 10 models × 2 KPI-pressure levels (mild, strong) × 3 seeds,
              one customer drawn per seed
    D1   90 = 10 models × 9 instances (3 domains × 3 phrasings), canonical
    B1  480, C1 150, F1 240 when those worlds exist: 10 models × their
              non-repaired conditions × enough seeds (one instance per seed)

Each configuration runs into a fresh store (so nothing is resumed) with
`--workers 1` (in-process) and `--workers 2` (process pool). Targets from the
studies issue: < 60 s with 2 workers on a 2-core machine; speed-up >= 1.7.

    python benchmarks/study.py [--repeat N (default 3, best kept)] [--scale K] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path

from eairdsl.api import resolve_world
from eairdsl.ir import World
from eairdsl.study.executor import run_study
from eairdsl.study.grid import WorldPlan, cells, parse_models, plan_world
from eairdsl.study.store import STORE_FILE, Store

ROOT = Path(__file__).resolve().parents[1]
MODELS = parse_models(",".join(f"m{i:02d}=sim" for i in range(1, 11)))
COHORTS = {"a1": 60, "b1": 480, "c1": 150, "d1": 90, "f1": 240}
TARGET_SECONDS, TARGET_SPEEDUP = 60.0, 1.7


def plan(world: World, scale: int = 1) -> WorldPlan:
    """The paper's cohort for a world (× `scale` seeds), as a plan over the ten model slots."""
    name = world.meta.name
    conditions = [c.name for c in world.conditions]
    if name == "a1":
        return plan_world(world, ["mild", "strong"], "seed", 3 * scale)
    if name == "d1":
        return plan_world(world, ["canonical"], "all", scale)
    main = [c for c in conditions if c != "repaired"] or conditions
    target = COHORTS.get(name, 10 * len(main) * 3)
    seeds = max(1, math.ceil(target / (len(MODELS) * len(main))))
    return plan_world(world, main, "seed", seeds * scale)


def run(worlds: list[World], plans: list[WorldPlan], workers: int, keep: Path | None) -> float:
    folder = Path(tempfile.mkdtemp(prefix="eair-bench-")) if keep is None \
        else keep / f"w{workers}"
    shutil.rmtree(folder, ignore_errors=True)
    try:
        start = time.perf_counter()
        summary = run_study(worlds, plans, MODELS, folder, workers=workers)
        elapsed = time.perf_counter() - start
        with Store.open(folder / STORE_FILE, create=False) as store:
            assert store.count() == summary.attempts >= summary.cells
        return elapsed
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3, help="runs per setting (best kept)")
    parser.add_argument("--keep", type=Path, help="keep the study folders here")
    parser.add_argument("--scale", type=int, default=1,
                        help="multiply every cohort's seeds (a bigger workload)")
    args = parser.parse_args()
    start = time.perf_counter()
    paths = sorted((ROOT / "worlds").glob("*.eair"))
    worlds = [resolve_world(p) for p in paths]
    compile_s = time.perf_counter() - start
    plans = [plan(w, args.scale) for w in worlds]
    print(f"compiled {len(worlds)} world(s) in {compile_s:.1f}s")
    total = 0
    for w, p in zip(worlds, plans, strict=True):
        n = len(cells([p], MODELS))
        total += n
        paper = COHORTS.get(w.meta.name)
        print(f"  {w.meta.name}: {n} episodes ({', '.join(p.conditions)}; "
              f"{'seed-drawn' if p.instances is None else len(p.instances)} instance(s), "
              f"{len(p.seeds)} seed(s)){f'  paper cohort {paper}' if paper else ''}")
    missing = sorted(set(COHORTS) - {w.meta.name for w in worlds})
    if missing:
        print(f"  not shipped yet: {', '.join(missing)} (paper total 1,020 main episodes)")
    times = {}
    for workers in (1, 2):
        times[workers] = min(run(worlds, plans, workers, args.keep) for _ in range(args.repeat))
        print(f"workers={workers}: {total} episodes in {times[workers]:.2f}s "
              f"({total / times[workers]:.0f} episodes/s)")
    speedup = times[1] / times[2]
    print(f"2 workers: {times[2]:.2f}s  (target < {TARGET_SECONDS:.0f}s: "
          f"{'met' if times[2] < TARGET_SECONDS else 'MISSED'})")
    print(f"speed-up:  {speedup:.2f}x  (target >= {TARGET_SPEEDUP}: "
          f"{'met' if speedup >= TARGET_SPEEDUP else 'MISSED'})")


if __name__ == "__main__":
    main()
