"""Render untrusted role cards: jinja2's immutable sandbox, a confined loader, bounded work.

Worlds (and so their cards) may be written by an LLM, so a card is untrusted
input to the compiler. A card renders in `ImmutableSandboxedEnvironment`
with `StrictUndefined`, and on top of what the sandbox does:

* an unsafe attribute (`__class__`, `mro`, `_TemplateReference__context`, ...)
  raises `SecurityError` where it is read, instead of becoming an undefined
  value a template can carry around unused; attributes with `__` in them and
  the names of web frameworks' globals (`config`, `request`, ...) are refused
  before anything renders (`CardUnsafe`);
* `{% include %}`, `{% import %}` and `{% extends %}` go through `CardLoader`,
  which loads only files inside the world's folder — no absolute paths, no
  `..` out of it, no symlink whose target is outside (`CardEscape`) — and
  remembers every file it loaded, so the world's digest covers partials;
* every loop iteration, call, attribute read, filter and emitted chunk is
  charged to a per-render budget and to the world's (`WorldBudget`: the steps
  and seconds of every render of one compile together, so that many roles ×
  conditions of a card just under the per-render bound cannot add up to
  minutes); `range()`, sizes of values, the output, and
  the arguments that size a string (`center(10**9)`, `"%1000000000s"`) are
  capped (`CardLimit`). Template nesting deep enough to exhaust Python's stack
  surfaces as `RecursionError`, which the caller reports.

Loops are charged by rewriting each parsed template: a `for` loop's iterable,
every `{{ }}` output and every `~` concatenation go through a method of the
environment (reached by an `EnvironmentAttribute` node, which template text
cannot name).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from types import CodeType, MethodType
from typing import Any

import jinja2
import jinja2.sandbox
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.visitor import NodeTransformer

from eairdsl.check.loader import overlay_bytes
from eairdsl.source import BadName, SourceError, name_problem, read_bounded, real_path

__all__ = ["CardEnvironment", "CardLoader", "CardEscape", "CardFileError", "CardLimit",
           "CardUnsafe", "WorldBudget", "WorldCardLimit", "MAX_RANGE", "MAX_OUTPUT",
           "MAX_VALUE", "MAX_STEPS", "MAX_SOURCE", "MAX_SECONDS", "MAX_WORLD_STEPS",
           "MAX_WORLD_SECONDS", "UNSAFE_NAMES"]

#: the most items `range()` may produce (jinja2's own sandbox limit)
MAX_RANGE = jinja2.sandbox.MAX_RANGE
#: characters one render may emit, counting text emitted inside macros and `{% set %}` blocks
MAX_OUTPUT = 1_000_000
#: characters (or items) of any one value a card computes
MAX_VALUE = 1_000_000
#: the largest integer argument a call or filter may take (widths, counts, repeats)
MAX_ARGUMENT = MAX_RANGE
#: bits of an integer a card computes
MAX_INT_BITS = 64_000
#: work units of one render: loop iterations, calls, attribute reads, filters, outputs
MAX_STEPS = 1_000_000
#: characters of one template file
MAX_SOURCE = 1_000_000
#: wall-clock backstop of one render, in seconds (the step budget is normally hit first)
MAX_SECONDS = 10.0
#: work units of every render of one world's cards together (every role × condition)
MAX_WORLD_STEPS = 5_000_000
#: wall-clock backstop of every render of one world's cards together, in seconds
MAX_WORLD_SECONDS = 60.0

#: names that template-injection payloads reach for; no card variable has them
UNSAFE_NAMES = frozenset({"config", "request", "session", "g", "url_for",
                          "get_flashed_messages", "settings", "app", "application",
                          "__builtins__", "builtins", "os", "sys", "subprocess", "importlib"})

_SIZED = (str, bytes, list, tuple, dict, set, frozenset, range)
_WIDTH = re.compile(r"\d{6,}")
#: filters and string methods whose integer arguments size the result
_SIZING_FILTERS = frozenset({"center", "indent", "truncate", "wordwrap", "batch", "slice"})
_SIZING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


class CardEscape(Exception):
    """A template named a file outside the world's folder."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{reason}: {name!r}")
        self.name = name
        self.reason = reason


class CardFileError(Exception):
    """A template names a file that cannot be read: its name can name no file (a control
    character, too long), it is no regular file, or it is not UTF-8. `problem` holds the
    diagnostic's code, message and hint."""

    def __init__(self, problem: BadName) -> None:
        super().__init__(problem.message)
        self.problem = problem


