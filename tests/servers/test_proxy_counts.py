"""The test proxy's count of response body bytes (what the resume benchmark reads)."""

from __future__ import annotations

import contextlib
from typing import Any

from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import make_client, payload

SIZE = 200_000


async def test_it_counts_the_body_bytes_each_client_received(
    proxy: TcpProxy, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(SIZE))
    async with make_client(proxy.url) as client:
        await client.head_object(Bucket=bucket, Key="k")
        answer = await client.get_object(Bucket=bucket, Key="k", Range="bytes=0-999")
        async with answer["Body"] as body:
            assert await body.read() == payload(SIZE)[:1000]
        assert proxy.response_bytes == 1000  # a HEAD has no body

        def cut(request: RequestRecord) -> Fault | None:
            return Fault(cut_after=70_000) if request.method == "GET" else None

        proxy.rule = cut
        proxy.reset_stats()
        answer = await client.get_object(Bucket=bucket, Key="k")
        async with answer["Body"] as body:
            got = b""
            # The short body: when and how botocore reports it varies; the bytes do not.
            with contextlib.suppress(Exception):
                while chunk := await body.read(65536):
                    got += chunk
    assert len(got) == 70_000
    assert proxy.response_bytes == 70_000


async def test_a_request_is_counted_before_its_rule_is_asked(
    proxy: TcpProxy, s3: Any, bucket: str
) -> None:
    # A test's rule may wake the test ("the HEAD is out") and the test then count the
    # proxy's requests: that request must be among them by then, whichever thread runs.
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10))
    counted: list[list[str]] = []

    def rule(request: RequestRecord) -> Fault | None:
        counted.append([r.method for r in proxy.requests])
        return None

    proxy.rule = rule
    async with make_client(proxy.url) as client:
        await client.head_object(Bucket=bucket, Key="k")
        await client.head_object(Bucket=bucket, Key="k")
    assert counted == [["HEAD"], ["HEAD", "HEAD"]]
