"""Parse `.eair` text into an AST, turning every lark failure into a located diagnostic.

This is the syntax stage's single choke point for errors. A syntax error does not
end the parse: the parser resynchronises at the next line that starts a
top-level declaration and keeps going, so one run reports each broken
declaration once instead of only the first.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from eairdsl.diagnostics import Diagnostic, Diagnostics
from eairdsl.source import SourceFile, Span
from eairdsl.syntax import ast as A
from eairdsl.syntax.build import MAX_NESTING, too_deep, tree_to_decls
from eairdsl.vocabulary import ENUM_MEANINGS

__all__ = ["GRAMMAR_PATH", "TOP_LEVEL_KEYWORDS", "parse_source", "parse_text", "get_parser"]

#: The grammar ships inside the package (package data), next to this module.
GRAMMAR_PATH = Path(__file__).resolve().parent / "eair.lark"

TOP_LEVEL_KEYWORDS = (
    "world", "import", "enum", "schema", "record", "table", "ledger", "state", "document",
    "authorization", "policy", "lever", "condition", "inducer", "tool", "role", "actor",
    "simulator", "channel", "delegation", "fork", "merge", "relay", "instances", "instance",
    "measure", "study", "let", "protected",
)
#: Clause keywords that may follow a declaration's closing brace (an enum's meanings):
#: where the parser would also take one of them, a stray word is still "not a
#: declaration" (E110), not an unexpected token.
_TRAILING_KEYWORDS = tuple(ENUM_MEANINGS)
_RESYNC = re.compile(r"^(?:{})\b".format("|".join(TOP_LEVEL_KEYWORDS)), re.M)

_comments_lock = threading.Lock()
_comment_sink: list[Token] = []

# Known mistakes, recognised by lark's match_examples: (code, message, hint, examples).
_EXAMPLES: list[tuple[str, str, str, list[str]]] = [
    ("E107", "'=' is assignment; comparisons use '=='",
     "write `a == b` to compare two values",
     ["measure { realized = a = b }", "policy p { rule a = b }",
      "tool t() { require a = b else reject \"x\" }", "measure { realized = 1 = b }",
      "measure { realized = f(a) = b }", "measure { realized = a.b = c }",
      "measure { realized = \"x\" = b }", "measure { realized = (a) = b }",
      "measure { realized = [a] = b }", "tool t() { require a.b = c else reject \"x\" }",
      "tool t() { require f(a) = c else reject \"x\" }"]),
    ("E108", "a `require` guard needs an `else reject \"…\"` or `else route NAME`",
     "guards read `require CONDITION else reject \"message\"`",
     ["tool t() { require a }", "tool t() { require a kind read }",
      "tool t() { require a reject \"x\" }"]),
    ("E109", "a field needs a type: `name: type`",
     "write the field as `name: text` (or another type)",
     ["record r { a }", "record r { a b }", "schema s { a }", "instances from \"f\" { a }",
      "record r { a, b }", "record r { a, b c }", "record r { a, b, c }"]),
    ("E110", "expected a declaration (world, role, tool, record, measure, …)",
     "top-level items start with a declaration keyword; see docs/language.md",
     ["foo", "world w {} foo", "rol r {}", "world w {} tol t() {}"]),
]


# Known mistakes of the compact form, recognised by the parser state AND the unexpected
# token, since another token in the same state is another mistake.
_TOKEN_EXAMPLES: list[tuple[str, str, str, list[str]]] = [
    ("E113", "a field list needs a name after each `,`",
     "fields that share a type are listed `a, b, c: text`; drop the extra `,`",
     ["record r { a, : text }", "record r { a, b, : text }", "record r { a, }",
      "record r { a,, b: text }", "record r { a, b,, c: text }", "record r { a, b, }"]),
    ("E115", "fields are separated by `;`, not `,`",
     "write `{ id: text; amount: money }` (or one field per line); a `,` lists names "
     "that share one type: `id, name: text`",
     ["record r { a: text, b: int }", "record r { a: text canary, b: int }",
      "record r { a: int default 0, b: int }", "record r { a: list[text], b: int }",
      "record r { a: text max 3, b: int }", "record r { a: r.f, b: int }",
      "record r { a: {x, y}, b: int }", "record r { a: text epistemic e, b: int }",
      "record r { a: text patterns [\"x\"], b: int }",
      "record r { a, b: text, c: int }", "schema s { a: text, b: int }",
      "instances from \"f\" { a: text, b: int }"]),
]


#: A `;` that separates nothing: an unexpected `;` anywhere, or a `}` right after one
#: (a misspelt keyword after a `;` stays an unexpected token, E104).
_STRAY_SEMICOLON = (
    "E114", "a `;` separates two items of a block, and nothing else",
    "drop this `;`: one goes only between two items of a block written on one line "
    "(`{ kind read; cost 1 min }`), never after the last item, before the first, "
    "inside an expression or after a declaration")


class _CommentCollector:
    def __call__(self, token: Token) -> Token:
        _comment_sink.append(token)
        return token


@lru_cache(maxsize=1)
def get_parser() -> Lark:
    """The LALR parser, built once per process (lark caches the tables on disk)."""
    return Lark.open(
        str(GRAMMAR_PATH), parser="lalr", strict=True, propagate_positions=True,
        maybe_placeholders=True, cache=True, lexer_callbacks={"COMMENT": _CommentCollector()},
    )


def _describe(terminal: str) -> str:
    """A readable name for a lark terminal ('a name', "'}'", "'role'")."""
    readable = {"NAME": "a name", "STRING": "a string", "LONG_STRING": "a string",
                "INT": "an integer", "DECIMAL": "a number", "MONEY": "an amount like $40",
                "DURATION": "a duration like 6 min", "PERCENT": "a percentage",
                "DATE": "a date", "SIGNED_NUM": "a signed number like +0.2", "$END": "end of file"}
    if terminal in readable:
        return readable[terminal]
    try:
        pattern = get_parser().get_terminal(terminal).pattern
        return f"'{pattern.value}'"
    except KeyError:
        return terminal


def _expected(expected: set[str] | frozenset[str]) -> str:
    names = sorted({_describe(t) for t in expected})
    if len(names) > 8:
        names = [*names[:8], "…"]
    return ", ".join(names)


def _failures(examples: list[tuple[str, str, str, list[str]]]) -> Iterator[
        tuple[UnexpectedToken, tuple[str, str, str]]]:
    """Each known mistake's examples parsed: the error each fails with, and its
    (code, message, hint)."""
    parser = get_parser()
    for code, message, hint, texts in examples:
        for example in texts:
            try:
                parser.parse(example)
            except UnexpectedToken as exc:
                if exc.state is not None:
                    yield exc, (code, message, hint)
            except UnexpectedInput:
                pass


@lru_cache(maxsize=1)
def _example_table() -> dict[int, tuple[str, str, str]]:
    """Parser states at which the known mistakes fail, mapped to (code, message, hint).

    Like lark's `match_examples`, but keyed on the LALR state alone: lark also
    compares stack depth, which differs between the first declaration of a file
    and later ones.
    """
    table: dict[int, tuple[str, str, str]] = {}
    for exc, known in _failures(_EXAMPLES):
        table.setdefault(exc.state.position, known)
    return table


@lru_cache(maxsize=1)
def _token_example_table() -> dict[tuple[int, str], tuple[str, str, str]]:
    """(parser state, unexpected token type) of the compact form's known mistakes."""
    table: dict[tuple[int, str], tuple[str, str, str]] = {}
    for exc, known in _failures(_TOKEN_EXAMPLES):
        table.setdefault((exc.state.position, exc.token.type), known)
    return table


