"""What a worker does with one partition of the manifest: one call of ``download_many``.

Rows are checked and confined (``dest_dir`` + key, or + the row's own relative
``path``), skipped when ``skip_existing`` finds them already there, and the rest
go through the process's one Engine. Every row comes back as exactly one result
row, whatever happened to it: a bad row is a failed result, not a failed task.
A task fails only if the worker dies, and then Dask runs the partition again:
downloads write temp files that ``os.replace`` publishes, so a second run never
leaves a duplicate or a half-written file. The directories a partition writes into
are journaled first, and its temp files named with the run's id, so that the run's
sweep finds what a killed worker left (``_sweep``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from .._bulk.bulk import DownloadRequest
from .._files.file_records import EtagStore
from .._files.key_paths import relative_path
from .._files.skipping import remember, should_skip
from .._files.writer import TEMP_RUN
from .._transfer.strategies import Strategy
from .._wire.request_args import ExtraArgs, redacted
from ..config import TransferConfig
from ..errors import InvalidRequestError
from ..results import DownloadResult
from ._runtime import runtime
from ._sse import key_problem, with_key
from ._sweep import partition_of, record_dirs

logger = logging.getLogger("asyncdl.dask")

#: Per-item result columns and their dtypes; ``started``/``finished`` are the
#: partition's (epoch seconds), for per-worker throughput.
RESULT_DTYPES: dict[str, str] = {
    "bucket": "object",
    "key": "object",
    "path": "object",
    "status": "object",  # "downloaded", "skipped" or "failed"
    "size": "int64",
    "etag": "object",
    "requests": "int64",
    "error_type": "object",
    "error": "object",
    "worker": "object",
    "started": "float64",
    "finished": "float64",
}


def result_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a frame with exactly :data:`RESULT_DTYPES` (also the Dask ``meta``)."""
    columns = {name: [row[name] for row in rows] for name in RESULT_DTYPES}
    return pd.DataFrame(columns).astype(RESULT_DTYPES)


@dataclass(frozen=True, slots=True)
class Job:
    """What every partition of one run shares; pickled with each task."""

    dest_dir: str
    config: TransferConfig
    strategy: str | Strategy
    skip_existing: str | None
    extra_args: ExtraArgs | None
    timeout: float | None
    #: Unique per run (lower-case hex): Dask never serves a cached partition of an
    #: earlier run, the ETag sidecar is read afresh once per run and process, and the
    #: run's temp files carry it in their names.
    run_id: str
    #: The environment variable that holds the SSE-C key on every worker: the key
    #: itself never travels with the task.
    sse_customer_key_env: str | None = None

    def __repr__(self) -> str:
        # A task's arguments show up in dashboards, tracebacks and logs: no secret here.
        shown = {field.name: getattr(self, field.name) for field in fields(self)}
        if self.extra_args:
            shown["extra_args"] = redacted(self.extra_args)
        return f"Job({', '.join(f'{name}={value!r}' for name, value in shown.items())})"


def run_partition(frame: pd.DataFrame, job: Job) -> pd.DataFrame:
    """Download one partition; one result row per manifest row."""
    started = time.time()
    with partition_of(job.run_id) as live:
        rows = _download_rows(frame, job) if live else _ended_rows(frame, job.run_id)
    worker, finished = _worker_name(), time.time()
    for row in rows:
        row.update(worker=worker, started=started, finished=finished)
    return result_frame(rows)


def _ended_rows(frame: pd.DataFrame, run_id: str) -> list[dict[str, Any]]:
    """A partition Dask ran after its run's results were in (``_sweep``): it writes
    nothing, and nobody reads these rows."""
    ended = RuntimeError(f"run {run_id} had ended before this partition started")
    return [
        _failed_row(str(r.get("bucket")), str(r.get("key")), "", ended) for r in _raw_rows(frame)
    ]


def _download_rows(frame: pd.DataFrame, job: Job) -> list[dict[str, Any]]:
    """The partition's rows, downloaded (or skipped, or failed)."""
    dest = Path(job.dest_dir)
    store = _store(dest, job.run_id)
    rows: list[dict[str, Any]] = []
    requests: list[DownloadRequest] = []
    made: set[Path] = set()
    for raw in _raw_rows(frame):
        try:
            request = _request(raw, dest)
        except InvalidRequestError as error:
            rows.append(_failed_row(str(raw.get("bucket")), str(raw.get("key")), "", error))
            continue
        target = Path(request.path)
        # Skip checks and mkdirs are blocking file work: here, in the task's own
        # thread, before the loop sees the partition.
        if job.skip_existing is not None and should_skip(
            store, target, job.skip_existing, request.size, request.etag
        ):
            rows.append(_row(request.bucket, request.key, target, "skipped", request.size or 0))
            rows[-1]["etag"] = request.etag
            continue
        if target.parent not in made:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                refusal = InvalidRequestError(
                    f"cannot create directory {str(target.parent)!r}: {exc.strerror}",
                    bucket=request.bucket,
                    key=request.key,
                )
                rows.append(_failed_row(request.bucket, request.key, str(target), refusal))
                continue
            made.add(target.parent)
        requests.append(request)
    try:
        extra_args = with_key(job.extra_args, job.sse_customer_key_env)
    except ValueError as exc:
        # Checked on every worker before the run: this one joined or changed since.
        for request in requests:
            refusal = InvalidRequestError(str(exc), bucket=request.bucket, key=request.key)
            rows.append(_failed_row(request.bucket, request.key, str(request.path), refusal))
        requests = []
    if requests:
        try:
            record_dirs(dest, job.run_id, made)
        except OSError as exc:
            # The downloads are right without it; only a killed worker's temp files
            # would then outlive the run.
            logger.warning("could not journal the directories of run %s: %s", job.run_id, exc)
        results = runtime().run(_download(requests, job, extra_args, store))
        rows.extend(_result_row(result) for result in results)
    return rows


