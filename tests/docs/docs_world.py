"""The bucket the documentation's examples read: ``my-bucket`` and its objects.

Every example in ``docs/`` and ``README.md`` runs against these objects on moto's
server (``tests/docs/test_docs.py``); an example names only keys listed here.
"""

from __future__ import annotations

import functools
import hashlib
import io
import random
import zipfile
from typing import Any

BUCKET = "my-bucket"
MiB = 2**20


def _bytes(size: int, seed: int) -> bytes:
    return random.Random(f"docs-{seed}-{size}").randbytes(size)


def _csv(quarter: str, rows: int) -> bytes:
    lines = ["date,region,amount"]
    lines += [f"{quarter}-{day:02d},eu-west-1,{day * 37 % 1000}" for day in range(1, rows + 1)]
    return ("\n".join(lines) + "\n").encode()


def _zip() -> bytes:
    """A ZIP of 40 logs, stored (not compressed), with fixed dates: the same bytes each run."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for day in range(1, 41):
            info = zipfile.ZipInfo(f"2026/{day:02d}.log", date_time=(2026, 1, 1, 0, 0, 0))
            archive.writestr(info, _bytes(50_000, 100 + day))
    return out.getvalue()


def _parquet() -> bytes:
    """A Parquet table of 200,000 sales (four int64 columns, one row group), uncompressed."""
    import pyarrow as pa  # noqa: PLC0415 - only this object needs it
    import pyarrow.parquet as pq  # noqa: PLC0415

    rows = 200_000
    table = pa.table(
        {
            "day": pa.array([i % 365 for i in range(rows)], pa.int64()),
            "store": pa.array([i % 97 for i in range(rows)], pa.int64()),
            "item": pa.array([i * 7 % 1009 for i in range(rows)], pa.int64()),
            "amount": pa.array([i * 37 % 1000 for i in range(rows)], pa.int64()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="none", row_group_size=rows)
    return out.getvalue()


def _zarr(prefix: str) -> dict[str, bytes]:
    """A Zarr (v3) array of 365 x 100 float32 (a year of 100 sensors' daily readings),
    in chunks of 10 x 10: its metadata and 370 chunk objects, keys under ``prefix``."""
    import numpy as np  # noqa: PLC0415 - only this array needs them
    import zarr  # noqa: PLC0415
    from zarr.core.buffer import default_buffer_prototype  # noqa: PLC0415
    from zarr.core.sync import sync  # noqa: PLC0415
    from zarr.storage import MemoryStore  # noqa: PLC0415

    store = MemoryStore()
    array = zarr.create_array(store=store, shape=(365, 100), chunks=(10, 10), dtype="f4")
    array[:] = (np.arange(365 * 100, dtype="f4") % 40).reshape(365, 100)

    async def read_all() -> dict[str, bytes]:
        out = {}
        async for key in store.list():
            buffer = await store.get(key, prototype=default_buffer_prototype())
            assert buffer is not None
            out[f"{prefix}{key}"] = buffer.to_bytes()
        return out

    return sync(read_all())


#: Key -> body.
OBJECTS: dict[str, bytes] = {
    "path/to/key": _bytes(1000, 0),
    "other/key": _bytes(3 * MiB + 1, 1),
    "reports/a.csv": b"a,1\n",
    "reports/b.csv": b"b,2\n",
    "reports/2026/q1.csv": _csv("2026-q1", 90),
    "reports/2026/q2.csv": _csv("2026-q2", 91),
    "reports/2025/q4.csv": _csv("2025-q4", 92),
    "logs/2026/01.json": b'{"day": 1}',
    "logs/2026/02/03.json": b'{"day": 3}',
    "video.mp4": _bytes(300_000, 2),
    "videos/intro.mp4": _bytes(2 * MiB + 17, 3),
    "small.json": b'{"small": true}',
    "config/app.json": b'{"feature": "on", "workers": 4}\n',
    "photos/2026/cat.jpg": _bytes(48_000, 4),
    "photos/2026/dog.jpg": _bytes(52_000, 5),
    "photos/2026/notes.txt": b"holiday photos\n",
    "datasets/big.bin": _bytes(20 * MiB + 3, 6),
    "public/index.html": b"<!doctype html><title>hello</title><p>hello</p>\n",
    "public/data.csv": _csv("2026-q3", 10),
    "checked/data.bin": _bytes(5 * MiB, 7),
    "archives/logs.zip": _zip(),
    "tables/sales.parquet": _parquet(),
    **_zarr("arrays/readings.zarr/"),
}

#: Keys stored with a whole-object checksum of this algorithm (S3's own); the others
#: are stored with none, as objects written by older tools are.
CHECKSUMS: dict[str, str] = {
    "checked/data.bin": "SHA256",
    "reports/2026/q1.csv": "CRC32",
}

#: Content types the objects are stored with (S3 keeps what the uploader said).
CONTENT_TYPES: dict[str, str] = {
    "video.mp4": "video/mp4",
    "videos/intro.mp4": "video/mp4",
    "public/index.html": "text/html",
    "public/data.csv": "text/csv",
    "photos/2026/cat.jpg": "image/jpeg",
    "photos/2026/dog.jpg": "image/jpeg",
}

#: What the examples write as a URL of a plain web server; the test serves it from the
#: bucket, where the objects under ``public/`` may be read without signing (public-read),
#: so ``https://downloads.example.com/public/data.csv`` runs as written.
WEB_BASE = "https://downloads.example.com/"
PUBLIC = "public/"


@functools.cache
def _etag(body: bytes) -> str:
    """The ETag S3 gives an object put in one request: its MD5."""
    return hashlib.md5(body).hexdigest()


def seed(s3: Any) -> None:
    """Create ``my-bucket`` (if moto does not hold it yet) and put every object it does
    not hold as put here: missing, or with an ETag that is not its body's. ``s3`` must
    store no checksum unless asked (``Config(request_checksum_calculation=
    "when_required")``), so that only ``CHECKSUMS`` have one."""
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=BUCKET)
    # One listing instead of ~400 PUTs (35 MB) before each page's examples: the
    # examples only read, so from the second page on nothing is put again.
    held = {
        item["Key"]: item["ETag"].strip('"')
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for item in page.get("Contents", [])
    }
    for key, body in OBJECTS.items():
        if held.get(key) == _etag(body):
            continue
        extra: dict[str, str] = {}
        if key in CHECKSUMS:
            extra["ChecksumAlgorithm"] = CHECKSUMS[key]
        if key in CONTENT_TYPES:
            extra["ContentType"] = CONTENT_TYPES[key]
        if key.startswith(PUBLIC):
            extra["ACL"] = "public-read"
        s3.put_object(Bucket=BUCKET, Key=key, Body=body, **extra)
