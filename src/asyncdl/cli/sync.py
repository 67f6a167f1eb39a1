"""The ``sync`` command: a prefix into a directory, fetching only what is new or
changed, and with ``--delete`` removing the files asyncdl wrote whose keys are gone.

``--exclude`` and ``--include`` act in the order they are given (the last that
matches wins, as in the AWS CLI; see ``filter_options``, which ``cp --recursive``
shares). What the command runs is in ``sync_work``, imported only once the arguments
are parsed (see ``commands``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import click

from .._files.key_paths import folder
from .app import cli, make_settings, timeout_option, transfer_options
from .commands import (
    _check_profile,
    _check_url,
    _engine_imports,
    _s3_url,
    _validate_option,
)
from .destinations import dest_dir
from .filter_options import FilteredCommand, filter_options, filters
from .output import Output
from .params import S3Url


@cli.command(cls=FilteredCommand)
@click.argument("source", metavar="S3_URL", callback=_s3_url)
@click.argument("dest", metavar="DIR")
@click.option("--delete", is_flag=True, help="Remove files asyncdl wrote whose keys are gone.")
@click.option(
    "--no-wait",
    is_flag=True,
    help="With --delete: fail at once if another sync --delete into DIR is running "
    "(by default this one waits for it to end).",
)
@filter_options
@click.option("--size-only", is_flag=True, help="An object is unchanged if its size is.")
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Continue the partial downloads an earlier run left; or start them over.",
)
@_validate_option
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help="Print one JSON object per object or removal to stdout (JSON Lines).",
)
@timeout_option
@transfer_options
@click.pass_context
def sync(
    ctx: click.Context,
    *,
    source: S3Url,
    dest: str,
    delete: bool,
    no_wait: bool,
    dry_run: bool,
    size_only: bool,
    exclude: Sequence[str],
    include: Sequence[str],
    resume: bool,
    validate: str,
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
    """Make DIR hold every object under S3_URL, fetching only what is new or changed.

    \b
          asyncdl sync s3://BUCKET/PREFIX DIR
          asyncdl sync --delete --exclude '*' --include '*.csv' s3://BUCKET/PREFIX DIR

    An object is downloaded again when its listed size or ETag differs from what
    asyncdl recorded when it wrote the file, or the file changed since. --delete
    removes only files asyncdl wrote there and nobody changed since; it leaves the
    rest and says so. Two --delete runs into one DIR never overlap: the second waits
    for the first to end (--no-wait: fails at once). DIR is created (in an existing
    directory) when needed.
    """
    del exclude, include  # in command-line order in ctx.meta
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
    )
    settings = dataclasses.replace(
        settings, config=dataclasses.replace(settings.config, resume=resume)
    )
    if no_wait and not delete:
        raise click.UsageError("--no-wait applies only with --delete", ctx=ctx)
    root = dest_dir(dest, ctx)
    with _engine_imports():
        from .sync_work import SyncJob, sync_prefix  # noqa: PLC0415 - see the docstring
        from .work import run  # noqa: PLC0415
    _check_url(source, ctx)
    _check_profile(settings, ctx)
    job = SyncJob(
        bucket=source.bucket,
        prefix=folder(source.key),
        root=root,
        mode="size" if size_only else "etag",
        filters=filters(ctx),
        delete=delete,
        dry_run=dry_run,
        wait=not no_wait,
    )
    output = Output(
        objects=None,
        quiet=quiet,
        json_lines=json_lines,
        debug=debug,
        bar=settings.bar,
        run="sync",
        dry_run=dry_run,
    )
    with output:
        complete, listed = run(sync_prefix(settings, job, output), debug)
    if listed == 0 and complete:
        output.note(f"no objects under s3://{job.bucket}/{job.prefix}")
    return output.summary(complete=complete)
