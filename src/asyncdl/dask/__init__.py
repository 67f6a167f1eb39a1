"""Bulk downloads across a Dask (``distributed``) cluster: ``pip install 'asyncdl[dask]'``.

The cluster schedules, retries and balances; asyncdl downloads. Each partition of
the manifest runs on a worker through ``download_many``, in the worker process's
one long-lived Engine (one client, one connection pool, one request budget). A
partition whose worker dies is run again by Dask: downloads go to temp files that
``os.replace`` publishes, so a retried partition leaves no duplicate and no half
file, and the temp files of the killed process are removed when the run ends
(that run's only). Workers take their endpoint, credentials and any
SSE-C key from their own environment: no secret goes through the scheduler.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping

import dask
import dask.dataframe as dd
import distributed
import pandas as pd

from .._files.file_records import SKIP_MODES
from .._transfer.strategies import STRATEGIES, Strategy
from .._wire.request_args import ExtraArgs, check_extra_args
from ..config import TransferConfig, finite
from ..errors import InvalidRequestError
from ._errors import ManifestError
from ._listing import MANIFEST_DTYPES, list_all, list_level
from ._manifest import manifest_frame
from ._partition import RESULT_DTYPES, Job, run_partition, worker_problem
from ._sse import check_key_options
from ._summary import (
    FAILURE_COLUMNS,
    STATS_DTYPES,
    Failure,
    ManifestSummary,
    WorkerThroughput,
    build_summary,
    partition_stats,
    summarize,
)
from ._sweep import end_run, sweep

__all__ = [
    "Failure",
    "ManifestError",
    "ManifestSummary",
    "WorkerThroughput",
    "download_manifest",
    "download_results",
    "list_manifest",
    "remove_temp_files",
    "summarize",
]


def download_manifest(
    manifest: object,
    dest_dir: str | os.PathLike[str],
    *,
    client: distributed.Client | None = None,
    partition_size: int | None = None,
    config: TransferConfig | None = None,
    strategy: str | Strategy = "auto",
    skip_existing: str | None = None,
    extra_args: ExtraArgs | None = None,
    sse_customer_key_env: str | None = None,
    timeout: float | None = None,
) -> ManifestSummary:
    """Download every object of ``manifest`` under ``dest_dir`` on the cluster.

    - ``manifest``: an iterable of ``DownloadRequest`` or ``(bucket, key)`` items, a
      Dask DataFrame or bag (``bucket``, ``key``; optionally ``size``, ``etag``,
      ``path``), or the path of a CSV (with a header) or Parquet listing. Each object
      lands at ``dest_dir/<key>`` (or ``dest_dir/<path>``), confined to ``dest_dir``.
    - ``partition_size``: objects per task (1000 for iterables and files; a Dask
      collection keeps its own partitions unless it is given).
    - ``skip_existing``: ``"size"`` or ``"etag"`` skips targets already there, as
      :meth:`asyncdl.Engine.download_prefix` does.
    - ``sse_customer_key_env``: the name of an environment variable that holds the
      SSE-C key (base64) on every worker; a key in ``extra_args`` is refused, since it
      would travel through the scheduler.
    - ``config``, ``strategy``, ``extra_args``, ``timeout``: as
      :meth:`asyncdl.Engine.download_many` takes them; each worker process keeps one
      engine open per ``config``.
    - ``client``: the Dask client (default: the current one).

    Blocks until every partition is done; returns the summary. A bad manifest,
    option or destination raises :class:`ManifestError` before anything runs; a
    bad row or a failed download is reported in ``failures``.
    """
    dask_client = _dask_client(client)
    started = time.perf_counter()
    results, job = _plan(
        manifest,
        dest_dir,
        dask_client,
        partition_size=partition_size,
        config=config,
        strategy=strategy,
        skip_existing=skip_existing,
        extra_args=extra_args,
        sse_customer_key_env=sse_customer_key_env,
        timeout=timeout,
    )
    stats = results.map_partitions(partition_stats, meta=_meta(STATS_DTYPES))
    failures = results[results["status"] == "failed"][FAILURE_COLUMNS]
    # One compute for both: each partition is downloaded once and folded on its
    # worker; only the counts and the failures travel back here.
    stats_frame, failures_frame = dask_client.compute([stats, failures], sync=True)
    seconds = time.perf_counter() - started
    # This run's leftovers only, where its downloads put them (the absolute path).
    removed = _sweep_hosts(dask_client, job.dest_dir, job.run_id)
    return build_summary(stats_frame, failures_frame, seconds, removed)


def download_results(
    manifest: object,
    dest_dir: str | os.PathLike[str],
    *,
    client: distributed.Client | None = None,
    partition_size: int | None = None,
    config: TransferConfig | None = None,
    strategy: str | Strategy = "auto",
    skip_existing: str | None = None,
    extra_args: ExtraArgs | None = None,
    sse_customer_key_env: str | None = None,
    timeout: float | None = None,
) -> dd.DataFrame:
    """The per-item results of a run, as a lazy Dask DataFrame: for runs too large
    to bring back to one process (``.to_parquet(...)`` them, say).

    Same arguments as :func:`download_manifest`, checked now; computing the frame
    runs the downloads (each time it is computed). Columns: ``bucket, key, path,
    status`` (``"downloaded"``, ``"skipped"``, ``"failed"``), ``size, etag,
    requests, error_type, error, worker, started, finished``. It does not remove
    killed workers' temp files: call :func:`remove_temp_files` after it.
    """
    results, _ = _plan(
        manifest,
        dest_dir,
        _dask_client(client),
        partition_size=partition_size,
        config=config,
        strategy=strategy,
        skip_existing=skip_existing,
        extra_args=extra_args,
        sse_customer_key_env=sse_customer_key_env,
        timeout=timeout,
    )
    return results


def _plan(
    manifest: object,
    dest_dir: str | os.PathLike[str],
    dask_client: distributed.Client,
    *,
    partition_size: int | None,
    config: TransferConfig | None,
    strategy: str | Strategy,
    skip_existing: str | None,
    extra_args: ExtraArgs | None,
    sse_customer_key_env: str | None,
    timeout: float | None,
) -> tuple[dd.DataFrame, Job]:
    """A run's lazy results and what its partitions share, every option checked."""
    job = Job(
        dest_dir=_check_options(
            dest_dir,
            partition_size=partition_size,
            config=config,
            strategy=strategy,
            skip_existing=skip_existing,
            extra_args=extra_args,
            sse_customer_key_env=sse_customer_key_env,
            timeout=timeout,
        ),
        config=config or TransferConfig(),
        strategy=strategy,
        skip_existing=skip_existing,
        extra_args=dict(extra_args) if extra_args else None,
        timeout=timeout,
        # In every temp file name of the run: short, and still never repeated.
        run_id=secrets.token_hex(8),
        sse_customer_key_env=sse_customer_key_env,
    )
    frame = manifest_frame(manifest, partition_size, dask_client)
    _check_workers(job, dask_client)
    return frame.map_partitions(run_partition, job, meta=_meta(RESULT_DTYPES)), job


