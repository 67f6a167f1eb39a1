"""Two overlapping runs into one synced directory, as overlapping cron jobs start them,
interleaved at the worst point: run A (``sync --delete``) has listed the prefix and
is still downloading; then ``new.csv`` is put, and run B lists and downloads it;
then comes A's delete phase. ``new.csv`` is not in A's listing and a record vouches
for it, yet the object is in the bucket: it must survive.

- B a ``sync --delete`` too: it waits for A's lock on the directory, and runs once A
  has ended (or, with ``--no-wait``, fails at once saying why).
- B a plain ``sync`` (no lock): A leaves alone a file changed since its listing
  began.

Each run is an ``asyncdl`` process of its own. A reaches the server through a proxy
that holds its GET until the test lets it go: A has listed, and waits there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncdl._files.file_records import SYNC_LOCK, is_own_name
from asyncdl.cli import cli
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..spawn import spawned
from .test_cli import without_summary


@contextmanager
def sync_process(
    endpoint: str, source: str, dest: Path, log: Path, *args: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``asyncdl sync ARGS SOURCE DEST`` as a process of its own; stdout and stderr
    go to ``log``.out and ``log``.err (read while it runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    argv = [sys.executable, "-m", "asyncdl.cli", "sync", "--endpoint-url", endpoint]
    with (
        log.with_suffix(".out").open("wb") as out,
        log.with_suffix(".err").open("wb") as err,
        spawned(
            [*argv, *args, source, str(dest)], env={**env, **FAKE_ENV}, stdout=out, stderr=err
        ) as child,
    ):
        yield child


def text(log: Path, suffix: str) -> str:
    return log.with_suffix(suffix).read_text()


def wait_until(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.02)


@contextmanager
def run_a_held_after_its_listing(
    s3: Any, bucket: str, proxy: TcpProxy, dest: Path, tmp_path: Path
) -> Iterator[tuple[threading.Event, subprocess.Popen[bytes], Path]]:
    """Run A, ``sync --delete``, started and held in its first GET (its listing done,
    nothing deleted yet) until the event is set; A is waited for on the way out."""
    s3.put_object(Bucket=bucket, Key="p/slow.bin", Body=b"held in the proxy")
    gate = threading.Event()

    def hold(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and request.path.endswith("/p/slow.bin"):
            return Fault(before=lambda: gate.wait(60))
        return None

    proxy.rule = hold
    log = tmp_path / "a"
    try:
        with sync_process(proxy.url, f"s3://{bucket}/p/", dest, log, "--delete") as a:
            wait_until(
                lambda: (
                    any(r.path.endswith("/p/slow.bin") for r in proxy.requests)
                    or a.poll() is not None
                ),
                "run A's GET",
            )
            assert a.poll() is None, text(log, ".err")
            yield gate, a, log
            gate.set()
            assert a.wait(timeout=60) == 0, text(log, ".err")
    finally:
        gate.set()


def test_a_second_sync_delete_waits_for_the_first_and_new_csv_survives(
    s3: Any, s3_endpoint: str, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    dest = tmp_path / "data"
    b_log = tmp_path / "b"
    with run_a_held_after_its_listing(s3, bucket, proxy, dest, tmp_path) as (gate, a, a_log):
        s3.put_object(Bucket=bucket, Key="p/new.csv", Body=b"x,y\n1,2\n")
        with sync_process(s3_endpoint, f"s3://{bucket}/p/", dest, b_log, "--delete") as b:
            wait_until(lambda: "waiting" in text(b_log, ".err") or b.poll() is not None, "B")
            assert b.poll() is None, text(b_log, ".err")  # it waits for A
            (waiting,) = text(b_log, ".err").splitlines()
            assert waiting.startswith(f"waiting for another sync --delete into {dest}"), waiting
            assert not (dest / "new.csv").exists()
            gate.set()
            assert a.wait(timeout=60) == 0, text(a_log, ".err")
            assert b.wait(timeout=60) == 0, text(b_log, ".err")
    assert (dest / "new.csv").read_bytes() == b"x,y\n1,2\n"
    assert (dest / "slow.bin").read_bytes() == b"held in the proxy"
    assert text(b_log, ".out") == f"download: s3://{bucket}/p/new.csv to {dest / 'new.csv'}\n"
    assert without_summary(text(a_log, ".err")) == ""
    # The lock's file went with the last run that held it.
    assert sorted(os.listdir(dest)) == ["new.csv", "slow.bin"]


def test_no_wait_fails_at_once_while_another_sync_delete_runs(
    s3: Any, s3_endpoint: str, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    dest = tmp_path / "data"
    b_log = tmp_path / "b"
    with run_a_held_after_its_listing(s3, bucket, proxy, dest, tmp_path):
        s3.put_object(Bucket=bucket, Key="p/new.csv", Body=b"x,y\n")
        args = ("--delete", "--no-wait")
        with sync_process(s3_endpoint, f"s3://{bucket}/p/", dest, b_log, *args) as b:
            assert b.wait(timeout=60) == 1
        (error,) = text(b_log, ".err").splitlines()
        assert error.startswith(f"error: s3://{bucket}/p/: another sync --delete into {dest}")
        assert error.endswith("is running; not waiting for it (--no-wait)"), error
        assert text(b_log, ".out") == ""
        assert not (dest / "new.csv").exists()


def test_a_file_another_run_wrote_after_the_listing_began_is_not_deleted(
    s3: Any, s3_endpoint: str, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """B a plain sync, which takes no lock: A's delete phase leaves alone what changed
    since A's listing began."""
    dest = tmp_path / "data"
    b_log = tmp_path / "b"
    with run_a_held_after_its_listing(s3, bucket, proxy, dest, tmp_path) as (_, _, a_log):
        s3.put_object(Bucket=bucket, Key="p/new.csv", Body=b"x,y\n")
        with sync_process(s3_endpoint, f"s3://{bucket}/p/", dest, b_log) as b:
            assert b.wait(timeout=60) == 0, text(b_log, ".err")
        assert (dest / "new.csv").read_bytes() == b"x,y\n"
    assert (dest / "new.csv").read_bytes() == b"x,y\n"
    assert text(a_log, ".out") == f"download: s3://{bucket}/p/slow.bin to {dest / 'slow.bin'}\n"
    assert without_summary(text(a_log, ".err")) == (
        f"left alone: {dest / 'new.csv'} (changed since this run's listing began)\n"
    )


