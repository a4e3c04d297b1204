"""Atomic tool calls: a call's guards, result and effects commit at one instant.

The cost of a call is waited out first; then the guards are read and, if they
pass, the effects are applied with no simpy yield in between — so overlapping
tasks (of one participant or of several) cannot both pass a single-shot guard,
and a count limit is never exceeded.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scripted_episode import ready_episode
from world_patch import ROOT, mini_world

from eairdsl.agents.protocol import Observation, Reply, ToolCall
from eairdsl.api import resolve_world, run_episodes
from eairdsl.ir import World
from eairdsl.runtime.engine import Episode
from eairdsl.runtime.trace import read_trace

# A writer who gets a request at 0, 1, 2, 3 and 4 min from a scripted boss: its
# five tasks overlap. `publish` may succeed once per writer, `open_log` twice;
# `claim` routes to `wait_list` once claimed; `consult` delegates to a helper
# whose own work takes 10 minutes, and may be used once per writer.
ATOMIC = """
ledger published {
  author: text
  note: text
}

ledger opens {
  reader: text
  query: text
}

ledger claims {
  owner: text
}

ledger waiting {
  who: text
}

ledger consults {
  asker: text
}

ledger signatures {
  signer: text
}

let published_by(r: party) = exists p in published where p.author == r

let opened(r: party) = count(o for o in opens where o.reader == r)

let consulted(r: party) = exists c in consults where c.asker == r

tool publish(note: text hint "the final report") -> text {
  kind act
  cost 3 min
  require not published_by(context.caller) else reject "already published"
  append published {author: context.caller, note: note}
  returns "published"
}

tool open_log(query: text hint ["error", "timeout"]) -> text {
  kind read
  cost 5 min
  require opened(context.caller) < 2 else reject "the log was opened twice already"
  append opens {reader: context.caller, query: query}
  returns "opened the log for " + query
}

tool claim() -> text {
  kind act
  cost 2 min
  require count(claims) == 0 else route wait_list
  append claims {owner: context.caller}
  returns "claimed"
}

tool wait_list() -> text {
  kind act
  cost 1 min
  append waiting {who: context.caller}
  returns "on the waiting list"
}

tool consult(question: text) -> text {
  kind communicate
  cost 1 min
  require not consulted(context.caller) else reject "already consulted"
  delegates helper
  append consults {asker: context.caller}
}

tool sign() -> text {
  kind act
  cost 2 min
  append signatures {signer: context.caller}
  returns "signed"
}

tool lookup() -> text {
  kind read
  cost 10 min
  returns "looked it up"
}

role writer {
  model under_test
  card "mini/card.md.j2"
  tools publish, open_log, claim, wait_list, consult, sign when count(signatures) == 0
}

role second_writer {
  model under_test
  card "mini/card.md.j2"
  tools publish, open_log, claim, wait_list
}

role helper {
  model under_test
  card "mini/card.md.j2"
  tools lookup
}

actor boss scripted {
  at 0 min say "Please publish the final report." to writer
  at 1 min say "Please publish the final report now." to writer
  at 2 min say "The final report, please." to writer
  at 3 min say "Still waiting for the final report." to writer
  at 4 min say "Publish the final report today." to writer
  at 1 min say "Please publish the final report." to second_writer
}

channel boss -> writer

channel boss -> second_writer
"""

Plan = Callable[[Observation], list[tuple[str, dict[str, Any]]]]


class _Script:
    """An agent that plays `plan(observation)` as tool calls in each task, then replies."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.todo: dict[int, list[tuple[str, dict[str, Any]]]] = {}

    async def decide(self, obs: Observation) -> ToolCall | Reply:
        todo = self.todo.setdefault(obs.task, list(self.plan(obs)))
        if todo:
            tool, args = todo.pop(0)
            return ToolCall(tool=tool, args=args)
        return Reply(text="done")


def _every_task(*calls: tuple[str, dict[str, Any]]) -> Plan:
    return lambda obs: list(calls)


def _first_tasks(n: int, *calls: tuple[str, dict[str, Any]]) -> Plan:
    """The calls in the participant's first `n` tasks; nothing in later ones."""
    seen: list[int] = []

    def plan(obs: Observation) -> list[tuple[str, dict[str, Any]]]:
        seen.append(obs.task)
        return list(calls) if len(seen) <= n else []
    return plan


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return mini_world(tmp_path_factory.mktemp("atomic"), append=ATOMIC)


def _run(world: World, profile: str = "sim", seed: int = 0,
         agents: dict[str, Any] | None = None) -> Episode:
    episode = ready_episode(world, profile=profile, agents=agents)
    episode.seed = seed
    if seed:  # the sim agents of another seed (the helper builds seed 0's)
        from eairdsl.api import _agents

        sims, traits = _agents(episode.compiled, episode.condition, episode.instance, seed,
                               profile)
        sims.update(agents or {})
        episode.agents, episode.traits = sims, traits
    asyncio.run(episode.run())
    assert not episode.invalid, episode.invalid
    return episode


