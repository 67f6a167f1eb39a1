"""The ``asyncdl`` command tunes the garbage collector for its run (the library never
does): what it built before the downloads is frozen, out of every collection's walk,
and the youngest generation is collected less often. Both are undone when it ends."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import asyncdl
from asyncdl.cli import cli
from asyncdl.cli.work import GEN0_THRESHOLD
from asyncdl.testing.tcp_proxy import TcpProxy


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def collector_during_downloads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(objects frozen, generation 0's threshold) as each download starts."""
    seen: list[tuple[int, int]] = []
    original = asyncdl.Engine.download

    async def download(self: asyncdl.Engine, *args: Any, **kwargs: Any) -> Any:
        seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(asyncdl.Engine, "download", download)
    return seen


def test_the_command_freezes_what_it_built_before_the_downloads(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    seen = collector_during_downloads(monkeypatch)
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    result = CliRunner().invoke(
        cli, ["cp", "--endpoint-url", proxy.url, f"s3://{bucket}/k", str(tmp_path / "k")]
    )
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "k").read_bytes() == b"data"
    [(frozen_then, gen0_then)] = seen
    # The engine, its client and every module imported: tens of thousands of objects.
    assert frozen_then > frozen + 10_000
    assert gen0_then == GEN0_THRESHOLD
    # Undone on the way out: a process that runs the command in-process (these tests)
    # keeps its own collector.
    assert (gc.get_threshold(), gc.get_freeze_count()) == (threshold, frozen)


def test_a_failed_run_also_gives_the_collector_back(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    result = CliRunner().invoke(
        cli, ["cp", "--endpoint-url", proxy.url, f"s3://{bucket}/missing", str(tmp_path / "k")]
    )
    assert result.exit_code == 1
    assert (gc.get_threshold(), gc.get_freeze_count()) == (threshold, frozen)


async def test_the_library_leaves_the_collector_alone(
    s3: Any, bucket: str, client: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    async with asyncdl.Engine(client) as engine:
        await engine.download(bucket, "k", tmp_path / "k")
        assert (gc.get_threshold(), gc.get_freeze_count()) == (threshold, frozen)
