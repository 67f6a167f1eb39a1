"""The event loop the command runs on: uvloop when it is installed, asyncio's own
otherwise, or what ``ASYNCDL_LOOP`` asks; ``--debug`` says which ran."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncdl.cli.loops import choose
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import payload

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def cp(
    proxy: TcpProxy, bucket: str, dest: Path, loop: str | None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.update(FAKE_ENV)
    env.pop("ASYNCDL_LOOP", None)
    if loop is not None:
        env["ASYNCDL_LOOP"] = loop
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncdl.cli",
            "cp",
            "--debug",
            "--endpoint-url",
            proxy.url,
            f"s3://{bucket}/k",
            str(dest),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_debug_names_the_loop_that_ran(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    body = payload(3000)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    default = cp(proxy, bucket, tmp_path / "a", None)
    assert default.returncode == 0, default.stderr
    expected = "event loop: uvloop " if HAS_UVLOOP else "event loop: asyncio"
    assert expected in default.stderr, default.stderr
    assert (tmp_path / "a").read_bytes() == body

    plain = cp(proxy, bucket, tmp_path / "b", "asyncio")
    assert plain.returncode == 0, plain.stderr
    assert "event loop: asyncio" in plain.stderr, plain.stderr
    assert (tmp_path / "b").read_bytes() == body


def test_asking_for_uvloop(s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 10)
    done = cp(proxy, bucket, tmp_path / "a", "uvloop")
    if HAS_UVLOOP:
        assert done.returncode == 0, done.stderr
        assert "event loop: uvloop " in done.stderr
    else:  # a clear usage error, nothing sent, nothing written
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: ASYNCDL_LOOP=uvloop, but uvloop is not installed")
        assert not proxy.requests
        assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("value", ["bogus", "UVLOOP2", "1"])
def test_an_unknown_loop_is_a_usage_error(
    proxy: TcpProxy, bucket: str, tmp_path: Path, value: str
) -> None:
    done = cp(proxy, bucket, tmp_path / "a", value)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: ASYNCDL_LOOP must be one of auto, uvloop, asyncio, got {value!r} "
        "(see 'asyncdl cp --help')"
    ]
    assert "never awaited" not in done.stderr
    assert not proxy.requests
    assert not (tmp_path / "a").exists()


def test_the_choice_is_read_from_the_environment_given() -> None:
    assert choose({"ASYNCDL_LOOP": "asyncio"}).factory is None
    assert choose({"ASYNCDL_LOOP": " Asyncio "}).name == "asyncio"
    assert choose({}).name.startswith("uvloop" if HAS_UVLOOP else "asyncio")
