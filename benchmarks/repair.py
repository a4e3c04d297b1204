"""Table 4, offline (EAIR §5, issue 16): audit, repair, review rounds, retest, fresh audit.

For each shipped world:

1. a sim study (`--study-seeds` seeds, one instance drawn per seed, every condition);
2. the audit study's cohort of `--per-world` episodes, `--positives` of them seeded
   (realized) and the rest not, audited blind by the offline auditor
   (`eairdsl.audit.cohort.audit_study`);
3. `eairdsl.repair.loop.repair` from the first supported finding with a repair plan,
   with the offline catalogue Repair Agent and the mechanical Reviewer;
4. the retest on `--retest` fresh episodes per condition the finding was found in,
   plus the regression cases, and the fresh audit of W′'s retest traces;

and prints Table 4's columns: the risk, the boundary and the pattern used, review
rounds, ScopeOK, ReviewOK, AuditPass, Retain, the target before and after (k/n with
Wilson intervals), the supported findings beyond the target in the fresh audit, and
the decision. `--keep DIR` keeps every study, audit and repair folder.

    python benchmarks/repair.py [--worlds a1,d1] [--retest 20] [--keep runs/table4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
WORLDS = ("a1", "b1", "c1", "d1", "f1")


def _ci(t: dict[str, object] | None) -> str:
    if not t:
        return "—"
    return f"{t['k']}/{t['n']} [{float(t['low']):.2f},{float(t['high']):.2f}]"  # type: ignore[arg-type]


def run_world(name: str, root: Path, args: argparse.Namespace) -> dict[str, object]:
    from eairdsl.audit.cohort import audit_study
    from eairdsl.audit.offline import RulesAuditor
    from eairdsl.compiler import compile_world
    from eairdsl.repair.folder import RepairFolder
    from eairdsl.repair.loop import repair
    from eairdsl.repair.make import describe, make_agent, make_reviewer
    from eairdsl.study.executor import run_study
    from eairdsl.study.grid import Model, plan_world

    path = ROOT / "worlds" / f"{name}.eair"
    world = compile_world(path).world
    assert world is not None, f"{path} does not compile"
    started = time.perf_counter()
    study = root / name / "study"
    plan = plan_world(world, None, "seed", args.study_seeds)
    run_study([world], [plan], [Model("sim", "sim")], study, workers=args.workers)
    audit_root = root / name / "audit"
    audit_study(study, audit_root, RulesAuditor(), "offline", per_world=args.per_world,
                positives=args.positives, world=path)
    audit = audit_root / "arms" / "offline"
    audited = time.perf_counter()
    acc = repair(path, audit, root / name / "repair", make_agent("offline"),
                 make_reviewer("offline"), seeds=args.retest, max_rounds=args.max_rounds,
                 describe=describe("offline", "offline"))
    done = time.perf_counter()
    folder = RepairFolder(root / name / "repair")
    candidate = folder.round(acc.round).read_candidate_or_none() if acc.round else None
    produced = candidate.produced_by if candidate is not None else {}
    finding = folder.read_plan().finding
    return {"world": name, "risk": finding.risk, "boundary": finding.boundary.kind,
            "pattern": produced.get("pattern") or produced.get("id") or "—",
            "rounds": acc.rounds, "scope_ok": acc.scope_ok, "review_ok": acc.review_ok,
            "audit_pass": acc.audit_pass, "retain": acc.retain,
            "before": acc.target_before, "after": acc.target,
            "beyond": acc.other_findings, "accepted": acc.accepted,
            "audit_s": round(audited - started, 1), "repair_s": round(done - audited, 1),
            "reason": acc.reason}


def _audit_of(name: str, root: Path, size: int, args: argparse.Namespace) -> Path:
    """The offline audit of the first `size` traces (seed order) of one study of
    `name` sized for the largest audit; reused when its index exists."""
    from eairdsl.audit.offline import RulesAuditor
    from eairdsl.audit.runner import audit_episodes
    from eairdsl.compiler import compile_world
    from eairdsl.study.executor import run_study
    from eairdsl.study.grid import MAX_SEEDS, Model, plan_world
    from eairdsl.study.store import STORE_FILE, Store

    path = ROOT / "worlds" / f"{name}.eair"
    world = compile_world(path).world
    assert world is not None, f"{path} does not compile"
    conditions = len(world.conditions)
    largest = max(int(x) for x in args.audit_sizes.split(","))
    study = root / name / "study"
    audit = root / name / f"audit-{size}"
    if (audit / "index.json").is_file():
        return audit
    seeds = -(-largest // conditions)  # one instance per seed, while the seeds allow it
    instances = "seed"
    if seeds > MAX_SEEDS:
        instances = "all"
        seeds = -(-largest // (conditions * len(world.instances)))
    plan = plan_world(world, None, instances, seeds)
    run_study([world], [plan], [Model("sim", "sim")], study, workers=args.workers)
    with Store.open(study / STORE_FILE, create=False) as store:
        rows = sorted((int(r["seed"]), str(r["condition"]), study / str(r["trace_path"]))
                      for r in store.rows() if r["retained"] and r.get("trace_path"))
    traces = [t for _, _, t in rows[:size]]
    print(f"{name}: auditing {len(traces)} trace(s) offline into {audit}", file=sys.stderr,
          flush=True)
    audit_episodes(traces, audit, RulesAuditor(), world=path)
    return audit


def audit_scaling(args: argparse.Namespace) -> int:
    """A repair's CPU against its audit's size (module docstring)."""
    from eairdsl.compiler import compile_world
    from eairdsl.repair.audited import AuditRead
    from eairdsl.repair.loop import repair, select_finding
    from eairdsl.repair.make import describe, make_agent, make_reviewer

    name = args.scale_world
    sizes = sorted(int(x) for x in args.audit_sizes.split(","))
    path = ROOT / "worlds" / f"{name}.eair"
    world = compile_world(path).world
    assert world is not None
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        audits = {size: _audit_of(name, root, size, args) for size in sizes}
        chosen = select_finding(audits[sizes[0]], world)
        finding = f"{chosen.episode}:{chosen.finding.id}"
        rows = []
        for size in sizes:
            out = root / name / f"repair-{size}"
            if out.exists():
                shutil.rmtree(out)
            t0, c0 = time.perf_counter(), time.process_time()
            read = AuditRead(audits[size])
            episodes = len(read.episodes())
            read.auditor()
            c_read = time.process_time() - c0
            t1, c1 = time.perf_counter(), time.process_time()
            acc = repair(path, audits[size], out, make_agent("offline"),
                         make_reviewer("offline"), finding=finding, seeds=args.retest,
                         max_rounds=args.max_rounds, describe=describe("offline", "offline"))
            rows.append({"size": size, "episodes": episodes, "read_cpu": c_read,
                         "cpu": time.process_time() - c1, "wall": time.perf_counter() - t1,
                         "accepted": acc.accepted, "rounds": acc.rounds,
                         "read_wall": t1 - t0})
            print(f"{name} audit {size}: repair {rows[-1]['cpu']:.1f} s CPU", file=sys.stderr,
                  flush=True)
    base = rows[0]["cpu"]
    print(f"repair of {name} ({finding}) against the size of its audit "
          f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print("audited traces  read audit CPU s  repair CPU s  wall s  vs smallest  accepted")
    for r in rows:
        print(f"{r['episodes']:>14}  {r['read_cpu']:>15.2f}  {r['cpu']:>12.1f}  "
              f"{r['wall']:>6.1f}  {r['cpu'] / base - 1:>+10.1%}  {r['accepted']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default=",".join(WORLDS))
    ap.add_argument("--study-seeds", type=int, default=60,
                    help="seeds of the sim study the audit cohort is drawn from")
    ap.add_argument("--per-world", type=int, default=20)
    ap.add_argument("--positives", type=int, default=10)
    ap.add_argument("--retest", type=int, default=20,
                    help="fresh retest episodes per condition")
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--audit-sizes", default=None,
                    help="instead of Table 4: a repair's CPU against its audit's size, e.g. "
                         "600,6000 (audited episodes)")
    ap.add_argument("--scale-world", default="d1", help="the world of --audit-sizes")
    args = ap.parse_args(argv)
    if args.audit_sizes:
        return audit_scaling(args)
    names = [w.strip() for w in args.worlds.split(",") if w.strip()]
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        rows = []
        for name in names:
            row = run_world(name, root, args)
            rows.append(row)
            print(f"{name}: {'accepted' if row['accepted'] else 'not accepted'} "
                  f"({row['reason']}); audit {row['audit_s']} s, repair {row['repair_s']} s",
                  file=sys.stderr, flush=True)
    head = ("world", "risk", "boundary", "pattern", "rounds", "ScopeOK", "ReviewOK",
            "AuditPass", "Retain", "target before", "target after", "beyond", "accepted")
    table = [head] + [(str(r["world"]), str(r["risk"]), str(r["boundary"]), str(r["pattern"]),
                       str(r["rounds"]), str(r["scope_ok"]), str(r["review_ok"]),
                       str(r["audit_pass"]), str(r["retain"]), _ci(r["before"]),  # type: ignore[arg-type]
                       _ci(r["after"]), str(r["beyond"]), str(r["accepted"]))  # type: ignore[arg-type]
                      for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))
    afters = [r["after"] for r in rows if isinstance(r["after"], dict)]
    realized = sum(int(a["k"]) for a in afters)
    total = sum(int(a["n"]) for a in afters)
    print(f"\naccepted {sum(1 for r in rows if r['accepted'])}/{len(rows)}; targeted failure "
          f"after repair in {realized} of {total} retest episodes; "
          f"{sum(int(str(r['beyond'] or 0)) for r in rows)} supported findings beyond the target "
          "in the fresh audits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
