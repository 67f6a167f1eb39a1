"""What starting costs: ``--help``, ``--version`` and usage errors import no S3 stack, and
``import asyncdl`` imports a public name's module only when that name is first used."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

#: What a download needs and a command that only prints should not pay for: the S3
#: client stack, its HTTP library, the CRC library and the progress bar's library.
HEAVY = frozenset({"aiobotocore", "aiohttp", "awscrt", "botocore", "rich"})
#: The S3 client's stack (most of what a download's start-up imports): a URL needs
#: none of it. botocore's exceptions are light, and its errors are raised for a URL's.
S3_CLIENT = (
    "aiobotocore",
    "botocore.auth",
    "botocore.httpsession",
    "botocore.session",
    "botocore.utils",
)


def imported_by(code: Sequence[str], cwd: Path, *, modules: bool = False) -> tuple[int, set[str]]:
    """Run ``python -X importtime CODE...``: its exit status and the top-level packages it
    imported, or with ``modules`` every module (read from the interpreter's own report on
    stderr, not from the code)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    names = {
        name if modules else name.split(".")[0]
        for line in run.stderr.splitlines()
        if line.startswith("import time:")
        for name in [line.rpartition("|")[2].strip()]
    }
    assert "asyncdl" in names, run.stderr  # the report was read, and the package imported
    return run.returncode, names


COMMANDS = {
    "--help": (["--help"], 0),
    "--version": (["--version"], 0),
    "cp --help": (["cp", "--help"], 0),
    "cat --help": (["cat", "--help"], 0),
    "cp -r --help": (["cp", "-r", "s3://b/p/", "dir", "--help"], 0),
    "no command": ([], 2),
    "no arguments": (["cp"], 2),
    "no dest": (["cp", "s3://b/k"], 2),
    "bad size": (["cp", "s3://b/k", "dir", "--chunk-size", "lots"], 2),
    "not an s3 url": (["cp", "b/k", "dir"], 2),
    "no such command": (["get", "s3://b/k"], 2),
    "-r to stdout": (["cp", "-r", "s3://b/p/", "-"], 2),
    "cat no key": (["cat", "s3://b/"], 2),
}


@pytest.mark.parametrize("case", COMMANDS)
def test_a_command_that_only_prints_imports_no_s3_stack(case: str, tmp_path: Path) -> None:
    args, status = COMMANDS[case]
    code, names = imported_by(["-m", "asyncdl.cli", *args], tmp_path)
    assert code == status
    assert sorted(names & HEAVY) == []
    assert list(tmp_path.iterdir()) == []


# The console script, then what the garbage collector was told.
FREEZE_REPORT = (
    "import gc, sys\n"
    "from asyncdl.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "finally:\n"
    "    print('frozen', gc.get_freeze_count(), file=sys.stderr)\n"
)


def test_a_download_freezes_the_modules_it_imported(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # The engine's modules live until the command exits: they are frozen out of the
    # collector's sight once imported (scanning them was 0.07 s of a small cp's CPU).
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    argv = ["cp", "--endpoint-url", proxy.url, f"s3://{bucket}/k", str(tmp_path / "k")]
    run = subprocess.run(
        [sys.executable, "-c", FREEZE_REPORT, *argv],
        capture_output=True,
        text=True,
        env={**env, **FAKE_ENV},
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "k").read_bytes() == b"data"
    frozen = int(run.stderr.split()[-1])
    assert frozen > 10_000  # the objects of several hundred modules, not a stray few


def test_import_asyncdl_imports_no_s3_stack(tmp_path: Path) -> None:
    code, names = imported_by(["-c", "import asyncdl; asyncdl.__version__"], tmp_path)
    assert code == 0
    assert sorted(names & HEAVY) == []


def test_a_download_imports_what_it_needs(tmp_path: Path) -> None:
    # The premise of the tests above: the report does show the S3 stack when it is used
    # (the client is created, and aiobotocore loaded, when the engine opens).
    code, names = imported_by(["-c", "from asyncdl import Engine"], tmp_path)
    assert code == 0
    assert {"aiohttp", "botocore"} <= names
    assert "aiobotocore" not in names
    code, names = imported_by(["-c", OPEN_ENGINE], tmp_path, modules=True)
    assert code == 0
    assert set(S3_CLIENT) <= names


OPEN_ENGINE = (
    "import asyncio, asyncdl\n"
    "async def main():\n"
    "    async with asyncdl.Engine():\n"
    "        pass\n"
    "asyncio.run(main())\n"
)


@pytest.mark.parametrize(
    "command",
    [["cp", "{url}", "{tmp}/x"], ["cat", "{url}"], ["cat", "--range", "0-9", "{url}"]],
    ids=["cp", "cat", "cat --range"],
)
def test_a_url_command_makes_no_s3_client(
    command: list[str], s3: Any, bucket: str, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789abcdef")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    argv = [arg.format(url=url, tmp=tmp_path) for arg in command]
    code, names = imported_by(["-m", "asyncdl.cli", *argv], tmp_path, modules=True)
    assert code == 0
    assert "aiohttp" in names  # the report does show the HTTP stack the download used
    assert sorted(name for name in names if name.startswith(S3_CLIENT)) == []
    # No checksum came with the answer, so no CRC library was loaded (awscrt's C
    # extension is about 30 ms of start-up).
    assert "awscrt" not in names
    if command[0] == "cp":
        assert (tmp_path / "x").read_bytes() == b"0123456789abcdef"


def test_every_public_name_is_there_when_asked_for() -> None:
    from asyncdl import engine, errors  # noqa: PLC0415 - the modules behind them
    from asyncdl._reads import streaming  # noqa: PLC0415 - the modules behind them

    assert asyncdl.Engine is engine.Engine
    assert asyncdl.ObjectStream is streaming.ObjectStream
    assert asyncdl.DownloadError is errors.DownloadError
    assert set(asyncdl.__all__) <= set(dir(asyncdl))
    assert all(getattr(asyncdl, name).__name__ == name for name in asyncdl.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'Engin'"):
        _ = asyncdl.Engin  # type: ignore[attr-defined]
