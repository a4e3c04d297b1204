"""`eairdsl.lsp.cards`: hover and go-to-definition in card templates, called directly
(no server): on the shipped worlds' cards, on a user's world written here, and on
every half-typed prefix of a card."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
from lsprotocol import types as T

from eairdsl.check.cards import CARD_VARIABLES
from eairdsl.lsp.cards import (
    _ROLE_DOCS,
    _VARIABLE_DOCS,
    card_definition,
    card_hover,
    is_card,
    worlds_using,
)
from eairdsl.syntax.parser import parse_text

ROOT = Path(__file__).resolve().parents[1]
WORLDS = ROOT / "worlds"
STDLIB = ROOT / "eairdsl" / "stdlib"


def position(text: str, needle: str, nth: int = 0, into: int = 1) -> tuple[int, int]:
    """0-based (line, col) `into` characters into the `nth` occurrence of `needle`."""
    starts = [m.start() for m in re.finditer(re.escape(needle), text)]
    offset = starts[nth] + into
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def declared_at(path: Path, pattern: str) -> tuple[int, int, int]:
    """(line, start col, end col) of group 1 of `pattern`'s first match in `path`."""
    text = path.read_text(encoding="utf-8")
    match = re.search(pattern, text, re.M)
    assert match is not None, pattern
    line = text.count("\n", 0, match.start(1))
    col = match.start(1) - (text.rfind("\n", 0, match.start(1)) + 1)
    return line, col, col + len(match.group(1))


def located(found: list[tuple[Path, T.Range]], path: Path) -> list[tuple[int, int, int]]:
    """(line, start col, end col) of the locations in `path`."""
    return [(r.start.line, r.start.character, r.end.character)
            for p, r in found if Path(p).resolve() == path.resolve()]


# ------------------------------------------------------------------ the shipped worlds


def test_a_card_is_a_jinja2_file() -> None:
    assert is_card(WORLDS / "d1" / "assistant.md.j2")
    assert not is_card(WORLDS / "d1.eair")
    assert not is_card(WORLDS / "d1" / "hr.json")


def test_the_docs_cover_every_card_variable() -> None:
    assert set(_VARIABLE_DOCS) == set(CARD_VARIABLES)
    language = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    for name in [*CARD_VARIABLES, *_ROLE_DOCS]:
        assert f"`{name}`" in language


def test_the_worlds_using_the_shipped_cards() -> None:
    assert worlds_using(WORLDS / "d1" / "assistant.md.j2") == [(WORLDS / "d1.eair").resolve()]
    assert worlds_using(WORLDS / "d1" / "specialist.md.j2") == [(WORLDS / "d1.eair").resolve()]
    assert worlds_using(WORLDS / "a3" / "team.md.j2") == [(WORLDS / "a3.eair").resolve()]
    assert worlds_using(WORLDS / "d1" / "nobody.md.j2") == []


def test_d1_cards_prompt_clauses_and_loop_variables() -> None:
    card = WORLDS / "d1" / "assistant.md.j2"
    text = card.read_text(encoding="utf-8")
    line, col = position(text, "prompt_clauses")
    shown = card_hover(card, text, line, col)
    assert shown is not None and "`prompt_clauses` (card variable)" in shown
    # every prompt clause of d1 is for the other role: the hover says none apply
    assert "declare none" in shown and "`assistant`" in shown
    assert card_definition(card, text, line, col) == []
    line, col = position(text, "clause }}")  # the loop variable is not a card variable
    assert card_hover(card, text, line, col) is None
    assert card_definition(card, text, line, col) == []
    line, col = position(text, "You are")  # text outside any tag
    assert card_hover(card, text, line, col) is None


