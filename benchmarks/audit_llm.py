"""Characters an LLM auditor sends with the graph index against a full-trace dump (EAIR F.16).

Issue 15's benchmark, LLM part: for sim episodes of every shipped world, the
characters sent to the model per audit (the sum, over every request of the
audit, of every message's content: system prompt, user messages, tool results
and the assistant's tool-call arguments sent back as history), per arm:

- **annotated**, **topology**, **none**: `eairdsl.audit.llm.LLMAuditor` with
  that `graph` arm (contract `full`, the default window), played by a scripted
  model (below);
- **dump**: a naive auditor: the same system prompt, then one user message with
  the record's overview and every step's every field in full, then the report.

The paper's figure is F.16's: topology-only navigation used 21.9% fewer input
tokens than no graph (278,635 against 356,637 mean). Issue 15's target: the
graph-index arms send at most 50% of the full dump's characters.

The scripted model ("reads what it needs"). A litellm `CustomLLM` registered
under the provider name `benchscripted` answers every request from the
messages it is sent, and nothing else: it parses the opening (the graph index,
or the trace's first window, or the dump) and every tool result it got back,
and

1. reads, with `read(step, fields=..., budget=window)` in one turn of parallel
   calls, every (step, field) its report will quote that it has not yet seen in
   full, plus (annotated arm) every step whose index line says a record value
   crossed to a receiver that may not see it; a field cut by the window is
   continued with `offset` on the next turn;
2. submits the report with `submit_report` once every quote is verbatim in text
   it was shown (checked here, after `evidence.normalize`, and counted).

What the report says is fixed per episode, so discovery is identical across
arms (as F.16 found it) and only the reading differs: it is the offline policy
auditor's report (`eairdsl.audit.offline.RulesAuditor`, world-agnostic,
validates by construction), whose cited (step, field) pairs are the targets.
A report with no citation (a clean verdict) still reads the record's last step,
so its coverage is not empty. The dump arm quotes from the dump. Every
submission goes through the validator (`validate.validate_report`); the table
says how many were accepted.

This is a model of reading cost, not of a model's judgement: a real auditor
explores (searches, neighbours, paths) before it knows what to cite. The system
prompt (the contract's schema, R1-R4, B.1; about 17,600 characters) is resent
with every request, so the table also gives the characters without it.

Long traces: the graph arms' cost is bounded by the window (the opening and each
read are cut to it) while the dump grows with the trace, so `--long` adds
synthetic long episodes (benchmarks/scaling.py's requests world, nothing
seeded: a clean report reading one step) printed apart from the shipped worlds.

    python benchmarks/audit_llm.py [--seeds N] [--worlds a1,d1] [--window N[,N...]]
                                   [--long N[,N...]] [--json FILE] [--keep DIR]

(`python benchmarks/audit.py --llm` runs the same.) No network:
LITELLM_OFFLINE_MODE is set; no assertions on timings.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm import CustomLLM, ModelResponse  # type: ignore[attr-defined]

from eairdsl.agents.llm import LLMSettings
from eairdsl.api import resolve_world, run_episode
from eairdsl.audit.bundle import write_bundle
from eairdsl.audit.contract import AUDIT_SCHEMA, Report
from eairdsl.audit.evidence import (
    MANIFEST,
    Bundle,
    field_names,
    field_text,
    normalize,
    sha256_file,
)
from eairdsl.audit.llm import (
    SUBMIT_TOOL,
    SUBMITTED_FIELDS,
    LLMAuditor,
    submit_tool,
    system_prompt,
)
from eairdsl.audit.llm_tools import GRAPH_ARMS, overview, to_json
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.validate import validate_report
from eairdsl.ir import World

ROOT = Path(__file__).resolve().parents[1]
WORLDS = ("a1", "b1", "c1", "d1", "f1")
PROFILES = ("sim", "sim:reckless")
PROVIDER = "benchscripted"
MODEL = f"{PROVIDER}/auditor"
ARMS = (*GRAPH_ARMS, "dump")
TARGET = 0.50
#: the paper's F.16 means: topology-only against no graph, input tokens
PAPER = {"topology": 278_635, "none": 356_637, "annotated": 304_377}
_INDEX_HEAD = "## Interaction graph index ("
_WINDOW_HEAD = "## The record's steps, first window"
_DUMP_HEAD = "## Every step of the record, in full"
_SPAN = re.compile(r"Episode \S+: (\d+) steps, (\S+) to (\S+)\.")
#: the field that carries what crossed an edge, by the index's edge kind
_CROSSING = {"message": "content", "result": "result", "call": "args", "delegation": "args"}


# ------------------------------------------------------------------ the scripted model

def respond(calls: list[tuple[str, dict[str, Any]]], content: str | None = None
            ) -> ModelResponse:
    tool_calls = [{"id": f"b-{i}", "type": "function",
                   "function": {"name": name, "arguments": json.dumps(args)}}
                  for i, (name, args) in enumerate(calls)]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return ModelResponse(choices=[{"message": message,
                                   "finish_reason": "tool_calls" if calls else "stop"}],
                         usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})


def request_chars(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """(characters of every message's content, of which the system prompt's) of one request;
    an assistant turn's tool-call arguments are content sent back to the model."""
    total = system = 0
    for m in messages:
        content = m.get("content")
        n = len(content) if isinstance(content, str) else 0
        for call in m.get("tool_calls") or []:
            n += len(str((call.get("function") or {}).get("arguments") or ""))
        total += n
        if m.get("role") == "system":
            system += n
    return total, system


