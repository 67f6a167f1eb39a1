"""Links inside a destination that ``cp -r`` and ``sync`` write into: a link is
followed only when this user owns it or the owner of the directory holding it does
(the kernel's ``protected_symlinks`` rule); any other is that object's error. The
directories are held open from the decision to the write, so a directory swapped
for a link mid-run takes nothing outside. Real links, real ownership (the tests run
as root, which may give a link away), moto through the recording proxy."""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import asyncdl
from asyncdl._files import file_records
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import payload

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives links away: needs root")

#: Other users: the link's owner, and another directory's.
OTHER, ANOTHER = 12345, 23456
#: A small object (one write), and one over ``write_size`` (1 MiB): a resumable
#: download's partial file and journal.
SIZES = {"small": 3000, "resumable": (1 << 20) + 4096}
VICTIM = b"a file outside the destination"

_names = itertools.count()


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def run(proxy: TcpProxy, command: str, *args: str) -> Result:
    extra = ["-r"] if command == "cp" else []
    return CliRunner().invoke(cli, [command, *extra, "--endpoint-url", proxy.url, *args])


def new_bucket(s3: Any, objects: dict[str, bytes]) -> str:
    name = f"links-{next(_names)}"
    s3.create_bucket(Bucket=name)
    for key, body in objects.items():
        s3.put_object(Bucket=name, Key=key, Body=body)
    return name


def link(at: Path, to: Path, *, owner: int) -> None:
    at.symlink_to(to, target_is_directory=True)
    os.chown(at, owner, owner, follow_symlinks=False)


def outside(tmp_path: Path) -> Path:
    """A directory outside the destination, holding a file a key would land on."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.bin").write_bytes(VICTIM)
    return elsewhere


def untouched(elsewhere: Path) -> None:
    assert sorted(os.listdir(elsewhere)) == ["a.bin"]
    assert (elsewhere / "a.bin").read_bytes() == VICTIM
    with pytest.raises(OSError, match="No data available"):
        os.getxattr(elsewhere / "a.bin", file_records.XATTR)


@pytest.mark.parametrize("command", ["cp", "sync"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dir_owner", ["me", "another"])
def test_another_users_link_is_refused_as_that_objects_error(
    command: str, size: str, dir_owner: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    body = payload(SIZES[size])
    name = new_bucket(s3, {"p/sub/a.bin": body, "p/ok.txt": b"fine"})
    dest, elsewhere = tmp_path / "dest", outside(tmp_path)
    holder = dest if dir_owner == "me" else dest / "shared"
    holder.mkdir(parents=True)
    if dir_owner == "another":
        os.chown(holder, ANOTHER, ANOTHER)
    link(holder / "sub", elsewhere, owner=OTHER)
    where = "" if dir_owner == "me" else "shared"
    target = dest / where if where else dest

    result = run(proxy, command, f"s3://{name}/p", str(target))

    assert result.exit_code == 1, result.output
    untouched(elsewhere)
    assert (target / "ok.txt").read_bytes() == b"fine"  # the other objects go on
    assert str(holder / "sub") in result.output
    assert "symbolic link" in result.output
    assert f"owned by uid {OTHER}" in result.output


@pytest.mark.parametrize("command", ["cp", "sync"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("whose", ["mine", "the directory owner's"])
def test_a_link_of_this_user_or_of_its_directorys_owner_is_followed(
    command: str, size: str, whose: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    body = payload(SIZES[size], seed=1)
    name = new_bucket(s3, {"p/raw/a.bin": body})
    dest, disk = tmp_path / "data", tmp_path / "big-disk"
    dest.mkdir()
    disk.mkdir()
    if whose == "mine":
        link(dest / "raw", disk, owner=os.geteuid())
    else:
        os.chown(dest, OTHER, OTHER)
        link(dest / "raw", disk, owner=OTHER)

    result = run(proxy, command, f"s3://{name}/p", str(dest))

    assert result.exit_code == 0, result.output
    assert (disk / "a.bin").read_bytes() == body
    assert sorted(os.listdir(disk)) == ["a.bin"]  # no partial, journal or temp file left
    if command == "sync":
        assert os.getxattr(disk / "a.bin", file_records.XATTR)
        again = run(proxy, "sync", f"s3://{name}/p", str(dest))
        assert again.exit_code == 0, again.output
        assert "download:" not in again.stdout  # its record vouches for it there


@pytest.mark.parametrize("command", ["cp", "sync"])
@pytest.mark.parametrize("size", SIZES)
def test_a_directory_swapped_for_a_link_mid_run_takes_nothing_outside(
    command: str, size: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    body = payload(SIZES[size], seed=2)
    name = new_bucket(s3, {"p/sub/a.bin": body})
    dest, elsewhere = tmp_path / "dest", outside(tmp_path)
    (dest / "sub").mkdir(parents=True)

    def swap() -> None:
        # After the listing made its decision about sub/, before the object's bytes.
        os.rename(dest / "sub", dest / "moved")
        link(dest / "sub", elsewhere, owner=OTHER)

    swaps = iter([Fault(before=swap)])

    def rule(request: RequestRecord) -> Fault | None:
        return (
            next(swaps, None) if request.method == "GET" and "sub/a.bin" in request.path else None
        )

    proxy.rule = rule

    result = run(proxy, command, f"s3://{name}/p", str(dest))

    assert result.exit_code == 0, result.output
    untouched(elsewhere)
    assert (dest / "moved/a.bin").read_bytes() == body
    assert sorted(os.listdir(dest / "moved")) == ["a.bin"]
    if command == "sync":
        assert os.getxattr(dest / "moved/a.bin", file_records.XATTR)


def open_under(root: Path) -> list[str]:
    """What this process holds open under ``root`` (the engine's sockets aside)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(root)):
                held.append(fd)
    return held


async def test_held_directories_are_let_go(s3: Any, engine: asyncdl.Engine, tmp_path: Path) -> None:
    # More directories than are kept open between their objects: each is closed once
    # its objects are done, none is left open after the run.
    name = new_bucket(s3, {f"p/d{n:02}/{m}.txt": b"x" for n in range(60) for m in range(2)})
    results = engine.download_prefix(name, "p", tmp_path / "dest")
    count = 0
    async for result in results:
        assert result.ok, result.error
        count += 1
        # The directories of the objects in flight, the root, and those kept: bounded.
        assert len(open_under(tmp_path)) <= 40

    assert count == 120
    del result, results
    gc.collect()
    assert open_under(tmp_path) == []


async def test_the_library_refuses_the_link_too(
    s3: Any, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    name = new_bucket(s3, {"p/sub/a.bin": b"data", "p/ok.txt": b"fine"})
    dest, elsewhere = tmp_path / "dest", outside(tmp_path)
    dest.mkdir()
    link(dest / "sub", elsewhere, owner=OTHER)

    results = {r.key: r async for r in engine.download_prefix(name, "p", dest)}

    untouched(elsewhere)
    assert results["p/ok.txt"].ok
    error = results["p/sub/a.bin"].error
    assert isinstance(error, asyncdl.InvalidRequestError)
    assert "symbolic link" in str(error)
