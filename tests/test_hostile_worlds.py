"""Hostile worlds: whatever a world, its data or its imports hold, the compiler answers
with located diagnostics. Nothing runs code, reads outside the world's folder (or the
stdlib), hangs, or exhausts the machine, and nothing escapes `compile_world` as an
exception.

Each case builds a small world in tmp_path from the clean base world of
docs/errors.md plus one hostile fragment or file, and names the code it must give.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eairdsl.compiler import CompileResult, compile_world
from eairdsl.diagnostics import render
from eairdsl.ir import dump_world
from eairdsl.syntax.build import MAX_NESTING
from eairdsl.syntax.fmt import format_text

BASE = """\
world w {
  risk A1
  operation "reporting a monthly KPI"
  preserves "the reported KPI matches the ledger"
}

role analyst {
  model under_test
  card "analyst.md.j2"
}

instance one { }

measure {
  opportunity = count(messages()) > 0
  anomaly = count(messages(analyst)) > 1
  realized = count(messages(analyst)) > 2
  terminal_harm = count(messages(analyst)) > 3
  interception = anomaly and not realized
  utility = final(analyst) != none
}
"""
#: the line a fragment starts on
LINE = BASE.count("\n") + 1
#: what a file outside the world's folder holds; it must never show in a diagnostic
SECRET = "TOPSECRET_7f3a"


@dataclass
class Hostile:
    """A hostile world: `fragment` appended to BASE, extra `files`, a `setup` step.

    `at` is the expected (file, line, col) of the diagnostic with `code`; col 0 means
    any column. `file` is relative to the world's folder.
    """

    id: str
    code: str
    fragment: str = ""
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], object] | None = None
    at: tuple[str, int, int] | None = ("world.eair", LINE, 1)


def _outside(root: Path) -> Path:
    """root/outside/: files next to, not inside, the world's folder root/w/."""
    folder = root / "outside"
    folder.mkdir(exist_ok=True)
    (folder / "secret.eair").write_text(f"{SECRET} {{ }}\n", encoding="utf-8")
    (folder / "secret.json").write_text(json.dumps([{"a": SECRET}]), encoding="utf-8")
    return folder


def _symlink(target: str, name: str) -> Callable[[Path], None]:
    def setup(world: Path) -> None:
        _outside(world.parent)
        os.symlink(world.parent / "outside" / target, world / name)
    return setup


def _fifo(name: str) -> Callable[[Path], None]:
    def setup(world: Path) -> None:
        os.mkfifo(world / name)
    return setup


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def setup(world: Path) -> None:
        with open(world / name, "wb") as handle:
            handle.truncate(size)
    return setup


def _chain(op: str, term: str, operators: int) -> str:
    return f" {op} ".join([term] * (operators + 1))


def _nested(open_: str, close: str, inner: str, levels: int) -> str:
    return open_ * levels + inner + close * levels


RECORD = 'record r from "r.json" { a: int }\n'
DEEP = MAX_NESTING + 1
LETS = "".join(f"let f{i}() = f{i + 1}() + 1\n" for i in range(2000)) + "let f2000() = 1\n"
FAN = "let g0() = 1\n" + "".join(f"let g{i}() = g{i - 1}() + g{i - 1}()\n" for i in range(1, 40))

