"""What the commands run once their arguments are parsed: an engine on a fresh event
loop, a copy of one object or a prefix, an object streamed to stdout; and how a run
that a signal stopped, or that failed outside any one object, ends."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import _interrupts as interrupts
from .._bulk.bulk import failed
from .._files import held_dirs, partial_paths, quick_io
from .._wire import url_session
from .._wire.clients import create_default_client
from ..engine import Engine
from ..errors import DownloadError, InvalidRequestError
from . import loops
from .app import Settings
from .output import Output, ReaderGone, print_error, silence_stdout
from .params import HttpUrl, S3Url

if TYPE_CHECKING:
    from ..results import DownloadResult

#: Generation 0's collection threshold while the command runs (Python's: 700). Each
#: object allocates a few hundred objects that die young by reference counting: a
#: collection every 700 net allocations walked the young ones again and again.
GEN0_THRESHOLD = 10_000


@contextlib.contextmanager
def tuned_collector() -> Iterator[None]:
    """The command's garbage collector while it downloads: the ~100,000 objects of
    the imports, the client and the engine, built by now and alive to the end, are
    frozen (never walked again by a collection of the oldest generation), and the
    youngest generation is collected less often. A process-wide setting, so the
    command's alone (the library never touches it), and put back when the run ends:
    a program that runs the command in-process keeps its own."""
    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count()
    # No collection first: it would cost tens of ms of start-up to free what is left
    # of the imports' garbage, which stays (frozen) until the run ends.
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if not frozen:  # unfreeze() cannot tell ours from theirs: with theirs, all stay
            gc.unfreeze()


class _NoS3Client:
    """What a command's engine holds for a URL instead of an S3 client: a URL needs none,
    and creating one (botocore's client stack) was most of such a command's start-up.
    It lends no HTTP session: the engine's own fetches the URL, set up as this client's
    would have been (``asyncdl._wire.url_session``)."""


@asynccontextmanager
async def _open_engine(
    settings: Settings, output: Output | None = None, *, source: S3Url | HttpUrl | None = None
) -> AsyncIterator[Engine]:
    """The command's engine, for ``source`` (``None``: S3 objects); with ``--debug``, its
    stats go to ``output`` as it closes (whatever the end: the numbers of a failed run
    are the interesting ones)."""
    async with AsyncExitStack() as stack:
        client: Any = _NoS3Client()
        if isinstance(source, HttpUrl) and settings.client.profile is None:
            # The AWS config read now, as the client's creation read it: a missing
            # profile or a broken file fails the command before anything is sent.
            await asyncio.to_thread(url_session.ca_bundle)
        else:
            # A URL with --profile goes through the client's HTTP session too: set up
            # from that profile (its ca_bundle), where the engine's own reads AWS_PROFILE.
            client = await create_default_client(
                stack, settings.config, **settings.client.arguments(), timestamps_as_text=True
            )
        engine = await stack.enter_async_context(Engine(client, config=settings.config))
        stack.enter_context(tuned_collector())
        try:
            yield engine
        finally:
            if settings.debug and output is not None:
                output.stats(engine.stats())


async def copy_one(
    settings: Settings, source: S3Url | HttpUrl, target: Path, strategy: str, output: Output
) -> None:
    if not settings.config.resume:
        await _discard_partial(target, output)
    async with _open_engine(settings, output, source=source) as engine:
        try:
            if isinstance(source, HttpUrl):
                result = await engine.download_url(
                    source.url, target, progress=output.progress, timeout=settings.timeout
                )
            else:
                result = await engine.download(
                    source.bucket,
                    source.key,
                    target,
                    strategy=strategy,
                    progress=output.progress,
                    timeout=settings.timeout,
                )
        except InvalidRequestError:
            raise  # bad input: a usage error, not a failed object
        except DownloadError as error:
            result = failed(error.bucket, error.key, target, error, strategy)
    output.finished(result)


async def copy_prefix(
    settings: Settings,
    bucket: str,
    prefix: str,
    root: Path,
    *,
    strategy: str,
    output: Output,
    keys: set[str] | None = None,
    **options: Any,
) -> bool:
    """Download the prefix (``options``: ``download_prefix``'s, as ``sync`` sets them;
    each result's key added to ``keys``); False if the listing failed before it
    finished."""
    async with _open_engine(settings, output) as engine:
        results = engine.download_prefix(
            bucket,
            prefix,
            root,
            strategy=strategy,
            progress=output.progress,
            listing=output.listing,
            timeout=settings.timeout,
            **options,
        )
        try:
            async with contextlib.aclosing(results):
                async for result in results:
                    if keys is not None:
                        keys.add(result.key)
                    if not (settings.config.resume or result.skipped) and _own_target(result, root):
                        await _discard_partial(result.path, output, root=root)
                    output.finished(result)
        except DownloadError as error:  # the listing itself failed
            output.error(error)
            return False
    output.all_listed()
    return True


def _own_target(result: DownloadResult, root: Path) -> bool:
    """Whether ``result`` is of a file of its own below ``root``: not a refused key (a
    key that cannot be a file there, whose result names ``root`` itself, or one whose
    place another key holds), for which nothing was downloaded, nor anything to discard."""
    return not isinstance(result.error, InvalidRequestError) and root in result.path.parents


class _Busy(Exception):
    pass


async def _discard_partial(target: Path, output: Output, *, root: Path | None = None) -> None:
    """``--no-resume``: an earlier copy's partial file of ``target`` goes (not one that a
    running download holds). A lookup per object: on the loop while file calls are
    quick, as the downloads' own (``quick_io``). ``root``: ``target`` is below it, and
    its directory is reached from there as the download's was (``held_dirs``: never
    through another user's link, which may have been put there since)."""
    with contextlib.suppress(_Busy, OSError):
        if await quick_io.QUICK_IO.call(_remove_partial, target, root):
            output.note(f"note: {str(target)!r}: discarded an earlier copy's partial file")


def _remove_partial(target: Path, root: Path | None) -> bool:
    if root is None or not held_dirs.SUPPORTED:
        return partial_paths.remove(target, _Busy)
    top = held_dirs.open_root(root, create=False)
    where = held_dirs.open_below(top, target.relative_to(root).parts[:-1], create=False)
    return partial_paths.remove(target, _Busy, dir_fd=where.fd)


def cat_object(settings: Settings, source: S3Url | HttpUrl) -> int:
    stdout = sys.stdout.buffer
    # No bar when stdout is the terminal: the object's bytes and the bar would mix.
    output = Output(
        objects=1,
        quiet=settings.quiet,
        debug=settings.debug,
        bar=settings.progress
        and not settings.quiet
        and sys.stderr.isatty()
        and not stdout.isatty(),
    )
    with output:
        run(_stream_to(settings, source, stdout, output), settings.debug)
    return output.summary()


async def _stream_to(
    settings: Settings, source: S3Url | HttpUrl, sink: Any, output: Output
) -> None:
    """Copy the object into ``sink``; ``ReaderGone`` if the sink's reader went away."""
    async with _open_engine(settings, output, source=source) as engine:
        if isinstance(source, HttpUrl):
            stream = engine.stream_url(source.url, progress=output.progress)
        else:
            stream = engine.stream(source.bucket, source.key, progress=output.progress)
        try:
            async with contextlib.aclosing(stream):
                async for piece in stream:
                    # In a thread: a slow reader of the pipe must not block the loop
                    # (and with it the parts still arriving).
                    await asyncio.to_thread(sink.write, piece)
            await asyncio.to_thread(sink.flush)
        except InvalidRequestError:
            raise
        except DownloadError as error:
            # The bytes before the failure (a checksum mismatch: all of them) go out
            # before the line that says they are not to be trusted.
            try:
                await asyncio.to_thread(sink.flush)
            except BrokenPipeError:
                silence_stdout()
            output.count(error)
            return
        except BrokenPipeError:
            silence_stdout()
            raise ReaderGone from None
    output.count(None)


_Result = TypeVar("_Result")


def run(work: Coroutine[Any, Any, _Result], debug: bool) -> _Result:
    """Run ``work`` on a fresh event loop.

    On Ctrl-C, SIGTERM or SIGHUP, ``work`` is cancelled and waited for: every
    download in flight is cancelled, its temp file removed and the client closed;
    then the command exits with 128 + the signal's number (130, 143, 129).
    """
    logger = logging.getLogger("asyncdl")
    level = logger.level
    try:
        loop = loops.choose()
    except click.UsageError:
        work.close()  # never started: no "never awaited" warning
        raise
    handler = _debug_logging(logger) if debug else None
    try:
        logger.info("event loop: %s", loop.name)
        return interrupts.run(work, loop.factory)
    except interrupts.Stopped as stop:
        raise click.exceptions.Exit(stop.exit_status) from None
    except InvalidRequestError as exc:
        raise click.UsageError(str(exc)) from None
    except DownloadError as exc:  # a failure outside any one object (opening the client)
        print_error(exc, debug=debug)
        raise click.exceptions.Exit(1) from None
    except ReaderGone:  # `| head`: what was in flight is cancelled, nothing is said
        raise click.exceptions.Exit(1) from None
    except Exception as exc:
        if debug:
            raise
        click.echo(
            f"error: unexpected {type(exc).__name__}: {exc} (--debug shows the traceback)",
            err=True,
        )
        raise click.exceptions.Exit(1) from None
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(level)


def _debug_logging(logger: logging.Logger) -> logging.Handler:
    """asyncdl's retries and other INFO lines on stderr, for this command only."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler
