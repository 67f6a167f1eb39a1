"""asyncdl.fsspec against what an adversary or an unlucky day brings: objects replaced
behind the listings cache, keys that blur or collide once on disk, every write fsspec
offers, ranges at the edges, file objects misused, faults of the wire. Integration
through moto and the recording proxy, as test_fsspec.py."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import pickle
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdl import DownloadError, ObjectChangedError
from asyncdl.fsspec import AsyncdlFileSystem
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import payload
from .conftest import CONFIG, OTHER, files_under, link, needs_root


@pytest.fixture
def fs(small_fs: AsyncdlFileSystem) -> AsyncdlFileSystem:
    return small_fs


# -- objects replaced behind the caches -------------------------------------------------


def test_invalidate_cache_forgets_listings_and_heads(
    fs: AsyncdlFileSystem, s3: Any, bucket: str
) -> None:
    path = f"{bucket}/k"
    s3.put_object(Bucket=bucket, Key="k", Body=b"first")
    assert fs.ls(bucket)[0]["size"] == 5
    s3.put_object(Bucket=bucket, Key="k", Body=b"the second")
    fs.invalidate_cache()
    assert fs.ls(bucket)[0]["size"] == 10
    assert fs.info(path)["size"] == 10
    s3.put_object(Bucket=bucket, Key="k", Body=b"third, longer")
    fs.invalidate_cache(path)
    assert fs.info(path)["size"] == 13
    with fs.open(path, "rb") as f:
        assert f.read() == b"third, longer"
    # A HEAD (pyarrow's info before open) is forgotten too: the open is not pinned to it.
    fs.invalidate_cache()
    assert fs.info(path)["size"] == 13
    s3.put_object(Bucket=bucket, Key="k", Body=b"4th")
    fs.invalidate_cache(path)
    with fs.open(path, "rb") as f:
        assert f.read() == b"4th"


def test_a_head_expires_as_the_listings_do(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    """``listings_expiry_time`` bounds what a HEAD pins a later open to, as it bounds a
    listing's entries."""
    fs = AsyncdlFileSystem(
        endpoint_url=proxy.url, listings_expiry_time=0.2, skip_instance_cache=True
    )
    try:
        path = f"{bucket}/k"
        s3.put_object(Bucket=bucket, Key="k", Body=b"first")
        assert fs.info(path)["size"] == 5
        s3.put_object(Bucket=bucket, Key="k", Body=b"the second")
        time.sleep(0.3)
        with fs.open(path, "rb") as f:
            assert f.read() == b"the second"
    finally:
        fs.close()


@pytest.mark.parametrize("read", ["cat_ranges", "cat_file_tail", "open", "get_file"])
def test_a_stale_listing_fails_once_then_the_new_version_is_read(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, tmp_path: Path, read: str
) -> None:
    """A size and ETag from the listings cache pin every GET: an object replaced since
    fails with ObjectChangedError (never the old size's cut of the new bytes), and the
    stale entry goes, so that the "try again" the error says is true."""
    path = f"{bucket}/k"
    old, new = payload(1000, 1), payload(3000, 2)
    s3.put_object(Bucket=bucket, Key="k", Body=old)
    assert fs.ls(bucket, detail=False) == [path]  # the listing cached: size 1000
    s3.put_object(Bucket=bucket, Key="k", Body=new)
    target = tmp_path / "k"

    def reads() -> bytes:
        if read == "cat_ranges":
            got = fs.cat_ranges([path], [0], [None], on_error="raise")[0]
            assert isinstance(got, bytes)
            return got
        if read == "cat_file_tail":
            data: bytes = fs.cat_file(path, -len(new))
            return data
        if read == "open":
            with fs.open(path, "rb", block_size=4096) as f:
                whole: bytes = f.read()
                return whole
        fs.get_file(path, str(target))
        return target.read_bytes()

    with pytest.raises(ObjectChangedError):
        reads()
    assert not target.exists()
    assert reads() == new
    assert fs.info(path)["size"] == len(new)


