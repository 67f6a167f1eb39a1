"""The engine's own client reads S3's answers as botocore does: the same dicts from
the same bodies, well-formed or hostile (no server: the parsers side by side)."""

from __future__ import annotations

import gc
import weakref
from datetime import datetime
from typing import Any
from xml.etree.ElementTree import Element

import pytest
from aiobotocore.parsers import AioRestXMLParser
from aiobotocore.session import get_session
from botocore.utils import parse_timestamp as botocore_timestamp

from asyncdl._wire.answer_parsing import ParserFactory, parse_timestamp

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'

FULL_ENTRY = """<Contents><Key>a/b.txt</Key><LastModified>2026-12-03T09:27:03.000Z</LastModified>
<ETag>&quot;bca0a4558e51f4f4284513f4c1a39aac&quot;</ETag>
<ChecksumAlgorithm>CRC32</ChecksumAlgorithm><ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>
<ChecksumType>FULL_OBJECT</ChecksumType><Size>1024</Size><StorageClass>GLACIER</StorageClass>
<Owner><DisplayName>me</DisplayName><ID>abc123</ID></Owner>
<RestoreStatus><IsRestoreInProgress>false</IsRestoreInProgress>
<RestoreExpiryDate>2027-01-01T00:00:00.5Z</RestoreExpiryDate></RestoreStatus></Contents>"""


def listing(contents: str, *, ns: str = NS, head: str = "") -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult {ns}><Name>b</Name>'
        f"<Prefix>a/</Prefix>{head}<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
        f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
    ).encode()


LIST_V2 = {
    "every member": listing(
        FULL_ENTRY * 2
        + "<CommonPrefixes><Prefix>a/c/</Prefix></CommonPrefixes>"
        + "<CommonPrefixes><Prefix>a/d/</Prefix></CommonPrefixes>",
        head="<Delimiter>/</Delimiter><EncodingType>url</EncodingType>"
        "<ContinuationToken>t1</ContinuationToken><NextContinuationToken>t2</NextContinuationToken>"
        "<StartAfter>a/0</StartAfter>",
    ),
    "one entry, one checksum": listing(
        "<Contents><Key>k</Key><LastModified>2026-12-03T09:27:03Z</LastModified>"
        "<ETag>&quot;x-2&quot;</ETag><ChecksumAlgorithm>CRC32</ChecksumAlgorithm>"
        "<Size>0</Size><StorageClass>STANDARD</StorageClass></Contents>"
    ),
    "empty": listing(""),
    "no namespace": listing(FULL_ENTRY, ns=""),
    "another namespace": listing(FULL_ENTRY, ns='xmlns="urn:other"'),
    "empty elements": listing("<Contents><Key/><ETag></ETag><StorageClass/></Contents>"),
    "a repeated tag": listing("<Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>"),
    "unknown tags": listing(
        "<Contents><Key>a</Key><Planted>x</Planted><Size>1</Size><Owner><X/></Owner></Contents>"
        "<Unknown><Key>b</Key></Unknown>"
    ),
    "children inside a string": listing("<Contents><Key>a<b>c</b>d</Key></Contents>"),
    "booleans as written": listing(
        "<Contents><Key>a</Key><RestoreStatus><IsRestoreInProgress>True"
        "</IsRestoreInProgress></RestoreStatus></Contents>"
    ),
    "other timestamps": listing(
        "<Contents><Key>a</Key><LastModified>Tue, 03 Dec 2026 09:27:03 GMT</LastModified>"
        "</Contents>"
        "<Contents><Key>b</Key><LastModified>1700000000</LastModified></Contents>"
        "<Contents><Key>c</Key><LastModified>2026-12-03T09:27:03.1234567Z</LastModified>"
        "</Contents>"
        "<Contents><Key>d</Key><LastModified>2026-12-03T09:27:03+02:00</LastModified></Contents>"
    ),
    # Each of these fails: the same error as botocore's.
    "an impossible date": listing(
        "<Contents><Key>a</Key><LastModified>2026-02-30T00:00:00Z</LastModified></Contents>"
    ),
    "a size that is no number": listing("<Contents><Key>a</Key><Size>1e3</Size></Contents>"),
    "an empty size": listing("<Contents><Key>a</Key><Size/></Contents>"),
    "a size of 5000 digits": listing(f"<Contents><Key>a</Key><Size>{'9' * 5000}</Size></Contents>"),
}

LIST_VERSIONS = (
    f'<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult {NS}><Name>b</Name>'
    "<Prefix></Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker>"
    "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
    "<Version><Key>a</Key><VersionId>v1</VersionId><IsLatest>true</IsLatest>"
    "<LastModified>2026-12-03T09:27:03.000Z</LastModified><ETag>&quot;e&quot;</ETag>"
    "<Size>3</Size><StorageClass>STANDARD</StorageClass></Version>"
    "<DeleteMarker><Key>b</Key><VersionId>v2</VersionId><IsLatest>false</IsLatest>"
    "<LastModified>2026-12-03T09:27:04.000Z</LastModified></DeleteMarker>"
    "</ListVersionsResult>"
).encode()

ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code>'
    b"<Message>The specified bucket does not exist</Message><BucketName>b</BucketName>"
    b"<RequestId>r1</RequestId><HostId>h1</HostId></Error>"
)


