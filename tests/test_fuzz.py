"""Fuzzing the front end: whatever the input, the compiler answers with diagnostics, never raises.

Hypothesis runs derandomized (the same examples every run, no example database), so
a failure here is reproducible and the suite stays fast.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eairdsl.check import check_world
from eairdsl.compiler import CompileResult, compile_world
from eairdsl.diagnostics import Diagnostics
from eairdsl.syntax.parser import TOP_LEVEL_KEYWORDS, parse_text

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
COMPACT = ROOT / "tests" / "fixtures" / "compact" / "compact.eair"


#: EAIR_FUZZ_SCALE=17 runs about 10,000 inputs instead of about 600 (a long run, not CI's).
SCALE = max(1, int(os.environ.get("EAIR_FUZZ_SCALE", "1") or 1))


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=True,
                    database=None, suppress_health_check=[HealthCheck.too_slow])



# Tokens of the language, so that random "programs" get past the first character.
TOKENS = [*TOP_LEVEL_KEYWORDS, "{", "}", "(", ")", "[", "]", ",", ":", ".", "=", "==", "!=",
          "<", ">=", "->", "+", "-", "*", "/", "%", "and", "or", "not", "in", "for", "where",
          "when", "else", "reject", "kind", "read", "cost", "text", "risk", "title", "true",
          "none", "x", "y", "employee", "instance", "context", "count", "all", "exists", "1",
          "2.5", "$40", "6 min", "18%", "2026-01-31", '"s"', '"""long"""', '"open', "+0.3",
          "// c", "@", "\n", " ", "\t", ";", "a, b: text", "x: int;"]


def _line_count(text: str) -> int:
    return text.count("\n") + 1


@fuzz(100)
@given(st.one_of(st.text(max_size=300),
                 st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_parse_random_text(text: str) -> None:
    """Random text (or bytes read as Latin-1) parses to a module or to located errors, no raise."""
    module, diagnostics = parse_text(text, "fuzz.eair")
    if module is None:
        assert diagnostics.has_errors
    for d in diagnostics:
        assert d.span is not None and d.span.file == "fuzz.eair"
        assert 1 <= d.span.line <= _line_count(text) and d.span.col >= 1


@fuzz(100)
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_parse_token_soup(text: str) -> None:
    """Random token sequences give errors on strictly increasing lines, inside the text."""
    module, diagnostics = parse_text(text, "soup.eair")
    assert (module is None) == diagnostics.has_errors
    lines = [d.span.line for d in diagnostics if d.span is not None]
    assert len(lines) == len(diagnostics)
    assert lines == sorted(set(lines)), "recovery must move forward one line at least"
    assert all(1 <= line <= _line_count(text) for line in lines)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="eair-fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@fuzz(100)
@given(data=st.one_of(st.binary(max_size=300),
                      st.text(max_size=300).map(lambda t: t.encode("utf-8"))))
def test_check_world_random_bytes(scratch: Path, data: bytes) -> None:
    """Random bytes in a world file give diagnostics (or a checked world), never an exception."""
    path = scratch / "random.eair"
    path.write_bytes(data)
    diagnostics = Diagnostics()
    checked = check_world(path, diagnostics)
    if checked is None:
        assert diagnostics.has_errors
    assert all(d.span is None or d.span.line >= 1 for d in diagnostics)


# ---------------------------------------------------------------- mutated copies of d1

@pytest.fixture(scope="module")
def d1_copy() -> Iterator[Path]:
    """worlds/d1.eair with its data folder, copied once; each example rewrites the .eair."""
    folder = Path(tempfile.mkdtemp(prefix="eair-d1-"))
    shutil.copytree(ROOT / "worlds" / "d1", folder / "d1")
    yield folder / "d1.eair"
    shutil.rmtree(folder, ignore_errors=True)


_TOKEN = re.compile(r'"[^"\n]*"|[^\s"]+|"')
Mutation = tuple[str, int, int]
MUTATIONS = st.lists(st.tuples(
    st.sampled_from(["del_line", "dup_line", "swap_lines", "del_token", "dup_token",
                     "swap_tokens", "copy_token", "chain_plus", "chain_and", "nest_parens",
                     "nest_calls", "nest_lists"]),
    st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=3)

# Operators that found the deep-expression crashes: token a becomes a chain or a nest
# of b % 400 + 1 copies / levels (past the parser's nesting limit about 3 times in 4).
_GROW: dict[str, Callable[[str, int], str]] = {
    "chain_plus": lambda t, n: " + ".join([t] * n),
    "chain_and": lambda t, n: " and ".join([t] * n),
    "nest_parens": lambda t, n: "(" * n + t + ")" * n,
    "nest_calls": lambda t, n: "count(" * n + t + ")" * n,
    "nest_lists": lambda t, n: "[" * n + t + "]" * n,
}


def mutate(text: str, ops: list[Mutation]) -> str:
    for op, a, b in ops:
        if op.endswith("line") or op.endswith("lines"):
            lines = text.split("\n")
            i, j = a % len(lines), b % len(lines)
            if op == "del_line":
                del lines[i]
            elif op == "dup_line":
                lines.insert(i, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
            continue
        spans = [m.span() for m in _TOKEN.finditer(text)]
        if not spans:
            continue
        if op in _GROW:
            s1, e1 = spans[a % len(spans)]
            text = text[:s1] + _GROW[op](text[s1:e1], b % 400 + 1) + text[e1:]
            continue
        (s1, e1), (s2, e2) = sorted([spans[a % len(spans)], spans[b % len(spans)]])
        if op == "del_token":
            text = text[:s1] + text[e1:]
        elif op == "dup_token":
            text = text[:e1] + " " + text[s1:e1] + text[e1:]
        elif op == "copy_token":  # overwrite one token with another: mostly still parses
            (s1, e1), (s2, e2) = spans[a % len(spans)], spans[b % len(spans)]
            text = text[:s1] + text[s2:e2] + text[e1:]
        elif (s1, e1) != (s2, e2):
            text = text[:s1] + text[s2:e2] + text[e1:s2] + text[s1:e1] + text[e2:]
    return text


def _lines_of(result: CompileResult, file: str, world: Path) -> int | None:
    if file in result.sources:
        return len(result.sources[file])
    for candidate in (Path(file), world.parent / file):
        if candidate.is_file():
            return _line_count(candidate.read_text(encoding="utf-8", errors="replace"))
    return None


def test_mutate_changes_text() -> None:
    """The mutator really edits the world (deleting, duplicating and swapping lines or tokens)."""
    text = D1.read_text(encoding="utf-8")
    assert mutate(text, [("del_line", 7, 0)]) != text
    assert mutate(text, [("dup_token", 3, 0)]) != text
    assert mutate("a b", [("swap_tokens", 0, 1)]) == "b a"
    assert mutate("a\nb", [("swap_lines", 0, 1)]) == "b\na"
    assert mutate("a b c", [("copy_token", 2, 0)]) == "a b a"
    assert mutate("x = a", [("chain_plus", 2, 2)]) == "x = a + a + a"
    assert mutate("x = a", [("nest_calls", 2, 1)]) == "x = count(count(a))"
    assert mutate("x = a", [("chain_and", 2, 399)]).count(" and ") == 399


@fuzz(100)
@given(ops=MUTATIONS)
def test_mutated_d1_compiles_or_reports(d1_copy: Path, ops: list[Mutation]) -> None:
    """A mutated D1 compiles, or reports at least one error located inside a real file."""
    text = mutate(D1.read_text(encoding="utf-8"), ops)
    d1_copy.write_text(text, encoding="utf-8")
    result = compile_world(d1_copy)
    if result.ok:
        assert result.world is not None
        return
    assert result.world is None
    errors = [d for d in result.diagnostics if d.is_error]
    assert errors
    located = []
    for d in errors:
        if d.span is None:
            continue
        count = _lines_of(result, d.span.file, d1_copy)
        assert count is None or 1 <= d.span.line <= count, (d.code, d.span, d.message)
        if count is not None:
            located.append(d)
    assert located, [(d.code, d.message) for d in errors]


@pytest.fixture(scope="module")
def compact_copy() -> Iterator[Path]:
    """tests/fixtures/compact/compact.eair (the compact form) with its folder, copied once."""
    folder = Path(tempfile.mkdtemp(prefix="eair-compact-"))
    shutil.copytree(COMPACT.parent / "payables", folder / "payables")
    yield folder / "payables.eair"
    shutil.rmtree(folder, ignore_errors=True)


@fuzz(60)
@given(ops=MUTATIONS)
def test_mutated_compact_world_compiles_or_reports(compact_copy: Path,
                                                   ops: list[Mutation]) -> None:
    """A mutated world in the compact form (field lists, `;` between items, one-line
    blocks) compiles, or reports errors located inside it; never an exception. The
    formatter keeps the meaning of whatever still parses."""
    from eairdsl.syntax.fmt import format_text

    text = mutate(COMPACT.read_text(encoding="utf-8"), ops)
    compact_copy.write_text(text, encoding="utf-8")
    result = compile_world(compact_copy)
    formatted, _ = format_text(text, compact_copy.name)  # raises if it changed the meaning
    if result.ok:
        assert result.world is not None and formatted is not None
        return
    errors = [d for d in result.diagnostics if d.is_error]
    assert errors
    located = []
    for d in errors:
        count = _lines_of(result, d.span.file, compact_copy) if d.span is not None else None
        assert count is None or 1 <= d.span.line <= count, (d.code, d.span, d.message)  # type: ignore[union-attr]
        if count is not None:
            located.append(d)
    assert located, [(d.code, d.message) for d in errors]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["id", "name", "rating", "team", "extra"]), inner, max_size=4),
    max_leaves=12)


@fuzz(60)
@given(value=JSON)
def test_random_data_file_in_d1(d1_copy: Path, value: object) -> None:
    """Any JSON value in a D1 data file gives data diagnostics on its record, not an exception."""
    d1_copy.write_text(D1.read_text(encoding="utf-8"), encoding="utf-8")
    hr = d1_copy.parent / "d1" / "hr.json"
    original = (ROOT / "worlds" / "d1" / "hr.json").read_text(encoding="utf-8")
    try:
        hr.write_text(json.dumps(value), encoding="utf-8")
        result = compile_world(d1_copy)
    finally:
        hr.write_text(original, encoding="utf-8")
    codes = {d.code for d in result.diagnostics if d.is_error}
    assert result.ok or codes, "a failed compile must say why"
    assert codes <= {"E207", "E208"}, codes


DATA_MUTATIONS = st.lists(st.tuples(
    st.sampled_from(["dup_row", "many_rows", "deep_value", "huge_text", "drop_field"]),
    st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=3)


def mutate_rows(rows: list[dict[str, object]], ops: list[Mutation]) -> list[dict[str, object]]:
    """Data-file mutations that found the quadratic and recursive data checks."""
    rows = [dict(r) for r in rows]
    for op, a, b in ops:
        if not rows:
            break
        row = rows[a % len(rows)]
        name = sorted(row)[b % len(row)] if row else "id"
        if op == "dup_row":  # the duplicate-key check
            rows.insert(a % len(rows), dict(row))
        elif op == "many_rows":  # up to 5,000 rows, most of them duplicates
            rows = [dict(r) for _ in range(1 + (b % 5_000) // len(rows)) for r in rows]
        elif op == "deep_value":  # a value nested up to 500 levels
            row[name] = json.loads("[" * (b % 500 + 1) + "]" * (b % 500 + 1))
        elif op == "huge_text":  # one text of up to 100,000 characters
            row[name] = "x" * (b % 100_000)
        else:
            row.pop(name, None)
    return rows


@fuzz(30)
@given(ops=DATA_MUTATIONS)
def test_mutated_d1_data_compiles_or_reports(d1_copy: Path, ops: list[Mutation]) -> None:
    """Duplicated, multiplied, deepened or emptied rows of a D1 data file give data
    diagnostics (E207/E208, E209 for a file over the size limit) on the record, or
    compile; never an exception."""
    d1_copy.write_text(D1.read_text(encoding="utf-8"), encoding="utf-8")
    hr = d1_copy.parent / "d1" / "hr.json"
    original = (ROOT / "worlds" / "d1" / "hr.json").read_text(encoding="utf-8")
    try:
        rows = mutate_rows(json.loads(original), ops)
        try:
            text = json.dumps(rows)
        except RecursionError:  # the mutation nested deeper than json.dumps goes
            return
        hr.write_text(text, encoding="utf-8")
        result = compile_world(d1_copy)
    finally:
        hr.write_text(original, encoding="utf-8")
    codes = {d.code for d in result.diagnostics if d.is_error}
    assert result.ok or codes, "a failed compile must say why"
    assert codes <= {"E207", "E208", "E209"}, codes
    assert all(d.span is not None for d in result.diagnostics if d.is_error)


# ---------------------------------------------------------------- mutated copies of the rest

@pytest.fixture(scope="module", params=["a1", "b1", "c1"])
def world_copy(request: pytest.FixtureRequest) -> Iterator[Path]:
    """Another world with its data (and the stdlib it imports), copied once per module."""
    name = request.param
    folder = Path(tempfile.mkdtemp(prefix=f"eair-{name}-"))
    shutil.copytree(ROOT / "worlds" / name, folder / name)
    shutil.copytree(ROOT / "eairdsl" / "stdlib", folder / "stdlib")
    yield folder / f"{name}.eair"
    shutil.rmtree(folder, ignore_errors=True)


@fuzz(40)
@given(ops=MUTATIONS)
def test_mutated_worlds_compile_and_run_or_report(world_copy: Path, ops: list[Mutation]) -> None:
    """Warnings on tool calls, live dashboards, computed recipients and gated channels
    (A1, B1, C1) survive mutation: a located error, or a world whose episode runs."""
    from eairdsl.api import UsageError, run_episode

    source = ROOT / "worlds" / world_copy.name
    world_copy.write_text(mutate(source.read_text(encoding="utf-8"), ops), encoding="utf-8")
    result = compile_world(world_copy)
    if not result.ok:
        errors = [d for d in result.diagnostics if d.is_error]
        assert errors and any(d.span is not None for d in errors)
        return
    assert result.world is not None
    try:
        episode = run_episode(result.world, None, None, 0)  # an invalid episode is fine
    except UsageError:
        return  # e.g. a world left without task instances: a message, not a crash
    assert set(episode.measurements) >= {"realized", "utility"}


# ---------------------------------------------------------------- names and streamed JSON

#: a tiny world naming one path three ways (a record's data file, a document, a card), or
#: as an import (an import that fails stops the check before the rest is looked at)
NAMED = """world w {{
  risk A1
  operation "reporting"
  preserves "the KPI matches"
}}
{imports}
record r from {path} {{ a: text }}
document d from {path}
instance one {{ }}
role analyst {{
  model under_test
  card {path}
}}
measure {{
  opportunity = count(messages()) > 0
  anomaly = count(r) > 1
  realized = count(messages(analyst)) > 2
  terminal_harm = count(messages(analyst)) > 3
  interception = anomaly and not realized
  utility = final(analyst) != none
}}
"""
PATHS = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(max_codepoint=0x9f), max_size=20),
    st.lists(st.sampled_from(["a", "é", "\x00", "\n", "\x7f", "\ud800", "/", "..", "a" * 200,
                              "é" * 130, "x.json"]), max_size=30).map("".join))


@fuzz(40)
@given(path=PATHS)
def test_any_path_a_world_writes_is_a_located_error_or_a_file(scratch: Path,
                                                              path: str) -> None:
    """Whatever a world writes as a path (control characters, NUL, lone surrogates, names
    over 255 bytes, paths over 4096), the check answers with diagnostics located in the
    world file, never an exception (a card name over 255 bytes was an internal error in
    5 of 3,910 fuzzed sources; a lone surrogate, in every position)."""
    world = scratch / "named.eair"
    written = json.dumps(path)
    for imports in ("", f"import {written}"):
        world.write_text(NAMED.format(path=written, imports=imports), encoding="utf-8")
        diagnostics = Diagnostics()
        check_world(world, diagnostics)
        errors = [d for d in diagnostics if d.is_error]
        assert errors  # no such file, at least
        for d in errors:
            assert d.span is not None and Path(d.span.file).name == "named.eair", \
                (d.code, d.span, d.message)
        if re.search("[\x00-\x1f\x7f-\x9f\ud800-\udfff]", path):
            assert {d.code for d in errors} == {"E210"}, [(d.code, d.message) for d in errors]


@fuzz(60)
@given(value=st.lists(JSON, max_size=6), chunk=st.integers(1, 64),
       indent=st.sampled_from([None, 1]))
def test_streamed_json_records_are_what_json_loads_reads(scratch: Path, value: list[object],
                                                         chunk: int, indent: int | None) -> None:
    """An import source's records, read a few bytes at a time (`stream.json_values`),
    are the list `json.loads` reads from the whole file."""
    from eairdsl.external import stream

    source = scratch / "records.json"
    source.write_text(json.dumps(value, indent=indent, ensure_ascii=False), encoding="utf-8")
    saved, stream._CHUNK = stream._CHUNK, chunk
    try:
        assert list(stream.json_values(source, lines=False)) == value
    finally:
        stream._CHUNK = saved
