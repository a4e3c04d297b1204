"""The front commands and the library API as a new user drives them (QA pass).

Each test is one defect a user hit: the command or call that showed it, and what it
must do now. The world is the tutorial's small first_world, copied to a temporary
folder; the CLI runs in-process through typer's runner (offline, no subprocess).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eairdsl.api import (
    UsageError,
    resolve_world,
    run_episode,
    run_episodes,
    validate_conditions,
    validate_world,
)
from eairdsl.cli import app
from eairdsl.compiler import compile_world

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples"


@pytest.fixture()
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch folder holding worlds/first_world.eair and its data, as the cwd."""
    worlds = tmp_path / "worlds"
    worlds.mkdir()
    shutil.copy(EXAMPLE / "first_world.eair", worlds / "first_world.eair")
    shutil.copytree(EXAMPLE / "first_world", worlds / "first_world")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return tmp_path


def eairc(*args: str) -> tuple[int, str]:
    """Run `eairc ARGS` in-process; the exit code and everything printed."""
    result = CliRunner().invoke(app, list(args))
    output = result.output  # stdout and stderr, interleaved as a terminal shows them
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output, output
    return result.exit_code, output


# ------------------------------------------------ the API takes paths as a script gives them

def test_compile_world_takes_a_string_path(ws: Path) -> None:
    """compile_world("worlds/x.eair") raised AttributeError ('str' has no 'resolve')."""
    result = compile_world("worlds/first_world.eair")
    assert result.ok and result.world is not None
    assert result.world.meta.name == "first_world"
    assert result.path == Path("worlds/first_world.eair")
    missing = compile_world("worlds/missing.eair")  # a located E201, not an exception
    assert not missing.ok
    assert [d.code for d in missing.diagnostics.errors] == ["E201"]


def test_run_episode_and_validate_take_a_world_path_and_a_string_out(ws: Path) -> None:
    """run_episode(PATH) / validate_world(PATH) raised AttributeError ('no attribute
    meta'), and run_episode(world, out="runs") raised TypeError (str / str)."""
    world = resolve_world("worlds/first_world.eair")
    by_path = run_episode("worlds/first_world.eair", seed=1, out="runs")
    by_object = run_episode(world, seed=1)
    assert by_path.measurements == by_object.measurements
    assert by_path.trace_path is not None
    assert (ws / by_path.trace_path).is_file()
    assert Path(by_path.trace_path).parts[0] == "runs"
    several = run_episodes(Path("worlds/first_world.eair"), episodes=2, out="more")
    assert [r.seed for r in several] == [0, 1]
    assert all(Path(r.trace_path or "").is_file() for r in several)
    report = validate_world("worlds/first_world.eair", episodes=2)
    assert report.world == "first_world" and report.episodes == 2
    [check] = validate_conditions(Path("worlds/first_world.eair"), ["baseline"], episodes=2)
    assert check.condition == "baseline"
    with pytest.raises(UsageError, match="expected a World"):
        run_episode(42)  # type: ignore[arg-type]


def test_zero_episodes_and_no_conditions_are_refused(ws: Path) -> None:
    """validate_world(episodes=0) silently ran the default 10, and validate_conditions([])
    (`--conditions ""` or `", "` from an empty shell variable) checked every condition."""
    world = resolve_world("worlds/first_world.eair")
    with pytest.raises(UsageError, match="at least 1"):
        validate_world(world, episodes=0)
    with pytest.raises(UsageError, match="at least 1"):
        validate_conditions(world, None, episodes=0)
    with pytest.raises(UsageError, match="at least 1"):
        run_episodes(world, episodes=0)
    with pytest.raises(UsageError, match=r"no condition named.*baseline, pressured"):
        validate_conditions(world, [])
    code, out = eairc("validate", "worlds/first_world.eair", "--conditions", " , ")
    assert code == 1
    assert "no condition named" in out
    assert "condition(s)" not in out  # nothing was run


