"""A body written into the temp file straight from the socket (``asyncdl._wire.own_direct``)
under attack: cancellations and timeouts mid-body, hostile servers (bytes past the
body's end, a second answer after it, a reset, a close, a trickle, a stall, a
Content-Range that disagrees with its length), checksums with a byte flipped in the
written region, a write that fails, TLS, and progress and byte counts.

A file reported done must be the object; a failure leaves nothing; no write lands
after a download ended (a descriptor number is reused by the next file opened).

Against moto on loopback (through the test proxy, capped to keep bodies in flight), or
a scripted server on loopback for what moto never sends. The diversion's writes are
recorded by wrapping ``os`` as its module sees it (the bytes still go to the file).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import re
import socket
import struct
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import quick_io
from asyncdl._files.writer import TempFile
from asyncdl._wire import own_direct, own_http
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload, temp_files
from ..wire.test_own_http_attack import _engine, _Scripted
from ..wire.test_url_session import certificate
from .test_body_into_file import SteadyWrites

PART = 32 * CHUNK  # 2 MiB


@pytest.fixture(autouse=True)
def _the_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # The diversion is the own client's: under ASYNCDL_OWN_HTTP=0 these would test aiohttp.
    monkeypatch.setattr(own_http, "ENABLED", True)
    # Writes stay on the loop however loaded the machine (see SteadyWrites).
    monkeypatch.setattr(quick_io, "QUICK_WRITES", SteadyWrites())


class Writes:
    """Each write a diversion makes: (fd, offset, size); those made once ``closed``."""

    def __init__(self) -> None:
        self.made: list[tuple[int, int, int]] = []
        self.closed = False
        self.late: list[tuple[int, int, int]] = []
        #: Raised by the write after this many (``None``: none fails).
        self.fail_after: int | None = None
        self.error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    @property
    def size(self) -> int:
        return sum(size for _, _, size in self.made)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    recorded = Writes()

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if recorded.fail_after is not None and len(recorded.made) >= recorded.fail_after:
            raise recorded.error
        written = os.pwrite(fd, data, offset)
        entry = (fd, offset, written)
        recorded.made.append(entry)
        if recorded.closed:
            recorded.late.append(entry)
        return written

    monkeypatch.setattr(own_direct, "os", types.SimpleNamespace(pwrite=pwrite))
    return recorded


@pytest.fixture
def slow_proxy(s3_endpoint: str) -> Iterator[TcpProxy]:
    """A proxy to moto that carries 4 MiB/s per connection: bodies stay in flight."""
    with TcpProxy.for_url(s3_endpoint, bandwidth=4 * 1024 * 1024) as running:
        yield running


@contextmanager
def bystanders(directory: Path, count: int = 32) -> Iterator[list[Path]]:
    """Files opened (and written) right after a download ended, each holding its own
    bytes, kept open while the block runs: a descriptor number the download's temp
    file had is reused by one of them, and a late write would land in it."""
    directory.mkdir(exist_ok=True)
    paths = [directory / f"other{i}" for i in range(count)]
    fds = []
    try:
        for i, path in enumerate(paths):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            os.write(fd, b"%d" % i * 10)
        yield paths
    finally:
        for fd in fds:
            os.close(fd)
    for i, path in enumerate(paths):
        assert path.read_bytes() == b"%d" % i * 10, path


async def first_write(writes: Writes, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.005)):
        if writes.made:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("no diversion write")


# -- cancellation and timeouts ---------------------------------------------------------


@pytest.mark.parametrize("progress", [None, lambda delta: None])
async def test_a_timeout_around_the_download_mid_body_writes_nothing_after(
    s3: Any,
    bucket: str,
    slow_proxy: TcpProxy,
    tmp_path: Path,
    writes: Writes,
    progress: Callable[[int], None] | None,
) -> None:
    data = payload(4 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "out"
    target.mkdir()
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))
    config = asyncdl.TransferConfig(chunk_size=PART, max_concurrency=4)
    async with (
        make_client(slow_proxy.url) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.4):
                await engine.download(bucket, "k", target / "k", progress=progress)
        writes.closed = True
        assert writes.made  # it was mid-diversion
        with bystanders(tmp_path / "others"):
            await asyncio.sleep(0.5)
    assert writes.late == []
    # Nothing was left for the loop to report (a failure nobody heard of).
    gc.collect()
    await asyncio.sleep(0)
    assert reported == []
    assert os.listdir(target) == []


async def test_the_download_s_own_timeout_mid_body_leaves_nothing(
    s3: Any, bucket: str, slow_proxy: TcpProxy, tmp_path: Path, writes: Writes
) -> None:
    data = payload(4 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(chunk_size=PART, max_concurrency=4)
    async with (
        make_client(slow_proxy.url) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        with pytest.raises((asyncdl.DownloadError, TimeoutError)):
            await engine.download(bucket, "k", tmp_path / "k", timeout=0.4)
        writes.closed = True
        assert writes.made
        with bystanders(tmp_path / "others"):
            await asyncio.sleep(0.5)
    assert writes.late == []
    assert [name for name in os.listdir(tmp_path) if name != "others"] == []


@pytest.mark.usefixtures("aws_env")
async def test_closing_the_engine_mid_body_writes_nothing_after_and_leaves_nothing(
    s3: Any, bucket: str, slow_proxy: TcpProxy, tmp_path: Path, writes: Writes
) -> None:
    data = payload(4 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "out"
    target.mkdir()
    # The engine's own client (a borrowed one stays open, and its downloads go on).
    config = asyncdl.TransferConfig(chunk_size=PART, max_concurrency=4, max_attempts=1)
    engine = asyncdl.Engine(endpoint_url=slow_proxy.url, region="us-east-1", config=config)
    async with engine:
        task = asyncio.ensure_future(engine.download(bucket, "k", target / "k"))
        await first_write(writes)
    result = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(result[0], BaseException), result
    writes.closed = True
    with bystanders(tmp_path / "others"):
        await asyncio.sleep(0.5)
    assert writes.late == []
    assert os.listdir(target) == []


async def test_a_part_that_fails_cancels_its_siblings_mid_body_and_nothing_lands_after(
    s3: Any, bucket: str, slow_proxy: TcpProxy, tmp_path: Path, writes: Writes
) -> None:
    # The last part's GET is refused (403) once the others are mid-body: the task group
    # cancels them in the middle of their diversions.
    data = payload(4 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data)

    def rule(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and (request.range or "").startswith(f"bytes={3 * PART}-"):
            return Fault(status=403, error_code="AccessDenied", delay=0.3)
        return None

    slow_proxy.rule = rule
    target = tmp_path / "out"
    target.mkdir()
    config = asyncdl.TransferConfig(chunk_size=PART, max_concurrency=4)
    async with (
        make_client(slow_proxy.url) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(bucket, "k", target / "k")
        writes.closed = True
        assert writes.made
        with bystanders(tmp_path / "others"):
            await asyncio.sleep(0.5)
    assert writes.late == []
    assert os.listdir(target) == []


async def test_many_downloads_one_failing_leave_the_others_whole_or_nothing(
    s3: Any, bucket: str, slow_proxy: TcpProxy, tmp_path: Path, writes: Writes
) -> None:
    # Several downloads in one task group; one fails mid-flight and the group cancels
    # the rest mid-body. Every file there is an object, whole; no temp file is left.
    objects = {f"k{i}": payload(2 * PART, seed=i) for i in range(4)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    target = tmp_path / "out"
    target.mkdir()
    config = asyncdl.TransferConfig(chunk_size=PART, max_concurrency=8)
    async with (
        make_client(slow_proxy.url) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):

        async def failing() -> None:
            await first_write(writes)
            raise LookupError("a sibling failed")

        async def all_of_them() -> None:
            async with asyncio.TaskGroup() as group:
                for key in objects:
                    group.create_task(engine.download(bucket, key, target / key))
                group.create_task(failing())

        with pytest.raises(ExceptionGroup):
            await all_of_them()
        writes.closed = True
        with bystanders(tmp_path / "others"):
            await asyncio.sleep(0.5)
    assert writes.late == []
    assert temp_files(target) == []
    for name in os.listdir(target):
        assert (target / name).read_bytes() == objects[name]


# -- progress, counts, and checksums -----------------------------------------------------


async def test_progress_and_byte_counts_sum_to_the_size_across_a_cut(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, writes: Writes
) -> None:
    data = payload(3 * PART + 12345)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut = {"once": True}

    def rule(request: RequestRecord) -> Fault | None:
        ranged = (request.range or "").startswith(f"bytes={PART}-")
        if request.method == "GET" and ranged and cut.pop("once", False):
            return Fault(cut_after=PART // 2 + 777)
        return None

    proxy.rule = rule
    seen: list[int] = []
    config = asyncdl.TransferConfig(chunk_size=PART, backoff_base=0.01)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        await engine.download(bucket, "k", tmp_path / "k", progress=seen.append)
        stats = engine.stats()
    assert (tmp_path / "k").read_bytes() == data
    assert writes.made
    assert sum(seen) == len(data)
    assert all(delta > 0 for delta in seen)
    assert stats.bytes_received == len(data)


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
async def test_a_byte_flipped_in_the_written_region_fails_the_checksum_and_leaves_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, writes: Writes, algorithm: str
) -> None:
    data = payload(2 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)

    # Flipped 1.5 MiB into the second part, well past what came with its head, in
    # every answer for it (a mismatch is fetched once more).
    def rule(request: RequestRecord) -> Fault | None:
        ranged = (request.range or "").startswith(f"bytes={PART}-")
        return Fault(corrupt_at=3 * PART // 4) if request.method == "GET" and ranged else None

    proxy.rule = rule
    config = asyncdl.TransferConfig(chunk_size=PART, validate="required")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.ChecksumError):
            await engine.download(bucket, "k", tmp_path / "k")
        assert any(offset <= PART + 3 * PART // 4 < offset + n for _, offset, n in writes.made)
        assert os.listdir(tmp_path) == []
        # Unflipped, the same object is verified.
        proxy.rule = None
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert result.verified, result.unverified_reason
    assert (tmp_path / "k").read_bytes() == data
    assert os.listdir(tmp_path) == ["k"]


# -- the disk --------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
async def test_a_write_that_fails_mid_body_fails_the_download_and_leaves_nothing(
    s3: Any, bucket: str, client: Any, tmp_path: Path, writes: Writes, code: int
) -> None:
    data = payload(2 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    writes.fail_after = 5
    writes.error = OSError(code, os.strerror(code))
    config = asyncdl.TransferConfig(chunk_size=2 * PART, backoff_base=0.01)
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download(bucket, "k", tmp_path / "k")
    assert os.strerror(code) in str(raised.value)
    assert len(writes.made) == 5
    assert os.listdir(tmp_path) == []


# -- hostile servers ---------------------------------------------------------------------


def answer(head: bytes, body: bytes, *extra: bytes) -> tuple[bytes, bytes]:
    """The answer's head to a GET of ``body`` (206 for a Range), and the bytes it sends."""
    found = re.search(rb"\r\nrange: bytes=(\d+)-(\d*)\r\n", head, re.IGNORECASE)
    if found is None:
        lines = [b"HTTP/1.1 200 OK", b"Content-Length: %d" % len(body)]
        sent = body
    else:
        first = int(found[1])
        last = min(int(found[2]) if found[2] else len(body) - 1, len(body) - 1)
        sent = body[first : last + 1]
        lines = [
            b"HTTP/1.1 206 Partial Content",
            b"Content-Length: %d" % len(sent),
            b"Content-Range: bytes %d-%d/%d" % (first, last, len(body)),
        ]
    return b"\r\n".join([*lines, b'ETag: "v1"', *extra]) + b"\r\n\r\n", sent


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset, not a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def send_slowly(writer: asyncio.StreamWriter, head: bytes, sent: bytes) -> None:
    """The head and the body's first 64 KiB, a pause (the reader takes them and hands
    the rest to a diversion), then the rest up to its last 1000 bytes, a pause."""
    writer.write(head + sent[:CHUNK])
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(sent[CHUNK:-1000])
    await writer.drain()
    await asyncio.sleep(0.05)


