"""The bundles folder on disk: episode folders that share the world's files by content.

A bundle (`evidence`: its manifest lists every file with its sha256) is mostly
the world as the roles could reach it — records, documents, cards, policies,
tools, the authorization matrix — and that is the same for every episode of a
world and condition. Written out per episode it was most of an audit folder
(A1: ~190 KB and ~78 files of bundle per 82 KB trace). So a bundles folder
keeps each such file once, named by its content, and each episode folder keeps
only what is the episode's own::

    DIR/<episode>/manifest.json       the manifest, byte for byte a plain bundle's
    DIR/<episode>/events.jsonl.gz     the episode's steps (gzip of events.jsonl)
    DIR/shared/<sha256>               every other file of any bundle, once per content

The manifest's `files` (path -> sha256) is the reference: a file the episode folder
does not hold is `shared/<its sha256>`. Reading resolves that the same way for every
reader (`source`, `read`), so `evidence.Bundle.load` of an episode folder gives the
auditor the bundle it always did, and `materialize` writes the plain folder (every
file under its own name, byte-identical to what `bundle.write_bundle(...,
materialize=True)` writes) for a person or a tool that reads files.

A plain folder (a materialized bundle, an older audit's, a test fixture) reads as
it always did: a file present in the episode folder is read from there.

Writes are atomic: shared files first (each through `source.write_atomic`), then the
episode folder, renamed into place whole, so no folder ever names a file not yet
written. The same content is never written twice: a shared file already there with
the right sha256 is kept.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from eairdsl.errors import UsageError
from eairdsl.source import write_atomic

__all__ = ["SHARED", "EVENTS_GZ", "Source", "StoreError", "source", "read", "shared_dir",
           "write_compact", "write_plain", "contents", "materialize", "is_bundle",
           "episode_folders"]

#: the folder beside the episode folders holding the shared files, by sha256
SHARED = "shared"
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
#: the episode's steps as an episode folder keeps them
EVENTS_GZ = EVENTS + ".gz"
#: the files an episode folder keeps itself (all others are shared)
_OWN = frozenset({MANIFEST, EVENTS})
#: a compressed events file larger than this once expanded is refused (a bundle is
#: untrusted input; an episode's steps are a few MB at most)
_MAX_EVENTS = 512 << 20
#: shared files this process has written or checked (store, sha256): each is looked at
#: once per run (one removed since is reported missing when a bundle is read)
_CHECKED: set[tuple[str, str]] = set()
_CHECKED_MAX = 100_000


class StoreError(ValueError):
    """A bundle file that cannot be found or read (`evidence.BundleError` words it)."""


@dataclass(frozen=True)
class Source:
    """Where a bundle file's bytes are: a path, whether gzip-compressed, and whether it
    is a shared file (the same bytes for every bundle that lists its sha256); the
    bundle folder and the file as the bundle names it, for messages."""

    path: Path
    root: Path
    rel: str
    compressed: bool = False
    shared: bool = False

    def missing(self) -> StoreError:
        return StoreError(f"{self.root / self.rel}: listed in the manifest but missing "
                          f"(neither in the bundle folder nor in {self.root.parent / SHARED}/)")


def shared_dir(root: Path) -> Path:
    """The shared files of the bundle folder `root`: `shared/` beside it."""
    return root.parent / SHARED


_HEX = frozenset("0123456789abcdef")


def _is_digest(text: str) -> bool:
    return len(text) == 64 and _HEX.issuperset(text)


def source(root: Path, rel: str, digest: str, listing: Collection[str] | None = None,
           store: Path | None = None) -> Source:
    """Where the bundle folder `root` keeps `rel` (listed with `digest`): its own file,
    its compressed events, or else the shared file beside it, which `read` finds or
    reports missing. `listing`, the names in `root`, and `store`, its `shared_dir`,
    when the caller has them: a bundle's files are looked up without a lookup per
    file the folder cannot hold. StoreError when none can be."""
    if listing is None or rel.split("/", 1)[0] in listing:
        own = root / rel
        if own.is_file():
            return Source(own, root, rel)
    if rel == EVENTS and (EVENTS_GZ in listing if listing is not None
                          else (root / EVENTS_GZ).is_file()):
        return Source(root / EVENTS_GZ, root, rel, compressed=True)
    if _is_digest(digest):
        return Source((store if store is not None else shared_dir(root)) / digest, root, rel,
                      shared=True)
    raise StoreError(f"{root / rel}: listed in the manifest but missing (not in the bundle "
                     "folder, and its sha256 names no shared file)")


def read(src: Source, digest: str) -> bytes:
    """The file's bytes, checked against `digest` (StoreError when they differ, or when
    the file is not there: missing)."""
    try:
        raw = src.path.read_bytes()
        if src.compressed:
            d = zlib.decompressobj(wbits=31)
            raw = d.decompress(raw, _MAX_EVENTS + 1)
            if len(raw) > _MAX_EVENTS or d.unconsumed_tail:
                raise StoreError(f"{src.path}: expands past {_MAX_EVENTS >> 20} MiB")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise src.missing() from None
    except OSError as exc:
        raise StoreError(f"{src.path}: cannot be read ({exc.strerror or exc})") from None
    except zlib.error as exc:
        raise StoreError(f"{src.path}: not gzip data ({exc})") from None
    if hashlib.sha256(raw).hexdigest() != digest:
        raise StoreError(f"{src.path}: sha256 differs from the manifest's")
    return raw


def is_bundle(path: Path) -> bool:
    """Whether `path` is one episode's bundle folder (it holds a manifest)."""
    return (path / MANIFEST).is_file()


