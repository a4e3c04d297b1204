"""The LLM auditor's cassette in an audit folder: where `--record` writes it, which file
`--replay` reads, and what a resumed recording keeps.

An audit records its auditor's exchanges to `OUT/cassettes/auditor.jsonl` (one
cassette, `eairdsl.agents.cassette`: scopes `audit/<episode>/<arm>`), as a study
records to `OUT/cassettes/<model>.jsonl`. Opening a cassette to record empties it,
but a resumed audit asks only the episodes without a whole report: the exchanges
of the others must stay, or a replay of the folder would miss them. So before the
auditor opens its cassette, the lines of episodes whose report and validation are
both on disk are read (`finished_exchanges`), and written back once it is open.
"""

from __future__ import annotations

import json
from pathlib import Path

from eairdsl.audit.folder import AUDITOR_CASSETTE, AuditFolder, replay_sources

__all__ = ["AUDITOR_CASSETTE", "auditor_cassette", "finished_exchanges", "replay_cassette"]


def auditor_cassette(out: Path) -> Path:
    """Where an audit into `out` records its LLM auditor's exchanges."""
    return AuditFolder(out).cassette


def replay_cassette(source: Path, arm: str | None = None) -> Path:
    """The cassette `--replay SOURCE` names: the file itself, an audit folder or its
    `cassettes/` folder, an audit study's folder (its arm `arm`'s cassette), or an audit
    recorded before the cassette had its name (`OUT/cassettes` as the file). A source
    that holds none of these is returned as given: opening it says what is wrong."""
    source = Path(source)
    if not source.is_dir():
        return source
    return next((c for c in replay_sources(source, arm) if c.is_file()), source)


def finished_exchanges(cassette: Path, audit_out: Path) -> list[str]:
    """The lines of an earlier run's auditor cassette whose episode (scope
    `audit/<episode>/<arm>`) has a whole report in `audit_out` (the report and its
    validation): the audit resumes with those reports, so their exchanges are kept; the
    others are asked, and recorded, again. A cassette that cannot be read keeps nothing
    (opening it to record says what is wrong, if anything)."""
    try:
        lines = Path(cassette).read_text(encoding="utf-8").splitlines() \
            if Path(cassette).is_file() else []
    except (OSError, UnicodeDecodeError):
        return []
    kept: list[str] = []
    whole: dict[str, bool] = {}
    folder = AuditFolder(audit_out)
    for line in lines:
        try:
            scope = str(json.loads(line).get("scope", ""))
        except (json.JSONDecodeError, AttributeError):
            continue  # a line cut short by a kill
        parts = scope.split("/")
        if len(parts) < 3 or parts[0] != "audit":
            continue
        episode = parts[1]
        if episode not in whole:
            whole[episode] = folder.whole(episode)
        if whole[episode]:
            kept.append(line)
    return kept
