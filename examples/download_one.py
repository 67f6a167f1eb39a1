"""Download one object, then a few with one shared engine.

    AWS_ENDPOINT_URL_S3=http://127.0.0.1:5000 python examples/download_one.py BUCKET KEY DEST

Credentials, region and endpoint come from the standard AWS environment.
"""

from __future__ import annotations

import asyncio
import sys

import asyncdl


async def main(bucket: str, key: str, dest: str) -> asyncdl.DownloadResult:
    # One call: opens an engine (and its client) for this download only.
    result = await asyncdl.download(bucket, key, dest)
    print(f"{result.key}: {result.size} bytes, {result.requests} request(s), {result.strategy}")

    # Many calls: keep one engine open; its client and concurrency budget are shared.
    config = asyncdl.TransferConfig(max_concurrency=32)
    async with asyncdl.Engine(config=config) as engine:
        try:
            await engine.download(bucket, key + ".missing", dest + ".missing")
        except asyncdl.ObjectNotFoundError as error:
            print(f"as expected: {error}")
        return await engine.download(bucket, key, dest, strategy="head-first")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
