"""What `eairc signals match PRED REF` reads: audit folders, a study's one audit, JSON files.

Each side becomes a `matcher.MatchSet`. The kinds, tried in this order:

- an **audit folder** (`eairdsl/audit/runner.py` layout: `index.json` and
  `reports/<episode>.json`), read by `occurrences.read_audit`: one occurrence per
  trace × finding, the session being the trace (``<study>:<path inside the study>``,
  or its absolute path outside a study), so two audits of one study pair their
  sessions by trace path, never by bundle id. Only ``supported`` occurrences enter
  unless `leads` is set (then leads, "insufficient evidence", enter too); candidates
  outside the catalogue never do (they name no known component and no type). Types
  are the Signals type ids (the auditor's own, or the versioned EAIR mapping).
  Signals are the grouping fingerprints (`grouping.fingerprint`), one batch per side;
- a **study folder** with exactly one audit under it (`audit/<arm>/`): that audit;
- a **Signals store** (the SQLite file `eairc signals update` writes): its Signals as
  the store grouped them (merges applied), its occurrences filtered as for an audit,
  one batch;
- a **JSON file**: ``{"occurrences": [...], "signals": [...]}`` or a bare list of
  occurrences, each ``{"session", "component": {"type", "name"}, "types": [≤ 3 ids],
  "signal"?, "id"?}``; a Signal is ``{"id", "batch"?, "component": {...}, "types"}``.
  Without ``signals``, Signals come from the occurrences' ``signal`` ids
  (`matcher.signals_of`). `MatchResult` JSON is not an input.

Inputs are untrusted: anything else is a `UsageError` naming the file and the
field, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from eairdsl.errors import UsageError
from eairdsl.signals.matcher import MatchOccurrence, MatchResult, MatchSet, MatchSignal, match
from eairdsl.study.sqlite_file import is_sqlite

if TYPE_CHECKING:
    from eairdsl.signals.occurrences import Occurrence

__all__ = ["MAX_JSON", "Side", "from_occurrences", "load_side", "match_paths"]

#: a JSON input larger than this is refused (untrusted input)
MAX_JSON = 64 * 1024 * 1024


@dataclass
class Side:
    """One side of a comparison and what reading it noticed."""

    kind: str
    matchset: MatchSet
    notes: list[str] = field(default_factory=list)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Component(_Strict):
    type: str
    name: str


class _JsonOccurrence(_Strict):
    session: str = Field(min_length=1)
    component: _Component
    types: list[str] = Field(default_factory=list, max_length=3)
    signal: str | None = None
    id: str = ""


class _JsonSignal(_Strict):
    id: str = Field(min_length=1)
    batch: str = ""
    component: _Component
    types: list[str] = Field(default_factory=list, max_length=3)


class _JsonSet(_Strict):
    occurrences: list[_JsonOccurrence] = Field(default_factory=list)
    signals: list[_JsonSignal] = Field(default_factory=list)


def _json_side(path: Path) -> Side:
    try:
        if path.stat().st_size > MAX_JSON:
            raise UsageError(f"{path}: larger than {MAX_JSON // (1024 * 1024)} MiB")
        data: Any = json.loads(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON ({exc})") from None
    if isinstance(data, list):
        data = {"occurrences": data}
    try:
        parsed = _JsonSet.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the top level"
        raise UsageError(f"{path}: {where}: {err['msg']} (expected occurrences of "
                         "session, component {type, name}, types, signal, id)") from None
    try:
        occ = tuple(MatchOccurrence(session=o.session, component_type=o.component.type,
                                    component_name=o.component.name, types=tuple(o.types),
                                    signal=o.signal, id=o.id) for o in parsed.occurrences)
        sig = tuple(MatchSignal(id=s.id, batch=s.batch, component_type=s.component.type,
                                component_name=s.component.name, types=tuple(s.types))
                    for s in parsed.signals)
    except ValidationError as exc:
        raise UsageError(f"{path}: {exc.errors()[0]['msg']}") from None
    return Side("json", MatchSet(occurrences=occ, signals=sig))


def _wanted(leads: bool) -> set[str]:
    return {"supported", "insufficient_evidence"} if leads else {"supported"}


def from_occurrences(occurrences: Iterable[Occurrence], signal: Callable[[Occurrence], str],
                     *, leads: bool = False) -> tuple[list[MatchOccurrence], int]:
    """The matcher's view of `occurrences.Occurrence`s, and how many were left out.

    Only ``supported`` ones enter (with `leads`, ``insufficient_evidence`` too);
    `signal` names the Signal of each. The label is ``<episode>/<finding id>``.
    """
    wanted = _wanted(leads)
    out, skipped = [], 0
    for o in occurrences:
        if o.status not in wanted:
            skipped += 1
            continue
        out.append(MatchOccurrence(
            session=o.session, component_type=o.component_type,
            component_name=o.component_name, types=tuple(o.types[:3]), signal=signal(o),
            id=f"{o.episode}/{o.finding_id}"))
    return out, skipped


def _left_out(skipped: int, leads: bool) -> list[str]:
    what = " or ".join(sorted(_wanted(leads)))
    return [f"{skipped} occurrence(s) not {what} left out"] if skipped else []


def _audit_side(path: Path, leads: bool) -> Side:
    from eairdsl.signals.grouping import fingerprint, fingerprint_inputs
    from eairdsl.signals.occurrences import read_audit
    from eairdsl.taxonomy import load_taxonomy

    read = read_audit(path, {t.id for t in load_taxonomy().types})
    occ, skipped = from_occurrences(read.occurrences,
                                    lambda o: fingerprint(fingerprint_inputs(o)), leads=leads)
    return Side("audit", MatchSet(occurrences=tuple(occ)),
                list(read.problems) + _left_out(skipped, leads))


def _named(sid: str) -> Callable[[Occurrence], str]:
    def signal(_o: Occurrence) -> str:
        return sid
    return signal


def _store_side(path: Path, leads: bool) -> Side:
    """A Signals store: its Signals (merged ones folded into their targets), one batch."""
    from eairdsl.signals.store import SignalsStore

    occ: list[MatchOccurrence] = []
    skipped = 0
    with SignalsStore.open(path, create=False) as store:
        for sid in store.signal_ids():
            got, n = from_occurrences((o for o, _ in store.occurrences(sid)),
                                      _named(sid), leads=leads)
            occ.extend(got)
            skipped += n
    return Side("store", MatchSet(occurrences=tuple(occ)), _left_out(skipped, leads))


def load_side(path: Path, *, leads: bool = False) -> Side:
    """Read one side of a comparison (see the module docstring for the kinds)."""
    path = Path(path)
    if path.is_dir():
        from eairdsl.audit.folder import AuditFolder

        if AuditFolder(path).is_audit():
            return _audit_side(path, leads)
        from eairdsl.signals.occurrences import audit_dirs

        found = audit_dirs(path)
        if len(found) == 1:
            return _audit_side(found[0], leads)
        if found:
            names = ", ".join(str(p) for p in found[:6])
            raise UsageError(f"{path} holds {len(found)} audits ({names}); name one")
        raise UsageError(f"{path} is neither an audit folder (index.json and reports/) nor "
                         "a study folder with one audit")
    if path.is_file():
        return _store_side(path, leads) if is_sqlite(path) else _json_side(path)
    raise UsageError(f"{path}: no such file or folder")


def match_paths(pred: Path, ref: Path, *, leads: bool = False
                ) -> tuple[MatchResult, Side, Side]:
    """Read both sides and match them; the sides come back for their notes."""
    p, r = load_side(pred, leads=leads), load_side(ref, leads=leads)
    return match(p.matchset, r.matchset), p, r
