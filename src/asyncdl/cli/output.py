"""What the command line prints: one line per result, errors, a summary, a progress bar.

stdout carries results only (``download: ...`` lines, or JSON Lines with ``--json``),
so it can be piped; errors, the summary and the progress bar go to stderr. The bar
is drawn only when stderr is a terminal (and not ``--quiet``): in a pipe or a log it
would be noise.
"""

from __future__ import annotations

import json
import sys
import traceback
from types import TracebackType
from typing import IO, Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from ..results import DownloadResult


def result_json(result: DownloadResult) -> dict[str, Any]:
    """One ``--json`` line: the result's fields, the error as its type and message."""
    error = result.error
    return {
        "ok": result.ok,
        "bucket": result.bucket,
        "key": result.key,
        "path": str(result.path),
        "size": result.size,
        "etag": result.etag,
        "strategy": result.strategy,
        "requests": result.requests,
        "checksum": result.checksum,
        "verified": result.verified,
        "unverified_reason": result.unverified_reason,
        "error": None if error is None else {"type": type(error).__name__, "message": str(error)},
    }


def print_error(error: BaseException, *, debug: bool) -> None:
    """``error: <message>`` on one line; with ``--debug``, the traceback and its causes."""
    if debug:
        click.echo("".join(traceback.format_exception(error)).rstrip(), err=True)
    click.echo(f"error: {error}", err=True)


class Output:
    """Counts results and prints them as they finish; the progress bar while open.

    ``objects`` is the number of objects expected, or ``None`` while a listing is
    still finding them.
    """

    def __init__(
        self,
        *,
        objects: int | None,
        quiet: bool = False,
        json_lines: bool = False,
        debug: bool = False,
        bar: bool | None = None,
    ) -> None:
        self.objects = objects
        self.quiet = quiet
        self.json_lines = json_lines
        self.debug = debug
        self.done = 0
        self.failed = 0
        if bar is None:
            bar = not quiet and sys.stderr.isatty()
        self._progress: Progress | None = None
        self._task = TaskID(0)
        if bar:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeElapsedColumn(),
                console=Console(file=sys.stderr),
                # Lines printed while the bar runs go through print_line, which puts
                # them above it; redirecting stdout would move results to stderr.
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._progress.add_task(self._objects_text(), total=None)

    def __enter__(self) -> Output:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is None:
            return
        if exc is None:  # a bar without a total (a listing's) ends full, not pulsing
            task = self._progress.tasks[0]
            self._progress.update(self._task, total=task.total or task.completed)
        self._progress.stop()

    @property
    def bar_shown(self) -> bool:
        return self._progress is not None

    def progress(self, delta: int, total: int) -> None:
        """The engine's progress callback: bytes written (negative: discarded)."""
        if self._progress is None:
            return
        # One object's total is the bar's total; with many, the listing has not told
        # us theirs, so the bar counts bytes without one.
        self._progress.update(self._task, advance=delta, total=total if self.objects == 1 else None)

    def finished(self, result: DownloadResult) -> None:
        """One object done: its line (or JSON), and its error on stderr."""
        if self.json_lines:
            self.print_line(json.dumps(result_json(result)), sys.stdout)
        elif result.error is None and not self.quiet:
            where = f"s3://{result.bucket}/{result.key}"
            self.print_line(f"download: {where} to {result.path}", sys.stdout)
        self.count(result.error)

    def count(self, error: BaseException | None) -> None:
        """One object done, printing nothing but its error (``cat`` has no result line)."""
        self.done += 1
        if error is not None:
            self.failed += 1
            self.error(error)
        if self._progress is not None:
            self._progress.update(self._task, description=self._objects_text())

    def error(self, error: BaseException) -> None:
        if self._progress is None:
            print_error(error, debug=self.debug)
            return
        # Through the bar's console (stderr), so the line lands above the bar.
        if self.debug:
            trace = "".join(traceback.format_exception(error)).rstrip()
            self._progress.console.out(trace, highlight=False)
        self._progress.console.out(f"error: {error}", highlight=False)

    def note(self, text: str) -> None:
        """A remark for the person at the terminal (stderr; silenced by ``--quiet``)."""
        if not self.quiet:
            self.print_line(text, sys.stderr)

    def print_line(self, text: str, stream: IO[str]) -> None:
        if self._progress is not None and stream.isatty():
            # The same terminal as the bar: print above it, not through it.
            self._progress.console.out(text, highlight=False)
        else:
            click.echo(text, file=stream)

    def summary(self, *, complete: bool = True) -> int:
        """Print the failures' count if any; return the exit status (0 or 1).

        ``complete`` is False when a listing failed before it found every object.
        """
        if not self.failed and complete:
            return 0
        if complete:
            click.echo(f"{self.failed} of {self.done} objects failed", err=True)
        else:
            click.echo(
                f"the listing failed after {self.done} objects ({self.failed} failed)", err=True
            )
        return 1

    def _objects_text(self) -> str:
        total = "?" if self.objects is None else str(self.objects)
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.done}/{total} objects{failed}"
