"""Downloads against moto's server through a recording proxy (DESIGN.md §5)."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files.writer import TempFile
from asyncdl._transfer import parts
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, gets, gone_within_a_second, make_client, payload, temp_files

SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 7, 9 * CHUNK + 123]
STRATEGIES = ["get-first", "head-first"]


def heads(proxy: TcpProxy) -> list[RequestRecord]:
    return [r for r in proxy.requests if r.method == "HEAD"]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("size", SIZES)
async def test_sizes(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    size: int,
    strategy: str,
) -> None:
    data = payload(size)
    etag = s3.put_object(Bucket=bucket, Key="obj", Body=data)["ETag"]
    target = tmp_path / "out.bin"

    result = await engine.download(bucket, "obj", target, strategy=strategy)

    assert target.read_bytes() == data
    assert result == asyncdl.DownloadResult(
        bucket=bucket,
        key="obj",
        path=target,
        size=size,
        etag=etag,
        strategy=strategy,
        requests=result.requests,
        # Checksums have their own tests (test_integrity.py).
        checksum=result.checksum,
        verified=result.verified,
        unverified_reason=result.unverified_reason,
    )
    parts = max(1, math.ceil(size / CHUNK))
    if strategy == "get-first":
        # A HEAD for the checksum goes alongside the fan-out when more than the first
        # answer is to come (ranged GETs carry none).
        expected_gets, expected_heads = parts, int(parts > 1)
        first, *rest = gets(proxy)
        assert first.range == f"bytes=0-{CHUNK - 1}"
        assert "if-match" not in first.headers
        if size == 0:
            # S3's 416 carries no ETag: one plain GET brings it (empty objects only).
            expected_gets = 2
            assert [r.range for r in rest] == [None]
            rest = []
    else:
        expected_gets, expected_heads = parts, 1
        rest = gets(proxy)
        if size <= CHUNK:
            assert rest[0].range is None  # one plain GET for a small object
    assert len(gets(proxy)) == expected_gets
    assert len(heads(proxy)) == expected_heads
    assert result.requests == expected_gets + expected_heads == len(proxy.requests)
    assert all(r.headers.get("if-match") == etag for r in rest)
    assert temp_files(tmp_path) == []


async def test_small_object_is_one_request_get_first(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="tiny", Body=b"x" * 1024)
    result = await engine.download(bucket, "tiny", tmp_path / "t", strategy="get-first")
    assert (result.requests, len(proxy.requests)) == (1, 1)


async def test_object_changed_between_parts(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="obj", Body=payload(3 * CHUNK))
    target = tmp_path / "out.bin"

    def overwrite() -> None:
        s3.put_object(Bucket=bucket, Key="obj", Body=payload(3 * CHUNK, seed=1))

    proxy.rule = lambda r: (
        Fault(before=overwrite) if r.range == f"bytes={2 * CHUNK}-{3 * CHUNK - 1}" else None
    )
    with pytest.raises(asyncdl.ObjectChangedError) as caught:
        await engine.download(bucket, "obj", target, strategy="get-first")
    assert (caught.value.bucket, caught.value.key) == (bucket, "obj")
    assert not target.exists()
    # A sibling part's write still in a worker thread when the download failed
    # removes the temp file as it ends (see writer.TempFile.discard).
    await gone_within_a_second(tmp_path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_missing_key_and_bucket(
    engine: asyncdl.Engine, bucket: str, tmp_path: Path, strategy: str
) -> None:
    with pytest.raises(asyncdl.ObjectNotFoundError, match="no such object"):
        await engine.download(bucket, "missing", tmp_path / "a", strategy=strategy)
    with pytest.raises(asyncdl.ObjectNotFoundError) as caught:
        await engine.download("no-such-bucket-here", "k", tmp_path / "b", strategy=strategy)
    assert caught.value.bucket == "no-such-bucket-here"
    assert os.listdir(tmp_path) == []


async def test_existing_target_kept_on_failure(
    engine: asyncdl.Engine, bucket: str, tmp_path: Path
) -> None:
    target = tmp_path / "keep.txt"
    target.write_bytes(b"precious")
    with pytest.raises(asyncdl.ObjectNotFoundError):
        await engine.download(bucket, "missing", target)
    assert target.read_bytes() == b"precious"
    assert os.listdir(tmp_path) == ["keep.txt"]


async def test_existing_target_replaced_on_success(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old content that is longer than the new one")
    s3.put_object(Bucket=bucket, Key="k", Body=b"new")
    await engine.download(bucket, "k", target)
    assert target.read_bytes() == b"new"


@pytest.mark.parametrize(
    ("make_path", "message"),
    [
        (lambda tmp: tmp / "missing-dir" / "file", "does not exist"),
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: "", "names no file"),
        (lambda tmp: f"{tmp}/a\x00b", "NUL byte"),
        # The OS refuses the name: its reason is the error, not a bare OSError.
        (lambda tmp: tmp / ("n" * 300), "cannot be used: .*too long"),
        (lambda tmp: f"{tmp}/{'d' * 300}/file", "cannot be used: .*too long"),
        # A trailing separator says "a directory": the OS would refuse such a file too.
        (lambda tmp: f"{tmp}/out/", "ends with a separator"),
        (lambda tmp: f"{tmp}/out/.", "names a directory"),
        (lambda tmp: f"{tmp}/out/./..", "names a directory"),
    ],
)
async def test_bad_targets_touch_nothing(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    make_path: Any,
    message: str,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    with pytest.raises(asyncdl.InvalidRequestError, match=message):
        await engine.download(bucket, "k", make_path(tmp_path))
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []


async def test_a_file_named_with_a_trailing_separator_is_left_alone(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    (tmp_path / "notes").write_bytes(b"mine")
    with pytest.raises(asyncdl.InvalidRequestError, match="ends with a separator"):
        await engine.download(bucket, "k", f"{tmp_path}/notes/")
    assert (tmp_path / "notes").read_bytes() == b"mine"
    assert proxy.requests == []


@pytest.mark.parametrize(
    ("bucket_name", "key", "message"),
    [("", "k", "bucket"), ("b", "", "key"), ("bad bucket!", "k", "invalid bucket name")],
)
async def test_bad_bucket_or_key(
    engine: asyncdl.Engine,
    proxy: TcpProxy,
    tmp_path: Path,
    bucket_name: str,
    key: str,
    message: str,
) -> None:
    with pytest.raises(asyncdl.InvalidRequestError, match=message):
        await engine.download(bucket_name, key, tmp_path / "x")
    assert proxy.requests == []


async def test_unknown_extra_args_name_the_allowed_ones(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=r"unsupported extra_args \['Range'\].*VersionId"):
        await engine.download(bucket, "k", tmp_path / "x", extra_args={"Range": "bytes=0-1"})
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []


async def test_unknown_strategy(engine: asyncdl.Engine, bucket: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown strategy 'fastest'"):
        await engine.download(bucket, "k", tmp_path / "x", strategy="fastest")


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_version_id_sent_on_every_request(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, strategy: str
) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    old = payload(2 * CHUNK + 7, seed=1)
    version = s3.put_object(Bucket=bucket, Key="v", Body=old)["VersionId"]
    s3.put_object(Bucket=bucket, Key="v", Body=payload(2 * CHUNK + 7, seed=2))
    target = tmp_path / "v"

    await engine.download(bucket, "v", target, strategy=strategy, extra_args={"VersionId": version})

    assert target.read_bytes() == old
    assert len(proxy.requests) == 4  # three GETs and one HEAD, in either order
    assert all(f"versionId={version}" in r.path for r in proxy.requests)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_sse_c_sent_on_every_request(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, strategy: str
) -> None:
    key = os.urandom(32)
    sse = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key.decode("latin-1")}
    data = payload(CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="secret", Body=data, **sse)
    target = tmp_path / "secret"

    await engine.download(bucket, "secret", target, strategy=strategy, extra_args=sse)

    assert target.read_bytes() == data
    assert proxy.requests
    for request in proxy.requests:
        assert request.headers["x-amz-server-side-encryption-customer-algorithm"] == "AES256"
        assert request.headers["x-amz-server-side-encryption-customer-key"]
        assert request.headers["x-amz-server-side-encryption-customer-key-md5"]


@pytest.mark.parametrize("size", [0, 10, CHUNK, 3 * CHUNK + 5])
async def test_known_size_and_etag_skip_discovery(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, size: int
) -> None:
    data = payload(size)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    target = tmp_path / "k"

    result = await engine.download(bucket, "k", target, size=size, etag=etag.strip('"'))

    assert target.read_bytes() == data
    assert result.etag == etag
    # No discovery: one GET per part; an object of several parts also gets the pinned
    # HEAD that brings its checksum (its ranged GETs carry none).
    parts = max(1, math.ceil(size / CHUNK))
    assert len(gets(proxy)) == parts
    assert len(heads(proxy)) == int(parts > 1)
    assert result.requests == len(proxy.requests)
    assert all(r.headers.get("if-match") == etag for r in proxy.requests)
    if size <= CHUNK:
        assert proxy.requests[0].range is None


async def test_known_etag_that_is_stale(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"now")
    with pytest.raises(asyncdl.ObjectChangedError):
        await engine.download(bucket, "k", tmp_path / "k", size=3, etag='"0123456789abcdef"')
    assert os.listdir(tmp_path) == []


async def test_server_ignoring_range_is_downloaded_once(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(headers={"range": None})
    target = tmp_path / "k"

    result = await engine.download(bucket, "k", target, strategy="get-first")

    assert target.read_bytes() == data
    assert result.requests == len(proxy.requests) == 1


async def test_content_range_that_does_not_match_the_request(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * CHUNK))
    wrong = f"bytes={CHUNK + 1}-{2 * CHUNK - 1}"
    proxy.rule = lambda r: (
        Fault(headers={"range": wrong}) if r.range == f"bytes={CHUNK}-{2 * CHUNK - 1}" else None
    )
    with pytest.raises(asyncdl.DownloadError, match="Content-Range"):
        await engine.download(bucket, "k", tmp_path / "k", strategy="get-first")
    # A sibling part's write still in a worker thread when the download failed
    # removes the temp file as it ends (see writer.TempFile.discard).
    await gone_within_a_second(tmp_path)
    assert os.listdir(tmp_path) == []


async def test_concurrency_budget_is_not_exceeded(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="big", Body=payload(20 * CHUNK))
    proxy.rtt = 0.02  # keep requests in flight long enough to overlap
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=3)
    async with asyncdl.Engine(client, config=config) as engine:
        await engine.download(bucket, "big", tmp_path / "big")
    assert len(proxy.requests) == 20 + 1  # and the checksum HEAD
    assert proxy.max_in_flight == 3


async def test_borrowed_client_is_left_open(
    s3: Any, bucket: str, client: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"abc")
    result = await asyncdl.download(bucket, "k", tmp_path / "k", client=client)
    assert result.strategy == "get-first"  # the client is configured when_required
    listed = await client.list_objects_v2(Bucket=bucket)  # still usable
    assert listed["KeyCount"] == 1


async def test_auto_uses_head_first_on_a_validating_client(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"abc")
    async with make_client(proxy.url, response_checksum_validation="when_supported") as client:
        result = await asyncdl.download(bucket, "k", tmp_path / "k", client=client)
    assert (result.strategy, result.requests) == ("head-first", 2)


async def test_engine_creates_its_own_client_from_the_environment(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    s3.put_object(Bucket=bucket, Key="k", Body=payload(CHUNK * 2))
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=32)
    async with asyncdl.Engine(config=config) as engine:
        assert engine.client.meta.config.max_pool_connections == 32
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert result.strategy == "get-first"
    assert result.requests == len(proxy.requests) == 2 + 1  # two GETs, the checksum HEAD
    with pytest.raises(RuntimeError, match="not open"):
        await engine.download(bucket, "k", tmp_path / "k")


async def test_one_call_download(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    s3.put_object(Bucket=bucket, Key="dir/k", Body=b"hello")
    result = await asyncdl.download(bucket, "dir/k", str(tmp_path / "k"), strategy="head-first")
    assert (tmp_path / "k").read_bytes() == b"hello"
    assert (result.strategy, result.requests, result.size) == ("head-first", 2, 5)


async def test_cancellation_removes_the_temp_file(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="big", Body=payload(12 * CHUNK))
    target = tmp_path / "big"
    target.write_bytes(b"old")
    proxy.rtt = 0.05
    task = asyncio.create_task(engine.download(bucket, "big", target))
    # The proxy counts in its own thread: poll it (the test timeout bounds the wait).
    while len(proxy.requests) < 3:  # noqa: ASYNC110 - parts in flight, temp file exists
        await asyncio.sleep(0.005)
    assert temp_files(tmp_path)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gone_within_a_second(tmp_path)
    assert target.read_bytes() == b"old"


async def _not_taken(*args: Any, **kwargs: Any) -> bool:
    return False


async def test_bodies_are_written_in_bounded_pieces(
    client: Any, s3: Any, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    writes: list[list[int]] = []
    original = TempFile.write_chunks

    async def recording(
        self: TempFile, offset: int, pieces: list[bytes], crc: Any, previous: Any
    ) -> Any:
        writes.append([len(piece) for piece in pieces])
        return await original(self, offset, pieces, crc, previous)

    monkeypatch.setattr(TempFile, "write_chunks", recording)
    # The pieces' way: a body's rest written straight from the socket is bounded by
    # its own buffer (tests/transfer/test_body_into_file.py).
    monkeypatch.setattr(parts, "write_rest", _not_taken)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, write_size=4096)
    async with asyncdl.Engine(client, config=config) as engine:
        await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert sum(map(sum, writes)) == len(data)
    # A part writes as soon as it has gathered write_size: whole pieces as the network
    # delivered them (never joined, never split), so one piece more at most.
    assert all(sum(pieces[:-1]) < 4096 for pieces in writes)


async def test_cancelling_a_1_gib_download_removes_its_temp_file_quickly(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    gib = 1024**3
    s3.put_object(Bucket=bucket, Key="huge", Body=bytes(gib))
    config = asyncdl.TransferConfig(max_concurrency=4)  # 8 MiB parts: 128 of them
    target = tmp_path / "huge"
    async with asyncdl.Engine(client, config=config) as engine:
        task = asyncio.create_task(engine.download(bucket, "huge", target))
        # The proxy counts in its own thread: poll it (the test timeout bounds the wait).
        while len(proxy.requests) < 3:  # noqa: ASYNC110 - parts in flight, 1 GiB preallocated
            await asyncio.sleep(0.01)
        [temp] = temp_files(tmp_path)
        assert (tmp_path / temp).stat().st_size == gib
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await gone_within_a_second(tmp_path)
    assert not target.exists()
    s3.delete_object(Bucket=bucket, Key="huge")  # moto frees its 1 GiB spool file


# -- hardening: answers that odd servers give ------------------------------------------
async def test_empty_object_result_carries_its_etag(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # S3's 416 for a range of an empty object carries no ETag: one plain GET brings it.
    etag = s3.put_object(Bucket=bucket, Key="empty", Body=b"")["ETag"]
    result = await engine.download(bucket, "empty", tmp_path / "e", strategy="get-first")
    assert result.etag == etag
    assert (tmp_path / "e").read_bytes() == b""
    assert [r.range for r in proxy.requests] == [f"bytes=0-{CHUNK - 1}", None]
    assert result.requests == 2


async def test_empty_object_answered_206_with_a_zero_total(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # s3rver answers a range of an empty object with 206, "bytes 0-0/0" and a
    # Content-Length of 1 it never sends; the connection stays open.
    etag = s3.put_object(Bucket=bucket, Key="empty", Body=b"")["ETag"]
    headers = {"Content-Range": "bytes 0-0/0", "Content-Length": "1", "ETag": etag}
    proxy.rule = lambda r: Fault(reply=(206, headers, b"")) if r.range else None
    async with asyncio.timeout(10):
        result = await engine.download(bucket, "empty", tmp_path / "e", strategy="get-first")
    assert (result.size, result.etag, result.requests) == (0, etag, 1)
    assert (tmp_path / "e").read_bytes() == b""


async def test_a_server_without_etags_gets_one_whole_get(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Nothing could pin ranged GETs to one version: the object comes in one GET, and a
    # cut one starts over from the first byte rather than resuming unpinned.
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut: list[RequestRecord] = []

    def no_etags(request: RequestRecord) -> Fault:
        if request.range is None and not cut:
            cut.append(request)
            return Fault(response_headers={"etag": None}, cut_after=CHUNK + 10, stall=0.3)
        return Fault(response_headers={"etag": None})

    proxy.rule = no_etags
    result = await engine.download(bucket, "k", tmp_path / "k", strategy="get-first")
    assert (tmp_path / "k").read_bytes() == data
    assert result.etag is None
    ranges = [r.range for r in proxy.requests]
    assert ranges == [f"bytes=0-{CHUNK - 1}", None, None]
    assert not any("if-match" in r.headers for r in proxy.requests)


@pytest.mark.parametrize("delay", [0.001, 0.003, 0.006])
async def test_a_timeout_while_publishing_leaves_a_true_state(
    s3: Any, bucket: str, client: Any, tmp_path: Path, delay: float
) -> None:
    # The caller's timeout fires just as the last byte is written, while the fsync'ed
    # temp file is being published: the error must not hide a target replaced later.
    data = payload(48 * 2**20)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "k"
    target.write_bytes(b"old")
    config = asyncdl.TransferConfig(fsync=True, backoff_base=0.01)
    loop = asyncio.get_running_loop()
    sent = 0
    deadline: asyncio.Timeout | None = None

    def progress(delta: int, total: int) -> None:
        nonlocal sent
        sent += delta
        if sent == total and deadline is not None:
            deadline.reschedule(loop.time() + delay)

    async with asyncdl.Engine(client, config=config) as engine:
        try:
            async with asyncio.timeout(120) as deadline:
                await engine.download(bucket, "k", target, progress=progress)
        except TimeoutError:
            seen = target.read_bytes()
            await asyncio.sleep(0.5)  # a publish still running would land now
            assert target.read_bytes() == seen
            assert seen in (b"old", data)
        else:
            assert target.read_bytes() == data
    assert temp_files(tmp_path) == []
