"""The command's timeouts: ``--read-timeout`` and ``--connect-timeout`` (as ``aws``'s
``--cli-read-timeout`` and ``--cli-connect-timeout``), and ``--timeout``, each
object's whole download, which is what ends a server that sends a byte now and then:
no read ever waits long enough for the read timeout.

Each runs in-process against moto behind the recording proxy: one that holds its
answers back, one whose connections carry a few KiB a second, and a listening socket
that never accepts.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl.cli import cli
from asyncdl.cli.params import parse_seconds
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import payload, temp_files
from .test_cli import SUMMARY, no_endpoint_in_env  # noqa: F401 - the fixture is autouse


def run(endpoint: str, *args: str) -> Result:
    command, *rest = args
    return CliRunner().invoke(cli, [command, "--endpoint-url", endpoint, *rest])


@pytest.fixture
def trickle(s3_endpoint: str) -> Iterator[TcpProxy]:
    """moto behind a proxy whose every connection carries 4 KiB a second."""
    with TcpProxy.for_url(s3_endpoint, bandwidth=4096) as running:
        yield running


@pytest.fixture
def never_accepts() -> Iterator[str]:
    """The URL of a listening socket whose queue is full: a connection to it is never
    made, and nothing refuses it either."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers = []
        try:
            for _ in range(4):  # more than the backlog holds: the next SYN is dropped
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
                fillers.append(filler)
            yield f"http://127.0.0.1:{port}"
        finally:
            for filler in fillers:
                filler.close()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("2.5", 2.5), ("0.2", 0.2), ("90s", 90.0), ("5m", 300.0), ("1h", 3600.0)],
)
def test_seconds_are_a_number_or_a_duration(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize(
    "text", ["0", "-1", "nan", "inf", "1e400", "abc", "", "5 minutes", "\u0663", "\uff11"]
)
def test_seconds_that_are_no_time_are_refused(text: str) -> None:
    # Digits of other scripts too (Arabic-Indic three, fullwidth one), as sizes refuse.
    with pytest.raises(ValueError, match="seconds"):
        parse_seconds(text)


def test_seconds_past_the_limit_say_the_limit() -> None:
    with pytest.raises(ValueError, match="at most 1000000000 seconds"):
        parse_seconds("11575d")


def test_a_long_bad_value_is_not_echoed_whole() -> None:
    with pytest.raises(ValueError, match="seconds") as refused:
        parse_seconds("9" * 100_000 + "x")
    assert len(str(refused.value)) < 300


@pytest.mark.parametrize("option", ["--read-timeout", "--connect-timeout", "--timeout"])
def test_a_bad_timeout_is_a_usage_error_that_sends_nothing(
    proxy: TcpProxy, tmp_path: Path, option: str
) -> None:
    result = run(proxy.url, "cp", option, "0", "s3://b/k", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert "seconds" in result.output
    assert proxy.requests == []
    assert list(tmp_path.iterdir()) == []


def test_read_timeout_drops_an_answer_held_back(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"late")
    proxy.rule = lambda r: Fault(delay=1.5) if r.method == "GET" else None
    held = run(proxy.url, "cp", "--read-timeout", "0.2", f"s3://{bucket}/k", str(tmp_path / "a"))
    assert held.exit_code == 1, held.output
    assert "Read timeout" in held.output
    assert not (tmp_path / "a").exists()
    assert len([r for r in proxy.requests if r.method == "GET"]) == 5  # every attempt timed out
    # The same answer is waited for under the default (30 s).
    waited = run(proxy.url, "cp", f"s3://{bucket}/k", str(tmp_path / "b"))
    assert waited.exit_code == 0, waited.output
    assert (tmp_path / "b").read_bytes() == b"late"


def test_connect_timeout_gives_up_on_a_server_that_never_accepts(
    never_accepts: str, tmp_path: Path
) -> None:
    result = run(
        never_accepts, "ls", "--connect-timeout", "0.2", "s3://bucket/"
    )  # the listing's connection
    assert result.exit_code == 1, result.output
    assert "Connect timeout" in result.output


def test_timeout_ends_each_object_a_trickling_server_sends(
    s3: Any, bucket: str, trickle: TcpProxy, tmp_path: Path
) -> None:
    # 64 KiB at 4 KiB/s takes 16 s: no read waits more than a moment, so only the
    # whole object's timeout ends it.
    for key in ("d/one", "d/two"):
        s3.put_object(Bucket=bucket, Key=key, Body=payload(64 * 1024))
    s3.put_object(Bucket=bucket, Key="d/tiny", Body=b"quick")
    root = tmp_path / "out"
    result = run(trickle.url, "cp", "-r", "--timeout", "1", f"s3://{bucket}/d/", str(root))
    assert result.exit_code == 1, result.output
    assert result.output.count("did not finish within 1s") == 2
    assert SUMMARY.search(result.output)
    assert (root / "tiny").read_bytes() == b"quick"
    assert not (root / "one").exists()
    assert not (root / "two").exists()
    assert temp_files(root) == []


def test_timeout_applies_to_sync(s3: Any, bucket: str, trickle: TcpProxy, tmp_path: Path) -> None:
    s3.put_object(Bucket=bucket, Key="d/one", Body=payload(64 * 1024))
    root = tmp_path / "out"
    result = run(trickle.url, "sync", "--timeout", "1", f"s3://{bucket}/d/", str(root))
    assert result.exit_code == 1, result.output
    assert "did not finish within 1s" in result.output
    assert not (root / "one").exists()
