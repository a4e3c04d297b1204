"""Card templates in an editor: hover and go-to-definition from a card's variables to
the declarations of the worlds that use the card.

A card (`*.md.j2`) is a jinja2 template a `role` or `simulator` names with
`card "..."`; the checker renders it with the variables of `card_context`
(`eairdsl/check/cards.py`). A card does not say which world it belongs to, so the
worlds are found the other way round: the `.eair` files near the card whose parties
name it. What a variable means then comes from those worlds' indexes
(`eairdsl.lsp.index`): `levers.NAME` is a lever declaration, `role` the parties that
use the card, `tools` their tools, and so on.

The card is an editor's buffer, often half typed, and worlds are untrusted input, so
this module only *lexes* the template (jinja2's own lexer, resumed after a syntax
error): nothing of it is compiled or rendered, and no file outside the folders of
the worlds found (and the card's own folder) is opened or even looked for.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
from lsprotocol import types as T

from eairdsl.check.cards import CARD_VARIABLES
from eairdsl.check.loader import resolve_data_path
from eairdsl.diagnostics import Diagnostics
from eairdsl.lsp.index import (
    Definition,
    ModuleIndex,
    ProgramIndex,
    index_program,
    tolerant_module,
)
from eairdsl.lsp.text import lsp_range
from eairdsl.source import SourceError, Span, name_problem, read_source, real_path
from eairdsl.syntax import ast as A

__all__ = ["is_card", "worlds_using", "card_hover", "card_definition"]

#: how many folders above the card's own are searched for worlds (`worlds/w.eair` names
#: `card "w/x.md.j2"`: one level; a world in a folder of its own next to a `cards/` one: two)
_LEVELS = 2
#: the most `.eair` files looked at for one card, and directory entries per folder
_MAX_WORLDS = 200
_MAX_ENTRIES = 10_000
#: how many times lexing resumes after a syntax error (each resume moves forward)
_ROUNDS = 200

#: one line of what each card variable holds (docs/language.md, "Card templates")
_VARIABLE_DOCS: dict[str, str] = {
    "role": "this participant: `name`, `kind` (`role` or `simulator`), `kpi` and "
            "`objective` (text or none), `authority`, `display`",
    "condition": "the name of the condition the card is rendered under",
    "levers": "lever name → value under this condition (money in dollars, durations in "
              "minutes, percentages as written, enum values as text)",
    "prompt_clauses": "texts of the `prompt_clause` inducers that apply to this participant "
                      "and are on under this condition",
    "inducers": "inducer kind → texts of the inducers of that kind that apply and are on",
    "tools": "list of `{name, description}` of the participant's tools, minus those whose "
             "`when` is false under this condition",
    "roles": "sorted names of all `role` participants",
    "world": "`{name}`: the world's name",
}

#: what each attribute of `role` holds
_ROLE_DOCS: dict[str, str] = {
    "name": "the participant's name",
    "kind": "`role` or `simulator`",
    "kpi": "the participant's `kpi` text, or none",
    "objective": "the participant's `objective` text, or none",
    "authority": "the participant's `authority` (0 if not given; none if it depends on more "
                 "than levers)",
    "display": "the participant's display name under this condition, else its name (none "
               "if it depends on more than levers)",
}

#: `role.X` read from a clause of the party: where go-to-definition goes for it
_ROLE_CLAUSES: dict[str, type[A.ClauseNode]] = {
    "kpi": A.KpiClause, "objective": A.ObjectiveClause,
    "authority": A.AuthorityClause, "display": A.DisplayClause,
}

#: tags whose string names another template, loaded relative to the card's folder
_LOADING = ("include", "import", "from", "extends")


def is_card(path: Path) -> bool:
    """Is `path` a card template? (Cards are jinja2 files; `.md.j2` by convention.)"""
    return path.name.endswith(".j2")


# ------------------------------------------------------------------ the worlds of a card


def worlds_using(card: Path, overlay: Mapping[Path, str] | None = None) -> list[Path]:
    """The `.eair` files near `card` (its folder and up to two above) whose parties name
    it with `card "..."`, as the checker resolves that path; unsaved buffers in `overlay`
    are read instead of the disk (and count even when not saved yet)."""
    key = real_path(card)
    if key is None:
        return []
    texts = _resolved_overlay(overlay)
    found = [world for world in _candidates(card, texts)
             if _names_card(world, _world_text(world, texts), key)]
    return sorted(found)


def _resolved_overlay(overlay: Mapping[Path, str] | None) -> dict[Path, str]:
    """The overlay keyed by real paths (buffers are named as the editor opened them)."""
    texts: dict[Path, str] = {}
    for path, text in (overlay or {}).items():
        key = real_path(path)
        if key is not None:
            texts[key] = text
    return texts


def _folders(card: Path) -> list[Path]:
    """The card's folder and up to `_LEVELS` above it, written as given (not resolved:
    a link to the card's folder is searched where the editor opened it)."""
    folder = Path(os.path.abspath(card)).parent
    folders = [folder]
    for _ in range(_LEVELS):
        if folder.parent == folder:
            break
        folder = folder.parent
        folders.append(folder)
    return folders


