"""Fixtures for the compaction tests: real `kjbod serve` processes (tests/live.py)."""

from __future__ import annotations

from live import kjbod_server, kjbod_server_factory  # noqa: F401  (fixtures used by the tests here)
