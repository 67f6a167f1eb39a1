"""``resume=True`` and an object that fits one write (``write_size``) is never journaled
(docs/guides/resume-and-sync.md): it takes a plain temp file, so a download of it that
fails leaves nothing beside its target. One whose first answer was cut before a
failure used to leave a partial file and journal of it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.config import KiB
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import payload


@pytest.mark.parametrize("strategy", ["get-first", "head-first"])
async def test_a_failed_small_download_leaves_nothing(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, strategy: str
) -> None:
    size = 200 * KiB  # one part (chunk_size 8 MiB), gathered whole (write_size 1 MiB)
    s3.put_object(Bucket=bucket, Key="k", Body=payload(size))

    # The first GET is cut with bytes received; every GET after it is refused (not
    # retried): the download fails holding what the cut answer brought.
    proxy.rule = _fail_after(1, first=Fault(cut_after=30 * KiB))
    config = asyncdl.TransferConfig(resume=True, backoff_base=0.001)
    target = tmp_path / "k"
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.DownloadError):
            await engine.download(bucket, "k", target, strategy=strategy)
        assert os.listdir(tmp_path) == []
        # Again, as a listing asks for it (size and ETag given): the target alone.
        proxy.rule = None
        head = s3.head_object(Bucket=bucket, Key="k")
        listed = asyncdl.DownloadRequest(
            bucket, "k", target, size=head["ContentLength"], etag=head["ETag"]
        )
        async for result in engine.download_many([listed]):
            assert result.error is None
    assert os.listdir(tmp_path) == ["k"]


def _fail_after(gets_allowed: int, *, first: Fault | None = None) -> Any:
    """A proxy rule: GETs pass (the first with ``first``'s fault) until
    ``gets_allowed`` went through, then are refused."""
    gets = 0

    def rule(request: RequestRecord) -> Fault | None:
        nonlocal gets
        if request.method != "GET":
            return None
        gets += 1
        if gets > gets_allowed:
            return Fault(status=403, error_code="AccessDenied")
        return first if gets == 1 else None

    return rule


async def _listed(engine: asyncdl.Engine, s3: Any, bucket: str, target: Path) -> Any:
    """The object downloaded as a listing names it (size and ETag given)."""
    head = s3.head_object(Bucket=bucket, Key="k")
    request = asyncdl.DownloadRequest(
        bucket, "k", target, size=head["ContentLength"], etag=head["ETag"]
    )
    (result,) = [result async for result in engine.download_many([request])]
    return result


async def test_a_listed_object_of_several_parts_continues_its_partial(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Under write_size, over chunk_size: written part by part, so journaled, and a
    # listed download of it (cp -r's) looks for what an earlier one left.
    data = payload(300 * KiB)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(
        resume=True, chunk_size=64 * KiB, max_concurrency=1, backoff_base=0.001
    )
    target = tmp_path / "k"
    async with asyncdl.Engine(client, config=config) as engine:
        proxy.rule = _fail_after(2)
        assert not (await _listed(engine, s3, bucket, target)).ok
        proxy.rule = None
        result = await _listed(engine, s3, bucket, target)
    assert result.error is None
    assert result.reused_bytes == 128 * KiB
    assert target.read_bytes() == data
    assert os.listdir(tmp_path) == ["k"]


async def test_a_larger_version_s_partial_goes_when_a_small_one_is_listed(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    config = asyncdl.TransferConfig(
        resume=True, chunk_size=64 * KiB, max_concurrency=1, backoff_base=0.001
    )
    target = tmp_path / "k"
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * 1024 * KiB))
    async with asyncdl.Engine(client, config=config) as engine:
        proxy.rule = _fail_after(3)
        assert not (await _listed(engine, s3, bucket, target)).ok
        assert len(os.listdir(tmp_path)) == 2  # its partial file and journal
        small = payload(200 * KiB)[::-1]
        s3.put_object(Bucket=bucket, Key="k", Body=small)
        proxy.rule = None
        result = await _listed(engine, s3, bucket, target)
    assert result.error is None
    assert result.partial_discarded is not None
    assert "the object changed" in result.partial_discarded
    assert target.read_bytes() == small
    assert os.listdir(tmp_path) == ["k"]
