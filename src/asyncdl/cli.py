"""The ``asyncdl`` command: ``cp``, ``cp --recursive``, ``cat`` and ``demo``.

Exit status: 0 when every object was downloaded, 1 when any failed (one
``error: s3://bucket/key: ...`` line each, then ``N of M objects failed``), 2 for a
usage error (one line; nothing sent, nothing on disk), 130 on Ctrl-C, 143 on
SIGTERM and 129 on SIGHUP (the running downloads are cancelled and their temp files
removed first; a signal inherited as ignored, as under ``nohup``, stays ignored; see
``interrupts``). Tracebacks only with ``--debug``. Needs the ``cli`` extra:
``pip install 'asyncdl[cli]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

try:
    import click
    import rich  # noqa: F401 - checked here so a missing extra fails with one clear line
except ModuleNotFoundError as missing:  # pragma: no cover - depends on the install
    raise SystemExit(
        f"asyncdl: the command line needs the 'cli' extra ({missing.name} is not installed): "
        "pip install 'asyncdl[cli]'"
    ) from None

from . import __version__, interrupts
from .bulk import failed
from .cli_output import Output, print_error
from .cli_params import S3Url, converter, parse_endpoint_url, parse_s3_url, parse_size
from .clients import create_default_client
from .config import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, TransferConfig
from .engine import Engine
from .errors import DownloadError, InvalidRequestError

#: Exit status after Ctrl-C, as shells report a process ended by SIGINT.
INTERRUPTED = 130

_Command = TypeVar("_Command", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Settings:
    config: TransferConfig
    endpoint_url: str | None
    quiet: bool
    debug: bool


class _Cli(click.Group):
    """click's group, with asyncdl's exit statuses and one-line usage errors."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        # click's standalone mode prints usage errors as three lines with the usage
        # synopsis and turns Ctrl-C into status 1; run it non-standalone and decide here.
        try:
            status = super().main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            status = exc.exit_code
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            status = exc.exit_code
        except click.ClickException as exc:
            exc.show()
            status = exc.exit_code
        except click.Abort:  # Ctrl-C outside a download (while parsing, say)
            status = INTERRUPTED
        if not standalone_mode:
            return status
        sys.exit(status if isinstance(status, int) else 0)


@click.group(cls=_Cli, name="asyncdl")
@click.version_option(version=__version__, prog_name="asyncdl")
def cli() -> None:
    """Download objects from S3 and S3-compatible stores.

    Credentials, region and endpoint come from the standard AWS environment and
    config files (AWS_ENDPOINT_URL_S3, AWS_PROFILE, ...); --endpoint-url overrides
    the endpoint.

    Exit status: 0 success, 1 some object failed, 2 usage error, 130 Ctrl-C,
    143 SIGTERM (both cancel the downloads and remove their temp files first).
    """


_s3_url = converter(parse_s3_url)


def _chunk_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    size = converter(parse_size)(ctx, param, value)
    assert size is not None  # the option has a default
    if not MIN_CHUNK_SIZE <= size <= MAX_CHUNK_SIZE:
        raise click.BadParameter(
            f"must be between 64KiB and 5GiB, got {size} bytes", ctx=ctx, param=param
        )
    return size


