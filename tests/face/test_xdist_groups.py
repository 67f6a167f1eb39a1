"""The suite's ``xdist_group`` marks hold under ``--dist loadgroup`` (the nox sessions'
``XDIST``): every test of a group runs on one worker, so a group's module fixtures (the
Dask cluster and its 5,000 objects) are made once, not once on each worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GROUPED = """
import json, os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("n", range(8))
def test_grouped(n, tmp_path_factory):
    out = os.environ["GROUP_OUT"]
    with open(os.path.join(out, f"grouped-{n}"), "w") as f:
        json.dump(os.environ.get("PYTEST_XDIST_WORKER"), f)
"""

LOOSE = """
import time


def test_loose_a():
    time.sleep(0.2)


def test_loose_b():
    time.sleep(0.2)
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    # The suite's own hooks (``tests/conftest.py``), as the suite runs with them.
    (suite / "conftest.py").write_text(
        "import tests.conftest as suite\n"
        "globals().update({k: v for k, v in vars(suite).items() if k.startswith('pytest_')})\n"
    )
    (suite / "test_grouped.py").write_text(GROUPED)
    (suite / "test_loose.py").write_text(LOOSE)
    env = {
        **os.environ,
        "GROUP_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    # No ini file: the suite's own (markers, filterwarnings) is not this one's.
    argv = ["-p", "no:cacheprovider", "-q", "-n", "2", "--dist", "loadgroup", "-c", os.devnull]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *argv, "--rootdir", str(suite), str(suite)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {json.loads(path.read_text()) for path in out.glob("grouped-*")}
    assert len(list(out.glob("grouped-*"))) == 8, done.stdout
    assert len(workers) == 1, (workers, done.stdout)
