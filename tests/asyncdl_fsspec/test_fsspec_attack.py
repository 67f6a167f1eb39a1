"""asyncdl.fsspec's pickled files, its files read from many threads and dropped with bytes
fetched ahead, and its recursive ``get`` into trees others share, attacked: against moto
through the recording proxy, as test_fsspec_hostile.py."""

from __future__ import annotations

import concurrent.futures
import gc
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from asyncdl.fsspec import AsyncdlFileSystem
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import payload
from .conftest import OTHER, files_under, needs_root


@pytest.fixture
def fs(small_fs: AsyncdlFileSystem) -> AsyncdlFileSystem:
    return small_fs


def object_gets(proxy: TcpProxy) -> list[str | None]:
    """The ranges of the GETs of objects (not listings) the proxy saw."""
    return [r.range for r in proxy.requests if r.method == "GET" and "list-type=" not in r.path]


# -- pickled files -----------------------------------------------------------------------


def test_a_pickled_file_of_an_object_with_no_etag_reads_the_bytes_it_opened_on(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """A server that sends no ETag: the object came whole in the opening GET (else the
    open fails), and there is nothing to pin a reopened file to. Unpickled, the file
    reads the bytes it opened on, from where it was, with no GET: never the start of
    one version and the rest of another."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"one version")
    proxy.rule = lambda r: Fault(response_headers={"etag": None})
    with fs.open(f"{bucket}/k") as f:
        assert f.etag is None
        assert f.read(4) == b"one "
        blob = pickle.dumps(f)
    s3.put_object(Bucket=bucket, Key="k", Body=b"two versions")
    proxy.reset_stats()
    again = pickle.loads(blob)
    assert (again.tell(), again.size, again.etag) == (4, len(b"one version"), None)
    assert again.read() == b"version"
    again.seek(0)
    assert again.read(3) == b"one"
    assert object_gets(proxy) == []
    # Pickled again as it is, then closed: it refuses to be pickled or read.
    assert pickle.loads(pickle.dumps(again)).read() == b" version"
    again.close()
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(again)
    with pytest.raises(ValueError, match="closed"):
        again.read()


def test_a_file_unpickled_in_another_process_reads_on_pinned(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, tmp_path: Path
) -> None:
    """Dask's workers are other processes: the file unpickled there builds its file
    system again, and reads from where it was, the version it opened."""
    data = payload(300_000)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    with fs.open(f"{bucket}/k", block_size=64 * 1024) as f:
        f.seek(123_456)
        (tmp_path / "file.pickle").write_bytes(pickle.dumps(f))
    s3.put_object(Bucket=bucket, Key="k", Body=payload(300_000, seed=3))
    code = (
        "import pickle, sys\n"
        "f = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "try:\n"
        "    f.read(16)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "file.pickle")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "ObjectChangedError", done.stderr[-2000:]


# -- one file, many threads; a file dropped with bytes fetched ahead ------------------


def test_one_file_read_from_many_threads_through_pyarrow(
    fs: AsyncdlFileSystem, s3: Any, bucket: str
) -> None:
    """pyarrow reads an ``fs.open`` file from its thread pool: random and sequential
    reads at once, long (fetched ahead) and short, zero-length and past the end, each
    gives its bytes."""
    data = payload(3_000_000)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    pick = random.Random(1)
    jobs = [
        (pick.randrange(len(data) + 10), pick.choice([0, 1, 5000, 100_000, 300_000]))
        for _ in range(150)
    ]
    jobs += [(i * 100_003, 100_003) for i in range(30)]  # a sequential scan among them
    with fs.open(f"{bucket}/k", block_size=16 * 1024) as f:
        file = pa.PythonFile(f, mode="r")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda job: file.read_at(job[1], job[0]), jobs))
    for (at, n), piece in zip(jobs, got, strict=True):
        assert piece == data[at : at + n], (at, n)


def test_a_file_dropped_unclosed_cancels_what_it_fetched_ahead(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(1_000_000)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: (
        Fault(cut_after=10, stall=30) if (r.range or "").startswith("bytes=600000-") else None
    )
    f = fs.open(f"{bucket}/k", block_size=16 * 1024)
    f.seek(200_000)
    assert f.read(200_000) == data[200_000:400_000]
    assert f.read(200_000) == data[400_000:600_000]
    assert f._reader is not None
    assert f._reader._blocks.pending is not None
    ahead = f._reader._blocks.pending.task
    del f
    gc.collect()
    for _ in range(100):
        if ahead.done():
            break
        time.sleep(0.02)
    assert ahead.cancelled()


# -- recursive get into a shared tree -------------------------------------------------------


def test_get_refuses_a_directory_where_a_file_goes_before_fetching(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key in ("t/a.bin", "t/b.bin", "t/z.bin"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    dest = tmp_path / "dest"
    (dest / "b.bin").mkdir(parents=True)
    proxy.reset_stats()
    with pytest.raises(Exception, match="is a directory"):
        fs.get(f"{bucket}/t/", str(dest), recursive=True)
    assert os.listdir(dest) == ["b.bin"]
    assert object_gets(proxy) == []


@needs_root
def test_get_replaces_another_users_link_where_a_file_goes_never_follows_it(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, tmp_path: Path
) -> None:
    for key in ("t/a.bin", "t/d/b.bin"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim")
    dest = tmp_path / "dest"
    (dest / "d").mkdir(parents=True)
    (dest / "d" / "b.bin").symlink_to(victim)
    os.chown(dest / "d" / "b.bin", OTHER, OTHER, follow_symlinks=False)
    fs.get(f"{bucket}/t/", str(dest), recursive=True)
    assert victim.read_bytes() == b"victim"
    assert not (dest / "d" / "b.bin").is_symlink()
    assert files_under(dest) == {"a.bin": b"t/a.bin", "d/b.bin": b"t/d/b.bin"}


@needs_root
def test_get_follows_the_destination_link_the_user_named(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, tmp_path: Path
) -> None:
    """The destination is the user's to name: a link there is followed (even another
    user's), as named; targets given as lists are made where they are named."""
    for key in ("t/a.bin", "t/d/b.bin"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    real = tmp_path / "real"
    real.mkdir()
    dest = tmp_path / "dest"
    dest.symlink_to(real, target_is_directory=True)
    os.chown(dest, OTHER, OTHER, follow_symlinks=False)
    fs.get(f"{bucket}/t/", str(dest) + "/", recursive=True)
    assert files_under(real) == {"a.bin": b"t/a.bin", "d/b.bin": b"t/d/b.bin"}
    lists = tmp_path / "lists"
    fs.get([f"{bucket}/t/a.bin", f"{bucket}/t/d/b.bin"], [str(lists / "1"), str(lists / "x/2")])
    assert files_under(lists) == {"1": b"t/a.bin", "x/2": b"t/d/b.bin"}


@needs_root
def test_get_refuses_a_link_put_on_the_way_after_the_look_before(
    fs: AsyncdlFileSystem, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """Another user puts a link where a key's directory goes once the copy has begun
    (after the look before anything was made): the directory is opened as the copy
    reaches it, the link refused then, nothing written through it."""
    keys = [f"t/a{i:02}.bin" for i in range(30)] + ["t/z/x.bin", "t/z/y.bin"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()

    def swap() -> None:
        if not (dest / "z").is_symlink():
            (dest / "z").symlink_to(elsewhere, target_is_directory=True)
            os.chown(dest / "z", OTHER, OTHER, follow_symlinks=False)

    proxy.rule = lambda r: (
        Fault(before=swap) if r.method == "GET" and "list-type=" not in r.path else None
    )
    with pytest.raises(OSError, match="link"):
        fs.get(f"{bucket}/t/", str(dest), recursive=True)
    assert os.listdir(elsewhere) == []
    assert (dest / "z").is_symlink()
