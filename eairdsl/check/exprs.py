"""Pass 3: resolve names and check types and units in every expression.

Each expression site (a guard, an effect, a measurement, a card condition...)
has a scope: what it may name. The `Scope` says which of `instance`,
`context`, tool parameters and earlier measurements are visible there. The
results — a Type per expression and a Resolution per name — are what the IR
lowering uses, so lowering never has to guess what a name meant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, assert_never

from pydantic import BaseModel

from eairdsl.check import types as T
from eairdsl.check.builtins import BUILTIN_FIELDS, BUILTINS
from eairdsl.check.world import CheckedWorld, Resolution
from eairdsl.diagnostics import Diagnostics, did_you_mean
from eairdsl.source import Span
from eairdsl.syntax import ast as A
from eairdsl.syntax.build import MAX_NESTING

__all__ = ["check_expressions", "ExprChecker", "Scope", "MEASUREMENTS"]

#: Nodes an expression may stand for once its `let` calls are expanded (each call
#: site counts its definition's nodes again, as the runtime's walks over a world do).
MAX_EXPANDED = 100_000

#: The six per-episode measurements of EAIR §2, in the paper's order.
MEASUREMENTS = ("opportunity", "anomaly", "realized", "terminal_harm", "interception", "utility")

_INSTANCE = T.Type("instance")
_ENUM_TYPE = T.Type("enum_type")
_RECORD_SET = "record_set"


@dataclass
class Scope:
    """What an expression site may name."""

    where: str
    locals: dict[str, T.Type] = field(default_factory=dict)
    params: dict[str, T.Type] = field(default_factory=dict)
    measures: dict[str, T.Type] = field(default_factory=dict)
    instance: bool = True
    context: bool = False

    def child(self, name: str, t: T.Type) -> Scope:
        return Scope(self.where, {**self.locals, name: t}, self.params, self.measures,
                     self.instance, self.context)


class ExprChecker:
    """Types expressions against a CheckedWorld, recording types and resolutions."""

    def __init__(self, world: CheckedWorld, diagnostics: Diagnostics) -> None:
        self.world = world
        self.diagnostics = diagnostics
        self.let_types: dict[str, T.Type] = {}
        self._typing_lets: list[str] = []
        #: per `let`: (nesting depth with the definitions it calls, expanded node count)
        self.let_shapes: dict[str, tuple[int, int]] = let_shapes(world.lets)
        self._depth = 0  # nesting of the expression being checked (leaves not counted)

    # ------------------------------------------------------------ helpers
    def error(self, code: str, message: str, node: A.Node, hint: str | None = None) -> None:
        self.diagnostics.error(code, message, node.span, hint)

    def expect(self, expr: A.Expr, expected: T.Type, scope: Scope, what: str) -> T.Type:
        actual = self.check(expr, scope)
        if not T.compatible(expected, actual):
            self.error("E402", f"{what} must be {expected}, not {actual}", expr,
                       _unit_hint(expected, actual))
        return actual

    def record(self, expr: A.Node, t: T.Type) -> T.Type:
        self.world.expr_types[id(expr)] = t
        return t

    # ------------------------------------------------------------ names
    def visible_names(self, scope: Scope) -> list[str]:
        w = self.world
        names = [*scope.locals, *scope.params, *scope.measures, *w.levers, *w.states,
                 *w.records, *w.documents, *w.parties, *w.tools, *w.enum_members, *w.enums]
        if scope.instance:
            names.append("instance")
        if scope.context:
            names.append("context")
        return names

    def resolve_name(self, expr: A.NameExpr, scope: Scope) -> T.Type:
        w, name = self.world, expr.id
        res: Resolution | None = None
        t: T.Type
        if name in scope.locals:
            res, t = Resolution("local", name), scope.locals[name]
        elif name in scope.params:
            res, t = Resolution("param", name), scope.params[name]
        elif name in scope.measures:
            res, t = Resolution("measure", name), scope.measures[name]
        elif name == "instance" and scope.instance:
            res, t = Resolution("instance", name), _INSTANCE
        elif name == "context" and scope.context:
            res, t = Resolution("context", name), T.CONTEXT
        elif name in w.levers:
            res, t = Resolution("lever", name), w.lever_types.get(name, T.ANY)
        elif name in w.states:
            res, t = Resolution("state", name), w.state_types.get(name, T.ANY)
        elif name in w.records:
            res, t = Resolution("record", name), T.Type("list", _RECORD_SET,
                                                       T.record_row(name))
        elif name in w.documents:
            res, t = Resolution("document", name), T.DOCUMENT
        elif name in w.parties:
            res, t = Resolution("party", name), T.PARTY
        elif name in w.tools:
            res, t = Resolution("tool", name), T.TOOL
        elif name in w.enum_members:
            enums = w.enum_members[name]
            res = Resolution("enum_value", name)
            t = T.enum_of(enums[0]) if len(enums) == 1 else T.enum_of("", tuple(enums))
            for e in enums:
                w.used.add(e)
        elif name in w.enums:
            res, t = Resolution("enum", name), T.Type("enum_type", name)
        elif name in ("instance", "context"):
            where = ("a tool or a warning `on` a tool" if name == "context"
                     else "a place that runs per task instance")
            self.error("E305", f"'{name}' is only available inside {where}", expr)
            return self.record(expr, T.ANY)
        else:
            self.error("E301", f"unknown name '{name}'", expr,
                       did_you_mean(name, self.visible_names(scope)))
            return self.record(expr, T.ANY)
        if res.kind not in ("local", "param", "measure", "instance", "context", "enum_value"):
            w.used.add(name)
        w.resolutions[id(expr)] = res
        return self.record(expr, t)

    # ------------------------------------------------------------ expressions
    def check(self, expr: A.Expr, scope: Scope) -> T.Type:
        method = getattr(self, f"_check_{expr.node}")
        if self._depth == 0 and not self._typing_lets:
            self._check_expansion(expr)
        counted = not isinstance(expr, (A.LiteralExpr, A.NameExpr))
        self._depth += counted
        try:
            result: T.Type = method(expr, scope)
        finally:
            self._depth -= counted
        return self.record(expr, result)

    def _check_expansion(self, expr: A.Expr) -> None:
        """E112 when an expression site expands (through its `let` calls) past MAX_EXPANDED."""
        total = 0
        shapes = self.let_shapes
        stack: list[Any] = [expr]  # `iter_exprs` in any order: only the count matters
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(item)
                continue
            fields = item.__dict__
            if isinstance(fields.get("node"), str):
                total += 1
                if type(item) is A.CallExpr and item.func in shapes:
                    expanded = shapes[item.func][1]
                    if expanded > MAX_EXPANDED:
                        return  # reported at the definition
                    total += expanded
            stack.extend(v for v in fields.values() if isinstance(v, (BaseModel, list))
                         and type(v) is not Span)
        if total > MAX_EXPANDED:
            self.error("E112", f"this expression expands to more than {MAX_EXPANDED:,} nodes "
                       "through the `let` definitions it calls", expr, _EXPANSION_HINT)

    def _check_literal(self, e: A.LiteralExpr, scope: Scope) -> T.Type:
        return {"int": T.INT, "number": T.NUMBER, "money": T.MONEY, "duration": T.DURATION,
                "percent": T.PERCENT, "date": T.DATE, "text": T.TEXT, "bool": T.BOOL,
                "none": T.NONE}[e.kind]

    def _check_name(self, e: A.NameExpr, scope: Scope) -> T.Type:
        return self.resolve_name(e, scope)

    def _check_attr(self, e: A.AttrExpr, scope: Scope) -> T.Type:
        obj = self.check(e.obj, scope)
        w = self.world
        if obj.kind == "list" and obj.name == _RECORD_SET and obj.arg is not None:
            record = obj.arg.name
            groups = w.groups(record)
            if e.name in groups:
                return T.Type("fields", record)
            self.error("E301", f"record '{record}' has no group '{e.name}'", e,
                       did_you_mean(e.name, groups) or "write a group name (`group NAME = ...`)")
            return T.ANY
        if obj.kind == "enum_type":
            enum = w.enums[obj.name]
            if e.name not in enum.members:
                self.error("E301", f"enum '{obj.name}' has no value '{e.name}'", e,
                           did_you_mean(e.name, enum.members))
            return T.enum_of(obj.name)
        if obj.kind == "instance":
            if e.name in w.instance_types:
                return w.instance_types[e.name]
            inline = {a.name for d in w.instance_decls.values() for a in d.assignments}
            if e.name in inline:
                return T.ANY
            self.error("E301", f"instances have no field '{e.name}'", e,
                       did_you_mean(e.name, [*w.instance_types, *inline]))
            return T.ANY
        if obj.kind in BUILTIN_FIELDS:
            fields = BUILTIN_FIELDS[obj.kind]
            if e.name not in fields:
                self.error("E301", f"{obj.kind} has no field '{e.name}'", e,
                           did_you_mean(e.name, fields))
                return T.ANY
            return fields[e.name]
        if obj.kind in ("record", "schema"):
            key = (obj.name, e.name)
            if key in w.field_types:
                return w.field_types[key]
            names = [f for (r, f) in w.field_types if r == obj.name]
            self.error("E301", f"{obj.kind} '{obj.name}' has no field '{e.name}'", e,
                       did_you_mean(e.name, names))
            return T.ANY
        if obj.kind in ("row", "any"):
            return T.ANY
        self.error("E402", f"{obj} has no fields (cannot read '.{e.name}')", e)
        return T.ANY

    def _check_index(self, e: A.IndexExpr, scope: Scope) -> T.Type:
        obj = self.check(e.obj, scope)
        self.expect(e.index, T.INT, scope, "a list index")
        if obj.kind == "list" and obj.arg is not None:
            return obj.arg
        if obj.kind not in ("any",):
            self.error("E402", f"only lists can be indexed, not {obj}", e)
        return T.ANY

    def _check_call(self, e: A.CallExpr, scope: Scope) -> T.Type:
        w = self.world
        if e.func in w.lets:
            return self._check_let_call(e, scope)
        builtin = BUILTINS.get(e.func)
        if builtin is None:
            self.error("E301", f"unknown function '{e.func}'", e,
                       did_you_mean(e.func, [*BUILTINS, *w.lets]) or
                       "functions are the builtins of docs/language.md and `let` definitions")
            for arg in e.args:
                self.check(arg.value, scope)
            return T.ANY
        params = builtin.params
        bound: list[T.Type | None] = [None] * len(params)
        positional = True
        for i, arg in enumerate(e.args):
            t = self.check(arg.value, scope)
            self.world.expr_types[id(arg)] = t
            if arg.name is None:
                if not positional:
                    self.error("E407", "a positional argument follows a keyword argument", arg)
                    continue
                index = i
            else:
                positional = False
                names = [p[0] for p in params]
                if arg.name not in names:
                    self.error("E407", f"{e.func}() has no parameter '{arg.name}'", arg,
                               did_you_mean(arg.name, names))
                    continue
                index = names.index(arg.name)
            if index >= len(params):
                self.error("E407", f"{e.func}() takes {len(params)} argument"
                           f"{'s' if len(params) != 1 else ''}, got {len(e.args)}", arg)
                continue
            pname, ptype, _ = params[index]
            if bound[index] is not None:
                self.error("E407", f"argument '{pname}' given twice", arg)
            bound[index] = t
            if not T.compatible(ptype, t) and not _fields_like(ptype, t):
                self.error("E402", f"argument '{pname}' of {e.func}() must be {ptype}, not {t}",
                           arg.value)
        for (pname, _, optional), got in zip(params, bound, strict=True):
            if got is None and not optional:
                self.error("E407", f"{e.func}() is missing argument '{pname}'", e)
        return builtin.result([b if b is not None else T.ANY for b in bound])

    def _check_let_call(self, e: A.CallExpr, scope: Scope) -> T.Type:
        let = self.world.lets[e.func]
        self.world.used.add(let.name)
        depth, _ = self.let_shapes[let.name]
        if depth > MAX_NESTING or self._depth + depth > MAX_NESTING:
            if depth <= MAX_NESTING:  # deeper definitions are reported where they cross
                self.error("E111", f"calling {let.name}() here nests the expression "
                           f"{self._depth + depth} levels deep (more than {MAX_NESTING})", e,
                           "a `let` call counts the nesting of its definition; call fewer "
                           "definitions inside one another")
            for arg in e.args:
                self.check(arg.value, scope)
            return T.ANY
        if len(e.args) != len(let.params):
            self.error("E407", f"{let.name}() takes {len(let.params)} argument"
                       f"{'s' if len(let.params) != 1 else ''}, got {len(e.args)}", e)
        for arg, param in zip(e.args, let.params, strict=False):
            if arg.name is not None and arg.name != param.name:
                self.error("E407", f"{let.name}() has no parameter '{arg.name}' here", arg,
                           f"parameter {len(e.args)} is '{param.name}'")
            expected = self._param_type(param)
            actual = self.check(arg.value, scope)
            if not T.compatible(expected, actual) and not _fields_like(expected, actual):
                self.error("E402", f"argument '{param.name}' of {let.name}() must be {expected},"
                           f" not {actual}", arg.value)
        return self.let_type(let)

    def _param_type(self, param: A.LetParam) -> T.Type:
        from eairdsl.check.signatures import resolve_type
        return resolve_type(self.world, param.type, self.diagnostics)

    def let_type(self, let: A.LetDecl) -> T.Type:
        if let.name in self.let_types:
            return self.let_types[let.name]
        if let.name in self._typing_lets:
            chain = " -> ".join([*self._typing_lets[self._typing_lets.index(let.name):],
                                 let.name])
            self.error("E304", f"recursive definition: {chain}", let,
                       "a `let` definition may not call itself, directly or through others")
            return T.ANY
        self._typing_lets.append(let.name)
        scope = Scope(f"let {let.name}", instance=True,
                      params={p.name: self._param_type(p) for p in let.params})
        outer, self._depth = self._depth, 0  # the call site checked the combined depth
        try:
            result = self.check(let.body, scope)
        finally:
            self._depth = outer
            self._typing_lets.pop()
        self.let_types[let.name] = result
        return result

    def _check_unary(self, e: A.UnaryExpr, scope: Scope) -> T.Type:
        if e.op == "not":
            self.expect(e.operand, T.BOOL, scope, "the operand of `not`")
            return T.BOOL
        t = self.check(e.operand, scope)
        if t.kind not in T.QUANTITIES and t.kind != "any":
            self.error("E401", f"cannot negate {t}", e)
        return t

    def _check_binary(self, e: A.BinaryExpr, scope: Scope) -> T.Type:
        op = e.op
        if op in ("and", "or"):
            self.expect(e.left, T.BOOL, scope, f"the left side of `{op}`")
            self.expect(e.right, T.BOOL, scope, f"the right side of `{op}`")
            return T.BOOL
        left = self.check(e.left, scope)
        right = self.check(e.right, scope)
        if op in ("==", "!="):
            if not (T.compatible(left, right) or T.compatible(right, left)):
                units = left.kind in T.QUANTITIES and right.kind in T.QUANTITIES
                self.error("E401" if units else "E402", f"cannot compare {left} with {right}", e,
                           _unit_hint(left, right) or "both sides of == must have the same type")
            return T.BOOL
        if op in ("<", "<=", ">", ">="):
            ordered = {"int", "number", "money", "duration", "percent", "date", "text", "any"}
            if left.kind not in ordered or right.kind not in ordered:
                self.error("E402", f"cannot order {left} and {right}", e)
            elif not (_same_quantity(left, right)):
                self.error("E401", f"cannot compare {left} with {right}", e,
                           _unit_hint(left, right))
            return T.BOOL
        if op == "contains":
            if left.kind == "list" and left.arg is not None:
                if not (T.compatible(left.arg, right) or T.compatible(right, left.arg)):
                    self.error("E402", f"a {left} cannot contain {right}", e)
                return T.BOOL
            if not (T.compatible(T.TEXT, left) and T.compatible(T.TEXT, right)):
                self.error("E402", f"`contains` tests text or lists, not {left} and {right}", e)
            return T.BOOL
        if op == "contains_any":
            if not T.compatible(T.TEXT, left) or not T.compatible(T.list_of(T.TEXT), right):
                self.error("E402", f"`contains_any` needs text on the left and a list of text on"
                           f" the right, not {left} and {right}", e)
            return T.BOOL
        if op == "in":
            if right.kind == "list" and right.arg is not None:
                if not T.compatible(right.arg, left) and not T.compatible(left, right.arg):
                    self.error("E402", f"cannot look for {left} in {right}", e)
            elif not T.compatible(T.TEXT, right):
                self.error("E402", f"`in` needs a list or text on the right, not {right}", e)
            elif not T.compatible(T.TEXT, left):
                self.error("E402", f"only text can be found in text, not {left}", e)
            return T.BOOL
        return self._arith(e, op, left, right)

    def _arith(self, e: A.BinaryExpr, op: str, left: T.Type, right: T.Type) -> T.Type:
        lk, rk = left.kind, right.kind
        if "any" in (lk, rk):
            return left if rk == "any" else right
        if op == "+":
            if lk == rk == "text":
                return T.TEXT
            if lk == "list" and rk == "list":
                return T.join_types(left, right)
            if lk == "date" and rk == "duration":
                return T.DATE
        if op == "-" and lk == rk == "date":
            return T.DURATION
        if op == "-" and lk == "date" and rk == "duration":
            return T.DATE
        if op in ("+", "-") and _same_quantity(left, right) and lk in T.QUANTITIES:
            return T.NUMBER if "number" in (lk, rk) and lk in ("int", "number") else left
        if op == "*":
            if T.is_numeric(left) and rk in T.QUANTITIES:
                return right if not (lk == "number" and rk == "int") else T.NUMBER
            if T.is_numeric(right) and lk in T.QUANTITIES:
                return left if not (rk == "number" and lk == "int") else T.NUMBER
            if "percent" in (lk, rk):
                other = right if lk == "percent" else left
                if other.kind in ("money", "duration"):
                    return other
        if op == "/":
            if T.is_numeric(right) and lk in T.QUANTITIES:
                return T.NUMBER if lk == "int" else left
            if lk == rk and lk in T.QUANTITIES:
                return T.NUMBER
        self.error("E401", f"cannot apply `{op}` to {left} and {right}", e,
                   _unit_hint(left, right))
        return T.ANY

    def _check_list(self, e: A.ListExpr, scope: Scope) -> T.Type:
        result = T.NONE
        for item in e.items:
            result = T.join_types(result, self.check(item, scope))
        return T.list_of(T.ANY if result.kind == "none" else result)

    def _check_record(self, e: A.RecordExpr, scope: Scope) -> T.Type:
        seen: set[str] = set()
        for f in e.fields:
            if f.name in seen:
                self.error("E302", f"field '{f.name}' is given twice", f)
            seen.add(f.name)
            self.check(f.value, scope)
        return T.ROW

    def _bind(self, tail: A.CompTail, scope: Scope) -> Scope:
        source = self.check(tail.source, scope)
        if source.kind == "list" and source.arg is not None:
            element = source.arg
        else:
            if source.kind != "any":
                self.error("E402", f"`for {tail.var} in ...` needs a list, not {source}",
                           tail.source)
            element = T.ANY
        inner = scope.child(tail.var, element)
        if tail.where is not None:
            self.expect(tail.where, T.BOOL, inner, "a `where` condition")
        for key in tail.group_by:
            self.check(key, inner)
        return inner

    def _check_comprehension(self, e: A.ComprehensionExpr, scope: Scope) -> T.Type:
        inner = self._bind(e.tail, scope)
        body = self.check(e.body, inner)
        if e.tail.group_by:
            return T.list_of(T.list_of(body))
        return T.list_of(body)

    def _check_aggregate(self, e: A.AggregateExpr, scope: Scope) -> T.Type:
        if e.tail is not None:
            inner = self._bind(e.tail, scope)
            element = self.check(e.body, inner)
        else:
            body = self.check(e.body, scope)
            if body.kind == "list" and body.arg is not None:
                element = body.arg
            else:
                if body.kind != "any":
                    self.error("E402", f"{e.func}() needs a list, not {body}", e.body,
                               f"write {e.func}(x for x in ...) or pass a list")
                element = T.ANY
        if e.func == "count":
            result = T.INT
        elif e.func == "distinct":
            result = T.list_of(element)
        elif e.func == "avg":
            result = T.NUMBER if element.kind == "int" else element
        else:
            result = element
        if e.func in ("sum", "avg") and element.kind not in T.QUANTITIES and element.kind != "any":
            self.error("E402", f"{e.func}() adds quantities, not {element}", e)
        if e.func in ("max", "min") and element.kind not in (*T.QUANTITIES, "date", "text",
                                                             "any"):
            self.error("E402", f"{e.func}() needs ordered values, not {element}", e)
        if e.tail is not None and e.tail.group_by:
            return T.list_of(result)
        return result

    def _check_quantifier(self, e: A.QuantifierExpr, scope: Scope) -> T.Type:
        source = self.check(e.source, scope)
        if source.kind == "list" and source.arg is not None:
            element = source.arg
        else:
            if source.kind != "any":
                self.error("E402", f"`{e.kind} {e.var} in ...` needs a list, not {source}",
                           e.source)
            element = T.ANY
        self.expect(e.body, T.BOOL, scope.child(e.var, element),
                    f"the condition of `{e.kind}`")
        return T.BOOL


def _fields_like(expected: T.Type, actual: T.Type) -> bool:
    return expected.kind == "fields" and actual.kind == "fields"


def _same_quantity(a: T.Type, b: T.Type) -> bool:
    numeric = {"int", "number"}
    if "any" in (a.kind, b.kind):
        return True
    if a.kind in numeric and b.kind in numeric:
        return True
    return a.kind == b.kind


def _unit_hint(a: T.Type, b: T.Type) -> str | None:
    units = {"money": "$40", "duration": "6 min", "percent": "18%"}
    for t in (a, b):
        other = b if t is a else a
        if t.kind in units and other.kind in ("int", "number"):
            return f"write the number with its unit, like {units[t.kind]}"
    if a.kind in units and b.kind in units:
        return f"{a.kind} and {b.kind} are different units"
    return None


# ---------------------------------------------------------------- nesting through lets

_EXPANSION_HINT = ("each call of a `let` stands for its whole definition; a definition that "
                   "calls another twice doubles it")


def _counted(node: A.Expr) -> bool:
    return not isinstance(node, (A.LiteralExpr, A.NameExpr))


def _body_shape(body: A.Expr, lets: dict[str, A.LetDecl]) -> tuple[int, int,
                                                                   list[tuple[str, int]]]:
    """(nesting depth, node count, `let` calls with the depth of each call) of one body."""
    deepest = size = 0
    calls: list[tuple[str, int]] = []
    stack: list[tuple[object, int]] = [(body, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list):
            stack.extend((child, depth) for child in item)
            continue
        if not isinstance(item, A.Node):
            continue
        if isinstance(getattr(item, "node", None), str):  # an expression
            size += 1
            depth += _counted(item)  # type: ignore[arg-type]
            deepest = max(deepest, depth)
            if isinstance(item, A.CallExpr) and item.func in lets:
                calls.append((item.func, depth))
        stack.extend((child, depth) for child in item.__dict__.values()
                     if isinstance(child, (A.Node, list)))
    return deepest, size, calls


def _let_calls(let: A.LetDecl, world: CheckedWorld) -> list[str]:
    return [name for name, _ in _body_shape(let.body, world.lets)[2]]


def let_shapes(lets: dict[str, A.LetDecl]) -> dict[str, tuple[int, int]]:
    """Per `let`: its nesting depth counting the definitions it calls, and its expanded size.

    Computed without recursion (a chain of thousands of definitions is input, too);
    a recursive cycle (reported as E304) is cut where the walk meets it again.
    """
    bodies = {name: _body_shape(let.body, lets) for name, let in lets.items()}
    shapes: dict[str, tuple[int, int]] = {}
    for root in lets:
        if root in shapes:
            continue
        open_: set[str] = {root}
        stack: list[tuple[str, int]] = [(root, 0)]  # (definition, next call to visit)
        while stack:
            name, i = stack[-1]
            calls = bodies[name][2]
            if i < len(calls):
                stack[-1] = (name, i + 1)
                callee = calls[i][0]
                if callee not in shapes and callee not in open_:
                    open_.add(callee)
                    stack.append((callee, 0))
                continue
            stack.pop()
            open_.discard(name)
            depth, size, _ = bodies[name]
            for callee, at in calls:
                sub_depth, sub_size = shapes.get(callee, (0, 0))  # (0, 0): a cycle, cut
                depth = max(depth, at + sub_depth)
                size = min(size + sub_size, 10 * MAX_EXPANDED)  # capped: no huge integers
            shapes[name] = (depth, size)
    return shapes


# ---------------------------------------------------------------- the pass

def check_expressions(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    c = ExprChecker(world, diagnostics)
    for let in world.lets.values():  # E112 where a definition crosses the limit
        shape = c.let_shapes[let.name]
        if shape[1] > MAX_EXPANDED and all(c.let_shapes[name][1] <= MAX_EXPANDED
                                           for name in _let_calls(let, world)):
            c.error("E112", f"let {let.name} expands to more than {MAX_EXPANDED:,} nodes "
                    "through the definitions it calls", let, _EXPANSION_HINT)
    for let in world.lets.values():
        c.let_type(let)
    for state in world.states.values():
        c.expect(state.value, world.state_types.get(state.name, T.ANY),
                 Scope("state", instance=False), f"the value of state '{state.name}'")
    start = A.last_clause(world.world.clauses, A.StartClause) if world.world else None
    if start is not None:
        c.expect(start.expr, T.DATE, Scope("world start"), "the calendar's `start`")
    for record in world.records.values():
        for f in world.fields(record.name):
            if f.default is not None:
                c.expect(f.default, world.field_types.get((record.name, f.name), T.ANY),
                         Scope("field default", instance=False), f"the default of '{f.name}'")
    for policy in world.policies.values():
        for clause in policy.clauses:
            match clause:
                case A.RuleClause():
                    c.expect(clause.expr, T.BOOL, Scope("policy"), "a policy rule")
                case A.PolicyTextClause() | A.SourceClause():
                    pass
                case _:
                    assert_never(clause)
    for inducer in world.inducers.values():
        _check_inducer(c, inducer)
    for channel in world.channels:
        if channel.when is not None:
            c.expect(channel.when, T.BOOL, Scope("channel"), "a channel's `when`")
    for tool in world.tools.values():
        _check_tool(c, tool)
    for party in world.parties.values():
        _check_party(c, party)
    _check_measures(c, world)


def _check_inducer(c: ExprChecker, inducer: A.InducerDecl) -> None:
    scope = Scope(f"inducer {inducer.name}")
    on = A.first_clause(inducer.clauses, A.OnClause)
    tool = c.world.tools.get(on.name) if on is not None else None
    if tool is not None:  # fires inside that tool's call: its context and arguments
        from eairdsl.check.signatures import resolve_type

        scope = Scope(f"inducer {inducer.name}", context=True, params={
            p.name: resolve_type(c.world, p.type, Diagnostics()) for p in tool.params})
    for clause in inducer.clauses:
        match clause:
            case A.ToClause():
                t = c.check(clause.expr, scope)
                if not (T.compatible(T.PARTY, t) or T.compatible(T.list_of(T.PARTY), t)):
                    c.error("E402", f"a warning's `to` names a participant or a list of them, "
                            f"not {t}", clause.expr, "e.g. `to context.caller` or "
                            "`to [billing, support]`")
            case A.WhenClause():
                c.expect(clause.expr, T.BOOL, scope, "an inducer's `when`")
            case A.TextClause():
                if clause.constant is None:  # a literal text is rendered into cards as is
                    c.expect(clause.expr, T.TEXT, scope, "an inducer's text")
            case A.AtClause() | A.EveryClause() | A.CostClause():
                c.expect(clause.expr, T.DURATION, scope, f"an inducer's `{clause.key}`")
            case A.PointsClause():
                c.expect(clause.expr, T.NUMBER, scope, "an inducer's `points`")
            case A.RolesClause() | A.FromClause() | A.ShiftClause() | A.OnClause():
                pass
            case _:
                assert_never(clause)


def _check_tool(c: ExprChecker, tool: A.ToolDecl) -> None:
    w = c.world
    from eairdsl.check.signatures import resolve_type
    params: dict[str, T.Type] = {}
    for p in tool.params:
        if p.name in params:
            c.error("E302", f"parameter '{p.name}' is declared twice", p)
        ptype = resolve_type(w, p.type, Diagnostics())
        params[p.name] = ptype
        if p.default is not None:
            c.expect(p.default, ptype, Scope("default", instance=False),
                     f"the default of '{p.name}'")
        if p.hint is not None:
            hinted = c.check(p.hint, Scope("hint"))
            if not (T.compatible(ptype, hinted) or (hinted.kind == "list" and hinted.arg
                                                     and T.compatible(ptype, hinted.arg))):
                c.error("E402", f"the hint for '{p.name}' must be a {ptype} or a list of them, "
                        f"not {hinted}", p.hint)
    scope = Scope(f"tool {tool.name}", params=params, context=True)
    returns = resolve_type(w, tool.returns, Diagnostics()) if tool.returns else T.ANY
    for clause in tool.clauses:
        match clause:
            case (A.RequireClause() | A.EnsureClause() | A.AppendClause() | A.SetClause()
                  | A.PropagatesClause() | A.AclClause()) if clause.when is not None:
                c.expect(clause.when, T.BOOL, scope, "a `when` condition")
        match clause:
            case A.RequireClause():
                c.expect(clause.expr, T.BOOL, scope, "a `require` guard")
            case A.ReturnsClause():
                c.expect(clause.expr, returns, scope, f"the result of '{tool.name}'")
            case A.CostClause():
                c.expect(clause.expr, T.DURATION, scope, "a tool's cost")
            case A.AppendClause():
                _check_append(c, clause, scope)
            case A.SetClause():
                expected = w.state_types.get(clause.name, T.ANY)
                c.expect(clause.expr, expected, scope, f"the new value of '{clause.name}'")
            case A.PropagatesClause() | A.AclClause():
                c.expect(clause.expr, T.TEXT, scope, f"the principal of `{clause.key}`")
            case A.SendsClause():
                c.check(clause.expr, scope)
            case (A.KindClause() | A.DescriptionClause() | A.DelegatesClause()
                  | A.EnsureClause()):
                pass  # an `ensure`'s rule is checked as its policy's
            case _:
                assert_never(clause)


def _check_append(c: ExprChecker, clause: A.AppendClause, scope: Scope) -> None:
    w = c.world
    ledger = clause.name
    c.check(clause.expr, scope)
    if ledger not in w.records or not isinstance(clause.expr, A.RecordExpr):
        if isinstance(clause.expr, A.RecordExpr) or ledger in w.records:
            return
        c.error("E402", "`append` needs a record literal `{field: value, ...}`", clause.expr)
        return
    declared = {f.name: w.field_types.get((ledger, f.name), T.ANY) for f in w.fields(ledger)}
    given = {f.name: f for f in clause.expr.fields}
    for name, init in given.items():
        if name not in declared:
            c.error("E301", f"'{ledger}' has no field '{name}'", init,
                    did_you_mean(name, declared))
            continue
        actual = w.expr_types.get(id(init.value), T.ANY)
        if not T.compatible(declared[name], actual):
            c.error("E402", f"field '{name}' of '{ledger}' must be {declared[name]}, not "
                    f"{actual}", init.value)
    defaults = {f.name for f in w.fields(ledger) if f.default is not None}
    missing = [n for n in declared if n not in given and n not in defaults]
    if missing:
        c.error("E402", f"`append {ledger}` is missing field{'s' if len(missing) > 1 else ''} "
                + ", ".join(missing), clause.expr, "give every field without a default")


def _check_party(c: ExprChecker, party: A.PartyDecl) -> None:
    scope = Scope(f"{party.kind} {party.name}")
    for clause in party.clauses:
        match clause:
            case A.ToolsClause():
                for ref in clause.refs:
                    if ref.when is not None:
                        c.expect(ref.when, T.BOOL, scope, "a tool's `when` condition")
            case A.PrincipalClause():
                c.expect(clause.expr, T.TEXT, scope, "a principal")
            case A.AuthorityClause():
                if clause.constant is None:  # a literal level needs no checking
                    c.expect(clause.expr, T.INT, scope, "an authority level")
            case A.DisplayClause():
                c.expect(clause.expr, T.TEXT, scope, "a display name")
            case A.SayClause() | A.ContactClause():
                if clause.when is not None:
                    c.expect(clause.when, T.BOOL, scope, "a `when` condition")
                c.expect(clause.at, T.DURATION, scope, "the time of a scheduled event")
                if isinstance(clause, A.SayClause):
                    c.expect(clause.message, T.TEXT, scope, "a scripted message")
                w = c.world
                target = clause.recipient
                if not isinstance(target, A.NameExpr) or target.id in (
                        *w.parties, *w.levers, *w.states):  # an unknown bare name: E301 already
                    c.expect(target, T.PARTY, scope, "the recipient of a scheduled event")
            case (A.ModelClause() | A.CardClause() | A.KpiClause() | A.MemoryClause()
                  | A.ObjectiveClause() | A.TraitClause() | A.DescriptionClause()):
                pass
            case _:
                assert_never(clause)


def _check_measures(c: ExprChecker, world: CheckedWorld) -> None:
    known: dict[str, T.Type] = {}
    seen: dict[str, A.MeasureItem] = {}
    for item in world.measure_items:
        scope = Scope("measure", measures=dict(known))
        if item.name in seen:
            c.error("E302", f"measurement '{item.name}' is defined twice", item,
                    f"the first is at {seen[item.name].span}")
        seen[item.name] = item
        if not item.metric and item.name not in MEASUREMENTS:
            c.error("E503", f"'{item.name}' is not one of the six measurements", item,
                    did_you_mean(item.name, MEASUREMENTS) or
                    f"measurements are {', '.join(MEASUREMENTS)}; "
                    f"write `metric {item.name} = ...` for an extra one")
        t = c.check(item.expr, scope)
        if not item.metric and not T.compatible(T.BOOL, t):
            c.error("E402", f"measurement '{item.name}' must be a predicate (bool), not {t}",
                    item.expr)
        if item.when is not None:
            c.expect(item.when, T.BOOL, scope, "a measurement's `when`")
        known[item.name] = t
