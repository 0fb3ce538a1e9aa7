"""QuorumController with a real metadata log in a temp dir: answers only after the records are durable and
replayed, listeners see each committed delta first, a restart replays the same image, and a failing append
changes nothing."""

from __future__ import annotations

import asyncio
import uuid

from broker_features import SUPPORTED_FEATURES

from kjbod.controller import ControllerSettings, QuorumController
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kjbod.protocol.generated.create_topics_request import CreatableTopic
from kjbod.storage.metadata_log import MetadataLog

from .test_managers import CLUSTER, Policy


def make(tmp_path):
    settings = ControllerSettings(cluster_id=CLUSTER, broker_heartbeat_interval_ms=50, broker_session_timeout_ms=400)
    c = QuorumController(settings, MetadataLog(str(tmp_path)), Policy())
    c.load()
    return c


async def live_broker(c, bid):
    reg = await c.handle_request(62, 4, BrokerRegistrationRequest(
        broker_id=bid, cluster_id=CLUSTER, incarnation_id=uuid.uuid4(), log_dirs=[uuid.UUID(int=(bid << 70) + 1)],
        features=SUPPORTED_FEATURES))
    assert reg.error_code == 0
    hb = await c.handle_request(63, 1, BrokerHeartbeatRequest(broker_id=bid, broker_epoch=reg.broker_epoch,
                                                              current_metadata_offset=c.image.offset))
    assert not hb.is_fenced
    return reg.broker_epoch


def create(name, n=3):
    return CreateTopicsRequest(topics=[CreatableTopic(name=name, num_partitions=n, replication_factor=-1)],
                               timeout_ms=1000)


def test_answers_after_durable_and_replayed_and_a_restart_replays_the_same_image(tmp_path):
    seen = []

    async def main():
        c = make(tmp_path)
        c.add_listener(lambda delta, image: seen.append((image.offset, image.topic("t") is not None)))
        c.start()
        try:
            await live_broker(c, 1)
            resp = await c.handle_request(19, 7, create("t"))
            assert resp.topics[0].error_code == 0
            # By the time the caller hears, the image has the topic and the listener has seen it.
            assert c.image.topic("t").topic_id == resp.topics[0].topic_id and seen[-1][1]
            again = await c.handle_request(19, 7, create("t"))
            assert again.topics[0].error_code == E.TOPIC_ALREADY_EXISTS
            return c.image
        finally:
            await c.stop()
            c.log.close()

    image = asyncio.run(main())
    reloaded = make(tmp_path)
    try:
        assert reloaded.image.topics_by_id == image.topics_by_id
        assert reloaded.image.brokers == image.brokers
        assert reloaded.image.offset == image.offset
    finally:
        reloaded.log.close()


def test_a_failing_append_changes_nothing_and_the_controller_keeps_going(tmp_path):
    async def main():
        c = make(tmp_path)
        c.start()
        try:
            await live_broker(c, 1)
            real = c.log.append

            def broken(records):
                raise OSError(5, "Input/output error")

            c.log.append = broken
            failed = await c.handle_request(19, 7, create("t"))
            assert failed.topics[0].error_code == E.KAFKA_STORAGE_ERROR
            assert "Input/output error" in failed.topics[0].error_message
            assert c.image.topic("t") is None
            c.log.append = real
            assert (await c.handle_request(19, 7, create("t"))).topics[0].error_code == 0
            resp = await c.handle_request(20, 6, DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name="t")], timeout_ms=1))
            assert resp.responses[0].error_code == 0 and c.image.topic("t") is None
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(main())


def test_session_expiry_fences_a_silent_broker(tmp_path):
    async def main():
        c = make(tmp_path)
        c.start()
        try:
            await live_broker(c, 1)
            assert (await c.handle_request(19, 7, create("t", 2))).topics[0].error_code == 0
            # No heartbeats: fenced after the session timeout (polled, so wait for the image to say so).
            for _ in range(400):
                if c.image.broker(1).fenced:
                    break
                await asyncio.sleep(0.05)
            assert c.image.broker(1).fenced
            assert [p.leader for p in c.image.topic("t").partitions.values()] == [-1, -1]
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(main())


