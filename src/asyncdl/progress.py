"""Progress reporting: byte deltas to a caller's callable, sync or async.

The callable receives the bytes just written (or yielded, for a stream) and, if it
can take a second positional argument, the object's total from discovery:
``progress(delta, total)``. One that takes a single argument gets ``progress(delta)``,
so boto3's ``Callback`` and tqdm's ``bar.update`` work unchanged. Which form is read
once from the callable's signature (bound methods, ``functools.partial`` and
``*args`` included); a callable whose signature cannot be read (some builtins) is
called as boto3 calls its ``Callback``, with the delta alone.

When a download discards bytes (a fresh attempt after a checksum mismatch, or a
failure), it reports the negative of what it had reported, so a bar fed by several
downloads stays true.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

#: ``progress(delta, total)`` or ``progress(delta)``; either may return an awaitable.
ProgressCallback = Callable[[int, int], object] | Callable[[int], object]


def takes_total(callback: Callable[..., object]) -> bool:
    """Whether ``callback`` is called with ``(delta, total)`` rather than ``(delta)``.

    Raises ``ValueError`` for a callable that takes neither.
    """
    if not callable(callback):
        raise ValueError(f"progress must be callable, got {callback!r}")
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):  # no signature to read: boto3's convention
        return False
    for arguments, two in (((0, 0), True), ((0,), False)):
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return two
    raise ValueError(
        f"progress must take the byte delta, or (delta, total), as positional "
        f"arguments; {callback!r} takes {signature}"
    )


class Reporter:
    __slots__ = ("_call", "callback", "sent", "total")

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._call = None if callback is None else with_total(callback)
        self.callback = callback
        self.total = 0
        self.sent = 0

    async def add(self, delta: int) -> None:
        if self._call is None or delta == 0:
            return
        self.sent += delta
        result = self._call(delta, self.total)
        # Most callbacks return None: asked first, it spares isawaitable's ABC check.
        if result is not None and inspect.isawaitable(result):
            await result

    async def rewind(self) -> None:
        await self.add(-self.sent)


class _Checked:
    """A progress callable whose form is known: called as ``(delta, total)``."""

    __slots__ = ("_callback", "_total")

    def __init__(self, callback: ProgressCallback, total: bool) -> None:
        # Any: its form is the flag's to say, read once; a cast() per call would be a
        # function call for every piece of every object.
        self._callback: Any = callback
        self._total = total

    def __call__(self, delta: int, total: int) -> object:
        if self._total:
            return self._callback(delta, total)
        return self._callback(delta)


def with_total(callback: ProgressCallback) -> Callable[[int, int], object]:
    """``callback`` as a ``(delta, total)`` callable, its form read once: bulk calls
    check it up front, so their many downloads do not read the signature again (and a
    callable of neither form is refused before anything is sent)."""
    if isinstance(callback, _Checked):
        return callback
    return _Checked(callback, takes_total(callback))
