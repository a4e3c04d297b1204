"""Static evaluation: what an expression's value is known to be before any episode runs.

Used for three jobs: the value of a lever's default or a condition's setting,
deciding lever-only conditions per named condition (which prompt clauses and
tools a role has), and the lint that catches measurements which can never be
false or never be true.

There is one semantics. An expression is lowered to the IR and evaluated by
the runtime's own evaluator (`eairdsl.runtime.evaluate.compile_expr`) in a
scope that holds the condition's lever values and nothing else — Jinja's
`as_const` habit. Reading anything an episode supplies (a record, a state
variable, the instance, the context, a measurement, the trace, the clock, a
builtin that is not pure, a `let` that reads any of these) raises
`NotConstant`, and the folder answers UNKNOWN. So the folded value is the
value every episode of that condition computes, three-valued logic included
(`none` is "unknown", not false).

Where part of an expression is not constant, the folder still decides what
logic decides without it: `false and x`, `true or x`, `x or not x`, `x == x`,
`count(...) >= 0`, `s contains_any []`, a quantifier over `[]`, `choose` on a
constant condition. Evaluation is bounded by a small `Budget` (FOLD_STEPS):
a fold that wants more is UNKNOWN, never a compile-time allocation or hang.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from eairdsl.check.world import CheckedWorld, Resolution
from eairdsl.syntax import ast as A
from eairdsl.syntax.build import iter_exprs

if TYPE_CHECKING:
    from eairdsl.ir import Binary, Expr, LetIR
    from eairdsl.runtime.evaluate import LetTable, Scope

__all__ = ["UNKNOWN", "NotConstant", "FOLD_STEPS", "FoldPlan", "FoldPlans", "fold", "fold_ir",
           "lower_for_fold", "uses_only_levers"]

#: evaluation steps one fold may spend (the runtime's per-episode budget is 2,000,000)
FOLD_STEPS = 10_000


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


class NotConstant(Exception):
    """The expression reads something only an episode has (Jinja's `Impossible`)."""


class _Sealed:
    """A scope part the folder does not have: any use of it is not constant."""

    def __getattr__(self, name: str) -> Any:
        raise NotConstant(name)


class _SealedMap(dict[str, Any]):
    """States, records, documents, measurements: none are known before an episode."""

    def get(self, key: str, default: Any = None) -> Any:
        raise NotConstant(key)

    def __getitem__(self, key: str) -> Any:
        raise NotConstant(key)

    def __contains__(self, key: object) -> bool:
        raise NotConstant(str(key))


#: names whose value needs no episode: levers, enum values and names, bound variables
_CONSTANT_REFS = frozenset({"lever", "enum_value", "enum", "local", "param"})


def lower_for_fold(expr: A.Expr, levers: dict[str, Any] | set[str], enum_members: set[str],
                   world: CheckedWorld | None = None,
                   let_cache: dict[str, tuple[LetIR, frozenset[str]]] | None = None,
                   ) -> tuple[Expr, dict[str, LetIR]]:
    """`expr` as IR, with the `let` definitions it reaches.

    With a checked `world`, names resolve as the checker resolved them and
    `text`/`join` know their argument's unit. Without one, a name is a lever
    when `levers` has it, else an enum value when `enum_members` has it, else
    unknown (not constant). `let_cache` (one per world, kept by the caller)
    holds each definition lowered once, with the definitions its body calls.
    """
    from eairdsl.check.lower_expr import lower_expr
    from eairdsl.ir import LetIR

    if world is None:
        shim = CheckedWorld(program=cast(Any, None))
        for node in iter_exprs(expr):
            if isinstance(node, A.NameExpr):
                if node.id in levers:
                    shim.resolutions[id(node)] = Resolution("lever", node.id)
                elif node.id in enum_members:
                    shim.resolutions[id(node)] = Resolution("enum_value", node.id)
        world = shim
    used: set[str] = set()
    ir = lower_expr(world, expr, used)
    lets: dict[str, LetIR] = {}
    cache = {} if let_cache is None else let_cache
    while used - set(lets):  # a body may reach further definitions
        name = sorted(used - set(lets))[0]
        found = cache.get(name)
        if found is None:
            let = world.lets[name]
            calls: set[str] = set()
            found = cache[name] = (LetIR(name=name, params=[p.name for p in let.params],
                                         body=lower_expr(world, let.body, calls)),
                                   frozenset(calls))
        lets[name] = found[0]
        used |= found[1]
    return ir, lets


def fold(expr: A.Expr, levers: dict[str, Any], enum_members: set[str],
         world: CheckedWorld | None = None, plans: FoldPlans | None = None) -> Any:
    """The value of `expr` if it is decided by literals and lever values alone, else UNKNOWN.

    `plans` (kept by the caller across conditions) lowers each expression once."""
    plan = (plans or FoldPlans()).plan(expr, levers, enum_members, world)
    return UNKNOWN if plan is None else plan.fold(levers)


def fold_ir(expr: Expr, levers: dict[str, Any], lets: dict[str, LetIR] | None = None, *,
            units: bool = True, steps: int = FOLD_STEPS) -> Any:
    """The value the runtime evaluator gives `expr` with only `levers` known, else UNKNOWN.

    `units=False` when lowering did not know the argument types (then `text`
    and `join` cannot render like the runtime and are not folded).
    """
    return FoldPlan(expr, lets or {}, units).fold(levers, steps)


class FoldPlan:
    """One lowered expression, folded under any number of lever settings.

    What does not depend on the lever values is decided once for all of them:
    which subexpressions are constant (`_Folder.constant` reads no lever value),
    the let table, and the compiled closures of the constant subexpressions.
    """

    def __init__(self, expr: Expr, lets: dict[str, LetIR], units: bool) -> None:
        from eairdsl.runtime.builtins import PURE

        self.expr = expr
        self.lets = lets
        self.pure = PURE if units else PURE - {"text", "join"}
        self.constant: dict[int, bool] = {}
        self.compiled: dict[int, Callable[[Scope], Any]] = {}

    @cached_property
    def table(self) -> LetTable:
        from eairdsl.runtime.evaluate import LetTable

        return LetTable(self.lets)

    def fold(self, levers: dict[str, Any], steps: int = FOLD_STEPS) -> Any:
        return _Folder(self, levers, steps).fold(self.expr)


class FoldPlans:
    """Expressions lowered for folding, each once (a pass folds the same expression under
    every condition). Keyed by the AST node, which the plan keeps alive."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, frozenset[str] | None, frozenset[str] | None],
                          tuple[A.Expr, FoldPlan | None]] = {}
        #: per checked world (kept alive here): its `let` definitions, each lowered once
        self._lets: dict[int, tuple[CheckedWorld, dict[str, tuple[LetIR, frozenset[str]]]]] = {}

    def plan(self, expr: A.Expr, levers: dict[str, Any] | set[str], enum_members: set[str],
             world: CheckedWorld | None = None) -> FoldPlan | None:
        """`expr` lowered (see `lower_for_fold`); None when it does not lower."""
        key = (id(expr), None, None) if world is not None \
            else (id(expr), frozenset(levers), frozenset(enum_members))
        found = self._plans.get(key)
        if found is not None:
            return found[1]
        plan: FoldPlan | None
        let_cache = None
        if world is not None:
            let_cache = self._lets.setdefault(id(world), (world, {}))[1]
        try:
            ir, lets = lower_for_fold(expr, levers, enum_members, world, let_cache)
        except Exception:  # an expression the checker rejected may not lower: not foldable
            plan = None
        else:
            plan = FoldPlan(ir, lets, units=world is not None)
        self._plans[key] = (expr, plan)
        return plan


class _Folder:
    """Folds one expression under one set of lever values.

    The scope is built only when something is constant enough to evaluate:
    most expressions a checker folds read the episode, and building it for each
    (expression, condition) pair dominated compile time.
    """

    def __init__(self, plan: FoldPlan, levers: dict[str, Any], steps: int) -> None:
        self.plan = plan
        self.lets = plan.lets
        self.levers = levers
        self.steps = steps
        self.pure = plan.pure
        self._constant = plan.constant

    @cached_property
    def scope(self) -> Scope:
        from eairdsl.runtime.evaluate import Budget, Scope

        sealed: Any = _Sealed()
        return Scope(world=sealed, levers=dict(self.levers), states=_SealedMap(),
                     records=_SealedMap(), documents=_SealedMap(), authorizer=sealed,
                     instance=sealed, context=sealed, trace=sealed, start_date=sealed,
                     measures=_SealedMap(), budget=Budget(self.steps))

    def constant(self, e: Expr, open_lets: frozenset[str] = frozenset()) -> bool:
        """Does `e` read nothing but levers, literals and pure builtins?"""
        from eairdsl.ir import Call, LetCall, Ref, children

        known = self._constant.get(id(e))
        if known is not None:
            return known
        if isinstance(e, Ref):
            result = e.kind in _CONSTANT_REFS
        elif isinstance(e, Call) and e.func not in self.pure:
            result = False
        elif isinstance(e, LetCall):
            let = self.lets.get(e.name)
            # a recursive definition is an error (E304), not a value
            result = let is not None and e.name not in open_lets \
                and all(self.constant(a, open_lets) for a in e.args) \
                and self.constant(let.body, open_lets | {e.name})
        else:
            result = all(self.constant(c, open_lets) for c in children(e))
        self._constant[id(e)] = result
        return result

    def evaluate(self, e: Expr) -> Any:
        from eairdsl.runtime.evaluate import compile_expr

        if not self.constant(e):
            raise NotConstant
        fn = self.plan.compiled.get(id(e))
        if fn is None:
            fn = self.plan.compiled[id(e)] = compile_expr(e, self.plan.table)
        return fn(self.scope)

    def fold(self, e: Expr) -> Any:
        try:
            return self.evaluate(e)
        except NotConstant:
            return self.partial(e)
        except Exception:  # EvalError, BudgetExceeded, a TypeError on ill-typed input...
            return UNKNOWN  # ...is what the episode would hit: nothing is decided statically

    def partial(self, e: Expr) -> Any:
        """What logic decides about `e` although part of it is not constant."""
        from eairdsl.ir import Binary, Call, Quant

        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Quant):
            return (e.kind == "all") if self.fold(e.source) == [] else UNKNOWN
        if isinstance(e, Call) and e.func == "choose" and len(e.args) == 3 and not any(e.keys):
            cond = self.fold(e.args[0])
            if cond is UNKNOWN:
                return UNKNOWN
            return self.fold(e.args[1] if cond is True else e.args[2])
        return UNKNOWN

    def _binary(self, e: Binary) -> Any:
        from eairdsl.ir import Agg, Call, Unary

        op = e.operator
        if op in ("and", "or"):
            decisive = op == "or"  # `true or x`, `false and x`
            left = self.fold(e.left)
            if left is decisive:
                return decisive
            if self.fold(e.right) is decisive:
                return decisive
            if op == "or" and isinstance(e.right, Unary) and e.right.operator == "not" \
                    and e.right.operand == e.left:
                return True  # `x or not x`
            return UNKNOWN
        if op in ("==", "<=", ">=") and e.left == e.right:
            return True
        if op in ("!=", "<", ">") and e.left == e.right:
            return False
        counted = (isinstance(e.left, Agg) and e.left.func == "count" and not e.left.group_by) \
            or (isinstance(e.left, Call) and e.left.func == "len")
        if counted and op in (">=", "<"):  # counts and lengths are never negative
            right = self.fold(e.right)
            if isinstance(right, (int, float)) and not isinstance(right, bool) and right <= 0:
                return op == ">="
        if op == "contains_any" and self.fold(e.right) == []:
            return False
        return UNKNOWN


def uses_only_levers(expr: A.Expr, levers: set[str], members: set[str]) -> bool:
    """True when `expr` names nothing but levers, enum values and literals."""
    for node in iter_exprs(expr):
        if isinstance(node, A.NameExpr) and node.id not in levers and node.id not in members:
            return False
        if not isinstance(node, (A.NameExpr, A.LiteralExpr, A.UnaryExpr, A.BinaryExpr,
                                 A.ListExpr)):
            return False
    return True
