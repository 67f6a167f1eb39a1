"""Where ``cp`` and ``sync`` write: DEST checked and turned into a file or a directory
before anything is sent. A DEST that cannot be used is a usage error (exit 2), with
nothing sent or written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import click

from .._files.key_paths import is_own_name
from .params import HttpUrl, S3Url


@contextmanager
def _looking_at(dest: str, ctx: click.Context) -> Iterator[None]:
    """A DEST the file system will not look up (a name too long, a directory on the way
    that may not be searched): a usage error with the OS's reason, not a traceback."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise click.UsageError(f"{dest!r} cannot be used: {reason}", ctx=ctx) from None


def dest_file(source: S3Url | HttpUrl, dest: str, ctx: click.Context) -> Path:
    """Where one object goes: DEST, or DEST/<the key's (the URL path's) last segment>
    if DEST is a directory (or ends with a separator, which says it must be one)."""
    with _looking_at(dest, ctx):
        return _dest_file_looked_up(source, dest, ctx)


def _dest_file_looked_up(source: S3Url | HttpUrl, dest: str, ctx: click.Context) -> Path:
    target = Path(dest)
    # "d/." names a directory as "d/" does (Path would make it "d", perhaps a file).
    names_dir = dest.endswith(("/", os.sep)) or os.path.basename(dest) in (".", "..")
    into_dir = names_dir or target.is_dir()
    if isinstance(source, HttpUrl):
        if into_dir and source.name in ("", ".", ".."):
            raise click.UsageError(f"{source} names no file: give DEST a file name", ctx=ctx)
        name = source.name
    else:
        _check_key_names_a_file(source, ctx)
        name = PurePosixPath(source.key).name
    if into_dir:
        if not target.is_dir():
            raise click.UsageError(f"directory {dest!r} does not exist", ctx=ctx)
        if is_own_name(name):
            # A file DEST names is the user's to name; one named after the key would be
            # taken for asyncdl's own (a partial adopted by its target, say).
            raise click.UsageError(
                f"{source} is named like one of asyncdl's own files (a partial file, "
                "journal, temp file or record): give DEST a file name",
                ctx=ctx,
            )
        target /= name
    # The engine checks the rest (writable, not a directory) before it sends anything.
    return target


def _check_key_names_a_file(source: S3Url, ctx: click.Context) -> None:
    if not source.key:
        raise click.UsageError(f"{source} names no object; use --recursive for a prefix", ctx=ctx)
    if source.key.endswith("/"):
        raise click.UsageError(f"{source} names a folder; use --recursive for it", ctx=ctx)


def dest_dir(dest: str, ctx: click.Context) -> Path:
    """A recursive copy's DEST: a directory, or one that can be made in an existing one
    (it is created when the first object is listed, so a failed listing leaves nothing)."""
    root = Path(dest)
    with _looking_at(dest, ctx):
        if root.exists() and not root.is_dir():
            raise click.UsageError(f"{dest!r} is not a directory", ctx=ctx)
        parent = root.absolute().parent
        if not root.exists() and not parent.is_dir():
            raise click.UsageError(f"directory {str(parent)!r} does not exist", ctx=ctx)
    return root
