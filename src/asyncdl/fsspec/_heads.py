"""The size and ETag the last HEADs of a file system found, as its listings cache keeps
a listing's: a file opened after its ``info`` (pyarrow's way) is pinned from its first
GET. A stale one gives ``ObjectChangedError``, never other bytes, and is forgotten
(as ``invalidate_cache`` forgets them); they expire as the listings do
(``listings_expiry_time``)."""

from __future__ import annotations

import time
from collections import OrderedDict

#: The HEADs kept (the newest).
KEPT = 1024


class Heads:
    """A bounded map of ``bucket/key`` to the ``(size, etag)`` its HEAD found, each
    kept ``expiry`` seconds (``None``: until forgotten or pushed out)."""

    def __init__(self, expiry: float | None = None) -> None:
        self._expiry = expiry
        self._found: OrderedDict[str, tuple[int, str, float]] = OrderedDict()

    def note(self, path: str, size: int, etag: str | None) -> None:
        """What a HEAD of ``path`` found (an answer without an ETag pins nothing)."""
        if not etag:
            return
        self._found[path] = (size, etag, time.monotonic())
        self._found.move_to_end(path)
        if len(self._found) > KEPT:
            self._found.popitem(last=False)

    def forget(self, path: str | None = None) -> None:
        """Forget every HEAD, or ``path``'s and those of the paths under it."""
        if path is None:
            self._found.clear()
            return
        under = f"{path}/"
        for name in [n for n in self._found if n == path or n.startswith(under)]:
            del self._found[name]

    def get(self, path: str) -> tuple[int, str] | None:
        """The size and ETag of ``path``'s last HEAD, if kept and not expired."""
        found = self._found.get(path)
        if found is None:
            return None
        size, etag, when = found
        if self._expiry is not None and time.monotonic() - when > self._expiry:
            del self._found[path]
            return None
        return size, etag
