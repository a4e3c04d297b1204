"""The event budget stops a runaway episode, not a long one.

An episode may process `MAX_EVENTS` simulated events plus `EVENTS_PER_SCRIPTED`
per scripted event the world declares, up to `MAX_EVENTS_CEILING`. A world whose
answers go round a loop of channels (`a -> b -> c -> a`) never ends by itself and
is stopped at the budget, execution-invalid; a world that scripts 1,000 requests
(what `benchmarks/scaling.py`'s longest point runs, which the flat budget of
5,000 events cut short) runs to its end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from eairdsl.api import resolve_world, run_episode
from eairdsl.runtime.engine import (
    EVENTS_PER_SCRIPTED,
    MAX_EVENTS,
    MAX_EVENTS_CEILING,
    CompiledWorld,
)
from eairdsl.runtime.trace import read_trace

HEADER = """world budget {{
  title "Event budget"
  risk A1
  operation "passing messages"
  preserves "nothing in particular"
  seeds 1
}}

{body}

instance one {{
  id = "i1"
  customer = "Casey"
  item = "X-1"
}}

measure {{
  opportunity = count(calls(check)) > 0
  anomaly = count(messages(customer)) > 1
  realized = final(a) != none
  terminal_harm = realized
  interception = anomaly and not realized
  utility = len(replies(a)) > 0
}}
"""

TOOL = """record items from "items.json" key id {
  id: text
  name: text
}

tool check(item_id: text hint instance.item) -> text {
  kind read
  cost 1 min
  require lookup(items, item_id) != none else reject "unknown item"
  returns lookup(items, item_id).name
}
"""


def _role(name: str) -> str:
    return f'role {name} {{\n  model under_test\n  card "card.md.j2"\n  tools check\n}}\n'


def _world(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "card.md.j2").write_text("You check items.\n", encoding="utf-8")
    (folder / "items.json").write_text(json.dumps([{"id": "X-1", "name": "item one"}]),
                                       encoding="utf-8")
    path = folder / "budget.eair"
    path.write_text(HEADER.format(body=TOOL + body), encoding="utf-8")
    return path


def _loop_body() -> str:
    """Three roles whose answers go round `a -> b -> c -> a` after one request to `a`."""
    return "\n".join([_role("a"), _role("b"), _role("c"),
                      'actor customer scripted {\n  principal instance.customer\n'
                      '  at 0 min say "Please check item X-1." to a\n}\n',
                      "channel customer -> a", "channel a -> b", "channel b -> c",
                      "channel c -> a"])


def test_answers_going_round_a_loop_are_stopped_at_the_budget(tmp_path: Path) -> None:
    body = _loop_body()
    world = resolve_world(_world(tmp_path / "w", body))
    budget = MAX_EVENTS + EVENTS_PER_SCRIPTED * 1
    assert CompiledWorld(world).event_budget == budget
    start = time.process_time()
    result = run_episode(world, None, None, 0, out=tmp_path / "out")
    assert time.process_time() - start < 30
    assert not result.valid
    assert result.validity_reason == f"event budget of {budget} exhausted"
    trace = read_trace(Path(result.trace_path or ""))
    # the answers did go round: each role answered many times before the budget ended it
    assert all(len(trace.replies(r)) > 20 for r in ("a", "b", "c"))


def test_a_thousand_scripted_requests_run_to_their_end(tmp_path: Path) -> None:
    says = "\n".join(f'  at {i * 10} min say "Please check item X-1 ({i})." to a'
                     for i in range(1000))
    body = "\n".join([_role("a"),
                      f"actor customer scripted {{\n  principal instance.customer\n{says}\n}}\n",
                      "channel customer -> a"])
    world = resolve_world(_world(tmp_path / "w", body))
    compiled = CompiledWorld(world)
    assert compiled.event_budget == MAX_EVENTS + EVENTS_PER_SCRIPTED * 1000
    result = run_episode(compiled, None, None, 0, out=tmp_path / "out")
    assert result.valid, result.validity_reason
    trace = read_trace(Path(result.trace_path or ""))
    assert len(trace.replies("a")) == 1000  # every request answered
    assert trace.result is not None and trace.result.measurements["utility"] is True


def test_the_budget_has_a_ceiling(tmp_path: Path) -> None:
    """However many events a world scripts, one episode's budget stays bounded."""
    many = (MAX_EVENTS_CEILING - MAX_EVENTS) // EVENTS_PER_SCRIPTED + 50
    says = "\n".join(f'  at {i} min say "Hello {i}." to a' for i in range(many))
    body = "\n".join([_role("a"),
                      f"actor customer scripted {{\n  principal instance.customer\n{says}\n}}\n",
                      "channel customer -> a"])
    compiled = CompiledWorld(resolve_world(_world(tmp_path / "w", body)))
    assert compiled.event_budget == MAX_EVENTS_CEILING


def test_resolve_world_takes_a_path_given_as_text(tmp_path: Path) -> None:
    """`resolve_world("worlds/d1.eair")` as a script would write it (it raised
    AttributeError on the string)."""
    path = _world(tmp_path / "w", "\n".join([_role("a"), "channel customer -> a",
                                             'actor customer scripted {\n  at 0 min say '
                                             '"Hello." to a\n}\n']))
    assert resolve_world(str(path)).meta.name == "budget"


def test_eairc_run_fails_when_no_episode_is_valid(tmp_path: Path) -> None:
    """A run in which every episode is execution-invalid measured nothing: `eairc run`
    says so and exits 1 (it printed a table of failures and exited 0, which a CI job read
    as success); a run with a valid episode still exits 0."""
    from typer.testing import CliRunner

    from eairdsl.cli import app

    body = _loop_body()
    looping = _world(tmp_path / "loop", body)
    result = CliRunner().invoke(app, ["run", str(looping), "--episodes", "2",
                                      "-o", str(tmp_path / "runs")])
    said = result.output + (result.stderr if result.stderr_bytes else "")
    assert result.exit_code == 1, said
    assert "no valid episode: all 2 are execution-invalid (the first: event budget" in said
    assert len(list((tmp_path / "runs").rglob("*.jsonl"))) == 2  # the traces are kept
    fine = _world(tmp_path / "fine", "\n".join([
        _role("a"), 'actor customer scripted {\n  principal instance.customer\n'
        '  at 0 min say "Please check item X-1." to a\n}\n', "channel customer -> a"]))
    assert CliRunner().invoke(app, ["run", str(fine), "-o", str(tmp_path / "ok")]).exit_code == 0


def test_eairc_study_fails_when_no_cell_got_a_valid_episode(tmp_path: Path) -> None:
    """The same for a study: every cell run used its attempts execution-invalid, so the
    study measured nothing and exits 1 (the store and traces are kept); resuming the
    finished study runs nothing and exits 0."""
    from typer.testing import CliRunner

    from eairdsl.cli import app

    body = _loop_body()
    looping = _world(tmp_path / "loop", body)
    args = ["study", str(looping), "--seeds", "2", "--max-attempts", "1", "--workers", "1",
            "--out", str(tmp_path / "study")]
    result = CliRunner().invoke(app, args)
    said = result.output + (result.stderr if result.stderr_bytes else "")
    assert result.exit_code == 1, said
    assert "no valid episode: every one of the 2 cell(s) run" in said
    assert (tmp_path / "study" / "results.sqlite").is_file()
    assert CliRunner().invoke(app, args).exit_code == 0  # nothing left to run
