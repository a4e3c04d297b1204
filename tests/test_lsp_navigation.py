"""`eairc lsp` beyond diagnostics: definition, references, completion, semantic tokens,
quick fixes, debouncing and re-checking importers, over the real protocol.

Positions are found in the texts by search, never written as numbers, so the tests
follow the worlds as they change.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pygls")

from lsp_client import D1, ROOT, Client, started


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    yield from started(tmp_path)

STDLIB = ROOT / "eairdsl" / "stdlib"

#: a small world written from docs/language.md, not one of ours
SHOP = '''world shop {
  title "Refunds at a small shop"
  risk A1
}

// What a customer bought.
record order from "orders.json" key id {
  id: text
  total: money
  customer: text
}

lever cap : money = $100 "the largest refund one clerk may give"

tool refund(id: text, amount: money) -> text {
  kind act
  require amount <= cap else reject "over the cap"
  returns lookup(order, id).customer
}

role clerk {
  tools refund
}
'''


def _at(text: str, needle: str, offset: int = 0, nth: int = 0) -> dict[str, int]:
    """The 0-based position of the `nth` occurrence of `needle` (plus `offset` columns)."""
    found = [m.start() for m in re.finditer(re.escape(needle), text)]
    start = found[nth] + offset
    line = text.count("\n", 0, start)
    return {"line": line, "character": start - (text.rfind("\n", 0, start) + 1)}


def _doc(uri: str, position: dict[str, int]) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": position}


def _start_of(location: dict[str, Any], path: Path) -> str:
    """The text of the file a location names, from the location's start."""
    text = path.read_text(encoding="utf-8")
    start = location["range"]["start"]
    return text.split("\n")[start["line"]][start["character"]:]


