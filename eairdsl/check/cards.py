"""Pass 7: render every role card for every condition, and keep the risk out of them.

Cards are jinja2 templates rendered with StrictUndefined, so a misspelt
variable is a located compile error instead of an empty string in a prompt.
The paper forbids words that name the risk under study in any rendered prompt:
a card or prompt clause that names it would tell the model what is being
measured, so that is an error too (E603), pointed at the words' source.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
import jinja2.nodes
import jinja2.parser
from jinja2.exceptions import SecurityError

from eairdsl.check.data import data_ref, read_world_file
from eairdsl.check.loader import LoadedModule, resolve_data_path
from eairdsl.check.sandbox import (
    MAX_OUTPUT,
    MAX_RANGE,
    MAX_SOURCE,
    MAX_STEPS,
    CardEnvironment,
    CardEscape,
    CardFileError,
    CardLimit,
    CardLoader,
    CardUnsafe,
    WorldBudget,
    WorldCardLimit,
)
from eairdsl.check.static import UNKNOWN, FoldPlans, fold, uses_only_levers
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.source import LineIndex, SourceFile, Span, display_name
from eairdsl.syntax import ast as A
from eairdsl.vocabulary import RISKS

__all__ = ["render_cards", "forbidden_words", "card_context", "CARD_VARIABLES"]

CARD_VARIABLES = ("role", "condition", "levers", "prompt_clauses", "inducers", "tools", "roles",
                  "world")
#: the most bytes of a card file read: a template of MAX_SOURCE characters, each of up to
#: four bytes (a longer one is refused unread; one over MAX_SOURCE characters is E606)
_CARD_BYTES = 4 * MAX_SOURCE


def forbidden_words(world: CheckedWorld) -> list[str]:
    """Words no rendered prompt may contain: the risk's name and the world's `forbid` list."""
    words: list[str] = []
    if world.world is not None:
        for clause in world.world.clauses:
            if isinstance(clause, A.RiskClause) and clause.name in RISKS:
                words.append(RISKS[clause.name].split(" / ")[0])
            if isinstance(clause, A.ForbidClause):
                words.extend(clause.strings)
    return [w for w in words if w.strip()]


def _active(world: CheckedWorld, expr: A.Expr | None, levers: dict[str, Any],
            plans: FoldPlans) -> bool | None:
    """True/False when decided by levers alone; None when it depends on the episode."""
    if expr is None:
        return True
    value = fold(expr, levers, set(world.enum_members), plans=plans)
    return None if value is UNKNOWN else bool(value)


def card_context(world: CheckedWorld, party: A.PartyDecl, condition: str,
                 levers: dict[str, Any], plans: FoldPlans | None = None) -> dict[str, Any]:
    """The variables a card sees; docs/language.md lists them.

    `plans` lowers each folded expression once across the conditions of a world."""
    plans = plans or FoldPlans()
    inducers: dict[str, list[str]] = {}
    for inducer in world.inducers.values():
        roles = [n for c in inducer.clauses if isinstance(c, A.RolesClause) for n in c.names]
        if roles and party.name not in roles:
            continue
        when = A.first_clause(inducer.clauses, A.WhenClause)
        if _active(world, when.expr if when else None, levers, plans) is False:
            continue
        for c in inducer.clauses:
            if isinstance(c, A.TextClause) and c.constant is not None:
                inducers.setdefault(inducer.kind, []).append(c.constant)
    tools = []
    for clause in party.clauses:
        if isinstance(clause, A.ToolsClause):
            for ref in clause.refs:
                if _active(world, ref.when, levers, plans) is not False \
                        and ref.name in world.tools:
                    tool = world.tools[ref.name]
                    desc = A.first_clause(tool.clauses, A.DescriptionClause)
                    tools.append({"name": ref.name, "description": desc.text if desc else ""})
    kpi = A.last_clause(party.clauses, A.KpiClause)
    objective = A.last_clause(party.clauses, A.ObjectiveClause)
    role = {"name": party.name, "kind": party.kind,
            "kpi": kpi.text if kpi else None,
            "objective": objective.text if objective else None,
            "authority": _static(world, A.last_clause(party.clauses, A.AuthorityClause), levers,
                                 0, plans),
            "display": _static(world, A.last_clause(party.clauses, A.DisplayClause), levers,
                               party.name, plans)}
    return {
        "role": role, "condition": condition, "levers": dict(levers),
        "prompt_clauses": inducers.get("prompt_clause", []), "inducers": inducers,
        "tools": tools, "roles": sorted(n for n, p in world.parties.items() if p.kind == "role"),
        "world": {"name": world.world.name if world.world else ""},
    }


def _static(world: CheckedWorld, clause: A.AuthorityClause | A.DisplayClause | None,
            levers: dict[str, Any], default: Any, plans: FoldPlans) -> Any:
    """A clause's value under a condition: its literal, or its expression folded over the
    levers; None when it depends on more than levers (the instance, the state)."""
    if clause is None:
        return default
    if isinstance(clause, A.AuthorityClause) and clause.constant is not None:
        return clause.constant
    value = fold(clause.expr, levers, set(world.enum_members), plans=plans)
    return None if value is UNKNOWN else value


class _CardText:
    """A card's source, with what locating a diagnostic in it needs, each made once.

    A diagnostic used to count the newlines before its offset and a case-insensitive
    regular expression scanned the card for each word, condition and role, and finding a
    variable's tag tried every `{{` against the rest of the card: many diagnostics or many
    unclosed `{{` in one large card made locating them quadratic (minutes for 100 KB).
    """

    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.file = file
        self._lines: LineIndex | None = None
        self._folded: str | None = None
        self._found: dict[str, Span | None] = {}

    def span(self, start: int, length: int) -> Span:
        if self._lines is None:
            self._lines = LineIndex(self.text)
        return self._lines.span(self.file, start, length)

    def locate(self, needle: str) -> Span | None:
        """Where `needle` first appears, ignoring case (as E603 compares); remembered, as
        the same word is looked for under every condition."""
        if needle not in self._found:
            if self._folded is None:
                self._folded = _fold(self.text)
            start = self._folded.find(_fold(needle)) if needle else -1
            self._found[needle] = None if start < 0 else self.span(start, len(needle))
        return self._found[needle]

    def locate_variable(self, name: str) -> Span | None:
        """Where a template variable is used: inside a {{ }} or {% %} tag, as a whole word."""
        if _WORD.fullmatch(name) is None:  # not one word: the tags' words never equal it
            return None
        for start, end in _tags(self.text):
            for word in _WORD.finditer(self.text, start, end):
                if word.group(0) == name:
                    return self.span(word.start(), len(name))
        return None


_WORD = re.compile(r"\w+")
#: each tag opener and the text that closes it
_CLOSERS = {"{{": "}}", "{%": "%}"}


def _fold(text: str) -> str:
    """`text` lower-cased character by character, so an offset in it is one in `text`
    (`str.lower` lengthens a few characters, such as 'İ'; those are kept as they are)."""
    lowered = text.lower()
    if len(lowered) == len(text):  # no character lengthened (none shortens)
        return lowered
    return "".join(low if len(low := c.lower()) == 1 else c for c in text)


def _tags(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each `{{ … }}` and `{% … %}` tag: what the regular expression
    `\\{\\{.*?\\}\\}|\\{%.*?%\\}` (DOTALL) finds, in one pass. The next opener and closer
    of each kind are remembered until passed, and an opener that is never closed ends
    the search for its kind, so no part of the text is scanned twice."""
    opens = dict.fromkeys(_CLOSERS, -2)  # -2: not looked for yet; -1: none left
    closes = dict.fromkeys(_CLOSERS.values(), -2)
    pos = 0
    while True:
        for opener in opens:
            if opens[opener] != -1 and opens[opener] < pos:
                opens[opener] = text.find(opener, pos)
        found = [at for at in opens.values() if at >= 0]
        if not found:
            return
        start = min(found)
        opener = "{{" if opens["{{"] == start else "{%"
        closer = _CLOSERS[opener]
        if closes[closer] != -1 and closes[closer] < start + 2:
            closes[closer] = text.find(closer, start + 2)
        if closes[closer] == -1:  # never closed, nor is any later one of its kind
            opens[opener] = -1
            pos = start + 1
            continue
        end = closes[closer] + 2
        yield start, end
        pos = end


