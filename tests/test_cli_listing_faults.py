"""``asyncdl ls``, ``cp -r``'s filters and dry run, and the listing read ahead of the
downloads, when things go wrong: the reader of stdout leaves, a listing page fails
while downloads run, the filters leave nothing.

Every run talks HTTP to moto's server through the recording proxy, reached only
through ``--endpoint-url``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from asyncdl.testing.tcp_proxy import TcpProxy

from .test_bulk import put_in_backend
from .test_cli import cli_env


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_ls_into_a_closed_pipe_stops_quietly(
    flags: list[str], bucket: str, proxy: TcpProxy
) -> None:
    # `asyncdl ls ... | head -1` once head has gone: the first write fails; the
    # command stops, says nothing (as cp, sync and cat do) and exits 1.
    put_in_backend(bucket, {f"p/{i:04d}": b"" for i in range(3)})
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        running = subprocess.run(
            [sys.executable, "-m", "asyncdl.cli", "ls", "-r", *flags,
             "--endpoint-url", proxy.url, f"s3://{bucket}/p/"],
            stdout=write_end, stderr=subprocess.PIPE, env=cli_env(), timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (running.returncode, running.stderr.decode()) == (1, "")
