"""Fixtures for the data-path integration tests: real `kjbod serve` processes (tests/live.py)."""

from __future__ import annotations

import pytest
from live import kjbod_server, kjbod_server_factory  # noqa: F401  (fixtures used by the tests here)

from .support import RawClient


@pytest.fixture
def raw(server):
    """A RawClient to the module's `server` (modules that start one server for all their tests)."""
    with RawClient.to(server) as client:
        yield client