class ScriptedModel(CustomLLM):
    """The auditor model: `policy(messages, params)` answers; every request is measured."""

    def __init__(self) -> None:
        super().__init__()
        self.policy: Any = None
        self.requests: list[tuple[int, int]] = []

    async def acompletion(
            self, model: str, messages: list[dict[str, Any]], api_base: str,
            custom_prompt_dict: dict[str, Any], model_response: ModelResponse,
            print_verbose: Any, encoding: Any, api_key: Any, logging_obj: Any,
            optional_params: dict[str, Any], *args: Any, **kwargs: Any) -> ModelResponse:
        self.requests.append(request_chars(messages))
        assert self.policy is not None, "no policy set"
        out: ModelResponse = self.policy(copy.deepcopy(messages), optional_params)
        return out


_MODEL = ScriptedModel()


def scripted_model() -> ScriptedModel:
    """The registered scripted provider (registered once per process)."""
    if not any(p.get("provider") == PROVIDER for p in litellm.custom_provider_map):
        litellm.custom_provider_map = [*litellm.custom_provider_map,
                                       {"provider": PROVIDER, "custom_handler": _MODEL}]
    return _MODEL


# ------------------------------------------------------------------ what the policy saw

@dataclass
class Seen:
    """The field text the policy was shown, per (step, field), from offset 0 on."""

    text: dict[tuple[str, str], str] = field(default_factory=dict)
    total: dict[tuple[str, str], int] = field(default_factory=dict)
    #: steps shown in some answer, and those shown with every field they have, none cut
    steps: set[str] = field(default_factory=set)
    whole: set[str] = field(default_factory=set)

    def item(self, view: dict[str, Any]) -> None:
        """One step as `read` shows it (`fields` a list of FieldText) or as the dump does
        (`fields` an object field -> full text)."""
        step = str(view.get("step"))
        self.steps.add(step)
        cells = view.get("fields")
        if isinstance(cells, dict):
            for name, text in cells.items():
                self.text[(step, name)] = str(text)
                self.total[(step, name)] = len(str(text))
            self.whole.add(step)
            return
        cut = False
        for cell in cells or []:
            key = (step, str(cell["field"]))
            have = self.text.get(key, "")
            if int(cell.get("offset", 0)) == len(have):  # the next piece of this field
                self.text[key] = have + str(cell["text"])
            self.total[key] = int(cell["total_chars"])
            cut |= bool(cell.get("truncated"))
        if not cut:
            self.whole.add(step)

    def shown(self, step: str, name: str) -> str:
        """The field's text as shown, normalised; a sub-field (`result.2.name`) the dump
        showed inside its top-level field's text is shown too."""
        if (step, name) in self.text:
            return normalize(self.text[(step, name)])
        return " ".join(normalize(t) for (s, n), t in sorted(self.text.items())
                        if s == step and name.startswith(n + "."))

    def complete(self, step: str, name: str | None) -> bool:
        if name is None:  # read for coverage only: any view of the step will do
            return step in self.steps
        key = (step, name)
        return key in self.total and len(self.text.get(key, "")) >= self.total[key]


