"""Guarded apply: a candidate is written into a copy of the world folder, formatted, compiled.

The Repair Agent returns text; nothing it returns touches the original world.
`apply_candidate` copies the world folder (the `.eair` file's folder, with its
data files, cards and imports) into the round's folder, writes the candidate's
main file and extra files there, formats the main file with the project's
formatter (`eairc fmt`'s `format_text`) and compiles the copy. A candidate that
does not format or compile is *not applied*: the result carries the located
diagnostics, rendered as `eairc check` renders them but with paths relative to
the world folder (`a1.eair:12:3: error[E301]: …`), for the agent's next try.

Worlds are untrusted input, and so is a candidate: only regular files inside
the folder are copied (no symlinks, no special files, no hidden folders or
`generated/` output), the copy is bounded in files and bytes, and a candidate's
names, texts and their number and size are checked before anything is written
(`files.py`: a bad one is a located refusal of the candidate, never an internal
error). Once the candidate has compiled, its folder keeps only the files W′
reads (`World.sources`): a file the candidate wrote that W′ does not read is
removed and named in `Applied.unread`, for ScopeOK to refuse, and a file of W
that W′ no longer reads is removed too (the diff lists it), so the folder a
repair installs holds exactly the world it reviewed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from eairdsl.diagnostics import Diagnostic, render_all
from eairdsl.errors import UsageError
from eairdsl.ir import World
from eairdsl.repair.files import (
    MAX_CANDIDATE_BYTES,
    candidate_problems,
    normal_name,
    shown,
)
from eairdsl.repair.folder import write_atomic
from eairdsl.repair.model import Candidate
from eairdsl.source import display_name
from eairdsl.syntax.fmt import FormatterError, format_text

__all__ = ["MAX_FILES", "MAX_BYTES", "MAX_CANDIDATE_BYTES", "Applied", "copy_world_folder",
           "apply_candidate", "write_atomic"]

#: bounds of a world folder copy (worlds are untrusted)
MAX_FILES = 2000
MAX_BYTES = 64 * 1024 * 1024
#: folders never copied: compiler output, caches, a repair's own output
_SKIP_DIRS = frozenset({"generated", "__pycache__", "node_modules", "runs"})


def _walk(src: Path, skip: Path | None) -> list[Path]:
    out: list[Path] = []
    for root, dirs, names in os.walk(src, followlinks=False):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                         and not (here / d).is_symlink()
                         and (skip is None or (here / d).resolve() != skip))
        out += [here / n for n in sorted(names) if not n.startswith(".")]
    return out


def copy_world_folder(world_file: Path, dest: Path, *, only: list[str] | None = None,
                      exclude: Path | None = None) -> Path:
    """Copy the regular files of `world_file`'s folder into `dest` (bounded); return the
    main file's path in the copy.

    `only` names the files to copy, relative to the folder (the world's own sources,
    `World.sources`: what it reads); refs outside the folder (the stdlib) are skipped.
    Without it, the whole folder is copied except hidden and generated folders and
    `exclude` (e.g. the repair's own output folder when it lies inside the world folder).
    """
    world_file = Path(world_file)
    src = world_file.parent.resolve()
    skip = exclude.resolve() if exclude is not None else None
    if only is None:
        chosen = _walk(src, skip)
    else:
        chosen = []
        for rel in sorted(set(only) | {world_file.name}):
            path = (src / rel)
            try:
                path.resolve().relative_to(src)
            except ValueError:
                continue
            if ".." not in PurePosixPath(rel).parts:
                chosen.append(path)
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    files = total = 0
    for path in chosen:
        if path.is_symlink() or not path.is_file():
            continue
        files += 1
        total += path.stat().st_size
        if files > MAX_FILES or total > MAX_BYTES:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UsageError(f"the world folder {src} holds more than {MAX_FILES} files or "
                             f"{MAX_BYTES // (1024 * 1024)} MB; put the world in a folder "
                             "of its own")
        target = tmp / path.resolve().relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    tmp.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)
    return dest / world_file.name


@dataclass
class Applied:
    """A candidate written into a world copy: compiled (`world`) or refused (`diagnostics`)."""

    folder: Path
    main: Path
    #: the main file's text as written (formatted when it parsed)
    text: str
    world: World | None = None
    #: rendered, located diagnostics (errors first); empty when it compiled cleanly
    diagnostics: list[str] = field(default_factory=list)
    #: one line per error, `file:line:col: error[E…]: message`, for the agent's feedback
    problems: list[str] = field(default_factory=list)
    warnings: int = 0
    #: the candidate's files (folder-relative) that the compiled W′ does not read: removed
    #: from the folder, for ScopeOK to refuse
    unread: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.world is not None


def _relative(text: str, folder: Path) -> str:
    """Diagnostics name files as the compiler displays them; make them folder-relative."""
    for prefix in {display_name(folder) + os.sep, str(folder) + os.sep,
                   str(folder.resolve()) + os.sep}:
        text = text.replace(prefix, "")
    return text


def apply_candidate(world_file: Path, candidate: Candidate, folder: Path, *,
                    only: list[str] | None = None, exclude: Path | None = None) -> Applied:
    """Write `candidate` into a fresh copy of the world folder at `folder` (`only`: the
    world's own files, see `copy_world_folder`), format, compile, and keep in the folder
    only what the compiled candidate reads."""
    main = copy_world_folder(world_file, folder, only=only, exclude=exclude)
    text = candidate.source
    problems = candidate_problems(text, candidate.files, main.name)
    if not problems:
        problems = _write_files(folder, candidate.files)
    if problems:
        return Applied(folder, main, text, diagnostics=problems, problems=problems)
    try:
        formatted, diags = format_text(text, display_name(main))
    except FormatterError:  # a formatter bug: keep the text as the agent wrote it
        formatted, diags = text, None
    if formatted is None:
        assert diags is not None
        items = diags.sorted()
        rendered = _relative(render_all(items, {display_name(main): text.split("\n")},
                                        limit=20), folder)
        write_atomic(main, text)
        return Applied(folder, main, text, diagnostics=[rendered],
                       problems=[_relative(_line(d), folder) for d in items if d.is_error])
    write_atomic(main, formatted)
    from eairdsl.compiler import compile_world  # a tool module: loaded on first use

    result = compile_world(main)
    items = result.diagnostics.sorted()
    rendered = _relative(render_all(items, result.sources, limit=20), folder) if items else ""
    errors = [_relative(_line(d), folder) for d in items if d.is_error]
    warnings = len(items) - len(errors)
    if not result.ok or result.world is None:
        return Applied(folder, main, formatted, diagnostics=[rendered] if rendered else [],
                       problems=errors or [f"{main.name}: error: the candidate did not compile"],
                       warnings=warnings)
    unread = _keep_read(folder, result.world, {normal_name(n) for n in candidate.files})
    return Applied(folder, main, formatted, world=result.world,
                   diagnostics=[rendered] if rendered else [], warnings=warnings,
                   unread=unread)


def _write_files(folder: Path, files: dict[str, str]) -> list[str]:
    """Write the candidate's checked `files` into the folder; a file that cannot be written
    there (a folder of that name, or a file where its folder goes) is a located problem."""
    problems: list[str] = []
    for name, content in sorted(files.items()):
        try:
            write_atomic(folder / normal_name(name), content)
        except UsageError as exc:
            why = str(exc).rsplit(": ", 1)[-1]
            problems.append(f"files[{shown(name)}]: error: cannot be written in the world "
                            f"folder ({why})")
    return problems


def _keep_read(folder: Path, world: World, written: set[str]) -> list[str]:
    """Remove from the candidate's folder every file the compiled world does not read (its
    `sources`); the removed ones the candidate wrote, sorted."""
    read = {s.ref for s in world.sources}
    unread: list[str] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        if rel in read:
            continue
        path.unlink()
        if rel in written:
            unread.append(rel)
    for path in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
    return unread


def _line(d: Diagnostic) -> str:
    where = f"{d.span}: " if d.span else ""
    return f"{where}{d.severity.value}[{d.code}]: {d.message}"