def _transfer_options(command: _Command) -> _Command:
    """The options every downloading command takes."""
    defaults = TransferConfig()
    options = [
        click.option(
            "--concurrency",
            type=click.IntRange(1, 10_000),
            default=defaults.max_concurrency,
            show_default=True,
            help="S3 requests in flight at most, all objects together.",
        ),
        click.option(
            "--chunk-size",
            metavar="SIZE",
            default="8MiB",
            show_default=True,
            callback=_chunk_size,
            help="Bytes per ranged GET: a number, or with a unit (64KiB, 8MiB, 1GB).",
        ),
        click.option(
            "--endpoint-url",
            metavar="URL",
            default=None,
            callback=converter(parse_endpoint_url),
            help="S3 endpoint (MinIO, moto, ...); default: the AWS environment's.",
        ),
        click.option(
            "-q", "--quiet", is_flag=True, help="No progress bar and no 'download:' lines."
        ),
        click.option("--debug", is_flag=True, help="Tracebacks for errors; log retries."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command()
@click.argument("source", metavar="S3_URL", callback=_s3_url)
@click.argument("dest")
@click.option(
    "-r",
    "--recursive",
    is_flag=True,
    help="Copy every object under the S3_URL prefix into the directory DEST.",
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "get-first", "head-first"]),
    default="auto",
    show_default=True,
    help="How an object is discovered: a ranged GET first, or a HEAD first.",
)
@click.option(
    "--validate",
    type=click.Choice(["when_available", "required", "off"]),
    default="when_available",
    show_default=True,
    help="Check S3's checksums when responses carry them, always (fail if not), or never.",
)
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help="Print one JSON object per object to stdout (JSON Lines) instead of text.",
)
@_transfer_options
@click.pass_context
def cp(
    ctx: click.Context,
    *,
    source: S3Url,
    dest: str,
    recursive: bool,
    strategy: str,
    validate: str,
    json_lines: bool,
    concurrency: int,
    chunk_size: int,
    endpoint_url: str | None,
    quiet: bool,
    debug: bool,
) -> int:
    """Copy an object, or with --recursive every object under a prefix, to files.

    \b
      asyncdl cp s3://BUCKET/KEY FILE     the object to FILE
      asyncdl cp s3://BUCKET/KEY DIR/     to DIR/<the key's last segment>
      asyncdl cp s3://BUCKET/KEY -        to stdout, as asyncdl cat
      asyncdl cp -r s3://BUCKET/PREFIX DIR
                                          every object under PREFIX/ to DIR/<rest of key>

    A file is replaced atomically, only once every byte is in; on failure it is
    left as it was. A recursive copy creates DIR (in an existing directory).
    """
    settings = _settings(
        concurrency=concurrency,
        chunk_size=chunk_size,
        validate=validate,
        endpoint_url=endpoint_url,
        quiet=quiet,
        debug=debug,
    )
    if dest == "-":
        if recursive:
            raise click.UsageError("--recursive cannot write to stdout ('-')", ctx=ctx)
        for name, flag in (("strategy", "--strategy"), ("validate", "--validate")):
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
                raise click.UsageError(f"{flag} does not apply to stdout ('-')", ctx=ctx)
        if json_lines:
            raise click.UsageError("--json cannot share stdout ('-') with the object", ctx=ctx)
        return _cat(settings, source)
    if recursive:
        root = _dest_dir(dest, ctx)
        # "s3://b/logs" means the folder logs/, as "cp -r logs" would: without the
        # slash the prefix would also match logs2/ and land it as DEST/2/... .
        prefix = source.key if not source.key or source.key.endswith("/") else source.key + "/"
        output = Output(objects=None, quiet=quiet, json_lines=json_lines, debug=debug)
        with output:
            complete = _run(
                _copy_prefix(
                    settings, source.bucket, prefix, root, strategy=strategy, output=output
                ),
                debug,
            )
        if output.done == 0 and complete:
            output.note(f"no objects under s3://{source.bucket}/{prefix}")
        return output.summary(complete=complete)
    target = _dest_file(source, dest, ctx)
    output = Output(objects=1, quiet=quiet, json_lines=json_lines, debug=debug)
    with output:
        _run(_copy_one(settings, source, target, strategy, output), debug)
    return output.summary()


@cli.command()
@click.argument("source", metavar="S3_URL", callback=_s3_url)
@_transfer_options
def cat(
    *,
    source: S3Url,
    concurrency: int,
    chunk_size: int,
    endpoint_url: str | None,
    quiet: bool,
    debug: bool,
) -> int:
    """Write the object s3://BUCKET/KEY to stdout.

    Parts are fetched in parallel, a few ahead of what stdout has taken. The bytes
    are not checked against S3's checksum (use cp for that); a download that fails
    midway exits 1 after the bytes already written.
    """
    settings = _settings(
        concurrency=concurrency,
        chunk_size=chunk_size,
        validate="off",
        endpoint_url=endpoint_url,
        quiet=quiet,
        debug=debug,
    )
    return _cat(settings, source)


@cli.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def demo(ctx: click.Context) -> int:
    """The main job: an embedded moto S3, a sample set, both strategies, one table.

    Options: asyncdl demo --help. Needs the 'demo' extra (moto).
    """
    from . import demo as demo_job  # noqa: PLC0415 - moto is needed by this command only

    demo_job.main(ctx.args)  # exits 130 itself on Ctrl-C (143 on SIGTERM), 2 on a bad option
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """The console script ``asyncdl``; ``argv`` defaults to ``sys.argv[1:]``."""
    cli.main(args=argv, prog_name="asyncdl")


# -- the work ------------------------------------------------------------------------


def _settings(
    *,
    concurrency: int,
    chunk_size: int,
    validate: str,
    endpoint_url: str | None,
    quiet: bool,
    debug: bool,
) -> Settings:
    try:
        config = TransferConfig(
            chunk_size=chunk_size, max_concurrency=concurrency, validate=validate
        )
    except ValueError as exc:  # the options' own checks should have caught it
        raise click.UsageError(str(exc)) from None
    return Settings(config, endpoint_url, quiet, debug)


