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
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
import jinja2.nodes
import jinja2.parser
from jinja2.exceptions import SecurityError

from eairdsl.check.data import data_ref
from eairdsl.check.loader import LoadedModule, resolve_data_path
from eairdsl.check.sandbox import (
    MAX_OUTPUT,
    MAX_RANGE,
    MAX_STEPS,
    CardEnvironment,
    CardEscape,
    CardLimit,
    CardLoader,
    CardUnsafe,
)
from eairdsl.check.static import UNKNOWN, FoldPlans, fold, uses_only_levers
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.source import SourceFile, Span, display_name
from eairdsl.syntax import ast as A
from eairdsl.vocabulary import RISKS

__all__ = ["render_cards", "forbidden_words", "card_context", "CARD_VARIABLES"]

CARD_VARIABLES = ("role", "condition", "levers", "prompt_clauses", "inducers", "tools", "roles",
                  "world")


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


def _span_at(text: str, start: int, length: int, file: str) -> Span:
    line = text.count("\n", 0, start) + 1
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    return Span(file=file, line=line, col=col, end_line=line, end_col=col + length)


def _locate(text: str, needle: str, file: str) -> Span | None:
    match = re.search(re.escape(needle), text, re.IGNORECASE)
    return None if match is None else _span_at(text, match.start(), len(needle), file)


def _locate_variable(text: str, name: str, file: str) -> Span | None:
    """Where a template variable is used: inside a {{ }} or {% %} tag, as a whole word."""
    for tag in re.finditer(r"\{\{.*?\}\}|\{%.*?%\}", text, re.S):
        word = re.search(rf"\b{re.escape(name)}\b", tag.group(0))
        if word is not None:
            return _span_at(text, tag.start() + word.start(), len(name), file)
    return None


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
    for party in world.parties.values():
        card = A.first_clause(party.clauses, A.CardClause)
        if card is None:
            continue
        module = world.module(party)
        path = resolve_data_path(module.path.parent, card.text, card.span, diagnostics)
        shown = display_name(path) if path is not None else card.text
        if path is None:
            continue
        if not path.is_file():
            diagnostics.error("E206", f"card template not found: {card.text}", card.span,
                              f"expected it at {path}")
            continue
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            diagnostics.error("E102", f"card template {card.text} is not readable UTF-8 text",
                              card.span)
            continue
        world.data_files[data_ref(module, card.text)] = source.encode()
        world.program.sources[shown] = SourceFile(name=shown, path=str(path), text=source)
        _render_party(world, party, path, shown, source, card, words, plans, envs, diagnostics)


def _render_party(world: CheckedWorld, party: A.PartyDecl, path: Path, shown: str,
                  source: str, card: A.Clause, words: list[str], plans: FoldPlans,
                  envs: list[CardEnvironment], diagnostics: Diagnostics) -> None:
    module = world.module(party)
    loader = CardLoader(module.path.parent, path.parent)
    if envs:  # each card has its own loader (its folder, the files it loaded)...
        env = envs[0]
        env.loader = loader  # ...the environment's template cache is keyed by the loader
    else:
        env = CardEnvironment(loader)
        envs.append(env)
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
            span = _locate_variable(source, name, shown) or card.span
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
            for word in words:
                if word.lower() in text.lower():
                    found = _locate(source, word, shown) or _inducer_span(world, word)
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
    if isinstance(exc, jinja2.UndefinedError):
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
