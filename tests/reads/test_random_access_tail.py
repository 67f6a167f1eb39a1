"""The reader opened at the end (``first_block="end"``), opened on a listing's size and
ETag (no GET at all), and its ``read_ranges``: against moto through the proxy,
requests counted there; pyarrow reading a Parquet file through it."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import gets, payload

KiB = 1024
BLOCK = 4 * KiB


async def test_opened_at_the_end_the_tail_and_what_is_before_it_need_no_get(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(20 * BLOCK + 5)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    f = await engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end")
    assert (f.size, f.etag) == (len(data), etag)
    assert [r.range for r in proxy.requests] == [f"bytes=-{BLOCK}"]
    f.seek(-8, 2)
    assert await f.read() == data[-8:]
    f.seek(20 * BLOCK)  # the last block: 5 bytes, all of it cached
    assert await f.read() == data[-5:]
    assert len(proxy.requests) == 1
    f.seek(0)
    assert await f.read(10) == data[:10]
    assert [r.headers.get("if-match") for r in proxy.requests] == [None, etag]
    await f.aclose()


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1])
async def test_opened_at_the_end_small_objects(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, size: int
) -> None:
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end") as f:
        assert f.size == size
        f.seek(max(size - BLOCK, 0))
        assert await f.read() == data[max(size - BLOCK, 0) :]
        assert len(proxy.requests) == 1  # what is at most a block from the end: cached
        f.seek(0)
        assert await f.read() == data
        assert await f.read_ranges([(0, size), (size, size)]) == [data, b""]


async def test_a_listings_size_and_etag_open_with_no_request(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(10 * BLOCK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    async with engine.open_reader(bucket, "k", block_size=BLOCK, size=len(data), etag=etag) as f:
        assert (f.size, f.etag) == (len(data), etag)
        assert proxy.requests == []
        f.seek(-3, 2)
        assert await f.read() == data[-3:]
    assert [r.headers.get("if-match") for r in proxy.requests] == [etag]
    # A bare ETag, as some listings print it, is the quoted one.
    async with engine.open_reader(bucket, "k", size=len(data), etag=etag.strip('"')) as f:
        assert f.etag == etag
        assert await f.read(4) == data[:4]


async def test_a_stale_listing_is_object_changed_at_the_first_read(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    old = s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))["ETag"]
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK, seed=2))
    async with engine.open_reader(bucket, "k", block_size=BLOCK, size=10 * BLOCK, etag=old) as f:
        with pytest.raises(asyncdl.ObjectChangedError):
            await f.read(4)
    # The right ETag with the wrong size: the answer's Content-Range says otherwise.
    new = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    async with engine.open_reader(bucket, "k", block_size=BLOCK, size=11 * BLOCK, etag=new) as f:
        with pytest.raises(asyncdl.DownloadError):
            await f.read(4)
    # Only a size, which the opening GET contradicts.
    with pytest.raises(asyncdl.ObjectChangedError, match="not the 3 given"):
        await engine.open_reader(bucket, "k", block_size=BLOCK, size=3, first_block="end")


async def test_read_ranges_takes_cached_ranges_and_pins_the_rest(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(100 * BLOCK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    async with engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end") as f:
        f.seek(123)
        size = len(data)
        cached = await f.read_ranges([(size - 8, size), (size - 100, size - 8)])
        assert cached == [data[-8:], data[-100:-8]]
        assert len(proxy.requests) == 1
        asked = [(70 * BLOCK, 72 * BLOCK), (10, 20), (40 * BLOCK, 40 * BLOCK + 7), (15, 30)]
        got = await f.read_ranges(asked, max_gap=0)
        assert got == [data[s:e] for s, e in asked]
        assert f.tell() == 123  # the offset is the file's, not read_ranges'
        # (10, 20) and (15, 30) overlap: one GET; the others one each.
        assert len(proxy.requests) == 4
        assert all(r.headers.get("if-match") == etag for r in proxy.requests[1:])
        # What read_ranges fetched is not cached: the block of (10, 20) is fetched again.
        assert await f.read(1) == data[123:124]
        assert len(proxy.requests) == 5
        with pytest.raises(asyncdl.InvalidRequestError, match="past the end"):
            await f.read_ranges([(0, 1), (size, size + 1)])
        with pytest.raises(asyncdl.InvalidRequestError):
            await f.read_ranges([(5, 1)])
        assert len(proxy.requests) == 5


async def test_read_ranges_of_an_object_replaced_after_opening_is_object_changed(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    async with engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end") as f:
        s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK, seed=3))
        with pytest.raises(asyncdl.ObjectChangedError):
            await f.read_ranges([(0, 10), (5 * BLOCK, 5 * BLOCK + 10)])
        assert await f.read_ranges([(10 * BLOCK - 4, 10 * BLOCK)]) != []  # cached


async def test_bad_reader_options_send_nothing(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    for bad in ("tail", None, 1):
        with pytest.raises(asyncdl.InvalidRequestError, match="first_block"):
            engine.open_reader(bucket, "k", first_block=bad)  # type: ignore[arg-type]
    hostile: list[tuple[Any, Any]] = [(-1, None), (True, None), (None, ""), (None, 5)]
    for size, etag in hostile:
        with pytest.raises(asyncdl.InvalidRequestError):
            engine.open_reader(bucket, "k", size=size, etag=etag)
    with pytest.raises(TypeError, match="bucket"):
        engine.open_reader(first_block="end")  # type: ignore[call-arg]
    assert proxy.requests == []


async def test_pyarrow_reads_a_column_in_two_gets_when_opened_at_the_end(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    n = 20_000
    table = pa.table({f"c{i}": pa.array(range(i * n, (i + 1) * n), pa.int64()) for i in range(6)})
    out = io.BytesIO()
    pq.write_table(table, out, compression="none", row_group_size=n)
    blob = out.getvalue()  # 6 columns of ~160 KB, a footer of a few KiB
    etag = s3.put_object(Bucket=bucket, Key="t.parquet", Body=blob)["ETag"]
    async with (
        asyncdl.Engine(client) as engine,  # the default config: GETs of up to 8 MiB
        engine.open_reader(bucket, "t.parquet", block_size=64 * KiB, first_block="end") as f,
    ):
        raw = f.sync()
        read = await asyncio.to_thread(lambda: pq.read_table(raw, columns=["c3"]))
    assert read.column("c3").to_pylist() == table.column("c3").to_pylist()
    # Open (the last 64 KiB: the footer is in it), then the column chunk's blocks
    # (160 KB: three or four blocks, in one GET).
    requests = gets(proxy)
    assert requests[0].range == f"bytes=-{64 * KiB}"
    assert len(requests) == 2, [r.range for r in requests]
    assert all(r.headers.get("if-match") == etag for r in requests[1:])
    assert proxy.response_bytes < len(blob) // 2


async def test_a_server_that_misreads_a_suffix_range_costs_one_more_get(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # s3rver answers "bytes=-N" with bytes 0 to N, and the object's true size.
    data = payload(20 * BLOCK + 5)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    headers = {
        "Content-Range": f"bytes 0-{BLOCK}/{len(data)}",
        "Content-Length": str(BLOCK + 1),
        "ETag": etag,
    }
    wrong = Fault(reply=(206, headers, data[: BLOCK + 1]))
    proxy.rule = lambda r: wrong if r.range == f"bytes=-{BLOCK}" else None
    async with engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end") as f:
        assert (f.size, f.etag) == (len(data), etag)
        f.seek(-BLOCK, 2)
        assert await f.read() == data[-BLOCK:]
    assert [r.range for r in proxy.requests] == [
        f"bytes=-{BLOCK}",
        f"bytes={len(data) - BLOCK}-{len(data) - 1}",
    ]
    assert proxy.requests[1].headers.get("if-match") == etag


@pytest.mark.parametrize(
    ("status", "content_range"),
    # A 200 whose Content-Range names exactly the suffix asked for is that suffix
    # (rclone's way: tests/servers/test_compat_servers.py); one naming other bytes is not.
    [(200, "bytes 0-9/100"), (206, None), (206, "bytes 0-99/10"), (206, "bytes */10")],
)
async def test_hostile_answers_to_a_suffix_range_are_errors(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    status: int,
    content_range: str | None,
) -> None:
    data = payload(10 * BLOCK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    headers = {"Content-Length": "10", "ETag": etag}
    if content_range is not None:
        headers["Content-Range"] = content_range
    proxy.rule = lambda r: Fault(reply=(status, headers, data[:10]))
    async with asyncio.timeout(10):
        with pytest.raises(asyncdl.DownloadError):
            await engine.open_reader(bucket, "k", block_size=BLOCK, first_block="end")