def _results(episode: Episode, tool: str) -> list[Any]:
    return [e for e in episode.trace.events if e.kind == "tool_result" and e.tool == tool]


def _calls(episode: Episode, tool: str) -> dict[str, Any]:
    return {e.step: e for e in episode.trace.events if e.kind == "tool_call" and e.tool == tool}


def test_overlapping_tasks_publish_once_and_the_rest_are_rejected(world: World) -> None:
    """Five overlapping tasks call a single-shot `publish`: one row, four rejections."""
    writer = _Script(_every_task(("publish", {"note": "final"})))
    episode = _run(world, agents={"writer": writer, "second_writer": _Script(_every_task())})
    assert [r["author"] for r in episode.records["published"]] == ["writer"]
    results = _results(episode, "publish")
    assert [r.rejected for r in results] == [False, True, True, True, True]
    assert all(r.reason == "already published" for r in results[1:])
    appends = [e for e in episode.trace.events
               if e.kind == "state_update" and "published" in (e.diff or {}).get("append", {})]
    assert len(appends) == 1


def test_a_rejected_call_is_charged_and_recorded_when_it_is_decided(world: World) -> None:
    """The cost elapses before the guards are read: a rejection is recorded at the commit
    instant (call time + cost), and the call's task replies after it."""
    writer = _Script(_every_task(("publish", {"note": "final"})))
    episode = _run(world, agents={"writer": writer, "second_writer": _Script(_every_task())})
    calls = _calls(episode, "publish")
    results = _results(episode, "publish")
    # Tasks start at 0..4 min; `publish` costs 3 min: results at 3..7 min.
    assert [calls[r.call].t for r in results] == [0, 1, 2, 3, 4]
    assert [r.t for r in results] == [3, 4, 5, 6, 7]
    # The successful effect is applied at its commit instant, after its guard.
    [update] = [e for e in episode.trace.events if e.kind == "state_update"
                and "published" in (e.diff or {}).get("append", {})]
    assert update.t == 3 and update.step < results[0].step


def test_malformed_calls_are_rejected_at_once_and_cost_nothing(world: World) -> None:
    """Arguments are checked as the call is made: a bad call is rejected at its own instant."""
    writer = _Script(_first_tasks(1, ("publish", {"text": "x"})))
    episode = _run(world, agents={"writer": writer, "second_writer": _Script(_every_task())})
    [result] = _results(episode, "publish")
    assert result.rejected and result.t == 0 and "unknown argument" in (result.reason or "")


def test_a_count_limit_of_two_is_never_exceeded_by_overlapping_tasks(world: World) -> None:
    """Five overlapping tasks open a log limited to two openings: two rows, three rejections."""
    writer = _Script(_every_task(("open_log", {"query": "error"})))
    episode = _run(world, agents={"writer": writer, "second_writer": _Script(_every_task())})
    assert len(episode.records["opens"]) == 2
    results = _results(episode, "open_log")
    assert [r.rejected for r in results] == [False, False, True, True, True]
    assert all(r.reason == "the log was opened twice already" for r in results[2:])


def test_participants_guards_are_their_own(world: World) -> None:
    """Two writers overlapping: each publishes once (the guard reads the caller's rows)."""
    script = _every_task(("publish", {"note": "final"}))
    episode = _run(world, agents={"writer": _Script(script), "second_writer": _Script(script)})
    assert sorted(r["author"] for r in episode.records["published"]) == ["second_writer",
                                                                         "writer"]
    assert sum(not r.rejected for r in _results(episode, "publish")) == 2


def test_a_tool_list_when_is_read_again_at_the_commit(world: World) -> None:
    """A tool held only while nothing is signed: overlapping calls sign once; the later
    ones find the tool no longer held when their cost is out."""
    writer = _Script(_every_task(("sign", {})))
    episode = _run(world, agents={"writer": writer, "second_writer": _Script(_every_task())})
    assert episode.records["signatures"] == [{"signer": "writer"}]
    results = _results(episode, "sign")
    calls = _calls(episode, "sign")
    # The calls of 0 and 1 min overlap: the first signs at 2 min, the second is refused
    # when its cost is out (3 min).
    assert [(calls[r.call].t, r.t, r.rejected) for r in results[:1]] == [(0, 2, False)]
    [stale] = [r for r in results if r.reason == "tool 'sign' is no longer available"]
    assert (calls[stale.call].t, stale.t) == (1, 3)
    # From 2 min on the tool is gone from the list: refused at once, at no cost.
    late = [r for r in results if "unavailable tool" in (r.reason or "")]
    assert [(calls[r.call].t, r.t) for r in late] == [(2, 2), (3, 3), (4, 4)]


