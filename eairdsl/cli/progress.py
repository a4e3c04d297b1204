"""Progress bars on stderr for `eairc study`, `audit` and `audit-study`.

The libraries only call back (`eairdsl.study.executor.StudyProgress`, the audit
runner's `progress`); drawing is the CLI's, so the library never prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eairdsl.study.grid import Attempt

__all__ = ["AuditBar", "StudyBar"]


class StudyBar:
    """`eairc study`'s progress: a rich bar over the grid's cells on stderr, with elapsed
    time, ETA and invalid/lost counts. The study library only calls back
    (`eairdsl.study.executor.StudyProgress`); rendering is the CLI's.

    Use it as a context manager around `run_study` (`with bar: run_study(..., progress=bar)`).
    """

    def __init__(self, console: Any = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.live = Progress(TextColumn("[bold]study"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("cells"), TimeElapsedColumn(), TextColumn("ETA"),
                             TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                             console=console)
        self.task = self.live.add_task("study", total=None, note="")
        self.invalid = self.lost_count = 0

    def __enter__(self) -> StudyBar:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def start(self, total: int, done: int, todo: int) -> None:
        if done:
            self.live.console.print(f"resuming: {done} of {total} cells already complete, "
                                    f"{todo} to run")
        self.live.update(self.task, total=total, completed=done)

    def _note(self) -> str:
        parts = []
        if self.invalid:
            parts.append(f"{self.invalid} invalid attempt(s)")
        if self.lost_count:
            parts.append(f"{self.lost_count} lost with a worker")
        return ", ".join(parts)

    def attempt(self, attempt: Attempt, result: dict[str, Any], cell_done: bool) -> None:
        if not result.get("valid"):
            self.invalid += 1
        self.live.update(self.task, advance=1 if cell_done else 0, note=self._note())

    def lost(self, attempt: Attempt, reason: str, requeued: bool) -> None:
        self.lost_count += 1
        self.live.update(self.task, note=self._note())


class AuditBar:
    """Progress of an audit on stderr (the audit library only calls back)."""

    def __init__(self, label: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
        self.task = self.progress.add_task(label, total=None)

    def __enter__(self) -> AuditBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, done: int, total: int, entry: Any) -> None:
        self.progress.update(self.task, completed=done, total=total)
