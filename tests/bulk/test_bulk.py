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
from xml.sax.saxutils import escape

import pytest
from moto.s3.models import s3_backends

import asyncdl
from asyncdl._bulk.bulk import relative_path
from asyncdl.cli.output import result_json
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, gone_within_a_second, payload, temp_files


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def put_in_backend(bucket: str, objects: dict[str, bytes]) -> None:
    """Put objects straight into moto's in-process backend (the server's): many small
    objects in a blink, where PUTs over HTTP take seconds."""
    backend = s3_backends["123456789012"]["global"]  # moto's default account
    for key, body in objects.items():
        backend.put_object(bucket, key, body)


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
    # Past one listing page (1000 keys), with empty objects among them; seeded straight
    # into moto's backend, as the downloads under test are what goes over HTTP.
    objects = {f"obj/{i:05d}": payload(i % 700, seed=i) for i in range(1100)}
    put_in_backend(bucket, objects)
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
    # One GET an object; an empty one's 416 is followed by a plain GET for its ETag.
    empty = [key for key, data in objects.items() if not data]
    assert all(r.requests == 1 + (r.key in empty) for r in results)
    for result in results:
        if result.ok:
            assert result.path.read_bytes() == objects[result.key]
            assert result.size == len(objects[result.key])
    assert not any(name.startswith("missing") for name in os.listdir(tmp_path))
    assert temp_files(tmp_path) == []
    assert len(proxy.requests) == len(keys) + len(empty)

    # The same objects by prefix: two listing pages, streamed into the downloads.
    proxy.reset_stats()
    async with asyncdl.Engine(client, config=config) as engine:
        listed = [r async for r in engine.download_prefix(bucket, "obj", tmp_path / "by-prefix")]
    assert sorted(r.key for r in listed) == sorted(objects)
    assert all(r.ok and r.path.read_bytes() == objects[r.key] for r in listed)
    assert len([r for r in proxy.requests if "list-type=2" in r.path]) == 2
    assert len(proxy.requests) == len(objects) + 2


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


async def test_malformed_items_are_failed_results(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="good", Body=b"ok")
    malformed: list[Any] = [
        ("only", "two"),
        None,
        f"s3://{bucket}/good",
        (bucket, "good", tmp_path / "four", "extra"),
        (bucket, 42, tmp_path / "n"),
        (bucket, None, tmp_path / "n"),
        (None, "good", tmp_path / "n"),
        (bucket, "good", 3.5),
        (bucket, "good", None),
        asyncdl.DownloadRequest(bucket, 7, tmp_path / "n"),  # type: ignore[arg-type]
    ]
    items = [*malformed[:5], (bucket, "good", tmp_path / "good"), *malformed[5:]]

    results = [r async for r in engine.download_many(items)]

    assert len(results) == len(items)
    assert [r.key for r in results if r.ok] == ["good"]
    assert (tmp_path / "good").read_bytes() == b"ok"
    refused = [r for r in results if not r.ok]
    assert len(refused) == len(malformed)
    for result in refused:
        assert isinstance(result.error, asyncdl.InvalidRequestError)
        assert isinstance(result.bucket, str)
        assert isinstance(result.key, str)
        assert (result.size, result.requests) == (None, 0)
    assert "a (bucket, key, path) tuple or a DownloadRequest" in str(refused[0].error)
    assert len(proxy.requests) == 1  # nothing sent for the malformed ones
    assert os.listdir(tmp_path) == ["good"]


@pytest.mark.parametrize(
    "items",
    [
        None,
        7,
        "abc",
        b"abc",
        memoryview(b"abc"),
        ("bkt", "key", "path"),
        asyncdl.DownloadRequest("b", "k", "p"),
    ],
    ids=["none", "int", "str", "bytes", "memoryview", "one-tuple", "one-request"],
)
async def test_items_that_are_no_collection_of_requests_are_refused_whole(
    engine: asyncdl.Engine, proxy: TcpProxy, tmp_path: Path, items: Any
) -> None:
    # One request (or a string) where a collection of them belongs would otherwise be
    # taken apart into a failed result per character or field, or a bare TypeError.
    with pytest.raises(asyncdl.InvalidRequestError, match="download_many takes an iterable"):
        async for _ in engine.download_many(items):
            pass
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []


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
    # One GET per small object; five per big one, and the HEAD that brings its checksum.
    assert len(proxy.requests) == 150 + 3 * (5 + 1) + (5 + 1)
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
        # Many times the concurrency: an engine that drained the iterable first shows
        # at the first result.
        for i in range(10_000):
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
    assert yielded == pulled == 10_000
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
    # One listing page, then one pinned GET per small object (two for the chunk+5 one,
    # whose checksum a pinned HEAD brings alongside: ranged GETs carry none).
    gets = [r for r in proxy.requests if r.method == "GET" and "list-type=2" not in r.path]
    assert len(gets) == 5
    assert all("if-match" in r.headers for r in gets)
    heads = [r for r in proxy.requests if r.method == "HEAD"]
    assert [r.path for r in heads] == [f"/{bucket}/pre/sub/deeper/c.bin"]
    assert "if-match" in heads[0].headers


