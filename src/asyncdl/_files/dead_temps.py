"""Temp files whose writer died: found by the lock every live writer holds, removed.

A download writes into ``.NAME.XXXXXXXX.asyncdl-tmp`` and renames it onto the target;
a process killed in between (SIGKILL, an OOM kill, a power loss) leaves the temp file,
and the next download of NAME takes another name, so nothing would ever remove it.
Every writer takes ``flock`` on its temp file the moment it creates it and keeps it
until the rename (``writer.hold``); a kill releases it. So a temp file whose lock can
be taken has no live writer, whatever its age, and goes. The other order is safe too:
a sweep that takes the lock of a file made a moment before its writer could lock it
removes it, and the writer, refused its lock, takes another name.

``download_prefix`` sweeps the directories its listing led into once it has ended
(``asyncdl cp -r``, ``sync``), so a run after a killed one leaves none behind. A temp
file of an older asyncdl, which took no lock, looks dead to it: such a writer, if it
still runs, fails its rename and leaves the target as it was. Windows has no
``flock``: nothing is swept there (``asyncdl clean`` removes old temp files by age).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .writer import is_temp_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW


def remove_dead(root: Path, directories: Iterable[Path]) -> int:
    """Remove the temp files in ``directories`` (``root`` or below it) that no live
    writer holds; return how many went. Only this user's regular files; each directory
    is reached from ``root`` (which may be the user's own link) without following a
    link below it, so one swapped in since leads nowhere."""
    if fcntl is None:  # pragma: no cover - Windows
        return 0
    removed = 0
    for directory in directories:
        dir_fd = _open_below(root, directory)
        if dir_fd is None:
            continue
        try:
            # One name at a time: a list of a million names would be the largest thing
            # a download of a million objects ever held (about 70 MiB, at its end).
            with os.scandir(dir_fd) as entries:
                for entry in entries:
                    if is_temp_file(entry.name) and _remove_if_dead(dir_fd, entry.name):
                        removed += 1
        except OSError:
            pass  # the directory went meanwhile
        finally:
            os.close(dir_fd)
    return removed


def _open_below(root: Path, directory: Path) -> int | None:
    try:
        parts = directory.relative_to(root).parts
        fd = os.open(root, _ROOT_FLAGS)
    except (ValueError, OSError):
        return None
    for part in parts:
        try:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            inner = -1  # gone, or a link put there since
        os.close(fd)
        if inner < 0:
            return None
        fd = inner
    return fd


def _remove_if_dead(dir_fd: int, name: str) -> bool:
    try:
        fd = os.open(name, _FLAGS, dir_fd=dir_fd)
    except OSError:
        return False  # gone (renamed by its writer), a link, or not ours to open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its writer is alive
        # Still the file the name names (its writer may have renamed it meanwhile).
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(st, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)):
                os.unlink(name, dir_fd=dir_fd)
                return True
        return False
    finally:
        os.close(fd)