def list_manifest(
    bucket: str,
    prefix: str = "",
    *,
    delimiter: str | None = None,
    client: distributed.Client | None = None,
    config: TransferConfig | None = None,
    extra_args: ExtraArgs | None = None,
) -> dd.DataFrame:
    """List ``s3://bucket/prefix`` on the cluster into a manifest (``bucket, key, size,
    etag``), held in the workers' memory.

    With a ``delimiter`` (``"/"``), one listing finds the common prefixes right below
    ``prefix``, then each is listed whole by its own task, in parallel; each becomes
    one partition (the objects directly under ``prefix`` one more). Without one, a
    single task lists everything. Folder markers are left out. ``extra_args`` may
    hold ``RequestPayer`` and ``ExpectedBucketOwner``.
    """
    dask_client = _dask_client(client)
    if not isinstance(bucket, str) or not bucket:
        raise ManifestError(f"bucket must be a non-empty string, got {bucket!r}")
    if not isinstance(prefix, str):
        raise ManifestError(f"prefix must be a string, got {prefix!r}")
    if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
        raise ManifestError(f"delimiter must be a non-empty string or None, got {delimiter!r}")
    transfer = _check_config(config) or TransferConfig()
    allowed = ("RequestPayer", "ExpectedBucketOwner")
    unknown = sorted(set(extra_args or ()) - set(allowed))
    if unknown:
        raise ManifestError(f"listing takes only {allowed} in extra_args, not {unknown}")
    list_args = dict(extra_args or {})
    meta = _meta(MANIFEST_DTYPES)
    if delimiter is None:
        parts = [dask.delayed(list_all, pure=False)(bucket, prefix, transfer, list_args)]
    else:
        top, prefixes = dask_client.submit(
            list_level, bucket, prefix, delimiter, transfer, list_args, pure=False
        ).result()
        # The objects right under the prefix are one partition, if there are any.
        parts = [dask.delayed(top)] if len(top) or not prefixes else []
        parts += [
            dask.delayed(list_all, pure=False)(bucket, below, transfer, list_args)
            for below in prefixes
        ]
    frame = dask_client.persist(dd.from_delayed(parts, meta=meta, verify_meta=False))
    # Wait, so a listing error surfaces here rather than in the download.
    distributed.wait(frame)
    for future in distributed.futures_of(frame):
        if future.status == "error":
            future.result()
    return frame


