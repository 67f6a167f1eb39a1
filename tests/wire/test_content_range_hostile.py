"""A GET answer whose ``Content-Range`` claims an object no file can hold (10**30
bytes, 2**63, more digits than Python reads), or one this disk cannot (1 PB): a
``DownloadError`` that says what the server claimed, never an ``OverflowError`` nor a
disk error that does not say the size it was asked to hold; the target is left as it
was and nothing else is left behind, with ``resume`` or without. Against moto via the
proxy, which rewrites the first GET's ``Content-Range``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files.file_calls import preallocate
from asyncdl._wire.ranges import parse_content_range
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client

BODY = b"hello world"


@pytest.mark.parametrize(
    "total", [str(10**30), str(2**63), "9" * 5000], ids=["1e30", "2**63", "long"]
)
def test_a_total_no_file_can_hold_is_refused_by_name(total: str) -> None:
    value = f"bytes 0-10/{total}"
    with pytest.raises(ValueError, match="more than any file can hold") as raised:
        parse_content_range(value)
    message = str(raised.value)
    assert value[:40] in message
    assert "digits" not in message  # not Python's "Exceeds the limit (4300 digits)"


def test_the_largest_total_a_file_can_hold_is_taken() -> None:
    largest = 2**63 - 1  # an off_t's
    parsed = parse_content_range(f"bytes 0-10/{largest}")
    assert (parsed.start, parsed.end, parsed.total) == (0, 11, largest)


def claiming(total: int) -> Any:
    """A proxy rule: the first GET's answer says the object is ``total`` bytes."""
    first = [True]

    def rule(request: RequestRecord) -> Fault | None:
        if request.method != "GET" or not first[0]:
            return None
        first[0] = False
        return Fault(response_headers={"content-range": f"bytes 0-{len(BODY) - 1}/{total}"})

    return rule


async def download(proxy: TcpProxy, bucket: str, target: Path, resume: bool) -> Exception:
    config = asyncdl.TransferConfig(chunk_size=CHUNK, resume=resume, backoff_base=0.01)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download(bucket, "k", target)
    return raised.value


@pytest.mark.parametrize("resume", [False, True], ids=["temp", "resume"])
@pytest.mark.parametrize("total", [10**30, 2**63])
async def test_a_get_claiming_a_total_no_file_can_hold_fails_saying_so(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, resume: bool, total: int
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=BODY)
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = claiming(total)
    error = await download(proxy, bucket, target, resume)
    assert f"bytes 0-10/{total}" in str(error)
    assert "more than any file can hold" in str(error)
    assert "Overflow" not in str(error)
    assert os.listdir(tmp_path) == ["k"]
    assert target.read_bytes() == b"old"


@pytest.mark.parametrize("resume", [False, True], ids=["temp", "resume"])
async def test_a_get_claiming_more_than_the_disk_takes_names_the_size(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, resume: bool
) -> None:
    # 1 PB: more than this disk has free, yet an object some stores hold. Refused
    # before the file system is asked for it (see tests/files/test_preallocate_room.py).
    total = 10**15
    s3.put_object(Bucket=bucket, Key="k", Body=BODY)
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = claiming(total)
    error = await download(proxy, bucket, target, resume)
    assert os.strerror(errno.ENOSPC) in str(error)
    assert f"{total} bytes" in str(error)
    assert "bytes free" in str(error)
    assert os.listdir(tmp_path) == ["k"]
    assert target.read_bytes() == b"old"


async def test_a_size_beyond_any_file_given_to_preallocate_is_an_os_error(
    tmp_path: Path,
) -> None:
    # Whatever told the size (a caller, a HEAD), posix_fallocate's OverflowError is
    # never what a download ends with.
    with (
        (tmp_path / "f").open("wb") as file,
        pytest.raises(OSError, match=f"{10**30} bytes") as raised,
    ):
        preallocate(file.fileno(), 10**30)
    assert raised.value.errno == errno.EFBIG
