"""Trace fingerprints: one SHA-256 per episode, to prove a refactor changed no behaviour.

Runs every shipped world x every condition x the sim profiles x N seeds (on the
world's instances in turn) and prints one line per episode:
`world condition profile instance seed sha256(trace bytes)`, then the total.
Save the output before a change and diff it after: an empty diff means the
traces are byte-identical.

    python benchmarks/trace_fingerprints.py [--seeds 8] [--world d1 ...] [--worlds DIR] > before.txt

`--worlds DIR` reads the worlds from DIR (default the repository's worlds/), so
a refactor of the runtime compares against a frozen copy of the worlds while
the shipped ones change (with EAIR_STDLIB naming a frozen stdlib too).

`--strip-source` hashes each trace with the header's `digest` (of the world's
source text) removed and source positions (`c1.eair:306:3`, in validity reasons
and unassessed notes) reduced to the file name, so an edit of a world's text that
moves lines but changes no behaviour (a comment, a self-test `expect`) compares
equal.

`--strip-witnesses` hashes each trace with the result line's `witnesses` removed
(re-encoded exactly as the trace writer encodes it), so fingerprints taken
before the witnesses existed compare with fingerprints taken after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import tempfile
from pathlib import Path

from eairdsl.api import resolve_world, run_episode
from eairdsl.runtime.engine import CompiledWorld

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("sim", "sim:compliant", "sim:reckless")
#: the trace writer's encoding of a line (eairdsl.runtime.trace)
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False)


def strip_witnesses(data: bytes) -> bytes:
    """The trace without the result line's `witnesses` (grader-only evidence)."""
    lines = data.decode("utf-8").split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith('{') and '"type": "result"' in lines[i]:
            result = json.loads(lines[i])
            if result.get("type") == "result":
                result.pop("witnesses", None)
                lines[i] = _ENCODER.encode(result)
            break
    return "\n".join(lines).encode("utf-8")


#: a source position in a trace's text: `world.eair:12:3`
_POSITION = re.compile(rb"(\.eair):\d+:\d+")


def strip_source(data: bytes) -> bytes:
    """The trace without the header line's `digest` (the world's source digest) and
    with source positions reduced to their file name."""
    lines = data.decode("utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("{") and '"type": "header"' in line:
            header = json.loads(line)
            if header.get("type") == "header":
                header.pop("digest", None)
                lines[i] = _ENCODER.encode(header)
            break
    return _POSITION.sub(rb"\1", "\n".join(lines).encode("utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--world", action="append", default=[],
                        help="only these worlds (by file stem, e.g. a1); repeatable")
    parser.add_argument("--strip-witnesses", action="store_true",
                        help="hash the traces without the result line's witnesses")
    parser.add_argument("--strip-source", action="store_true",
                        help="hash the traces without the world's source digest and "
                             "source positions")
    parser.add_argument("--worlds", type=Path, default=ROOT / "worlds",
                        help="the folder of .eair worlds (default the repository's worlds/)")
    args = parser.parse_args()
    whole = hashlib.sha256()
    count = 0
    for path in sorted(args.worlds.glob("*.eair")):
        if args.world and path.stem not in args.world:
            continue
        world = resolve_world(path)
        compiled = CompiledWorld(world)
        instances = [str(i["id"]) for i in world.instances]
        with tempfile.TemporaryDirectory() as tmp:
            for condition in (c.name for c in world.conditions):
                for profile in PROFILES:
                    for seed in range(args.seeds):
                        instance = instances[seed % len(instances)]
                        out = Path(tmp) / f"{condition}-{profile}-{seed}"
                        result = run_episode(compiled, condition, instance, seed, profile, out)
                        data = Path(result.trace_path or "").read_bytes()
                        if args.strip_witnesses:
                            data = strip_witnesses(data)
                        if args.strip_source:
                            data = strip_source(data)
                        digest = hashlib.sha256(data).hexdigest()
                        whole.update(digest.encode())
                        count += 1
                        print(f"{world.meta.name} {condition} {profile} {instance} {seed} "
                              f"{digest}")
    print(f"# {count} episodes, all traces: {whole.hexdigest()}")


if __name__ == "__main__":
    main()
