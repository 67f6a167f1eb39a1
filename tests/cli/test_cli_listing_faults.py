"""``asyncdl ls``, ``cp -r``'s filters and dry run, and the listing read ahead of the
downloads, when things go wrong: the reader of stdout leaves, a listing page fails
while downloads run, the filters leave nothing.

Every run talks HTTP to moto's server through the recording proxy, reached only
through ``--endpoint-url``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..bulk.test_bulk import put_in_backend
from ..spawn import stops_ignored
from .test_cli import cli_env, spawn_cli


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_ls_into_a_closed_pipe_stops_quietly(
    flags: list[str], bucket: str, proxy: TcpProxy
) -> None:
    # `asyncdl ls ... | head -1` once head has gone: the first write fails; the
    # command stops, says nothing (as cp, sync and cat do) and exits 1.
    put_in_backend(bucket, {f"p/{i:04d}": b"" for i in range(3)})
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        running = subprocess.run(
            [sys.executable, "-m", "asyncdl.cli", "ls", "-r", *flags,
             "--endpoint-url", proxy.url, f"s3://{bucket}/p/"],
            stdout=write_end, stderr=subprocess.PIPE, env=cli_env(), timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (running.returncode, running.stderr.decode()) == (1, "")


def test_cp_recursive_when_a_listing_page_fails_while_downloads_run(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # The listing runs ahead of the downloads: its second page fails (no retry for
    # a 403) while the first page's objects are being fetched. The failure is said on
    # the prefix, then the count; the command ends (no hang) with status 1, leaves no
    # temp file, and fetched nothing past what the first page listed.
    put_in_backend(bucket, {f"p/{i:04d}": b"x" * 10 for i in range(1500)})
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if "continuation-token" in r.path else None
    )
    dest = tmp_path / "d"
    result = CliRunner().invoke(
        cli, ["cp", "-r", "-q", "--endpoint-url", proxy.url, f"s3://{bucket}/p/", str(dest)]
    )
    assert result.exit_code == 1, result.output
    errors = result.stderr.splitlines()
    assert errors[0].startswith(f"error: s3://{bucket}/p/: access denied"), errors
    assert re.fullmatch(r"the listing failed after \d+ objects \(0 failed\)", errors[1]), errors
    assert len(errors) == 2, errors
    names = sorted(path.name for path in dest.iterdir())
    assert names
    assert set(names) <= {f"{i:04d}" for i in range(1000)}


def _cp_r(proxy: TcpProxy, bucket: str, dest: Path) -> list[str]:
    return [sys.executable, "-m", "asyncdl.cli", "cp", "-r", "--endpoint-url", proxy.url,
            f"s3://{bucket}/p/", str(dest)]  # fmt: skip


def test_cp_recursive_with_stderr_closed_copies_and_exits_0(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # `asyncdl cp -r ... 2>&-`: no stderr at all. The copy is done as ever (no bar, no
    # summary line to show), and the status says so.
    put_in_backend(bucket, {f"p/{i}": b"x" * 10 for i in range(3)})
    dest = tmp_path / "d"
    running = subprocess.run(
        ["sh", "-c", 'exec "$@" 2>&-', "sh", *_cp_r(proxy, bucket, dest)],
        stdout=subprocess.PIPE, env=cli_env(), timeout=60, check=False,
    )  # fmt: skip
    assert running.returncode == 0, running.stdout
    assert sorted(path.name for path in dest.iterdir()) == ["0", "1", "2"]


def test_cp_recursive_whose_stderr_reader_left_exits_0(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # `asyncdl cp -r ... 2>&1 >out | head -0`: every object is copied; the summary
    # line, the run's last word, finds nobody to read it. The status tells what was
    # done (0), not that the line was lost.
    put_in_backend(bucket, {f"p/{i}": b"x" * 10 for i in range(3)})
    dest = tmp_path / "d"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        running = subprocess.run(
            _cp_r(proxy, bucket, dest), stdout=subprocess.PIPE, stderr=write_end,
            env=cli_env(), timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert running.returncode == 0, running.stdout
    assert sorted(path.name for path in dest.iterdir()) == ["0", "1", "2"]


def test_a_stop_while_the_listing_runs_ahead_leaves_no_generator_open(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # SIGTERM while downloads run and the listing, ahead of them, waits on its next
    # page: every generator of the listing is closed in order on the way out. One
    # left open is closed by the event loop's shutdown, at the same time as the one
    # inside it: "aclose(): asynchronous generator is already running", a traceback.
    put_in_backend(bucket, {f"p/{i:04d}": b"x" * 10 for i in range(1500)})
    proxy.rule = lambda r: (
        Fault(delay=30)
        if "continuation-token" in r.path or ("/p/" in r.path and not r.path.endswith("/p/0000"))
        else None
    )
    dest = tmp_path / "d"
    with (
        stops_ignored(),
        spawn_cli(
            "cp", "-r", "--endpoint-url", proxy.url, f"s3://{bucket}/p/", str(dest)
        ) as running,
    ):
        assert running.stdout is not None
        assert running.stdout.readline().startswith(b"download: ")
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=25)
    assert running.returncode == 143, err.decode()
    assert "Traceback" not in err.decode(), err.decode()
    assert "asynchronous generator" not in err.decode(), err.decode()
