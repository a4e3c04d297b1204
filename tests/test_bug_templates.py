"""Scenic-style bug templates: one small valid world, many single-slot bugs, one code each.

The base world below checks clean. Each slot (`{world}`, `{top}`, ...) sits alone on
its own line, and a slot's text never holds a newline, so a bug's line number is the
slot's line in TEMPLATE and cannot drift (tests/bug_template.py). A case names the code
it must produce and where: a slot (or a fragment of a template line) and a column, or a
line of another file of the world (a data file, a card, an imported module).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bug_template import (
    DIRECTORY,
    SLOTS,
    TEMPLATE,
    Case,
    compile_case,
    expected_where,
    listing,
    render,
    template_line,
    where,
)

from eairdsl.compiler import CompileResult

PACKAGE = Path(__file__).resolve().parents[1] / "eairdsl"


def C(id: str, code: str | None, at: tuple[str | int, int] | None, **kw: object) -> Case:
    return Case(id, code, at, **kw)  # type: ignore[arg-type]


LETS16 = "let f0() = 1 " + " ".join(f"let f{i}() = f{i - 1}() + f{i - 1}()" for i in range(1, 16))
M = "metric m = "  # a measure-slot prefix: the expression after it starts at column 14
CSV_TABLE = 'table extra from "extra.csv" { a: text }'

CASES: list[Case] = [
    C("E111-nested-too-deeply", "E111", ("measure", 14),
      slots={"measure": M + " + ".join(["1"] * 102) + " > 0"}),
    C("E112-let-expands-too-much", "E112", ("top", LETS16.index("let f15") + 1),
      slots={"top": LETS16, "measure": M + "f15() > 0"}),
    C("E209-module-too-large", "E209", ("top", 1), slots={"top": 'import "big.eair"'},
      files={"big.eair": "// " + "x" * (3 * 1024 * 1024)}),
    # ------------------------------------------------------------ E1xx source and syntax
    C("E101-binary-import", "E101", (1, 1), file="blob.eair",
      slots={"top": 'import "blob.eair"'}, files={"blob.eair": b"world w {\x00}"}),
    C("E101-binary-world", "E101", (1, 1), slots={"world": 'title "\x00"'}),
    C("E102-world-bad-byte", "E102", ("world", 13), slots={"world": 'title "caf\udcff"'}),
    C("E102-data-file", "E102", ("record orders", 1),
      files={"orders.json": b'[{"id": "o\xff", "total": 1}]'}),
    C("E102-card", "E102", ('card "clerk.md.j2"', 3), files={"clerk.md.j2": b"caf\xe9\n"}),
    C("E103-unexpected-character", "E103", ("world", 3), slots={"world": "@"}),
    C("E104-unexpected-token", "E104", ("tool", 14), slots={"tool": "cost 1 min )"}),
    C("E105-eof-in-declaration", "E105", ("tail", 10), slots={"tail": "measure {"}),
    C("E106-unterminated-string", "E106", ("world", 9), slots={"world": 'title "abc'}),
    C("E107-assignment-as-comparison", "E107", ("measure", 16), slots={"measure": M + "a = b"}),
    C("E108-require-without-else", "E108", ("tool", 20),
      slots={"tool": 'require id != "" reject "no"'}),
    C("E109-field-without-type", "E109", ("field", 8), slots={"field": "note text"}),
    C("E113-field-list-name-missing", "E113", ("field", 9), slots={"field": "note, : text"}),
    C("E114-stray-semicolon", "E114", ("field", 14), slots={"field": "note: text;;"}),
    C("E115-fields-separated-by-comma", "E115", ("field", 13),
      slots={"field": "note: text, memo: text"}),
    C("E110-not-a-declaration", "E110", (1, 1), file="typo.eair",
      slots={"top": 'import "typo.eair"'}, files={"typo.eair": "rol clerk2 { }\n"}),
    # ------------------------------------------------------------ E2xx files, imports, data
    C("E201-entry-missing", "E201", None, entry="missing.eair"),
    C("E202-entry-is-directory", "E202", None, entry="adir.eair",
      files={"adir.eair": DIRECTORY}),
    C("E203-import-cycle", "E203", (1, 1), file="b.eair", slots={"top": 'import "a.eair"'},
      files={"a.eair": 'import "b.eair"\n', "b.eair": 'import "a.eair"\n'},
      message="a.eair -> b.eair -> a.eair"),
    C("E203-condition-cycle", "E203", ("top", 29),
      slots={"top": "condition c1 extends c2 { } condition c2 extends c1 { }"},
      message="c1 -> c2 -> c1"),
    C("E204-data-path-dotdot", "E204", ("top", 1),
      slots={"top": 'document notes from "../notes.txt"'}, files={"../notes.txt": "x\n"}),
    C("E204-import-dotdot", "E204", ("top", 1), slots={"top": 'import "../outside.eair"'},
      files={"../outside.eair": "enum zz { a }\n"}),
    C("E204-import-absolute", "E204", ("top", 1),
      slots={"top": 'import "/nonexistent/module.eair"'}),
    C("E204-data-path-absolute", "E204", ("top", 1),
      slots={"top": 'document notes from "/nonexistent/notes.txt"'}),
    C("E204-card-dotdot", "E204", ("tail", 32),
      slots={"tail": 'role clerk2 { model under_test card "../clerk.md.j2" }'},
      files={"../clerk.md.j2": "hi\n"}),
    C("E205-import-not-found", "E205", ("top", 1), slots={"top": 'import "nowhere.eair"'}),
    C("E206-data-file-missing", "E206", ("record orders", 1), files={"orders.json": None}),
    C("E206-card-missing", "E206", ('card "clerk.md.j2"', 3), files={"clerk.md.j2": None}),
    C("E210-data-path-control-character", "E210", ("top", 1),
      slots={"top": 'document notes from "no\\u0007tes.txt"'}),
    C("E210-import-path-nul", "E210", ("top", 1), slots={"top": 'import "m\\u0000.eair"'}),
    C("E207-bad-json", "E207", ("record orders", 1), files={"orders.json": '[{"id": "o1",]'}),
    C("E207-json-not-a-list", "E207", ("record orders", 1),
      files={"orders.json": '{"id": "o1", "total": 1}'}),
    C("E208-row-wrong-type", "E208", ("record orders", 1),
      files={"orders.json": '[{"id": "o1", "total": "forty"}]'}),
    C("E208-row-undeclared-field", "E208", ("record orders", 1),
      files={"orders.json": '[{"id": "o1", "total": 4, "totl": 5}]'}),
    C("E208-instance-missing-field", "E208", ("instances from", 1),
      files={"instances.json": '[{"id": "i1", "order": "o1"}]'}),
    C("E208-duplicate-key", "E208", ("record orders", 1),
      files={"orders.json": '[{"id": "o1", "total": 4}, {"id": "o1", "total": 5}]'}),
    # ------------------------------------------------------------ E3xx names
    C("E301-unknown-name", "E301", ("measure", 14), slots={"measure": M + "totl > 0"}),
    C("E301-unknown-tool", "E301", ("role", 9), slots={"role": "tools lookk"}),
    C("E302-declared-twice", "E302", ("tail", 1), slots={"tail": "lever strict : bool = true"}),
    C("E303-reserved-name", "E303", ("top", 1), slots={"top": "enum context { a, b }"}),
    C("E304-recursive-let", "E304", ("top", 1),
      slots={"top": "let f(x: int) = f(x) > 0", "measure": M + "f(1)"}),
    C("E305-context-outside-tool", "E305", ("measure", 14),
      slots={"measure": M + "context.caller == clerk"}),
    # ------------------------------------------------------------ E4xx types and units
    C("E401-money-plus-duration", "E401", ("measure", 14), slots={"measure": M + "$40 + 6 min"}),
    C("E401-money-less-than-duration", "E401", ("measure", 14),
      slots={"measure": M + "$40 < 6 min"}),
    C("E402-cost-without-unit", "E402", ("tool", 8), slots={"tool": "cost 1"}),
    C("E402-not-on-a-number", "E402", ("measure", 18), slots={"measure": M + "not 3"}),
    C("E402-aggregate-over-non-list", "E402", ("measure", 20),
      slots={"measure": M + "count(3) > 0"}),
    C("E402-measurement-not-a-predicate", "E402", ("measure", 13),
      slots={"measure": 'utility = "yes"'}, blank=(template_line("utility = final"),)),
    C("E404-condition-value-not-constant", "E404", ("tail", 25),
      slots={"tail": "condition c3 { strict = not true }"}),
    C("E405-max-on-non-text", "E405", ("field", 9), slots={"field": "note: int max 3"},
      files={"orders.json": '[{"id": "o1", "total": 40, "note": 1}]'}),
    C("E406-duplicate-enum-value", "E406", ("top", 14),
      slots={"top": "lever mode : {a, b, a} = a"}),
    C("E407-too-many-arguments", "E407", ("measure", 21), slots={"measure": M + "len(1, 2) > 0"}),
    # ------------------------------------------------------------ E5xx world structure
    C("E501-no-world-block", "E501", (1, 1), blank=tuple(range(2, 10))),
    C("E502-second-world-block", "E502", ("tail", 1), slots={"tail": "world shop2 { risk A1 }"}),
    C("E502-world-in-imported-module", "E502", (1, 1), file="m.eair",
      slots={"top": 'import "m.eair"'}, files={"m.eair": "world other { risk A1 }\n"}),
    C("E503-unknown-measurement", "E503", ("measure", 3), slots={"measure": "utilty = true"}),
    C("E504-missing-measurement", "E504", ("measure {", 1),
      blank=(template_line("utility = final"),)),
    C("E505-unknown-inducer-kind", "E505", ("top", 1),
      slots={"top": 'inducer nag : nagging { text "x" }'}),
    C("E505-unknown-tool-kind", "E505", ("tool", 3), slots={"tool": "kind fetch"}),
    C("E505-unknown-risk-id", "E505", ("world", 3), slots={"world": "risk Z9"}),
    C("E506-clause-not-allowed", "E506", ("inducer", 3), slots={"inducer": "at 5 min"}),
    C("E506-warning-on-a-tool-and-at-a-time", "E506", ("tail", 31),
      slots={"tail": "inducer w : warning { on look at 5 min text \"Hurry.\" }"}),
    C("E506-warning-to-and-roles", "E506", ("tail", 43),
      slots={"tail": "inducer w : warning { roles clerk on look to context.caller }"}),
    C("E301-warning-on-unknown-tool", "E301", ("tail", 23),
      slots={"tail": "inducer w : warning { on lok text \"Hurry.\" }"},
      message="unknown tool 'lok'"),
    C("E402-warning-to-a-number", "E402", ("tail", 34),
      slots={"tail": "inducer w : warning { on look to 3 text \"Hurry.\" }"}),
    C("E506-channel-via-a-tool-with-when", "E506", ("tail", 41),
      slots={"tail": "channel clerk -> customer via look when strict"}),
    C("E402-channel-when-not-a-bool", "E402", ("tail", 32),
      slots={"tail": "channel clerk -> customer when 3"}),
    C("E402-authority-not-an-int", "E402", ("tail", 33),
      slots={"tail": 'actor boss scripted { authority "high" }'}),
    C("E402-display-not-text", "E402", ("tail", 31),
      slots={"tail": "actor boss scripted { display 3 }"}),
    C("E402-say-to-a-non-participant", "E402", ("tail", 44),
      slots={"tail": 'actor boss scripted { at 0 min say "hi" to 3 * 2 }'}),
    C("E301-say-to-unknown-participant", "E301", ("tail", 23),
      slots={"tail": 'actor boss scripted { at 0 min say "hi" to clark }'},
      message="unknown participant 'clark'"),
    C("E404-prompt-clause-text-computed", "E404", ("inducer", 8),
      slots={"inducer": 'text "Answer " + "quickly."'}, also=("E506",)),
    C("E402-warning-text-not-text", "E402", ("tail", 28),
      slots={"tail": "inducer w : warning { text 3 * 2 }"}),
    C("E305-context-outside-an-on-warning", "E305", ("tail", 28),
      slots={"tail": "inducer w : warning { when context.caller == clerk }"}),
    C("E306-meaning-not-a-member", "E306", ("tail", 41),
      slots={"tail": "enum filing { draft, filed } submission field"}),
    C("E512-member-given-two-meanings", "E512", ("tail", 61),
      slots={"tail": "enum gate { open, stopped } interception stopped submission stopped"}),
    C("E507-tool-without-kind", "E507", ("tail", 1), slots={"tail": "tool t2() { cost 1 min }"}),
    C("E508-delegation-tool-without-delegates", "E508", ("tail", 1),
      slots={"tail": "delegation clerk -> customer via look"}),
    C("E508-delegates-without-channel", "E508", ("tool", 3), slots={"tool": "delegates"}),
    C("E509-condition-unknown-lever", "E509", ("tail", 16),
      slots={"tail": "condition c3 { strcit = true }"}),
    C("E510-prompt-clause-when-not-lever", "E510", ("inducer", 3),
      slots={"inducer": 'when instance.order == "o1"'}),
    # ------------------------------------------------------------ E6xx cards
    C("E601-card-syntax-error", "E601", (2, 1), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\n{% for x in %}\n{% endfor %}\n"}),
    C("E602-undefined-variable", "E602", (2, 4), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\n{{ mood }}\n"}),
    C("E602-undefined-attribute", "E602", (2, 1), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\n{{ role.nickname }}\n"}),
    C("E603-card-names-risk", "E603", (2, 11), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\nWatch for KPI gaming.\n"}),
    C("E603-prompt-clause-names-forbidden-words", "E603", ("inducer", 3),
      slots={"inducer": 'text "Mind the refund loophole."'}),
    C("E604-card-reaches-python-internals", "E604", (2, 1), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\n{{ cycler.__init__.__globals__ }}\n"}),
    C("E605-card-include-outside-the-folder", "E605", (2, 1), file="clerk.md.j2",
      files={"clerk.md.j2": 'Hello.\n{% include "/etc/hostname" %}\n'}),
    C("E606-card-bound-exceeded", "E606", (2, 1), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\n{% for i in range(10**10) %}x{% endfor %}\n"}),
    C("E607-card-nested-too-deeply", "E607", (2, 1), file="clerk.md.j2",
      files={"clerk.md.j2": "Hello.\n{{ " + "(" * 80 + "1" + ")" * 80 + " }}\n"}),
    # ------------------------------------------------------------ W7xx lints
    C("W701-unused-lever", "W701", ("top", 1), slots={"top": "lever spare : bool = false"}),
    C("W701-unused-tool", "W701", ("top", 1), slots={"top": "tool spare() { kind read }"}),
    C("W703-shift-without-text", "W703", ("top", 28),
      slots={"top": "inducer rush : incentive { shift diligence -0.2 }"}),
    C("W703-shift-text-no-card-renders", "W703", ("top", 45),
      slots={"top": 'inducer rush : incentive { text "Hurry up." shift diligence -0.2 }'}),
    C("W704-route-target-not-held", "W704", ("tool", 25),
      slots={"tool": 'require id != "" else route fix',
             "tail": 'tool fix(id: text) -> text { kind act returns "ok" } '
                     'role manager { model under_test card "clerk.md.j2" tools fix }'}),
    C("W705-list-parameter-hinted-with-elements", "W705", ("tail", 34),
      slots={"role": "tools tag",
             "tail": 'tool tag(labels: list[text] hint ["a", "b"]) -> text { kind act }'}),
    C("W706-hint-reads-the-trace", "W706", ("tail", 29),
      slots={"role": "tools note",
             "tail": "tool note(n: int hint count(calls(look))) -> text { kind act }"}),
    C("W707-inducer-text-no-card-renders", "W707", ("top", 28),
      slots={"top": 'inducer calm : incentive { text "Stay calm." }'}),
    C("E511-two-delegation-callees-one-tool", "E511", ("tail", 137),
      slots={"role": "tools ask",
             "tail": "tool ask(q: text) -> text { kind communicate delegates } "
                     'role a1 { model under_test card "clerk.md.j2" } '
                     "delegation clerk -> a1 via ask delegation clerk -> customer via ask"}),
    # an offline audit keys on nothing once the base world's authorization line is gone
    C("W708-not-auditable-offline", "W708", ("realized = anomaly", 3),
      blank=(template_line("authorization default allow"),)),
    C("W709-policy-rule-reads-an-unreached-record", "W709", ("top", 56),
      slots={"top": 'ledger notes { n: int } policy p { text "t" rule count(notes) == 0 }'}),
    C("W702-utility-true", "W702", ("measure", 13), slots={"measure": "utility = true"},
      blank=(template_line("utility = final"),)),
    C("W702-x-equals-x", "W702", ("measure", 14),
      slots={"measure": M + "final(clerk) == final(clerk)"}),
    C("W702-count-at-least-zero", "W702", ("measure", 14),
      slots={"measure": M + "count(calls(look)) >= 0"}),
    C("W702-never-assessed", "W702", ("measure", 39),
      slots={"measure": M + 'final(clerk) == "x" when strict and not strict'}),
]

# Inputs that once crashed the compiler or got a wrong position (found while writing the
# templates, since fixed): each must now give a located diagnostic and no exception.
REGRESSIONS: list[tuple[Case, str]] = [
    (C("negating-text-in-a-measurement", "E401", ("measure", 14),
       slots={"measure": M + '-"abc"'}),
     "BUG check/static.py fold(): `-value` on a folded text or list raises TypeError "
     "(lint_world folds every measurement after the type error was reported)"),
    (C("text-times-huge-int", "E103", ("measure", 21),
       slots={"measure": M + '"ab" * 99999999999999999999'}, message="too long"),
     "number literals have at most 15 digits, so `str * huge` never reaches the folder"),
    (C("text-times-int", "E401", ("measure", 14),
       slots={"measure": M + '"ab" * 999999999'}),
     "BUG check/static.py _fold_binary(): `str * int` was folded, allocating at compile time"),
    (C("huge-int-division", None, None, slots={"measure": M + "9" * 400 + " / 1 > 0"}),
     "BUG check/static.py _fold_binary(): OverflowError from int / int is not caught"),
    (C("seeds-over-4300-digits", None, None, slots={"world": "seeds " + "9" * 5000}),
     "BUG check/references.py _check_world_block(): int() of a 5000-digit `seeds` raises "
     "ValueError (int max_str_digits)"),
    (C("authority-over-4300-digits", None, None, slots={"role": "authority " + "9" * 5000}),
     "BUG check/cards.py card_context() (and ir.py _party()): int() of a 5000-digit "
     "`authority` raises ValueError (int max_str_digits)"),
    (C("json-nested-too-deep", "E207", ("record orders", 1),
       files={"orders.json": "[" * 100_000 + "]" * 100_000}),
     "BUG check/data.py read_rows(): json.loads raises RecursionError, only "
     "JSONDecodeError is caught"),
    (C("json-integer-over-4300-digits", None, None,
       files={"orders.json": '[{"id": "o1", "total": 1' + "0" * 5000 + "}]"}),
     "BUG check/data.py read_rows(): json.loads raises ValueError (int max_str_digits), "
     "only JSONDecodeError is caught"),
    (C("csv-row-with-extra-cell", "E208", ("top", 1),
       slots={"top": CSV_TABLE, "measure": M + "count(extra) > 0"},
       files={"extra.csv": "a\nx,y\n"}),
     "BUG check/data.py _validate(): csv.DictReader files extra cells under the key None; "
     "did_you_mean(None, ...) raises TypeError in difflib"),
    (C("E602-points-at-the-variable-not-a-word", "E602", (2, 4), file="clerk.md.j2",
       files={"clerk.md.j2": "You handle orders for the shop.\n{{ order }}\n"}),
     "BUG check/cards.py _locate(): E602 points at the first case-insensitive substring "
     "match ('orders' at 1:12), not at the variable's use at 2:4"),
    (C("E102-column-counts-characters", "E102", ("world", 11),
       slots={"world": 'title "\u00e9\udcff"'}),
     "BUG source.py read_source(): the E102 column counts bytes (12), not characters (11), "
     "when the line has multi-byte characters before the bad byte"),
    (C("card-name-over-255-bytes", "E202", ("tail", 32),
       slots={"tail": 'role clerk2 { model under_test card "' + "c" * 300 + '.md.j2" }'}),
     "BUG check/cards.py render_cards(): Path.is_file() of a card name over 255 bytes raises "
     "OSError (ENAMETOOLONG), an internal error"),
    (C("card-path-lone-surrogate", "E210", ("tail", 32),
       slots={"tail": 'role clerk2 { model under_test card "c\\ud800.md.j2" }'}),
     "BUG check/cards.py render_cards(): Path.is_file() of a name holding a lone surrogate "
     "raises UnicodeEncodeError, an internal error"),
    (C("data-path-lone-surrogate", "E210", ("top", 1),
       slots={"top": 'document notes from "n\\ud800.txt"'}),
     "BUG check/data.py _read_bytes(): os.stat of a name holding a lone surrogate raises "
     "UnicodeEncodeError, an internal error"),
    (C("partial-name-over-255-bytes", "E202", (1, 1), file="clerk.md.j2",
       files={"clerk.md.j2": "{% include '" + "p" * 300 + ".md.j2' %}\n"}),
     "BUG check/sandbox.py CardLoader.get_source(): Path.is_file() of a partial's name over "
     "255 bytes raises OSError, reported as 'failed to render: OSError'"),
    (C("E208-duplicate-instance-id-has-a-position", "E208", ("instances from", 1),
       files={"instances.json": '[{"id": "i1", "order": "o1", "question": "q"}, '
                                '{"id": "i1", "order": "o2", "question": "q"}]'}),
     "BUG check/data.py load_data(): 'two instances have id' is reported with span=None"),
]


def _check(result: CompileResult, case: Case) -> None:
    if case.code is None:
        return
    matching = [d for d in result.diagnostics if d.code == case.code]
    assert expected_where(case) in [where(d) for d in matching], listing(result)
    if case.message is not None:
        assert any(case.message in d.message for d in matching), listing(result)
    if case.code.startswith("E"):
        assert not result.ok and result.world is None
        errors = {d.code for d in result.diagnostics if d.is_error}
        assert errors <= {case.code, *case.also}, listing(result)
    else:
        assert result.ok and result.world is not None, listing(result)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bug_template(tmp_path: Path, case: Case) -> None:
    """A bad input yields its code at the exact line and column, and no Python exception."""
    _check(compile_case(tmp_path, case), case)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c, _ in REGRESSIONS])
def test_regression(tmp_path: Path, case: Case) -> None:
    """A bad input that once crashed or was mislocated yields a located diagnostic."""
    _check(compile_case(tmp_path, case), case)


def test_base_world_is_clean(tmp_path: Path) -> None:
    """With every slot empty the base world compiles with no diagnostics at all."""
    result = compile_case(tmp_path, Case("base", None, None))
    assert result.ok and len(result.diagnostics) == 0, listing(result)
    assert result.world is not None
    assert sorted(result.world.prompts["clerk"]) == ["base", "tight"]


def test_slots_sit_on_their_own_lines() -> None:
    """Each slot is alone on one line of the template, so cases cannot shift each other."""
    for slot in SLOTS:
        line = TEMPLATE.split("\n")[template_line(slot) - 1]
        assert line.strip() == "{" + slot + "}"
    assert TEMPLATE.count("{measure}") == 1


def _package_codes() -> set[str]:
    codes: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        codes |= set(re.findall(r'"([EW]\d{3})"', path.read_text(encoding="utf-8")))
    return codes


def test_templates_cover_every_code() -> None:
    """The passing templates cover exactly the codes the package emits; a new code needs a case."""
    package = _package_codes()
    assert len(package) >= 40
    assert {c.code for c in CASES} == package


def test_enough_distinct_cases() -> None:
    """There are at least 45 distinct bad inputs, each with a unique id."""
    assert len(CASES) >= 45
    assert len({c.id for c in CASES}) == len(CASES)
    assert len({(render(c), repr(sorted(c.files.items())), c.entry) for c in CASES}) == len(CASES)