@pytest.mark.parametrize(
    ("key", "prefix", "expected"),
    [
        ("pre/a", "pre/", "a"),
        ("pre/a/b", "pre/", "a/b"),
        ("pre/a", "pre", "a"),
        ("pre/a/b", "pre", "a/b"),
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
        # A prefix without its "/" is the folder: these keys are not in it.
        ("prefix-a", "pre"),
        ("pre", "pre"),
    ],
)
def test_relative_path_refuses_escapes(key: str, prefix: str) -> None:
    with pytest.raises(ValueError, match=r"refusing|names no file|not in the folder"):
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


async def test_a_prefix_without_its_slash_is_the_folder(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Without the folder meaning, "logsa" and "logs/a" would both land on dest/a,
    # and "logs2/a" on dest/2/a, each reported a success.
    inside = {"logs/a": b"in-a", "logs/sub/b": b"in-b"}
    put_many(s3, bucket, {**inside, "logsa": b"out", "logs2/a": b"out2", "logs": b"file"})
    dest = tmp_path / "dest"

    results = [r async for r in engine.download_prefix(bucket, "logs", dest)]

    assert sorted(r.key for r in results) == sorted(inside)
    assert all(r.ok for r in results)
    assert files_under(dest) == ["a", "sub/b"]
    assert (dest / "a").read_bytes() == b"in-a"
    (listing,) = [r for r in proxy.requests if "list-type=2" in r.path]
    assert "prefix=logs%2F" in listing.path


async def test_a_key_that_is_a_file_and_a_directory_fails_the_second(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # S3 lists p/x before p/x/y: the file wins, the key that needs x as a directory
    # fails; so does one that needs a directory where a file already is.
    good = {"p/a": b"a", "p/big": payload(3 * CHUNK), "p/x": b"the file x", "p/z": b"z"}
    bad = {"p/x/y": b"under x", "p/x/deeper/y": b"", "p/f/g": b"g"}
    put_many(s3, bucket, {**good, **bad})
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "f").write_bytes(b"already here")

    results = {r.key: r async for r in engine.download_prefix(bucket, "p/", dest)}

    assert set(results) == {*good, *bad}
    for key, data in good.items():
        assert results[key].ok, results[key].error
        assert (dest / key.removeprefix("p/")).read_bytes() == data
    for key, data in bad.items():
        assert isinstance(results[key].error, asyncdl.InvalidRequestError)
        assert (results[key].requests, results[key].size) == (0, len(data))
    # Refusals take no slot: p/x/y is listed in the same pull as p/x, before any
    # result (the earliest p/x is known to be on disk), so the message names p/x.
    assert "'p/x'" in str(results["p/x/y"].error)
    assert str(dest / "f") in str(results["p/f/g"].error)
    assert (dest / "f").read_bytes() == b"already here"
    assert files_under(dest) == ["a", "big", "f", "x", "z"]
    requested = {r.path.split("?")[0] for r in proxy.requests if "list-type=2" not in r.path}
    assert requested == {f"/{bucket}/{key}" for key in good}


def listing_reply(bucket: str, prefix: str, entries: list[dict[str, Any]]) -> bytes:
    """A ListObjectsV2 answer with its entries in the order given, as a directory
    bucket (S3 Express) may list them: not sorted."""
    contents = "".join(
        f"<Contents><Key>{escape(e['Key'])}</Key><LastModified>2026-01-01T00:00:00.000Z"
        f"</LastModified><ETag>{escape(e['ETag'])}</ETag><Size>{e['Size']}</Size>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
        for e in entries
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{bucket}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(entries)}"
        f"</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{contents}"
        "</ListBucketResult>"
    ).encode()


