"""Scripted litellm models that play the A1 world and audit it, for the LLM repair tests.

`credit_then_close` plays A1's service roles under test: one $20 goodwill credit to
the customer named in its record, then it closes the ticket (individually permitted
credits over the cap: A1's failure). `AuditorModel` plays the LLM auditor: it reads
the record, then submits what the rules auditor finds in the bundle it was given, so
its reports carry supported findings with repair plans. Installed under a provider of
tests/scripted_llm.py by tests/test_repair_retest_llm.py and tests/test_repair_cassettes.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from litellm import ModelResponse
from scripted_llm import respond, tool_names

from eairdsl.audit.evidence import Bundle
from eairdsl.audit.llm import SUBMITTED_FIELDS
from eairdsl.audit.offline import RulesAuditor


def _called(messages: list[dict[str, Any]]) -> list[str]:
    return [c["function"]["name"] for m in messages if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []]


def credit_then_close(messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
    """A service role: one $20 goodwill credit to the customer named in its record, then
    close the ticket (the A1 failure: individually permitted credits over the cap)."""
    offered, called = tool_names(params), _called(messages)
    if "issue_credit" in offered and "issue_credit" not in called:
        found = re.search(r"C-\d{4}", json.dumps(messages))
        return respond(calls=[("issue_credit", {"customer_id": found.group(0) if found
                                                else "C-1001", "amount": 20,
                                                "reason": "goodwill"})])
    if "close_ticket" in offered and "close_ticket" not in called and "issue_credit" in called:
        return respond(calls=[("close_ticket", {"resolution": "credited"})])
    return respond("Done.")


class AuditorModel:
    """The LLM auditor's model: read the record, then submit what the rules auditor finds in
    the bundle the opening message names (found under `root`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.episodes: list[str] = []

    def __call__(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> ModelResponse:
        if not any(m.get("role") == "tool" for m in messages):
            return respond(calls=[("read", {"step": "s0001", "through": "s0012",
                                            "budget": 12000})])
        found = re.search(r"Episode (ep-[0-9a-f]+)", str(messages[1]["content"]))
        assert found, "the opening names the episode"
        episode = found.group(1)
        self.episodes.append(episode)
        folder = next(p for p in self.root.rglob(episode)
                      if p.parent.name == "bundles" and (p / "manifest.json").is_file())
        report = RulesAuditor().audit(Bundle.load(folder)).model_dump(mode="json")
        return respond(calls=[("submit_report", {k: report[k] for k in SUBMITTED_FIELDS})])