def _candidates(card: Path, texts: Mapping[Path, str]) -> list[Path]:
    """`.eair` files of the searched folders, at most `_MAX_WORLDS`: files on disk that
    are (links resolved) inside their folder, and unsaved buffers in them."""
    found: list[Path] = []
    for folder in _folders(card):
        found.extend(_eair_files(folder, _MAX_WORLDS - len(found)))
        for path in texts:
            if path.suffix == ".eair" and path.parent == real_path(folder) \
                    and path not in found and len(found) < _MAX_WORLDS:
                found.append(path)
    return found


def _eair_files(folder: Path, room: int) -> list[Path]:
    """Up to `room` `.eair` files directly in `folder`, skipping links that leave it."""
    files: list[Path] = []
    base = real_path(folder)
    if base is None or room <= 0:
        return files
    try:
        with os.scandir(folder) as entries:
            for seen, entry in enumerate(entries):
                if seen >= _MAX_ENTRIES or len(files) >= room:
                    break
                if not entry.name.endswith(".eair"):
                    continue
                resolved = _inside(Path(entry.path), base)
                if resolved is not None:
                    files.append(resolved)
    except OSError:
        return files
    return files


def _inside(path: Path, base: Path) -> Path | None:
    """The real path of `path` when it is a regular file in `base` (no link out)."""
    resolved = real_path(path)
    try:
        if resolved is not None and resolved.is_relative_to(base) and resolved.is_file():
            return resolved
    except OSError:
        return None
    return None


def _world_text(world: Path, texts: Mapping[Path, str]) -> str | None:
    """A world's buffer, else its file as the compiler reads it (None if unreadable)."""
    key = real_path(world)
    if key is not None and key in texts:
        return texts[key]
    try:
        return read_source(world).text
    except (SourceError, OSError):
        return None


def _names_card(world: Path, text: str | None, card: Path) -> bool:
    """Does a party of this world file name `card` (a real path)?"""
    if text is None or (card.name not in text and "\\" not in text):
        return False  # the `card "..."` string would hold the file's name
    return any(_resolves_to(world.parent, written, card)
               for written in _card_paths(text, str(world)))


@lru_cache(maxsize=256)
def _card_paths(text: str, name: str) -> tuple[str, ...]:
    """The `card "..."` paths written in a world's text (parsed tolerantly; cached by
    text, since every hover of a card asks again)."""
    module = tolerant_module(text, name)
    return tuple(card.text for _, card in _parties_with_cards(module))


def _parties_with_cards(module: A.Module) -> Iterator[tuple[A.PartyDecl, A.CardClause]]:
    """The parties of a module that have a card (roles and simulators must), with it."""
    for decl in module.decls:
        match decl:
            case A.PartyDecl(clauses=clauses):
                card = A.first_clause(clauses, A.CardClause)
                if card is not None:
                    yield decl, card


def _resolves_to(folder: Path, written: str, card: Path) -> bool:
    """Does `written`, relative to a world's folder, name `card` as the checker resolves
    it (inside the folder, links resolved)?"""
    path = resolve_data_path(folder, written, _NOWHERE, Diagnostics())
    return path is not None and real_path(path) == card


#: where resolve_data_path's diagnostics would point (they are not shown)
_NOWHERE = Span(file="", line=1, col=1, end_line=1, end_col=1)


