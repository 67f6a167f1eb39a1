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
    size = 200 * KiB  # under write_size (1 MiB), over a chunk: ranges are cut too
    s3.put_object(Bucket=bucket, Key="k", Body=payload(size))

    gets = 0

    def cut_then_refuse(request: RequestRecord) -> Fault | None:
        # The first GET is cut with bytes received; every GET after it is refused (not
        # retried): the download fails holding what the cut answer brought.
        nonlocal gets
        if request.method != "GET":
            return None
        gets += 1
        if gets == 1:
            return Fault(cut_after=30 * KiB)
        return Fault(status=403, error_code="AccessDenied")

    proxy.rule = cut_then_refuse
    config = asyncdl.TransferConfig(resume=True, chunk_size=64 * KiB, backoff_base=0.001)
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
