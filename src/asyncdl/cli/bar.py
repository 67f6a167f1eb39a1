"""The progress bar on a terminal: one rich ``Progress`` line, objects done and bytes,
the speed, the time so far and, once the total is known, the time left.

A module of its own so that rich (about 50 ms to import) is imported only when a bar
is drawn: ``output`` imports this module then, not when the command starts.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class Bar:
    """The bar on stderr, and the way to print a line above it."""

    def __init__(self, description: str) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            # Lines printed while the bar runs go through print_line, which puts
            # them above it; redirecting stdout would move results to stderr.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._progress.add_task(description, total=None)

    def start(self) -> None:
        self._progress.start()

    def stop(self, *, full: bool) -> None:
        """Stop drawing; ``full``: a bar without a total (a listing's) ends full, not
        pulsing."""
        if full:
            task = self._progress.tasks[0]
            elapsed = task.elapsed
            # A new total resets rich's speed samples (the finished line read "?"): the
            # line that stays shows the run's average speed instead.
            self._progress.update(self._task, total=task.total or task.completed)
            if elapsed:
                task.finished_speed = task.completed / elapsed
        self._progress.stop()

    def advance(self, delta: int, total: int | None) -> None:
        self._progress.update(self._task, advance=delta, total=total)

    def set_total(self, total: int) -> None:
        """The bytes to reach, as the listing learns them page by page."""
        task = self._progress.tasks[0]
        if total != task.total:
            # Set on the task itself: rich's update(total=...) would also drop the speed
            # samples at each page of the listing, and the speed and ETA would read "?".
            task.total = total

    def describe(self, description: str) -> None:
        self._progress.update(self._task, description=description)

    def out(self, text: str) -> None:
        """A line above the bar (through the bar's console: stderr)."""
        self._progress.console.out(text, highlight=False)