# ------------------------------------------------------------------ what the worlds declare


@dataclass(frozen=True)
class _Party:
    """A party that uses the card, in the module that declares it."""

    decl: A.PartyDecl
    module: ModuleIndex
    definition: Definition | None


@dataclass
class _World:
    """One world that uses the card: its index and the parties naming the card."""

    index: ProgramIndex
    parties: list[_Party]


def _worlds(card: Path, overlay: Mapping[Path, str] | None) -> list[_World]:
    """The indexes of the worlds that use `card`, with their parties that do."""
    key = real_path(card)
    if key is None:
        return []
    texts = _resolved_overlay(overlay)
    found: list[_World] = []
    for path in worlds_using(card, overlay):
        text = _world_text(path, texts)
        if text is None:
            continue
        index = index_program(path, text, overlay)
        found.append(_World(index, [party for module in index.modules
                                    for party in _card_parties(index, module, key)]))
    return found


def _card_parties(index: ProgramIndex, module: ModuleIndex, card: Path) -> Iterator[_Party]:
    """The parties of `module` whose card is `card`, resolved from the module's own
    folder (as the checker does: a party declared in an imported module names its card
    relative to that module), with their declarations in the index."""
    for decl, clause in _parties_with_cards(module.module):
        if _resolves_to(module.path.parent, clause.text, card):
            definition = next((d for d in index.top_level(decl.name)
                               if d.path == module.path and d.span == decl.span), None)
            yield _Party(decl, module, definition)


# ------------------------------------------------------------------ lexing the card


@dataclass(frozen=True)
class _Token:
    """A jinja2 token with its offset in the card."""

    kind: str
    value: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.value)


@dataclass(frozen=True)
class _Tag:
    """A `{{ }}` or `{% %}` tag: its tokens between the delimiters, whitespace left out
    (`end` is past the closer, or where lexing of an unclosed tag stopped)."""

    block: bool
    tokens: tuple[_Token, ...]
    start: int
    end: int

    @property
    def keyword(self) -> str | None:
        """`for`, `set`, `include`, ... for a block tag."""
        if self.block and self.tokens and self.tokens[0].kind == "name":
            return self.tokens[0].value
        return None


_ENV = jinja2.Environment()
_OPENERS = {"variable_begin": False, "block_begin": True}
_CLOSERS = ("variable_end", "block_end")
_BEGINS = ("variable_begin", "block_begin", "comment_begin", "raw_begin")
_ENDS = ("variable_end", "block_end", "comment_end", "raw_end")


