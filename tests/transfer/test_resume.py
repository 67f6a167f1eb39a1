"""Resuming a download (``resume=True``): the partial file and its journal kept on
failure, continued by the next download of the same object to the same target."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import partial_paths
from asyncdl._files.writer import is_temp_file
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, gone_within_a_second, payload, temp_files
from ..servers.test_moto_server import PART, put_multipart

SIZE = 16 * CHUNK + 123  # 17 parts of CHUNK, several writes: journaled


def resumable(config: asyncdl.TransferConfig, **changes: Any) -> asyncdl.TransferConfig:
    fields = {name: getattr(config, name) for name in config.__dataclass_fields__}
    return asyncdl.TransferConfig(**{**fields, "resume": True, **changes})


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("."))


def ranged(requests: list[RequestRecord]) -> int:
    """Bytes the ranged GETs asked for."""
    total = 0
    for request in requests:
        if request.method == "GET" and request.range is not None:
            first, last = request.range.removeprefix("bytes=").split("-")
            total += int(last) - int(first) + 1
    return total


def failing_range(start: int, part: int | None = None) -> Any:
    """A rule that refuses every request for the range starting at ``start`` (and for
    upload part ``part``, when given: a server with part GETs is asked for parts)."""

    def rule(request: RequestRecord) -> Fault | None:
        if request.range is not None and request.range.startswith(f"bytes={start}-"):
            return Fault(status=403, error_code="AccessDenied")
        if part is not None and f"partNumber={part}" in request.path:
            return Fault(status=403, error_code="AccessDenied")
        return None

    return rule


async def interrupted(
    client: Any,
    config: asyncdl.TransferConfig,
    proxy: TcpProxy,
    bucket: str,
    target: Path,
    key: str = "k",
    at: int = 12 * CHUNK,
) -> None:
    """A download that fails on the range at ``at`` (every attempt refused)."""
    proxy.rule = failing_range(at)
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(bucket, key, target)
    proxy.rule = None
    await settled(proxy)
    proxy.reset_stats()


async def settled(proxy: TcpProxy) -> None:
    """Wait until what the cancelled parts sent has reached the proxy and ended, so that
    what it records next is the next download's alone."""
    seen = -1
    for _ in range(500):
        if proxy.in_flight == 0 and len(proxy.requests) == seen:
            return
        seen = len(proxy.requests)
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("fsync", [False, True])
async def test_failed_download_keeps_its_partial_and_the_next_fetches_only_the_rest(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    fsync: bool,
) -> None:
    data = payload(SIZE)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")["ETag"]
    target = tmp_path / "k"
    config = resumable(config, fsync=fsync)
    await interrupted(client, config, proxy, bucket, target)
    assert leftovers(tmp_path) == [".k.asyncdl-journal", ".k.asyncdl-partial"]
    assert not target.exists()

    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.verified
    assert result.checksum is not None
    assert result.partial_discarded is None
    gets = [r for r in proxy.requests if r.method == "GET"]
    missing = SIZE - result.reused_bytes
    # The failed range, those cancelled in flight and those never started.
    assert 0 < missing < SIZE - 4 * CHUNK
    assert ranged(gets) <= missing
    assert gets
    assert all(r.headers.get("if-match") == etag for r in proxy.requests)
    assert leftovers(tmp_path) == []


