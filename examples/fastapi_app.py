"""A FastAPI service that serves and fetches S3 objects through one shared asyncdl engine.

    ASYNCDL_BUCKETS=my-bucket ASYNCDL_DOWNLOAD_DIR=/srv/downloads \\
        uvicorn examples.fastapi_app:app

- ``GET /objects/{bucket}/{key}`` streams an object (Content-Length and ETag from
  the first request; 404 for a missing key; only allow-listed buckets);
  ``HEAD`` answers the same headers without reading the body.
- ``POST /downloads`` downloads a batch of keys into the server-side folder (names
  confined to it) and returns one result per key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel
from starlette.background import BackgroundTask

import asyncdl
from asyncdl.bulk import relative_path
from asyncdl.contrib.fastapi import EngineDep, lifespan


def allowed_buckets() -> frozenset[str]:
    return frozenset(filter(None, os.environ.get("ASYNCDL_BUCKETS", "").split(",")))


def download_dir() -> Path:
    return Path(os.environ.get("ASYNCDL_DOWNLOAD_DIR", "downloads"))


app = FastAPI(lifespan=lifespan(config=asyncdl.TransferConfig(max_concurrency=64)))


def check_bucket(bucket: str) -> None:
    if bucket not in allowed_buckets():
        raise HTTPException(status_code=403, detail=f"bucket {bucket!r} is not allowed")


async def open_object(bucket: str, key: str, engine: asyncdl.Engine) -> asyncdl.ObjectStream:
    """The object's stream, opened: the first request gives its size and ETag, or the
    404, before any byte of the answer is sent."""
    check_bucket(bucket)
    stream = engine.stream(bucket, key)
    try:
        return await stream.open()
    except asyncdl.ObjectNotFoundError:
        raise HTTPException(status_code=404, detail="no such object") from None
    except asyncdl.AccessDeniedError:
        raise HTTPException(status_code=403, detail="access denied") from None


def object_headers(stream: asyncdl.ObjectStream) -> dict[str, str]:
    return {"Content-Length": str(stream.length), "ETag": stream.etag or ""}


@app.get("/objects/{bucket}/{key:path}")
async def get_object(bucket: str, key: str, engine: EngineDep) -> StreamingResponse:
    stream = await open_object(bucket, key, engine)
    # The open stream holds its first answer (a slot of the engine's budget and a
    # connection) until it is read or closed: close it when the response ends, sent
    # in full or cut by a client that left (even before the first byte).
    return StreamingResponse(
        stream,
        media_type="application/octet-stream",
        headers=object_headers(stream),
        background=BackgroundTask(stream.aclose),
    )


@app.head("/objects/{bucket}/{key:path}")
async def head_object(bucket: str, key: str, engine: EngineDep) -> Response:
    async with await open_object(bucket, key, engine) as stream:  # headers only
        return Response(media_type="application/octet-stream", headers=object_headers(stream))


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
            target = root.joinpath(*relative_path(key, "").parts)  # confined to root
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
