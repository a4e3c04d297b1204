"""The world suite (issue 27): every shipped world, its offline rates, what is mechanical,
and whether the whole loop reaches an accepted repair.

For each `worlds/*.eair` (or `--worlds a1,c2`):

1. a sim study over every condition (`--seeds` seeds, one instance per seed) with the
   world's shifts and without them (`--shifts both`: the `sim:mechanics` twin), so each
   condition contrast against the first condition is classified `mechanical`,
   `declared`, `unclear` or `none` (`eairdsl.study.report.Provenance`);
2. unless `--no-loop`: a study of `--loop-seeds` seeds, the offline audit, and
   `eairc repair` with the catalogue agent and the mechanical reviewer, as a user runs
   them (`eairc study … && eairc audit … && eairc repair …`).

It prints one row per world × condition (realized k/n and utility k/n with the
shifts, the contrast and its provenance) and one loop row per world (episodes, realized,
supported findings and leads on them, the decision with ScopeOK/ReviewOK/AuditPass/
Retain and rounds). The figures are offline: a model of each world's mechanics plus
its declared hypotheses (shifts), never evidence about LLMs.

    python benchmarks/suite.py [--worlds a2,c3] [--seeds 10] [--loop-seeds 5] [--no-loop]
                               [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]


def _eairc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eairdsl.cli", *args], capture_output=True,
                          text=True, timeout=3600, check=False)


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "—"


def rates(name: str, root: Path, seeds: int) -> list[dict[str, Any]]:
    """Realized and utility per condition (with the shifts) and each contrast's provenance."""
    from eairdsl.study.report import PRIMARY, analyse
    from eairdsl.study.store import STORE_FILE, Store

    out = root / name / "rates"
    done = _eairc("study", str(ROOT / "worlds" / f"{name}.eair"), "--seeds", str(seeds),
                  "--shifts", "both", "--out", str(out))
    if done.returncode != 0:
        raise SystemExit(f"{name}: eairc study failed\n{done.stderr[-2000:]}")
    with Store.open(out / STORE_FILE, create=False) as store:
        rows, worlds = store.rows(), store.worlds()
    result = analyse([r for r in rows if not str(r["agents"]).endswith(":mechanics")],
                     worlds, resamples=0).worlds[0]
    verdicts = {p.condition: p for p in analyse(rows, worlds, resamples=0).worlds[0].provenance
                if p.endpoint == PRIMARY}
    table = []
    for condition, cells in result.by_condition:
        p = verdicts.get(condition)
        contrast = p.mechanics if p is not None and p.mechanics is not None else None
        table.append({"world": name, "condition": condition,
                      "realized": _frac(cells["realized"].k, cells["realized"].n),
                      "utility": _frac(cells["utility"].k, cells["utility"].n),
                      "mechanics_diff": None if contrast is None else round(contrast.diff, 3),
                      "provenance": p.verdict if p is not None else "reference"})
    return table


def loop(name: str, root: Path, seeds: int) -> dict[str, Any]:
    """`eairc study` → `eairc audit` → `eairc repair`, offline, as a user runs them."""
    world = str(ROOT / "worlds" / f"{name}.eair")
    study, audit, repair = root / name / "study", root / name / "audit", root / name / "repair"
    started = time.perf_counter()
    for step in (("study", world, "--seeds", str(seeds), "--out", str(study)),
                 ("audit", str(study), "-o", str(audit))):
        done = _eairc(*step)
        if done.returncode != 0:
            return {"world": name, "decision": f"{step[0]} failed",
                    "error": done.stderr[-500:]}
    supported = leads = 0
    index = json.loads((audit / "index.json").read_text(encoding="utf-8"))
    for entry in index.get("entries", []):
        if entry.get("status") != "valid":
            continue
        report = json.loads((audit / "reports" / f"{entry['episode']}.json")
                            .read_text(encoding="utf-8"))
        supported += sum(1 for f in report["findings"] if f["status"] == "supported")
        leads += len(report["leads"])
    from eairdsl.study.store import STORE_FILE, Store

    with Store.open(study / STORE_FILE, create=False) as store:
        realized = sum(1 for r in store.rows() if r["realized"] == 1)
    done = _eairc("repair", world, "--audit", str(audit), "-o", str(repair))
    decision: dict[str, Any] = {}
    if (repair / "acceptance.json").is_file():
        decision = json.loads((repair / "acceptance.json").read_text(encoding="utf-8"))
    return {"world": name, "episodes": len(index.get("entries", [])),
            "realized": realized, "supported": supported, "leads": leads,
            "accepted": done.returncode == 0,
            "decision": {k: decision.get(k) for k in
                         ("scope_ok", "review_ok", "audit_pass", "retain", "rounds")},
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--loop-seeds", type=int, default=5)
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    names = [w for w in args.worlds.split(",") if w] or sorted(
        p.stem for p in (ROOT / "worlds").glob("*.eair"))
    root = args.keep or Path(tempfile.mkdtemp(prefix="eair-suite-"))
    print(f"{'world':6} {'condition':22} {'realized':>9} {'utility':>9} "
          f"{'mech Δ':>7}  provenance")
    for name in names:
        for row in rates(name, root, args.seeds):
            diff = "" if row["mechanics_diff"] is None else f"{100 * row['mechanics_diff']:+.0f}pp"
            print(f"{name:6} {row['condition']:22} {row['realized']:>9} {row['utility']:>9} "
                  f"{diff:>7}  {row['provenance']}", flush=True)
    if args.no_loop:
        return
    print()
    for name in names:
        print(json.dumps(loop(name, root, args.loop_seeds)), flush=True)
    print(f"outputs: {root}")


if __name__ == "__main__":
    main()
