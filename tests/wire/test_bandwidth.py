"""The bandwidth cap: the token bucket's arithmetic on a fake clock, then
capped downloads, streams and commands through the recording proxy to moto.

Timing is bounded below only: the cap lets at most a tenth of a second's worth
through ahead of the rate, so a download of ``size`` bytes takes at least
``size / rate - 0.1`` seconds on any machine (a loaded one is only slower). The
bounds below are 0.8 of ``size / rate``, with ``size / rate`` of a second or more.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import asyncdl
from asyncdl._wire.bandwidth import TokenBucket
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, make_client, payload, temp_files

KiB = 1024
RATE = 256 * KiB


# -- the bucket, on a fake clock ---------------------------------------------------------


def test_a_full_bucket_lets_a_tenth_of_a_second_through_then_charges_the_rest() -> None:
    bucket = TokenBucket(1000)
    assert bucket.reserve(60, now=5.0) == 0
    assert bucket.reserve(40, now=5.0) == 0  # 100 bytes: a tenth of a second of 1000/s
    assert bucket.reserve(250, now=5.0) == pytest.approx(0.25)


def test_takers_at_once_are_served_in_turn() -> None:
    bucket = TokenBucket(1000)
    bucket.reserve(100, now=0.0)  # empties it
    delays = [bucket.reserve(100, now=0.0) for _ in range(10)]
    # Ten parts in flight each wait one more tenth: they all progress, in order.
    assert delays == pytest.approx([0.1 * n for n in range(1, 11)])


def test_the_bucket_refills_at_the_rate_and_holds_a_tenth_of_a_second_at_most() -> None:
    bucket = TokenBucket(1000)
    assert bucket.reserve(300, now=0.0) == pytest.approx(0.2)  # 200 bytes of debt
    # Half a second later the debt is paid and 100 bytes (the burst, no more) are in.
    assert bucket.reserve(100, now=0.5) == 0
    assert bucket.reserve(1, now=0.5) == pytest.approx(0.001)
    # An idle hour holds no more than the burst either.
    assert bucket.reserve(150, now=3600.0) == pytest.approx(0.05)


def test_a_read_larger_than_the_burst_waits_for_its_excess() -> None:
    bucket = TokenBucket(10 * KiB)
    assert bucket.reserve(512 * KiB, now=1.0) == pytest.approx((512 - 1) / 10)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8MiB", float("inf")])
def test_bad_max_bandwidth_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="max_bandwidth must be"):
        asyncdl.TransferConfig(max_bandwidth=value)


def test_max_bandwidth_defaults_to_no_cap() -> None:
    assert asyncdl.TransferConfig().max_bandwidth is None
    assert asyncdl.TransferConfig(max_bandwidth=1).max_bandwidth == 1


# -- capped downloads and streams through the proxy ---------------------------------------


def capped(rate: int = RATE, **settings: Any) -> asyncdl.TransferConfig:
    settings = {"chunk_size": CHUNK, "max_concurrency": 4, **settings}
    return asyncdl.TransferConfig(backoff_base=0.01, max_bandwidth=rate, **settings)


def gets(proxy: TcpProxy) -> int:
    return [request.method for request in proxy.requests].count("GET")


async def test_a_capped_download_takes_size_over_rate_without_spinning(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    size = RATE + 5  # 5 parts of 64 KiB, 4 in flight
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "out"
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=capped()) as engine:
        started, cpu = time.perf_counter(), time.process_time()
        result = await engine.download(bucket, "k", target)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert target.read_bytes() == data
    assert result.size == size
    assert elapsed >= 0.8 * size / RATE, elapsed
    # The cap sleeps its debt off, once per wait: a second of waiting costs little CPU
    # (client, proxy and moto's threads together).
    assert cpu < 0.5 * elapsed, (cpu, elapsed)
    assert gets(proxy) == 5  # one per part: nothing retried
    assert temp_files(tmp_path) == []


async def test_the_stall_watch_does_not_fire_while_a_read_waits_for_the_cap(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # 2 parts of 128 KiB at once, read 32 KiB at a time (half a 64 KiB write), at
    # 128 KiB/s: a part waits about half a second between its reads, far longer than
    # the read timeout. A watch that took that wait for a stalled server would drop
    # the part midway, and its retry would send one more GET.
    rate, size = 128 * KiB, 4 * CHUNK
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = capped(
        rate, chunk_size=2 * CHUNK, max_concurrency=2, write_size=CHUNK, read_timeout=0.1
    )
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        started = time.perf_counter()
        await engine.download(bucket, "k", tmp_path / "out")
        elapsed = time.perf_counter() - started
    assert (tmp_path / "out").read_bytes() == data
    assert elapsed >= 0.8 * size / rate, elapsed
    assert gets(proxy) == 2  # one per part: none was dropped and retried


async def test_the_stall_watch_still_fires_on_a_stalled_server_when_capped(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    stalls = iter([Fault(cut_after=1000, stall=5)])
    proxy.rule = lambda request: next(stalls, None) if request.method == "GET" else None
    config = capped(1024 * KiB, read_timeout=0.3)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        async with asyncio.timeout(4):  # the watch, not the stall's end, ends the wait
            await engine.download(bucket, "k", tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == data
    assert gets(proxy) == 2  # the stalled GET, then its resumption


async def test_two_downloads_at_once_share_the_engine_cap(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    size = RATE // 2
    for seed, key in enumerate(("one", "two")):
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size, seed=seed))
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=capped()) as engine:
        started = time.perf_counter()
        await asyncio.gather(
            engine.download(bucket, "one", tmp_path / "one"),
            engine.download(bucket, "two", tmp_path / "two"),
        )
        elapsed = time.perf_counter() - started
    assert (tmp_path / "one").read_bytes() == payload(size, seed=0)
    assert (tmp_path / "two").read_bytes() == payload(size, seed=1)
    # Each alone would take half a second: together they share one cap.
    assert elapsed >= 0.8 * 2 * size / RATE, elapsed


@pytest.mark.parametrize("answer", ["ranged", "range-ignored"])
async def test_a_capped_stream_takes_size_over_rate(
    s3: Any, bucket: str, proxy: TcpProxy, answer: str
) -> None:
    size = RATE
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    if answer == "range-ignored":  # the stream reads the one whole body itself
        proxy.rule = lambda request: Fault(headers={"range": None})
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=capped()) as engine:
        started = time.perf_counter()
        async with engine.stream(bucket, "k") as stream:
            got = b"".join([piece async for piece in stream])
        elapsed = time.perf_counter() - started
    assert got == data
    assert elapsed >= 0.8 * size / RATE, elapsed


# -- the commands ------------------------------------------------------------------------


def run(proxy: TcpProxy, command: str, *args: str) -> Any:
    return CliRunner().invoke(cli, [command, "--endpoint-url", proxy.url, *args])


@pytest.mark.parametrize("command", ["cp", "cat", "sync"])
@pytest.mark.parametrize("cap", ["192KiB", "192KiB/s"])
def test_max_bandwidth_caps_cp_cat_and_sync(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, command: str, cap: str
) -> None:
    rate, size = 192 * KiB, 192 * KiB
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="p/k", Body=data)
    source, dest = f"s3://{bucket}/p/k", [str(tmp_path / "k")]
    if command == "sync":  # into the directory, as k
        source, dest = f"s3://{bucket}/p/", [str(tmp_path)]
    elif command == "cat":
        dest = []
    started = time.perf_counter()
    result = run(proxy, command, "--max-bandwidth", cap, source, *dest)
    elapsed = time.perf_counter() - started
    assert result.exit_code == 0, result.stderr
    assert (result.stdout_bytes if command == "cat" else (tmp_path / "k").read_bytes()) == data
    assert elapsed >= 0.8 * size / rate, elapsed


@pytest.mark.parametrize("command", ["cp", "cat", "sync"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", "more than 0"), ("fast", "is not a size"), ("-1MiB", "is not a size")],
)
def test_a_bad_max_bandwidth_is_a_usage_error_before_anything_is_sent(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, command: str, value: str, expected: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    dest = [] if command == "cat" else [str(tmp_path / "out")]
    result = run(proxy, command, "--max-bandwidth", value, f"s3://{bucket}/k", *dest)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ")
    assert "--max-bandwidth" in line
    assert expected in line
    assert proxy.requests == []
    assert list(tmp_path.iterdir()) == []
