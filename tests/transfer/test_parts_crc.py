"""Which CRCs each part of a multi-part download computes: all three S3 may name only
while the checksum HEAD has not answered, the one it names after."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files.writer import TempFile
from asyncdl._transfer import body_into_file, parts
from asyncdl._transfer.verify import Verifier
from asyncdl._wire.checksums import ExpectedChecksum, crc_function, encode_crc, every_crc
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload


def crcs_per_part(monkeypatch: pytest.MonkeyPatch) -> dict[int, set[int]]:
    """Part start -> how many CRC functions its writes ran (3: ``every_crc``)."""
    seen: dict[int, set[int]] = {}
    original = TempFile.write_chunks

    async def recording(
        self: TempFile, offset: int, chunks: Sequence[bytes], crc: Any, previous: Any
    ) -> Any:
        count = 3 if crc is every_crc else 0 if crc is None else 1
        seen.setdefault(offset // CHUNK * CHUNK, set()).add(count)
        return await original(self, offset, chunks, crc, previous)

    # A body's rest written straight from the socket (body_into_file) runs its CRC there.
    original_rest = body_into_file.write_rest

    async def recording_rest(body: Any, fd: int, offset: int, reader: Any, **kw: Any) -> bool:
        taken: bool = await original_rest(body, fd, offset, reader, **kw)
        if taken:
            crc = kw["crc"]
            count = 3 if crc is every_crc else 0 if crc is None else 1
            seen.setdefault(offset // CHUNK * CHUNK, set()).add(count)
        return taken

    monkeypatch.setattr(TempFile, "write_chunks", recording)
    monkeypatch.setattr(parts, "write_rest", recording_rest)
    return seen


def starts_at_or_after(request: RequestRecord, offset: int) -> bool:
    """A ranged GET whose range starts at ``offset`` or later."""
    header = request.range or ""
    return (
        request.method == "GET"
        and header.startswith("bytes=")
        and (int(header[6:].split("-")[0]) >= offset)
    )


async def test_parts_that_start_after_the_head_answered_run_one_crc(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The object's CRC32 is stored but not in the GET's answer: the HEAD sent with the
    # fan-out brings it. The ranged GETs answer later than the HEAD, so every part but
    # the first (open before the HEAD was sent) knows the algorithm before its first
    # byte and needs one CRC, not three.
    data = payload(6 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    proxy.rule = lambda r: Fault(delay=0.3) if starts_at_or_after(r, CHUNK) else None
    seen = crcs_per_part(monkeypatch)
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.verified, result.unverified_reason
    assert sorted(seen) == [n * CHUNK for n in range(7)]
    assert {start: counts for start, counts in seen.items() if start} == {
        n * CHUNK: {1} for n in range(1, 7)
    }


async def test_a_head_that_answers_mid_way_still_verifies_mixed_parts(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parts before 3 CHUNKs are written before the HEAD answers (three CRCs), the later
    # ones after (one): the combiner takes both kinds, and a corrupt byte in a late
    # part is still caught.
    data = payload(6 * CHUNK + 5, seed=3)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32C")

    def rule(request: RequestRecord) -> Fault | None:
        if request.method == "HEAD":
            return Fault(delay=0.5)
        return Fault(delay=1.0) if starts_at_or_after(request, 3 * CHUNK) else None

    proxy.rule = rule
    seen = crcs_per_part(monkeypatch)
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
        assert (tmp_path / "k").read_bytes() == data
        assert result.verified, result.unverified_reason
        assert seen == {
            **{n * CHUNK: {3} for n in range(3)},
            **{n * CHUNK: {1} for n in range(3, 7)},
        }

        def corrupting(request: RequestRecord) -> Fault | None:
            fault = rule(request)
            if fault is not None and starts_at_or_after(request, 5 * CHUNK):
                return Fault(delay=fault.delay, corrupt_at=7)
            return fault

        proxy.rule = corrupting
        with pytest.raises(asyncdl.ChecksumError, match="CRC32C mismatch"):
            await engine.download(bucket, "k", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_the_verifier_combines_three_crc_parts_with_one_crc_parts() -> None:
    data = payload(5000, seed=9)
    crc32c = crc_function("CRC32C")
    verifier = Verifier("when_available", None)
    verifier.add_part(0, 1000, every_crc(data[:1000], 0))  # before the checksum is known
    whole = encode_crc("CRC32C", crc32c(data, 0))
    verifier.adopt(ExpectedChecksum("CRC32C", whole))
    verifier.add_part(1000, 3000, crc32c(data[1000:3000], 0))
    verifier.add_part(3000, 5000, every_crc(data[3000:], 0))  # under way when it answered
    assert verifier.combiner is not None
    assert verifier.combiner.value(5000) == whole
