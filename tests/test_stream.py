"""engine.stream and engine.read_bytes against moto through the proxy."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from .conftest import CHUNK, make_client, payload


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 7 * CHUNK + 3])
async def test_stream_whole_objects(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, size: int
) -> None:
    data = payload(size)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    pieces = [piece async for piece in engine.stream(bucket, "k")]
    assert b"".join(pieces) == data
    assert all(pieces)  # no empty pieces
    assert len(proxy.requests) == max(1, -(-size // CHUNK))
    assert all(r.headers.get("if-match") == etag for r in proxy.requests[1:])


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 1), (5, 6), (10, CHUNK + 10), (CHUNK, 2 * CHUNK), (3 * CHUNK - 1, None), (100, 100)],
)
async def test_stream_ranges(
    engine: asyncdl.Engine, s3: Any, bucket: str, start: int, end: int | None
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    got = b"".join([p async for p in engine.stream(bucket, "k", start=start, end=end)])
    assert got == data[start:end]


async def test_stream_bad_ranges(engine: asyncdl.Engine, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    with pytest.raises(ValueError, match="end must be"):
        async for _ in engine.stream(bucket, "k", start=5, end=2):
            pass
    with pytest.raises(asyncdl.DownloadError, match="past the end"):
        async for _ in engine.stream(bucket, "k", start=11):
            pass
    assert b"".join([p async for p in engine.stream(bucket, "k", start=10)]) == b""
    with pytest.raises(asyncdl.ObjectNotFoundError):
        async for _ in engine.stream(bucket, "missing"):
            pass


async def test_stream_prefetch_is_bounded_and_cancelled_on_close(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="big", Body=payload(40 * CHUNK))
    proxy.rtt = 0.02
    late = {f"bytes={i * CHUNK}-{(i + 1) * CHUNK - 1}" for i in range(6, 40)}
    proxy.rule = lambda r: Fault(delay=10) if r.range in late else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=16, stream_prefetch=3)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        got = 0
        # Parts 6 and 7 are in flight (held 10 s by the proxy) when the reader leaves:
        # closing must cancel them, not wait for them.
        async with asyncio.timeout(5):
            async with contextlib.aclosing(engine.stream(bucket, "big")) as stream:
                async for piece in stream:
                    got += len(piece)
                    if got >= 5 * CHUNK:
                        break
        sent = len(proxy.requests)
        await asyncio.sleep(0.3)
        assert len(proxy.requests) == sent  # nothing goes on fetching
    assert proxy.max_in_flight <= 3
    assert sent <= 5 + 3  # what was read, plus at most the prefetch window


async def test_stream_resumes_a_cut_part(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut: list[RequestRecord] = []

    def cut_second_part(request: RequestRecord) -> Fault | None:
        if request.range == f"bytes={CHUNK}-{2 * CHUNK - 1}" and not cut:
            cut.append(request)
            return Fault(cut_after=1000, stall=0.3)
        return None

    proxy.rule = cut_second_part
    assert b"".join([p async for p in engine.stream(bucket, "k")]) == data
    assert f"bytes={CHUNK + 1000}-{2 * CHUNK - 1}" in [r.range for r in proxy.requests]


async def test_read_bytes(engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy) -> None:
    data = payload(2 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    assert await engine.read_bytes(bucket, "k") == data
    assert await engine.read_bytes(bucket, "k", max_size=len(data)) == data
    proxy.reset_stats()
    with pytest.raises(asyncdl.DownloadError, match="larger than max_size=100"):
        await engine.read_bytes(bucket, "k", max_size=100)
    assert [r.range for r in proxy.requests] == ["bytes=0-100"]  # never more than max+1
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert await engine.read_bytes(bucket, "empty") == b""


async def test_open_gives_headers_before_the_body(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(3 * CHUNK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    async with engine.stream(bucket, "k", start=10, end=CHUNK + 20) as stream:
        assert (stream.size, stream.etag, stream.length) == (len(data), etag, CHUNK + 10)
        assert len(proxy.requests) == 1
        assert b"".join([piece async for piece in stream]) == data[10 : CHUNK + 20]
    missing = engine.stream(bucket, "nope")
    with pytest.raises(asyncdl.ObjectNotFoundError):
        await missing.open()
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    async with engine.stream(bucket, "empty") as empty:
        assert (empty.size, empty.length) == (0, 0)
        assert [piece async for piece in empty] == []
