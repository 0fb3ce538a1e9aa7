"""Fixtures for the CLI tests: live `kjbod serve` processes (tests/live.py) and data produced with kafka-python."""

from __future__ import annotations

from live import kjbod_server, kjbod_server_factory  # noqa: F401  (live-server fixtures)
