"""Reading S3's XML answers for the engine's own client: botocore's results, for less.

botocore reads an answer by walking its model: for each element of a structure a
regular expression on its tag, then for each member of the shape its serialization
looked up, its tag name worked out and a handler found by name; and each timestamp
goes through dateutil. For a ListObjectsV2 page that came to about 80 µs per object
listed (two thirds of it the timestamps), as much CPU as downloading a tiny object.

Here what botocore works out per element is worked out once per shape (its plan:
each member's tag, name and kind), and a timestamp in the one format S3 writes
(``2026-12-03T09:27:03.000Z``) is read by ``datetime.fromisoformat``. The rest goes
to botocore's own code, element by element: a member that is not a plain string,
number, boolean or timestamp (a nested structure, a list, a blob), a tag repeated
where one was expected, a shape that is an error, a union or has XML attributes.
The result is the dict botocore's parser returns (the tests compare the two on
answers of every shape a listing takes, and on hostile ones). One difference that is
not one: botocore gives a UTC timestamp the zone ``tzlocal()`` on a machine whose
local zone is UTC, and ``tzutc()`` elsewhere; here it is ``tzutc()`` everywhere (the
values are equal).

Only the client an engine creates reads answers this way: a client handed in is
the caller's, left as it was configured.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from aiobotocore.parsers import AioResponseParserFactory, AioRestXMLParser
from botocore.utils import parse_timestamp as botocore_timestamp
from dateutil.tz import tzutc

#: The kinds of member read here; any other is botocore's.
_STRING, _INTEGER, _BOOLEAN, _TIMESTAMP = range(4)
_KINDS = {
    "string": _STRING,
    "character": _STRING,
    "integer": _INTEGER,
    "long": _INTEGER,
    "boolean": _BOOLEAN,
    "timestamp": _TIMESTAMP,
}
#: A member's plan: its tag, its name in the result, its kind (``None``: botocore's),
#: and its shape (for botocore).
_Member = tuple[str, str, int | None, Any]
#: Where a shape keeps its plan: on the shape, so that it goes with the client's model
#: (a cache of its own would keep every client's model alive, a few MB each).
_PLAN = "_asyncdl_plan"

#: What S3 writes: UTC, whole seconds or up to microseconds. Others are botocore's.
#: (Hour 24, which Python 3.14's fromisoformat takes and dateutil refuses, is left out.)
_S3_TIME = re.compile(r"\d{4}-\d\d-\d\dT(?:[01]\d|2[0-3]):\d\d:\d\d(?:\.\d{1,6})?Z\Z", re.ASCII)
_UTC = tzutc()


def parse_timestamp(value: Any) -> datetime:
    """botocore's ``parse_timestamp``, with S3's own format read without dateutil."""
    if isinstance(value, str) and _S3_TIME.match(value):
        try:
            return datetime.fromisoformat(value[:-1]).replace(tzinfo=_UTC)
        except ValueError:
            pass  # out of range (February 30th): botocore's error, in its words
    result: datetime = botocore_timestamp(value)
    return result


class RestXMLParser(AioRestXMLParser):  # type: ignore[misc]
    """aiobotocore's parser of S3's answers, reading structures by plan (see the
    module's docstring)."""

    def _handle_structure(self, shape: Any, node: Any) -> Any:
        plan = self._plan(shape)
        if plan is None or isinstance(node, list):
            return super()._handle_structure(shape, node)
        # As botocore's _build_name_to_xml_node: a tag without its namespace (an
        # ElementTree tag is "{uri}name" or "name"), a repeated one gathered in a list.
        elements: dict[str, Any] = {}
        for item in node:
            tag = item.tag
            # botocore's "{.*}" stops at a newline: such a namespace is its to strip.
            tag = self._namespace_re.sub("", tag) if "\n" in tag else tag.rpartition("}")[2]
            seen = elements.get(tag)
            if seen is None:
                elements[tag] = item
            elif isinstance(seen, list):
                seen.append(item)
            else:
                elements[tag] = [seen, item]
        parsed: dict[str, Any] = {}
        for tag, name, kind, member_shape in plan:
            element = elements.get(tag)
            if element is None:
                continue
            if kind is None or isinstance(element, list):
                parsed[name] = self._parse_shape(member_shape, element)
                continue
            text = element.text
            if text is None:
                text = ""
            if kind == _STRING:
                parsed[name] = text
            elif kind == _INTEGER:
                parsed[name] = int(text)
            elif kind == _BOOLEAN:
                parsed[name] = text == "true"
            else:
                parsed[name] = self._timestamp_parser(text)
        return parsed

    def _plan(self, shape: Any) -> tuple[_Member, ...] | None:
        try:
            plan: tuple[_Member, ...] | None = getattr(shape, _PLAN)
        except AttributeError:
            plan = self._make_plan(shape)
            setattr(shape, _PLAN, plan)
        return plan

    def _make_plan(self, shape: Any) -> tuple[_Member, ...] | None:
        """Each member botocore reads from the body, in the model's order; ``None``
        for a shape botocore must read itself."""
        if shape.metadata.get("exception", False) or getattr(shape, "is_tagged_union", False):
            return None
        plan: list[_Member] = []
        for name, member in shape.members.items():
            serialization = member.serialization
            if serialization.get("location") in self.KNOWN_LOCATIONS or serialization.get(
                "eventheader"
            ):
                continue  # read from the headers, as botocore skips it here
            if serialization.get("xmlAttribute"):
                return None
            tag = self._member_key_name(member, name)
            plan.append((tag, name, _KINDS.get(member.type_name), member))
        return tuple(plan)


class ParserFactory(AioResponseParserFactory):  # type: ignore[misc]
    """aiobotocore's factory, with :class:`RestXMLParser` for S3's protocol."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "rest-xml":
            return RestXMLParser(**self._defaults)
        return super().create_parser(protocol_name)
