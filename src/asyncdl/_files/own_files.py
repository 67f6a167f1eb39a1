"""asyncdl's own directories beside the targets (the record sidecar, a Dask run's
journals), and the files in them: made private, trusted only when they are ours.

Such a directory sits in the destination, and a destination may be shared (a team
directory, ``/tmp``): whoever can write there can make the directory first, or put
links, FIFOs and devices in it. So it is made ``0o700``; it is opened without
following a link; a file in it is opened without following a link and without
waiting on a FIFO, and must be a regular file. A directory or file is ours only if
this process's user owns it and nobody else may write to it: anything else is never
read as ours nor written through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

#: Writable by the group or by others: not only ours.
_SHARED = stat.S_IWGRP | stat.S_IWOTH
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_BLOCK = 1 << 20


def is_ours(st: os.stat_result) -> bool:
    """Whether what ``st`` describes belongs to this process's user alone."""
    return st.st_uid == os.geteuid() and not st.st_mode & _SHARED


def _not_ours(path: str) -> OSError:
    return OSError(errno.EPERM, "not asyncdl's own: another user's, or others may write it", path)


def open_dir(parent: Path, name: str, *, create: bool) -> int:
    """A descriptor of the directory ``parent/name``, checked to be ours; with
    ``create``, made (``0o700``) if missing, and tightened if ours but left open to the
    group by an older asyncdl. ``OSError`` if missing (without ``create``), a link, not
    a directory, or not ours."""
    path = parent / name
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    fd = os.open(path, _DIR_FLAGS)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or (st.st_mode & _SHARED and not create):
            raise _not_ours(str(path))
        if st.st_mode & _SHARED:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, name: str, flags: int, *, create: bool = False) -> int:
    """A descriptor of the regular file ``name`` in the directory ``dir_fd``, ours,
    opened with ``flags`` (never through a link, never waiting on a FIFO); with
    ``create``, made (``0o600``) if missing. ``OSError`` for anything else."""
    if create:
        try:
            return os.open(name, flags | _FILE_FLAGS | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            pass  # an earlier process of this pid's: checked below, as any file
    fd = os.open(name, flags | _FILE_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not is_ours(st):
            raise _not_ours(name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def lines_of(fd: int, *, longest: int, budget: list[int]) -> Iterator[bytes]:
    """The whole lines of the file open at ``fd`` (without their newline), a block at
    a time; a line longer than ``longest`` is passed over, and what follows the last
    newline (an append still under way) too. ``budget[0]``: bytes the caller may still
    read, across files; reading stops when it runs out."""
    rest = b""
    skipping = False
    offset = 0
    while budget[0] > 0 and (block := os.pread(fd, min(_BLOCK, budget[0]), offset)):
        offset += len(block)
        budget[0] -= len(block)
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if not skipping and len(line) <= longest:
                yield line
            skipping = False
        if len(rest) > longest:
            rest, skipping = b"", True  # the rest of that line is passed over too


def process_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (changing it
    is process-wide: a file another thread makes meanwhile would get the wrong mode)."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", "rb") as status,
    ):
        for line in status:
            if line.startswith(b"Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)  # meanwhile, a file made elsewhere is made more private
    os.umask(mask)
    return mask
