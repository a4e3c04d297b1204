"""`eairc lsp`: the real server, started as `python -m eairdsl.cli lsp`, spoken to over
its real protocol (JSON-RPC with Content-Length framing on stdio).

The timeouts are hang guards only: a server that stops answering fails the test
instead of stalling the suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from lsp_client import D1, GUARD, ROOT, Client, started

from eairdsl.syntax.fmt import format_text


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    yield from started(tmp_path)

def test_lifecycle(client: Client) -> None:
    assert client.close() == 0


def test_diagnostics_of_an_unsaved_buffer(client: Client) -> None:
    """An error in the buffer (not on disk) comes back where it is, 0-based, with its code."""
    text = D1.read_text(encoding="utf-8")
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("enum domain"))
    lines.insert(at + 1, "enum domain { a }")
    uri = client.open(D1, "\n".join(lines))
    found = client.diagnostics(uri)
    assert found, "a duplicate declaration is reported"
    first = found[0]
    assert first["source"] == "eairc" and first["severity"] == 1
    assert first["range"]["start"]["line"] == at + 1
    assert first["range"]["start"]["character"] == 0
    code = first["code"]
    assert code.startswith("E")
    # the fix, sent as a full-text change, clears them
    client.notify("textDocument/didChange", {
        "textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": text}]})
    assert client.diagnostics(uri) == []
    assert client.close() == 0


def test_parse_error_range_and_code(client: Client) -> None:
    uri = client.open(D1, "world w {\n  title \"x\"\n}\n\nrecord r {\n  a: \n")
    found = client.diagnostics(uri)
    assert len(found) >= 1
    assert all(d["code"].startswith("E1") for d in found)
    assert found[0]["range"]["start"]["line"] >= 4


def test_formatting_is_format_text(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    messy = text.replace("\n  title ", "\n      title ", 1)
    uri = client.open(D1, messy)
    edits = client.request("textDocument/formatting", {
        "textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": True}})
    expected, _ = format_text(messy, "d1.eair")
    assert expected is not None and expected != messy
    assert len(edits) == 1
    assert edits[0]["range"]["start"] == {"line": 0, "character": 0}
    assert edits[0]["newText"] == expected
    broken = client.open(ROOT / "worlds" / "broken.eair", "world w {\n")
    assert client.request("textDocument/formatting", {
        "textDocument": {"uri": broken}, "options": {"tabSize": 2, "insertSpaces": True}}) == []


def test_document_symbols_list_roles(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    names = [s["name"] for s in symbols]
    assert names[0] == "world d1"
    roles = [n for n in names if n.startswith("role ")]
    assert roles
    lines = text.split("\n")
    for s in symbols:
        if s["name"] in roles:
            start = s["range"]["start"]
            assert lines[start["line"]][start["character"]:].startswith(s["name"])
    employee = next(s for s in symbols if s["name"] == "record employee")
    members = [c["name"] for c in employee["children"]]
    assert "rating" in members and "group restricted" in members
    for child in employee["children"]:
        start = child["range"]["start"]
        assert lines[start["line"]][start["character"]:].startswith(child["name"])


def test_hover_on_a_builtin_and_a_declared_name(client: Client) -> None:
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    lines = text.split("\n")
    calls = ((i, m) for i, row in enumerate(lines)
             for m in re.finditer(r"\blookup\(", row))
    line, match = next(calls)
    character = match.start() + 2
    shown = client.request("textDocument/hover", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character}})
    assert shown is not None
    assert "lookup(rows: list[row], key: any)" in shown["contents"]["value"]
    line = next(i for i, row in enumerate(lines) if row.startswith("record employee"))
    shown = client.request("textDocument/hover", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": 9}})
    assert shown is not None and "record employee" in shown["contents"]["value"]


def test_prefixes_of_a_world_never_break_the_server(client: Client) -> None:
    """Every request on half-typed prefixes of D1 answers (possibly with nothing)."""
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, "")
    client.diagnostics(uri)
    for version, end in enumerate(range(0, len(text), 97), start=2):
        prefix = text[:end]
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": prefix}]})
        assert isinstance(client.diagnostics(uri), list)
        doc = {"textDocument": {"uri": uri}}
        last = prefix.split("\n")
        where = {"line": len(last) - 1, "character": len(last[-1])}
        assert isinstance(client.request("textDocument/documentSymbol", doc), list)
        assert isinstance(client.request("textDocument/formatting", {
            **doc, "options": {"tabSize": 2, "insertSpaces": True}}), list)
        client.request("textDocument/hover", {**doc, "position": where})
        assert isinstance(client.request("textDocument/definition",
                                         {**doc, "position": where}), list)
        assert client.request("textDocument/completion",
                              {**doc, "position": where})["items"] is not None
    assert client.close() == 0
    assert client.stderr_path is not None
    assert "request failed" not in client.stderr_path.read_text(encoding="utf-8", errors="replace")


def test_columns_are_utf16_units(client: Client) -> None:
    """LSP counts UTF-16 code units by default: after an emoji, one more than code points."""
    text = 'world w {\n  title "\U0001f60b" oops\n}\n'
    uri = client.open(D1, text)
    found = client.diagnostics(uri)
    assert found
    line = text.split("\n")[1]
    assert found[0]["range"]["start"] == {
        "line": 1, "character": len(line[:line.index("oops")].encode("utf-16-le")) // 2}


def test_a_binary_buffer_is_refused_as_a_binary_file(client: Client) -> None:
    """The in-memory buffer gets the checks a file on disk does (here: NUL bytes, E101)."""
    uri = client.open(D1, "world w {\x00}\n")
    assert [d["code"] for d in client.diagnostics(uri)] == ["E101"]


def test_without_pygls_lsp_is_a_usage_error_naming_the_extra() -> None:
    """The extra is optional: without it `eairc lsp` says how to install it and exits 2."""
    hide = ("import sys; sys.modules['pygls'] = None; sys.argv = ['eairc', 'lsp']; "
            "from eairdsl.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", hide], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=GUARD,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert "eairdsl[lsp]" in proc.stderr and "Traceback" not in proc.stderr


def test_a_problem_in_an_import_is_shown_on_its_import(client: Client, tmp_path: Path) -> None:
    (tmp_path / "lib.eair").write_text("enum colour { red, green }\n", encoding="utf-8")
    text = 'world w {\n  title "x"\n}\n\nimport "lib.eair"\n'
    uri = client.open(tmp_path / "w.eair", text)  # never saved: only the import is on disk
    found = [d for d in client.diagnostics(uri) if "lib.eair" in d["message"]]
    assert found and all(d["range"]["start"]["line"] == 4 for d in found)
    assert not (tmp_path / "w.eair").exists()


def test_hover_on_a_name_an_import_declares(client: Client) -> None:
    """`propagation = true` in D1 sets a lever that stdlib/delegation.eair declares."""
    text = D1.read_text(encoding="utf-8")
    uri = client.open(D1, text)
    lines = text.split("\n")
    line = next(i for i, row in enumerate(lines) if row.strip() == "propagation = true")
    shown = client.request("textDocument/hover", {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": lines[line].index("propagation") + 1}})
    assert shown is not None
    assert "lever propagation" in shown["contents"]["value"]
    assert "stdlib/delegation.eair" in shown["contents"]["value"]
