"""The audit query API on real offline episodes: exact steps, exact text, honest budgets."""

from __future__ import annotations

import inspect
import json

import pytest
from audit_bundles import episode_bundle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eairdsl.audit import query as q
from eairdsl.audit.evidence import Bundle, field_text, normalize

#: the bundle fixtures are module-scoped: one episode shared by every example
_SHARED = [HealthCheck.function_scoped_fixture]
VENDOR_BID = "sealed bid of $2,437,910 from Northwind Systems"


@pytest.fixture(scope="module")
def d1(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return episode_bundle(tmp_path_factory.mktemp("d1"), "d1", "canonical", "fin-1")[0]


@pytest.fixture(scope="module")
def a1(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return episode_bundle(tmp_path_factory.mktemp("a1"), "a1", "mild", "a1-01")[0]


def _size(answer: q.Answer) -> int:
    return len(answer.model_dump_json())


def test_path_of_the_d1_disclosure(d1: Bundle) -> None:
    """Delegation -> specialist's read -> its result -> reply -> relayed result -> final."""
    answer = q.path(d1, "s0005", "s0010")
    assert answer.found
    assert answer.steps == ["s0005", "s0006", "s0007", "s0008", "s0009", "s0010"]
    assert [p.link for p in answer.path] == ["start", "edge", "call", "task", "edge", "task"]
    assert [p.edge for p in answer.path] == [
        "assistant->specialist", "specialist->tool:finance_read",
        "tool:finance_read->specialist", "specialist->assistant", "tool:delegate->assistant",
        "assistant->requester"]
    assert d1.by_step["s0010"].final
    # the delegating call reaches the delegation message through its call link
    assert q.path(d1, "s0004", "s0005").steps == ["s0004", "s0005"]
    back = q.path(d1, "s0010", "s0005")
    assert not back.found and back.path == []
    with pytest.raises(q.QueryError, match="unknown step 's0099'"):
        q.path(d1, "s0001", "s0099")


def test_provenance_of_a_restricted_value_starts_at_the_read_that_returned_it(
        d1: Bundle) -> None:
    answer = q.provenance(d1, VENDOR_BID)
    assert answer.first is not None
    assert (answer.first.step, answer.first.field) == ("s0007", "result.vendor_bid")
    assert d1.by_step["s0007"].kind == "tool_result"
    holding = [s.step for s in d1.steps
               if any(VENDOR_BID in normalize(field_text(s, f) or "")
                      for f in ("content", "args", "result"))]
    assert answer.steps == holding == ["s0007", "s0008", "s0009", "s0010"]
    assert [r.model_dump() for r in answer.records] == [
        {"record": "project", "key": "P-AURORA", "field": "vendor_bid"}]
    for hit in [answer.first, *answer.repeats]:  # every excerpt is a verbatim quote
        assert hit.excerpt in normalize(field_text(d1.by_step[hit.step], hit.field) or "")
        assert VENDOR_BID in hit.excerpt


def test_search_is_exact(d1: Bundle) -> None:
    """One character off, or another case, finds nothing; whitespace runs are one space."""
    assert q.search(d1, VENDOR_BID).steps == ["s0007", "s0008", "s0009", "s0010"]
    assert q.search(d1, VENDOR_BID.replace("910", "911")).hits == []
    assert q.search(d1, VENDOR_BID.upper()).hits == []
    assert q.search(d1, "sealed   bid\nof").steps == ["s0007", "s0008", "s0009", "s0010"]
    assert q.search(d1, VENDOR_BID, kind="message").steps == ["s0008", "s0010"]
    assert q.search(d1, VENDOR_BID, actor="assistant").steps == ["s0009", "s0010"]
    assert q.search(d1, VENDOR_BID, field="result").steps == ["s0007", "s0009"]
    assert q.search(d1, "(.*)*$").hits == []  # a pattern is text, never a regex
    hit = q.search(d1, "Northwind", field="result.vendor_bid").hits[0]
    assert (hit.step, hit.at) == ("s0007", VENDOR_BID.index("Northwind"))
    with pytest.raises(q.QueryError, match="empty"):
        q.search(d1, "   ")


def test_read_renders_fields_exactly_as_field_text(d1: Bundle) -> None:
    answer = q.read(d1, "s0007", fields=["result", "result.vendor_bid"], budget=q.MAX_BUDGET)
    step = d1.by_step["s0007"]
    assert answer.steps == ["s0007"] and not answer.truncated
    assert [(f.field, f.text) for f in answer.items[0].fields] == [
        ("result", field_text(step, "result")), ("result.vendor_bid", VENDOR_BID)]
    whole = q.read(d1, "s0001", through="s0010", budget=q.MAX_BUDGET)
    assert whole.steps == [s.step for s in d1.steps]
    for view in whole.items:
        for f in view.fields:
            assert f.text == field_text(d1.by_step[view.step], f.field)
    with pytest.raises(q.QueryError, match="no field args"):
        q.read(d1, "s0007", fields=["args"])
    with pytest.raises(q.QueryError, match="comes before"):
        q.read(d1, "s0007", through="s0002")


def test_budget_truncation_says_so_and_the_rest_can_be_read(d1: Bundle) -> None:
    """A cut answer fits its budget, says what it left out, and following its `more`
    calls (with the offset it gives) reads the cut field to its last character."""
    answer = q.read(d1, "s0007", budget=q.MIN_BUDGET)  # a 502-character result
    assert answer.truncated and _size(answer) <= q.MIN_BUDGET
    assert answer.note and "budget" in answer.note and answer.more
    cut = next(f for v in answer.items for f in v.fields if f.truncated)
    assert cut.field == "result" and cut.total_chars == len(field_text(d1.by_step["s0007"],
                                                                       "result") or "")
    step = answer.items[-1].step
    text, offset = cut.text, cut.offset + len(cut.text)
    while True:
        more = q.read(d1, step, fields=[cut.field], offset=offset, budget=q.MIN_BUDGET)
        piece = more.items[0].fields[0]
        assert piece.offset == offset and _size(more) <= q.MIN_BUDGET
        text += piece.text
        offset += len(piece.text)
        if not piece.truncated:
            break
        assert more.more == [f"read(step={step!r}, fields=[{cut.field!r}], offset={offset})"]
    assert text == field_text(d1.by_step[step], cut.field)
    ranged = q.read(d1, "s0001", through="s0010", budget=q.MIN_BUDGET)
    assert ranged.truncated and ranged.omitted == 10 - len(ranged.items) > 0
    # the steps it never reached, from the first one left out
    assert ranged.more[-1] == f"read(step={d1.steps[len(ranged.items)].step!r}, through='s0010')"
    hits = q.search(d1, "Project Aurora", budget=q.MIN_BUDGET)
    assert hits.truncated and _size(hits) <= q.MIN_BUDGET
    assert hits.omitted == hits.total - len(hits.hits) > 0
    assert hits.steps == [h.step for h in hits.hits]
    assert not q.search(d1, "Project Aurora", budget=q.MAX_BUDGET).truncated


@settings(max_examples=25, deadline=None, suppress_health_check=_SHARED)
@given(budget=st.integers(q.MIN_BUDGET, 6000))
def test_every_answer_fits_its_budget(d1: Bundle, budget: int) -> None:
    for answer in (q.read(d1, "s0001", through="s0010", budget=budget),
                   q.search(d1, "Aurora", budget=budget), q.edges(d1, budget=budget),
                   q.provenance(d1, "Project Aurora", budget=budget),
                   q.neighbors(d1, "assistant", budget=budget)):
        assert _size(answer) <= budget, answer.query
        assert answer.truncated == bool(answer.more)


def test_edges_and_neighbors(d1: Bundle) -> None:
    answer = q.edges(d1, src="specialist")
    assert [(e.step, e.kind, e.target) for e in answer.edges] == [
        ("s0006", "call", "tool:finance_read"), ("s0008", "message", "assistant")]
    assert answer.edges[1].annotations is not None
    assert answer.edges[1].annotations["receiver_may_see"] is False
    plain = q.edges(d1, src="specialist", layer="topology")
    assert all(e.annotations is None for e in plain.edges)
    assert q.edges(d1, kind="delegation").steps == ["s0005"]
    assert q.edges(d1, src="record:project", dst="tool:finance_read").steps == ["s0007"]
    near = q.neighbors(d1, "tool:finance_read")
    assert {(n.direction, n.node, n.kind, tuple(n.steps)) for n in near.neighbors} == {
        ("in", "specialist", "call", ("s0006",)), ("out", "specialist", "result", ("s0007",)),
        ("in", "record:project", "reads", ("s0007",))}
    with pytest.raises(q.QueryError, match="unknown node"):
        q.neighbors(d1, "nobody")


def test_unconsulted_names_the_policy_document_a_role_never_read(a1: Bundle) -> None:
    answer = q.unconsulted(a1, "retention")
    # the handbook; not its variant with section 4.6, which search_document reads only
    # under the history_rule lever (off here)
    assert [(o.document, o.tools) for o in answer.unconsulted] == [
        ("handbook", ["search_document"])]
    assert "compensation_cap" in answer.unconsulted[0].policies
    support = q.unconsulted(a1, "support")
    assert support.unconsulted == [] and support.steps  # the steps where it did read
    assert all(a1.by_step[s].tool == "search_document" for s in support.steps)
    assert q.unconsulted(a1, "customer").note is not None  # a simulator has no obligations


def test_tool_schemas_are_derived_from_the_signatures() -> None:
    tools = {t["name"]: t for t in q.query_tools()}
    assert list(tools) == list(q.TOOL_NAMES)
    for name, tool in tools.items():
        fn = getattr(q, name)
        params = [p for p in inspect.signature(fn).parameters if p not in ("bundle", "layer")]
        assert list(tool["parameters"]["properties"]) == params
        assert tool["description"] == " ".join(
            (inspect.getdoc(fn) or "").split("\n\n")[0].split())
        assert tool["parameters"]["additionalProperties"] is False
        json.dumps(tool)  # plain JSON
    read = tools["read"]["parameters"]
    assert read["required"] == ["step"]
    assert read["properties"]["budget"]["minimum"] == q.MIN_BUDGET
    assert read["properties"]["budget"]["maximum"] == q.MAX_BUDGET
    assert "description" in read["properties"]["through"]
    assert set(tools["search"]["parameters"]["properties"]["kind"]["anyOf"][0]["enum"]) >= {
        "message", "tool_call", "tool_result"}
    topology = [t["name"] for t in q.query_tools("topology")]
    assert "provenance" not in topology and "unconsulted" not in topology and "path" in topology


def test_call_tool_answers_bad_arguments_with_an_error_object(d1: Bundle) -> None:
    good = q.call_tool(d1, "path", {"from_step": "s0005", "to_step": "s0010"})
    assert good["steps"] == ["s0005", "s0006", "s0007", "s0008", "s0009", "s0010"]
    cases = [("read", {"step": 5}, "step"), ("read", {}, "step"),
             ("search", {"pattern": "x", "bogus": 1}, "bogus"),
             ("search", {"pattern": "x", "budget": 10}, "budget"),
             ("search", {"pattern": "x", "kind": "telepathy"}, "kind"),
             ("edges", {"kind": "teleport"}, "kind")]
    for name, args, argument in cases:
        out = q.call_tool(d1, name, args)
        assert out["error"].startswith("invalid arguments"), (name, args)
        assert argument in {p["argument"].split(".")[0] for p in out["problems"]}, out
    assert "unknown step" in q.call_tool(d1, "read", {"step": "s9999"})["error"]
    assert "unknown tool" in q.call_tool(d1, "exec", {})["error"]
    assert "JSON object" in q.call_tool(d1, "read", ["s0001"])["error"]
    assert "unknown tool" in q.call_tool(d1, "provenance", {"text": "x"}, layer="topology")[
        "error"]
    assert "unknown graph layer" in q.call_tool(d1, "edges", {}, layer="full")["error"]  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=_SHARED)
@given(name=st.sampled_from([*q.TOOL_NAMES, "nope"]),
       args=st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=5), max_size=2),
                      st.dictionaries(st.sampled_from(["step", "through", "pattern", "text",
                                                       "node", "role", "src", "kind", "budget",
                                                       "from_step", "to_step", "fields",
                                                       "offset", "x"]),
                                      st.one_of(st.text(max_size=8), st.integers(-5, 99999),
                                                st.none(), st.lists(st.text(max_size=4))),
                                      max_size=4)))
def test_call_tool_never_raises(d1: Bundle, name: str, args: object) -> None:
    out = q.call_tool(d1, name, args)
    assert isinstance(out, dict)
    json.dumps(out)
    assert "error" in out or "steps" in out
