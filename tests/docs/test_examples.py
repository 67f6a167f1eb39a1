"""The examples run as written."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncdl.testing.tcp_proxy import TcpProxy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def test_download_one(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello, world")
    result = await load("download_one").main(bucket, "hello.txt", str(tmp_path / "hello.txt"))
    assert (tmp_path / "hello.txt").read_bytes() == b"hello, world"
    assert (result.strategy, result.requests) == ("head-first", 2)
    out = capsys.readouterr().out
    assert "hello.txt: 12 bytes, 1 request(s), get-first" in out
    assert "as expected: s3://" in out
