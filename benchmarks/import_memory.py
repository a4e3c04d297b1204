"""Peak memory of `eairc import` on a large source (issue 28: 200 MB took 605 MB).

Writes synthetic sources of about `--mb` megabytes (a MAD JSON list, the same records as
JSON lines, a τ-bench JSON list) and runs `eairc import` on each in a child process,
printing the child's peak RSS and seconds. Prints only; nothing is asserted.

    python benchmarks/import_memory.py --mb 200
    PYTHONPATH=/path/to/other/checkout python benchmarks/import_memory.py  # compare
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: characters of one record's conversation (about 100 KB a record)
TURNS, TURN = 200, 500


def _mad_records(count: int) -> Iterator[dict[str, object]]:
    for i in range(count):
        blocks = "".join(f"user_proxy (to assistant):\n\n{'q' * TURN} {k}\n\n{'-' * 40}\n"
                         f"assistant (to user_proxy):\n\n{'a' * TURN} {k}\n\n{'-' * 40}\n"
                         for k in range(TURNS // 2))
        yield {"mas_name": "AG2", "llm_name": "model", "benchmark_name": "GSM",
               "trace_id": i, "trace": {"trajectory": blocks, "index": i},
               "mast_annotation": {"1.1": 0}}


def _tau_records(count: int) -> Iterator[dict[str, object]]:
    for i in range(count):
        traj = [{"role": "system", "content": "policy " * 50}]
        for k in range(TURNS // 2):
            traj.append({"role": "user", "content": f"{'u' * TURN} {k}"})
            traj.append({"role": "assistant", "content": f"{'v' * TURN} {k}"})
        yield {"task_id": i, "trial": 0, "reward": 1.0, "info": {"k": i}, "traj": traj}


def _write_list(path: Path, records: Iterator[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[")
        for n, rec in enumerate(records):
            handle.write(("," if n else "") + json.dumps(rec))
        handle.write("]")


def _write_lines(path: Path, records: Iterator[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec) + "\n")


def _run(fmt: str, src: Path, out: Path) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit code) of `eairc import FMT SRC -o OUT`, the peak
    read from that child's own resource usage (`os.wait4`). The child runs in OUT's
    folder, so `-m` does not put a checkout in the working directory ahead of
    PYTHONPATH."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "eairdsl.cli", "import", fmt, str(src),
                              "-o", str(out)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=dict(os.environ), cwd=out.parent)
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if child.returncode:
        print(errors.decode(errors="replace")[-500:], file=sys.stderr)
    return usage.ru_maxrss / 1024, seconds, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of each source")
    parser.add_argument("--only", default="", help="run only the sources whose file name "
                        "contains this (mad.json, mad.jsonl, tau.json)")
    args = parser.parse_args()
    count = max(1, args.mb * 1024 * 1024 // (TURNS * (TURN + 60)))
    import eairdsl
    print(f"eairdsl from {Path(eairdsl.__file__).parent}; {count} records a source; "
          f"load {os.getloadavg()[0]:.1f}")
    cases: list[tuple[str, str, Callable[[Path, Iterator[dict[str, object]]], None],
                      Callable[[int], Iterator[dict[str, object]]]]] = [
        ("mad", "mad.json", _write_list, _mad_records),
        ("mad", "mad.jsonl", _write_lines, _mad_records),
        ("tau-bench", "tau.json", _write_list, _tau_records)]
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, name, write, records in cases:
            if args.only and args.only not in name:
                continue
            src = Path(tmp) / name
            write(src, records(count))
            size = src.stat().st_size / (1024 * 1024)
            rss, seconds, code = _run(fmt, src, Path(tmp) / f"out-{name}")
            print(f"{fmt:10} {name:10} {size:7.1f} MB source: peak RSS {rss:7.1f} MB, "
                  f"{seconds:6.1f} s, exit {code}")
            src.unlink()
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
