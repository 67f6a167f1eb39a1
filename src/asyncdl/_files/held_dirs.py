"""The directories below a destination that ``cp -r`` and ``sync`` write into: reached
from the destination one name at a time, and held open from the decision to the last
file made in them.

A destination may be shared, and whoever can write in it can put a link where a
key's directory goes, or swap a directory for one mid-run. So a key's directories
are opened from the destination down, each relative to the one above
(``O_NOFOLLOW | O_DIRECTORY``), and made where missing. A symbolic link on the way
is followed only when this process's user owns it, or the owner of the directory
holding it does (the rule of the kernel's ``protected_symlinks``, applied everywhere
below the destination): a user's own link to another disk works, another user's
link is refused (:class:`LinkRefused`). The destination itself is the one the user
named, followed as named.

What was decided stays decided: a key's temp file, partial file, journal and record
are made, renamed and written relative to its directory's descriptor
(:class:`HeldDir`), never by a path walked again, so a directory swapped for a link
after the decision leads nowhere. Where Linux can open a link itself (``O_PATH``),
the link checked is the link followed (its text is read from that descriptor);
elsewhere it is looked at before and after (its inode and change time, which a
rename away and back changes), and one replaced meanwhile is looked at again. A
followed link's text is walked the same way, one name at a time: a link met there
(``latest -> v2``, ``v2`` another user's link) is followed only if it may be, as if
met by its own name, and a loop ends after 40 links, as the kernel's does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_DIR_NOFOLLOW = _DIR | getattr(os, "O_NOFOLLOW", 0)
_O_PATH = getattr(os, "O_PATH", None)
#: What opening a link with ``O_NOFOLLOW | O_DIRECTORY`` answers (ELOOP; EMLINK on
#: FreeBSD), or a file that is not a directory (ENOTDIR).
_NOT_A_PLAIN_DIR = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})
#: Times a name that keeps changing under the walk is looked at.
_TRIES = 8
#: Links followed in one walk at most, as Linux's path lookup (``MAXSYMLINKS``).
_MAX_LINKS = 40
#: Whether directories can be held and named in here (not on Windows: the downloads
#: there go by paths, their directories made by ``os.makedirs``).
# (os.replace takes its directories where os.rename does.)
SUPPORTED = {os.open, os.mkdir, os.stat, os.unlink, os.rename, os.readlink} <= os.supports_dir_fd


class HeldDir:
    """An open directory. Its descriptor stays open while anything refers to this
    object (a temp file still being written in a worker thread holds one), and is
    closed when the last reference goes: a descriptor number is never reused under a
    file call that still names it."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        #: Where it is, as shown in messages (the descriptor is what the calls use).
        self.path = path

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class LinkRefused(OSError):
    """A symbolic link below the destination that is not followed: neither this user
    nor the owner of the directory holding it owns it."""


def at(path: Path, dir_fd: int | None) -> str | Path:
    """What a file call with ``dir_fd`` names for ``path``: its last name, in the held
    directory (``dir_fd`` ``None``: the path itself)."""
    return path if dir_fd is None else path.name


def open_root(root: Path, *, create: bool) -> HeldDir:
    """The destination the user named (a link to it is theirs, and followed), made
    first with ``create``."""
    if create:
        os.makedirs(root, exist_ok=True)
    return HeldDir(os.open(root, _DIR), str(root))


def open_below(top: HeldDir, parts: Sequence[str], *, create: bool) -> HeldDir:
    """The directory ``parts`` below ``top``, each opened relative to the one above;
    with ``create``, made where missing. :class:`LinkRefused` for a link not to be
    followed, another ``OSError`` (its file name the path) for anything else that is
    not a directory."""
    if not parts:
        return top
    fd, path = top.fd, Path(top.path)
    opened = -1
    links = [_MAX_LINKS]
    try:
        for name in parts:
            path = path / name
            inner = _step(fd, name, path, create=create, links=links)
            if opened >= 0:
                os.close(opened)
            fd = opened = inner
    except BaseException:
        if opened >= 0:
            os.close(opened)
        raise
    return HeldDir(opened, str(path))


