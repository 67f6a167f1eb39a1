"""Where the objects of one listing land: ``cp -r``'s and ``sync``'s targets under
their destination, the directories made for them (held open, see ``held_dirs``), and
the keys refused because another key of the listing took their place first.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

from aiofiles.os import wrap

from .._files import folding, held_dirs
from .._files.held_dirs import HeldDir
from ..results import DownloadResult

#: Directories kept open after their last object, for the next ones (a listing is in
#: key order: the objects of a directory come together, mostly).
_HELD_MAX = 32


def _open_root(root: Path) -> tuple[HeldDir | None, folding.Fold | None]:
    if not held_dirs.SUPPORTED:  # pragma: no cover - Windows
        os.makedirs(root, exist_ok=True)
        return None, None
    held = held_dirs.open_root(root, create=True)
    return held, folding.probe(held.fd)


def _open_below(top: HeldDir | None, parent: Path, parts: tuple[str, ...]) -> HeldDir | None:
    if top is None:  # pragma: no cover - Windows
        os.makedirs(parent, exist_ok=True)
        return None
    return held_dirs.open_below(top, parts, create=True)


# Off the event loop: a busy disk can stall mkdir for long.
_open_root_off_loop = wrap(_open_root)
_open_below_off_loop = wrap(_open_below)


class Places:
    """The local paths one listing has handed out, as files and as directories.

    S3 holds ``p/x`` and ``p/x/y`` side by side; on disk ``x`` is a file or a
    directory. Whichever of the two keys is listed second is refused, whatever the
    timing of the downloads, and the first is downloaded as if it were alone. A file
    still in flight (or failed) is known only here; one on disk stops the walk.

    A key's directories are opened from the root down (``held_dirs``: a link is
    followed only if it is this user's, or its directory owner's), and its download
    writes relative to the one it lands in. Where the root's file system folds case
    or Unicode forms (``folding``), the second of two keys that land on one name there
    is refused too.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        # Every place below is named by its segments under the root (a tuple of the
        # key's own strings, the root ``()``), not by a Path: a Path hashes its parts
        # again at each lookup, and a parent is a new Path each time it is asked for.
        #: Directories made, each with the first key that needed it.
        self._dirs: dict[tuple[str, ...], str] = {}
        #: Files handed out, with their keys, until they are on disk.
        self._files: dict[tuple[str, ...], str] = {}
        #: The directories of every target listed (skipped ones too).
        self.visited: set[tuple[str, ...]] = set()
        self._opened = False
        self._root: HeldDir | None = None
        #: Open directories, the most recently used last.
        self._held: OrderedDict[tuple[str, ...], HeldDir] = OrderedDict()
        #: By each target handed out (its text, as its result names it): its segments,
        #: and the directory it goes in, until its result is settled.
        self._where: dict[str, tuple[tuple[str, ...], HeldDir | None]] = {}
        #: With a folding file system: each path handed out, as it folds, with its key.
        self._fold: folding.Fold | None = None
        self._folded: dict[str, str] = {}

    def visited_dirs(self) -> list[Path]:
        """The directories of every target listed, as paths."""
        return [self.root.joinpath(*parts) for parts in self.visited]

    def _shown(self, parts: tuple[str, ...]) -> str:
        return repr(str(self.root.joinpath(*parts)))

    async def claim(self, key: str, target: Path, parts: tuple[str, ...]) -> str | HeldDir | None:
        """Hand ``target`` (``parts`` below the root) to ``key`` and open (or make) its
        directory; or say why it cannot have it."""
        other = self._dirs.get(parts)
        if other is not None:
            return f"{str(target)!r} is already a directory (for key {other!r})"
        depth = len(parts)
        parent = parts[:-1]
        for up in range(1, depth):
            other = self._files.get(parts[:up])
            if other is not None:
                return f"{self._shown(parts[:up])} is already a file (key {other!r})"
        if not self._opened:
            # Made with the first key, not before: a listing that finds nothing (or
            # fails) leaves nothing behind. If it cannot be made, no key can land.
            self._root, self._fold = await _open_root_off_loop(self.root)
            self._opened = True
            self._dirs[()] = key
        folded = None
        if self._fold is not None:
            folded = self._fold("/".join(parts))
            other = self._folded.get(folded)
            if other is not None:
                return (
                    f"{str(target)!r} is also where key {other!r} lands: the file system "
                    f"of {str(self.root)!r} does not tell names apart by case or Unicode form"
                )
        where = self._held.get(parent)
        if where is None and (self._root is not None or parent not in self._dirs):
            try:
                where = await _open_below_off_loop(self._root, target.parent, parent)
            except OSError as exc:
                if isinstance(exc, held_dirs.LinkRefused):
                    return exc.strerror
                return f"cannot create directory {self._shown(parent)}: {exc.strerror}"
            for up in range(depth):
                self._dirs.setdefault(parts[:up], key)
            if where is not None:
                if len(self._held) >= _HELD_MAX:
                    self._held.popitem(last=False)
                self._held[parent] = where
        elif where is not None:
            self._held.move_to_end(parent)
        if folded is not None:
            self._folded[folded] = key
        self._files[parts] = key
        self._where[str(target)] = (parts, where)
        return where

    def settle(self, result: DownloadResult) -> HeldDir | None:
        """A result is in: the directory its target went in (to record it there)."""
        handed = self._where.pop(str(result.path), None)
        parts, where = handed if handed is not None else (None, None)
        if result.ok:  # on disk: the walk sees it now
            if parts is None:
                # A key a hostile listing named twice: the other copy's result took the
                # entry both made.
                try:
                    parts = result.path.relative_to(self.root).parts
                except ValueError:
                    return None
            self._files.pop(parts, None)
        return where
