"""`eairc` as a user runs it: real subprocesses, exit codes, files on disk, stderr text.

Every run goes through `python -m eairdsl.cli` (the console script's entry point) in
a temporary copy of the repository's `worlds/`, offline, so nothing
in the repository is ever modified.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ROOT, make_workspace, run_eairc

HAS_DOT = shutil.which("dot") is not None
SVG_ROOT = "{http://www.w3.org/2000/svg}svg"

# `file:line:col: error[E301]: message`
LOCATED = re.compile(
    r"^(?P<file>[^\s:]+):(?P<line>\d+):(?P<col>\d+): "
    r"(?P<sev>error|warning)\[(?P<code>[A-Z]\d{3})\]: (?P<msg>.*)$",
    re.M,
)


# ------------------------------------------------------------------ helpers

def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` (hidden ones too) with its bytes and mtime."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def located(stderr: str) -> list[re.Match[str]]:
    return list(LOCATED.finditer(stderr))


def error_line(stderr: str, code_pattern: str) -> str:
    """The first stderr line carrying `error[CODE]` for a code matching `code_pattern`."""
    for line in stderr.splitlines():
        if re.search(rf"error\[(?:{code_pattern})\]", line):
            return line
    raise AssertionError(f"no error[{code_pattern}] in:\n{stderr}")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace where `eairc compile worlds/d1.eair -o OUT` has run once (read-only)."""
    ws = make_workspace(tmp_path_factory.mktemp("compiled"))
    proc = run_eairc("compile", "worlds/d1.eair", "-o", "OUT", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    (ws / "compile.stdout").write_text(proc.stdout, encoding="utf-8")
    return ws


@pytest.fixture
def compiled_copy(compiled: Path, tmp_path: Path) -> Path:
    """A private, writable copy of the `compiled` workspace."""
    ws = tmp_path / "ws"
    shutil.copytree(compiled, ws)
    return ws


def shipped_modules(folder: str) -> list[str]:
    """The .eair files under `folder` that git tracks (what a clean clone ships), else all."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", f"{folder}/*.eair"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.eair"))
    return sorted(name for name in listed.split("\0") if name)


def world_json(ws: Path) -> dict[str, Any]:
    """The compiled IR of d1 in workspace `ws`."""
    return json.loads((ws / "OUT" / "d1" / "world.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------ compile

def test_compile_writes_world_json_prompts_and_topology(compiled: Path) -> None:
    """`compile -o OUT` writes world.json, a prompt per role x condition, DOT and (with dot) SVG."""
    out = compiled / "OUT" / "d1"
    world = world_json(compiled)
    roles = [p["name"] for p in world["parties"] if p["kind"] == "role"]
    conditions = [c["name"] for c in world["conditions"]]
    assert roles and len(conditions) >= 2
    expected = {f"prompts/{r}/{c}.md" for r in roles for c in conditions}
    written = {p.relative_to(out).as_posix() for p in out.rglob("*.md")}
    assert written == expected
    assert all((out / rel).read_text(encoding="utf-8").strip() for rel in expected)
    assert (out / "topology.dot").read_text(encoding="utf-8").startswith('digraph "d1" {')
    # the atomic swap leaves no temporary or backup folders behind
    leftovers = [p.name for p in (compiled / "OUT").iterdir() if p.name.startswith(".d1.")]
    assert leftovers == []
    assert [p.name for p in (compiled / "OUT").iterdir() if p.is_dir()] == ["d1"]
    stdout = (compiled / "compile.stdout").read_text(encoding="utf-8")
    svg = (out / "topology.svg").read_bytes()  # graphviz's, or the built-in drawing without dot
    assert b"<svg" in svg
    assert ET.fromstring(svg).tag == SVG_ROOT
    if not HAS_DOT:
        assert "dot" in stdout


def test_compile_without_dot_draws_svg_with_a_note(tmp_path: Path) -> None:
    """Without `dot` on PATH, compile succeeds, draws the SVG itself, prints a note naming `dot`."""
    ws = make_workspace(tmp_path / "ws")
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    proc = run_eairc("compile", "worlds/d1.eair", "-o", "OUT", cwd=ws, env={"PATH": str(empty_bin)})
    assert proc.returncode == 0, proc.stderr
    assert (ws / "OUT" / "d1" / "topology.dot").is_file()
    assert ET.parse(ws / "OUT" / "d1" / "topology.svg").getroot().tag == SVG_ROOT
    assert re.search(r"note: .*`dot`", proc.stdout), proc.stdout


def test_compile_check_passes_right_after_compile(compiled: Path) -> None:
    """`compile --check` exits 0 and reports up to date on output just written by compile."""
    proc = run_eairc("compile", "--check", "worlds/d1.eair", "-o", "OUT", cwd=compiled)
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout


def test_compile_check_names_every_edited_deleted_or_added_output(compiled_copy: Path) -> None:
    """`compile --check` exits 1 naming each edited, deleted or added output; writes nothing."""
    out = compiled_copy / "OUT" / "d1"
    for rel in ("prompts/specialist/canonical.md", "world.json", "topology.dot"):
        with (out / rel).open("a", encoding="utf-8") as f:
            f.write("\nhand edit\n")
    (out / "prompts" / "assistant" / "repaired.md").unlink()
    (out / "prompts" / "assistant" / "retired.md").write_text("old\n", encoding="utf-8")
    before = snapshot(compiled_copy / "OUT")
    proc = run_eairc("compile", "--check", "worlds/d1.eair", "-o", "OUT", cwd=compiled_copy)
    assert proc.returncode == 1
    stale_line = next(line for line in proc.stderr.splitlines() if "is stale: " in line)
    named = set(stale_line.split("is stale: ", 1)[1].split(", "))
    assert named == {
        "prompts/specialist/canonical.md", "world.json", "topology.dot",
        "prompts/assistant/repaired.md", "prompts/assistant/retired.md (no longer generated)",
    }, stale_line
    assert snapshot(compiled_copy / "OUT") == before


@pytest.mark.parametrize(("data_file", "old", "new", "stale"), [
    ("d1/hr.json", '"location": "Austin"', '"location": "Denver"', ["world.json"]),
    ("d1/specialist.md.j2", None, "\nOne more line of instructions.\n",
     ["prompts/specialist/canonical.md", "world.json"]),
])
def test_compile_check_fails_after_a_data_file_changes(
    compiled_copy: Path, data_file: str, old: str | None, new: str, stale: list[str],
) -> None:
    """`compile --check` exits 1 naming the stale outputs after a data or card file changes."""
    path = compiled_copy / "worlds" / data_file
    text = path.read_text(encoding="utf-8")
    if old is None:
        changed = text + new
    else:
        assert old in text
        changed = text.replace(old, new, 1)
    path.write_text(changed, encoding="utf-8")
    proc = run_eairc("compile", "--check", "worlds/d1.eair", "-o", "OUT", cwd=compiled_copy)
    assert proc.returncode == 1
    assert "is stale" in proc.stderr
    for rel in stale:
        assert rel in proc.stderr, proc.stderr
    assert "prompts/assistant/" not in proc.stderr  # only what depends on the change


# ------------------------------------------------------------------ diagnostics

def _inject(text: str, anchor: str, old: str, new: str) -> str:
    """Replace the first `old` after `anchor` with `new`."""
    start = text.index(anchor)
    at = text.index(old, start)
    return text[:at] + new + text[at + len(old):]


def _position(text: str, line_needle: str, token: str) -> tuple[int, int]:
    """1-based (line, col) of `token` on the only line containing `line_needle`."""
    hits = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line_needle in line]
    assert len(hits) == 1, (line_needle, hits)
    for number, line in hits:
            return number, line.index(token) + 1
    raise AssertionError(line_needle)


def test_three_errors_are_located_with_carets_and_leave_output_untouched(
    compiled_copy: Path,
) -> None:
    """3 injected errors: exactly 3 `file:line:col: error[CODE]` + carets; OUT/d1 byte-identical."""
    world = compiled_copy / "worlds" / "d1.eair"
    text = world.read_text(encoding="utf-8")
    text = _inject(text, "role assistant {", "tools directory_lookup, delegate",
                   "tools directory_lookup, delegate, teleport")
    text = _inject(text, "condition untrusted", "trust = untrusted_client",
                   "trustt = untrusted_client")
    text = _inject(text, "tool hr_read(", "cost 1 min", "cost 1 // unitless")
    world.write_text(text, encoding="utf-8")
    expected = {
        (*_position(text, "delegate, teleport", "teleport"), "E301"),
        (*_position(text, "trustt = ", "trustt"), "E509"),
        (*_position(text, "cost 1 // unitless", "1"), "E402"),
    }
    assert len({line for line, _, _ in expected}) == 3
    before = snapshot(compiled_copy / "OUT")

    proc = run_eairc("compile", "worlds/d1.eair", "-o", "OUT", cwd=compiled_copy)

    assert proc.returncode == 1
    errors = [m for m in located(proc.stderr) if m["sev"] == "error"]
    assert {(int(m["line"]), int(m["col"]), m["code"]) for m in errors} == expected, proc.stderr
    assert len(errors) == 3
    assert {m["file"] for m in errors} == {"worlds/d1.eair"}
    lines = proc.stderr.splitlines()
    source_lines = text.split("\n")
    for m in errors:
        i = lines.index(m.group(0))
        line, col = int(m["line"]), int(m["col"])
        gutter = f"{line:>4} | "
        assert lines[i + 1] == gutter + source_lines[line - 1], proc.stderr
        caret = lines[i + 2]
        assert caret.strip() and set(caret.strip()) == {"^"}, proc.stderr
        assert caret.index("^") == len(gutter) + col - 1, proc.stderr
    assert "teleport" in proc.stderr and "trustt" in proc.stderr
    assert "left unchanged" in proc.stderr
    assert snapshot(compiled_copy / "OUT") == before


# ------------------------------------------------------------------ bad input

BAD_INPUTS: dict[str, tuple[bytes | None, str]] = {
    # kind: (file content, or None for "missing"/"directory"; expected code pattern)
    "missing": (None, "E201"),
    "directory": (None, "E202"),
    "binary": (b"world x {\x00\x01\x02}\n", "E101"),
    "latin1": (b"// ok\n// caf\xe9\nworld x { }\n", "E102"),
    "empty": (b"", "E501"),
    "syntax": (b"world {{{ ]\n", r"E10[3-9]|E110"),  # E101/E102 are encoding errors
}
LINE_COL = {"binary": None, "latin1": (2, 7), "syntax": (1, 7)}


def _bad_input(ws: Path, kind: str) -> str:
    """Create the bad input of `kind` in `ws`; return how it is named on the command line."""
    content, _ = BAD_INPUTS[kind]
    name = f"{kind}.eair"
    if kind == "directory":
        (ws / name).mkdir()
    elif content is not None:
        (ws / name).write_bytes(content)
    return name


def _assert_located(stderr: str, kind: str, name: str) -> None:
    """The error line for `kind` names `name`, as `name:line:col:` where a position exists."""
    line = error_line(stderr, BAD_INPUTS[kind][1])
    assert name in line, stderr
    if kind in LINE_COL:
        m = LOCATED.match(line)
        assert m is not None and m["file"] == name, line
        if LINE_COL[kind] is not None:
            assert (int(m["line"]), int(m["col"])) == LINE_COL[kind], line


FILE_KINDS = ["missing", "directory", "binary", "latin1", "syntax"]
@pytest.mark.parametrize("command", ["check", "compile"])
def test_bad_inputs_give_located_errors(tmp_path: Path, command: str) -> None:
    """Missing, directory, binary, Latin-1, unparsable worlds: exit 1, each error names its file."""
    names = {kind: _bad_input(tmp_path, kind) for kind in FILE_KINDS}
    extra = ["-o", "OUT"] if command == "compile" else []
    proc = run_eairc(command, *names.values(), *extra, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    for kind, name in names.items():
        _assert_located(proc.stderr, kind, name)
    assert not (tmp_path / "OUT").exists()


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_graph_bad_input_gives_a_located_error(tmp_path: Path, kind: str) -> None:
    """`graph` on a missing, directory, binary, Latin-1 or unparsable world exits 1 naming it."""
    name = _bad_input(tmp_path, kind)
    proc = run_eairc("graph", name, "-o", "g.dot", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    _assert_located(proc.stderr, kind, name)
    assert not (tmp_path / "g.dot").exists()


@pytest.mark.parametrize("command", [
    "check", "compile",
])
def test_empty_file_gives_a_located_error(tmp_path: Path, command: str) -> None:
    """An empty world file (no world block) exits 1 with an error line naming the file."""
    name = _bad_input(tmp_path, "empty")
    proc = run_eairc(command, name, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    _assert_located(proc.stderr, "empty", name)


def test_fmt_bad_inputs_give_located_errors(tmp_path: Path) -> None:
    """`fmt --check` on missing, binary, Latin-1 and unparsable files exits 1 naming each."""
    names = {kind: _bad_input(tmp_path, kind) for kind in ("missing", "binary", "latin1", "syntax")}
    proc = run_eairc("fmt", "--check", *names.values(), cwd=tmp_path)
    assert proc.returncode == 1
    for kind, name in names.items():
        assert name in error_line(proc.stderr, BAD_INPUTS[kind][1]), proc.stderr


def test_syntax_error_in_check_shows_the_line_and_a_caret(tmp_path: Path) -> None:
    """`check` on a syntax error prints the offending source line and a caret under the column."""
    (tmp_path / "syn.eair").write_text("world d {\n  risk D1\n  clock ]\n}\n", encoding="utf-8")
    proc = run_eairc("check", "syn.eair", cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if LOCATED.match(line))
    m = LOCATED.match(lines[first])
    assert m is not None and m["file"] == "syn.eair" and m["line"] == "3"
    assert lines[first + 1] == "   3 |   clock ]"
    assert lines[first + 2].index("^") == len("   3 | ") + int(m["col"]) - 1


# ------------------------------------------------------------------ usage errors

@pytest.mark.parametrize("args", [
    ["compile", "--bogus", "worlds/d1.eair"],
    ["check", "--nope"],
    ["frobnicate"],
    ["graph"],
    ["graph", "worlds/d1.eair", "-o", "out.png"],
])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    """Unknown options/commands, a missing argument, `graph -o out.png`: exit 2, nothing written."""
    ws = make_workspace(tmp_path / "ws")
    proc = run_eairc(*args, cwd=ws)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip()
    assert not (ws / "out.png").exists() and not (ws / "generated").exists()
    if "out.png" in args:
        assert ".png" in proc.stderr


def test_compile_into_a_regular_file_is_a_usage_error(tmp_path: Path) -> None:
    """`compile -o F` with F an existing regular file exits 2 naming F (not an internal error)."""
    ws = make_workspace(tmp_path / "ws")
    (ws / "taken").write_text("not a folder\n", encoding="utf-8")
    proc = run_eairc("compile", "worlds/d1.eair", "-o", "taken", cwd=ws)
    assert proc.returncode == 2, proc.stderr
    assert "taken" in proc.stderr
    assert (ws / "taken").read_text(encoding="utf-8") == "not a folder\n"


# ------------------------------------------------------------------ fmt

@pytest.mark.parametrize("folder", ["worlds", "eairdsl/stdlib"])
def test_fmt_check_passes_on_shipped_sources(tmp_path: Path, folder: str) -> None:
    """`fmt --check` exits 0 on the shipped worlds/ and stdlib/."""
    ws = make_workspace(tmp_path / "ws")
    files = shipped_modules(folder)
    assert files, folder
    proc = run_eairc("fmt", "--check", *(ROOT / f for f in files), cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(files)} file(s) checked, 0 need formatting" in proc.stdout


def test_fmt_check_flags_then_fmt_repairs_bad_indentation(tmp_path: Path) -> None:
    """`fmt --check` exits 1 naming a mis-indented file; `fmt` restores it; re-check exits 0."""
    mods = tmp_path / "mods"
    mods.mkdir()
    for name in ("delegation.eair", "disclosure.eair"):  # canonical modules, one folder
        shutil.copy(ROOT / "eairdsl" / "stdlib" / name, mods / name)
    target = mods / "delegation.eair"
    canonical = target.read_text(encoding="utf-8")
    messy = re.sub(r"(?m)^  (?=\S)", "     ", canonical).replace("\ntool ", "\n   tool ")
    assert messy != canonical
    target.write_text(messy, encoding="utf-8")

    check = run_eairc("fmt", "--check", "mods", cwd=tmp_path)
    assert check.returncode == 1
    assert "mods/delegation.eair" in check.stderr
    assert "disclosure.eair" not in check.stderr
    assert target.read_text(encoding="utf-8") == messy  # --check writes nothing

    rewrite = run_eairc("fmt", "mods", cwd=tmp_path)
    assert rewrite.returncode == 0, rewrite.stderr
    assert "formatted mods/delegation.eair" in rewrite.stdout
    assert target.read_text(encoding="utf-8") == canonical

    again = run_eairc("fmt", "--check", "mods", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


# ------------------------------------------------------------------ graph

def test_graph_writes_dot_with_every_participant_and_a_legend(compiled_copy: Path) -> None:
    """`graph -o x.dot` writes DOT with a node for every participant and a legend cluster."""
    proc = run_eairc("graph", "worlds/d1.eair", "-o", "x.dot", cwd=compiled_copy)
    assert proc.returncode == 0, proc.stderr
    dot = (compiled_copy / "x.dot").read_text(encoding="utf-8")
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    parties = world_json(compiled_copy)["parties"]
    assert len(parties) >= 3
    for party in parties:
        assert f'"{party["name"]}" [label="{party["name"]}"' in dot, party["name"]
    assert "subgraph cluster_legend" in dot and 'label="legend"' in dot
    for kind in {p["kind"] for p in parties}:
        assert f'"legend:{kind}"' in dot
    # the same DOT the compiler writes, so the drawing is never a second model
    assert dot == (compiled_copy / "OUT" / "d1" / "topology.dot").read_text(encoding="utf-8")


@pytest.mark.skipif(not HAS_DOT, reason="graphviz's dot is not installed")
def test_graph_writes_well_formed_svg(compiled_copy: Path) -> None:
    """`graph -o x.svg` writes a well-formed SVG document when dot is installed."""
    proc = run_eairc("graph", "worlds/d1.eair", "-o", "x.svg", cwd=compiled_copy)
    assert proc.returncode == 0, proc.stderr
    assert ET.parse(compiled_copy / "x.svg").getroot().tag == SVG_ROOT


# ------------------------------------------------------------------ lazy imports

@pytest.mark.parametrize(("args", "must_import"), [
    (["--help"], "typer"),
    (["compile", "worlds/d1.eair", "-o", "OUT"], "eairdsl.compiler"),
    (["graph", "worlds/d1.eair", "-o", "x.dot"], "eairdsl.graph"),
    (["fmt", "--check", str(ROOT / "eairdsl" / "stdlib" / "delegation.eair")],
     "eairdsl.syntax.fmt"),
])
def test_commands_never_import_litellm(tmp_path: Path, args: list[str], must_import: str) -> None:
    """`-X importtime` shows --help, compile, graph and fmt never import litellm."""
    ws = make_workspace(tmp_path / "ws")
    proc = run_eairc(*args, cwd=ws, python_flags=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and line.count("|") == 2}
    assert must_import in modules  # the scan sees the command's own imports
    assert not {m for m in modules if m.split(".")[0] in ("litellm", "openai", "tiktoken")}


# ------------------------------------------------------------------ README

def test_readme_opens_with_the_two_setup_commands() -> None:
    """The README opens with a bash block: pip install + eairc compile, then offline pytest."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = [line for line in text.splitlines() if line.strip()]
    assert body[0].startswith("# ")  # the title, then straight into the block
    assert body[1] == "```bash"
    end = body.index("```", 2)
    commands = body[2:end]
    assert len(commands) == 2, commands
    install, test = commands
    assert "pip install" in install and "eairc" in install
    world = re.search(r"eairc compile (\S+\.eair)", install)
    assert world and (ROOT / world[1]).is_file()
    assert re.search(r"(^|\s)(python -m )?pytest(\s|$)", test), test
    assert "LITELLM_OFFLINE_MODE=true" in test
