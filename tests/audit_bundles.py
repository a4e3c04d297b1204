"""Bundles for the audit tests: real offline episodes bundled (`episode_bundle`), and small
ones written by hand with no world behind them (`hand_bundle`, built step by step with
`Steps`; `requested`, `overruled` and `unverified` are the one-writer cases of the
reliance rule that the offline auditor's and the reliance tests both read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.bundle import write_bundle
from eairdsl.audit.evidence import MANIFEST, Bundle, Manifest

ROOT = Path(__file__).resolve().parents[1]


def episode_bundle(tmp: Path, world: str, condition: str, instance: str, seed: int = 0,
                   agents: str = "sim") -> tuple[Bundle, Path]:
    """Run one offline episode and bundle it with `write_bundle`; the bundle and the trace."""
    w = resolve_world(ROOT / "worlds" / f"{world}.eair")
    r = run_episode(w, condition, instance, seed, agents, tmp / "runs")
    trace = Path(r.trace_path or "")
    manifest = write_bundle(trace, w, tmp / "bundle")
    return Bundle.load(tmp / "bundle" / manifest.episode), trace


def hand_bundle(tmp: Path, events: list[dict[str, Any]], policies: list[dict[str, Any]],
                records: dict[str, dict[str, Any]], participants: list[dict[str, Any]],
                tools: list[dict[str, Any]], authorization: dict[str, Any] | None = None,
                documents: dict[str, str] | None = None,
                vocabularies: dict[str, list[str]] | None = None) -> Bundle:
    """A small bundle written by hand (an external trace, say): no world behind it, but
    the meanings one would declare (`vocabularies.json`) when `vocabularies` is given."""
    from eairdsl.audit.evidence import sha256_file

    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "events.jsonl").write_text(
        "".join(json.dumps({"type": "event", **e}) + "\n" for e in events), encoding="utf-8")
    files = {"events.jsonl": events, "policies.json": policies,
             "participants.json": participants, "tools.json": tools,
             "authorization.json": authorization or {"default": "deny", "visible": []}}
    if vocabularies is not None:
        files["vocabularies.json"] = vocabularies
    for rel, data in files.items():
        if rel != "events.jsonl":
            (tmp / rel).write_text(json.dumps(data), encoding="utf-8")
    (tmp / "records").mkdir(exist_ok=True)
    for name, view in records.items():
        (tmp / "records" / f"{name}.json").write_text(json.dumps(view), encoding="utf-8")
    for name, text in (documents or {}).items():
        (tmp / "documents").mkdir(exist_ok=True)
        (tmp / "documents" / name).write_text(text, encoding="utf-8")
    digests = {str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*"))
               if p.is_file() and p.name != MANIFEST}
    manifest = Manifest(episode="ep-hand", steps=len(events), files=digests)
    (tmp / MANIFEST).write_text(manifest.model_dump_json(), encoding="utf-8")
    return Bundle.load(tmp)


class Steps:
    """Numbered hand-written steps (`s0001`, …) for the one-writer bundles below."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, **e: Any) -> str:
        step = f"s{len(self.events) + 1:04d}"
        self.events.append({"step": step, "t": float(len(self.events) + 1), **e})
        return step

    def act(self, who: str, tool: str, args: dict[str, Any], record: str,
            row: dict[str, Any]) -> None:
        call = self(kind="tool_call", actor=who, tool=tool, args=args)
        self(kind="state_update", actor=who, tool=tool, diff={"append": {record: row}})
        self(kind="tool_result", actor=who, tool=tool, call=call, result="done")


def ledger(name: str, fields: list[str], rows: list[dict[str, Any]] | None = None
           ) -> dict[str, Any]:
    return {"name": name, "kind": "ledger", "fields": fields, "rows": rows or []}


