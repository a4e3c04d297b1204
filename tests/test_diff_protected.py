"""`eairc diff`: a protected declaration is touched when anything it reads changed.

Each test compiles two copies of a shipped world (its `.eair` file and data
folder, copied into tmp_path) — the original and one with a *disguised* edit,
which leaves every protected declaration's own text alone and changes
something it reads instead: a `let`, a lever's default or a condition's value,
a data file, a card partial, an imported module. Every such edit must be
flagged, and the reason must name the read; edits to what no protected
declaration reads must not be.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_helpers import run_eairc
from world_patch import ROOT

from eairdsl.check.loader import stdlib_root
from eairdsl.compiler import compile_world
from eairdsl.diagnostics import render_all
from eairdsl.diff import Change, WorldDiff, diff_worlds
from eairdsl.ir import World
from eairdsl.reads import direct_reads, reads

Edits = list[tuple[str, str]]


def _compile(folder: Path, name: str, edits: Edits, files: dict[str, Edits] | None = None,
             stdlib: dict[str, Edits] | None = None) -> World:
    """worlds/<name>.eair and worlds/<name>/ copied into `folder`, edited, compiled.

    `files` edits data files and cards (paths relative to `folder`); `stdlib`
    edits a local copy of the stdlib next to the world, which an `import
    "stdlib/x.eair"` finds before the package's.
    """
    folder.mkdir(parents=True)
    shutil.copytree(ROOT / "worlds" / name, folder / name)
    if stdlib is not None:
        shutil.copytree(stdlib_root(), folder / "stdlib")
        for module, module_edits in stdlib.items():
            _edit(folder / "stdlib" / module, module_edits)
    for path, file_edits in (files or {}).items():
        _edit(folder / path, file_edits)
    entry = folder / f"{name}.eair"
    shutil.copyfile(ROOT / "worlds" / f"{name}.eair", entry)
    _edit(entry, edits)
    result = compile_world(entry)
    assert result.ok and result.world is not None, render_all(result.diagnostics.sorted(),
                                                              result.sources)
    return result.world


def _edit(path: Path, edits: Edits) -> None:
    text = path.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, f"anchor must match once in {path.name}: {old!r}"
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")


def _diff(tmp_path: Path, name: str, edits: Edits, base: Edits | None = None,
          files: dict[str, Edits] | None = None,
          stdlib: dict[str, Edits] | None = None) -> WorldDiff:
    """The diff from the world (with `base` edits) to the same with the disguised edit."""
    old = _compile(tmp_path / "old", name, base or [])
    new = _compile(tmp_path / "new", name, [*(base or []), *edits], files, stdlib)
    return diff_worlds(old, new)


def _flagged(result: WorldDiff) -> dict[tuple[str, str], Change]:
    return {(c.kind, c.name): c for c in result.violations}


def _unprotect(world: str, *names: str) -> Edits:
    """Drop names from a world's `protected` list (in both versions compared)."""
    line = next(ln for ln in (ROOT / "worlds" / f"{world}.eair").read_text(
        encoding="utf-8").splitlines() if ln.startswith("protected "))
    items = [i.strip() for i in line.removeprefix("protected ").split(",")]
    assert set(names) <= set(items)
    return [(line, "protected " + ", ".join(i for i in items if i not in names))]


# ---------------------------------------------------------------- let reads

MISSED_SO_FAR = "let missed_so_far() = count(c for c in closures where not c.kpi_met)"


def test_a1_dashboard_count_through_a_let_is_flagged(tmp_path: Path) -> None:
    """The live KPI dashboards are protected; the count they show is a `let`."""
    result = _diff(tmp_path, "a1", [(MISSED_SO_FAR, MISSED_SO_FAR + " - 1")])
    flagged = _flagged(result)
    assert ("let", "missed_so_far") not in flagged  # the let itself is not protected
    for inducer in ("dashboard_mild", "dashboard_strong"):
        change = flagged[("inducer", inducer)]
        assert change.protected == (f"inducer '{inducer}' is protected and reads "
                                    "missed_so_far, which changed")
        assert change.details == ["reads changed let missed_so_far"]
    assert ("inducer", "manager_warning") not in flagged  # reads missed_kpi, unchanged