def _normal(text: str) -> str:
    """Newlines as jinja2 (and the editor's line numbers) count them."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _lexed(text: str) -> Iterator[_Token]:
    """The card's tokens with their offsets. After a syntax error (an unbalanced bracket,
    a stray character) lexing resumes just past the opener of the tag it was in, so one
    broken tag leaves the rest of the card readable."""
    pos = 0
    for _ in range(_ROUNDS):
        at, opened = pos, None
        try:
            for _line, kind, value in _ENV.lexer.tokeniter(text[pos:], None):
                at = _aligned(text, value, at)
                if at < 0:  # lexer and text disagree: stop here
                    return
                if kind in _BEGINS:
                    opened = at + (2 if kind != "raw_begin" else len(value))
                elif kind in _ENDS:
                    opened = None
                yield _Token(kind, value, at)
                at += len(value)
            return
        except jinja2.TemplateError:
            if opened is None or opened <= pos:
                return
            pos = opened


def _aligned(text: str, value: str, at: int) -> int:
    """Where a token's `value` is written, at `at` or after the whitespace a `{%-` or
    `{{-` stripped from the text before it; -1 when it is not."""
    if text.startswith(value, at):
        return at
    skipped = _SPACE.match(text, at)
    end = skipped.end() if skipped is not None else at
    return end if end > at and text.startswith(value, end) else -1


_SPACE = re.compile(r"\s+")


@lru_cache(maxsize=16)
def _tags(text: str) -> tuple[_Tag, ...]:
    """Every tag of the card, in order (cached: each request on a buffer asks again)."""
    tags: list[_Tag] = []
    current: list[_Token] | None = None
    block, start = False, 0
    for token in _lexed(text):
        if token.kind in _OPENERS or (current is not None and token.kind in (*_BEGINS, "data")):
            if current is not None:  # an unclosed tag ends where the next text starts
                end = max([token.start, *(t.end for t in current[-1:])])
                tags.append(_Tag(block, tuple(current), start, end))
            current = [] if token.kind in _OPENERS else None
            block, start = _OPENERS.get(token.kind, False), token.start
        elif token.kind in _CLOSERS and current is not None:
            tags.append(_Tag(block, tuple(current), start, token.end))
            current = None
        elif current is not None and token.kind != "whitespace":
            current.append(token)
    if current is not None:
        tags.append(_Tag(block, tuple(current), start, len(text)))
    return tuple(tags)


def _offset(text: str, line: int, col: int) -> int | None:
    """The offset of a 0-based (line, col), None past the end of the text."""
    lines = text.split("\n")
    if not 0 <= line < len(lines) or not 0 <= col <= len(lines[line]):
        return None
    return sum(len(row) + 1 for row in lines[:line]) + col


def _tag_at(text: str, offset: int) -> _Tag | None:
    """The tag the cursor is in (or just after the last character of)."""
    return next((tag for tag in _tags(text) if tag.start <= offset <= tag.end), None)


def _token_at(tag: _Tag, offset: int) -> int | None:
    """The index of the name or string under the cursor (or just before it)."""
    touching = [i for i, t in enumerate(tag.tokens)
                if t.kind in ("name", "string") and t.start <= offset <= t.end]
    inside = [i for i in touching if tag.tokens[i].start <= offset < tag.tokens[i].end]
    return next(iter(inside or touching), None)


# ------------------------------------------------------------------ what the cursor is on


@dataclass(frozen=True)
class _Use:
    """A card variable under the cursor: `levers.x` is root `levers`, keys `("x",)`
    (the keys up to the one under the cursor)."""

    root: str
    keys: tuple[str, ...]


def _string(token: _Token) -> str | None:
    """A string token's value (`"x"` -> `x`), None when it is not a plain literal."""
    try:
        value = ast.literal_eval(token.value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _chain(tokens: tuple[_Token, ...], last: int) -> tuple[int, list[str]] | None:
    """Walk back from the end of `root.a["b"].c`: the root's index and the keys after it,
    None when the chain does not start at a plain name."""
    keys: list[str] = []
    i = last
    while i >= 0:
        token = tokens[i]
        if token.kind == "name":
            if i >= 2 and tokens[i - 1].value == ".":
                keys.append(token.value)
                i -= 2
                continue
            keys.reverse()
            return i, keys
        if token.value == "]" and i >= 3 and tokens[i - 2].value == "[" \
                and tokens[i - 1].kind == "string":
            key = _string(tokens[i - 1])
            if key is None:
                return None
            keys.append(key)
            i -= 3
            continue
        return None
    return None


def _use_at(text: str, tag: _Tag, index: int) -> _Use | None:
    """The card variable the token at `index` belongs to, None for anything else (a
    loop variable, a filter, a keyword, a name the template binds itself)."""
    tokens = tag.tokens
    last = index
    if tokens[index].kind == "string":  # `levers["x"]`: the chain ends at its `]`
        if not (0 < index < len(tokens) - 1 and tokens[index - 1].value == "["
                and tokens[index + 1].value == "]"):
            return None
        last = index + 1
    found = _chain(tokens, last)
    if found is None:
        return None
    root, keys = found
    name = tokens[root].value
    if name not in CARD_VARIABLES or not _is_variable(tag, root):
        return None
    if name in _bound_at(text, tag):
        return None
    return _Use(name, tuple(keys))


def _is_variable(tag: _Tag, root: int) -> bool:
    """Is the name at `root` read as a variable (not a filter or test name, a keyword
    argument, or a name this tag binds)?"""
    tokens = tag.tokens
    before = tokens[root - 1] if root > 0 else None
    after = tokens[root + 1] if root + 1 < len(tokens) else None
    if before is not None and (before.value in ("|", "is") or (
            before.value == "not" and root > 1 and tokens[root - 2].value == "is")):
        return False
    if after is not None and after.value == "=" and before is not None \
            and before.value in ("(", ","):
        return False
    return root not in _targets(tag)


# ------------------------------------------------------------------ names a card binds


def _targets(tag: _Tag) -> set[int]:
    """Indexes of the names a block tag binds: `for a, b in`, `set x =`, `with x =`,
    macro and call arguments, `import ... as x`, `from ... import x`."""
    tokens = tag.tokens
    match tag.keyword:
        case "for":
            stop = next((i for i, t in enumerate(tokens) if i > 0 and t.value == "in"),
                        len(tokens))
            return {i for i in range(1, stop) if tokens[i].kind == "name"}
        case "set":
            stop = next((i for i, t in enumerate(tokens) if t.value == "="), len(tokens))
            return {i for i in range(1, stop) if tokens[i].kind == "name"
                    and tokens[i - 1].value != "."}
        case "with":
            return {i for i in range(1, len(tokens) - 1) if tokens[i].kind == "name"
                    and tokens[i + 1].value == "=" and tokens[i - 1].value in ("with", ",")}
        case "macro" | "call":
            return _arguments(tokens)
        case "import":
            return {i for i in range(1, len(tokens)) if tokens[i - 1].value == "as"}
        case "from":
            start = next((i for i, t in enumerate(tokens) if t.value == "import"), len(tokens))
            return {i for i in range(start + 1, len(tokens)) if tokens[i].kind == "name"}
        case _:
            return set()


def _arguments(tokens: tuple[_Token, ...]) -> set[int]:
    """A macro's name and parameters, or a call block's parameters (`call(a, b)`):
    names at the first parentheses' depth followed by `,`, `=` or `)`."""
    found = {1} if len(tokens) > 1 and tokens[0].value == "macro" else set()
    depth, closed = 0, False
    for i, token in enumerate(tokens):
        if token.value == "(":
            depth += 1
        elif token.value == ")":
            depth -= 1
            closed = closed or depth == 0
        elif not closed and depth == 1 and token.kind == "name" and i + 1 < len(tokens) \
                and tokens[i + 1].value in (",", "=", ")") and tokens[i - 1].value in ("(", ","):
            found.add(i)
    return found


#: block tags that open a scope for the names they bind, and the tag that ends it
_SCOPES = {"for": "endfor", "macro": "endmacro", "call": "endcall", "with": "endwith"}


def _bound_at(text: str, at: _Tag) -> set[str]:
    """Names the template itself binds where `at` is: loop variables, macro arguments,
    `set` and `with` names, imports. A `for` binds in its body, `set` from its tag on
    in the enclosing scope."""
    scopes: list[tuple[str | None, set[str]]] = [(None, set())]
    for tag in _tags(text):
        if tag.start >= at.start:
            break
        keyword = tag.keyword
        names = {tag.tokens[i].value for i in _targets(tag)}
        if keyword in _SCOPES:
            if keyword == "macro" and names:
                scopes[-1][1].add(tag.tokens[1].value)
            scopes.append((_SCOPES[keyword], names))
        elif keyword is not None and keyword.startswith("end"):
            ends = [end for end, _ in scopes]
            if keyword in ends:
                del scopes[len(ends) - 1 - ends[::-1].index(keyword):]
        else:
            scopes[-1][1].update(names)
    return set().union(*(names for _, names in scopes))


# ------------------------------------------------------------------ hover


def card_hover(card: Path, text: str, line: int, col: int,
               overlay: Mapping[Path, str] | None = None) -> str | None:
    """Markdown for the card variable under the 0-based (line, col): what it holds and
    what the worlds using the card declare for it; None when the cursor is not on one."""
    text = _normal(text)
    use = _cursor_use(text, line, col)
    if use is None:
        return None
    worlds = _worlds(card, overlay)
    declared = _declared(use, worlds)
    parts = [_variable_doc(use), *declared]
    if not worlds:
        parts.append("*No world near this card names it with `card \"...\"`.*")
    elif not declared and _looked_up(use):
        users = ", ".join(f"`{p.decl.name}`" for w in worlds for p in w.parties)
        parts.append(f"*The worlds using this card (for {users}) declare none.*")
    return "\n\n".join(parts)


def _looked_up(use: _Use) -> bool:
    """Is the variable read from declarations (so that finding none is worth saying)?"""
    return use.root != "levers" or bool(use.keys)


def _cursor_use(text: str, line: int, col: int) -> _Use | None:
    """The card variable at a 0-based position, if the cursor is on one in a tag."""
    offset = _offset(text, line, col)
    tag = _tag_at(text, offset) if offset is not None else None
    index = _token_at(tag, offset) if tag is not None and offset is not None else None
    if tag is None or index is None:
        return None
    return _use_at(text, tag, index)


def _variable_doc(use: _Use) -> str:
    """The variable as written and its one-line doc (the role attribute's, for `role.X`)."""
    shown = use.root + "".join(f".{k}" for k in use.keys[:1])
    if use.root == "role" and use.keys and use.keys[0] in _ROLE_DOCS:
        return f"`{shown}` (card variable): {_ROLE_DOCS[use.keys[0]]}"
    return f"`{shown}` (card variable): {_VARIABLE_DOCS[use.root]}"


def _declared(use: _Use, worlds: list[_World]) -> list[str]:
    """What the worlds declare for the variable, one paragraph per declaration."""
    lines: list[str] = []
    for world in worlds:
        lines.extend(_show(d) for d in _declarations(use, world))
        if use.root == "role" and use.keys and use.keys[0] in _ROLE_CLAUSES:
            lines.extend(_clause_lines(use.keys[0], world))
    return list(dict.fromkeys(lines))


def _show(definition: Definition) -> str:
    """A declaration as hover shows it: its header line, doc and module."""
    doc = f"\n\n{definition.doc}" if definition.doc else ""
    return f"```eair\n{definition.header}\n```{doc}\n\n*{definition.kind} in " \
           f"`{definition.module}`*"


def _clause_lines(key: str, world: _World) -> list[str]:
    """`role.kpi` and the like: the clause each party writes, as written."""
    found = []
    for party in world.parties:
        clause = A.last_clause(party.decl.clauses, _ROLE_CLAUSES[key])
        if clause is not None:
            found.append(f"`{party.decl.name}`: `{_written(party.module.text, clause.span)}`")
    return found


def _written(text: str, span: Span) -> str:
    """The first line of a clause as written."""
    lines = text.split("\n")
    row = lines[span.line - 1] if 0 < span.line <= len(lines) else ""
    end = span.end_col - 1 if span.end_line == span.line else len(row)
    return row[span.col - 1:end].strip()


# ------------------------------------------------------------------ definitions


def _declarations(use: _Use, world: _World) -> list[Definition]:
    """The declarations the variable reads in one world."""
    index = world.index
    match use.root:
        case "levers":
            return _levers(index, use.keys[:1])
        case "role":
            return [p.definition for p in world.parties if p.definition is not None]
        case "roles":
            return _of_kind(index, ("role",))
        case "tools":
            return _tools(world)
        case "condition":
            return _of_kind(index, ("condition",))
        case "world":
            return _of_kind(index, ("world",))
        case "prompt_clauses":
            return _inducers(world, "prompt_clause")
        case "inducers":
            return _inducers(world, use.keys[0] if use.keys else None)
        case _:
            return []


def _levers(index: ProgramIndex, keys: tuple[str, ...]) -> list[Definition]:
    """`levers.NAME`: the lever NAME, wherever the world's modules declare it (a stdlib
    module's levers are the world's too); bare `levers` names no one lever."""
    if not keys:
        return []
    return [d for d in index.top_level(keys[0]) if d.kind == "lever"]


def _of_kind(index: ProgramIndex, kinds: tuple[str, ...]) -> list[Definition]:
    """Every top-level declaration of these kinds in the world's modules."""
    return [d for d in index.definitions() if d.kind in kinds and d.container is None]


def _tools(world: _World) -> list[Definition]:
    """The tools the card's parties list (every `tools` clause, whatever its `when`)."""
    names = [ref.name for party in world.parties for clause in party.decl.clauses
             if isinstance(clause, A.ToolsClause) for ref in clause.refs]
    return [d for name in dict.fromkeys(names)
            for d in world.index.top_level(name) if d.kind == "tool"]


def _inducers(world: _World, kind: str | None) -> list[Definition]:
    """The inducers (of `kind`, when given) that apply to one of the card's parties."""
    parties = {party.decl.name for party in world.parties}
    found: list[Definition] = []
    for module in world.index.modules:
        for decl in module.module.decls:
            if isinstance(decl, A.InducerDecl) and (kind is None or decl.kind == kind) \
                    and _applies(decl, parties):
                found.extend(d for d in world.index.top_level(decl.name)
                             if d.kind == "inducer" and d.span == decl.span)
    return found


def _applies(inducer: A.InducerDecl, parties: set[str]) -> bool:
    """An inducer applies to the parties its `roles` name, or to all without one."""
    named = [n for c in inducer.clauses if isinstance(c, A.RolesClause) for n in c.names]
    return not named or not parties or bool(parties.intersection(named))


def card_definition(card: Path, text: str, line: int, col: int,
                    overlay: Mapping[Path, str] | None = None) -> list[tuple[Path, T.Range]]:
    """Where the card variable under the cursor is declared in the worlds using the card
    (for `role.kpi`, the parties' `kpi` clauses), or the partial an `{% include %}`,
    `{% import %}` or `{% extends %}` string names; empty when nothing is known."""
    text = _normal(text)
    offset = _offset(text, line, col)
    tag = _tag_at(text, offset) if offset is not None else None
    index = _token_at(tag, offset) if tag is not None and offset is not None else None
    if tag is None or index is None:
        return []
    if tag.keyword in _LOADING and tag.tokens[index].kind == "string":
        return _partial(card, tag.tokens[index], overlay)
    use = _use_at(text, tag, index)
    if use is None:
        return []
    found: list[tuple[Path, T.Range]] = []
    for world in _worlds(card, overlay):
        found.extend(_targets_of(use, world))
    return _unique(found)


def _key(span: T.Range) -> tuple[int, int, int, int]:
    """A range as a hashable value (lsprotocol's ranges are not hashable)."""
    return (span.start.line, span.start.character, span.end.line, span.end.character)


def _unique(found: list[tuple[Path, T.Range]]) -> list[tuple[Path, T.Range]]:
    """Each location once, first come first kept (two worlds may import one module)."""
    seen: set[tuple[Path, tuple[int, int, int, int]]] = set()
    kept = []
    for path, span in found:
        if (path, _key(span)) not in seen:
            seen.add((path, _key(span)))
            kept.append((path, span))
    return kept


def _targets_of(use: _Use, world: _World) -> list[tuple[Path, T.Range]]:
    """A variable's declarations in one world, as locations; `role.kpi` and the other
    clause-backed attributes go to the clause each party writes."""
    if use.root == "role" and use.keys and use.keys[0] in _ROLE_CLAUSES:
        clauses = [(p.module.path, A.last_clause(p.decl.clauses, _ROLE_CLAUSES[use.keys[0]]))
                   for p in world.parties]
        return [(path, lsp_range(c.span)) for path, c in clauses if c is not None]
    return [(d.path, d.word.range()) for d in _declarations(use, world)]


def _partial(card: Path, token: _Token, overlay: Mapping[Path, str] | None
             ) -> list[tuple[Path, T.Range]]:
    """The template a loading tag's string names, relative to the card's folder as the
    checker loads it; only when it lies (links resolved) in a world's folder or the
    card's own, and is a file."""
    written = _string(token)
    if not written or name_problem(written, "template path") is not None \
            or os.path.isabs(written) or written.startswith(("/", "~", "\\")) \
            or re.match(r"^[A-Za-z]:", written):  # refused as the checker's loader does
        return []
    card = Path(os.path.abspath(card))
    path = Path(os.path.normpath(card.parent.joinpath(*written.replace("\\", "/").split("/"))))
    roots = [real_path(w.parent) for w in worlds_using(card, overlay)] or [real_path(card.parent)]
    resolved = real_path(path)
    if resolved is None or not any(r is not None and resolved.is_relative_to(r) for r in roots):
        return []
    try:
        if not resolved.is_file():
            return []
    except OSError:
        return []
    start = T.Position(line=0, character=0)
    return [(path, T.Range(start=start, end=start))]
