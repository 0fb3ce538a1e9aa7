"""Aborted transactions after a crash of a real `kjbod serve` (SIGKILL): recovery makes the `.txnindex` entries
of the segments it re-reads again from their batches, and read_committed consumers (kafka-python, confluent-kafka)
still skip exactly the aborted records.

Strategy: three hand-made transactional producers interleave on one partition (an abort whose records sit between
a committed transaction's, an abort while another transaction is open, a commit after an abort by the same
producer); once every marker is written the server is killed with SIGKILL, with the recovery point checkpoint
never written (so recovery re-reads the whole partition, as after a crash right after the writes).  A SIGKILL keeps
what the kernel already has, so the index write a crash between the marker and its entry loses is lost by hand:
the `.txnindex` files are removed before the restart.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import pytest
from live import start_server

from .test_txn_coordinator_live import (
    OVERRIDES,
    WAIT_S,
    Txn,
    confluent_read_all,
    connect,
    control_batches,
    make_topic,
    produce_txn,
    read_all,
    wait_for,
)

pytestmark = pytest.mark.slow

KEPT = [b"p2-kept-a", b"p2-kept-b", b"p1-kept"]
EVERYTHING = [b"p1-gone-a", b"p2-kept-a", b"p1-gone-b", b"p3-gone", b"p2-kept-b", b"p1-kept"]


@pytest.fixture
def server(tmp_path: Path):
    s = start_server(tmp_path, log_dir_count=1, overrides={
        **OVERRIDES, "log.flush.offset.checkpoint.interval.ms": "3600000"})
    yield s
    s.stop()


def txn_indexes(server, topic: str) -> list[Path]:
    return sorted(p for d in server.log_dirs for p in Path(d).glob(f"{topic}-0/*.txnindex"))


def test_read_committed_skips_exactly_the_aborted_records_after_a_sigkill(server):
    topic = make_topic(server, partitions=1)

    async def run():
        conn = await connect(server)
        try:
            p1, p2, p3 = (Txn(conn, f"tx-{uuid.uuid4().hex[:6]}") for _ in range(3))
            for t in (p1, p2, p3):
                assert await t.init() == 0
            assert await p1.add(topic, 0) == [0]
            assert await produce_txn(conn, p1, topic, 0, [b"p1-gone-a"], 0) == 0
            assert await p2.add(topic, 0) == [0]
            assert await produce_txn(conn, p2, topic, 0, [b"p2-kept-a"], 0) == 0
            assert await produce_txn(conn, p1, topic, 0, [b"p1-gone-b"], 1) == 0
            assert await p1.end(False) == 0  # aborted while p2's transaction is open
            assert await p3.add(topic, 0) == [0]
            assert await produce_txn(conn, p3, topic, 0, [b"p3-gone"], 0) == 0
            assert await produce_txn(conn, p2, topic, 0, [b"p2-kept-b"], 1) == 0
            assert await p2.end(True) == 0
            assert await p3.end(False) == 0
            assert await p1.add(topic, 0) == [0]  # once its abort's markers are out
            assert await produce_txn(conn, p1, topic, 0, [b"p1-kept"], 2) == 0
            assert await p1.end(True) == 0
        finally:
            conn.close()

    asyncio.run(run())
    wait_for(lambda: len(control_batches(server, topic, 0)) == 4, "the four markers")
    assert read_all(server, topic, "read_committed") == KEPT
    [index] = txn_indexes(server, topic)
    assert index.stat().st_size == 2 * 34  # the two aborts

    assert server.process is not None
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    index.unlink()  # the entries' writes lost in the crash (see the module docstring)
    server.start()

    deadline = time.monotonic() + WAIT_S
    seen: list[bytes] = []
    while len(seen) < len(KEPT) and time.monotonic() < deadline:
        seen = read_all(server, topic, "read_committed")
    assert seen == KEPT
    assert confluent_read_all(server, topic, "read_committed", len(KEPT)) == KEPT
    assert read_all(server, topic, "read_uncommitted") == EVERYTHING
    assert [p.stat().st_size for p in txn_indexes(server, topic)] == [2 * 34]
    assert "transaction_index_rebuilt" in server.stderr(tail=2000)
