"""The README's snippets run as written, against moto, for each of asyncdl's surfaces.

The python blocks run in README order in one namespace, as they would pasted into
``python -m asyncio`` (top-level ``await`` allowed); the command-line block runs in
bash with ``asyncdl`` on the PATH. Both find the server through the standard
``AWS_ENDPOINT_URL_S3`` variable, as the README says a real deployment would, and
the bucket they name, ``my-bucket``, is created here.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from .conftest import payload

README = Path(__file__).parent.parent / "README.md"
BUCKET = "my-bucket"

#: The sections whose python blocks the tests below run, by surface.
ASYNC_APP = (
    "The API in five lines",
    "Many objects",
    "Streaming and reading into memory",
    "Presigned URLs and plain HTTPS",
    "Metrics",
)
FASTAPI = "In a FastAPI service"
COMMAND_LINE = "Command line"
#: Run on a Dask cluster by tests/test_dask.py.
SCALING_OUT = "Scaling out"

OBJECTS = {
    "path/to/key": payload(1000),
    "other/key": payload(3 * 2**20 + 1, seed=1),
    "reports/a.csv": b"a,1\n",
    "reports/b.csv": b"b,2\n",
    "logs/2026/01.json": b'{"day": 1}',
    "logs/2026/02/03.json": b'{"day": 3}',
    "video.mp4": payload(300_000, seed=2),
    "small.json": b'{"small": true}',
}


def blocks(heading: str, lang: str) -> list[str]:
    """The fenced ``lang`` blocks of the README section ``## heading``."""
    found: list[str] = []
    section = None
    block: list[str] | None = None
    block_lang = ""
    for line in README.read_text().splitlines():
        if block is not None:
            if line.startswith("```"):
                if section == heading and block_lang == lang:
                    found.append("\n".join(block) + "\n")
                block = None
            else:
                block.append(line)
        elif line.startswith("```"):
            block, block_lang = [], line[3:].strip()
        elif line.startswith("## "):
            section = line[3:].strip()
    return found


def python_sections() -> set[str]:
    text = README.read_text()
    headings = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    return {heading for heading in headings if blocks(heading, "python")}


@pytest.fixture
def my_bucket(s3: Any) -> str:
    """``my-bucket`` with the objects the snippets name (moto's buckets outlive a test)."""
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=BUCKET)
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    return BUCKET


async def run_python(code: str, namespace: dict[str, Any]) -> None:
    compiled = compile(code, str(README), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)  # the README's own code
    if inspect.isawaitable(result):
        await result


def test_every_python_block_is_run_by_a_test() -> None:
    assert python_sections() == {*ASYNC_APP, FASTAPI, SCALING_OUT}
    assert blocks(COMMAND_LINE, "sh")


async def test_async_app_snippets(
    my_bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for heading in ASYNC_APP:
        for code in blocks(heading, "python"):
            await run_python(code, namespace)
        if heading == "The API in five lines":
            assert namespace["result"].strategy == "head-first"
    assert (tmp_path / "local.bin").read_bytes() == OBJECTS["path/to/key"]
    assert (tmp_path / "other.bin").read_bytes() == OBJECTS["other/key"]
    assert (tmp_path / "reports_a.csv").read_bytes() == OBJECTS["reports/a.csv"]
    assert (tmp_path / "reports_b.csv").read_bytes() == OBJECTS["reports/b.csv"]
    assert (tmp_path / "logs/01.json").read_bytes() == OBJECTS["logs/2026/01.json"]
    assert (tmp_path / "logs/02/03.json").read_bytes() == OBJECTS["logs/2026/02/03.json"]
    assert (tmp_path / "video.mp4").read_bytes() == OBJECTS["video.mp4"]
    assert namespace["data"] == OBJECTS["small.json"]
    assert (tmp_path / "report.csv").read_bytes() == OBJECTS["reports/a.csv"]
    assert namespace["head"] == OBJECTS["reports/a.csv"][:2]
    assert namespace["result"].key == namespace["url"].split("?")[0]
    out = capsys.readouterr().out
    assert f"failed: s3://{my_bucket}/reports/missing.csv: no such object" in out
    requests = {(r.method, r.path.split("?")[0]) for r in proxy.requests}
    assert ("GET", f"/{my_bucket}/video.mp4") in requests  # through the endpoint variable


async def test_fastapi_snippet(
    my_bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    (code,) = blocks(FASTAPI, "python")
    namespace: dict[str, Any] = {"__name__": "readme_fastapi"}
    await run_python(code, namespace)
    app = namespace["app"]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            response = await http.get("/objects/video.mp4")
            assert response.status_code == 200
            assert response.content == OBJECTS["video.mp4"]
            assert response.headers["content-length"] == str(len(OBJECTS["video.mp4"]))
            assert response.headers["etag"].startswith('"')
            assert response.headers["content-type"] == "video/mp4"
            ranged = await http.get("/objects/video.mp4", headers={"Range": "bytes=3-9"})
            assert (ranged.status_code, ranged.content) == (206, OBJECTS["video.mp4"][3:10])
            head = await http.head("/objects/video.mp4")
            assert (head.status_code, head.content) == (200, b"")
            missing = await http.get("/objects/no/such/key")
            assert missing.status_code == 404
            assert my_bucket not in missing.text


def test_command_line_snippet(my_bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    (script,) = blocks(COMMAND_LINE, "sh")
    work = tmp_path / "work"
    work.mkdir()
    # `asyncdl` as the console script runs it, whether or not this environment has
    # been reinstalled since the script was declared.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "asyncdl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m asyncdl.cli "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        **FAKE_ENV,
        "AWS_ENDPOINT_URL_S3": proxy.url,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PRESIGNED_URL": boto3.client(
            "s3", endpoint_url=proxy.url, region_name="us-east-1"
        ).generate_presigned_url(
            "get_object", Params={"Bucket": my_bucket, "Key": "reports/b.csv"}, ExpiresIn=600
        ),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (work / "local.bin").read_bytes() == OBJECTS["path/to/key"]
    assert (work / "key").read_bytes() == OBJECTS["path/to/key"]
    assert (work / "logs/01.json").read_bytes() == OBJECTS["logs/2026/01.json"]
    assert (work / "logs/02/03.json").read_bytes() == OBJECTS["logs/2026/02/03.json"]
    assert (work / "small.json").read_bytes() == OBJECTS["small.json"]
    assert (work / "report.csv").read_bytes() == OBJECTS["reports/b.csv"]
    assert "X-Amz-Signature" not in done.stdout + done.stderr
    assert (work / "video.mp4").read_bytes() == OBJECTS["video.mp4"]
    result = json.loads(done.stdout.splitlines()[-1])  # the --json line comes last
    assert (result["key"], result["ok"], result["strategy"]) == ("video.mp4", True, "head-first")