def engine_for(endpoint: str, **config: Any) -> asyncdl.Engine:
    return _engine(endpoint, **{"max_attempts": 3, "chunk_size": PART, **config})


BODY = payload(PART - 4321)


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("after", [b"garbage", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"])
async def test_bytes_past_the_body_in_its_last_read_are_nobody_s(
    tmp_path: Path, writes: Writes, after: bytes
) -> None:
    # The body's end and bytes after it (junk, or a whole second answer) come in one
    # read. The file is the body; the connection is not used again: the next GET goes
    # on a new one, and gets its own answer, not the one that came unasked.
    other = payload(5000, seed=1)

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.head(reader)
            if b"/b/k2 " in head:
                writer.write(b"".join(answer(head, other)))
                await writer.drain()
                continue
            start, sent = answer(head, BODY)
            await send_slowly(writer, start, sent)
            writer.write(sent[-1000:] + after)
            await writer.drain()

    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", tmp_path / "k")
        await engine.download("b", "k2", tmp_path / "k2")
    assert (tmp_path / "k").read_bytes() == BODY
    assert (tmp_path / "k2").read_bytes() == other
    assert writes.made
    assert server.connections == 2


@pytest.mark.usefixtures("aws_env")
async def test_the_next_answer_on_a_connection_after_a_diverted_body_is_read_right(
    tmp_path: Path, writes: Writes
) -> None:
    # Three GETs on one keep-alive connection, the first two diverted, the third small.
    bodies = {b"k1": BODY, b"k2": payload(PART - 1, seed=2), b"k3": b"tiny"}

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.head(reader)
            key = re.search(rb"/b/(k\d) ", head)
            assert key is not None
            start, sent = answer(head, bodies[key[1]])
            if len(sent) > 2 * CHUNK:
                await send_slowly(writer, start, sent)
                writer.write(sent[-1000:])
            else:
                writer.write(start + sent)
            await writer.drain()

    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        for key in bodies:
            await engine.download("b", key.decode(), tmp_path / key.decode())
    for key, body in bodies.items():
        assert (tmp_path / key.decode()).read_bytes() == body
    assert server.connections == 1
    assert writes.size >= 2 * (len(BODY) - 2 * CHUNK)


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("how", ["reset", "close"])
async def test_a_body_cut_mid_diversion_is_fetched_again_from_where_it_stopped(
    tmp_path: Path, writes: Writes, how: str
) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await server.head(reader)
        start, sent = answer(head, BODY)
        if n == 1:
            await send_slowly(writer, start, sent[: 5 * CHUNK + 123])
            if how == "reset":
                reset(writer)
            else:
                writer.close()
            return
        writer.write(start + sent)
        await writer.drain()
        await reader.read()

    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == BODY
    assert writes.made
    # The retry asked from the first byte not written: every byte that came was kept.
    assert b"bytes=%d-" % (5 * CHUNK + 123 - 1000) in server.heads[-1], server.heads


@pytest.mark.usefixtures("aws_env")
async def test_a_body_trickled_a_byte_at_a_time_is_written_whole(
    tmp_path: Path, writes: Writes
) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await server.head(reader)
        start, sent = answer(head, BODY)
        writer.write(start + sent[:CHUNK])
        await writer.drain()
        await asyncio.sleep(0.05)
        for i in range(CHUNK, CHUNK + 300):
            writer.write(sent[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.write(sent[CHUNK + 300 : -300])
        await writer.drain()
        for i in range(len(sent) - 300, len(sent)):
            writer.write(sent[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0.001)
        await reader.read()

    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == BODY
    assert writes.size > len(BODY) // 2
    assert server.connections == 1


@pytest.mark.usefixtures("aws_env")
async def test_a_stall_mid_diversion_is_caught_by_the_read_timeout(
    tmp_path: Path, writes: Writes
) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await server.head(reader)
        start, sent = answer(head, BODY)
        if n == 1:
            await send_slowly(writer, start, sent)
            await asyncio.sleep(30)
        writer.write(start + sent)
        await writer.drain()
        await reader.read()

    async with _Scripted(script) as server, engine_for(server.endpoint, read_timeout=0.5) as engine:
        await asyncio.wait_for(engine.download("b", "k", tmp_path / "k"), 10)
    assert (tmp_path / "k").read_bytes() == BODY
    assert b"bytes=%d-" % (len(BODY) - 1000) in server.heads[-1], server.heads


@pytest.mark.usefixtures("aws_env")
async def test_a_206_longer_than_its_content_range_is_refused_and_leaves_nothing(
    tmp_path: Path, writes: Writes
) -> None:
    # Two parts; the second part's answer says Content-Range for its bytes but a
    # Content-Length (and a body) a MiB longer: which is right cannot be told.
    data = payload(2 * PART, seed=3)

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.head(reader)
            start, sent = answer(head, data)
            if b"range: bytes=%d-" % PART in head.lower():
                junk = payload(len(sent) + PART // 2, seed=4)
                start = start.replace(
                    b"Content-Length: %d" % len(sent), b"Content-Length: %d" % len(junk)
                )
                await send_slowly(writer, start, junk)
                writer.write(junk[-1000:])
            else:
                writer.write(start + sent)
            await writer.drain()

    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        with pytest.raises(asyncdl.DownloadError, match="Content-Length"):
            await engine.download("b", "k", tmp_path / "k")
    assert all(offset + size <= PART for _, offset, size in writes.made)
    assert os.listdir(tmp_path) == []


@pytest.mark.usefixtures("aws_env")
async def test_a_body_over_tls_is_written_straight_from_the_socket(
    tmp_path: Path, writes: Writes, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, server_tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    data = payload(2 * PART + 99, seed=5)

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.head(reader)
            start, sent = answer(head, data)
            await send_slowly(writer, start, sent)
            writer.write(sent[-1000:] + (b"junk" if n == 1 else b""))
            await writer.drain()

    target = tmp_path / "out"
    target.mkdir()
    async with _Scripted(script, tls=server_tls) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", target / "k")
        await engine.download("b", "k", target / "k2")
    assert (target / "k").read_bytes() == data
    assert (target / "k2").read_bytes() == data
    assert writes.size > len(data)


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("after", [b"", b"junk"])
async def test_writes_turning_slow_between_reads_hand_back_the_rest_whole(
    tmp_path: Path, writes: Writes, monkeypatch: pytest.MonkeyPatch, after: bytes
) -> None:
    # Another download's writes send writes off the loop while this body is diverted:
    # its next read (the body's end, and junk after it) is handed back to the pieces.
    # The file is the body; a connection that carried junk is not used again, one that
    # did not serves the next GET.
    policy = quick_io.QuickWrites()
    monkeypatch.setattr(quick_io, "QUICK_WRITES", policy)

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.head(reader)
            start, sent = answer(head, BODY)
            await send_slowly(writer, start, sent)
            policy._trip(60.0)
            writer.write(sent[-1000:] + after)
            await writer.drain()

    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", tmp_path / "k")
        assert writes.made
        policy._off = 0.0
        await engine.download("b", "k", tmp_path / "k2")
    assert (tmp_path / "k").read_bytes() == BODY
    assert (tmp_path / "k2").read_bytes() == BODY
    assert server.connections == (2 if after else 1)


@pytest.mark.usefixtures("aws_env")
async def test_progress_sums_to_the_size_when_a_body_without_etag_starts_over(
    tmp_path: Path, writes: Writes
) -> None:
    # No ETag pins a resumed range: a cut mid-diversion starts the part over, and the
    # progress reported of the bytes it had written is taken back.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.head(reader)
            start, sent = answer(head, BODY)
            start = start.replace(b'ETag: "v1"\r\n', b"")
            if n == 1:
                await send_slowly(writer, start, sent[: 9 * CHUNK])
                reset(writer)
                return
            writer.write(start + sent)
            await writer.drain()

    seen: list[int] = []
    async with _Scripted(script) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", tmp_path / "k", progress=seen.append)
        stats = engine.stats()
    assert (tmp_path / "k").read_bytes() == BODY
    assert writes.made
    assert sum(seen) == len(BODY)
    assert server.connections == 2
    assert stats.bytes_received >= len(BODY)


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("how", ["reset", "close"])
async def test_a_body_over_tls_cut_mid_diversion_is_fetched_again_from_where_it_stopped(
    tmp_path: Path, writes: Writes, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    bundle, server_tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await server.head(reader)
        start, sent = answer(head, BODY)
        if n == 1:
            await send_slowly(writer, start, sent[: 7 * CHUNK + 5])
            if how == "reset":
                reset(writer)
            else:
                writer.close()  # TLS close_notify, then FIN
            return
        writer.write(start + sent)
        await writer.drain()
        await reader.read()

    target = tmp_path / "out"
    target.mkdir()
    async with _Scripted(script, tls=server_tls) as server, engine_for(server.endpoint) as engine:
        await engine.download("b", "k", target / "k")
    assert (target / "k").read_bytes() == BODY
    assert writes.made
    assert b"bytes=%d-" % (7 * CHUNK + 5 - 1000) in server.heads[-1], server.heads


async def test_the_byte_count_moves_while_a_body_is_diverted_without_a_progress_callback(
    s3: Any, bucket: str, slow_proxy: TcpProxy, tmp_path: Path, writes: Writes
) -> None:
    # One 6 MiB part at 4 MiB/s: engine.stats() (what an exporter samples) counts the
    # bytes as they are written, not all at the body's end.
    data = payload(3 * PART)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(chunk_size=3 * PART)
    samples: list[int] = []
    async with (
        make_client(slow_proxy.url) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        task = asyncio.ensure_future(engine.download(bucket, "k", tmp_path / "k"))
        while not task.done():
            samples.append(engine.stats().bytes_received)
            await asyncio.sleep(0.05)
        await task
        assert engine.stats().bytes_received == len(data)
    assert writes.size > len(data) // 2
    during = {sample for sample in samples if 0 < sample < len(data)}
    assert len(during) >= 4, samples


async def test_a_small_file_still_written_whole_is_not_opened_early(
    s3: Any, bucket: str, slow_proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A body under write_size, all of the object in its one answer, arriving over
    # several reads: its temp file is never opened (nothing may be written before the
    # body is whole), and the file is published in one go at the end.
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    opened: list[TempFile] = []
    real_open = TempFile.open

    async def recording_open(self: TempFile) -> None:
        opened.append(self)
        await real_open(self)

    monkeypatch.setattr(TempFile, "open", recording_open)
    async with make_client(slow_proxy.url) as client, asyncdl.Engine(client) as engine:
        await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert opened == []
