"""The compact form (`a, b: text`, `;` between items on a line) is layout, not meaning.

tests/fixtures/compact/ holds one world written twice: long.eair one item per line
(as every shipped world is written) and compact.eair in the compact form. Both must
parse to the same declarations and compile to the same files, byte for byte, except
for what world.json records of the source text itself: its SHA-256 (and the digests
over it), and the position (`file:line:col`) of each guard and measurement, which
differ by design and are checked to point at the same clause in each text.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from eairdsl.compiler import compile_world, generated_files
from eairdsl.syntax.ast import strip_spans
from eairdsl.syntax.fmt import format_text
from eairdsl.syntax.parser import parse_text

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "fixtures" / "compact"
LONG, COMPACT = HERE / "long.eair", HERE / "compact.eair"
LANGUAGE = ROOT / "docs" / "language.md"


def code_lines(text: str) -> int:
    """Lines that hold code: not blank, not only a comment."""
    return sum(1 for line in text.splitlines()
               if line.strip() and not line.strip().startswith("//"))


def _compiled(tmp: Path, source: Path) -> dict[str, bytes]:
    """Compile `source` as `payables.eair` beside a copy of the fixture's data and cards,
    so both forms have the same file name and only the text differs."""
    shutil.copytree(HERE / "payables", tmp / "payables")
    (tmp / "payables.eair").write_bytes(source.read_bytes())
    result = compile_world(tmp / "payables.eair")
    assert result.ok and result.world is not None, [
        f"{d.span}: {d.code} {d.message}" for d in result.diagnostics]
    assert not list(result.diagnostics), [d.message for d in result.diagnostics]
    return generated_files(result.world)


_AT = re.compile(r"^payables\.eair:(\d+):(\d+)$")


def _masked(world_json: bytes, source: str) -> tuple[str, list[str]]:
    """world.json with what records the source text's layout masked, and what it pointed at.

    Two kinds of values do: the SHA-256 of `payables.eair` (with the digests over it), and
    the `at` of every guard and measurement, `payables.eair:LINE:COL`, which runs (traces,
    unassessed measurements) cite. Each `at` is replaced by a mark and returned as the
    source text from that position to the end of its line.
    """
    data = json.loads(world_json)
    digests = {s["sha256"] for s in data["sources"] if s["ref"] == "payables.eair"}
    digests |= {data["digest"], data["ir_sha256"]}
    lines = source.split("\n")
    pointed: list[str] = []
    stack: list[object] = [data]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else []
        for key, value in list(items):
            if key == "at" and isinstance(value, str) and (m := _AT.match(value)):
                pointed.append(lines[int(m[1]) - 1][int(m[2]) - 1:])
                node[key] = "<at>"  # type: ignore[index]
            elif isinstance(value, str) and value in digests:
                node[key] = "<digest of the source text>"  # type: ignore[index]
            else:
                stack.append(value)
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", pointed


def test_both_forms_parse_to_the_same_declarations() -> None:
    long, _ = parse_text(LONG.read_text(encoding="utf-8"), LONG.name)
    compact, _ = parse_text(COMPACT.read_text(encoding="utf-8"), COMPACT.name)
    assert long is not None and compact is not None
    assert strip_spans(compact.decls) == strip_spans(long.decls)


def test_both_forms_compile_to_the_same_files(tmp_path: Path) -> None:
    """world.json, every rendered prompt and the topology are the same bytes; world.json
    differs only in the digests of the source text, which are masked."""
    long = _compiled(tmp_path / "long", LONG)
    compact = _compiled(tmp_path / "compact", COMPACT)
    assert sorted(compact) == sorted(long)
    assert len([f for f in long if f.startswith("prompts/")]) == 4 * 3  # roles x conditions
    for name in long:
        if name == "world.json":
            assert compact[name] != long[name]  # the source digests and positions differ ...
            long_json, long_at = _masked(long[name], LONG.read_text(encoding="utf-8"))
            compact_json, compact_at = _masked(compact[name], COMPACT.read_text(encoding="utf-8"))
            assert compact_json == long_json  # ... and nothing else does
            # every position points at the same clause: a whole line of long.eair, the
            # start of the rest of a line of compact.eair (`; ` and more items may follow)
            assert len(long_at) == len(compact_at) > 10
            for whole, rest in zip(long_at, compact_at, strict=True):
                assert rest == whole or rest.startswith(whole + "; "), (whole, rest)
        else:
            assert compact[name] == long[name], name


def test_eairc_diff_sees_no_change_between_the_forms() -> None:
    """`eairc diff` (IR declaration by declaration, positions ignored) finds nothing."""
    from eairdsl.diff import diff_worlds

    long = compile_world(LONG)
    compact = compile_world(COMPACT)
    assert long.world is not None and compact.world is not None
    result = diff_worlds(long.world, compact.world)
    assert result.changes == [] and result.violations == []


def test_the_compact_world_is_formatted_and_shorter() -> None:
    """`eairc fmt` keeps both layouts as written, and the compact one has fewer code lines."""
    for path in (LONG, COMPACT):
        text = path.read_text(encoding="utf-8")
        assert format_text(text, path.name)[0] == text, path.name
    long = code_lines(LONG.read_text(encoding="utf-8"))
    compact = code_lines(COMPACT.read_text(encoding="utf-8"))
    assert compact < long


def _eair_blocks(marker: str) -> list[str]:
    text = LANGUAGE.read_text(encoding="utf-8")
    section = text[text.index(marker):]
    section = section[:section.index("\n#")]
    return re.findall(r"```eair\n(.*?)```", section, re.S)


def test_the_language_reference_shows_one_world_part_in_both_forms() -> None:
    """docs/language.md's compact-form example: the long and the compact block declare the
    same things, each is already in the formatter's layout, and the line counts the
    reference gives for them are theirs."""
    long, compact = _eair_blocks("### Compact form")[:2]
    parsed_long, _ = parse_text(long)
    parsed_compact, _ = parse_text(compact)
    assert parsed_long is not None and parsed_compact is not None
    assert strip_spans(parsed_compact.decls) == strip_spans(parsed_long.decls)
    assert format_text(long)[0] == long and format_text(compact)[0] == compact
    text = LANGUAGE.read_text(encoding="utf-8")
    claim = re.search(r"\((\d+) code lines become (\d+)\)", text)
    assert claim is not None, "the reference says how many lines the example saves"
    assert (code_lines(long), code_lines(compact)) == (int(claim[1]), int(claim[2]))
