"""A part's body written into the temp file straight from the socket (the engine's own
client: ``asyncdl._wire.own_direct``, through ``asyncdl._transfer.body_into_file``):
what it writes and how, a cut that keeps the bytes before it, a stall, writes that
turn slow mid-body, and a download cancelled mid-body.

Against moto on loopback, through the test proxy for faults. The file's writes are
recorded by wrapping ``os`` as the diversion's module sees it (the bytes still go to
the file): the one way to see each write's size and offset.
"""

from __future__ import annotations

import asyncio
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import quick_io
from asyncdl._wire import own_direct, own_http
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload


class SteadyWrites(quick_io.QuickWrites):
    """Writes judged quick whatever they took: on a loaded machine two slow writes in a
    row would send the process's writes off the loop (``quick_io.QUICK_WRITES`` is one
    per process, so an earlier test's could too), and bodies to the pieces' way. The
    tests of that hand-back set a policy of their own."""

    def took(self, seconds: float) -> None:
        pass


@pytest.fixture(autouse=True)
def _the_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # The diversion is the own client's: under ASYNCDL_OWN_HTTP=0 these would test aiohttp.
    monkeypatch.setattr(own_http, "ENABLED", True)
    monkeypatch.setattr(quick_io, "QUICK_WRITES", SteadyWrites())


def record_writes(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[], object] = lambda: None
) -> list[tuple[int, int]]:
    """(offset, size) of each write a diversion makes; ``then`` is called after each."""
    writes: list[tuple[int, int]] = []

    def pwrite(fd: int, data: Any, offset: int) -> int:
        written = os.pwrite(fd, data, offset)
        writes.append((offset, written))
        then()
        return written

    monkeypatch.setattr(own_direct, "os", types.SimpleNamespace(pwrite=pwrite))
    return writes


def ranged_after(offset: int) -> Any:
    def starts_at_or_after(request: RequestRecord) -> bool:
        header = request.range or ""
        return (
            request.method == "GET"
            and header.startswith("bytes=")
            and int(header[6:].split("-")[0]) >= offset
        )

    return starts_at_or_after


async def test_parts_are_written_straight_from_the_socket_in_steps(
    s3: Any, bucket: str, client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(64 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    writes = record_writes(monkeypatch)
    config = asyncdl.TransferConfig(chunk_size=16 * CHUNK)
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.verified, result.unverified_reason  # the CRC ran over those writes
    # What came with a part's head, or before its reader looked, went as pieces.
    assert sum(size for _, size in writes) > 0
    step = own_direct.STEP
    for offset, size in writes:
        assert 0 < size <= step
        assert offset // step == (offset + size - 1) // step  # never across a step


async def test_a_cut_keeps_the_bytes_before_it_and_resumes_from_there(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second part is cut 100,000 bytes in: not a whole number of steps, so bytes
    # received and not yet written when the cut came are written, and the retry asks
    # for the rest from exactly there.
    part = 32 * CHUNK
    data = payload(2 * part)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut = {"once": True}

    def rule(request: RequestRecord) -> Fault | None:
        if ranged_after(part)(request) and cut.pop("once", False):
            return Fault(cut_after=1_000_000)
        return None

    proxy.rule = rule
    writes = record_writes(monkeypatch)
    config = asyncdl.TransferConfig(chunk_size=part, backoff_base=0.01)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    ranges = [r.range for r in proxy.requests if r.method == "GET"]
    assert ranges[-1] == f"bytes={part + 1_000_000}-{2 * part - 1}", ranges
    assert writes


async def test_a_stalled_body_is_fetched_again_from_where_it_stopped(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stall watch sees the diversion's reads: a body that stops is failed within
    # the read timeout, the bytes before the stall kept.
    part = 32 * CHUNK
    data = payload(2 * part)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    stall = {"once": True}

    def rule(request: RequestRecord) -> Fault | None:
        if ranged_after(part)(request) and stall.pop("once", False):
            return Fault(cut_after=1_000_000, stall=30)
        return None

    proxy.rule = rule
    writes = record_writes(monkeypatch)
    config = asyncdl.TransferConfig(chunk_size=part, read_timeout=0.5, backoff_base=0.01)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        await asyncio.wait_for(engine.download(bucket, "k", tmp_path / "k"), 20)
    assert (tmp_path / "k").read_bytes() == data
    ranges = [r.range for r in proxy.requests if r.method == "GET"]
    assert ranges[-1] == f"bytes={part + 1_000_000}-{2 * part - 1}", ranges
    assert len(ranges) == 3
    assert writes


async def test_writes_that_turn_slow_mid_body_hand_the_rest_back_to_the_pieces(
    s3: Any, bucket: str, client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write policy sends writes off the loop after the first write: the diversion
    # hands its body back, and the rest is written as pieces, whole.
    data = payload(64 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    policy = quick_io.QuickWrites()
    monkeypatch.setattr(quick_io, "QUICK_WRITES", policy)
    writes = record_writes(monkeypatch, then=lambda: policy._trip(60.0))
    config = asyncdl.TransferConfig(chunk_size=64 * CHUNK)
    async with asyncdl.Engine(client, config=config) as engine:
        await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert 0 < sum(size for _, size in writes) < len(data)


async def test_a_download_cancelled_mid_body_writes_nothing_after(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parts stall after their first bytes; the download is cancelled while they wait.
    # Its temp file is gone, and no write comes after the cancel returned.
    data = payload(128 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(cut_after=1_500_000, stall=5) if r.method == "GET" else None
    writes = record_writes(monkeypatch)
    config = asyncdl.TransferConfig(chunk_size=32 * CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        task = asyncio.create_task(engine.download(bucket, "k", tmp_path / "k"))
        while not writes:  # noqa: ASYNC110 - the diversion's first write
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = len(writes)
        await asyncio.sleep(0.3)
    assert len(writes) == after
    assert os.listdir(tmp_path) == []