def _json_after(text: str, head: str) -> Any:
    at = text.find(head)
    if at < 0:
        return None
    start = text.index("\n", at) + 1
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError:
        return None


@dataclass
class Plan:
    """What one audit's report will say and which (step, field) texts it quotes."""

    submission: dict[str, Any]
    targets: list[tuple[str, str]]


def plan_of(report: Report) -> Plan:
    """The submission (the report's verdict, findings, leads, candidates) and its quotes."""
    data = report.model_dump(mode="json")
    submission = {k: data[k] for k in SUBMITTED_FIELDS}
    targets: dict[tuple[str, str], None] = {}
    for section in ("findings", "leads", "out_of_catalogue"):
        for f in submission[section]:
            for u in f.get("evidence", []):
                targets[(u["step"], u["field"])] = None
    return Plan(submission=submission, targets=list(targets))


class ReadWhatItNeeds:
    """The scripted auditor policy of one audit (see the module docstring)."""

    def __init__(self, plan: Plan, window: int) -> None:
        self.plan = plan
        self.window = window
        self.quotes = 0
        self.quotes_read = 0
        self.rejected = 0

    def wanted(self, opening: str) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = list(self.plan.targets)
        index = _json_after(opening, _INDEX_HEAD)
        if isinstance(index, dict):
            for line in index.get("edges", []):
                if "receiver may not see:" in line:  # the annotated layer's flag
                    step, _t, _task, kind = line.split(" ", 4)[:4]
                    name = _CROSSING.get(kind)
                    if name is not None and (step, name) not in out:
                        out.append((step, name))
        if not out:
            span = _SPAN.search(opening)
            if span is not None:
                out.append((span.group(3), None))  # the outcome: the record's last step
        return out

    def seen(self, messages: list[dict[str, Any]]) -> Seen:
        seen = Seen()
        opening = next((m["content"] for m in messages if m.get("role") == "user"), "")
        for head in (_WINDOW_HEAD, _DUMP_HEAD):
            shown = _json_after(opening, head)
            if isinstance(shown, dict):
                for view in shown.get("items", []):
                    seen.item(view)
        for m in messages:
            if m.get("role") != "tool":
                continue
            answer = json.loads(m["content"])
            if isinstance(answer, dict):
                for view in answer.get("items", []):
                    seen.item(view)
        return seen

    def __call__(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        opening = next((m["content"] for m in messages if m.get("role") == "user"), "")
        seen = self.seen(messages)
        offered = {t["function"]["name"] for t in params.get("tools") or []}
        last = messages[-1]
        if last.get("role") == "tool" and '"accepted":false' in last["content"]:
            self.rejected += 1
        calls: list[tuple[str, dict[str, Any]]] = []
        if "read" in offered:
            fresh: dict[str, list[str]] = {}
            for step, name in self.wanted(opening):
                if seen.complete(step, name):
                    continue
                have = len(seen.text.get((step, name), "")) if name is not None else 0
                if have:
                    calls.append(("read", {"step": step, "fields": [name], "offset": have,
                                           "budget": self.window}))
                elif name is None:
                    calls.append(("read", {"step": step, "budget": self.window}))
                else:
                    fresh.setdefault(step, []).append(name)
            calls += [("read", {"step": s, "fields": names, "budget": self.window})
                      for s, names in fresh.items()]
        # never the same call twice: an answer that made no progress is not asked again
        asked = {(c["function"]["name"], json.dumps(json.loads(c["function"]["arguments"]),
                                                     sort_keys=True))
                 for m in messages if m.get("role") == "assistant"
                 for c in m.get("tool_calls") or []}
        calls = [c for c in calls if (c[0], json.dumps(c[1], sort_keys=True)) not in asked]
        if calls:
            return respond(calls)
        return respond([(SUBMIT_TOOL, self.submission(seen))])

    def submission(self, seen: Seen) -> dict[str, Any]:
        """The planned report, each quote checked against the text the policy was shown."""
        out = copy.deepcopy(self.plan.submission)
        for section in ("findings", "leads", "out_of_catalogue"):
            for f in out[section]:
                for u in f.get("evidence", []):
                    self.quotes += 1
                    self.quotes_read += normalize(u["quote"]) in seen.shown(u["step"],
                                                                             u["field"])
        return out


# ------------------------------------------------------------------ one episode

@dataclass
class ArmFigures:
    chars: int = 0
    system_chars: int = 0
    requests: int = 0
    tool_calls: int = 0
    valid: bool = False
    quotes: int = 0
    quotes_read: int = 0
    longest_message: int = 0
    session_chars: int | None = None  # AuditSession.chars_sent (JSON of the messages)


@dataclass
class EpisodeFigures:
    world: str
    episode: str
    steps: int
    trace_chars: int
    verdict: str
    arms: dict[str, ArmFigures] = field(default_factory=dict)


def settings() -> LLMSettings:
    return LLMSettings(timeout=30.0, retries=0, backoff_base=0.001, backoff_max=0.01)


def graph_arm(bundle: Bundle, plan: Plan, arm: str, window: int) -> ArmFigures:
    model = scripted_model()
    policy = ReadWhatItNeeds(plan, window)
    model.policy, model.requests = policy, []
    auditor = LLMAuditor(MODEL, graph=arm, settings=settings(),  # type: ignore[arg-type]
                         window_chars=window, max_tool_calls=500)
    report = auditor.audit(bundle)
    session = auditor.last_session
    assert session is not None
    valid = session.accepted and validate_report(report.model_dump(mode="json"), bundle).ok
    return ArmFigures(chars=sum(c for c, _ in model.requests),
                      system_chars=sum(s for _, s in model.requests),
                      requests=len(model.requests), tool_calls=session.tool_calls, valid=valid,
                      quotes=policy.quotes, quotes_read=policy.quotes_read,
                      longest_message=session.longest_message,
                      session_chars=session.chars_sent)


def dump_message(bundle: Bundle, window: int) -> str:
    """The naive auditor's one user message: the overview and every step's every field."""
    items = [{"step": s.step, "kind": s.kind, "actor": s.actor, "edge": s.edge, "t": s.t,
              "task": s.task, "fields": {n: t for n in field_names(s)
                                         if n != "actor" and (t := field_text(s, n)) is not None}}
             for s in bundle.steps]
    return (overview(bundle, window) + f"\n\n{_DUMP_HEAD}\n" + to_json({"items": items})
            + f"\n\nSubmit your report with {SUBMIT_TOOL}.")


def dump_arm(bundle: Bundle, plan: Plan, window: int) -> ArmFigures:
    model = scripted_model()
    policy = ReadWhatItNeeds(plan, window)
    model.policy, model.requests = policy, []
    client = settings().client()
    messages = [{"role": "system", "content": system_prompt("full")},
                {"role": "user", "content": dump_message(bundle, window)}]
    request = client.request(MODEL, messages, [submit_tool()])
    response = asyncio.run(client.complete(request, "dump", {}, random.Random(0), "dump"))
    calls = response.get("tool_calls") or []
    valid = False
    if calls and calls[0].get("name") == SUBMIT_TOOL:
        args = calls[0]["arguments"]
        submitted = json.loads(args) if isinstance(args, str) else dict(args)
        ref = {"episode": bundle.manifest.episode,
               "manifest_sha256": sha256_file(bundle.root / MANIFEST)}
        data = {**submitted, "audit_schema": AUDIT_SCHEMA, "report_id": "dump-audit",
                "bundle": ref, "auditor": {"kind": "llm", "model": MODEL},
                "coverage": {"steps_read": [s.step for s in bundle.steps], "queries": []},
                "usage": {"tool_calls": len(calls)}}
        valid = validate_report(data, bundle).ok
    return ArmFigures(chars=sum(c for c, _ in model.requests),
                      system_chars=sum(s for _, s in model.requests),
                      requests=len(model.requests), tool_calls=len(calls), valid=valid,
                      quotes=policy.quotes, quotes_read=policy.quotes_read,
                      longest_message=max(len(m["content"]) for m in messages[1:]))


def measure_bundle(world: str, bundle: Bundle, window: int = 12000) -> EpisodeFigures:
    """Every arm's figures for one bundle (the plan: the offline auditor's report)."""
    report = RulesAuditor().audit(bundle)
    plan = plan_of(report)
    figs = EpisodeFigures(world=world, episode=bundle.manifest.episode, steps=len(bundle.steps),
                          trace_chars=sum(len(field_text(s, n) or "") for s in bundle.steps
                                          for n in field_names(s)),
                          verdict=report.verdict)
    for arm in GRAPH_ARMS:
        figs.arms[arm] = graph_arm(bundle, plan, arm, window)
    figs.arms["dump"] = dump_arm(bundle, plan, window)
    return figs


def traces(world: World, seeds: int, runs: Path) -> list[Path]:
    out = []
    for cond in world.conditions:
        for seed in range(seeds):
            r = run_episode(world, cond.name, None, seed, PROFILES[seed % len(PROFILES)], runs)
            if r.trace_path is not None:
                out.append(Path(r.trace_path))
    return out


def bundles(names: list[str], seeds: int, scratch: Path) -> list[tuple[str, Bundle]]:
    """The sanitized bundles of `seeds` sim episodes per condition of each world."""
    out = []
    for name in names:
        world = resolve_world(ROOT / "worlds" / f"{name}.eair")
        for trace in traces(world, seeds, scratch / "runs" / name):
            manifest = write_bundle(trace, world, scratch / "bundles" / name, index=False)
            out.append((name, Bundle.load(scratch / "bundles" / name / manifest.episode)))
    return out


def long_bundles(requests: list[int], scratch: Path) -> list[tuple[str, Bundle]]:
    """One sim episode of benchmarks/scaling.py's synthetic world per request count (five
    roles, seven steps per request): long traces with nothing seeded, a clean report."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scaling

    out = []
    for n in requests:
        compiled = scaling.build(scratch / "long" / f"requests-{n}", 100, n, 5)
        run = run_episode(compiled, None, None, 0, "sim", scratch / "runs" / "long")
        manifest = write_bundle(Path(run.trace_path or ""), compiled, scratch / "bundles" / "long",
                                index=False)
        out.append((f"syn{n}", Bundle.load(scratch / "bundles" / "long" / manifest.episode)))
    return out


def measure(names: list[str], seeds: int, scratch: Path, window: int = 12000
            ) -> list[EpisodeFigures]:
    return [measure_bundle(name, b, window) for name, b in bundles(names, seeds, scratch)]


# ------------------------------------------------------------------ the table

def summarize(figs: list[EpisodeFigures]) -> dict[str, dict[str, Any]]:
    """Per arm: audits, valid reports, requests, characters (median, total, without the
    system prompt), and the ratio against the dump (of totals, and the median per episode)."""
    out: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        rows = [(f.arms[arm], f.arms["dump"]) for f in figs if arm in f.arms]
        if not rows:
            continue
        chars = [a.chars for a, _ in rows]
        bare = [a.chars - a.system_chars for a, _ in rows]
        dump = sum(d.chars for _, d in rows)
        dump_bare = sum(d.chars - d.system_chars for _, d in rows)
        out[arm] = {
            "audits": len(rows), "valid": sum(a.valid for a, _ in rows),
            "quotes": sum(a.quotes for a, _ in rows),
            "quotes_read": sum(a.quotes_read for a, _ in rows),
            "requests_median": statistics.median(a.requests for a, _ in rows),
            "chars_median": statistics.median(chars), "chars_total": sum(chars),
            "bare_median": statistics.median(bare), "bare_total": sum(bare),
            "ratio_total": sum(chars) / dump if dump else None,
            "ratio_median": statistics.median(a.chars / d.chars for a, d in rows if d.chars),
            "bare_ratio_total": sum(bare) / dump_bare if dump_bare else None,
            "longest_message": max(a.longest_message for a, _ in rows),
        }
    return out


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def table(figs: list[EpisodeFigures], title: str) -> list[str]:
    s = summarize(figs)
    lines = [title,
             f"  {'arm':<10} {'audits':>6} {'valid':>6} {'reqs':>5} {'chars med':>10} "
             f"{'chars total':>12} {'/dump':>7} {'med/dump':>8} {'no-sys med':>10} "
             f"{'no-sys total':>12} {'/dump':>7} {'longest':>8}"]
    for arm, r in s.items():
        lines.append(
            f"  {arm:<10} {r['audits']:>6} {r['valid']:>6} {r['requests_median']:>5g} "
            f"{r['chars_median']:>10,.0f} {r['chars_total']:>12,} {_pct(r['ratio_total']):>7} "
            f"{_pct(r['ratio_median']):>8} {r['bare_median']:>10,.0f} {r['bare_total']:>12,} "
            f"{_pct(r['bare_ratio_total']):>7} {r['longest_message']:>8,}")
    return lines


def report_lines(figs: list[EpisodeFigures], window: int) -> list[str]:
    lines = [f"LLM audit: characters sent per audit, scripted 'reads what it needs' policy "
             f"(window {window:,}); dump = one message with every step in full"]
    for world in sorted({f.world for f in figs}):
        mine = [f for f in figs if f.world == world]
        steps = [f.steps for f in mine]
        lines += ["", *table(mine, f"{world.upper()}: {len(mine)} episodes, "
                                    f"{min(steps)}-{max(steps)} steps, trace text median "
                                    f"{statistics.median(f.trace_chars for f in mine):,.0f} "
                                    f"chars, verdicts "
                                    + ", ".join(f"{v} {sum(f.verdict == v for f in mine)}"
                                                for v in sorted({f.verdict for f in mine})))]
    lines += ["", *totals(figs)]
    return lines


#: trace text sizes (characters of every field of every step) the ratio is broken down by
SIZES = ((0, 10_000), (10_000, 40_000), (40_000, None))


def totals(figs: list[EpisodeFigures], title: str | None = None) -> list[str]:
    """The table over every episode, the ratios against the dump and by trace size."""
    s = summarize(figs)
    lines = table(figs, title or f"ALL: {len(figs)} episodes")
    q = {arm: f"{r['quotes_read']}/{r['quotes']}" for arm, r in s.items()}
    lines.append("  quotes verbatim in text the policy was shown: "
                 + ", ".join(f"{a} {v}" for a, v in q.items()))
    for arm in ("annotated", "topology"):
        r = s.get(arm)
        if r and r["ratio_total"] is not None:
            verdict = "meets" if r["ratio_total"] <= TARGET else "misses"
            lines.append(f"  {arm}/dump {_pct(r['ratio_total'])} of the characters (target "
                         f"<= {TARGET:.0%}: {verdict}); without the system prompt "
                         f"{_pct(r['bare_ratio_total'])}")
    for low, high in SIZES:
        part = [f for f in figs if f.trace_chars >= low and (high is None or f.trace_chars < high)]
        if not part:
            continue
        p = summarize(part)
        label = f"trace text {low:,}-{high:,}" if high is not None else f"trace text >= {low:,}"
        lines.append(f"  {label:<26} {len(part):>3} episodes: " + ", ".join(
            f"{arm}/dump {_pct(p[arm]['ratio_total'])} (no-sys {_pct(p[arm]['bare_ratio_total'])})"
            for arm in GRAPH_ARMS if arm in p))
    if "topology" in s and "none" in s and s["none"]["chars_total"]:
        cut = 1 - s["topology"]["chars_total"] / s["none"]["chars_total"]
        paper = 1 - PAPER["topology"] / PAPER["none"]
        lines.append(f"  topology against no graph: {_pct(cut)} fewer characters (paper, "
                     f"F.16: {_pct(paper)} fewer input tokens)")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=2,
                        help="episodes per condition (seed 0 sim, 1 reckless, ...)")
    parser.add_argument("--worlds", default=",".join(WORLDS))
    parser.add_argument("--window", default="12000",
                        help="LLMAuditor window_chars, or a comma-separated list (the first "
                             "gets the per-world tables; default 12000, the auditor's)")
    parser.add_argument("--long", default="100,500",
                        help="also synthetic long episodes with this many requests each "
                             "(benchmarks/scaling.py's world; '' for none)")
    parser.add_argument("--json", type=Path, help="write the per-episode figures here")
    parser.add_argument("--keep", type=Path, help="keep the runs and bundles here")
    args = parser.parse_args(argv)
    windows = [int(w) for w in args.window.split(",") if w.strip()]
    os.chdir(ROOT)
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="eair-audit-llm-bench-"))
    start = time.perf_counter()
    try:
        names = [n.strip() for n in args.worlds.split(",") if n.strip()]
        made = bundles(names, args.seeds, scratch)
        figs = {w: [measure_bundle(name, b, w) for name, b in made] for w in windows}
        longs = long_bundles([int(n) for n in args.long.split(",") if n.strip()], scratch)
        long_figs = {w: [measure_bundle(name, b, w) for name, b in longs] for w in windows}
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print("\n".join(report_lines(figs[windows[0]], windows[0])))
    for w in windows[1:]:
        print("\n" + "\n".join(totals(figs[w], f"ALL, window {w:,}: {len(figs[w])} episodes")))
    for w in windows if longs else []:
        print(f"\nSynthetic long episodes (not in ALL; window {w:,}): nothing seeded, so the "
              "report is clean and reads one step")
        for f in long_figs[w]:
            row = "  ".join(f"{a} {x.chars:,}" + (f" ({x.chars / f.arms['dump'].chars:.1%})"
                                                  if a != "dump" else "")
                            for a, x in f.arms.items())
            valid = sum(x.valid for x in f.arms.values())
            print(f"  {f.world:<8} {f.steps:>5} steps, trace text {f.trace_chars:>8,}: {row}; "
                  f"valid {valid}/{len(f.arms)}")
    if args.json is not None:
        out = {}
        for w, rows in figs.items():
            out[str(w)] = {"summary": summarize(rows), "episodes": [
                {"world": f.world, "episode": f.episode, "steps": f.steps,
                 "trace_chars": f.trace_chars, "verdict": f.verdict,
                 "arms": {a: vars(x) for a, x in sorted(f.arms.items())}}
                for f in rows + long_figs[w]]}
        args.json.write_text(json.dumps({"windows": out}, indent=2, sort_keys=True) + "\n",
                             encoding="utf-8")
    print(f"\ntotal {time.perf_counter() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
