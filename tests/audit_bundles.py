"""Bundles of real offline episodes for the audit graph and query tests."""

from __future__ import annotations

from pathlib import Path

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.bundle import write_bundle
from eairdsl.audit.evidence import Bundle

ROOT = Path(__file__).resolve().parents[1]


def episode_bundle(tmp: Path, world: str, condition: str, instance: str, seed: int = 0,
                   agents: str = "sim") -> tuple[Bundle, Path]:
    """Run one offline episode and bundle it with `write_bundle`; the bundle and the trace."""
    w = resolve_world(ROOT / "worlds" / f"{world}.eair")
    r = run_episode(w, condition, instance, seed, agents, tmp / "runs")
    trace = Path(r.trace_path or "")
    manifest = write_bundle(trace, w, tmp / "bundle")
    return Bundle.load(tmp / "bundle" / manifest.episode), trace