def _dest_file(source: S3Url, dest: str, ctx: click.Context) -> Path:
    """Where one object goes: DEST, or DEST/<the key's last segment> if DEST is a
    directory (or ends with a separator, which says it must be one)."""
    if not source.key:
        raise click.UsageError(f"{source} names no object; use --recursive for a prefix", ctx=ctx)
    if source.key.endswith("/"):
        raise click.UsageError(f"{source} names a folder; use --recursive for it", ctx=ctx)
    target = Path(dest)
    if dest.endswith(("/", os.sep)) or target.is_dir():
        if not target.is_dir():
            raise click.UsageError(f"directory {dest!r} does not exist", ctx=ctx)
        target /= PurePosixPath(source.key).name
    # The engine checks the rest (writable, not a directory) before it sends anything.
    return target


def _dest_dir(dest: str, ctx: click.Context) -> Path:
    """A recursive copy's DEST: a directory, or one that can be made in an existing one
    (it is created when the first object is listed, so a failed listing leaves nothing)."""
    root = Path(dest)
    if root.exists() and not root.is_dir():
        raise click.UsageError(f"{dest!r} is not a directory", ctx=ctx)
    if not root.exists() and not root.absolute().parent.is_dir():
        raise click.UsageError(f"directory {str(root.absolute().parent)!r} does not exist", ctx=ctx)
    return root


@asynccontextmanager
async def _open_engine(settings: Settings) -> AsyncIterator[Engine]:
    async with AsyncExitStack() as stack:
        client = await create_default_client(
            stack, settings.config, endpoint_url=settings.endpoint_url
        )
        yield await stack.enter_async_context(Engine(client, config=settings.config))


async def _copy_one(
    settings: Settings, source: S3Url, target: Path, strategy: str, output: Output
) -> None:
    async with _open_engine(settings) as engine:
        try:
            result = await engine.download(
                source.bucket, source.key, target, strategy=strategy, progress=output.progress
            )
        except InvalidRequestError:
            raise  # bad input: a usage error, not a failed object
        except DownloadError as error:
            result = failed(source.bucket, source.key, target, error, strategy)
    output.finished(result)


async def _copy_prefix(
    settings: Settings, bucket: str, prefix: str, root: Path, *, strategy: str, output: Output
) -> bool:
    """Download the prefix; False if the listing failed before it finished."""
    async with _open_engine(settings) as engine:
        results = engine.download_prefix(
            bucket, prefix, root, strategy=strategy, progress=output.progress
        )
        try:
            async with contextlib.aclosing(results):
                async for result in results:
                    output.finished(result)
        except DownloadError as error:  # the listing itself failed
            output.error(error)
            return False
    return True


def _cat(settings: Settings, source: S3Url) -> int:
    if not source.key:
        raise click.UsageError(f"{source} names no object")
    stdout = sys.stdout.buffer
    # No bar when stdout is the terminal: the object's bytes and the bar would mix.
    output = Output(
        objects=1,
        quiet=settings.quiet,
        debug=settings.debug,
        bar=not settings.quiet and sys.stderr.isatty() and not stdout.isatty(),
    )
    with output:
        done = _run(_stream_to(settings, source, stdout, output), settings.debug)
    if not done:  # the reader went away (``| head``): nothing more to say
        return 1
    return output.summary()


async def _stream_to(settings: Settings, source: S3Url, sink: Any, output: Output) -> bool:
    """Copy the object into ``sink``; False if the sink's reader went away."""
    async with _open_engine(settings) as engine:
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
            output.count(error)
            return True
        except BrokenPipeError:
            _silence_stdout()
            return False
    output.count(None)
    return True


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail on
    the closed pipe with a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing will flush into a pipe


_Result = TypeVar("_Result")


def _run(work: Coroutine[Any, Any, _Result], debug: bool) -> _Result:
    """Run ``work`` on a fresh event loop.

    On Ctrl-C, SIGTERM or SIGHUP, ``work`` is cancelled and waited for: every
    download in flight is cancelled, its temp file removed and the client closed;
    then the command exits with 128 + the signal's number (130, 143, 129).
    """
    logger = logging.getLogger("asyncdl")
    level = logger.level
    handler = _debug_logging(logger) if debug else None
    try:
        return interrupts.run(work)
    except interrupts.Stopped as stop:
        raise click.exceptions.Exit(stop.exit_status) from None
    except InvalidRequestError as exc:
        raise click.UsageError(str(exc)) from None
    except DownloadError as exc:  # a failure outside any one object (opening the client)
        print_error(exc, debug=debug)
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


if __name__ == "__main__":
    main()
