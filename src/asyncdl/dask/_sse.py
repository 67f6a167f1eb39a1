"""The SSE-C key of a Dask run: read from each worker's environment, never shipped.

Whatever a task needs is pickled into the task graph, which the scheduler holds
and can show; a customer key there is one more copy of the secret, outside the
processes that use it. So a run refuses one in ``extra_args`` and takes the *name*
of an environment variable instead (``sse_customer_key_env``): every worker reads
the key (base64, as S3's header carries it) from its own environment for each
partition, as it reads its credentials.
"""

from __future__ import annotations

import base64
import os

from .._wire.request_args import ExtraArgs
from ._errors import ManifestError

#: AES-256, S3's one SSE-C algorithm.
KEY_BYTES = 32
_KEY_ARG = "SSECustomerKey"


def check_key_options(extra_args: ExtraArgs | None, variable: object) -> None:
    """On the client, before anything runs: no key in ``extra_args``; a usable name."""
    if extra_args and _KEY_ARG in extra_args:
        raise ManifestError(
            "an SSE-C key in extra_args would be pickled into the task graph and pass "
            "through the scheduler: set it, base64-encoded, in an environment variable "
            "on every worker and pass that variable's name as sse_customer_key_env="
        )
    if variable is not None and (
        not isinstance(variable, str) or not variable or "=" in variable or "\0" in variable
    ):
        raise ManifestError(
            f"sse_customer_key_env must be the name of an environment variable, got {variable!r}"
        )


def read_key(variable: str) -> bytes:
    """The key in ``variable`` here; a ``ValueError`` that names the variable (never
    its value) if it is missing or not a base64 AES-256 key."""
    value = os.environ.get(variable)
    if value is None:
        raise ValueError(f"environment variable {variable} is not set")
    try:
        key = base64.b64decode(value.strip(), validate=True)
    except ValueError:
        raise ValueError(
            f"environment variable {variable} is not base64 (the SSE-C key, base64-encoded)"
        ) from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"environment variable {variable} holds a key of {len(key)} bytes, "
            f"not the {KEY_BYTES} bytes of an AES-256 key"
        )
    return key


def key_problem(variable: str | None) -> str | None:
    """Why this worker cannot read the run's key, or ``None``."""
    if variable is None:
        return None
    try:
        read_key(variable)
    except ValueError as exc:
        return str(exc)
    return None


def with_key(extra_args: ExtraArgs | None, variable: str | None) -> ExtraArgs | None:
    """The run's GetObject arguments, with the key read here if the run has one."""
    if variable is None:
        return extra_args
    # AES256 is the only value S3 takes: a run that names a key needs to say no more.
    return {"SSECustomerAlgorithm": "AES256", **(extra_args or {}), _KEY_ARG: read_key(variable)}
