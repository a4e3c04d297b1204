"""What each shipped world spends of the per-world check budgets, and two worlds that
cross them (issue 28, item 6). Prints only; nothing is asserted.

For every world in worlds/, docs/examples/ and tests/fixtures/: the steps all its card
renders took together and the bytes of data files, documents and cards it loaded,
against the defaults (`eairdsl.check.limits.Limits`). With `--heavy`, also checks, each
in a child process (peak RSS and seconds):

- 20 records naming one 43 MB JSON file (1.9 GB before the data budget);
- 100 roles under 10 conditions, each role's card just under the per-render bound
  (about 15 minutes before the world's card budget).

    python benchmarks/budgets.py [--heavy]
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

from eairdsl.check import check_world
from eairdsl.check.limits import Limits
from eairdsl.diagnostics import Diagnostics

ROOT = Path(__file__).resolve().parents[1]
#: a card of 2**17 macro calls: just under the per-render step bound
SLOW_CARD = ("{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}"
             "{{ f(16) }}You work at a help desk.\n")
HEAD = """world w {
  risk A1
  operation "reporting a monthly KPI"
  preserves "the reported KPI matches the ledger"
}
instance one { }
measure {
  opportunity = count(messages()) > 0
  anomaly = count(messages()) > 1
  realized = count(messages()) > 2
  terminal_harm = count(messages()) > 3
  interception = anomaly and not realized
  utility = count(messages()) > 4
}
"""


def shipped() -> None:
    defaults = Limits()
    worlds = sorted([*ROOT.glob("worlds/*.eair"), *ROOT.glob("docs/examples/*.eair"),
                     *ROOT.glob("tests/fixtures/**/*.eair")])
    rows = []
    for path in worlds:
        diagnostics = Diagnostics()
        world = check_world(path, diagnostics)
        if world is None or diagnostics.has_errors:
            continue  # fixtures of errors
        rows.append((world.card_steps, world.data_loaded, path.relative_to(ROOT)))
    print(f"{'world':58} {'card steps':>12} {'data bytes':>12}")
    for steps, loaded, path in sorted(rows, key=lambda r: (r[0], r[1])):
        print(f"{path!s:58} {steps:12,} {loaded:12,}")
    most_steps = max(r[0] for r in rows)
    most_bytes = max(r[1] for r in rows)
    print(f"{'most of any (default budget)':58} {most_steps:12,} {most_bytes:12,}")
    print(f"{'':58} {defaults.card_steps:12,} {defaults.data_bytes:12,}")
    print(f"share of the budget: card steps {most_steps / defaults.card_steps:.2%}, data "
          f"{most_bytes / defaults.data_bytes:.3%}")


def _check_child(entry: Path) -> tuple[float, float, list[str]]:
    """(peak RSS in MB, seconds, error lines) of `eairc check ENTRY` in a child process."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "eairdsl.cli", "check", str(entry)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             cwd=entry.parent, env=dict(os.environ))
    assert child.stdout is not None
    output = child.stdout.read().decode(errors="replace")
    _, _, usage = os.wait4(child.pid, 0)
    errors = [line for line in output.splitlines() if "error[" in line]
    return usage.ru_maxrss / 1024, time.perf_counter() - started, errors


def heavy() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        row = {"region": "north", "note": "x" * 200}
        rows = 43 * 1024 * 1024 // len(json.dumps(row))
        (data / "sales.json").write_text(json.dumps([row] * rows), encoding="utf-8")
        (data / "card.md.j2").write_text("You report numbers.\n", encoding="utf-8")
        records = "".join(f'record q{i} from "sales.json" {{ region: text  note: text }}\n'
                          for i in range(20))
        role = 'role analyst {\n  model under_test\n  card "card.md.j2"\n}\n'
        (data / "w.eair").write_text(HEAD + role + records, encoding="utf-8")
        size = (data / "sales.json").stat().st_size / (1024 * 1024)
        rss, seconds, errors = _check_child(data / "w.eair")
        print(f"20 records naming one {size:.0f} MB file: peak RSS {rss:.0f} MB, "
              f"{seconds:.1f} s; {errors[:1]}")

        cards = Path(tmp) / "cards"
        cards.mkdir()
        (cards / "card.md.j2").write_text(SLOW_CARD, encoding="utf-8")
        lever = 'lever level : int = 0 "a lever"\n' + "".join(
            f"condition c{i} {{ level = {i} }}\n" for i in range(10))
        roles = "".join(f'role r{i} {{\n  model under_test\n  card "card.md.j2"\n}}\n'
                        for i in range(100))
        (cards / "w.eair").write_text(HEAD + lever + roles, encoding="utf-8")
        rss, seconds, errors = _check_child(cards / "w.eair")
        print(f"100 roles x 10 conditions of a card just under the per-render bound: peak "
              f"RSS {rss:.0f} MB, {seconds:.1f} s; {errors[:1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy", action="store_true",
                        help="also check the two worlds that cross the budgets")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}")
    shipped()
    if args.heavy:
        heavy()


if __name__ == "__main__":
    main()
