"""The ``ls`` command: the buckets, or the objects and folders under an ``s3://``
prefix, as ``aws s3 ls`` and ``s5cmd ls`` list them; what it runs is in ``ls_work``,
imported only once the arguments are parsed (see ``commands``)."""

from __future__ import annotations

import click

from ..config import TransferConfig
from .app import cli, client_options, make_settings
from .commands import _check_profile, _check_url, _engine_imports
from .params import S3Url, converter, parse_s3_url


def _optional_s3_url(ctx: click.Context, param: click.Parameter, value: str | None) -> S3Url | None:
    return converter(parse_s3_url)(ctx, param, value)


@cli.command()
@click.argument("source", metavar="[S3_URL]", required=False, callback=_optional_s3_url)
@click.option(
    "-r",
    "--recursive",
    is_flag=True,
    help="Every object under the prefix, with its whole key (no folders).",
)
@click.option(
    "-H",
    "--human-readable",
    is_flag=True,
    help="Sizes in KiB, MiB, GiB... (powers of 1024) rather than bytes.",
)
@click.option(
    "--summarize",
    is_flag=True,
    help="End with the number of objects listed and their total size.",
)
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help="One JSON object per line: key, size, etag, last_modified, type (file, or "
    "directory for a folder).",
)
@client_options
@click.pass_context
def ls(
    ctx: click.Context,
    *,
    source: S3Url | None,
    recursive: bool,
    human_readable: bool,
    summarize: bool,
    json_lines: bool,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    no_sign_request: bool,
    read_timeout: float | None,
    connect_timeout: float | None,
    debug: bool,
) -> int:
    """List the objects under S3_URL, or with no S3_URL the buckets.

    \b
          asyncdl ls                              the buckets
          asyncdl ls s3://BUCKET/PREFIX/          objects and folders (PRE) in PREFIX/
          asyncdl ls -r s3://BUCKET/PREFIX        every object under PREFIX, whole keys

    As `aws s3 ls`: without --recursive, S3_URL's key is a prefix that the names
    shown continue (s3://BUCKET/logs/ lists the folder logs/; s3://BUCKET/lo lists
    what starts with lo), and a folder is a PRE line. Times are S3's, in UTC. Lines
    are printed page by page as the listing comes (1,000 keys a request): nothing is
    held but the page at hand.
    """
    settings = make_settings(
        concurrency=TransferConfig().max_concurrency,
        chunk_size=TransferConfig().chunk_size,
        max_bandwidth=None,
        validate="off",
        endpoint_url=endpoint_url,
        region=region,
        profile=profile,
        no_sign_request=no_sign_request,
        read_timeout=read_timeout,
        connect_timeout=connect_timeout,
        quiet=True,
        debug=debug,
    )
    with _engine_imports():
        from .ls_work import Listing, list_buckets, list_objects  # noqa: PLC0415 - see above
        from .work import run  # noqa: PLC0415
    if source is not None:
        _check_url(source, ctx)
    _check_profile(settings, ctx)
    listing = Listing(human=human_readable, json_lines=json_lines)
    if source is None:
        if recursive:
            raise click.UsageError("--recursive needs an s3:// URL", ctx=ctx)
        complete = run(list_buckets(settings, listing), debug)
    else:
        complete = run(list_objects(settings, source, recursive, listing), debug)
    if summarize and complete:
        listing.summarize()
    return 0 if complete else 1
