"""File names made from world data: instance ids, condition, model and world names.

Worlds are untrusted input, and these names come from them (or from the
command line). `safe_filename` turns any text into one path component that
stays inside the folder it is joined to, fits every file system, and keeps
distinct names distinct.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_NAME_BYTES", "safe_filename"]

#: longest name `safe_filename` returns (file systems allow 255 bytes; leave room for suffixes)
MAX_NAME_BYTES = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_filename(*parts: object, limit: int = MAX_NAME_BYTES) -> str:
    """One safe path component for `parts` joined with `-`.

    Characters other than `A-Z a-z 0-9 . _ -` become `_`, a leading dot becomes
    `_` (no hidden files, no `.` or `..`), and the result is at most `limit`
    bytes. A name that had to change or be cut gets `-` and 6 hex digits of the
    original's SHA-1, so two different inputs share a file name only by a hash
    collision (one in 16.7 million per pair). A name that is already safe is
    returned as it is; file systems that ignore case may still fold `A` and `a`.
    """
    raw = "-".join(str(p) for p in parts)
    safe = _UNSAFE.sub("_", raw)
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe == raw and 0 < len(safe) <= limit:
        return safe
    tag = "-" + hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()[:6]
    return (safe or "_")[: max(1, limit - len(tag))] + tag