class FakeLog:
    """The metadata log's contract as the controller uses it, in memory, counting bytes like the real one."""

    def __init__(self):
        self.next_offset = 0
        self.bytes_since_snapshot = 0
        self.records = []
        self.snapshots = []
        self.loaded_offsets = []  # each loaded record's offset

    def load(self):
        return []

    def append(self, records):
        first = self.next_offset
        self.records += records
        self.next_offset += len(records)
        self.bytes_since_snapshot += 100 * len(records)
        return first

    def write_snapshot(self, records, end_offset):
        import threading

        self.snapshots.append((list(records), end_offset, threading.current_thread().name))
        self.bytes_since_snapshot = 0


def test_a_snapshot_is_written_off_the_loop_once_enough_bytes_were_written(tmp_path):
    from kjbod.metadata import EMPTY_IMAGE, replay

    fake = FakeLog()
    settings = ControllerSettings(cluster_id=CLUSTER, max_bytes_between_snapshots=2000)

    async def main():
        c = QuorumController(settings, fake, Policy())
        c.load()
        c.start()
        try:
            await live_broker(c, 1)
            assert fake.snapshots == []  # the activation records and the broker's two: 1,100 bytes
            assert (await c.handle_request(19, 7, create("t", 12))).topics[0].error_code == 0
            return c.image
        finally:
            await c.stop()

    image = asyncio.run(main())
    ((records, end_offset, thread),) = fake.snapshots
    assert end_offset == fake.next_offset == image.offset + 1
    assert thread.startswith("kjbod-metadata-log")
    rebuilt = replay(EMPTY_IMAGE, records)
    assert rebuilt.topics_by_id == image.topics_by_id and rebuilt.brokers == image.brokers
    assert fake.bytes_since_snapshot == 0


def test_snapshot_interval_ms_snapshots_a_changed_log_once_the_time_has_passed(tmp_path):
    """metadata.log.max.snapshot.interval.ms: with the byte trigger far away, a write after the interval has
    passed (on the controller's clock) brings a snapshot; before it, or with 0, none."""
    now = [100.0]

    async def run(interval_ms: int) -> list:
        fake = FakeLog()
        settings = ControllerSettings(cluster_id=CLUSTER, max_bytes_between_snapshots=1 << 40,
                                      max_snapshot_interval_ms=interval_ms)
        c = QuorumController(settings, fake, Policy(), clock=lambda: now[0])
        c.load()
        c.start()
        try:
            await live_broker(c, 1)
            assert fake.snapshots == []  # the interval has not passed yet
            now[0] += 2.5  # well within the broker's session (broker.session.timeout.ms 9 s)
            assert (await c.handle_request(19, 7, create("t", 3))).topics[0].error_code == 0
            return fake.snapshots
        finally:
            await c.stop()

    ((_records, end_offset, _thread),) = asyncio.run(run(2_000))
    assert end_offset > 0
    now[0] = 100.0
    assert asyncio.run(run(0)) == []  # 0: the time trigger is off
    now[0] = 100.0
    assert asyncio.run(run(2_501)) == []


def test_nothing_is_answered_or_applied_before_the_append_returns(tmp_path):
    """A create waits for its append; a heartbeat behind it waits too, and sees the image with the topic."""
    import threading

    async def main():
        c = make(tmp_path)
        c.start()
        try:
            epoch = await live_broker(c, 1)
            gate = threading.Event()
            real = c.log.append

            def slow(records):
                gate.wait(30)
                return real(records)

            c.log.append = slow
            created = asyncio.ensure_future(c.handle_request(19, 7, create("t")))
            beat = asyncio.ensure_future(c.handle_request(63, 1, BrokerHeartbeatRequest(
                broker_id=1, broker_epoch=epoch, current_metadata_offset=0)))
            await asyncio.sleep(0.2)
            assert not created.done() and not beat.done() and c.image.topic("t") is None
            gate.set()
            assert (await created).topics[0].error_code == 0
            assert (await beat).error_code == 0 and c.image.topic("t") is not None
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(main())
