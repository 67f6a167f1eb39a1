"""The temp-file writer on its own: no server."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from pathlib import Path

import pytest

from asyncdl.writer import TempFile, is_temp_file


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


async def settle() -> None:
    """Let executor calls that outlived a cancelled task finish."""
    for _ in range(100):
        await asyncio.sleep(0.01)


async def test_deferred_small_file_is_published_in_one_go(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 5)
    await temp.write(0, b"hello")
    assert listing(tmp_path) == []  # nothing on disk until commit
    await temp.commit()
    assert listing(tmp_path) == ["t"]
    assert (tmp_path / "t").read_bytes() == b"hello"


async def test_deferred_file_opens_on_a_partial_write(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 10)
    await temp.write(0, b"01234")
    assert temp.opened
    assert [n for n in listing(tmp_path) if is_temp_file(n)]
    await temp.write(5, b"56789")
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"0123456789"
    assert listing(tmp_path) == ["t"]


async def test_parts_in_any_order(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 9)
    await temp.open()
    await asyncio.gather(temp.write(6, b"ghi"), temp.write(0, b"abc"), temp.write(3, b"def"))
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"abcdefghi"


@pytest.mark.parametrize("algorithm", ["SHA1", "SHA256"])
async def test_digest(tmp_path: Path, algorithm: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    expected = base64.b64encode(hashlib.new(algorithm.lower(), data).digest()).decode()
    opened = TempFile(tmp_path / "a", len(data))
    await opened.open()
    await opened.write(0, data)
    deferred = TempFile(tmp_path / "b", len(data))
    await deferred.write(0, data)
    assert await opened.digest(algorithm) == await deferred.digest(algorithm) == expected
    opened.discard()
    deferred.discard()
    assert listing(tmp_path) == []


async def test_discard_during_open_leaves_nothing(tmp_path: Path) -> None:
    for _ in range(50):
        temp = TempFile(tmp_path / "t", 1024 * 1024)
        task = asyncio.create_task(temp.open())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        temp.discard()
    await settle()
    assert listing(tmp_path) == []


async def test_discard_during_writes_leaves_nothing(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 64 * 1024 * 1024)
    await temp.open()
    writes = [asyncio.create_task(temp.write(i * 2**20, os.urandom(2**20))) for i in range(64)]
    await asyncio.sleep(0.005)
    for write in writes:
        write.cancel()
    temp.discard()
    await asyncio.gather(*writes, return_exceptions=True)
    await settle()
    assert listing(tmp_path) == []


async def test_existing_target_untouched_until_commit(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.write_bytes(b"old")
    temp = TempFile(target, 3)
    await temp.open()
    await temp.write(0, b"new")
    assert target.read_bytes() == b"old"
    temp.discard()
    assert target.read_bytes() == b"old"
    assert listing(tmp_path) == ["t"]


async def test_write_crc_matches_the_bytes(tmp_path: Path) -> None:
    from awscrt.checksums import crc32c  # noqa: PLC0415 - only this test needs it

    data = os.urandom(3 * 1024 * 1024)
    deferred = TempFile(tmp_path / "small", len(data))
    assert await deferred.write_crc(0, data, crc32c, 0) == crc32c(data)
    opened = TempFile(tmp_path / "big", len(data))
    await opened.open()
    crc = 0
    for offset in range(0, len(data), 1024 * 1024):
        crc = await opened.write_crc(offset, data[offset : offset + 1024 * 1024], crc32c, crc)
    assert crc == crc32c(data)
    await opened.commit()
    await deferred.commit()
    assert (tmp_path / "big").read_bytes() == (tmp_path / "small").read_bytes() == data
