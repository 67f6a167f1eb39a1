"""Listing answers no S3 sends: a page that says more follow but names no next one,
a 200 that is no listing at all (a login page, an empty body, another document),
continuation tokens that come round again. A listing that cannot be trusted to be
whole is a failed listing: ``sync --delete`` deletes nothing after it, and no command
goes round forever. Through the CLI, against moto via the proxy, whose rule answers
the listing requests in moto's place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def run(proxy: TcpProxy, *args: str) -> Result:
    return CliRunner().invoke(cli, [args[0], "--endpoint-url", proxy.url, *args[1:]])


def page(bucket: str, keys: list[str], truncated: str | None, token: str | None) -> bytes:
    """A ListObjectsV2 answer: ``truncated`` the IsTruncated text (None: no element)."""
    entries = "".join(
        f"<Contents><Key>{key}</Key><Size>1</Size><ETag>&quot;0cc175b9c0f1b6a831c399e269772661&quot;"
        "</ETag><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
        for key in keys
    )
    more = f"<IsTruncated>{truncated}</IsTruncated>" if truncated is not None else ""
    following = f"<NextContinuationToken>{token}</NextContinuationToken>" if token else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{bucket}</Name><Prefix>p/</Prefix><KeyCount>{len(keys)}</KeyCount>"
        f"<MaxKeys>1000</MaxKeys>{more}{entries}{following}</ListBucketResult>"
    ).encode()


def answer(body: bytes, content_type: str = "application/xml") -> Fault:
    headers = {"Content-Type": content_type, "Content-Length": str(len(body))}
    return Fault(reply=(200, headers, body))


def listing_answers(rule: dict[str | None, bytes]) -> Any:
    """A proxy rule: each listing request answered by its continuation token's entry
    (``None``: the first page); any other request passes."""

    def answering(request: RequestRecord) -> Fault | None:
        if "list-type=2" not in request.path:
            return None
        found = re.search(r"continuation-token=([^&]*)", request.path)
        return answer(rule[found.group(1) if found else None])

    return answering


def synced_twice(s3: Any, bucket: str, proxy: TcpProxy, dest: Path, rule: Any) -> Result:
    """A good ``sync --delete`` of p/a and p/b, then one whose listing ``rule`` answers."""
    for key in ("p/a", "p/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"a")
    first = run(proxy, "sync", "--delete", f"s3://{bucket}/p/", str(dest))
    assert first.exit_code == 0, first.output
    assert sorted(path.name for path in dest.iterdir()) == ["a", "b"]
    proxy.rule = rule
    return run(proxy, "sync", "--delete", f"s3://{bucket}/p/", str(dest))


NOT_A_LISTING: dict[str, tuple[Callable[[str], bytes], str]] = {
    "truncated, no token": (lambda b: page(b, ["p/a"], "true", None), "names no next page"),
    "a login page": (lambda b: b"<html><body>Please log in</body></html>", "not a listing"),
    "an empty body": (lambda b: b"", "not a listing"),
    "another document": (
        lambda b: b'<?xml version="1.0"?><ListAllMyBucketsResult/>',
        "not a listing",
    ),
    "no IsTruncated": (lambda b: page(b, ["p/a"], None, None), "not a listing"),
    "a token on the last page": (lambda b: page(b, ["p/a"], "false", "next"), "names a next"),
    # botocore reads anything but "true" as false: the token is what gives it away.
    "IsTruncated neither true nor false": (
        lambda b: page(b, ["p/a"], "True", "next"),
        "names a next",
    ),
}


@pytest.mark.parametrize("case", NOT_A_LISTING)
def test_sync_delete_after_an_answer_that_is_no_whole_listing_deletes_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, case: str
) -> None:
    make, message = NOT_A_LISTING[case]
    dest = tmp_path / "d"
    result = synced_twice(s3, bucket, proxy, dest, listing_answers({None: make(bucket)}))
    assert result.exit_code == 1, result.output
    assert "delete:" not in result.stdout
    assert message in result.stderr
    assert sorted(path.name for path in dest.iterdir()) == ["a", "b"]


@pytest.mark.parametrize("command", [["sync"], ["cp", "-r"], ["ls", "-r"]])
@pytest.mark.timeout(60)
def test_continuation_tokens_that_come_round_again_end_the_listing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, command: list[str]
) -> None:
    # A -> B -> A -> ...: each token differs from the one before it, so only a listing
    # that remembers every token it was given stops it.
    s3.put_object(Bucket=bucket, Key="p/a", Body=b"a")
    s3.put_object(Bucket=bucket, Key="p/b", Body=b"a")
    proxy.rule = listing_answers(
        {
            None: page(bucket, ["p/a"], "true", "A"),
            "A": page(bucket, ["p/b"], "true", "B"),
            "B": page(bucket, ["p/a"], "true", "A"),
        }
    )
    where = [str(tmp_path / "d")] if command[0] != "ls" else []
    result = run(proxy, *command, f"s3://{bucket}/p/", *where)
    assert result.exit_code == 1, result.output
    assert "continuation token" in result.stderr
    assert sum("list-type=2" in r.path for r in proxy.requests) == 3
