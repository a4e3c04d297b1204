"""Role cards are untrusted input: they render in jinja2's immutable sandbox, with bounds.

Worlds may be written by an LLM, so a card that reaches for Python internals,
includes a file from outside the world's folder, loops for ever, builds a huge
string or nests too deeply must give a located diagnostic — never run, hang,
leak the file, or raise out of the compiler. Each test appends a payload to
the card of a copy of docs/examples/first_world (both desks share that card).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from eairdsl.check import check_world
from eairdsl.compiler import CompileResult, compile_world
from eairdsl.diagnostics import Diagnostics
from eairdsl.ir import dump_world

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
CARD_LINES = len((EXAMPLES / "first_world" / "desk.md.j2").read_text().splitlines())
PAYLOAD_LINE = CARD_LINES + 1
SECRET = "OUTSIDE-SECRET-7f3a"


def _world(tmp_path: Path, payload: str) -> Path:
    """A copy of first_world whose card ends with `payload` (on line PAYLOAD_LINE)."""
    folder = tmp_path / "world"
    if not folder.exists():
        shutil.copytree(EXAMPLES, folder)
    card = folder / "first_world" / "desk.md.j2"
    text = card.read_text(encoding="utf-8")
    assert text.endswith("\n")
    card.write_text(text + payload + "\n", encoding="utf-8")
    return folder / "first_world.eair"


def _codes(result: CompileResult) -> set[tuple[str, str, int]]:
    return {(d.code, Path(d.span.file).name if d.span else "", d.span.line if d.span else 0)
            for d in result.diagnostics}


def _assert_located(result: CompileResult, code: str, line: int = PAYLOAD_LINE,
                    file: str = "desk.md.j2") -> None:
    assert not result.ok and result.world is None
    assert _codes(result) == {(code, file, line)}, [
        (d.code, d.span, d.message) for d in result.diagnostics]
    assert len(list(result.diagnostics)) == 2  # one per desk: desk_a and desk_b


# Each payload would create MARK if it ran. Python internals, the names web frameworks
# hand templates, attribute names built at run time, `|attr`, `|format`, `str.format`.
_SSTI = [
    "{{ cycler.__init__.__globals__.os.popen('touch MARK').read() }}",
    "{{ joiner.__init__.__globals__.os.popen('touch MARK').read() }}",
    "{{ namespace.__init__.__globals__.os.popen('touch MARK').read() }}",
    "{{ lipsum.__globals__['os'].popen('touch MARK').read() }}",
    "{{ lipsum.__globals__.__builtins__.eval(\"__import__('os').system('touch MARK')\") }}",
    "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == "
    "'catch_warnings' %}{{ c()._module.__builtins__['open']('MARK', 'w').write('x') }}"
    "{% endif %}{% endfor %}",
    "{{ [].__class__.__base__.__subclasses__() }}",
    "{{ self.__init__.__globals__.__builtins__.open('MARK', 'w').write('x') }}",
    "{{ self._TemplateReference__context.cycler.__init__.__globals__.os"
    ".popen('touch MARK').read() }}",
    "{{ config.items() }}",
    "{{ config.__class__.__init__.__globals__['os'].popen('touch MARK').read() }}",
    "{{ request.application.__globals__.__builtins__.__import__('os')"
    ".popen('touch MARK').read() }}",
    "{{ ''|attr('__class__') }}",
    "{{ (lipsum|attr('__globals__')).os.popen('touch MARK').read() }}",
    "{{ (lipsum|attr('__glo' ~ 'bals__'))['os'].popen('touch MARK').read() }}",
    "{{ joiner|attr('\\x5f\\x5finit\\x5f\\x5f') }}",
    "{% set x = cycler.__init__.__globals__ %}{{ x.os.popen('touch MARK').read() }}",
    "{% set x = cycler.__init__.__globals__ %}",
    "{% set g = lipsum|attr(['_', '_globals_', '_']|join) %}"
    "{{ g.os.popen('touch MARK').read() }}",
    "{% set u = '%c%c'|format(95, 95) %}"
    "{{ (lipsum|attr(u ~ 'globals' ~ u)).os.popen('touch MARK').read() }}",
    "{% set u = '%c%c'|format(95, 95) %}{{ (''|attr(u ~ 'class' ~ u)).mro() }}",
    "{{ '{0.__init__.__globals__}'.format(cycler) }}",
    "{{ '{0._TemplateReference__context}'.format(self) }}",
    "{{ range.__self__ }}",
    "{{ cycler['__init__']['__globals__'] }}",
    "{{ levers.items.__self__ }}",
    "{% with a = cycler.__init__ %}{{ a }}{% endwith %}",
    "{{ namespace()._Namespace__attrs }}",
    "{{ roles.append('x') }}{{ roles.pop() }}",
    "{{ levers.update({'budget': 0}) }}",
    "{{ __builtins__ }}",
]


@pytest.mark.parametrize("payload", _SSTI, ids=[f"ssti{i}" for i in range(len(_SSTI))])
def test_template_injection_is_a_located_error_and_never_runs(tmp_path: Path,
                                                              payload: str) -> None:
    """Each injection payload fails compile with E604 at the card's line and runs nothing."""
    mark = tmp_path / "pwned"
    entry = _world(tmp_path, payload.replace("MARK", str(mark)))
    result = compile_world(entry)
    _assert_located(result, "E604")
    assert not mark.exists()


