"""Audit stage costs: bundles, the annotated graph, queries, offline audits, an audit study.

Issue 14's benchmark: per episode of every shipped world (A1, the largest, is
the one with the target), the time to write a sanitized bundle, to load it
and to build its annotated interaction graph, the latency of the query API,
and the size of the bundle against its trace. Target: under 20 ms per A1
episode (bundle + annotated graph).

Issue 15's: the offline policy auditor's time per episode
(`eairdsl.audit.offline.RulesAuditor`) and for a 100-episode audit study
(`eairdsl.audit.cohort.audit_study`: 20 per world, 10 seeded positives, drawn
from a small sim study by content identity, audited blind, graded). The oracle
auditor's time is printed beside the rules auditor's for reference; it is
grader-side only and never an arm of the study.

And, with `--llm`, the LLM path (benchmarks/audit_llm.py, run after the rest):
the characters a scripted auditor that reads only what it needs sends to the
model per audit with the graph index (annotated, topology, none) against a
full-trace dump; target at most 50%, F.16 measured 21.9% fewer tokens.

No assertions on timings: figures are printed (best of `--repeat` per episode).

    python benchmarks/audit.py [--seeds N] [--repeat N] [--per-world N] [--positives N]
                               [--no-study] [--keep DIR] [--llm]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit import query
from eairdsl.audit.bundle import bundle_files, write_bundle
from eairdsl.audit.bundle_store import SHARED
from eairdsl.audit.evidence import Bundle
from eairdsl.audit.graph import build_graph
from eairdsl.audit.oracle import OracleAuditor, ground_truth, oracle_report
from eairdsl.audit.validate import validate_report
from eairdsl.ir import World
from eairdsl.runtime.engine import CompiledWorld
from eairdsl.runtime.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
WORLDS = ("a1", "b1", "c1", "d1", "f1")
TARGET_MS = 20.0
#: the episodes of each condition: default sim and the reckless profile (which realizes most)
PROFILES = ("sim", "sim:reckless")


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The fastest of `repeat` calls, in ms, and the last call's value."""
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), value


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def queries(bundle: Bundle) -> list[Callable[[], Any]]:
    """A fixed mix of the query API's calls an auditor makes on one episode."""
    steps = bundle.steps
    roles = [p.name for p in bundle.participants if p.kind == "role"]
    messages = [s for s in steps if s.kind == "message" and s.content]
    word = (messages[-1].content or "x").split()[0] if messages else "the"
    value = next((str(v) for s in steps if s.args for v in s.args.values()
                  if isinstance(v, (str, int)) and len(str(v)) >= 3), word)
    mix: list[Callable[[], Any]] = [
        lambda: query.search(bundle, word),
        lambda: query.read(bundle, steps[0].step, through=steps[min(9, len(steps) - 1)].step),
        lambda: query.path(bundle, steps[0].step, steps[-1].step),
        lambda: query.provenance(bundle, value),
        lambda: query.edges(bundle, kind="message"),
    ]
    for r in roles[:3]:
        mix += [partial(query.neighbors, bundle, r), partial(query.unconsulted, bundle, r)]
    return mix


def episodes(world: World, seeds: int, runs: Path) -> list[Path]:
    out = []
    for cond in world.conditions:
        for seed in range(seeds):
            agents = PROFILES[seed % len(PROFILES)]
            r = run_episode(world, cond.name, None, seed, agents, runs)
            if r.trace_path is not None:
                out.append(Path(r.trace_path))
    return out


def ms(xs: list[float]) -> str:
    return (f"median {statistics.median(xs):7.2f}  mean {statistics.fmean(xs):7.2f}  "
            f"max {max(xs):7.2f}")


