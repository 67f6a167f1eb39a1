"""Whether small file system calls run on the event loop or in a worker thread.

Checking a target (two stats and an access) or publishing a small file (a create,
one write, a rename) costs tens of microseconds on a local disk: less than the hop
to a worker thread and back, which is a queue, futex wake-ups and the GIL passed to
and fro, and for tiny objects was the larger part of the engine's own CPU. On a
file system where such calls block (NFS, a loaded disk) they must not stall the
loop: once calls on the loop take longer than :attr:`QuickIO.LIMIT` two in a row,
or often enough between quick ones (NFS answers a stat from its cache, not a
create), file calls go to the executor for :attr:`QuickIO.OFF_LOOP` seconds, then
the loop is tried again; a file system still slow then stays off the loop twice as
long each time, up to :attr:`QuickIO.MAX_OFF_LOOP`.

What is not the file system's fault does not count: the time garbage collections
took during a call (the call's overlap with them is taken off its time; a collection
in another thread counts too, as the call waits for the GIL it holds, so a stall
hides behind one only for as long as they overlap), and one slow call now and then
(the scheduler on a busy machine).

The time off the loop is a time, not a number of calls: trying the loop again
stalls it for the two slow calls that send it back, so how often that may happen is
a share of the wall time, whatever the rate of calls (a count of 1000 calls is
several tries a second at 10,000 calls a second, and hours at one a minute).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

#: Seconds the collections so far took, and when the one under way began (0.0: none):
#: one tuple, so that a thread reading it never sees half an update.
_gc_clock: tuple[float, float] = (0.0, 0.0)


def _count_collection(phase: str, info: dict[str, Any]) -> None:
    # One clock per process, as the collector.
    global _gc_clock  # noqa: PLW0603
    done, since = _gc_clock
    if phase == "start":
        _gc_clock = (done, time.perf_counter())
    elif since:
        _gc_clock = (done + time.perf_counter() - since, 0.0)


def _collected_until(now: float) -> float:
    """Seconds collections took up to ``now``, the one under way up to ``now``: the
    difference of two readings is the overlap of the time between with collections."""
    done, since = _gc_clock
    return done + (now - since) if since else done


# A collection in the loop's thread runs whole inside the call that allocated. One in
# another thread may begin before a call and end during it, or go on after it, when
# it gives up the GIL (a finalizer that blocks): only the overlap is taken off.
# Other gc callbacks' work is timed only where it runs between this one's start and
# its stop. The callback is all the library adds to the collector; its settings are
# the application's (the ``asyncdl`` command's, see ``cli.work``).
gc.callbacks.append(_count_collection)


class QuickIO:
    #: Seconds a call on the loop may take and still be quick.
    LIMIT = 0.002
    #: Seconds file calls go to the executor once the loop was found slow.
    OFF_LOOP = 0.25
    #: The longest time off the loop, however long the file system stays slow.
    MAX_OFF_LOOP = 60.0
    #: A slow call counts one, a quick one takes this much off: the loop is left at
    #: two. Two slow in a row trip it, and so do slow ones among few quick ones
    #: (one call in four slow, or more), but not one in five, nor one now and then.
    QUICK_CREDIT = 0.25

    def __init__(self) -> None:
        #: Until when (``time.monotonic()``) file calls go to the executor; 0: not.
        self._off = 0.0
        self._slow = 0.0
        #: How many times over ``OFF_LOOP`` the next time off lasts: doubled at each
        #: trip, 1 again once a call on the loop is quick.
        self._backoff = 1

    def allowed(self) -> bool:
        """Whether the next call may run on the loop."""
        if self._off:
            if time.monotonic() < self._off:
                return False
            self._off = 0.0
        return True

    def took(self, seconds: float) -> None:
        """Count a call made on the loop."""
        if seconds <= self.LIMIT:
            if self._slow:
                self._slow = max(0.0, self._slow - self.QUICK_CREDIT)
            self._backoff = 1
            return
        self._slow += 1
        if self._slow >= 2:
            self._trip()

    def _trip(self, at_least: float = 0.0) -> None:
        """Send file calls off the loop: for ``OFF_LOOP`` times the backoff (or
        ``at_least`` seconds if longer), at most ``MAX_OFF_LOOP``."""
        self._slow = 0.0
        window = min(max(self.OFF_LOOP * self._backoff, at_least), self.MAX_OFF_LOOP)
        self._off = time.monotonic() + window
        if window < self.MAX_OFF_LOOP:
            self._backoff *= 2

    async def call(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``function(*args, **kwargs)``: on the loop while that is quick, else in the
        default executor."""
        if not self.allowed():
            call = functools.partial(function, *args, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(None, call)
        # As ``timed``, with no partial made for the call on the loop (one per object).
        started = time.perf_counter()
        collected = _collected_until(started)
        try:
            return function(*args, **kwargs)
        finally:
            ended = time.perf_counter()
            self.took(ended - started - (_collected_until(ended) - collected))

    def timed(self, function: Callable[[], _T]) -> _T:
        """``function()`` here, on the loop, its time counted (see :meth:`took`) less
        its overlap with garbage collections."""
        started = time.perf_counter()
        collected = _collected_until(started)
        try:
            return function()
        finally:
            ended = time.perf_counter()
            self.took(ended - started - (_collected_until(ended) - collected))


class QuickWrites(QuickIO):
    """The same judgement of a download's writes into its temp file (``file_writes``):
    a write copies up to a MiB (the default ``write_size``) into the page cache, a
    few hundred microseconds, and on a shared machine one in thirty took 2 to 12 ms
    with no slow file system behind it. A write is slow past :attr:`LIMIT`: a MiB
    taken at under 100 MiB/s, or a stall.

    A write past :attr:`STALL` is a file system that stalls (a throttled disk, an NFS
    server), not a busy machine: it alone sends writes off the loop, for at least
    :attr:`OFF_PER_STALL` times its own time, so that stalls now and then, each too
    rare to make two slow calls in a row, still cost the loop at most about one
    hundredth of the time after them."""

    LIMIT = 0.010
    STALL = 0.050
    OFF_PER_STALL = 100.0

    def took(self, seconds: float) -> None:
        if seconds > self.STALL:
            self._trip(seconds * self.OFF_PER_STALL)
        else:
            super().took(seconds)


#: One per process: the file systems a process writes to are what decides.
QUICK_IO = QuickIO()
#: The same for the writes of the bytes downloaded.
QUICK_WRITES = QuickWrites()