async def _download(
    requests: list[DownloadRequest], job: Job, extra_args: ExtraArgs | None, store: EtagStore
) -> list[DownloadResult]:
    engine = await runtime().engine(job.config)
    done: list[DownloadResult] = []
    # This coroutine is a task of its own: the download tasks it starts copy its
    # context, so their temp files are named with the run's id, and only they are.
    TEMP_RUN.set(job.run_id)
    results = engine.download_many(
        requests,
        strategy=job.strategy,
        extra_args=extra_args,
        timeout=job.timeout,
    )
    async with contextlib.aclosing(results):
        async for result in results:
            done.append(result)
            await remember(store, result)
    return done


_stores_lock = threading.Lock()
_stores: dict[str, tuple[str, EtagStore]] = {}


def _store(dest: Path, run_id: str) -> EtagStore:
    """One ETag store per destination and process, renewed for each run."""
    with _stores_lock:
        held = _stores.get(str(dest))
        if held is None or held[0] != run_id:
            if held is not None:
                held[1].close()
            held = (run_id, EtagStore(dest))
            _stores[str(dest)] = held
        return held[1]


def _raw_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    columns = {str(name).lower(): name for name in frame.columns}
    wanted = ("bucket", "key", "size", "etag", "path", "checksum")
    present = {name: frame[columns[name]].tolist() for name in wanted if name in columns}
    return [{name: values[i] for name, values in present.items()} for i in range(len(frame.index))]


def _request(raw: Mapping[str, Any], dest: Path) -> DownloadRequest:
    bucket, key = raw.get("bucket"), raw.get("key")
    if not isinstance(bucket, str) or not bucket or not isinstance(key, str) or not key:
        raise InvalidRequestError(
            "bucket and key must be non-empty strings", bucket=str(bucket), key=str(key)
        )
    name = _text(raw.get("path")) or key
    try:
        relative = relative_path(name, "")
    except ValueError as exc:
        raise InvalidRequestError(str(exc), bucket=bucket, key=key) from None
    size = raw.get("size")
    if _missing(size):
        size = None
    else:
        try:
            size = _as_size(size)
        except ValueError:
            raise InvalidRequestError(
                f"size must be an int >= 0, got {size!r}", bucket=bucket, key=key
            ) from None
    return DownloadRequest(
        bucket,
        key,
        dest.joinpath(*relative.parts),
        size=size,
        etag=_text(raw.get("etag")),
        checksum=_text(raw.get("checksum")),
    )


def _missing(value: object) -> bool:
    return (
        value is None
        or value is pd.NA
        or value == ""
        or (isinstance(value, float) and math.isnan(value))
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _as_size(value: object) -> int:
    """An int from a manifest cell: CSVs bring text, frames with gaps bring floats."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        value = int(value)
    number = int(str(value))
    if number < 0:
        raise ValueError(value)
    return number


def _row(bucket: str, key: str, path: Path | str, status: str, size: int) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "key": key,
        "path": str(path),
        "status": status,
        "size": size,
        "etag": None,
        "requests": 0,
        "error_type": None,
        "error": None,
    }


def _failed_row(bucket: str, key: str, path: str, error: Exception) -> dict[str, Any]:
    row = _row(bucket, key, path, "failed", 0)
    row.update(error_type=type(error).__name__, error=str(error))
    return row


def _result_row(result: DownloadResult) -> dict[str, Any]:
    if result.error is not None:
        row = _failed_row(result.bucket, result.key, str(result.path), result.error)
    else:
        assert result.size is not None  # known on every successful result
        row = _row(result.bucket, result.key, result.path, "downloaded", result.size)
        row["etag"] = result.etag
    row["requests"] = result.requests
    return row


def _worker_name() -> str:
    try:
        from distributed import get_worker  # noqa: PLC0415 - only inside a Dask worker

        address: str = get_worker().address
    except (ImportError, ValueError):
        address = f"{socket.gethostname()}:{os.getpid()}"
    return address


def worker_problem(dest_dir: str, key_env: str | None) -> tuple[str, str] | None:
    """Which option this worker cannot take part in a run with, and why; or ``None``.
    Creates nothing."""
    problem = dest_problem(dest_dir)
    if problem is not None:
        return "dest_dir", problem
    problem = key_problem(key_env)
    return None if problem is None else ("sse_customer_key_env", problem)


def dest_problem(dest_dir: str) -> str | None:
    """Why files cannot be written under ``dest_dir`` here, or ``None``. Creates nothing."""
    path = Path(dest_dir)
    if path.exists():
        if not path.is_dir():
            return f"{dest_dir!r} is not a directory"
        probe = path
    else:
        probe = path.parent
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            return f"{str(probe)!r} (on the way to {dest_dir!r}) is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{str(probe)!r} is not writable"
    return None
