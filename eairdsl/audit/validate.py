"""The strict validator of report contract v1: every citation resolves, or it is rejected.

EAIR §4 validates each finding mechanically before any substantive review:
schema validity, and citation resolvability — each evidence unit names a
recorded step, the step's edge and a verbatim quote of one of its fields
(F.15). Public tools are lenient exactly here (they drop unresolvable ids,
fuzzy-match quotes, search neighbouring messages); this one is not:

- a quote is compared with `evidence.field_text(step, field)` after
  `evidence.normalize` only (Unicode NFC, whitespace runs) — no fuzzy matching,
  no other field, no other step;
- an unknown step is rejected and counted, never dropped, downgraded to a lead
  or moved to a step that would resolve;
- `--suggest` may name where a quote does occur verbatim, as a hint: the
  citation stays rejected.

Every problem is a `ReportDiagnostic` with a V8xx code (docs/errors.md), the
JSON path of the offending value, its file:line:col when the report was read
from JSON text, and the finding and evidence unit it belongs to. The result
also carries the paper's two rates: resolvable findings k/n (Table 3's 80/81)
and resolvable evidence units k/n.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from eairdsl.audit.contract import (
    EAIR_TAXONOMY_VERSION,
    SIGNALS_TAXONOMY_VERSION,
    EvidenceUnit,
    Finding,
    Report,
)
from eairdsl.audit.evidence import (
    Bundle,
    ToolCard,
    edge_ref,
    field_names,
    field_text,
    normalize,
    sha256_file,
)
from eairdsl.audit.jsonpos import (
    JsonPath,
    JsonSyntaxError,
    Positions,
    format_path,
    parse_fast,
)
from eairdsl.diagnostics import Diagnostic, Severity, did_you_mean
from eairdsl.ir import World
from eairdsl.runtime.trace import TraceEvent
from eairdsl.source import SourceError, Span, display_name, read_bounded
from eairdsl.taxonomy import Taxonomy, load_taxonomy
from eairdsl.vocabulary import RISKS

__all__ = ["CODES", "MIN_QUOTE", "MAX_REPORT_BYTES", "Declarations", "ReportDiagnostic",
           "ValidationResult", "validate_report"]

#: the shortest quote accepted, in characters after normalisation (or the whole field)
MIN_QUOTE = 8


def sharers(tools: list[ToolCard], name: str) -> set[str]:
    """Who shares a tool's action: the roles holding it, and the roles holding a tool that
    writes or shows a record it writes or shows (a record one role fills and another reads
    is shared state, docs/audit.md)."""
    card = next((t for t in tools if t.name == name), None)
    if card is None:
        return set()
    touched = set(card.writes) | set(card.reveals)
    roles = set(card.roles)
    for other in tools:
        if touched & (set(other.writes) | set(other.reveals)):
            roles |= set(other.roles)
    return roles

MAX_REPORT_BYTES = 8 * 1024 * 1024

#: code -> what it rejects (docs/errors.md, V8xx)
CODES: dict[str, str] = {
    "V801": "not JSON",
    "V802": "does not follow report contract v1",
    "V803": "report is about another bundle",
    "V804": "unknown step",
    "V805": "edge inconsistent with the step",
    "V806": "quote not verbatim in the named field",
    "V807": "quote too short",
    "V808": "quote from withheld material or a field the step does not have",
    "V809": "supported finding without evidence for R1, R2 and R3",
    "V810": "steps out of order",
    "V811": "boundary is not a cross-role step",
    "V812": "duplicate finding (merged)",
    "V813": "nature inconsistent with the effect",
    "V814": "plan requirement without a check",
    "V815": "plan surface names an unknown declaration",
    "V816": "plan surface names a protected declaration",
    "V817": "clean verdict without coverage",
    "V818": "verdict or status inconsistent with the findings",
    "V819": "names a policy or component the bundle does not have",
    "V820": "supported finding without a repair plan",
}
Section = Literal["findings", "leads", "out_of_catalogue"]
_NOT_A_FIX = "a hint, not a fix: the citation stays rejected"
#: `role assistant` and `actor requester` name a participant, `ledger payments` a record
_KIND_ALIASES = {"role": "participant", "actor": "participant", "simulator": "participant",
                 "table": "record", "ledger": "record"}
#: the kinds a plan surface may name before a declaration's name (`tool delegate`)
DECLARATION_KINDS = frozenset({
    "world", "condition", "lever", "record", "state", "document", "policy", "inducer", "tool",
    "measure", "participant", "let", "enum", "schema", "channel", "authorization",
    "instances"})
#: protected keywords that stand for a whole block (eairdsl/diff.py)
_BLOCKS = frozenset({"measure", "instances", "authorization"})


class ReportDiagnostic(BaseModel):
    """One problem of a report: the diagnostic and where in the report it is."""

    model_config = ConfigDict(frozen=True)

    diagnostic: Diagnostic
    #: the offending value's path, `findings[0].evidence[2].quote`
    path: str
    section: Section | None = None
    #: index into `section`, and the finding's id when it has one
    finding: int | None = None
    finding_id: str | None = None
    #: index into the finding's `evidence`
    unit: int | None = None

    @property
    def code(self) -> str:
        return self.diagnostic.code

    @property
    def is_error(self) -> bool:
        return self.diagnostic.is_error


class ValidationResult(BaseModel):
    """Diagnostics and the resolvability rates of one report against one bundle."""

    diagnostics: list[ReportDiagnostic]
    #: findings and leads (duplicates counted once) whose citations all resolve, of all
    findings_resolvable: int = 0
    findings_total: int = 0
    #: evidence units of findings and leads that resolve, of all
    units_resolvable: int = 0
    units_total: int = 0
    #: step references that name no step of the bundle (each also a V804)
    unknown_steps: int = 0
    #: (kept, merged) finding paths of duplicates
    merged: list[tuple[str, str]] = []
    #: whether the report followed the schema (else nothing further was checked)
    schema_valid: bool = False
    #: whether its citations were checked: schema-valid and about this bundle (V803);
    #: the rates mean something only then
    citations_checked: bool = False
    #: what plan surfaces were checked against: a world, or only the bundle's names
    surface_checked_against: Literal["world", "bundle"] = "bundle"

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


@dataclass
class Declarations:
    """The world's declarations a repair plan may name: name -> kinds, and what is protected.

    Built from a compiled world (`from_world`), or, without one, from what the
    bundle shows (`from_bundle`: participants, tools, policies, records,
    documents, the authorization matrix), where nothing is known to be protected.
    """

    kinds: dict[str, set[str]] = field(default_factory=dict)
    protected: set[tuple[str, str]] = field(default_factory=set)
    source: Literal["world", "bundle"] = "bundle"

    def add(self, kind: str, name: str) -> None:
        self.kinds.setdefault(name, set()).add(kind)

    @classmethod
    def from_world(cls, world: World) -> Declarations:
        from eairdsl.reads import declarations

        out = cls(source="world")
        protected = set(world.protected)
        for kind, name in declarations(world):
            out.add(kind, name)
            if name in protected or (kind in _BLOCKS and kind in protected):
                out.protected.add((kind, name))
        return out

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> Declarations:
        out = cls(source="bundle")
        for p in bundle.participants:
            out.add("participant", p.name)
        for t in bundle.tools:
            out.add("tool", t.name)
        for pol in bundle.policies:
            out.add("policy", pol.name)
        for r in bundle.records:
            out.add("record", r)
        for d in bundle.documents:
            out.add("document", d)
        out.add("authorization", "authorization")
        return out

    @classmethod
    def from_names(cls, names: Iterable[str], protected: Iterable[str] = ()) -> Declarations:
        """Bare names (any kind); `protected` names are protected whatever their kind."""
        out = cls(source="world")
        guarded = set(protected)
        for name in names:
            out.add("declaration", name)
            if name in guarded:
                out.protected.add(("declaration", name))
        return out

    def resolve(self, entry: str) -> list[tuple[str, str]]:
        """The (kind, name) pairs a plan surface entry names: `NAME` or `KIND NAME`."""
        head, _, rest = entry.strip().partition(" ")
        kind = _KIND_ALIASES.get(head, head)
        if rest and kind in DECLARATION_KINDS:
            name = rest.strip()
            kinds = self.kinds.get(name, set())
            if kind in kinds:
                return [(kind, name)]
            # names given without kinds (`from_names`) match a qualified entry by name
            return [("declaration", name)] if "declaration" in kinds else []
        name = entry.strip()
        return [(k, name) for k in sorted(self.kinds.get(name, set()))]


# ---------------------------------------------------------------- reading the input

def _read(report: str | Path | dict[str, Any]
          ) -> tuple[Any, Positions | None, str, list[ReportDiagnostic]]:
    """The report's data, positions when it is JSON text, the file name, syntax errors."""
    if isinstance(report, dict):
        return report, None, "<report>", []
    if isinstance(report, Path):
        name = display_name(report)
        try:
            raw = read_bounded(report, MAX_REPORT_BYTES, "report")
            text = raw.decode("utf-8")
        except SourceError as e:
            return None, None, name, [_syntax(e.message, Span.point(name, e.line, e.col))]
        except UnicodeDecodeError as e:
            return None, None, name, [_syntax(f"not UTF-8 text ({e.reason})",
                                              Span.point(name))]
        except OSError as e:
            return None, None, name, [_syntax(f"cannot read: {e.strerror or e}",
                                              Span.point(name))]
    else:
        name, text = "<report>", report
    try:
        value, positions = parse_fast(text, name)
    except JsonSyntaxError as e:
        return None, None, name, [_syntax(e.message, e.span)]
    return value, positions, name, []