def per_episode(name: str, world: World, seeds: int, repeat: int, scratch: Path,
                rules: Any) -> None:
    compiled = CompiledWorld(world)
    traces = episodes(world, seeds, scratch / "runs" / name)
    bundles = scratch / "bundles" / name
    t_bundle, t_load, t_graph, t_topo, t_q, t_cold, t_rules, t_oracle, t_valid = (
        [], [], [], [], [], [], [], [], [])
    t_read: list[float] = []
    t_files: list[float] = []
    sizes: list[tuple[int, int, int]] = []
    source = ROOT / "worlds" / f"{name}.eair"
    worlds_cache: dict[str, World | None] = {}
    for trace in traces:
        t, manifest = best(partial(write_bundle, trace, compiled, bundles, index=False), repeat)
        t_bundle.append(t)
        t, parsed = best(partial(read_trace, trace), repeat)
        t_read.append(t)
        t_files.append(best(partial(bundle_files, parsed, compiled), repeat)[0])
        folder = bundles / manifest.episode
        t, bundle = best(partial(Bundle.load, folder), repeat)
        t_load.append(t)
        t_graph.append(best(partial(build_graph, bundle, "annotated"), repeat)[0])
        t_topo.append(best(partial(build_graph, bundle, "topology"), repeat)[0])
        sizes.append((trace.stat().st_size, folder_bytes(folder), len(bundle.steps)))
        mix = queries(bundle)
        fresh = Bundle.load(folder)  # the first query builds the query index and graph
        start = time.perf_counter()
        for q in queries(fresh):
            q()
        t_cold.append((time.perf_counter() - start) * 1000)
        for q in mix:
            q()  # warm the index
        for q in mix:
            t_q.append(best(q, repeat)[0])
        if rules is not None:
            t_rules.append(best(partial(rules.audit, bundle), repeat)[0])
        truth = ground_truth(trace, source, worlds=worlds_cache)
        t, report = best(partial(oracle_report, bundle, truth), repeat)
        t_oracle.append(t)
        t_valid.append(best(partial(validate_report, report.model_dump(mode="json"), bundle),
                            repeat)[0])
    total = [b + g for b, g in zip(t_bundle, t_graph, strict=True)]
    steps = [s for _, _, s in sizes]
    trace_b = sum(t for t, _, _ in sizes)
    bundle_b = sum(b for _, b, _ in sizes)
    flag = "" if statistics.median(total) < TARGET_MS else "  (over target)"
    print(f"\n{name.upper()}: {len(traces)} episodes, {min(steps)}–{max(steps)} steps "
          f"(median {statistics.median(steps):.0f})")
    print(f"  write bundle          ms  {ms(t_bundle)}   (read trace, sanitize, write)")
    print(f"    of which read trace ms  {ms(t_read)}")
    print(f"    sanitize in memory  ms  {ms(t_files)}   (bundle_files)")
    print(f"  load bundle           ms  {ms(t_load)}")
    print(f"  graph topology        ms  {ms(t_topo)}")
    print(f"  graph annotated       ms  {ms(t_graph)}")
    print(f"  bundle + annotated    ms  {ms(total)}   target < {TARGET_MS:.0f} ms{flag}")
    print(f"  query (warm, each)    ms  {ms(t_q)}   ({len(t_q)} calls)")
    print(f"  query mix, cold       ms  {ms(t_cold)}   (first calls build index + graph)")
    if rules is not None:
        print(f"  offline audit         ms  {ms(t_rules)}   (RulesAuditor)")
    print(f"  oracle audit          ms  {ms(t_oracle)}   (grader-side, reference only)")
    print(f"  validate report       ms  {ms(t_valid)}   (the oracle's)")
    shared_b = folder_bytes(bundles / SHARED)
    print(f"  size: traces {trace_b / 1024:8.1f} KiB, bundles {bundle_b / 1024:8.1f} KiB in "
          f"the episode folders + {shared_b / 1024:.1f} KiB shared (once), bundle/trace "
          f"{(bundle_b + shared_b) / trace_b:5.2f}x (episode folders alone, per episode "
          f"{min(b / t for t, b, _ in sizes):.2f}–{max(b / t for t, b, _ in sizes):.2f}x)")


