"""What the command line prints: one line per result, errors, a summary, a progress bar.

stdout carries results only (``download: ...`` lines, or JSON Lines with ``--json``),
so it can be piped; errors, the summary and the progress bar go to stderr. The bar
is drawn (by ``bar``) only when stderr is a terminal (and not ``--quiet``): in a pipe
or a log it would be noise.

``cp -r`` and ``sync`` end with one line on stderr that says what the run did (see
:meth:`Output.summary_line`; ``--quiet`` alone hides it):

    2,000 downloaded (997.0 KiB) in 9.1 s, 0 failed
    sync: 1 downloaded (12 B), 1,999 up to date, 1 deleted in 0.4 s, 0 failed

and with ``--dry-run`` ``(dryrun) 3 to download (12 B) in 0.2 s, 0 failed``, ``(dryrun)
sync: 3 to download (12 B), 5 up to date, 1 to delete in 0.2 s, 0 failed``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
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
    _silence(sys.stdout)


def _silence(stream: IO[str]) -> None:
    """Point ``stream``'s descriptor at /dev/null (its reader is gone)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture)


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
    still finding them. ``run`` is ``"cp"`` or ``"sync"`` for a run that ends with a
    summary line (``dry_run``: one that only says what it would do), ``None`` for one
    that does not (one object, ``cat``).
    """

    def __init__(
        self,
        *,
        objects: int | None,
        quiet: bool = False,
        json_lines: bool = False,
        debug: bool = False,
        bar: bool | None = None,
        run: str | None = None,
        dry_run: bool = False,
    ) -> None:
        self.objects = objects
        self.quiet = quiet
        self.json_lines = json_lines
        self.debug = debug
        self.run = run
        self.dry_run = dry_run
        self.done = 0
        self.failed = 0
        #: Objects downloaded (or with ``dry_run``, that would be), and their bytes.
        self.downloaded = 0
        self.downloaded_bytes = 0
        #: Objects already there (``sync``): nothing sent for them.
        self.skipped = 0
        #: Files ``sync --delete`` removed (or would remove).
        self.deleted = 0
        #: Files ``sync --delete`` could not delete: no object failed for them.
        self.undeleted = 0
        #: What the listing has found so far (``listing``), and whether it has ended.
        self._listed: int | None = None
        self._listing_ended = False
        self._started = time.monotonic()
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
        # One object's total is the bar's total; with many, the listing's (``listing``).
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
        if result.skipped:
            self.skipped += 1
            if self._bar is not None and result.size:
                # The listing's byte total counts what is already there: so does the bar.
                self._bar.advance(result.size, None)
        elif result.error is None:
            self.downloaded += 1
            self.downloaded_bytes += result.size or 0
        self.count(result.error)

    def would_download(self, size: int) -> None:
        """``--dry-run``: one object the run would download, of ``size`` bytes."""
        self.downloaded += 1
        self.downloaded_bytes += size

    def listing(self, objects: int, size: int, ended: bool) -> None:
        """``download_prefix``'s ``listing``: ``objects`` listed so far, their bytes, and
        whether the listing has ended. The bar shows both totals from the first pages
        (``N+`` objects while the listing goes on), and with them an ETA."""
        self._listed = objects
        self._listing_ended = ended
        if self._bar is not None:
            self._bar.set_total(size)
            self._bar.describe(self._objects_text())

    def all_listed(self) -> None:
        """The listing has ended and every object it named is done: their number is the
        total."""
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
        """Print the failures' count if any, then (``cp -r``, ``sync``; not with
        ``--quiet``) the summary line; return the exit status (0 or 1).

        ``complete`` is False when a listing failed before it found every object.
        With ``--debug``, the engine's stats follow, the run's last lines.
        """
        try:
            return self._summary(complete)
        finally:
            if self.run is not None and not self.quiet:
                try:
                    click.echo(self.summary_line(), err=True)
                except BrokenPipeError:
                    # stderr's reader left: the line is lost, and the exit status
                    # still tells what the run did; no error at exit's flush either.
                    _silence(sys.stderr)
            for line in self._stats.lines() if self._stats is not None else ():
                click.echo(f"stats: {line}", err=True)

    def summary_line(self, seconds: float | None = None) -> str:
        """What the run did, in one line (the module's docstring shows its forms);
        ``seconds`` since the output was made unless given."""
        if seconds is None:
            seconds = time.monotonic() - self._started
        verb = "to download" if self.dry_run else "downloaded"
        fetched = f"{self.downloaded:,} {verb} ({human_size(self.downloaded_bytes)})"
        took = f"in {seconds:.1f} s, {self.failed:,} failed"
        if self.run == "sync":
            deleted = f"{self.deleted:,} {'to delete' if self.dry_run else 'deleted'}"
            line = f"sync: {fetched}, {self.skipped:,} up to date, {deleted} {took}"
        else:
            line = f"{fetched} {took}"
        return f"(dryrun) {line}" if self.dry_run else line

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
        if self.objects is not None:
            total = str(self.objects)
        elif self._listed is not None:
            total = f"{self._listed}{'' if self._listing_ended else '+'}"
        else:
            total = "?"
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.done}/{total} objects{failed}"


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_size(size: int) -> str:
    """``size`` bytes for people: ``"999 B"``, ``"1.0 KiB"``, ``"997.1 MiB"`` (powers of
    1024, one decimal)."""
    if abs(size) < 1024:
        return f"{size} B"
    value = float(size)
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
    return f"{value:.1f} {unit}"