@pytest.mark.parametrize("name", [SYNC_LOCK, SYNC_LOCK.upper()])
def test_the_lock_file_is_named_like_no_key(name: str) -> None:
    assert is_own_name(name)


def test_no_wait_without_delete_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["sync", "--no-wait", "s3://b/p/", str(tmp_path / "d")])
    assert result.exit_code == 2
    assert "--no-wait applies only with --delete" in result.stderr
    assert not (tmp_path / "d").exists()


def test_a_lock_file_planted_by_someone_else_is_an_error_and_nothing_is_done(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    """A file at the lock's name that others may write (or another user's) is not a
    lock to trust: the run says so and does nothing."""
    s3.put_object(Bucket=bucket, Key="p/a.csv", Body=b"a")
    dest = tmp_path / "data"
    dest.mkdir()
    planted = dest / SYNC_LOCK
    planted.write_bytes(b"")
    planted.chmod(0o666)
    result = CliRunner().invoke(
        cli, ["sync", "--delete", "--endpoint-url", proxy.url, f"s3://{bucket}/p/", str(dest)]
    )
    assert result.exit_code == 1, result.output
    (error,) = result.stderr.splitlines()
    assert error.startswith(f"error: s3://{bucket}/p/: cannot lock {planted}: "), error
    assert sorted(os.listdir(dest)) == [SYNC_LOCK]
    assert [r.method for r in proxy.requests] == []
