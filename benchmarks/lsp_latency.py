"""How long `eairc lsp` takes to answer, measured over its real protocol (issue 30).

Starts the server as an editor would (`python -m eairdsl.cli lsp` on stdio, no
diagnostics debounce so the check itself is timed), opens a shipped world and times,
each as p50 / p95 / max in milliseconds:

- diagnostics after an edit: a one-character change, `didChange` to `publishDiagnostics`
  (the whole check of the world and its imports: parse, check, cards);
- hover, definition, references, completion on identifiers of the unchanged buffer;
- completion right after an edit that leaves the buffer unparsable (a half-typed
  `obj.`): the tolerant re-index is in the measurement.

The issue's target is hover and completion p95 < 100 ms on 2 cores. Positions are
drawn with a fixed seed; the machine is shared, so run it twice and read both.

    python benchmarks/lsp_latency.py [--world worlds/a1.eair] [--samples 40]

Figures (2026-12-03, this 2-core VM, load ~1, worlds/a1.eair, 40 samples):
see the closing note of issue 30 for the run quoted there.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lsp_client import Client  # noqa: E402

_IDENT = re.compile(r"\b[a-z_][a-z0-9_]{2,}\b")


def _row(name: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return (f"{name:<34} {statistics.median(ms):8.1f} {p95:8.1f} {ms[-1]:8.1f}"
            f"   (n={len(ms)})")


def _positions(text: str, count: int, rng: random.Random) -> list[dict[str, int]]:
    """Identifier positions outside comments (a cursor on a name), drawn with `rng`."""
    found = []
    for number, line in enumerate(text.split("\n")):
        code = line.split("//", 1)[0]
        for match in _IDENT.finditer(code):
            if code[:match.start()].count('"') % 2 == 0:
                found.append({"line": number, "character": match.start() + 1})
    return rng.sample(found, min(count, len(found)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=Path, default=ROOT / "worlds" / "a1.eair")
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    rng = random.Random(30)
    path = args.world.resolve()
    text = path.read_text(encoding="utf-8")
    log = open(os.devnull, "wb")  # noqa: SIM115 - the server's stderr, for its lifetime
    client = Client(ROOT, log)
    started = time.perf_counter()
    client.request("initialize", {"processId": os.getpid(), "rootUri": ROOT.as_uri(),
                                  "capabilities": {},
                                  "initializationOptions": {"diagnosticsDelay": 0}})
    client.notify("initialized", {})
    uri = client.open(path, text)
    client.diagnostics(uri)
    print(f"{path.name}: {len(text):,} characters; server up and first check "
          f"{(time.perf_counter() - started) * 1000:.0f} ms")
    doc = {"textDocument": {"uri": uri}}
    version = 1

    def change(new: str) -> None:
        nonlocal version
        version += 1
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": new}]})

    def timed(method: str, params: dict[str, Any]) -> float:
        start = time.perf_counter()
        client.request(method, params)
        return time.perf_counter() - start

    edits = []
    lines = text.split("\n")
    for k in range(args.samples):
        edited = lines.copy()
        at = rng.randrange(len(edited))
        edited[at] = edited[at] + (" " if k % 2 else "")  # alternate: always a new text
        start = time.perf_counter()
        change("\n".join(edited) + "\n" * (k % 3))
        client.diagnostics(uri)
        edits.append(time.perf_counter() - start)
    change(text)
    client.diagnostics(uri)

    positions = _positions(text, args.samples, rng)
    results: dict[str, list[float]] = {"hover": [], "definition": [], "references": [],
                                       "completion": []}
    for where in positions:
        request = {**doc, "position": where}
        results["hover"].append(timed("textDocument/hover", request))
        results["definition"].append(timed("textDocument/definition", request))
        results["references"].append(timed("textDocument/references", {
            **request, "context": {"includeDeclaration": True}}))
        results["completion"].append(timed("textDocument/completion", request))

    # an editor's server checks after a pause in typing (the default delay), so the
    # completion that follows a keystroke finds the buffer not yet indexed
    log2 = open(os.devnull, "wb")  # noqa: SIM115
    editor = Client(ROOT, log2)
    editor.request("initialize", {"processId": os.getpid(), "rootUri": ROOT.as_uri(),
                                  "capabilities": {}})
    editor.notify("initialized", {})
    editor.open(path, text)
    typed = []
    for k, where in enumerate(positions):
        row = lines[where["line"]]
        word = _IDENT.search(row, max(where["character"] - 1, 0))
        if word is None:
            continue
        half = lines.copy()
        half[where["line"]] = row[:word.end()] + "." + row[word.end():]
        start = time.perf_counter()
        editor.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": k + 2},
            "contentChanges": [{"text": "\n".join(half) + " " * (k % 2)}]})
        editor.request("textDocument/completion", {
            **doc, "position": {"line": where["line"], "character": word.end() + 1}})
        typed.append(time.perf_counter() - start)
    editor.close()
    log2.close()

    print(f"{'request':<34} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    print(_row("diagnostics after an edit", edits))
    for name, times in results.items():
        print(_row(name, times))
    print(_row("completion after typing '.'", typed))
    client.close()
    log.close()


if __name__ == "__main__":
    main()
