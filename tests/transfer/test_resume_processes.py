"""Resuming across processes: ``asyncdl cp`` killed (SIGKILL) mid-download and run
again, two at once on one target, and ``asyncdl clean``."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import asyncdl
from asyncdl._files import partial_paths
from asyncdl.cli import cli
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, make_client, payload
from ..spawn import spawned
from .test_resume import interrupted, leftovers, ranged, resumable

BIG = 48 * CHUNK + 7


def cp(proxy: TcpProxy, *args: str) -> Any:
    """``asyncdl cp`` as a process of its own (see ``spawned``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    return spawned(
        [
            sys.executable,
            "-m",
            "asyncdl.cli",
            "cp",
            "--json",
            "--endpoint-url",
            proxy.url,
            "--chunk-size",
            "64KiB",
            "--concurrency",
            "2",
            *args,
        ],
        env={**env, **FAKE_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def recorded(directory: Path) -> int:
    """Bytes the journals under ``directory`` say are on disk."""
    total = 0
    for journal in directory.rglob(f"*{partial_paths.JOURNAL_SUFFIX}"):
        found, _ = partial_paths.peek(journal)
        if found is not None:
            total += sum(end - start for start, end, _ in found.ranges)
    return total


def kill_half_way(running: subprocess.Popen[bytes], directory: Path, size: int) -> None:
    deadline = time.monotonic() + 60
    while recorded(directory) < size // 3:
        assert running.poll() is None, running.communicate()
        assert time.monotonic() < deadline, "the download never got a third of the way"
        time.sleep(0.01)
    running.kill()
    running.wait(timeout=60)


def test_killed_cp_runs_again_and_fetches_only_what_is_missing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(BIG)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "big.bin"
    proxy.bandwidth = 256 * 1024  # a slow link: the kill lands half-way
    with cp(proxy, f"s3://{bucket}/big.bin", str(target)) as running:
        kill_half_way(running, tmp_path, BIG)
    assert not target.exists()
    assert leftovers(tmp_path) == [".big.bin.asyncdl-journal", ".big.bin.asyncdl-partial"]
    kept = recorded(tmp_path)
    assert 0 < kept < BIG
    proxy.bandwidth = None
    proxy.reset_stats()
    with cp(proxy, f"s3://{bucket}/big.bin", str(target)) as running:
        out, err = running.communicate(timeout=60)
    assert running.returncode == 0, err.decode()
    assert target.read_bytes() == data
    line = json.loads(out)
    assert line["verified"]
    assert line["reused_bytes"] == kept
    assert ranged(proxy.requests) <= BIG - kept + CHUNK
    assert leftovers(tmp_path) == []


def test_killed_cp_recursive_resumes_each_large_object(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"p/big-{n}": payload(BIG, seed=n) for n in range(2)}
    objects.update({f"p/tiny-{n}": payload(10 + n) for n in range(4)})
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    proxy.bandwidth = 256 * 1024
    with cp(proxy, "-r", f"s3://{bucket}/p/", str(tmp_path)) as running:
        kill_half_way(running, tmp_path, 2 * BIG)
    kept = recorded(tmp_path)
    proxy.bandwidth = None

    async def again() -> list[asyncdl.DownloadResult]:
        config = resumable(asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4))
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=config) as engine,
        ):
            return [r async for r in engine.download_prefix(bucket, "p/", tmp_path)]

    results = asyncio.run(again())
    assert all(r.ok for r in results)
    for key, body in objects.items():
        assert (tmp_path / key.removeprefix("p/")).read_bytes() == body
    assert sum(r.reused_bytes for r in results) == kept > 0
    assert all(r.reused_bytes == 0 for r in results if "tiny" in r.key)
    assert leftovers(tmp_path) == []


