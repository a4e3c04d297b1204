"""Pass 9: offline authoring traps — worlds that check clean but misbehave when run.

Each was found by reading traces (issue 12, item 5; `docs/sim.md`, "My world does not
behave offline"):

- W704: `require … else route NAME` where NAME is a tool that a role holding the
  routing tool does not hold: the routed call is refused at run time.
- W705: a list-typed parameter hinted with a list of its elements: a hint that is a
  list is read as the candidates, so every candidate is one element and every call
  fails the parameter's type.
- E511: several delegation callees through one tool: the call always goes to one of
  them (the first in name order, or the `delegates NAME`), the other edges never.
- W706: a hint that reads the trace or the clock: hints are rebuilt only after a state
  change, so the value goes stale (`today()` excepted: it moves only at midnight).
  A hint cannot read `context` at all: that is already E305.
- W707: an inducer without shifts whose literal text no card of its roles renders: no
  LLM prompt receives it (W703's twin for inducers that only carry text).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from eairdsl.check.lints import rendered_by_a_card
from eairdsl.check.signatures import resolve_type
from eairdsl.check.types import compatible
from eairdsl.check.world import CheckedWorld
from eairdsl.diagnostics import Diagnostics
from eairdsl.syntax import ast as A

__all__ = ["check_traps"]

@cache
def _stale() -> frozenset[str]:
    """Calls whose value moves without a state change (the runtime's volatility set, loaded
    on first use so check/ imports no later stage), less `today()`: a date moves only at
    midnight of the simulated clock, and an episode's hint of today's date (C1's
    `approval_date`) is right for the whole episode."""
    from eairdsl.runtime.builtins import VOLATILE

    return VOLATILE - {"today"}


def check_traps(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    _route_targets(world, diagnostics)
    _delegation_edges(world, diagnostics)
    _hints(world, diagnostics)
    _unrendered_texts(world, diagnostics)


def _own(world: CheckedWorld, decl: A.Decl) -> bool:
    """Declared by the world, not by `stdlib/` (whose authors are not this world's)."""
    module = world.module_of.get(id(decl))
    return module is None or not module.is_stdlib


def _held(party: A.PartyDecl) -> set[str]:
    return {r.name for c in party.clauses if isinstance(c, A.ToolsClause) for r in c.refs}


def _route_targets(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    """W704: a route target tool that a role holding the routing tool cannot call."""
    holders = {name: _held(p) for name, p in world.parties.items()}
    for tool in world.tools.values():
        if not _own(world, tool):
            continue
        for clause in tool.clauses:
            if not (isinstance(clause, A.RequireClause)
                    and isinstance(clause.guard, A.RouteGuard)):
                continue
            target = clause.guard.target
            if target not in world.tools:
                continue  # a participant (a delegation), or unknown (E301)
            callers = sorted(p for p, held in holders.items()
                             if tool.name in held and target not in held)
            if callers:
                who = ", ".join(f"'{c}'" for c in callers)
                diagnostics.warning(
                    "W704", f"route target '{target}' is not in the `tools` of {who}, which "
                    f"call{'s' if len(callers) == 1 else ''} '{tool.name}': the routed call "
                    "is refused at run time", clause.guard.span,
                    f"add {target} to the `tools` of {who}, or route to a participant that "
                    "may call it")


def _delegation_edges(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    """E511: a tool reached by delegation edges to several callees (only one is ever used)."""
    for tool in world.tools.values():
        named = A.first_clause(tool.clauses, A.DelegatesClause)
        if named is None or not _own(world, tool):
            continue  # no delegates clause: E508 covers its channels
        channels = [c for c in world.channels if c.kind == "delegation" and c.via == tool.name
                    and len(c.parties) > 1]
        callees = sorted({c.parties[1] for c in channels})
        chosen = named.name if named.name is not None else (callees[0] if callees else None)
        for channel in channels:
            if channel.parties[1] == chosen:
                continue
            diagnostics.error(
                "E511", f"tool '{tool.name}' delegates to '{chosen}' only: the delegation "
                f"to '{channel.parties[1]}' through it is never taken", channel.span,
                "a delegating tool has one callee, fixed when the world is compiled; declare "
                f"one tool per callee (e.g. `{tool.name}_{channel.parties[1]}`) and hold the "
                "one each caller needs")
            break  # one error per tool: the rest repeat it


def _hints(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    """W705 (a list parameter hinted with its elements) and W706 (a volatile hint)."""
    for tool in world.tools.values():
        if not _own(world, tool):
            continue
        for p in tool.params:
            if p.hint is None:
                continue
            ptype = resolve_type(world, p.type, Diagnostics())
            hinted = world.expr_types.get(id(p.hint))
            if (ptype.kind == "list" and hinted is not None and hinted.kind == "list"
                    and hinted.arg is not None and hinted.arg.kind not in ("any", "none")
                    and not (isinstance(p.hint, A.ListExpr) and not p.hint.items)
                    and compatible(ptype, hinted) and not compatible(ptype, hinted.arg)):
                diagnostics.warning(
                    "W705", f"the hint for list parameter '{p.name}' is a list of "
                    f"{hinted.arg} values: a list hint is read as the candidates, so every "
                    f"call passes one {hinted.arg} and fails the type {ptype}", p.hint.span,
                    "hint a list of whole lists (`hint [[\"a\", \"b\"]]`: one candidate), "
                    "or drop the hint")
            volatile = _volatile_call(world, p.hint, set())
            if volatile is not None:
                diagnostics.warning(
                    "W706", f"the hint for '{p.name}' reads `{volatile.func}(…)`, which "
                    "changes without a state change: hints are rebuilt only after the state "
                    "changes, so agents see a stale value", volatile.span,
                    "hint from the state, the instance or the data (a `state` variable the "
                    "tools `set` moves with the episode), or drop the hint")


def _volatile_call(world: CheckedWorld, expr: A.Expr, seen: set[str]) -> A.CallExpr | None:
    """The first clock or trace call in `expr` (through `let` bodies), located at the call
    written in `expr` itself."""
    for node in _calls(expr):
        if node.func in _stale():
            return node
        let = world.lets.get(node.func)
        if let is not None and node.func not in seen:
            seen.add(node.func)
            if _volatile_call(world, let.body, seen) is not None:
                return node
    return None


def _calls(expr: A.Expr) -> Iterator[A.CallExpr]:
    for node in A.walk_exprs(expr):
        if isinstance(node, A.CallExpr):
            yield node


def _unrendered_texts(world: CheckedWorld, diagnostics: Diagnostics) -> None:
    """W707: an inducer without shifts whose literal text none of its roles' cards renders."""
    if any(d.span is not None and d.code.startswith("E6") for d in diagnostics.errors):
        return  # cards did not render: which texts they show is unknown
    for name, inducer in world.inducers.items():
        if not _own(world, inducer) or inducer.kind == "warning":
            continue  # a warning's text arrives as a message when it fires
        if any(isinstance(c, A.ShiftClause) for c in inducer.clauses):
            continue  # W703's case
        text = A.first_clause(inducer.clauses, A.TextClause)
        if text is None or text.constant is None:
            continue  # nothing to show, or a live dashboard (in every observation)
        if not rendered_by_a_card(world, inducer, text.constant):
            diagnostics.warning(
                "W707", f"no card renders the text of {inducer.kind} '{name}': no LLM prompt "
                "receives it", text.span,
                f"render it in its roles' cards (`inducers.{inducer.kind}`"
                f"{' or `prompt_clauses`' if inducer.kind == 'prompt_clause' else ''}), or "
                "remove the inducer")