def test_definition_of_a_tool_a_role_lists(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    where = _at(text, "tools directory_lookup", len("tools "))
    found = client.request("textDocument/definition", _doc(uri, where))
    assert len(found) == 1 and found[0]["uri"] == uri
    assert _start_of(found[0], D1).startswith("directory_lookup(")
    line = text.split("\n")[found[0]["range"]["start"]["line"]]
    assert line.startswith("tool directory_lookup")


def test_definition_into_a_stdlib_module(client: Client) -> None:
    """`propagation = true` sets a lever stdlib/delegation.eair declares; the import's
    string goes to the module's file."""
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    found = client.request("textDocument/definition", _doc(uri, _at(text, "propagation = true")))
    module = STDLIB / "delegation.eair"
    assert [f["uri"] for f in found] == [module.as_uri()]
    assert _start_of(found[0], module).startswith("propagation")
    assert "lever" in module.read_text(encoding="utf-8").split("\n")[
        found[0]["range"]["start"]["line"]]
    imported = client.request("textDocument/definition",
                              _doc(uri, _at(text, 'import "', len('import "') + 2)))
    assert len(imported) == 1 and imported[0]["uri"].endswith(".eair")
    assert Path(imported[0]["uri"].removeprefix("file://")).parent == STDLIB


def test_references_of_a_lever_across_modules(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    where = _at(text, "propagation = true")
    every = client.request("textDocument/references", {
        **_doc(uri, where), "context": {"includeDeclaration": True}})
    uses = [m.start() for m in re.finditer(r"\bpropagation\b", _code(text))]
    here = [r for r in every if r["uri"] == uri]
    assert len(here) == len(uses) >= 2
    declared = [r for r in every if r["uri"] == (STDLIB / "delegation.eair").as_uri()]
    assert declared
    without = client.request("textDocument/references", {
        **_doc(uri, where), "context": {"includeDeclaration": False}})
    assert len(without) == len(every) - 1
    highlights = client.request("textDocument/documentHighlight", _doc(uri, where))
    assert len(highlights) == len(here)


def _code(text: str) -> str:
    """`text` with strings and comments blanked (what a reference search may count)."""
    text = re.sub(r'"""[\s\S]*?"""', lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', lambda m: " " * len(m.group()), text)
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group()), text)


def test_a_parameter_resolves_inside_its_own_tool(client: Client, tmp_path: Path) -> None:
    path = tmp_path / "shop.eair"
    uri = client.open(path, SHOP)
    found = client.request("textDocument/definition",
                           _doc(uri, _at(SHOP, "lookup(order, id)", len("lookup(order, "))))
    assert len(found) == 1
    assert found[0]["range"]["start"] == _at(SHOP, "id: text, amount")
    field = client.request("textDocument/definition", _doc(uri, _at(SHOP, ".customer", 1)))
    assert [f["range"]["start"] for f in field] == [_at(SHOP, "customer: text")]
    cap = client.request("textDocument/definition", _doc(uri, _at(SHOP, "<= cap", 3)))
    assert [f["range"]["start"] for f in cap] == [_at(SHOP, "cap :")]
    shown = client.request("textDocument/hover", _doc(uri, _at(SHOP, "<= cap", 3)))
    assert "lever cap : money = $100" in shown["contents"]["value"]
    assert "the largest refund one clerk may give" in shown["contents"]["value"]
    record = client.request("textDocument/hover", _doc(uri, _at(SHOP, "record order", 8)))
    assert "What a customer bought." in record["contents"]["value"]


def _labels(result: Any) -> list[str]:
    items = result["items"] if isinstance(result, dict) else result
    return [item["label"] for item in items]


def test_completion_after_a_dot_on_a_record(client: Client, tmp_path: Path) -> None:
    text = SHOP.replace('returns lookup(order, id).customer', 'returns order.')
    uri = client.open(tmp_path / "shop.eair", text)
    where = _at(text, "order.", len("order."))
    labels = _labels(client.request("textDocument/completion", _doc(uri, where)))
    assert labels == ["id", "total", "customer"]


def test_completion_of_a_variable_bound_over_a_record(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    needle = "for e in employee where e."
    assert needle in text
    cut = text.index(needle) + len(needle)
    typed = text[:cut] + text[text.index("\n", cut):]  # the rest of that line not yet typed
    uri = client.open(D1, typed)
    labels = _labels(client.request("textDocument/completion", _doc(uri, _at(typed, needle,
                                                                             len(needle)))))
    assert "rating" in labels and "restricted" in labels
    assert "budget" not in labels  # a field of another record


def test_completion_of_clause_keywords_and_names(client: Client, tmp_path: Path) -> None:
    text = SHOP.replace("  kind act\n", "  kind act\n  \n")
    uri = client.open(tmp_path / "shop.eair", text)
    where = _at(text, "  \n  require", 2)
    labels = _labels(client.request("textDocument/completion", _doc(uri, where)))
    assert "require" in labels and "returns" in labels and "model" not in labels
    text = SHOP.replace("  tools refund\n", "  tools \n")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": text}]})
    labels = _labels(client.request("textDocument/completion",
                                    _doc(uri, _at(text, "tools \n", len("tools ")))))
    assert labels == ["refund"]
    text = SHOP.replace("amount <= cap", "amount <= ca")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                             "contentChanges": [{"text": text}]})
    labels = _labels(client.request("textDocument/completion",
                                    _doc(uri, _at(text, "<= ca", len("<= ca")))))
    assert {"cap", "amount", "lookup"} <= set(labels)


def _decode(data: list[int], legend: dict[str, list[str]]
            ) -> list[tuple[int, int, int, str, set[str]]]:
    """LSP's relative token encoding back to (line, col, length, type, modifiers)."""
    out = []
    line = col = 0
    for at in range(0, len(data), 5):
        delta_line, delta_col, length, kind, mods = data[at:at + 5]
        line += delta_line
        col = col + delta_col if delta_line == 0 else delta_col
        names = {m for i, m in enumerate(legend["tokenModifiers"]) if mods & (1 << i)}
        out.append((line, col, length, legend["tokenTypes"][kind], names))
    return out


def test_semantic_tokens_name_what_each_name_declares(tmp_path: Path) -> None:
    for c in started(tmp_path):
        legend = c.capabilities["semanticTokensProvider"]["legend"]
        uri = c.open(tmp_path / "shop.eair", SHOP)
        data = c.request("textDocument/semanticTokens/full", {"textDocument": {"uri": uri}})
        tokens = {(line, col): (kind, mods) for line, col, _, kind, mods
                  in _decode(data["data"], legend)}
        at = _at(SHOP, "refund(id")
        assert tokens[(at["line"], at["character"])] == ("method", {"declaration"})
        at = _at(SHOP, "refund\n}")
        assert tokens[(at["line"], at["character"])] == ("method", set())
        at = _at(SHOP, "lookup(")
        assert tokens[(at["line"], at["character"])] == ("function", {"defaultLibrary"})
        at = _at(SHOP, "cap else")
        assert tokens[(at["line"], at["character"])][0] == "variable"
        at = _at(SHOP, "kind act")
        assert (at["line"], at["character"]) not in tokens  # keywords stay the grammar's