def same(ours: Any, theirs: Any, where: str = "") -> None:
    """Equal, and of the same types all the way down (a datetime's zone may be
    another object for UTC: botocore's own depends on the machine's local zone)."""
    assert type(ours) is type(theirs), where
    if isinstance(ours, dict):
        assert list(ours) == list(theirs), where
        for key in ours:
            same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), where
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            same(a, b, f"{where}[{index}]")
    elif isinstance(ours, Element):
        # What botocore makes of a tag repeated where one was expected: the elements.
        assert (ours.tag, ours.text) == (theirs.tag, theirs.text), where
    elif isinstance(ours, datetime):
        assert ours == theirs, where
        assert ours.utcoffset() == theirs.utcoffset(), where
    else:
        assert ours == theirs, where


async def parse_both(operation: str, body: bytes, status: int = 200) -> tuple[Any, Any]:
    model = await get_session().get_service_model("s3")
    shape = model.operation_model(operation).output_shape
    factory = ParserFactory()
    factory.set_parser_defaults(timestamp_parser=parse_timestamp)
    ours_parser, theirs_parser = factory.create_parser("rest-xml"), AioRestXMLParser()
    assert type(ours_parser) is not type(theirs_parser)
    results = []
    for parser in (ours_parser, theirs_parser):
        headers = {"x-amz-request-charged": "requester", "x-amz-request-id": "r1"}
        answer = {"body": body, "headers": headers, "status_code": status}
        try:
            results.append(await parser.parse(answer, shape))
        except Exception as exc:  # the error is what is compared
            results.append((type(exc), str(exc)))
    return results[0], results[1]


@pytest.mark.parametrize("body", list(LIST_V2.values()), ids=list(LIST_V2))
async def test_a_listing_page_reads_as_botocore_reads_it(body: bytes) -> None:
    ours, theirs = await parse_both("ListObjectsV2", body)
    same(ours, theirs)


async def test_the_listing_read_is_the_full_one() -> None:
    # Not a trivially equal pair: every member of an entry is there, typed.
    ours, _ = await parse_both("ListObjectsV2", LIST_V2["every member"])
    entry = ours["Contents"][0]
    assert entry["Size"] == 1024
    assert entry["ChecksumAlgorithm"] == ["CRC32", "CRC64NVME"]
    assert entry["Owner"] == {"DisplayName": "me", "ID": "abc123"}
    assert entry["RestoreStatus"]["IsRestoreInProgress"] is False
    assert entry["LastModified"] == datetime.fromisoformat("2026-12-03T09:27:03+00:00")
    assert ours["CommonPrefixes"] == [{"Prefix": "a/c/"}, {"Prefix": "a/d/"}]
    assert ours["RequestCharged"] == "requester"
    assert ours["IsTruncated"] is False


@pytest.mark.parametrize(
    ("operation", "body", "status"),
    [
        ("ListObjectVersions", LIST_VERSIONS, 200),
        ("ListObjects", LIST_V2["every member"], 200),
        ("ListObjectsV2", ERROR, 404),
        ("HeadObject", b"", 200),
    ],
    ids=["versions", "list v1", "an error", "headers only"],
)
async def test_other_answers_read_as_botocore_reads_them(
    operation: str, body: bytes, status: int
) -> None:
    ours, theirs = await parse_both(operation, body, status)
    same(ours, theirs)


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-03T09:27:03.000Z",
        "2026-12-03T09:27:03Z",
        "2026-12-03T09:27:03.5Z",
        "2026-12-03T09:27:03.123456Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999Z",
        "2024-02-29T12:00:00Z",
        "2026-12-03T09:27:03.1234567Z",
        "Tue, 03 Dec 2026 09:27:03 GMT",
        "1700000000",
        "2026-12-03T09:27:03+05:30",
        "2026-12-03T24:00:00Z",
        "2026-12-03T24:00:00.000Z",
        "2016-12-31T23:59:60Z",
        "2026-12-03T09:27:03.000z",
        "2026-12-03T09:27:03.000Z\n",
        "2026-13-03T09:27:03Z",
        "2026-02-30T00:00:00Z",
        "0000-01-01T00:00:00Z",
        "",
        "garbage",
    ],
)
def test_a_timestamp_reads_as_botocore_reads_it(value: str) -> None:
    def outcome(parse: Any) -> Any:
        try:
            return parse(value)
        except Exception as exc:  # the error is what is compared
            return (type(exc), str(exc))

    ours, theirs = outcome(parse_timestamp), outcome(botocore_timestamp)
    same(ours, theirs)


async def test_a_client_s_plans_go_with_its_model() -> None:
    # Each client an engine makes loads its own model: a plan kept beyond it would
    # keep that model (a few MB) alive for good.
    async def parse_with_a_fresh_model() -> weakref.ref[Any]:
        model = await get_session().get_service_model("s3")
        shape = model.operation_model("ListObjectsV2").output_shape
        factory = ParserFactory()
        factory.set_parser_defaults(timestamp_parser=parse_timestamp)
        answer = {"body": LIST_V2["every member"], "headers": {}, "status_code": 200}
        parsed = await factory.create_parser("rest-xml").parse(answer, shape)
        assert parsed["Contents"][0]["Size"] == 1024
        return weakref.ref(shape)

    shapes = [await parse_with_a_fresh_model() for _ in range(3)]
    gc.collect()
    assert [shape() for shape in shapes] == [None, None, None]


async def test_a_namespace_with_a_newline_reads_as_botocore_reads_it() -> None:
    # botocore's "{.*}" does not cross a newline: such a namespace is not stripped.
    body = listing(FULL_ENTRY, ns='xmlns="a&#10;b"')
    ours, theirs = await parse_both("ListObjectsV2", body)
    same(ours, theirs)