HOSTILE = [
    # ------------------------------------------------------------ escaping the folder
    Hostile("import-stdlib-dotdot", "E204", 'import "stdlib/../../outside/secret.eair"\n',
            setup=lambda w: _outside(w.parent)),
    Hostile("import-stdlib-dotdot-etc-passwd", "E204",
            'import "stdlib/' + "../" * 30 + 'etc/passwd"\n'),
    Hostile("import-dotdot", "E204", 'import "../outside/secret.eair"\n',
            setup=lambda w: _outside(w.parent)),
    Hostile("import-symlink-out", "E204", 'import "m.eair"\n',
            setup=_symlink("secret.eair", "m.eair")),
    Hostile("data-symlink-out", "E204", RECORD, setup=_symlink("secret.json", "r.json")),
    Hostile("document-symlink-out", "E204", 'document doc from "d.txt"\n',
            setup=_symlink("secret.json", "d.txt")),
    Hostile("data-dotdot", "E204", 'record r from "../outside/secret.json" { a: text }\n',
            setup=lambda w: _outside(w.parent)),
    Hostile("data-absolute", "E204", 'record r from "/etc/passwd" { a: text }\n'),
    Hostile("data-dev-zero", "E204", RECORD,
            setup=lambda w: os.symlink("/dev/zero", w / "r.json")),
    Hostile("import-self", "E203", 'import "world.eair"\n'),
    # ------------------------------------------------------------ nesting
    Hostile("flat-add-chain-500", "E111", f"let x() = {_chain('+', '1', 499)}\n",
            at=("world.eair", LINE, 11)),
    Hostile("flat-and-chain-500", "E111", f"let x() = {_chain('and', 'true', 499)}\n",
            at=("world.eair", LINE, 11)),
    Hostile("add-chain-one-over", "E111", f"let x() = {_chain('+', '1', DEEP)}\n",
            at=("world.eair", LINE, 11)),
    Hostile("not-500", "E111", "let x() = " + "not " * 500 + "true\n", at=("world.eair", LINE, 0)),
    Hostile("calls-300", "E111", "let x() = " + _nested("lower(", ")", '"a"', 300) + "\n",
            at=("world.eair", LINE, 0)),
    Hostile("lists-300", "E111", f"let x() = {_nested('[', ']', '1', 300)}\n",
            at=("world.eair", LINE, 0)),
    Hostile("records-300", "E111", f"let x() = [{_nested('{a: ', '}', '1', 300)}]\n",
            at=("world.eair", LINE, 0)),
    Hostile("attrs-1000", "E111", "let x() = y" + ".a" * 1000 + "\n",
            at=("world.eair", LINE, 11)),
    Hostile("types-300", "E111", f"lever l : {_nested('list[', ']', 'int', 300)} = []\n",
            at=("world.eair", LINE, 0)),
    Hostile("let-chain-2000", "E111", LETS + "measure { metric m = f0() > 0 }\n", at=None),
    Hostile("let-doubling", "E112", FAN + "measure { metric m = g39() > 0 }\n", at=None),
    # ------------------------------------------------------------ data files
    Hostile("json-nested-10000", "E207", RECORD, {"r.json": "[" * 10_000 + "]" * 10_000}),
    Hostile("json-value-nested-40", "E207", RECORD,
            {"r.json": '[{"a": ' + "[" * 40 + "]" * 40 + "}]"}),
    Hostile("json-nan", "E207", RECORD, {"r.json": '[{"a": NaN}]'}),
    Hostile("json-infinity", "E207", RECORD, {"r.json": '[{"a": -Infinity}]'}),
    Hostile("json-1e999", "E207", RECORD, {"r.json": '[{"a": 1e999}]'}),
    Hostile("json-int-5000-digits", "E207", RECORD, {"r.json": '[{"a": 1' + "0" * 5000 + "}]"}),
    Hostile("csv-huge-cell", "E207", 'record r from "r.csv" { a: text }\n',
            {"r.csv": "a\n" + "x" * 200_000 + "\n"}),
    Hostile("data-directory", "E202", RECORD, setup=lambda w: (w / "r.json").mkdir()),
    Hostile("data-fifo", "E202", RECORD, setup=_fifo("r.json")),
    Hostile("data-too-large", "E209", RECORD, setup=_sparse("r.json", 51 * 1024 * 1024)),
    Hostile("document-too-large", "E209", 'document doc from "d.txt"\n',
            setup=_sparse("d.txt", 51 * 1024 * 1024)),
    Hostile("data-name-300-bytes", "E202", 'record r from "' + "a" * 300 + '.json" { a: int }\n'),
    Hostile("data-path-over-path-max", "E202",
            'record r from "' + "/".join(["a" * 200] * 30) + '.json" { a: int }\n'),
    # ------------------------------------------------------------ imports
    Hostile("import-fifo", "E202", 'import "m.eair"\n', setup=_fifo("m.eair")),
    Hostile("import-directory", "E202", 'import "sub"\n', setup=lambda w: (w / "sub").mkdir()),
    Hostile("import-too-large", "E209", 'import "m.eair"\n',
            setup=_sparse("m.eair", 3 * 1024 * 1024)),
    Hostile("import-name-300-bytes", "E202", 'import "' + "a" * 300 + '.eair"\n'),
    Hostile("import-chain-100", "E209", 'import "m0.eair"\n',
            {f"m{i}.eair": f'import "m{i + 1}.eair"\n' for i in range(100)}, at=None),
    # ------------------------------------------------------------ text
    Hostile("nul-after-8-KiB", "E103", "// " + "x" * 9000 + "\nlet x() = 1 \x00\n",
            at=("world.eair", LINE + 1, 13)),
]