def test_a_did_you_mean_hint_is_a_quick_fix(client: Client) -> None:
    text = D1.read_text(encoding="utf-8").replace("tools directory_lookup",
                                                  "tools directory_lookp", 1)
    uri = client.open(D1, text)
    found = [d for d in client.diagnostics(uri) if d["code"] == "E301"]
    assert len(found) == 1 and "codeDescription" in found[0]
    assert found[0]["codeDescription"]["href"].endswith("docs/errors.md#e301--unknown-name")
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": found[0]["range"],
        "context": {"diagnostics": found}})
    assert len(actions) == 1 and actions[0]["kind"] == "quickfix"
    (edit,) = actions[0]["edit"]["changes"][uri]
    assert edit["newText"] == "directory_lookup"
    assert edit["range"]["start"] == _at(text, "directory_lookp")
    fixed = text.split("\n")
    line = edit["range"]["start"]["line"]
    row = fixed[line]
    fixed[line] = (row[:edit["range"]["start"]["character"]] + edit["newText"]
                   + row[edit["range"]["end"]["character"]:])
    assert "\n".join(fixed) == D1.read_text(encoding="utf-8")


def test_diagnostics_wait_for_a_pause_in_typing(tmp_path: Path) -> None:
    """With a delay, a burst of edits is checked once, as its last version."""
    for c in started(tmp_path, {"diagnosticsDelay": 0.5}):
        path = tmp_path / "shop.eair"
        uri = c.open(path, SHOP)
        c.diagnostics(uri)
        for version in range(2, 7):
            c.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"text": SHOP + "x" * (version - 1) + "\n"}]})
        published = [c.diagnostics_message(uri)]
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            late = c.poll_diagnostics(uri, 0.2)
            if late is not None:
                published.append(late)
        assert published[-1]["version"] == 6
        assert len(published) < 5
        assert published[-1]["diagnostics"][0]["range"]["start"]["line"] == SHOP.count("\n")


def test_an_edit_to_an_imported_module_rechecks_its_importer(client: Client,
                                                             tmp_path: Path) -> None:
    lib = tmp_path / "lib.eair"
    lib.write_text("enum colour { red, green }\n", encoding="utf-8")
    main = tmp_path / "w.eair"
    text = 'import "lib.eair"\n\nlever paint : colour = red "what is painted"\n'
    main_uri = client.open(main, text)
    before = client.diagnostics(main_uri)
    assert not [d for d in before if d["code"] == "E301"]
    lib_uri = client.open(lib, "enum colour { red, green }\n")
    client.diagnostics(lib_uri)
    client.notify("textDocument/didChange", {
        "textDocument": {"uri": lib_uri, "version": 2},
        "contentChanges": [{"text": "enum hue { red, green }\n"}]})  # unsaved
    after = client.diagnostics(main_uri)
    assert any(d["code"] == "E301" and "colour" in d["message"] for d in after), after
    assert lib.read_text(encoding="utf-8") == "enum colour { red, green }\n"
    # hover in the importer reads the module as it is in its (unsaved) buffer now
    client.notify("textDocument/didChange", {
        "textDocument": {"uri": lib_uri, "version": 3},
        "contentChanges": [{"text": "// what a wall may be painted\nenum colour { red }\n"}]})
    client.diagnostics(main_uri)
    shown = client.request("textDocument/hover", _doc(main_uri, _at(text, "colour =")))
    assert shown is not None and "what a wall may be painted" in shown["contents"]["value"]


