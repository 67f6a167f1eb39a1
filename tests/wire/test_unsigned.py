"""Anonymous (unsigned) access, and the settings of the client an engine creates:
``Engine(endpoint_url=, region=, profile=, unsigned=)`` and ``asyncdl.download``'s.

A public bucket is read from ``rclone serve s3`` started without keys (it serves
anyone), and from moto; a recording proxy in front shows what each request carried.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ProfileNotFound

import asyncdl
from asyncdl.testing.rclone_server import rclone_server
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload

#: What only a signed request carries: the header, or a presigned query's fields.
_SIGNED_HEADERS = ("authorization", "x-amz-security-token", "x-amz-date", "x-amz-content-sha256")
_SIGNED_QUERY = ("x-amz-signature", "x-amz-credential", "x-amz-security-token")

#: Objects of a public bucket, by key: every size that fits one chunk, which rclone
#: serves whole to any strategy.
RCLONE_OBJECTS = {"one.bin": payload(1), "dir/small.bin": payload(CHUNK - 1, 1)}


def signature_of(request: RequestRecord) -> list[str]:
    """What in ``request`` signs it (empty: nothing)."""
    query = request.path.partition("?")[2].lower()
    return [name for name in _SIGNED_HEADERS if name in request.headers] + [
        name for name in _SIGNED_QUERY if name in query
    ]


def assert_unsigned(proxy: TcpProxy) -> None:
    assert proxy.requests, "nothing reached the server"
    for request in proxy.requests:
        assert signature_of(request) == [], (request.method, request.path)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clear_credentials(monkeypatch, tmp_path)


def clear_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An environment with no AWS credentials anywhere botocore looks for them (and no
    instance metadata service asked: it would only add seconds)."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def public_bucket(tmp_path: Path) -> Iterator[TcpProxy]:
    with serving_public_bucket(tmp_path) as proxy:
        yield proxy


@contextmanager
def serving_public_bucket(tmp_path: Path) -> Iterator[TcpProxy]:
    """rclone serving bucket ``public`` (:data:`RCLONE_OBJECTS`) to anyone, from
    ``tmp_path/served``, behind a recording proxy."""
    root = tmp_path / "served"
    for key, data in RCLONE_OBJECTS.items():
        path = root / "public" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    with rclone_server(root, anonymous=True) as url, TcpProxy.for_url(url) as proxy:
        yield proxy


async def read_everything(engine: asyncdl.Engine, bucket: str, dest: Path) -> dict[str, bytes]:
    """Each object of ``bucket`` by every reading call: the bytes each call gave, by
    call and key; ``download`` (head-first: it fetches a one-chunk object with one plain
    GET) and ``download_prefix`` land in ``dest``."""
    got: dict[str, bytes] = {}
    listed: list[str] = []
    async with aclosing(engine.download_prefix(bucket, "", dest / "prefix")) as results:
        async for result in results:
            assert result.error is None, result.error
            listed.append(result.key)
            got[f"download_prefix {result.key}"] = result.path.read_bytes()
    assert sorted(listed) == sorted(RCLONE_OBJECTS)
    for number, key in enumerate(sorted(listed)):
        target = dest / f"download-{number}"
        await engine.download(bucket, key, target, strategy="head-first")
        got[f"download {key}"] = target.read_bytes()
        got[f"read_bytes {key}"] = await engine.read_bytes(bucket, key)
        async with engine.stream(bucket, key) as stream:
            got[f"stream {key}"] = b"".join([piece async for piece in stream])
    return got


def expected_reads() -> dict[str, bytes]:
    return {
        f"{call} {key}": data
        for key, data in RCLONE_OBJECTS.items()
        for call in ("download_prefix", "download", "read_bytes", "stream")
    }


@pytest.mark.usefixtures("no_credentials")
@pytest.mark.parametrize("lean_get", [True, False])
async def test_a_public_bucket_is_read_without_credentials(
    public_bucket: TcpProxy, tmp_path: Path, lean_get: bool
) -> None:
    """No credentials anywhere: every reading call works, and no request of any
    (listing, HEAD, GET; the lean path's or botocore's) carries a signature."""
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=lean_get)
    async with asyncdl.Engine(
        config=config, endpoint_url=public_bucket.url, unsigned=True
    ) as engine:
        got = await read_everything(engine, "public", tmp_path)
    assert got == expected_reads()
    assert_unsigned(public_bucket)
    methods = {request.method for request in public_bucket.requests}
    assert methods == {"GET", "HEAD"}
    # Both ways of sending an object's GET were taken: the lean path's carries no
    # botocore invocation id, get_object's does.
    object_gets = [r for r in public_bucket.requests if r.method == "GET" and "?" not in r.path]
    assert object_gets
    for request in object_gets:
        assert ("amz-sdk-invocation-id" in request.headers) is not lean_get


@pytest.mark.usefixtures("no_credentials")
async def test_the_one_call_download_reads_a_public_bucket(
    public_bucket: TcpProxy, tmp_path: Path
) -> None:
    target = tmp_path / "one.bin"
    result = await asyncdl.download(
        "public",
        "one.bin",
        target,
        strategy="head-first",
        endpoint_url=public_bucket.url,
        region="us-east-1",
        unsigned=True,
    )
    assert result.size == 1
    assert target.read_bytes() == RCLONE_OBJECTS["one.bin"]
    assert_unsigned(public_bucket)


@pytest.mark.usefixtures("no_credentials")
async def test_without_credentials_a_signed_engine_fails_clearly(
    public_bucket: TcpProxy, tmp_path: Path
) -> None:
    """What ``unsigned`` is for: the same read, signed, has no credentials to sign with."""
    async with asyncdl.Engine(endpoint_url=public_bucket.url) as engine:
        with pytest.raises(asyncdl.AccessDeniedError, match="no AWS credentials found"):
            await engine.read_bytes("public", "one.bin")
    assert not (tmp_path / "prefix").exists()


def make_public(s3: Any, bucket: str) -> None:
    """Let anyone read ``bucket``, as a public data set's policy does (moto refuses an
    anonymous GET otherwise, as S3 does). moto asks for ``s3:HeadObject`` for a HEAD,
    an action S3 does not have (its HEAD needs ``s3:GetObject``)."""
    actions = ["s3:GetObject", "s3:ListBucket", "s3:HeadObject"]
    resources = [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    statement = {"Effect": "Allow", "Principal": "*", "Action": actions, "Resource": resources}
    policy = {"Version": "2012-10-17", "Statement": [statement]}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


@pytest.mark.parametrize("unsigned", [True, False])
@pytest.mark.parametrize("lean_get", [True, False])
@pytest.mark.parametrize("strategy", ["get-first", "head-first"])
async def test_unsigned_sends_no_signature_with_credentials_in_the_environment(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unsigned: bool,
    lean_get: bool,
    strategy: str,
) -> None:
    """Keys and a session token in the environment are never used by an unsigned engine
    (moto serves anyone, so only the requests tell); a signed one, the control, signs
    every request with them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENTKEY01")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "environment-token")
    make_public(s3, bucket)
    objects = {"a/one": payload(1), "a/several": payload(3 * CHUNK + 7, 2)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=lean_get)
    got: dict[str, bytes] = {}
    async with asyncdl.Engine(
        config=config, endpoint_url=proxy.url, region="us-east-1", unsigned=unsigned
    ) as engine:
        for key, data in objects.items():
            path = tmp_path / key.replace("/", "-")
            await engine.download(bucket, key, path, strategy=strategy)
            got[f"download {key}"] = path.read_bytes()
            got[f"read_bytes {key}"] = await engine.read_bytes(bucket, key)
            pieces = await engine.read_ranges(bucket, key, [(0, 1), (len(data) - 1, len(data))])
            got[f"read_ranges {key}"] = b"".join(pieces)
            async with engine.stream(bucket, key) as stream:
                got[f"stream {key}"] = b"".join([piece async for piece in stream])
            assert (await engine.head(bucket, key)).size == len(data)
        async with aclosing(engine.download_prefix(bucket, "a", tmp_path / "tree")) as results:
            async for result in results:
                assert result.error is None, result.error
                got[f"download_prefix {result.key}"] = result.path.read_bytes()
    assert got == {
        f"{call} {key}": data if call != "read_ranges" else data[:1] + data[-1:]
        for key, data in objects.items()
        for call in ("download", "read_bytes", "read_ranges", "stream", "download_prefix")
    }
    if unsigned:
        assert_unsigned(proxy)
    else:
        for request in proxy.requests:
            assert "authorization" in request.headers
            assert "Credential=AKIAENVIRONMENTKEY01/" in request.headers["authorization"]
            assert request.headers["x-amz-security-token"] == "environment-token"


