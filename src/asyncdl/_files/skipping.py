"""``skip_existing`` (``download_prefix``, ``asyncdl sync``, ``asyncdl.dask``): whether a
target already holds the listed object, decided from the file and its record (see
``file_records``) with no request sent; and the record written after a download.
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from . import quick_io
from .file_records import EtagStore, bare_etag, logger, opened_in

if TYPE_CHECKING:
    from ..results import DownloadResult
    from .held_dirs import HeldDir


def should_skip(
    store: EtagStore,
    target: Path,
    mode: str,
    size: int | None,
    etag: str | None,
    *,
    dir_fd: int | None = None,
) -> bool:
    """Whether ``target`` already holds the listed object, per ``mode``; no request made.

    ``"size"``: the file exists with the listed size (a row without a size is
    downloaded). ``"etag"``: besides, a record made when the file was written holds
    the listed ETag (a row without an ETag, or a file without a record, is
    downloaded), or the object is listed as empty (``dir_fd``: see :func:`opened_in`).
    """
    try:
        st = os.stat(target if dir_fd is None else target.name, dir_fd=dir_fd)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if size is not None and st.st_size != size:
        return False
    if mode == "size":
        return size is not None
    if size == 0:
        # An empty object's bytes cannot differ, and S3 may answer an empty
        # object's download without an ETag to record.
        return True
    if etag is None:
        return False
    try:
        with opened_in(target, dir_fd) as file:
            recorded = store.recorded(target, st, file)
    except OSError:
        return False  # a link at its name, say: downloaded, and replaced
    return recorded is not None and recorded == bare_etag(etag)


class Skips:
    """``skip_existing`` for one run on an event loop: the decision before a download,
    the record after it. Nothing here sends a request."""

    def __init__(self, dest_dir: Path, mode: str) -> None:
        self.store = EtagStore(dest_dir)
        self.mode = mode

    async def load(self) -> None:
        # The sidecar may be long (one line per file ever written): read it once,
        # off the loop, rather than on it at the first file without an xattr.
        await asyncio.get_running_loop().run_in_executor(None, self.store.load)

    async def skips(
        self, target: Path, size: int | None, etag: str | None, where: HeldDir | None = None
    ) -> bool:
        """Whether ``target`` (in ``where``, if held open) is skipped."""
        dir_fd = None if where is None else where.fd
        return await quick_io.QUICK_IO.call(
            should_skip, self.store, target, self.mode, size, etag, dir_fd=dir_fd
        )

    async def remember(self, result: DownloadResult, where: HeldDir | None = None) -> None:
        await remember(self.store, result, where)

    def close(self) -> None:
        self.store.close()


async def remember(store: EtagStore, result: DownloadResult, where: HeldDir | None = None) -> None:
    """Record the ETag a download wrote its file at (in ``where``, its directory held
    open, if given), for a later run's skip; a record that cannot be written is a
    warning (the file is right, a later run fetches it)."""
    if not result.ok or result.skipped:
        return
    try:
        # A stat and an xattr write: on the loop while that is quick. A download the
        # server sent no ETag for is recorded too (``sync --delete`` needs to know
        # asyncdl wrote it), with an ETag that no listing's matches.
        await quick_io.QUICK_IO.call(
            functools.partial(
                store.record,
                bucket=result.bucket,
                key=result.key,
                dir_fd=None if where is None else where.fd,
            ),
            result.path,
            result.etag or "",
        )
    except OSError as exc:
        logger.warning("could not record the ETag of %s: %s", result.path, exc)
