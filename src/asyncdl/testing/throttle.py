"""A fault rule for the test proxy that throttles as S3 does: ``503 SlowDown`` to any
request that arrives while ``limit`` requests are in flight already.

S3 serves a prefix at some request rate and turns the excess away; a server that
serves ``limit`` requests at once is the same shape on loopback, and one a fixed
concurrency cannot adapt to. The proxy calls its rule on its own loop, just before it
counts the request in flight, so the count the rule reads is exact.
"""

from __future__ import annotations

from .tcp_proxy import Fault, RequestRecord, TcpProxy

_SLOW_DOWN = Fault(status=503, error_code="SlowDown")


class SlowDownAbove:
    """``proxy.rule = SlowDownAbove(proxy, 8)``; ``throttled`` counts the 503s sent."""

    def __init__(self, proxy: TcpProxy, limit: int) -> None:
        self._proxy = proxy
        #: Requests the proxy lets in flight at once; one more is answered 503 SlowDown.
        self.limit = limit
        #: How many 503s it has sent.
        self.throttled = 0

    def __call__(self, request: RequestRecord) -> Fault | None:
        if self._proxy.in_flight >= self.limit:
            self.throttled += 1
            return _SLOW_DOWN
        return None