# -- keys that blur or collide on disk --------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "why"),
    [
        (["t/../../escape"], "segment '..'|outside the destination"),
        (["t/a//b", "t/a/b"], "segment"),
        (["t//lead", "t/lead"], "segment"),
        (["t/./dot", "t/dot"], "segment"),
        (["t/x/.data.bin.asyncdl-partial", "t/x/data.bin"], "asyncdl's own"),
        (["t/a", "t/a/b"], "file and a directory"),
    ],
)
def test_get_refuses_keys_that_blur_or_collide_before_writing(
    fs: AsyncdlFileSystem,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    keys: list[str],
    why: str,
) -> None:
    """Two keys one local file, a key and a "directory" of the same name, a key named
    like asyncdl's partial files: copied as they are, one would silently replace the
    other or be taken for asyncdl's own. The copy is refused before anything is
    written or fetched."""
    for key in [*keys, "t/fine.bin"]:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    dest = tmp_path / "dest"
    proxy.reset_stats()
    with pytest.raises(ValueError, match=why):
        fs.get(f"{bucket}/t", str(dest), recursive=True)
    assert files_under(tmp_path) == {}
    # Listed and looked at (a HEAD), nothing fetched.
    assert [r for r in proxy.requests if r.method == "GET" and "list-type=" not in r.path] == []