class CardLimit(Exception):
    """A render exceeded one of the bounds."""


class WorldCardLimit(CardLimit):
    """The renders of one world's cards together exceeded the world's budget."""


@dataclass
class WorldBudget:
    """What the cards of one world may spend together, across every role × condition.

    The per-render bounds reset for each render, so a card just under them, given to
    100 roles under 10 conditions, rendered for a quarter of an hour. `spent` counts the
    steps of every render of one compile; the clock starts when the budget is made.
    """

    steps: int = MAX_WORLD_STEPS
    seconds: float = MAX_WORLD_SECONDS
    spent: int = 0
    started: float = field(default_factory=time.monotonic)
    exhausted: bool = False  # a render ran out of it (`WorldCardLimit` was raised)

    def overrun(self, message: str) -> WorldCardLimit:
        self.exhausted = True
        return WorldCardLimit(message)


class CardUnsafe(Exception):
    """A template's text reaches for Python internals (found before rendering)."""

    def __init__(self, message: str, filename: str | None, lineno: int) -> None:
        super().__init__(message)
        self.message = message
        self.filename = filename
        self.lineno = lineno


def _is_unsafe_attribute(name: str) -> bool:
    return "__" in name


def unsafe_constructs(tree: nodes.Template) -> list[tuple[int, str]]:
    """(line, message) for each construct that can only be an escape attempt."""
    found: list[tuple[int, str]] = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.Name,
                               nodes.Const)):
        if isinstance(node, nodes.Getattr) and _is_unsafe_attribute(node.attr):
            found.append((node.lineno, f"reads the internal attribute '{node.attr}'"))
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) \
                and isinstance(node.arg.value, str) and _is_unsafe_attribute(node.arg.value):
            found.append((node.lineno, f"reads the internal attribute '{node.arg.value}'"))
        elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args \
                and isinstance(node.args[0], nodes.Const) \
                and isinstance(node.args[0].value, str) \
                and _is_unsafe_attribute(node.args[0].value):
            found.append((node.lineno, f"reads the internal attribute '{node.args[0].value}'"))
        elif isinstance(node, nodes.Name) and (node.name in UNSAFE_NAMES
                                              or node.name.startswith("__")):
            found.append((node.lineno, f"uses '{node.name}', a name template-injection "
                                       "payloads reach for"))
    return sorted(set(found))


class _Rewrite(NodeTransformer):
    """Route loops, outputs and concatenations of a parsed template through the budget."""

    @staticmethod
    def call(method: str, args: list[Any], lineno: int) -> nodes.Call:
        return nodes.Call(nodes.EnvironmentAttribute(method, lineno=lineno), args, [], None,
                          None, lineno=lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self.call("eair_iter", [node.iter], node.lineno)
        if node.recursive:
            for call in node.find_all(nodes.Call):
                if isinstance(call.node, nodes.Name) and call.node.name == "loop" and call.args:
                    call.args[0] = self.call("eair_iter", [call.args[0]], call.lineno)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [self.call("eair_out", [child], child.lineno) for child in node.nodes]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return self.call("eair_concat", node.nodes, node.lineno)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, _SIZED) else 0