async def test_without_resume_a_failed_download_leaves_nothing(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    await interrupted(client, config, proxy, bucket, tmp_path / "k")
    await gone_within_a_second(tmp_path)  # a write in a worker thread finishes first
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("resuming", [True, False])
async def test_cancelled_download(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    resuming: bool,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    stalled = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stall_late_parts(request: RequestRecord) -> Fault | None:
        if request.range is None or request.range.startswith(("bytes=0-", f"bytes={CHUNK}-")):
            return None
        loop.call_soon_threadsafe(stalled.set)
        return Fault(delay=30)

    proxy.rule = stall_late_parts
    config = resumable(config, resume=resuming)
    async with asyncdl.Engine(client, config=config) as engine:
        task = asyncio.create_task(engine.download(bucket, "k", tmp_path / "k"))
        await asyncio.wait_for(stalled.wait(), 10)
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for _ in range(100):  # a write already in a worker thread finishes first
        if not temp_files(tmp_path):
            break
        await asyncio.sleep(0.01)
    if resuming:
        assert leftovers(tmp_path) == [".k.asyncdl-journal", ".k.asyncdl-partial"]
        found = partial_paths.lookup(tmp_path / "k", RuntimeError)
        assert found is not None
        assert found.damaged is None
        assert found.ranges  # the first parts were recorded
    else:
        assert os.listdir(tmp_path) == []


async def test_object_replaced_between_runs_discards_the_partial(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    new = payload(SIZE, seed=1)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=new)["ETag"]
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == new
    assert result.reused_bytes == 0
    assert result.partial_discarded is not None
    assert "changed" in result.partial_discarded
    gets = [r for r in proxy.requests if r.method == "GET"]
    # The pinned HEAD got its 412; every GET after it is of the new object.
    assert next(r.method for r in proxy.requests) == "HEAD"
    assert all(r.headers.get("if-match") in (None, etag) for r in gets[1:])
    assert all(r.headers.get("if-match") == etag for r in gets[1:])
    assert leftovers(tmp_path) == []


async def test_listed_etag_that_differs_discards_the_partial(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, tmp_path / "k")
    new = payload(SIZE, seed=2)
    s3.put_object(Bucket=bucket, Key="k", Body=new)
    async with asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_prefix(bucket, "", tmp_path)]
    assert [r.ok for r in results] == [True]
    assert results[0].partial_discarded is not None
    assert results[0].reused_bytes == 0
    assert (tmp_path / "k").read_bytes() == new
    assert leftovers(tmp_path) == []


def _rewrite(journal: Path, edit: Any) -> None:
    """Apply ``edit`` to the journal's lines (bytes, without newlines)."""
    lines = journal.read_bytes().split(b"\n")[:-1]
    journal.write_bytes(b"".join(line + b"\n" for line in edit(lines)))


def _checked(value: Any) -> bytes:
    text = json.dumps(value, separators=(",", ":")).encode()
    return b"%s\t%08x" % (text, zlib.crc32(text))


def _extend_last_range(lines: list[bytes]) -> list[bytes]:
    """A hand edit that keeps each line's check right: the partial then claims bytes it
    never got, and only the checksum can tell."""
    value = json.loads(lines[-1].rpartition(b"\t")[0])
    value[1] = min(value[1] + CHUNK // 2, SIZE)
    return [*lines[:-1], _checked(value)]


def _header_edit(**changes: Any) -> Any:
    def edit(lines: list[bytes]) -> list[bytes]:
        header = json.loads(lines[0].rpartition(b"\t")[0])
        header.update(changes)
        return [_checked(header), *lines[1:]]

    return edit


JOURNAL_EDITS: dict[str, tuple[Any, bool]] = {
    # name: (edit, whether the partial is still used)
    "torn last line": (lambda lines: lines, True),  # the tail is cut below
    "garbage line": (lambda lines: [*lines[:2], b"garbage", *lines[2:]], False),
    "line edited without its check": (
        lambda lines: [lines[0], lines[1].replace(b"[", b"[1", 1), *lines[2:]],
        False,
    ),
    "header cut": (lambda lines: [lines[0][:-5], *lines[1:]], False),
    "etag changed": (_header_edit(etag='"0123456789abcdef0123456789abcdef"'), False),
    "foreign key": (_header_edit(key="other"), False),
    "size changed": (_header_edit(size=SIZE + 1), False),
    "empty": (lambda lines: [], False),
}


@pytest.mark.parametrize("name", sorted(JOURNAL_EDITS))
async def test_damaged_journal(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    name: str,
) -> None:
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    journal = tmp_path / ".k.asyncdl-journal"
    edit, used = JOURNAL_EDITS[name]
    _rewrite(journal, edit)
    if name == "torn last line":
        with journal.open("ab") as appended:
            appended.write(b'[1,2,{"CRC3')  # a crash in the middle of an append
        # Interrupted again, after more parts: their lines must not join the torn one.
        await interrupted(client, config, proxy, bucket, target, at=16 * CHUNK)
        found = partial_paths.lookup(target, RuntimeError)
        assert found is not None
        assert found.damaged is None
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.verified
    if used:
        assert result.partial_discarded is None
        assert result.reused_bytes > 0
    else:
        assert result.reused_bytes == 0
        assert result.partial_discarded is not None, name
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("fsync", [False, True])
async def test_range_claimed_by_hand_is_caught(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    fsync: bool,
) -> None:
    """A journal written with fsync=False is checked against the bytes read back: the
    claimed range is fetched again, the rest reused. One written with fsync=True is
    trusted (each line followed its bytes' fdatasync); the checksum catches it then."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    config = resumable(config, fsync=fsync)
    await interrupted(client, config, proxy, bucket, target)
    partial = tmp_path / ".k.asyncdl-partial"
    # Bytes the journal does not claim, zeroed; then a line claims some of them.
    with partial.open("r+b") as file:
        file.seek(12 * CHUNK)
        file.write(bytes(4 * CHUNK))
    _rewrite(tmp_path / ".k.asyncdl-journal", _extend_last_range)
    found = partial_paths.lookup(target, RuntimeError)
    assert found is not None
    claimed = found.ranges[-1]
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.verified
    if fsync:
        # The mismatch led to one fresh attempt, which took nothing from the partial.
        assert result.reused_bytes == 0
        assert ranged(proxy.requests) >= SIZE - CHUNK
    else:
        assert 0 < result.reused_bytes <= SIZE - (claimed[1] - claimed[0])
        assert ranged(proxy.requests) < SIZE - CHUNK
    assert leftovers(tmp_path) == []


async def test_read_only_directory_is_a_clear_error_and_nothing_changes(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    directory = tmp_path / "d"
    directory.mkdir()
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, directory / "k")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}
    assert sorted(before) == [".k.asyncdl-journal", ".k.asyncdl-partial"]
    with read_only(directory):
        async with asyncdl.Engine(client, config=config) as engine:
            with pytest.raises(asyncdl.InvalidRequestError, match="not writable"):
                await engine.download(bucket, "k", directory / "k")
    assert proxy.requests == []
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}
    assert after == before


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` made read-only: mode 0o555, or for root (whom a mode does not
    stop) the immutable attribute, where the file system has one."""
    directory.chmod(0o555)
    immutable = False
    try:
        if os.access(directory, os.W_OK):
            chattr = shutil.which("chattr")
            if chattr is None or subprocess.run([chattr, "+i", directory], check=False).returncode:
                # No skip: a run that cannot build the case says so, loudly.
                pytest.fail(
                    "running as root, and chattr +i failed: nothing here makes a directory "
                    "read-only for this test (run it as a user, or where chattr +i works)"
                )
            immutable = True
            assert not os.access(directory, os.W_OK)
        yield
    finally:
        if immutable:
            subprocess.run([shutil.which("chattr") or "chattr", "-i", directory], check=True)
        directory.chmod(0o755)


async def test_a_second_download_of_the_same_target_fails_at_once(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def hold_the_last_part(request: RequestRecord) -> Fault | None:
        if request.range is not None and request.range.startswith(f"bytes={16 * CHUNK}-"):
            loop.call_soon_threadsafe(started.set)
            return Fault(delay=1.0)
        return None

    proxy.rule = hold_the_last_part
    target = tmp_path / "k"
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        first = asyncio.create_task(engine.download(bucket, "k", target))
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(asyncdl.TargetBusyError, match="another download is writing"):
            await engine.download(bucket, "k", target)
        result = await first
    assert result.ok
    assert target.read_bytes() == data
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("listed", [False, True])
async def test_tiny_objects_never_make_a_journal(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    listed: bool,
) -> None:
    for number in range(5):
        s3.put_object(Bucket=bucket, Key=f"t{number}", Body=payload(100 + number))
    seen: set[str] = set()
    counts = []
    for resuming in (False, True):
        directory = tmp_path / str(resuming)
        directory.mkdir()
        proxy.reset_stats()
        # Record every name that appears in the directory while the downloads run.
        stop = asyncio.Event()

        async def watch(directory: Path = directory, stop: asyncio.Event = stop) -> None:
            while not stop.is_set():
                seen.update(os.listdir(directory))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        async with asyncdl.Engine(client, config=resumable(config, resume=resuming)) as engine:
            if listed:
                results = [r async for r in engine.download_prefix(bucket, "t", directory)]
            else:
                results = [
                    await engine.download(bucket, f"t{n}", directory / f"t{n}") for n in range(5)
                ]
        stop.set()
        await watcher
        assert all(r.ok and r.reused_bytes == 0 for r in results)
        counts.append(len(proxy.requests))
    assert counts[0] == counts[1]
    assert not [name for name in seen if "asyncdl-journal" in name or "partial" in name]


async def test_an_object_that_changes_mid_download_leaves_no_partial(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))

    def changed(request: RequestRecord) -> Fault | None:
        if request.range is not None and request.range.startswith(f"bytes={8 * CHUNK}-"):
            return Fault(status=412, error_code="PreconditionFailed")
        return None

    proxy.rule = changed
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        with pytest.raises(asyncdl.ObjectChangedError):
            await engine.download(bucket, "k", tmp_path / "k")
    assert os.listdir(tmp_path) == []


async def test_a_multipart_object_resumes_right(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    data = payload(2 * PART + 1000)
    put_multipart(s3, bucket, "k", data)  # CRC32, parts of PART bytes
    target = tmp_path / "k"
    config = resumable(config, chunk_size=1024 * 1024)
    # The second part fails, asked for as a part (moto since 5.2.6, as S3) or by ranges.
    proxy.rule = failing_range(PART + 4 * 1024 * 1024, part=2)
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(bucket, "k", target)
    assert leftovers(tmp_path) == [".k.asyncdl-journal", ".k.asyncdl-partial"]
    proxy.rule = None
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.partial_discarded is None
    assert leftovers(tmp_path) == []


def test_partial_names_stay_in_the_directory_and_never_look_like_targets(tmp_path: Path) -> None:
    long_a = "a" * 250 + "1"
    long_b = "a" * 250 + "2"
    pa, ja = partial_paths.paths_for(tmp_path / long_a)
    pb, jb = partial_paths.paths_for(tmp_path / long_b)
    assert len({pa, ja, pb, jb}) == 4
    for path in (pa, ja, pb, jb):
        assert path.parent == tmp_path
        assert path.name.startswith(".")
        assert len(os.fsencode(path.name)) <= 255
    partial, journal = partial_paths.paths_for(tmp_path / "x.bin")
    assert (partial.name, journal.name) == (".x.bin.asyncdl-partial", ".x.bin.asyncdl-journal")
    # Not temp files: the Dask sweep (and anything else that removes those) keeps them.
    for name in (partial.name, journal.name):
        assert not is_temp_file(name)
        assert not is_temp_file(name, run="0123abcd")


def refused_head(request: RequestRecord) -> Fault | None:
    """A bucket policy that allows GET but not HEAD."""
    return Fault(status=403, error_code="AccessDenied") if request.method == "HEAD" else None


@pytest.mark.parametrize("changed", [False, True])
async def test_a_refused_head_confirms_the_partial_with_a_pinned_one_byte_get(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    changed: bool,
) -> None:
    data = payload(SIZE)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")["ETag"]
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    if changed:
        data = payload(SIZE, seed=3)
        s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = refused_head
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    probe = next(r for r in proxy.requests if r.method == "GET")
    assert (probe.range, probe.headers.get("if-match")) == ("bytes=0-0", etag)
    if changed:
        assert result.reused_bytes == 0
        assert result.partial_discarded is not None
        assert "changed" in result.partial_discarded
    else:
        assert result.partial_discarded is None
        assert result.reused_bytes > 0
        # No HEAD could bring the checksum, and the result says so.
        assert not result.verified
        assert result.unverified_reason is not None
        assert "HEAD" in result.unverified_reason
    assert leftovers(tmp_path) == []
