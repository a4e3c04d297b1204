"""A small study into a real Arize Phoenix, checked through Phoenix's own API (issue #29).

Usage (Phoenix in a separate virtualenv, never a dependency of eairdsl):

    python3 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix
    LITELLM_OFFLINE_MODE=true python benchmarks/phoenix.py \
        --phoenix-python /tmp/phoenix-venv/bin/python

It starts `phoenix serve` on 127.0.0.1 (a free port, a temporary working folder),
runs sim episodes of D1 (two seeds of one arm, one reckless), audits them with the
offline rules, exports them with `--endpoint` and `--annotations phoenix` (protobuf
batches, wall-clock times), then asks Phoenix's REST API what it holds: the spans of
every episode, the root's `metadata`, and the span annotations of the findings. It
prints what it found and exits 1 when something is missing. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        return json.loads(resp.read())


def _wait(base: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"phoenix exited with {proc.returncode}")
        try:
            _get(f"{base}/v1/projects")
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"phoenix did not answer on {base} within {seconds:.0f} s")


def _spans(base: str, project: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
        page = _get(f"{base}/v1/projects/{project}/spans?{urllib.parse.urlencode(query)}")
        out.extend(page.get("data", []))
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def _annotations(base: str, project: str, span_ids: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(0, len(span_ids), 50):
        query = urllib.parse.urlencode([("span_ids", s) for s in span_ids[i:i + 50]])
        out.extend(_get(f"{base}/v1/projects/{project}/span_annotations?{query}")
                   .get("data", []))
    return out


def main() -> int:
    """Run the check; 0 when Phoenix shows spans, metadata and annotations."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix-python", required=True,
                        help="the python of a virtualenv with arize-phoenix installed")
    parser.add_argument("--wait", type=float, default=90.0, help="seconds for Phoenix to start")
    args = parser.parse_args()

    from eairdsl.api import resolve_world, run_episode
    from eairdsl.audit.offline import RulesAuditor
    from eairdsl.audit.runner import audit_episodes
    from eairdsl.external.otel import export_otel

    work = Path(tempfile.mkdtemp(prefix="eair-phoenix-"))
    runs = work / "runs"
    world = resolve_world(ROOT / "worlds" / "d1.eair")
    for seed, agents in ((0, "sim"), (1, "sim"), (0, "sim:reckless")):
        run_episode(world, None, None, seed, agents=agents, out=runs / agents.replace(":", "-"))
    audit_episodes(runs, work / "audit", RulesAuditor())

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(_free_port()), "PHOENIX_WORKING_DIR": str(work / "px")}
    log = (work / "phoenix.log").open("wb")
    proc = subprocess.Popen([args.phoenix_python, "-m", "phoenix.server.main", "serve"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(base, proc, args.wait)
        t0 = time.monotonic()
        done = export_otel(runs, None, work / "audit", endpoint=base, headers={},
                           annotations="phoenix", epoch="recorded")
        print(f"exported {done.traces} trace(s), {done.spans} span(s) in {done.requests} "
              f"request(s), {done.annotations} annotation(s) in "
              f"{time.monotonic() - t0:.2f} s")
        spans: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(spans) < done.spans:
            time.sleep(1)
            spans = _spans(base, "default")
        roots = [s for s in spans if not s.get("parent_id")]
        # Phoenix reads the `metadata` JSON into flattened `metadata.<key>` attributes
        meta = [{k: v for k, v in s.get("attributes", {}).items()
                 if k.startswith("metadata.")} or None for s in roots]
        llm_like = [s for s in spans if s.get("span_kind") in ("AGENT", "TOOL", "CHAIN")]
        notes: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(notes) < done.annotations:
            time.sleep(1)
            notes = _annotations(base, "default",
                                 [s["context"]["span_id"] for s in spans])
        print(f"phoenix holds {len(spans)} span(s) ({len(roots)} root(s), "
              f"{len(llm_like)} of kind AGENT/TOOL/CHAIN), {sum(m is not None for m in meta)} "
              f"root(s) with metadata, {len(notes)} span annotation(s)")
        ok = (len(spans) == done.spans and len(roots) == done.traces
              and all(m is not None for m in meta) and len(notes) == done.annotations)
        print("ok" if ok else f"MISSING: see {work}")
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