class CardLoader(jinja2.BaseLoader):
    """Load templates named relative to the card's folder, only from inside the world's folder.

    `loaded` maps each file it loaded (its path as written, not resolved) to its text.
    """

    def __init__(self, root: Path, folder: Path) -> None:
        self.root = Path(os.path.abspath(root))
        self.folder = Path(os.path.abspath(folder))
        self.loaded: dict[Path, str] = {}

    def get_source(self, environment: jinja2.Environment,
                   template: str) -> tuple[str, str | None, Callable[[], bool] | None]:
        bad = name_problem(template, "template path")
        if bad is not None:
            raise CardFileError(bad)
        written = template.replace("\\", "/")
        if os.path.isabs(template) or written.startswith(("/", "~")) \
                or re.match(r"^[A-Za-z]:", written):
            raise CardEscape(template, "absolute template path")
        path = Path(os.path.normpath(self.folder.joinpath(*written.split("/"))))
        if not path.is_relative_to(self.root):
            raise CardEscape(template, "template path escapes the world's folder")
        resolved = real_path(path)
        if resolved is None:  # RuntimeError with the absolute path before Python 3.13
            raise jinja2.TemplateNotFound(f"{template} (its symbolic links form a loop)")
        if not resolved.is_relative_to(self.root.resolve()):
            raise CardEscape(template, "template path is a symlink to outside the world's "
                                       "folder")
        try:  # an editor's unsaved buffer of the partial stands in for the file
            data = overlay_bytes(resolved) or read_bounded(resolved, 4 * MAX_SOURCE, "template")
        except SourceError as err:
            if err.code == "E201":
                raise jinja2.TemplateNotFound(template) from None
            if err.code == "E209":
                raise CardLimit(f"template {template!r} is longer than {MAX_SOURCE} "
                                "characters") from None
            raise CardFileError(BadName(err.code, err.message, err.hint)) from None
        try:  # newlines as `read_text` gives them (universal newlines)
            text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError:
            raise CardFileError(BadName("E102", f"template {template!r} is not UTF-8 text",
                                        "re-save the partial as UTF-8")) from None
        if len(text) > MAX_SOURCE:
            raise CardLimit(f"template {template!r} is longer than {MAX_SOURCE} characters")
        self.loaded[path] = text
        return text, str(path), lambda: False

    def load(self, environment: jinja2.Environment, name: str,
             globals: Any = None) -> jinja2.Template:
        """`BaseLoader.load`, compiling through the card environments' shared cache."""
        source, filename, uptodate = self.get_source(environment, name)
        if isinstance(environment, CardEnvironment):
            code = environment.compile_card(source, name, filename)[0]
        else:
            code = environment.compile(source, name, filename)
        return environment.template_class.from_code(environment, code, globals or {},
                                                    uptodate)


