"""A FastAPI service that serves and fetches S3 objects through one shared asyncdl engine.

    ASYNCDL_BUCKETS=my-bucket ASYNCDL_DOWNLOAD_DIR=/srv/downloads \\
        uvicorn examples.fastapi_app:app

- ``GET /objects/{bucket}/{key}`` streams an object as browsers, video players,
  download managers and caches expect (``Range``, ``If-Range``, ``If-None-Match``...,
  see ``asyncdl.contrib.fastapi.object_response``); ``HEAD`` answers the headers
  after one S3 HEAD; ``?download=true`` names the file for a browser to save; 404
  for a missing key; only allow-listed buckets. Every answer says ``nosniff``, and
  a type is never guessed into one a browser runs (``page.html`` stored without a
  type is sent as ``application/octet-stream``): store the type with the upload
  (``ContentType=``) for what is to be shown inline.
- ``POST /downloads`` downloads a batch of keys into the server-side folder (names
  confined to it) and returns one result per key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel

import asyncdl
from asyncdl.contrib.fastapi import EngineDep, lifespan, object_response


def allowed_buckets() -> frozenset[str]:
    return frozenset(filter(None, os.environ.get("ASYNCDL_BUCKETS", "").split(",")))


def download_dir() -> Path:
    return Path(os.environ.get("ASYNCDL_DOWNLOAD_DIR", "downloads"))


app = FastAPI(lifespan=lifespan(config=asyncdl.TransferConfig(max_concurrency=64)))


def check_bucket(bucket: str) -> None:
    if bucket not in allowed_buckets():
        raise HTTPException(status_code=403, detail=f"bucket {bucket!r} is not allowed")


@app.api_route("/objects/{bucket}/{key:path}", methods=["GET", "HEAD"])
async def get_object(
    bucket: str, key: str, request: Request, engine: EngineDep, download: bool = False
) -> Response:
    check_bucket(bucket)
    # 200/206/304/412/416 and the headers, 404/403 without naming the object; the
    # response closes its stream however it ends (a client may leave at any point).
    filename = (key.rsplit("/", 1)[-1] or None) if download else None
    return await object_response(engine, bucket, key, request, filename=filename)


class Batch(BaseModel):
    bucket: str
    keys: list[str]


@app.post("/downloads")
async def download_batch(batch: Batch, engine: EngineDep) -> list[dict[str, Any]]:
    check_bucket(batch.bucket)
    root = download_dir()
    results: list[dict[str, Any]] = []
    items = []
    for key in batch.keys:
        try:
            # Confined to root, by the rules download_prefix applies to listed keys.
            target = root.joinpath(*asyncdl.relative_path(key).parts)
        except ValueError as exc:
            results.append({"key": key, "ok": False, "error": str(exc)})
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        items.append((batch.bucket, key, target))
    async for result in engine.download_many(items):
        results.append(
            {
                "key": result.key,
                "ok": result.ok,
                "size": result.size,
                "path": str(result.path.relative_to(root)) if result.ok else None,
                "error": str(result.error) if result.error else None,
            }
        )
    return results
