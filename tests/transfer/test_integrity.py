"""Checksum verification: CRC combining (pure) and verified downloads against moto."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from awscrt import checksums as crt
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncdl
from asyncdl._files.writer import TempFile
from asyncdl._wire.checksums import (
    CrcCombiner,
    ExpectedChecksum,
    crc_function,
    encode_crc,
    from_botocore,
    from_headers,
    parse_checksum,
)
from asyncdl.testing.moto_server import serving_whole_objects_for_parts
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload, temp_files

CRCS = ["CRC32", "CRC32C", "CRC64NVME"]
ALL = [*CRCS, "SHA1", "SHA256"]


# -- pure -----------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    algorithm=st.sampled_from(CRCS),
    data=st.binary(max_size=4096),
    cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=12),
    order=st.randoms(use_true_random=False),
)
def test_combined_part_crcs_equal_the_whole(
    algorithm: str, data: bytes, cuts: list[int], order: Any
) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    parts = [(a, b) for a, b in itertools.pairwise(bounds) if a < b]
    order.shuffle(parts)  # parts finish in any order
    combiner = CrcCombiner(algorithm)
    crc = crc_function(algorithm)
    for start, end in parts:
        combiner.add(start, end, crc(data[start:end], 0))
    assert combiner.value(len(data)) == encode_crc(algorithm, crc(data, 0))


def test_combiner_waits_for_every_byte() -> None:
    combiner = CrcCombiner("CRC32")
    combiner.add(5, 10, 123)
    assert combiner.value(10) is None


def test_known_values() -> None:
    # Published check values for b"123456789", for the functions asyncdl computes with
    # (CRC32 may be ISA-L's, not awscrt's: the same polynomial, and a running value).
    assert crc_function("CRC32")(b"123456789", 0) == crt.crc32(b"123456789") == 0xCBF43926
    assert crc_function("CRC32")(b"6789", crc_function("CRC32")(b"12345", 0)) == 0xCBF43926
    assert crc_function("CRC32C")(b"123456789", 0) == 0xE3069283
    assert encode_crc("CRC32", 0) == "AAAAAA=="


def test_parsing() -> None:
    assert parse_checksum("crc64nvme:jSnVw/bqjr4=") == ExpectedChecksum("CRC64NVME", "jSnVw/bqjr4=")
    assert parse_checksum("CRC32:28PLQA==-2").composite
    for bad in [
        "CRC32",
        "MD5:abc=",
        "CRC32:not base64!",
        "CRC32:nope",  # base64, but 3 bytes: no CRC32 is
        "CRC64NVME:28PLQA==",  # a CRC32's 4 bytes
        "SHA256:28PLQA==-2",
        "CRC32:-2",
    ]:
        with pytest.raises(ValueError, match=r"checksum|base64|bytes"):
            parse_checksum(bad)
    headers = {"x-amz-checksum-crc32": "DUoRhQ==", "x-amz-checksum-type": "FULL_OBJECT"}
    assert from_headers(headers, '"abc"') == ExpectedChecksum("CRC32", "DUoRhQ==")
    # A multipart ETag with no checksum type: possibly COMPOSITE, so a mismatch read as
    # FULL_OBJECT proves nothing; a match in either reading verifies.
    assert from_botocore({"ChecksumCRC32": "28PLQA=="}, '"83be-2"') == ExpectedChecksum(
        "CRC32", "28PLQA==", 2, maybe_full=True
    )
    declared = {"ChecksumCRC32": "28PLQA==-2", "ChecksumType": "COMPOSITE"}
    assert from_botocore(declared, '"83be-2"') == ExpectedChecksum("CRC32", "28PLQA==", 2)
    assert from_headers({}, None) is None


# -- against moto -------------------------------------------------------------------
def expected_value(algorithm: str, data: bytes) -> str:
    if algorithm in CRCS:
        return encode_crc(algorithm, crc_function(algorithm)(data, 0))
    return base64.b64encode(hashlib.new(algorithm.lower(), data).digest()).decode()


@pytest.mark.parametrize(
    ("strategy", "validate"), [("get-first", "required"), ("head-first", "when_available")]
)
@pytest.mark.parametrize("size", [0, 1, CHUNK + 1, 3 * CHUNK])
@pytest.mark.parametrize("algorithm", ALL)
async def test_verified_downloads(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    algorithm: str,
    size: int,
    strategy: str,
    validate: str,
) -> None:
    data = payload(size, seed=size)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)
    stored = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")[f"Checksum{algorithm}"]
    assert stored == expected_value(algorithm, data)  # the test's own premise
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate=validate)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k", strategy=strategy)
    assert (tmp_path / "k").read_bytes() == data
    assert result.verified, result.unverified_reason
    assert result.checksum == f"{algorithm}:{stored}"
    assert result.unverified_reason is None
    # Verification adds at most the one HEAD, sent alongside the first GET; an empty
    # object's 416 is followed by one plain GET (for its ETag).
    parts = max(1, -(-size // CHUNK))
    empty_get_first = size == 0 and strategy == "get-first"
    assert result.requests == len(proxy.requests) == parts + 1 + empty_get_first


def corrupt_gets(count: int) -> Any:
    done: list[RequestRecord] = []

    def rule(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and len(done) < count:
            done.append(request)
            return Fault(corrupt_at=100)
        return None

    return rule


@pytest.mark.parametrize("size", [5000, 3 * CHUNK])
async def test_corrupted_body_is_refused(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, size: int
) -> None:
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC64NVME")
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = corrupt_gets(1_000)
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.ChecksumError, match="CRC64NVME mismatch") as caught:
            await engine.download(bucket, "k", target, strategy="head-first")
    assert target.read_bytes() == b"old"
    assert temp_files(tmp_path) == []
    # One fresh attempt at the same ETag, no more: HEAD + GETs, then the GETs again.
    parts = -(-size // CHUNK)
    assert caught.value.requests == len(proxy.requests) == 1 + 2 * parts
    etag = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    assert all(r.headers.get("if-match") == etag for r in proxy.requests if r.method == "GET")


async def test_one_fresh_attempt_recovers_from_one_corruption(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32C")
    proxy.rule = corrupt_gets(1)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate="required")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.verified


async def test_corruption_goes_unnoticed_when_validation_is_off(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(5000)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC64NVME")
    proxy.rule = corrupt_gets(1_000)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate="off")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k", strategy="head-first")
    written = (tmp_path / "k").read_bytes()
    assert written != data  # the proxy really corrupts: the checks above can fail
    assert written[100] == data[100] ^ 0xFF
    assert (result.verified, result.checksum) == (False, None)
    assert not any("x-amz-checksum-mode" in r.headers for r in proxy.requests)


async def test_required_on_an_object_without_a_checksum(
    s3_without_checksums: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3_without_checksums.put_object(Bucket=bucket, Key="k", Body=b"no checksum stored")
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate="required")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        for strategy in ("get-first", "head-first"):
            with pytest.raises(asyncdl.ChecksumError, match="no stored checksum"):
                await engine.download(bucket, "k", tmp_path / "k", strategy=strategy)
    assert os.listdir(tmp_path) == []
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k", strategy="head-first")
    assert not result.verified
    # HEAD-first's GET is a whole-object GET that asked for the checksum: none came
    # because the object has none (not "a ranged answer carries none", whose advice,
    # strategy='head-first', would send the reader in a circle).
    assert result.unverified_reason == "the object has no stored checksum"


async def test_small_listed_objects_are_verified_in_one_request(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"p/{i}": payload(100 * i + 1, seed=i) for i in range(10)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="CRC64NVME")
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_prefix(bucket, "p/", tmp_path)]
    assert all(r.verified for r in results), [r.unverified_reason for r in results]
    assert all(r.requests == 1 for r in results)
    gets = [r for r in proxy.requests if "list-type" not in r.path]
    assert len(gets) == 10
    assert all(r.headers.get("x-amz-checksum-mode") == "ENABLED" for r in gets)


@pytest.mark.parametrize("algorithm", ALL)
@pytest.mark.parametrize("size", [CHUNK + 1, 5 * CHUNK + 3])
async def test_default_get_first_verifies_multi_chunk_objects(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, algorithm: str, size: int
) -> None:
    # The default policy, the default strategy: the first answer's headers show more is
    # to come, so one HEAD goes out alongside the fan-out and brings S3's checksum.
    data = payload(size, seed=size)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)
    stored = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")[f"Checksum{algorithm}"]
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert (result.verified, result.checksum) == (True, f"{algorithm}:{stored}")
    gets = [r for r in proxy.requests if r.method == "GET"]
    heads = [r for r in proxy.requests if r.method == "HEAD"]
    assert len(gets) == -(-size // CHUNK)
    assert len(heads) == 1
    assert heads[0].headers.get("if-match") == result.etag
    assert heads[0].headers.get("x-amz-checksum-mode") == "ENABLED"
    assert result.requests == len(proxy.requests)


async def test_default_get_first_object_in_one_answer_adds_no_request(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # The one case the default leaves unverified: the ranged first answer holds the
    # whole object and carries no checksum; nothing is sent just to get one.
    s3.put_object(Bucket=bucket, Key="k", Body=payload(CHUNK), ChecksumAlgorithm="CRC32")
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert result.requests == len(proxy.requests) == 1
    assert not result.verified
    assert "fit in the first" in (result.unverified_reason or "")


async def test_default_corruption_in_flight_is_refused(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(4 * CHUNK + 3)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    target.write_bytes(b"old")
    # Every GET of the third part flips a byte: the fresh attempt fails the same way.
    third = f"bytes={2 * CHUNK}-{3 * CHUNK - 1}"
    proxy.rule = lambda r: Fault(corrupt_at=10) if r.range == third else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.ChecksumError) as caught:
            await engine.download(bucket, "k", target)
    assert caught.value.mismatch
    assert target.read_bytes() == b"old"
    assert temp_files(tmp_path) == []


async def test_default_head_refused_leaves_the_object_unverified(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Some policies allow GET but not HEAD: the default policy then downloads the
    # object all the same and says why it is unverified; "required" fails.
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if r.method == "HEAD" else None
    )
    config = asyncdl.TransferConfig(chunk_size=CHUNK, backoff_base=0.01)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert not result.verified
    assert "the checksum HEAD failed" in (result.unverified_reason or "")
    required = asyncdl.TransferConfig(chunk_size=CHUNK, validate="required")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=required) as engine:
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(bucket, "k", tmp_path / "r")
    assert not (tmp_path / "r").exists()


async def test_default_listed_multi_chunk_objects_are_verified(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    sizes = {"p/small": 10, "p/middle": CHUNK + 5, "p/large": 3 * CHUNK}
    for key, size in sizes.items():
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size), ChecksumAlgorithm="CRC64NVME")
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        results = {r.key: r async for r in engine.download_prefix(bucket, "p/", tmp_path)}
    assert all(r.verified for r in results.values()), results
    heads = sorted(r.path for r in proxy.requests if r.method == "HEAD")
    assert heads == sorted(f"/{bucket}/p/{name}" for name in ("large", "middle"))
    assert [results[key].requests for key in sizes] == [1, 2 + 1, 3 + 1]


async def test_caller_supplied_checksum(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    right = f"CRC64NVME:{expected_value('CRC64NVME', data)}"
    wrong = f"CRC64NVME:{expected_value('CRC64NVME', data + b'x')}"
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k", checksum=right)
        assert (result.verified, result.checksum, result.requests) == (True, right, 3)
        with pytest.raises(asyncdl.ChecksumError):
            await engine.download(bucket, "k", tmp_path / "j", checksum=wrong)
        with pytest.raises(ValueError, match="checksum"):
            await engine.download(bucket, "k", tmp_path / "j", checksum="MD5:xyz")
    assert not (tmp_path / "j").exists()


@pytest.mark.moto_deviation
async def test_composite_checksums_are_reported_unverified(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # A store that serves PartNumber GETs as the whole object (moto before 5.2.6), with
    # moto's HEAD, which drops the -N of a COMPOSITE checksum: asyncdl must neither fail
    # in when_available mode nor treat the value as a full-object checksum.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    parts, body = [], b""
    for number, size in ((1, 5 * 2**20), (2, 1000)):
        chunk = payload(size, seed=number)
        body += chunk
        answer = s3.upload_part(
            Bucket=bucket,
            Key="mp",
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=chunk,
            ChecksumAlgorithm="CRC32",
        )
        parts.append(
            {"PartNumber": number, "ETag": answer["ETag"], "ChecksumCRC32": answer["ChecksumCRC32"]}
        )
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    with serving_whole_objects_for_parts():
        config = asyncdl.TransferConfig(chunk_size=2**20)
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=config) as engine,
        ):
            result = await engine.download(bucket, "mp", tmp_path / "mp", strategy="head-first")
            assert (tmp_path / "mp").read_bytes() == body
            assert not result.verified
            assert "COMPOSITE" in (result.unverified_reason or "")
            assert (result.checksum or "").endswith("-2")
        config = asyncdl.TransferConfig(chunk_size=2**20, validate="required")
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=config) as engine,
        ):
            with pytest.raises(asyncdl.ChecksumError, match="COMPOSITE"):
                await engine.download(bucket, "mp", tmp_path / "mp2", strategy="head-first")
        assert not (tmp_path / "mp2").exists()


async def test_required_bulk_does_not_deadlock_the_budget(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Each GET-first download holds a slot for its first GET while its checksum HEAD
    # needs another: with every slot taken by first GETs, waiting for the HEADs before
    # writing would hang forever.
    objects = {f"k{i}": payload(1000 + i, seed=i) for i in range(40)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="CRC32C")
    proxy.rtt = 0.005
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=2, validate="required")
    items = [(bucket, key, tmp_path / key) for key in objects]
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        async with asyncio.timeout(60):
            results = [r async for r in engine.download_many(items, strategy="get-first")]
    assert all(r.verified for r in results), [str(r.error) for r in results if r.error][:3]
    assert all(r.requests == 2 for r in results)
    assert proxy.max_in_flight <= 2


async def test_required_with_listing_metadata_sends_the_checksum_head(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Listed size and ETag skip discovery; a multi-chunk object's ranged GETs carry no
    # checksum, so "required" must still ask a HEAD for it (and a small one's GET has it).
    sizes = {"p/small": 10, "p/middle": CHUNK + 5, "p/large": 3 * CHUNK}
    for key, size in sizes.items():
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size), ChecksumAlgorithm="CRC32C")
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate="required")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        results = {r.key: r async for r in engine.download_prefix(bucket, "p/", tmp_path)}
    assert all(r.ok and r.verified for r in results.values()), results
    for key, size in sizes.items():
        assert (tmp_path / key.removeprefix("p/")).read_bytes() == payload(size)
        assert (results[key].checksum or "").startswith("CRC32C:")
    heads = [r.path for r in proxy.requests if r.method == "HEAD"]
    assert sorted(heads) == sorted(f"/{bucket}/p/{name}" for name in ("middle", "large"))
    assert all(r.headers.get("if-match") for r in proxy.requests if r.method == "HEAD")
    assert results["p/small"].requests == 1
    assert results["p/middle"].requests == 2 + 1
    assert results["p/large"].requests == 3 + 1


class _CancelledAfterDiscovery:
    """GET-first, but the download's task is cancelled as discovery returns: the
    cancellation lands at the engine's very next await."""

    name = "get-first"

    async def discover(
        self, obj: Any, *, chunk_size: int, size: int | None, etag: str | None
    ) -> Any:
        discovery = await asyncdl.GetFirst().discover(
            obj, chunk_size=chunk_size, size=size, etag=etag
        )
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        return discovery


