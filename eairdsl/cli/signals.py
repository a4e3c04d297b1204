"""`eairc signals …`: findings across runs grouped into issues (docs/signals.md).

The store, the grouping, the page and the matcher are the library's
(eairdsl.signals); this sub-application opens the store, turns a refused request
into a located message (exit 1) and prints the rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from eairdsl.cli.output import err, refuse
from eairdsl.errors import UsageError

__all__ = ["signals_app"]

signals_app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Signals: findings across runs grouped into issues with severity, remediations "
    "and checks (docs/signals.md).",
)


_STORE_OPT = typer.Option("--store", metavar="PATH", help="The Signals store (SQLite).")


def _signals_store(path: Path, create: bool = False) -> Any:
    """The Signals store at `path`; one that cannot be opened is a message and exit 1."""
    from eairdsl.signals.store import SignalsStore, SignalsStoreError

    try:
        return SignalsStore.open(path, create=create)
    except SignalsStoreError as exc:
        refuse(exc)


def _signals_call(action: Any) -> Any:
    """Run a store operation; a refused request is a located message and exit 1."""
    try:
        return action()
    except UsageError as exc:
        refuse(exc)


@signals_app.command("update")
def signals_update(
    targets: Annotated[list[Path], typer.Argument(
        metavar="AUDIT_DIR|STUDY_DIR|REPAIR_DIR", help="Audit folders (index.json, "
        "reports/), study folders (every STUDY_DIR/audit/*/) or repair folders "
        "(acceptance.json).")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Add audits (or an accepted repair) to the Signals store; updating twice adds nothing."""
    from eairdsl.signals.store import SignalsStore

    for target in targets:  # before the store is created: a refused target leaves no file
        _signals_call(lambda t=target: SignalsStore.audits_of(t))
    with _signals_store(store_path, create=True) as store:
        for target in targets:
            s = _signals_call(lambda t=target: store.update(t))
            typer.echo(f"{target}: " + (
                f"update {s.seq}: {s.audits} audit(s), {s.sessions} new session(s), "
                f"{s.occurrences} new occurrence(s), {s.signals} new Signal(s)"
                if s.seq is not None else f"nothing new from {s.audits} audit(s) (already in the "
                "store, or nothing readable: see the notes)")
                + (f"; resolved {', '.join(s.resolved)}" if s.resolved else "")
                + (f"; regressed {', '.join(s.regressed)}" if s.regressed else ""))
            for problem in s.problems[:5]:
                err(f"note: {problem}")
            if len(s.problems) > 5:
                err(f"note: … {len(s.problems) - 5} more")
    typer.echo(f"store: {store_path}; next: `eairc signals list --store {store_path}`")


@signals_app.command("list")
def signals_list(
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    everything: Annotated[bool, typer.Option(
        "--all", help="Also Signals with only leads or out-of-catalogue candidates.")] = False,
) -> None:
    """Signals by severity: id, score and level, natures, top type, component, counts, status."""
    from eairdsl.signals.html import LIST_COLUMNS, list_rows, ranked_views

    with _signals_store(store_path) as store:
        views = ranked_views(store, everything)
        rows = list_rows(views)
        hidden = len(store.signal_ids()) - len(views)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return
    if not rows:
        typer.echo("no Signals" + (f" with a supported occurrence ({hidden} without: --all)"
                                   if hidden else ""))
        return
    cells = [[str(r[c]) for c in LIST_COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(LIST_COLUMNS)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(LIST_COLUMNS, widths, strict=True)).rstrip())
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if hidden:
        typer.echo(f"({hidden} more Signal(s) with only leads or out-of-catalogue candidates, "
                   "or merged: --all)")


@signals_app.command("show")
def signals_show(
    signal: Annotated[str, typer.Argument(metavar="ID", help="A Signal id (SIG-N).")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
    limit: Annotated[int, typer.Option(min=1, help="Occurrences to list at most.")] = 20,
) -> None:
    """A Signal: occurrences with trace steps, why grouped, severity arithmetic, checks."""
    from eairdsl.signals.html import signal_text

    with _signals_store(store_path) as store:
        typer.echo(_signals_call(lambda: signal_text(store, signal, limit)))


@signals_app.command("report")
def signals_report(
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML page to write.")
                   ] = Path("signals.html"),
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
    everything: Annotated[bool, typer.Option(
        "--all", help="Also Signals with only leads or out-of-catalogue candidates.")] = False,
) -> None:
    """An HTML page of Signals by severity, occurrences linked to their trace steps."""
    from eairdsl.signals.html import write_report

    with _signals_store(store_path) as store:
        n = _signals_call(lambda: write_report(store, out, everything))
    typer.echo(f"{n} Signal(s): {out}")


@signals_app.command("merge")
def signals_merge(
    target: Annotated[str, typer.Argument(metavar="A", help="The Signal that remains.")],
    source: Annotated[str, typer.Argument(metavar="B", help="The Signal merged into A.")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Merge Signal B into A (recorded; `unmerge B` undoes it)."""
    with _signals_store(store_path) as store:
        fps = _signals_call(lambda: store.merge(target, source))
    typer.echo(f"merged {source} into {target} ({len(fps)} fingerprint(s))")


@signals_app.command("unmerge")
def signals_unmerge(
    source: Annotated[str, typer.Argument(metavar="B", help="A merged Signal.")],
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Undo the last merge of Signal B: its fingerprints come back to it."""
    with _signals_store(store_path) as store:
        fps = _signals_call(lambda: store.unmerge(source))
    typer.echo(f"unmerged {source} ({len(fps)} fingerprint(s))")


@signals_app.command("wontfix")
def signals_wontfix(
    signal: Annotated[str, typer.Argument(metavar="ID", help="A Signal id (SIG-N).")],
    reason: Annotated[str, typer.Option(help="Why it will not be fixed.")] = "marked won't-fix",
    store_path: Annotated[Path, _STORE_OPT] = Path("runs/signals.sqlite"),
) -> None:
    """Mark a Signal won't-fix: later occurrences no longer reopen or regress it."""
    with _signals_store(store_path) as store:
        _signals_call(lambda: store.wontfix(signal, reason))
    typer.echo(f"{signal}: won't-fix")


@signals_app.command("match")
def signals_match(
    pred: Annotated[Path, typer.Argument(
        metavar="PRED", help="Predictions: an audit folder, a study folder with one audit, "
        "a Signals store, or a JSON file of occurrences.")],
    ref: Annotated[Path, typer.Argument(metavar="REF", help="References, the same kinds.")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the whole result (pairs, unmatched) as byte-stable JSON.")
    ] = False,
    leads: Annotated[bool, typer.Option(
        "--leads", help="Let leads (insufficient evidence) of an audit enter too.")] = False,
) -> None:
    """Match predicted occurrences and Signals to references (Signals §6.1, docs/signals.md).

    Same session, component type and normalised name, a shared type id; a maximum
    one-to-one matching; occurrence, Signal and session precision, recall and F1.
    """
    from eairdsl.signals.match_inputs import match_paths
    from eairdsl.signals.matcher import result_json, summary_lines

    try:
        result, p, r = match_paths(pred, ref, leads=leads)
    except UsageError as exc:
        refuse(exc)
    for side, name in ((p, "PRED"), (r, "REF")):
        for note in side.notes[:5]:
            err(f"note: {name}: {note}")
    if as_json:
        sys.stdout.write(result_json(result))
    else:
        for line in summary_lines(result):
            typer.echo(line)
