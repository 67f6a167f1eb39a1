"""download_many and download_prefix against moto, through the recording proxy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.bulk import relative_path
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from .conftest import CHUNK, gone_within_a_second, payload, temp_files


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def put_many(s3: Any, bucket: str, objects: dict[str, bytes]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()
            )
        )


async def test_download_many_reports_every_item_once(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"obj/{i:05d}": payload(i % 700, seed=i) for i in range(2000)}
    put_many(s3, bucket, objects)
    keys = [*objects, *(f"missing/{i}" for i in range(100))]
    items = [(bucket, key, tmp_path / key.replace("/", "_")) for key in keys]
    # Mix the failures in among the successes.
    items = items[::2] + items[1::2]

    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=32)
    async with asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_many(items, strategy="get-first")]

    assert sorted(r.key for r in results) == sorted(keys)
    failures = {r.key: r.error for r in results if not r.ok}
    assert set(failures) == {f"missing/{i}" for i in range(100)}
    assert all(isinstance(e, asyncdl.ObjectNotFoundError) for e in failures.values())
    assert all(r.requests == 1 for r in results)
    for result in results:
        if result.ok:
            assert result.path.read_bytes() == objects[result.key]
            assert result.size == len(objects[result.key])
    assert not any(name.startswith("missing") for name in os.listdir(tmp_path))
    assert temp_files(tmp_path) == []
    assert len(proxy.requests) == len(keys)

    # The same 2000 objects by prefix: two listing pages, streamed into the downloads.
    proxy.reset_stats()
    async with asyncdl.Engine(client, config=config) as engine:
        listed = [r async for r in engine.download_prefix(bucket, "obj", tmp_path / "by-prefix")]
    assert sorted(r.key for r in listed) == sorted(objects)
    assert all(r.ok and r.path.read_bytes() == objects[r.key] for r in listed)
    assert len([r for r in proxy.requests if "list-type=2" in r.path]) == 2
    assert len(proxy.requests) == 2000 + 2


async def test_download_many_accepts_requests_and_async_iterables(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"k{i}": payload(100 + i) for i in range(5)}
    put_many(s3, bucket, objects)
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]

    async def requests() -> Any:
        for entry in listed:
            yield asyncdl.DownloadRequest(
                bucket,
                entry["Key"],
                tmp_path / entry["Key"],
                size=entry["Size"],
                etag=entry["ETag"],
            )

    results = [r async for r in engine.download_many(requests())]
    assert sorted(r.key for r in results) == sorted(objects)
    assert all(r.ok and r.path.read_bytes() == objects[r.key] for r in results)
    # Listing metadata: no discovery, one pinned plain GET each.
    assert len(proxy.requests) == 5
    assert all("if-match" in r.headers and r.range is None for r in proxy.requests)


async def test_download_many_refuses_malformed_items(engine: asyncdl.Engine) -> None:
    with pytest.raises(TypeError, match="bucket, key, path"):
        async for _ in engine.download_many([("only", "two")]):  # type: ignore[list-item]
            pass


async def test_concurrency_budget_is_never_exceeded(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_many(s3, bucket, {f"k{i}": b"x" * 10 for i in range(150)})
    put_many(s3, bucket, {f"big{i}": payload(5 * CHUNK) for i in range(3)})
    proxy.rtt = 0.01
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=6)
    items = [(bucket, f"k{i}", tmp_path / f"k{i}") for i in range(150)]
    items += [(bucket, f"big{i}", tmp_path / f"big{i}") for i in range(3)]
    async with asyncdl.Engine(client, config=config) as engine:

        async def bulk() -> list[asyncdl.DownloadResult]:
            return [r async for r in engine.download_many(items)]

        # A second, concurrent use of the engine shares the same budget.
        results, single = await asyncio.gather(
            bulk(), engine.download(bucket, "big0", tmp_path / "single")
        )
    assert all(r.ok for r in results)
    assert single.size == 5 * CHUNK
    assert len(proxy.requests) == 150 + 3 * 5 + 5
    assert 2 <= proxy.max_in_flight <= 6


async def test_breaking_out_cancels_and_cleans_up(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_many(s3, bucket, {"small": b"x", **{f"big{i}": payload(8 * CHUNK) for i in range(3)}})
    proxy.rtt = 0.1
    # The small object arrives last-but-not-least: by then the big ones are mid-way.
    proxy.rule = lambda r: Fault(delay=0.4) if r.path.startswith(f"/{bucket}/small") else None
    items = [(bucket, f"big{i}", tmp_path / f"big{i}") for i in range(3)]
    items.append((bucket, "small", tmp_path / "small"))
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4)
    async with asyncdl.Engine(client, config=config) as engine:
        async with contextlib.aclosing(engine.download_many(items)) as results:
            async for result in results:
                assert result.key == "small"
                assert len(temp_files(tmp_path)) == 3  # the big ones are in flight
                break
        await gone_within_a_second(tmp_path)
        assert os.listdir(tmp_path) == ["small"]

        # Without aclosing, the iterator is finalized when dropped.
        async for _ in engine.download_many(items):
            assert len(temp_files(tmp_path)) == 3
            break
        gc.collect()
        for _ in range(200):  # bounded: the finalizer's aclose runs on the loop
            if not temp_files(tmp_path):
                break
            await asyncio.sleep(0.01)
        assert temp_files(tmp_path) == []
        assert os.listdir(tmp_path) == ["small"]


async def test_items_are_pulled_lazily(engine: asyncdl.Engine, tmp_path: Path) -> None:
    limit = engine.config.max_concurrency
    pulled = 0

    def items() -> Iterator[tuple[str, str, Path]]:
        nonlocal pulled
        for i in range(100_000):
            pulled += 1
            # A missing directory: each item fails before any request or file.
            yield ("bucket", f"k{i}", tmp_path / "no-such-dir" / str(i))

    yielded = 0
    baseline = len(asyncio.all_tasks())
    most_tasks = 0
    async for result in engine.download_many(items()):
        yielded += 1
        assert isinstance(result.error, asyncdl.InvalidRequestError)
        assert pulled - yielded <= limit
        most_tasks = max(most_tasks, len(asyncio.all_tasks()) - baseline)
    assert yielded == pulled == 100_000
    assert most_tasks <= limit
    assert os.listdir(tmp_path) == []


async def test_download_prefix(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    good = {
        "pre/a.txt": b"a",
        "pre/sub/b.txt": b"bb",
        "pre/sub/deeper/c.bin": payload(CHUNK + 5),
        "pre/empty": b"",
    }
    hostile = ["pre/../x", "pre//abs", "pre/a//b", "pre/./c"]
    put_many(
        s3, bucket, {**good, **dict.fromkeys(hostile, b"evil"), "pre/sub/": b"", "other/z": b"z"}
    )
    dest = tmp_path / "dest"

    results = [r async for r in engine.download_prefix(bucket, "pre/", dest)]

    by_key = {r.key: r for r in results}
    assert set(by_key) == {*good, *hostile}  # folder marker skipped, other prefix untouched
    for key, data in good.items():
        assert by_key[key].ok
        assert (dest / key.removeprefix("pre/")).read_bytes() == data
    for key in hostile:
        assert isinstance(by_key[key].error, asyncdl.InvalidRequestError)
        assert "refusing" in str(by_key[key].error)
    assert files_under(tmp_path) == sorted(f"dest/{k.removeprefix('pre/')}" for k in good)
    # One listing page, then one pinned GET per small object (two for the chunk+5 one).
    gets = [r for r in proxy.requests if r.method == "GET" and "list-type=2" not in r.path]
    assert len(gets) == 5
    assert all("if-match" in r.headers for r in gets)
    assert not [r for r in proxy.requests if r.method == "HEAD"]


@pytest.mark.parametrize(
    ("key", "prefix", "expected"),
    [
        ("pre/a", "pre/", "a"),
        ("pre/a/b", "pre/", "a/b"),
        ("pre/a", "pre", "a"),
        ("prefix-a", "pre", "fix-a"),
        ("a/b", "", "a/b"),
        ("..a/b..", "", "..a/b.."),
    ],
)
def test_relative_path(key: str, prefix: str, expected: str) -> None:
    assert str(relative_path(key, prefix)) == expected


@pytest.mark.parametrize(
    ("key", "prefix"),
    [
        ("pre/../x", "pre/"),
        ("pre//abs", "pre/"),
        ("/abs", ""),
        ("pre/a//b", "pre/"),
        ("pre/./c", "pre/"),
        ("pre/", "pre/"),
        ("pre/a/..", "pre/"),
        ("pre/a\\..\\b", "pre/"),
        ("pre/x/", "pre/"),
    ],
)
def test_relative_path_refuses_escapes(key: str, prefix: str) -> None:
    with pytest.raises(ValueError, match=r"refusing|names no file"):
        relative_path(key, prefix)


async def test_closing_download_prefix_cancels_at_once(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_many(s3, bucket, {"p/a-small": b"x", **{f"p/big{i}": payload(4 * CHUNK) for i in range(3)}})
    # Every ranged part is held 10 s by the proxy: the big downloads sit in flight,
    # their temp files open, when the reader leaves after the small one.
    proxy.rule = lambda r: Fault(delay=10) if r.range else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=8)
    async with asyncdl.Engine(client, config=config) as engine:
        async with asyncio.timeout(5):
            async with contextlib.aclosing(engine.download_prefix(bucket, "p/", tmp_path)) as it:
                async for result in it:
                    assert result.key == "p/a-small"
                    assert len(temp_files(tmp_path)) == 3
                    break
        assert temp_files(tmp_path) == []  # at once, not when the collector runs
    assert os.listdir(tmp_path) == ["a-small"]
