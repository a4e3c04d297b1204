"""Scaling curves: per-episode cost on synthetic worlds grown one axis at a time.

Each point is a `.eair` world written into a temporary folder and compiled with
`eairdsl.compiler.compile_world`, then run with sim agents (traces in memory, as
`run_episode` without `out`). The axes:

- rows: a static table of 100 -> 100,000 rows, with a `lookup()` and a keyed
  filter `[x for x in T where x.id == v]` in every tool call (20 requests);
- requests: 20 -> 1,000 customer requests per episode to 5 roles, each call
  appending to a ledger a guard reads (cost per trace event is the figure to
  watch: flat means linear in trace length);
- roles: 10 -> 200 roles, one request each, measurements asking `final()` and
  `replies()` of every role.

Prints CPU ms per episode (best of rounds), trace events per episode and CPU us
per event for each point.

    python benchmarks/scaling.py [--rounds R] [--axis rows|requests|roles ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from eairdsl.api import run_episode
from eairdsl.compiler import compile_world
from eairdsl.runtime.engine import CompiledWorld

#: a lookup() and a keyed filter over the static table in every `check`
CHECK_RETURNS = ('lookup(items, item_id).name + " costs " + '
                 'text(first([x.price for x in items where x.id == item_id]))')
#: a guard scanning the ledger `note` appends to
NOTE_GUARD = ('count([n for n in notes where n.agent == context.caller and n.item == item_id])'
              ' < 1000000 else reject "too many notes"')


def world_text(rows: int, requests: int, roles: int) -> str:
    names = [f"r{i:03d}" for i in range(roles)]
    says = "\n".join(f"  at {i * 10} min say \"Please check item {i}.\" to {names[i % roles]}"
                     for i in range(requests))
    role_blocks = "\n\n".join(f"role {n} {{\n  model under_test\n  card \"card.md.j2\"\n"
                              f"  tools check, note\n}}" for n in names)
    channels = "\n\n".join(f"channel customer -> {n}" for n in names)
    return f"""world syn {{
  title "Synthetic scaling world"
  risk A1
  operation "checking items"
  preserves "nothing in particular"
  seeds 1
}}

record items from "items.json" key id {{
  id: text
  name: text
  price: money
}}

ledger notes {{
  item: text
  agent: text
}}

tool check(item_id: text hint instance.item) -> text {{
  kind read
  cost 1 min
  require lookup(items, item_id) != none else reject "unknown item"
  returns {CHECK_RETURNS}
}}

tool note(item_id: text hint instance.item) -> text {{
  kind act
  cost 1 min
  require {NOTE_GUARD}
  append notes {{item: item_id, agent: context.caller}}
  returns "noted"
}}

{role_blocks}

actor customer scripted {{
  principal instance.customer
{says}
}}

{channels}

instances from "instances.json" {{
  id: text
  customer: text
  item: text
}}

let all_roles() = [{", ".join(names)}]

measure {{
  opportunity = count(calls(check)) > 0
  anomaly = count(notes) > 0
  realized = all r in all_roles(): final(r) != none
  terminal_harm = realized
  interception = anomaly and not realized
  utility = all r in all_roles(): len(replies(r)) > 0
}}
"""


def build(folder: Path, rows: int, requests: int, roles: int) -> CompiledWorld:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "items.json").write_text(json.dumps(
        [{"id": f"X-{i:06d}", "name": f"item {i}", "price": i % 97} for i in range(rows)]))
    (folder / "instances.json").write_text(json.dumps(
        [{"id": "i1", "customer": "Casey", "item": f"X-{rows - 1:06d}"}]))
    (folder / "card.md.j2").write_text("You check items for customers.\n")
    path = folder / "syn.eair"
    path.write_text(world_text(rows, requests, roles))
    result = compile_world(path)
    if result.world is None:
        raise SystemExit(f"synthetic world does not compile:\n{result.diagnostics}")
    return CompiledWorld(result.world)


def point(compiled: CompiledWorld, rounds: int) -> tuple[float, int, bool]:
    """(best CPU seconds per episode, trace events, valid) over `rounds` episodes."""
    first = run_episode(compiled, None, None, 0)  # warm: indexes, compiled closures
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        run_episode(compiled, None, None, 0)
        best = min(best, time.process_time() - start)
    return best, 0, first.valid


AXES = {
    "rows": [(n, 20, 5) for n in (100, 1_000, 10_000, 100_000)],
    "requests": [(100, n, 5) for n in (20, 50, 100, 200, 500, 1_000)],
    "roles": [(100, n, n) for n in (10, 25, 50, 100, 200)],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--axis", action="append", choices=sorted(AXES), default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for axis in args.axis or list(AXES):
            print(f"{axis:>9} {'rows':>8} {'requests':>8} {'roles':>6} {'ms/episode':>11} "
                  f"{'events':>7} {'us/event':>9} valid")
            for rows, requests, roles in AXES[axis]:
                compiled = build(Path(tmp) / f"{axis}-{rows}-{requests}-{roles}",
                                 rows, requests, roles)
                cpu, _, valid = point(compiled, args.rounds)
                with tempfile.TemporaryDirectory() as out:
                    traced = run_episode(compiled, None, None, 0, out=Path(out))
                    events = len(Path(traced.trace_path or "").read_text(
                        encoding="utf-8").splitlines()) - 2
                reason = "" if valid else f" ({traced.validity_reason})"
                print(f"{'':>9} {rows:8} {requests:8} {roles:6} {cpu * 1e3:11.2f} "
                      f"{events:7} {cpu / max(events, 1) * 1e6:9.1f} {valid}{reason}")


if __name__ == "__main__":
    main()
