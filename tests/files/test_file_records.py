"""download_prefix's skip_existing and filters against moto through the proxy; the
records of written files, filters and the stale-file scan as pure logic."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._bulk.filters import Filters, compile_filters
from asyncdl._files import file_records
from asyncdl._files.file_records import EtagStore
from asyncdl._files.stale import remove_stale, stale_files
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import payload


def sent(proxy: TcpProxy) -> list[str]:
    """The requests the proxy saw, listing pages apart: ``METHOD /bucket/key``."""
    return sorted(
        f"{r.method} {r.path.split('?')[0]}" for r in proxy.requests if "list-type=2" not in r.path
    )


def listings(proxy: TcpProxy) -> int:
    return sum("list-type=2" in r.path for r in proxy.requests)


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


async def prefix(engine: asyncdl.Engine, *args: Any, **options: Any) -> dict[str, Any]:
    return {r.key: r async for r in engine.download_prefix(*args, **options)}


@pytest.fixture
def force_sidecar() -> Iterator[None]:
    file_records._force_sidecar = True
    try:
        yield
    finally:
        file_records._force_sidecar = False


OBJECTS = {f"p/{name}": payload(100 + i, seed=i) for i, name in enumerate("abcdef")}


@pytest.mark.parametrize("mode", ["size", "etag"])
@pytest.mark.parametrize("where", ["xattr", "sidecar"])
async def test_a_rerun_sends_only_the_listing(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    mode: str,
    where: str,
    request: pytest.FixtureRequest,
) -> None:
    if where == "sidecar":
        request.getfixturevalue("force_sidecar")
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    first = await prefix(engine, bucket, "p", tmp_path, skip_existing=mode)
    assert all(r.ok and not r.skipped for r in first.values())
    assert len(sent(proxy)) == len(OBJECTS)
    proxy.reset_stats()

    again = await prefix(engine, bucket, "p", tmp_path, skip_existing=mode)

    assert sent(proxy) == []
    assert listings(proxy) == 1
    assert sorted(again) == sorted(OBJECTS)
    for key, result in again.items():
        assert result.skipped
        assert result.ok
        assert result.requests == 0
        assert result.path == tmp_path / key.removeprefix("p/")
        assert result.size == len(OBJECTS[key])
        assert result.etag == first[key].etag
    assert (tmp_path / file_records.SIDECAR_DIR).exists() == (where == "sidecar")


async def test_etag_fetches_an_object_changed_on_s3_size_does_not(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    await prefix(engine, bucket, "p/", tmp_path, skip_existing="etag")
    fresh = payload(len(OBJECTS["p/c"]), seed=99)  # the same size, a new ETag
    s3.put_object(Bucket=bucket, Key="p/c", Body=fresh)
    proxy.reset_stats()

    by_size = await prefix(engine, bucket, "p/", tmp_path, skip_existing="size")
    assert sent(proxy) == []
    assert by_size["p/c"].skipped
    assert (tmp_path / "c").read_bytes() == OBJECTS["p/c"]

    by_etag = await prefix(engine, bucket, "p/", tmp_path, skip_existing="etag")
    assert sent(proxy) == [f"GET /{bucket}/p/c"]
    assert not by_etag["p/c"].skipped
    assert by_etag["p/c"].requests == 1
    assert (tmp_path / "c").read_bytes() == fresh
    assert [key for key, r in by_etag.items() if r.skipped] == sorted(set(OBJECTS) - {"p/c"})


async def test_etag_fetches_a_file_changed_locally(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    await prefix(engine, bucket, "p/", tmp_path, skip_existing="etag")
    edited = tmp_path / "d"
    before = edited.stat()
    edited.write_bytes(bytes(before.st_size))  # rewritten in place, the same size
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    proxy.reset_stats()

    results = await prefix(engine, bucket, "p/", tmp_path, skip_existing="etag")

    assert sent(proxy) == [f"GET /{bucket}/p/d"]
    assert not results["p/d"].skipped
    assert edited.read_bytes() == OBJECTS["p/d"]
    # Recorded anew: the next run skips it.
    proxy.reset_stats()
    await prefix(engine, bucket, "p/", tmp_path, skip_existing="etag")
    assert sent(proxy) == []


async def test_without_skip_existing_nothing_is_recorded_or_skipped(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a", Body=b"abc")
    await prefix(engine, bucket, "p/", tmp_path)
    with pytest.raises(OSError, match="No data available"):
        os.getxattr(tmp_path / "a", file_records.XATTR)
    proxy.reset_stats()
    again = await prefix(engine, bucket, "p/", tmp_path)
    assert sent(proxy) == [f"GET /{bucket}/p/a"]
    assert not again["p/a"].skipped
    assert os.listdir(tmp_path) == ["a"]


async def test_filters_leave_out_keys_and_send_nothing_for_them(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    keys = ["p/a.txt", "p/b.csv", "p/logs/c.txt", "p/logs/d.tmp", "p/e.tmp"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    filters = [("exclude", "*.tmp"), ("exclude", "logs/*"), ("include", "logs/*.txt")]

    results = await prefix(engine, bucket, "p", tmp_path, filters=filters)

    assert sorted(results) == ["p/a.txt", "p/b.csv", "p/logs/c.txt"]
    assert files_under(tmp_path) == ["a.txt", "b.csv", "logs/c.txt"]
    assert sent(proxy) == [f"GET /{bucket}/{key}" for key in sorted(results)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"skip_existing": "mtime"}, "skip_existing must be None, 'size' or 'etag'"),
        ({"skip_existing": True}, "skip_existing must be None"),
        ({"filters": [("exclude",)]}, "filters must be ('exclude' or 'include', pattern)"),
        ({"filters": [("ignore", "*")]}, "filters must be ('exclude' or 'include', pattern)"),
        ({"filters": "*.txt"}, "filters must be a list of (kind, pattern) pairs"),
        ({"filters": [("include", b"*")]}, "filters must be ('exclude' or 'include', pattern)"),
    ],
)
async def test_bad_options_are_refused_before_anything_is_sent(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    options: dict[str, Any],
    message: str,
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a", Body=b"abc")
    dest = tmp_path / "dest"
    with pytest.raises(asyncdl.InvalidRequestError) as refused:
        await prefix(engine, bucket, "p/", dest, **options)
    assert message in str(refused.value)
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []


# -- filters, as the AWS CLI documents them --------------------------------------------

FILES = ["a.txt", "b.png", "logs/c.txt", "logs/2026/d.txt", ".git/config", "x?y", "[z]"]


@pytest.mark.parametrize(
    ("rules", "kept"),
    [
        ([], FILES),
        ([("exclude", "*"), ("include", "*.txt")], ["a.txt", "logs/c.txt", "logs/2026/d.txt"]),
        ([("include", "*.txt"), ("exclude", "*")], []),
        ([("exclude", "*.txt")], ["b.png", ".git/config", "x?y", "[z]"]),
        ([("exclude", ".git/*")], [f for f in FILES if not f.startswith(".git/")]),
        ([("exclude", "*"), ("include", "logs/*")], ["logs/c.txt", "logs/2026/d.txt"]),
        ([("exclude", "*"), ("include", "logs/?.txt")], ["logs/c.txt"]),
        ([("exclude", "[ab].*")], ["logs/c.txt", "logs/2026/d.txt", ".git/config", "x?y", "[z]"]),
        ([("exclude", "x[?]y"), ("exclude", "[[]z]")], FILES[:-2]),
        (
            [("exclude", "*"), ("include", "*.txt"), ("exclude", "logs/2026/*")],
            FILES[:1] + FILES[2:3],
        ),
        ([("exclude", "A.TXT")], FILES),  # keys are case-sensitive
    ],
)
def test_filters_mean_what_the_aws_cli_documents(
    rules: list[tuple[str, str]], kept: list[str]
) -> None:
    filters = Filters(rules)
    assert [name for name in FILES if filters.includes(name)] == kept


def test_no_filters_compile_to_nothing_to_check() -> None:
    assert compile_filters(None) is None
    assert compile_filters([]) is None
    assert compile_filters([("include", "*")]) is not None


# -- the stale-file scan ---------------------------------------------------------------


def test_only_files_a_record_vouches_for_may_go(tmp_path: Path, force_sidecar: None) -> None:
    store = EtagStore(tmp_path)
    (tmp_path / "sub").mkdir()
    ours, edited, theirs = tmp_path / "sub/ours", tmp_path / "edited", tmp_path / "theirs"
    for path in (ours, edited, theirs):
        path.write_bytes(b"data")
    store.record(ours, '"e1"', bucket="b", key="sub/ours")
    store.record(edited, '"e2"', bucket="b", key="edited")
    os.utime(edited, ns=(0, edited.stat().st_mtime_ns + 10**9))
    for name in (".a.0123abcd.asyncdl-tmp", ".a.asyncdl-partial", ".a.asyncdl-journal"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "link").symlink_to(ours)
    store.close()

    store = EtagStore(tmp_path)
    found = {
        s.path.relative_to(tmp_path).as_posix(): s.kept_because
        for s in stale_files(store, lambda _: False, lambda _: True, bucket="b", prefix="")
    }
    assert found == {
        "sub/ours": None,
        "edited": "changed since asyncdl wrote it",
        "theirs": "not written by asyncdl",
        "link": "not a regular file",
    }
    (stale,) = [
        s
        for s in stale_files(store, lambda _: False, lambda _: True, bucket="b", prefix="")
        if s.path == ours
    ]
    remove_stale(store, stale)
    assert not (tmp_path / "sub").exists()  # left empty by the removal
    store.close()
    # The record went with the file: a file restored there with the same size and
    # mtime is not asyncdl's.
    ours.parent.mkdir()
    ours.write_bytes(b"data")
    os.utime(ours, ns=(0, stale.stat.st_mtime_ns))
    assert EtagStore(tmp_path).records(ours) == []
