"""asyncdl.fsspec on moto: listings, reads, copies and files against what boto3 sees
and reads, the requests each sends (through the recording proxy), refused writes,
the storage options, and the routes into it (entry point, ``register_as_s3``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec.asyn
import pytest

from asyncdl import ObjectChangedError, TransferConfig
from asyncdl.fsspec import AsyncdlFileSystem
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy

from ..conftest import gets, payload

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"chunk_size": 64 * 1024, "max_concurrency": 4, "backoff_base": 0.01}


def object_gets(proxy: TcpProxy) -> list[RequestRecord]:
    """The GETs of objects (a listing is a GET of the bucket too)."""
    return [r for r in gets(proxy) if "list-type=" not in r.path]


def seed(s3: Any, bucket: str) -> dict[str, bytes]:
    objects = {
        "top.txt": b"top",
        "data/a.bin": payload(200_000, 1),
        "data/b.bin": payload(10, 2),
        "data/deep/c.bin": payload(70_000, 3),
        "empty": b"",
    }
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return objects


@pytest.fixture
def fs(proxy: TcpProxy) -> Iterator[AsyncdlFileSystem]:
    made = AsyncdlFileSystem(endpoint_url=proxy.url, config=CONFIG, skip_instance_cache=True)
    yield made
    made.close()


def test_listing_is_what_boto3_lists(fs: AsyncdlFileSystem, s3: Any, bucket: str) -> None:
    objects = seed(s3, bucket)
    assert fs.ls(bucket, detail=False) == [f"{bucket}/data", f"{bucket}/empty", f"{bucket}/top.txt"]
    assert sorted(fs.ls(f"{bucket}/data", detail=False)) == [
        f"{bucket}/data/a.bin",
        f"{bucket}/data/b.bin",
        f"{bucket}/data/deep",
    ]
    head = s3.head_object(Bucket=bucket, Key="data/a.bin")
    info = fs.info(f"asyncdl://{bucket}/data/a.bin")
    assert (info["type"], info["size"], info["ETag"]) == ("file", 200_000, head["ETag"])
    assert fs.info(f"{bucket}/data/deep")["type"] == "directory"
    assert fs.find(bucket) == sorted(f"{bucket}/{key}" for key in objects)
    assert fs.find(f"{bucket}/data", withdirs=True) == [
        f"{bucket}/data",
        f"{bucket}/data/a.bin",
        f"{bucket}/data/b.bin",
        f"{bucket}/data/deep",
        f"{bucket}/data/deep/c.bin",
    ]
    assert fs.glob(f"{bucket}/data/*.bin") == [f"{bucket}/data/a.bin", f"{bucket}/data/b.bin"]
    assert fs.du(bucket) == sum(len(body) for body in objects.values())
    assert fs.exists(f"{bucket}/data/b.bin")
    assert not fs.exists(f"{bucket}/data/nothing")
    assert fs.isdir(f"{bucket}/data")
    assert not fs.isfile(f"{bucket}/data")
    assert fs.isfile(f"{bucket}/top.txt")
    assert not fs.isdir(f"{bucket}/top.txt")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{bucket}/data/nothing")
    with pytest.raises(FileNotFoundError):
        fs.ls("no-such-bucket-here")


def test_cat_file_of_a_small_object_is_one_get(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    seed(s3, bucket)
    body = s3.get_object(Bucket=bucket, Key="data/b.bin")["Body"].read()
    proxy.reset_stats()
    assert fs.cat_file(f"{bucket}/data/b.bin") == body
    assert len(proxy.requests) == 1
    large = s3.get_object(Bucket=bucket, Key="data/a.bin")["Body"].read()
    assert fs.cat_file(f"{bucket}/data/a.bin") == large
    assert fs.cat_file(f"{bucket}/empty") == b""


def test_cat_file_ranges_as_fsspec_means_them(fs: AsyncdlFileSystem, s3: Any, bucket: str) -> None:
    seed(s3, bucket)
    body = s3.get_object(Bucket=bucket, Key="data/a.bin")["Body"].read()
    path = f"{bucket}/data/a.bin"
    for start, end in [
        (0, 10),
        (5, 150_000),
        (-100, None),
        (10, -10),
        (199_990, 300_000),
        (None, 7),
    ]:
        assert fs.cat_file(path, start, end) == body[start:end], (start, end)
    assert fs.cat_file(path, 300_000) == b""
    assert fs.cat_file(path, 50, 40) == b""


def test_cat_ranges_are_joined_and_pinned(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    seed(s3, bucket)
    body = s3.get_object(Bucket=bucket, Key="data/a.bin")["Body"].read()
    small = s3.get_object(Bucket=bucket, Key="data/b.bin")["Body"].read()
    etag = s3.head_object(Bucket=bucket, Key="data/a.bin")["ETag"]
    path = f"{bucket}/data/a.bin"
    starts = [0, 100, 1000, 150_000, -50, 2]
    ends = [10, 200, 1100, 150_100, None, 5]
    paths = [path] * 5 + [f"{bucket}/data/b.bin"]
    proxy.reset_stats()
    got = fs.cat_ranges(paths, starts, ends)
    expected = [body[s:e] for s, e in zip(starts[:5], ends[:5], strict=True)] + [small[2:5]]
    assert got == expected
    a_gets = [r for r in object_gets(proxy) if r.path.endswith("/data/a.bin")]
    # Five ranges in 200 KB, joined into GETs of at most a chunk (64 KiB) each, every
    # one pinned to the object's ETag.
    assert 2 <= len(a_gets) < 5
    assert all(r.headers.get("if-match") == etag for r in a_gets)
    assert all("if-match" in r.headers for r in object_gets(proxy))
    missing = fs.cat_ranges([f"{bucket}/nothing"], [0], [1])
    assert isinstance(missing[0], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges([f"{bucket}/nothing"], [0], [1], on_error="raise")


def test_open_reads_one_version(fs: AsyncdlFileSystem, s3: Any, bucket: str) -> None:
    seed(s3, bucket)
    body = s3.get_object(Bucket=bucket, Key="data/a.bin")["Body"].read()
    for cache_type in ("readahead", "blocks", "bytes", "none"):
        with fs.open(f"{bucket}/data/a.bin", "rb", block_size=4096, cache_type=cache_type) as f:
            assert f.size == len(body)
            f.seek(150_000)
            assert f.read(10) == body[150_000:150_010]
            f.seek(0)
            assert f.read() == body, cache_type
    with fs.open(f"{bucket}/data/a.bin", block_size=4096) as f:
        assert f.read(5) == body[:5]
        s3.put_object(Bucket=bucket, Key="data/a.bin", Body=payload(200_000, 9))
        f.seek(100_000)
        with pytest.raises(ObjectChangedError):
            f.read(10)
    with fs.open(f"{bucket}/top.txt", "r") as text:
        assert text.read() == "top"
    with pytest.raises(FileNotFoundError):
        fs.open(f"{bucket}/data/nothing")


def test_a_file_opened_after_its_info_is_pinned_from_its_first_get(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # pyarrow's way (pd.read_parquet): info() first, a HEAD, then open() and reads. The
    # HEAD's size and ETag open the reader, so its first GET is pinned too.
    seed(s3, bucket)
    body = s3.get_object(Bucket=bucket, Key="data/a.bin")["Body"].read()
    proxy.reset_stats()
    assert fs.info(f"{bucket}/data/a.bin")["size"] == len(body)
    with fs.open(f"{bucket}/data/a.bin", "rb", block_size=65536) as f:
        assert f.read() == body
    assert [r.method for r in proxy.requests][:1] == ["HEAD"]
    unpinned = [r.range for r in object_gets(proxy) if "if-match" not in r.headers]
    assert unpinned == []
    assert len(object_gets(proxy)) >= 2


def test_get_copies_through_the_engine(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = seed(s3, bucket)
    proxy.reset_stats()
    fs.get(f"{bucket}/data", str(tmp_path / "copy"), recursive=True)
    for key in ("data/a.bin", "data/b.bin", "data/deep/c.bin"):
        name = key.removeprefix("data/")
        assert (tmp_path / "copy" / name).read_bytes() == objects[key]
    # The listing gave every size and ETag: no discovery, every GET pinned.
    assert all("if-match" in r.headers for r in object_gets(proxy))
    assert len(object_gets(proxy)) == 4 + 1 + 2  # chunks of 64 KiB
    fs.get_file(f"{bucket}/top.txt", str(tmp_path / "top.txt"))
    assert (tmp_path / "top.txt").read_bytes() == b"top"
    with pytest.raises(FileNotFoundError):
        fs.get_file(f"{bucket}/nothing", str(tmp_path / "nothing"))
    assert not (tmp_path / "nothing").exists()


def test_writes_are_refused(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    seed(s3, bucket)
    local = tmp_path / "local.txt"
    local.write_bytes(b"local")
    proxy.reset_stats()
    writes: dict[str, Callable[[], object]] = {
        "pipe": lambda: fs.pipe(f"{bucket}/new", b"x"),
        "put": lambda: fs.put(str(local), f"{bucket}/new"),
        "open wb": lambda: fs.open(f"{bucket}/new", "wb"),
        "rm": lambda: fs.rm(f"{bucket}/top.txt"),
        "mkdir": lambda: fs.mkdir(f"{bucket}/newdir"),
        "makedirs": lambda: fs.makedirs(f"{bucket}/newdir/x"),
        "touch": lambda: fs.touch(f"{bucket}/new"),
        "copy": lambda: fs.copy(f"{bucket}/top.txt", f"{bucket}/new"),
    }
    for name, write in writes.items():
        with pytest.raises(PermissionError, match="read-only") as refused:
            write()
        assert bucket in str(refused.value), name
    assert all(r.method in ("GET", "HEAD") for r in proxy.requests)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert "new" not in keys
    assert "top.txt" in keys


def test_storage_options(proxy: TcpProxy) -> None:
    fs = AsyncdlFileSystem(endpoint_url=proxy.url, config={"chunk_size": 1024 * 1024})
    assert fs.chunk_size == 1024 * 1024
    assert AsyncdlFileSystem(config=TransferConfig(chunk_size=2 * 1024 * 1024)).chunk_size == (
        2 * 1024 * 1024
    )
    with pytest.raises(ValueError, match="chunk_sise"):
        AsyncdlFileSystem(config={"chunk_sise": 1})
    with pytest.raises(ValueError, match="chunk_size"):
        AsyncdlFileSystem(config={"chunk_size": 1})
    with pytest.raises(TypeError, match=r"unknown storage option.*secret"):
        AsyncdlFileSystem(secret="x")
    with pytest.raises(ValueError, match="profile"):
        AsyncdlFileSystem(profile="")


async def test_asynchronous_on_the_callers_loop(proxy: TcpProxy, s3: Any, bucket: str) -> None:
    objects = seed(s3, bucket)
    fs = AsyncdlFileSystem(endpoint_url=proxy.url, asynchronous=True, skip_instance_cache=True)
    try:
        assert await fs._cat_file(f"{bucket}/data/b.bin") == objects["data/b.bin"]
        assert await fs._find(bucket) == sorted(f"{bucket}/{key}" for key in objects)
        assert await fs._cat_ranges([f"{bucket}/data/a.bin"], [5], [9]) == [
            objects["data/a.bin"][5:9]
        ]
        with pytest.raises(NotImplementedError, match="asynchronous"):
            fs.open(f"{bucket}/data/b.bin")
    finally:
        await fs.aclose()


def test_one_file_system_on_two_loops(proxy: TcpProxy, s3: Any, bucket: str) -> None:
    """fsspec hands one instance to every caller with the same options (Zarr's loop
    thread, an application's loop): each loop gets an engine of its own."""
    objects = seed(s3, bucket)
    fs = AsyncdlFileSystem(endpoint_url=proxy.url, asynchronous=True, skip_instance_cache=True)

    async def read() -> bytes:
        try:
            data: bytes = await fs._cat_file(f"{bucket}/data/b.bin")
            return data
        finally:
            await fs.aclose()

    async def read_and_keep() -> bytes:
        data: bytes = await fs._cat_file(f"{bucket}/top.txt")
        return data

    assert asyncio.run(read()) == objects["data/b.bin"]
    assert asyncio.run(read()) == objects["data/b.bin"]
    # A sync file system's loop (fsspec's thread) and a caller's loop, at once.
    sync_fs = AsyncdlFileSystem(endpoint_url=proxy.url, skip_instance_cache=True)
    try:
        assert sync_fs.cat_file(f"{bucket}/top.txt") == b"top"
        assert fsspec.asyn.sync(sync_fs.loop, read_and_keep) == b"top"
        assert asyncio.run(read()) == objects["data/b.bin"]
    finally:
        sync_fs.close()
        fs.close()


def run(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_register_as_s3_routes_s3_urls(s3_endpoint: str, s3: Any, bucket: str) -> None:
    seed(s3, bucket)
    out = run(
        f"""
        import fsspec, asyncdl.fsspec
        asyncdl.fsspec.register_as_s3()
        with fsspec.open("s3://{bucket}/data/b.bin", endpoint_url={s3_endpoint!r}) as f:
            print(type(f.fs).__name__, f.read().hex())
        """
    )
    assert out.split() == ["AsyncdlFileSystem", payload(10, 2).hex()]


def test_the_entry_point_names_the_file_system(
    s3_endpoint: str, s3: Any, bucket: str, tmp_path: Path
) -> None:
    """fsspec finds the protocol through the entry point pyproject.toml declares (an
    installed copy's metadata may predate it: the declaration is what is tested)."""
    seed(s3, bucket)
    with (ROOT / "pyproject.toml").open("rb") as file:
        declared = tomllib.load(file)["project"]["entry-points"]["fsspec.specs"]
    section = "\n".join(f"{name} = {target}" for name, target in declared.items())
    info = tmp_path / "asyncdl_entry_check-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: asyncdl-entry-check\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[fsspec.specs]\n{section}\n")
    src = str(ROOT / "src")
    out = run(
        f"""
        import fsspec
        fs = fsspec.filesystem("asyncdl", endpoint_url={s3_endpoint!r})
        print(type(fs).__module__, fsspec.open("asyncdl://{bucket}/top.txt", "rb",
              endpoint_url={s3_endpoint!r}).open().read().decode())
        """,
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), src])},
    )
    assert out.split() == ["asyncdl.fsspec._filesystem", "top"]