async def test_unsigned_is_refused_for_a_borrowed_client(proxy: TcpProxy) -> None:
    """The settings make the client the engine creates: with a client handed in they
    would silently do nothing."""
    async with make_client(proxy.url) as client:
        for setting in (
            {"endpoint_url": proxy.url},
            {"region": "eu-west-1"},
            {"profile": "default"},
            {"unsigned": True},
        ):
            (name,) = setting
            with pytest.raises(ValueError, match=f"{name} configures the client") as raised:
                asyncdl.Engine(client, **setting)
            assert "client" in str(raised.value)
            with pytest.raises(ValueError, match=f"{name} configures the client"):
                await asyncdl.download("b", "k", "unused", client=client, **setting)
    assert proxy.requests == []


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"endpoint_url": "ftp://example.com"}, "endpoint_url must be an http"),
        ({"endpoint_url": 5}, "endpoint_url must be an http"),
        ({"region": ""}, "region must be"),
        ({"region": 5}, "region must be"),
        ({"profile": ""}, "profile must be"),
        ({"unsigned": "yes"}, "unsigned must be a bool"),
    ],
)
def test_bad_client_settings_are_refused(setting: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        asyncdl.Engine(**setting)


def write_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two profiles with keys of their own; the environment's keys and profile gone."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_DEFAULT_PROFILE", raising=False)
    config = tmp_path / "aws-config"
    config.write_text("[profile lab]\nregion = eu-west-3\n[profile other]\nregion = ap-south-1\n")
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        "[lab]\naws_access_key_id = AKIALABPROFILEKEY01\naws_secret_access_key = lab-secret\n"
        "[other]\naws_access_key_id = AKIAOTHERPROFILEKEY\naws_secret_access_key = other\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


async def test_profile_and_region_make_the_client(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``profile`` names the keys and region used, over ``AWS_PROFILE``; ``region`` the
    region signed for, over the profile's and the environment's. Without them, the
    environment decides as it always did."""
    write_profiles(tmp_path, monkeypatch)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")

    async def signed_with(**settings: Any) -> list[str]:
        """The key and the region of the engine's one GET."""
        proxy.reset_stats()
        async with asyncdl.Engine(endpoint_url=proxy.url, **settings) as engine:
            assert await engine.read_bytes(bucket, "k") == b"data"
        (request,) = proxy.requests
        credential = request.headers["authorization"].split("Credential=")[1].split(",")[0]
        return credential.split("/", 3)[::2]

    monkeypatch.setenv("AWS_PROFILE", "other")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    assert await signed_with() == ["AKIAOTHERPROFILEKEY", "ap-south-1"]
    assert await signed_with(profile="lab") == ["AKIALABPROFILEKEY01", "eu-west-3"]
    assert await signed_with(profile="lab", region="ca-central-1") == [
        "AKIALABPROFILEKEY01",
        "ca-central-1",
    ]
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-north-1")  # over a profile's region
    assert await signed_with(profile="lab") == ["AKIALABPROFILEKEY01", "eu-north-1"]
    monkeypatch.setenv("AWS_REGION", "us-west-2")  # over AWS_DEFAULT_REGION, as the AWS CLI v2
    assert await signed_with(profile="lab") == ["AKIALABPROFILEKEY01", "us-west-2"]
    assert await signed_with(region="sa-east-1") == ["AKIAOTHERPROFILEKEY", "sa-east-1"]
    # The profile's keys, not the environment's, as the AWS CLI's --profile.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENTKEY01")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    assert await signed_with(profile="lab") == ["AKIALABPROFILEKEY01", "us-west-2"]
    assert await signed_with() == ["AKIAENVIRONMENTKEY01", "us-west-2"]


async def test_a_missing_profile_fails_as_the_engine_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: TcpProxy
) -> None:
    write_profiles(tmp_path, monkeypatch)
    engine = asyncdl.Engine(endpoint_url=proxy.url, profile="nowhere")
    with pytest.raises(ProfileNotFound, match=r"profile \(nowhere\) could not be found"):
        await engine.__aenter__()
    assert proxy.requests == []
    assert sorted(os.listdir(tmp_path)) == ["aws-config", "aws-credentials"]