def _syntax(message: str, span: Span) -> ReportDiagnostic:
    return ReportDiagnostic(diagnostic=Diagnostic(code="V801", message=message, span=span,
                                                  hint="a report is one JSON object"),
                            path="report")


# ---------------------------------------------------------------- the checker

@dataclass
class _Unit:
    resolvable: bool = True


class _Checker:
    def __init__(self, report: Report, bundle: Bundle, positions: Positions | None,
                 file: str, decls: Declarations, suggest: bool) -> None:
        self.report = report
        self.bundle = bundle
        self.positions = positions
        self.file = file
        self.decls = decls
        self.suggest = suggest
        self.order = {s.step: i for i, s in enumerate(bundle.steps)}
        self.out: list[ReportDiagnostic] = []
        self.unknown = 0
        self.callers: dict[str, set[str]] = {}
        for s in bundle.steps:
            if s.tool and s.kind in ("tool_call", "tool_result", "state_update"):
                self.callers.setdefault(s.tool, set()).add(s.actor)
        self.participants = {p.name for p in bundle.participants}
        self.reasons = {w.locator: w.reason for w in bundle.manifest.withheld}

    # -- emitting
    def emit(self, code: str, message: str, path: JsonPath, *, section: Section | None = None,
             finding: int | None = None, finding_id: str | None = None, unit: int | None = None,
             hint: str | None = None, severity: Severity = Severity.ERROR,
             key: bool = False) -> None:
        span = None
        if self.positions is not None:
            _, span = self.positions.locate(path, key=key)
        where = ""
        if section is not None and finding is not None:
            label = f"'{finding_id}' " if finding_id else ""
            kind = "candidate" if section == "out_of_catalogue" else "finding"
            where = f"{kind} {label}({section}[{finding}])"
            if unit is not None:
                where += f" evidence[{unit}]"
            where += ": "
        self.out.append(ReportDiagnostic(
            diagnostic=Diagnostic(code=code, severity=severity, message=where + message,
                                  span=span, hint=hint),
            path=format_path(path), section=section, finding=finding, finding_id=finding_id,
            unit=unit))

    # -- the report
    def run(self) -> tuple[int, int, int, int, list[tuple[str, str]]]:
        r = self.report
        ids: dict[str, JsonPath] = {}
        findings_ok: list[tuple[Finding, JsonPath, bool]] = []
        units_ok = units_total = 0
        sections: tuple[Section, ...] = ("findings", "leads")
        for section in sections:
            for i, f in enumerate(getattr(r, section)):
                base: JsonPath = (section, i)
                self.check_id(f.id, base, ids, section, i)
                resolved, units = self.check_finding(f, base, section, i)
                units_total += len(units)
                units_ok += sum(u.resolvable for u in units)
                findings_ok.append((f, base, resolved))
        for i, c in enumerate(r.out_of_catalogue):
            base = ("out_of_catalogue", i)
            self.check_id(c.id, base, ids, "out_of_catalogue", i)
            if c.property is not None and c.property.policy is not None:
                self.check_policy(c.property.policy, (*base, "property", "policy"),
                                  "out_of_catalogue", i, c.id)
            for k, u in enumerate(c.evidence):
                self.check_unit(u, (*base, "evidence", k), "out_of_catalogue", i, c.id, k)
        self.check_verdict()
        for k, step in enumerate(r.coverage.steps_read):
            self.check_step(step, ("coverage", "steps_read", k), None, None, None, None,
                            "coverage step")
        kept, merged = self.merge(findings_ok)
        return (sum(ok for ok in kept.values()), len(kept), units_ok, units_total, merged)

    def check_bundle_ref(self) -> None:
        ref = self.report.bundle
        manifest = self.bundle.root / "manifest.json"
        if ref.episode != self.bundle.manifest.episode:
            self.emit("V803", f"the report is about episode {ref.episode!r}; this bundle's "
                      f"manifest says {self.bundle.manifest.episode!r}", ("bundle", "episode"),
                      hint="audit reports are checked against the bundle they were written for")
        digest = sha256_file(manifest)
        if ref.manifest_sha256 != digest:
            self.emit("V803", f"manifest_sha256 differs from this bundle's manifest.json "
                      f"({digest})", ("bundle", "manifest_sha256"))

    def check_id(self, ident: str, base: JsonPath, ids: dict[str, JsonPath], section: Section,
                 i: int) -> None:
        if ident in ids:
            self.emit("V802", f"id {ident!r} is also the id of {format_path(ids[ident])}: "
                      "ids are unique in a report", (*base, "id"), section=section, finding=i,
                      finding_id=ident)
        else:
            ids[ident] = base

    def check_verdict(self) -> None:
        r = self.report
        wanted: tuple[tuple[Section, str], ...] = (("findings", "supported"), ("leads", "lead"))
        for section, want in wanted:
            for i, f in enumerate(getattr(r, section)):
                if f.status != want:
                    self.emit("V818", f"status is {f.status!r} but the finding is listed under "
                              f"{section}, which holds {want} findings",
                              (section, i, "status"), section=section, finding=i,
                              finding_id=f.id)
        if r.verdict == "findings" and not r.findings:
            self.emit("V818", "verdict 'findings' with no supported finding", ("verdict",),
                      hint="with leads only, the verdict is no_supported_problem or "
                      "insufficient_evidence")
        if r.verdict != "findings" and r.findings:
            self.emit("V818", f"verdict {r.verdict!r} but {len(r.findings)} supported "
                      "finding(s) are listed", ("verdict",))
        if r.verdict != "findings" and not r.coverage.steps_read:
            self.emit("V817", f"verdict {r.verdict!r} without coverage: steps_read is empty",
                      ("coverage", "steps_read"),
                      hint="a clean verdict must show what was inspected (the steps read, "
                      "the queries made)")

    # -- one finding
    def check_finding(self, f: Finding, base: JsonPath, section: Section, i: int
                      ) -> tuple[bool, list[_Unit]]:
        ctx = (section, i, f.id)
        resolved = True
        for t, rt in enumerate(f.types):
            want = EAIR_TAXONOMY_VERSION if rt.taxonomy == "eair" else SIGNALS_TAXONOMY_VERSION
            if rt.version != want:
                self.emit("V802", f"taxonomy {rt.taxonomy!r} is pinned as {want!r}, not "
                          f"{rt.version!r}", (*base, "types", t, "version"), section=section,
                          finding=i, finding_id=f.id)
            if rt.taxonomy == "eair" and rt.id not in RISKS:
                self.emit("V802", f"{rt.id!r} is not an EAIR risk id (A1…F2)",
                          (*base, "types", t, "id"), section=section, finding=i,
                          finding_id=f.id)
            elif rt.taxonomy == "signals" and not _signals_types().has_type(rt.id):
                self.emit("V802", f"{rt.id!r} is not a {SIGNALS_TAXONOMY_VERSION} problem "
                          "type id (docs/signals.md)", (*base, "types", t, "id"),
                          section=section, finding=i, finding_id=f.id,
                          hint=did_you_mean(rt.id, sorted(_signals_types().type_ids())))
        if f.property.policy is not None:
            self.check_policy(f.property.policy, (*base, "property", "policy"), *ctx)
        elif f.property.text is None:
            self.emit("V802", "property names neither a policy nor a text", (*base, "property"),
                      section=section, finding=i, finding_id=f.id)
        self.check_component(f, base, *ctx)
        # R1: the boundary
        b = f.boundary
        step = self.check_step(b.step, (*base, "boundary", "step"), *ctx, None, "boundary step")
        resolved &= step is not None
        if step is not None:
            actual = edge_ref(step)
            if b.edge != actual:
                resolved = False
                self.emit("V805", f"boundary edge {b.edge!r} is not the edge of step {b.step} "
                          f"({_edge_words(actual)})", (*base, "boundary", "edge"), section=section,
                          finding=i, finding_id=f.id)
            if not self.cross_role(step):
                self.emit("V811", f"boundary step {b.step} is a {step.kind} "
                          f"({_edge_words(actual)}), not a cross-role step",
                          (*base, "boundary", "step"),
                          section=section, finding=i, finding_id=f.id,
                          hint="a boundary is a message between two participants, or an "
                          "action on a tool or record that two or more participants share")
        # R2–R3: the path
        steps: list[tuple[JsonPath, str]] = [((*base, "first_anomaly"), f.first_anomaly)]
        steps += [((*base, "path", k), s) for k, s in enumerate(f.path)]
        if f.effect.step is not None:
            steps.append(((*base, "effect", "step"), f.effect.step))
        if f.resolved_later is not None:
            steps.append(((*base, "resolved_later"), f.resolved_later))
        for path, s in steps:
            resolved &= self.check_step(s, path, *ctx, None, "step") is not None
        self.check_order(f, base, *ctx)
        # R4: the evidence
        units = [self.check_unit(u, (*base, "evidence", k), *ctx, k)
                 for k, u in enumerate(f.evidence)]
        resolved &= bool(units) and all(u.resolvable for u in units)
        if f.status == "supported":
            covered = {c for u in f.evidence for c in u.supports}
            missing = [c for c in ("R1", "R2", "R3") if c not in covered]
            if missing:
                self.emit("V809", f"supported, but no evidence unit supports "
                          f"{', '.join(missing)}", (*base, "evidence"), section=section,
                          finding=i, finding_id=f.id,
                          hint="cite a step for each of R1, R2 and R3, or file it as a lead "
                          "(EAIR B.1)")
        self.check_nature(f, base, *ctx)
        self.check_plan(f, base, *ctx)
        return resolved, units

    def check_step(self, step_id: str, path: JsonPath, section: Section | None,
                   i: int | None, fid: str | None, unit: int | None, what: str,
                   quote: str | None = None) -> TraceEvent | None:
        step = self.bundle.by_step.get(step_id)
        if step is not None:
            return step
        self.unknown += 1
        hint = None
        if self.suggest:
            found = self.where_quoted(quote) if quote else []
            if found:
                hint = f"the quote occurs verbatim in {', '.join(found[:3])} ({_NOT_A_FIX})"
            else:
                close = difflib.get_close_matches(step_id, list(self.order), n=1, cutoff=0.6)
                hint = f"the nearest step id is {close[0]} ({_NOT_A_FIX})" if close else None
        self.emit("V804", f"{what} {step_id!r} is not a step of this bundle "
                  f"({len(self.order)} steps, {_range(self.bundle)})", path, section=section,
                  finding=i, finding_id=fid, unit=unit, hint=hint)
        return None

    def cross_role(self, step: TraceEvent) -> bool:
        """A message between two participants, or an action on a tool, or on the records it
        writes or shows, that two or more share (`sharers`)."""
        match step.kind:
            case "message":
                return step.recipient is not None and step.actor != step.recipient
            case "tool_call" | "tool_result" | "state_update":
                if step.tool is None:
                    return False
                roles = sharers(self.bundle.tools, step.tool)
                return len(roles | self.callers.get(step.tool, set())) >= 2
            case _:
                return False

    def check_unit(self, u: EvidenceUnit, path: JsonPath, section: Section, i: int,
                   fid: str, k: int) -> _Unit:
        out = _Unit()
        where = (section, i, fid, k)
        step = self.check_step(u.step, (*path, "step"), *where, "evidence step", u.quote)
        if step is None:
            out.resolvable = False
            return out
        actual = edge_ref(step)
        if u.edge != actual:
            out.resolvable = False
            self.emit("V805", f"edge {u.edge!r} is not the edge of step {u.step} "
                      f"({_edge_words(actual)})", (*path, "edge"), section=section, finding=i,
                      finding_id=fid, unit=k)
        # A withheld locator scoped to the step (`s0007.result.rating`) always counts; a bare
        # one (`result`: the trace's result line) only when the step has no such field.
        withheld = self.withheld_locator(f"{u.step}.{u.field}")
        text = None if withheld else field_text(step, u.field)
        if text is None and not withheld:
            withheld = self.withheld_locator(u.field)
        if withheld or text is None:
            out.resolvable = False
            why = (f"field {u.field!r} is withheld from the bundle"
                   + ("" if withheld == u.field else f" (under {withheld!r})")
                   + f": {self.reasons.get(withheld, 'see the manifest')}" if withheld
                   else f"step {u.step} has no field {u.field!r} (it has "
                   f"{', '.join(field_names(step))})")
            self.emit("V808", why, (*path, "field"), section=section, finding=i,
                      finding_id=fid, unit=k,
                      hint="a quote comes from a field of the cited step as the bundle shows it")
            return out
        quote, body = normalize(u.quote), normalize(text)
        if quote and quote not in body:
            out.resolvable = False
            hint = None
            if self.suggest:
                found = [w for w in self.where_quoted(u.quote) if w != f"{u.step}.{u.field}"]
                hint = (f"the quote occurs verbatim in {', '.join(found[:3])} ({_NOT_A_FIX})"
                        if found else "the quote occurs verbatim in no field of any step")
            self.emit("V806", f"quote is not verbatim in {u.step}.{u.field} (compared after "
                      "Unicode NFC and whitespace normalisation only)", (*path, "quote"),
                      section=section, finding=i, finding_id=fid, unit=k, hint=hint)
        elif len(quote) < MIN_QUOTE and quote != body:
            out.resolvable = False
            self.emit("V807", f"quote has {len(quote)} character(s): at least {MIN_QUOTE}, or "
                      f"the whole field, are needed to pin a citation", (*path, "quote"),
                      section=section, finding=i, finding_id=fid, unit=k)
        return out

    def withheld_locator(self, name: str) -> str | None:
        """The withheld locator `name` is, or lies under (`header.levers.trust`)."""
        for loc in sorted(self.bundle.withheld):
            if name == loc or name.startswith(loc + "."):
                return loc
        return None

    def where_quoted(self, quote: str) -> list[str]:
        """Every `step.field` whose text holds the quote verbatim (for --suggest only)."""
        want = normalize(quote)
        if len(want) < MIN_QUOTE:
            return []
        return [f"{s.step}.{name}" for s in self.bundle.steps for name in field_names(s)
                if want in normalize(field_text(s, name) or "")]

    def check_order(self, f: Finding, base: JsonPath, section: Section, i: int,
                    fid: str) -> None:
        def at(step: str | None) -> int | None:
            return None if step is None else self.order.get(step)

        chain: list[tuple[JsonPath, str, int | None]] = [
            ((*base, "first_anomaly"), f.first_anomaly, at(f.first_anomaly))]
        chain += [((*base, "path", k), s, at(s)) for k, s in enumerate(f.path)]
        if f.effect.step is not None:
            chain.append(((*base, "effect", "step"), f.effect.step, at(f.effect.step)))
        known = [(p, s, n) for p, s, n in chain if n is not None]
        for (p0, s0, n0), (p1, s1, n1) in itertools.pairwise(known):
            assert n0 is not None and n1 is not None
            repeated = n1 == n0 and p0[-2:-1] == p1[-2:-1] == ("path",)
            if n1 < n0 or repeated:
                self.emit("V810", f"{s1} comes before {s0} in the trace: the first anomaly, "
                          "the path and the effect are in trace order", p1, section=section,
                          finding=i, finding_id=fid)
        first, later = at(f.first_anomaly), at(f.resolved_later)
        if first is not None and later is not None and later <= first:
            self.emit("V810", f"resolved_later {f.resolved_later} is not after the first "
                      f"anomaly {f.first_anomaly}", (*base, "resolved_later"),
                      section=section, finding=i, finding_id=fid)

    def check_nature(self, f: Finding, base: JsonPath, section: Section, i: int,
                     fid: str) -> None:
        if f.nature == "risk_exposure" and f.effect.step is not None:
            self.emit("V813", f"a risk exposure has no material-effect step, but effect.step "
                      f"is {f.effect.step}", (*base, "effect", "step"), section=section,
                      finding=i, finding_id=fid,
                      hint="a violation that happened is a realized_defect")
        if f.nature == "realized_defect" and f.effect.step is None:
            self.emit("V813", "a realized defect names the step of its material effect; "
                      "effect.step is missing", (*base, "effect"), section=section, finding=i,
                      finding_id=fid, hint="without an effect step it is a risk_exposure")

    def check_plan(self, f: Finding, base: JsonPath, section: Section, i: int,
                   fid: str) -> None:
        plan = f.repair_plan
        if plan is None:
            if f.status == "supported":
                self.emit("V820", "a supported finding carries a repair plan (ρ)", base,
                          section=section, finding=i, finding_id=fid)
            return
        seen: set[str] = set()
        for k, req in enumerate(plan.requirements):
            path = (*base, "repair_plan", "requirements", k)
            if req.id in seen:
                self.emit("V802", f"requirement id {req.id!r} repeated", (*path, "id"),
                          section=section, finding=i, finding_id=fid)
            seen.add(req.id)
            if req.check is None or not req.check.strip():
                self.emit("V814", f"requirement {req.id!r} has no check", path,
                          section=section, finding=i, finding_id=fid,
                          hint="say how a retest or review decides the requirement is met")
        for k, entry in enumerate(plan.may_change):
            path = (*base, "repair_plan", "may_change", k)
            refs = self.decls.resolve(entry)
            if not refs:
                against = ("the world" if self.decls.source == "world"
                           else "what the bundle shows (no --world given)")
                close = difflib.get_close_matches(entry, sorted(self.decls.kinds), n=1)
                self.emit("V815", f"repair surface {entry!r} names no declaration of "
                          f"{against}", path, section=section, finding=i, finding_id=fid,
                          hint=f"did you mean '{close[0]}'?" if close else None)
                continue
            guarded = [r for r in refs if r in self.decls.protected]
            if guarded:
                self.emit("V816", f"repair surface {entry!r} is protected "
                          f"({', '.join(f'{k} {n}' for k, n in guarded)}): a repair may not "
                          "change it", path, section=section, finding=i, finding_id=fid)

    def check_policy(self, name: str, path: JsonPath, section: Section, i: int,
                     fid: str) -> None:
        names = {p.name for p in self.bundle.policies}
        if name not in names:
            self.emit("V819", f"policy {name!r} is not in the bundle's policies.json "
                      f"({', '.join(sorted(names)) or 'it has none'})", path, section=section,
                      finding=i, finding_id=fid)

    def check_component(self, f: Finding, base: JsonPath, section: Section, i: int,
                        fid: str) -> None:
        c = f.component
        b = self.bundle
        known: set[str]
        match c.type:
            case "participant":
                known = self.participants
            case "tool":
                known = {t.name for t in b.tools} | set(self.callers)
            case "policy":
                known = {p.name for p in b.policies}
            case "record":
                known = set(b.records)
            case "document":
                known = set(b.documents)
            case "channel":
                known = {e for s in b.steps if (e := edge_ref(s)) is not None}
        if c.name not in known:
            self.emit("V819", f"{c.type} {c.name!r} is not in the bundle",
                      (*base, "component", "name"), section=section, finding=i, finding_id=fid)

    def merge(self, findings: list[tuple[Finding, JsonPath, bool]]
              ) -> tuple[dict[JsonPath, bool], list[tuple[str, str]]]:
        """Duplicates (same property, boundary edge and effect step) become one finding."""
        kept: dict[JsonPath, bool] = {}
        first: dict[tuple[str, str, str | None], JsonPath] = {}
        merged: list[tuple[str, str]] = []
        for f, path, ok in findings:
            prop = f.property.policy or normalize(f.property.text or "")
            key = (prop, f.boundary.edge, f.effect.step)
            if key in first:
                keep = first[key]
                kept[keep] = kept[keep] and ok
                merged.append((format_path(keep), format_path(path)))
                section = _section(path)
                assert isinstance(path[1], int)
                self.emit("V812", f"same property, boundary edge {f.boundary.edge} and effect "
                          f"step {f.effect.step} as {format_path(keep)}: merged into it",
                          path, section=section, finding=path[1], finding_id=f.id,
                          severity=Severity.WARNING)
                continue
            first[key] = path
            kept[path] = ok
        return kept, merged


