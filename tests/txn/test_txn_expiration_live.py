"""transactional.id.expiration.ms on a real `kjbod serve`: a transactional id with no open transaction, idle past
the expiration, is removed with a tombstone in `__transaction_state` (found every
transaction.remove.expired.transaction.cleanup.interval.ms), while an id with a transaction open stays; the removed
id's next InitProducerId gets a new producer id, and DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND
meanwhile, as Kafka's coordinator does."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from live import start_server

from kjbod.broker.txn import records as rec
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeTransactionsRequest
from kjbod.storage.records import iter_batches, iter_records

from .test_txn_coordinator_live import OVERRIDES, WAIT_S, Txn, connect, make_topic, produce_txn

pytestmark = pytest.mark.slow

EXPIRATION = {"transactional.id.expiration.ms": "1500",
              "transaction.remove.expired.transaction.cleanup.interval.ms": "200"}


@pytest.fixture
def server(tmp_path: Path):
    s = start_server(tmp_path, log_dir_count=1, overrides={**OVERRIDES, **EXPIRATION})
    yield s
    s.stop()


def transaction_log_records(server) -> list[tuple[str, bytes | None]]:
    out = []
    for d in server.log_dirs:
        for path in sorted(Path(d).glob("__transaction_state-*/*.log")):
            view = memoryview(path.read_bytes())
            for pos, header in iter_batches(view):
                for r in iter_records(view[pos:pos + header.size]):
                    out.append((rec.read_key(bytes(r.key)), None if r.value is None else bytes(r.value)))
    return out


def test_an_idle_transactional_id_expires_and_an_open_one_stays(server):
    topic = make_topic(server, partitions=1)
    idle_id, busy_id = f"idle-{uuid.uuid4().hex[:6]}", f"busy-{uuid.uuid4().hex[:6]}"

    async def run():
        conn = await connect(server)
        try:
            idle, busy = Txn(conn, idle_id), Txn(conn, busy_id)
            assert await idle.init() == 0 and await busy.init(timeout_ms=60_000) == 0
            assert await idle.add(topic, 0) == [0]
            assert await produce_txn(conn, idle, topic, 0, [b"committed"], 0) == 0
            assert await idle.end(True) == 0
            assert await busy.add(topic, 0) == [0]  # left open: an id with a transaction under way never expires

            def describe():
                return idle.call(DescribeTransactionsRequest(transactional_ids=[idle_id, busy_id]), 0)

            deadline = time.monotonic() + WAIT_S
            while True:
                states = (await describe()).transaction_states
                if states[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            again = Txn(conn, idle_id)
            assert await again.init() == 0
            return idle, states, again
        finally:
            conn.close()

    idle, states, again = asyncio.run(run())
    gone, busy = states
    assert gone.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert (busy.error_code, busy.transaction_state) == (0, "Ongoing")
    assert (idle_id, None) in transaction_log_records(server)  # the tombstone
    assert again.pid != idle.pid and again.epoch == 0  # a new producer id, as for an id never seen
    assert "transactional_id_expired" in server.stderr(tail=2000)
