"""The command's client options, as ``aws s3`` has them: ``--no-sign-request`` (a
public bucket, read anonymously), ``--region`` and ``--profile``; over the environment
(``AWS_REGION``, ``AWS_DEFAULT_REGION``, ``AWS_PROFILE``), which still works without
them.

The command runs in-process (click's CliRunner) against rclone serving anyone and
against moto, each behind a recording proxy; and once as a subprocess with no
credentials at all.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, payload
from ..wire.test_unsigned import (
    RCLONE_OBJECTS,
    assert_unsigned,
    clear_credentials,
    make_public,
    serving_public_bucket,
    write_profiles,
)
from ..wire.test_url_raw_http import ranges_served
from ..wire.test_url_session import BODY, ETAG, Origin, certificate


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clear_credentials(monkeypatch, tmp_path)


@pytest.fixture
def public_bucket(tmp_path: Path) -> Iterator[TcpProxy]:
    with serving_public_bucket(tmp_path) as proxy:
        yield proxy


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (asyncdl's records left out), by path."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".asyncdl-etags" not in path.parts
    }


# -- --no-sign-request ----------------------------------------------------------------


def read_the_public_bucket(endpoint: str, tmp_path: Path, *flags: str) -> list[Result]:
    """cp (head-first: rclone answers a one-chunk object's plain GET whole), cp -r, cat
    and sync of bucket ``public``, with ``flags``."""
    base = ["--endpoint-url", endpoint, *flags]
    return [
        run("cp", *base, "--strategy", "head-first", "s3://public/one.bin", str(tmp_path / "one")),
        run("cp", *base, "-r", "s3://public/dir", str(tmp_path / "copied")),
        run("cat", *base, "s3://public/dir/small.bin"),
        run("sync", *base, "s3://public", str(tmp_path / "synced")),
    ]


@pytest.mark.usefixtures("no_credentials")
def test_no_sign_request_reads_a_public_bucket_without_credentials(
    public_bucket: TcpProxy, tmp_path: Path
) -> None:
    results = read_the_public_bucket(public_bucket.url, tmp_path, "--no-sign-request", "-q")
    assert [(r.exit_code, r.stderr) for r in results] == [(0, "")] * 4
    assert (tmp_path / "one").read_bytes() == RCLONE_OBJECTS["one.bin"]
    assert tree(tmp_path / "copied") == {"small.bin": RCLONE_OBJECTS["dir/small.bin"]}
    assert results[2].stdout_bytes == RCLONE_OBJECTS["dir/small.bin"]
    assert tree(tmp_path / "synced") == RCLONE_OBJECTS
    assert_unsigned(public_bucket)


@pytest.mark.usefixtures("no_credentials")
def test_without_no_sign_request_a_public_bucket_needs_credentials(
    public_bucket: TcpProxy, tmp_path: Path
) -> None:
    """The control: the same commands, signed, have nothing to sign with; nothing is
    sent, nothing written."""
    results = read_the_public_bucket(public_bucket.url, tmp_path)
    assert [r.exit_code for r in results] == [1] * 4
    for result in results:
        assert "no AWS credentials found" in result.stderr
    assert public_bucket.requests == []
    assert os.listdir(tmp_path) == ["served"]


def test_no_sign_request_sends_no_signature_with_credentials_in_the_environment(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """moto's environment has keys and a session token: none of them is sent. Objects
    of several parts, every command; the bucket is public (moto refuses an anonymous
    GET otherwise)."""
    make_public(s3, bucket)
    objects = {"p/a": payload(3 * CHUNK + 7), "p/b": payload(1, 1)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    flags = ["--endpoint-url", proxy.url, "--no-sign-request", "--chunk-size", "64KiB", "-q"]
    results = [
        run("cp", *flags, f"s3://{bucket}/p/a", str(tmp_path / "a")),
        run("cp", *flags, "-r", f"s3://{bucket}/p", str(tmp_path / "copied")),
        run("cat", *flags, f"s3://{bucket}/p/a"),
        run("cat", *flags, "--range", "5-9", "--range", "-3", f"s3://{bucket}/p/a"),
        run("sync", *flags, f"s3://{bucket}/p", str(tmp_path / "synced")),
    ]
    assert [(r.exit_code, r.stderr) for r in results] == [(0, "")] * 5
    assert (tmp_path / "a").read_bytes() == objects["p/a"]
    assert (
        tree(tmp_path / "copied")
        == tree(tmp_path / "synced")
        == {"a": objects["p/a"], "b": objects["p/b"]}
    )
    assert results[2].stdout_bytes == objects["p/a"]
    assert results[3].stdout_bytes == objects["p/a"][5:10] + objects["p/a"][-3:]
    assert len(proxy.requests) > 10
    assert_unsigned(proxy)


@pytest.mark.usefixtures("no_credentials")
def test_no_sign_request_as_a_subprocess(public_bucket: TcpProxy, tmp_path: Path) -> None:
    """The console command, in a process of its own whose environment has no
    credentials (the fixture's, inherited)."""
    target = tmp_path / "one"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncdl.cli",
            "cp",
            "--no-sign-request",
            "--strategy",
            "head-first",
            "--endpoint-url",
            public_bucket.url,
            "s3://public/one.bin",
            str(target),
        ],
        capture_output=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"download: s3://public/one.bin to {target}\n"
    assert target.read_bytes() == RCLONE_OBJECTS["one.bin"]
    assert_unsigned(public_bucket)


# -- --region and --profile -------------------------------------------------------------


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles ``lab`` (eu-west-3) and ``other`` (ap-south-1), with keys of their own;
    no region, profile nor keys in the environment."""
    write_profiles(tmp_path, monkeypatch)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def signed_as(proxy: TcpProxy) -> set[tuple[str, str]]:
    """The (access key, region) pairs the requests were signed with."""
    pairs = set()
    for request in proxy.requests:
        credential = request.headers["authorization"].split("Credential=")[1].split(",")[0]
        key, _, region, *_ = credential.split("/")
        pairs.add((key, region))
    return pairs


@pytest.mark.usefixtures("profiles")
@pytest.mark.parametrize(
    ("environment", "flags", "expected"),
    [
        # The environment, as it always worked.
        ({"AWS_PROFILE": "other"}, [], ("AKIAOTHERPROFILEKEY", "ap-south-1")),
        (
            {"AWS_PROFILE": "other", "AWS_DEFAULT_REGION": "eu-north-1"},
            [],
            ("AKIAOTHERPROFILEKEY", "eu-north-1"),
        ),
        # AWS_REGION, over AWS_DEFAULT_REGION as the AWS CLI v2 reads it.
        (
            {"AWS_PROFILE": "other", "AWS_DEFAULT_REGION": "eu-north-1", "AWS_REGION": "us-west-2"},
            [],
            ("AKIAOTHERPROFILEKEY", "us-west-2"),
        ),
        # The options, over the environment.
        ({}, ["--profile", "lab"], ("AKIALABPROFILEKEY01", "eu-west-3")),
        ({"AWS_PROFILE": "other"}, ["--profile", "lab"], ("AKIALABPROFILEKEY01", "eu-west-3")),
        (
            {"AWS_PROFILE": "other", "AWS_REGION": "us-west-2"},
            ["--region", "ca-central-1"],
            ("AKIAOTHERPROFILEKEY", "ca-central-1"),
        ),
        (
            {"AWS_PROFILE": "nowhere", "AWS_REGION": "us-west-2"},
            ["--profile", "lab", "--region", "auto"],
            ("AKIALABPROFILEKEY01", "auto"),
        ),
        # A profile's keys, not the environment's (as the AWS CLI's --profile).
        (
            {"AWS_ACCESS_KEY_ID": "AKIAENVIRONMENTKEY01", "AWS_SECRET_ACCESS_KEY": "x"},
            ["--profile", "lab"],
            ("AKIALABPROFILEKEY01", "eu-west-3"),
        ),
        (
            {"AWS_ACCESS_KEY_ID": "AKIAENVIRONMENTKEY01", "AWS_SECRET_ACCESS_KEY": "x"},
            ["--region", "eu-west-1"],
            ("AKIAENVIRONMENTKEY01", "eu-west-1"),
        ),
    ],
)
@pytest.mark.parametrize("command", ["cp", "cp -r", "cat", "sync"])
def test_region_and_profile_choose_the_signature(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    environment: dict[str, str],
    flags: list[str],
    expected: tuple[str, str],
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    s3.put_object(Bucket=bucket, Key="p/k", Body=b"data")
    name, *recursive = command.split()
    source = f"s3://{bucket}/p" + ("" if recursive else "/k")
    dest = [] if name == "cat" else [str(tmp_path / "out")]
    result = run(name, "--endpoint-url", proxy.url, *flags, *recursive, "-q", source, *dest)
    assert result.exit_code == 0, result.stderr
    assert signed_as(proxy) == {expected}


@pytest.mark.usefixtures("profiles")
@pytest.mark.parametrize(
    "command", ["cp", "cp --no-resume", "cp -r", "cat", "cat --range 0-1", "sync", "cp url"]
)
def test_a_missing_profile_is_a_usage_error_that_touches_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, command: str
) -> None:
    """Found before anything is sent or written: no partial file discarded, no
    directory made, no request."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    work = tmp_path / "work"
    work.mkdir()
    partial = work / ".file.asyncdl-partial"
    partial.write_bytes(b"an earlier copy's bytes")
    name, *options = command.split()
    if options == ["url"]:
        source, options = f"{proxy.url}/{bucket}/k", []
    else:
        source = f"s3://{bucket}/k" if name != "sync" and "-r" not in options else f"s3://{bucket}"
    dest = {"cat": [], "sync": [str(work / "new")]}.get(
        name, [str(work / ("new" if "-r" in options else "file"))]
    )
    before = sorted(os.listdir(work))
    result = run(name, "--endpoint-url", proxy.url, "--profile", "nowhere", *options, source, *dest)
    assert result.exit_code == 2, result.stderr
    config, credentials = tmp_path / "aws-config", tmp_path / "aws-credentials"
    assert result.stderr.startswith(
        f"error: Invalid value for '--profile': no profile 'nowhere' in "
        f"{str(config)!r} nor {str(credentials)!r}"
    ), result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""
    assert sorted(os.listdir(work)) == before
    assert partial.read_bytes() == b"an earlier copy's bytes"
    assert proxy.requests == []


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--region", "us east"], "Invalid value for '--region': region must be a region name"),
        (["--region", ""], "Invalid value for '--region'"),
        (["--region", "eu-west-1.evil.example"], "Invalid value for '--region'"),
        (["--profile", ""], "Invalid value for '--profile'"),
        (["--profile", "a]b"], "Invalid value for '--profile'"),
        (["--no-sign-request=yes"], "Option '--no-sign-request' does not take a value"),
    ],
)
def test_bad_client_options_are_usage_errors(
    proxy: TcpProxy, tmp_path: Path, flags: list[str], said: str
) -> None:
    result = run("cp", "--endpoint-url", proxy.url, *flags, "s3://b/k", str(tmp_path / "k"))
    assert result.exit_code == 2
    assert said in result.stderr
    assert os.listdir(tmp_path) == []
    assert proxy.requests == []


