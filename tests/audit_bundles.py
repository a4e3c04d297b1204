"""Bundles of real sim episodes for the audit graph and query tests.

`eairdsl.audit.bundle.write_bundle` is used when it exists; until then a small
writer here builds the same folder from the trace and the compiled world with
the evidence models directly (events without header, result and judgments;
participants, policies, authorization, records, documents, tools, manifest).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.evidence import (
    EVENTS,
    MANIFEST,
    Authorization,
    AuthorizationEntry,
    Bundle,
    Manifest,
    Participant,
    PolicyCard,
    RecordView,
    ToolCard,
    canonical_json,
    sha256_file,
)
from eairdsl.ir import Ref, World

ROOT = Path(__file__).resolve().parents[1]


def _visible(world: World, party: str, record: str, fields: list[str]) -> list[str]:
    allowed = set(fields) if world.authorization.default == "allow" else set()
    for rule in world.authorization.rules:
        if rule.record == record and rule.principal == party:
            allowed = allowed | set(rule.fields) if rule.effect == "allow" else allowed - set(
                rule.fields)
    return [f for f in fields if f in allowed]


def _principal(expr: Any, instance: dict[str, Any]) -> str | None:
    # `principal instance.X`: the only form the shipped worlds use
    obj = getattr(expr, "obj", None)
    if isinstance(obj, Ref) and obj.kind == "instance" and isinstance(expr.name, str):
        value = instance.get(expr.name)
        return str(value) if value is not None else None
    return None


def fixture_bundle(trace_path: Path, world: World, out: Path) -> Path:
    """A bundle folder of one episode, written with the evidence models."""
    lines = trace_path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    instance = next(i for i in world.instances if i["id"] == header["instance"])
    events = [line for line in lines[1:]
              if json.loads(line)["type"] == "event" and json.loads(line)["kind"] != "judgment"]
    out.mkdir(parents=True, exist_ok=True)
    (out / EVENTS).write_text("".join(e + "\n" for e in events), encoding="utf-8")

    def write(rel: str, value: Any) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(canonical_json(value) + "\n", encoding="utf-8")

    parties = world.parties
    write("participants.json", [Participant(
        name=p.name, kind=p.kind, authority=p.authority, description=p.description,
        principal=_principal(p.principal, instance), tools=[t.name for t in p.tools],
    ).model_dump() for p in parties])
    write("policies.json", [PolicyCard(name=p.name, text=p.text, enforced=p.enforced,
                                       document=p.document).model_dump()
                            for p in world.policies])
    entries = [AuthorizationEntry(principal=p.name, record=r.name,
                                  fields=_visible(world, p.name, r.name,
                                                  [f.name for f in r.fields]))
               for p in parties for r in world.records]
    write("authorization.json", Authorization(default=world.authorization.default,
                                              visible=entries).model_dump())
    for r in world.records:
        write(f"records/{r.name}.json", RecordView(
            name=r.name, kind=r.kind, key=r.key, fields=[f.name for f in r.fields],
            rows=r.rows).model_dump())
    docs = [d.name for d in world.documents]
    for d in world.documents:
        path = out / "documents" / (d.name + Path(d.source).suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(d.text, encoding="utf-8")
    cards = []
    for t in world.tools:
        props = {p.name: ({"type": "string", "enum": docs} if p.type.kind == "document"
                          else {}) for p in t.params}
        cards.append(ToolCard(name=t.name, kind=t.kind, description=t.description,
                              parameters={"type": "object", "properties": props},
                              roles=[p.name for p in parties
                                     if any(x.name == t.name for x in p.tools)]).model_dump())
    write("tools.json", cards)
    files = {str(p.relative_to(out)): sha256_file(p)
             for p in sorted(out.rglob("*")) if p.is_file() and p.name != MANIFEST}
    digest = hashlib.sha256((out / EVENTS).read_bytes()).hexdigest()
    manifest = Manifest(episode=digest[:16], steps=len(events), files=files)
    (out / MANIFEST).write_text(manifest.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return out


def episode_bundle(tmp: Path, world: str, condition: str, instance: str, seed: int = 0,
                   agents: str = "sim") -> tuple[Bundle, Path]:
    """Run one offline episode and bundle it; the bundle and the trace path."""
    w = resolve_world(ROOT / "worlds" / f"{world}.eair")
    r = run_episode(w, condition, instance, seed, agents, tmp / "runs")
    trace = Path(r.trace_path or "")
    out = tmp / "bundle"
    try:
        from eairdsl.audit.bundle import write_bundle  # type: ignore[attr-defined]
    except ImportError:
        fixture_bundle(trace, w, out)
    else:
        manifest = write_bundle(trace, w, out)
        out = out / manifest.episode  # write_bundle puts each episode in its own folder
    return Bundle.load(out), trace
