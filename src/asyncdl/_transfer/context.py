"""What every download of one engine shares: the client, the config, the request budget,
the lean GET sender, the bandwidth cap, the stats, and what the engine has learnt of
its server.

The engine creates one when it opens; one object's transfer, the part fetchers, bulk
downloads and streams take it instead of the engine, so nothing below the engine
reaches back up to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._wire import url_session
from .._wire.adaptive import Budget
from .._wire.bandwidth import TokenBucket
from .._wire.body_reader import SpoolTo
from .._wire.clients import pool_size
from .._wire.lean_send import Route, route_for
from .._wire.list_objects import list_pages
from .._wire.request_args import ExtraArgs, check_bucket_and_key, check_extra_args
from .._wire.s3_source import S3Object
from .._wire.signed_get import SignedGets
from .._wire.url_source import UrlObject, check_url
from ..config import TransferConfig
from ..errors import OtherLoop
from ..stats import Counters


@dataclass(slots=True, eq=False)
class Context:
    """One open engine's resources."""

    #: The aiobotocore S3 client (the engine's own, or a borrowed one).
    client: Any
    config: TransferConfig
    #: The budget of requests in flight, shared by every download of the engine.
    #: Its limit moves with S3's throttling when ``config.adaptive``.
    budget: Budget
    #: The lean GET path, or ``None`` (``lean_get=False``, or a client it cannot serve).
    signed: SignedGets | None
    #: Whether the server answers PartNumber GETs part by part (``None``: not asked
    #: yet). One engine talks to one endpoint, so asking once is enough.
    part_gets: bool | None = None
    #: The bandwidth cap every body read of the engine draws from (``None``: no cap).
    bandwidth: TokenBucket | None = field(init=False)
    #: How a read that is not a download spools a whole answer of unknown length: in
    #: the system's temp directory, within the engine's read timeout and cap.
    _spool_to: SpoolTo = field(init=False)
    #: What the engine has done so far (``engine.stats()``).
    counters: Counters = field(default_factory=Counters)
    #: The engine's own HTTP session for URL downloads, made when first needed by a
    #: client whose HTTP session cannot carry them; closed by :meth:`close`.
    _url_session: url_session.OwnSession | None = field(default=None, init=False)
    _url_session_made: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    #: Set once the engine has closed: what still holds the context (a random-access
    #: reader) must not send through a closed client or count in a closed engine.
    closed: bool = field(default=False, init=False)
    #: Tasks that outlive the call that started them (a reader's bytes fetched ahead):
    #: cancelled, and waited for, as the engine closes, before its client does.
    _background: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    #: The loop that opened the engine: its connections, its budget's waiters and its
    #: tasks are that loop's.
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop, init=False)

    def __post_init__(self) -> None:
        rate = self.config.max_bandwidth
        self.bandwidth = None if rate is None else TokenBucket(rate)
        self._spool_to = SpoolTo(None, self.config.read_timeout, self.bandwidth, None)

    def s3_object(self, bucket: str, key: str, extra_args: ExtraArgs) -> S3Object:
        """The requests of one object through this client and budget."""
        return S3Object(
            self.client,
            self.budget,
            bucket,
            key,
            extra_args,
            counts=self.counters,
            spool_to=self._spool_to,
            signed=self.signed,
            checksum_mode=self.config.validate != "off",
            # The headers within read_timeout of the connection, an error's whole body
            # within another (the lean path and URLs bound theirs the same way).
            answer_within=self.config.connect_timeout + 2 * self.config.read_timeout,
        )

    def list_pages(
        self,
        bucket: str,
        prefix: str,
        *,
        delimiter: str | None = None,
        params: Mapping[str, object] | None = None,
    ) -> AsyncGenerator[dict[str, Any]]:
        """ListObjectsV2's pages through this client and budget, counted."""
        return list_pages(
            self.client,
            self.config,
            bucket=bucket,
            prefix=prefix,
            delimiter=delimiter,
            params=params,
            counters=self.counters,
            budget=self.budget,
        )

    def object_for(
        self, bucket: str, key: str, extra_args: ExtraArgs | None, url: str | None
    ) -> S3Object:
        """The requests of an object (of what ``url`` serves, when given: its ``bucket``
        is ``""``, its ``key`` the URL as shown), its name and GET arguments checked
        first: ``InvalidRequestError`` before anything is sent."""
        if url is None:
            check_bucket_and_key(bucket, key)
            args = check_extra_args(extra_args, bucket=bucket, key=key)
            return self.s3_object(bucket, key, args)
        check_url(url)
        return self.url_object(url)

    def url_object(self, url: str) -> UrlObject:
        """The requests of one download from ``url`` through this budget."""
        return UrlObject(
            self.url_route, self.budget, url, counts=self.counters, spool_to=self._spool_to
        )

    async def url_route(self, url: str) -> Route:
        """Where requests to ``url`` go: the client's own HTTP session (its pool,
        proxies, TLS settings and timeouts), or the engine's when it has none to lend
        (:mod:`asyncdl._wire.url_session`: set up as the default client's would be)."""
        route = None
        http_session = getattr(getattr(self.client, "_endpoint", None), "http_session", None)
        if http_session is not None:
            route = await route_for(http_session, url)
        if route is None:
            async with self._url_session_made:  # one session, its bundle read once
                session = self._url_session
                if session is None:
                    config = self.config
                    session = self._url_session = await url_session.open_session(
                        pool_size(config), config.connect_timeout, config.read_timeout
                    )
            route = Route(session.http, None, {})
        return route

    def track(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` as the engine closes, if it has not ended by then."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        self.closed = True
        # What still runs on the engine fails at its next request; none goes out.
        self.budget.close()
        if self._background:
            for task in self._background:
                task.cancel()
            # Their GETs end before the client they were sent on closes.
            await asyncio.wait(self._background)
        if self._url_session is not None:
            session, self._url_session = self._url_session, None
            await session.close()


def usable(ctx: Context | None, *, any_loop: bool = False) -> Context:
    """An open engine's context, for a call on the loop that opened it (``any_loop``:
    on any, to read its counters); else ``RuntimeError``, at once."""
    if ctx is None:
        raise RuntimeError("the Engine is not open: use 'async with Engine() as engine:'")
    if not any_loop:
        on_its_loop(ctx)
    return ctx


def on_its_loop(ctx: Context) -> None:
    """``OtherLoop`` (a ``RuntimeError``) when called from a loop other than the one
    that opened the engine (a second thread's, a later ``asyncio.run``'s): there its
    pooled connections and its budget's waiters would hang, or break its own loop's
    downloads too. A call from no coroutine runs nothing here: let through."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is not ctx.loop:
        raise OtherLoop
