"""The lean GET path sends what get_object would, and hands back what it cannot do."""

from __future__ import annotations

import asyncio
import base64
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.credentials import AioDeferredRefreshableCredentials
from aiobotocore.session import get_session
from botocore.credentials import CredentialProvider

import asyncdl
from asyncdl._wire.signed_get import _SENTINEL, SignedGets
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload

KEYS = [
    "plain.txt",
    "dir/sub dir/with space.bin",
    "unicode/ünïcödé-日本.txt",
    "chars/a+b=c&d;e,f@g$h'i(j)k*l!m~n%o#p",
    "slashes//double/and/trailing./x",
    "-leading-dash",
]
# Per request, or signed per request: the rest must match get_object's to the byte.
VOLATILE = {"authorization", "x-amz-date", "amz-sdk-invocation-id", "user-agent"}


def comparable(request: RequestRecord) -> tuple[str, str, dict[str, str]]:
    headers = {k: v for k, v in request.headers.items() if k not in VOLATILE}
    return request.method, request.path, headers


async def run(
    proxy: TcpProxy, bucket: str, key: str, path: Path, lean: bool, **kwargs: Any
) -> list[tuple[str, str, dict[str, str]]]:
    proxy.reset_stats()
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=lean)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, key, path, **kwargs)
    assert result.requests == len(proxy.requests)
    # GETs in the order sent; the checksum HEAD goes out beside them, in any order.
    return sorted(map(comparable, proxy.requests), key=lambda r: (r[0], r[1], sorted(r[2].items())))


@pytest.mark.parametrize("key", KEYS)
async def test_lean_requests_match_get_object(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, key: str
) -> None:
    data = payload(2 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    lean = await run(proxy, bucket, key, tmp_path / "lean", lean=True)
    slow = await run(proxy, bucket, key, tmp_path / "slow", lean=False)
    assert (tmp_path / "lean").read_bytes() == (tmp_path / "slow").read_bytes() == data
    assert [method for method, _, _ in lean] == ["GET", "GET", "GET", "HEAD"]
    assert lean == slow


@pytest.mark.parametrize("key", KEYS)
async def test_lean_heads_match_head_object(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, key: str
) -> None:
    # HEAD-first: the HEAD, then one plain GET (small) or ranged GETs (large).
    for size, methods in ((CHUNK - 1, ["GET", "HEAD"]), (2 * CHUNK + 1, ["GET"] * 3 + ["HEAD"])):
        data = payload(size)
        s3.put_object(Bucket=bucket, Key=key, Body=data)
        lean = await run(proxy, bucket, key, tmp_path / "lean", lean=True, strategy="head-first")
        slow = await run(proxy, bucket, key, tmp_path / "slow", lean=False, strategy="head-first")
        assert (tmp_path / "lean").read_bytes() == (tmp_path / "slow").read_bytes() == data
        assert [method for method, _, _ in lean] == methods
        assert lean == slow


@pytest.mark.parametrize("key_type", [bytes, str])
async def test_lean_requests_match_with_every_argument(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, key_type: type
) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    secret = os.urandom(32)
    sse: dict[str, str | bytes] = {"SSECustomerAlgorithm": "AES256"}
    # boto3 takes the key as bytes (its examples: os.urandom(32)) or as str.
    sse["SSECustomerKey"] = secret if key_type is bytes else secret.decode("latin-1")
    version = s3.put_object(Bucket=bucket, Key="k", Body=payload(CHUNK + 9), **sse)["VersionId"]
    extra = {**sse, "VersionId": version, "RequestPayer": "requester"}
    extra["ExpectedBucketOwner"] = "123456789012"
    lean = await run(proxy, bucket, "k", tmp_path / "lean", lean=True, extra_args=extra)
    slow = await run(proxy, bucket, "k", tmp_path / "slow", lean=False, extra_args=extra)
    assert lean == slow
    assert [method for method, _, _ in lean] == ["GET", "GET", "HEAD"]
    kwargs: dict[str, Any] = {"extra_args": extra, "strategy": "head-first"}
    lean = await run(proxy, bucket, "k", tmp_path / "lean", lean=True, **kwargs)
    slow = await run(proxy, bucket, "k", tmp_path / "slow", lean=False, **kwargs)
    assert lean == slow
    assert [method for method, _, _ in lean] == ["GET", "GET", "HEAD"]


async def test_errors_through_the_lean_path(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=True)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.ObjectNotFoundError, match="NoSuchKey"):
            await engine.download(bucket, "missing", tmp_path / "m")
        etag = s3.put_object(Bucket=bucket, Key="empty", Body=b"")["ETag"]
        result = await engine.download(bucket, "empty", tmp_path / "e")
    # The lean path read the 416 (its ActualObjectSize); the plain GET brought the ETag.
    assert (result.size, result.etag, result.requests) == (0, etag, 2)
    assert not (tmp_path / "m").exists()