def episode_folders(path: Path) -> list[Path]:
    """The bundle folders directly under a bundles folder, sorted (not `shared/`)."""
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and p.name != SHARED
                  and is_bundle(p))


# ------------------------------------------------------------------ writing

def _gzip(data: bytes) -> bytes:
    """Deterministic gzip (no file name, no time): the same steps give the same bytes.
    Level 3: a tenth of the steps' size, at under half level 6's time."""
    return gzip.compress(data, compresslevel=3, mtime=0)


def _keep_shared(store: Path, digest: str, data: bytes) -> None:
    """`store/digest` holding `data`: written unless a file with that content is there."""
    key = (str(store), digest)
    if key in _CHECKED:
        return  # written or checked whole earlier in this process
    path = store / digest
    try:
        same = path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest
    except OSError:
        same = False
    if not same:
        write_atomic(path, data)
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED.add(key)


def write_compact(out: Path, name: str, files: dict[str, bytes],
                  digests: dict[str, str] | None = None) -> None:
    """Bundle `files` (relative path -> bytes, the manifest among them) as `out/name/`:
    the episode's own files there (events compressed), every other one once in
    `out/shared/` (by its sha256: `digests`, the manifest's, when the caller has them).
    UsageError naming the folder when it cannot be written."""
    own: dict[str, bytes] = {}
    store = out / SHARED
    try:
        for rel, data in sorted(files.items()):
            if rel == EVENTS:
                own[EVENTS_GZ] = _gzip(data)
            elif rel in _OWN:
                own[rel] = data
            else:
                digest = (digests or {}).get(rel) or hashlib.sha256(data).hexdigest()
                _keep_shared(store, digest, data)
    except OSError as exc:
        raise UsageError(f"cannot write the bundle's shared files under {out / SHARED}: "
                         f"{exc.strerror or exc}") from None
    write_plain(out, name, own)


def write_plain(out: Path, name: str, files: dict[str, bytes]) -> None:
    """`out/name/` holding exactly `files`, replaced in one rename."""
    target = out / name
    tmp = out / f".{name}.tmp-{os.getpid()}"
    old = out / f".{name}.old-{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
        for rel, data in sorted(files.items()):
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        if old.exists():
            shutil.rmtree(old)
    except OSError as exc:
        raise UsageError(f"cannot write the bundle {target}: {exc.strerror or exc}") from None


def contents(root: Path, files: dict[str, str]) -> dict[str, bytes]:
    """Every file of the bundle folder `root` under its own name, as a plain folder holds
    them: the manifest as it is and each file its manifest lists (`files`: path ->
    sha256), checked. StoreError for a file that is missing or differs."""
    plain: dict[str, bytes] = {MANIFEST: _read_manifest(root)}
    for rel, digest in sorted(files.items()):
        plain[rel] = read(source(root, rel, digest), digest)
    return plain


def materialize(root: Path, files: dict[str, str], out: Path) -> Path:
    """Write the bundle folder `root` as a plain folder `out/<root's name>/` (`contents`):
    byte for byte what a plain bundle of the same trace is. Returns the folder.
    StoreError for a file that is missing or differs; UsageError when the folder cannot
    be written."""
    write_plain(out, root.name, contents(root, files))
    return out / root.name


def _read_manifest(root: Path) -> bytes:
    try:
        return (root / MANIFEST).read_bytes()
    except OSError as exc:
        raise StoreError(f"{root / MANIFEST}: cannot be read ({exc.strerror or exc})") from None
