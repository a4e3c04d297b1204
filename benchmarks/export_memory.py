"""`eairc export-otel` peak memory against study size (issue 28: flat, ±20% from 1k to 20k).

Before streaming, the export built the whole OTLP document in memory: 1.25 GB
peak for 1,050 episodes, 1.9 GB for 1,269, and a 20,000-episode study could not
be exported. Now it writes episode by episode.

The corpus: sim episodes of every shipped world (`--base` seeds each, offline),
copied to N episodes with a new seed in each copy's header, so every copy is a
distinct episode (its own trace id) of a real trace's size and shape. For each
N and each format the export runs as a child process (`python -m eairdsl.cli`
… `export-otel`), and its peak RSS is read from the kernel's accounting of that
child (`os.wait4`, the `resource` usage of one process; this process imports
no eairdsl and runs the sim episodes in a child of its own, so the parent's
memory a forked child carries until it execs stays small). Prints, per run, the
episodes, the traces' and the output's size, the wall time and the peak RSS,
then the ratio of the largest study's peak to the smallest's. Nothing is
asserted: compare the figures with the target.

    python benchmarks/export_memory.py [--sizes 300 3000] [--base 4]
                                       [--formats otlp-json jsonl] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def base_traces(folder: Path, seeds: int) -> list[Path]:
    """`seeds` sim episodes of every shipped world's first condition, written under `folder`
    by a child process: this process stays small, since a child forked from it counts the
    parent's memory in its own peak until it execs."""
    subprocess.run([sys.executable, __file__, "--make-base", str(folder), "--base", str(seeds)],
                   env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    return sorted(folder.rglob("*.jsonl"))


def make_base(folder: Path, seeds: int) -> None:
    from eairdsl.api import resolve_world, run_episode

    for world_file in sorted((ROOT / "worlds").glob("*.eair")):
        world = resolve_world(world_file)
        for seed in range(seeds):
            run_episode(world, None, None, seed, agents="sim", out=folder / world_file.stem)


def corpus(base: list[Path], folder: Path, n: int) -> int:
    """`n` episodes under `folder`, each a base trace with its own seed; returns their bytes."""
    total = 0
    for i in range(n):
        src = base[i % len(base)]
        lines = src.read_text(encoding="utf-8").split("\n", 1)
        header = json.loads(lines[0])
        header["seed"] = 1000 + i
        out = folder / header["world"] / str(header["condition"]) / (
            f"{header['instance']}-s{header['seed']}.jsonl")
        out.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(header, sort_keys=True, ensure_ascii=False) + "\n" + lines[1]
        out.write_text(text, encoding="utf-8")
        total += len(text.encode("utf-8"))
    return total


def measure(runs: Path, out: Path, fmt: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one `eairc export-otel` in a child process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "eairdsl.cli", "export-otel", str(runs), "-o", str(out),
           "--format", fmt]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert child.stdout is not None
    said = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"export failed (exit {child.returncode}): {said.decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024  # Linux reports kilobytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[300, 3000])
    parser.add_argument("--base", type=int, default=4, help="sim seeds per shipped world")
    parser.add_argument("--formats", nargs="+", default=["otlp-json", "jsonl"])
    parser.add_argument("--keep", type=Path, help="build the corpora here and keep them")
    parser.add_argument("--make-base", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_base is not None:
        make_base(args.make_base, args.base)
        return 0
    work = args.keep or Path(tempfile.mkdtemp(prefix="eair-export-mem-"))
    try:
        base = base_traces(work / "base", args.base)
        print(f"base: {len(base)} sim traces of {len({p.parts[-3] for p in base})} worlds, "
              f"{sum(p.stat().st_size for p in base) / len(base) / 1e3:.0f} KB mean")
        peaks: dict[str, dict[int, float]] = {f: {} for f in args.formats}
        for n in sorted(args.sizes):
            runs = work / f"runs-{n}"
            if not runs.is_dir():
                corpus(base, runs, n)
            traces_mb = sum(p.stat().st_size for p in runs.rglob("*.jsonl")) / 1e6
            for fmt in args.formats:
                out = work / f"otel-{n}.{'json' if fmt == 'otlp-json' else 'jsonl'}"
                seconds, peak = measure(runs, out, fmt)
                peaks[fmt][n] = peak
                print(f"{n:>6} episodes  {fmt:<9}  traces {traces_mb:7.1f} MB  "
                      f"output {out.stat().st_size / 1e6:7.1f} MB  {seconds:6.1f} s  "
                      f"peak RSS {peak:6.1f} MB")
                out.unlink()
        for fmt, by_size in peaks.items():
            small, large = min(by_size), max(by_size)
            if small != large:
                ratio = by_size[large] / by_size[small]
                print(f"{fmt}: peak at {large} / peak at {small} episodes = {ratio:.2f} "
                      f"(target: within 0.80-1.20)")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
