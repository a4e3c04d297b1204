"""One writer, and still an interaction: support read from the steps (`audit/rules/reliance`).

A declared rule broken by a single role used to be a lead unless that role
recorded a value other roles told it. Three boundaries of EAIR §2 show up with
one writer; each has a positive bundle and negative controls that keep it a
lead, so the rule cannot pass by calling every single-writer violation an
interaction.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from audit_bundles import Steps, hand_bundle, ledger, overruled, requested, unverified

from eairdsl.audit.evidence import Bundle
from eairdsl.audit.offline import RulesAuditor
from eairdsl.audit.rules.reliance import needles
from eairdsl.audit.validate import validate_report


def _only(bundle: Bundle) -> Any:
    report = RulesAuditor().audit(bundle)
    assert validate_report(report.model_dump_json(), bundle).ok
    hits = [*report.findings, *report.leads]
    assert len(hits) == 1, hits
    return hits[0]


CASES: list[tuple[str, Callable[[Path], Bundle], str, str, str]] = [
    ("power", requested, "power", "authorized", "s0001"),
    ("review", overruled, "review", "preserved_despite_check", "s0003"),
    ("delegation", unverified, "delegation", "preserved_despite_check", "s0002"),
]


@pytest.mark.parametrize(("name", "build", "kind", "contribution", "boundary"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_one_writer_violation_resting_on_a_boundary_is_supported(
        tmp_path: Path, name: str, build: Callable[[Path], Bundle], kind: str,
        contribution: str, boundary: str) -> None:
    f = _only(build(tmp_path))
    assert f.status == "supported", (f.boundary, f.contribution)
    assert (f.boundary.kind, f.contribution, f.boundary.step) == (kind, contribution, boundary)
    assert f.path[0] in {e.step for e in f.evidence} and f.path[-1] == f.effect.step
    assert {"R1", "R2", "R3"} <= {c for e in f.evidence for c in e.supports}


def test_the_omission_path_runs_through_the_request_and_the_reply(tmp_path: Path) -> None:
    f = _only(unverified(tmp_path))
    assert f.path[:2] == ["s0001", "s0002"]
    assert any("PAY-118" in e.quote for e in f.evidence if e.step == "s0002")


NEGATIVE: list[tuple[str, Callable[[Path], Bundle]]] = [
    ("requester-not-senior", lambda t: requested(t, requester_authority=1)),
    ("request-names-nothing", lambda t: requested(t, names_order=False)),
    ("chair-could-read-the-lab", lambda t: overruled(t, chair_reads_lab=True)),
    ("report-quotes-nothing", lambda t: overruled(t, cites_code=False)),
    ("no-exchange-with-the-duty-holder", lambda t: unverified(t, exchanged=False)),
]


@pytest.mark.parametrize(("name", "build"), NEGATIVE, ids=[n for n, _ in NEGATIVE])
def test_without_the_boundary_step_it_stays_a_lead(tmp_path: Path, name: str,
                                                  build: Callable[[Path], Bundle]) -> None:
    f = _only(build(tmp_path))
    assert f.status == "lead" and f.contribution == "introduced", (f.boundary, f.contribution)


def test_what_counts_as_a_distinctive_value() -> None:
    """Identifiers and long texts are said verbatim; plain words, short numbers and truth
    values never pin a step."""
    said = {v: [t for t, _ in needles(v)] for v in
            ["PO-7102", "S-mill", "LAB12", "approve", "ok", 7, 42, True, "a longer text"]}
    assert said == {"PO-7102": ["PO-7102"], "S-mill": ["S-mill"], "LAB12": ["LAB12"],
                    "approve": [], "ok": [], 7: [], 42: ["42"], True: [],
                    "a longer text": ["a longer text"]}


def test_a_value_read_from_a_record_another_role_filled_is_carried(tmp_path: Path) -> None:
    """A record one role fills and another reads is a boundary (kind `record`): the amount
    a clerk grants, read from a quote a colleague recorded, was carried to it even though
    only the reader holds the reading tool (issue 27's F2: a value copied from another
    role's row stayed a lead)."""
    st = Steps()
    st(kind="message", actor="desk", recipient="clerk_x", content="Please settle Q-551.")
    st.act("clerk_y", "quote", {"ref": "Q-551", "amount": 900}, "quotes",
           {"ref": "Q-551", "amount": 900, "by": "clerk_y"})
    call = st(kind="tool_call", actor="clerk_x", tool="read_quotes", args={"ref": "Q-551"})
    st(kind="tool_result", actor="clerk_x", tool="read_quotes", call=call,
       result=[{"ref": "Q-551", "amount": 900, "by": "clerk_y"}])
    st.act("clerk_x", "grant", {"ref": "Q-551", "amount": 900}, "grants",
           {"ref": "Q-551", "amount": 900})
    bundle = hand_bundle(
        tmp_path, st.events,
        [{"name": "limit", "text": "No grant above 500.", "enforced": False,
          "rule": "all g in grants: g.amount <= 500"}],
        {"grants": ledger("grants", ["ref", "amount"]),
         "quotes": ledger("quotes", ["ref", "amount", "by"])},
        [{"name": "clerk_x", "kind": "role", "authority": 2, "tools": ["read_quotes", "grant"]},
         {"name": "clerk_y", "kind": "role", "authority": 2, "tools": ["quote"]},
         {"name": "desk", "kind": "actor", "authority": 1}],
        [{"name": "quote", "kind": "act", "roles": ["clerk_y"], "writes": ["quotes"]},
         {"name": "read_quotes", "kind": "read", "roles": ["clerk_x"], "reveals": ["quotes"]},
         {"name": "grant", "kind": "act", "roles": ["clerk_x"], "writes": ["grants"]}])
    f = _only(bundle)
    assert (f.status, f.boundary.kind, f.contribution) == ("supported", "record", "amplified")
    assert f.boundary.step == "s0006" and "900" in next(
        e.quote for e in f.evidence if e.step == "s0006")
