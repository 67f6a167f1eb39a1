"""``asyncdl ls``, the filters and dry run of ``cp -r``, the summary line of ``cp -r``
and ``sync``, and the bar's totals from the listing's first pages (in a pty).

Every run talks HTTP to moto's server through the recording proxy, reached only
through ``--endpoint-url``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..bulk.test_bulk import put_in_backend
from .test_cli import cli_env, read_all, terminal  # noqa: F401 - terminal is a fixture

#: A summary line's time varies: any number of seconds.
_SECONDS = r"in \d+\.\d s"


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def run(proxy: TcpProxy, *args: str) -> Result:
    command, *rest = args
    return CliRunner().invoke(cli, [command, "--endpoint-url", proxy.url, *rest])


def seed(s3: Any, bucket: str) -> dict[str, bytes]:
    objects = {
        "logs/a.txt": b"a" * 10,
        "logs/b.csv": b"b" * 2000,
        "logs/2026/c.csv": b"c" * 30,
        "logs/2026/deep/d.txt": b"d" * 4,
        "logs2/x": b"x",
        "top.txt": b"t",
    }
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return objects


_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +(\S+) (.+)")


def listed_lines(stdout: str) -> list[tuple[str, str]]:
    """``(size, name)`` of each object line, ``("PRE", name)`` of each folder line."""
    out = []
    for line in stdout.splitlines():
        if line.strip().startswith("PRE "):
            assert line == " " * 27 + line.strip(), repr(line)  # aws s3 ls's column
            out.append(("PRE", line.strip()[4:]))
        elif match := _LINE.fullmatch(line):
            out.append((match.group(1), match.group(2)))
        else:
            out.append(("?", line))
    return out


# -- ls ------------------------------------------------------------------------------


def test_ls_of_a_folder_shows_its_objects_and_folders(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    seed(s3, bucket)
    result = run(proxy, "ls", f"s3://{bucket}/logs/")
    assert result.exit_code == 0, result.stderr
    assert listed_lines(result.stdout) == [
        ("PRE", "2026/"),
        ("10", "a.txt"),
        ("2000", "b.csv"),
    ]
    # One LIST, with the delimiter: nothing else was sent.
    assert [r.method for r in proxy.requests] == ["GET"]
    assert "delimiter=%2F" in proxy.requests[0].path
    # Without a slash, the key is a prefix that the names continue (as aws s3 ls).
    result = run(proxy, "ls", f"s3://{bucket}/lo")
    assert listed_lines(result.stdout) == [("PRE", "logs/"), ("PRE", "logs2/")]
    result = run(proxy, "ls", f"s3://{bucket}")
    assert listed_lines(result.stdout) == [("PRE", "logs/"), ("PRE", "logs2/"), ("1", "top.txt")]


def test_ls_recursive_human_readable_and_summarize(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    seed(s3, bucket)
    result = run(proxy, "ls", "-r", "-H", "--summarize", f"s3://{bucket}/logs/")
    assert result.exit_code == 0, result.stderr
    *objects, blank, count, total = result.stdout.splitlines()
    assert listed_lines("\n".join(objects)) == [
        ("30", "B logs/2026/c.csv"),
        ("4", "B logs/2026/deep/d.txt"),
        ("10", "B logs/a.txt"),
        ("2.0", "KiB logs/b.csv"),
    ]
    assert (blank, count, total) == ("", "Total Objects: 4", "   Total Size: 2.0 KiB")
    plain = run(proxy, "ls", "--recursive", "--summarize", f"s3://{bucket}/logs/")
    assert plain.stdout.splitlines()[-1] == "   Total Size: 2044"


def test_ls_json_lines(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    objects = seed(s3, bucket)
    result = run(proxy, "ls", "--json", f"s3://{bucket}/logs/")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0] == {"key": "logs/2026/", "type": "directory"}
    files = rows[1:]
    assert [(r["key"], r["type"], r["size"]) for r in files] == [
        ("logs/a.txt", "file", 10),
        ("logs/b.csv", "file", 2000),
    ]
    head = s3.head_object(Bucket=bucket, Key="logs/b.csv")
    assert files[1]["etag"] == head["ETag"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", files[1]["last_modified"])
    whole = run(proxy, "ls", "-r", "--json", "--summarize", f"s3://{bucket}")
    *lines, summary = whole.stdout.splitlines()
    assert sorted(json.loads(line)["key"] for line in lines) == sorted(objects)
    assert json.loads(summary) == {
        "type": "summary",
        "objects": len(objects),
        "size": sum(map(len, objects.values())),
    }


def test_ls_without_a_url_lists_the_buckets(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    result = run(proxy, "ls")
    assert result.exit_code == 0, result.stderr
    names = [line.split()[-1] for line in result.stdout.splitlines()]
    assert bucket in names
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", line)
        for line in result.stdout.splitlines()
    )
    rows = [json.loads(line) for line in run(proxy, "ls", "--json").stdout.splitlines()]
    assert bucket in [row["bucket"] for row in rows]


def test_ls_prints_hostile_names_escaped(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    s3.put_object(Bucket=bucket, Key="p/\x1b[2J\u202eevil", Body=b"x")
    result = run(proxy, "ls", f"s3://{bucket}/p/")
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout
    assert "\u202e" not in result.stdout
    assert result.stdout.rstrip("\n").endswith(r"\x1b[2J\u202eevil")
    line = json.loads(run(proxy, "ls", "--json", f"s3://{bucket}/p/").stdout)
    assert line["key"] == "p/\x1b[2J\u202eevil"


def test_ls_of_a_missing_bucket_is_one_line_and_exit_1(proxy: TcpProxy) -> None:
    result = run(proxy, "ls", "s3://no-such-bucket-here/p/")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: s3://no-such-bucket-here/p/: bucket 'no-such-bucket-here' does not exist "
        "(NoSuchBucket)\n"
    )


def test_ls_usage_errors(proxy: TcpProxy) -> None:
    assert run(proxy, "ls", "http://example.com/x").exit_code == 2
    assert run(proxy, "ls", "--recursive").exit_code == 2
    assert proxy.requests == []


def test_ls_streams_page_by_page(s3: Any, bucket: str, proxy: TcpProxy) -> None:
    put_in_backend(bucket, {f"many/{i:05d}": b"" for i in range(2500)})
    # Every page after the first waits: the first page's lines must not. (Long enough
    # that a start-up slowed by a loaded machine still comes in under it.)
    proxy.rule = lambda r: Fault(delay=6) if "continuation-token" in r.path else None
    started = time.monotonic()
    running = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncdl.cli",
            "ls",
            "-r",
            "--endpoint-url",
            proxy.url,
            f"s3://{bucket}/many/",
        ],
        stdout=subprocess.PIPE,
        env=cli_env(),
    )
    assert running.stdout is not None
    first = running.stdout.readline()
    first_after = time.monotonic() - started
    rest = running.stdout.read()
    running.stdout.close()
    running.wait(timeout=60)
    assert running.returncode == 0
    assert first.endswith(b" many/00000\n")
    assert first_after < 6 < time.monotonic() - started
    assert len((first + rest).splitlines()) == 2500


# -- cp -r: filters, dry run ---------------------------------------------------------


def test_cp_recursive_filters_in_command_line_order(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    seed(s3, bucket)
    dest = tmp_path / "d"
    result = run(
        proxy, "cp", "-r", "--exclude", "*", "--include", "*.csv", f"s3://{bucket}/logs/", str(dest)
    )
    assert result.exit_code == 0, result.stderr
    written = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert written == ["2026/c.csv", "b.csv"]
    # The reverse order keeps nothing: the last filter that matches wins.
    other = tmp_path / "e"
    result = run(
        proxy,
        "cp",
        "-r",
        "--include",
        "*.csv",
        "--exclude",
        "*",
        f"s3://{bucket}/logs/",
        str(other),
    )
    assert result.exit_code == 0, result.stderr
    assert not other.exists()
    # No GET was sent for what the filters left out.
    got = [
        r.path.split("?")[0]
        for r in proxy.requests
        if r.method == "GET" and "list-type" not in r.path
    ]
    assert sorted(got) == [f"/{bucket}/logs/2026/c.csv", f"/{bucket}/logs/b.csv"]


@pytest.mark.parametrize("spelling", ["--dry-run", "--dryrun"])
def test_cp_recursive_dry_run_prints_and_does_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, spelling: str
) -> None:
    seed(s3, bucket)
    dest = tmp_path / "d"
    result = run(
        proxy, "cp", "-r", spelling, "--exclude", "*.txt", f"s3://{bucket}/logs", str(dest)
    )
    assert result.exit_code == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        f"(dryrun) download: s3://{bucket}/logs/2026/c.csv to {dest / '2026' / 'c.csv'}",
        f"(dryrun) download: s3://{bucket}/logs/b.csv to {dest / 'b.csv'}",
    ]
    assert re.fullmatch(
        rf"\(dryrun\) 2 to download \(2\.0 KiB\) {_SECONDS}, 0 failed\n", result.stderr
    )
    assert not dest.exists()
    assert all("list-type" in r.path for r in proxy.requests)  # the listing alone


def test_sync_takes_dryrun_too(s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    seed(s3, bucket)
    result = run(proxy, "sync", "--dryrun", f"s3://{bucket}/logs", str(tmp_path / "d"))
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 4
    assert not (tmp_path / "d").exists()


def test_filters_without_recursive_are_a_usage_error(
    bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    result = run(proxy, "cp", "--exclude", "*", f"s3://{bucket}/k", str(tmp_path / "k"))
    assert result.exit_code == 2
    assert "--exclude and --include apply only with --recursive" in result.stderr
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []


def test_help_says_that_order_matters() -> None:
    for command in ("cp", "sync"):
        text = " ".join(CliRunner().invoke(cli, [command, "--help"]).stdout.split())
        assert "order matters: the last --exclude/--include that matches a key wins" in text
        assert "--dry-run, --dryrun" in text


# -- the summary line ----------------------------------------------------------------


def test_cp_recursive_ends_with_a_summary_line(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    seed(s3, bucket)
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if "a.txt" in r.path else None
    )
    result = run(
        proxy,
        "cp",
        "-r",
        "--no-progress",
        f"s3://{bucket}/logs/",
        str(tmp_path / "d"),
    )
    assert result.exit_code == 1
    *_, failures, summary = result.stderr.splitlines()
    assert failures == "1 of 4 objects failed"
    assert re.fullmatch(rf"3 downloaded \(2\.0 KiB\) {_SECONDS}, 1 failed", summary), summary
    quiet = run(proxy, "cp", "-r", "-q", f"s3://{bucket}/logs/", str(tmp_path / "q"))
    assert quiet.stderr.splitlines()[-1] == "1 of 4 objects failed"


def test_the_summary_line_counts_thousands(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_in_backend(bucket, {f"k/{i:04d}": b"x" * 10 for i in range(1200)})
    result = run(proxy, "cp", "-r", "--concurrency", "32", f"s3://{bucket}/k/", str(tmp_path / "d"))
    assert result.exit_code == 0, result.stderr
    assert re.fullmatch(rf"1,200 downloaded \(11\.7 KiB\) {_SECONDS}, 0 failed\n", result.stderr)


def test_sync_ends_with_a_summary_line_even_with_nothing_to_fetch(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    seed(s3, bucket)
    dest = tmp_path / "d"
    first = run(proxy, "sync", f"s3://{bucket}/logs/", str(dest))
    assert re.fullmatch(
        rf"sync: 4 downloaded \(2\.0 KiB\), 0 up to date, 0 deleted {_SECONDS}, 0 failed\n",
        first.stderr,
    ), first.stderr
    s3.put_object(Bucket=bucket, Key="logs/a.txt", Body=b"changed")
    s3.delete_object(Bucket=bucket, Key="logs/b.csv")
    second = run(proxy, "sync", "--delete", f"s3://{bucket}/logs/", str(dest))
    assert second.exit_code == 0, second.stderr
    assert re.fullmatch(
        rf"sync: 1 downloaded \(7 B\), 2 up to date, 1 deleted {_SECONDS}, 0 failed\n",
        second.stderr,
    ), second.stderr
    third = run(proxy, "sync", f"s3://{bucket}/logs/", str(dest))
    assert third.stdout == ""
    assert re.fullmatch(
        rf"sync: 0 downloaded \(0 B\), 3 up to date, 0 deleted {_SECONDS}, 0 failed\n",
        third.stderr,
    ), third.stderr
    assert run(proxy, "sync", "-q", f"s3://{bucket}/logs/", str(dest)).stderr == ""
    s3.delete_object(Bucket=bucket, Key="logs/a.txt")
    dry = run(proxy, "sync", "--dry-run", "--delete", f"s3://{bucket}/logs/", str(dest))
    assert re.fullmatch(
        rf"\(dryrun\) sync: 0 to download \(0 B\), 2 up to date, 1 to delete {_SECONDS}, "
        "0 failed\n",
        dry.stderr,
    ), dry.stderr
    assert (dest / "a.txt").exists()


def test_human_sizes() -> None:
    from asyncdl.cli.output import human_size  # noqa: PLC0415 - new in this change

    assert [human_size(n) for n in (0, 1023, 1024, 1536, 2**20 * 997, 2**40 * 3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "997.0 MiB",
        "3.0 TiB",
    ]


# -- the bar's totals, in a terminal -------------------------------------------------


def test_the_bar_has_its_totals_after_the_first_pages(
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    terminal: tuple[int, int],  # noqa: F811
) -> None:
    child, parent = terminal
    put_in_backend(bucket, {f"many/{i:04d}": b"y" * 100 for i in range(2000)})
    # Each object GET waits a little: the downloads take seconds, the listing does not.
    proxy.rule = lambda r: Fault(delay=0.02) if "list-type" not in r.path else None
    running = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncdl.cli",
            "cp",
            "-r",
            "--concurrency",
            "10",
            "--endpoint-url",
            proxy.url,
            f"s3://{bucket}/many/",
            str(tmp_path / "d"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=child,
        env={**cli_env(), "TERM": "xterm", "COLUMNS": "160"},
    )
    os.close(child)
    drawn = read_all(parent).decode()
    running.wait(timeout=120)
    assert running.returncode == 0, drawn[-2000:]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)
    frames = re.findall(r"(\d+)/(\d+\+?|\?) objects[^\r\n]*?([\d.]+)/([\d.]+) KiB", text)
    with_total = [int(done) for done, total, *_ in frames if total == "2000"]
    assert with_total, text[-2000:]
    # Known early: the first frame with the total came long before the last object.
    assert with_total[0] < 1000, with_total[:5]
    # ... and with it the byte total: 2000 x 100 B.
    assert any(total == "2000" and of == "195.3" for _, total, _, of in frames), frames[-3:]
    assert text.rstrip().splitlines()[-1].startswith("2,000 downloaded (195.3 KiB)")
