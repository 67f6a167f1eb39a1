"""docs/guides/random-access.md: the ranges, the Parquet footer and column chunk, the
ZIP member and the table it shows are the world's bytes, fetched in the GETs it says."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import pyarrow.parquet as pq

import asyncdl

from ..docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    big = OBJECTS["datasets/big.bin"]
    assert namespace["head"] == big[:64]
    assert namespace["middle"] == big[10_000_000:10_000_100]
    assert namespace["last"] == big[20_971_000:20_971_523]
    assert namespace["close"] == [big[4096:8192], big[:4096]]
    assert isinstance(namespace["past_the_end"], asyncdl.InvalidRequestError)

    # The listing's loop read the first and last KiB of the only object under datasets/.
    assert namespace["first_kib"] == big[:1024]
    assert namespace["last_kib"] == big[-1024:]
    assert namespace["rows"] == OBJECTS["public/data.csv"][:19]

    blob = OBJECTS["tables/sales.parquet"]
    column = namespace["column"]
    start = column.dictionary_page_offset
    assert namespace["chunk"] == blob[start : start + column.total_compressed_size]
    assert namespace["metadata"].num_rows == 200_000
    chunks = [
        blob[start : start + n]
        for start, n in zip(namespace["starts"], namespace["sizes"], strict=True)
    ]
    assert namespace["chunks"] == chunks
    assert [c.path_in_schema for c in namespace["columns"]] == ["day", "amount"]

    with zipfile.ZipFile(io.BytesIO(OBJECTS["archives/logs.zip"])) as archive:
        assert namespace["log"] == archive.read("2026/17.log")

    table = namespace["table"]
    whole = pq.read_table(io.BytesIO(blob), columns=["amount"])
    assert table.equals(whole)
