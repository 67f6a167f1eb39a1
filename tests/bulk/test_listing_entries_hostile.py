"""Listing entries no S3 sends: a Size no file can have (10**30, 2**63, negative), no
Size, a Size that is no number, no Key. Each is a ``DownloadError`` that says what
the server sent, never a bare ``OverflowError``/``KeyError``/``ValueError``. An entry
that names its key fails that object alone: the listing's other objects are
downloaded and nothing of it is written. One that names no key, or a page that
cannot be read, fails the listing: a listing that cannot name each of its objects is
not whole (``sync --delete`` must not act on it). Against moto via the proxy, whose
rule answers the listing requests in moto's place.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._bulk.filters import compile_filters
from asyncdl._bulk.listing import list_ahead, list_prefix
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import temp_files

BODY = b"hello"
ETAG = f"&quot;{hashlib.md5(BODY).hexdigest()}&quot;"  # S3's ETag of a single-part object


def entry(key: str | None, size: str | None) -> str:
    """One ``<Contents>``; ``None`` leaves its Key or Size out."""
    named = "" if key is None else f"<Key>{key}</Key>"
    sized = "" if size is None else f"<Size>{size}</Size>"
    return (
        f"<Contents>{named}<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        f"<ETag>{ETAG}</ETag>{sized}<StorageClass>STANDARD</StorageClass></Contents>"
    )


def answering_listings(bucket: str, *entries: str) -> Callable[[RequestRecord], Fault | None]:
    """A proxy rule: each listing request gets one page of ``entries``; the rest pass."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{bucket}</Name><Prefix>p/</Prefix><KeyCount>{len(entries)}</KeyCount>"
        f"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{''.join(entries)}"
        "</ListBucketResult>"
    ).encode()
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}

    def rule(request: RequestRecord) -> Fault | None:
        return Fault(reply=(200, headers, body)) if "list-type=2" in request.path else None

    return rule


def object_gets(proxy: TcpProxy) -> list[str]:
    return [
        r.path for r in proxy.requests if r.method in ("GET", "HEAD") and "list-type" not in r.path
    ]


async def drain(items: AsyncIterator[object]) -> None:
    async for _ in items:
        pass


#: Sizes no file can have, each as the server sends it.
NO_FILE_SIZES = ["1" + "0" * 30, str(2**63), "-5"]


