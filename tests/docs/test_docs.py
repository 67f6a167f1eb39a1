"""Every example in the documentation runs as written against moto's server.

Each page with ``python`` or ``sh`` blocks runs in its own process and scratch directory
(``tests/docs/docs_runner.py`` says how), finding the server as a real deployment would: the
standard ``AWS_ENDPOINT_URL_S3`` variable and credentials in the environment. The
objects the examples name are ``tests/docs/docs_world.py``'s.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from . import docs_world
from .docs_runner import KNOWN, ROOT, RUN, blocks, docstring_blocks, page_check_module, source

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
RUNNABLE = [page for page in PAGES if any(b.lang in RUN for b in blocks(source(page)))]
#: Modules whose docstrings hold examples: the API reference shows them.
SOURCES = sorted(path for path in (ROOT / "src").rglob("*.py") if docstring_blocks(path))


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
        for block in blocks(source(page))
        if block.lang not in KNOWN
    ]
    strays += [
        f"{_name(path)}:{name}: {block.lang or '(no language)'}"
        for path in SOURCES
        for name, found in docstring_blocks(path)
        for block in found
        if block.lang not in KNOWN
    ]
    assert not strays, strays


def _site_markdown() -> tuple[list[str], dict[str, Any]]:
    """mkdocs.yml's Markdown extensions, less the one ``source`` has done (snippets)."""

    class Loader(yaml.SafeLoader):
        pass

    def python_name(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Any:
        module, _, name = suffix.rpartition(".")
        return getattr(importlib.import_module(module), name)

    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", python_name)
    Loader.add_constructor("!relative", lambda loader, node: str(ROOT))
    site = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    names: list[str] = []
    configs: dict[str, Any] = {}
    for entry in site["markdown_extensions"]:
        name, config = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        if name == "pymdownx.snippets":
            continue
        names.append(name)
        if config:
            configs[name] = config
    return names, configs


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_code_block_a_reader_sees_is_one_the_runner_sees(page: Path) -> None:
    # An indented code block, a fence the renderer reads otherwise, or a block hidden in
    # a comment would be shown and not run (or run and not shown).
    names, configs = _site_markdown()
    html = markdown.markdown(source(page), extensions=names, extension_configs=configs)
    assert html.count("<pre") == len(blocks(source(page)))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_docstring_examples_run(
    path: Path, my_bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    _run(path, my_bucket, proxy, tmp_path)


def test_every_page_check_has_its_page() -> None:
    checks = {p.stem for p in (ROOT / "tests" / "docs" / "docs_checks").glob("*.py")} - {"__init__"}
    pages = {page_check_module(page).rsplit(".", 1)[1] for page in RUNNABLE}
    assert checks <= pages, sorted(checks - pages)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_page_examples_run(page: Path, my_bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    _run(page, my_bucket, proxy, tmp_path)


def _run(page: Path, my_bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
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
        [sys.executable, str(ROOT / "tests" / "docs" / "docs_runner.py"), str(page)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"{_name(page)}:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
