"""``sync --delete``'s side of the records: the files under a synced directory whose
keys are gone, whether a record vouches for each, and their removal.

The synced directory may be shared with others, who may swap one of its
directories for a link while sync walks it (between the listing of a directory and
the look at its files, or between that look and the removal). So nothing here goes
by a path from the synced directory down: the walk (``os.fwalk``) opens each
directory relative to its parent and checks that what it opened is what it listed;
each file is looked at (its status, its xattr) relative to its directory's
descriptor, never through a link; and a removal opens the directories from the
synced one down one name at a time, never through a link, and unlinks the file
only if it is still the one looked at (device, inode, size, mtime). A directory
swapped for a link takes the removal nowhere: it stops, reported.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .file_records import EtagStore, Record, is_own_name, owned

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

logger = logging.getLogger("asyncdl")


@dataclass(frozen=True, slots=True)
class Stale:
    """A file under the destination whose key the listing no longer holds."""

    path: Path
    #: ``None``: asyncdl wrote it and nobody changed it since, so it may go; else why
    #: it stays.
    kept_because: str | None
    stat: os.stat_result
    #: Its path under the destination, POSIX style.
    relative: str = ""


def stale_files(
    store: EtagStore,
    listed: Callable[[str], bool],
    included: Callable[[str], bool],
    *,
    bucket: str,
    prefix: str,
    since_ns: int | None = None,
) -> Iterator[Stale]:
    """The files under ``store.dest_dir`` (relative POSIX paths ``included`` and not
    ``listed``), each with whether a record vouches for it: one made for that file,
    unchanged, at that path, in that directory, of the key the folder ``prefix``
    (empty, or ending in ``/``) of ``bucket`` maps to that path. Blocking: a walk.

    ``since_ns``: when the listing began, by the directory's clock (``sync_lock``). A
    file changed since (its ``st_ctime_ns``, which no one can set back) stays: another
    run wrote it, of an object put after the listing passed its key. Changed at that
    very time stays not: where the clock is coarse (a tick of milliseconds), a file the
    last run wrote a moment before may share the tick, while another run's file is at
    least a listing's round trip and a download later.

    Links are never followed (a linked directory is not entered, a linked file is
    left alone), and asyncdl's own files and directories (temp, partial, journal, the
    sidecar, Dask's run journals) are not files of the destination.
    """
    root = store.dest_dir
    # The destination the user named: a link to it is theirs, and followed.
    try:
        root_fd = os.open(root, _DIR)
    except FileNotFoundError:  # a dry run into a directory it has not made: none stale
        return
    try:
        for directory, dirs, files, dir_fd in os.fwalk(".", dir_fd=root_fd):
            dirs[:] = sorted(d for d in dirs if not is_own_name(d))
            here = PurePosixPath(directory)
            for name in sorted(files):
                relative = (here / name).as_posix()
                if is_own_name(name) or listed(relative) or not included(relative):
                    continue
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                path = root / relative
                if not stat.S_ISREG(st.st_mode):
                    yield Stale(path, "not a regular file", st, relative)
                    continue
                why = _look_at(store, dir_fd, name, st, relative, bucket=bucket, prefix=prefix)
                if why is None and since_ns is not None and st.st_ctime_ns > since_ns:
                    why = "changed since this run's listing began"
                yield Stale(path, why, st, relative)
    finally:
        os.close(root_fd)


def _look_at(
    store: EtagStore,
    dir_fd: int,
    name: str,
    st: os.stat_result,
    relative: str,
    *,
    bucket: str,
    prefix: str,
) -> str | None:
    """Why the file ``name`` in ``dir_fd`` stays (``None``: it may go)."""
    try:
        # Its xattr through a descriptor of the file itself: never through a link, and
        # never a FIFO's open that waits (one may have taken the name since).
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError as exc:
        return f"cannot be looked at: {exc.strerror}"
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return "replaced while sync looked at it"
        records = store.records_in(fd, relative)
    finally:
        os.close(fd)
    return _kept_because(records, st, relative, bucket=bucket, prefix=prefix, root=store.root_id())


def _kept_because(
    records: list[Record],
    st: os.stat_result,
    relative: str,
    *,
    bucket: str,
    prefix: str,
    root: int | None,
) -> str | None:
    """Why the file at ``relative`` stays (``None``: it may go), from its records."""
    if not records:
        return "not written by asyncdl"
    if not owned(st):
        return f"another user's (uid {st.st_uid}), whatever its record says"
    mine = [r for r in records if r.vouches_for(st, relative, root)]
    if any(r.bucket == bucket and r.key == prefix + relative for r in mine):
        return None
    if mine:
        return f"written by asyncdl from s3://{mine[0].bucket}/{mine[0].key}"
    if all(None in (r.bucket, r.key, r.path, r.root) for r in records):
        return "recorded by an older asyncdl, without its place"
    elsewhere = [r for r in records if r.path != relative or r.root != root]
    if elsewhere:
        # Its xattr went with it: renamed, copied with its xattrs (into this directory
        # or from another synced one), or under a subdirectory another sync wrote into
        # (its paths are relative to that one).
        source = f"s3://{elsewhere[0].bucket}/{elsewhere[0].key}"
        return f"written by asyncdl from {source} to another place, moved or copied here"
    return "changed since asyncdl wrote it"


def remove_stale(store: EtagStore, stale: Stale) -> None:
    """Remove a file :func:`stale_files` found vouched for, its record, and the
    directories the removal left empty (up to, not including, the destination).
    ``OSError`` (``EAGAIN``) if it, or a directory on its path, changed since it was
    looked at. Blocking."""
    *dirs, name = stale.relative.split("/")
    fds = [os.open(store.dest_dir, _DIR)]
    try:
        try:
            for part in dirs:
                fds.append(os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fds[-1]))
            now = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise
            now = None  # a directory on its path is a link now, or gone
        seen = stale.stat
        if now is None or _identity(now) != _identity(seen):
            raise OSError(errno.EAGAIN, "changed since it was checked", str(stale.path))
        os.unlink(name, dir_fd=fds[-1])
        try:
            store.forget(stale.path, seen)
        except OSError as exc:  # the file is gone: what is left to say is a warning
            logger.warning("could not void the record of %s: %s", stale.path, exc)
        # The directories left empty, from the deepest up; one not empty (or not ours
        # to remove) ends it: the directories above are not empty either.
        for depth in range(len(dirs), 0, -1):
            try:
                os.rmdir(dirs[depth - 1], dir_fd=fds[depth - 1])
            except OSError:
                return
    finally:
        for fd in fds:
            os.close(fd)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
