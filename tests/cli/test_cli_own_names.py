"""A key named like one of asyncdl's own files (a partial, a journal, a temp file, the
record sidecar, Dask's run journals) is refused as that object's error, as a key that
would leave the destination is: downloaded, it would be taken for asyncdl's own file
(a partial adopted by its target, say) and lost while reported downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, payload
from .test_cli import without_summary


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def run(proxy: TcpProxy, *args: str) -> Result:
    command, *rest = args
    return CliRunner().invoke(cli, [command, "--endpoint-url", proxy.url, *rest])


BIG = payload(3 * CHUNK + 11, seed=4)
OWN = b"not a partial: an object of its own"


@pytest.mark.parametrize("command", [["cp", "-r"], ["sync"]])
def test_a_key_named_like_a_partial_is_an_error_and_its_neighbour_is_right(
    command: list[str], s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/big.bin", Body=BIG)
    s3.put_object(Bucket=bucket, Key="p/.big.bin.asyncdl-partial", Body=OWN)
    dest = tmp_path / "dest"

    result = run(proxy, *command, "--chunk-size", "64KiB", f"s3://{bucket}/p", str(dest))

    assert result.exit_code == 1, result.output
    assert result.stdout == f"download: s3://{bucket}/p/big.bin to {dest / 'big.bin'}\n"
    assert without_summary(result.stderr).splitlines() == [
        f"error: s3://{bucket}/p/.big.bin.asyncdl-partial: "
        "refusing key 'p/.big.bin.asyncdl-partial': segment "
        "'.big.bin.asyncdl-partial' is named like one of asyncdl's own files "
        "(a partial file, journal, temp file or record): it would be taken for one",
        "1 of 2 objects failed",
    ]
    assert os.listdir(dest) == ["big.bin"]
    assert (dest / "big.bin").read_bytes() == BIG
    # Nothing was asked for the refused key.
    assert not any("asyncdl-partial" in r.path for r in proxy.requests)


def test_cp_of_an_own_named_key_into_a_directory_is_refused(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/.big.bin.asyncdl-journal", Body=OWN)
    result = run(proxy, "cp", f"s3://{bucket}/p/.big.bin.asyncdl-journal", f"{tmp_path}/")
    assert result.exit_code == 2, result.output
    assert "named like one of asyncdl's own files" in result.stderr
    assert "give DEST a file name" in result.stderr
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []
    # Named by the user, the file is theirs to name.
    named = run(proxy, "cp", f"s3://{bucket}/p/.big.bin.asyncdl-journal", f"{tmp_path}/j")
    assert named.exit_code == 0, named.output
    assert (tmp_path / "j").read_bytes() == OWN
