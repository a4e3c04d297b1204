"""What an offline audit costs against the study it audits (issue 28, item 2's targets).

Runs `eairc study WORLDS --seeds N` then `eairc audit` on it, each as its own process,
and prints:

- CPU (user + system, of the process and its children) per episode of the study to run
  it and to audit it (which bundles every trace), and their ratio. Target: audit CPU
  per episode <= run CPU per episode. Both include their process's start (imports,
  compiling the worlds), and CPU time still grows under a loaded machine: compare runs
  made side by side;
- the audit folder's size against the traces it audits: bytes of its files (what the
  targets count) and, beside them, the disk blocks both take. Target: <= 0.5x;
- files in the audit folder per audited episode. Target: <= 5.

Nothing is asserted: figures are printed, with whether each target is met. Run it
with `PYTHONPATH` set to another checkout to measure that one (the commands are
`python -m eairdsl.cli` of the interpreter and path this script runs with).

    python benchmarks/audit_cost.py [--seeds N] [--worlds a1 d1] [--workers N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


ENV = {**os.environ, "LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def eairc(cwd: Path, *args: str) -> tuple[float, float]:
    """Run one eairc command in `cwd` (not the checkout: `python -m` would import the
    checkout's package whatever PYTHONPATH says); its CPU seconds, with its own
    children, and wall seconds."""
    cpu, wall = children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "eairdsl.cli", *args], env=ENV, cwd=cwd,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"eairc {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return children_cpu() - cpu, time.perf_counter() - wall


def tree(path: Path) -> tuple[int, int, int]:
    """(files, bytes of the files, bytes of disk blocks they take) under `path`."""
    files = size = blocks = 0
    for folder, _dirs, names in os.walk(path):
        for name in names:
            st = os.stat(os.path.join(folder, name))
            files += 1
            size += st.st_size
            blocks += st.st_blocks * 512
    return files, size, blocks


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--worlds", nargs="+", default=["a1", "d1"])
    parser.add_argument("--workers", type=int, default=1,
                        help="study workers (1: CPU figures without pool overhead)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the study and its audit in this folder (made anew)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eair-audit-cost-")) if args.keep is None else args.keep
    if args.keep is not None and work.exists():
        shutil.rmtree(work)
    study = work / "study"
    try:
        worlds = [str(ROOT / "worlds" / f"{w}.eair") for w in args.worlds]
        work.mkdir(parents=True, exist_ok=True)
        package = subprocess.run([sys.executable, "-c", "import eairdsl; print(eairdsl.__file__)"],
                                 env=ENV, cwd=work, capture_output=True, text=True, check=True)
        print(f"eairdsl: {Path(package.stdout.strip()).parent}")
        run_cpu, run_wall = eairc(work, "study", *worlds, "--seeds", str(args.seeds), "-o",
                                  str(study), "--workers", str(args.workers))
        audit_cpu, audit_wall = eairc(work, "audit", str(study))
        traces = study / "traces"
        episodes = sum(1 for _ in traces.rglob("*.jsonl"))
        audit = study / "audit" / "offline"
        index = json.loads((audit / "index.json").read_text(encoding="utf-8"))
        audited = len(index["entries"])
        t_files, t_bytes, t_blocks = tree(traces)
        a_files, a_bytes, a_blocks = tree(audit)
        per_run = run_cpu / episodes
        per_audit = audit_cpu / episodes  # every trace is bundled; equal ones audited once
        print(f"study: {' '.join(args.worlds)}, seeds {args.seeds}: {episodes} episode(s) "
              f"run, {audited} audited (episodes whose bundles read the same are audited "
              f"once); load average {os.getloadavg()[0]:.1f}")
        print(f"run:   {run_cpu:7.2f} s CPU ({run_wall:6.1f} s wall), "
              f"{1000 * per_run:6.1f} ms CPU per episode")
        print(f"audit: {audit_cpu:7.2f} s CPU ({audit_wall:6.1f} s wall), "
              f"{1000 * per_audit:6.1f} ms CPU per episode "
              f"({1000 * audit_cpu / audited:.1f} per audited episode)")
        print(f"  audit / run CPU per episode: {per_audit / per_run:.2f}x "
              f"(target <= 1: {met(per_audit <= per_run)})")
        print(f"  audit folder / traces, file bytes: {a_bytes / 1e6:.2f} MB / "
              f"{t_bytes / 1e6:.2f} MB = {a_bytes / t_bytes:.2f}x "
              f"(target <= 0.5: {met(a_bytes <= 0.5 * t_bytes)})")
        print(f"  audit folder / traces, disk blocks: {a_blocks / 1e6:.2f} MB / "
              f"{t_blocks / 1e6:.2f} MB = {a_blocks / t_blocks:.2f}x")
        print(f"  files in the audit folder: {a_files}, {a_files / audited:.2f} per audited "
              f"episode (target <= 5: {met(a_files <= 5 * audited)}); traces: {t_files}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