def _prefixes(text: str, count: int) -> Iterator[str]:
    """`count` prefixes of `text`, spread evenly, each cut mid-line."""
    for k in range(1, count + 1):
        yield text[:len(text) * k // (count + 1)]


def test_every_request_on_prefixes_of_every_world_answers(client: Client) -> None:
    """Half-typed prefixes of each shipped world: each request answers without an error."""
    worlds = sorted((ROOT / "worlds").glob("*.eair"))
    assert len(worlds) >= 10
    version = 1
    for path in worlds:
        uri = path.as_uri()
        text = path.read_text(encoding="utf-8")
        client.open(path, "")
        client.diagnostics(uri)
        for prefix in _prefixes(text, 8):
            version += 1
            client.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"text": prefix}]})
            assert isinstance(client.diagnostics(uri), list)
            rows = prefix.split("\n")
            end = {"line": len(rows) - 1, "character": len(rows[-1])}
            middle = {"line": len(rows) // 2, "character": 3}
            for where in (end, middle):
                doc = _doc(uri, where)
                client.request("textDocument/hover", doc)
                assert isinstance(client.request("textDocument/definition", doc), list)
                assert isinstance(client.request("textDocument/references", {
                    **doc, "context": {"includeDeclaration": True}}), list)
                assert isinstance(_labels(client.request("textDocument/completion", doc)), list)
            assert "data" in client.request("textDocument/semanticTokens/full",
                                            {"textDocument": {"uri": uri}})
        client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        client.diagnostics(uri)
    assert client.close() == 0
    assert client.stderr_path is not None
    assert "request failed" not in client.stderr_path.read_text(encoding="utf-8",
                                                                errors="replace")


def test_a_card_gets_its_worlds_diagnostics_hover_and_definition(client: Client) -> None:
    """An unsaved card: the world that uses it reports the card's problem on the card;
    `levers.X` in it hovers and goes to the lever in the stdlib module declaring it."""
    card = ROOT / "worlds" / "a1" / "billing.md.j2"
    saved = card.read_text(encoding="utf-8")
    text = saved + "\n{{ level_of_trust }}\n"
    uri = client.open(card, text)
    found = client.diagnostics(uri)
    assert [d["code"] for d in found] == ["E602"]
    assert "level_of_trust" in found[0]["message"]
    assert found[0]["range"]["start"]["line"] == text.count("\n") - 1
    where = _doc(uri, _at(text, "levers.self_approval_limit", len("levers.") + 2))
    shown = client.request("textDocument/hover", where)
    assert shown is not None and "self_approval_limit" in shown["contents"]["value"]
    (target,) = client.request("textDocument/definition", where)
    module = Path(target["uri"].removeprefix("file://"))
    assert module.suffix == ".eair"
    assert _start_of(target, module).startswith("self_approval_limit")
    # the fix, unsaved, clears it; the card on disk is untouched
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": saved}]})
    assert client.diagnostics(uri) == []
    assert card.read_text(encoding="utf-8") == saved


def test_a_problem_two_imports_deep_is_shown_on_the_import_that_leads_to_it(
        client: Client, tmp_path: Path) -> None:
    (tmp_path / "b.eair").write_text("enum colour { red }\nenum colour { blue }\n",
                                     encoding="utf-8")
    (tmp_path / "a.eair").write_text('import "b.eair"\n', encoding="utf-8")
    text = '// a world in the making\n\nimport "a.eair"\n'
    uri = client.open(tmp_path / "w.eair", text)
    deep = [d for d in client.diagnostics(uri) if "b.eair" in d["message"]]
    assert deep and all(d["range"]["start"] == _at(text, 'import "a.eair"') for d in deep)


def _apply(text: str, edits: list[dict[str, Any]]) -> str:
    """Apply non-overlapping single-line edits (as an editor would), last first."""
    rows = text.split("\n")
    for edit in sorted(edits, key=lambda e: (e["range"]["start"]["line"],
                                             e["range"]["start"]["character"]), reverse=True):
        start, end = edit["range"]["start"], edit["range"]["end"]
        row = rows[start["line"]]
        rows[start["line"]] = row[:start["character"]] + edit["newText"] + row[end["character"]:]
    return "\n".join(rows)


def test_rename_a_lever_everywhere_it_is_used(client: Client, tmp_path: Path) -> None:
    path = tmp_path / "shop.eair"
    uri = client.open(path, SHOP)
    where = _doc(uri, _at(SHOP, "<= cap", 3))
    prepared = client.request("textDocument/prepareRename", where)
    assert prepared["start"] == _at(SHOP, "cap else")
    edit = client.request("textDocument/rename", {**where, "newName": "refund_cap"})
    renamed = _apply(SHOP, edit["changes"][uri])
    assert renamed == SHOP.replace("lever cap :", "lever refund_cap :").replace(
        "<= cap", "<= refund_cap")
    assert client.request("textDocument/rename", {**where, "newName": "tool"}) is None
    assert client.request("textDocument/rename", {**where, "newName": "2cap"}) is None


def test_a_name_a_stdlib_module_declares_is_not_renamed_from_a_world(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    where = _doc(uri, _at(text, "propagation = true"))
    assert client.request("textDocument/prepareRename", where) is None
    assert client.request("textDocument/rename", {**where, "newName": "carry"}) is None


def test_signature_help_while_typing_arguments(client: Client, tmp_path: Path) -> None:
    text = SHOP.replace("returns lookup(order, id).customer", "returns lookup(order, ")
    uri = client.open(tmp_path / "shop.eair", text)
    where = _at(text, "lookup(order, ", len("lookup(order, "))
    shown = client.request("textDocument/signatureHelp", _doc(uri, where))
    (signature,) = shown["signatures"]
    assert signature["label"].startswith("lookup(rows: list[row], key: any)")
    assert shown["activeParameter"] == 1
    text = SHOP + "\nlet twice(n: int) = n * 2\nlet four() = twice(\n"
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": text}]})
    shown = client.request("textDocument/signatureHelp",
                           _doc(uri, _at(text, "twice(\n", len("twice("))))
    assert shown["signatures"][0]["label"].startswith("let twice(n: int)")
    assert [p["label"] for p in shown["signatures"][0]["parameters"]] == ["n: int"]


def test_workspace_symbols_search_the_open_worlds(client: Client, tmp_path: Path) -> None:
    client.open(tmp_path / "shop.eair", SHOP)
    client.open(D1, D1.read_text(encoding="utf-8"))
    found = client.request("workspace/symbol", {"query": "refund"})
    assert {s["name"] for s in found} >= {"refund"}
    assert all("refund" in s["name"].lower() for s in found)
    assert any(s["location"]["uri"] == (tmp_path / "shop.eair").as_uri() for s in found)


def test_the_files_a_world_names_are_links(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    links = client.request("textDocument/documentLink", {"textDocument": {"uri": uri}})
    rows = text.split("\n")
    linked = {}
    for link in links:
        start, end = link["range"]["start"], link["range"]["end"]
        linked[rows[start["line"]][start["character"]:end["character"]]] = link["target"]
    written = re.findall(r'(?:import|from|card) "([^"]+)"', _code_strings_kept(text))
    assert written and sorted(linked) == sorted(set(written))
    for name, target in linked.items():
        assert Path(target.removeprefix("file://")).is_file(), name
    assert linked["stdlib/delegation.eair"] == (STDLIB / "delegation.eair").as_uri()


def _code_strings_kept(text: str) -> str:
    """`text` without its comments (strings kept: they are what is linked)."""
    return re.sub(r"//[^\n]*", "", text)


def test_a_file_changed_on_disk_rechecks_the_open_worlds(tmp_path: Path) -> None:
    """A client that can watch files is asked to; a watched change re-checks (here: the
    module a world imports, edited by another program, is read again)."""
    capabilities = {"workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True}}}
    for c in started(tmp_path, capabilities=capabilities):
        asked = c.server_request("client/registerCapability")
        (registration,) = asked["params"]["registrations"]
        assert registration["method"] == "workspace/didChangeWatchedFiles"
        assert "eair" in registration["registerOptions"]["watchers"][0]["globPattern"]
        lib = tmp_path / "lib.eair"
        lib.write_text("enum colour { red }\n", encoding="utf-8")
        text = 'import "lib.eair"\n\nlever paint : colour = red "what is painted"\n'
        uri = c.open(tmp_path / "w.eair", text)
        assert not [d for d in c.diagnostics(uri) if d["code"] == "E301"]
        lib.write_text("enum hue { red }\n", encoding="utf-8")
        c.notify("workspace/didChangeWatchedFiles",
                 {"changes": [{"uri": lib.as_uri(), "type": 2}]})
        assert any(d["code"] == "E301" for d in c.diagnostics(uri))


def test_completion_inside_a_path_string_lists_the_files(client: Client,
                                                          tmp_path: Path) -> None:
    (tmp_path / "orders.json").write_text("[]", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("", encoding="utf-8")
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "clerk.md.j2").write_text("You are a clerk.", encoding="utf-8")
    text = SHOP.replace('from "orders.json"', 'from "or').replace(
        "role clerk {\n", 'role clerk {\n  card "\n') + 'import "\n'
    uri = client.open(tmp_path / "shop.eair", text)
    data = client.request("textDocument/completion", _doc(uri, _at(text, 'from "or', 8)))
    assert _labels(data) == ["orders.json"]
    (edit,) = [item["textEdit"] for item in data["items"]]
    assert edit["range"]["start"] == _at(text, 'from "or', 6) and edit["newText"] == "orders.json"
    cards = client.request("textDocument/completion", _doc(uri, _at(text, 'card "', 6)))
    assert _labels(cards) == ["cards/clerk.md.j2"]
    modules = _labels(client.request("textDocument/completion",
                                     _doc(uri, _at(text, 'import "', 8))))
    assert "stdlib/delegation.eair" in modules and "shop.eair" not in modules


def _complete(client: Client, uri: str, text: str, needle: str, version: int) -> list[str]:
    """Labels offered at the end of `needle` in `text` (sent as the buffer's new text)."""
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                             "contentChanges": [{"text": text}]})
    return _labels(client.request("textDocument/completion",
                                  _doc(uri, _at(text, needle, len(needle)))))


def test_completion_knows_the_language_where_it_is_being_written(client: Client,
                                                                  tmp_path: Path) -> None:
    """What an author types next, in the contexts of a world half written."""
    uri = client.open(tmp_path / "shop.eair", SHOP)
    cases: list[tuple[str, str, set[str], set[str]]] = [
        # (buffer, cursor after, must be offered, must not be)
        (SHOP.replace("  total: money\n", "  total: mo\n"), "total: mo",
         {"money", "text", "duration", "list", "order"}, {"lookup", "refund"}),
        (SHOP.replace("kind act\n", "kind act\n  model \n"), "model ",
         {"under_test", "counterpart"}, {"refund"}),
        (SHOP + "\ninducer push : \n", "push : ", {"prompt_clause", "deadline"}, {"cap"}),
        (SHOP + '\ncondition strict {\n  expect compliant \n}\n', "expect compliant ",
         {"keeps", "can_realize"}, {"cap"}),
        (SHOP + "\nlever mood : {calm, tense} = ca\n", "tense} = ca", {"calm", "tense"},
         {"cap"}),
        (SHOP + "\ncondition calm_day {\n  mood = \n}\nlever mood : {calm, tense} = calm\n",
         "mood = ", {"calm", "tense", "cap"}, set()),
        (SHOP.replace("returns lookup(order, id).customer", "returns context."), "context.",
         {"caller", "principal"}, {"total"}),
        (SHOP.replace("  customer: text\n", "  customer: text\n  group shown = id, \n"),
         "group shown = id, ", {"id", "total", "customer"}, {"cap"}),
        (SHOP.replace("  require amount <= cap", "  require amount <= cap and am"), "and am",
         {"amount", "id", "cap", "lookup", "instance"}, set()),
        (SHOP + "\nlet big() = all o in order: o.total > $5 and \n", "$5 and ",
         {"o", "cap"}, set()),
        (SHOP + "\nmeasure {\n  \n}\n", "measure {\n  ", {"realized", "metric"}, {"cap"}),
        (SHOP + "\nauthorization deny {\n  \n}\n", "authorization deny {\n  ",
         {"allow", "deny"}, {"cap"}),
    ]
    for version, (text, needle, wanted, unwanted) in enumerate(cases, start=2):
        labels = set(_complete(client, uri, text, needle, version))
        assert wanted <= labels, (needle, wanted - labels)
        assert not unwanted & labels, (needle, unwanted & labels)
    # a tool whose block does not parse yet still offers its parameters
    half = SHOP.replace('require amount <= cap else reject "over the cap"', "require amo")
    assert {"amount", "id"} <= set(_complete(client, uri, half, "require amo", 99))


def test_an_inline_enum_member_is_a_definition(client: Client, tmp_path: Path) -> None:
    text = SHOP + "\nlever mood : {calm, tense} = calm \"how the shop feels\"\n" \
        "condition rush {\n  mood = tense\n}\n"
    uri = client.open(tmp_path / "shop.eair", text)
    found = client.request("textDocument/definition", _doc(uri, _at(text, "= tense", 2)))
    assert [f["range"]["start"] for f in found] == [_at(text, "tense}")]
