"""The benchmark's recv-into floor (``parallel-ranges-recv-into`` in benchmarks/peers.py)
against moto's real server: the bytes it writes, the ranges it asks for and their pin, and
the errors it reports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import peers  # found through the path above
from asyncdl.testing.tcp_proxy import TcpProxy
from tests.conftest import payload

_LOOPS = [
    loop for loop in peers.LOOPS if loop == "asyncio" or importlib.util.find_spec(loop) is not None
]
MiB = peers.MiB


def _download(endpoint: str, bucket: str, dest: Path, *, objects: int, loop: str) -> list[str]:
    job = peers.Job(endpoint, bucket, objects, concurrency=3, dest=dest, loop=loop)
    return peers.RUNNERS["parallel-ranges-recv-into"](job, peers.Meter())


@pytest.mark.parametrize("loop", _LOOPS)
def test_the_recv_into_floor_writes_every_byte_of_large_and_small_objects(
    s3: Any, s3_endpoint: str, bucket: str, tmp_path: Path, loop: str
) -> None:
    # Three parts, the last a short one, and an object smaller than one part.
    sizes = [2 * 8 * MiB + 12_345, 1000]
    for index, size in enumerate(sizes):
        s3.put_object(Bucket=bucket, Key=peers.key_name(index), Body=payload(size, index))
    errors = _download(s3_endpoint, bucket, tmp_path, objects=len(sizes), loop=loop)
    assert errors == []
    for index, size in enumerate(sizes):
        assert (tmp_path / peers.file_name(index)).read_bytes() == payload(size, index)


def test_the_recv_into_floor_asks_for_each_part_once_pinned_to_the_first_ones_etag(
    s3: Any, proxy: TcpProxy, bucket: str, tmp_path: Path
) -> None:
    size = 3 * 8 * MiB + 1
    s3.put_object(Bucket=bucket, Key=peers.key_name(0), Body=payload(size))
    etag = s3.head_object(Bucket=bucket, Key=peers.key_name(0))["ETag"]
    assert _download(proxy.url, bucket, tmp_path, objects=1, loop="asyncio") == []
    assert (tmp_path / peers.file_name(0)).read_bytes() == payload(size)
    got = [(r.range, r.headers.get("if-match")) for r in proxy.requests]
    assert got[0] == (f"bytes=0-{8 * MiB - 1}", None)
    starts = range(8 * MiB, size, 8 * MiB)
    expected = [(f"bytes={start}-{min(start + 8 * MiB, size) - 1}", etag) for start in starts]
    assert sorted(got[1:]) == sorted(expected)


@pytest.mark.parametrize("loop", _LOOPS)
def test_the_recv_into_floor_reports_a_missing_object(
    s3_endpoint: str, bucket: str, tmp_path: Path, loop: str
) -> None:
    errors = _download(s3_endpoint, bucket, tmp_path, objects=1, loop=loop)
    assert len(errors) == 1
    assert "404" in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_a_response_head_is_read_whole_and_its_content_range_checked() -> None:
    head = peers._Head(206, {"content-range": "bytes 0-9/100"})
    assert head.content_range() == (0, 9, 100)
    assert peers._Head(200, {}).content_range() is None
    with pytest.raises(ValueError, match="not bytes FIRST-LAST/SIZE"):
        peers._Head(206, {"content-range": "bytes */100"}).content_range()
