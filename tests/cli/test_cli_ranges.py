"""``asyncdl cat --range`` in-process, against moto through the recording proxy."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl.cli import cli
from asyncdl.cli.params import RangeArg, parse_range
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, payload


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def cat(proxy: TcpProxy, *args: str) -> Result:
    return CliRunner().invoke(cli, ["cat", "--endpoint-url", proxy.url, *args])


def test_ranges_print_in_the_order_given_inclusive_as_http(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(48 * CHUNK)  # 3 MiB: more than the 1 MiB gap that GETs join over
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    url = f"s3://{bucket}/k"
    result = cat(proxy, "--range", "100-199", "--range", "0-9", "--range", "5-5", url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == data[100:200] + data[0:10] + data[5:6]
    assert result.stderr == ""
    assert [r.range for r in proxy.requests] == ["bytes=0-199"]  # joined into one GET
    proxy.reset_stats()
    far = f"{40 * CHUNK}-{40 * CHUNK + 9}"
    result = cat(proxy, "--range", far, "--range", "0-9", url)
    assert result.stdout_bytes == data[40 * CHUNK : 40 * CHUNK + 10] + data[:10]
    assert [r.range for r in proxy.requests] == ["bytes=0-9", f"bytes={far}"]
    assert proxy.requests[1].headers.get("if-match") == etag


def test_open_and_suffix_ranges_take_the_size_from_a_head(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(3 * CHUNK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    result = cat(proxy, "--range", "-10", "--range", f"{3 * CHUNK - 3}-", f"s3://{bucket}/k")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == data[-10:] + data[-3:]
    assert [r.method for r in proxy.requests] == ["HEAD", "GET"]
    assert proxy.requests[1].headers.get("if-match") == etag
    # A suffix longer than the object is all of it, as HTTP says.
    assert cat(proxy, f"--range=-{10 * CHUNK}", f"s3://{bucket}/k").stdout_bytes == data


def test_a_range_past_the_end_exits_1_naming_the_object(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # Only the first answer tells the size: a request was sent, so this is the object's
    # failure (status 1), not a usage error (status 2 promises nothing was sent).
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    result = cat(proxy, "--range", "5-10", f"s3://{bucket}/k")
    assert result.exit_code == 1
    assert proxy.requests
    first, *rest = result.stderr.splitlines()
    assert first.startswith(f"error: s3://{bucket}/k: ")
    assert "past the end of the 10-byte object" in first
    assert rest == ["1 of 1 objects failed"]
    assert result.stdout_bytes == b""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("9-5", "LAST is before FIRST"),
        ("-0", "at least one byte"),
        ("-", "is not a byte range"),
        ("1-2-3", "is not a byte range"),
        ("0x10-20", "is not a byte range"),
        ("99999999999999999999-", "is not a byte range"),
        ("a", "is not a byte range"),
    ],
)
def test_bad_ranges_exit_2_with_one_line_and_send_nothing(
    bucket: str, proxy: TcpProxy, value: str, expected: str
) -> None:
    result = cat(proxy, f"--range={value}", f"s3://{bucket}/k")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ")
    assert expected in line
    assert proxy.requests == []


def test_a_url_takes_closed_ranges_only(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    data = payload(100)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    url = url.replace(s3.meta.endpoint_url, proxy.url)
    assert cat(proxy, "--range", "10-19", url).stdout_bytes == data[10:20]
    proxy.reset_stats()
    result = cat(proxy, "--range", "-5", url)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "give FIRST-LAST ranges" in line
    assert proxy.requests == []


def test_parse_range() -> None:
    assert parse_range("100-199") == RangeArg(start=100, end=200)
    assert parse_range("100-") == RangeArg(start=100)
    assert parse_range("-50") == RangeArg(last=50)
    assert parse_range("-50").resolve(20) == (0, 20)
    assert parse_range("7-").resolve(5) == (7, 7)  # past the end: the engine refuses it


def test_help_says_how_ranges_are_read() -> None:
    result = CliRunner().invoke(cli, ["cat", "--help"])
    assert "100-199 is bytes 100 to 199, both included" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    "text", ["9999999999999999999-9999999999999999999", "99999999999999999999-"]
)
def test_offsets_no_object_has_are_a_usage_error(bucket: str, proxy: TcpProxy, text: str) -> None:
    result = cat(proxy, "--range", text, f"s3://{bucket}/k")
    assert result.exit_code == 2, result.stderr
    assert "--range" in result.stderr
    assert not proxy.requests
