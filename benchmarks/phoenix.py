"""A small study into a real Arize Phoenix, checked through Phoenix's own API (issue #29).

Usage (Phoenix in a separate virtualenv, never a dependency of eairdsl):

    python3 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix
    LITELLM_OFFLINE_MODE=true python benchmarks/phoenix.py \
        --phoenix-python /tmp/phoenix-venv/bin/python

It starts `phoenix serve` on 127.0.0.1 (a free port, a temporary working folder),
runs sim episodes of D1 (two seeds of one arm, one reckless), audits them with the
offline rules, and runs two LLM episodes of D1 through `eairc run --model openai/steady`
against the tests' OpenAI-compatible fake server on loopback (`tests/fake_openai.py`,
0.2 s per answer), so the export has model calls. It exports everything with
`--endpoint` and `--annotations phoenix` (protobuf batches, wall-clock times), then asks
Phoenix's REST API what it holds: the spans of every episode, the root's `metadata`,
the LLM spans' prompts and their latency, and the span annotations of the findings. It
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
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_openai import FakeServer  # noqa: E402 - the tests' loopback server, shared


def _llm_run(folder: Path) -> None:
    """Two D1 episodes played by the fake server's `steady` model (delegate, read, relay)."""
    server = FakeServer(0.2)
    threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True).start()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "OPENAI_API_KEY": "sk-loopback-only", "LITELLM_OFFLINE_MODE": "true",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "127.0.0.1,localhost"}
        subprocess.run([sys.executable, "-m", "eairdsl.cli", "run",
                        str(ROOT / "worlds" / "d1.eair"), "--model", "openai/steady",
                        "--api-base", f"http://127.0.0.1:{server.port}/v1", "--episodes", "2"],
                       cwd=folder, env=env, check=True, stdout=subprocess.DEVNULL, timeout=600)
    finally:
        server.shutdown()


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


def _ms(span: dict[str, Any]) -> float:
    """A span's duration in ms from Phoenix's ISO times (0 when unreadable)."""
    from datetime import datetime

    try:
        start = datetime.fromisoformat(str(span["start_time"]))
        end = datetime.fromisoformat(str(span["end_time"]))
    except (KeyError, ValueError):
        return 0.0
    return (end - start).total_seconds() * 1000


def _keys(attrs: Any, prefix: str = "") -> list[str]:
    """Attribute names, nested objects flattened with dots (Phoenix nests them)."""
    if isinstance(attrs, dict):
        return [k for key, v in attrs.items() for k in _keys(v, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


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
    _llm_run(work / "llm")

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
        done = export_otel([runs, work / "llm" / "runs"], None, work / "audit",
                           endpoint=base, headers={},
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
        llm = [s for s in spans if s.get("span_kind") == "LLM"]
        prompted = [s for s in llm if "input_messages" in json.dumps(s.get("attributes", {}))]
        timed = [s for s in llm if _ms(s) > 0]
        print(f"phoenix holds {len(spans)} span(s) ({len(roots)} root(s), "
              f"{len(llm_like)} of kind AGENT/TOOL/CHAIN), {sum(m is not None for m in meta)} "
              f"root(s) with metadata, {len(notes)} span annotation(s); {len(llm)} LLM "
              f"span(s), {len(prompted)} with their prompt, {len(timed)} with a latency "
              f"(median {sorted(map(_ms, llm))[len(llm) // 2] if llm else 0:.0f} ms)")
        if llm:
            print("an LLM span's attributes: "
                  + ", ".join(sorted(_keys(llm[0].get("attributes", {})))[:24]))
        ok = (len(spans) == done.spans and len(roots) == done.traces
              and all(m is not None for m in meta) and len(notes) == done.annotations
              and len(llm) > 0 and len(prompted) == len(llm) and len(timed) == len(llm))
        print("ok" if ok else f"MISSING: see {work}")
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
