"""What the fsspec tests against an adversary share: a file system on the recording
proxy with small chunks, files under a directory, and links given to another user."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncdl.fsspec import AsyncdlFileSystem
from asyncdl.testing.tcp_proxy import TcpProxy

CONFIG = {"chunk_size": 64 * 1024, "max_concurrency": 4, "backoff_base": 0.01}
#: Another user, who may own a link in a shared destination (the tests run as root,
#: which may give a link away).
OTHER = 12345
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives links away: needs root")


@pytest.fixture(autouse=True)
def cached_file_systems_closed() -> Iterator[None]:
    """Close every file system fsspec cached during the test. A reader makes one; so
    does unpickling a file (fsspec's ``make_instance`` drops ``skip_instance_cache``),
    and the cache keeps it, its engine open, for the rest of the worker's tests."""
    yield
    for made in list(AsyncdlFileSystem._cache.values()):
        if not made.asynchronous:
            made.close()
    AsyncdlFileSystem.clear_instance_cache()


@pytest.fixture
def small_fs(proxy: TcpProxy) -> Iterator[AsyncdlFileSystem]:
    """A file system of its own (no instance cache) through the proxy, ``CONFIG``'s."""
    made = AsyncdlFileSystem(endpoint_url=proxy.url, config=CONFIG, skip_instance_cache=True)
    yield made
    made.close()


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def link(at: Path, to: Path, *, owner: int) -> None:
    at.symlink_to(to, target_is_directory=True)
    os.chown(at, owner, owner, follow_symlinks=False)
