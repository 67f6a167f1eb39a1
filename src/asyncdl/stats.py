"""What an engine has done so far: requests by kind and outcome, bytes, retries,
throttles, objects; counted as it goes, read with ``engine.stats()``.

Always on, so counting must cost nothing a tiny object would notice: plain int
increments on one object per engine (one loop, no lock), a served request is one
``+= 1`` on a list slot known at the call site; only failures are classified.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from .errors import THROTTLE_CODES, DownloadError, client_error_status

# Where each outcome is counted in a kind's list (see :class:`RequestCounts`).
OK, THROTTLED, CLIENT_ERROR, SERVER_ERROR, NETWORK_ERROR, CANCELLED = range(6)


def outcome(exc: BaseException) -> int:
    """Where a failed request is counted. Every 503 is a throttle: S3 sends SlowDown
    (or, to a HEAD, which has no body, a bare 503) when a prefix gets more requests
    than it serves; so is 429."""
    if isinstance(exc, ClientError):
        return answer_outcome(*client_error_status(exc))
    if isinstance(exc, DownloadError):
        return SERVER_ERROR  # an answer asyncdl cannot use (a malformed Content-Range)
    if isinstance(exc, Exception):
        return NETWORK_ERROR  # no answer: reset, timeout, refused, a cut body...
    return CANCELLED


def answer_outcome(status: int, code: str | None) -> int:
    """Where a request whose answer was an error (HTTP ``status``, S3 error ``code``)
    is counted."""
    if status in (429, 503) or code in THROTTLE_CODES:
        return THROTTLED
    return SERVER_ERROR if status >= 500 else CLIENT_ERROR


class Counters:
    """The running counts of one engine (mutable; :meth:`snapshot` freezes them)."""

    __slots__ = ("bytes", "gets", "heads", "lists", "objects_done", "objects_failed", "retries")

    def __init__(self) -> None:
        #: One slot per outcome (``OK``... ``CANCELLED``), per kind of request.
        self.gets = [0] * 6
        self.heads = [0] * 6
        self.lists = [0] * 6
        self.bytes = 0
        self.retries = 0
        self.objects_done = 0
        self.objects_failed = 0

    def snapshot(self, *, limit: int, max_concurrency: int, cuts: int) -> EngineStats:
        gets, heads, lists = (RequestCounts(*c) for c in (self.gets, self.heads, self.lists))
        return EngineStats(
            gets=gets,
            heads=heads,
            lists=lists,
            bytes_received=self.bytes,
            retries=self.retries,
            throttles=gets.throttled + heads.throttled + lists.throttled,
            limit_cuts=cuts,
            concurrency_limit=limit,
            max_concurrency=max_concurrency,
            objects_done=self.objects_done,
            objects_failed=self.objects_failed,
        )


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """Requests of one kind, by what became of them."""

    #: Answered with success (2xx), whatever became of the body after.
    ok: int = 0
    #: Answered "slow down": 503, 429, or a throttling error code.
    throttled: int = 0
    #: Answered with another 4xx (403, 404, 412, 416...), or a redirect.
    client_error: int = 0
    #: Answered with another 5xx.
    server_error: int = 0
    #: Never answered: connection refused or reset, timeout.
    network_error: int = 0
    #: Cancelled before their answer came (a timeout, Ctrl-C, a closed stream).
    cancelled: int = 0

    @property
    def total(self) -> int:
        """Every request of this kind, whatever became of it."""
        return (
            self.ok
            + self.throttled
            + self.client_error
            + self.server_error
            + self.network_error
            + self.cancelled
        )


@dataclass(frozen=True, slots=True)
class EngineStats:
    """What an engine has done since it opened (``engine.stats()``): a snapshot."""

    #: GetObject requests (ranged, whole and PartNumber GETs).
    gets: RequestCounts
    #: HeadObject requests.
    heads: RequestCounts
    #: ListObjectsV2 pages asked for.
    lists: RequestCounts
    #: Object bytes received and kept (written to a file or handed to a stream).
    bytes_received: int
    #: Attempts made again after a failure (a request, a cut body, a listing page),
    #: by asyncdl or, for a borrowed client that retries, by botocore.
    retries: int
    #: Throttled answers, all kinds together.
    throttles: int
    #: Times the adaptive limit was cut (one burst of throttles is one cut).
    limit_cuts: int
    #: Requests the engine lets in flight now (``max_concurrency`` unless adaptive
    #: concurrency has lowered it).
    concurrency_limit: int
    #: The engine's ``TransferConfig.max_concurrency``.
    max_concurrency: int
    #: Downloads to a file that completed (streams are not objects here: their
    #: requests and bytes are counted above).
    objects_done: int
    #: Downloads to a file that failed.
    objects_failed: int

    @property
    def requests(self) -> int:
        """Every request sent."""
        return self.gets.total + self.heads.total + self.lists.total

    def lines(self) -> list[str]:
        """The stats as short lines of text (what ``--debug`` prints)."""
        kinds = {"GET": self.gets, "HEAD": self.heads, "LIST": self.lists}
        lines = [
            f"requests: {self.requests}",
            *(
                f"  {name}: {counts.total} (ok {counts.ok}, throttled {counts.throttled}, "
                f"client error {counts.client_error}, server error {counts.server_error}, "
                f"network error {counts.network_error}, cancelled {counts.cancelled})"
                for name, counts in kinds.items()
                if counts.total
            ),
            f"bytes received: {self.bytes_received}",
            f"retries: {self.retries}",
            f"throttles: {self.throttles} (limit cut {self.limit_cuts} times)",
            f"concurrency limit: {self.concurrency_limit} of {self.max_concurrency}",
            f"objects: {self.objects_done} done, {self.objects_failed} failed",
        ]
        return lines