async def test_a_directory_listed_before_a_file_of_its_name_fails_the_file(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_many(s3, bucket, {"p/x/y": b"under x", "p/x": b"the file x", "p/a": b"a"})
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="p/")["Contents"]
    unsorted = sorted(listed, key=lambda e: -len(e["Key"]))  # p/x/y, then p/x, p/a
    body = listing_reply(bucket, "p/", unsorted)
    reply = (200, {"content-type": "application/xml", "content-length": str(len(body))}, body)
    proxy.rule = lambda r: Fault(reply=reply) if "list-type=2" in r.path else None
    dest = tmp_path / "dest"

    results = {r.key: r async for r in engine.download_prefix(bucket, "p/", dest)}

    assert results["p/x/y"].ok
    assert results["p/a"].ok
    assert (dest / "x" / "y").read_bytes() == b"under x"
    error = results["p/x"].error
    assert isinstance(error, asyncdl.InvalidRequestError)
    assert "'p/x/y'" in str(error)
    assert (results["p/x"].requests, results["p/x"].size) == (0, len(b"the file x"))
    assert files_under(dest) == ["a", "x/y"]
    assert not [r for r in proxy.requests if r.path.split("?")[0] == f"/{bucket}/p/x"]


async def test_a_failed_result_keeps_the_size_it_was_given_else_none(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_many(s3, bucket, {"p/gone": b"12345", "p/here": b"x"})
    # Deleted between the listing and its GET.
    gone = f"/{bucket}/p/gone"
    proxy.rule = lambda r: Fault(status=404, error_code="NoSuchKey") if r.path == gone else None

    listed = {r.key: r async for r in engine.download_prefix(bucket, "p/", tmp_path / "d")}
    assert isinstance(listed["p/gone"].error, asyncdl.ObjectNotFoundError)
    assert listed["p/gone"].size == 5  # as listed

    (unknown,) = [r async for r in engine.download_many([(bucket, "nope", tmp_path / "nope")])]
    assert isinstance(unknown.error, asyncdl.ObjectNotFoundError)
    assert unknown.size is None
    assert result_json(unknown)["size"] is None


async def test_a_failed_listing_page_is_retried_from_where_it_failed(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    files = {"p/a": b"a", "p/b": payload(CHUNK + 3), "p/z1": b"z1", "p/z2": b""}
    put_many(s3, bucket, files)
    # 999 folder markers: the first page (1,000 keys) ends among them, the second
    # holds p/z1 and p/z2. Put in moto's backend: 999 PUTs over HTTP take seconds.
    put_in_backend(bucket, dict.fromkeys((f"p/m{i:04d}/" for i in range(999)), b""))
    faults = [Fault(status=503, error_code="SlowDown"), Fault(reset=True)]
    proxy.rule = lambda r: faults.pop(0) if "continuation-token=" in r.path and faults else None

    results = [r async for r in engine.download_prefix(bucket, "p/", tmp_path)]

    assert sorted(r.key for r in results) == sorted(files)
    assert all(r.ok for r in results)
    assert {k: (tmp_path / k[2:]).read_bytes() for k in files} == files
    listings = [r.path for r in proxy.requests if "list-type=2" in r.path]
    assert len(listings) == 4
    assert "continuation-token=" not in listings[0]  # the first page, listed once
    assert len(set(listings[1:])) == 1  # the second page, asked for three times


async def test_download_prefix_says_when_its_listing_has_ended(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    sizes = {"p/a": 10, "p/b": 2 * CHUNK, "p/skip": 7, "p/.x.asyncdl-partial": 5}
    for key, size in sizes.items():
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size))
    (tmp_path / "skip").write_bytes(payload(7))
    calls: list[tuple[int, int, int]] = []
    done = 0

    def listed(objects: int, size: int) -> None:
        calls.append((objects, size, done))

    results = engine.download_prefix(bucket, "p", tmp_path, skip_existing="size", listed=listed)
    async for _result in results:
        done += 1
        assert calls == [] or calls[0][2] < done  # called once, when the listing ended
    # Every result counted (a skipped and a refused one too); bytes of those fetched.
    assert [call[:2] for call in calls] == [(4, 10 + 2 * CHUNK)]
    assert done == 4


async def test_a_name_the_file_system_refuses_fails_alone(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    # A key legal in S3 (up to 1,024 bytes) whose last part is longer than a file name
    # may be (255 bytes): that object fails with the OS's reason, the others land.
    long_key = "pre/" + "L" * 300
    put_many(s3, bucket, {"pre/a": b"a", long_key: b"long", "pre/z": b"z"})
    dest = tmp_path / "dest"

    by_key = {r.key: r async for r in engine.download_prefix(bucket, "pre/", dest)}
    requests = [(bucket, "pre/a", tmp_path / ("n" * 300)), (bucket, "pre/z", tmp_path / "z")]
    many = {r.key: r async for r in engine.download_many(requests)}

    assert by_key["pre/a"].ok
    assert by_key["pre/z"].ok
    assert isinstance(by_key[long_key].error, asyncdl.InvalidRequestError)
    assert "too long" in str(by_key[long_key].error)
    assert isinstance(many["pre/a"].error, asyncdl.InvalidRequestError)
    assert many["pre/z"].ok
    assert files_under(tmp_path) == ["dest/a", "dest/z", "z"]