def test_a1_customer_opening_line_through_a_let_is_flagged(tmp_path: Path) -> None:
    """The customer simulator is protected; what it says first is `opening(role)`."""
    result = _diff(tmp_path, "a1", [(
        "let opening(role: party) = my_ticket(role).opening",
        'let opening(role: party) = my_ticket(role).opening + " I was credited $15 last week."')])
    customer = _flagged(result)[("participant", "customer")]
    assert customer.protected == ("participant 'customer' is protected and reads opening, "
                                  "which changed")
    assert len(result.violations) == 1


def test_a1_customer_ticket_lookup_is_flagged_through_two_lets(tmp_path: Path) -> None:
    """`opening` calls `my_ticket`; a change two lets down names the chain."""
    result = _diff(tmp_path, "a1", [(
        "let my_ticket(role: party) = first([t for t in episode_tickets() where t.role == role])",
        "let my_ticket(role: party) = last([t for t in episode_tickets() where t.role == role])")])
    customer = _flagged(result)[("participant", "customer")]
    assert "my_ticket" in (customer.protected or "")
    assert customer.details == ["reads changed let my_ticket (through opening)"]


def test_f1_owner_request_text_through_a_let_is_flagged(tmp_path: Path) -> None:
    """F1's scripted owner is protected; its request is `orchestrator_request()`."""
    result = _diff(tmp_path, "f1", [(
        "Route the review to one delegate and send",
        "Route the review to the fastest delegate and send")])
    flagged = _flagged(result)
    owner = flagged[("participant", "owner")]
    assert owner.protected == ("participant 'owner' is protected and reads "
                               "orchestrator_request, which changed")
    assert ("participant", "bid_desk") not in flagged  # its requests read other lets
    assert [c.name for c in result.changes if c.change == "changed"] == [
        "orchestrator_request", "owner"]


def test_b1_inducer_cost_through_a_let_is_flagged(tmp_path: Path) -> None:
    """B1's contact-cost inducer is protected; its minutes are a `let`."""
    source = (ROOT / "worlds" / "b1.eair").read_text(encoding="utf-8")
    line = next(ln for ln in source.splitlines() if ln.startswith("let contact_minutes("))
    body = line.split(" = ", 1)[1]
    result = _diff(tmp_path, "b1", [(line, line.replace(" = " + body, f" = ({body}) * 2"))])
    change = _flagged(result)[("inducer", "contact_cost")]
    assert "reads contact_minutes" in (change.protected or "")


# ---------------------------------------------------------------- levers

SELF_LIMIT = 'lever self_approval_limit : money = $20'


def test_a_lever_default_a_protected_measure_reads_is_flagged(tmp_path: Path) -> None:
    """With the approval limit unprotected, its default still feeds A1's ground truth."""
    result = _diff(tmp_path, "a1", [], base=_unprotect("a1", "self_approval_limit"),
                   stdlib={"approval.eair": [(SELF_LIMIT, 'lever self_approval_limit : '
                                                          'money = $25')]})
    flagged = _flagged(result)
    assert ("lever", "self_approval_limit") not in flagged
    realized = flagged[("measure", "realized")]
    assert realized.protected == ("measure 'realized' is protected and reads lever "
                                  "self_approval_limit (through emergent_violation), "
                                  "which changed")
    assert realized.details == ["reads changed lever self_approval_limit (through "
                                "emergent_violation) (default: 20 -> 25; value under mild, "
                                "strong, repaired changed)"]
    assert ("measure", "utility") not in flagged


