"""A borrowed client that retries by itself: botocore's retries are the engine's too.

A client the engine creates never retries (asyncdl does, resuming parts); a client
handed in may, and its retries happen inside one ``get_object`` call, out of the
engine's sight unless it listens to the client's events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, payload

_EVENTS = ("needs-retry.s3.GetObject", "request-created.s3.GetObject")


def _throttle_gets(count: int) -> Any:
    """A rule that answers the next ``count`` GETs with 503 SlowDown."""
    left = [count]

    def rule(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and left[0] > 0:
            left[0] -= 1
            return Fault(status=503, error_code="SlowDown")
        return None

    return rule


def _retrying_client(endpoint: str, attempts: int) -> Any:
    """A client as users make them: botocore's standard retries, ``attempts`` in all."""
    return get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=AioConfig(
            retries={"total_max_attempts": attempts, "mode": "standard"},
            response_checksum_validation="when_required",
        ),
    )


def _handlers(client: Any) -> list[int]:
    """How many handlers the client's events have (botocore's emitter, looked into)."""
    emitter = client.meta.events._emitter
    return [len(list(emitter._handlers.prefix_search(event))) for event in _EVENTS]


async def test_botocore_retries_of_a_borrowed_client_are_counted(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(1000)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(
        chunk_size=CHUNK, max_concurrency=8, lean_get=False, backoff_base=0.001
    )
    async with _retrying_client(proxy.url, 4) as client:
        before = _handlers(client)
        proxy.rule = _throttle_gets(3)
        async with asyncdl.Engine(client, config=config) as engine:
            result = await engine.download(bucket, "k", tmp_path / "k")
            stats = engine.stats()
        assert (tmp_path / "k").read_bytes() == data
        assert result.requests == len(proxy.requests) == 4  # botocore sent it 4 times
        assert stats.retries == 3
        assert stats.throttles == stats.gets.throttled == 3
        assert stats.gets.ok == 1
        assert stats.requests == 4
        # One burst of throttles (one request's attempts): one cut, 8 -> 4.
        assert stats.limit_cuts == 1
        assert stats.concurrency_limit == 4
        # The client outlives the engine: what the engine hooked on it is gone.
        assert _handlers(client) == before

        # A second engine on the same client counts its own retries, once.
        proxy.reset_stats()
        proxy.rule = _throttle_gets(2)
        async with asyncdl.Engine(client, config=config) as second:
            await second.download(bucket, "k", tmp_path / "k2")
            again = second.stats()
        assert again.retries == 2
        assert again.throttles == 2
        assert again.requests == len(proxy.requests) == 3
        assert _handlers(client) == before


async def test_two_engines_open_on_one_client_count_only_their_own(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=False, backoff_base=0.001)
    async with (
        _retrying_client(proxy.url, 3) as client,
        asyncdl.Engine(client, config=config) as first,
        asyncdl.Engine(client, config=config) as second,
    ):
        proxy.rule = _throttle_gets(1)
        await first.download(bucket, "k", tmp_path / "a")
        proxy.rule = _throttle_gets(2)
        await second.download(bucket, "k", tmp_path / "b")
        # A call of the client's own, outside any engine: nobody's.
        proxy.rule = _throttle_gets(1)
        response = await client.get_object(Bucket=bucket, Key="k")
        async with response["Body"] as body:
            assert await body.read() == b"data"
        assert (first.stats().retries, first.stats().throttles) == (1, 1)
        assert (second.stats().retries, second.stats().throttles) == (2, 2)


async def test_a_borrowed_clients_retried_heads_and_listings_are_counted(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=False, backoff_base=0.001)
    left = {"HEAD": 2, "LIST": 1}

    def rule(request: RequestRecord) -> Fault | None:
        kind = "LIST" if "list-type=2" in request.path else request.method
        if left.get(kind, 0) > 0:
            left[kind] -= 1
            return Fault(status=503, error_code="SlowDown")
        return None

    proxy.rule = rule
    async with (
        _retrying_client(proxy.url, 3) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        await engine.download(bucket, "k", tmp_path / "k", strategy="head-first")
        pages = [page async for page in engine.list_pages(bucket)]
        stats = engine.stats()
    assert [item["Key"] for item in pages[0]["Contents"]] == ["k"]
    assert (stats.heads.throttled, stats.heads.ok) == (2, 1)
    assert (stats.lists.throttled, stats.lists.ok) == (1, 1)
    assert stats.retries == stats.throttles == 3
