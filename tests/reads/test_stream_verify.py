"""A stream (and read_bytes) of a whole object is checked against S3's checksum: against
moto through the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, FaultRule, RequestRecord, TcpProxy

from ..conftest import CHUNK, gets, make_client, payload
from ..transfer.test_composite import put_multipart

ALL = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]
ONE_CHUNK, SEVERAL = 1000, 3 * CHUNK + 5


@contextlib.asynccontextmanager
async def engine_with(
    proxy: TcpProxy, validate: str, **config: Any
) -> AsyncIterator[asyncdl.Engine]:
    """An engine through the proxy: 64 KiB chunks (unless given), the policy given."""
    settings = asyncdl.TransferConfig(
        **{"chunk_size": CHUNK, "validate": validate, "backoff_base": 0.01, **config}
    )
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=settings) as e:
        yield e


#: For the tests that end a stream early, with parts still to come: one part in flight
#: at a time, so none is still connecting when the test ends (the proxy's shutdown
#: would then leave that half-accepted connection's socket open: a ResourceWarning).
ONE_AHEAD = {"stream_prefetch": 1}


def heads(proxy: TcpProxy) -> list[RequestRecord]:
    return [r for r in proxy.requests if r.method == "HEAD"]


async def read_all(stream: asyncdl.ObjectStream, into: list[bytes]) -> None:
    async for piece in stream:
        into.append(piece)


@pytest.mark.parametrize("validate", ["when_available", "required"])
@pytest.mark.parametrize("size", [0, ONE_CHUNK, SEVERAL])
@pytest.mark.parametrize("algorithm", ALL)
async def test_a_whole_stream_is_checked_against_s3s_checksum(
    s3: Any, bucket: str, proxy: TcpProxy, algorithm: str, size: int, validate: str
) -> None:
    data = payload(size, seed=size)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)["ETag"]
    stored = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")[f"Checksum{algorithm}"]
    async with engine_with(proxy, validate) as engine:
        stream = engine.stream(bucket, "k")
        assert b"".join([piece async for piece in stream]) == data
    parts = max(1, -(-size // CHUNK))  # an empty object: one GET, answered 416
    assert len(gets(proxy)) == parts
    if size <= CHUNK and validate == "when_available":
        # The first ranged answer holds it whole and carries no checksum: no request
        # is added to get one, and the reason says what would check it.
        assert heads(proxy) == []
        assert (stream.verified, stream.checksum) == (False, None)
        assert "validate='required'" in (stream.unverified_reason or "")
        return
    assert stream.verified, stream.unverified_reason
    assert stream.checksum == f"{algorithm}:{stored}"
    assert stream.unverified_reason is None
    (head,) = heads(proxy)  # one HEAD more, no other request
    assert head.headers.get("x-amz-checksum-mode") == "ENABLED"
    if validate == "when_available":  # sent once the first answer gave the ETag
        assert head.headers.get("if-match") == etag


async def test_read_bytes_of_a_verified_object(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    data = payload(SEVERAL)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC64NVME")
    async with engine_with(proxy, "when_available") as engine:
        assert await engine.read_bytes(bucket, "k") == data
    assert len(heads(proxy)) == 1


def corrupt_every_get(request: RequestRecord) -> Fault | None:
    return Fault(corrupt_at=100) if request.method == "GET" else None


@pytest.mark.parametrize(("size", "validate"), [(ONE_CHUNK, "required"), (SEVERAL, None)])
async def test_a_byte_corrupted_in_flight_fails_the_stream_at_its_end(
    s3: Any, bucket: str, proxy: TcpProxy, size: int, validate: str | None
) -> None:
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32C")
    proxy.rule = corrupt_every_get
    async with engine_with(proxy, validate or "when_available") as engine:
        stream = engine.stream(bucket, "k")
        received: list[bytes] = []
        with pytest.raises(asyncdl.ChecksumError, match="CRC32C mismatch") as caught:
            await read_all(stream, received)
        assert caught.value.mismatch
        # Every byte went out first: the error replaces the normal end.
        got = b"".join(received)
        assert len(got) == size
        assert got[100] == data[100] ^ 0xFF
        assert not stream.verified
        assert (stream.unverified_reason or "").startswith("CRC32C mismatch: S3 says ")
        with pytest.raises(asyncdl.ChecksumError, match="CRC32C mismatch"):
            await engine.read_bytes(bucket, "k")


def hold_heads(seen: asyncio.Event) -> FaultRule:
    """A proxy rule that holds every HEAD for 30 s, setting ``seen`` when one comes."""
    loop = asyncio.get_running_loop()

    def rule(request: RequestRecord) -> Fault | None:
        if request.method != "HEAD":
            return None
        loop.call_soon_threadsafe(seen.set)
        return Fault(delay=30)

    return rule


async def test_the_bytes_do_not_wait_for_the_checksum_head(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(SEVERAL)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="SHA256")
    proxy.rule = hold_heads(head_held := asyncio.Event())
    async with engine_with(proxy, "when_available") as engine:
        async with asyncio.timeout(10):
            stream = await engine.stream(bucket, "k").open()
            assert heads(proxy) == []  # opened for its headers only: no HEAD yet
            got = b""
            while len(got) < len(data):
                got += await anext(stream)
            assert got == data
            await head_held.wait()  # sent as the reading started, and held by the proxy
            await stream.aclose()  # cancels it: no task left behind
        assert asyncio.all_tasks() == {asyncio.current_task()}
    assert not stream.verified
    assert "not read to its end" in (stream.unverified_reason or "")


async def test_closing_a_stream_early_cancels_the_head(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SEVERAL), ChecksumAlgorithm="CRC32")
    proxy.rule = hold_heads(head_held := asyncio.Event())
    async with engine_with(proxy, "required", **ONE_AHEAD) as engine:
        async with asyncio.timeout(10):
            async with engine.stream(bucket, "k") as stream:
                await anext(stream)
                await head_held.wait()
            head_held.clear()
            # Opened and closed unread, with the HEAD out alongside its first GET.
            async with engine.stream(bucket, "k"):
                await head_held.wait()
        assert asyncio.all_tasks() == {asyncio.current_task()}
    assert len(heads(proxy)) == 2


async def test_a_stream_collected_unread_cancels_its_head(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SEVERAL), ChecksumAlgorithm="CRC32")
    proxy.rule = hold_heads(head_held := asyncio.Event())
    async with engine_with(proxy, "required") as engine:
        async with asyncio.timeout(10):
            stream = await engine.stream(bucket, "k").open()
            await head_held.wait()  # out alongside the first GET
            del stream  # never read, never closed
            gc.collect()
            others = asyncio.all_tasks() - {asyncio.current_task()}
            assert others  # the HEAD, until its cancellation lands on this loop
            await asyncio.wait(others)
        assert len(heads(proxy)) == 1


@pytest.mark.parametrize("failure", ["403", "reset"])
async def test_a_failed_head_leaves_the_stream_unverified(
    s3: Any, bucket: str, proxy: TcpProxy, failure: str
) -> None:
    # Some policies allow GetObject but not HeadObject; a HEAD that cannot get through.
    data = payload(SEVERAL)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    fault = Fault(status=403, error_code="AccessDenied") if failure == "403" else Fault(reset=True)
    proxy.rule = lambda r: fault if r.method == "HEAD" else None
    async with engine_with(proxy, "when_available", max_attempts=2) as engine:
        stream = engine.stream(bucket, "k")
        assert b"".join([piece async for piece in stream]) == data
    assert not stream.verified
    reason = stream.unverified_reason or ""
    assert reason.startswith("the checksum HEAD failed: ")
    assert ("access denied" if failure == "403" else "after 2 attempts") in reason


async def test_a_failed_head_under_required_is_the_error(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SEVERAL), ChecksumAlgorithm="CRC32")
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if r.method == "HEAD" else None
    )
    async with engine_with(proxy, "required", **ONE_AHEAD) as engine:
        with pytest.raises(asyncdl.AccessDeniedError):
            await read_all(engine.stream(bucket, "k"), [])
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.read_bytes(bucket, "k")


@pytest.mark.parametrize("size", [ONE_CHUNK, SEVERAL])
async def test_required_with_no_stored_checksum(
    s3_without_checksums: Any, bucket: str, proxy: TcpProxy, size: int
) -> None:
    s3_without_checksums.put_object(Bucket=bucket, Key="k", Body=payload(size))
    async with engine_with(proxy, "required", **ONE_AHEAD) as engine:
        stream = engine.stream(bucket, "k")
        with pytest.raises(asyncdl.ChecksumError, match="no stored checksum") as caught:
            await read_all(stream, [])
        assert not caught.value.mismatch
        with pytest.raises(asyncdl.ChecksumError, match="no stored checksum"):
            await engine.read_bytes(bucket, "k")
    async with engine_with(proxy, "when_available") as engine:
        stream = engine.stream(bucket, "k")
        await read_all(stream, [])
    assert not stream.verified
    reason = "no stored checksum" if size > CHUNK else "fits in the first ranged answer"
    assert reason in (stream.unverified_reason or "")


@pytest.mark.parametrize("validate", ["when_available", "required"])
@pytest.mark.parametrize(("start", "end"), [(10, None), (0, 2 * CHUNK), (CHUNK, 2 * CHUNK)])
async def test_a_range_read_is_not_checkable(
    s3: Any, bucket: str, proxy: TcpProxy, start: int, end: int | None, validate: str
) -> None:
    data = payload(SEVERAL)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    async with engine_with(proxy, validate) as engine:
        stream = engine.stream(bucket, "k", start=start, end=end)
        assert b"".join([piece async for piece in stream]) == data[start:end]
    assert not stream.verified
    assert "range" in (stream.unverified_reason or "")
    # "required" sends its HEAD alongside a first GET from byte 0, before the answer
    # shows whether the read runs to the object's end.
    assert len(heads(proxy)) == (validate == "required" and start == 0)


async def test_the_first_answer_s_checksum_is_used_when_it_holds_the_object(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # A server that ignores Range answers with the whole object, and this one sends its
    # checksum unasked (moto sends it when asked: the proxy asks for it).
    data = payload(SEVERAL)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    stored = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")["ChecksumCRC32"]
    proxy.rule = lambda r: Fault(headers={"range": None, "x-amz-checksum-mode": "ENABLED"})
    async with engine_with(proxy, "when_available") as engine:
        stream = engine.stream(bucket, "k")
        assert b"".join([piece async for piece in stream]) == data
    assert (stream.verified, stream.checksum) == (True, f"CRC32:{stored}")
    assert [r.method for r in proxy.requests] == ["GET"]


@pytest.mark.parametrize("validate", ["when_available", "required"])
async def test_a_composite_checksum_is_not_checkable_by_a_stream(
    s3: Any, bucket: str, proxy: TcpProxy, validate: str
) -> None:
    data, _ = put_multipart(s3, bucket, "k", "CRC32")
    async with engine_with(proxy, validate, chunk_size=2**20, **ONE_AHEAD) as engine:
        stream = engine.stream(bucket, "k")
        received: list[bytes] = []
        if validate == "required":
            with pytest.raises(asyncdl.ChecksumError, match="COMPOSITE") as caught:
                await read_all(stream, received)
            assert not caught.value.mismatch
            return
        await read_all(stream, received)
    assert b"".join(received) == data
    assert not stream.verified
    assert "COMPOSITE" in (stream.unverified_reason or "")
    assert (stream.checksum or "").endswith("-3")


async def test_validate_off_sends_and_checks_nothing(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SEVERAL), ChecksumAlgorithm="CRC32")
    proxy.rule = corrupt_every_get
    async with engine_with(proxy, "off") as engine:
        stream = engine.stream(bucket, "k")
        await read_all(stream, [])
    assert heads(proxy) == []
    assert (stream.verified, stream.unverified_reason) == (False, "validation is off")
