"""The IR's tagged unions: channels, effects and inducers are one class per kind, and a
world.json round trip (dump_world / load_world) gives back the same classes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from eairdsl.ir import (
    INDUCER_CLASSES,
    AppendEffect,
    DelegationChannel,
    DirectChannel,
    ForkChannel,
    InducerIR,
    Lit,
    MergeChannel,
    RelayChannel,
    SetEffect,
    ToolIR,
    WarningInducer,
    World,
    WorldFileError,
    WorldMeta,
    dump_world,
    ir_sha256,
    load_world,
)

ROOT = Path(__file__).resolve().parent.parent


def _small_world() -> World:
    w = World(meta=WorldMeta(name="w"), digest="0", sources=[])
    w.channels = [DirectChannel(parties=["a", "b"]),
                  DirectChannel(parties=["a", "c"], via="ask", when=Lit(type="bool", value=True)),
                  DelegationChannel(parties=["a", "b"], via="hand"),
                  ForkChannel(parties=["a", "b", "c"]), MergeChannel(parties=["a", "b", "c"]),
                  RelayChannel(parties=["a", "b", "c"])]
    w.tools = [ToolIR(name="t", kind="act", effects=[
        AppendEffect(target="log", value=Lit(type="text", value="x")),
        SetEffect(target="flag", value=Lit(type="bool", value=True))])]
    w.inducers = [cast(InducerIR, cls(name=kind)) for kind, cls in INDUCER_CLASSES.items()]
    w.inducers.append(WarningInducer(name="late", on="t", at=Lit(type="duration", value=5)))
    return w


def test_round_trip_keeps_the_classes() -> None:
    w = _small_world()
    text = dump_world(w)
    back = load_world(text)
    assert back == w
    assert [type(c) for c in back.channels] == [type(c) for c in w.channels]
    assert [type(e) for e in back.tools[0].effects] == [AppendEffect, SetEffect]
    assert [i.kind for i in back.inducers] == [*INDUCER_CLASSES, "warning"]
    data = json.loads(text)
    # The tag is written even where it is the class's default.
    assert [c["kind"] for c in data["channels"]] == ["direct", "direct", "delegation", "fork",
                                                    "merge", "relay"]
    assert [e["op"] for e in data["tools"][0]["effects"]] == ["append", "set"]


def _reload(data: dict[str, object]) -> World:
    data.pop("ir_sha256", None)
    data["ir_sha256"] = ir_sha256(data)
    return load_world(json.dumps(data))


def test_a_slot_its_kind_lacks_is_refused() -> None:
    data = json.loads(dump_world(_small_world()))
    data["inducers"][0]["on"] = "t"  # a prompt clause has no `on`
    with pytest.raises(WorldFileError, match="inducers"):
        _reload(data)
    data = json.loads(dump_world(_small_world()))
    data["channels"][3]["via"] = "ask"  # a fork has no `via`
    with pytest.raises(WorldFileError, match="channels"):
        _reload(data)
    data = json.loads(dump_world(_small_world()))
    data["tools"][0]["effects"][0]["op"] = "remove"
    with pytest.raises(WorldFileError, match="effects"):
        _reload(data)


@pytest.mark.parametrize("name", ["a1", "b1", "c1", "d1", "f1"])
def test_generated_worlds_round_trip(name: str) -> None:
    text = (ROOT / "generated" / name / "world.json").read_text(encoding="utf-8")
    world = load_world(text)
    assert dump_world(world) == text
