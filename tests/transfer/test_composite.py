"""COMPOSITE checksums (``...-N``): checked along upload parts with PartNumber GETs.

moto before 5.2.6 answers a PartNumber GET with the whole object; the tests that
need S3's answer (the part, ``x-amz-mp-parts-count`` and the part's checksum) run with
``serving_upload_parts()``, which gives moto's server exactly that whatever its
version. Under ``serving_whole_objects_for_parts()`` (a store without part GETs) the
engine must notice and report the object unverified.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from awscrt import checksums as crt

import asyncdl
from asyncdl.testing.moto_server import serving_upload_parts, serving_whole_objects_for_parts
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import make_client, payload, temp_files

MiB = 2**20
#: moto's smallest part (S3's too) is 5 MiB; the last part may be smaller.
PART_SIZES = (5 * MiB, 5 * MiB, 1000)
CONFIG = asyncdl.TransferConfig(chunk_size=MiB, backoff_base=0.01)


def part_checksum(algorithm: str, data: bytes) -> bytes:
    """One part's raw checksum, computed here independently of asyncdl."""
    crcs = {"CRC32": (crt.crc32, 4), "CRC32C": (crt.crc32c, 4), "CRC64NVME": (crt.crc64nvme, 8)}
    if algorithm in crcs:
        function, width = crcs[algorithm]
        return int(function(data)).to_bytes(width, "big")
    return hashlib.new(algorithm.lower(), data).digest()


def composite(algorithm: str, parts: list[bytes]) -> str:
    joined = b"".join(part_checksum(algorithm, part) for part in parts)
    value = base64.b64encode(part_checksum(algorithm, joined)).decode()
    return f"{algorithm}:{value}-{len(parts)}"


def put_multipart(s3: Any, bucket: str, key: str, algorithm: str) -> tuple[bytes, list[bytes]]:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm)
    parts, done = [], []
    for number, size in enumerate(PART_SIZES, start=1):
        data = payload(size, seed=number)
        answer = s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=data,
            ChecksumAlgorithm=algorithm,
        )
        parts.append(data)
        done.append(
            {
                "PartNumber": number,
                "ETag": answer["ETag"],
                f"Checksum{algorithm}": answer[f"Checksum{algorithm}"],
            }
        )
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": done}
    )
    return b"".join(parts), parts


def stored_checksum(s3: Any, bucket: str, key: str, algorithm: str) -> str:
    """What S3 says (a full GET carries the ``-N``; moto's HEAD drops it)."""
    answer = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    answer["Body"].read()
    return f"{algorithm}:{answer[f'Checksum{algorithm}']}"


def part_gets(proxy: TcpProxy) -> list[RequestRecord]:
    return [r for r in proxy.requests if r.method == "GET" and "partNumber=" in r.path]


@pytest.fixture
def s3_parts() -> Iterator[None]:
    with serving_upload_parts():
        yield


@pytest.mark.usefixtures("s3_parts")
@pytest.mark.parametrize(
    ("strategy", "validate", "given"),
    [
        ("head-first", "when_available", False),
        ("get-first", "required", False),
        ("get-first", "when_available", True),
        # The defaults: the first answer shows a multipart ETag, so the HEAD sent for
        # the checksum is awaited before the fan-out, and it says COMPOSITE.
        ("get-first", "when_available", False),
    ],
)
@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "SHA1", "SHA256"])
async def test_composite_checksums_are_verified_along_upload_parts(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    algorithm: str,
    strategy: str,
    validate: str,
    given: bool,
) -> None:
    body, parts = put_multipart(s3, bucket, "mp", algorithm)
    stored = stored_checksum(s3, bucket, "mp", algorithm)
    assert stored == composite(algorithm, parts)  # the test's own premise
    config = dataclasses.replace(CONFIG, validate=validate)
    done: list[int] = []
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(
            bucket,
            "mp",
            tmp_path / "mp",
            strategy=strategy,
            checksum=stored if given else None,
            progress=lambda delta, total: done.append(delta),
        )
    assert (tmp_path / "mp").read_bytes() == body
    assert result.verified, result.unverified_reason
    # GET-first's first chunk, fetched again with part 1, is not counted twice.
    assert sum(done) == len(body)
    assert result.checksum == stored
    # One GET per upload part; GET-first's first ranged GET (and, when required, the
    # HEAD sent alongside it) come before them.
    numbered = part_gets(proxy)
    assert sorted(r.path.rsplit("partNumber=", 1)[1][:1] for r in numbered) == ["1", "2", "3"]
    assert all(r.headers.get("if-match") == result.etag for r in numbered)
    before = {"head-first": 1, "get-first": 1 if given else 2}[strategy]
    assert result.requests == len(proxy.requests) == len(PART_SIZES) + before


def corrupt_part(number: int, times: int) -> Any:
    done: list[RequestRecord] = []

    def rule(request: RequestRecord) -> Fault | None:
        if f"partNumber={number}" in request.path and len(done) < times:
            done.append(request)
            return Fault(corrupt_at=100)
        return None

    return rule


@pytest.mark.usefixtures("s3_parts")
@pytest.mark.parametrize("algorithm", ["CRC32C", "SHA256"])
async def test_a_corrupted_part_is_refused(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, algorithm: str
) -> None:
    put_multipart(s3, bucket, "mp", algorithm)
    (tmp_path / "mp").write_bytes(b"old")
    proxy.rule = corrupt_part(2, times=2)  # the first attempt and the fresh one
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=CONFIG) as engine:
        with pytest.raises(asyncdl.ChecksumError, match="upload part 2") as refused:
            await engine.download(bucket, "mp", tmp_path / "mp", strategy="head-first")
    assert refused.value.mismatch
    assert (tmp_path / "mp").read_bytes() == b"old"
    assert temp_files(tmp_path) == []


