"""The deterministic matcher of the Signals paper (§6.1): predictions against references.

Code, not a model judge, decides every match. A predicted occurrence may match a
reference occurrence only when both

- belong to the same session,
- have the same *known* component type (an empty or ``unknown`` type never matches),
- have the same normalised component name (`normalise_name`: Unicode NFKC, camelCase
  boundaries, case folding, separators), and
- share at least one problem-type id among their (at most three) ranked types.

Among the pairs so allowed we take a *maximum* one-to-one matching, so each
prediction and each reference earns credit at most once, and a greedy first-come
pairing can never cost a match (`maximum_matching`). Unmatched predictions and
references stay in the denominators of precision and recall. Descriptions,
evidence overlap, severity and remediation do not enter the matcher.

At Signal level there are two checks, as in the paper: *coverage* — the fraction
of reference Signals with at least one matched occurrence, and with at least half
of their occurrences matched (the matches may sit in several predicted Signals) —
and a separate *Signal-to-Signal* matching within one evaluation batch on the same
component type, normalised name and a shared type id, again maximum one-to-one,
without occurrence ids, counts or membership overlap. A session-level check
(a prediction anywhere in a session that has a reference) is reported as well.

The matcher works over its own small models (`MatchOccurrence`, `MatchSignal`,
`MatchSet`) so any source can feed it: audit folders, a Signals store, JSON files
(`eairdsl.signals.match_inputs`). Everything is sorted into a canonical order
first, so the result — and `result_json`'s bytes — do not depend on input order.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["MATCHER_VERSION", "Coverage", "MatchOccurrence", "MatchResult", "MatchSet",
           "MatchSignal", "Pair", "Rates", "SignalPair", "match", "maximum_matching",
           "normalise_name", "rates", "result_json", "signals_of", "summary_lines"]

#: bumped whenever a rule of the matcher changes (it is written into every result)
MATCHER_VERSION = "signals-matcher-1"

#: component types that are not "known" (§6.1: "the same known component type")
UNKNOWN_TYPES = frozenset({"", "unknown", "none", "other"})

_SEPARATORS = re.compile(r"[\W_]+")


def normalise_name(name: str) -> str:
    """A component name reduced to its words: `IssueCredit`, `issue-credit` → ``issue_credit``.

    Unicode NFKC first (full-width and compatibility forms fold to plain ones), then a
    word boundary at each camelCase step (``aB`` and ``ABc`` → ``a B``, ``A Bc``; digits
    count as lower case, so ``v2Api`` → ``v2 api``), then case folding, then every run of
    separators (anything that is not a letter or digit, underscores included) becomes one
    ``_``, with none at either end. Letters and digits are not split from each other.
    """
    text = unicodedata.normalize("NFKC", name)
    out: list[str] = []
    for i, ch in enumerate(text):
        if i and ch.isupper():
            prev = text[i - 1]
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if prev.islower() or prev.isdigit() or (prev.isupper() and nxt.islower()):
                out.append(" ")
        out.append(ch)
    folded = unicodedata.normalize("NFKC", "".join(out).casefold())
    return "_".join(w for w in _SEPARATORS.split(folded) if w)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _types(value: Sequence[str]) -> tuple[str, ...]:
    ranked = tuple(value)
    if len(ranked) > 3:
        raise ValueError(f"at most three ranked types, not {len(ranked)}")
    if any(not t for t in ranked):
        raise ValueError("a type id is a non-empty string")
    return ranked


class MatchOccurrence(_Model):
    """One occurrence as the matcher sees it: where, on what, which types, in which Signal."""

    #: the session (one execution); for audits, the trace it was made from
    session: str = Field(min_length=1)
    component_type: str
    component_name: str
    #: ranked problem-type ids, most likely first (at most three)
    types: tuple[str, ...] = ()
    #: the Signal it belongs to, if it has been grouped
    signal: str | None = None
    #: a label for the output (e.g. episode/finding id); not used for matching
    id: str = ""

    @field_validator("types", mode="before")
    @classmethod
    def _ranked(cls, value: Sequence[str]) -> tuple[str, ...]:
        return _types(value)


class MatchSignal(_Model):
    """One Signal as the matcher sees it: its batch, component and type tags."""

    id: str = Field(min_length=1)
    #: the evaluation batch; Signals match only within one batch
    batch: str = ""
    component_type: str
    component_name: str
    types: tuple[str, ...] = ()

    @field_validator("types", mode="before")
    @classmethod
    def _ranked(cls, value: Sequence[str]) -> tuple[str, ...]:
        return _types(value)


class MatchSet(_Model):
    """One side of a comparison: occurrences and the Signals they are grouped into."""

    occurrences: tuple[MatchOccurrence, ...] = ()
    signals: tuple[MatchSignal, ...] = ()


def _known(component_type: str) -> bool:
    return component_type.strip().casefold() not in UNKNOWN_TYPES


def _occ_key(o: MatchOccurrence) -> tuple[str, str, str, str, tuple[str, ...], str, str]:
    return (o.session, o.component_type, normalise_name(o.component_name), o.component_name,
            o.types, o.signal or "", o.id)


def _sig_key(s: MatchSignal) -> tuple[str, str, str, str, tuple[str, ...], str]:
    return (s.batch, s.component_type, normalise_name(s.component_name), s.component_name,
            s.types, s.id)


def signals_of(occurrences: Sequence[MatchOccurrence], batch: str = "") -> list[MatchSignal]:
    """Signals implied by the occurrences' `signal` ids, for a side that lists none.

    A Signal takes the component most of its occurrences name (ties: the smaller
    (type, name)), and up to three type ids ordered by the best rank they reach in any
    occurrence, then by how many occurrences name them, then by id.
    """
    members: dict[str, list[MatchOccurrence]] = {}
    for o in occurrences:
        if o.signal is not None:
            members.setdefault(o.signal, []).append(o)
    out = []
    for sid in sorted(members):
        occ = members[sid]
        comps = Counter((o.component_type, o.component_name) for o in occ)
        ctype, cname = min(comps, key=lambda c: (-comps[c], c))
        best: dict[str, int] = {}
        count: Counter[str] = Counter()
        for o in occ:
            for rank, t in enumerate(o.types):
                best[t] = min(best.get(t, rank), rank)
                count[t] += 1
        ranked = sorted(best, key=lambda t: (best[t], -count[t], t))[:3]
        out.append(MatchSignal(id=sid, batch=batch, component_type=ctype,
                               component_name=cname, types=tuple(ranked)))
    return out


# -- maximum one-to-one matching with a canonical tie-break ---------------------------

def _flip(parent: dict[int, int], end: int, left_of: list[int], right_of: list[int]) -> None:
    """Swap matched and unmatched edges along the path from a free left root to `end`."""
    j = end
    while j >= 0:
        i = parent[j]
        prev = right_of[i]
        right_of[i], left_of[j] = j, i
        j = prev


def _augment(adj: Sequence[Sequence[int]], left_of: list[int], right_of: list[int],
             alive_left: Sequence[bool], alive_right: Sequence[bool]) -> bool:
    """One shortest augmenting path over the live vertices (BFS from every free left one)."""
    parent: dict[int, int] = {}          # right vertex -> left vertex that reached it
    queue = deque(i for i in range(len(adj)) if alive_left[i] and right_of[i] < 0)
    seen_left = set(queue)
    while queue:
        i = queue.popleft()
        for j in adj[i]:
            if not alive_right[j] or j in parent:
                continue
            parent[j] = i
            mate = left_of[j]
            if mate < 0:                  # free right vertex: flip the path back to a root
                _flip(parent, j, left_of, right_of)
                return True
            if mate not in seen_left and alive_left[mate]:
                seen_left.add(mate)
                queue.append(mate)
    return False


def maximum_matching(adj: Sequence[Sequence[int]], n_right: int) -> list[tuple[int, int]]:
    """The canonical maximum matching of a bipartite graph, as sorted (left, right) pairs.

    `adj[i]` lists the right vertices left vertex `i` may pair with. Of all matchings of
    maximum cardinality this returns the one that, taking left vertices in index order,
    gives each the smallest right index it can have, given the choices before it, while a
    maximum matching remains possible — left unmatched only when no right vertex allows
    that (being matched counts as earlier than any index; so it is the lexicographically
    smallest vector of right indices by left vertex). The answer is a function of the
    graph alone, not of the search order.

    How: augmenting paths (Berge) give a maximum matching M. Then each left vertex i in
    turn is fixed to its smallest feasible right vertex j: if (i, j) is in M, or one of
    i, j is free in M, swapping it in keeps |M|; if both are matched elsewhere, dropping
    both pairs and adding (i, j) loses one, and a single augmenting path over the
    vertices not yet fixed restores it exactly when some maximum matching extends the
    fixed pairs. Fixed vertices leave the graph.
    """
    nl = len(adj)
    adj = [sorted(set(a)) for a in adj]
    left_of = [-1] * n_right
    right_of = [-1] * nl
    alive_l, alive_r = [True] * nl, [True] * n_right
    for i in range(nl):                   # a greedy start; augmenting paths make it maximum
        for j in adj[i]:
            if left_of[j] < 0:
                right_of[i], left_of[j] = j, i
                break
    while _augment(adj, left_of, right_of, alive_l, alive_r):
        pass
    for i in range(nl):
        chosen = -1
        for j in adj[i]:
            if not alive_r[j]:
                continue
            mi, mj = right_of[i], left_of[j]
            if mi == j or mi < 0 or mj < 0:
                if mi >= 0 and mi != j:
                    left_of[mi] = -1
                if mj >= 0 and mj != i:
                    right_of[mj] = -1
                right_of[i], left_of[j] = j, i
                chosen = j
                break
            # both matched elsewhere: try (i, j) and one augmentation of the rest
            saved = (list(left_of), list(right_of))
            left_of[mi], right_of[mj] = -1, -1
            right_of[i], left_of[j] = j, i
            alive_l[i], alive_r[j] = False, False
            if _augment(adj, left_of, right_of, alive_l, alive_r):
                chosen = j
                break
            alive_l[i], alive_r[j] = True, True
            left_of, right_of = saved
        if chosen < 0 and right_of[i] >= 0:   # cannot happen: M's own pair is feasible
            raise AssertionError("canonical matching lost its invariant")
        alive_l[i] = False
        if chosen >= 0:
            alive_r[chosen] = False
    return [(i, right_of[i]) for i in range(nl) if right_of[i] >= 0]


# -- metrics ---------------------------------------------------------------------------

class Rates(_Model):
    """Counts and the rates they give; a rate with an empty denominator is None."""

    predicted: int
    reference: int
    matched: int
    precision: float | None
    recall: float | None
    f1: float | None


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def rates(matched: int, predicted: int, reference: int) -> Rates:
    """Precision = matched/predicted, recall = matched/reference, F1 their harmonic mean.

    Rates are exact fractions rounded to 6 decimals (so results are byte-stable). F1 is
    0 when both rates are 0, and None when either is undefined.
    """
    p, r = _ratio(matched, predicted), _ratio(matched, reference)
    f1 = None if p is None or r is None else (0.0 if p + r == 0 else 2 * p * r / (p + r))
    return Rates(predicted=predicted, reference=reference, matched=matched,
                 precision=_round(p), recall=_round(r), f1=_round(f1))


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


class Coverage(_Model):
    """How many reference Signals the matched occurrences reach."""

    reference_signals: int
    #: reference Signals with at least one matched occurrence
    at_least_one: int
    #: reference Signals with at least half of their occurrences matched (and at least one)
    at_least_half: int
    fraction_at_least_one: float | None
    fraction_at_least_half: float | None


class Pair(_Model):
    """One matched prediction/reference pair and the type ids they share."""

    pred: str
    ref: str
    session: str
    component_type: str
    component: str
    shared_types: tuple[str, ...]


class SignalPair(_Model):
    """One matched predicted/reference Signal pair and the type ids they share."""

    pred: str
    ref: str
    batch: str
    component_type: str
    component: str
    shared_types: tuple[str, ...]


class MatchResult(_Model):
    """Everything `match` decides; `result_json` writes it byte-stably."""

    matcher: str = MATCHER_VERSION
    occurrences: Rates
    coverage: Coverage
    signals: Rates
    sessions: Rates
    pairs: tuple[Pair, ...]
    signal_pairs: tuple[SignalPair, ...]
    unmatched_pred: tuple[str, ...]
    unmatched_ref: tuple[str, ...]
    unmatched_pred_signals: tuple[str, ...]
    unmatched_ref_signals: tuple[str, ...]


def _label(o: MatchOccurrence) -> str:
    return o.id or f"{o.session}:{o.component_type}:{o.component_name}"


def _block(session: str, ctype: str, name: str) -> tuple[str, str, str] | None:
    return (session, ctype, normalise_name(name)) if _known(ctype) else None


def _pairs(preds: Sequence[Any], refs: Sequence[Any],
           block: Callable[[Any], tuple[str, str, str] | None]) -> list[tuple[int, int]]:
    """The canonical maximum matching of two canonically sorted lists, blocked by `block`.

    Pairs exist only inside a block (session or batch, component type, normalised
    name), so each block is matched on its own: the same answer as one matching of the
    whole graph (the canonical order restricted to a block is the block's order), in
    time that grows with the largest block rather than with the whole audit.
    """
    left: dict[tuple[str, str, str], list[int]] = {}
    right: dict[tuple[str, str, str], list[int]] = {}
    for i, p in enumerate(preds):
        b = block(p)
        if b is not None and p.types:
            left.setdefault(b, []).append(i)
    for j, r in enumerate(refs):
        b = block(r)
        if b is not None and r.types:
            right.setdefault(b, []).append(j)
    out: list[tuple[int, int]] = []
    for b in sorted(left.keys() & right.keys()):
        li, rj = left[b], right[b]
        adj = [[k for k, j in enumerate(rj) if set(preds[i].types) & set(refs[j].types)]
               for i in li]
        out.extend((li[a], rj[c]) for a, c in maximum_matching(adj, len(rj)))
    return sorted(out)


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(t for t in a if t in b)


def match(pred: MatchSet, ref: MatchSet) -> MatchResult:
    """Match predictions to references (§6.1) and compute every rate.

    A side without Signal records gets them from its occurrences' `signal` ids
    (`signals_of`, batch ""). Coverage counts a reference Signal's occurrences through
    their `signal` id; a Signal with no occurrences is never covered.
    """
    po = sorted(pred.occurrences, key=_occ_key)
    ro = sorted(ref.occurrences, key=_occ_key)
    occ_pairs = _pairs(po, ro, lambda o: _block(o.session, o.component_type,
                                                o.component_name))
    matched_ref = {j for _, j in occ_pairs}
    matched_pred = {i for i, _ in occ_pairs}

    ps = sorted(pred.signals or signals_of(po), key=_sig_key)
    rs = sorted(ref.signals or signals_of(ro), key=_sig_key)
    sig_pairs = _pairs(ps, rs, lambda s: _block(s.batch, s.component_type, s.component_name))

    total: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    for j, o in enumerate(ro):
        if o.signal is not None:
            total[o.signal] += 1
            hit[o.signal] += j in matched_ref
    ids = [s.id for s in rs]
    one = sum(hit[s] >= 1 for s in ids)
    half = sum(hit[s] >= 1 and 2 * hit[s] >= total[s] for s in ids)

    pred_sessions = {o.session for o in po}
    ref_sessions = {o.session for o in ro}
    return MatchResult(
        occurrences=rates(len(occ_pairs), len(po), len(ro)),
        coverage=Coverage(reference_signals=len(ids), at_least_one=one, at_least_half=half,
                          fraction_at_least_one=_round(_ratio(one, len(ids))),
                          fraction_at_least_half=_round(_ratio(half, len(ids)))),
        signals=rates(len(sig_pairs), len(ps), len(rs)),
        sessions=rates(len(pred_sessions & ref_sessions), len(pred_sessions),
                       len(ref_sessions)),
        pairs=tuple(Pair(pred=_label(po[i]), ref=_label(ro[j]), session=po[i].session,
                         component_type=po[i].component_type,
                         component=normalise_name(po[i].component_name),
                         shared_types=_shared(po[i].types, ro[j].types))
                    for i, j in occ_pairs),
        signal_pairs=tuple(SignalPair(pred=ps[i].id, ref=rs[j].id, batch=ps[i].batch,
                                      component_type=ps[i].component_type,
                                      component=normalise_name(ps[i].component_name),
                                      shared_types=_shared(ps[i].types, rs[j].types))
                           for i, j in sig_pairs),
        unmatched_pred=tuple(_label(o) for i, o in enumerate(po) if i not in matched_pred),
        unmatched_ref=tuple(_label(o) for j, o in enumerate(ro) if j not in matched_ref),
        unmatched_pred_signals=tuple(ps[i].id for i in sorted(
            set(range(len(ps))) - {i for i, _ in sig_pairs})),
        unmatched_ref_signals=tuple(rs[j].id for j in sorted(
            set(range(len(rs))) - {j for _, j in sig_pairs})),
    )


def result_json(result: MatchResult) -> str:
    """The result as JSON with sorted keys and two-space indent, ending in a newline."""
    return json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True,
                      ensure_ascii=False) + "\n"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _rate_line(what: str, r: Rates) -> str:
    return (f"{what}: precision {_pct(r.precision)}, recall {_pct(r.recall)}, "
            f"F1 {_pct(r.f1)} ({r.matched} matched of {r.predicted} predicted, "
            f"{r.reference} reference)")


def summary_lines(result: MatchResult) -> list[str]:
    """The result in four lines of text (what `eairc signals match` prints)."""
    c = result.coverage
    return [
        _rate_line("occurrences", result.occurrences),
        f"signal coverage: {c.at_least_one}/{c.reference_signals} reference Signals with at "
        f"least one matched occurrence ({_pct(c.fraction_at_least_one)}), "
        f"{c.at_least_half}/{c.reference_signals} with at least half "
        f"({_pct(c.fraction_at_least_half)})",
        _rate_line("signals", result.signals),
        _rate_line("sessions", result.sessions),
    ]
