"""Whether small file system calls run on the event loop or in a worker thread.

Checking a target (two stats and an access) or publishing a small file (a create,
one write, a rename) costs tens of microseconds on a local disk: less than the hop
to a worker thread and back, which is a queue, futex wake-ups and the GIL passed to
and fro, and for tiny objects was the larger part of the engine's own CPU. On a
file system where such calls block (NFS, a loaded disk) they must not stall the
loop: after two in a row took longer than :attr:`QuickIO.LIMIT`, the next
:attr:`QuickIO.OFF_LOOP` go to the executor, then the loop is tried again. Two in a
row, so that one call delayed by the scheduler on a busy machine does not count.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


class QuickIO:
    LIMIT = 0.002
    OFF_LOOP = 1000

    def __init__(self) -> None:
        self._off = 0
        self._slow = 0

    def allowed(self) -> bool:
        """Whether the next call may run on the loop."""
        if self._off:
            self._off -= 1
            return False
        return True

    def took(self, seconds: float) -> None:
        """Count a call made on the loop."""
        if seconds <= self.LIMIT:
            self._slow = 0
            return
        self._slow += 1
        if self._slow >= 2:
            self._slow = 0
            self._off = self.OFF_LOOP

    async def call(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``function(*args, **kwargs)``: on the loop while that is quick, else in the
        default executor."""
        call = functools.partial(function, *args, **kwargs)
        if not self.allowed():
            return await asyncio.get_running_loop().run_in_executor(None, call)
        return self.timed(call)

    def timed(self, function: Callable[[], _T]) -> _T:
        """``function()`` here, on the loop, its time counted (see :meth:`took`)."""
        started = time.perf_counter()
        try:
            return function()
        finally:
            self.took(time.perf_counter() - started)


#: One per process: the file systems a process writes to are what decides.
QUICK_IO = QuickIO()
