"""Keys that differ only in case or Unicode form, on a file system that does not tell
them apart: the second of a pair is that object's error, never a silent overwrite.

This machine's kernel mounts no folding file system (no ``CONFIG_UNICODE`` for ext4's
``casefold``, no vfat), so the folding cases run with a test double of the probe
(``folding.probe``, asked once per destination); the probe itself runs on the real
file system here, which keeps every name its own."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl._files import folding
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

_names = itertools.count()
NFC, NFD = "caf\u00e9.txt", "cafe\u0301.txt"
OBJECTS = {
    "p/A.txt": b"upper",
    "p/a.txt": b"lower",
    f"p/{NFC}": b"composed",
    f"p/{NFD}": b"decomposed",
    # One directory on a folding file system, two files in it: no collision.
    "p/Dir/x": b"x",
    "p/dir/y": b"y",
}


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def new_bucket(s3: Any) -> str:
    name = f"folding-{next(_names)}"
    s3.create_bucket(Bucket=name)
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=name, Key=key, Body=body)
    return name


def copy(proxy: TcpProxy, command: str, bucket: str, dest: Path) -> Result:
    extra = ["-r"] if command == "cp" else []
    args = [command, *extra, "--endpoint-url", proxy.url, f"s3://{bucket}/p", str(dest)]
    return CliRunner().invoke(cli, args)


def refusals(result: Result) -> list[str]:
    return sorted(line for line in result.output.splitlines() if line.startswith("error:"))


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".asyncdl-etags" not in p.parts
    }


@pytest.mark.parametrize("command", ["cp", "sync"])
def test_on_a_file_system_that_folds_case_the_second_of_a_pair_is_refused(
    command: str, s3: Any, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    def folds_case(dir_fd: int) -> folding.Fold:
        asked.append(dir_fd)
        return folding.fold_case

    monkeypatch.setattr(folding, "probe", folds_case)
    bucket, dest = new_bucket(s3), tmp_path / "dest"

    result = copy(proxy, command, bucket, dest)

    assert result.exit_code == 1, result.output
    assert len(asked) == 1  # once per destination
    # In key order (UTF-8 bytes): A.txt before a.txt, the NFD form before the NFC one.
    lower, composed = refusals(result)
    assert lower.startswith(f"error: s3://{bucket}/p/a.txt: ")
    assert "key 'p/A.txt'" in lower
    assert "case or Unicode form" in lower
    assert composed.startswith(f"error: s3://{bucket}/p/{NFC}: ")
    assert f"key 'p/{NFD}'" in composed
    assert files(dest) == {
        "A.txt": b"upper",
        NFD: b"decomposed",
        "Dir/x": b"x",
        "dir/y": b"y",
    }


def test_on_a_file_system_that_normalises_unicode_only_case_pairs_both_land(
    s3: Any, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folding, "probe", lambda dir_fd: folding.fold_form)
    bucket, dest = new_bucket(s3), tmp_path / "dest"

    result = copy(proxy, "cp", bucket, dest)

    assert result.exit_code == 1, result.output
    (composed,) = refusals(result)
    assert composed.startswith(f"error: s3://{bucket}/p/{NFC}: ")
    assert set(files(dest)) == {"A.txt", "a.txt", NFD, "Dir/x", "dir/y"}


def test_where_every_name_is_its_own_every_key_lands(
    s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    bucket, dest = new_bucket(s3), tmp_path / "dest"

    result = copy(proxy, "cp", bucket, dest)

    assert result.exit_code == 0, result.output
    assert files(dest) == {key.removeprefix("p/"): body for key, body in OBJECTS.items()}


def test_the_probe_finds_this_file_system_keeps_names_apart_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert folding.probe(fd) is None
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_the_probe_of_a_directory_it_cannot_write_says_nothing_folds(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    os.rmdir(tmp_path)  # no file can be made in a removed directory
    try:
        assert folding.probe(fd) is None
    finally:
        os.close(fd)


def test_paths_fold_as_the_file_systems_compare_them() -> None:
    assert folding.fold_case("Dir/A.TXT") == folding.fold_case("dir/a.txt")
    assert folding.fold_case(NFC) == folding.fold_case(NFD.upper())
    assert folding.fold_case("STRASSE") == folding.fold_case("stra\u00dfe")
    assert folding.fold_form(NFC) == folding.fold_form(NFD)
    assert folding.fold_form("A.txt") != folding.fold_form("a.txt")
