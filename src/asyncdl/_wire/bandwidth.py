"""The bandwidth cap: one token bucket per engine that every body read draws from.

A read takes the bytes it got (only aiohttp knows beforehand how many it holds) and
sleeps off any debt before it hands them on: its next read waits meanwhile,
aiohttp's buffer fills, and TCP's flow control slows the server down to the rate.

Each taker reserves its bytes at once, and sleeps once, for a computed time (no
polling, no spinning): takers are served in the order they came, so ten parts in
flight each get about a tenth of the rate. The bucket holds a tenth of a second of
the rate (``BURST``): after an idle moment that much goes through without waiting.
By any time ``t`` the readers have been handed at most ``rate * t + rate * BURST``
bytes; a read larger than that waits for its excess.
"""

from __future__ import annotations

import asyncio
import time

#: Seconds' worth of bytes a full bucket lets through at once.
BURST = 0.1


class TokenBucket:
    """Bytes per second for every reader that shares it; see the module's docstring."""

    __slots__ = ("_stamp", "_tokens", "capacity", "rate")

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.capacity = rate * BURST
        # Full, as after an idle eternity: the first reservation refills it to capacity.
        self._tokens = self.capacity
        self._stamp = -float("inf")

    def reserve(self, size: int, now: float) -> float:
        """Take ``size`` bytes at time ``now``; the seconds the taker must then wait
        (0 when the bucket held them). A wait leaves the bucket in debt, which the
        next taker's wait includes."""
        tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate) - size
        self._tokens, self._stamp = tokens, now
        return -tokens / self.rate if tokens < 0 else 0.0

    async def take(self, size: int) -> None:
        """Take ``size`` bytes, sleeping as long as the rate says."""
        delay = self.reserve(size, time.monotonic())
        if delay > 0:
            await asyncio.sleep(delay)