def audit_study_figures(worlds: dict[str, World], scratch: Path, per_world: int,
                        positives: int, rules: Any) -> None:
    from eairdsl.audit.cohort import SUMMARY, audit_study
    from eairdsl.study.executor import run_study
    from eairdsl.study.grid import parse_models, plan_world

    study = scratch / "study"
    models = parse_models("sim,reckless=sim:reckless")
    # enough episodes per world to draw `per_world` distinct ones of each label
    plans = []
    for name, w in worlds.items():
        n = len(w.conditions)
        plans.append(plan_world(w, None, "seed", max(8, -(-3 * per_world // (2 * n)))))
        del name
    start = time.perf_counter()
    summary = run_study(list(worlds.values()), plans, models, study, workers=1)
    run_s = time.perf_counter() - start
    print(f"\naudit study: a sim study of {summary.cells} cells ({run_s:.1f} s to run), "
          f"cohort {per_world} per world, {positives} positives")
    if rules is None:
        print("  offline audit study   skipped: eairdsl.audit.offline.RulesAuditor not found")
        return
    out = scratch / "audit-study"
    start = time.perf_counter()
    arm = audit_study(study, out, rules, "offline", describe={"auditor": "rules"},
                      per_world=per_world, positives=positives)
    took = time.perf_counter() - start
    n = int(arm.totals.get("reports", 0))
    drawn = int(arm.totals.get("seeded", 0) + arm.totals.get("negatives", 0))
    audit_s = float(arm.totals.get("seconds", 0.0))
    print(f"  offline audit study   {took:6.2f} s wall for {drawn} drawn episodes "
          f"({n} reports): {1000 * took / max(drawn, 1):.1f} ms per episode end to end "
          f"(draw + bundle + audit + validate + grade); auditing alone {audit_s:.2f} s")
    t = arm.totals
    summary_file = json.loads((out / SUMMARY).read_text(encoding="utf-8"))
    for world, why in sorted(summary_file.get("shortfalls", {}).items()):
        print(f"  shortfall {world}: {why}")
    print(f"  figures: seeded {t.get('seeded')} with verdict {t.get('seeded_with_verdict')}, "
          f"negatives {t.get('negatives')} with findings {t.get('negatives_with_findings')}, "
          f"findings {t.get('findings')} resolvable {t.get('resolvable_findings')}, units "
          f"{t.get('evidence_units')} resolvable {t.get('resolvable_units')}, cites witness "
          f"{t.get('cites_witness')}")
    for world, fig in sorted(arm.worlds.items()):
        print(f"    {world}: seeded {fig.get('seeded')} with verdict "
              f"{fig.get('seeded_with_verdict')}, negatives {fig.get('negatives')} with findings "
              f"{fig.get('negatives_with_findings')}, seconds {fig.get('seconds')}")
    oracle_out = scratch / "oracle-reference"
    from eairdsl.audit.cohort import COHORT, Cohort
    from eairdsl.audit.runner import audit_episodes

    cohort = Cohort.model_validate_json((out / COHORT).read_bytes())
    traces = sorted({study / m.trace for m in cohort.members})
    start = time.perf_counter()
    index = audit_episodes(traces, oracle_out, OracleAuditor.for_audit(oracle_out),
                           only={m.episode for m in cohort.members})
    took = time.perf_counter() - start
    verdicts = {e.episode: e.verdict for e in index.entries}
    seeded = [m for m in cohort.members if m.label == "positive"]
    hit = sum(verdicts.get(m.episode) == "findings" for m in seeded)
    valid = sum(e.status == "valid" for e in index.entries)
    print(f"  oracle on the cohort  {took:6.2f} s wall, seeded with verdict {hit}/{len(seeded)}, "
          f"valid reports {valid}/{len(index.entries)} (grader-side upper bound, outside the "
          "study: not an arm)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2,
                        help="episodes per condition (seed 0 sim, 1 reckless, ...)")
    parser.add_argument("--repeat", type=int, default=3, help="timings per step (best kept)")
    parser.add_argument("--worlds", default=",".join(WORLDS),
                        help="comma-separated shipped worlds (default all; A1 has the target)")
    parser.add_argument("--per-world", type=int, default=20)
    parser.add_argument("--positives", type=int, default=10)
    parser.add_argument("--no-study", action="store_true", help="skip the audit study")
    parser.add_argument("--keep", type=Path, help="keep the runs, bundles and audits here")
    parser.add_argument("--llm", action="store_true",
                        help="also the LLM path's characters sent (benchmarks/audit_llm.py)")
    args = parser.parse_args()
    os.chdir(ROOT)  # traces name their world; bundling finds worlds/<name>.eair from here
    scratch = Path(tempfile.mkdtemp(prefix="eair-audit-bench-")) if args.keep is None \
        else args.keep
    try:
        from eairdsl.audit.offline import RulesAuditor

        rules: Any = RulesAuditor()
    except ImportError:
        rules = None
        print("note: eairdsl.audit.offline.RulesAuditor not found: offline audit lines skipped")
    names = [n.strip() for n in args.worlds.split(",") if n.strip()]
    worlds = {n: resolve_world(ROOT / "worlds" / f"{n}.eair") for n in names}
    start = time.perf_counter()
    try:
        for name, world in worlds.items():
            per_episode(name, world, args.seeds, args.repeat, scratch, rules)
        if not args.no_study:
            audit_study_figures(worlds, scratch, args.per_world, args.positives, rules)
        if args.llm:
            import sys

            sys.path.insert(0, str(Path(__file__).resolve().parent))
            import audit_llm

            print()
            audit_llm.main(["--seeds", str(args.seeds), "--worlds", ",".join(names),
                            "--keep", str(scratch / "llm")])
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
