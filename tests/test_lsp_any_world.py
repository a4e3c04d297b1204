"""The language server's answers on worlds we did not write for it: the docs' example
worlds and the unseen-risk worlds written from the docs alone, cut and damaged at seeded
random places, each answer computed in-process (no `_safely` to hide an exception)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from eairdsl.lsp.complete import completions
from eairdsl.lsp.hover import hover_markdown
from eairdsl.lsp.index import index_program
from eairdsl.lsp.links import document_links
from eairdsl.lsp.outline import document_symbols
from eairdsl.lsp.signature import signature_help
from eairdsl.lsp.tokens import semantic_tokens

ROOT = Path(__file__).resolve().parents[1]
WORLDS = sorted([*ROOT.glob("docs/examples/**/*.eair"),
                 *ROOT.glob("tests/fixtures/unseen/**/*.eair")])


def test_there_are_users_worlds_to_read() -> None:
    assert len(WORLDS) >= 4


@pytest.mark.parametrize("world", WORLDS, ids=lambda p: p.stem)
def test_every_answer_on_damaged_copies_of_a_users_world(world: Path) -> None:
    text = world.read_text(encoding="utf-8")
    whole = index_program(world, text)
    assert whole.main is not None and whole.main.definitions, "the intact world is indexed"
    assert semantic_tokens(whole, world), "its names are coloured"
    rng = random.Random(world.stem)
    for _ in range(6):
        cut = rng.randrange(len(text) + 1)
        start = rng.randrange(len(text) + 1)
        for damaged in (text[:cut], text[:start] + text[start + rng.randrange(1, 20):]):
            index = index_program(world, damaged)
            lines = damaged.split("\n")
            for _ in range(4):
                line = rng.randrange(len(lines))
                col = rng.randrange(len(lines[line]) + 1)
                hover_markdown(index, world, line, col)
                assert isinstance(completions(index, damaged, line, col), list)
                signature_help(index, damaged, line, col)
                found = index.at(world, line, col)
                for target in index.resolve(*found) if found else []:
                    assert index.references(target), "a declaration is its own reference"
            semantic_tokens(index, world)
            document_links(index, world)
            document_symbols(damaged, world.name)
