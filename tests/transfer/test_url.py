"""Downloads from presigned S3 URLs (and any HTTP(S) URL that honours Range):
``engine.download_url``, ``engine.stream_url`` and ``asyncdl cp URL``, against moto
through the recording proxy.

moto serves a presigned URL but checks neither its signature nor its expiry; the
proxy plays S3's part for expiry (``expired_as_s3``): past ``X-Amz-Date`` +
``X-Amz-Expires`` it answers 403 AccessDenied "Request has expired", as S3 does.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import contextlib
import gc
import logging
import os
import time
import traceback
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import boto3
import pytest
from botocore.config import Config
from click.testing import CliRunner

import asyncdl
from asyncdl._transfer.verify import NO_URL_CHECKSUM
from asyncdl.cli import cli
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, payload, temp_files

_EXPIRED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)


def presigner(proxy: TcpProxy) -> Any:
    """A boto3 client whose presigned URLs point at the proxy (SigV4, as AWS signs)."""
    return boto3.client(
        "s3",
        endpoint_url=proxy.url,
        region_name="us-east-1",
        config=Config(signature_version="s3v4"),
    )


def presign(proxy: TcpProxy, bucket: str, key: str, expires: int = 600, **params: Any) -> str:
    url: str = presigner(proxy).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key, **params}, ExpiresIn=expires
    )
    assert "X-Amz-Signature=" in url
    return url


def expired_as_s3(request: RequestRecord) -> Fault | None:
    """S3's answer to a presigned URL past its ``X-Amz-Date`` + ``X-Amz-Expires``."""
    query = parse_qs(urlsplit(request.path).query)
    if "X-Amz-Date" not in query:
        return None
    signed = calendar.timegm(time.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ"))
    if time.time() <= signed + int(query["X-Amz-Expires"][0]):
        return None
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(_EXPIRED))}
    return Fault(reply=(403, headers, _EXPIRED))


def signature(url: str) -> str:
    return parse_qs(urlsplit(url).query)["X-Amz-Signature"][0]


def shown(url: str) -> str:
    return url.split("?", 1)[0]


def ranged_bytes(requests: list[RequestRecord]) -> int:
    total = 0
    for request in requests:
        first, last = request.headers["range"].removeprefix("bytes=").split("-")
        total += int(last) - int(first) + 1
    return total


async def test_a_presigned_url_downloads_in_parallel_ranges_pinned_to_one_etag(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(5 * CHUNK + 123)
    key = "dir/a file+name.bin"
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    url = presign(proxy, bucket, key)
    target = tmp_path / "out.bin"

    result = await engine.download_url(url, target)

    assert target.read_bytes() == body
    assert (result.bucket, result.key) == ("", shown(url))
    assert (result.size, result.strategy, result.requests) == (len(body), "get-first", 6)
    gets = proxy.requests
    assert [r.method for r in gets] == ["GET"] * 6
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    assert result.etag == etag
    assert "if-match" not in gets[0].headers
    assert all(r.headers["if-match"] == etag for r in gets[1:])
    # Sent as given (the signature covers the path and query byte for byte), unsigned.
    assert all(r.path == url[len(proxy.url) :] for r in gets)
    assert not any("authorization" in r.headers for r in gets)
    assert ranged_bytes(gets) == len(body)
    assert (result.verified, result.unverified_reason) == (False, NO_URL_CHECKSUM)
    assert temp_files(tmp_path) == []
    stats = engine.stats()
    assert (stats.gets.ok, stats.heads.ok, stats.objects_done) == (6, 0, 1)


async def test_an_expired_url_is_access_denied_and_nothing_is_written(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * CHUNK))
    url = presign(proxy, bucket, "k", expires=1)
    proxy.rule = expired_as_s3
    await asyncio.sleep(1.5)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, backoff_base=0.01, resume=True)
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.AccessDeniedError) as raised:
            await engine.download_url(url, tmp_path / "out")
    assert "Request has expired" in str(raised.value)
    assert str(raised.value).startswith(shown(url) + ": ")
    assert signature(url) not in str(raised.value)
    assert len(proxy.requests) == 1  # a 403 is not retried
    assert os.listdir(tmp_path) == []


