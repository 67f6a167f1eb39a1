"""A resumed download's files must be its user's alone: a partial or journal another
user owns, that others may write, or that is a hard link to some other file is
never adopted, never written through and never published; its name is removed (the
file it names is left alone) and the download starts fresh. A name that cannot be
used (a directory) is a clear error that leaves nothing new behind."""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import journal, partial_paths
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import payload
from ..transfer.test_resume import SIZE, interrupted, leftovers, resumable

#: Another user's, as a test running as root makes them.
OTHER = 1001


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plant_pair(
    target: Path, bucket: str, etag: str, content: bytes, crc32: int, *, fsync: bool
) -> None:
    """A partial holding ``content`` and a journal that claims all of it, ``crc32``
    recorded (the real object's, as anyone can compute it)."""
    partial, path = partial_paths.paths_for(target)
    partial.write_bytes(content)
    header = journal.Header(bucket, "k", None, etag, SIZE, target.name)
    path.write_bytes(journal.content(header, [(0, SIZE, {"CRC32": crc32})], fsync=fsync))


def make_foreign(path: Path, how: str) -> None:
    if how == "other user":
        if os.geteuid() != 0:
            pytest.skip("making a file another user's needs root")
        os.chown(path, OTHER, OTHER)
        path.chmod(0o666)
    else:  # ours, but others may write it
        path.chmod(0o666)


@pytest.mark.parametrize("how", ["other user", "writable by others"])
@pytest.mark.parametrize("fsync", [True, False], ids=["fsync-claimed", "no-fsync"])
@pytest.mark.parametrize("which", ["both", "journal", "partial"])
async def test_a_planted_pair_is_never_adopted_nor_published(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    tmp_path: Path,
    proxy: TcpProxy,
    how: str,
    fsync: bool,
    which: str,
) -> None:
    """Another user plants a partial and a journal of the real object: with "fsync":
    true the bytes would be trusted unread; without, their file (theirs, mode 0666)
    would be published as the target."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    etag = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "k"
    # With fsync claimed, bytes of the planter's choice; without, the object's own (the
    # read-back check passes them): either way, the file must not be theirs.
    content = (b"#!/bin/sh\necho pwned\n" + bytes(SIZE))[:SIZE] if fsync else data
    plant_pair(target, bucket, etag, content, zlib.crc32(data), fsync=fsync)
    partial, path = partial_paths.paths_for(target)
    for name in (partial, path):
        if which in ("both", name.name.rpartition("-")[2]):
            make_foreign(name, how)
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data, "the planted partial's bytes were published"
    st = target.stat()
    assert st.st_uid == os.geteuid(), "another user's file was published as the target"
    assert st.st_mode & 0o777 == 0o666 & ~umask()
    assert result.reused_bytes == 0
    assert result.partial_discarded is not None
    assert result.verified
    assert leftovers(shared) == []


async def test_new_partial_and_journal_are_this_users_alone(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """Made 0o600 whatever the umask (else, under umask 002, every partial would be
    group-writable, not ours); the published file still gets the umask's mode."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    old = os.umask(0o002)
    try:
        await interrupted(client, resumable(config), proxy, bucket, target)
        for path in partial_paths.paths_for(target):
            assert path.stat().st_mode & 0o777 == 0o600, path
        async with asyncdl.Engine(client, config=resumable(config)) as engine:
            result = await engine.download(bucket, "k", target)
    finally:
        os.umask(old)
    assert result.reused_bytes > 0, "its own partial was not adopted under umask 002"
    assert target.read_bytes() == data
    assert target.stat().st_mode & 0o777 == 0o664


@pytest.mark.parametrize("name", ["partial", "journal"])
async def test_a_hard_link_at_a_name_is_never_written_through(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    name: str,
) -> None:
    """Between two runs, the partial's or journal's name made a hard link to a file
    elsewhere (same size and content: everything else would accept it)."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    planted = partial_paths.paths_for(target)[name == "journal"]
    victim = tmp_path / "victim"
    original = planted.read_bytes()
    victim.write_bytes(original)
    planted.unlink()
    os.link(victim, planted)
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert victim.read_bytes() == original, "the download wrote through a hard link"
    assert os.stat(victim).st_nlink == 1
    assert target.read_bytes() == data
    assert result.reused_bytes == 0
    assert result.partial_discarded is not None
    assert leftovers(shared) == []


async def test_a_hard_link_planted_during_the_first_get_is_not_written(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """After the lookup found no journal, while the first GET is on its way: the
    journal's name is made a hard link to a file elsewhere."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "k"
    victim = tmp_path / "victim.db"
    original = b"IMPORTANT DATABASE CONTENT " * 1000
    victim.write_bytes(original)
    _, path = partial_paths.paths_for(target)
    planted: list[bool] = []

    def plant() -> None:
        if not planted:
            os.link(victim, path)
            planted.append(True)

    def rule(request: RequestRecord) -> Fault | None:
        return Fault(before=plant) if request.method == "GET" and not planted else None

    proxy.rule = rule
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        result = await engine.download(bucket, "k", target)
    assert planted
    assert victim.read_bytes() == original, "the journal was written into a hard link"
    assert target.read_bytes() == data
    assert result.verified
    assert leftovers(shared) == []


@pytest.mark.parametrize("name", ["partial", "journal", "new journal"])
async def test_a_directory_at_a_name_is_a_clear_error_leaving_nothing_new(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    tmp_path: Path,
    name: str,
) -> None:
    """Someone's directory is never removed: the download fails, saying which name and
    what to do, and leaves no journal or partial behind."""
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    target = tmp_path / "k"
    partial, path = partial_paths.paths_for(target)
    planted = {"partial": partial, "journal": path}.get(name) or partial_paths.compaction_path(path)
    planted.mkdir()
    (planted / "theirs").write_bytes(b"keep")
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        with pytest.raises(asyncdl.DownloadError) as caught:
            await engine.download(bucket, "k", target)
    message = str(caught.value)
    assert str(planted) in message
    assert "directory" in message
    assert "resume" in message
    assert (planted / "theirs").read_bytes() == b"keep"
    assert leftovers(tmp_path) == [planted.name]


async def test_a_compaction_killed_before_its_rename_leaves_nothing_after_the_next_run(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """The compacted journal is written under a name of its own, then renamed over the
    journal: a kill in between leaves that file. The next download of the target (which
    holds the journal's lock) removes it."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    _, path = partial_paths.paths_for(target)
    stale = partial_paths.compaction_path(path)
    stale.write_bytes(path.read_bytes()[:100])
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.reused_bytes > 0
    assert leftovers(tmp_path) == []


async def test_another_users_running_download_is_left_alone(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    tmp_path: Path,
) -> None:
    """Their journal is not ours to trust, but it is locked: their download runs and
    publishes by these names, so they are not removed from under it."""
    if os.geteuid() != 0:
        pytest.skip("making a file another user's needs root")
    import fcntl  # noqa: PLC0415 - POSIX only, as the lock

    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "k"
    plant_pair(target, bucket, '"e"', data, zlib.crc32(data), fsync=False)
    names = partial_paths.paths_for(target)
    for name in names:
        os.chown(name, OTHER, OTHER)
    fd = os.open(names[1], os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        async with asyncdl.Engine(client, config=resumable(config)) as engine:
            with pytest.raises(asyncdl.TargetBusyError):
                await engine.download(bucket, "k", target)
    finally:
        os.close(fd)
    assert [name.stat().st_uid for name in names] == [OTHER, OTHER]
    assert not target.exists()
