"""``asyncdl sync --delete`` in a destination others write to: records it never wrote,
names and records holding terminal escapes, asyncdl's own directories left there, a
file it cannot delete under ``--json``. Through the CLI, against moto via the proxy."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl._files.file_records import RUN_JOURNAL_DIR, SIDECAR_DIR, XATTR
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from .test_cli import without_summary

#: Another user's id: the tests run as root, which may give a file away.
OTHER_UID = 1001


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def sync(proxy: TcpProxy, *args: str) -> Result:
    return CliRunner().invoke(cli, ["sync", "--endpoint-url", proxy.url, *args])


def test_a_sidecar_another_user_planted_deletes_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a.txt", Body=b"hello")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp, or a team's directory
    assert sync(proxy, f"s3://{bucket}/p", str(shared)).exit_code == 0
    report = shared / "report.txt"
    report.write_text("my quarterly report\n")  # the user's own, never from S3
    st = report.stat()
    # What anyone who may write to the directory can plant: the file's size and mtime
    # are anyone's to see, the directory's inode too.
    line = {
        "path": "report.txt",
        "etag": "",
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "bucket": bucket,
        "key": "p/report.txt",
        "root": shared.stat().st_ino,
    }
    (shared / SIDECAR_DIR).mkdir()
    (shared / SIDECAR_DIR / "x.jsonl").write_text(json.dumps(line) + "\n")
    if os.geteuid() == 0:
        for path in (shared / SIDECAR_DIR, shared / SIDECAR_DIR / "x.jsonl"):
            os.chown(path, OTHER_UID, OTHER_UID)
    else:  # a user cannot give a file away: one anyone may write is not ours either
        (shared / SIDECAR_DIR).chmod(0o777)

    result = sync(proxy, "--delete", f"s3://{bucket}/p", str(shared))

    assert result.exit_code == 0, result.output
    assert report.read_text() == "my quarterly report\n"
    assert "delete:" not in result.stdout
    assert f"left alone: {report} (not written by asyncdl)" in result.stderr


ESCAPES = "\x1b]0;owned\x07\x1b[2K\rerror: credentials expired\x1b[8m\x9b"


def test_terminal_escapes_in_names_and_records_are_shown_escaped(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a.txt", Body=b"a")
    data = tmp_path / "data"
    assert sync(proxy, f"s3://{bucket}/p", str(data)).exit_code == 0
    notes = data / "notes.txt"
    notes.write_text("from a tarball\n")
    st = notes.stat()
    # As a tarball extracted with --xattrs (or rsync -aX) brings it.
    record = {
        "etag": "",
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "path": "notes.txt",
        "root": data.stat().st_ino,
        "bucket": ESCAPES,
        "key": "k\n",
    }
    os.setxattr(notes, XATTR, json.dumps(record).encode())
    (data / f"x{ESCAPES}").write_bytes(b"a file named by someone else")

    result = sync(proxy, "--delete", f"s3://{bucket}/p", str(data))

    assert result.exit_code == 0, result.output
    for char in "\x1b\x07\r\x9b":
        assert char not in result.output
    assert result.stderr.count("left alone:") == 2, result.stderr
    shown = "\\x1b]0;owned\\x07\\x1b[2K\\rerror: credentials expired\\x1b[8m\\x9b"
    assert f"left alone: {notes} (written by asyncdl from s3://{shown}/k\\n)" in result.stderr
    assert f"left alone: {data}/x{shown} (not written by asyncdl)" in result.stderr


def test_asyncdl_own_directories_are_not_walked(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a.txt", Body=b"a")
    data = tmp_path / "data"
    assert sync(proxy, f"s3://{bucket}/p", str(data)).exit_code == 0
    (data / RUN_JOURNAL_DIR).mkdir()
    (data / RUN_JOURNAL_DIR / "0abc.host-1.dirs").write_text('"x"\n')
    s3.delete_object(Bucket=bucket, Key="p/a.txt")

    result = sync(proxy, "--delete", "--json", f"s3://{bucket}/p", str(data))

    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [{"action": "delete", "dry_run": False, "path": str(data / "a.txt")}]
    assert (data / RUN_JOURNAL_DIR / "0abc.host-1.dirs").exists()


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Files made immutable (``chattr +i``: root cannot remove them either)."""
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_file_it_cannot_delete_has_its_json_line(
    immutable: list[Path], s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        s3.put_object(Bucket=bucket, Key=f"p/{name}", Body=name.encode())
    data = tmp_path / "data"
    assert sync(proxy, f"s3://{bucket}/p", str(data)).exit_code == 0
    for name in ("a", "b"):
        s3.delete_object(Bucket=bucket, Key=f"p/{name}")
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(data / "a")], check=True)
        immutable.append(data / "a")
    else:
        (data / "a").chmod(0o444)
        data.chmod(0o555)

    try:
        result = sync(proxy, "--delete", "--json", f"s3://{bucket}/p", str(data))
    finally:
        data.chmod(0o755)

    assert result.exit_code == 1, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    (failed,) = [line for line in lines if line["path"] == str(data / "a")]
    error = failed.pop("error")
    assert failed == {"action": "delete", "dry_run": False, "path": str(data / "a")}
    assert error["type"] == "RemovalError"
    assert error["message"].startswith(f"cannot delete {data / 'a'}: "), error
    assert (data / "a").exists()
    assert without_summary(result.stderr).splitlines()[-1] == "could not delete 1 file"


def test_keys_with_terminal_escapes_are_shown_escaped_in_every_line(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # A bucket's keys are anyone's choosing who may write to it: a key with a carriage
    # return or escapes would rewrite the terminal (moto's server takes no newline).
    key = f"p/a{ESCAPES}b"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3.put_object(Bucket=bucket, Key=f"p/gone{ESCAPES}", Body=b"y")
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if "gone" in r.path else None
    )
    result = CliRunner().invoke(
        cli, ["cp", "-r", "--endpoint-url", proxy.url, f"s3://{bucket}/p", str(tmp_path / "d")]
    )
    assert result.exit_code == 1, result.output
    for char in "\x1b\x07\r\x9b":
        assert char not in result.output
    shown = "\\x1b]0;owned\\x07\\x1b[2K\\rerror: credentials expired\\x1b[8m\\x9b"
    (line,) = result.stdout.splitlines()  # one object downloaded, one line
    assert line.startswith(f"download: s3://{bucket}/p/a{shown}b to "), line
    assert (tmp_path / "d" / f"a{ESCAPES}b").read_bytes() == b"x"  # the file as named
    assert f"error: s3://{bucket}/p/gone{shown}: access denied" in result.stderr
