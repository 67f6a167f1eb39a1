"""Resumable runs: which targets are already there, and the ETag each was downloaded at.

After a download the ETag is recorded with the file's size and ``mtime_ns`` (so a
record never vouches for a file rewritten in place since): in the user xattr
``user.asyncdl.etag`` where the file system allows it, else in a sidecar under
``dest_dir/.asyncdl-etags/``. The sidecar is one JSON-lines file per writing
process (host and pid in its name): appends from two processes never share a
file, so they cannot interleave, and a reader takes the union of all of them.

Everything here is blocking file work: workers call it from their Dask thread or
through the executor, never on the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

XATTR = "user.asyncdl.etag"
SIDECAR_DIR = ".asyncdl-etags"
SKIP_MODES = ("size", "etag")

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

    def vouches_for(self, st: os.stat_result) -> bool:
        return self.size == st.st_size and self.mtime_ns == st.st_mtime_ns


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
        """The ETag ``target`` was downloaded at, if a record vouches for it as it is now."""
        try:
            raw = os.getxattr(target, XATTR)
        except OSError as exc:
            if exc.errno not in _NO_XATTR and exc.errno != errno.ENODATA:
                return None
            # No xattr here: the sidecar may hold it (a file system without user
            # xattrs, or a file recorded while they were unavailable).
            return self._from_sidecar(target, st)
        record = _parse(raw)
        if record is not None and record.vouches_for(st):
            return record.etag
        return None

    def _from_sidecar(self, target: Path, st: os.stat_result) -> str | None:
        with self._lock:
            if self._sidecar is None:
                self._sidecar = self._read_sidecar()
            records = self._sidecar.get(self._relative(target), ())
        for record in records:
            if record.vouches_for(st):
                return record.etag
        return None

    def _read_sidecar(self) -> dict[str, list[Record]]:
        found: dict[str, list[Record]] = {}
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
                    record = _record_of(entry)
                    if isinstance(path, str) and record is not None:
                        found.setdefault(path, []).append(record)
        return found

    # -- writing ------------------------------------------------------------------
    def record(self, target: Path, etag: str) -> None:
        """Record that ``target``, as it is now, holds the object at ``etag``."""
        st = os.stat(target)
        record = Record(bare_etag(etag), st.st_size, st.st_mtime_ns)
        value = {"etag": record.etag, "size": record.size, "mtime_ns": record.mtime_ns}
        try:
            if not _force_sidecar:
                os.setxattr(target, XATTR, json.dumps(value).encode())
                return
        except OSError as exc:
            if exc.errno not in _NO_XATTR:
                raise
        line = json.dumps({"path": self._relative(target), **value}) + "\n"
        with self._lock:
            if self._fd < 0:
                self._fd = self._open_sidecar()
            # One write per line on an O_APPEND descriptor that only this process uses.
            os.write(self._fd, line.encode())
            if self._sidecar is not None:
                self._sidecar.setdefault(self._relative(target), []).append(record)

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


def _parse(raw: bytes) -> Record | None:
    try:
        return _record_of(json.loads(raw))
    except ValueError:
        return None


def _record_of(entry: object) -> Record | None:
    if not isinstance(entry, dict):
        return None
    etag, size, mtime = entry.get("etag"), entry.get("size"), entry.get("mtime_ns")
    if isinstance(etag, str) and isinstance(size, int) and isinstance(mtime, int):
        return Record(etag, size, mtime)
    return None


#: Tests set this to exercise the sidecar on a file system that has user xattrs.
_force_sidecar = False
