"""kill -9 at each step of a move (KJBOD_FAILPOINTS), then restart: KIP-113's "handle failure".

For every failpoint the server dies by SIGKILL at that step (the failpoint sends it to its own process). After
a restart without the failpoint: every acknowledged batch is served byte for byte as before; the move has
finished (resumed from what was copied, or, once the source was renamed away, by promoting the future copy);
and once settled no ``-future`` or ``-delete`` dir remains.
"""

from __future__ import annotations

import signal
import time
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import NoError

from kjbod.broker.kip113.failpoints import POINTS

from .livehelp import RawClient, current_dir, fetch_all, kafka_admin, partition_dirs, set_throttle, wait_moved

pytestmark = pytest.mark.slow

RECORDS = 6000


@pytest.mark.parametrize("failpoint", POINTS)
def test_kill_at_failpoint_then_restart(failpoint, kjbod_server_factory, monkeypatch):
    monkeypatch.setenv("KJBOD_FAILPOINTS", failpoint)
    server = kjbod_server_factory(overrides={"log.segment.bytes": str(1 << 20), "log.segment.delete.delay.ms": "0"})
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("crash", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1, linger_ms=5)
    for i in range(RECORDS):
        producer.send("crash", b"%06d" % i + b"c" * 900, partition=0)
    producer.flush()
    producer.close()
    with RawClient(server.bootstrap) as raw:
        before = fetch_all(raw, "crash", 0, RECORDS)
    assert len(before) > 5 << 20  # several closed segments
    source = current_dir(admin, "crash", 0)
    dest = next(str(d) for d in server.log_dirs if str(d) != source)
    if failpoint == "mid_segment_copy":
        set_throttle(admin, str(3 << 20))  # 64 KiB chunks: a segment takes several
    result = admin.alter_replica_log_dirs({("crash", 0, 1): dest})
    assert list(result.values()) == [NoError]
    admin.close()
    code = server.process.wait(60)
    assert code == -signal.SIGKILL, f"the server should have died at {failpoint}: {server.stderr(20)}"
    assert f'"failpoint": "{failpoint}"' in server.stderr(50)

    monkeypatch.delenv("KJBOD_FAILPOINTS")
    server.start()
    admin = kafka_admin(server)
    wait_moved(admin, "crash", 0, dest, timeout=60)
    with RawClient(server.bootstrap) as raw:
        after = fetch_all(raw, "crash", 0, RECORDS)
    assert after == before
    # The log takes appends again, after the moved data.
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1)
    assert producer.send("crash", b"after", partition=0).get(30).offset == RECORDS
    producer.close()
    admin.close()
    deadline = time.monotonic() + 15
    while True:
        names = [n for names in partition_dirs(server).values() for n in names]
        if names == ["crash-0"]:
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.2)
    assert partition_dirs(server)[dest] == ["crash-0"]