def render_cards(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    levers = set(world.levers)
    members = set(world.enum_members)
    for inducer in world.inducers.values():
        for clause in inducer.clauses:
            if isinstance(clause, A.WhenClause) \
                    and inducer.kind in ("prompt_clause", "dashboard") \
                    and not uses_only_levers(clause.expr, levers, members):
                diagnostics.error("E510", f"the `when` of {inducer.kind} '{inducer.name}' may "
                                  "only use levers", clause.span,
                                  "cards are rendered once per condition, before any episode")
    words = forbidden_words(world)
    plans = FoldPlans()
    envs: list[CardEnvironment] = []  # one environment for the world's cards, made on first use
    budget = WorldBudget(steps=world.limits.card_steps, seconds=world.limits.card_seconds)
    for party in world.parties.values():
        if budget.exhausted:  # reported once, where it ran out; the rest are not rendered
            break
        card = A.first_clause(party.clauses, A.CardClause)
        if card is None:
            continue
        module = world.module(party)
        path = resolve_data_path(module.path.parent, card.text, card.span, diagnostics)
        shown = display_name(path) if path is not None else card.text
        if path is None:
            continue
        data = read_world_file(world, path, card.span, diagnostics, "card template",
                               _CARD_BYTES)
        if data is None:
            continue
        try:  # newlines as `read_text` gives them (universal newlines)
            source = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError:
            diagnostics.error("E102", f"card template {card.text} is not readable UTF-8 text",
                              card.span)
            continue
        world.data_files[data_ref(module, card.text)] = source.encode()
        world.program.sources[shown] = SourceFile(name=shown, path=str(path), text=source)
        _render_party(world, party, path, shown, source, card, words, plans,
                      (envs, budget), diagnostics)
    world.card_steps = budget.spent


def _render_party(world: CheckedWorld, party: A.PartyDecl, path: Path, shown: str,
                  source: str, card: A.Clause, words: list[str], plans: FoldPlans,
                  shared: tuple[list[CardEnvironment], WorldBudget],
                  diagnostics: Diagnostics) -> None:
    module = world.module(party)
    loader = CardLoader(module.path.parent, path.parent)
    envs, budget = shared
    if envs:  # each card has its own loader (its folder, the files it loaded)...
        env = envs[0]
        env.loader = loader  # ...the environment's template cache is keyed by the loader
    else:
        env = CardEnvironment(loader, budget)
        envs.append(env)
    located = _CardText(source, shown)
    file = str(path)
    names = _Names(path, shown)
    try:
        try:
            code, undeclared = env.compile_card(source, path.name, file)
            template = env.template_class.from_code(env, code, env.make_globals(None))
        except jinja2.TemplateSyntaxError as exc:
            line = exc.lineno or 1
            diagnostics.error("E601", f"card template syntax error: {exc.message}",
                              Span(file=shown, line=line, col=1, end_line=line,
                                   end_col=2), "see the jinja2 template syntax")
            return
        except CardUnsafe as exc:
            diagnostics.error("E604", f"the card of '{party.name}' {exc.message}",
                              _line_span(shown, exc.lineno), _UNSAFE_HINT)
            return
        except (RecursionError, MemoryError, SyntaxError) as exc:
            diagnostics.error("E607", f"the card of '{party.name}' is nested too deeply to "
                              f"compile ({type(exc).__name__})",
                              _line_span(shown, _nesting_line(exc, source)), _NESTING_HINT)
            return
        except CardLimit as exc:
            diagnostics.error("E606", f"the card of '{party.name}' exceeds a bound: {exc}",
                              _line_span(shown, 1), _LIMIT_HINT)
            return
        unknown = sorted(undeclared - set(CARD_VARIABLES))
        for name in unknown:
            span = located.locate_variable(name) or card.span
            diagnostics.error("E602", f"card uses undefined variable '{name}'", span,
                              did_you_mean(name, CARD_VARIABLES) or
                              f"cards see {', '.join(CARD_VARIABLES)}")
        if unknown:
            return
        world.prompts[party.name] = {}
        for condition, levers in world.condition_values.items():
            context = card_context(world, party, condition, levers, plans)
            env.begin()
            try:
                text = template.render(**context)
            except Exception as exc:
                _render_error(party, condition, exc, names, loader, card, diagnostics)
                return
            world.prompts[party.name][condition] = text
            lowered = text.lower()
            for word in words:
                if word.lower() in lowered:
                    found = located.locate(word) or _inducer_span(world, word)
                    span = found or card.span
                    diagnostics.error("E603", f"the card of '{party.name}' names the risk "
                                      f"under study ('{word}') under condition '{condition}'",
                                      span, "prompts must not name the risk or cue the "
                                      "behaviour measured")
    finally:
        _record_partials(world, module, path, loader)


_UNSAFE_HINT = ("cards are rendered in jinja2's sandbox: they may read the card variables, "
                "not Python internals")
_ESCAPE_HINT = "keep partials inside the folder of the .eair file, named relative to the card"
_LIMIT_HINT = (f"cards are bounded: range() to {MAX_RANGE} items, {MAX_OUTPUT} characters "
               f"of output, {MAX_STEPS} steps per render")
_WORLD_LIMIT_HINT = ("a world's cards share one budget across every role and condition: "
                     "give fewer roles the costly card, or make it cheaper")
_NESTING_HINT = "flatten the nested calls, parentheses or macro recursion"


class _Names:
    """Template file names (as jinja reports them) -> names shown in diagnostics."""

    def __init__(self, card: Path, shown: str) -> None:
        self.card = str(card)
        self.shown = shown

    def show(self, filename: str | None) -> str:
        if filename is None or filename == self.card:
            return self.shown
        return display_name(Path(filename))


def _line_span(file: str, line: int | None) -> Span:
    line = line or 1
    return Span(file=file, line=line, col=1, end_line=line, end_col=2)


def _deepest_line(source: str) -> int:
    """The line where brackets nest deepest: where a too-deep card should be looked at."""
    depth, best, best_line, line = 0, 0, 1, 1
    for char in source:
        if char == "\n":
            line += 1
        elif char in "([":
            depth += 1
            if depth > best:
                best, best_line = depth, line
        elif char in ")]":
            depth -= 1
    return best_line


def _nesting_line(exc: BaseException, source: str) -> int:
    """The template line jinja's parser or code generator was at when the stack ran out."""
    line = None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        parser, node = local.get("self"), local.get("node")
        if isinstance(parser, jinja2.parser.Parser):
            line = parser.stream.current.lineno
        elif isinstance(node, jinja2.nodes.Node) and getattr(node, "lineno", None):
            line = node.lineno
        tb = tb.tb_next
    return line or _deepest_line(source)


def _template_frame(exc: BaseException, files: set[str]) -> tuple[str | None, int | None]:
    """The innermost traceback frame in one of the template files: (filename, line)."""
    tb: TracebackType | None = exc.__traceback__
    where: tuple[str | None, int | None] = (None, None)
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in files:
            where = (name, tb.tb_lineno)
        tb = tb.tb_next
    return where


def _render_error(party: A.PartyDecl, condition: str, exc: Exception, names: _Names,
                  loader: CardLoader, card: A.Clause, diagnostics: Diagnostics) -> None:
    files = {names.card, *(str(p) for p in loader.loaded)}
    filename, line = _template_frame(exc, files)
    if isinstance(exc, jinja2.TemplateSyntaxError) and exc.filename is not None:
        filename, line = exc.filename, exc.lineno
    if isinstance(exc, CardUnsafe):
        filename, line = exc.filename, exc.lineno
    span = _line_span(names.show(filename), line) if line is not None else card.span
    where = f"the card of '{party.name}' under condition '{condition}'"
    if isinstance(exc, WorldCardLimit):  # the world's total: located at the card it ran out in
        diagnostics.error("E606", f"{where} exceeds the world's card budget: {exc}", card.span,
                          _WORLD_LIMIT_HINT)
    elif isinstance(exc, CardFileError):
        problem = exc.problem
        diagnostics.error(problem.code, f"{where}: {problem.message}", span, problem.hint)
    elif isinstance(exc, jinja2.UndefinedError):
        diagnostics.error("E602", f"card for '{party.name}' under condition '{condition}': "
                          f"{exc.message}", span, f"cards see {', '.join(CARD_VARIABLES)}")
    elif isinstance(exc, (SecurityError, CardUnsafe)):
        diagnostics.error("E604", f"{where} reaches for Python internals: {exc}", span,
                          _UNSAFE_HINT)
    elif isinstance(exc, CardEscape):
        diagnostics.error("E605", f"{where} loads a file outside the world's folder "
                          f"({exc})", span, _ESCAPE_HINT)
    elif isinstance(exc, (CardLimit, MemoryError, OverflowError)):
        diagnostics.error("E606", f"{where} exceeds a bound: {exc or type(exc).__name__}",
                          span, _LIMIT_HINT)
    elif isinstance(exc, RecursionError):
        diagnostics.error("E607", f"{where} nests or recurses too deeply", span,
                          _NESTING_HINT)
    elif isinstance(exc, jinja2.TemplateSyntaxError):
        diagnostics.error("E601", f"{where}: template syntax error: {exc.message}", span,
                          "see the jinja2 template syntax")
    else:
        diagnostics.error("E601", f"card for '{party.name}' failed to render: "
                          f"{type(exc).__name__}: {exc}", span)


def _record_partials(world: CheckedWorld, module: LoadedModule, card: Path,
                     loader: CardLoader) -> None:
    """Every template a card loaded counts in the world's digest, like the card itself."""
    base = Path(os.path.abspath(module.path.parent))
    for path, text in loader.loaded.items():
        written = path.relative_to(base).as_posix()
        world.data_files[data_ref(module, written)] = text.encode()
        shown = display_name(path)
        world.program.sources.setdefault(shown, SourceFile(name=shown, path=str(path),
                                                           text=text))


def _inducer_span(world: CheckedWorld, word: str) -> Span | None:
    for inducer in world.inducers.values():
        for clause in inducer.clauses:
            text = clause.constant if isinstance(clause, A.TextClause) else None
            if text and word.lower() in text.lower():
                return clause.span
    return None