def remove_temp_files(
    dest_dir: str | os.PathLike[str], *, client: distributed.Client | None = None
) -> int:
    """Remove the temp files that Dask runs into ``dest_dir`` left, on one worker per
    host; return how many. Only a killed worker process leaves them.

    Every run journaled under ``dest_dir`` is swept, in the directories it wrote
    into: call it when no Dask run is writing there. Downloads by the CLI or the
    library, and objects named like temp files, are never touched. A relative
    ``dest_dir`` is taken from this process's working directory, as the runs take it.
    """
    dask_client = _dask_client(client)
    return _sweep_hosts(dask_client, os.path.abspath(os.fspath(dest_dir)), None)


def _sweep_hosts(dask_client: distributed.Client, dest_dir: str, run_id: str | None) -> int:
    """End the run on every worker, then sweep on one worker per host: a per-node
    ``dest_dir`` has its own leftovers."""
    # The workers as the scheduler has them now, not the client's scheduler_info():
    # its cache is refreshed every 2 s without the workers, and a refresh landing as
    # it fetches them left no worker to sweep on. One that died since does not answer,
    # and runs nothing more.
    ended = dask_client.run(end_run, run_id, on_error="ignore")
    hosts: dict[str, str] = {}
    for address in sorted(ended):
        hosts.setdefault(distributed.comm.get_address_host(address), address)
    removed = dask_client.run(sweep, dest_dir, run_id, workers=list(hosts.values()))
    return sum(removed.values())


def _dask_client(client: distributed.Client | None) -> distributed.Client:
    if client is not None:
        return client
    try:
        return distributed.default_client()
    except ValueError:
        raise ManifestError(
            "no Dask client: pass client=, or create distributed.Client(...) first"
        ) from None


def _check_config(config: object) -> TransferConfig | None:
    if config is not None and not isinstance(config, TransferConfig):
        raise ManifestError(f"config must be a TransferConfig, got {config!r}")
    return config


def _check_options(
    dest_dir: object,
    *,
    partition_size: object,
    config: object,
    strategy: object,
    skip_existing: object,
    extra_args: object,
    sse_customer_key_env: object,
    timeout: object,
) -> str:
    """Every option checked on the client, before anything runs; the destination path."""
    if skip_existing is not None and skip_existing not in SKIP_MODES:
        raise ManifestError(f"skip_existing must be None, 'size' or 'etag', got {skip_existing!r}")
    if partition_size is not None and (
        not isinstance(partition_size, int)
        or isinstance(partition_size, bool)
        or partition_size < 1
    ):
        raise ManifestError(f"partition_size must be an int >= 1, got {partition_size!r}")
    _check_config(config)
    if isinstance(strategy, str):
        if strategy != "auto" and strategy not in STRATEGIES:
            names = ", ".join(repr(name) for name in ["auto", *STRATEGIES])
            raise ManifestError(f"unknown strategy {strategy!r}; use one of {names}")
    elif not isinstance(strategy, Strategy):
        raise ManifestError(f"strategy must be a name or a Strategy object, got {strategy!r}")
    if timeout is not None and (not finite(timeout) or timeout <= 0):  # type: ignore[operator]
        raise ManifestError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if extra_args is not None and not isinstance(extra_args, Mapping):
        raise ManifestError(f"extra_args must be a mapping, got {type(extra_args).__name__}")
    check_key_options(extra_args, sse_customer_key_env)
    try:
        check_extra_args(extra_args, bucket="", key="")
    except InvalidRequestError as exc:
        raise ManifestError(exc.message) from None
    if not isinstance(dest_dir, str | os.PathLike):
        raise ManifestError(f"dest_dir must be a str or os.PathLike, got {dest_dir!r}")
    path = os.path.abspath(os.fspath(dest_dir))
    # Only what is wrong everywhere: a per-node destination need not exist here.
    # The workers check the rest (_check_workers).
    if os.path.exists(path) and not os.path.isdir(path):
        raise ManifestError(f"dest_dir {path!r} is not a directory")
    return path


def _check_workers(job: Job, client: distributed.Client) -> None:
    """What only the workers can tell: a per-node destination may differ from ours,
    and each worker has its own environment (the SSE-C key's variable)."""
    problems = client.run(worker_problem, job.dest_dir, job.sse_customer_key_env)
    for worker, problem in sorted(problems.items()):
        if problem is not None:
            option, why = problem
            raise ManifestError(f"{option} on worker {worker}: {why}")


def _meta(dtypes: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in dtypes.items()})
