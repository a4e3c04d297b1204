"""The episode list's data: every attempt's table row in a few compressed script files.

`episodes.html` held one table row per attempt and grew with the study (4.4 MiB
and 142k elements at 5,460 episodes; a 20,000-episode study's list was more
than a browser shows comfortably). Now the page holds the table's heading, the
filters and a pager, and loads its rows from `episodes/e0001.js`, … as the
trace viewer loads traces (`eairdsl.study.viewer`): the page opens from disk
(file://), where browsers refuse `fetch()` but run a local `<script>`, so each
file is one call, `eairEpisodeChunk("e0001", "<base64>")`, whose argument is
zlib-compressed JSON: `{"v": 1, "first": <the first row's index>, "rows":
[<row HTML>, …]}`. The page's size no longer depends on the study's; its script
filters, sorts and pages over every row in memory and puts one page of rows in
the document.

The rows are the report's own HTML (`_episode_row.html.j2`, every value
escaped by the template): what a row shows, its filter keys (`data-f-*`) and
its sort keys (`data-v`) are decided there, once, as before.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CHUNK_ROWS", "EPISODES_DIR", "decode_episode_chunk", "episode_rows",
           "remove_episode_chunks", "write_episode_chunks"]

#: the rows' folder under the report
EPISODES_DIR = "episodes"
#: rows per chunk file: a few hundred kilobytes of HTML, tens compressed
CHUNK_ROWS = 500
CHUNK_VERSION = 1
_CALL = "eairEpisodeChunk"


def _name(number: int) -> str:
    return f"e{number:04d}"


def _ours(path: Path) -> bool:
    return path.is_file() and path.suffix == ".js" and path.name.startswith("e")


def write_episode_chunks(rows: Sequence[str], folder: Path, size: int | None = None) -> int:
    """Write the rows' chunk files into `folder` (`e0001.js`, … in row order, `size` rows
    each, default `CHUNK_ROWS`); returns how many. Chunk files of an earlier report that
    are not rewritten are removed."""
    size = CHUNK_ROWS if size is None else size
    if size < 1:
        raise ValueError(f"a chunk holds at least one row, not {size}")
    folder.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    for number, first in enumerate(range(0, len(rows), size), 1):
        name = _name(number)
        text = json.dumps({"v": CHUNK_VERSION, "first": first,
                           "rows": list(rows[first:first + size])},
                          ensure_ascii=False, separators=(",", ":"))
        packed = base64.b64encode(zlib.compress(text.encode("utf-8"), 6)).decode("ascii")
        (folder / f"{name}.js").write_text(f'{_CALL}("{name}","{packed}");\n',
                                           encoding="utf-8")
        written.add(f"{name}.js")
    for old in folder.iterdir():
        if old.name not in written and _ours(old):
            old.unlink()
    return len(written)


def remove_episode_chunks(folder: Path) -> None:
    """Remove the chunk files (and the folder, when that empties it); other files stay."""
    if not folder.is_dir():
        return
    for old in folder.iterdir():
        if _ours(old):
            old.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()


def decode_episode_chunk(path: Path) -> dict[str, Any]:
    """A chunk file's JSON (what the page inflates), for tests and tools."""
    text = path.read_text(encoding="utf-8")
    packed = text.split('","', 1)[1].rsplit('")', 1)[0]
    data: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(packed)))
    return data


def episode_rows(report: Path) -> list[str]:
    """Every row's HTML of a report's episode list, in the list's order."""
    rows: list[str] = []
    folder = report / EPISODES_DIR
    for path in sorted(p for p in folder.glob("e*.js") if _ours(p)):
        chunk = decode_episode_chunk(path)
        if chunk["first"] != len(rows):
            raise ValueError(f"{path}: its first row is {chunk['first']}, expected {len(rows)}")
        rows.extend(chunk["rows"])
    return rows
