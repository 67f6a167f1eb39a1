"""The commands: ``cp`` (one object, or ``--recursive`` a prefix), ``cat`` and ``demo``;
each parses its arguments into settings and hands on to ``work``.

``work`` (and with it the engine, aiobotocore, aiohttp) is imported only when a command
is about to run, its arguments parsed: ``--help`` and a usage error print in a blink.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from . import clean as _clean  # noqa: F401 - registers asyncdl clean
from .app import Settings, cli, make_settings, timeout_option, transfer_options
from .destinations import dest_dir, dest_file
from .filter_options import FilteredCommand, filter_options, filters
from .output import Output, printable
from .params import (
    HttpUrl,
    RangeArg,
    S3Url,
    check_s3_url,
    converter,
    parse_range,
    parse_s3_url,
    parse_source,
)

_source = converter(parse_source)
_s3_url = converter(parse_s3_url)

#: cp checks the files it writes; cat and ``cp -`` the bytes of a whole object as they
#: pass (what is written cannot be taken back: a mismatch is the exit status).
_validate_option = click.option(
    "--validate",
    type=click.Choice(["when_available", "required", "off"]),
    default="when_available",
    show_default=True,
    help="Check S3's checksums when responses carry them, always (fail if not), or never.",
)


@cli.command(cls=FilteredCommand)
@click.argument("source", metavar="SOURCE", callback=_source)
@click.argument("dest")
@click.option(
    "-r",
    "--recursive",
    is_flag=True,
    help="Copy every object under the SOURCE prefix (s3://) into the directory DEST.",
)
@filter_options
@click.option(
    "--strategy",
    type=click.Choice(["auto", "get-first", "head-first"]),
    default="auto",
    show_default=True,
    help="How an object is discovered: a ranged GET first, or a HEAD first.",
)
@_validate_option
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Continue what an earlier, interrupted copy of the same object to the same file "
    "left (its partial file), fetching only the missing bytes; --no-resume discards such "
    "a partial file and starts over.",
)
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help="Print one JSON object per object to stdout (JSON Lines) instead of text.",
)
@timeout_option
@transfer_options
@click.pass_context
def cp(
    ctx: click.Context,
    *,
    source: S3Url | HttpUrl,
    dest: str,
    recursive: bool,
    dry_run: bool,
    exclude: tuple[str, ...],
    include: tuple[str, ...],
    strategy: str,
    validate: str,
    resume: bool,
    json_lines: bool,
    timeout: float | None,
    concurrency: int,
    chunk_size: int,
    max_bandwidth: int | None,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    no_sign_request: bool,
    read_timeout: float | None,
    connect_timeout: float | None,
    quiet: bool,
    no_progress: bool,
    debug: bool,
) -> int:
    """Copy an object, or with --recursive every object under a prefix, to files.

    \b
          asyncdl cp s3://BUCKET/KEY FILE     the object to FILE
          asyncdl cp s3://BUCKET/KEY DIR/     to DIR/<the key's last segment>
          asyncdl cp s3://BUCKET/KEY -        to stdout, as asyncdl cat
          asyncdl cp -r s3://BUCKET/PREFIX DIR
                                              every object under PREFIX/ to DIR/<rest of key>
          asyncdl cp -r --exclude '*' --include '*.csv' s3://BUCKET/PREFIX DIR
                                              only the .csv files (the last filter that
                                              matches a key wins)
          asyncdl cp 'https://HOST/PATH?...' FILE
                                              a presigned (or any http/https) URL, the same
                                              way; no credentials are sent, and the URL's
                                              query is never printed

    A file is replaced atomically, only once every byte is in; on failure it is
    left as it was. A recursive copy creates DIR (in an existing directory).
    An interrupted copy (failed, Ctrl-C, killed) leaves a partial file beside the
    target, .NAME.asyncdl-partial, which the next copy continues (asyncdl clean
    removes old ones). --recursive ends with a summary line on stderr.
    """
    del exclude, include  # in command-line order in ctx.meta
    if filters(ctx) and not recursive:
        raise click.UsageError("--exclude and --include apply only with --recursive", ctx=ctx)
    settings = make_settings(
        concurrency=concurrency,
        chunk_size=chunk_size,
        max_bandwidth=max_bandwidth,
        validate=validate,
        endpoint_url=endpoint_url,
        region=region,
        profile=profile,
        no_sign_request=no_sign_request,
        read_timeout=read_timeout,
        connect_timeout=connect_timeout,
        timeout=timeout,
        quiet=quiet,
        no_progress=no_progress,
        debug=debug,
        resume=resume,
    )
    if isinstance(source, HttpUrl):
        if recursive:
            raise click.UsageError("--recursive needs an s3:// prefix, not a URL", ctx=ctx)
        if ctx.get_parameter_source("strategy") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--strategy does not apply to a URL (always GET first)", ctx=ctx)
    if dest == "-":
        if recursive:
            raise click.UsageError("--recursive cannot write to stdout ('-')", ctx=ctx)
        if ctx.get_parameter_source("strategy") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--strategy does not apply to stdout ('-')", ctx=ctx)
        if json_lines:
            raise click.UsageError("--json cannot share stdout ('-') with the object", ctx=ctx)
        if dry_run:
            raise click.UsageError("--dry-run does not apply to stdout ('-')", ctx=ctx)
        return _cat(settings, source, ctx)
    if recursive and isinstance(source, S3Url):  # a URL was refused above
        return _copy_prefix(
            ctx, settings, source, dest, strategy=strategy, dry_run=dry_run, json_lines=json_lines
        )
    target = dest_file(source, dest, ctx)
    if dry_run:
        # As the AWS CLI's: what would be done, and nothing sent.
        _check_url(source, ctx)
        click.echo(printable(f"(dryrun) download: {source} to {target}"))
        return 0
    with _engine_imports():
        from .work import copy_one, run  # noqa: PLC0415 - see the module's docstring
    _check_url(source, ctx)
    _check_profile(settings, ctx)
    output = Output(objects=1, quiet=quiet, json_lines=json_lines, debug=debug, bar=settings.bar)
    with output:
        run(copy_one(settings, source, target, strategy, output), debug)
    return output.summary()


def _copy_prefix(
    ctx: click.Context,
    settings: Settings,
    source: S3Url,
    dest: str,
    *,
    strategy: str,
    dry_run: bool,
    json_lines: bool,
) -> int:
    root = dest_dir(dest, ctx)
    with _engine_imports():
        from .sync_work import SyncJob, sync_prefix  # noqa: PLC0415 - see the module's docstring
        from .work import copy_prefix, run  # noqa: PLC0415
    _check_url(source, ctx)
    _check_profile(settings, ctx)

    # "s3://b/logs" means the folder logs/, as "cp -r logs" would: without the
    # slash the prefix would also match logs2/ and land it as DEST/2/... .
    prefix = source.key if not source.key or source.key.endswith("/") else source.key + "/"
    output = Output(
        objects=None,
        quiet=settings.quiet,
        json_lines=json_lines,
        debug=settings.debug,
        bar=settings.bar,
        run="cp",
        dry_run=dry_run,
    )
    with output:
        if dry_run:
            # sync's dry run, with nothing skipped and nothing to delete.
            job = SyncJob(source.bucket, prefix, root, None, filters(ctx), False, True)
            complete, _ = run(sync_prefix(settings, job, output), settings.debug)
        else:
            work = copy_prefix(
                settings,
                source.bucket,
                prefix,
                root,
                strategy=strategy,
                output=output,
                filters=filters(ctx) or None,
            )
            complete = run(work, settings.debug)
    if output.done == 0 and complete:
        output.note(f"no objects under s3://{source.bucket}/{prefix}")
    return output.summary(complete=complete)


def _ranges(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[RangeArg, ...]:
    parse = converter(parse_range)
    return tuple(r for value in values if (r := parse(ctx, param, value)) is not None)


@cli.command()
@click.argument("source", metavar="SOURCE", callback=_source)
@click.option(
    "--range",
    "ranges",
    metavar="FIRST-LAST",
    multiple=True,
    callback=_ranges,
    help="Only these bytes, as HTTP's Range: 100-199 is bytes 100 to 199, both "
    "included; 100- to the end; -50 the last 50 (s3:// only: a HEAD tells the size). "
    "Repeat it: the ranges are printed in the order given, all from one version of "
    "the object, joined into few GETs.",
)
@_validate_option
@transfer_options
@click.pass_context
def cat(
    ctx: click.Context,
    *,
    source: S3Url | HttpUrl,
    ranges: tuple[RangeArg, ...],
    validate: str,
    concurrency: int,
    chunk_size: int,
    max_bandwidth: int | None,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    no_sign_request: bool,
    read_timeout: float | None,
    connect_timeout: float | None,
    quiet: bool,
    no_progress: bool,
    debug: bool,
) -> int:
    """Write the object s3://BUCKET/KEY (or what an http/https URL serves) to stdout.

    Parts are fetched in parallel, a few ahead of what stdout has taken. The bytes
    are checked against S3's checksum as they pass (--validate): a mismatch, or a
    download that fails midway, exits 1 after the bytes already written.

    With --range, only those bytes (ranged answers carry no checksum to check).
    """
    settings = make_settings(
        concurrency=concurrency,
        chunk_size=chunk_size,
        max_bandwidth=max_bandwidth,
        validate=validate,
        endpoint_url=endpoint_url,
        region=region,
        profile=profile,
        no_sign_request=no_sign_request,
        read_timeout=read_timeout,
        connect_timeout=connect_timeout,
        quiet=quiet,
        no_progress=no_progress,
        debug=debug,
    )
    return _cat(settings, source, ctx, ranges)


def _cat(
    settings: Settings,
    source: S3Url | HttpUrl,
    ctx: click.Context,
    ranges: tuple[RangeArg, ...] = (),
) -> int:
    if isinstance(source, S3Url) and not source.key:
        raise click.UsageError(f"{source} names no object")
    with _engine_imports():
        from .work import cat_object  # noqa: PLC0415 - see the module's docstring
    _check_url(source, ctx)
    _check_profile(settings, ctx)
    if ranges:
        from .cat_ranges import cat_ranges, check_ranges  # noqa: PLC0415 - as work

        check_ranges(source, ranges)
        return cat_ranges(settings, source, ranges)
    return cat_object(settings, source)


@contextmanager
def _engine_imports() -> Iterator[None]:
    """Around the first import of ``work`` and the engine's stack behind it: several
    hundred modules whose objects live until the command exits.

    The garbage collector would scan them over and over while they load, and again at
    every later collection, for nothing: it is paused while they load, and they are then
    frozen (``gc.freeze``) out of its sight. A ``cp`` of one small object spent 0.1 s of
    CPU collecting before, 0.03 s after. Once per process: an application that runs the
    command in-process has its objects of that moment frozen too, and no more.
    """
    if f"{__package__}.work" in sys.modules:  # imported already (a second run in-process)
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _check_url(source: S3Url | HttpUrl, ctx: click.Context) -> None:
    """The engine's rules for the bucket and key (see ``check_s3_url``), as a bad SOURCE."""
    if isinstance(source, HttpUrl):
        return  # the engine checks it before it sends anything
    try:
        check_s3_url(source)
    except ValueError as exc:
        param = next(param for param in ctx.command.params if param.name == "source")
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _check_profile(settings: Settings, ctx: click.Context) -> None:
    """A ``--profile`` that neither AWS config file has, as a bad option: found before
    any file is touched or request sent (the client would find it only once the run
    had begun). The files are read as botocore reads them (``AWS_CONFIG_FILE``,
    ``AWS_SHARED_CREDENTIALS_FILE``)."""
    profile = settings.client.profile
    if profile is None:
        return
    # botocore is loaded by now (the engine's imports).
    from botocore.exceptions import BotoCoreError, ProfileNotFound  # noqa: PLC0415
    from botocore.session import Session  # noqa: PLC0415

    session = Session(profile=profile)
    param = next(param for param in ctx.command.params if param.name == "profile")
    try:
        session.get_scoped_config()
    except ProfileNotFound:
        files = " nor ".join(
            repr(str(session.get_config_variable(name)))
            for name in ("config_file", "credentials_file")
        )
        raise click.BadParameter(
            f"no profile {profile!r} in {files}", ctx=ctx, param=param
        ) from None
    except BotoCoreError as exc:  # a file that cannot be parsed
        raise click.BadParameter(
            f"the AWS config files cannot be read: {exc}", ctx=ctx, param=param
        ) from None


@cli.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def demo(ctx: click.Context) -> int:
    """The main job: an embedded moto S3, a sample set, both strategies, one table.

    Options: asyncdl demo --help. Needs the 'demo' extra (moto).
    """
    from .. import demo as demo_job  # noqa: PLC0415 - moto is needed by this command only

    demo_job.main(ctx.args)  # exits 130 itself on Ctrl-C (143 on SIGTERM), 2 on a bad option
    return 0
