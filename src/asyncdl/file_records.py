"""The records of files asyncdl wrote: which targets are already there, at which ETag.

``download_prefix(skip_existing=...)``, ``asyncdl sync`` and ``asyncdl.dask`` share
them: a re-run skips what a record still vouches for, and ``sync --delete`` removes
only files a record vouches for (asyncdl wrote them and nobody changed them since).
After a download the ETag is recorded with the file's size and ``mtime_ns`` (so a
record never vouches for a file rewritten in place since), and with where it was
written: the object's bucket and key, and the file's path relative to the store's
directory (the synced directory). An xattr travels with its file (``mv``, ``cp -a``,
``rsync -aX``, the files of another sync into a subdirectory): a record vouches for a
file only at the path it names. The path is relative, not absolute, so that a synced
directory moved as a whole (``mv data data2``) is still vouched for. A record
without these fields (written by an older asyncdl) vouches for nothing: its file is
fetched again (and recorded anew), never deleted. The record is kept in the user xattr
``user.asyncdl.etag`` where the file system allows it, else in a sidecar under
``dest_dir/.asyncdl-etags/``. The sidecar is one JSON-lines file per writing
process (host and pid in its name): appends from two processes never share a
file, so they cannot interleave, and a reader takes the union of all of them.

Everything in :class:`EtagStore` is blocking file work: callers on an event loop go
through :data:`~asyncdl.quick_io.QUICK_IO` (a stat and an xattr call are quick on a
local disk) or the executor; Dask workers call it from their task's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import quick_io
from .partial_paths import JOURNAL_SUFFIX, PARTIAL_SUFFIX
from .writer import is_temp_file

if TYPE_CHECKING:
    from .results import DownloadResult

XATTR = "user.asyncdl.etag"
SIDECAR_DIR = ".asyncdl-etags"
#: Where a Dask run journals the directories it writes into, under its destination
#: (``asyncdl.dask`` needs dask, which this module must not import: the name is here).
RUN_JOURNAL_DIR = ".asyncdl-runs"
SKIP_MODES = ("size", "etag")

logger = logging.getLogger("asyncdl")

#: errnos that mean "this file system (or file) takes no user xattrs": fall back.
_NO_XATTR = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.ENOSYS}


def bare_etag(etag: str) -> str:
    """ETags compare without quotes or a weak prefix: listings and inventories differ."""
    if etag.startswith("W/"):
        etag = etag[2:]
    return etag.strip('"')


@dataclass(frozen=True, slots=True)
class Record:
    etag: str
    size: int
    mtime_ns: int
    #: Where it was written: the object, and the file's path relative to the store's
    #: directory. ``None`` in a record an older asyncdl wrote: it vouches for nothing.
    bucket: str | None = None
    key: str | None = None
    path: str | None = None

    def vouches_for(self, st: os.stat_result, path: str) -> bool:
        """Whether the file at ``path`` (relative to the store's directory), as ``st``
        sees it, is the file this record was made for, unchanged."""
        return (
            self.path == path
            and self.bucket is not None
            and self.key is not None
            and self.size == st.st_size
            and self.mtime_ns == st.st_mtime_ns
        )


class EtagStore:
    """The ETag records of one destination directory, as one process sees them."""

    def __init__(self, dest_dir: Path) -> None:
        self.dest_dir = dest_dir
        self._lock = threading.Lock()
        #: The sidecar's records, read once (lazily) per store: ``{relative path: [...]}``.
        self._sidecar: dict[str, list[Record]] | None = None
        self._fd = -1

    # -- reading ------------------------------------------------------------------
    def recorded(self, target: Path, st: os.stat_result) -> str | None:
        """The ETag ``target`` was downloaded at, if a record vouches for it as it is now
        and where it is now."""
        relative = self._relative(target)
        for record in self.records(target):
            if record.vouches_for(st, relative):
                return record.etag
        return None

    def records(self, target: Path) -> list[Record]:
        """Every record made for ``target`` (whether or not it vouches for it now)."""
        try:
            raw = os.getxattr(target, XATTR)
        except OSError as exc:
            if exc.errno not in _NO_XATTR and exc.errno != errno.ENODATA:
                return []
            # No xattr here: the sidecar may hold it (a file system without user
            # xattrs, or a file recorded while they were unavailable).
            return self._from_sidecar(target)
        record = _parse(raw)
        return [] if record is None else [record]

    def load(self) -> None:
        """Read the sidecar now (callers on a loop do it in the executor, once)."""
        with self._lock:
            if self._sidecar is None:
                self._sidecar = self._read_sidecar()

    def _from_sidecar(self, target: Path) -> list[Record]:
        self.load()
        with self._lock:
            assert self._sidecar is not None
            return list(self._sidecar.get(self._relative(target), ()))

    def _read_sidecar(self) -> dict[str, list[Record]]:
        found: dict[str, list[Record]] = {}
        void: set[tuple[str, int, int]] = set()
        directory = self.dest_dir / SIDECAR_DIR
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return found
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            with contextlib.suppress(OSError), open(directory / name, "rb") as lines:
                for line in lines:
                    try:
                        entry = json.loads(line)
                        path = entry["path"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a line another process is still appending
                    record = _record_of(entry, path)
                    if not isinstance(path, str) or record is None:
                        continue
                    if entry.get("void") is True:
                        void.add((path, record.size, record.mtime_ns))
                    else:
                        found.setdefault(path, []).append(record)
        # A void line (the file was removed) cancels the records of that path for the
        # file as it was, whichever process's sidecar holds either line.
        for path, records in found.items():
            records[:] = [r for r in records if (path, r.size, r.mtime_ns) not in void]
        return found

    # -- writing ------------------------------------------------------------------
    def record(self, target: Path, etag: str, *, bucket: str, key: str) -> None:
        """Record that ``target``, as it is now and where it is, holds the object
        ``bucket``/``key`` at ``etag``."""
        st = os.stat(target)
        relative = self._relative(target)
        record = Record(bare_etag(etag), st.st_size, st.st_mtime_ns, bucket, key, relative)
        value = {
            "etag": record.etag,
            "size": record.size,
            "mtime_ns": record.mtime_ns,
            "bucket": bucket,
            "key": key,
        }
        try:
            if not _force_sidecar:
                # The xattr names its path itself: it travels with the file.
                os.setxattr(target, XATTR, json.dumps({**value, "path": relative}).encode())
                return
        except OSError as exc:
            if exc.errno not in _NO_XATTR:
                raise
        self._append(target, value)  # a sidecar line names its path already
        with self._lock:
            if self._sidecar is not None:
                self._sidecar.setdefault(relative, []).append(record)

    def forget(self, target: Path, st: os.stat_result) -> None:
        """``target``, as ``st`` saw it, was removed: no record may vouch for a file
        that later lands there with the same size and mtime (a restore from a backup)."""
        # An xattr went with the file; sidecar records stay unless voided.
        relative = self._relative(target)
        with self._lock:
            held = None if self._sidecar is None else self._sidecar.get(relative)
            if not held:
                return
            held[:] = [r for r in held if (r.size, r.mtime_ns) != (st.st_size, st.st_mtime_ns)]
        value = {"etag": "", "size": st.st_size, "mtime_ns": st.st_mtime_ns, "void": True}
        self._append(target, value)

    def _append(self, target: Path, value: Mapping[str, object]) -> None:
        line = json.dumps({"path": self._relative(target), **value}) + "\n"
        with self._lock:
            if self._fd < 0:
                self._fd = self._open_sidecar()
            # One write per line on an O_APPEND descriptor that only this process uses.
            os.write(self._fd, line.encode())

    def _open_sidecar(self) -> int:
        directory = self.dest_dir / SIDECAR_DIR
        directory.mkdir(exist_ok=True)
        name = f"{socket.gethostname()}-{os.getpid()}.jsonl"
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        return os.open(directory / name, flags, 0o666)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _relative(self, target: Path) -> str:
        return target.relative_to(self.dest_dir).as_posix()


def should_skip(
    store: EtagStore, target: Path, mode: str, size: int | None, etag: str | None
) -> bool:
    """Whether ``target`` already holds the listed object, per ``mode``; no request made.

    ``"size"``: the file exists with the listed size (a row without a size is
    downloaded). ``"etag"``: besides, a record made when the file was written holds
    the listed ETag (a row without an ETag, or a file without a record, is
    downloaded), or the object is listed as empty.
    """
    try:
        st = os.stat(target)
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
    recorded = store.recorded(target, st)
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

    async def skips(self, target: Path, size: int | None, etag: str | None) -> bool:
        return await quick_io.QUICK_IO.call(should_skip, self.store, target, self.mode, size, etag)

    async def remember(self, result: DownloadResult) -> None:
        await remember(self.store, result)

    def close(self) -> None:
        self.store.close()


async def remember(store: EtagStore, result: DownloadResult) -> None:
    """Record the ETag a download wrote its file at, for a later run's skip; a record
    that cannot be written is a warning (the file is right, a later run fetches it)."""
    if not result.ok or result.skipped:
        return
    try:
        # A stat and an xattr write: on the loop while that is quick. A download the
        # server sent no ETag for is recorded too (``sync --delete`` needs to know
        # asyncdl wrote it), with an ETag that no listing's matches.
        await quick_io.QUICK_IO.call(
            functools.partial(store.record, bucket=result.bucket, key=result.key),
            result.path,
            result.etag or "",
        )
    except OSError as exc:
        logger.warning("could not record the ETag of %s: %s", result.path, exc)


def is_asyncdl_file(name: str) -> bool:
    """Whether a name is one of asyncdl's own files beside a target: a temp file, a
    kept partial or its journal (``partial_paths.paths_for``). Never a target, never
    listed or removed as one."""
    return is_temp_file(name) or (
        name.startswith(".") and name.endswith((PARTIAL_SUFFIX, JOURNAL_SUFFIX))
    )


def is_own_name(name: str) -> bool:
    """Whether a file or directory name is asyncdl's own: one of its files beside a
    target, the record sidecar's directory, or a Dask run's journal directory. A key
    with such a segment is refused (``key_paths``): it would be taken for ours."""
    return is_asyncdl_file(name) or name in (SIDECAR_DIR, RUN_JOURNAL_DIR)


@dataclass(frozen=True, slots=True)
class Stale:
    """A file under the destination whose key the listing no longer holds."""

    path: Path
    #: ``None``: asyncdl wrote it and nobody changed it since, so it may go; else why
    #: it stays.
    kept_because: str | None
    stat: os.stat_result


def stale_files(
    store: EtagStore,
    listed: Callable[[str], bool],
    included: Callable[[str], bool],
    *,
    bucket: str,
    prefix: str,
) -> Iterator[Stale]:
    """The files under ``store.dest_dir`` (relative POSIX paths ``included`` and not
    ``listed``), each with whether a record vouches for it: one made for that file,
    unchanged, at that path, of the key the folder ``prefix`` (empty, or ending in
    ``/``) of ``bucket`` maps to that path. Blocking: a walk.

    Symlinks are never followed (a linked directory is not entered, a linked file is
    left alone), and asyncdl's own files (temp, partial, journal, the sidecar) are
    not files of the destination.
    """
    root = store.dest_dir
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        dirs[:] = sorted(d for d in dirs if d != SIDECAR_DIR)
        for name in sorted(files):
            if is_asyncdl_file(name):
                continue
            path = here / name
            relative = path.relative_to(root).as_posix()
            if listed(relative) or not included(relative):
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                yield Stale(path, "not a regular file", st)
                continue
            yield Stale(path, _kept_because(store.records(path), st, relative, bucket, prefix), st)


def _kept_because(
    records: list[Record], st: os.stat_result, relative: str, bucket: str, prefix: str
) -> str | None:
    """Why the file at ``relative`` stays (``None``: it may go), from its records."""
    if not records:
        return "not written by asyncdl"
    mine = [r for r in records if r.vouches_for(st, relative)]
    if any(r.bucket == bucket and r.key == prefix + relative for r in mine):
        return None
    if mine:
        return f"written by asyncdl from s3://{mine[0].bucket}/{mine[0].key}"
    if all(r.bucket is None or r.key is None or r.path is None for r in records):
        return "recorded by an older asyncdl, without its place"
    elsewhere = [r for r in records if r.path != relative]
    if elsewhere:
        # Its xattr went with it: renamed, copied with its xattrs, or under a
        # subdirectory another sync wrote into (its paths are relative to that one).
        source = f"s3://{elsewhere[0].bucket}/{elsewhere[0].key}"
        return f"written by asyncdl from {source} to another place, moved or copied here"
    return "changed since asyncdl wrote it"


def remove_stale(store: EtagStore, stale: Stale) -> None:
    """Remove a file :func:`stale_files` found vouched for, its record, and the
    directories the removal left empty (up to, not including, the destination).
    Blocking."""
    now = os.lstat(stale.path)
    seen = stale.stat
    if (now.st_ino, now.st_size, now.st_mtime_ns) != (seen.st_ino, seen.st_size, seen.st_mtime_ns):
        raise OSError(errno.EAGAIN, "changed since it was checked", str(stale.path))
    os.unlink(stale.path)
    store.forget(stale.path, seen)
    parent = stale.path.parent
    while parent != store.dest_dir and store.dest_dir in parent.parents:
        try:
            os.rmdir(parent)
        except OSError:
            return  # not empty (or not ours to remove): the directories above are not
        parent = parent.parent


def _parse(raw: bytes) -> Record | None:
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    return _record_of(entry, entry.get("path") if isinstance(entry, dict) else None)


def _record_of(entry: object, path: object) -> Record | None:
    """The record in ``entry``, made for the file at ``path``; its place (bucket, key,
    path) left ``None`` where missing or not text (an older asyncdl's record)."""
    if not isinstance(entry, dict):
        return None
    etag, size, mtime = entry.get("etag"), entry.get("size"), entry.get("mtime_ns")
    if not (isinstance(etag, str) and isinstance(size, int) and isinstance(mtime, int)):
        return None
    bucket, key = entry.get("bucket"), entry.get("key")
    return Record(
        etag,
        size,
        mtime,
        bucket if isinstance(bucket, str) else None,
        key if isinstance(key, str) else None,
        path if isinstance(path, str) else None,
    )


#: Tests set this to exercise the sidecar on a file system that has user xattrs.
_force_sidecar = False