def test_d1_specialist_card_prompt_clauses_are_its_inducers() -> None:
    card = WORLDS / "d1" / "specialist.md.j2"
    text = card.read_text(encoding="utf-8")
    line, col = position(text, "prompt_clauses")
    found = card_definition(card, text, line, col)
    world = WORLDS / "d1.eair"
    expected = declared_at(world, r"^inducer (peer_trust)\b")
    assert expected in located(found, world)
    assert len(found) == len(re.findall(r"^inducer \w+ : prompt_clause",
                                        world.read_text(encoding="utf-8"), re.M))
    shown = card_hover(card, text, line, col)
    assert shown is not None and "inducer peer_trust : prompt_clause" in shown


def test_a_stdlib_lever_from_a_shipped_card() -> None:
    card = WORLDS / "a1" / "support.md.j2"
    text = card.read_text(encoding="utf-8")
    name = re.search(r"levers\.(\w+)", text)
    assert name is not None
    line, col = position(text, f"levers.{name.group(1)}", into=len("levers.") + 2)
    found = card_definition(card, text, line, col)
    module = STDLIB / "approval.eair"
    assert located(found, module) == [declared_at(module, rf"^lever ({name.group(1)})\b")]
    assert len(found) == 1
    shown = card_hover(card, text, line, col)
    assert shown is not None
    assert f"lever {name.group(1)} : money" in shown and "stdlib/approval.eair" in shown


def test_a_world_lever_from_a_shipped_card() -> None:
    card = WORLDS / "a3" / "team.md.j2"
    text = card.read_text(encoding="utf-8")
    line, col = position(text, "levers.pool_size", into=len("levers.pool"))
    world = WORLDS / "a3.eair"
    assert located(card_definition(card, text, line, col), world) == [
        declared_at(world, r"^lever (pool_size)\b")]
    line, col = position(text, "levers.pool_size", into=2)  # on `levers` itself
    shown = card_hover(card, text, line, col)
    assert shown is not None and "lever name → value" in shown


# ------------------------------------------------------------------ a user's world

USER_WORLD = '''\
world shop {
  title "Returns desk"
  clock min
  seeds 1
}

lever discount : int = 10 "largest discount the clerk may give, in percent"

condition generous "a larger discount" {
  discount = 25
}

inducer be_quick : prompt_clause {
  roles clerk
  text "Customers are waiting."
}

inducer for_others : prompt_clause {
  roles manager
  text "Only for the manager."
}

tool lookup(id: text) -> text {
  kind read
  description "Look a receipt up."
  returns id
}

role clerk {
  model under_test
  card "cards/clerk.md.j2"
  kpi "returns handled per hour"
  tools lookup
}

role manager {
  model under_test
  card "cards/other.md.j2"
}
'''

USER_CARD = '''\
You are {{ role.name }}, working to {{ role.kpi }}.
Offer at most {{ levers.discount }}% ({{ levers["discount"] | string }}).
{% for tool in tools %}- {{ tool.name }}{% endfor %}
{% for role in roles %}{{ role }}{% endfor %}
Condition: {{ condition }} in {{ world.name }}.
{% for clause in inducers.prompt_clause %}{{ clause }}{% endfor %}
{% include "parts/footer.md.j2" %}
{% include "../../outside.md.j2" %}
'''


@pytest.fixture()
def shop(tmp_path: Path) -> tuple[Path, Path, str]:
    """A user's world folder: `shop.eair` naming `cards/clerk.md.j2`, a partial, and a
    file just outside the folder."""
    folder = tmp_path / "shop"
    (folder / "cards" / "parts").mkdir(parents=True)
    world = folder / "shop.eair"
    world.write_text(USER_WORLD, encoding="utf-8")
    module, diagnostics = parse_text(USER_WORLD, "shop.eair")
    assert module is not None and not list(diagnostics)  # the test's world itself parses
    card = folder / "cards" / "clerk.md.j2"
    card.write_text(USER_CARD, encoding="utf-8")
    (folder / "cards" / "other.md.j2").write_text("{{ role.name }}\n", encoding="utf-8")
    (folder / "cards" / "parts" / "footer.md.j2").write_text("Thanks.\n", encoding="utf-8")
    (tmp_path / "outside.md.j2").write_text("outside\n", encoding="utf-8")
    return world, card, USER_CARD


