"""The README's main job runs, and Ctrl-C or SIGTERM ends it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..spawn import sigint_ignored, spawned


def run_demo(dest: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "asyncdl.demo", "--dest", str(dest), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_demo_prints_the_table(tmp_path: Path) -> None:
    demo = run_demo(tmp_path, "--objects", "50", "--large-size", str(3 * 2**20), "--rtt-ms", "1")
    out, err = demo.communicate(timeout=120)
    assert demo.returncode == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if "-first " in line}
    # strategy, objects, MiB, requests, at proxy, req/small obj, seconds
    assert rows["get-first"][1] == rows["head-first"][1] == "51"
    assert rows["get-first"][5] == "1.00"
    assert rows["head-first"][5] == "2.00"
    assert rows["get-first"][3] == rows["get-first"][4]  # asyncdl's count = the proxy's
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["Ctrl-C", "SIGTERM"]
)
def test_a_stop_signal_exits_without_traceback_or_temp_files(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    argv = [sys.executable, "-m", "asyncdl.cli", "demo", "--dest", str(tmp_path)]
    args = ["--objects", "400", "--rtt-ms", "20", "--concurrency", "8"]
    # Whatever started pytest (a background job ignores SIGINT), the child gets Ctrl-C.
    with (
        sigint_ignored(),
        spawned([*argv, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as demo,
    ):
        assert demo.stdout is not None
        deadline = time.monotonic() + 90
        for line in demo.stdout:  # wait until the downloads have begun
            if line.startswith("seeded") or time.monotonic() > deadline:
                break
        time.sleep(1.0)
        demo.send_signal(signum)
        _, err = demo.communicate(timeout=60)
    assert demo.returncode == status, err
    assert "Traceback" not in err
    assert os.listdir(tmp_path) == []  # the downloads' temp files, and their directories


def test_a_dest_that_is_not_a_directory_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "asyncdl.demo", "--dest", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith("is not an existing directory")
