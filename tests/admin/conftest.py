"""Fixtures for the admin client tests: fake clusters on 127.0.0.1 (see fake_broker.py)."""

from __future__ import annotations

import pytest
from live import kjbod_server, kjbod_server_factory  # noqa: F401  (live-server fixtures for test_admin_live)

from .fake_broker import FakeCluster, LogDir, Replica


@pytest.fixture
async def cluster():
    """One fake broker (node 1) with three log dirs, one offline, and a topic "events" of 3 partitions."""
    c = FakeCluster()
    (broker,) = await c.start(1)
    c.add_topic("events", 3)
    c.add_topic("other", 1)
    broker.log_dirs = [
        LogDir("/data/a", replicas=[Replica("events", 0, 100, 0), Replica("events", 1, 200, 0),
                                    Replica("other", 0, 5, -1)]),
        LogDir("/data/b", replicas=[Replica("events", 2, 300, 0), Replica("events", 0, 40, 7, True)]),
        LogDir("/data/c", error=56),
    ]
    yield c
    await c.stop()


@pytest.fixture
async def cluster3():
    """Three fake brokers; broker 2 is the controller."""
    c = FakeCluster()
    brokers = await c.start(3)
    c.controller_id = 2
    for b in brokers:
        b.log_dirs = [LogDir(f"/b{b.node_id}/d0", replicas=[Replica("t", b.node_id - 1, 10 * b.node_id, 0)])]
    c.add_topic("t", 3, [1, 2, 3])
    yield c
    await c.stop()
