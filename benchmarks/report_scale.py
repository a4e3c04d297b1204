"""Report build time and size at 5,000 episodes (issue 13: < 30 s, < 50 MB).

Builds (or reuses) an offline sim study of the paper's cohorts over every
shipped world — the mix of `benchmarks/study.py` at `--scale 5`, ten model
slots, 5,100 episodes — then times `eairc report` on it into a fresh folder and
prints the build time and the size of the report folder, split into its pages,
the trace viewer's chunk files and the episode list's. Before the trace viewer,
one HTML page per trace made this 26 s and 219 MB (5,122 episodes).

    python benchmarks/report_scale.py [--keep DIR] [--scale K] [--workers N]
                                      [--resamples R] [--study DIR]

`--keep DIR` keeps the study there (a second run resumes it: nothing reruns);
`--study DIR` reports an existing study instead of building one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from study import MODELS, ROOT, plan

from eairdsl.api import resolve_world
from eairdsl.study.executor import run_study
from eairdsl.study.report import write_report
from eairdsl.study.store import STORE_FILE, Store

TARGET_SECONDS, TARGET_MB = 30.0, 50.0


def build_study(folder: Path, scale: int, workers: int) -> float:
    worlds = [resolve_world(p) for p in sorted((ROOT / "worlds").glob("*.eair"))]
    plans = [plan(w, scale) for w in worlds]
    start = time.perf_counter()
    run_study(worlds, plans, MODELS, folder, workers=workers)
    return time.perf_counter() - start


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build the study here and keep it")
    parser.add_argument("--study", type=Path, help="report this existing study")
    parser.add_argument("--scale", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resamples", type=int, default=20_000)
    args = parser.parse_args()
    temp: Path | None = None
    if args.study is not None:
        study = args.study
    else:
        study = args.keep or (temp := Path(tempfile.mkdtemp(prefix="eair-report-")) / "study")
        seconds = build_study(study, args.scale, args.workers)
        print(f"study: {study} ({seconds:.1f}s to run or resume)")
    try:
        with Store.open(study / STORE_FILE, create=False) as store:
            episodes = store.count()
        out = Path(tempfile.mkdtemp(prefix="eair-report-out-")) / "report"
        start = time.perf_counter()
        write_report(study, out, resamples=args.resamples)
        seconds = time.perf_counter() - start
        chunks = list((out / "traces").glob("*.js"))
        total = size_mb(out)
        print(f"episodes: {episodes}")
        print(f"report build: {seconds:.1f}s (target < {TARGET_SECONDS:.0f}s)")
        print(f"report size: {total:.1f} MB (target < {TARGET_MB:.0f} MB)")
        for name in ("index.html", "episodes.html", "trace.html"):
            print(f"  {name}: {(out / name).stat().st_size / 1e6:.2f} MB")
        print(f"  traces/: {len(chunks)} chunk files, {size_mb(out / 'traces'):.1f} MB "
              f"(traces themselves: {size_mb(study / 'traces'):.1f} MB)")
        rows = list((out / "episodes").glob("*.js"))
        print(f"  episodes/: {len(rows)} chunk files of the episode list's rows, "
              f"{size_mb(out / 'episodes'):.2f} MB")
        shutil.rmtree(out.parent, ignore_errors=True)
        ok = seconds < TARGET_SECONDS and total < TARGET_MB
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        if temp is not None:
            shutil.rmtree(temp.parent, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
