"""The benchmark's fast moto: ranges read without the whole object, checksums named as S3 does.

``serving_ranges()`` must change what moto costs, never what it answers: every answer
is compared with plain moto's. How much of the object a GET reads is observed on moto's
own key buffer (the server runs in this process), counting the bytes read from it.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends

from asyncdl.testing.moto_server import (
    serving_checksum_types,
    serving_ranges,
    serving_upload_parts,
)

from ..conftest import payload

MiB = 2**20
SIZE = 8 * MiB + 3
#: moto's (and S3's) smallest upload part; the second part is the rest.
PART = 5 * MiB


class CountingBuffer:
    """moto's key buffer, counting the bytes read out of it."""

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._buffer.read(size)
        self.read_bytes += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buffer, name)


def counting(bucket: str, key: str) -> CountingBuffer:
    """Count what moto reads of ``key`` from now on."""
    stored = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[bucket].keys[key]
    buffer = CountingBuffer(stored._value_buffer)
    stored._value_buffer = buffer
    return buffer


def answer(s3: Any, bucket: str, key: str, **params: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, the headers that say what was sent, and the body of one GetObject."""
    try:
        got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED", **params)
    except s3.exceptions.ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], {}, b""
    headers = got["ResponseMetadata"]["HTTPHeaders"]
    said = {
        name: value
        for name, value in headers.items()
        if name.startswith(("content-range", "content-length", "x-amz-checksum-", "x-amz-mp-"))
    }
    return got["ResponseMetadata"]["HTTPStatusCode"], said, got["Body"].read()


def put_multipart(s3: Any, bucket: str, key: str, body: bytes) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32")
    done = []
    for number, start in enumerate(range(0, len(body), PART), start=1):
        part = s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=body[start : start + PART],
            ChecksumAlgorithm="CRC32",
        )
        done.append(
            {"PartNumber": number, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]}
        )
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": done}
    )


@pytest.fixture
def stored(s3: Any, bucket: str) -> tuple[str, bytes]:
    body = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="big", Body=body, ChecksumAlgorithm="CRC32")
    return bucket, body


@pytest.mark.parametrize(
    ("rng", "start", "end"),
    [
        ("bytes=1000-1999", 1000, 2000),
        ("bytes=-500", SIZE - 500, SIZE),
        (f"bytes={SIZE - 700}-", SIZE - 700, SIZE),
        (f"bytes={SIZE - 10}-{SIZE + 100}", SIZE - 10, SIZE),
    ],
)
def test_a_ranged_get_reads_only_its_bytes(
    s3: Any, stored: tuple[str, bytes], rng: str, start: int, end: int
) -> None:
    bucket, body = stored
    plain = answer(s3, bucket, "big", Range=rng)
    read = counting(bucket, "big")
    with serving_ranges():
        fast = answer(s3, bucket, "big", Range=rng)
    assert fast == plain  # moto's answer: status, Content-Range, no checksum
    assert fast[0] == 206
    assert fast[2] == body[start:end]
    assert read.read_bytes == end - start


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"Range": "bytes=0-"},
        {"Range": f"bytes={SIZE}-"},
        {"Range": "bytes=5-2"},
        {"Range": "bytes=0-1,5-9"},
        {"Range": "bytes=x-y"},
        {"Range": "bytes=0-9", "IfMatch": '"not-the-etag"'},
        {"Range": "bytes=0-9", "IfModifiedSince": datetime(2999, 1, 1, tzinfo=UTC)},
    ],
)
def test_answers_other_than_a_slice_are_moto_s(
    s3: Any, stored: tuple[str, bytes], params: dict[str, Any]
) -> None:
    """Whole reads (with the checksum), unsatisfiable and ignored ranges, failed and
    unmet conditions: as plain moto answers them."""
    bucket, _ = stored
    plain = answer(s3, bucket, "big", **params)
    with serving_ranges():
        assert answer(s3, bucket, "big", **params) == plain


def test_a_part_number_get_reads_only_the_part(s3: Any, bucket: str) -> None:
    """With the benchmark's whole fast server: the part, its own checksum, read alone."""
    body = payload(SIZE, seed=1)
    put_multipart(s3, bucket, "mp", body)
    with serving_upload_parts():
        plain = answer(s3, bucket, "mp", PartNumber=2)
        read = counting(bucket, "mp")
        with serving_ranges(), serving_checksum_types():
            fast = answer(s3, bucket, "mp", PartNumber=2)
    assert fast == plain
    assert fast[1]["x-amz-mp-parts-count"] == "2"
    assert fast[2] == body[PART:]
    assert read.read_bytes == SIZE - PART


def head(s3: Any, bucket: str, key: str, **params: Any) -> dict[str, Any]:
    return dict(s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED", **params))


@pytest.mark.parametrize("serving", [serving_checksum_types, contextlib.nullcontext])
def test_checksums_are_named_as_s3_names_them(s3: Any, bucket: str, serving: Any) -> None:
    """HEAD and a whole GET carry the checksum's type, and a COMPOSITE value its ``-N``;
    a ranged GET carries none. (nullcontext: what plain moto says, the test's premise.)"""
    body = payload(SIZE, seed=2)
    s3.put_object(Bucket=bucket, Key="whole", Body=body, ChecksumAlgorithm="CRC32")
    put_multipart(s3, bucket, "mp", body)
    plain_value = head(s3, bucket, "whole")["ChecksumCRC32"]
    with serving():
        heads = {key: head(s3, bucket, key) for key in ("whole", "mp")}
        gets = {key: answer(s3, bucket, key)[1] for key in ("whole", "mp")}
        ranged = answer(s3, bucket, "mp", Range="bytes=0-99")[1]
    said = {key: (got.get("ChecksumCRC32"), got.get("ChecksumType")) for key, got in heads.items()}
    composite = gets["mp"]["x-amz-checksum-crc32"]
    assert composite.endswith("-2")
    if serving is contextlib.nullcontext:
        assert said == {"whole": (plain_value, None), "mp": (composite[:-2], None)}
        return
    assert said == {"whole": (plain_value, "FULL_OBJECT"), "mp": (composite, "COMPOSITE")}
    assert gets["whole"]["x-amz-checksum-type"] == "FULL_OBJECT"
    assert gets["mp"]["x-amz-checksum-type"] == "COMPOSITE"
    assert not any(name.startswith("x-amz-checksum-") for name in ranged)