async def test_a_url_that_expires_midway_resumes_with_a_fresh_one(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    """The partial file is the object's, not the URL's: a new presigned URL (another
    signature, another expiry) continues it, fetching only what is missing."""
    body = payload(12 * CHUNK + 7)
    s3.put_object(Bucket=bucket, Key="big", Body=body)
    config = asyncdl.TransferConfig(
        chunk_size=CHUNK, max_concurrency=2, write_size=CHUNK, backoff_base=0.01, resume=True
    )
    old = presign(proxy, bucket, "big", expires=600)
    sent = 0

    def expire_after_five(request: RequestRecord) -> Fault | None:
        nonlocal sent
        sent += 1
        if sent > 5:
            headers = {"Content-Type": "application/xml", "Content-Length": str(len(_EXPIRED))}
            return Fault(reply=(403, headers, _EXPIRED))
        return None

    target = tmp_path / "big.bin"
    proxy.rule = expire_after_five
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download_url(old, target)
    assert not target.exists()
    assert [name for name in os.listdir(tmp_path) if name.endswith("-partial")] == [
        ".big.bin.asyncdl-partial"
    ]

    proxy.rule = None
    proxy.reset_stats()
    fresh = presign(proxy, bucket, "big", expires=900)  # another expiry: another signature
    assert signature(fresh) != signature(old)
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download_url(fresh, target)
    assert target.read_bytes() == body
    assert result.reused_bytes >= 4 * CHUNK, result
    assert result.partial_discarded is None
    # The probe of the first byte (it says the object is still the same), then the gaps.
    # Only the fresh URL's requests count: one the first engine sent as it failed can
    # reach the proxy after its counts were reset.
    ours = [r for r in proxy.requests if signature(r.path) == signature(fresh)]
    others = [r for r in proxy.requests if r not in ours]
    assert all(signature(r.path) == signature(old) for r in others), others
    asked = [(r.method, r.headers.get("range")) for r in ours]
    assert ours[0].range == "bytes=0-0", asked
    assert ranged_bytes(ours) <= len(body) - result.reused_bytes + 1, (asked, result)
    assert all(r.headers.get("if-match") == result.etag for r in ours)
    assert os.listdir(tmp_path) == ["big.bin"]


async def test_a_cut_range_is_retried_from_where_it_broke(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(4 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    url = presign(proxy, bucket, "k")
    cut: list[RequestRecord] = []

    def cut_second_part(request: RequestRecord) -> Fault | None:
        if request.range == f"bytes={CHUNK}-{2 * CHUNK - 1}" and not cut:
            cut.append(request)
            return Fault(cut_after=1000)
        return None

    proxy.rule = cut_second_part
    result = await engine.download_url(url, tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == body
    assert cut
    resumed = [
        r.range for r in proxy.requests if r.range == f"bytes={CHUNK + 1000}-{2 * CHUNK - 1}"
    ]
    assert resumed, [r.range for r in proxy.requests]
    assert result.requests == 5


async def test_an_object_replaced_midway_fails_and_leaves_the_target_as_it_was(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(4 * CHUNK))
    url = presign(proxy, bucket, "k")
    target = tmp_path / "k"
    target.write_bytes(b"the old file")

    def replace(request: RequestRecord) -> Fault | None:
        if request.range == f"bytes={CHUNK}-{2 * CHUNK - 1}":
            return Fault(before=lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"new"))
        return None

    proxy.rule = replace
    with pytest.raises(asyncdl.ObjectChangedError):
        await engine.download_url(url, target)
    assert target.read_bytes() == b"the old file"
    assert temp_files(tmp_path) == []


async def test_a_checksum_is_verified_when_given_or_when_the_answer_carries_one(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=body, ChecksumAlgorithm="CRC32")
    crc = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    url = presign(proxy, bucket, "k")

    given = await engine.download_url(url, tmp_path / "given", checksum=f"CRC32:{crc}")
    assert (given.verified, given.checksum) == (True, f"CRC32:{crc}")

    wrong = base64.b64encode(b"\0\0\0\0").decode()
    with pytest.raises(asyncdl.ChecksumError):
        await engine.download_url(url, tmp_path / "wrong", checksum=f"CRC32:{wrong}")
    assert not (tmp_path / "wrong").exists()

    # A server that ignores Range answers with the whole object, and S3 sends a whole
    # object's checksum when asked (a URL presigned with ChecksumMode asks in its query;
    # moto reads only the header, which the proxy adds).
    proxy.rule = lambda request: Fault(headers={"range": None, "x-amz-checksum-mode": "ENABLED"})
    carried = await engine.download_url(url, tmp_path / "carried")
    assert (tmp_path / "carried").read_bytes() == body
    assert (carried.verified, carried.checksum, carried.requests) == (True, f"CRC32:{crc}", 1)

    small = payload(CHUNK // 2)
    s3.put_object(Bucket=bucket, Key="small", Body=small, ChecksumAlgorithm="CRC32")
    proxy.rule = lambda request: Fault(
        headers={"range": None, "x-amz-checksum-mode": "ENABLED"}, corrupt_at=100
    )
    with pytest.raises(asyncdl.ChecksumError, match="mismatch"):
        await engine.download_url(presign(proxy, bucket, "small"), tmp_path / "corrupt")
    assert not (tmp_path / "corrupt").exists()
    assert temp_files(tmp_path) == []


async def test_validate_required_refuses_what_a_url_cannot_verify(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * CHUNK))
    url = presign(proxy, bucket, "k")
    config = asyncdl.TransferConfig(chunk_size=CHUNK, validate="required")
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.ChecksumError, match="cannot be asked for it with a HEAD"):
            await engine.download_url(url, tmp_path / "k")
    assert os.listdir(tmp_path) == []
    assert {r.method for r in proxy.requests} == {"GET"}


async def test_stream_url_yields_the_bytes_of_a_range_and_of_the_whole(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine
) -> None:
    body = payload(5 * CHUNK + 9)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    url = presign(proxy, bucket, "k")

    async with engine.stream_url(url, start=CHUNK + 3, end=4 * CHUNK + 1) as part:
        assert b"".join([piece async for piece in part]) == body[CHUNK + 3 : 4 * CHUNK + 1]
    async with engine.stream_url(url, chunk_size=CHUNK, prefetch=2) as whole:
        await whole.open()
        assert (whole.size, whole.length) == (len(body), len(body))
        assert b"".join([piece async for piece in whole]) == body
    assert (whole.verified, whole.unverified_reason) == (False, NO_URL_CHECKSUM)
    assert {r.method for r in proxy.requests} == {"GET"}
    assert not any("authorization" in r.headers for r in proxy.requests)


async def test_the_query_string_is_never_shown(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    engine: asyncdl.Engine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not in errors, their tracebacks and causes, results or the log: a redirect loop
    (aiohttp names the URL in its error), a refused connection, a 404, a retried 503."""
    s3.put_object(Bucket=bucket, Key="k", Body=payload(2 * CHUNK))
    url = presign(proxy, bucket, "k")
    secret = signature(url)
    caplog.set_level(logging.DEBUG)
    failures = []

    proxy.rule = lambda request: Fault(
        reply=(302, {"Location": url[len(proxy.url) :], "Content-Length": "0"}, b"")
    )
    failures.append(await _failure(engine.download_url(url, tmp_path / "a")))
    proxy.rule = None
    gone = presign(proxy, bucket, "missing")
    failures.append(await _failure(engine.download_url(gone, tmp_path / "b")))
    stream = engine.stream_url(gone)
    failures.append(await _failure(stream.open()))
    await stream.aclose()
    with contextlib.closing(_closed_port()) as port:
        refused = url.replace(proxy.url, f"http://127.0.0.1:{port}")
        failures.append(await _failure(engine.download_url(refused, tmp_path / "c")))
    slow = iter([Fault(status=503, error_code="SlowDown")])
    proxy.rule = lambda request: next(slow, None)
    result = await engine.download_url(url, tmp_path / "d")

    assert [type(error).__name__ for error in failures] == [
        "DownloadError",
        "ObjectNotFoundError",
        "ObjectNotFoundError",
        "DownloadError",
    ]
    assert "redirect" in str(failures[0]).lower()
    for error in failures:
        text = "".join(traceback.format_exception(error))
        assert secret not in text, text
        assert "X-Amz-Credential" not in text, text
    assert secret not in repr(result)
    assert "SlowDown" in caplog.text  # the retry was logged...
    assert secret not in caplog.text  # ...and the URL only as shown
    assert "X-Amz-Credential" not in caplog.text


async def _failure(work: Any) -> asyncdl.DownloadError:
    try:
        await work
    except asyncdl.DownloadError as error:
        return error
    raise AssertionError("it did not fail")


def _closed_port() -> Any:
    import socket  # noqa: PLC0415 - only here

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))

    class Port(int):
        def close(self) -> None:
            listener.close()

    return Port(listener.getsockname()[1])


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://example.com/file",
        "s3://bucket/key",
        "https:///no-host",
        "https://exa mple.com/x",
        "example.com/file",
        b"https://example.com/file?X-Amz-Signature=abc",
        None,
    ],
)
async def test_bad_urls_are_refused_before_anything_is_sent_or_written(
    url: Any, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    with pytest.raises(asyncdl.InvalidRequestError) as raised:
        await engine.download_url(url, tmp_path / "x")
    assert "abc" not in str(raised.value)
    with pytest.raises(asyncdl.InvalidRequestError):
        engine.stream_url(url)
    assert os.listdir(tmp_path) == []
    assert proxy.requests == []


async def test_a_bad_target_or_checksum_is_refused_before_anything_is_sent(
    proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    url = f"{proxy.url}/bucket/key?X-Amz-Signature=abc"
    for path, checksum in [
        (tmp_path / "missing-dir" / "x", None),
        (tmp_path, None),
        (tmp_path / "x", "CRC32:not base64!"),
        (tmp_path / "x", "CRC32:AAAAAA==-3"),
    ]:
        with pytest.raises(asyncdl.InvalidRequestError):
            await engine.download_url(url, path, checksum=checksum)
    assert os.listdir(tmp_path) == []
    assert proxy.requests == []


async def test_an_engine_whose_client_lends_no_session_uses_its_own(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No credentials and no aiohttp session of a client: the engine opens (and closes)
    its own session for URLs. It sends no ``.netrc`` login for the URL's host: a
    presigned URL carries its own credential (another one breaks it), and a URL is told
    no secret of the user's."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    body = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    url = presign(proxy, bucket, "k")
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    # Sessions alive before (another test's, in this worker process) are not this one's.
    before = {id(obj) for obj in gc.get_objects() if isinstance(obj, aiohttp.ClientSession)}
    async with asyncdl.Engine(SimpleNamespace(), config=config) as engine:
        await engine.download_url(url, tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == body
    assert len(proxy.requests) == 3
    assert not any("authorization" in r.headers for r in proxy.requests)
    gc.collect()
    sessions = [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, aiohttp.ClientSession) and id(obj) not in before
    ]
    assert all(session.closed for session in sessions)


# -- the command ------------------------------------------------------------------------


def test_cp_a_url_to_a_file_a_directory_and_stdout(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    body = payload(3 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="dir/report%20v2.csv", Body=body)
    url = presign(proxy, bucket, "dir/report%20v2.csv")
    runner = CliRunner()

    to_file = runner.invoke(cli, ["cp", url, str(tmp_path / "f"), "--chunk-size", "64KiB"])
    assert to_file.exit_code == 0, to_file.output
    assert (tmp_path / "f").read_bytes() == body
    assert to_file.stdout == f"download: {shown(url)} to {tmp_path / 'f'}\n"

    into_dir = runner.invoke(cli, ["cp", url, f"{tmp_path}/", "--json"])
    assert into_dir.exit_code == 0, into_dir.output
    assert (tmp_path / "report%20v2.csv").read_bytes() == body
    assert '"bucket": ""' in into_dir.stdout
    assert f'"key": "{shown(url)}"' in into_dir.stdout

    to_stdout = runner.invoke(cli, ["cat", url])
    assert to_stdout.exit_code == 0, to_stdout.output
    assert to_stdout.stdout_bytes == body
    everything = to_file.output + into_dir.output + to_stdout.stderr
    assert signature(url) not in everything


def test_cp_an_expired_url_exits_1_with_one_line_and_writes_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 10)
    url = presign(proxy, bucket, "k", expires=1)
    proxy.rule = expired_as_s3
    time.sleep(1.5)
    result = CliRunner().invoke(cli, ["cp", url, str(tmp_path / "k"), "--debug"])
    assert result.exit_code == 1
    assert "AccessDeniedError" in result.stderr or "access denied" in result.stderr
    assert "Request has expired" in result.stderr
    assert signature(url) not in result.output + result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-r", "{url}", "{tmp}"], "--recursive needs an s3:// prefix"),
        (["--strategy", "head-first", "{url}", "{tmp}/x"], "--strategy does not apply to a URL"),
        (["https://example.com/", "{tmp}/"], "names no file"),
        (["ftp://example.com/x?X-Amz-Signature=abc", "{tmp}/x"], "nor an http:// or https://"),
    ],
)
def test_cp_url_usage_errors_exit_2_and_touch_nothing(
    args: list[str], message: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    url = f"{proxy.url}/bucket/key?X-Amz-Signature=abc"
    filled = [arg.format(url=url, tmp=tmp_path) for arg in args]
    result = CliRunner().invoke(cli, ["cp", *filled])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "abc" not in result.stderr
    assert os.listdir(tmp_path) == []
    assert proxy.requests == []


async def test_an_empty_object_and_its_size_probe(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """S3 answers any range of an empty object with 416: the download takes it in one
    plain GET, and the one-byte probe that stands in for a HEAD reads size 0."""
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    url = presign(proxy, bucket, "empty")
    result = await engine.download_url(url, tmp_path / "empty")
    assert (tmp_path / "empty").read_bytes() == b""
    assert result.size == 0
    meta = await engine._context.url_object(url).head()
    assert meta.size == 0  # and the 416's ETag, which moto (as S3) does not send
    s3.put_object(Bucket=bucket, Key="full", Body=b"12345")
    meta = await engine._context.url_object(presign(proxy, bucket, "full")).head()
    assert meta.size == 5
    assert engine.stats().gets.client_error == 1  # the download's 416; the probe's is an answer


async def test_no_credentials_are_needed(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no AWS credentials anywhere, an engine (its own default client) and the
    command download a presigned URL: nothing asks for credentials, or sends any."""
    body = payload(2 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    url = presign(proxy, bucket, "k")
    for name in FAKE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with asyncdl.Engine(config=config) as engine:
        await engine.download_url(url, tmp_path / "lib")
    assert (tmp_path / "lib").read_bytes() == body
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["cp", url, str(tmp_path / "cli"), "--chunk-size", "64KiB"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli").read_bytes() == body
    assert len(proxy.requests) == 6
    assert not any("authorization" in r.headers for r in proxy.requests)