def test_the_payload_from_the_report_would_run_without_the_sandbox(tmp_path: Path) -> None:
    """Control: the first payload, rendered by a plain jinja2 Environment, does create MARK."""
    import jinja2

    mark = tmp_path / "pwned"
    jinja2.Environment().from_string(_SSTI[0].replace("MARK", str(mark))).render()
    assert mark.exists()


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md.j2").write_text(f"{SECRET}\n", encoding="utf-8")
    return outside


def _prompts(entry: Path) -> str:
    """Everything the cards rendered to (also when compile fails), and every message."""
    diagnostics = Diagnostics()
    checked = check_world(entry, diagnostics)
    assert checked is not None
    texts = [t for by in checked.prompts.values() for t in by.values()]
    return "\n".join(texts + [d.message for d in diagnostics])


@pytest.mark.parametrize("tag", ["include", "import", "extends", "from"])
def test_a_partial_symlinked_to_outside_is_refused(tmp_path: Path, tag: str) -> None:
    """A partial that is a symlink to a file outside the world's folder is E605; not read."""
    outside = _outside(tmp_path)
    statement = {"include": '{% include "leak.md.j2" %}',
                 "import": '{% import "leak.md.j2" as leak %}',
                 "extends": '{% extends "leak.md.j2" %}',
                 "from": '{% from "leak.md.j2" import x %}'}[tag]
    entry = _world(tmp_path, statement)
    (entry.parent / "first_world" / "leak.md.j2").symlink_to(outside / "secret.md.j2")
    _assert_located(compile_world(entry), "E605")
    assert SECRET not in _prompts(entry)


def test_a_folder_symlinked_to_outside_is_refused(tmp_path: Path) -> None:
    """An include through a symlinked folder that leads outside the world's folder is E605."""
    outside = _outside(tmp_path)
    entry = _world(tmp_path, '{% include "shared/secret.md.j2" %}')
    (entry.parent / "first_world" / "shared").symlink_to(outside, target_is_directory=True)
    _assert_located(compile_world(entry), "E605")
    assert SECRET not in _prompts(entry)


@pytest.mark.parametrize("name", ["../../etc/passwd", "../../outside/secret.md.j2",
                                  "/etc/passwd", "ABSOLUTE", "~/secret.md.j2",
                                  "sub/../../../outside/secret.md.j2"])
def test_includes_outside_the_world_folder_are_refused(tmp_path: Path, name: str) -> None:
    """`..` out of the world's folder, absolute and home paths are E605 at the include."""
    outside = _outside(tmp_path)
    name = str(outside / "secret.md.j2") if name == "ABSOLUTE" else name
    entry = _world(tmp_path, f"Before.\n{{% include {json.dumps(name)} %}}")
    _assert_located(compile_world(entry), "E605", line=PAYLOAD_LINE + 1)
    assert SECRET not in _prompts(entry)


def test_partials_inside_the_world_folder_still_work(tmp_path: Path) -> None:
    """A partial next to the card, one in a sibling folder, and an inside symlink render."""
    entry = _world(tmp_path, '{% include "part.md.j2" %}{% include "../common/c.md.j2" %}'
                             '{% include "link.md.j2" %}')
    folder = entry.parent / "first_world"
    (folder / "part.md.j2").write_text("PART {{ role.name }}\n", encoding="utf-8")
    (entry.parent / "common").mkdir()
    (entry.parent / "common" / "c.md.j2").write_text("COMMON\n", encoding="utf-8")
    (folder / "link.md.j2").symlink_to(folder / "part.md.j2")
    result = compile_world(entry)
    assert result.ok and result.world is not None, [d.message for d in result.diagnostics]
    prompt = result.world.prompts["desk_a"]["baseline"]
    assert "PART desk_a" in prompt and "COMMON" in prompt
    refs = {s.ref for s in result.world.sources}
    assert {"first_world/part.md.j2", "common/c.md.j2", "first_world/link.md.j2"} <= refs


