"""The compile pipeline as a library: source -> check -> IR -> files in `generated/`.

The CLI (`eairdsl/cli/`) is a thin layer over this module. Output is written to a temporary
folder and swapped in only when the world compiled without errors, so a bad
edit never destroys an earlier good `generated/<world>/`.
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from eairdsl.check import Limits, check_world
from eairdsl.diagnostics import Diagnostics
from eairdsl.diagram import DIGEST_MARK
from eairdsl.graph import dot_digest, draw, to_dot, topology
from eairdsl.ir import World, dump_world
from eairdsl.lower import lower
from eairdsl.source import SourceFile

__all__ = ["CompileResult", "compile_world", "generated_files", "write_generated", "stale_files",
           "svg_digest", "OutputClaims"]


@dataclass
class CompileResult:
    """Diagnostics always; a World only when there were no errors."""

    path: Path
    diagnostics: Diagnostics
    world: World | None = None
    sources: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.world is not None and not self.diagnostics.has_errors


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Leave what already lives (the modules, the IR and checker models, earlier
    worlds) out of the collector's traversals while a world compiles.

    A compile allocates hundreds of thousands of short-lived objects, and every
    oldest-generation collection it triggers walks the whole heap again, most of
    it the package's own import-time objects; `gc.freeze` sets those aside and
    `gc.unfreeze` hands them back afterwards, so nothing is kept alive that
    would otherwise be freed — a cycle among them is collected later instead.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def compile_world(path: Path | str, limits: Limits | None = None) -> CompileResult:
    """Check and lower one .eair file; a path given as a string is taken as a path (a
    script's `compile_world("worlds/d1.eair")` raised AttributeError). `limits` are the
    world's budgets (`eairdsl.check.limits`; the defaults when None)."""
    with _frozen_heap():
        return _compile_world(Path(path), limits)


def _compile_world(path: Path, limits: Limits | None = None) -> CompileResult:
    diagnostics = Diagnostics()
    sources: dict[str, SourceFile] = {}
    checked = check_world(path, diagnostics, sources, limits=limits)
    result = CompileResult(path=path, diagnostics=diagnostics)
    result.sources = {s.name: s.text.split("\n") for s in sources.values()}
    if checked is None or diagnostics.has_errors:
        return result
    result.world = lower(checked)
    return result


def _title(world: World) -> str:
    return f"{world.meta.name}: {world.meta.title}" if world.meta.title else world.meta.name


def generated_files(world: World) -> dict[str, bytes]:
    """Every deterministic output file, by path relative to generated/<world>/."""
    files = {"world.json": dump_world(world).encode("utf-8")}
    for role, by_condition in world.prompts.items():
        for condition, text in by_condition.items():
            files[f"prompts/{role}/{condition}.md"] = text.encode("utf-8")
    files["topology.dot"] = to_dot(topology(world), _title(world)).encode("utf-8")
    return files


def svg_digest(svg: bytes) -> str | None:
    """The DOT digest an SVG we wrote carries, or None (not ours, or from before the mark)."""
    head = svg[:4096]
    at = head.find(DIGEST_MARK.encode("ascii"))
    if at < 0:
        return None
    rest = head[at + len(DIGEST_MARK):].split(maxsplit=1)
    return rest[0].decode("ascii", "replace") if rest else None


class OutputClaims:
    """Which source file each `generated/<world>/` of one compile belongs to.

    The folder is named after the world, not the file, so two files declaring the
    same world (a copy made to try a repair, `worlds/d1_repaired.eair`) wrote the
    same folder: the last one silently replaced the first, and `compile --check`
    then failed for one of them whatever was recompiled. The second claim is refused.
    """

    def __init__(self) -> None:
        self._owners: dict[str, Path] = {}

    def claim(self, world: World, path: Path, out_root: Path) -> str | None:
        """None when `path` may write its world's folder; else why not, for the user."""
        name = world.meta.name
        owner = self._owners.setdefault(name, path)
        if owner == path or owner.resolve() == path.resolve():
            return None
        return (f"world `{name}` is also declared by {owner}, and both would write "
                f"{out_root / name}; skipped: give one of them another world name, or "
                f"compile each with its own -o folder")


def write_generated(world: World, out_root: Path) -> tuple[Path, list[str]]:
    """Write generated/<world>/ atomically. Returns the folder and notes for the user.

    The diagram is drawn by graphviz when `dot` is installed and by the built-in
    renderer otherwise; without `dot`, an existing SVG that was drawn from the same
    DOT text is kept as it is, so compiling on a laptop without graphviz does not
    churn a committed diagram.
    """
    notes: list[str] = []
    files = generated_files(world)
    target = out_root / world.meta.name
    digest = dot_digest(files["topology.dot"].decode("utf-8"))
    existing = target / "topology.svg"
    svg, renderer = draw(topology(world), _title(world))
    if renderer != "graphviz":
        kept = existing.read_bytes() if existing.is_file() else b""
        if kept and svg_digest(kept) == digest:
            svg = kept
        else:
            notes.append("graphviz's `dot` is not installed: drew topology.svg with the "
                         "built-in renderer (install the Debian package `graphviz` for "
                         "graphviz's layout)")
    files["topology.svg"] = svg
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        # it was renamed aside, replaced, and then rmtree failed on it: "cannot write
        # generated: Not a directory" for a compile that had written, and a stray file
        what = "a symbolic link" if target.is_symlink() else "a file"
        raise NotADirectoryError(errno.ENOTDIR, f"{target} is {what}, not a folder: move "
                                 "it away or compile to another -o")
    out_root.mkdir(parents=True, exist_ok=True)
    tmp = out_root / f".{world.meta.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        for rel, data in files.items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    except OSError:  # a full disk: no half-written temporary folder left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = out_root / f".{world.meta.name}.old-{os.getpid()}"
    moved = target.exists()
    if moved:
        target.rename(old)
    try:
        tmp.rename(target)
    except OSError:  # put the earlier output back rather than leave none
        if moved:
            old.rename(target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if moved:
        shutil.rmtree(old, ignore_errors=True)
    return target, notes


#: `stale_files`' one entry for a world never compiled to that root.
MISSING_FOLDER = "the whole folder (it does not exist)"


def stale_files(world: World, out_root: Path) -> list[str]:
    """Generated files that are missing or differ from a fresh compile.

    The SVG's bytes depend on the graphviz version (or on whether graphviz is
    installed at all), the DOT text it was drawn from does not: the SVG is stale
    when it is missing or carries the digest of other DOT text. A folder that does
    not exist is one entry saying so, not every file it should hold (a fresh clone's
    `compile --check` listed all 60 of F1's prompts).
    """
    target = out_root / world.meta.name
    if not target.is_dir():
        return [MISSING_FOLDER]
    stale = []
    expected = generated_files(world)
    for rel, data in sorted(expected.items()):
        path = target / rel
        if not path.is_file() or path.read_bytes() != data:
            stale.append(rel)
    if target.is_dir():
        for path in sorted(target.rglob("*")):
            rel = path.relative_to(target).as_posix()
            if path.is_file() and rel not in expected and rel != "topology.svg":
                stale.append(f"{rel} (no longer generated)")
    svg = target / "topology.svg"
    if not svg.is_file():
        stale.append("topology.svg")
    elif svg_digest(svg.read_bytes()) != dot_digest(expected["topology.dot"].decode("utf-8")):
        stale.append("topology.svg (drawn from another topology)")
    return stale