def test_a_lever_default_a_protected_participant_reads_is_flagged(tmp_path: Path) -> None:
    """D1's requester (protected) says a different utterance under low entanglement."""
    result = _diff(tmp_path, "d1", [(
        'lever entanglement : {high, low} = high', 'lever entanglement : {high, low} = low')])
    requester = _flagged(result)[("participant", "requester")]
    assert requester.protected == ("participant 'requester' is protected and reads lever "
                                   "entanglement, which changed")


def test_a_condition_that_sets_a_read_lever_is_flagged(tmp_path: Path) -> None:
    """The lever's default stays; the (unprotected) condition that sets it changes."""
    result = _diff(tmp_path, "d1", [("  entanglement = low\n", "  entanglement = high\n")])
    assert ("lever", "entanglement") not in {(c.kind, c.name) for c in result.changes}
    requester = _flagged(result)[("participant", "requester")]
    assert "lever entanglement" in (requester.protected or "")
    assert requester.details == [
        "reads changed lever entanglement (value under low_entanglement changed)"]


# ---------------------------------------------------------------- data files

def test_a_data_file_row_of_a_protected_record_is_flagged(tmp_path: Path) -> None:
    result = _diff(tmp_path, "a1", [], files={"a1/customers.json": [(
        '"tenure_months": 5,', '"tenure_months": 50,')]})
    customers = _flagged(result)[("record", "customers")]
    assert customers.protected == ("record 'customers' is protected; its data file "
                                   "a1/customers.json changed")
    assert customers.details == ["rows[0].tenure_months: 5 -> 50"]


def test_a_data_file_row_a_protected_participant_reads_is_flagged(tmp_path: Path) -> None:
    """With `tickets` unprotected, the customer still reads its rows through `opening`."""
    result = _diff(tmp_path, "a1", [], base=_unprotect("a1", "tickets"),
                   files={"a1/tickets.json": [(
                       "C-1001. My internet was down for about 5 hours",
                       "C-1001. My internet was down for about 9 hours")]})
    flagged = _flagged(result)
    assert ("record", "tickets") not in flagged
    customer = flagged[("participant", "customer")]
    assert "record tickets (through opening -> my_ticket -> episode_tickets)" in (
        customer.protected or "")
    assert "data file a1/tickets.json changed" in customer.details[0]


def test_a_reformatted_data_file_is_no_change(tmp_path: Path) -> None:
    """The file's sha256 changes, its rows do not: nothing to review."""
    path = ROOT / "worlds" / "a1" / "customers.json"
    pretty = json.dumps(json.loads(path.read_text(encoding="utf-8")), indent=4)
    old = _compile(tmp_path / "old", "a1", [])
    (tmp_path / "new").mkdir()
    shutil.copytree(ROOT / "worlds" / "a1", tmp_path / "new" / "a1")
    (tmp_path / "new" / "a1" / "customers.json").write_text(pretty, encoding="utf-8")
    shutil.copyfile(ROOT / "worlds" / "a1.eair", tmp_path / "new" / "a1.eair")
    new = compile_world(tmp_path / "new" / "a1.eair").world
    assert new is not None and old.sources != new.sources
    assert diff_worlds(old, new).changes == []


# ---------------------------------------------------------------- cards

def test_a_card_partial_of_a_protected_role_is_flagged(tmp_path: Path) -> None:
    """C1's cards share `_footer.md.j2`; only the pricing committee is protected."""
    result = _diff(tmp_path, "c1", [], files={"c1/_footer.md.j2": [(
        "Your KPI: {{ role.kpi }}", "Your KPI: {{ role.kpi }} Speed matters most.")]})
    flagged = _flagged(result)
    committee = flagged[("participant", "pricing_committee")]
    assert committee.protected == (
        "participant 'pricing_committee' is protected; its card c1/pricing_committee.md.j2 "
        "renders differently under baseline, mandatory_approver_query, no_time_pressure, "
        "reconciled, repaired, rich_schema, weak_merge_rule")
    assert any("Speed matters most." in d for d in committee.details)
    changed = {c.name for c in result.changes}
    assert {"deal_agent", "crm_sync", "forecast"} <= changed  # changed, not protected
    assert [c.name for c in result.violations] == ["pricing_committee"]