# Each payload is bounded: a located E606 (a bound) or E607 (nesting), quickly.
_BIG = [
    ("{{ range(10**10)|list }}", "E606"),
    ("{% for i in range(10**10) %}{% endfor %}", "E606"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "E606"),
    ("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}"
     "{% endfor %}{% endfor %}{% endfor %}", "E606"),
    ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "E606"),
    ("{% set s %}{% for i in range(100000) %}{{ 'b' * 99999 }}{% endfor %}{% endset %}",
     "E606"),
    ("{% set ns = namespace(s='a' * 900000) %}{% for i in range(30) %}"
     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "E606"),
    ("{% set ns = namespace(s='a' * 900000) %}{% for i in range(30) %}"
     "{% set ns.s = ns.s + ns.s %}{% endfor %}", "E606"),
    ("{{ 'a' * 10**9 }}", "E606"),
    ("{{ 10 ** (10 ** 10) }}", "E606"),
    ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
     "{% endfor %}", "E606"),
    ("{{ 'x'|center(10**9) }}", "E606"),
    ("{{ 'x'.ljust(10**9) }}", "E606"),
    ("{{ '%1000000000s'|format(1) }}", "E606"),
    ("{{ '%*s' % (10**9, 'x') }}", "E606"),
    ("{{ '{:>1000000000}'.format(1) }}", "E606"),
    ("{{ '{:>{}}'.format(1, 10**9) }}", "E606"),
    ("{{ ('a' * 999999)|replace('a', 'bb') }}", "E606"),
    ("{{ ('a' * 999999).replace('a', 'bb') }}", "E606"),
    ("{{ ('a' * 999)|join('b' * 9999) }}", "E606"),
    ("{{ lipsum(100000) }}", "E606"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "E607"),
    ("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", "E607"),
    ("{% for x in range(100000) recursive %}{{ loop(range(100000)) if loop.depth < 3 }}"
     "{% endfor %}", "E606"),
]


@pytest.mark.parametrize(("payload", "code"), _BIG, ids=[f"big{i}" for i in range(len(_BIG))])
def test_unbounded_work_stops_quickly_with_a_located_diagnostic(tmp_path: Path, payload: str,
                                                                code: str) -> None:
    """Huge ranges, nested loops, huge strings and recursion end in seconds, located."""
    entry = _world(tmp_path, payload)
    start = time.monotonic()
    result = compile_world(entry)
    assert time.monotonic() - start < 120  # a hang guard: the budgets end it, located below
    _assert_located(result, code)


@pytest.mark.parametrize("payload", [
    "{{ " + "f(" * 300 + ")" * 300 + " }}",
    "{{ " + "(" * 80 + "1" + ")" * 80 + " }}",
    "{{ " + "[" * 300 + "]" * 300 + " }}",
    "{{ " + "-" * 3000 + "1 }}",
    "{% if " + "not " * 3000 + "true %}{% endif %}",
], ids=["calls", "parens", "lists", "minus", "nots"])
def test_deep_nesting_is_a_located_diagnostic_not_an_exception(tmp_path: Path,
                                                               payload: str) -> None:
    """300 nested calls, 80 nested parentheses and the like are E607 at the card's line."""
    _assert_located(compile_world(_world(tmp_path, payload)), "E607")


def test_a_huge_card_file_is_bounded(tmp_path: Path) -> None:
    """A card longer than the template-size bound is E606 instead of a slow compile."""
    result = compile_world(_world(tmp_path, "x" * 1_100_000))
    assert {d.code for d in result.diagnostics} == {"E606"}


#: 50,000 unclosed `{{` in a raw block (100 KB), then an undefined variable in a tag
UNCLOSED = "{% raw %}" + "{{" * 50_000 + "{% endraw %}{% if zz %}{% endif %}"


def test_locating_a_variable_after_many_unclosed_tags_is_linear(tmp_path: Path) -> None:
    """E602 looked for the variable's tag with `\\{\\{.*?\\}\\}|\\{%.*?%\\}`, which tries
    every `{{` against the rest of the card: this 100 KB card took over 200 s (8 KB: 1.2 s).
    The tags are now found in one pass; the position is the same."""
    result = compile_world(_world(tmp_path, UNCLOSED))
    found = [(d.code, Path(d.span.file).name, d.span.line, d.span.col)
             for d in result.diagnostics if d.span]
    assert found == [("E602", "desk.md.j2", PAYLOAD_LINE, UNCLOSED.index("zz") + 1)], found


