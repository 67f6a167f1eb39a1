"""Random access against a hostile server and careless callers: a 416 that names a
size it contradicts, totals past any file, two tasks on one reader, ETags that cannot
pin, block sizes that would cost an object per byte."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload

KiB = 1024
BLOCK = 4 * KiB


def answer_416(actual: int) -> Fault:
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRange</Code>'
        b"<Message>The requested range is not satisfiable</Message>"
        b"<ActualObjectSize>%d</ActualObjectSize></Error>" % actual
    )
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
    return Fault(reply=(416, headers, body))


async def test_a_416_naming_a_size_past_the_range_is_an_error_not_unpinned_gets(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    first = threading.Event()

    def rule(request: Any) -> Fault | None:
        if not first.is_set():
            first.set()
            return answer_416(len(data))  # "bytes 0-9 are past the end of 512 KiB"
        return None

    proxy.rule = rule
    ranges = [(i * CHUNK, i * CHUNK + 10) for i in range(8)]
    with pytest.raises(asyncdl.DownloadError, match="416"):
        await engine.read_ranges(bucket, "k", ranges, max_gap=0)
    assert len(proxy.requests) == 1  # no unpinned GET went out after it


@pytest.mark.parametrize("first_block", ["start", "end"])
async def test_a_reader_opened_on_a_416_naming_a_size_fails(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, first_block: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(8 * BLOCK))
    proxy.rule = lambda r: answer_416(8 * BLOCK)
    with pytest.raises(asyncdl.DownloadError, match="416"):
        await engine.open_reader(bucket, "k", block_size=BLOCK, first_block=first_block)  # type: ignore[arg-type]


async def test_a_416_naming_size_0_is_an_empty_object(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"")
    proxy.rule = lambda r: answer_416(0)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end") as f:
        assert (f.size, await f.read()) == (0, b"")


async def test_a_pinned_get_answered_416_is_object_changed(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(8 * BLOCK))
    async with engine.open_reader(bucket, "k", block_size=BLOCK) as f:
        proxy.rule = lambda r: answer_416(2 * BLOCK)
        with pytest.raises(asyncdl.ObjectChangedError):
            await f.read_at(6 * BLOCK, 10)


async def test_a_total_past_any_file_is_refused(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(8 * BLOCK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    headers = {
        "Content-Range": f"bytes {10**30 - BLOCK}-{10**30 - 1}/{10**30}",
        "Content-Length": str(BLOCK),
        "ETag": etag,
    }
    proxy.rule = lambda r: Fault(reply=(206, headers, data[:BLOCK]))
    with pytest.raises(asyncdl.DownloadError):
        await engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end")


async def test_two_tasks_reading_one_reader_get_consecutive_bytes(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(64 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK) as f:
        f.seek(10 * BLOCK)
        a, b = await asyncio.gather(f.read(100), f.read(100))
        assert sorted([a, b]) == sorted(
            [data[10 * BLOCK : 10 * BLOCK + 100], data[10 * BLOCK + 100 : 10 * BLOCK + 200]]
        )
        assert f.tell() == 10 * BLOCK + 200


async def test_two_threads_reading_one_sync_reader_read_each_byte_once(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    data = payload(64 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK) as f:
        raw = f.sync()

        def drain() -> list[bytes]:
            pieces = []
            while piece := raw.read(1000):
                pieces.append(piece)
            return pieces

        first, second = await asyncio.gather(asyncio.to_thread(drain), asyncio.to_thread(drain))
    assert sum(map(len, first + second)) == len(data)


async def test_etags_that_cannot_pin_are_refused_before_anything_is_sent(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(10 * BLOCK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    with pytest.raises(asyncdl.InvalidRequestError, match="weak"):
        await engine.read_ranges(bucket, "k", [(0, 4)], size=len(data), etag=f"W/{etag}")
    with pytest.raises(asyncdl.InvalidRequestError, match="weak"):
        engine.open_reader(bucket, "k", size=len(data), etag=f"W/{etag}")
    for bad in (f"{etag}\r\nX-Evil: 1", '"a\x00b"', '"a b"', '"caf\u00e9\u2603"'):
        with pytest.raises(asyncdl.InvalidRequestError, match="etag"):
            await engine.read_ranges(bucket, "k", [(0, 4)], etag=bad)
        with pytest.raises(asyncdl.InvalidRequestError, match="etag"):
            await engine.download(bucket, "k", "never-written", etag=bad)
    assert proxy.requests == []


async def test_reader_arguments_that_would_cost_an_object_per_byte_are_refused(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Any
) -> None:
    for block_size in (1, 7, 4095):
        with pytest.raises(asyncdl.InvalidRequestError, match="block_size"):
            engine.open_reader(bucket, "k", block_size=block_size)

    class Anything(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    with pytest.raises(asyncdl.InvalidRequestError, match="first_block"):
        engine.open_reader(bucket, "k", first_block=Anything("x"))  # type: ignore[arg-type]
    assert proxy.requests == []


async def test_readinto_a_read_only_buffer_moves_nothing(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    data = payload(4 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK) as f:
        with pytest.raises(TypeError):
            await f.readinto(b"0123456789")
        assert f.tell() == 0
        assert await f.read(4) == data[:4]


async def test_a_small_object_from_a_server_that_ignores_range_opens(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(100)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(headers={"range": None})
    for first_block in ("start", "end"):
        async with engine.open_reader(bucket, "k", block_size=BLOCK, first_block=first_block) as f:
            f.seek(-10, 2)
            assert await f.read() == data[-10:]
            assert await f.read_ranges([(0, 5)]) == [data[:5]]
