"""Paper scale and past it: one study through the whole pipeline, every step measured.

Runs, as separate `eairc` processes, each on a fresh study of the shipped worlds
given (default D1 and A1) with three sim profiles over every condition and
instance and as many seeds as reach `--episodes`:

    study → audit → audit-study → repair (each world) → signals update → report → export-otel

and once more on a study `--small` times smaller, so the figures that must not
grow with the study can be compared. For every step it prints the exit code,
wall time, CPU (the process and every child it waited for) and peak RSS (the
largest of the process and its children, from `os.wait4`), then the issue-28
targets:

- every step exits 0 and peaks under 500 MB;
- offline audit CPU per episode <= the CPU to run the episode;
- audit folder <= 0.5x the traces it audits; <= 5 files written per episode;
- `export-otel` peak memory flat in study size (within 20% from small to large);
- a repair's CPU independent of the audit's size (within 20%).

A target is printed `met` or `MISSED` from the figures measured in this run; the
load average at the start and end is printed beside them (this machine is
shared: read CPU, not wall time). Nothing here asserts: it is a measurement.

    python benchmarks/scale.py [--episodes 20000] [--small 10] [--worlds d1,a1]
                               [--workers 2] [--keep DIR]

Figures (2026-12-03, this 2-core machine shared with three other jobs; CPU seconds):

    --episodes 20000 --small 10 (2,115 / 20,304 episodes; load 1.2 at start, 6.8 at end)
      every step exits 0; largest peak 311 MB (signals update at 20k)
      audit CPU/episode 7.2 vs run 9.3 ms (2k), 6.8 vs 9.6 ms (20k)
      audit folder 0.26x / 0.21x of the traces; 2.40 / 1.73 files per episode
      export-otel peak 71 / 96 MB in the run; 72 / 78 MB run alone after the trace
        listing's sort key stopped making a list of parts per path (load ~3)
      repair D1 4.6 / 7.1 s, A1 7.8 / 10.0 s in the run (the large half at load ~6);
        interleaved at load 2.4-4: D1 7.7, 8.0 / 10.3, 11.1 s
    --episodes 6000 --small 10 (846 / 6,345 episodes; load 0.2 -> 1.8)
      export-otel 70 / 77 MB; repair D1 (interleaved, three each, after the grader
      index kept labels) 5.7, 6.1, 6.9 / 6.2, 6.6, 6.9 s

What a repair still reads in proportion to its audit: the grader index's labels
(0.14 s for 6,345 traces) and its world's reports; and D.1's fresh cohort: each
draw whose content an audited episode already has is drawn again, so a larger
audit costs more draws (139 fresh cases took 157 runs from the 846-episode audit,
200 from 6,345, 236 from 20,304).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from eairdsl.api import resolve_world

ROOT = Path(__file__).resolve().parents[1]
PROFILES = "sim,sim:compliant,sim:reckless"
RSS_LIMIT_MB = 500.0


@dataclass
class Step:
    name: str
    code: int
    wall: float
    cpu: float
    rss_mb: float


def measure(name: str, argv: list[str], log: Path) -> Step:
    """Run one command to completion; its CPU and peak RSS from `os.wait4`."""
    start = time.perf_counter()
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "LITELLM_OFFLINE_MODE": "true",
                                     "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    step = Step(name, code, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
    print(f"  {name:<22} exit {code:>2}  wall {wall:7.1f} s  cpu {step.cpu:7.1f} s  "
          f"peak {step.rss_mb:6.0f} MB", flush=True)
    return step


def size_and_files(folder: Path) -> tuple[int, int]:
    total = files = 0
    for p in folder.rglob("*"):
        if p.is_file():
            files += 1
            total += p.stat().st_size
    return total, files


def seeds_for(worlds: list[str], episodes: int) -> int:
    """Seeds per cell so that three profiles × every condition × every instance of the
    worlds reach `episodes`."""
    per_seed = 0
    for w in worlds:
        world = resolve_world(ROOT / "worlds" / f"{w}.eair")
        per_seed += 3 * len(world.conditions) * max(1, len(world.instances))
    return max(1, math.ceil(episodes / per_seed))


def pipeline(folder: Path, worlds: list[str], episodes: int, workers: int,
             log: Path) -> dict[str, object]:
    eairc = [sys.executable, "-m", "eairdsl.cli"]
    study = folder / "study"
    seeds = seeds_for(worlds, episodes)
    files = [str(ROOT / "worlds" / f"{w}.eair") for w in worlds]
    print(f"{episodes} episodes asked: {', '.join(worlds)} × {PROFILES} × all conditions × "
          f"all instances × {seeds} seeds", flush=True)
    steps = [measure("study", [*eairc, "study", *files, "--models", PROFILES,
                               "--seeds", str(seeds), "--workers", str(workers),
                               "-o", str(study)], log)]
    traces_bytes, n_traces = size_and_files(study / "traces")
    audit = study / "audit" / "offline"
    steps.append(measure("audit", [*eairc, "audit", str(study), "-o", str(audit)], log))
    audit_bytes, audit_files = size_and_files(audit) if audit.is_dir() else (0, 0)
    steps.append(measure("audit-study", [*eairc, "audit-study", str(study)], log))
    for w in worlds:
        steps.append(measure(f"repair {w}", [*eairc, "repair", str(ROOT / "worlds" / f"{w}.eair"),
                                             "--audit", str(audit),
                                             "-o", str(folder / f"repair-{w}")], log))
    steps.append(measure("signals update", [*eairc, "signals", "update", str(audit),
                                            "--store", str(folder / "signals.sqlite")], log))
    steps.append(measure("report", [*eairc, "report", str(study)], log))
    steps.append(measure("export-otel", [*eairc, "export-otel", str(study),
                                         "-o", str(folder / "otel.json")], log))
    return {"steps": steps, "episodes": n_traces, "traces_bytes": traces_bytes,
            "audit_bytes": audit_bytes, "audit_files": audit_files}


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--small", type=int, default=10,
                    help="the comparison study is this many times smaller")
    ap.add_argument("--worlds", default="d1,a1")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="keep the studies here (default: a temp folder)")
    args = ap.parse_args()
    worlds = args.worlds.split(",")
    base = args.keep or Path(tempfile.mkdtemp(prefix="eair-scale-"))
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores shared); "
          f"logs in {base}/*.log", flush=True)
    results = {}
    try:
        for label, n in (("small", max(1, args.episodes // args.small)), ("large", args.episodes)):
            folder = base / label
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            print(f"\n[{label}]", flush=True)
            results[label] = pipeline(folder, worlds, n, args.workers, base / f"{label}.log")
    finally:
        print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)

    print("\ntargets (issue 28):")
    for label, res in results.items():
        steps: list[Step] = res["steps"]  # type: ignore[assignment]
        n = int(res["episodes"])  # type: ignore[call-overload]
        by = {s.name: s for s in steps}
        failed = [s.name for s in steps if s.code != 0]
        worst = max(steps, key=lambda s: s.rss_mb)
        print(f"  [{label}: {n} episodes]")
        print(f"    every step exits 0: {verdict(not failed)}"
              + (f" (failed: {', '.join(failed)})" if failed else ""))
        print(f"    peak RSS < {RSS_LIMIT_MB:.0f} MB per process: "
              f"{verdict(worst.rss_mb < RSS_LIMIT_MB)} (largest {worst.rss_mb:.0f} MB, "
              f"{worst.name})")
        if n:
            run_cpu, audit_cpu = by["study"].cpu / n, by["audit"].cpu / n
            print(f"    audit CPU per episode <= run CPU per episode: "
                  f"{verdict(audit_cpu <= run_cpu)} ({1000 * audit_cpu:.1f} ms vs "
                  f"{1000 * run_cpu:.1f} ms)")
            ratio = int(res["audit_bytes"]) / max(1, int(res["traces_bytes"]))  # type: ignore[call-overload]
            print(f"    audit folder <= 0.5x traces: {verdict(ratio <= 0.5)} "
                  f"({int(res['audit_bytes']) / 1e6:.1f} MB for "  # type: ignore[call-overload]
                  f"{int(res['traces_bytes']) / 1e6:.1f} MB: {ratio:.2f}x)")  # type: ignore[call-overload]
            per = int(res["audit_files"]) / n  # type: ignore[call-overload]
            print(f"    <= 5 files per audited episode: {verdict(per <= 5)} ({per:.2f})")
    if "small" in results and "large" in results:
        small = {s.name: s for s in results["small"]["steps"]}  # type: ignore[attr-defined]
        large = {s.name: s for s in results["large"]["steps"]}  # type: ignore[attr-defined]
        a, b = small["export-otel"].rss_mb, large["export-otel"].rss_mb
        print(f"  export-otel peak flat in study size (±20%): {verdict(b <= 1.2 * a)} "
              f"({a:.0f} MB small, {b:.0f} MB large)")
        for w in worlds:
            x, y = small[f"repair {w}"].cpu, large[f"repair {w}"].cpu
            print(f"  repair {w} CPU independent of the audit's size (±20%): "
                  f"{verdict(abs(y - x) <= 0.2 * x)} ({x:.1f} s small, {y:.1f} s large)")


if __name__ == "__main__":
    main()