@pytest.mark.parametrize("size", NO_FILE_SIZES)
async def test_a_size_no_file_can_have_fails_that_object_alone(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, size: str
) -> None:
    for key in ("p/a", "p/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=BODY)
    proxy.rule = answering_listings(bucket, entry("p/a", size), entry("p/b", "5"))
    dest = tmp_path / "d"
    results = {r.key: r async for r in engine.download_prefix(bucket, "p/", dest)}
    assert results["p/b"].ok, results["p/b"].error
    assert (dest / "b").read_bytes() == BODY
    error = results["p/a"].error
    assert isinstance(error, asyncdl.DownloadError)
    assert (error.bucket, error.key) == (bucket, "p/a")
    assert f"the listing gave it a Size of {size}" in error.message
    assert not (dest / "a").exists()
    assert temp_files(dest) == []
    assert not any("/p/a" in path for path in object_gets(proxy))  # nothing asked of it


async def test_an_entry_without_a_size_fails_that_object_alone(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key in ("p/a", "p/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=BODY)
    proxy.rule = answering_listings(bucket, entry("p/a", None), entry("p/b", "5"))
    dest = tmp_path / "d"
    results = {r.key: r async for r in engine.download_prefix(bucket, "p/", dest)}
    assert results["p/b"].ok, results["p/b"].error
    error = results["p/a"].error
    assert isinstance(error, asyncdl.DownloadError)
    assert "the listing gave it no Size" in error.message
    assert sorted(os.listdir(dest)) == ["b"]


@pytest.mark.parametrize("reader", ["list_prefix", "list_ahead"])
@pytest.mark.parametrize("size", [*NO_FILE_SIZES, None])
async def test_both_listing_readers_refuse_such_an_entry_alike(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, reader: str, size: str | None
) -> None:
    # list_prefix is what sync --dry-run reads: it says what the run would refuse.
    proxy.rule = answering_listings(bucket, entry("p/a", size), entry("p/b", "5"))
    read = list_prefix if reader == "list_prefix" else list_ahead
    items = read(engine.list_pages(bucket, "p/"), bucket=bucket, prefix="p/", filters=None)
    async with contextlib.aclosing(items):
        listed = {item.key: item async for item in items}
    said = "no Size" if size is None else f"a Size of {size}"
    refused = listed["p/a"]
    assert (refused.relative, refused.size) == (None, 0)
    assert refused.refusal is not None
    assert f"the listing gave it {said}" in refused.refusal
    assert (listed["p/b"].size, listed["p/b"].refusal) == (5, None)
    assert listed["p/b"].relative is not None


@pytest.mark.parametrize("reader", ["list_prefix", "list_ahead"])
async def test_filters_leave_out_a_refused_entry_too(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, reader: str
) -> None:
    proxy.rule = answering_listings(bucket, entry("p/a.tmp", None), entry("p/b", "5"))
    read = list_prefix if reader == "list_prefix" else list_ahead
    kept = compile_filters([("exclude", "*.tmp")])
    items = read(engine.list_pages(bucket, "p/"), bucket=bucket, prefix="p/", filters=kept)
    async with contextlib.aclosing(items):
        assert [item.key async for item in items] == ["p/b"]


@pytest.mark.parametrize("reader", ["download_prefix", "list_prefix"])
async def test_an_entry_without_a_key_fails_the_listing(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, tmp_path: Path, reader: str
) -> None:
    proxy.rule = answering_listings(bucket, entry(None, "5"), entry("p/b", "5"))
    if reader == "download_prefix":
        items: Any = engine.download_prefix(bucket, "p/", tmp_path / "d")
    else:
        pages = engine.list_pages(bucket, "p/")
        items = list_prefix(pages, bucket=bucket, prefix="p/", filters=None)
    with pytest.raises(asyncdl.DownloadError) as raised:
        await drain(items)
    error = raised.value
    assert type(error) is asyncdl.DownloadError
    assert (error.bucket, error.key) == (bucket, "p/")
    assert "the listing has an entry without a Key" in error.message
    assert "Size 5" in error.message


async def test_a_page_whose_size_is_no_number_fails_the_listing_saying_so(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # botocore reads the page's numbers as it parses it: no entry of it can be read.
    proxy.rule = answering_listings(bucket, entry("p/a", "abc"), entry("p/b", "5"))
    with pytest.raises(asyncdl.DownloadError) as raised:
        await drain(engine.download_prefix(bucket, "p/", tmp_path / "d"))
    error = raised.value
    assert (error.bucket, error.key) == (bucket, "p/")
    assert "a listing page gives 'abc' where a number belongs" in error.message
    assert "unexpected" not in error.message
    assert "invalid literal" not in error.message


async def test_a_listed_size_the_disk_cannot_hold_is_named_in_the_error(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 5 TiB, S3's largest object: a size to try, and the disk's refusal must say it.
    size = 5 * 1024**4
    s3.put_object(Bucket=bucket, Key="p/a", Body=BODY)
    proxy.rule = answering_listings(bucket, entry("p/a", str(size)))

    def full(*args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    dest = tmp_path / "d"
    [result] = [r async for r in engine.download_prefix(bucket, "p/", dest)]
    assert result.error is not None
    assert "No space left on device" in result.error.message
    assert f"{size} bytes" in result.error.message
    assert os.listdir(dest) == []


async def test_a_key_listed_twice_whose_first_copy_fails_settles_its_place(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # p/a twice: the first copy's GET is refused, the second lands (later). Its place is
    # a file on disk then, which the refusal of p/a/b, listed after, says: not that
    # p/a's download still holds it (both copies were named by one target).
    fillers = [f"p/c{i:02}" for i in range(20)]
    for key in ("p/a", *fillers):
        s3.put_object(Bucket=bucket, Key=key, Body=BODY)
    listing = answering_listings(
        bucket, *(entry(key, "5") for key in ("p/a", "p/a", *fillers, "p/a/b"))
    )
    gets_of_a = 0

    def rule(request: RequestRecord) -> Fault | None:
        nonlocal gets_of_a
        fault = listing(request)
        if fault is not None or request.method != "GET":
            return fault
        if request.path.split("?")[0] == f"/{bucket}/p/a":
            gets_of_a += 1
            return Fault(status=403, error_code="AccessDenied") if gets_of_a == 1 else None
        return Fault(delay=0.1)  # the fillers: p/a/b is placed after both copies settle

    proxy.rule = rule
    dest = tmp_path / "d"
    config = asyncdl.TransferConfig(max_concurrency=2, backoff_base=0.001)
    async with asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_prefix(bucket, "p/", dest)]
    copies = [r for r in results if r.key == "p/a"]
    assert sorted(r.ok for r in copies) == [False, True]
    assert (dest / "a").read_bytes() == BODY
    (below,) = [r for r in results if r.key == "p/a/b"]
    assert below.error is not None
    assert "is already a file (key 'p/a')" not in below.error.message
    assert "cannot create directory" in below.error.message, below.error.message
