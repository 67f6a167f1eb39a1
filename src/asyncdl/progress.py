"""Progress reporting: byte deltas to a caller's callable, sync or async.

The callable receives ``(delta, total)``: bytes just written (or yielded, for a
stream), and the object's total from discovery. When a download discards bytes
(a fresh attempt after a checksum mismatch, or a failure), it reports the
negative of what it had reported, so a bar fed by several downloads stays true.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

ProgressCallback = Callable[[int, int], object]


class Reporter:
    __slots__ = ("callback", "sent", "total")

    def __init__(self, callback: ProgressCallback | None) -> None:
        if callback is not None and not callable(callback):
            raise ValueError(f"progress must be callable, got {callback!r}")
        self.callback = callback
        self.total = 0
        self.sent = 0

    async def add(self, delta: int) -> None:
        if self.callback is None or delta == 0:
            return
        self.sent += delta
        result = self.callback(delta, self.total)
        if inspect.isawaitable(result):
            await result

    async def rewind(self) -> None:
        await self.add(-self.sent)
