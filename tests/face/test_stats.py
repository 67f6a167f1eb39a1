"""engine.stats(): what the engine counted matches what the proxy saw (moto behind it)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

import asyncdl
from asyncdl.cli import cli
from asyncdl.stats import (
    CANCELLED,
    CLIENT_ERROR,
    NETWORK_ERROR,
    SERVER_ERROR,
    THROTTLED,
    outcome,
)
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..bulk.test_bulk import put_in_backend
from ..conftest import CHUNK, payload


def gets(proxy: TcpProxy) -> list[RequestRecord]:
    return [r for r in proxy.requests if r.method == "GET" and "list-type" not in r.path]


async def test_requests_outcomes_retries_and_objects_match_the_proxy(
    client: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    sizes = {f"k{i}": 1000 + i for i in range(20)}
    put_in_backend(bucket, {key: payload(size) for key, size in sizes.items()})
    put_in_backend(bucket, {"big": payload(3 * CHUNK + 5)})
    counter = itertools.count()
    faults = {
        2: Fault(status=503, error_code="SlowDown"),
        5: Fault(status=503, error_code="SlowDown"),
        7: Fault(status=500, error_code="InternalError"),
        9: Fault(cut_after=100),  # an answer (ok) whose body breaks: a retry
    }

    def rule(request: RequestRecord) -> Fault | None:
        return faults.get(next(counter)) if request.method == "GET" else None

    proxy.rule = rule
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01)
    items = [(bucket, key, tmp_path / key) for key in [*sizes, "big", "missing"]]
    async with asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_many(items, strategy="get-first")]
        stats = engine.stats()

    assert sum(r.error is None for r in results) == 21
    sent = gets(proxy)
    heads = [r for r in proxy.requests if r.method == "HEAD"]  # the large one's checksum
    assert stats.gets.total == len(sent)
    assert stats.heads.ok == stats.heads.total == len(heads)
    assert stats.requests == len(proxy.requests) == sum(r.requests for r in results)
    assert stats.gets.throttled == stats.throttles == 2
    assert stats.gets.server_error == 1
    assert stats.gets.client_error == 1  # the missing key's 404
    assert stats.gets.ok == len(sent) - 4
    assert stats.retries == 4
    assert (stats.objects_done, stats.objects_failed) == (21, 1)
    assert stats.bytes_received == sum(sizes.values()) + 3 * CHUNK + 5
    assert stats.lists.total == 0
    assert stats.max_concurrency == 4
    assert stats.limit_cuts in (1, 2)  # one burst of 503s is one cut
    assert 1 <= stats.concurrency_limit <= 4


async def test_heads_and_listing_pages_are_counted(
    client: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_in_backend(bucket, {f"p/k{i}": payload(10, seed=i) for i in range(5)})
    first_list = [True]

    def rule(request: RequestRecord) -> Fault | None:
        if "list-type" in request.path and first_list[0]:
            first_list[0] = False
            return Fault(status=503, error_code="SlowDown")
        return None

    proxy.rule = rule
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01)
    async with asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_prefix(bucket, "p/", tmp_path)]
        await engine.head(bucket, "p/k0")
        stats = engine.stats()

    lists = [r for r in proxy.requests if "list-type" in r.path]
    heads = [r for r in proxy.requests if r.method == "HEAD"]
    assert len(results) == 5
    assert (stats.lists.throttled, stats.lists.ok, stats.lists.total) == (1, 1, len(lists))
    assert (stats.heads.ok, stats.heads.total) == (1, len(heads))
    assert stats.gets.ok == len(gets(proxy)) == 5
    assert stats.retries == 1
    assert stats.requests == len(proxy.requests)
    # A LIST holds a slot of the budget and its throttle cuts the limit (4 -> 2), as a
    # GET's would; the five GETs that follow grow it back (one per limit successes).
    assert (stats.limit_cuts, stats.concurrency_limit) == (1, 4)
    assert stats.objects_done == 5


async def test_a_fixed_budget_keeps_its_limit_and_streams_are_not_objects(
    client: Any, bucket: str, proxy: TcpProxy
) -> None:
    put_in_backend(bucket, {"k": payload(2 * CHUNK)})
    second = itertools.count()

    def rule(request: RequestRecord) -> Fault | None:
        # The second part: a stream's first GET is not retried, its parts are.
        if request.method == "GET" and next(second) == 1:
            return Fault(status=503, error_code="SlowDown")
        return None

    proxy.rule = rule
    config = asyncdl.TransferConfig(
        chunk_size=CHUNK, max_concurrency=4, adaptive=False, backoff_base=0.01
    )
    async with asyncdl.Engine(client, config=config) as engine:
        data = await engine.read_bytes(bucket, "k")
        stats = engine.stats()
    assert data == payload(2 * CHUNK)
    assert (stats.throttles, stats.limit_cuts, stats.concurrency_limit) == (1, 0, 4)
    assert stats.gets.total == len(gets(proxy)) == 3
    assert stats.requests == len(proxy.requests)  # and the checksum HEAD
    assert stats.bytes_received == 2 * CHUNK
    assert (stats.objects_done, stats.objects_failed) == (0, 0)


def test_failures_are_classified_by_what_the_server_said() -> None:
    def client_error(status: int, code: str | None) -> ClientError:
        error = {"Code": code} if code is not None else {}
        response: Any = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(response, "GetObject")

    assert outcome(client_error(503, "SlowDown")) == THROTTLED
    assert outcome(client_error(503, None)) == THROTTLED  # a HEAD's 503 has no body
    assert outcome(client_error(429, None)) == THROTTLED
    assert outcome(client_error(400, "RequestLimitExceeded")) == THROTTLED
    assert outcome(client_error(500, "InternalError")) == SERVER_ERROR
    assert outcome(client_error(404, "NoSuchKey")) == CLIENT_ERROR
    assert outcome(ConnectionResetError()) == NETWORK_ERROR
    assert outcome(asyncio.CancelledError()) == CANCELLED


def test_debug_prints_the_stats_at_the_end(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    put_in_backend(bucket, {"k": payload(1000)})
    argv = ["cp", "--endpoint-url", proxy.url, "--debug", f"s3://{bucket}/k", str(tmp_path)]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.stderr
    stats = [line for line in result.stderr.splitlines() if line.startswith("stats: ")]
    assert stats[0] == f"stats: requests: {len(proxy.requests)}"
    assert result.stderr.splitlines()[-len(stats) :] == stats  # the last lines
    assert "stats: objects: 1 done, 0 failed" in stats
    assert "stats: bytes received: 1000" in stats
    assert "stats:" not in CliRunner().invoke(cli, argv[:3] + argv[4:]).stderr


async def test_the_stats_outlive_the_engine(client: Any, bucket: str, tmp_path: Path) -> None:
    put_in_backend(bucket, {"k": payload(1000)})
    engine = asyncdl.Engine(client)
    with pytest.raises(RuntimeError, match="not open"):
        engine.stats()
    async with engine:
        await engine.download(bucket, "k", tmp_path / "k")
        inside = engine.stats()
    assert engine.stats() == inside
    assert (inside.objects_done, inside.gets.ok) == (1, 1)


async def test_a_streams_bytes_are_counted_however_they_came(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any
) -> None:
    """The bytes of a first answer that held the whole read (a small object, a server
    that ignores Range) are counted as the parts' are."""
    s3.put_object(Bucket=bucket, Key="small", Body=payload(1000))
    s3.put_object(Bucket=bucket, Key="big", Body=payload(3 * CHUNK))
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4)
    async with asyncdl.Engine(client, config=config) as engine:
        assert await engine.read_bytes(bucket, "small") == payload(1000)
        assert engine.stats().bytes_received == 1000
        proxy.rule = lambda request: Fault(headers={"range": None})  # Range ignored
        async with engine.stream(bucket, "big", start=10, end=CHUNK) as stream:
            assert b"".join([piece async for piece in stream]) == payload(3 * CHUNK)[10:CHUNK]
        assert engine.stats().bytes_received == 1000 + CHUNK - 10