def _known_mistake(exc: UnexpectedToken) -> tuple[str, str, str] | None:
    if exc.state is None:
        return None
    if exc.token.type == "SEMICOLON" or (exc.token.type == "RBRACE"
                                         and _last_shifted(exc).type == "SEMICOLON"):
        return _STRAY_SEMICOLON
    known = _token_example_table().get((exc.state.position, exc.token.type))
    return known if known is not None else _example_table().get(exc.state.position)


def _last_shifted(exc: UnexpectedToken) -> Token:
    """The token the parser took last (an empty token when that was not a token)."""
    stack = getattr(exc.state, "value_stack", None) or [None]
    return stack[-1] if isinstance(stack[-1], Token) else Token("$NONE", "")


def _diagnostic(exc: UnexpectedInput, source: SourceFile) -> Diagnostic:
    file = source.name
    if isinstance(exc, UnexpectedCharacters):
        line, col = exc.line, exc.column
        pos = exc.pos_in_stream or 0
        char = source.text[pos] if pos < len(source.text) else ""
        span = Span(file=file, line=line, col=col, end_line=line, end_col=col + 1)
        if char == '"':
            if source.text[max(0, pos - 2):pos] == '""':  # an unterminated """ long string
                col = max(1, col - 2)
                span = Span(file=file, line=line, col=col, end_line=line, end_col=col + 3)
            return Diagnostic(code="E106", message="unterminated or invalid string", span=span,
                              hint='close it with " on the same line; write a tab as \\t and '
                                   'other escapes as in JSON; use """…""" for text over '
                                   "several lines")
        if char.isdigit():
            return Diagnostic(code="E103", message="number literal too long", span=span,
                              hint="numbers have at most 15 digits before and after the point")
        return Diagnostic(code="E103", message=f"unexpected character {char!r}", span=span,
                          hint=f"expected {_expected(exc.allowed)}" if exc.allowed else None)
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        tok = exc.token
        span = Span(file=file, line=tok.line or 1, col=tok.column or 1,
                    end_line=tok.end_line or tok.line or 1,
                    end_col=tok.end_column or (tok.column or 1) + len(str(tok)))
        known = _known_mistake(exc)
        top = {k.upper() for k in (*TOP_LEVEL_KEYWORDS, *_TRAILING_KEYWORDS)} | {"$END"}
        if known is None and "WORLD" in exc.expected and set(exc.expected) <= top:
            known = next((c, m, h) for c, m, h, _ in _EXAMPLES if c == "E110")
        if known is not None:
            code, message, hint = known
            if code == "E114":  # located at the `;`, which the message is about
                semi = tok if tok.type == "SEMICOLON" else _last_shifted(exc)
                line, col = semi.line or 1, semi.column or 1
                return Diagnostic(code=code, message=message, hint=hint, span=Span(
                    file=file, line=line, col=col, end_line=line, end_col=col + 1))
            return Diagnostic(code=code, message=f"{message} (found {str(tok)!r})", span=span,
                              hint=hint)
        return Diagnostic(code="E104", message=f"unexpected {str(tok)!r}", span=span,
                          hint=f"expected {_expected(exc.expected)}")
    # End of file inside a declaration.
    lines = source.text.rstrip().split("\n")
    line = len(lines)
    col = len(lines[-1]) + 1
    expected = getattr(exc, "expected", None) or set()
    return Diagnostic(code="E105", message="unexpected end of file",
                      span=Span(file=file, line=line, col=col, end_line=line, end_col=col + 1),
                      hint=f"expected {_expected(expected)}; is a '}}' missing?"
                      if expected else "is a '}' missing?")


