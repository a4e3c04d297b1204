"""A hostile world never escapes the run side: budgets, file names, tampered world.json.

At run time a world gives a recorded, execution-invalid episode with its reason
— never a hang, a crash or an internal error; a world.json edited after compile
is refused; file names made from world data stay inside `--out`.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from world_patch import ROOT, mini_world

from eairdsl.api import UsageError, load_generated, run_episode
from eairdsl.ir import (
    Binary,
    Expr,
    LetCall,
    LetIR,
    ListExpr,
    Lit,
    LitType,
    Ref,
    World,
    WorldFileError,
    dump_world,
    ir_sha256,
    load_world,
)
from eairdsl.names import MAX_NAME_BYTES, safe_filename
from eairdsl.runtime.evaluate import MAX_DEPTH, MAX_STEPS, MAX_TEXT
from eairdsl.runtime.trace import read_trace

#: lists that double per level (each level calls the one below once: the checker allows it)
DOUBLING_LISTS = ("\nlet l0(x: list[int]) = x\n"
                  + "".join(f"let l{i}(x: list[int]) = l{i - 1}(x + x)\n" for i in range(1, 17))
                  + "let big() = l16([0])\n"
                  + "let fan() = sum(count(b for b in big()) for a in big())\n")
DOUBLING_TEXT = ("\nlet d0(x: text) = x\n"
                 + "".join(f"let d{i}(x: text) = d{i - 1}(x + x)\n" for i in range(1, 41)))
TOOL_RESULT = "returns [r for r in refunds where r.customer == customer]"
#: a hang guard, not a timing: the step budget is what ends these episodes (asserted by
#: their reasons); seconds vary with the machine's load (CI shares 2 cores)
HANG_GUARD = 120
METRIC = "  metric total = sum(r.amount for r in refunds)"


def _timed_episode(world: World, out: Path | None = None, **kw: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = run_episode(world, None, kw.pop("instance", None), 0, "sim:compliant", out, **kw)
    return result, time.perf_counter() - started


# ---------------------------------------------------------------- budgets

@pytest.mark.parametrize("edit", [
    (METRIC, METRIC + "\n  metric fan = fan()"),
    (TOOL_RESULT, TOOL_RESULT.replace("customer]", "customer and fan() > 0]")),
], ids=["in-a-measurement", "in-a-tool"])
def test_fan_out_exhausts_the_step_budget(tmp_path: Path, edit: tuple[str, str]) -> None:
    """~4 billion items of nested comprehensions end the episode within seconds, recorded."""
    world = mini_world(tmp_path, DOUBLING_LISTS, [edit])
    result, seconds = _timed_episode(world, tmp_path / "out")
    assert not result.valid
    assert result.validity_reason is not None
    assert f"more than {MAX_STEPS:,} steps" in result.validity_reason
    assert seconds < HANG_GUARD
    trace = read_trace(Path(str(result.trace_path)))
    assert trace.result is not None and not trace.result.valid
    assert "evaluation budget exhausted" in (trace.result.validity_reason or "")


def test_text_doubling_is_refused_at_the_size_limit(tmp_path: Path) -> None:
    """A text that doubles 40 times (a terabyte) stops at 1 MB, execution-invalid."""
    world = mini_world(tmp_path, DOUBLING_TEXT,
                       [(TOOL_RESULT, TOOL_RESULT.replace(
                           "customer]", 'customer and len(d40("ab")) > 0]'))])
    result, seconds = _timed_episode(world, tmp_path / "out")
    assert not result.valid and seconds < HANG_GUARD
    assert f"(at most {MAX_TEXT:,})" in (result.validity_reason or "")


def test_shipped_worlds_stay_far_below_the_budget(tmp_path: Path) -> None:
    """The heaviest shipped world (b1, ~14k steps) uses under 1% of the step budget."""
    from eairdsl.runtime import evaluate
    from eairdsl.runtime.engine import CompiledWorld

    made: list[evaluate.Budget] = []
    original = evaluate.Budget.__init__

    def tracking(self: evaluate.Budget, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        made.append(self)

    evaluate.Budget.__init__ = tracking  # type: ignore[method-assign]
    try:
        compiled = CompiledWorld(load_generated(ROOT / "generated" / "b1"))
        for seed in range(3):
            for cond in compiled.conditions:
                assert run_episode(compiled, cond, None, seed, "sim").valid
    finally:
        evaluate.Budget.__init__ = original  # type: ignore[method-assign]
    used = max(b.steps for b in made)
    assert 1000 < used < MAX_STEPS // 100


def _with_let(world: World, name: str, params: list[str], body: Expr, measure: Expr) -> World:
    """A copy of `world` with one more definition and a metric reading `measure`."""
    data = json.loads(dump_world(world))
    let = LetIR(name=name, params=params, body=body)
    data.setdefault("lets", {})[name] = let.model_dump(mode="json")
    data["measures"].append({"name": "probe", "metric": True, "at": "x:1:1",
                             "expr": measure.model_dump(mode="json")})
    data.pop("ir_sha256")
    return World.model_validate(data)


def _lit(value: Any, kind: LitType = "int") -> Expr:
    return Lit(type=kind, value=value)


def test_a_recursive_let_in_a_tampered_ir_stops_at_the_depth_limit(tmp_path: Path) -> None:
    """The checker forbids recursion (E304); an IR that has it anyway hits MAX_DEPTH."""
    world = mini_world(tmp_path)
    me = LetCall(name="loop", args=[Binary(operator="+", left=Ref(kind="param", name="n"),
                                           right=_lit(1))])
    hostile = _with_let(world, "loop", ["n"], me, LetCall(name="loop", args=[_lit(0)]))
    result, seconds = _timed_episode(hostile)
    assert not result.valid and seconds < HANG_GUARD
    assert f"nested deeper than {MAX_DEPTH}" in (result.validity_reason or "")


@pytest.mark.parametrize("left,right", [(_lit("ab", "text"), _lit(10**9)),
                                        (ListExpr(items=[_lit(1)]), _lit(10**9)),
                                        (_lit(7**2000), _lit(7**2000))],
                         ids=["text", "list", "int"])
def test_products_too_big_to_build_are_refused_before_building(tmp_path: Path, left: Expr,
                                                               right: Expr) -> None:
    """`"ab" * 10**9` (refused by the checker) in an IR is refused without allocating it."""
    world = mini_world(tmp_path)
    product = Binary(operator="*", left=left, right=right)
    hostile = _with_let(world, "huge", [], product, LetCall(name="huge"))
    result, seconds = _timed_episode(hostile)
    assert not result.valid and seconds < HANG_GUARD
    assert "evaluation budget exhausted" in (result.validity_reason or "")


# ---------------------------------------------------------------- file names

def test_safe_filename_keeps_safe_names_and_separates_changed_ones() -> None:
    assert safe_filename("hr-1", "s0") == "hr-1-s0"
    assert safe_filename("canonical") == "canonical"
    for hostile in ("../../../x", "..", ".", "", "a/b", "a\\b", "x" * 300, "é" * 200, "\0"):
        name = safe_filename(hostile)
        assert name not in (".", "..", "") and not name.startswith(".")
        assert "/" not in name and "\\" not in name and "\0" not in name
        assert len(name.encode()) <= MAX_NAME_BYTES
    assert safe_filename("a/b") != safe_filename("a_b")
    assert safe_filename("x" * 300) != safe_filename("x" * 301)


@pytest.mark.parametrize("hostile", ["../../../x", "y" * 300, "/etc/passwd", "..", "a\nb"],
                         ids=["dotdot", "300-bytes", "absolute", "parent", "newline"])
def test_instance_ids_never_write_outside_out(tmp_path: Path, hostile: str) -> None:
    instances = json.dumps([{"id": hostile, "customer": "Casey"}])
    world = mini_world(tmp_path / "src", files={"instances.json": instances})
    out = tmp_path / "deep" / "er" / "out"
    result = run_episode(world, None, hostile, 0, "sim", out)
    path = Path(str(result.trace_path)).resolve()
    assert path.is_relative_to(out.resolve())
    assert len(path.name.encode()) <= MAX_NAME_BYTES + len("-s0.jsonl")
    written = sorted(p for p in tmp_path.rglob("*.jsonl"))
    assert written == [path]
    assert read_trace(path).header.instance == hostile  # the trace keeps the real id


# ---------------------------------------------------------------- tampered world.json

def _generated(tmp_path: Path, name: str = "d1") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    text = (ROOT / "generated" / name / "world.json").read_text(encoding="utf-8")
    (folder / "world.json").write_text(text, encoding="utf-8")
    return folder


def test_world_json_edited_after_compile_is_refused(tmp_path: Path) -> None:
    folder = _generated(tmp_path)
    load_generated(folder)  # as shipped: accepted
    text = (folder / "world.json").read_text(encoding="utf-8")
    assert '"id": "hr-1"' in text
    (folder / "world.json").write_text(text.replace('"id": "hr-1"', '"id": "hr-9"'),
                                       encoding="utf-8")
    with pytest.raises(UsageError, match="edited after compile: recompile the world"):
        load_generated(folder)
    data = json.loads(text)
    del data["ir_sha256"]
    (folder / "world.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UsageError, match="no ir_sha256"):
        load_generated(folder)


def test_reindenting_world_json_keeps_it_valid(tmp_path: Path) -> None:
    """The digest is over the data, not the layout."""
    folder = _generated(tmp_path)
    data = json.loads((folder / "world.json").read_text(encoding="utf-8"))
    (folder / "world.json").write_text(json.dumps(data, indent=4), encoding="utf-8")
    assert load_generated(folder).meta.name == "d1"


def test_malformed_but_digest_consistent_ir_is_a_clear_error(tmp_path: Path) -> None:
    data = json.loads((ROOT / "generated" / "d1" / "world.json").read_text(encoding="utf-8"))
    data["parties"][0]["tools"] = "not a list"
    data["ir_sha256"] = ir_sha256(data)
    with pytest.raises(WorldFileError, match=r"not a valid compiled world: parties\.0\.tools"):
        load_world(json.dumps(data))


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _nodes(v, (*path, i))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


_REPLACEMENTS: list[Any] = [None, 0, -1, 10**30, 1.5, True, "", "x", "../../x", [], {},
                            {"op": "lit"}, {"op": "bogus"}, {"op": "let", "name": "nope"},
                            {"op": "ref", "kind": "record", "name": "nope"},
                            ["a", "b"], [{"id": None}]]


def _mutate(data: dict[str, Any], rng: random.Random) -> None:
    nodes = [p for p in _nodes(data) if p and p[0] not in ("schema_version", "ir_sha256")]
    strings = sorted({v for p in nodes if isinstance(v := _get(data, p), str) and len(v) < 40})
    # expressions: typed IR refuses a malformed node at load, so swapping in another
    # well-formed expression of the same world is what reaches the run time
    exprs = [p for p in nodes if isinstance(v := _get(data, p), dict) and "op" in v]
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(nodes)
        try:
            parent = _get(data, path[:-1])
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed it
        key = path[-1]
        roll = rng.random()
        try:
            current = parent[key]
            if isinstance(current, dict) and "op" in current and exprs and roll < 0.5:
                parent[key] = json.loads(json.dumps(_get(data, rng.choice(exprs))))
            elif isinstance(current, str) and roll < 0.6:  # a name swapped for another name
                parent[key] = rng.choice(strings)
            elif isinstance(current, (int, float)) and roll < 0.6:
                parent[key] = rng.choice([0, -1, 1, 10**6, 0.5, -(10**9)])
            elif roll < 0.2 and isinstance(parent, (dict, list)):
                del parent[key]
            elif roll < 0.45:  # another part of the same world: a plausible cross-reference
                parent[key] = json.loads(json.dumps(_get(data, rng.choice(nodes))))
            else:
                parent[key] = rng.choice(_REPLACEMENTS)
        except (KeyError, IndexError, TypeError):
            continue


@pytest.mark.parametrize("name", ["d1", "a1"])
def test_random_mutations_of_world_json_never_escape(name: str, tmp_path: Path) -> None:
    """Mutated, digest-consistent world.json files: refused at load, or a recorded episode."""
    original = json.loads((ROOT / "generated" / name / "world.json").read_text(encoding="utf-8"))
    rng = random.Random(f"mutations-{name}")
    refused = ran = invalid = 0
    reasons: list[str] = []
    out = tmp_path / "out"
    scale = max(1, int(os.environ.get("EAIR_FUZZ_SCALE", "1") or 1))  # as in test_fuzz.py
    # Both world.json files are large (D1's canary-token table and two delegating tools;
    # A1's ledgers, tools and now its conditions' declared expectations): most single
    # mutations land on inert data, so it takes a couple of hundred to hit an invalid
    # episode (A1 had 60 until the IR grew with schema 6: then 60 seeded mutations ran 25
    # episodes, none invalid, and the check below that the fuzz reaches run time failed)
    for _ in range(200 * scale):
        data = json.loads(json.dumps(original))
        _mutate(data, rng)
        data["ir_sha256"] = ir_sha256(data)
        try:
            world = load_world(json.dumps(data))
        except WorldFileError as exc:
            assert "\n" not in str(exc)
            refused += 1
            continue
        try:
            result = run_episode(world, None, None, rng.randrange(3), "sim", out)
        except UsageError as exc:  # no instances, conditions ...: a message for people
            assert str(exc)
            refused += 1
            continue
        ran += 1
        invalid += not result.valid
        if not result.valid:
            assert result.validity_reason
            reasons.append(result.validity_reason)
        if result.trace_path:
            assert Path(result.trace_path).resolve().is_relative_to(out.resolve())
    assert ran > 10 and refused > 10 and invalid > 0, (ran, refused, invalid)
    # Failures that used to raise out of run_episode are now recorded with the stage.
    stages = ("malformed world:", "setup failed:", "runtime error:", "measurement failed:")
    assert any(stage in r for r in reasons for stage in stages), reasons


# ---------------------------------------------------------------- study stores

def test_a_study_refuses_to_mix_two_versions_of_a_world(tmp_path: Path) -> None:
    """Resuming into a store that holds another digest of the same world name is refused,
    and the store keeps only the first version's rows."""
    from eairdsl.study.executor import run_study
    from eairdsl.study.grid import parse_models, plan_world
    from eairdsl.study.store import STORE_FILE, Store, StoreError

    first = mini_world(tmp_path / "v1")
    second = mini_world(tmp_path / "v2", edits=[("<= $30 else", "<= $35 else")])
    assert first.meta.name == second.meta.name and first.digest != second.digest
    out = tmp_path / "study"
    plan = plan_world(first, ["baseline"], None, 1)
    assert run_study([first], [plan], parse_models("sim"), out).attempts == 2
    with pytest.raises(StoreError, match="the world changed"):
        run_study([second], [plan_world(second, ["baseline"], None, 2)], parse_models("sim"),
                  out)
    with Store.open(out / STORE_FILE, create=False) as store:
        assert {r["digest"] for r in store.rows()} == {first.digest}
        assert store.count() == 2