def _signals_types() -> Taxonomy:
    """The Signals catalogue (package data, read once on first use)."""
    return load_taxonomy()


def _edge_words(edge: str | None) -> str:
    return f"its edge is {edge}" if edge else "it has no edge"


def _range(bundle: Bundle) -> str:
    if not bundle.steps:
        return "none"
    return f"{bundle.steps[0].step}…{bundle.steps[-1].step}"


def _schema_errors(err: ValidationError, positions: Positions | None
                   ) -> list[ReportDiagnostic]:
    out = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if isinstance(p, (str, int)))
        path: JsonPath = loc
        span = None
        if positions is not None:
            found, span = positions.locate(loc, key=e["type"] == "extra_forbidden")
            if e["type"] != "missing":
                path = found
        message = e["msg"]
        if e["type"] == "extra_forbidden":
            message = f"{loc[-1]!r} is not a field of contract v1 (extra fields are forbidden)"
        elif e["type"] == "missing":
            message = f"{loc[-1]!r} is required"
        out.append(ReportDiagnostic(
            diagnostic=Diagnostic(code="V802", message=f"{format_path(loc)}: {message}",
                                  span=span, hint="docs/audit-report.schema.json"),
            path=format_path(path), section=_section(loc), finding=_index(loc)))
    return out