def test_get_of_well_behaved_keys_still_copies_them(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, tmp_path: Path
) -> None:
    keys = ["t/ünï", "t/" + "n" * 200, "t/dir/", "t/dir/inner", "t/a.b/c", "t/a.bc", "t/.hidden"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    fs.get(f"{bucket}/t", str(tmp_path / "dest"), recursive=True)
    assert files_under(tmp_path / "dest") == {
        key.removeprefix("t/"): key.encode() for key in keys if not key.endswith("/")
    }


def test_get_files_named_one_by_one_may_not_land_on_one_target(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, tmp_path: Path
) -> None:
    for key in ("x/data", "y/data"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    with pytest.raises(ValueError, match="same"):
        fs.get([f"{bucket}/x/data", f"{bucket}/y/data"], str(tmp_path) + "/")
    assert files_under(tmp_path) == {}


@needs_root
def test_get_refuses_another_users_link_in_the_destination_before_writing(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """A shared destination where another user put a link on a key's way: followed, it
    would take the copy outside the destination. The copy is refused before anything
    is made or fetched, as download_prefix refuses it."""
    for key in ("t/a.bin", "t/d/b.bin", "t/e/f.bin"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    link(dest / "d", elsewhere, owner=OTHER)
    proxy.reset_stats()
    with pytest.raises(OSError, match="link"):
        fs.get(f"{bucket}/t/", str(dest), recursive=True)
    assert sorted(os.listdir(elsewhere)) == []
    assert sorted(os.listdir(dest)) == ["d"]
    assert [r for r in proxy.requests if r.method == "GET" and "list-type=" not in r.path] == []
    # A link of this user's own is theirs to follow, as for download_prefix.
    (dest / "d").unlink()
    link(dest / "d", elsewhere, owner=os.geteuid())
    fs.get(f"{bucket}/t/", str(dest), recursive=True)
    assert files_under(elsewhere) == {"b.bin": b"t/d/b.bin"}
    assert (dest / "a.bin").read_bytes() == b"t/a.bin"
    assert (dest / "e" / "f.bin").read_bytes() == b"t/e/f.bin"


def test_get_refuses_a_file_where_a_directory_goes_before_writing(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key in ("t/a.bin", "t/d/b.bin"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "d").write_bytes(b"mine")
    proxy.reset_stats()
    with pytest.raises(NotADirectoryError):
        fs.get(f"{bucket}/t/", str(dest), recursive=True)
    assert files_under(dest) == {"d": b"mine"}
    assert [r for r in proxy.requests if r.method == "GET" and "list-type=" not in r.path] == []


def test_a_pickled_file_reads_the_version_it_was_opened_on(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """Dask sends open files to its workers pickled. Unpickled, a file goes on from
    where it was, pinned to the version it opened: no GET to open it again, and an
    object replaced meanwhile fails the read, never a mixture of two versions."""
    data = payload(300_000)
    etag = s3.put_object(Bucket=bucket, Key="k.bin", Body=data)["ETag"]
    with fs.open(f"{bucket}/k.bin", block_size=64 * 1024) as f:
        f.seek(100_000)
        assert f.read(10) == data[100_000:100_010]
        blob = pickle.dumps(f)
    proxy.reset_stats()
    again = pickle.loads(blob)
    assert [(r.method, r.range) for r in proxy.requests] == []
    assert (again.tell(), again.size, again.etag) == (100_010, len(data), etag)
    assert again.read(100) == data[100_010:100_110]
    assert [r.headers.get("if-match") for r in proxy.requests] == [etag]
    s3.put_object(Bucket=bucket, Key="k.bin", Body=payload(300_000, seed=9))
    stale = pickle.loads(blob)
    with pytest.raises(ObjectChangedError):
        stale.read(10)
    # Opened anew, the file reads the new version.
    with fs.open(f"{bucket}/k.bin") as f:
        assert f.read() == payload(300_000, seed=9)


# -- writes -------------------------------------------------------------------------------


def test_every_write_fsspec_offers_is_refused_before_a_request(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    local = tmp_path / "local"
    local.write_bytes(b"local")
    new, old, lp = f"{bucket}/new", f"{bucket}/k", str(local)

    async def on_loop(make: Callable[[], Any]) -> Any:
        return await make()

    def run(make: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: asyncio.run_coroutine_threadsafe(on_loop(make), fs.loop).result(30)

    writes: dict[str, Callable[[], object]] = {
        "pipe": lambda: fs.pipe(new, b"x"),
        "pipe dict": lambda: fs.pipe({new: b"x"}),
        "pipe_file": lambda: fs.pipe_file(new, b"x"),
        "write_bytes": lambda: fs.write_bytes(new, b"x"),
        "write_text": lambda: fs.write_text(new, "x"),
        "put": lambda: fs.put(lp, new),
        "put_file": lambda: fs.put_file(lp, new),
        "upload": lambda: fs.upload(lp, new),
        "copy": lambda: fs.copy(old, new),
        "cp": lambda: fs.cp(old, new),
        "cp_file": lambda: fs.cp_file(old, new),
        "mv": lambda: fs.mv(old, new),
        "move": lambda: fs.move(old, new),
        "rename": lambda: fs.rename(old, new),
        "rm": lambda: fs.rm(old),
        "rm recursive": lambda: fs.rm(bucket, recursive=True),
        "rm_file": lambda: fs.rm_file(old),
        "delete": lambda: fs.delete(old),
        "rmdir": lambda: fs.rmdir(bucket),
        "mkdir": lambda: fs.mkdir(f"{bucket}/d"),
        "makedir": lambda: fs.makedir(f"{bucket}/d"),
        "makedirs": lambda: fs.makedirs(f"{bucket}/d/e"),
        "mkdirs": lambda: fs.mkdirs(f"{bucket}/d/e"),
        "touch": lambda: fs.touch(new),
        "_pipe_file": run(lambda: fs._pipe_file(new, b"x")),
        "_put_file": run(lambda: fs._put_file(lp, new)),
        "_cp_file": run(lambda: fs._cp_file(old, new)),
        "_mv_file": run(lambda: fs._mv_file(old, new)),
        "_rm_file": run(lambda: fs._rm_file(old)),
        "_rm": run(lambda: fs._rm(old)),
        "_mkdir": run(lambda: fs._mkdir(f"{bucket}/d")),
        "_makedirs": run(lambda: fs._makedirs(f"{bucket}/d")),
    }
    for mode in ("wb", "ab", "xb", "r+b", "rb+", "w", "a", "x", "r+", "w+"):
        writes[f"open {mode}"] = functools.partial(fs.open, new, mode)
        writes[f"open_async {mode}"] = run(functools.partial(fs.open_async, new, mode))
    with fs.transaction, pytest.raises(PermissionError, match="read-only"):
        fs.open(new, "wb")
    proxy.reset_stats()
    for name, write in writes.items():
        with pytest.raises(PermissionError, match="read-only") as refused:
            write()
        assert bucket in str(refused.value), name
        assert proxy.requests == [], name
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    assert local.read_bytes() == b"local"


# -- ranges and paths at the edges ---------------------------------------------------------


def test_ranges_at_the_edges(fs: AsyncdlFileSystem, s3: Any, bucket: str) -> None:
    body = payload(100_000, 5)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    path, size = f"{bucket}/k", len(body)
    edges = [
        (None, None),
        (-5, None),
        (-size - 10, 5),
        (5, -size - 10),
        (size, None),
        (size, size + 5),
        (size + 5, None),
        (10, 5),
        (0, 0),
        (-1, -1),
        (None, -1),
        (size - 1, size + 10**12),
    ]
    for start, end in edges:
        assert fs.cat_file(path, start, end) == body[start:end], (start, end)
    paths = [path] * len(edges) + [f"{bucket}/empty"] * 3 + [f"{bucket}/missing"]
    starts = [s for s, _ in edges] + [0, 5, -1, 0]
    ends = [e for _, e in edges] + [10, None, None, 1]
    got = fs.cat_ranges(paths, starts, ends)
    assert got[: len(edges)] == [body[s:e] for s, e in edges]
    assert got[len(edges) : -1] == [b"", b"", b""]
    assert isinstance(got[-1], FileNotFoundError)
    for name in (bucket, f"{bucket}/", f"asyncdl://{bucket}", ""):
        with pytest.raises(IsADirectoryError):
            fs.cat_file(name)
        with pytest.raises(IsADirectoryError):
            fs.cat_file(name, 0, 1)


def test_a_file_misused(fs: AsyncdlFileSystem, s3: Any, bucket: str) -> None:
    body = payload(50_000, 6)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    f = fs.open(f"{bucket}/k", "rb", block_size=4096)
    f.seek(len(body) + 100)
    assert f.read(10) == b""
    with pytest.raises(ValueError, match="before start"):
        f.seek(-1)
    f.seek(0)
    assert f.read(-1) == body
    f.close()
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.read(1)
    g = fs.open(f"{bucket}/k", "rb", block_size=4096)
    assert g.read(5) == body[:5]
    fs.close()
    with pytest.raises(RuntimeError, match="closed"):
        g.read(20_000)
    assert fs.cat_file(f"{bucket}/k", 0, 5) == body[:5]  # a new engine, on first use


# -- faults ------------------------------------------------------------------------------


def test_a_stalled_server_fails_each_read_within_the_timeouts(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(200_000, 7))
    config = {**CONFIG, "read_timeout": 0.5, "max_attempts": 2}
    fs = AsyncdlFileSystem(endpoint_url=proxy.url, config=config, skip_instance_cache=True)

    def stall(request: RequestRecord) -> Fault | None:
        return Fault(cut_after=1000, stall=30) if request.method == "GET" else None

    path = f"{bucket}/k"
    reads: dict[str, Callable[[], object]] = {
        "cat_file": lambda: fs.cat_file(path),
        "cat_file range": lambda: fs.cat_file(path, 10, 150_000),
        "cat_ranges": lambda: fs.cat_ranges([path], [10], [150_000], on_error="raise"),
        "open": lambda: fs.open(path, "rb").read(),
    }
    try:
        proxy.rule = stall
        for name, read in reads.items():
            began = time.monotonic()
            with pytest.raises(DownloadError):
                read()
            assert time.monotonic() - began < 10, name
        proxy.rule = lambda request: Fault(status=404, error_code="NoSuchKey")
        with pytest.raises(FileNotFoundError):
            fs.open(f"{bucket}/gone", "rb")
        proxy.rule = lambda request: Fault(status=403, error_code="AccessDenied")
        with pytest.raises(PermissionError):
            fs.cat_file(f"{bucket}/denied")
    finally:
        proxy.rule = None
        fs.close()


# -- event loops --------------------------------------------------------------------------


def test_a_loop_that_ends_takes_its_engine_closed(
    s3: Any, bucket: str, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """With asynchronous=True a caller may let its loop end (asyncio.run) without
    ``await fs.aclose()``: the engine the file system opened there is closed as the
    loop shuts down, not left to warn of an unclosed session when collected."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    fs = AsyncdlFileSystem(endpoint_url=proxy.url, asynchronous=True, skip_instance_cache=True)

    async def read() -> bytes:
        data: bytes = await fs._cat_file(f"{bucket}/k")
        return data

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert asyncio.run(read()) == b"data"
        assert asyncio.run(read()) == b"data"  # a new loop: a new engine
        gc.collect()
    assert [str(w.message) for w in seen] == []
    assert "Unclosed" not in caplog.text
    assert all(opened.engine is None for opened in fs._engines.values())
    fs.close()