class _TooDeep(Exception):
    """The text parsed, but some expressions nest deeper than MAX_NESTING (E111)."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("expression nested too deeply")
        self.diagnostics = diagnostics


def _too_deep_diagnostic(node: Tree[Token], file: str) -> Diagnostic:
    meta = node.meta
    if getattr(meta, "empty", True):
        span = Span.point(file)
    else:
        span = Span(file=file, line=meta.line, col=meta.column, end_line=meta.end_line,
                    end_col=meta.end_column)
    return Diagnostic(
        code="E111", span=span,
        message=f"expression or type nested too deeply (more than {MAX_NESTING} levels)",
        hint="each operator of a chain, call, bracket or field access is one level; "
             "name parts of the expression with `let` definitions",
    )


def _parse_once(text: str, source: SourceFile) -> tuple[list[A.Decl], list[Token]]:
    with _comments_lock:
        _comment_sink.clear()
        try:
            tree = get_parser().parse(text)
        finally:
            comments = list(_comment_sink)
            _comment_sink.clear()
    deep = too_deep(tree)
    if deep:
        raise _TooDeep([_too_deep_diagnostic(node, source.name) for node in deep])
    try:
        return tree_to_decls(tree, source.name), comments
    except VisitError as exc:  # a builder bug must still surface as ours, not lark's
        raise exc.orig_exc from None


#: the last few parses, by (name, text): the syntax tree is frozen, so callers can share
#: it. The formatter parses its own output to verify it and an edit parses that output
#: again; a repair proposal parsed the same world text about twice (C1: 135 parses,
#: 64 texts)
_PARSED: OrderedDict[tuple[str, str], tuple[A.Module | None, tuple[Diagnostic, ...]]] = \
    OrderedDict()
_PARSED_KEPT = 8
#: and at most this much text among them: a tree takes ~120 bytes per character of
#: source (C1, 48 KB: 5.6 MB), so the memo stays under ~50 MB
_PARSED_TEXT = 400_000
_parsed_lock = threading.Lock()


def parse_source(source: SourceFile, diagnostics: Diagnostics) -> A.Module | None:
    """Parse a whole file. Returns None (and adds diagnostics) when it has syntax errors."""
    key = (source.name, source.text)
    with _parsed_lock:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
    if hit is None:
        mine = Diagnostics()
        hit = (_parse_source(source, mine), tuple(mine))
        with _parsed_lock:
            _PARSED[key] = hit
            while len(_PARSED) > _PARSED_KEPT or (
                    len(_PARSED) > 1 and sum(len(t) for _, t in _PARSED) > _PARSED_TEXT):
                _PARSED.popitem(last=False)
            if len(source.text) > _PARSED_TEXT:
                _PARSED.pop(key, None)
    diagnostics.extend(hit[1])
    return hit[0]


def _parse_source(source: SourceFile, diagnostics: Diagnostics) -> A.Module | None:
    text = source.text
    offset_line = 0
    decls: list[A.Decl] = []
    comments: list[Token] = []
    failed = False
    while True:
        try:
            chunk_decls, chunk_comments = _parse_once(text, source)
        except _TooDeep as exc:
            failed = True
            diagnostics.extend(exc.diagnostics)
            break
        except (UnexpectedInput, UnexpectedEOF) as exc:
            failed = True
            diagnostics.add(_diagnostic(exc, source))
            line = getattr(exc, "line", None)
            if not isinstance(line, int) or line < 1:
                break
            # Resume at the next top-level keyword at the start of a later line; blank out
            # what came before so positions stay true.
            match = None
            lines_before = text.split("\n")
            start_offset = sum(len(ln) + 1 for ln in lines_before[:line])
            match = _RESYNC.search(text, start_offset)
            if match is None:
                break
            skipped = text[: match.start()]
            text = re.sub(r"[^\n]", " ", skipped) + text[match.start():]
            offset_line = line
            continue
        decls.extend(chunk_decls)
        comments.extend(chunk_comments)
        break
    del offset_line
    if failed:
        return None
    return A.Module(
        file=source.name, decls=decls,
        comments=[A.Comment(line=t.line or 1, col=t.column or 1, text=str(t)) for t in comments],
    )


def parse_text(text: str, name: str = "<text>") -> tuple[A.Module | None, Diagnostics]:
    """Convenience for tests and tools: parse a string."""
    diagnostics = Diagnostics()
    module = parse_source(SourceFile(name=name, path=name, text=text), diagnostics)
    return module, diagnostics