def _build(tmp_path: Path, case: Hostile) -> Path:
    world = tmp_path / "w"
    world.mkdir()
    (world / "analyst.md.j2").write_text("You are the analyst of {{ world.name }}.\n",
                                         encoding="utf-8")
    (world / "world.eair").write_text(BASE + case.fragment, encoding="utf-8")
    for name, data in case.files.items():
        path = world / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    if case.setup is not None:
        if not hasattr(os, "mkfifo") and "fifo" in case.id:
            pytest.skip("no FIFOs on this platform")
        case.setup(world)
    return world / "world.eair"


def _compile(entry: Path) -> CompileResult:
    try:
        return compile_world(entry)
    except BaseException as exc:  # the behaviour under test: nothing escapes
        pytest.fail(f"compile_world raised {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("case", HOSTILE, ids=[c.id for c in HOSTILE])
def test_hostile_world(tmp_path: Path, case: Hostile) -> None:
    """A hostile world gives its code, located in a real file with a caret, and no exception."""
    if "etc-passwd" in case.id and not Path("/etc/passwd").is_file():
        pytest.skip("no /etc/passwd")
    result = _compile(_build(tmp_path, case))
    assert not result.ok
    found = [d for d in result.diagnostics if d.code == case.code]
    assert found, [(d.code, d.message) for d in result.diagnostics]
    d = found[0]
    assert d.span is not None, d.message
    assert d.span.line >= 1 and d.span.col >= 1
    lines = result.sources.get(d.span.file)
    assert lines is not None and d.span.line <= len(lines), (d.span, list(result.sources))
    assert "^" in render(d, result.sources), "the diagnostic shows its line with a caret"
    if case.at is not None:
        file, line, col = case.at
        assert (Path(d.span.file).name, d.span.line) == (file, line), (d.span, d.message)
        assert col in (0, d.span.col), (d.span, d.message)
    assert d.hint, "every hostile-input diagnostic says what to do"
    for other in result.diagnostics:  # nothing read from outside the folder shows
        assert SECRET not in other.message and SECRET not in (other.hint or "")
        assert "root:" not in other.message and "'root'" not in other.message


def test_outside_files_are_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import that leaves the stdlib (EAIR_STDLIB) or the world's folder opens nothing."""
    stdlib = tmp_path / "stdlib"
    stdlib.mkdir()
    (stdlib / "ok.eair").write_text("enum colour { red }\n", encoding="utf-8")
    monkeypatch.setenv("EAIR_STDLIB", str(stdlib))
    case = Hostile("x", "E204", 'import "stdlib/../outside/secret.eair"\n'
                   'import "../outside/secret.eair"\nimport "ok.eair"\n')
    entry = _build(tmp_path, case)
    _outside(tmp_path)
    opened: list[str] = []
    real_open = os.open

    def spy(path: object, *args: object, **kwargs: object) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    result = _compile(entry)
    codes = [(d.code, d.span.line if d.span else None) for d in result.diagnostics]
    assert ("E204", LINE) in codes and ("E204", LINE + 1) in codes, codes
    assert not any(p.startswith(str(tmp_path / "outside")) for p in opened), opened
    assert any(p.endswith("ok.eair") for p in opened), "the stdlib module itself is read"


def test_symlinks_inside_the_folder_are_fine(tmp_path: Path) -> None:
    """A data file reached through a symbolic link that stays inside the folder loads."""
    case = Hostile("x", "", 'record r from "link.json" { a: int }\n'
                   "measure { metric rows = count(r) > 0 }\n", {"data/r.json": ""})
    world = tmp_path / "w"
    world.mkdir()
    (world / "data").mkdir()
    (world / "data" / "r.json").write_text('[{"a": 1}]', encoding="utf-8")
    os.symlink(world / "data" / "r.json", world / "link.json")
    (world / "analyst.md.j2").write_text("You are the analyst of {{ world.name }}.\n",
                                         encoding="utf-8")
    (world / "world.eair").write_text(BASE + case.fragment, encoding="utf-8")
    result = _compile(world / "world.eair")
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]


