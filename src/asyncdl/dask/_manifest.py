"""Any accepted manifest, as a Dask DataFrame of rows with ``bucket`` and ``key``.

Accepted: an iterable of ``DownloadRequest``/``(bucket, key)``/``(bucket, key,
path)``/dict items, a pandas or Dask DataFrame, a Dask bag, or the path of a CSV
or Parquet listing. Column names are matched case-insensitively (S3 Inventory's
``Bucket, Key, Size, ETag`` work as they are); ``size``, ``etag``, ``path`` (where
under ``dest_dir``, default the key) and ``checksum`` are optional; other columns
are ignored. Structural problems raise :class:`ManifestError` here, on the client,
before anything runs; a bad value in one row becomes that row's failed result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dask.bag as db
import dask.dataframe as dd
import pandas as pd

from .._bulk.bulk import DownloadRequest
from ._errors import ManifestError

OPTIONAL = ("size", "etag", "path", "checksum")
#: Rows per partition (one task) when the manifest does not bring its own partitions.
DEFAULT_PARTITION_SIZE = 1000
_CSV = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst")
_PARQUET = (".parquet", ".pq")


def manifest_frame(manifest: object, partition_size: int | None, client: Any) -> dd.DataFrame:
    """``manifest`` as a Dask DataFrame, split into partitions of about
    ``partition_size`` rows (a Dask collection keeps its own unless it is given)."""
    if isinstance(manifest, str | os.PathLike):
        frame = _read_file(Path(os.fspath(manifest)))
        return _split(frame, partition_size or DEFAULT_PARTITION_SIZE, client)
    if isinstance(manifest, dd.DataFrame):
        frame = _select(manifest, list(manifest.columns))
        return frame if partition_size is None else _split(frame, partition_size, client)
    if isinstance(manifest, db.Bag):
        meta = pd.DataFrame(columns=["bucket", "key", *OPTIONAL], dtype=object)
        frame = manifest.map(_row_of).to_dataframe(meta=meta)
        return frame if partition_size is None else _split(frame, partition_size, client)
    if isinstance(manifest, pd.DataFrame):
        rows = _select(manifest, list(manifest.columns))
    elif isinstance(manifest, Iterable) and not isinstance(manifest, str | bytes | Mapping):
        rows = _frame_of_items(manifest)
    else:
        raise ManifestError(
            "manifest must be an iterable of DownloadRequest or (bucket, key) items, a "
            f"Dask DataFrame or bag, or the path of a CSV or Parquet file; got {manifest!r}"
        )
    size = partition_size or DEFAULT_PARTITION_SIZE
    return dd.from_pandas(rows, npartitions=max(1, math.ceil(len(rows) / size)), sort=False)


def _select(frame: Any, columns: list[Any]) -> Any:
    """Keep the known columns, renamed to lower case; refuse a frame without bucket/key."""
    lower: dict[str, Any] = {}
    for name in columns:
        folded = str(name).lower()
        if folded in lower:
            raise ManifestError(f"manifest has two columns named {folded!r} (case ignored)")
        lower[folded] = name
    missing = [name for name in ("bucket", "key") if name not in lower]
    if missing:
        raise ManifestError(
            f"manifest has no {' and no '.join(repr(m) for m in missing)} column "
            f"(columns: {[str(c) for c in columns]})"
        )
    keep = [name for name in ("bucket", "key", *OPTIONAL) if name in lower]
    return frame[[lower[name] for name in keep]].rename(columns={lower[n]: n for n in keep})


def _read_file(path: Path) -> dd.DataFrame:
    name = path.name.lower()
    if not path.exists():
        raise ManifestError(f"manifest file {str(path)!r} does not exist")
    if name.endswith(_CSV):
        try:
            header = pd.read_csv(path, nrows=0)
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise ManifestError(f"cannot read the CSV manifest {str(path)!r}: {exc}") from None
        _select(header, list(header.columns))
        # Everything as text, nothing as NaN: a key named "NA" or "null" is a key.
        # Compressed files cannot be split by bytes; _split splits them by rows.
        compressed = not name.endswith(".csv")
        frame = dd.read_csv(
            str(path),
            dtype=str,
            keep_default_na=False,
            blocksize=None if compressed else "64MiB",
        )
    elif name.endswith(_PARQUET) or path.is_dir():
        try:
            frame = dd.read_parquet(str(path))
        except (ValueError, OSError) as exc:
            raise ManifestError(f"cannot read the Parquet manifest {str(path)!r}: {exc}") from None
    else:
        raise ManifestError(
            f"cannot tell the format of {str(path)!r}: name it .csv (or .csv.gz) or .parquet"
        )
    result: dd.DataFrame = _select(frame, list(frame.columns))
    return result


def _split(frame: dd.DataFrame, partition_size: int, client: Any) -> dd.DataFrame:
    """About ``partition_size`` rows per partition: one count of the rows, then
    Dask's even split (partitions that are too large are cut, not reread)."""
    rows = int(client.compute(frame.map_partitions(len).sum(), sync=True))
    wanted = max(1, math.ceil(rows / partition_size))
    return frame if wanted == frame.npartitions else frame.repartition(npartitions=wanted)


def _frame_of_items(items: Iterable[Any]) -> pd.DataFrame:
    columns = ["bucket", "key", *OPTIONAL]
    return pd.DataFrame([_row_of(item) for item in items], columns=columns, dtype=object)


def _row_of(item: object) -> dict[str, Any]:
    if isinstance(item, DownloadRequest):
        if item.extra_args:
            # They would travel in the task graph (SSE-C keys among them); the
            # run's extra_args= reach the workers with the job instead.
            raise ManifestError(
                "a DownloadRequest in a manifest cannot carry extra_args: "
                "pass extra_args= to download_manifest"
            )
        return {
            "bucket": item.bucket,
            "key": item.key,
            "size": item.size,
            "etag": item.etag,
            "path": os.fspath(item.path),
            "checksum": item.checksum,
        }
    if isinstance(item, tuple) and len(item) in (2, 3):
        path = os.fspath(item[2]) if len(item) == 3 else None
        return {"bucket": item[0], "key": item[1], "path": path}
    if isinstance(item, Mapping):
        lower = {str(name).lower(): value for name, value in item.items()}
        if "bucket" in lower and "key" in lower:
            return {name: lower.get(name) for name in ("bucket", "key", *OPTIONAL)}
    raise ManifestError(
        "expected a DownloadRequest, a (bucket, key) or (bucket, key, path) tuple, or a "
        f"mapping with 'bucket' and 'key'; got {item!r}"
    )