class _UndeclaredTracking(CodeGenerator):
    """The code generator, also collecting the variables a template reads without defining
    them, as `jinja2.meta.TrackingCodeGenerator` does (which needs a second pass)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.undeclared: set[str] = set()

    def enter_frame(self, frame: Frame) -> None:
        super().enter_frame(frame)
        for _, (action, param) in frame.symbols.loads.items():
            if action == "resolve" and param not in self.environment.globals:
                self.undeclared.add(param)


#: compiled templates shared by every CardEnvironment: (class, source, name, filename) ->
#: (code, undeclared variables). Bounded; only templates that compiled are kept.
_COMPILED: dict[tuple[type, str, str | None, str | None], tuple[CodeType, frozenset[str]]] = {}
_COMPILED_MAX = 256


class CardEnvironment(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The environment one world's cards render in; `begin()` before each render resets
    the per-render budget, never the world's (`budget`), which every render draws on."""

    intercepted_binops = frozenset({"+", "*", "**", "%", "//"})

    def __init__(self, loader: CardLoader, budget: WorldBudget | None = None) -> None:
        super().__init__(loader=loader, undefined=jinja2.StrictUndefined,
                         keep_trailing_newline=True, autoescape=False, cache_size=64,
                         auto_reload=False)
        self.budget = budget if budget is not None else WorldBudget()
        self.steps = 0
        self.output = 0
        self.deadline = self._deadline()
        self._undeclared: frozenset[str] = frozenset()  # of the template _generate compiled
        self.globals["range"] = self.bounded_range
        self.globals["lipsum"] = self.bounded_lipsum
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}

    def compile_card(self, source: str, name: str | None,
                     filename: str | None) -> tuple[CodeType, frozenset[str]]:
        """Parse (refusing unsafe constructs), rewrite and compile a template: its code and
        the variables it reads without defining them.

        Cached by text and names: every CardEnvironment compiles alike (same options and
        filter names; the code reads its environment only when it runs), so a card or
        partial shared by parties, or rendered again, is compiled once. Errors are raised
        as `parse`/`compile` raise them, every time."""
        key = (type(self), source, name, filename)
        found = _COMPILED.get(key)
        if found is None:
            tree = self.parse(source, name=name, filename=filename)
            self._undeclared = frozenset()
            code = self.compile(tree, name=name, filename=filename)
            found = (code, self._undeclared)
            if len(_COMPILED) >= _COMPILED_MAX:
                _COMPILED.clear()
            _COMPILED[key] = found
        return found

    def _generate(self, source: nodes.Template, name: str | None, filename: str | None,
                  defer_init: bool = False) -> str:
        """`Environment._generate` (jinja2.compiler.generate), also keeping what
        `jinja2.meta.find_undeclared_variables` finds, from the same pass over the tree."""
        if not isinstance(source, nodes.Template):
            raise TypeError("Can't compile non template nodes")
        out = io.StringIO()
        generator = _UndeclaredTracking(self, name, filename, out, defer_init=defer_init,
                                        optimized=self.optimized)
        generator.visit(source)
        self._undeclared = frozenset(generator.undeclared)
        return out.getvalue()

    # -- the budget ---------------------------------------------------------------------------

    def _deadline(self) -> float:
        return min(time.monotonic() + MAX_SECONDS, self.budget.started + self.budget.seconds)

    def begin(self) -> None:
        self.steps = 0
        self.output = 0
        self.deadline = self._deadline()

    def charge(self, steps: int = 1) -> None:
        self.steps += steps
        self.budget.spent += steps
        if self.steps > MAX_STEPS:
            raise CardLimit(f"the card takes more than {MAX_STEPS} steps to render "
                            "(loops, calls and attribute reads)")
        if self.budget.spent > self.budget.steps:
            raise self.budget.overrun(f"the world's cards together take more than "
                                      f"{self.budget.steps} steps to render (every role "
                                      "under every condition)")
        if time.monotonic() > self.deadline:
            if time.monotonic() > self.budget.started + self.budget.seconds:
                raise self.budget.overrun(f"the world's cards together take longer than "
                                          f"{self.budget.seconds:g} s to render (every role "
                                          "under every condition)")
            raise CardLimit(f"the card takes longer than {MAX_SECONDS:g} s to render")

    def charge_values(self, values: Iterable[Any]) -> None:
        self.charge(1 + sum(_size(v) for v in values) // 100)

    def check_value(self, value: Any) -> Any:
        size = _size(value)
        if size > MAX_VALUE:
            raise CardLimit(f"the card computes a value of {size} items (at most {MAX_VALUE})")
        if isinstance(value, int) and not isinstance(value, bool) \
                and value.bit_length() > MAX_INT_BITS:
            raise CardLimit(f"the card computes an integer of more than {MAX_INT_BITS} bits")
        self.charge(1 + size // 100)
        return value

    def check_arguments(self, args: Iterable[Any]) -> None:
        for arg in args:
            if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_ARGUMENT:
                raise CardLimit(f"the card passes {arg} where at most {MAX_ARGUMENT} is allowed")
            if isinstance(arg, float) and abs(arg) > MAX_ARGUMENT:
                raise CardLimit(f"the card passes {arg:g} where at most {MAX_ARGUMENT} is "
                                "allowed")

    def check_format(self, fmt: Any) -> bool:
        """Refuse format strings whose widths or precisions would build huge strings.

        True when the format takes a width from its arguments (`%*s`, `{:{}}`), so the
        arguments must be checked too."""
        if not isinstance(fmt, str):
            return False
        specs = [fmt]
        with contextlib.suppress(ValueError):
            specs += [spec or "" for _, _, spec, _ in string.Formatter().parse(fmt)]
        for spec in specs:
            for digits in _WIDTH.findall(spec):
                if int(digits) > MAX_ARGUMENT:
                    raise CardLimit(f"the card formats with a width of {digits} "
                                    f"(at most {MAX_ARGUMENT})")
        return "*" in fmt or any("{" in spec for spec in specs[1:])

    # -- rewritten nodes call these -----------------------------------------------------------

    def eair_iter(self, iterable: Any) -> Iterator[Any]:
        self.charge(1 + _size(iterable) // 100)
        for item in iterable:
            self.charge()
            yield item

    def eair_out(self, value: Any) -> str:
        text = str(value)
        self.output += len(text)
        if self.output > MAX_OUTPUT:
            raise CardLimit(f"the card renders more than {MAX_OUTPUT} characters")
        self.charge(1 + len(text) // 100)
        return text

    def eair_concat(self, *values: Any) -> str:
        parts = [str(v) for v in values]
        total = sum(len(p) for p in parts)
        if total > MAX_VALUE:
            raise CardLimit(f"the card builds a string of {total} characters (at most "
                            f"{MAX_VALUE})")
        self.charge(1 + total // 100)
        return "".join(parts)

    def bounded_range(self, *args: int) -> range:
        rng = range(*args)
        if len(rng) > MAX_RANGE:
            raise CardLimit(f"range() of {len(rng)} items (at most {MAX_RANGE})")
        self.charge(1 + len(rng) // 100)
        return rng

    def bounded_lipsum(self, n: int = 5, html: bool = True, min: int = 20,
                       max: int = 100) -> str:
        if n > 100 or max > 1000 or min > max:
            raise CardLimit("lipsum() of more than 100 paragraphs of 1000 words")
        lipsum: Callable[..., str] = jinja2.utils.generate_lorem_ipsum
        return str(self.check_value(lipsum(n=n, html=html, min=min, max=max)))

    # -- the sandbox's hooks --------------------------------------------------------------------

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        if len(source) > MAX_SOURCE:
            raise CardLimit(f"template {name or ''!r} is longer than {MAX_SOURCE} characters")
        tree = super()._parse(source, name, filename)
        found = unsafe_constructs(tree)
        if found:
            line, message = found[0]
            raise CardUnsafe(message, filename, line)
        rewritten = _Rewrite().visit(tree)
        assert isinstance(rewritten, nodes.Template)
        return rewritten

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} "
                            "object is unsafe")

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.charge()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.charge()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        sized = self.check_format(value.__self__)

        @wraps(wrapper)
        def bounded(*args: Any, **kwargs: Any) -> str:
            if sized:
                self.check_arguments([*args, *kwargs.values()])
            self.charge_values([*args, *kwargs.values()])
            return str(self.check_value(wrapper(*args, **kwargs)))

        return bounded

    def call(__self, __context: jinja2.runtime.Context, __obj: Any,
             *args: Any, **kwargs: Any) -> Any:
        if type(__obj) is MethodType and __obj.__self__ is __self \
                and __obj.__func__ in _REWRITE_TARGETS and not kwargs:
            # what the rewrite inserted (template text cannot name these): charged as any
            # call is, without the sandbox's generic checks, which they always pass
            __self.charge_values(args)
            return __self.check_value(__obj(*args))
        __self.charge_values([*args, *kwargs.values()])
        method = getattr(__obj, "__name__", None)
        if isinstance(getattr(__obj, "__self__", None), str):
            text: str = __obj.__self__
            if method in _SIZING_METHODS:
                __self.check_arguments([*args, *kwargs.values()])
            elif method == "replace":
                _check_replace(text, *args)
            elif method == "join" and args:
                _check_join(text, args[0])
        return __self.check_value(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any,
                   right: Any) -> Any:
        self.charge_values([left, right])
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, _SIZED) and isinstance(times, int) \
                        and len(seq) * times > MAX_VALUE:
                    raise CardLimit(f"the card repeats a value to {len(seq) * times} items "
                                    f"(at most {MAX_VALUE})")
            if isinstance(left, int) and isinstance(right, int) \
                    and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise CardLimit(f"the card computes an integer of more than {MAX_INT_BITS} "
                                "bits")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) \
                and abs(left) > 1 and right * left.bit_length() > MAX_INT_BITS:
            raise CardLimit(f"the card computes an integer of more than {MAX_INT_BITS} bits")
        elif operator == "+" and _size(left) + _size(right) > MAX_VALUE:
            raise CardLimit(f"the card builds a value of {_size(left) + _size(right)} items "
                            f"(at most {MAX_VALUE})")
        elif operator == "%" and isinstance(left, str) and self.check_format(left):
            self.check_arguments(right if isinstance(right, tuple) else [right])
        return self.check_value(super().call_binop(context, operator, left, right))

    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        passes = getattr(func, "jinja_pass_arg", None)

        @wraps(func)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            values = args[1:] if passes is not None else args
            if values:
                self.charge_values(values[:1])
                if name in _SIZING_FILTERS or (name == "format" and self.check_format(values[0])):
                    self.check_arguments([*values[1:], *kwargs.values()])
                elif name == "replace" and len(values) >= 3:
                    _check_replace(str(values[0]), *values[1:])
                elif name == "join":
                    sep = values[1] if len(values) > 1 else kwargs.get("d", "")
                    _check_join(str(sep), values[0])
            return self.check_value(func(*args, **kwargs))

        return bounded


#: the methods `_Rewrite` routes loops, outputs and concatenations through
_REWRITE_TARGETS = frozenset({CardEnvironment.eair_iter, CardEnvironment.eair_out,
                              CardEnvironment.eair_concat})


def _check_replace(text: str, old: Any = "", new: Any = "", count: Any = -1, *_: Any) -> None:
    if not isinstance(old, str) or not isinstance(new, str):
        return
    hits = len(text) + 1 if old == "" else text.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    size = len(text) + hits * (len(new) - len(old))
    if size > MAX_VALUE:
        raise CardLimit(f"the card builds a string of {size} characters (at most {MAX_VALUE})")


def _check_join(sep: str, items: Any) -> None:
    if not isinstance(items, (list, tuple)):
        return
    size = len(sep) * max(len(items) - 1, 0) + sum(len(i) for i in items if isinstance(i, str))
    if size > MAX_VALUE:
        raise CardLimit(f"the card builds a string of {size} characters (at most {MAX_VALUE})")
