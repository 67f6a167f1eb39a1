"""Every example in the documentation runs as written against moto's server.

Each page with ``python`` or ``sh`` blocks runs in its own process and scratch directory
(``tests/docs_runner.py`` says how), finding the server as a real deployment would: the
standard ``AWS_ENDPOINT_URL_S3`` variable and credentials in the environment. The
objects the examples name are ``tests/docs_world.py``'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from . import docs_world
from .docs_runner import KNOWN, ROOT, RUN, blocks, page_check_module

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
RUNNABLE = [page for page in PAGES if any(b.lang in RUN for b in blocks(page.read_text()))]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture
def my_bucket(s3_without_checksums: Any) -> str:
    docs_world.seed(s3_without_checksums)
    return docs_world.BUCKET


def test_every_block_is_run_or_plainly_not_code() -> None:
    strays = [
        f"{_name(page)}:{block.line}: {block.lang or '(no language)'}"
        for page in PAGES
        for block in blocks(page.read_text())
        if block.lang not in KNOWN
    ]
    assert not strays, strays


def test_every_page_check_has_its_page() -> None:
    checks = {p.stem for p in (ROOT / "tests" / "docs_checks").glob("*.py")} - {"__init__"}
    pages = {page_check_module(page).rsplit(".", 1)[1] for page in RUNNABLE}
    assert checks <= pages, sorted(checks - pages)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_page_examples_run(page: Path, my_bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # `asyncdl` as the console script runs it, whether or not this environment has been
    # reinstalled since the script was declared.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "asyncdl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m asyncdl.cli "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        **FAKE_ENV,
        "AWS_ENDPOINT_URL_S3": proxy.url,
        # No configuration of the machine's user reaches the examples.
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "DOCS_WEB_BASE": f"{proxy.url}/{my_bucket}/",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs_runner.py"), str(page)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"{_name(page)}:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
