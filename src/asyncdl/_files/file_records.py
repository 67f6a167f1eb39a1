"""The records of files asyncdl wrote: which targets are already there, at which ETag.

``download_prefix(skip_existing=...)``, ``asyncdl sync`` and ``asyncdl.dask`` share
them: a re-run skips what a record still vouches for, and ``sync --delete`` removes
only files a record vouches for (asyncdl wrote them and nobody changed them since;
the scan and the removals are ``stale``'s). After a download the ETag is recorded
with the file's size and ``mtime_ns`` (so a record never vouches for a file
rewritten in place since), and with where it was written: the object's bucket and
key, the file's path relative to the store's directory (the synced directory), and
that directory's inode number. An xattr travels with its file (``mv``, ``cp -a``,
``rsync -aX``, the files of another sync into a subdirectory): a record vouches for a
file only at the path it names, in the directory it names. The path is relative and
the directory named by its inode, so that a synced directory moved as a whole (``mv
data data2``) is still vouched for, and a file copied with its xattrs to the same
path of another directory synced from the same prefix is not (nor a sidecar copied
along with its files: the two backends agree). The inode, not the device as well: an
NFS export that each host mounts as a device of its own is one directory to all of
them. A record without these fields (written by an older asyncdl) vouches for
nothing: its file is fetched again (and recorded anew), never deleted. Nor does a
record on a file another user owns, who may rewrite it and set its mtime back.

The record is kept in the user xattr ``user.asyncdl.etag`` where the file system
allows it and the record fits there (JSON escapes a character past ASCII to six
bytes, in the key and again in the path: a record can outgrow the 4 KiB ext4 gives
a file's xattrs), else in a sidecar under ``dest_dir/.asyncdl-etags/``. The sidecar
is one JSON-lines file per writing process (host and pid in its name): appends from
two processes never share a file, so they cannot interleave, and a reader takes the
union of all of them. A destination may be shared: the sidecar's directory and files
hold records only if they are this user's alone (``own_files``: not a link, not a
FIFO, nobody else may write them), and what is read of them is bounded. A record is
read from outside: one too long, or nested too deep to parse, is no record.

Everything in :class:`EtagStore` is blocking file work: callers on an event loop go
through :data:`~asyncdl._files.quick_io.QUICK_IO` (a stat and an xattr call are quick on a
local disk) or the executor; Dask workers call it from their task's thread.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import own_files
from .partial_paths import JOURNAL_SUFFIX, PARTIAL_SUFFIX
from .writer import is_temp_file

XATTR = "user.asyncdl.etag"
SIDECAR_DIR = ".asyncdl-etags"
#: Where a Dask run journals the directories it writes into, under its destination
#: (``asyncdl.dask`` needs dask, which this module must not import: the name is here).
RUN_JOURNAL_DIR = ".asyncdl-runs"
#: The file a ``sync --delete`` run locks in the synced directory (``sync_lock``).
SYNC_LOCK = ".asyncdl-sync-lock"
SKIP_MODES = ("size", "etag")
#: A record asyncdl writes is at most about 12.5 KiB (a 1024-byte key and its path,
#: every byte escaped): a longer xattr value is not one.
MAX_XATTR = 16 * 1024
#: A sidecar line longer than this is not one asyncdl wrote: passed over.
MAX_LINE = 64 * 1024
#: What a store reads of its sidecar, at most (a line per file ever written); the
#: records past it vouch for nothing (their files are fetched again, never deleted).
MAX_SIDECAR_BYTES = 256 * 1024 * 1024

logger = logging.getLogger("asyncdl")

#: A file looked at for its record: never through a link, never waiting on a FIFO.
_LOOK_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
#: errnos that mean "this file system (or file) takes no user xattrs": fall back.
_NO_XATTR = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.ENOSYS}
#: errnos of a value too big for the file's xattrs (ext4 gives a file one 4 KiB block
#: for all of them; Linux refuses a value over 64 KiB): that record goes to the sidecar.
_TOO_BIG = {errno.ENOSPC, errno.E2BIG}


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
    #: Where it was written: the object, the file's path relative to the store's
    #: directory, and that directory's inode number. ``None`` in a record an older
    #: asyncdl wrote: it vouches for nothing.
    bucket: str | None = None
    key: str | None = None
    path: str | None = None
    root: int | None = None

    def vouches_for(self, st: os.stat_result, path: str, root: int | None) -> bool:
        """Whether the file at ``path`` (relative to the store's directory, whose
        inode number is ``root``), as ``st`` sees it, is the file this record was made
        for, unchanged, and this user's: the owner of a file may change its bytes and set
        its mtime back at will, so a co-user's file in a shared directory (a record
        planted on it, or one this user's run made there) vouches for nothing."""
        return (
            owned(st)
            and self.path == path
            and self.root is not None
            and self.root == root
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
        self._root: int | None = None

    def root_id(self) -> int | None:
        """The inode number of the store's directory (``None`` while it is missing)."""
        if self._root is None:
            with contextlib.suppress(OSError):
                self._root = os.stat(self.dest_dir).st_ino
        return self._root

    # -- reading ------------------------------------------------------------------
    def recorded(
        self, target: Path, st: os.stat_result, file: Path | int | None = None
    ) -> str | None:
        """The ETag ``target`` (``file``: opened) was downloaded at, if a record vouches
        for it as it is now and where it is now."""
        relative = self._relative(target)
        root = self.root_id()
        file = target if file is None else file
        for record in self._records(lambda: os.getxattr(file, XATTR), relative):
            if record.vouches_for(st, relative, root):
                return record.etag
        return None

    def records(self, target: Path) -> list[Record]:
        """Every record made for ``target`` (whether or not it vouches for it now)."""
        return self._records(lambda: os.getxattr(target, XATTR), self._relative(target))

    def records_in(self, fd: int, relative: str) -> list[Record]:
        """:meth:`records` of the file open at ``fd``, whose path is ``relative``."""
        return self._records(lambda: os.getxattr(fd, XATTR), relative)

    def _records(self, xattr: Callable[[], bytes], relative: str) -> list[Record]:
        try:
            raw = xattr()
        except OSError as exc:
            if exc.errno not in _NO_XATTR and exc.errno != errno.ENODATA:
                return []
            # No xattr here: the sidecar may hold it (a file system without user
            # xattrs, or a file recorded while they were unavailable).
            self.load()
            with self._lock:
                assert self._sidecar is not None
                return list(self._sidecar.get(relative, ()))
        entry = _loads(raw) if len(raw) <= MAX_XATTR else None
        record = _record_of(entry, entry.get("path") if isinstance(entry, dict) else None)
        return [] if record is None else [record]

    def load(self) -> None:
        """Read the sidecar now (callers on a loop do it in the executor, once)."""
        with self._lock:
            if self._sidecar is None:
                self._sidecar = self._read_sidecar()

    def _read_sidecar(self) -> dict[str, list[Record]]:
        found: dict[str, list[Record]] = {}
        void: set[tuple[str, int, int]] = set()
        try:
            dir_fd = own_files.open_dir(self.dest_dir, SIDECAR_DIR, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return found
        except OSError as exc:
            logger.warning("no records read from %s: %s", self.dest_dir / SIDECAR_DIR, exc)
            return found
        budget = [MAX_SIDECAR_BYTES]
        try:
            for name in sorted(os.listdir(dir_fd)):
                if name.endswith(".jsonl"):
                    _read_lines(dir_fd, name, budget, found, void)
        finally:
            os.close(dir_fd)
        if budget[0] <= 0:
            logger.warning(
                "records in %s past its first %d bytes ignored", SIDECAR_DIR, MAX_SIDECAR_BYTES
            )
        # A void line (the file was removed) cancels the records of that path for the
        # file as it was, whichever process's sidecar holds either line.
        for path, records in found.items():
            records[:] = [r for r in records if (path, r.size, r.mtime_ns) not in void]
        return found

    # -- writing ------------------------------------------------------------------
    def record(
        self, target: Path, etag: str, *, bucket: str, key: str, dir_fd: int | None = None
    ) -> None:
        """Record that ``target``, as it is now and where it is, holds the object
        ``bucket``/``key`` at ``etag`` (``dir_fd``: see :func:`opened_in`)."""
        with opened_in(target, dir_fd) as file:
            self._record(target, file, etag, bucket=bucket, key=key)

    def _record(self, target: Path, file: Path | int, etag: str, *, bucket: str, key: str) -> None:
        st = os.stat(file)
        relative = self._relative(target)
        root = self.root_id()
        record = Record(bare_etag(etag), st.st_size, st.st_mtime_ns, bucket, key, relative, root)
        value = {
            "etag": record.etag,
            "size": record.size,
            "mtime_ns": record.mtime_ns,
            "bucket": bucket,
            "key": key,
            "root": root,
        }
        # The xattr names its path itself: it travels with the file.
        if not _force_sidecar and _into_xattr(file, json.dumps({**value, "path": relative})):
            return
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
        """This process's sidecar file, appended to: in a directory of ours (made
        private), never through a link, never someone else's file."""
        dir_fd = own_files.open_dir(self.dest_dir, SIDECAR_DIR, create=True)
        try:
            name = f"{socket.gethostname()}-{os.getpid()}.jsonl"
            return own_files.open_file(dir_fd, name, os.O_WRONLY | os.O_APPEND, create=True)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _relative(self, target: Path) -> str:
        return target.relative_to(self.dest_dir).as_posix()


def _into_xattr(file: Path | int, record: str) -> bool:
    """Whether ``record`` went into the xattr of ``file``; if not, the sidecar takes it:
    the file system takes no user xattrs, or none this big."""
    data = record.encode()
    # A value no reader takes from an xattr is not offered to one, whatever the file
    # system would keep (XFS keeps 64 KiB).
    if len(data) <= MAX_XATTR:
        try:
            os.setxattr(file, XATTR, data)
            return True
        except OSError as exc:
            if exc.errno in _NO_XATTR:
                return False
            if exc.errno not in _TOO_BIG:
                raise
    # A record this file's xattr still holds (a setxattr that failed left it there)
    # would be read instead of the sidecar's, and contradict it.
    try:
        os.removexattr(file, XATTR)
    except OSError as exc:
        if exc.errno != errno.ENODATA and exc.errno not in _NO_XATTR:
            raise
    return False


def _read_lines(
    dir_fd: int,
    name: str,
    budget: list[int],
    found: dict[str, list[Record]],
    void: set[tuple[str, int, int]],
) -> None:
    """The records of the sidecar file ``name`` into ``found`` (void lines into
    ``void``), if it is ours; what is read counted off ``budget``."""
    try:
        fd = own_files.open_file(dir_fd, name, os.O_RDONLY)
    except OSError:
        return  # not ours (a link, a FIFO, another user's, a shared one): no records
    try:
        for line in own_files.lines_of(fd, longest=MAX_LINE, budget=budget):
            entry = _loads(line)
            if not isinstance(entry, dict):
                continue  # a line another process is still appending, say
            path = entry.get("path")
            record = _record_of(entry, path)
            if not isinstance(path, str) or record is None:
                continue
            if entry.get("void") is True:
                void.add((path, record.size, record.mtime_ns))
            else:
                found.setdefault(path, []).append(record)
    except OSError as exc:
        logger.warning("records in %s/%s past a read error ignored: %s", SIDECAR_DIR, name, exc)
    finally:
        os.close(fd)


@contextlib.contextmanager
def opened_in(target: Path, dir_fd: int | None) -> Iterator[Path | int]:
    """``target`` as the file calls take it: its path, or with ``dir_fd`` (its directory
    held open, see ``held_dirs``) a descriptor of the file opened in there, never
    through a link."""
    if dir_fd is None:
        yield target
        return
    fd = os.open(target.name, _LOOK_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def is_asyncdl_file(name: str) -> bool:
    """Whether a name is one of asyncdl's own files beside a target: a temp file, a
    kept partial or its journal (``partial_paths.paths_for``). Never a target, never
    listed or removed as one."""
    return is_temp_file(name) or (
        name.startswith(".") and name.endswith((PARTIAL_SUFFIX, JOURNAL_SUFFIX))
    )


def is_own_name(name: str) -> bool:
    """Whether a file or directory name is asyncdl's own: one of its files beside a
    target, the record sidecar's directory, a Dask run's journal directory, or the
    lock's file of a ``sync --delete`` run, in any
    case and Unicode form. A key with such a segment is refused (``key_paths``): it
    would be taken for ours, and on a file system that ignores case (macOS', Windows')
    ``.X.ASYNCDL-PARTIAL`` is ``.x.asyncdl-partial``."""
    # NFC, then case folding (which also folds U+017F, long s, to "s", as NTFS does).
    folded = unicodedata.normalize("NFC", name).casefold()
    return is_asyncdl_file(folded) or folded in (SIDECAR_DIR, RUN_JOURNAL_DIR, SYNC_LOCK)


def owned(st: os.stat_result) -> bool:
    """Whether this process's user owns the file ``st`` describes (where users own files)."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid is None or st.st_uid == geteuid()


def _loads(raw: bytes) -> object:
    """A record's JSON, or ``None`` if it is not JSON or nests too deep to parse."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _record_of(entry: object, path: object) -> Record | None:
    """The record in ``entry``, made for the file at ``path``; its place (bucket, key,
    path, root) left ``None`` where missing or not of its type (an older asyncdl's
    record)."""
    if not isinstance(entry, dict):
        return None
    etag, size, mtime = entry.get("etag"), entry.get("size"), entry.get("mtime_ns")
    if not (isinstance(etag, str) and isinstance(size, int) and isinstance(mtime, int)):
        return None
    bucket, key, root = entry.get("bucket"), entry.get("key"), entry.get("root")
    return Record(
        etag,
        size,
        mtime,
        bucket if isinstance(bucket, str) else None,
        key if isinstance(key, str) else None,
        path if isinstance(path, str) else None,
        root if type(root) is int else None,
    )


#: Tests set this to exercise the sidecar on a file system that has user xattrs.
_force_sidecar = False
