"""Compile-time and start-up figures for `eairc`, printed next to their targets.

    python benchmarks/compile.py [--repeat N] [--runs M]

* all shipped worlds (`worlds/*.eair`) through `eairdsl.compiler.compile_world`
  in this process: one warm-up pass, then the best of N passes (target < 1 s);
* the same compile cold, in a fresh interpreter (imports included);
* `eairc --help` cold start against `python -c pass`: the median of M runs of
  each, as absolute seconds and as a ratio (target: `eairc --help` < 0.5 s).

Nothing is written to disk; runs are offline (LITELLM_OFFLINE_MODE=true). A world
with errors is still timed (up to where checking stops) but flagged, and the
script then exits 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORLDS = sorted((ROOT / "worlds").glob("*.eair"))
TARGET_ALL_WORLDS = 1.0
TARGET_HELP = 0.5

ENV = {**os.environ, "LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

COLD_COMPILE = """
import sys, time
t0 = time.perf_counter()
from pathlib import Path
from eairdsl.compiler import compile_world
t1 = time.perf_counter()
for p in sys.argv[1:]:
    compile_world(Path(p))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def verdict(value: float, target: float) -> str:
    return f"target < {target:g} s: {'ok' if value < target else 'MISSED'}"


def compile_all() -> tuple[float, dict[str, float], dict[str, int]]:
    """Seconds for all worlds, seconds per world, and error counts of worlds with errors."""
    from eairdsl.compiler import compile_world

    each: dict[str, float] = {}
    broken: dict[str, int] = {}
    for path in WORLDS:
        start = time.perf_counter()
        result = compile_world(path)
        each[path.name] = time.perf_counter() - start
        if not result.ok:
            broken[path.name] = len(result.diagnostics.errors)
    return sum(each.values()), each, broken


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=ENV, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def eairc_command() -> list[str]:
    """The installed console script next to this interpreter, else `python -m eairdsl.cli`."""
    script = Path(sys.executable).parent / "eairc"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "eairdsl.cli"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="in-process passes (best of)")
    parser.add_argument("--runs", type=int, default=7, help="subprocess runs (median of, >= 5)")
    args = parser.parse_args()
    runs = max(5, args.runs)
    if not WORLDS:
        raise SystemExit(f"no worlds in {ROOT / 'worlds'}")
    os.environ.update(LITELLM_OFFLINE_MODE="true", LITELLM_LOCAL_MODEL_COST_MAP="True")
    print(f"python {sys.version.split()[0]}, {len(WORLDS)} world(s): "
          f"{', '.join(p.name for p in WORLDS)}")

    # cold first: a fresh interpreter that has never imported or compiled anything
    cold_start = time.perf_counter()
    imports, cold_compile = map(float, subprocess.run(
        [sys.executable, "-c", COLD_COMPILE, *map(str, WORLDS)], cwd=ROOT, env=ENV,
        check=True, capture_output=True, text=True).stdout.split())
    cold_wall = time.perf_counter() - cold_start

    compile_all()  # warm-up: imports, grammar, caches
    passes = [compile_all() for _ in range(max(1, args.repeat))]
    totals = [total for total, _, _ in passes]
    broken = passes[-1][2]
    best = min(totals)
    print("\ncompile all worlds (compile_world: parse, check, data, cards, IR)")
    print(f"  {f'warm, best of {len(passes)}:':<22}{best:7.3f} s   "
          f"(median {statistics.median(totals):.3f} s)   {verdict(best, TARGET_ALL_WORLDS)}")
    for path in WORLDS:
        flag = (f"   HAS {broken[path.name]} ERROR(S): timed up to where checking stops"
                if path.name in broken else "")
        print(f"    {path.name + ':':<18}{min(e[path.name] for _, e, _ in passes):7.3f} s{flag}")
    cold = imports + cold_compile
    print(f"  {'cold, fresh process:':<22}{cold:7.3f} s   (imports {imports:.3f} s + compile "
          f"{cold_compile:.3f} s; {cold_wall:.3f} s wall with interpreter start-up)   "
          f"{verdict(cold, TARGET_ALL_WORLDS)}")

    eairc = eairc_command()
    wall([*eairc, "--help"])  # warm the OS file cache, not the interpreter
    help_runs = [wall([*eairc, "--help"]) for _ in range(runs)]
    pass_runs = [wall([sys.executable, "-c", "pass"]) for _ in range(runs)]
    help_med, pass_med = statistics.median(help_runs), statistics.median(pass_runs)
    label = " ".join([Path(eairc[0]).name, *eairc[1:], "--help"]) + ":"
    print(f"\ncold start, median of {runs} subprocess runs each")
    print(f"  {label:<22}{help_med:7.3f} s   (min {min(help_runs):.3f}, "
          f"max {max(help_runs):.3f})   {verdict(help_med, TARGET_HELP)}")
    print(f"  {'python -c pass:':<22}{pass_med:7.3f} s   (min {min(pass_runs):.3f}, "
          f"max {max(pass_runs):.3f})")
    print(f"  {'ratio:':<22}{help_med / pass_med:7.1f}x   "
          f"(eairc's own start-up {help_med - pass_med:.3f} s)")
    if broken:
        print(f"\nworlds with errors: {', '.join(sorted(broken))} (run `eairc check` on them)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