def test_a_user_world_uses_its_card(shop: tuple[Path, Path, str]) -> None:
    world, card, _ = shop
    assert worlds_using(card) == [world.resolve()]
    assert worlds_using(card.parent / "parts" / "footer.md.j2") == []


def test_a_user_lever_both_ways_of_writing_it(shop: tuple[Path, Path, str]) -> None:
    world, card, text = shop
    expected = [declared_at(world, r"^lever (discount)\b")]
    for needle, into in (("levers.discount", 9), ('levers["discount"]', 10)):
        line, col = position(text, needle, into=into)
        assert located(card_definition(card, text, line, col), world) == expected
        shown = card_hover(card, text, line, col)
        assert shown is not None and "lever discount : int = 10" in shown
        assert "largest discount the clerk may give" in shown and "`shop.eair`" in shown


def test_a_user_role_tools_conditions_world_and_inducers(
        shop: tuple[Path, Path, str]) -> None:
    world, card, text = shop

    def definition(needle: str, nth: int = 0, into: int = 1) -> list[tuple[int, int, int]]:
        line, col = position(text, needle, nth, into)
        return located(card_definition(card, text, line, col), world)

    assert definition("role.name", into=6) == [declared_at(world, r"^role (clerk)\b")]
    kpi = declared_at(world, r"^  (kpi \"returns handled per hour\")")
    assert definition("role.kpi", into=6) == [kpi]
    assert definition("tools %}") == [declared_at(world, r"^tool (lookup)\b")]
    assert definition("condition }}") == [declared_at(world, r"^condition (generous)\b")]
    assert definition("world.name", into=7) == [declared_at(world, r"^world (shop)\b")]
    # the clerk's prompt clauses, not the manager's
    assert definition("inducers.prompt_clause", into=12) == [
        declared_at(world, r"^inducer (be_quick)\b")]
    line, col = position(text, "role.kpi", into=6)
    shown = card_hover(card, text, line, col)
    assert shown is not None and 'kpi "returns handled per hour"' in shown
    line, col = position(text, "tools %}")
    shown = card_hover(card, text, line, col)
    assert shown is not None and "tool lookup(id: text) -> text" in shown


def test_names_the_card_binds_are_not_card_variables(shop: tuple[Path, Path, str]) -> None:
    _, card, text = shop
    for needle, nth in (("role in roles", 0), ("role }}", 0), ("tool.name", 0),
                        ("string }}", 0)):
        line, col = position(text, needle, nth)
        assert card_hover(card, text, line, col) is None, needle
        assert card_definition(card, text, line, col) == [], needle
    line, col = position(text, "roles %}")  # the loop's collection is one
    shown = card_hover(card, text, line, col)
    assert shown is not None and "role clerk" in shown and "role manager" in shown


def test_includes_go_to_the_partial_inside_the_world_only(
        shop: tuple[Path, Path, str]) -> None:
    _, card, text = shop
    line, col = position(text, "parts/footer", into=3)
    found = card_definition(card, text, line, col)
    assert [Path(p).resolve() for p, _ in found] == [
        (card.parent / "parts" / "footer.md.j2").resolve()]
    line, col = position(text, "../../outside", into=3)
    assert card_definition(card, text, line, col) == []


def test_an_unsaved_world_buffer_is_read(shop: tuple[Path, Path, str]) -> None:
    world, card, text = shop
    edited = USER_WORLD.replace("lever discount", "\n\nlever discount")
    line, col = position(text, "levers.discount", into=9)
    found = card_definition(card, text, line, col, overlay={world: edited})
    assert located(found, world)[0][0] == declared_at(world, r"^lever (discount)\b")[0] + 2
    unsaved = world.parent / "draft.eair"  # a world not saved yet names the card too
    found_worlds = worlds_using(card, overlay={unsaved: USER_WORLD})
    assert unsaved.resolve() in found_worlds and world.resolve() in found_worlds