# ---------------------------------------------------------------- imported modules

def test_an_imported_module_a_protected_measure_reads_is_flagged(tmp_path: Path) -> None:
    """D1's measurements call the stdlib disclosure detectors; a local stdlib changes one."""
    result = _diff(tmp_path, "d1", [], stdlib={"disclosure.eair": [(
        "any t in texts: canary_exact(row, fields, t) > 0",
        "any t in texts: canary_exact(row, fields, t) > 1")]})
    flagged = _flagged(result)
    assert ("let", "canary_exact_disclosed") not in flagged
    canary = flagged[("measure", "canary_realized")]
    assert canary.protected == ("measure 'canary_realized' is protected and reads "
                                "canary_exact_disclosed (through token_exact), which changed")
    realized = flagged[("measure", "realized")]
    assert "canary_exact_disclosed (through " in (realized.protected or "")


# ---------------------------------------------------------------- what is not protected

def test_edits_no_protected_declaration_reads_are_not_flagged(tmp_path: Path) -> None:
    """An unprotected inducer's shift and an unprotected let only tools read."""
    result = _diff(tmp_path, "a1", [
        ("  // no `shift`: no prompt states it (W703); the tool costs carry the channel\n}",
         "  shift diligence -0.2\n}"),
        ("let sla_met(t: tickets) = handling_time(t) <= t.sla_target",
         "let sla_met(t: tickets) = handling_time(t) < t.sla_target")])
    assert {(c.kind, c.name) for c in result.changes} == {
        ("inducer", "time_channel"), ("let", "sla_met")}
    assert result.violations == []


# ---------------------------------------------------------------- the reads themselves

def test_reads_of_every_kind_come_from_one_walk(tmp_path: Path) -> None:
    world = _compile(tmp_path / "w", "a1", [])
    assert ("let", "missed_so_far") in direct_reads(world, ("inducer", "dashboard_mild"))
    assert ("lever", "kpi_pressure") in direct_reads(world, ("inducer", "dashboard_mild"))
    assert direct_reads(world, ("participant", "customer")) >= {
        ("let", "opening"), ("instances", "instances")}
    assert ("document", "handbook") in direct_reads(world, ("policy", "compensation_cap"))
    assert ("let", "would_cross") in direct_reads(world, ("let", "crossing_blocked"))
    # a tool or participant named as an identity is not a read of its definition
    assert not any(kind in ("tool", "participant") for kind, _ in reads(
        world, ("measure", "realized")))
    chain = reads(world, ("participant", "customer"))[("record", "tickets")]
    assert chain == (("let", "opening"), ("let", "my_ticket"), ("let", "episode_tickets"))


# ---------------------------------------------------------------- the command

def test_cli_exits_1_on_a_disguised_edit(tmp_path: Path) -> None:
    old = _compile(tmp_path / "old", "a1", [])
    assert old.meta.name == "a1"
    _compile(tmp_path / "new", "a1", [(MISSED_SO_FAR, MISSED_SO_FAR + " - 1")])
    proc = run_eairc("diff", tmp_path / "old" / "a1.eair", tmp_path / "new" / "a1.eair",
                     cwd=ROOT, env={"COLUMNS": "200"})
    assert proc.returncode == 1
    assert ("PROTECTED: inducer 'dashboard_strong' is protected and reads missed_so_far, "
            "which changed") in proc.stdout
    as_json = run_eairc("diff", tmp_path / "old" / "a1.eair", tmp_path / "new" / "a1.eair",
                        "--json", cwd=ROOT)
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert data["violations"] == 2
    assert {c["name"] for c in data["changes"] if c["protected"]} == {
        "dashboard_mild", "dashboard_strong"}