def _step(fd: int, name: str, path: Path, *, create: bool, links: list[int] | None = None) -> int:
    """The directory ``name`` in ``fd``, opened: a plain one, or what a link that may be
    followed leads to. ``links``: how many more links may be followed on the way (one
    list for a whole walk, as the kernel counts them: a loop ends)."""
    for _ in range(_TRIES):
        try:
            return os.open(name, _DIR_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile: looked at anew
                os.mkdir(name, 0o777, dir_fd=fd)
            continue
        except OSError as exc:
            if exc.errno not in _NOT_A_PLAIN_DIR:
                raise
        inner = _through_link(fd, name, path, [_MAX_LINKS] if links is None else links)
        if inner is not None:
            return inner
    raise OSError(errno.EAGAIN, "it keeps changing", str(path))


def _through_link(fd: int, name: str, path: Path, links: list[int]) -> int | None:
    """What the link ``name`` in ``fd`` leads to, opened, if it may be followed;
    ``None`` when the name changed meanwhile (to be looked at again)."""
    links[0] -= 1
    if links[0] < 0:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    if _O_PATH is not None:
        try:
            link_fd = os.open(name, _O_PATH | os.O_NOFOLLOW | _CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(link_fd)
            if not stat.S_ISLNK(st.st_mode):
                _not_a_link(st, path)
                return None
            _check_owner(st, fd, path, link_fd)
            # The text of this very link: whatever is at the name by now is not followed.
            text = os.readlink("", dir_fd=link_fd)
        finally:
            os.close(link_fd)
        return _follow(fd, text, path, links)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISLNK(st.st_mode):
        _not_a_link(st, path)
        return None
    _check_owner(st, fd, path, None)
    text = os.readlink(name, dir_fd=fd)
    try:
        again = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    # Its change time too: a link renamed away (another one read meanwhile) and back
    # is the same inode, but a rename changes it.
    if _seen(again) != _seen(st):
        return None
    return _follow(fd, text, path, links)


def _follow(fd: int, text: str, path: Path, links: list[int]) -> int:
    """The directory a followed link's ``text`` names (relative to ``fd``, the link's
    directory), opened one name at a time under the same rule: a link met on the way
    (``latest -> v2``, where ``v2`` is another user's link) is followed only if it may
    be, as if it had been met by its own name."""
    absolute = text.startswith("/")
    where = Path("/") if absolute else path.parent
    current = os.open("/", _DIR) if absolute else os.dup(fd)
    try:
        for name in text.split("/"):
            if name in ("", "."):
                continue
            where = where / name
            if name == "..":
                inner = os.open("..", _DIR, dir_fd=current)  # a directory's parent: no link
            else:
                inner = _step(current, name, where, create=False, links=links)
            os.close(current)
            current = inner
    except BaseException:
        os.close(current)
        raise
    return current


def _seen(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_uid, st.st_ctime_ns


def _not_a_link(st: os.stat_result, path: Path) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def _check_owner(st: os.stat_result, dir_fd: int, path: Path, link_fd: int | None) -> None:
    """:class:`LinkRefused` unless the link ``st`` describes is this user's, or the
    owner's of the directory that holds it."""
    if st.st_uid == os.geteuid():
        return
    dir_uid = os.fstat(dir_fd).st_uid
    if st.st_uid == dir_uid:
        return
    try:
        text = os.readlink("", dir_fd=link_fd) if link_fd is not None else os.readlink(path)
    except OSError:
        text = "?"
    raise LinkRefused(
        errno.EPERM,
        f"refusing to write through the symbolic link {str(path)!r} (-> {text!r}): it is "
        f"owned by uid {st.st_uid}, neither this user nor the owner of the directory "
        f"holding it (uid {dir_uid})",
    )
