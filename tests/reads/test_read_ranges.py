"""engine.read_ranges and read_ranges_url: the planner (pure, with hypothesis), then
against moto through the proxy, counting the requests there."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncdl
from asyncdl._reads.range_plan import Span, check_ranges, coalesce
from asyncdl._reads.range_reads import SpanSink
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, gets, payload

KiB = 1024

# -- the planner --

pairs = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 3_000)).map(lambda p: (p[0], p[0] + p[1])),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(pairs, st.integers(0, 2_000), st.integers(1, 5_000))
def test_every_byte_asked_is_fetched_in_gets_no_larger_than_the_max(
    ranges: list[tuple[int, int]], max_gap: int, max_request: int
) -> None:
    spans = coalesce(ranges, max_gap=max_gap, max_request=max_request)
    gets = [piece for span in spans for piece in span.pieces(max_request)]
    fetched: set[int] = set()
    for get in gets:
        assert get.length <= max_request
        fetched.update(range(get.start, get.end))
    asked = {byte for start, end in ranges for byte in range(start, end)}
    assert asked <= fetched
    # Nothing is fetched twice, and the spans come sorted and apart.
    assert len(fetched) == sum(get.length for get in gets)
    for before, after in itertools.pairwise(spans):
        assert before.end < after.start
        # Spans left apart are either farther than the gap, or together too long.
        assert after.start - before.end > max_gap or after.end - before.start > max_request
    # A byte fetched and not asked for lies in a gap of at most max_gap.
    for span in spans:
        inside = sorted((s, e) for s, e in ranges if s < e and span.start <= s and e <= span.end)
        assert inside[0][0] == span.start
        reach = inside[0][1]
        for start, end in inside[1:]:
            assert start - reach <= max_gap
            if start > reach:  # bytes read and dropped: joined only within max_request
                assert end - span.start <= max_request
            reach = max(reach, end)
        assert reach == span.end


def test_ten_ranges_within_64_kib_are_one_span() -> None:
    ranges = [(i * 6 * KiB, i * 6 * KiB + 4 * KiB) for i in range(10)][::-1]
    assert len(coalesce(ranges, max_gap=2 * KiB, max_request=64 * KiB)) == 1
    assert len(coalesce(ranges, max_gap=2 * KiB - 1, max_request=64 * KiB)) == 10


def test_overlapping_ranges_are_joined_past_the_max_and_cut_into_pieces() -> None:
    spans = coalesce([(0, 60), (50, 110)], max_gap=0, max_request=100)
    assert [(s.start, s.end) for s in spans] == [(0, 110)]
    assert [(p.start, p.end) for p in spans[0].pieces(100)] == [(0, 100), (100, 110)]
    # Touching ranges too: their bytes are fetched once, whatever the max.
    spans = coalesce([(60, 120), (0, 60)], max_gap=0, max_request=100)
    assert [(s.start, s.end) for s in spans] == [(0, 120)]


@pytest.mark.parametrize(
    "ranges",
    [
        "0-10",
        b"ab",
        5,
        None,
        [(0,)],
        [(0, 1, 2)],
        [(-1, 5)],
        [(5, 4)],
        [(True, 5)],
        [(0, False)],
        [(0.0, 5)],
        [("0", "5")],
        [(0, 2**63)],
        [(10**5000, 10**5000 + 1)],
        [{0, 5}],
        ["05"],
        [range(3, 5)],  # its items are 3 and 4, not its bounds
        [(np.bool_(True), 5)],
        [(np.float64(0), 5)],
        [(np.int64(-1), 5)],
    ],
)
def test_hostile_ranges_are_refused(ranges: Any) -> None:
    with pytest.raises(asyncdl.InvalidRequestError, match="ranges"):
        check_ranges(ranges, bucket="b", key="k")


def test_ranges_from_a_generator_and_of_lists_are_taken() -> None:
    assert check_ranges(([i, i + 1] for i in range(3)), bucket="b", key="k") == [
        (0, 1),
        (1, 2),
        (2, 3),
    ]


def test_numpy_offsets_are_taken_as_ints() -> None:
    starts, ends = np.array([0, 10], dtype=np.int64), np.array([4, 12], dtype=np.uint32)
    checked = check_ranges(zip(starts, ends, strict=True), bucket="b", key="k")
    assert checked == [(0, 4), (10, 12)]
    assert all(type(bound) is int for pair in checked for bound in pair)


# -- against moto, through the proxy --


async def test_ten_4_kib_ranges_within_64_kib_are_one_get(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(10 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    base = 3 * CHUNK + 5
    ranges = [(base + i * 6 * KiB, base + i * 6 * KiB + 4 * KiB) for i in range(10)]
    ranges = ranges[5:] + ranges[:5]  # any order: the answer keeps the caller's
    got = await engine.read_ranges(bucket, "k", ranges)
    assert got == [data[s:e] for s, e in ranges]
    assert [r.range for r in proxy.requests] == [f"bytes={base}-{base + 58 * KiB - 1}"]
    assert "if-match" not in proxy.requests[0].headers


async def test_ranges_far_apart_are_several_gets_each_after_the_first_pinned(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any
) -> None:
    data = payload(20 * CHUNK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4)
    ranges = [(15 * CHUNK, 15 * CHUNK + 10), (0, 10), (5, 30), (CHUNK, 4 * CHUNK + 1), (7, 7)]
    async with asyncdl.Engine(client, config=config) as engine:
        got = await engine.read_ranges(bucket, "k", ranges, max_gap=100)
    assert got == [data[s:e] for s, e in ranges]
    requests = gets(proxy)
    assert len(requests) == len(proxy.requests)  # no HEAD
    # The lowest span first; the long range in chunk-sized parts, in parallel.
    assert requests[0].range == "bytes=0-29"
    assert "if-match" not in requests[0].headers
    assert sorted(r.range or "" for r in requests[1:]) == sorted(
        [f"bytes={15 * CHUNK}-{15 * CHUNK + 9}"]
        + [f"bytes={i * CHUNK}-{(i + 1) * CHUNK - 1}" for i in range(1, 4)]
        + [f"bytes={4 * CHUNK}-{4 * CHUNK}"]
    )
    assert all(r.headers.get("if-match") == etag for r in requests[1:])


async def test_known_size_and_etag_pin_the_first_get_too(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(4 * CHUNK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    got = await engine.read_ranges(
        bucket, "k", [(3 * CHUNK, 3 * CHUNK + 3), (1, 2)], size=len(data), etag=etag.strip('"')
    )
    assert got == [data[3 * CHUNK : 3 * CHUNK + 3], data[1:2]]
    assert len(proxy.requests) == 2
    assert all(r.headers.get("if-match") == etag for r in proxy.requests)


async def test_past_the_end_with_the_size_known_sends_nothing(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    with pytest.raises(asyncdl.InvalidRequestError, match=r"ranges\[1\].*past the end"):
        await engine.read_ranges(bucket, "k", [(0, 2), (5, 11)], size=10)
    assert proxy.requests == []


async def test_past_the_end_is_refused_after_the_first_get_before_the_others(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * CHUNK))
    with pytest.raises(asyncdl.InvalidRequestError, match="past the end of the"):
        await engine.read_ranges(bucket, "k", [(0, 2), (2 * CHUNK, 3 * CHUNK + 1)], max_gap=0)
    assert len(proxy.requests) == 1
    # A first range that starts past the end: S3's 416 names the size.
    with pytest.raises(asyncdl.InvalidRequestError, match="past the end"):
        await engine.read_ranges(bucket, "k", [(3 * CHUNK + 5, 3 * CHUNK + 6)])
    # The engine still has every slot: a read goes through.
    assert await engine.read_ranges(bucket, "k", [(0, 1)]) != []


async def test_empty_ranges_send_nothing(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    assert await engine.read_ranges(bucket, "k", [(5, 5), (0, 0)]) == [b"", b""]
    assert await engine.read_ranges(bucket, "k", []) == []
    assert proxy.requests == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": -1}, "size"),
        ({"size": True}, "size"),
        ({"etag": ""}, "etag"),
        ({"max_gap": -1}, "max_gap"),
        ({"max_gap": 1.5}, "max_gap"),
        ({"max_request": 100}, "max_request"),
        ({"max_request": 2 * CHUNK}, "max_request"),
        ({"extra_args": {"Range": "bytes=0-1"}}, "Range"),
    ],
)
async def test_hostile_arguments_send_nothing(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(asyncdl.InvalidRequestError, match=match):
        await engine.read_ranges(bucket, "k", [(0, 1)], **kwargs)
    with pytest.raises(asyncdl.InvalidRequestError, match="ranges"):
        await engine.read_ranges(bucket, "k", [(1, 0)])
    with pytest.raises(asyncdl.InvalidRequestError, match="ranges"):
        await engine.read_ranges(bucket, "k", [(0, 2**70)], size=10)
    assert proxy.requests == []


async def test_a_huge_range_of_a_small_object_is_refused_without_planning_it(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    async with asyncio.timeout(5):
        with pytest.raises(asyncdl.InvalidRequestError, match="past the end"):
            await engine.read_ranges(bucket, "k", [(0, 2**62)])
    assert len(proxy.requests) == 1


async def test_an_object_replaced_after_the_first_get_is_object_changed(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    old, new = payload(8 * CHUNK, seed=1), payload(8 * CHUNK, seed=2)
    s3.put_object(Bucket=bucket, Key="k", Body=old)
    replaced = threading.Event()
    seen: list[RequestRecord] = []

    def replace_once(request: RequestRecord) -> Fault | None:
        # Once the first answer is out, the next request finds the object replaced.
        seen.append(request)
        if len(seen) > 1 and not replaced.is_set():
            replaced.set()
            return Fault(before=lambda: s3.put_object(Bucket=bucket, Key="k", Body=new))
        return None

    proxy.rule = replace_once
    with pytest.raises(asyncdl.ObjectChangedError):
        await engine.read_ranges(bucket, "k", [(0, 10), (6 * CHUNK, 6 * CHUNK + 10)], max_gap=0)
    assert replaced.is_set()
    assert proxy.requests[1].headers.get("if-match") is not None


async def test_a_server_without_etags_gives_one_version_in_one_get(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(response_headers={"etag": 'W/"weak"'})
    ranges = [(6 * CHUNK, 6 * CHUNK + 10), (0, 10)]
    got = await engine.read_ranges(bucket, "k", ranges, max_gap=0)
    assert got == [data[s:e] for s, e in ranges]
    # The first answer pins nothing: one unpinned GET from the first range to the last.
    assert [r.range for r in proxy.requests] == ["bytes=0-9", f"bytes=0-{6 * CHUNK + 9}"]
    assert all("if-match" not in r.headers for r in proxy.requests)


async def test_a_server_that_ignores_range_gives_every_range_from_one_answer(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(headers={"range": None})
    ranges = [(6 * CHUNK, 6 * CHUNK + 10), (3, 10)]
    assert await engine.read_ranges(bucket, "k", ranges, max_gap=0) == [
        data[s:e] for s, e in ranges
    ]
    assert len(proxy.requests) == 1


async def test_a_cut_get_resumes_pinned(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut = threading.Event()

    def cut_once(request: RequestRecord) -> Fault | None:
        if request.range == f"bytes={4 * CHUNK}-{5 * CHUNK - 1}" and not cut.is_set():
            cut.set()
            return Fault(cut_after=1000)
        return None

    proxy.rule = cut_once
    got = await engine.read_ranges(bucket, "k", [(0, 1), (4 * CHUNK, 5 * CHUNK)], max_gap=0)
    assert got == [data[0:1], data[4 * CHUNK : 5 * CHUNK]]
    assert proxy.requests[-1].range == f"bytes={4 * CHUNK + 1000}-{5 * CHUNK - 1}"


async def test_missing_object(engine: asyncdl.Engine, bucket: str) -> None:
    with pytest.raises(asyncdl.ObjectNotFoundError):
        await engine.read_ranges(bucket, "missing", [(0, 1)])


async def test_read_ranges_url(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(4 * CHUNK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=600
    ).replace(s3.meta.endpoint_url, proxy.url)
    ranges = [(3 * CHUNK, 3 * CHUNK + 7), (1, 5)]
    assert await engine.read_ranges_url(url, ranges, max_gap=0) == [data[s:e] for s, e in ranges]
    assert len(proxy.requests) == 2
    assert proxy.requests[1].headers.get("if-match") == etag
    with pytest.raises(asyncdl.InvalidRequestError, match="past the end"):
        await engine.read_ranges_url(url, [(0, 4 * CHUNK + 1)])


async def test_read_ranges_cancelled_midway_leaks_no_slot(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any
) -> None:
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=2)
    ranges = [(i * CHUNK, i * CHUNK + 10) for i in range(8)]
    async with asyncdl.Engine(client, config=config) as engine:
        # The first answer comes; the pinned GETs after it stall, holding both slots.
        proxy.rule = lambda r: Fault(cut_after=5, stall=30) if "if-match" in r.headers else None
        reading = asyncio.create_task(engine.read_ranges(bucket, "k", ranges, max_gap=0))
        pinned: list[RequestRecord] = []
        for _ in range(100):  # until the stalled GETs hold both slots
            await asyncio.sleep(0.05)
            pinned = [r for r in proxy.requests if "if-match" in r.headers]
            if len(pinned) == 2:
                break
        await asyncio.sleep(0.2)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        # Two stalled GETs held both slots, and no third went out while they did.
        assert len([r for r in proxy.requests if "if-match" in r.headers]) == 2
        proxy.rule = None
        async with asyncio.timeout(10):  # a leaked slot would hang here: fail instead
            got = await engine.read_ranges(bucket, "k", ranges, max_gap=0)
        assert got == [data[s:e] for s, e in ranges]


async def test_a_first_answer_longer_than_asked_is_cut(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # s3rver answers "bytes=0-0" with the whole object, as a 206.
    data = payload(3 * CHUNK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    headers = {
        "Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}",
        "Content-Length": str(len(data)),
        "ETag": etag,
    }
    proxy.rule = lambda r: Fault(reply=(206, headers, data)) if r.range == "bytes=0-0" else None
    got = await engine.read_ranges(bucket, "k", [(2 * CHUNK, 2 * CHUNK + 3), (0, 1)], max_gap=0)
    assert got == [data[2 * CHUNK : 2 * CHUNK + 3], data[:1]]
    assert proxy.requests[1].headers.get("if-match") == etag


async def test_an_empty_object_answered_with_a_zero_total(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # s3rver's 206 "bytes 0-0/0" with a Content-Length of 1 it never sends.
    etag = s3.put_object(Bucket=bucket, Key="empty", Body=b"")["ETag"]
    headers = {"Content-Range": "bytes 0-0/0", "Content-Length": "1", "ETag": etag}
    proxy.rule = lambda r: Fault(reply=(206, headers, b""))
    async with asyncio.timeout(10):
        with pytest.raises(asyncdl.InvalidRequestError, match="past the end of the 0-byte"):
            await engine.read_ranges(bucket, "empty", [(0, 1)])
        async with engine.open_reader(bucket, "empty") as f:
            assert (f.size, await f.read()) == (0, b"")


def test_span_sink_joins_pieces_and_a_restarted_get_overwrites() -> None:
    data = payload(1000)
    sink = SpanSink([Span(100, 300), Span(500, 600)])
    # A whole-object answer's chunks: only the spans' bytes are kept.
    for offset in range(0, 1000, 64):
        sink.put(offset, data[offset : offset + 64])
    assert sink.cut(100, 300) == data[100:300]
    assert sink.cut(550, 560) == data[550:560]
    # A GET started again midway (unpinned, from the span's start): the later bytes win
    # over the first attempt's, whatever their chunking.
    sink = SpanSink([Span(0, 100)])
    old, new = payload(100, seed=1), payload(100, seed=2)
    sink.put(0, old[:30])
    sink.put(30, old[30:70])
    sink.put(0, new[:50])
    sink.put(50, new[50:])
    assert sink.cut(0, 100) == new
    # Two parts of one span, written interleaved, tile it.
    sink = SpanSink([Span(0, 100)])
    for offset in (50, 0, 75, 25):
        sink.put(offset, data[offset : offset + 25])
    assert sink.cut(10, 90) == data[10:90]


async def test_without_etags_ranges_far_apart_are_refused_not_read_through(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # One unpinned GET across them would read 15 chunks to keep 20 bytes: past the
    # 8 chunks of bytes between the ranges it reads and drops, it refuses instead.
    data = payload(16 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(response_headers={"etag": 'W/"weak"'})
    with pytest.raises(asyncdl.DownloadError, match="no strong ETag"):
        await engine.read_ranges(bucket, "k", [(0, 10), (15 * CHUNK, 15 * CHUNK + 10)])
    assert [r.range for r in proxy.requests] == ["bytes=0-9"]
    assert proxy.response_bytes < 2 * CHUNK
