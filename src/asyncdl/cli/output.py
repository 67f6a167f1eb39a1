"""What the command line prints: one line per result, errors, a summary, a progress bar.

stdout carries results only (``download: ...`` lines, or JSON Lines with ``--json``),
so it can be piped; errors, the summary and the progress bar go to stderr. The bar
is drawn (by ``bar``) only when stderr is a terminal (and not ``--quiet``): in a pipe
or a log it would be noise.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..results import DownloadResult
    from ..stats import EngineStats
    from .bar import Bar


class ReaderGone(Exception):
    """stdout's reader went away (``| head``): the command (``cp``, ``sync``, ``cat``)
    stops, quietly, with status 1, as a Unix tool that SIGPIPE ends would."""


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail on
    the closed pipe with a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing will flush into a pipe


#: Characters a terminal acts on rather than shows: C0 controls, DEL, C1 controls
#: (CSI, OSC... as single bytes), the bidirectional overrides and isolates that
#: reorder what follows them, and lone surrogates: a local name's byte that is not
#: UTF-8 (0x9b, an 8-bit CSI) as the file system's names decode it, which stdout
#: writes back as that byte or fails on.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on escaped as ``repr`` does
    (``\\x1b``, ``\\n``, ``\\u202e``): names and records read from outside (a file
    name someone chose, a key, a record that came with a file) are shown, never
    obeyed."""
    return _CONTROLS.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def shown(result: DownloadResult) -> str:
    """Where the object came from: ``s3://bucket/key``, or the URL as shown (its
    ``key``, without the query)."""
    # As errors.source_name, which this module cannot import: --help must not load
    # botocore and aiohttp.
    return f"s3://{result.bucket}/{result.key}" if result.bucket else result.key


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
        # Only a skipped object's line says so (cp never skips: its lines are unchanged).
        **({"skipped": True} if result.skipped else {}),
        "checksum": result.checksum,
        "verified": result.verified,
        "unverified_reason": result.unverified_reason,
        "reused_bytes": result.reused_bytes,
        "partial_discarded": result.partial_discarded,
        "error": None if error is None else {"type": type(error).__name__, "message": str(error)},
    }


def print_error(error: BaseException, *, debug: bool) -> None:
    """``error: <message>`` on one line; with ``--debug``, the traceback and its causes."""
    if debug:
        click.echo("".join(traceback.format_exception(error)).rstrip(), err=True)
    click.echo(printable(f"error: {error}"), err=True)


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
        #: Files ``sync --delete`` could not delete: no object failed for them.
        self.undeleted = 0
        self._stats: EngineStats | None = None
        if bar is None:
            bar = not quiet and sys.stderr.isatty()
        self._bar: Bar | None = None
        if bar:
            from .bar import Bar  # noqa: PLC0415 - rich, imported only to draw a bar

            self._bar = Bar(self._objects_text())

    def __enter__(self) -> Output:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop(full=exc is None)

    @property
    def bar_shown(self) -> bool:
        return self._bar is not None

    def progress(self, delta: int, total: int) -> None:
        """The engine's progress callback: bytes written (negative: discarded)."""
        if self._bar is None:
            return
        # One object's total is the bar's total; with many, the listing has not told
        # us theirs, so the bar counts bytes without one.
        self._bar.advance(delta, total if self.objects == 1 else None)

    def finished(self, result: DownloadResult) -> None:
        """One object done: its line (or JSON), and its error on stderr."""
        if self.json_lines:
            self.print_line(json.dumps(result_json(result)), sys.stdout)
        elif result.error is None and not result.skipped and not self.quiet:
            where = shown(result)
            resumed = ""
            if result.reused_bytes:
                resumed = f" (resumed: {mib(result.reused_bytes)} were already here)"
            line = f"download: {where} to {result.path}{resumed}"
            self.print_line(printable(line), sys.stdout)
        if result.partial_discarded is not None and not self.json_lines:
            self.note(f"note: {shown(result)}: {result.partial_discarded}")
        self.count(result.error)

    def listed(self, objects: int, size: int) -> None:
        """The listing has ended (``download_prefix``'s ``listed``): ``objects`` is the
        total, ``size`` the bytes to fetch (the bar counted bytes without a total)."""
        self.objects = objects
        if self._bar is not None:
            self._bar.describe(self._objects_text())
            self._bar.advance(0, size)

    def all_listed(self) -> None:
        """The listing has ended and every object it named is done: their number is the
        total (the bar said ``N/?`` until now)."""
        self.objects = self.done
        if self._bar is not None:
            self._bar.describe(self._objects_text())

    def count(self, error: BaseException | None) -> None:
        """One object done, printing nothing but its error (``cat`` has no result line)."""
        self.done += 1
        if error is not None:
            self.failed += 1
            self.error(error)
        if self._bar is not None:
            self._bar.describe(self._objects_text())

    def not_deleted(self, error: BaseException) -> None:
        """A file that could not be deleted: its error, counted apart from objects."""
        self.undeleted += 1
        self.error(error)

    def error(self, error: BaseException) -> None:
        if self._bar is None:
            print_error(error, debug=self.debug)
            return
        # Through the bar (stderr), so the line lands above it.
        if self.debug:
            self._bar.out("".join(traceback.format_exception(error)).rstrip())
        self._bar.out(printable(f"error: {error}"))

    def stats(self, stats: EngineStats) -> None:
        """``--debug``: what the engine did, printed last by :meth:`summary`."""
        self._stats = stats

    def note(self, text: str) -> None:
        """A remark for the person at the terminal (stderr; silenced by ``--quiet``)."""
        if not self.quiet:
            self.print_line(printable(text), sys.stderr)

    def print_line(self, text: str, stream: IO[str]) -> None:
        """``text`` on ``stream``; on a stdout whose reader went away, ``ReaderGone``."""
        try:
            if self._bar is not None and stream.isatty():
                # The same terminal as the bar: print above it, not through it.
                self._bar.out(text)
            else:
                # Every caller's text is printable() or JSON: no escape sequence left to
                # strip, so click need not ask the stream if it is a terminal (a system
                # call per line, 1.7 of its 2.6 us).
                click.echo(text, file=stream, color=True)
        except BrokenPipeError:
            if stream is not sys.stdout:
                raise
            silence_stdout()
            raise ReaderGone from None

    def summary(self, *, complete: bool = True) -> int:
        """Print the failures' count if any; return the exit status (0 or 1).

        ``complete`` is False when a listing failed before it found every object.
        With ``--debug``, the engine's stats follow, the run's last lines.
        """
        try:
            return self._summary(complete)
        finally:
            for line in self._stats.lines() if self._stats is not None else ():
                click.echo(f"stats: {line}", err=True)

    def _summary(self, complete: bool) -> int:
        if not self.failed and not self.undeleted and complete:
            return 0
        if not complete:
            click.echo(
                f"the listing failed after {self.done} objects ({self.failed} failed)", err=True
            )
        elif self.failed:
            click.echo(f"{self.failed} of {self.done} objects failed", err=True)
        if self.undeleted:
            files = "file" if self.undeleted == 1 else "files"
            click.echo(f"could not delete {self.undeleted} {files}", err=True)
        return 1

    def _objects_text(self) -> str:
        total = "?" if self.objects is None else str(self.objects)
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.done}/{total} objects{failed}"


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
