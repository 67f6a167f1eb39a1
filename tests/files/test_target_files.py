"""Downloads onto the file system through the engine and moto: names and modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import asyncdl

from ..conftest import CHUNK, payload, temp_files

#: 255 bytes each (the usual NAME_MAX): ASCII, and 3-byte UTF-8 characters.
NAMES = {"ascii": "x" * 255, "utf-8": "\u20ac" * 85}


@pytest.mark.parametrize("size", [10, 3 * CHUNK + 1], ids=["one-get", "ranged"])
@pytest.mark.parametrize("kind", list(NAMES))
async def test_a_255_byte_target_name_over_a_0600_file(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path, kind: str, size: int
) -> None:
    body = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    target = tmp_path / NAMES[kind]
    target.write_bytes(b"old")
    target.chmod(0o600)
    result = await engine.download(bucket, "k", target)
    assert result.size == size
    assert target.read_bytes() == body
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert temp_files(tmp_path) == []
