"""The ``asyncdl`` command, in-process (click's CliRunner) and as a subprocess.

Every run talks HTTP to moto's server through the recording proxy, reached only
through ``--endpoint-url`` (the AWS endpoint variable is unset), so the proxy's
count of requests also shows that the option is used.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl._files.writer import is_temp_file
from asyncdl.cli import cli
from asyncdl.cli.output import printable
from asyncdl.cli.params import S3Url, parse_endpoint_url, parse_s3_url, parse_size
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..bulk.test_bulk import put_in_backend
from ..conftest import CHUNK, payload, temp_files
from ..spawn import sigint_ignored, spawned, stops_ignored


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def run(proxy: TcpProxy, *args: str) -> Result:
    """``asyncdl <command> --endpoint-url <proxy> <args>`` in-process."""
    command, *rest = args
    return CliRunner().invoke(cli, [command, "--endpoint-url", proxy.url, *rest])


def lines(text: str) -> list[str]:
    return text.splitlines()


#: The line that ends every ``cp -r`` and ``sync`` run (``output.Output.summary_line``).
SUMMARY = re.compile(
    r"(\(dryrun\) )?(sync: )?[\d,]+ (downloaded|to download) \([\d.]+ [KMGTPE]?i?B\)"
    r"(, [\d,]+ up to date, [\d,]+ (deleted|to delete))? in \d+\.\d s, [\d,]+ failed"
)


def without_summary(stderr: str) -> str:
    """``stderr`` without the summary line that ends it (which must be there)."""
    *rest, last = stderr.splitlines(keepends=True) or [""]
    assert SUMMARY.fullmatch(last.rstrip("\n")), stderr
    return "".join(rest)


def all_temp_files(directory: Path) -> list[Path]:
    return [path for path in directory.rglob("*") if is_temp_file(path.name)]


# -- cp -------------------------------------------------------------------------------


def test_cp_downloads_one_object_to_a_file(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="dir/big.bin", Body=data)
    target = tmp_path / "copy.bin"
    result = run(proxy, "cp", "--chunk-size", "64KiB", f"s3://{bucket}/dir/big.bin", str(target))
    assert result.exit_code == 0, result.stderr
    assert target.read_bytes() == data
    assert result.stdout == f"download: s3://{bucket}/dir/big.bin to {target}\n"
    assert result.stderr == ""  # not a terminal: no progress bar
    # One 64 KiB GET per part and the HEAD for the checksum, through --endpoint-url.
    assert [r.method for r in proxy.requests].count("GET") == 4
    assert [r.method for r in proxy.requests].count("HEAD") == 1
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("slash", ["", "/"])
def test_cp_into_a_directory_names_the_file_after_the_key(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, slash: str
) -> None:
    s3.put_object(Bucket=bucket, Key="a/b/report.csv", Body=b"x,y\n")
    result = run(proxy, "cp", f"s3://{bucket}/a/b/report.csv", f"{tmp_path}{slash}")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "report.csv").read_bytes() == b"x,y\n"
    assert os.listdir(tmp_path) == ["report.csv"]


def test_cp_replaces_an_existing_file(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"new")
    (tmp_path / "k").write_bytes(b"old content")
    result = run(proxy, "cp", "-q", f"s3://{bucket}/k", str(tmp_path / "k"))
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "k").read_bytes() == b"new"
    assert result.stdout == ""  # --quiet


def test_cp_json_prints_one_object_per_result(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put = s3.put_object(Bucket=bucket, Key="k.txt", Body=b"hello", ChecksumAlgorithm="CRC32")
    result = run(
        proxy, "cp", "--json", "--strategy", "head-first", f"s3://{bucket}/k.txt", str(tmp_path)
    )
    assert result.exit_code == 0, result.stderr
    (line,) = lines(result.stdout)
    assert json.loads(line) == {
        "ok": True,
        "bucket": bucket,
        "key": "k.txt",
        "path": str(tmp_path / "k.txt"),
        "size": 5,
        "etag": put["ETag"],
        "strategy": "head-first",
        "requests": 2,
        "checksum": f"CRC32:{put['ChecksumCRC32']}",
        "verified": True,
        "unverified_reason": None,
        "reused_bytes": 0,
        "partial_discarded": None,
        "error": None,
    }
    assert [r.method for r in proxy.requests] == ["HEAD", "GET"]


@pytest.mark.parametrize("validate", ["when_available", "off"])
def test_cp_validate_decides_whether_a_corrupted_body_fails(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, validate: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"some bytes", ChecksumAlgorithm="CRC32")
    proxy.rule = lambda r: Fault(corrupt_at=0) if r.method == "GET" else None
    target = tmp_path / "k"
    args = ["--strategy", "head-first", "--validate", validate, f"s3://{bucket}/k", str(target)]
    result = run(proxy, "cp", *args)
    if validate == "off":  # nothing checked: the corrupted bytes are kept
        assert result.exit_code == 0, result.stderr
        assert target.read_bytes() != b"some bytes"
    else:
        assert result.exit_code == 1
        error, summary = lines(result.stderr)
        assert error.startswith(f"error: s3://{bucket}/k: CRC32 mismatch: ")
        assert summary == "1 of 1 objects failed"
        assert os.listdir(tmp_path) == []


def test_cp_recursive_copies_the_folder_under_the_prefix(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {
        "logs/a.txt": b"a",
        "logs/2026/b.txt": b"bb",
        "logs/2026/deep/c.bin": payload(2 * CHUNK + 1),
        "logs2/not-this.txt": b"no",  # same first letters, another folder
        "other/not-this.txt": b"no",
    }
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    dest = tmp_path / "new-dir"  # created by the copy
    result = run(proxy, "cp", "-r", "--chunk-size", "64KiB", f"s3://{bucket}/logs", str(dest))
    assert result.exit_code == 0, result.stderr
    written = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert written == {
        "a.txt": b"a",
        "2026/b.txt": b"bb",
        "2026/deep/c.bin": objects["logs/2026/deep/c.bin"],
    }
    assert sorted(lines(result.stdout)) == sorted(
        f"download: s3://{bucket}/{key} to {dest / key.removeprefix('logs/')}"
        for key in objects
        if key.startswith("logs/")
    )


def test_cp_recursive_reports_each_failure_and_exits_1(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key in ("p/good-1", "p/bad", "p/good-2"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    proxy.rule = lambda r: Fault(status=403, error_code="AccessDenied") if "bad" in r.path else None
    result = run(proxy, "cp", "-r", "--json", f"s3://{bucket}/p/", str(tmp_path))
    assert result.exit_code == 1
    assert sorted(os.listdir(tmp_path)) == ["good-1", "good-2"]
    assert lines(without_summary(result.stderr)) == [
        f"error: s3://{bucket}/p/bad: access denied (AccessDenied: injected by the test proxy)",
        "1 of 3 objects failed",
    ]
    results = {r["key"]: r for r in map(json.loads, lines(result.stdout))}
    assert results["p/bad"]["ok"] is False
    assert results["p/bad"]["error"]["type"] == "AccessDeniedError"
    assert results["p/good-1"]["ok"] is results["p/good-2"]["ok"] is True


def test_cp_recursive_missing_bucket_exits_1_and_creates_nothing(
    proxy: TcpProxy, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    result = run(proxy, "cp", "-r", "s3://no-such-bucket-here/p/", str(dest))
    assert result.exit_code == 1
    assert lines(without_summary(result.stderr)) == [
        "error: s3://no-such-bucket-here/p/: bucket 'no-such-bucket-here' does not exist "
        "(NoSuchBucket)",
        "the listing failed after 0 objects (0 failed)",
    ]
    assert not dest.exists()


def test_cp_recursive_of_an_empty_prefix_says_so(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    result = run(proxy, "cp", "-r", f"s3://{bucket}/nothing/", str(tmp_path / "d"))
    assert result.exit_code == 0
    assert without_summary(result.stderr) == f"no objects under s3://{bucket}/nothing/\n"
    assert os.listdir(tmp_path) == []


# -- failures: one line each, tracebacks only with --debug ----------------------------


def test_a_missing_object_is_one_line_and_exit_1(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    result = run(proxy, "cp", f"s3://{bucket}/missing.txt", str(tmp_path))
    assert result.exit_code == 1
    assert lines(result.stderr) == [
        f"error: s3://{bucket}/missing.txt: no such object (NoSuchKey)",
        "1 of 1 objects failed",
    ]
    assert result.stdout == ""
    assert os.listdir(tmp_path) == []


def test_debug_shows_the_traceback(bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    result = run(proxy, "cp", "--debug", f"s3://{bucket}/missing.txt", str(tmp_path))
    assert result.exit_code == 1
    # --debug's log lines (the event loop, retries) and stats come before and after.
    assert "INFO asyncdl: event loop: " in result.stderr
    err = [line for line in lines(result.stderr) if not line.startswith(("stats: ", "INFO "))]
    assert err[0] == "Traceback (most recent call last):"
    assert "botocore.exceptions.ClientError" in result.stderr  # the cause, chained
    assert err[-2:] == [
        f"error: s3://{bucket}/missing.txt: no such object (NoSuchKey)",
        "1 of 1 objects failed",
    ]


def test_no_credentials_is_one_line(
    bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in FAKE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = run(proxy, "cp", f"s3://{bucket}/k", str(tmp_path))
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert lines(result.stderr)[0].startswith(f"error: s3://{bucket}/k: no AWS credentials found")


USAGE_ERRORS = {
    "not an s3 url": (["cp", "{bucket}/k", "{tmp}/f"], "'{bucket}/k' is not an s3://bucket/key"),
    "no bucket": (["cp", "s3:///k", "{tmp}/f"], "names no bucket"),
    "bad bucket": (["cp", "s3://bad bucket/k", "{tmp}/f"], "invalid bucket name"),
    "no key": (["cp", "s3://{bucket}", "{tmp}/f"], "names no object; use --recursive"),
    "a folder": (["cp", "s3://{bucket}/dir/", "{tmp}"], "names a folder; use --recursive"),
    "missing dir": (["cp", "s3://{bucket}/k", "{tmp}/no/f"], "directory '{tmp}/no' does not"),
    "missing dir/": (["cp", "s3://{bucket}/k", "{tmp}/no/"], "directory '{tmp}/no/' does not"),
    "size junk": (["cp", "--chunk-size", "8 megs", "s3://{bucket}/k", "{tmp}"], "not a size"),
    "size fraction": (["cp", "--chunk-size", "1.5MiB", "s3://{bucket}/k", "{tmp}"], "not a size"),
    "size small": (["cp", "--chunk-size", "1KiB", "s3://{bucket}/k", "{tmp}"], "got 1024 bytes"),
    "size large": (["cp", "--chunk-size", "6GiB", "s3://{bucket}/k", "{tmp}"], "between 64KiB"),
    "concurrency": (["cp", "--concurrency", "0", "s3://{bucket}/k", "{tmp}"], "--concurrency"),
    "strategy": (["cp", "--strategy", "fast", "s3://{bucket}/k", "{tmp}"], "'fast' is not one"),
    "validate": (["cp", "--validate", "yes", "s3://{bucket}/k", "{tmp}"], "'yes' is not one"),
    "endpoint": (["cp", "--endpoint-url", "localhost", "s3://{bucket}/k", "{tmp}"], "not an http"),
    "-r to a file": (["cp", "-r", "s3://{bucket}/p/", "{tmp}/file"], "is not a directory"),
    "-r no parent": (["cp", "-r", "s3://{bucket}/p/", "{tmp}/a/b"], "directory '{tmp}/a' does"),
    # Names the file system refuses (a part over 255 bytes): the OS's reason, no traceback.
    "name too long": (["cp", "s3://{bucket}/k", "{tmp}/" + "n" * 300], "cannot be used: File"),
    "dir too long": (["cp", "s3://{bucket}/k", "{tmp}/" + "d" * 300 + "/"], "cannot be used:"),
    # "file/." names a directory: the file named "file" is not replaced.
    "dir dot": (["cp", "s3://{bucket}/k", "{tmp}/file/."], "directory '{tmp}/file/.' does"),
    "-r too long": (["cp", "-r", "s3://{bucket}/p/", "{tmp}/" + "d" * 300], "cannot be used:"),
    "-r to stdout": (["cp", "-r", "s3://{bucket}/p/", "-"], "--recursive cannot write to stdout"),
    "json to stdout": (["cp", "--json", "s3://{bucket}/k", "-"], "--json cannot share stdout"),
    "stdout strategy": (["cp", "--strategy", "get-first", "s3://{bucket}/k", "-"], "--strategy"),
    "cat no key": (["cat", "s3://{bucket}/"], "names no object"),
    "cat --json": (["cat", "--json", "s3://{bucket}/k"], "No such option '--json'"),
    "key too long": (["cp", "s3://{bucket}/" + "k" * 1025, "{tmp}/f"], "key"),
    "no such command": (["get", "s3://{bucket}/k"], "No such command 'get'"),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_errors_exit_2_with_one_line_and_touch_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, case: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    (tmp_path / "file").write_bytes(b"keep")
    args, expected = USAGE_ERRORS[case]
    argv = [arg.format(bucket=bucket, tmp=tmp_path) for arg in args]
    result = CliRunner().invoke(cli, [*argv[:1], "--endpoint-url", proxy.url, *argv[1:]])
    assert result.exit_code == 2, result.output
    (line,) = lines(result.stderr)
    assert line.startswith("error: ")
    assert expected.format(bucket=bucket, tmp=tmp_path) in line
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert proxy.requests == []  # nothing was sent
    assert os.listdir(tmp_path) == ["file"]  # nothing was written
    assert (tmp_path / "file").read_bytes() == b"keep"


def test_no_command_prints_help_and_exits_2() -> None:
    result = CliRunner().invoke(cli, [])
    assert result.exit_code == 2
    assert "Usage: asyncdl [OPTIONS] COMMAND" in result.stderr
    assert "cp" in result.stderr
    assert "cat" in result.stderr


def test_help_exits_0() -> None:
    result = CliRunner().invoke(cli, ["cp", "--help"])
    assert result.exit_code == 0
    assert "--chunk-size SIZE" in result.stdout


# -- cat ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["cat", "cp -"])
def test_cat_writes_the_object_to_stdout(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, command: str
) -> None:
    data = payload(5 * CHUNK + 17)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=data)
    name, *dash = command.split()
    result = run(proxy, name, "--chunk-size", "64KiB", f"s3://{bucket}/big.bin", *dash)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == data
    assert result.stderr == ""
    # Parts of 64 KiB, through --endpoint-url, and the HEAD that brings the checksum.
    assert [r.method for r in proxy.requests].count("GET") == 6
    assert len(proxy.requests) == 7


def corrupt_gets(request: RequestRecord) -> Fault | None:
    return Fault(corrupt_at=100) if request.method == "GET" else None


@pytest.mark.parametrize("command", ["cat", "cp -"])
def test_cat_of_a_corrupted_object_exits_1_after_the_bytes(
    s3: Any, bucket: str, proxy: TcpProxy, command: str
) -> None:
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    proxy.rule = corrupt_gets
    name, *dash = command.split()
    result = run(proxy, name, "--chunk-size", "64KiB", f"s3://{bucket}/k", *dash)
    assert result.exit_code == 1
    # The bytes are out already; the status is what a pipeline acts on.
    assert len(result.stdout_bytes) == len(data) != 0
    error, summary = lines(result.stderr)
    assert error.startswith(f"error: s3://{bucket}/k: CRC32 mismatch: S3 says ")
    assert summary == "1 of 1 objects failed"


@pytest.mark.parametrize("command", ["cat", "cp -"])
@pytest.mark.parametrize(("validate", "status"), [("off", 0), ("required", 1)])
def test_cat_validate(
    s3: Any, bucket: str, proxy: TcpProxy, command: str, validate: str, status: int
) -> None:
    # One chunk: "when_available" adds no request for its checksum; "required" sends
    # the HEAD alongside the GET, "off" checks nothing.
    s3.put_object(Bucket=bucket, Key="k", Body=payload(1000), ChecksumAlgorithm="CRC32")
    proxy.rule = corrupt_gets
    name, *dash = command.split()
    result = run(proxy, name, "--validate", validate, f"s3://{bucket}/k", *dash)
    assert result.exit_code == status, result.stderr
    assert len(result.stdout_bytes) == 1000
    assert [r.method for r in proxy.requests].count("HEAD") == (validate == "required")


def test_cat_of_a_missing_object_exits_1(bucket: str, proxy: TcpProxy) -> None:
    result = run(proxy, "cat", f"s3://{bucket}/nope")
    assert result.exit_code == 1
    assert result.stdout_bytes == b""
    assert lines(result.stderr) == [
        f"error: s3://{bucket}/nope: no such object (NoSuchKey)",
        "1 of 1 objects failed",
    ]


# -- parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("65536", 65536),
        ("0", 0),
        ("512B", 512),
        ("64KiB", 64 * 1024),
        ("8MiB", 8 * 1024**2),
        ("8mib", 8 * 1024**2),
        ("1GiB", 1024**3),
        ("2TiB", 2 * 1024**4),
        ("100KB", 100_000),
        ("1GB", 10**9),
        ("5 MB", 5 * 10**6),
        (" 16MiB ", 16 * 1024**2),
    ],
)
def test_sizes_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text", ["", "MiB", "8M", "8 megs", "1.5MiB", "-1", "8MiBs", "8 Mi B", "0x10", "1e6"]
)
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def test_s3_urls_parse() -> None:
    assert parse_s3_url("s3://b/k") == S3Url("b", "k")
    assert parse_s3_url("s3://b/dir/k with space") == S3Url("b", "dir/k with space")
    assert parse_s3_url("s3://b") == S3Url("b", "")
    assert parse_s3_url("s3://b/") == S3Url("b", "")
    assert parse_s3_url("s3://b//k") == S3Url("b", "/k")  # S3 keys may begin with '/'
    for bad in ("b/k", "S3://b/k", "s3:/b/k", "s3://", "s3:///k", "https://b/k"):
        with pytest.raises(ValueError, match=r"s3://|no bucket"):
            parse_s3_url(bad)


def test_endpoint_urls_parse() -> None:
    assert parse_endpoint_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    assert parse_endpoint_url("https://s3.example.com") == "https://s3.example.com"
    for bad in ("127.0.0.1:9000", "ftp://host", "http://", "s3.example.com"):
        with pytest.raises(ValueError, match="not an http"):
            parse_endpoint_url(bad)


# -- as a subprocess ------------------------------------------------------------------


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    return {**env, **FAKE_ENV}


def spawn(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "asyncdl.cli", *args], env=cli_env(), **kwargs)


def test_subprocess_exit_codes(s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    endpoint = ["--endpoint-url", proxy.url]
    ok = spawn("cp", *endpoint, f"s3://{bucket}/k", str(tmp_path / "k"))
    missing = spawn("cp", *endpoint, f"s3://{bucket}/missing", str(tmp_path / "m"))
    usage = spawn("cp", *endpoint, "--chunk-size", "lots", f"s3://{bucket}/k", str(tmp_path))
    outcomes = [(p.communicate(timeout=60), p.returncode) for p in (ok, missing, usage)]
    assert [code for _, code in outcomes] == [0, 1, 2]
    (ok_out, _), (_, missing_err), (_, usage_err) = (pair for pair, _ in outcomes)
    assert ok_out.decode() == f"download: s3://{bucket}/k to {tmp_path / 'k'}\n"
    assert missing_err.decode().splitlines() == [
        f"error: s3://{bucket}/missing: no such object (NoSuchKey)",
        "1 of 1 objects failed",
    ]
    assert usage_err.decode().count("\n") == 1
    assert (tmp_path / "k").read_bytes() == b"data"
    assert os.listdir(tmp_path) == ["k"]


def spawn_cli(*args: str, ignoring: Sequence[signal.Signals] = ()) -> Any:
    """``asyncdl ARGS`` as a shell starts it (see ``spawned``), for the tests that signal it."""
    return spawned(
        [sys.executable, "-m", "asyncdl.cli", *args],
        ignoring=ignoring,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_a_temp_file(running: subprocess.Popen[bytes], directory: Path) -> None:
    deadline = time.monotonic() + 60
    while not all_temp_files(directory) and running.poll() is None:
        assert time.monotonic() < deadline, "the download never started"
        time.sleep(0.02)
    assert running.poll() is None, running.communicate()


def hang_all_but_the_first_part(proxy: TcpProxy, seconds: float) -> None:
    # The first part passes, so the temp file exists; every other part waits.
    proxy.rule = lambda r: (
        Fault(delay=seconds) if r.range and not r.range.startswith("bytes=0-") else None
    )


STOPS = {
    "Ctrl-C": (signal.SIGINT, 130),
    "SIGTERM": (signal.SIGTERM, 143),
    "SIGHUP": (signal.SIGHUP, 129),
}


@pytest.mark.parametrize("recursive", [False, True], ids=["one", "recursive"])
@pytest.mark.parametrize("stop", STOPS)
def test_a_stop_signal_cancels_cleanly_with_128_plus_its_number(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, recursive: bool, stop: str
) -> None:
    signum, status = STOPS[stop]
    s3.put_object(Bucket=bucket, Key="dir/big.bin", Body=payload(8 * CHUNK))
    hang_all_but_the_first_part(proxy, 60)
    target = tmp_path / "big.bin"
    if recursive:
        args = ["-r", f"s3://{bucket}/dir/", str(tmp_path)]
    else:
        args = [f"s3://{bucket}/dir/big.bin", str(target)]
    # Whatever started pytest (a background job ignores SIGINT, nohup SIGHUP), the child
    # gets the signal at its default. --no-resume: a temp file, removed on the way out
    # (a partial file would stay).
    options = ["--endpoint-url", proxy.url, "--chunk-size", "64KiB", "--no-resume"]
    with stops_ignored(), spawn_cli("cp", *options, *args) as running:
        wait_for_a_temp_file(running, tmp_path)
        running.send_signal(signum)
        _, err = running.communicate(timeout=60)
    assert running.returncode == status, err.decode()
    assert b"Traceback" not in err
    assert all_temp_files(tmp_path) == []
    assert not target.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ignored_at_start_stays_ignored(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, signum: signal.Signals
) -> None:
    # As under nohup, or a background job of a non-interactive shell (SIGINT): a
    # command keeps an ignored signal ignored (POSIX), and the download goes on.
    data = payload(4 * CHUNK)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=data)
    hang_all_but_the_first_part(proxy, 1.5)
    target = tmp_path / "big.bin"
    args = ["--endpoint-url", proxy.url, "--chunk-size", "64KiB", "--no-resume"]
    with spawn_cli(
        "cp", *args, f"s3://{bucket}/big.bin", str(target), ignoring=[signum]
    ) as running:
        wait_for_a_temp_file(running, tmp_path)
        running.send_signal(signum)
        _, err = running.communicate(timeout=60)
    assert running.returncode == 0, err.decode()
    assert target.read_bytes() == data


def probe_children(code: str, ignoring: Any) -> tuple[str, str]:
    """What ``python -c code`` prints as a plain child and as a ``spawned`` one, while
    this process ignores signals (``ignoring``: a context manager of ``spawn``)."""
    probe = [sys.executable, "-c", code]
    with ignoring():
        plain = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=True)
        with spawned(probe, stdout=subprocess.PIPE, text=True) as child:
            out, _ = child.communicate(timeout=60)
    return plain.stdout, out


def test_children_get_the_default_ctrl_c_whatever_started_pytest() -> None:
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    plain, out = probe_children(code, sigint_ignored)
    assert plain == "False\n"  # what a plain child of an ignoring parent gets
    assert out == "True\n"


def test_children_get_the_default_stop_signals_whatever_started_pytest() -> None:
    # Under nohup pytest ignores SIGHUP; some runners ignore SIGTERM.
    code = (
        "import signal; print([signal.getsignal(n) is signal.SIG_DFL"
        " for n in (signal.SIGTERM, signal.SIGHUP)])"
    )
    plain, out = probe_children(code, stops_ignored)
    assert plain == "[False, False]\n"  # what a plain child of an ignoring parent gets
    assert out == "[True, True]\n"


def test_cat_of_a_corrupted_object_exits_1_as_a_subprocess(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="SHA256")
    proxy.rule = corrupt_gets
    running = spawn("cat", "--endpoint-url", proxy.url, "--chunk-size", "64KiB", f"s3://{bucket}/k")
    out, err = running.communicate(timeout=60)
    assert running.returncode == 1
    assert len(out) == len(data)
    assert err.decode().splitlines()[0].startswith(f"error: s3://{bucket}/k: SHA256 mismatch: ")


def test_cat_into_a_closed_pipe_stops_quietly(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    s3.put_object(Bucket=bucket, Key="big.bin", Body=payload(4 * 2**20))
    running = spawn("cat", "--endpoint-url", proxy.url, f"s3://{bucket}/big.bin")
    assert running.stdout is not None
    assert len(running.stdout.read(10)) == 10
    running.stdout.close()  # the reader goes away, as `| head -c 10` does
    _, err = running.communicate(timeout=60)
    assert running.returncode == 1
    assert err == b""


@pytest.mark.parametrize("command", ["cp", "sync", "sync --dry-run"])
def test_a_closed_pipe_stops_cp_and_sync_quietly(
    command: str, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # `asyncdl cp -r ... | head -1`: as cat, the command stops once nobody reads its
    # lines (a Unix tool killed by SIGPIPE would); it says nothing, leaves no temp
    # file, and exits 1 (not every object was copied). More lines than a pipe holds
    # (64 KiB): a --dry-run, which fetches nothing, could otherwise print them all
    # into the pipe and end before the reader goes.
    put_in_backend(bucket, {f"p/{i:04d}": payload(100, seed=i) for i in range(1000)})
    verb, *flags = command.split()
    recursive = ["-r"] if verb == "cp" else []
    dest = tmp_path / "d"
    running = spawn(
        verb, *recursive, *flags, "--concurrency", "2", "--endpoint-url", proxy.url,
        f"s3://{bucket}/p/", str(dest),
    )  # fmt: skip
    assert running.stdout is not None
    assert running.stdout.readline().split(b":")[0] in (b"download", b"(dryrun) download")
    running.stdout.close()  # the reader goes away, as `| head -1` does
    _, err = running.communicate(timeout=60)
    assert (running.returncode, err.decode()) == (1, "")
    copied = sorted(path.name for path in dest.iterdir()) if dest.exists() else []
    assert len(copied) < 1000  # it stopped
    assert all(not name.startswith(".") for name in copied)  # no temp file left


@pytest.fixture
def terminal() -> Iterator[tuple[int, int]]:
    """A pseudo-terminal: (the side a child writes to, the side the test reads)."""
    parent, child = pty.openpty()
    yield child, parent
    os.close(parent)


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_progress_bar_on_a_terminal(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, terminal: tuple[int, int]
) -> None:
    child, parent = terminal
    s3.put_object(Bucket=bucket, Key="big.bin", Body=payload(3 * 2**20))
    running = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncdl.cli",
            "cp",
            "--endpoint-url",
            proxy.url,
            f"s3://{bucket}/big.bin",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=child,
        env={**cli_env(), "TERM": "xterm", "COLUMNS": "120"},
    )
    os.close(child)
    drawn = read_all(parent).decode()
    out, _ = running.communicate(timeout=60)
    assert running.returncode == 0
    assert out.decode() == f"download: s3://{bucket}/big.bin to {tmp_path / 'big.bin'}\n"
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)  # without the terminal's codes
    assert "1/1 objects" in text
    assert "3.0/3.0 MiB" in text


def test_demo_subcommand_runs_the_main_job(tmp_path: Path) -> None:
    args = ["--objects", "5", "--large-size", str(2**20), "--rtt-ms", "0", "--dest", str(tmp_path)]
    running = spawn("demo", *args)
    out_bytes, err = running.communicate(timeout=120)
    assert running.returncode == 0, err.decode()
    out = out_bytes.decode()
    rows = [line.split() for line in out.splitlines() if "-first " in line]
    assert [(row[0], row[1]) for row in rows] == [("get-first", "6"), ("head-first", "6")]
    assert os.listdir(tmp_path) == []


def test_cp_validate_required_fails_what_it_cannot_verify(
    s3: Any, s3_without_checksums: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # One object stored with a checksum, one without (boto3 adds a CRC32 to every put
    # unless told otherwise): the second is fetched but not published, and the error
    # line says why; the exit status is 1.
    s3.put_object(Bucket=bucket, Key="p/sum", Body=payload(3 * CHUNK), ChecksumAlgorithm="CRC32")
    s3_without_checksums.put_object(Bucket=bucket, Key="p/none", Body=payload(3 * CHUNK))
    dest = tmp_path / "dest"
    args = ["--chunk-size", "64KiB", "--validate", "required", "--json"]
    result = run(proxy, "cp", *args, "--recursive", f"s3://{bucket}/p", str(dest))
    assert result.exit_code == 1
    rows = {row["key"]: row for row in map(json.loads, lines(result.stdout))}
    assert rows["p/sum"]["verified"] is True
    assert rows["p/none"]["error"]["type"] == "ChecksumError"
    assert "no stored checksum" in result.stderr
    assert "1 of 2 objects failed" in result.stderr
    assert sorted(os.listdir(dest)) == ["sum"]


def test_a_name_that_is_no_utf8_is_shown_escaped() -> None:
    # A byte that is not UTF-8 in a local name (a directory given, a file found)
    # comes out of the file system as a lone surrogate: stdout would write it back as
    # the raw byte under surrogateescape (0x9b is an 8-bit CSI) or fail on it.
    name = os.fsdecode(b"/data/x\x9b[8m/a.txt")
    assert printable(f"download: s3://b/a.txt to {name}") == (
        "download: s3://b/a.txt to /data/x\\udc9b[8m/a.txt"
    )
    assert printable("plain é ✓ 😀") == "plain é ✓ 😀"
