"""docs/guides/streams.md: the streams, ranges, in-memory reads and HEADs it shows
gave the world's bytes, and each stream says what it was."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any

import asyncdl

from ..docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    intro = OBJECTS["videos/intro.mp4"]
    assert namespace["digest"].hexdigest() == hashlib.sha256(intro).hexdigest()

    missing = namespace["missing"]
    assert isinstance(missing, asyncdl.ObjectNotFoundError)
    assert missing.key == "no/such/key"

    big = OBJECTS["datasets/big.bin"]
    assert namespace["window"] == big[1_000:1_064]
    assert namespace["tail"] == big[-1024:]
    info = namespace["info"]
    assert isinstance(info, asyncdl.ObjectInfo)
    assert (info.size, info.headers["content-type"]) == (len(OBJECTS["video.mp4"]), "video/mp4")
    assert info.etag == '"' + hashlib.md5(OBJECTS["video.mp4"]).hexdigest() + '"'

    assert namespace["settings"] == json.loads(OBJECTS["config/app.json"])
    too_large = namespace["too_large"]
    assert type(too_large) is asyncdl.DownloadError
    assert "max_size=1048576" in str(too_large)

    # The small-parts stream read all of the object; the early stop read one piece.
    assert namespace["read"] == len(big)
    first_piece = namespace["first_piece"]
    assert first_piece
    assert big.startswith(first_piece)

    # The last stream of the page: video.mp4, with progress told its length.
    stream = namespace["stream"]
    assert (stream.key, stream.size, stream.length) == ("video.mp4", 300_000, 300_000)
    assert namespace["done"] == 300_000
    # A whole object in parts: checked against its stored SHA256, after a HEAD.
    checked = namespace["checked"]
    assert (checked.verified, checked.unverified_reason) == (True, None)
    digest = base64.b64encode(hashlib.sha256(OBJECTS["checked/data.bin"]).digest()).decode()
    assert checked.checksum == f"SHA256:{digest}"
    # Small enough for one answer: checked under "required" only.
    report = namespace["report"]
    crc = base64.b64encode(zlib.crc32(OBJECTS["reports/2026/q1.csv"]).to_bytes(4, "big"))
    assert (report.verified, report.checksum) == (True, f"CRC32:{crc.decode()}")