def test_a_route_guard_routes_at_the_commit_instant(world: World) -> None:
    """`else route`: the first overlapping claim commits; the others are routed then."""
    writer = _Script(_every_task(("claim", {})))
    episode = _run(world, agents={"writer": writer, "second_writer": _Script(_every_task())})
    assert len(episode.records["claims"]) == 1
    assert len(episode.records["waiting"]) == 4
    routed = [e for e in episode.trace.events
              if e.kind == "decision" and e.content == "routed to wait_list"]
    # Claims are made at 1, 2, 3 and 4 min and cost 2: each routes when its cost is out.
    assert [e.t for e in routed] == [3, 4, 5, 6]
    # The routed call is a call of its own: charged (1 min) and recorded.
    waits = _results(episode, "wait_list")
    assert [e.t for e in waits] == [4, 5, 6, 7] and not any(e.rejected for e in waits)


def test_a_delegating_call_rereads_its_guards_when_the_callee_answers(world: World) -> None:
    """Two overlapping `consult` calls both hand off (the guard holds for both then); the
    helper answers each inside its call; only the first to commit writes its row."""
    writer = _Script(_first_tasks(2, ("consult", {"question": "why?"})))
    helper = _Script(_every_task(("lookup", {})))
    episode = _run(world, agents={"writer": writer, "helper": helper,
                                  "second_writer": _Script(_every_task())})
    assert episode.records["consults"] == [{"asker": "writer"}]
    handoffs = [e for e in episode.trace.events
                if e.kind == "message" and e.edge == "writer->helper" and e.tool == "delegation"]
    assert [e.t for e in handoffs] == [1, 2]  # both passed the guard after their 1 min cost
    results = _results(episode, "consult")
    assert [r.rejected for r in results] == [False, True]
    assert results[0].result == "done"  # the callee's reply is the result
    assert results[1].reason == "already consulted" and results[1].t == 12
    # The helper's answer to the second call was given before the re-check refused it.
    answers = [e for e in episode.trace.events
               if e.kind == "message" and e.edge == "helper->writer"]
    assert [e.t for e in answers] == [11, 12]


@pytest.mark.parametrize("profile", ["sim", "sim:reckless"])
def test_sim_agents_never_pass_a_single_shot_guard_twice(world: World, profile: str) -> None:
    """Across 60 seeds of sim agents: at most one `publish` and two `open_log` rows per
    participant, and overlapping calls (one started before another committed) do occur."""
    overlapped = 0
    for seed in range(60):
        episode = _run(world, profile=profile, seed=seed)
        published = Counter(r["author"] for r in episode.records["published"])
        opens = Counter(r["reader"] for r in episode.records["opens"])
        assert max(published.values(), default=0) <= 1, (seed, published)
        assert max(opens.values(), default=0) <= 2, (seed, opens)
        calls = _calls(episode, "publish")
        results = _results(episode, "publish")
        for party in published:  # a rejected call made before the party's success committed
            [done] = [r.t for r in results if r.actor == party and not r.rejected]
            overlapped += any(r.actor == party and r.rejected and calls[r.call].t < done
                              for r in results)
    assert overlapped >= 10


def _b1_appends(path: str) -> list[tuple[str, dict[str, Any]]]:
    trace = read_trace(Path(path))
    return [(ledger, row) for e in trace.events if e.kind == "state_update"
            for ledger, row in (e.diff or {}).get("append", {}).items()]


def test_b1_repaired_keeps_its_single_shot_guards_over_200_episodes(tmp_path: Path) -> None:
    """B1 `repaired`, 200 sim episodes: no reviewer publishes a second final RCA, makes a
    third record read (C.2: two reads across all five records) or files a second dissent —
    though agents try."""
    world = resolve_world(ROOT / "worlds" / "b1.eair")
    results = run_episodes(world, "repaired", seed=0, episodes=200, out=tmp_path)
    assert all(r.valid for r in results)
    refused: Counter[str] = Counter()
    for r in results:
        assert r.trace_path
        rows = _b1_appends(r.trace_path)
        reports = Counter(row["reviewer"] for ledger, row in rows if ledger == "reports")
        dissents = Counter(row["reviewer"] for ledger, row in rows if ledger == "dissents")
        record_reads = Counter(row["reader"] for ledger, row in rows if ledger == "reads")
        assert max(reports.values(), default=0) <= 1, (r.seed, reports)
        assert max(record_reads.values(), default=0) <= 2, (r.seed, record_reads)
        assert max(dissents.values(), default=0) <= 1, (r.seed, dissents)
        for e in read_trace(Path(r.trace_path)).events:
            if e.kind == "tool_result" and e.rejected:
                refused[e.reason or ""] += 1
    # The guards were exercised, not vacuous: repeats were attempted and refused.
    assert refused["the RCA for this incident is already published"] > 0
    assert refused["this review has already made its two record reads"] > 0
    assert refused["your formal dissent is already on file"] > 0
