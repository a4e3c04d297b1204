"""ChatDev (OpenBMB/ChatDev 1.0) `WareHouse/*.log` files: a plain-text log of role-play chats.

A log entry starts with `[YYYY-DD-MM HH:MM:SS LEVEL] ` — day before month, as
ChatDev writes it (`%Y-%d-%m`) — and runs to the next entry. What an entry becomes:

- `Role: **Role<->Other on : Phase, turn N**` — a message from Role to Other: the
  header names both parties of the two-party chat;
- `Role: **[Start Chat]**` — the chat's opening message, sent by the phase's
  `user_role_name` to its `assistant_role_name`, both named by the preceding
  `System: **[RolePlaying]**` table (a speaker that is neither is a message with
  no recipient);
- `System: **[chatting]**`, `**[RolePlaying]**` tables, `**[Seminar Conclusion]**`,
  `**[Update Codes]**`, `**[Execute Detail]**`, `**[Software Info]**`, … — the chat
  chain's own steps: decisions by `System` (the log's own name for its entries;
  those without a speaker are recorded as `System`'s too);
- `flask app.py did not start for online log` and `**[OpenAI_Usage_Info …]**`
  entries are the harness and token usage, not execution content: counted in a note.

`t` is minutes since the first entry. The log has no labels: nothing is withheld.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from eairdsl.external.core import (
    ImportedTrace,
    Importer,
    SourceError,
    neutral_name,
    read_text,
    register,
)

__all__ = ["IMPORTER", "Entry", "entries", "feed", "parse_time", "read"]

VERSION = "1"
_ENTRY = re.compile(r"^\[(?P<y>\d{4})-(?P<d>\d{2})-(?P<m>\d{2}) (?P<time>\d{2}:\d{2}:\d{2}) "
                    r"(?P<level>[A-Z]+)\] (?P<rest>.*)$")
_SPEAKER = re.compile(r"^(?P<speaker>[A-Za-z][\w .'-]*?): (?P<body>.*)$", re.S)
_PAIR = re.compile(r"^\*\*(?P<a>[^*<>]+?)<->(?P<b>[^*<>]+?) on : (?P<phase>[^,*]+), "
                   r"turn (?P<turn>\d+)\*\*")
_ROLE_ROW = re.compile(r"^\| \*\*(?P<key>assistant_role_name|user_role_name)\*\* \| "
                       r"(?P<value>[^|]+?) \|$", re.M)
_NOISE = ("flask app.py did not start for online log",)


class Entry:
    """One log entry: when, its first line after the stamp, and the whole text."""

    def __init__(self, line: int, when: datetime, head: str, text: str) -> None:
        self.line, self.when, self.head, self.text = line, when, head, text


def parse_time(y: str, d: str, m: str, hms: str, path: Path, line: int) -> datetime:
    """`YYYY-DD-MM hh:mm:ss` (ChatDev's order) to a datetime; a located error otherwise."""
    try:
        return datetime.strptime(f"{y}-{m}-{d} {hms}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise SourceError(path, f"line {line}", f"timestamp {y}-{d}-{m} {hms} is not "
                          "YYYY-DD-MM hh:mm:ss") from None


def entries(text: str, path: Path) -> list[Entry]:
    out: list[Entry] = []
    current: list[str] = []
    head: tuple[int, datetime, str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _ENTRY.match(line)
        if m is None:
            if head is None:
                if line.strip():
                    raise SourceError(path, f"line {n}", "text before the first log entry")
                continue
            current.append(line)
            continue
        if head is not None:
            out.append(Entry(head[0], head[1], head[2], "\n".join(current).strip()))
        when = parse_time(m.group("y"), m.group("d"), m.group("m"), m.group("time"), path, n)
        head = (n, when, m.group("rest"))
        current = [m.group("rest")]
    if head is not None:
        out.append(Entry(head[0], head[1], head[2], "\n".join(current).strip()))
    return out


def feed(b: ImportedTrace, log: list[Entry]) -> None:
    """The log's entries as events (the rules in the module docstring)."""
    t0 = log[0].when if log else None
    pair: tuple[str, str] | None = None  # (user_role_name, assistant_role_name)
    skipped = usage = 0
    for k, e in enumerate(log):
        t = (e.when - t0).total_seconds() / 60 if t0 is not None else None
        sid = f"line {e.line}"
        if any(e.head.startswith(x) for x in _NOISE):
            skipped += 1
            continue
        if e.head.startswith("**[OpenAI_Usage_Info"):
            usage += 1
            continue
        m = _SPEAKER.match(e.text)
        speaker, body = (m.group("speaker"), m.group("body")) if m else ("System", e.text)
        if speaker == "System":
            if "**[RolePlaying]**" in body:
                rows = {r.group("key"): r.group("value").strip()
                        for r in _ROLE_ROW.finditer(body)}
                user, assistant = rows.get("user_role_name"), rows.get("assistant_role_name")
                pair = (user, assistant) if user and assistant else None
            b.decision("System", body, t=t, src_index=k, src_id=sid)
            continue
        pm = _PAIR.match(body)
        if pm is not None and speaker in (pm.group("a"), pm.group("b")):
            other = pm.group("b") if speaker == pm.group("a") else pm.group("a")
            if other != speaker:
                b.message(speaker, body, recipient=other, basis="source-field", t=t,
                          src_index=k, src_id=sid)
                continue
        if body.startswith("**[Start Chat]**") and pair is not None and speaker in pair:
            other = pair[1] if speaker == pair[0] else pair[0]
            if other != speaker:
                b.message(speaker, body, recipient=other, basis="source-field", t=t,
                          src_index=k, src_id=sid)
                continue
        b.message(speaker, body, t=t, src_index=k, src_id=sid)
    if skipped:
        b.note(f"{skipped} harness entr{'y' if skipped == 1 else 'ies'} "
               f"({_NOISE[0]!r}) are not events")
    if usage:
        b.note(f"{usage} token-usage entr{'y' if usage == 1 else 'ies'} are not events")


def read(path: Path) -> list[ImportedTrace]:
    text = read_text(path)
    log = entries(text, path)
    if not log:
        raise SourceError(path, "", "no ChatDev log entries ([YYYY-DD-MM hh:mm:ss LEVEL] …)")
    stamp = re.search(r"\*\*ChatDev Starts\*\* \((\d{14})\)", text)
    b = ImportedTrace(format="chatdev", src=path,
                      instance=stamp.group(1) if stamp else path.stem,
                      world=neutral_name("chatdev", path.stem), framework="ChatDev",
                      importer_version=VERSION)
    b.note("timestamps read as YYYY-DD-MM (ChatDev's day-before-month order)")
    if stamp is not None:
        s = stamp.group(1)
        start = f"{s[0:4]}-{s[4:6]}-{s[6:8]} {s[8:10]}:{s[10:12]}:{s[12:14]}"
        if log[0].when.strftime("%Y-%m-%d %H:%M:%S") != start:
            b.note(f"the first entry's time {log[0].when} differs from the start stamp {start}")
    feed(b, log)
    return [b]


IMPORTER = register(Importer(format="chatdev", version=VERSION,
                             summary="ChatDev WareHouse logs (plain text, role-play chats)",
                             read=read, accepts=lambda p: p.suffix == ".log"))
