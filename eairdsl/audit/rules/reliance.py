"""How a boundary contributed when one role alone wrote the state a declared rule reads.

`policy_rule` supports a broken rule when several actors wrote the failing state
(`amplified`) or when the single writer recorded a value other roles told it
(`_relayed`). Three more boundaries of EAIR §2 show up with one writer, and
each is read from the steps, never from message existence alone:

- **A request across authority** (`power`, contribution `authorized`): a
  participant of higher declared authority than the writer asked for the act,
  naming its object — a distinctive argument of the failing call (an identifier
  with a letter and a digit, a text of at least the validator's minimum quote
  length, a number of two or more characters) appears in that participant's
  message to the writer before the call, and not in the writer's own card. The
  organizational-power relationship is Table 1's boundary for role decision
  rights: the senior's request stood in for the decision the writer did not own.
- **A report overridden at review** (`review`, contribution
  `preserved_despite_check`): another role told the writer a fact the rule's
  failure rests on, and the writer wrote the violating state anyway. The fact is
  a distinctive value of a row of a record the rule reads, other than the
  records the failing write changed, that the writer's tools cannot show it
  (tool cards' `reveals`), in a row that shares a value with the written row
  (the same design, order, story); a message from another role to the writer
  quotes it before the write. The reviewer's report was the check assigned to
  the boundary; the sign-off kept the violation despite it.
- **A duty omitted along a delegation** (`delegation`, contribution
  `preserved_despite_check`): the rule reads a record nobody wrote during the
  episode, which tools held by roles other than the writer write (tool cards'
  `writes`): its holders owned the duty. The writer exchanged messages with such
  a holder before the failing write — the holder told the writer something, or
  the writer handed the holder the act's object — and proceeded without the
  row. R1 is the latest such message, R2 runs through those messages to the
  write (the path of reliance), R3 is the rule still broken at the end.

Limits: the value matching is verbatim (after `evidence.normalize`); an enum
value or a short word never counts as a fact told; a holder who never spoke to
the writer leaves the omission a lead (nothing shows the writer relied on it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from eairdsl.audit.contract import BoundaryKind, Contribution
from eairdsl.audit.evidence import field_text, normalize
from eairdsl.audit.rules._common import Context, cite
from eairdsl.audit.validate import MIN_QUOTE
from eairdsl.runtime.trace import TraceEvent

__all__ = ["Reliance", "needles", "reliance", "step_text"]

#: an identifier: one token with a letter and a digit or an inner separator
#: (`PO-7102`, `LAB12`, `S-mill`), not a plain word
_IDENT = re.compile(r"^(?=\S*[A-Za-z])(?=\S*\d|\S*[A-Za-z0-9][_./:#-][A-Za-z0-9])"
                    r"[A-Za-z0-9][A-Za-z0-9_./:#-]{2,63}$")


@dataclass(frozen=True)
class Reliance:
    """The boundary one writer's violation rests on: its kind and contribution, the
    mechanism it names, and the steps that carried it (in trace order), each with the
    value it quotes (None: cite the step's opening)."""

    kind: BoundaryKind
    contribution: Contribution
    shape: str
    carried: list[tuple[TraceEvent, str | None]]


def needles(value: Any, identifiers: bool = True) -> list[tuple[str, re.Pattern[str]]]:
    """How a value is said in a step's text, when it is distinctive: a text of at least
    MIN_QUOTE characters as it is; an identifier as a whole token (unless `identifiers`
    is off); a number of two or more characters as a whole number. Anything else (a
    short word, a boolean, an enum member) is not distinctive and gives none."""
    if isinstance(value, bool):
        return []
    if isinstance(value, str):
        text = normalize(value)
        if len(text) >= MIN_QUOTE:
            return [(text, re.compile(re.escape(text)))]
        if identifiers and _IDENT.match(text):
            return [(text, re.compile(r"(?<![\w-])" + re.escape(text) + r"(?![\w-])"))]
        return []
    if not isinstance(value, int | float):
        return []
    forms = {str(value)} | ({str(int(value))} if isinstance(value, float)
                            and value.is_integer() else set())
    return [(f, re.compile(r"(?<![\d.])" + re.escape(f) + r"(?![\d]|\.\d)"))
            for f in sorted(forms) if len(f) >= 2]


def _scalars(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _scalars(value[k])
    elif isinstance(value, list):
        for v in value:
            yield from _scalars(v)
    elif isinstance(value, str | int | float):
        yield value


def step_text(step: TraceEvent, fields: tuple[str, ...] = ("content", "args", "result")
              ) -> str:
    """The step's text a value can be said in (by default what it says, not the state it
    writes), normalised."""
    return "\n".join(normalize(field_text(step, f) or "") for f in fields)


def _call_of(ctx: Context, write: TraceEvent) -> TraceEvent | None:
    """The tool call whose effect the state update is."""
    for s in reversed(ctx.steps[:ctx.index[write.step]]):
        if s.kind == "tool_call" and s.actor == write.actor and s.tool == write.tool:
            return s
    return None


def _object_args(ctx: Context, call: TraceEvent) -> list[Any]:
    """The call's argument values that can name its object: not a closed-vocabulary
    parameter's member (a status, an outcome), which says what was done, not to what."""
    closed = ctx.enums(call.tool or "")
    return [v for k, a in sorted((call.args or {}).items()) if k not in closed
            for v in _scalars(a)]


def _said(ctx: Context, writer: str, values: list[Any]) -> list[tuple[str, re.Pattern[str]]]:
    names = set(ctx.parties)
    card = normalize(ctx.bundle.cards.get(writer, ""))
    return [(t, p) for v in dict.fromkeys(values) if v not in names
            for t, p in needles(v) if not p.search(card)]


def _power(ctx: Context, write: TraceEvent) -> Reliance | None:
    writer = write.actor
    call = _call_of(ctx, write)
    if call is None:
        return None
    wanted = _said(ctx, writer, _object_args(ctx, call))
    for s in reversed(ctx.steps[:ctx.index[call.step]]):
        if s.kind != "message" or s.recipient != writer or s.actor == writer \
                or ctx.authority(s.actor) <= ctx.authority(writer):
            continue
        text = step_text(s)
        hit = next((t for t, p in wanted if p.search(text)), None)
        if hit is not None and cite(s, hit, ["R1"]) is not None:
            return Reliance("power", "authorized", "authority_request", [(s, hit)])
    return None


def _holds(ctx: Context, role: str) -> list[Any]:
    return [t for t in ctx.bundle.tools if role in t.roles]


def _row_written(write: TraceEvent) -> tuple[set[str], list[Any]]:
    """The records the write changed, and the scalar values it wrote."""
    diff = write.diff or {}
    changed = {str(k) for part in ("append", "set") if isinstance(diff.get(part), dict)
               for k in diff[part]}
    return changed, list(_scalars(diff))


def _overridden(ctx: Context, write: TraceEvent, records: list[str]) -> Reliance | None:
    writer = write.actor
    changed, written = _row_written(write)
    tools = _holds(ctx, writer)
    if any(not t.reveals and t.kind == "read" for t in tools):
        return None       # a reading tool whose reach is unknown: it could have shown it
    seen = {r for t in tools for r in t.reveals}
    joins = {v for v in written if needles(v) and v not in ctx.parties}  # not who wrote
    facts: list[Any] = []
    for name in records:
        view = ctx.bundle.records.get(name)
        if view is None or name in changed or name in seen:
            continue
        for row in view.rows:
            values = list(_scalars(row))
            if joins & set(values):
                facts += [v for v in values if v not in joins]
    wanted = _said(ctx, writer, facts)
    told: list[tuple[TraceEvent, str | None]] = []
    for s in ctx.steps[:ctx.index[write.step]]:
        if s.kind == "message" and s.recipient == writer and s.actor != writer \
                and ctx.is_role(s.actor):
            hit = next((t for t, p in wanted if p.search(step_text(s))), None)
            if hit is not None and cite(s, hit, ["R1"]) is not None:
                told.append((s, hit))
    return Reliance("review", "preserved_despite_check", "report_overridden", told) \
        if told else None


def _omitted(ctx: Context, write: TraceEvent, records: list[str]) -> Reliance | None:
    writer = write.actor
    written = {str(k) for s in ctx.steps if s.kind == "state_update" and s.diff
               for part in ("append", "set") if isinstance(s.diff.get(part), dict)
               for k in s.diff[part]}
    untouched = [r for r in records if r not in written]
    holders = {role for t in ctx.bundle.tools if set(t.writes) & set(untouched)
               for role in t.roles if role != writer and ctx.is_role(role)}
    if not holders:
        return None
    call = _call_of(ctx, write)
    objects = _said(ctx, writer, _object_args(ctx, call)) if call else []
    path: list[tuple[TraceEvent, str | None]] = []
    for s in ctx.steps[:ctx.index[write.step]]:
        if s.kind != "message":
            continue
        if s.actor in holders and s.recipient == writer:
            hit = next((t for t, p in objects if p.search(step_text(s))), None)
            path.append((s, hit))
        elif s.actor == writer and s.recipient in holders:
            hit = next((t for t, p in objects if p.search(step_text(s))), None)
            if hit is not None:
                path.append((s, hit))
    return Reliance("delegation", "preserved_despite_check", "duty_omitted", path) \
        if path else None


def reliance(ctx: Context, write: TraceEvent, records: list[str]) -> Reliance | None:
    """The boundary a single writer's violation of a rule over `records` rests on, if the
    steps show one (a duty omitted along a delegation, a report overridden, a request
    across authority; the most specific first), else None."""
    if not ctx.is_role(write.actor):
        return None
    return _omitted(ctx, write, records) or _overridden(ctx, write, records) \
        or _power(ctx, write)
