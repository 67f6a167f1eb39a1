"""The error of a run as a whole (a bad manifest, option or destination)."""

from __future__ import annotations

from ..errors import InvalidRequestError


class ManifestError(InvalidRequestError):
    """The manifest, an option or the destination cannot be used; nothing was
    downloaded and nothing written. Per-object problems are results, not this."""

    def __init__(self, message: str) -> None:
        super().__init__(message, bucket="", key="")

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[ManifestError], tuple[str]]:
        # Raised in worker tasks too: it must survive the trip back to the client.
        return (type(self), (self.message,))
