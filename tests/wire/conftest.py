"""Fixtures of the wire tests."""

from __future__ import annotations

import pytest

from asyncdl.testing.moto_server import FAKE_ENV


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials and a region in the environment, for an engine against a scripted
    server (it signs, but nothing checks the signature)."""
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