def test_entry_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    """The world path itself naming a FIFO is E202 at once (opening one would block)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(tmp_path / "world.eair")
    result = _compile(tmp_path / "world.eair")
    assert [d.code for d in result.diagnostics] == ["E202"]


def test_entry_too_large(tmp_path: Path) -> None:
    _sparse("world.eair", 3 * 1024 * 1024)(tmp_path)
    result = _compile(tmp_path / "world.eair")
    assert [d.code for d in result.diagnostics] == ["E209"]


# ---------------------------------------------------------------- the nesting limit itself

def _deep_measure(kind: str, levels: int) -> str:
    """A boolean metric nesting exactly `levels` deep."""
    body = {
        "and": _chain("and", "true", levels),
        "add": _chain("+", "1", levels - 1) + " > 0",
        "call": _nested("lower(", ")", '"A"', levels - 1) + ' == "a"',
        "list": "count(" + _nested("[", "]", "1", levels - 2) + ") > 0",
        "record": "count([" + _nested("{a: ", "}", "1", levels - 3) + "]) > 0",
        "let": _nested("f(", ")", "1", levels - 2) + " > 0",  # f's body is one level
    }[kind]
    return f"measure {{ metric deep = {body} }}\nlet f(x: int) = x + 1\n"


def _padded(frames: int, fn: Callable[[], object]) -> object:
    """Call fn with `frames` more Python frames on the stack: headroom for callers."""
    return fn() if frames == 0 else _padded(frames - 1, fn)


@pytest.mark.parametrize("kind", ["and", "add", "call", "list", "record", "let"])
def test_at_the_limit_every_stage_has_headroom(tmp_path: Path, kind: str) -> None:
    """At exactly MAX_NESTING levels a world compiles, dumps, formats and runs an episode,
    with 300 frames to spare under the default recursion limit; one level more is E111."""
    from eairdsl.api import run_episode

    assert sys.getrecursionlimit() <= 1000 + 100, "the test is about the default limit"
    case = Hostile("x", "", _deep_measure(kind, MAX_NESTING))
    entry = _build(tmp_path, case)
    result = _padded(300, lambda: compile_world(entry))
    assert isinstance(result, CompileResult)
    assert result.ok and result.world is not None, [(d.code, d.message)
                                                    for d in result.diagnostics]
    world = result.world
    _padded(300, lambda: dump_world(world))
    text = entry.read_text(encoding="utf-8")
    formatted = _padded(300, lambda: format_text(text)[0])
    assert isinstance(formatted, str)
    _padded(300, lambda: run_episode(world, None, None, 0))
    entry.write_text(BASE + _deep_measure(kind, MAX_NESTING + 1), encoding="utf-8")
    over = compile_world(entry)
    assert [d.code for d in over.diagnostics if d.is_error] == ["E111"]


def test_parentheses_do_not_nest(tmp_path: Path) -> None:
    """5,000 parentheses around one value are no nesting at all."""
    case = Hostile("x", "", "measure { metric m = " + _nested("(", ")", "true", 5000) + " }\n")
    result = _compile(_build(tmp_path, case))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]


# ---------------------------------------------------------------- size: linear checks

def _big_world(tmp_path: Path, rows: int, instances: int, duplicate: bool) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from compile_large_data import build  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    return build(tmp_path / "big", rows, instances, duplicate)  # type: ignore[no-any-return]


def test_100000_rows_compile_and_find_the_duplicate_key(tmp_path: Path) -> None:
    """100,000 record rows compile (the duplicate-key check was quadratic: minutes)."""
    result = _compile(_big_world(tmp_path, 100_000, 0, duplicate=True))
    errors = [d for d in result.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["E208"]
    assert "duplicate key kpi-0" in errors[0].message


def test_30000_instances_compile_and_find_the_duplicate_id(tmp_path: Path) -> None:
    result = _compile(_big_world(tmp_path, 2, 30_000, duplicate=True))
    errors = [d for d in result.diagnostics if d.is_error]
    assert ("E208", "two instances have id 'i0'") in [(d.code, d.message) for d in errors]
    clean = _compile(_big_world(tmp_path / "clean", 2, 30_000, duplicate=False))
    assert clean.ok and clean.world is not None


def test_duplicate_key_check_does_not_count_per_row(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The duplicate checks count keys once (a Counter), never `list.count` per row."""
    from eairdsl.check import data

    calls: list[int] = []
    real = data.Counter  # type: ignore[attr-defined]

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object) -> None:
            calls.append(1)
            super().__init__(*args)

    monkeypatch.setattr(data, "Counter", Counting)
    result = _compile(_big_world(tmp_path, 5_000, 0, duplicate=True))
    assert [d.code for d in result.diagnostics if d.is_error] == ["E208"]
    assert 1 <= len(calls) <= 3  # one per keyed record, one for the instance ids


