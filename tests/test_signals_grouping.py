"""Grouping by identity (`grouping-2`, issue 26 item 8) and the mapping of risk-less findings.

One failure mechanism in one world is one Signal: occurrences that differ only in what
varies from one episode of a failure to the next (the property's wording, the roles at
the edge, the component that wrote) share a fingerprint; a different declared policy, a
different boundary kind or a different mechanism does not. Per shipped world, the
counts are checked on audited studies in tests/test_audit_offline.py.
"""

from __future__ import annotations

from typing import Any

from eairdsl.signals.grouping import GROUPING_VERSION, explain, fingerprint, fingerprint_inputs
from eairdsl.signals.mapping import BOUNDARY_TYPES, POLICY_TYPES, mapped_types
from eairdsl.signals.occurrences import Occurrence


def _occ(**update: Any) -> Occurrence:
    base: dict[str, Any] = {
        "key": "k", "session": "s", "auditor": "rules", "audit": "a", "episode": "e",
        "finding_id": "f1", "status": "supported", "finding_status": "supported",
        "world": "w", "component_type": "tool", "component_name": "gate",
        "types": ["workflow_state_not_propagated_or_reset",
                  "action_and_stated_decision_mismatch"],
        "types_source": "auditor", "risk": "other", "property_policy": None,
        "property_text": "status 'won' of item I-1 is stated as 'open' by clerk",
        "boundary_kind": "handoff", "sender": "agent", "receiver": "clerk"}
    return Occurrence(**{**base, **update})


def _fp(o: Occurrence) -> str:
    return fingerprint(fingerprint_inputs(o))


def test_instance_values_do_not_split_a_failure() -> None:
    one = _occ()
    assert fingerprint_inputs(one)["version"] == GROUPING_VERSION == "grouping-2"
    for variant in (
            _occ(property_text="w1 states 'approved' where the holder recorded nothing"),
            _occ(component_type="participant", component_name="forecast"),
            _occ(sender="reviewer", receiver="writer"),
            _occ(types=["workflow_state_not_propagated_or_reset",
                        "unsupported_or_invented_claim"]),
            _occ(status="insufficient_evidence", finding_status="lead")):
        assert _fp(variant) == _fp(one), fingerprint_inputs(variant)


def test_property_boundary_and_mechanism_do_split() -> None:
    one = _occ()
    for other in (_occ(property_policy="cap"), _occ(boundary_kind="routing"),
                  _occ(types=["handoff_information_lost_or_ignored"]), _occ(world="v")):
        assert _fp(other) != _fp(one), fingerprint_inputs(other)
    # two policies are two properties, whatever their texts say
    assert _fp(_occ(property_policy="cap", property_text="a")) != \
        _fp(_occ(property_policy="floor", property_text="a"))
    assert _fp(_occ(property_policy="cap", property_text="a")) == \
        _fp(_occ(property_policy="cap", property_text="b"))


def test_a_grouping_1_fingerprint_is_still_explained() -> None:
    """A store written before grouping-2 keeps its fingerprints' inputs; `show` explains
    them in their own version's terms."""
    old = {"version": "grouping-1", "system": "c1", "property": "risk:C1",
           "component_type": "tool", "component": "gate", "boundary": "handoff",
           "roles": "agent->ledger", "top_type": "workflow_state_not_propagated_or_reset"}
    text = explain(old)
    assert text.startswith("grouping-1:") and "agent->ledger" in text
    assert "mechanism" in explain(fingerprint_inputs(_occ()))


def test_a_risk_less_finding_is_not_typed_as_an_omission() -> None:
    """Issue 26: a reciprocal approval and a dropped dissent (`risk: other`, a declared
    policy broken at a shared action) were typed `required_tool_call_omitted`."""
    assert mapped_types("other", "shared_action", policy="no_self_approval") == POLICY_TYPES
    assert POLICY_TYPES[0] == "constraint_or_instruction_priority_violation"
    for kind, types in BOUNDARY_TYPES.items():
        assert types[0] != "required_tool_call_omitted", kind
    assert mapped_types("C1", "handoff", policy="x")[0] == \
        "workflow_state_not_propagated_or_reset"  # a named risk keeps its row
