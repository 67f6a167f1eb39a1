"""The settings of the S3 client an engine (or the command) creates: endpoint, region,
profile, unsigned access; each checked, a bad one a ``ValueError`` raised before any
file is read or request sent.

Standard library only: the command checks its options with these before it loads the
engine's stack.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any
from urllib.parse import urlsplit

#: What botocore takes as a region (``botocore.utils.validate_region_name``: a host
#: label), so a bad one is refused with the others, before any client is made.
_REGION = re.compile(r"(?![0-9]+$)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)", re.ASCII)
#: Longest profile name taken: one longer is a mistake, not a section of a config file.
_MAX_PROFILE = 256


#: What :func:`endpoint_url_fault` says of a URL that is not http(s) with a host.
NOT_HTTP = "must be an http:// or https:// URL"


def check_endpoint_url(value: object) -> str:
    """``value`` if it is an ``http://`` or ``https://`` URL with a host, a valid port
    and neither user info, query nor fragment (see :func:`endpoint_url_fault`)."""
    if not isinstance(value, str):
        raise ValueError(f"endpoint_url {NOT_HTTP}, got {_shown(value)}")
    fault = endpoint_url_fault(value)
    if fault is not None:
        raise ValueError(f"endpoint_url {fault}, got {_shown(shown_endpoint_url(value))}")
    return value


def endpoint_url_fault(url: str) -> str | None:
    """Why ``url`` cannot be an S3 endpoint, or ``None``. User info would be sent as
    HTTP Basic authentication (by an unsigned client too, which promises no
    Authorization header), and is no S3 credential; botocore refuses a query or a
    fragment, and a port out of range, only at the first request, quoting the URL
    whole; whitespace or a control character is dropped or sent as it is."""
    if any(not char.isprintable() or char.isspace() for char in url):
        return "must not hold whitespace or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError:
        return "must have a valid host and port"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return NOT_HTTP
    if "@" in parts.netloc:
        return "must not hold a user name or password (keys sign S3 requests)"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not have a query or a fragment"
    return None


def shown_endpoint_url(url: str) -> str:
    """``url`` as a message may show it: scheme, host and path (no user info, query or
    fragment, which may hold a secret; no port when it is not valid)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else host + parts.path


def check_region(value: object) -> str:
    """``value`` if it is a region name (``us-east-1``, ``auto``: a DNS label)."""
    if isinstance(value, str) and _REGION.fullmatch(value):
        return value
    raise ValueError(
        f"region must be a region name such as us-east-1 (letters, digits and '-'), "
        f"got {_shown(value)}"
    )


def check_profile(value: object) -> str:
    """``value`` if it can name a profile of the AWS config files (whether one does is
    known only once they are read)."""
    if (
        isinstance(value, str)
        and value.strip() == value
        and 0 < len(value) <= _MAX_PROFILE
        and value.isprintable()
        and not any(char in value for char in "[]")
    ):
        return value
    raise ValueError(f"profile must be the name of an AWS config profile, got {_shown(value)}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What overrides the AWS environment in a client asyncdl creates; ``None`` (and
    ``unsigned=False``): what the environment says."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    #: Requests carry no signature and no credentials are looked up (a public bucket).
    unsigned: bool = False

    @classmethod
    def checked(
        cls,
        *,
        endpoint_url: object = None,
        region: object = None,
        profile: object = None,
        unsigned: object = False,
    ) -> ClientSettings:
        """The settings, each checked; ``ValueError`` for the first bad one."""
        if not isinstance(unsigned, bool):
            raise ValueError(f"unsigned must be a bool, got {_shown(unsigned)}")
        return cls(
            endpoint_url=None if endpoint_url is None else check_endpoint_url(endpoint_url),
            region=None if region is None else check_region(region),
            profile=None if profile is None else check_profile(profile),
            unsigned=unsigned,
        )

    @property
    def given(self) -> tuple[str, ...]:
        """The names of the settings given (not left to the environment)."""
        values = {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "profile": self.profile,
            "unsigned": self.unsigned or None,
        }
        return tuple(name for name, value in values.items() if value is not None)

    def refuse_with(self, client: object) -> None:
        """``ValueError`` when settings were given beside a ``client``: they configure
        the client an engine creates, and one passed in is used as it is. And for a
        ``client`` that is plainly no opened aiobotocore S3 client (see :func:`_check`)."""
        if client is not None:
            _check(client)
        given = self.given
        if client is None or not given:
            return
        names = f"{', '.join(given)} configure" if len(given) > 1 else f"{given[0]} configures"
        raise ValueError(
            f"{names} the client the engine creates; a client passed in is used as "
            "it is: set it up with them, or pass no client"
        )

    def arguments(self) -> dict[str, Any]:
        """``create_default_client``'s keyword arguments."""
        return {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "profile": self.profile,
            "unsigned": self.unsigned,
        }


def _check(client: object) -> None:
    """``ValueError`` for the mistakes made with ``Engine(client)``: boto3's client or
    resource, another service's client, aiobotocore's ``create_client`` not entered, a
    session, a value or a path in the client's place. Anything else is taken as it is:
    a wrapper around a client (a ``wrapt`` proxy, an object that hands attributes on), a
    test's stand-in."""
    problem = None
    model = getattr(getattr(client, "meta", None), "service_model", None)
    service = getattr(model, "service_name", None)
    if _is_a(client, "aiobotocore.session", "ClientCreatorContext"):
        problem = "a client not opened: 'async with session.create_client(\"s3\") as client'"
    elif isinstance(service, str) and service != "s3":
        problem = f"a client of {service!r}"
    elif _is_a(client, "botocore.client", "BaseClient") and not _is_a(
        client, "aiobotocore.client", "AioBaseClient"
    ):
        problem = "a synchronous (boto3 or botocore) client"
    elif _is_a(client, "boto3.resources.base", "ServiceResource"):
        problem = "a boto3 resource"
    elif _is_a(client, "boto3.session", "Session") or _is_a(client, "botocore.session", "Session"):
        problem = "a session, not a client: 'async with session.create_client(\"s3\") as client'"
    elif isinstance(client, (str, bytes, int, float)):
        problem = f"{type(client).__name__} {client!r}"
    elif isinstance(client, PurePath | os.DirEntry):
        # Not os.PathLike: a MagicMock speaks it too, and is a test's stand-in.
        problem = f"path {str(client.path if isinstance(client, os.DirEntry) else client)!r}"
    if problem is not None:
        raise ValueError(f"client must be an opened aiobotocore S3 client, got {problem}")


def _is_a(thing: object, module: str, name: str) -> bool:
    """``isinstance(thing, module.name)`` without importing ``module``: an instance of
    a class of a module not yet imported cannot exist (a URL-only engine's stand-in
    client must not cost the import of botocore)."""
    loaded = sys.modules.get(module)
    kind = getattr(loaded, name, None)
    return isinstance(kind, type) and isinstance(thing, kind)
