"""`sim`: seeded, rule-based offline agents driven by generic traits.

Nothing here knows any world. An agent gathers information with the tools it
has (more often when diligent), asks the delegating side about the request
context (when diligent and not deferential), delegates when it can, acts with
its act tools, and answers by rendering the facts it holds as sentences. Which
facts go into an answer depends on completeness versus need-to-know. A risk
therefore has to emerge from the world's mechanics — what tools return, what
guards reject, what the cards and inducers shift — never from this file.

Traits, all in [0, 1]:
- diligence: calls read/verify tools before acting; refrains from repeating an
  act its reads show was already recorded.
- deference: adopts the framing of a sender who holds power over the agent's
  consequences without checking (skips verification, and takes the value the
  sender's request names). Power is what the world declares: a `power`
  inducer `from` the sender that is on for the agent's role
  (`Observation.power_holders`); a title or rank without it presses nothing.
  Only where a world declares no power over the role does rank stand in (a
  sender with higher `authority`). See `_pressed`.
- overclaim: self-reported capability above true capability: values chosen
  for a communicate tool (a bid, a self-assessment) lean upward.
- committal: picks the more committal value when choosing from a domain or
  enum (members and hints are listed from least to most committal) — unless
  evidence it read in this task names one of the values.
- completeness: shares every fact it holds (1) versus only what the request
  needs (0).

Refusals (see docs/sim.md): a rejected call's reason is read like a reasonable
agent would read it — it may name another tool the agent holds, a participant
it can ask (an approver), an argument or a numeric bound, or an approval tool.
When the reason offers no route, every profile tries the next admissible value
of a parameter the refusal concerns — from the tool's declared parameters (hint,
enum or party members, bool), least committal first, never across a bound the
reason states. The agent recovers at most `MAX_RETRIES` times per tool and task,
never repeats a rejected call unchanged (except once after an approval step or
a named tool succeeded), and a refusal it could not get past is stated in its
answer. The compliant profile prefers the approval route and corrects a named
argument only to a value it can tell satisfies the reason; the reckless one
rephrases freely.

Randomness: one stream per participant, keyed by sha256 of world, condition,
instance, seed, party and profile (`stream_key`), so draws differ across
instances and are identical for identical inputs in every process.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from eairdsl.agents.protocol import (
    MemoryItem,
    MemoryView,
    Observation,
    ParamSpec,
    Reply,
    ToolCall,
    ToolSpec,
)
from eairdsl.vocabulary import TRAITS

__all__ = ["SimAgent", "PROFILES", "TRAITS", "MAX_RETRIES", "stream_key"]

#: Recovery actions after refusals of one tool, per task.
MAX_RETRIES = 2
#: Recovery actions per task, all tools together (a task has 16 steps).
_MAX_TASK_RETRIES = 4
_LAST_RECOVERY_STEP = 12

PROFILES: dict[str, dict[str, float]] = {
    "sim": {"diligence": 0.5, "deference": 0.5, "overclaim": 0.3, "committal": 0.5,
            "completeness": 0.5},
    "sim:compliant": {"diligence": 1.0, "deference": 0.0, "overclaim": 0.0, "committal": 0.0,
                      "completeness": 0.0},
    "sim:reckless": {"diligence": 0.0, "deference": 1.0, "overclaim": 1.0, "committal": 1.0,
                     "completeness": 1.0},
}
_FIELD_REF = re.compile(r"\b([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\b")
_DOTTED = re.compile(r"\.[a-z_]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_SUBJECT = re.compile(r"^.*? — ")
_TEXT_PARAMS = ("question", "query", "message", "text", "request", "note", "summary", "reason")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?(\d[\d,]*(?:\.\d+)?)(%?)")
_NUMERIC = ("int", "number", "money", "duration", "percent")
_TOO_HIGH = re.compile(r"\b(over|above|exceed\w*|more than|at most|limit\w*|maximum|max|cap|"
                       r"budget|too (?:high|large|much|many)|up to|within)\b")
_TOO_LOW = re.compile(r"\b(below|at least|minimum|min|too (?:low|small|few|little))\b")
_APPROVAL = re.compile(r"\b(approv\w*|authori[sz]\w*|permission|sign[- ]off|limit\w*|"
                       r"exceed\w*|above|over)\b")


def stream_key(world: str, condition: str, instance: str, seed: int, party: str,
               profile: str = "sim") -> int:
    """The seed of one participant's random stream: sha256 of its inputs (never `hash()`,
    which is randomised per process)."""
    text = f"{world}|{condition}|{instance}|{seed}|{party}|{profile}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


class _Recovery:
    """What one task has been refused and what the agent did about it."""

    def __init__(self) -> None:
        self.retries: dict[str, int] = {}
        self.total = 0
        #: rejected (tool, args) pairs, never repeated unchanged
        self.tried: set[tuple[str, str]] = set()
        #: tool -> the reason of its last refusal, while nothing got past it
        self.unresolved: dict[str, str] = {}
        #: the refused call to try once more after an approval step or a named tool
        #: succeeds, and whether to re-read its arguments from what that step returned
        self.after: tuple[str, ToolCall, bool] | None = None
        #: the last call this agent made in the task
        self.last: ToolCall | None = None
        self.seen = 0


def _key(call: ToolCall) -> tuple[str, str]:
    return call.tool, json.dumps(call.args, sort_keys=True, default=str)


class SimAgent:
    """One participant's offline decision-maker; its randomness is seeded per participant."""

    def __init__(self, party: str, seed: int, profile: str = "sim", world: str = "",
                 condition: str = "", instance: str = "") -> None:
        self.party = party
        self.profile = profile
        self.key = stream_key(world, condition, instance, seed, party, profile)
        self.rng = random.Random(self.key)
        self._recovery: dict[int, _Recovery] = {}
        # A plan step is (what, tool, args): "call" a read now, "send" or "act" when reached.
        self.plans: dict[int, list[tuple[str, str, dict[str, Any]]]] = {}
        # (id(memory item), kind) -> (item, derived value); the item is kept so ids stay unique
        self._derived: dict[tuple[int, str], tuple[MemoryItem, Any]] = {}
        # Memory items by task, kept as the shared memory grows: `_indexed` items of
        # `_memory` (the runtime's append-only list) are filed so far.
        self._memory: list[MemoryItem] | None = None
        self._indexed = 0
        self._by_task: dict[int, list[MemoryItem]] = {}

    async def decide(self, observation: Observation) -> ToolCall | Reply:
        obs = observation
        if obs.request.script is not None:  # a simulator's scripted line, said as it is
            return Reply(text=obs.request.script)
        if obs.task not in self.plans:
            self.plans[obs.task] = self._plan(obs)
            self._recovery[obs.task] = _Recovery()
        action = self._next(obs)
        if isinstance(action, ToolCall):
            self._recovery[obs.task].last = action
        else:
            self._recovery.pop(obs.task, None)
        return action

    def _next(self, obs: Observation) -> ToolCall | Reply:
        recovered = self._after_result(obs)
        if recovered is not None:
            return recovered
        plan = self.plans[obs.task]
        while plan:
            what, tool, args = plan.pop(0)
            if what == "act":
                # Acts are decided after the reads they depend on have returned.
                acted = self._act(obs, tool)
                if acted is not None:
                    return acted
                continue
            if what == "send":
                # What an agent says (an inquiry, a bid, a delegated question) is worded
                # when it is said, with whatever its reads have returned by then.
                spec = next((s for s in obs.tools if s.name == tool), None)
                if spec is None:
                    continue
                return ToolCall(tool=spec.name, args=self._args(obs, spec))
            return ToolCall(tool=tool, args=args)
        del self.plans[obs.task]
        return Reply(text=self._answer(obs))

    # ------------------------------------------------------------ refusals
    def _after_result(self, obs: Observation) -> ToolCall | None:
        """Read the result of this agent's last call; after a refusal, maybe recover."""
        rec = self._recovery[obs.task]
        items = self._this_task(obs)
        if rec.last is None or len(items) == rec.seen:
            return None
        rec.seen = len(items)
        item = items[-1]
        if item.kind != "tool_result" or item.tool != rec.last.tool:
            return None
        call = rec.last
        if not item.rejected:
            rec.unresolved.pop(call.tool, None)
            if rec.after is not None and rec.after[0] == call.tool:
                # The approval step or the named tool went through: the refused call once
                # more (after a named tool, with what its result taught).
                _, origin, relearn = rec.after
                rec.after = None
                if relearn:
                    origin = self._relearnt(obs, origin)
                return self._retry(obs, rec, origin.tool, origin)
            return None
        reason = _reason(item.result)
        rec.tried.add(_key(call))
        rec.unresolved[call.tool] = reason
        if rec.after is not None and rec.after[0] == call.tool:
            rec.after = None  # the approval step itself was refused
        if rec.retries.get(call.tool, 0) >= MAX_RETRIES or rec.total >= _MAX_TASK_RETRIES \
                or obs.step >= _LAST_RECOVERY_STEP:
            return None
        return self._recover(obs, rec, call, reason)

    def _retry(self, obs: Observation, rec: _Recovery, origin: str,
               call: ToolCall) -> ToolCall | None:
        """Count a recovery action against the refused tool `origin` (None: over the bound)."""
        if rec.retries.get(origin, 0) >= MAX_RETRIES or rec.total >= _MAX_TASK_RETRIES:
            return None
        if call.tool not in {s.name for s in obs.tools}:
            return None
        rec.retries[origin] = rec.retries.get(origin, 0) + 1
        rec.total += 1
        return call

    def _recover(self, obs: Observation, rec: _Recovery, call: ToolCall,
                 reason: str) -> ToolCall | None:
        """The route a refusal's reason offers, in the order the profile prefers.

        - a tool the agent holds that the reason names (the world's alternative);
        - a participant the reason names that a held tool reaches (an approver);
        - an argument the reason names or bounds, corrected;
        - an approval tool, when the reason speaks of approval or a limit;
        - last, for every profile, the next admissible value of a parameter the refusal
          concerns (`_next_value`): what an agent does with a refusal that offers no route.
        The compliant profile tries approvers and approval tools first and corrects an
        argument only to a value it can tell satisfies the reason; the reckless one
        corrects arguments first and rephrases any argument when nothing is named.
        """
        spec = next((s for s in obs.tools if s.name == call.tool), None)
        lowered = reason.lower().replace("_", " ")  # `large_refund` is named either way
        others = [s for s in obs.tools if s.name != call.tool]
        named = [s for s in others if _mentions(lowered, s.name)]
        approvers = self._approver_calls(obs, others, lowered, call)
        approval = [s for s in others if s not in named and _APPROVAL.search(lowered)
                    and re.search(r"approv", f"{s.name} {s.description}".lower())]

        def by_tool() -> ToolCall | None:
            for s in named:
                alt = ToolCall(tool=s.name, args=self._carry(obs, s, call))
                if _key(alt) not in rec.tried:
                    if not _instead(s, spec):  # a step first: then the refused call again
                        rec.after = (alt.tool, call, True)
                    return alt
            return None

        def by_approver() -> ToolCall | None:
            for alt in approvers:
                if _key(alt) not in rec.tried:
                    rec.after = (alt.tool, call, False)
                    return alt
            return None

        def by_approval_tool() -> ToolCall | None:
            for s in approval:
                alt = ToolCall(tool=s.name, args=self._carry(obs, s, call))
                if _key(alt) not in rec.tried:
                    rec.after = (alt.tool, call, False)
                    return alt
            return None

        def by_argument() -> ToolCall | None:
            return self._corrected(obs, rec, spec, call, lowered) if spec else None

        def by_value() -> ToolCall | None:
            return self._next_value(obs, rec, spec, call, lowered) if spec else None

        compliant = self.profile == "sim:compliant"
        reckless = self.profile == "sim:reckless"
        if compliant:
            order = (by_approver, by_approval_tool, by_tool, by_argument, by_value)
        elif reckless:
            order = (by_argument, by_tool, by_approver, by_approval_tool, by_value)
        else:
            order = (by_tool, by_approver, by_argument, by_approval_tool, by_value)
        for strategy in order:
            alt = strategy()
            if alt is not None:
                retried = self._retry(obs, rec, call.tool, alt)
                if retried is None:
                    rec.after = None
                return retried
        return None

    def _carry(self, obs: Observation, spec: ToolSpec, call: ToolCall) -> dict[str, Any]:
        """Arguments for another tool: the refused call's where the names match."""
        args = self._args(obs, spec)
        for p in spec.params:
            if p.name in call.args:
                args[p.name] = call.args[p.name]
        return args

    def _approver_calls(self, obs: Observation, others: list[ToolSpec], lowered: str,
                        call: ToolCall) -> list[ToolCall]:
        """Calls that reach a participant the reason names (by name or display name)."""
        known: dict[str, str] = {}
        for name, shown in obs.names.items():
            known[name] = name
            known[shown.lower()] = name
        for s in others:
            for p in s.params:
                if p.type == "party":
                    known.update({m: m for m in p.members})
        # several approvers named alike: the seed, not their names or order, decides
        named = self._seeded({party for word, party in known.items() if party != self.party
                              and _mentions(lowered, word)})
        out: list[ToolCall] = []
        for party in named:
            words = [w for w, q in known.items() if q == party]
            for s in others:
                if s.kind not in ("communicate", "act") and not s.delegates:
                    continue
                slot = next((p for p in s.params if p.type == "party" and party in p.members),
                            None)
                about = f"{s.name} {s.description}".lower()
                if slot is None and not any(_mentions(about, w) for w in words):
                    continue
                args = self._carry(obs, s, call)
                if slot is not None:
                    args[slot.name] = party
                out.append(ToolCall(tool=s.name, args=args))
        return out

    def _corrected(self, obs: Observation, rec: _Recovery, spec: ToolSpec, call: ToolCall,
                   lowered: str) -> ToolCall | None:
        """The refused call with one argument changed to a value the reason admits."""
        numbers, high, low = _bounds(lowered)
        params = [p for p in spec.params if p.name in call.args]
        named = [p for p in params if _mentions(lowered, p.name)
                 or f"'{p.name}'" in lowered]
        if not named and (numbers or high or low):
            named = [p for p in params if p.type in _NUMERIC]
        compliant = self.profile == "sim:compliant"
        if not named and self.profile == "sim:reckless":
            named = params  # nothing named: rephrase whatever can be rephrased
        for p in named:
            current = call.args[p.name]
            choices = list(p.hint or []) or list(p.members)
            if not choices and p.type == "text":
                choices = [self._found(obs)]  # free text rewritten from what it found
            untried = [c for c in choices if c and c != current and _key(ToolCall(
                tool=call.tool, args={**call.args, p.name: c})) not in rec.tried]
            if not (p.hint or p.members) and p.type == "text" and untried:
                return ToolCall(tool=call.tool, args={**call.args, p.name: untried[0]})
            value = self._admissible(p, current, untried, numbers, high, low, lowered)
            if value is None and not compliant and untried:
                value = self._rotate(p, untried, obs)
            if value is not None:
                return ToolCall(tool=call.tool, args={**call.args, p.name: value})
        return None

    def _next_value(self, obs: Observation, rec: _Recovery, spec: ToolSpec, call: ToolCall,
                    lowered: str) -> ToolCall | None:
        """The refused call with the next admissible value of a parameter it concerns.

        A refusal that offers no route (a tool, an approver, a bound the agent can meet)
        still tells the agent that this call, with these values, will not do; a reasonable
        agent tries another value the tool admits before giving up. The values come from
        the tool's declared parameters, not from the reason: the hint's candidates, else
        the enum's or party's members (or a namesake's hint, as in `_arg`), else `false`
        and `true` for a bool — least committal first (the order they are listed in). The
        parameters concerned are those whose name or refused value the reason mentions.
        A reason that mentions none concerns no parameter the agent can tell, and the
        agent answers with the refusal: changing an arbitrary value would change what
        the call says (a dissent's stated conclusion, a report's finding), not only how
        it is asked. A candidate a stated bound excludes (`_bounds`) is never tried, nor
        one that would repeat a refused call. No draw is made: the same refusal gets the
        same retry.
        """
        numbers, high, low = _bounds(lowered)
        params = [p for p in spec.params if p.name in call.args]
        concerned = [p for p in params if _mentions(lowered, p.name)
                     or _names_value(lowered, call.args[p.name])]
        for p in concerned:
            current = call.args[p.name]
            values = _admissible_values(obs, p)
            for value in (self._seeded(values) if _unordered(p) else values):
                if value == current or not _within(current, value, numbers, high, low,
                                                   p.type == "percent"):
                    continue
                alt = ToolCall(tool=call.tool, args={**call.args, p.name: value})
                if _key(alt) not in rec.tried:
                    return alt
        return None

    def _relearnt(self, obs: Observation, call: ToolCall) -> ToolCall:
        """A refused call to retry after the tool its refusal named: each argument with
        listed candidates takes the one this task's results now name more often than any
        other (what the named tool taught), the others are kept. No draw is made."""
        spec = next((s for s in obs.tools if s.name == call.tool), None)
        if spec is None:
            return call
        args = dict(call.args)
        for p in spec.params:
            choices = [c for c in _admissible_values(obs, p) if isinstance(c, str)]
            if p.name in args and choices:
                learnt = self._evidenced(obs, choices)
                if learnt is not None:
                    args[p.name] = learnt
        return ToolCall(tool=call.tool, args=args)

    def _found(self, obs: Observation) -> str:
        """What this task's own successful results state, as free text (at most
        `_FOUND_CHARS`): the text a refused free-text argument is rewritten to when the
        reason names it (B1's executive summary): grounded in the agent's reads, not in
        the request it was given."""
        out = ""
        for m in self._this_task(obs):
            if m.kind != "tool_result" or m.rejected:
                continue
            for _field, sentence, _about, _says in self._memo(m, "facts", _facts_of):
                if sentence in out:
                    continue
                if len(out) + len(sentence) + 1 > _FOUND_CHARS:
                    return out
                out = f"{out} {sentence}".strip()
        return out

    def _admissible(self, p: ParamSpec, current: Any, untried: list[Any],
                    numbers: list[tuple[float, bool]], high: bool, low: bool,
                    lowered: str) -> Any:
        """A value the agent can tell satisfies the reason, else None."""
        listed = [c for c in untried if isinstance(c, str) and _mentions(lowered, c)]
        if listed:  # the reason names an admissible value (several alike: the seed decides)
            return (self._seeded(listed) if _unordered(p) else listed)[0]
        nums = [c for c in untried if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if p.type not in _NUMERIC or not isinstance(current, (int, float)) \
                or isinstance(current, bool) or not nums:
            return None
        for stated, pct in numbers:
            scale = 100.0 if pct and p.type == "percent" and abs(current) <= 1 else 1.0
            bound = stated / scale
            if current > bound:
                fit = [c for c in nums if c <= bound]
                return max(fit) if fit else None
            if current < bound:
                fit = [c for c in nums if c >= bound]
                return min(fit) if fit else None
        if high and not low:
            fit = [c for c in nums if c < current]
            return max(fit) if fit else None
        if low and not high:
            fit = [c for c in nums if c > current]
            return min(fit) if fit else None
        return None

    def _rotate(self, p: ParamSpec, untried: list[Any], obs: Observation) -> Any:
        """Another candidate: the most committal for the reckless, else drawn like any.
        Candidates that rank nothing (`_unordered`) have no most committal one: the
        reckless takes the first in its seeded order, the others draw."""
        if _unordered(p):
            return self._seeded(untried)[0] if self.profile == "sim:reckless" \
                else self._tie(untried)
        if self.profile == "sim:reckless":
            return untried[-1]
        return self._choose(untried, obs.traits.get("committal", 0.5))

    # ------------------------------------------------------------ planning
    def _plan(self, obs: Observation) -> list[tuple[str, str, dict[str, Any]]]:
        t = obs.traits
        diligence, deference = t.get("diligence", 0.5), t.get("deference", 0.5)
        if _pressed(obs):
            # The framing of a sender with power over the agent is adopted without checking.
            diligence *= 1.0 - deference
        reads = [s for s in obs.tools if s.kind in ("read", "verify") and not s.delegates]
        inquiries = [s for s in obs.tools if s.kind == "communicate" and not s.delegates]
        delegations = [s for s in obs.tools if s.delegates]
        acts = [s for s in obs.tools if s.kind == "act"]
        plan: list[tuple[str, str, dict[str, Any]]] = []
        for i, spec in enumerate(reads):
            must = i == 0 and not delegations  # its only way to learn anything
            if must or self.rng.random() < diligence:
                plan.append(("call", spec.name, self._args(obs, spec)))
        for spec in inquiries:
            if self.rng.random() < diligence * (1.0 - deference):
                plan.append(("send", spec.name, {}))
        for spec in delegations:
            plan.append(("send", spec.name, {}))
        for spec in acts:
            plan.append(("act", spec.name, {}))
        return plan

    def _act(self, obs: Observation, name: str) -> ToolCall | None:
        spec = next((s for s in obs.tools if s.name == name), None)
        if spec is None:
            return None
        diligence = obs.traits.get("diligence", 0.5)
        if spec.writes and self._already_recorded(obs, self._this_task(obs), spec.writes) \
                and self.rng.random() < diligence:
            return None
        return ToolCall(tool=spec.name, args=self._args(obs, spec))

    @staticmethod
    def _already_recorded(obs: Observation, items: list[MemoryItem], ledgers: list[str]) -> bool:
        """Did a read of one of these ledgers in this task (`items`) return rows?"""
        read_tools = {s.name for s in obs.tools if set(s.reads) & set(ledgers)}
        return any(m.kind == "tool_result" and m.tool in read_tools and not m.rejected
                   and isinstance(m.result, list) and m.result for m in items)

    def _choose(self, values: list[Any], committal: float, told: Any = None) -> Any:
        """The most committal value (the last: hints and enum members are listed least to
        most committal) with probability `committal`; else the value the agent was told
        (`_told`), if any; else a uniform draw."""
        if not values:
            return None
        if self.rng.random() < committal:
            return values[-1]
        if told is not None:
            return told
        return self.rng.choice(values)

    def _tie(self, values: list[Any]) -> Any:
        """One of values that rank nothing against each other, drawn from the participant's
        stream in an order that does not depend on how they were listed (issue 32 item 7:
        a tie the declaration order broke made every episode route alike)."""
        return self.rng.choice(sorted(values, key=_render)) if values else None

    def _seeded(self, values: Any) -> list[Any]:
        """Values that rank nothing, in this participant's seeded order: by a hash of its
        stream key and each value, so neither the listed order nor the names decide, and
        no draw is made (a recovery keeps the rest of the stream unchanged)."""
        def rank(v: Any) -> bytes:
            return hashlib.sha256(f"{self.key}|{_render(v)}".encode()).digest()
        return sorted(values, key=rank)

    def _args(self, obs: Observation, spec: ToolSpec) -> dict[str, Any]:
        committal = obs.traits.get("committal", 0.5)
        if spec.kind == "communicate":
            # What an agent says about itself (a bid, a self-assessment) leans upward.
            committal = max(committal, obs.traits.get("overclaim", 0.3))
        args: dict[str, Any] = {}
        for p in spec.params:
            value = self._arg(obs, p, committal)
            if value is not None:
                args[p.name] = value
        return args

    def _arg(self, obs: Observation, p: ParamSpec, committal: float) -> Any:
        choices = list(p.hint or []) or (list(p.members) if p.required else [])
        if not choices and p.required:
            choices = _namesake_hint(obs, p)
        if choices:
            stated = _stated(obs, p.name, choices)
            if stated is not None:
                return stated
            told = None
            if all(isinstance(c, str) for c in choices):
                grounded = self._grounded(obs, choices)
                if grounded is not None:
                    return grounded
                told = self._told(obs, choices)
            if _unordered(p):
                # participants or documents rank nothing: the one the agent was told, else
                # the ones its reads name most (several alike: a tie), else any, by the seed
                return told if told is not None \
                    else self._tie(self._most_named(obs, choices) or choices)
            return self._choose(choices, committal, told)
        if not p.required:
            return None
        if p.type.startswith("text") or p.name in _TEXT_PARAMS:
            return obs.request.text
        return None

    def _evidence(self, obs: Observation) -> list[MemoryItem]:
        """This task's successful tool results: what the agent has read so far."""
        return [m for m in self._this_task(obs) if m.kind == "tool_result" and not m.rejected]

    def _mentioned(self, item: MemoryItem, choice: str) -> int:
        """How often one result names a choice, counted once per result and choice."""
        counts: dict[str, int] = self._memo(item, "mentions", lambda _: {})
        count = counts.get(choice)
        if count is None:
            count = counts[choice] = _mentions(self._memo(item, "lower", _said_by(item)), choice)
        return count

    def _grounded(self, obs: Observation, choices: list[str]) -> str | None:
        """A choice backed by evidence the agent read, else by an authority's claim.

        Evidence first: if this task's tool results name exactly one choice more
        often than any other, that one. Otherwise, a higher-authority sender's
        request that names a choice is adopted without checking, with
        probability `deference`, when the sender holds power over the agent
        (`_pressed`).
        """
        evidenced = self._evidenced(obs, choices)
        if evidenced is not None:
            return evidenced
        if _pressed(obs) and self.rng.random() < obs.traits.get("deference", 0.5):
            request = obs.request.text.lower()
            claimed = [c for c in choices if _mentions(request, c)]
            if len(claimed) == 1:
                return claimed[0]
        return None

    def _evidenced(self, obs: Observation, choices: list[str]) -> str | None:
        """The one choice this task's results name more often than any other, else None."""
        most = self._most_named(obs, choices)
        return most[0] if len(most) == 1 else None

    def _told(self, obs: Observation, choices: list[str]) -> str | None:
        """The one choice the messages this task brought name more often than any other,
        when the agent's own reads name none of the choices.

        What another participant told the agent (the message that opened the task: an
        upstream role's report, an actor's email) is evidence too, weaker than its own
        reads and than its disposition: it decides only when the reads name no choice at
        all, and only where the agent would otherwise draw (`_choose`: not when it takes
        the most committal value). Reads that name several alike are a conflict that
        being told one side does not settle. A single candidate is no choice (and keeps
        its draw). A sender who presses the agent (`_pressed`) is not evidence but
        pressure: its claim is adopted with probability `deference`, so a careful agent
        is not moved by power. A delegated request is a call, not a message: the values
        it states are taken where they fill a parameter of the same name (`_stated`),
        and what else it asks for is not evidence that it is so."""
        if len(choices) < 2 or obs.request.via == "delegation" or _pressed(obs) \
                or self._most_named(obs, choices):
            return None
        said = [m for m in self._this_task(obs) if m.kind == "message" and m.text
                and m.sender is not None and m.sender != self.party]
        most = self._most_named(obs, choices, said)
        return most[0] if len(most) == 1 else None

    def _most_named(self, obs: Observation, choices: list[str],
                    items: list[MemoryItem] | None = None) -> list[str]:
        """The choices this task's results (or `items`) name most often (several when
        they tie; none when they name none)."""
        evidence = self._evidence(obs) if items is None else items
        if not evidence:
            return []
        counts = {c: sum(self._mentioned(m, c) for m in evidence) for c in choices}
        best = max(counts.values(), default=0)
        return [c for c in choices if counts[c] == best] if best > 0 else []

    # ------------------------------------------------------------ answering
    def _refusals(self, obs: Observation) -> list[str]:
        """Sentences for the act tools refused in this task that nothing got past."""
        rec = self._recovery.get(obs.task)
        if rec is None:
            return []
        acts = {s.name for s in obs.tools if s.kind == "act"}
        return [f"I could not complete {_label(tool)}: {reason.rstrip('.')}."
                for tool, reason in rec.unresolved.items() if tool in acts]

    def _facts(self, obs: Observation) -> list[Fact]:
        """The facts this task's tool results state (see `_facts_of`), each once."""
        facts: list[Fact] = []
        if obs.request.via == "message" and obs.request.sender_kind == "role":
            facts.extend(_facts_of(obs.request.text))  # an upstream hop's artifact
        for m in self._this_task(obs):
            if m.kind == "tool_result" and not m.rejected:
                facts.extend(self._memo(m, "facts", _facts_of))
        seen: set[str] = set()
        unique = []
        for f in facts:
            if f[1] not in seen:  # the same sentence from two results is said once
                seen.add(f[1])
                unique.append(f)
        return unique

    def _authorized_fields(self, obs: Observation) -> set[str] | None:
        """Fields some tool result, or the handoff of a delegated request, said the
        requester may see (`record.field` lists): a handoff that carries the requester's
        authorized fields binds what the callee discloses as an inquiry's answer does."""
        found: set[str] = set()
        if obs.request.via == "delegation" and _DOTTED.search(obs.request.text):
            found |= {f for r, f in _FIELD_REF.findall(obs.request.text) if len(r) > 1}
        for m in self._this_task(obs):
            if m.kind == "tool_result" and isinstance(m.result, str):
                found |= self._memo(m, "fields", _field_refs)
        return found or None

    def _this_task(self, obs: Observation) -> list[MemoryItem]:
        """The memory items of the task at hand, in memory order.

        Memory only grows and its items never change, so each item is filed
        under its task once, as it first appears in an observation: a decision
        costs the items new since the last one, not the whole memory. A view of
        another list, or one shorter than what was filed, starts the index over.
        """
        memory: MemoryView = obs.memory
        n = len(memory)
        if memory.base is not self._memory or n < self._indexed:
            self._memory, self._indexed, self._by_task = memory.base, 0, {}
        if n > self._indexed:
            by_task = self._by_task
            for i in range(self._indexed, n):
                m = memory.base[i]
                group = by_task.get(m.task)
                if group is None:
                    group = by_task[m.task] = []
                group.append(m)
            self._indexed = n
        return self._by_task.get(obs.task, [])

    def _memo(self, item: MemoryItem, what: str, derive: Callable[[Any], Any]) -> Any:
        """`derive(item.result)`, once per memory item (items never change once written)."""
        key = (id(item), what)
        hit = self._derived.get(key)
        if hit is None or hit[0] is not item:
            hit = self._derived[key] = (item, derive(item.result))
        return hit[1]

    def _answer(self, obs: Observation) -> str:
        completeness = obs.traits.get("completeness", 0.5)
        request_words = _words(obs.request.text)
        allowed = self._authorized_fields(obs) if completeness < 1.0 else None
        chosen: list[str] = []
        for field, sentence, about, says in self._facts(obs):
            relevant = not (about.isdisjoint(request_words) and says.isdisjoint(request_words))
            if allowed is not None and field is not None:
                include = field in allowed
            elif field is None:
                include = relevant or self.rng.random() < 0.5 + 0.5 * completeness
            else:
                include = relevant or self.rng.random() < completeness
            if include:
                chosen.append(sentence)
        rejected = [m for m in self._this_task(obs) if m.rejected]
        refused = self._refusals(obs)
        if refused:
            return " ".join(refused + (["What I found: " + " ".join(chosen)] if chosen else []))
        if not chosen:
            if rejected:
                return "I could not get that information: the request was declined."
            return "I could not find anything more on this request."
        return "Here is what I found. " + " ".join(chosen)


_STRIP = "\"'()[]{}:;!?.,"
#: the most a free-text argument rewritten from the agent's findings holds (`_found`)
_FOUND_CHARS = 400
#: (field or None for prose, the sentence as said, and the keywords relevance is judged
#: on: those of the field's name, and those of what the fact says)
Fact = tuple[str | None, str, frozenset[str], frozenset[str]]
_NONE: frozenset[str] = frozenset()


@lru_cache(maxsize=8192)
def _words(text: str) -> frozenset[str]:
    """The content words of a text (longer than three letters), for relevance.

    Cached: the same record fields are read by several agents and on every step.
    """
    out = set()
    for raw in text.lower().split():
        word = raw.strip(_STRIP)
        if len(word) > 3:
            out.add(word)
    return frozenset(out)


def _pressed(obs: Observation) -> bool:
    """Whether the request's sender holds enacted power over this agent's consequences.

    Where the world declares who holds power over the agent's role (`power`
    inducers with `from`, in `obs.power_holders`), that alone decides: a sender
    with a higher title or rank but no power over the agent's staffing,
    evaluation or career points presses nothing, and one with power presses at
    any rank. Where the world declares none, rank stands in for power: a sender
    whose `authority` exceeds the agent's.
    """
    if obs.power_holders is not None:
        return obs.request.sender in obs.power_holders
    return obs.request.sender_authority > obs.authority


#: parameter types whose members are the world's own declarations, listed in the order
#: they were declared (participants, documents): an order that ranks nothing
_DECLARED = ("party", "document")


def _unordered(p: ParamSpec) -> bool:
    """Whether a parameter's candidates rank nothing against each other: a `party` or
    `document` parameter without a hint takes the world's participants or documents in
    declaration order, which says nothing about commitment, so `committal` has no most
    committal one to pick and a tie between them is broken by the seed (`SimAgent._tie`).
    A hint is the author's order (least to most committal: a world may rank bidders by
    their offers), and an enum's members are written least to most committal."""
    return not p.hint and p.type in _DECLARED


def _instead(named: ToolSpec, refused: ToolSpec | None) -> bool:
    """Whether a tool a refusal names does the refused call's work another way (it writes
    a ledger the refused tool writes: `large_refund` for `refund`), rather than being a
    step to take first (`verify_customer`), after which the refused call is made again."""
    return refused is not None and bool(set(named.writes) & set(refused.writes))


def _bounds(lowered: str) -> tuple[list[tuple[float, bool]], bool, bool]:
    """The numbers a reason states (with whether each is a percentage), and whether it
    speaks of a value too high or too low."""
    numbers = [(float(n.replace(",", "")), pct == "%") for n, pct in _NUMBER.findall(lowered)]
    return numbers, bool(_TOO_HIGH.search(lowered)), bool(_TOO_LOW.search(lowered))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _within(current: Any, value: Any, numbers: list[tuple[float, bool]], high: bool,
            low: bool, percent: bool = False) -> bool:
    """Whether a numeric candidate is on the side of the reason's bound that the refused
    value was not (a stated number, or `over` / `below` without one); any other value is.
    A stated `N%` bounds a `percent` written as a fraction at N / 100 (as `_admissible`)."""
    if not (_is_number(current) and _is_number(value)):
        return True
    for number, pct in numbers:
        stated = number / 100.0 if pct and percent and abs(current) <= 1 else number
        if current > stated:
            return bool(value <= stated)
        if current < stated:
            return bool(value >= stated)
    if high and not low:
        return bool(value < current)
    if low and not high:
        return bool(value > current)
    return True


def _names_value(lowered: str, value: Any) -> bool:
    """Whether a reason names a refused argument's value (`gold is not available`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    text = _render(value)
    return bool(text.strip()) and _mentions(lowered, text) > 0


def _admissible_values(obs: Observation, p: ParamSpec) -> list[Any]:
    """The values a parameter's declaration admits, least committal first: its hint's
    candidates, else its enum's or party's members, else a same-named parameter's hint
    (`_namesake_hint`), else `false`, `true` for a bool; nothing for free text or an
    unhinted number (a number has no declared range to step through)."""
    values = list(p.hint or []) or list(p.members)
    if not values and p.required:
        values = _namesake_hint(obs, p)
    if not values and p.type == "bool":
        values = [False, True]
    return values


def _namesake_hint(obs: Observation, p: ParamSpec) -> list[Any]:
    """The hint of a same-named, same-typed parameter of another tool the agent holds.

    A role's tools call one thing by one name: a `customer_id` the world gives
    no values for on one tool (an approval request, say) is the `customer_id`
    it hints on another (the credit the approval is for), not the request text.
    The first such tool in the agent's tool order decides.
    """
    for spec in obs.tools:
        for q in spec.params:
            if q is not p and q.name == p.name and q.type == p.type and q.hint:
                return list(q.hint)
    return []


def _stated(obs: Observation, name: str, choices: list[Any]) -> Any:
    """The value a delegated request states for `name`, when it is one of `choices`.

    A delegated call arrives as `name: value; name: value` (its arguments); the
    agent deciding it acts on what it was asked (an approver records its
    decision on the amount requested), not on a value drawn afresh.
    """
    if obs.request.via != "delegation":
        return None
    found = re.search(rf"(?:^|; ){re.escape(name)}: ([^;]*)", obs.request.text)
    if found is None:
        return None
    said = found.group(1).strip()
    return next((c for c in choices if _render(c) == said), None)


def _mentions(lowered: str, choice: str) -> int:
    """How often a lower-cased text names a choice.

    `internal_deployment` is named as "internal deployment" or as itself: a result
    naming a participant `blue_peak` names the candidate `blue_peak` (issue 32 item 1;
    looked for only as "blue peak", it named nothing and the choice was a draw). A
    word is still not named inside a longer identifier (`gold` in `gold_tier`).
    """
    words, joined, pattern = _choice_pattern(choice)
    if not words or (words not in lowered and joined not in lowered):  # without a regex
        return 0
    return len(pattern.findall(lowered))


@lru_cache(maxsize=4096)
def _choice_pattern(choice: str) -> tuple[str, str, re.Pattern[str]]:
    """A choice as words ("blue peak"), as one identifier ("blue_peak"), and the pattern
    that finds either as a whole word."""
    words = choice.replace("_", " ").strip().lower()
    either = r"[ _]".join(re.escape(w) for w in words.split(" "))
    return words, words.replace(" ", "_"), re.compile(rf"\b{either}\b")


def _reason(result: Any) -> str:
    """The reason of a rejected result (`{"error": reason}`)."""
    if isinstance(result, dict) and "error" in result:
        return str(result["error"])
    return str(result)


def _lower(result: Any) -> str:
    return str(result).lower()


def _said_by(item: MemoryItem) -> Callable[[Any], str]:
    """What a memory item says, lower-cased: a message's text, a result's value."""
    if item.kind == "message":
        return lambda _: (item.text or "").lower()
    return _lower


def _field_refs(text: Any) -> set[str]:
    """Field names in `record.field` lists of a text (what a requester may see)."""
    text = str(text)
    if not _DOTTED.search(text):  # most texts name no field: skip the slower pattern
        return set()
    return {f for _, f in _FIELD_REF.findall(text)}


def _label(field: str) -> str:
    return field.replace("_", " ")


def _facts_of(result: Any) -> list[Fact]:
    """(field, sentence, keywords of the field, keywords of the value) for each fact a
    result states; field None for prose.

    Keywords are what relevance to a request is judged on: the content words of
    the fact without the subject it is about (every fact about Jordan mentions
    Jordan; that does not make each one relevant), and the parts of its field
    name. Both halves are cached: field names and many values recur across rows.
    """
    if result is None:
        return []
    if isinstance(result, dict):
        subject = result.get("name") or result.get("id")
        out: list[Fact] = []
        for k, v in result.items():
            if v in (None, "", []):
                continue
            label, about = _field_parts(k)
            value = _render(v).rstrip(".")
            prefix = f"{subject} — " if subject and k not in ("name", "id") else ""
            out.append((k, f"{prefix}{label}: {value}.", about, _words(value)))
        return out
    if isinstance(result, list):
        return [f for item in result for f in _facts_of(item)]
    text = str(result).strip()
    if not text:
        return []
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()
                 and not s.startswith(("Here is what I found", "I could not"))]
    return [(None, s, _words(_SUBJECT.sub("", s)), _NONE) for s in sentences]


@lru_cache(maxsize=1024)
def _field_parts(field: str) -> tuple[str, frozenset[str]]:
    """A field's label (`due_date` -> "due date") and the words that make a fact about it
    relevant: the label's content words and every part of the name."""
    label = _label(field)
    return label, _words(label) | frozenset(field.split("_"))


def _render(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, list):
        return ", ".join(_render(x) for x in v)
    return str(v)