@pytest.mark.usefixtures("profiles")
def test_a_url_with_profile_trusts_that_profiles_ca_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL is fetched with no signature whatever the options say; ``--profile`` still
    chooses the AWS settings it is fetched with (its ``ca_bundle``), over AWS_PROFILE."""
    bundle, tls = certificate(tmp_path, "origin")
    config = tmp_path / "aws-config"
    config.write_text(config.read_text() + f"ca_bundle = {bundle}\n")  # the last: [profile other]
    monkeypatch.setenv("AWS_PROFILE", "lab")  # a profile that does not trust the origin
    # Nothing else names a bundle, nor a proxy (the machine's environment may).
    for name in list(os.environ):
        if name in ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE") or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)

    async def fetch(*flags: str) -> Result:
        async with Origin(ranges_served(BODY, etag=ETAG, chunked=False), tls=tls) as origin:
            url = origin.url("/obj")
            return await asyncio.to_thread(run, "cat", *flags, url)

    refused = asyncio.run(fetch())
    assert refused.exit_code == 1
    assert "certificate verify failed" in refused.stderr
    fetched = asyncio.run(fetch("--profile", "other", "--no-sign-request", "--region", "auto"))
    assert fetched.exit_code == 0, fetched.stderr
    assert fetched.stdout_bytes == BODY


@pytest.mark.usefixtures("profiles")
def test_profile_names_the_endpoint_too(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """A profile's ``endpoint_url`` (an S3-compatible store's profile) is the endpoint
    when no --endpoint-url is given."""
    config = tmp_path / "aws-config"
    config.write_text(config.read_text() + f"[profile store]\nendpoint_url = {proxy.url}\n")
    make_public(s3, bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    result = run("cat", "--profile", "store", "--no-sign-request", f"s3://{bucket}/k")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == b"data"
    assert proxy.requests
    assert_unsigned(proxy)