@pytest.mark.parametrize("ignores_range", [False, True])
@pytest.mark.parametrize("size", [100, 3 * CHUNK])
async def test_cancelled_right_after_discovery_releases_the_first_response(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, size: int, ignores_range: bool
) -> None:
    # validate="required" + GET-first sends a HEAD alongside the first GET; a
    # cancellation while the engine deals with that HEAD must not leak the first answer,
    # whether it is a part, or the whole object with its checksum (a server that
    # ignores Range answers 200; the HEAD is then not needed and is cancelled).
    s3.put_object(Bucket=bucket, Key="k", Body=payload(size), ChecksumAlgorithm="CRC32")
    if ignores_range:
        whole = {"range": None, "x-amz-checksum-mode": "ENABLED"}
        proxy.rule = lambda r: Fault(headers=whole) if r.method == "GET" else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=1, validate="required")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        # With one slot, a leaked response would hold it forever: a hang, not a pass.
        async with asyncio.timeout(20):
            for _ in range(2):
                strategy = _CancelledAfterDiscovery()
                cancelled = asyncio.create_task(
                    engine.download(bucket, "k", tmp_path / "k", strategy=strategy)
                )
                with pytest.raises(asyncio.CancelledError):
                    await cancelled
            result = await engine.download(bucket, "k", tmp_path / "k", strategy="get-first")
    assert result.verified
    assert (tmp_path / "k").read_bytes() == payload(size)
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("size", [100, 3 * CHUNK])
async def test_a_validating_client_is_checked_once_by_asyncdl(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, size: int
) -> None:
    # botocore's default client checks whole-object GETs itself; asyncdl verifies every
    # byte, so its GETs go through the lean path (botocore's handler never sees them,
    # and they carry no amz-sdk-invocation-id): one check, asyncdl's.
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32C")
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with (
        make_client(proxy.url, response_checksum_validation="when_supported") as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        result = await engine.download(bucket, "k", tmp_path / "k")
        assert (result.strategy, result.verified) == ("head-first", True)
        gets = [r for r in proxy.requests if r.method == "GET"]
        assert gets
        assert not any("amz-sdk-invocation-id" in r.headers for r in gets)
        # A byte flipped in flight is asyncdl's mismatch, not botocore's.
        proxy.rule = lambda r: Fault(corrupt_at=10) if r.method == "GET" else None
        with pytest.raises(asyncdl.ChecksumError, match="CRC32C mismatch: S3 says"):
            await engine.download(bucket, "k", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


async def test_a_validating_client_keeps_its_check_when_asyncdl_checks_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(100), ChecksumAlgorithm="CRC32C")
    proxy.rule = lambda r: Fault(corrupt_at=10) if r.method == "GET" else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate="off")
    async with (
        make_client(proxy.url, response_checksum_validation="when_supported") as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        with pytest.raises(asyncdl.ChecksumError, match="botocore's checksum check failed"):
            await engine.download(bucket, "k", tmp_path / "k")
    assert not (tmp_path / "k").exists()


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME", "SHA256"])
async def test_parts_that_start_before_the_head_answers_are_not_read_back(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    algorithm: str,
) -> None:
    # The HEAD answers late: every part has streamed by then. They ran the three CRCs
    # S3 may name, so the one it names is at hand, and no part is read back from the
    # file for its CRC (a SHA is one pass over the file whatever happens).
    data = payload(6 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)
    proxy.rule = lambda r: Fault(delay=0.5) if r.method == "HEAD" else None
    read_back: list[tuple[str, int, int]] = []
    original = TempFile.crc

    async def counting_crc(self: TempFile, name: str, start: int, end: int) -> int:
        read_back.append((name, start, end))
        return await original(self, name, start, end)

    monkeypatch.setattr(TempFile, "crc", counting_crc)
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.verified, result.unverified_reason
    assert read_back == []


async def test_the_fresh_attempt_from_a_server_that_ignores_range_is_one_get(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """The first answer was the whole object (Range ignored); after a mismatch the
    fresh attempt asks for it whole again, not by ranges the server would not serve."""
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    corrupted: list[RequestRecord] = []

    def rule(request: RequestRecord) -> Fault:
        if not corrupted:  # the first answer only
            corrupted.append(request)
            return Fault(headers={"range": None}, corrupt_at=100)
        return Fault(headers={"range": None})

    proxy.rule = rule
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k", checksum=f"CRC32:{crc}")
    assert (tmp_path / "k").read_bytes() == data
    assert (result.verified, result.requests) == (True, 2)
    assert [r.headers.get("range") for r in proxy.requests] == [f"bytes=0-{CHUNK - 1}", None]