def test_a_path_that_is_not_a_world_says_what_to_give(ws: Path) -> None:
    """`eairc run notes.txt` said "notes.txt: world.json is not JSON"; the world's data
    folder and a folder of worlds said only "expected world.json"."""
    (ws / "notes.txt").write_text("hello\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"notes.txt is not a world: give a \.eair file"):
        resolve_world("notes.txt")
    with pytest.raises(UsageError, match=r"did you mean the world file worlds/first_world\.eair"):
        resolve_world("worlds/first_world")
    with pytest.raises(UsageError, match=r"folder of world files \(first_world\.eair\)"):
        resolve_world("worlds")
    assert eairc("compile", "worlds/first_world.eair")[0] == 0
    with pytest.raises(UsageError, match=r"compiled worlds \(first_world\).*generated/first_world"):
        resolve_world("generated")
    code, out = eairc("run", "worlds/first_world", "--episodes", "1")
    assert code == 1 and "did you mean the world file worlds/first_world.eair" in out
    # an upper-case suffix is still a world file
    shutil.copy("worlds/first_world.eair", "worlds/SHOUT.EAIR")
    assert resolve_world("worlds/SHOUT.EAIR").meta.name == "first_world"


# ------------------------------------------------ compile: two files, one world name

def test_two_files_declaring_one_world_do_not_overwrite_each_other(ws: Path) -> None:
    """`eairc compile worlds/*.eair` with a copy made to try a repair (same `world` name)
    wrote generated/first_world twice, the copy silently replacing the original, and
    `compile --check` then failed for one of them whatever was recompiled."""
    original = (ws / "worlds" / "first_world.eair").read_text(encoding="utf-8")
    (ws / "worlds" / "first_world_try.eair").write_text(
        original.replace("seeds 2", "seeds 3"), encoding="utf-8")
    code, out = eairc("compile")
    assert code == 1
    assert "worlds/first_world_try.eair: error: world `first_world` is also declared by " \
        "worlds/first_world.eair" in out
    assert resolve_world("generated/first_world").meta.seeds == 2  # the original's
    code, out = eairc("compile", "--check", "worlds/first_world.eair")
    assert code == 0, out
    # the same file named twice is one claim, not a clash
    code, out = eairc("compile", "worlds/first_world.eair", "./worlds/first_world.eair")
    assert code == 0, out


# ------------------------------------------------ run: -o like every other --out

def test_run_takes_dash_o_like_every_other_out_option(ws: Path) -> None:
    """`eairc run W -o DIR` was "No such option: -o" (compile, study, audit, repair,
    rescore and report all take -o for --out)."""
    code, out = eairc("run", "worlds/first_world.eair", "--episodes", "1", "-o", "my runs")
    assert code == 0, out
    assert sorted(p.name for p in (ws / "my runs" / "baseline").iterdir()) == [
        "late-and-broken-s0.jsonl"]


# ------------------------------------------------ compile --check / --max-errors

def test_compile_check_of_a_folder_never_written_says_so_in_one_line(ws: Path) -> None:
    """`compile --check` before any compile listed every file the folder should hold
    (world.json, each prompt, topology.dot, topology.svg: 60 prompts for F1)."""
    code, out = eairc("compile", "--check", "worlds/first_world.eair", "-o", "nowhere")
    assert code == 1
    [line] = [ln for ln in out.splitlines() if "is stale" in ln]
    assert line == ("worlds/first_world.eair: nowhere/first_world is stale: the whole folder "
                    "(it does not exist)")
    assert not (ws / "nowhere").exists()  # --check writes nothing
    assert eairc("compile", "worlds/first_world.eair", "-o", "nowhere")[0] == 0
    assert eairc("compile", "--check", "worlds/first_world.eair", "-o", "nowhere")[0] == 0


@pytest.mark.parametrize("command", ["check", "compile"])
def test_a_negative_max_errors_is_a_usage_error(ws: Path, command: str) -> None:
    """`eairc check BROKEN --max-errors -1` printed no diagnostic and "... and 2 more"
    for a file with one error (the limit sliced from the end)."""
    (ws / "broken.eair").write_text("world x {", encoding="utf-8")
    code, out = eairc(command, "broken.eair", "--max-errors", "-1")
    assert code == 2
    assert "--max-errors" in out and "and 2 more" not in out
    code, out = eairc(command, "broken.eair", "--max-errors", "0")
    assert code == 1 and "... and 1 more" in out


# ------------------------------------------------ symbolic link loops

def _loop(at: Path) -> None:
    """Make `at` one end of a two-link loop (at -> at.other -> at)."""
    other = at.with_name(at.name + ".other")
    other.symlink_to(at.name)
    at.symlink_to(other.name)


def test_a_world_file_that_is_a_symlink_loop_is_a_located_error(ws: Path) -> None:
    """`eairc check LOOP.eair` (and run, diff, graph, compile_world) was "internal error:
    RuntimeError: Symlink loop from '/abs/path'", exit 3."""
    _loop(ws / "loop.eair")
    for command in (["check", "loop.eair"], ["compile", "loop.eair"],
                    ["run", "loop.eair", "--episodes", "1"], ["graph", "loop.eair"],
                    ["diff", "loop.eair", "worlds/first_world.eair"]):
        code, out = eairc(*command)
        assert code == 1, (command, out)
        assert "error[E202]: cannot read 'loop.eair': its symbolic links form a loop" in out
        assert "internal error" not in out and str(ws) not in out
    [error] = compile_world("loop.eair").diagnostics.errors
    assert error.code == "E202"


@pytest.mark.parametrize(("link", "shown"), [
    ("first_world/orders.json", "first_world/orders.json"),  # a record's data file
    ("first_world/desk.md.j2", "first_world/desk.md.j2"),  # a card
])
def test_a_data_file_or_card_that_loops_is_not_said_to_escape(ws: Path, link: str,
                                                              shown: str) -> None:
    """A looping data file or card inside the world's folder was reported as E204
    "escapes the world's folder", which sent the user looking for a path outside."""
    (ws / "worlds" / link).unlink()
    _loop(ws / "worlds" / link)
    result = compile_world("worlds/first_world.eair")
    assert {d.code for d in result.diagnostics.errors} == {"E202"}
    assert all(d.message == f"cannot read {shown!r}: its symbolic links form a loop"
               for d in result.diagnostics.errors)


def test_an_import_or_partial_that_loops(ws: Path) -> None:
    """An import that loops was E204 "escapes"; a `{% include %}`d partial that loops was
    E601 "RuntimeError: Symlink loop from '/abs/path/p.md'"."""
    world = ws / "worlds" / "first_world.eair"
    text = world.read_text(encoding="utf-8")
    world.write_text(text.replace("world first_world {", 'import "shared.eair"\n'
                                  "world first_world {", 1), encoding="utf-8")
    _loop(ws / "worlds" / "shared.eair")
    [error] = compile_world(world).diagnostics.errors
    assert (error.code, error.message) == (
        "E202", "cannot read 'shared.eair': its symbolic links form a loop")
    world.write_text(text, encoding="utf-8")
    card = ws / "worlds" / "first_world" / "desk.md.j2"
    card.write_text(card.read_text(encoding="utf-8") + '{% include "p.md" %}\n',
                    encoding="utf-8")
    _loop(ws / "worlds" / "first_world" / "p.md")
    errors = compile_world(world).diagnostics.errors
    assert errors and all(d.code == "E601" for d in errors)
    assert all("p.md (its symbolic links form a loop)" in d.message for d in errors)
    assert not any("RuntimeError" in d.message or str(ws) in d.message for d in errors)


# ------------------------------------------------ compile: what is in the way of the output

def test_compile_refuses_a_file_where_the_world_folder_goes(ws: Path) -> None:
    """With a file at generated/first_world, `eairc compile` renamed it aside, wrote the
    folder, then failed removing the renamed file: "cannot write generated: Not a
    directory", exit 1 for output that had been written, a stray .first_world.old-PID
    file, and no .last."""
    (ws / "generated").mkdir()
    (ws / "generated" / "first_world").write_text("mine\n", encoding="utf-8")
    code, out = eairc("compile", "worlds/first_world.eair")
    assert code == 1
    assert "generated/first_world is a file, not a folder" in out
    assert sorted(p.name for p in (ws / "generated").iterdir()) == ["first_world"]
    assert (ws / "generated" / "first_world").read_text(encoding="utf-8") == "mine\n"
    (ws / "generated" / "first_world").unlink()
    assert eairc("compile", "worlds/first_world.eair")[0] == 0
    assert eairc("compile", "worlds/first_world.eair")[0] == 0  # and over its own output
    assert sorted(p.name for p in (ws / "generated").iterdir()) == [".last", "first_world"]


def test_a_failed_swap_puts_the_earlier_output_back(ws: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """When the new folder could not be moved into place, the earlier output had already
    been renamed aside and was left there: generated/<world>/ was gone."""
    from eairdsl import compiler

    world = compile_world("worlds/first_world.eair").world
    assert world is not None
    compiler.write_generated(world, ws / "gen")
    before = (ws / "gen" / "first_world" / "world.json").read_bytes()
    real_rename = Path.rename

    def failing(self: Path, target: Path) -> Path:
        if ".tmp-" in self.name:
            raise OSError(28, "No space left on device")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(OSError, match="No space left"):
        compiler.write_generated(world, ws / "gen")
    monkeypatch.undo()
    assert (ws / "gen" / "first_world" / "world.json").read_bytes() == before
    assert sorted(p.name for p in (ws / "gen").iterdir()) == ["first_world"]


# ------------------------------------------------ fmt writes the whole file or nothing

def _unformatted(ws: Path) -> Path:
    world = ws / "worlds" / "first_world.eair"
    world.write_text(world.read_text(encoding="utf-8").replace("  risk A3", "risk    A3"),
                     encoding="utf-8")
    return world


def test_fmt_that_cannot_write_is_a_located_error_and_keeps_the_file(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`eairc fmt` on a file it could not write (immutable, read-only, a full disk) was
    "internal error: PermissionError ...", exit 3, and wrote in place: a write cut short
    left the world truncated."""
    import os

    world = _unformatted(ws)
    before = world.read_bytes()

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    code, out = eairc("fmt", "worlds/first_world.eair")
    assert code == 1
    assert "worlds/first_world.eair: error[E202]: cannot write worlds/first_world.eair: " \
        "No space left on device" in out
    assert "0 reformatted" in out
    assert world.read_bytes() == before
    assert sorted(p.name for p in world.parent.iterdir()) == ["first_world", "first_world.eair"]
    monkeypatch.undo()
    monkeypatch.chdir(ws)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False  # a read-only file
                        if Path(path).name == world.name and mode == os.W_OK
                        else real_access(path, mode, **kw))
    code, out = eairc("fmt", "worlds/first_world.eair")
    assert code == 1 and "the file is read-only" in out, out
    assert world.read_bytes() == before


def test_fmt_keeps_a_symlink_and_the_file_mode(ws: Path) -> None:
    """The atomic write goes to the link's target and keeps its permission bits."""
    world = _unformatted(ws)
    world.chmod(0o640)
    link = ws / "link.eair"
    link.symlink_to(world)
    code, out = eairc("fmt", "link.eair")
    assert code == 0 and "formatted link.eair" in out
    assert link.is_symlink()
    assert "  risk A3" in world.read_text(encoding="utf-8")
    assert world.stat().st_mode & 0o777 == 0o640
    assert eairc("fmt", "--check", "worlds/first_world.eair")[0] == 0


def test_fmt_check_with_nothing_to_check_here_fails(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`eairc fmt --check` run from a folder without worlds/ printed "0 file(s) checked"
    and exited 0, so a CI step in the wrong folder passed; check and compile say "no world
    given and no worlds/*.eair here" (exit 2)."""
    monkeypatch.chdir(tmp_path)
    for args in (["fmt", "--check"], ["fmt"]):
        code, out = eairc(*args)
        assert code == 2, out
        assert "error: no file given and no worlds/ or eairdsl/stdlib/ here" in out
    (tmp_path / "worlds").mkdir()
    shutil.copy(EXAMPLE / "first_world.eair", tmp_path / "worlds" / "w.eair")
    code, out = eairc("fmt", "--check")
    assert code == 0 and "1 file(s) checked, 0 need formatting" in out
