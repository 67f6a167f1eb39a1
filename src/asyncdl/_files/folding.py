"""Whether a destination's file system tells names apart by case and by Unicode form,
found once per destination, and how a path folds where it does not.

On a file system that folds case (macOS' and Windows' by default, FAT, ext4 with
``casefold``), ``A.txt`` and ``a.txt`` are one file; on one that normalises Unicode
(macOS'), so are the NFC and NFD forms of ``é.txt``. Two keys of one listing would
then overwrite each other, the second reported downloaded over the first. So
:func:`probe` asks the file system: it makes a file of a fresh name holding upper-case
letters and an accented letter, and looks for it under the name folded to lower
case, and under the NFD form of its name. Only the very file it made counts (its
device and inode), so a file planted at either name tells nothing; the probe's
file is a temp file by name, locked while it lives (a sweep passes it over; one a
kill left is swept as any dead temp file).
"""

from __future__ import annotations

import contextlib
import logging
import os
import unicodedata
from collections.abc import Callable

from .temp_names import temp_name
from .writer import hold

logger = logging.getLogger("asyncdl")

#: How a path folds on a file system: two paths that fold alike name one file there.
Fold = Callable[[str], str]

_STEM = "CASE-PROBE-\u00c9"
_FLAGS = (
    os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def fold_case(path: str) -> str:
    """``path`` as a file system that folds case and Unicode forms compares it."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())


def fold_form(path: str) -> str:
    """``path`` as a file system that normalises Unicode (and keeps case) compares it."""
    return unicodedata.normalize("NFC", path)


def probe(dir_fd: int) -> Fold | None:
    """How paths fold in the directory ``dir_fd``'s file system (``None``: they do not,
    every name is its own). One file made and removed; nothing left behind."""
    for _ in range(8):
        name = temp_name(_STEM, None, None)
        try:
            fd = os.open(name, _FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except OSError as exc:
            # A file system that takes no such name (or no file at all here): the
            # downloads meet (and report) what is wrong; nothing to fold by.
            logger.debug("no case probe in the destination: %s", exc)
            return None
        try:
            if not hold(fd):
                continue  # a sweep took it for a dead writer's: another name
            mine = os.fstat(fd)
            case = _same(dir_fd, name.replace("CASE-PROBE", "case-probe"), mine)
            form = _same(dir_fd, unicodedata.normalize("NFD", name), mine)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            os.close(fd)
        if case:
            return fold_case
        return fold_form if form else None
    return None


def _same(dir_fd: int, name: str, mine: os.stat_result) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