def _section(loc: JsonPath) -> Section | None:
    head = loc[0] if loc else None
    return head if head in ("findings", "leads", "out_of_catalogue") else None  # type: ignore[return-value]


def _index(loc: JsonPath) -> int | None:
    return loc[1] if len(loc) > 1 and _section(loc) and isinstance(loc[1], int) else None


def _same_world(world: World, decls: Declarations, bundle: Bundle) -> None:
    """Refuse a `--world` that declares none of the bundle's participants and tools: the
    bundle names no world (it is blind), and another world's declarations made every
    repair surface of a sound report a V815 error, as if the report were wrong."""
    shown = Declarations.from_bundle(bundle)
    names = {n for n, kinds in shown.kinds.items() if kinds & {"participant", "tool"}}
    if names and not names & decls.kinds.keys():
        from eairdsl.errors import UsageError

        listed = ", ".join(sorted(names)[:4]) + (", …" if len(names) > 4 else "")
        raise UsageError(f"--world {world.meta.name} declares none of this bundle's participants "
                         f"and tools ({listed}): give the world the audited episode ran on")


def validate_report(report: str | Path | dict[str, Any], bundle: Bundle | Path,
                    world: World | Declarations | None = None,
                    suggest: bool = False) -> ValidationResult:
    """Check `report` (JSON text, a path to it, or parsed data) against `bundle`.

    `world` (a compiled world, or its `Declarations`) lets plan surfaces be checked
    against the world's declarations and its `protected` list; without it they are
    checked against the names the bundle shows, and protection is not checked.
    Raises `evidence.BundleError` for a bundle folder that cannot be read.
    """
    if isinstance(bundle, Path):
        bundle = Bundle.load(bundle)
    data, positions, name, syntax = _read(report)
    if syntax:
        return ValidationResult(diagnostics=syntax)
    schema: list[ReportDiagnostic] = []
    if positions is not None:
        for path, span in positions.repeated:
            schema.append(ReportDiagnostic(
                diagnostic=Diagnostic(code="V802", message=f"{format_path(path)}: member "
                                      "repeated in one object (JSON readers disagree on which "
                                      "one counts)", span=span),
                path=format_path(path), section=_section(path), finding=_index(path)))
    try:
        parsed = Report.model_validate(data, strict=True)
    except ValidationError as e:
        schema += _schema_errors(e, positions)
    if schema:
        return ValidationResult(diagnostics=schema)
    match world:
        case World():
            decls = Declarations.from_world(world)
            _same_world(world, decls, bundle)
        case Declarations():
            decls = world
        case None:
            decls = Declarations.from_bundle(bundle)
        case _:
            raise TypeError(f"world must be a World or Declarations, not {type(world).__name__}")
    checker = _Checker(parsed, bundle, positions, name, decls, suggest)
    checker.check_bundle_ref()
    if checker.out:  # another bundle's report: its citations would all be noise
        return ValidationResult(diagnostics=checker.out, schema_valid=True,
                                surface_checked_against=decls.source)
    f_ok, f_total, u_ok, u_total, merged = checker.run()
    return ValidationResult(diagnostics=checker.out, findings_resolvable=f_ok,
                            findings_total=f_total, units_resolvable=u_ok, units_total=u_total,
                            unknown_steps=checker.unknown, merged=merged, schema_valid=True,
                            citations_checked=True, surface_checked_against=decls.source)