def test_two_processes_on_one_target_one_wins_the_other_fails_clearly(
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    data = payload(BIG)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "k"
    asyncio.run(_interrupt(s3, proxy, bucket, target, config))
    proxy.bandwidth = 512 * 1024  # both are still running when the other starts
    with (
        cp(proxy, f"s3://{bucket}/k", str(target)) as one,
        cp(proxy, f"s3://{bucket}/k", str(target)) as two,
    ):
        outcomes = [(p.communicate(timeout=60), p.returncode) for p in (one, two)]
    assert sorted(code for _, code in outcomes) == [0, 1]
    (_, err), _ = next(outcome for outcome in outcomes if outcome[1] == 1)
    assert "another download is writing" in err.decode()
    assert target.read_bytes() == data
    assert leftovers(tmp_path) == []


async def _interrupt(
    s3: Any,
    proxy: TcpProxy,
    bucket: str,
    target: Path,
    config: asyncdl.TransferConfig,
    key: str = "k",
) -> None:
    async with make_client(proxy.url) as client:
        await interrupted(client, resumable(config), proxy, bucket, target, key)


def test_clean_removes_old_partials_but_not_busy_ones_or_other_files(
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(BIG))
    sub = tmp_path / "sub"
    sub.mkdir()
    for target in (tmp_path / "old", sub / "held"):
        asyncio.run(_interrupt(s3, proxy, bucket, target, config))
    stale = tmp_path / ".gone.0123abcd.asyncdl-tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    others = ["data.bin", ".hidden", "x.asyncdl-partial", ".y.asyncdl-partial.bak"]
    for name in others:
        (tmp_path / name).write_bytes(b"mine")
    # A running download holds its journal's lock: so does this test, for "held".
    _, held = partial_paths.paths_for(sub / "held")
    holder = os.open(held, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        everything = sorted(p.name for p in tmp_path.rglob("*"))
        dry = CliRunner().invoke(cli, ["clean", "--dry-run", str(tmp_path)])
        assert dry.exit_code == 0, dry.output
        assert sorted(p.name for p in tmp_path.rglob("*")) == everything
        assert "would remove" in dry.stdout
        assert "s3://" in dry.stdout
        young = CliRunner().invoke(cli, ["clean", "--older-than", "2h", str(tmp_path)])
        assert young.exit_code == 0, young.output
        assert sorted(p.name for p in tmp_path.rglob("*")) == everything
        done = CliRunner().invoke(cli, ["clean", str(tmp_path)])
        assert done.exit_code == 0, done.output
        assert "busy (left alone)" in done.stdout
    finally:
        os.close(holder)
    left = sorted(p.name for p in tmp_path.rglob("*"))
    assert left == sorted([*others, "sub", ".held.asyncdl-journal", ".held.asyncdl-partial"])


def copy(proxy: TcpProxy, *args: str) -> Any:
    """``asyncdl cp`` in-process."""
    return CliRunner().invoke(
        cli, ["cp", "--endpoint-url", proxy.url, "--chunk-size", "64KiB", *args]
    )


def test_cp_says_what_it_reused_and_what_it_discarded(
    config: asyncdl.TransferConfig, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(BIG)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "k"
    asyncio.run(_interrupt(s3, proxy, bucket, target, config))
    kept = recorded(tmp_path)
    resumed = copy(proxy, f"s3://{bucket}/k", str(target))
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout == (
        f"download: s3://{bucket}/k to {target} "
        f"(resumed: {kept / 2**20:.1f} MiB were already here)\n"
    )
    assert target.read_bytes() == data

    target.unlink()
    asyncio.run(_interrupt(s3, proxy, bucket, target, config))
    new = payload(BIG, seed=3)
    s3.put_object(Bucket=bucket, Key="k", Body=new)
    changed = copy(proxy, "--json", f"s3://{bucket}/k", str(target))
    assert changed.exit_code == 0, changed.output
    line = json.loads(changed.stdout)
    assert line["reused_bytes"] == 0
    assert "the object changed" in line["partial_discarded"]
    assert target.read_bytes() == new

    target.unlink()
    asyncio.run(_interrupt(s3, proxy, bucket, target, config))
    proxy.reset_stats()
    over = copy(proxy, "--no-resume", f"s3://{bucket}/k", str(target))
    assert over.exit_code == 0, over.output
    assert "discarded an earlier copy's partial file" in over.stderr
    assert ranged(proxy.requests) == BIG
    assert target.read_bytes() == new
    assert leftovers(tmp_path) == []


def test_cp_recursive_no_resume_discards_each_partial(
    config: asyncdl.TransferConfig, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(BIG)
    s3.put_object(Bucket=bucket, Key="p/k", Body=data)
    asyncio.run(_interrupt(s3, proxy, bucket, tmp_path / "k", config, "p/k"))
    assert leftovers(tmp_path) == [".k.asyncdl-journal", ".k.asyncdl-partial"]
    proxy.reset_stats()
    over = copy(proxy, "-r", "--no-resume", f"s3://{bucket}/p/", str(tmp_path))
    assert over.exit_code == 0, over.output
    assert (tmp_path / "k").read_bytes() == data
    assert ranged(proxy.requests) == BIG  # every byte again
    assert leftovers(tmp_path) == []