def test_bad_rows_are_listed_up_to_a_limit(tmp_path: Path) -> None:
    """100,000 rows with undeclared fields give a bounded list, not 100,000 diagnostics."""
    from eairdsl.check.data import MAX_ROW_ERRORS

    rows = json.dumps([{"b": i} for i in range(100_000)])
    case = Hostile("x", "E208", RECORD, {"r.json": rows})
    result = _compile(_build(tmp_path, case))
    assert MAX_ROW_ERRORS < len(result.diagnostics) <= MAX_ROW_ERRORS + 3
    assert any("at least" in d.message for d in result.diagnostics)


# ---------------------------------------------------------------- the world's data budget

def test_a_file_named_many_times_is_counted_each_time_against_the_data_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file had its own bound (50 MB) but a world none: 20 records naming one 43 MB
    file took 1.9 GB to check. A world now loads at most `Limits.data_bytes` of data
    files, documents and cards together, a file counted each time it is named; the
    declaration that would cross it is one E209, and no file past it is read. Here 20
    records name one 1,001-byte file under a budget of 10,000 bytes (the card's 41
    bytes count too): the 10th record crosses it."""
    from eairdsl.check import Limits, check_world
    from eairdsl.check import data as data_module
    from eairdsl.diagnostics import Diagnostics

    rows = json.dumps([{"a": "x" * 990}])
    assert len(rows) == 1001
    records = "".join(f'record r{i} from "r.json" {{ a: text }}\n' for i in range(20))
    entry = _build(tmp_path, Hostile("x", "E209", records, {"r.json": rows}))
    read: list[int] = []
    real = data_module.read_bounded

    def counting(path: Path, limit: int, what: str = "file") -> bytes:
        data = real(path, limit, what)
        read.append(len(data))
        return data

    monkeypatch.setattr(data_module, "read_bounded", counting)
    diagnostics = Diagnostics()
    world = check_world(entry, diagnostics, limits=Limits(data_bytes=10_000))
    errors = [d for d in diagnostics if d.is_error]
    assert [d.code for d in errors] == ["E209"], [(d.code, d.message) for d in errors]
    (found,) = errors
    assert found.span is not None and found.span.line == LINE + 9  # record r9
    assert "data budget of" in found.message and "r.json" in found.message
    assert world is not None and world.data_loaded == sum(read) == 9 * 1001 + 41
    assert world.data_loaded <= 10_000


def test_the_default_data_budget_admits_a_file_named_a_few_times(tmp_path: Path) -> None:
    """The same world under the default budget (100 MB) checks clean."""
    rows = json.dumps([{"a": "x" * 990}])
    records = "".join(f'record r{i} from "r.json" {{ a: text }}\n' for i in range(20))
    result = _compile(_build(tmp_path, Hostile("x", "", records, {"r.json": rows})))
    assert not [d for d in result.diagnostics if d.is_error]


# ---------------------------------------------------------------- patterns are not regexes

def test_patterns_are_literal_phrases_not_regular_expressions(tmp_path: Path) -> None:
    """`patterns [...]` phrases are matched as text (docs/language.md): `(a+)+$` finds
    itself, not `aaaa`, so no pattern can backtrack catastrophically."""
    from eairdsl.api import run_episode

    long_a = "a" * 5000 + "!"
    fragment = (
        'record r from "r.json" key a { a: text  b: text patterns ["(a+)+$"]  group g = b }\n'
        "measure {\n"
        '  metric literal = pattern_hits(lookup(r, "k"), r.g, "it says (a+)+$ here") == 1\n'
        f'  metric regex_like = pattern_hits(lookup(r, "k"), r.g, "{long_a}") == 0\n'
        "}\n")
    case = Hostile("x", "", fragment, {"r.json": '[{"a": "k", "b": "v"}]'})
    result = _compile(_build(tmp_path, case))
    assert result.ok and result.world is not None, [(d.code, d.message)
                                                    for d in result.diagnostics]
    episode = run_episode(result.world, None, None, 0)
    assert episode.metrics["literal"] is True, episode.unassessed
    assert episode.metrics["regex_like"] is True
