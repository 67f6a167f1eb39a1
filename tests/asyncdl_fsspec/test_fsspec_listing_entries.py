"""The file system's listings given entries no S3 sends (no Size, a Size no file can
have): ``ls``, ``info`` and ``find`` fail with what the listing gave, not a
``KeyError`` or a size that is no size."""

from __future__ import annotations

import pytest

import asyncdl
from asyncdl.fsspec import AsyncdlFileSystem
from asyncdl.testing.tcp_proxy import TcpProxy

from ..bulk.test_listing_entries_hostile import answering_listings, entry


@pytest.mark.parametrize(
    ("size", "said"),
    [(None, "the listing gave it no Size"), ("1" + "0" * 30, "a Size of 1000")],
)
@pytest.mark.parametrize("call", ["ls", "find"])
def test_a_listed_entry_without_a_size_fails_the_listing(
    bucket: str,
    proxy: TcpProxy,
    small_fs: AsyncdlFileSystem,
    size: str | None,
    said: str,
    call: str,
) -> None:
    proxy.rule = answering_listings(bucket, entry("p/a", "5"), entry("p/b", size))
    with pytest.raises(asyncdl.DownloadError, match=said):
        getattr(small_fs, call)(f"{bucket}/p/")
