"""What a run reports: counts, failures by key, and each worker's throughput."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

#: One row per (worker, partition): what the summary is folded from.
STATS_DTYPES: dict[str, str] = {
    "worker": "object",
    "started": "float64",
    "finished": "float64",
    "downloaded": "int64",
    "skipped": "int64",
    "failed": "int64",
    "bytes": "int64",
    "requests": "int64",
}
FAILURE_COLUMNS = ["bucket", "key", "error_type", "error"]


def partition_stats(results: pd.DataFrame) -> pd.DataFrame:
    """Per-item results folded into one row per partition that produced them."""
    status = results["status"]
    counted = results.assign(
        downloaded=(status == "downloaded").astype("int64"),
        skipped=(status == "skipped").astype("int64"),
        failed=(status == "failed").astype("int64"),
        bytes=results["size"].where(status == "downloaded", 0),
    )
    sums = ["downloaded", "skipped", "failed", "bytes", "requests"]
    folded = counted.groupby(["worker", "started", "finished"], as_index=False)[sums].sum()
    return folded[list(STATS_DTYPES)].astype(STATS_DTYPES)


@dataclass(frozen=True, slots=True)
class Failure:
    """One object that was not downloaded, and why (the error's class and message)."""

    #: The object's bucket.
    bucket: str
    #: The object's key.
    key: str
    #: The error's class name (``"ObjectNotFoundError"``...).
    error_type: str
    #: The error's message.
    error: str


@dataclass(frozen=True, slots=True)
class WorkerThroughput:
    """What one worker did; ``seconds`` spans its first partition's start to its
    last one's end (wall time, gaps between its tasks included)."""

    #: The worker's address.
    worker: str
    #: Objects it downloaded.
    downloaded: int
    #: Objects it skipped (``skip_existing``).
    skipped: int
    #: Objects that failed on it.
    failed: int
    #: Bytes it downloaded.
    bytes: int
    #: Wall time from its first partition's start to its last one's end.
    seconds: float

    @property
    def objects_per_second(self) -> float:
        """Objects downloaded per second of ``seconds`` (0 when it is 0)."""
        return self.downloaded / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        """Bytes downloaded per second of ``seconds`` (0 when it is 0)."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ManifestSummary:
    """The outcome of :func:`asyncdl.dask.download_manifest`."""

    #: Rows of the manifest: ``downloaded + skipped + failed``.
    objects: int
    #: Objects downloaded.
    downloaded: int
    #: Already there (``skip_existing``): no request was made for them.
    skipped: int
    #: Objects not downloaded: bad rows and failed downloads (see ``failures``).
    failed: int
    #: Bytes downloaded (skipped objects not counted).
    bytes: int
    #: S3 requests of the downloads, retries included (listing not counted).
    requests: int
    #: Wall time of the run, seconds.
    seconds: float
    #: One entry per object not downloaded.
    failures: tuple[Failure, ...]
    #: One entry per worker that ran a partition, by worker address.
    workers: dict[str, WorkerThroughput]
    #: Temp files this run's killed worker processes left, removed after the run.
    temp_files_removed: int = 0

    @property
    def ok(self) -> bool:
        """Whether every object was downloaded or skipped."""
        return self.failed == 0


def build_summary(
    stats: pd.DataFrame, failures: pd.DataFrame, seconds: float, temp_files_removed: int = 0
) -> ManifestSummary:
    workers: dict[str, WorkerThroughput] = {}
    for worker, rows in stats.groupby("worker"):
        workers[str(worker)] = WorkerThroughput(
            worker=str(worker),
            downloaded=int(rows["downloaded"].sum()),
            skipped=int(rows["skipped"].sum()),
            failed=int(rows["failed"].sum()),
            bytes=int(rows["bytes"].sum()),
            seconds=float(rows["finished"].max() - rows["started"].min()),
        )
    totals = {name: int(stats[name].sum()) for name in ("downloaded", "skipped", "failed")}
    return ManifestSummary(
        objects=sum(totals.values()),
        **totals,
        bytes=int(stats["bytes"].sum()),
        requests=int(stats["requests"].sum()),
        seconds=seconds,
        failures=tuple(
            Failure(str(row.bucket), str(row.key), str(row.error_type), str(row.error))
            for row in failures[FAILURE_COLUMNS].itertuples(index=False)
        ),
        workers=dict(sorted(workers.items())),
        temp_files_removed=temp_files_removed,
    )


def summarize(results: pd.DataFrame) -> ManifestSummary:
    """A summary of computed per-item results (from :func:`download_results`)."""
    stats = partition_stats(results)
    seconds = float(stats["finished"].max() - stats["started"].min()) if len(stats) else 0.0
    failed = results[results["status"] == "failed"]
    return build_summary(stats, failed, seconds)