@pytest.mark.usefixtures("s3_parts")
async def test_one_fresh_attempt_recovers_from_a_corrupted_part(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    body, _ = put_multipart(s3, bucket, "mp", "CRC32")
    proxy.rule = corrupt_part(3, times=1)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=CONFIG) as engine:
        result = await engine.download(bucket, "mp", tmp_path / "mp", strategy="head-first")
    assert result.verified
    assert (tmp_path / "mp").read_bytes() == body
    assert len(part_gets(proxy)) == 2 * len(PART_SIZES)


@pytest.mark.usefixtures("s3_parts")
async def test_corruption_in_a_part_goes_unnoticed_when_validation_is_off(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # The proof that the refusal above is the checksum's doing.
    body, _ = put_multipart(s3, bucket, "mp", "CRC32")
    proxy.rule = lambda request: Fault(corrupt_at=100) if request.method == "GET" else None
    config = dataclasses.replace(CONFIG, validate="off")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "mp", tmp_path / "mp", strategy="head-first")
    assert not result.verified
    assert (tmp_path / "mp").read_bytes() != body
    assert part_gets(proxy) == []  # only a COMPOSITE check needs the parts


@pytest.mark.usefixtures("s3_parts")
async def test_a_part_cut_mid_body_resumes_with_a_range(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    body, _ = put_multipart(s3, bucket, "mp", "SHA1")
    cut: list[RequestRecord] = []

    def rule(request: RequestRecord) -> Fault | None:
        if "partNumber=2" in request.path and not cut:
            cut.append(request)
            return Fault(cut_after=MiB, stall=0.3)
        return None

    proxy.rule = rule
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=CONFIG) as engine:
        result = await engine.download(bucket, "mp", tmp_path / "mp", strategy="head-first")
    assert result.verified, result.unverified_reason
    assert (tmp_path / "mp").read_bytes() == body
    resumed = [r for r in proxy.requests if r.range is not None and r.method == "GET"]
    # Part 2 starts at 5 MiB; the retry asks for what was not written, up to its end.
    assert [r.range for r in resumed] == [f"bytes={6 * MiB}-{10 * MiB - 1}"]


@pytest.mark.usefixtures("s3_parts")
async def test_a_wrong_part_count_is_refused(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_multipart(s3, bucket, "mp", "CRC32")
    stored = stored_checksum(s3, bucket, "mp", "CRC32")
    wrong = stored.replace("-3", "-4")
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=CONFIG) as engine:
        with pytest.raises(asyncdl.ChecksumError, match="3 upload parts"):
            await engine.download(bucket, "mp", tmp_path / "mp", checksum=wrong)
    assert not (tmp_path / "mp").exists()
    assert temp_files(tmp_path) == []


@pytest.mark.moto_deviation
async def test_without_part_gets_the_object_is_reported_unverified(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # A store that answers a PartNumber GET with the whole object (moto before 5.2.6):
    # asyncdl must notice, fetch by ranges, report why it could not check, and not ask
    # again on the same engine.
    with serving_whole_objects_for_parts():
        body, _ = put_multipart(s3, bucket, "mp", "CRC32")
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=CONFIG) as engine,
        ):
            first = await engine.download(bucket, "mp", tmp_path / "a", strategy="head-first")
            second = await engine.download(bucket, "mp", tmp_path / "b", strategy="head-first")
        for result in (first, second):
            assert not result.verified
            assert "PartNumber GET with the whole object" in (result.unverified_reason or "")
        assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == body
        assert len(part_gets(proxy)) == 1
        config = dataclasses.replace(CONFIG, validate="required")
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=config) as engine,
        ):
            # moto's HEAD leaves the type unsaid: the value might still be FULL_OBJECT, so
            # every byte is fetched (and CRC'd) before the verdict; once, as a fresh
            # attempt could not change it.
            proxy.reset_stats()
            with pytest.raises(asyncdl.ChecksumError, match="COMPOSITE") as refused:
                await engine.download(bucket, "mp", tmp_path / "c", strategy="head-first")
            assert not refused.value.mismatch
            assert sum(r.range is not None for r in proxy.requests) == len(body) // MiB + 1
            # A COMPOSITE checksum said as such fails as soon as no part can be asked
            # for, not after fetching bytes nothing could check.
            stored = stored_checksum(s3, bucket, "mp", "CRC32")
            proxy.reset_stats()
            with pytest.raises(asyncdl.ChecksumError, match="COMPOSITE"):
                await engine.download(bucket, "mp", tmp_path / "c", checksum=stored)
        assert [r.method for r in proxy.requests] == ["GET"]
        assert proxy.requests[0].range is not None  # the first GET; no PartNumber GET again
        assert not (tmp_path / "c").exists()
        assert temp_files(tmp_path) == []


@pytest.mark.parametrize("parts", [False, True])
async def test_a_multipart_full_object_crc_is_verified(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, parts: bool
) -> None:
    # A multipart CRC64NVME checksum is FULL_OBJECT, but moto's HEAD leaves the type
    # unsaid: read either way, the combined part CRCs settle it, with or without parts.
    body, _ = put_multipart(s3, bucket, "mp", "CRC64NVME")
    stored = stored_checksum(s3, bucket, "mp", "CRC64NVME")
    expected = base64.b64encode(part_checksum("CRC64NVME", body)).decode()
    assert stored == f"CRC64NVME:{expected}"  # the test's own premise
    with serving_upload_parts() if parts else contextlib.nullcontext():
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=CONFIG) as engine,
        ):
            result = await engine.download(bucket, "mp", tmp_path / "mp", strategy="head-first")
    assert result.verified, result.unverified_reason
    assert result.checksum == stored
    assert (tmp_path / "mp").read_bytes() == body
