"""The witness pass of one finished episode: the measurements' recording closures run on a
recording scope (the rules and why there is one evaluator: `eairdsl.runtime.witness`).

Nothing here evaluates anything itself: the values and their witnesses come from
`evaluate.compile_expr` on the world's recording `let` table. This module holds
what a pass needs around it — the recording scope (a copy of the measurement
scope with its own budget, a judge that replays, a `Recorder`), the recording
closures kept per world, and the rule for a `when`.
"""

from __future__ import annotations

import json
import weakref
from typing import TYPE_CHECKING, Any

from eairdsl.ir import Expr, MeasureIR
from eairdsl.runtime.evaluate import Budget, EvalError, Fn, Scope, compile_expr
from eairdsl.runtime.trace import to_json
from eairdsl.runtime.values import Ledger
from eairdsl.runtime.witness import EMPTY, Entry, Provenance, Recorder, Why

if TYPE_CHECKING:
    from eairdsl.runtime.world import CompiledWorld

__all__ = ["WitnessRun", "judge_key", "is_same"]

#: the measurements' recording closures of each live compiled world, by expression identity
_COMPILED: weakref.WeakKeyDictionary[Any, dict[int, tuple[Expr, Fn]]] = \
    weakref.WeakKeyDictionary()


def judge_key(rubric: list[Any], artifact: str, positive: int) -> str:
    """The key a judge's answer is replayed under during witnessing."""
    return json.dumps([rubric, artifact, positive], sort_keys=True, default=str)


class WitnessRun:
    """Witness evaluation of one finished episode's measurements, in declaration order.

    `scope` is the measurement scope (its `measures` dict is read live, so a
    measurement referring to an earlier one gets the value the plain pass gave
    it); `answers` holds the judge's answers by `judge_key`, replayed instead of
    asking again. The recording closures of a compiled world are built once (on
    its `let` table's recording twin) and kept while the world lives.
    """

    def __init__(self, compiled: CompiledWorld, trace: Any, ledgers: dict[str, Ledger],
                 scope: Scope, answers: dict[str, Any]) -> None:
        world = self.world = compiled.world
        #: measurements whose witness was not kept (see measure._witness)
        self.dropped: set[str] = set()
        self._lets = compiled.lets.recording()
        fns = _COMPILED.get(compiled)
        if fns is None:
            fns = _COMPILED[compiled] = {}
        self._fns = fns
        initial = {r.name: len(r.rows) for r in world.records}
        self.prov = Provenance(trace, ledgers, initial)
        base = Scope.__new__(Scope)
        base.__dict__.update(scope.__dict__)
        base.budget = Budget()
        # The measurement pass's `let` memo is shared: values are pure, and the step-free
        # parts of the measurements find what the plain pass already computed.
        base.judge = lambda rubric, artifact, positive: answers.get(
            judge_key(rubric, artifact, positive)) if answers else None
        self.whys: dict[str, Why] = {}
        self.rec = base.rec = Recorder(self.prov, self.whys)
        self.scope = base

    def _fn(self, expr: Expr) -> Fn:
        # keyed by identity: the entry keeps the expression alive (see CompiledWorld.fn)
        hit = self._fns.get(id(expr))
        if hit is None or hit[0] is not expr:
            hit = self._fns[id(expr)] = (expr, compile_expr(expr, self._lets))
        return hit[1]

    def _eval(self, expr: Expr) -> Entry:
        """(value, Why) of `expr`: its recording closure's value and the entry it pushed."""
        stack = self.rec.stack
        stack.clear()  # what a failed evaluation left
        value = self._fn(expr)(self.scope)
        got = stack.pop()
        assert got[0] is value and not stack
        return value, got[1]

    def measure(self, m: MeasureIR, held: bool | None = None) -> tuple[Any, Why] | None:
        """(value, witness) of one measurement, or None when witnessing itself failed.

        `held`: the plain pass's answer to the measurement's `when` (None: no
        `when`, or it failed). A `when` known to hold is witnessed only if its steps
        are needed (the expression rests on none).
        """
        try:
            try:
                if m.when is not None and held is not True:
                    ok, licence = self._eval(m.when)
                    if ok is not True:
                        return None, licence
                value, why = self._eval(m.expr)
                steps = why.all()
                if steps and min(steps) < 0:  # a placeholder escaped its let: never a step
                    return None
                if steps or m.when is None:
                    return value, why
                # Nothing to point at (an absence: "no check before the report"): the steps
                # that made the measurement assessable stand in (the published report).
                return value, self._eval(m.when)[1]
            except (EvalError, TypeError, ValueError, KeyError, ArithmeticError):
                return None, EMPTY  # the plain pass failed the same way: unassessed
        except Exception:  # the budget, a deep recursion, a bug: witnessing never changes a
            return None    # result, it only loses this measurement's witness

    def keep(self, name: str, why: Why) -> None:
        """Record `name`'s witness, for later measurements that refer to it."""
        self.whys[name] = why

    def step_ids(self, why: Why) -> list[str]:
        """The witness as step ids, in trace order."""
        ids = self.prov.step_ids
        return [ids[i] for i in sorted(why.all())]


def is_same(a: Any, b: Any) -> bool:
    """Do the plain and the recording evaluation agree (as the result line would show them)?"""
    return bool(type(a) is type(b) and to_json(a) == to_json(b))