async def test_head_errors_through_the_lean_path(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=True)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["ETag"]
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        # A HEAD's error has no body: botocore's code is the status ("404").
        with pytest.raises(asyncdl.ObjectNotFoundError, match="404"):
            await engine.download(bucket, "missing", tmp_path / "m", strategy="head-first")
        s3.put_object(Bucket=bucket, Key="k", Body=b"y")
        with pytest.raises(asyncdl.ObjectChangedError):  # 412 to the HEAD's If-Match
            await engine.download(bucket, "k", tmp_path / "k", strategy="head-first", etag=etag)
        proxy.rule = lambda request: Fault(status=403) if request.method == "HEAD" else None
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(bucket, "k", tmp_path / "k", strategy="head-first")
    assert [r.method for r in proxy.requests] == ["HEAD"] * 3
    assert not (tmp_path / "m").exists()
    assert not (tmp_path / "k").exists()


# -- the SSE-C key stays out of reprs -----------------------------------------------


async def test_template_repr_hides_the_sse_c_key(client: Any, bucket: str) -> None:
    signed = SignedGets.for_client(client)
    assert signed is not None
    for key in (os.urandom(32), "k" * 32):
        sse = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}
        template = await signed.template(bucket, sse)
        assert template is not None
        raw = key if isinstance(key, bytes) else key.encode()
        text = repr(template)
        assert base64.b64encode(raw).decode() not in text
        assert "('x-amz-server-side-encryption-customer-key', '***')" in text


# -- a bucket in another region -----------------------------------------------------


def permanent_redirect(bucket: str, region: str) -> tuple[int, dict[str, str], bytes]:
    """S3's answer to a request for ``bucket`` sent to another region's endpoint."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PermanentRedirect</Code>'
        "<Message>The bucket you are attempting to access must be addressed using the "
        "specified endpoint. Please send all future requests to this endpoint.</Message>"
        f"<Endpoint>{bucket}.s3.{region}.amazonaws.com</Endpoint><Bucket>{bucket}</Bucket>"
        "<RequestId>4B4E7F2C3A1D9E80</RequestId><HostId>aG9zdC1pZA==</HostId></Error>"
    ).encode()
    return 301, _error_headers(body, region), body


def wrong_signing_region(bucket: str, region: str) -> tuple[int, dict[str, str], bytes]:
    """S3's answer to a request for ``bucket`` signed for another region."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AuthorizationHeaderMalformed'
        "</Code><Message>The authorization header is malformed; the region 'us-east-1' is "
        f"wrong; expecting '{region}'</Message><Region>{region}</Region>"
        "<RequestId>4B4E7F2C3A1D9E81</RequestId><HostId>aG9zdC1pZA==</HostId></Error>"
    ).encode()
    return 400, _error_headers(body, region), body


def _error_headers(body: bytes, region: str) -> dict[str, str]:
    return {
        "x-amz-bucket-region": region,
        "Content-Type": "application/xml",
        "Content-Length": str(len(body)),
        "Server": "AmazonS3",
    }


async def requests_per_download(
    s3: Any, bucket: str, proxy: TcpProxy, directory: Path, count: int
) -> list[int]:
    """Download ``count`` small objects of ``bucket`` one after the other through one
    engine; the requests each one took at the proxy."""
    objects = {f"k{i}": payload(100 + i) for i in range(count)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    counts = []
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=True)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        for key, data in objects.items():
            proxy.reset_stats()
            result = await engine.download(bucket, key, directory / key)
            assert (directory / key).read_bytes() == data
            assert result.requests == len(proxy.requests)
            counts.append(len(proxy.requests))
    return counts


