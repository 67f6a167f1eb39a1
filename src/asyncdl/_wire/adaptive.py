"""The engine's budget of requests in flight, whose limit backs off when S3 throttles.

S3 answers ``503 SlowDown`` when a prefix gets more requests than it serves; each
request that gets one is retried after a backoff, but a fixed concurrency sends the
retries back into the same crowd. Here the limit moves as TCP's congestion window
does (additive increase, multiplicative decrease): a throttled answer halves it
(``DECREASE``), and every ``limit`` requests answered without one raise it
by one, never above ``max_concurrency``, never below 1. One burst of 503s is one
cut: each request carries the *epoch* it was let in under, and only a request let in
since the last cut may cut again (the requests in flight when S3 throttled saw the
same crowd: their 503s say nothing new). That is "at most once per round trip"
without a clock. Requests in flight above a lowered limit finish; new ones wait.

The cost per request is that of ``asyncio.Semaphore``: a counter compared and moved
on acquire and release, a future only for a request that has to wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from contextvars import ContextVar

from ..errors import EngineClosed, OtherLoop

#: The share of the limit kept after a throttled answer, as TCP's halving. Measured
#: against 0.7 (the AWS SDKs' adaptive retry mode): from 64 to a server that serves 8,
#: 0.7 takes five cuts, one per retry of the first burst, and some of its requests ran
#: out of attempts on the way down (1 or 2 objects of 2000 at ``max_attempts=5``);
#: halving gets there in three, with fewer 503s overall (349 against 461) and none
#: failed (benchmarks/throttle.py).
DECREASE = 0.5


class Budget:
    """Slots for requests in flight; ``acquire()`` returns the epoch to hand back
    to :meth:`throttled` should the request be throttled. Not thread-safe (one loop)."""

    __slots__ = (
        "_acked",
        "_adaptive",
        "_closed",
        "_epoch",
        "_in_flight",
        "_limit",
        "_loop",
        "_max",
        "_waiters",
    )

    def __init__(self, max_concurrency: int, *, adaptive: bool = True) -> None:
        self._max = max_concurrency
        self._limit = max_concurrency
        self._adaptive = adaptive
        self._in_flight = 0
        #: Requests answered since the limit last moved (the additive increase).
        self._acked = 0
        #: Cuts so far: a request let in before the last one cannot cut again.
        self._epoch = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: Set as the engine closes: no request goes out after it.
        self._closed = False
        #: The loop the budget was made on (the engine's), if made on one: its waiters
        #: are that loop's futures, so another loop's request is refused.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return self._limit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def cuts(self) -> int:
        """Times the limit was cut."""
        return self._epoch

    async def acquire(self) -> int:
        """Wait for a slot (first come, first served); return the current epoch.
        ``EngineClosed`` once the engine has closed, however long it waited."""
        if self._closed:
            raise EngineClosed
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            raise OtherLoop
        if self._in_flight < self._limit and not self._waiters:
            self._in_flight += 1
            SLOT.set((self, self._epoch))
            return self._epoch
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            try:
                await future
            finally:
                self._waiters.remove(future)
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._in_flight -= 1  # granted, but cancelled before it ran: hand it back
            raise
        finally:
            self._wake()
        if self._closed:  # granted in the same step the engine closed in
            self.release()
            raise EngineClosed
        SLOT.set((self, self._epoch))
        return self._epoch

    def close(self) -> None:
        """The engine closes: every request waiting for a slot, and any asked for
        later, gets ``EngineClosed`` instead of going out."""
        self._closed = True
        for future in self._waiters:
            if not future.done():
                future.set_exception(EngineClosed())

    def release(self) -> None:
        """Hand a slot back (a request that failed, or whose answer says nothing of
        the server's load)."""
        self._in_flight -= 1
        if self._waiters:
            self._wake()

    def release_ok(self) -> None:
        """Hand a slot back after a served request: every ``limit`` of them raise the
        limit by one, up to ``max_concurrency``."""
        self._in_flight -= 1
        if self._limit < self._max:
            self._acked += 1
            if self._acked >= self._limit:
                self._acked = 0
                self._limit += 1
        if self._waiters:
            self._wake()

    def throttled(self, epoch: int) -> None:
        """A request let in at ``epoch`` was throttled (its slot is released apart):
        cut the limit, unless a cut since it was let in already answered that crowd."""
        if self._adaptive and epoch == self._epoch:
            self._epoch += 1
            self._acked = 0
            self._limit = max(1, int(self._limit * DECREASE))

    def _wake(self) -> None:
        # As many waiters as the limit now allows; a woken waiter holds its slot from
        # here (a done future still queued is one woken but not yet running).
        for future in self._waiters:
            if self._in_flight >= self._limit:
                return
            if not future.done():
                self._in_flight += 1
                future.set_result(None)


#: The budget, and the epoch, of the slot the running task took last: a request a
#: borrowed client retries by itself (botocore's own retries, inside one call) is
#: told apart by it, and counted by the engine it belongs to (``clients.ClientRetries``).
#: Set as a slot is taken, so the call that follows in the same task sees it.
SLOT: ContextVar[tuple[Budget, int] | None] = ContextVar("asyncdl_slot", default=None)


@contextlib.contextmanager
def own_slots() -> Iterator[None]:
    """Forget, on the way out, the slots taken inside: a caller's own requests after an
    engine call are not the engine's."""
    token = SLOT.set(None)
    try:
        yield
    finally:
        SLOT.reset(token)