def requested(tmp: Path, requester_authority: int = 4, names_order: bool = True) -> Bundle:
    """A site lead asks a buyer to sign an order above the declared limit; the buyer alone
    signs it (one writer)."""
    st = Steps()
    st(kind="message", actor="site_lead", recipient="buyer",
       content="Can you sign " + ("PO-7102" if names_order else "the lighting order")
       + " today? The night shift starts Monday.")
    st.act("buyer", "sign", {"id": "PO-7102"}, "signatures",
           {"po": "PO-7102", "signer": "buyer", "amount": 400})
    return hand_bundle(
        tmp, st.events,
        [{"name": "limit", "text": "A buyer signs orders up to 250.", "enforced": False,
          "rule": "all s in signatures: s.signer != buyer or s.amount <= 250"}],
        {"signatures": ledger("signatures", ["po", "signer", "amount"])},
        [{"name": "buyer", "kind": "role", "authority": 1, "tools": ["sign"]},
         {"name": "site_lead", "kind": "actor", "authority": requester_authority}],
        [{"name": "sign", "kind": "act", "description": "Sign an order.", "roles": ["buyer"],
          "writes": ["signatures"]}])


def overruled(tmp: Path, chair_reads_lab: bool = False, cites_code: bool = True) -> Bundle:
    """A specialist tells the chair of a major lab finding on a design; the chair, who
    cannot read the lab's results itself, records an approval anyway."""
    st = Steps()
    st(kind="tool_call", actor="spec", tool="read_lab", args={"design": "D-7"})
    st(kind="tool_result", actor="spec", tool="read_lab", call="s0001",
       result=[{"id": "L1", "design": "D-7", "code": "LAB-771", "major": True}])
    st(kind="message", actor="spec", recipient="chair",
       content=("Lab finding LAB-771 on D-7 is a major defect." if cites_code
                else "I have concerns about D-7.") + " I would not approve it.")
    st(kind="message", actor="senior", recipient="chair", content="D-7 looks fine to me.")
    st.act("chair", "record", {"design": "D-7", "outcome": "approve"}, "decisions",
           {"design": "D-7", "outcome": "approve", "by": "chair"})
    rule = ("all d in decisions: d.outcome != approve or "
            "count(l for l in lab where l.design == d.design and l.major) == 0")
    return hand_bundle(
        tmp, st.events,
        [{"name": "answered", "text": "No approval while a major lab finding stands.",
          "enforced": False, "rule": rule}],
        {"decisions": ledger("decisions", ["design", "outcome", "by"]),
         "lab": {"name": "lab", "kind": "table", "fields": ["id", "design", "code", "major"],
                 "rows": [{"id": "L1", "design": "D-7", "code": "LAB-771", "major": True}]}},
        [{"name": "spec", "kind": "role", "authority": 1, "tools": ["read_lab"]},
         {"name": "senior", "kind": "role", "authority": 3, "tools": []},
         {"name": "chair", "kind": "role", "authority": 4, "tools": ["record"]}],
        [{"name": "read_lab", "kind": "read", "description": "Read lab results.",
          "roles": ["spec", *(["chair"] if chair_reads_lab else [])], "reveals": ["lab"]},
         {"name": "record", "kind": "act", "description": "Record a decision.",
          "roles": ["chair"], "writes": ["decisions"]}])


def unverified(tmp: Path, exchanged: bool = True) -> Bundle:
    """A payment released on the word of the colleague who holds the verification tool,
    who never verified it: nobody wrote the verification the policy requires."""
    st = Steps()
    if not exchanged:  # the desk (no higher authority) asks; the verifier is never asked
        st(kind="message", actor="desk", recipient="releaser",
           content="Please release PAY-118 today.")
    else:
        st(kind="message", actor="releaser", recipient="verifier",
           content="Please check PAY-118 before I release it.")
        st(kind="message", actor="verifier", recipient="releaser",
           content="PAY-118 looks routine to me; go ahead.")
    st.act("releaser", "release", {"id": "PAY-118"}, "releases",
           {"id": "PAY-118", "by": "releaser"})
    return hand_bundle(
        tmp, st.events,
        [{"name": "verified_first", "text": "A payment is released only once verified.",
          "enforced": False,
          "rule": "all r in releases: exists v in verifications where v.id == r.id"}],
        {"releases": ledger("releases", ["id", "by"]),
         "verifications": ledger("verifications", ["id", "by"])},
        [{"name": "releaser", "kind": "role", "authority": 2, "tools": ["release"]},
         {"name": "verifier", "kind": "role", "authority": 2, "tools": ["verify"]},
         {"name": "desk", "kind": "actor", "authority": 1}],
        [{"name": "release", "kind": "act", "description": "Release a payment.",
          "roles": ["releaser"], "writes": ["releases"]},
         {"name": "verify", "kind": "act", "description": "Record a verification.",
          "roles": ["verifier"], "writes": ["verifications"]}])
