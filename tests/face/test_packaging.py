"""What the package says about itself: its version, its one command, its extras."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import asyncdl
from asyncdl.cli import cli

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def project() -> dict[str, object]:
    with PYPROJECT.open("rb") as file:
        table: dict[str, object] = tomllib.load(file)["project"]
    return table


def test_version_comes_from_the_installed_metadata() -> None:
    assert asyncdl.__version__ == importlib.metadata.version("asyncdl")
    assert asyncdl.__version__ == project()["version"]  # one source of truth


def test_the_command_reports_the_same_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"asyncdl, version {asyncdl.__version__}\n"


def test_version_of_a_source_tree_that_is_not_installed() -> None:
    # Imported from a checkout without `pip install`: no metadata, still importable.
    code = (
        "import importlib.metadata as metadata\n"
        "def version(name):\n"
        "    raise metadata.PackageNotFoundError(name)\n"
        "metadata.version = version\n"
        "import asyncdl\n"
        "print(asyncdl.__version__)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "0+unknown\n"


def test_one_console_script() -> None:
    # The demo is `asyncdl demo`: a second script would be a second way to fail.
    assert project()["scripts"] == {"asyncdl": "asyncdl.cli:main"}


# moto (the 'demo' extra) made unimportable, as in a plain `pip install 'asyncdl[cli]'`.
WITHOUT_MOTO = "import sys\nsys.modules['moto'] = None\n"
ENTRY_POINTS = {
    "asyncdl demo": "from asyncdl.cli import main\nmain()\n",
    "python -m asyncdl.demo": (
        "import runpy\nrunpy.run_module('asyncdl.demo', run_name='__main__')\n"
    ),
}


def run_without_moto(entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["demo", *args] if entry == "asyncdl demo" else list(args)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MOTO + ENTRY_POINTS[entry], *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_demo_without_its_extra_says_what_to_install(entry: str) -> None:
    run = run_without_moto(entry, "--objects", "5")
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr == (
        "asyncdl demo: needs the 'demo' extra (moto is not installed): "
        "pip install 'asyncdl[demo]'\n"
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_demo_help_needs_no_extra(entry: str) -> None:
    run = run_without_moto(entry, "--help")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: asyncdl demo [-h]")
