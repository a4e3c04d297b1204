"""A candidate's files: what a Repair Agent may write besides the main file, and its bounds.

A candidate is its main file's text plus `files`, the other files of the world
folder it adds or changes (a new module, a card, a data file). It is untrusted
input, like a world: it came from a model, or from any `RepairAgent`. Before
anything is written, every name and text is checked here and a bad one is a
located refusal of that candidate (`files["…"]: error: …`, the name shown
escaped), never an internal error:

- a name is a relative path inside the folder: not empty, not absolute, no `..`,
  no hidden part, not the main file (which is the candidate's `source`), no NUL or
  other control character, valid UTF-8 (no lone surrogate: Linux would write its
  raw byte), each part at most `MAX_NAME_BYTES` bytes (255 is the file system's
  limit, less what the atomic writer adds for its temporary file) and the whole
  at most `MAX_PATH_BYTES` in at most `MAX_PATH_PARTS` parts;
- a text is UTF-8 (no lone surrogate) and at most `MAX_CANDIDATE_BYTES`; all of a
  candidate's files together at most `MAX_CANDIDATE_TOTAL` bytes, and at most
  `MAX_CANDIDATE_FILES` of them.

Whether the repaired world *reads* a file is known only once it has compiled:
the guarded apply then keeps in the candidate's folder only the files W′ reads
(`apply.py`), the semantic diff lists every file added, changed or removed
(`diff.FileChange`), and ScopeOK refuses a file the candidate wrote that W′
does not read (`scope.py`): a candidate is its reviewed edit and nothing else.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import PurePosixPath

__all__ = ["MAX_CANDIDATE_BYTES", "MAX_CANDIDATE_FILES", "MAX_CANDIDATE_TOTAL",
           "MAX_NAME_BYTES", "MAX_PATH_BYTES", "MAX_PATH_PARTS", "shown", "name_problem",
           "text_problem", "candidate_problems", "normal_name"]

#: bound of a candidate's text: its main file, and each other file
MAX_CANDIDATE_BYTES = 2 * 1024 * 1024
#: bounds of a candidate's other files: how many, and their bytes together
MAX_CANDIDATE_FILES = 64
MAX_CANDIDATE_TOTAL = 8 * 1024 * 1024
#: bytes of one part of a file's name: the file system allows 255, and the atomic writer
#: names its temporary file `.NAME.tmp-PID` beside it
MAX_NAME_BYTES = 200
#: bytes and parts of a whole relative name
MAX_PATH_BYTES = 1024
MAX_PATH_PARTS = 32
#: characters of a name a message shows before cutting it
_SHOWN = 80


def shown(name: str) -> str:
    """A name as a message shows it: quoted and escaped (control characters, lone
    surrogates and non-ASCII as `\\uXXXX`), cut after `_SHOWN` characters."""
    cut = name if len(name) <= _SHOWN else name[:_SHOWN]
    text = json.dumps(cut, ensure_ascii=True)
    if len(name) > _SHOWN:
        text = text[:-1] + f"…\" ({len(name)} characters)"
    return text


def _utf8(text: str) -> int | None:
    """The UTF-8 length of `text`, None when it holds a lone surrogate (not UTF-8)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def name_problem(name: str, main: str) -> str | None:
    """Why `name` cannot be a file of a candidate whose main file is `main` (None: it can)."""
    if not name:
        return "the file name is empty"
    size = _utf8(name)
    if size is None:
        return "the file name is not UTF-8 text (it holds a lone surrogate)"
    bad = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return (f"the file name holds a control character (U+{ord(bad):04X}); name the "
                "file with printable characters")
    if size > MAX_PATH_BYTES:
        return f"the file name is {size} bytes; at most {MAX_PATH_BYTES}"
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or any(p.startswith(".") for p in path.parts) \
            or not path.parts:
        return "not a relative path inside the world folder (no `..`, no hidden parts)"
    if len(path.parts) > MAX_PATH_PARTS:
        return f"the file name has {len(path.parts)} parts; at most {MAX_PATH_PARTS}"
    long = next((p for p in path.parts if len(p.encode("utf-8")) > MAX_NAME_BYTES), None)
    if long is not None:
        return (f"a part of the file name is {len(long.encode('utf-8'))} bytes; at most "
                f"{MAX_NAME_BYTES}")
    if str(path) == main:
        return "this is the main file; give its text as the candidate's source"
    return None


def normal_name(name: str) -> str:
    """A good name (`name_problem` None) as the folder and the compiler name it."""
    return str(PurePosixPath(name.replace("\\", "/")))


def text_problem(text: str, limit: int = MAX_CANDIDATE_BYTES) -> str | None:
    """Why `text` cannot be written as a file of a candidate (None: it can)."""
    size = _utf8(text)
    if size is None:
        return "not UTF-8 text (it holds a lone surrogate)"
    if size > limit:
        return f"{size} bytes; at most {limit} ({limit // (1024 * 1024)} MB)"
    return None


def candidate_problems(source: str, files: dict[str, str], main: str) -> list[str]:
    """Every reason the candidate (its main file `main`'s `source` and its other `files`)
    cannot be written, one located line each: `MAIN: error: …` or
    `files["NAME"]: error: …`. Empty when it can."""
    problems: list[str] = []
    why = text_problem(source)
    if why is not None:
        problems.append(f"{main}: error: the candidate's source is {why}")
    if len(files) > MAX_CANDIDATE_FILES:
        problems.append(f"files: error: the candidate writes {len(files)} files besides "
                        f"{main}; at most {MAX_CANDIDATE_FILES} (a candidate changes the "
                        "world's own modules, cards and data files)")
        return problems
    total = 0
    seen: dict[str, str] = {}
    for name, text in sorted(files.items()):
        where = f"files[{shown(name)}]"
        why = name_problem(name, main)
        if why is None:
            why = text_problem(text)
        if why is None:
            normal = normal_name(name)
            if normal in seen:
                why = f"the same file as files[{shown(seen[normal])}]"
            seen[normal] = name
        if why is not None:
            problems.append(f"{where}: error: {why}")
            continue
        total += _utf8(text) or 0
    if total > MAX_CANDIDATE_TOTAL:
        problems.append(f"files: error: the candidate's files hold {total} bytes together; at "
                        f"most {MAX_CANDIDATE_TOTAL} ({MAX_CANDIDATE_TOTAL // (1024 * 1024)} MB)")
    return problems
