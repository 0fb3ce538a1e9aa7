"""Fixtures for the group tests."""

from live import kjbod_server_factory  # noqa: F401  (a live-server fixture)
