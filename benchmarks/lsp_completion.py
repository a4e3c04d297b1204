"""How often completion offers what an author types next (issue 30).

Replays the writing of a world from its first character: at the first letter of
every identifier, the buffer as typed so far (everything before it, plus that
letter) is indexed and completed in-process (`eairdsl.lsp`), and the benchmark
counts whether the identifier the author wrote is among the items offered. The
place where a name is declared is left out (no tool can know a new name); uses of
names declared further down the file count as misses (typed top to bottom, they are
not declared yet), as do variables used before their binder (`[c for c in ...]`).
Prints the share offered, the time per completion (index and answer) and the most
missed words with a line where each was missed.

    python benchmarks/lsp_completion.py [WORLD ...]   (default: d1, a1, the tutorial world)

Figures (2026-12-03, 2-core VM): worlds/d1.eair 749 of 813 uses offered (92%),
worlds/a1.eair 1239 of 1450 (85%), docs/examples/first_world.eair 214 of 251 (85%);
per completion p95 25 / 29 / 8 ms. Most misses left are names declared further down
(parties named in `roles`/`allow` before their block) and comprehension variables used
before their `for`. Before this benchmark's fixes (keywords in expressions, types after
`:`, closed vocabularies, parties, parameters of a block still being typed, bound
variables, inline enums, `group` fields), counting declaring places too: d1 45%, the
tutorial world 46%.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from eairdsl.lsp.complete import completions
from eairdsl.lsp.index import index_program
from eairdsl.lsp.text import words

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT / "worlds" / "d1.eair", ROOT / "worlds" / "a1.eair",
           ROOT / "docs" / "examples" / "first_world.eair"]


def replay(path: Path, shown: int) -> None:
    text = path.read_text(encoding="utf-8")
    whole = index_program(path, text)
    declaring = {(d.word.line, d.word.col) for d in whole.definitions() if d.path == path}
    for module in whole.modules:
        for _, params in module.scopes:
            declaring |= {(d.word.line, d.word.col) for d in params.values() if d.path == path}
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    offered = missed = 0
    misses: Counter[str] = Counter()
    where: dict[str, str] = {}
    times: list[float] = []
    for word in words(text):
        if (word.line, word.col) in declaring:
            continue
        typed = text[:starts[word.line] + word.col + 1]
        start = time.perf_counter()
        items = completions(index_program(path, typed), typed, word.line, word.col + 1)
        times.append(time.perf_counter() - start)
        if word.name in {item.label for item in items}:
            offered += 1
        else:
            missed += 1
            misses[word.name] += 1
            where.setdefault(word.name, lines[word.line].strip()[:72])
    times.sort()
    total = offered + missed
    p50, p95 = times[len(times) // 2], times[int(len(times) * .95)]
    print(f"{path.relative_to(ROOT)}: {offered} of {total} uses offered "
          f"({100 * offered / max(total, 1):.0f}%); per completion p50 {1000 * p50:.1f} ms, "
          f"p95 {1000 * p95:.1f} ms")
    for name, count in misses.most_common(shown):
        print(f"  missed {count:>3}  {name:<22} {where[name]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("worlds", nargs="*", type=Path)
    parser.add_argument("--shown", type=int, default=8, help="most missed words listed")
    args = parser.parse_args()
    for world in [w.resolve() for w in args.worlds] or DEFAULT:
        replay(world, args.shown)


if __name__ == "__main__":
    main()
