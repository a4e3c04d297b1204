"""Bad invocations of `eairc`: a one-line error or a located diagnostic, exit 1 or 2.

Never an internal error (exit 3), a traceback, a hang, or a success. Each row is
(arguments, expected exit codes, a phrase the error must contain). Arguments
name files of a scratch workspace: a FIFO, a folder, a binary file, an empty
file, a world.json that is not JSON, one edited after compile, a plain file.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import ROOT, run_eairc

USAGE, INPUT = {2}, {1}
EITHER = {1, 2}

CASES: list[tuple[str, tuple[str, ...], set[int], str]] = [
    # worlds that are not worlds
    ("run-missing-eair", ("run", "nope.eair"), INPUT, "file not found"),
    ("run-missing-folder", ("run", "nope"), INPUT, "no compiled world"),
    ("run-folder", ("run", "folder"), INPUT, "no compiled world"),
    ("run-folder-named-eair", ("run", "folder.eair"), INPUT, "is a directory"),
    ("run-fifo-eair", ("run", "fifo.eair"), INPUT, "not a regular file"),
    ("run-fifo", ("run", "fifo"), INPUT, "no compiled world"),
    ("run-dev-null", ("run", "/dev/null"), INPUT, "no compiled world"),
    ("run-binary", ("run", "binary.eair"), INPUT, "UTF-8"),
    ("run-empty", ("run", "empty.eair"), INPUT, "error"),
    ("run-world-json-not-json", ("run", "notjson"), INPUT, "not JSON"),
    ("run-world-json-edited", ("run", "edited"), INPUT, "edited after compile: recompile"),
    ("run-world-json-file-edited", ("run", "edited/world.json"), INPUT, "edited after compile"),
    ("check-fifo", ("check", "fifo.eair"), INPUT, "not a regular file"),
    ("check-binary", ("check", "binary.eair"), INPUT, "UTF-8"),
    ("compile-fifo", ("compile", "fifo.eair", "-o", "gen"), INPUT, "not a regular file"),
    ("fmt-fifo", ("fmt", "fifo.eair"), INPUT, "not a regular file"),
    ("validate-fifo", ("validate", "fifo.eair"), INPUT, "not a regular file"),
    # names and numbers
    ("run-unknown-condition", ("run", "d1", "--condition", "nope"), INPUT, "conditions are"),
    ("run-unknown-instance", ("run", "d1", "--instance", "nope"), INPUT, "instances are"),
    ("run-negative-episodes", ("run", "d1", "--episodes", "-1"), USAGE, "--episodes"),
    ("run-bad-agents", ("run", "d1", "--agents", "bogus"), INPUT, "unknown agents"),
    ("run-bad-role-model", ("run", "d1", "--role-model", "x"), INPUT, "ROLE=MODEL"),
    ("validate-zero-episodes", ("validate", "d1", "--episodes", "0"), USAGE, "--episodes"),
    ("validate-unknown-condition", ("validate", "d1", "--condition", "x"), INPUT, "conditions"),
    # outputs that cannot be written
    ("run-out-is-a-file", ("run", "d1", "--episodes", "1", "--out", "plain"), INPUT,
     "cannot write the trace"),
    ("run-out-unwritable", ("run", "d1", "--episodes", "1", "--out", "/proc/eair/x"), INPUT,
     "cannot write the trace"),
    ("compile-out-is-a-file", ("compile", "worlds/d1.eair", "-o", "plain"), USAGE,
     "not a folder"),
    ("graph-bad-extension", ("graph", "worlds/d1.eair", "-o", "x.png"), USAGE, "use .svg or .dot"),
    ("graph-unwritable", ("graph", "worlds/d1.eair", "-o", "/proc/eair/x.dot"), USAGE,
     "cannot write"),
    ("graph-missing-trace", ("graph", "nope.jsonl", "-o", "x.dot"), INPUT, "not a readable trace"),
    # cassettes
    ("replay-missing", ("run", "d1", "--replay", "nope.jsonl"), USAGE, "does not exist"),
    ("replay-not-json", ("run", "d1", "--replay", "plain"), USAGE, "not JSON"),
    ("replay-folder", ("run", "d1", "--replay", "folder"), USAGE, "not a regular file"),
    ("replay-fifo", ("run", "d1", "--replay", "fifo"), USAGE, "not a regular file"),
    ("record-unwritable", ("run", "d1", "--record", "/proc/eair/c.jsonl"), USAGE,
     "cannot be written"),
    # diff, report, export
    ("diff-missing-old", ("diff", "nope.eair", "worlds/d1.eair"), INPUT, "file not found"),
    ("diff-missing-new", ("diff", "worlds/d1.eair", "nope"), INPUT, "no compiled world"),
    ("diff-edited", ("diff", "edited", "worlds/d1.eair"), INPUT, "edited after compile"),
    ("report-not-a-store", ("report", "folder"), INPUT, "no results store"),
    ("report-a-file", ("report", "plain"), INPUT, "no results store"),
    ("export-bad-format", ("export", "folder", "--format", "xyz"), USAGE, "unknown format"),
    ("export-not-a-store", ("export", "folder"), INPUT, "no results store"),
    # studies
    ("study-zero-seeds", ("study", "d1", "--seeds", "0"), USAGE, "--seeds"),
    ("study-bad-executor", ("study", "d1", "--executor", "xyz"), USAGE, "unknown executor"),
    ("study-scheduler-without-dask", ("study", "d1", "--scheduler", "tcp://x:1"), USAGE,
     "--executor dask"),
    ("study-bad-model", ("study", "d1", "--models", "bogus", "-o", "s1"), INPUT, "bogus"),
    ("study-unknown-condition", ("study", "d1", "--conditions", "nope", "-o", "s2"), INPUT,
     "nope"),
    ("study-out-is-a-file", ("study", "d1", "-o", "plain"), USAGE, "not a folder"),
    ("study-out-unwritable", ("study", "d1", "-o", "/proc/eair/s"), INPUT,
     "cannot create the study folder"),
    ("study-same-world-twice", ("study", "d1", "d1", "-o", "s3"), INPUT, "twice"),
    ("study-fifo", ("study", "fifo.eair", "-o", "s4"), INPUT, "not a regular file"),
    ("study-edited", ("study", "edited", "-o", "s5"), INPUT, "edited after compile"),
    ("unknown-command", ("bogus",), USAGE, "No such command"),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("bad")
    shutil.copytree(ROOT / "worlds", ws / "worlds")
    shutil.copytree(ROOT / "generated" / "d1", ws / "d1")
    os.mkfifo(ws / "fifo.eair")
    os.mkfifo(ws / "fifo")
    (ws / "folder").mkdir()
    (ws / "folder.eair").mkdir()
    (ws / "binary.eair").write_bytes(bytes(range(256)) * 4)
    (ws / "empty.eair").write_bytes(b"")
    (ws / "plain").write_text("not a cassette, a store or a folder\n", encoding="utf-8")
    (ws / "notjson").mkdir()
    (ws / "notjson" / "world.json").write_text("{not json", encoding="utf-8")
    (ws / "edited").mkdir()
    text = (ROOT / "generated" / "d1" / "world.json").read_text(encoding="utf-8")
    assert '"id": "hr-1"' in text
    (ws / "edited" / "world.json").write_text(text.replace('"id": "hr-1"', '"id": "hr-9"'),
                                              encoding="utf-8")
    return ws


_LOCATED = re.compile(r"error\[E\d+\]: ")
_ONE_LINE = re.compile(r"^(\S+: )?error: ")


@pytest.mark.parametrize("args,codes,phrase", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_invocation_is_a_short_error(workspace: Path, args: tuple[str, ...],
                                         codes: set[int], phrase: str) -> None:
    proc = run_eairc(*args, cwd=workspace)  # no traceback, no internal error, no hang (60 s)
    assert proc.returncode in codes, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    err = proc.stderr.strip()
    assert phrase in err, err
    if _ONE_LINE.match(err):  # a usage error of ours (maybe naming the file): one line
        assert len(err.splitlines()) == 1, err
    elif "Usage:" not in err:  # else typer's usage text, or a located diagnostic
        assert _LOCATED.search(err), err


def test_a_fifo_world_does_not_block_even_without_a_writer(workspace: Path) -> None:
    """Reading a FIFO would wait for a writer forever; every entry point refuses it first."""
    for command in ("run", "check", "validate", "graph"):
        proc = run_eairc(command, "fifo.eair", cwd=workspace)
        assert proc.returncode == 1 and "not a regular file" in proc.stderr