def test_a_link_out_of_the_folder_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "far.eair").write_text(USER_WORLD, encoding="utf-8")
    folder = tmp_path / "shop"
    (folder / "cards").mkdir(parents=True)
    card = folder / "cards" / "clerk.md.j2"
    card.write_text(USER_CARD, encoding="utf-8")
    (folder / "linked.eair").symlink_to(outside / "far.eair")
    assert worlds_using(card) == []


# ------------------------------------------------------------------ robustness


@pytest.mark.parametrize("name", ["d1/assistant.md.j2", "a1/support.md.j2"])
def test_every_prefix_of_a_shipped_card_answers(name: str) -> None:
    """A half-typed card never raises: hover and definition at the end of every prefix
    (every 40 characters) and at each `{{`/`{%` in it."""
    card = WORLDS / name
    text = card.read_text(encoding="utf-8")
    for end in [*range(0, len(text), 40), len(text)]:
        prefix = text[:end]
        line = prefix.count("\n")
        col = len(prefix) - (prefix.rfind("\n") + 1)
        assert isinstance(card_definition(card, prefix, line, col), list)
        card_hover(card, prefix, line, col)
        card_hover(card, prefix, line + 5, col + 100)  # past the end


def test_a_broken_tag_leaves_the_rest_readable(shop: tuple[Path, Path, str]) -> None:
    world, card, _ = shop
    text = "{{ foo) }} {% for x in ] %}\n{{ levers.discount }} {{ 'unclosed\n{% if"
    line, col = position(text, "levers.discount", into=9)
    assert located(card_definition(card, text, line, col), world) == [
        declared_at(world, r"^lever (discount)\b")]
    for line, row in enumerate(text.split("\n")):
        for col in range(len(row) + 1):
            card_hover(card, text, line, col)
            card_definition(card, text, line, col)


def test_nothing_of_the_card_is_compiled_or_rendered(
        shop: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    world, card, text = shop

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a card was compiled")

    monkeypatch.setattr(jinja2.Environment, "compile", refuse)
    monkeypatch.setattr(jinja2.Environment, "parse", refuse)
    monkeypatch.setattr(jinja2.Template, "render", refuse)
    line, col = position(text, "levers.discount", into=9)
    assert card_hover(card, text, line, col) is not None
    assert located(card_definition(card, text, line, col), world)


def test_whitespace_control_keeps_positions(shop: tuple[Path, Path, str]) -> None:
    """`{%-` strips the text before it from jinja2's tokens: positions stay the card's."""
    world, card, _ = shop
    text = "Hello   \n  {%- if levers.discount > 5 -%}\n  big {{- levers['discount'] -}}  \n" \
           "{%- endif %}"
    expected = [declared_at(world, r"^lever (discount)\b")]
    for needle in ("levers.discount", "levers['discount']"):
        line, col = position(text, needle, into=9)
        assert located(card_definition(card, text, line, col), world) == expected, needle


def test_a_lever_no_world_declares(shop: tuple[Path, Path, str]) -> None:
    _, card, _ = shop
    text = "{{ levers.nope }}"
    shown = card_hover(card, text, 0, 12)
    assert shown is not None and "declare none" in shown and "`clerk`" in shown
    assert card_definition(card, text, 0, 12) == []


def test_a_macro_argument_shadows_only_inside_the_macro(shop: tuple[Path, Path, str]) -> None:
    world, card, _ = shop
    text = "{% macro show(role, levers=1) %}{{ role }}{{ levers.discount }}{% endmacro %}\n" \
           "{{ role.name }} {{ show(role=1) }}"
    for needle in ("role }}", "levers.discount", "role=1"):
        line, col = position(text, needle)
        assert card_definition(card, text, line, col) == [], needle
    line, col = position(text, "role.name", into=7)
    assert located(card_definition(card, text, line, col), world) == [
        declared_at(world, r"^role (clerk)\b")]
