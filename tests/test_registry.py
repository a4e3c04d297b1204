"""eairdsl.registry: names to implementations, and the stages' registries built on it."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from eairdsl.errors import UsageError
from eairdsl.registry import Registry


def test_register_get_and_order() -> None:
    reg: Registry[int] = Registry("colour", option="--colour")
    reg.add("red", 1)

    @reg.register("blue")
    def blue() -> int:
        return 2

    assert reg.names() == ("red", "blue") and list(reg) == ["red", "blue"] and len(reg) == 2
    assert reg.get("red") == 1 and reg.find("green") is None and "blue" in reg
    with pytest.raises(UsageError, match=r"unknown colour 'green' \(--colour\); choose red "
                                         r"or blue"):
        reg.get("green")


def test_choices_read_as_a_list() -> None:
    reg: Registry[int] = Registry("thing")
    assert reg.choices() == "(none registered)"
    for i, name in enumerate(("a", "b", "c")):
        reg.add(name, i)
    assert reg.choices() == "a, b or c"
    assert reg.unknown("z") == "unknown thing 'z'; choose a, b or c"


def test_one_name_from_two_modules_is_refused() -> None:
    reg: Registry[object] = Registry("thing")
    reg.add("x", test_choices_read_as_a_list)
    reg.add("x", test_choices_read_as_a_list)  # the same module again (a reload)
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("x", Path)
    reg.add("y", 1, origin="plugin_a")
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("y", 2, origin="plugin_b")


def test_plug_in_modules_load_on_first_lookup() -> None:
    reg: Registry[int] = Registry("thing", load=("eairdsl.no_such_plugin",))
    assert reg.names() == ()  # a module that does not exist is skipped


def test_auditor_kinds_are_registered() -> None:
    from eairdsl.audit.auditors import AUDITOR_KINDS, AUDITORS, AuditorKind, arm_name

    assert AUDITOR_KINDS == get_args(AuditorKind) == AUDITORS.names()
    assert [k for k in AUDITOR_KINDS if AUDITORS.get(k).arms] == ["llm"]
    assert [k for k in AUDITOR_KINDS if AUDITORS.get(k).grader_side] == ["oracle"]
    assert arm_name("nobody", None, "full", "annotated") == "nobody"  # refused later


def test_unknown_auditor_lists_the_choices(tmp_path: Path) -> None:
    from eairdsl.audit.auditors import make_auditor

    with pytest.raises(UsageError, match=r"unknown auditor 'x' .*offline, llm or oracle"):
        make_auditor("x", tmp_path)


def test_repair_agents_and_reviewers_are_registered() -> None:
    from eairdsl.repair.make import AGENTS, REVIEWERS, make_agent, make_reviewer

    assert AGENTS == REVIEWERS == ("offline", "llm")
    with pytest.raises(UsageError, match=r"unknown agent 'oracle' \(--agent\)"):
        make_agent("oracle")
    with pytest.raises(UsageError, match="--reviewer llm needs a model"):
        make_reviewer("llm")


def test_importers_are_registered() -> None:
    from eairdsl.external.core import IMPORTERS, importers

    assert {"who-and-when", "trail", "openinference", "tau-bench", "chatdev", "mad",
            "otel-genai"} <= set(importers()) == set(IMPORTERS.names())
