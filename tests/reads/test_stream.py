"""engine.stream and engine.read_bytes against moto through the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 7 * CHUNK + 3])
async def test_stream_whole_objects(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, size: int
) -> None:
    data = payload(size)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    pieces = [piece async for piece in engine.stream(bucket, "k")]
    assert b"".join(pieces) == data
    assert all(pieces)  # no empty pieces
    gets = [r for r in proxy.requests if r.method == "GET"]
    assert len(gets) == max(1, -(-size // CHUNK))
    # One HEAD more brings the checksum of an object larger than the first answer.
    assert len(proxy.requests) - len(gets) == (size > CHUNK)
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


async def test_a_server_that_ignores_range_gets_the_same_answers(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    proxy.rule = lambda r: Fault(headers={"range": None})
    assert b"".join([p async for p in engine.stream(bucket, "k", start=3, end=5)]) == b"34"
    assert b"".join([p async for p in engine.stream(bucket, "k", start=10)]) == b""
    with pytest.raises(asyncdl.InvalidRequestError, match="past the end"):
        async for _ in engine.stream(bucket, "k", start=11):
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
    # The prefetch window, and the checksum HEAD sent once the first answer came.
    assert proxy.max_in_flight <= 3 + 1
    assert sent <= 5 + 3 + 1  # what was read, plus at most the window, and the HEAD


@pytest.mark.parametrize("prefetch", [1, 2])
async def test_a_small_prefetch_window_still_reads_every_part(
    s3: Any, bucket: str, proxy: TcpProxy, prefetch: int
) -> None:
    data = payload(5 * CHUNK + 3)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, stream_prefetch=prefetch, validate="off")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        assert b"".join([piece async for piece in engine.stream(bucket, "k")]) == data
    assert proxy.max_in_flight <= prefetch


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


# -- a stream that is opened and never iterated --
#: The budget of the engine below: every leaked first response takes one slot of it.
BUDGET = 2
#: How the first answer comes: a 206 for the range asked, the whole object (a server
#: that ignores Range), or a 416 (an empty object: nothing is held).
ANSWERS = ["ranged", "range-ignored", "empty"]


@pytest.fixture
async def small_engine(proxy: TcpProxy) -> AsyncIterator[asyncdl.Engine]:
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=BUDGET)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        yield engine


def seed(s3: Any, bucket: str, proxy: TcpProxy, answer: str) -> bytes:
    """Put the object "k" and make the proxy answer as ``answer`` says; its bytes."""
    data = b"" if answer == "empty" else payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    if answer == "range-ignored":
        proxy.rule = lambda r: Fault(headers={"range": None})
    return data


async def read_back(engine: asyncdl.Engine, bucket: str, data: bytes) -> None:
    """A read needs a slot: it waits forever if leaked first answers hold them all."""
    assert await engine.read_bytes(bucket, "k") == data


@pytest.mark.parametrize("leaving", ["aclose", "async-with", "collected"])
@pytest.mark.parametrize("answer", ANSWERS)
async def test_a_stream_opened_and_never_read_gives_its_first_answer_back(
    small_engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, answer: str, leaving: str
) -> None:
    data = seed(s3, bucket, proxy, answer)
    async with asyncio.timeout(60):  # a leak hangs: fail instead (before pytest's 120 s)
        for _ in range(3 * BUDGET):
            if leaving == "async-with":  # for the headers only
                async with small_engine.stream(bucket, "k") as stream:
                    assert (stream.size, stream.length) == (len(data), len(data))
                continue
            stream = await small_engine.stream(bucket, "k").open()
            assert stream.size == len(data)
            if leaving == "aclose":
                await stream.aclose()
            else:
                del stream  # never iterated, never closed
                gc.collect()
        await read_back(small_engine, bucket, data)


async def test_a_closed_stream_stays_closed(
    small_engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    seed(s3, bucket, proxy, "ranged")
    opened = await small_engine.stream(bucket, "k").open()
    await opened.aclose()
    await opened.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await opened.open()
    assert [piece async for piece in opened] == []  # as a closed generator
    never_opened = small_engine.stream(bucket, "k")
    await never_opened.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await anext(never_opened)
    assert len(proxy.requests) == 1


async def test_a_stream_collected_in_another_thread_is_released_on_its_loop(
    small_engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = seed(s3, bucket, proxy, "ranged")
    streams = [await small_engine.stream(bucket, "k").open() for _ in range(BUDGET)]
    loop = asyncio.get_running_loop()
    debug = loop.get_debug()
    # Debug mode makes any loop call from another thread raise: a finalizer that
    # released the semaphore (waking the reader below) from the collecting thread
    # would fail the test through the unraisable-exception warning.
    loop.set_debug(True)
    try:
        async with asyncio.timeout(10):
            reading = asyncio.create_task(read_back(small_engine, bucket, data))
            await asyncio.sleep(0.2)  # the reader waits for a slot
            await asyncio.to_thread(streams.clear)  # the last references go in a thread
            await reading
    finally:
        loop.set_debug(debug)


async def test_a_stream_closed_while_it_opens_releases_the_answer(
    small_engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = seed(s3, bucket, proxy, "ranged")
    proxy.rule = lambda r: Fault(delay=0.3)
    async with asyncio.timeout(10):
        for _ in range(BUDGET):
            stream = small_engine.stream(bucket, "k")
            opening = asyncio.create_task(stream.open())
            await asyncio.sleep(0.1)  # the first GET is on its way (held by the proxy)
            await stream.aclose()
            with pytest.raises(RuntimeError, match="closed while it opened"):
                await opening
        proxy.rule = None
        await read_back(small_engine, bucket, data)


async def test_stream_of_an_empty_object_answered_with_a_zero_total(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # s3rver's 206 "bytes 0-0/0" with a Content-Length of 1 it never sends.
    etag = s3.put_object(Bucket=bucket, Key="empty", Body=b"")["ETag"]
    headers = {"Content-Range": "bytes 0-0/0", "Content-Length": "1", "ETag": etag}
    proxy.rule = lambda r: Fault(reply=(206, headers, b""))
    async with asyncio.timeout(10):
        stream = await engine.stream(bucket, "empty").open()
        assert (stream.size, stream.length, stream.etag) == (0, 0, etag)
        assert [piece async for piece in stream] == []


async def test_stream_from_a_server_without_etags_is_one_get(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(response_headers={"etag": None})
    assert b"".join([p async for p in engine.stream(bucket, "k", start=10)]) == data[10:]
    assert [r.range for r in proxy.requests] == [
        f"bytes=10-{CHUNK + 9}",
        f"bytes=10-{len(data) - 1}",
    ]


async def test_an_unpinned_stream_cut_midway_fails_rather_than_repeat_bytes(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # Without an ETag a resumed range could come from another version, and the bytes
    # already yielded cannot be taken back: the stream ends with an error.
    data = payload(CHUNK // 2)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(response_headers={"etag": None}, cut_after=1000, stall=0.3)
    received: list[bytes] = []

    async def read_all() -> None:
        async for piece in engine.stream(bucket, "k"):
            received.append(piece)

    with pytest.raises(asyncdl.DownloadError, match="transfer failed"):
        await read_all()
    assert data.startswith(b"".join(received))
    assert len(proxy.requests) == 1


@pytest.mark.parametrize("attempt", range(20))
async def test_a_stream_closed_while_its_parts_connect_leaves_no_socket(
    s3: Any, bucket: str, proxy: TcpProxy, attempt: int
) -> None:
    # Parts still connecting when the stream closes, and the proxy shutting down right
    # after (the fixture): every socket on either side must be closed, or a warning
    # fails a later test. (asyncio 3.11 leaked the proxy's side of a connection whose
    # transport was made after the server closed, a quarter of the time.)
    s3.put_object(Bucket=bucket, Key="k", Body=payload(40 * CHUNK))
    proxy.rtt = 0.005
    config = asyncdl.TransferConfig(chunk_size=CHUNK, stream_prefetch=8, validate="off")
    async with (
        make_client(proxy.url) as client,
        asyncdl.Engine(client, config=config) as engine,
        engine.stream(bucket, "k") as stream,
    ):
        async for piece in stream:
            assert piece
            break


@pytest.mark.parametrize(
    "fault",
    # (Not a reset: aiohttp re-sends a request once by itself when a kept-alive
    # connection turns out dead, before asyncdl sees anything.)
    [Fault(status=503, error_code="SlowDown"), Fault(status=500, error_code="InternalError")],
    ids=["slow-down", "internal-error"],
)
async def test_a_streams_first_get_is_retried_as_a_downloads_first_request_is(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, fault: Fault
) -> None:
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    faults = [fault]
    proxy.rule = lambda request: faults.pop() if faults and request.method == "GET" else None
    assert await engine.read_bytes(bucket, "k") == data
    gets = [r for r in proxy.requests if r.method == "GET"]
    assert len(gets) == 4 + 1  # the first GET twice, then the three other parts
    assert engine.stats().retries == 1


async def test_a_streams_bytes_are_handed_on_as_they_arrive(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """A part's bytes reach the reader as the network delivers them, not once the part
    has gathered a file write's worth (a served stream's first byte would wait)."""
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    stalled: list[RequestRecord] = []

    def stall_first_part(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and not stalled:
            stalled.append(request)
            return Fault(cut_after=20_000, stall=10.0)
        return None

    proxy.rule = stall_first_part
    async with engine.stream(bucket, "k") as stream:
        first = await asyncio.wait_for(anext(stream), timeout=5.0)  # not after the stall
        assert 0 < len(first) <= 20_000
        assert first == data[: len(first)]
        assert stalled