@pytest.mark.parametrize("answer", [permanent_redirect, wrong_signing_region])
async def test_a_bucket_in_another_region_costs_one_request_per_get_after_the_first(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, answer: Any
) -> None:
    # moto serves any region: this proxy plays S3's part for a bucket in eu-west-1.
    def rule(request: RequestRecord) -> Fault | None:
        scope = request.headers.get("authorization", "")
        if request.path.startswith(f"/{bucket}/") and "/us-east-1/s3/aws4_request" in scope:
            return Fault(reply=answer(bucket, "eu-west-1"))
        return None

    proxy.rule = rule
    counts = await requests_per_download(s3, bucket, proxy, tmp_path, 4)
    # The first: the lean GET, botocore's GET, botocore's GET to eu-west-1.
    assert counts == [3, 1, 1, 1]
    assert all("/eu-west-1/s3/" in r.headers["authorization"] for r in proxy.requests)


async def test_a_bucket_that_keeps_redirecting_lean_gets_goes_to_get_object(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # A server that redirects the lean GETs (they carry no amz-sdk-invocation-id) and
    # serves botocore's: the rebuilt template is redirected too, so the bucket's GETs
    # go to get_object from then on, not twice each forever, nor a capture each.
    def rule(request: RequestRecord) -> Fault | None:
        if (
            request.path.startswith(f"/{bucket}/")
            and "amz-sdk-invocation-id" not in request.headers
        ):
            return Fault(reply=permanent_redirect(bucket, "eu-west-1"))
        return None

    proxy.rule = rule
    counts = await requests_per_download(s3, bucket, proxy, tmp_path, 5)
    assert counts == [2, 2, 1, 1, 1]


# -- captures under concurrency -----------------------------------------------------


class RefreshingCredentials(CredentialProvider):  # type: ignore[misc]
    """Temporary credentials fetched by an awaited call, as AssumeRole, container and
    instance credentials are: signing a request then suspends while they refresh."""

    METHOD = "asyncdl-test-refreshing"

    async def load(self) -> AioDeferredRefreshableCredentials:
        return AioDeferredRefreshableCredentials(self._fetch, self.METHOD)

    @staticmethod
    async def _fetch() -> dict[str, str]:
        await asyncio.sleep(0.001)
        # Inside botocore's 15-minute advisory window: refreshed on every request.
        expiry = datetime.now(UTC) + timedelta(minutes=12)
        return {
            "access_key": "testing",
            "secret_key": "testing",
            "token": "testing",
            "expiry_time": expiry.isoformat(),
        }


async def test_concurrent_captures_never_send_the_sentinel(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    buckets = [f"{bucket}-c{i}" for i in range(8)]
    argument_sets: list[dict[str, str]] = [
        {},
        {"RequestPayer": "requester"},
        {"ExpectedBucketOwner": "123456789012"},
    ]
    jobs = []
    for number, name in enumerate(buckets):
        s3.create_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="k", Body=payload(CHUNK + number))
        jobs += [(name, extra, tmp_path / f"{name}-{i}") for i, extra in enumerate(argument_sets)]
    session = get_session()
    session.get_component("credential_provider").insert_before("env", RefreshingCredentials())
    creating = session.create_client(
        "s3",
        endpoint_url=proxy.url,
        region_name="us-east-1",
        config=AioConfig(response_checksum_validation="when_required"),
    )
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=32, lean_get=True)
    async with creating as client, asyncdl.Engine(client, config=config) as engine:
        await asyncio.gather(
            *(engine.download(name, "k", path, extra_args=extra) for name, extra, path in jobs)
        )
    assert [r.path for r in proxy.requests if _SENTINEL in r.path] == []
    for number, name in enumerate(buckets):
        for i in range(len(argument_sets)):
            assert (tmp_path / f"{name}-{i}").read_bytes() == payload(CHUNK + number)


async def test_a_capture_that_fails_after_the_cache_was_cleared(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed = SignedGets.for_client(client)
    assert signed is not None
    started, fail = asyncio.Event(), asyncio.Event()

    async def capture(bucket: str, extra_args: Any, operation: str) -> None:
        if bucket == "slow":
            started.set()
            await fail.wait()
            raise RuntimeError("the capture failed")

    monkeypatch.setattr(signed, "_capture", capture)
    slow = asyncio.create_task(signed.template("slow", {}))
    await started.wait()
    for number in range(256):  # the last one fills the cache: it is cleared
        assert await signed.template(f"b{number}", {}) is None
    fail.set()
    assert await slow is None
    assert await signed.template("slow", {}) is None  # and a new capture can run