def test_locating_a_long_forbidden_word_is_linear(tmp_path: Path) -> None:
    """E603 found a forbidden word in the card with a case-insensitive regular expression,
    which compares the word at every offset: a 2,001-character word after 300,000
    characters that almost match it took 116 s for two desks under two conditions. The
    card is now lower-cased once and searched with `str.find`; the position is the same."""
    word = "x" * 2000 + "y"
    entry = _world(tmp_path, "X" * 300_000 + word.upper())
    text = entry.read_text(encoding="utf-8")
    entry.write_text(text.replace('forbid ["capture", "hoard"]',
                                  f'forbid ["capture", "hoard", "{word}"]'), encoding="utf-8")
    result = compile_world(entry)
    found = {(d.code, Path(d.span.file).name, d.span.line, d.span.col)
             for d in result.diagnostics if d.span}
    assert found == {("E603", "desk.md.j2", PAYLOAD_LINE, 300_001)}, found
    assert len(list(result.diagnostics)) == 4  # two desks under two conditions


def test_an_unsafe_partial_is_located_in_the_partial(tmp_path: Path) -> None:
    """A payload in an included partial is E604 at the partial's line, and never runs."""
    mark = tmp_path / "pwned"
    entry = _world(tmp_path, '{% include "part.md.j2" %}')
    (entry.parent / "first_world" / "part.md.j2").write_text(
        "Fine.\n{{ cycler.__init__.__globals__.os.popen('touch " + str(mark) + "').read() }}\n",
        encoding="utf-8")
    _assert_located(compile_world(entry), "E604", line=2, file="part.md.j2")
    assert not mark.exists()


def test_a_render_error_in_a_partial_points_into_the_partial(tmp_path: Path) -> None:
    """An undefined attribute read in a partial is E602 at that partial's line."""
    entry = _world(tmp_path, '{% include "part.md.j2" %}')
    (entry.parent / "first_world" / "part.md.j2").write_text(
        "Fine.\n\n{{ role.nope }}\n", encoding="utf-8")
    _assert_located(compile_world(entry), "E602", line=3, file="part.md.j2")


def _digest(entry: Path) -> tuple[str, dict[str, str]]:
    result = compile_world(entry)
    assert result.ok and result.world is not None, [d.message for d in result.diagnostics]
    data = json.loads(dump_world(result.world))
    return data["digest"], {s["ref"]: s["sha256"] for s in data["sources"]}


def test_editing_a_partial_changes_the_world_digest(tmp_path: Path) -> None:
    """C1's cards include _footer.md.j2: editing only that partial changes world.json's digest."""
    shutil.copy(ROOT / "worlds" / "c1.eair", tmp_path / "c1.eair")
    shutil.copytree(ROOT / "worlds" / "c1", tmp_path / "c1")
    before, sources = _digest(tmp_path / "c1.eair")
    assert "c1/_footer.md.j2" in sources
    footer = tmp_path / "c1" / "_footer.md.j2"
    footer.write_text(footer.read_text(encoding="utf-8") + "\nKeep it short.\n",
                      encoding="utf-8")
    after, changed = _digest(tmp_path / "c1.eair")
    assert after != before
    assert {ref for ref in sources if sources[ref] != changed[ref]} == {"c1/_footer.md.j2"}


@pytest.mark.parametrize("world", ["b1", "c1", "first_world"])
def test_the_sandbox_renders_shipped_cards_as_jinja_does(world: str) -> None:
    """Shipped cards (with their partials) render exactly as a plain jinja2 render of them."""
    import jinja2

    entry = EXAMPLES / "first_world.eair" if world == "first_world" \
        else ROOT / "worlds" / f"{world}.eair"
    diagnostics = Diagnostics()
    checked = check_world(entry, diagnostics)
    assert checked is not None and not diagnostics.has_errors
    from eairdsl.check.cards import card_context

    for name, by_condition in checked.prompts.items():
        party = checked.parties[name]
        card = next(c for c in party.clauses if c.key == "card")
        assert card.text is not None
        path = entry.parent / card.text
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(path.parent)),
                                 undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        template = env.from_string(path.read_text(encoding="utf-8"))
        for condition, text in by_condition.items():
            context = card_context(checked, party, condition,
                                   checked.condition_values[condition])
            assert text == template.render(**context), (name, condition)
    assert checked.prompts

