"""ShareFetch and ShareAcknowledge on a real `kjbod serve` node, with raw protocol requests from made-up members
(the share-partition leader does not ask the group coordinator about members, as in Kafka).

The group's share.auto.offset.reset is Kafka's default, latest: each test opens its sessions before producing."""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from live import LiveServer, start_server

from kjbod.admin.sync import SyncAdminClient
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from kjbod.protocol.generated.share_acknowledge_request import AcknowledgePartition, AcknowledgeTopic
from kjbod.protocol.generated.share_fetch_request import (
    AcknowledgementBatch,
    FetchPartition,
    FetchTopic,
    ForgottenTopic,
)
from kjbod.storage.records import iter_batches, iter_records

ACCEPT, RELEASE, REJECT = 1, 2, 3


# __share_group_state with one replica: the share coordinator's topic on a single node
SINGLE_NODE = {"share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
               "share.coordinator.state.topic.num.partitions": "2"}

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    s = start_server(tmp_path_factory.mktemp("share-fetch"), log_dir_count=2, overrides=SINGLE_NODE)
    try:
        yield s
    finally:
        s.stop()


class Member:
    """One made-up share-group member on its own connection, speaking raw ShareFetch / ShareAcknowledge."""

    def __init__(self, server: LiveServer, group: str, member_id: str | None = None, version: int = 2) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
        self.group, self.version = group, version
        self.member_id = uuid.uuid4().hex[:22] if member_id is None else member_id
        self.epoch = 0
        self.corr = 0

    def call(self, key: int, body: Any, response: Any, *, flexible: bool = True) -> Any:
        self.corr += 1
        header = struct.pack(">hhih", key, self.version, self.corr, 4) + b"test" + (b"\x00" if flexible else b"")
        data = header + body.encode(self.version)
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        frame = b""
        while len(frame) < 4 or len(frame) < 4 + struct.unpack(">i", frame[:4])[0]:
            chunk = self.sock.recv(1 << 20)
            assert chunk, "the broker closed the connection"
            frame += chunk
        assert struct.unpack(">i", frame[4:8])[0] == self.corr
        return response.decode(frame[9:], self.version)

    def fetch(self, topic_id: uuid.UUID, *, acks: list[tuple[int, int, list[int]]] | None = None,
              epoch: int | None = None, max_wait_ms: int = 0, max_records: int = 500, partition: int = 0,
              **extra: Any) -> ShareFetchResponse:
        use = self.epoch if epoch is None else epoch
        extra = {"min_bytes": 1, "max_bytes": 1 << 20, **extra}
        body = ShareFetchRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=use, max_wait_ms=max_wait_ms,
            max_records=max_records, batch_size=500, topics=[FetchTopic(
                topic_id=topic_id, partitions=[FetchPartition(partition_index=partition, acknowledgement_batches=[
                    AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t)
                    for f, la, t in acks or []])])], **extra)
        answer = self.call(78, body, ShareFetchResponse)
        if answer.error_code == 0 and epoch is None:
            self.epoch = 1 if use == 0 else use + 1
        return answer

    def acknowledge(self, topic_id: uuid.UUID, acks: list[tuple[int, int, list[int]]], *,
                    epoch: int | None = None, partition: int = 0) -> ShareAcknowledgeResponse:
        use = self.epoch if epoch is None else epoch
        body = ShareAcknowledgeRequest(group_id=self.group, member_id=self.member_id, share_session_epoch=use,
                                       topics=[AcknowledgeTopic(topic_id=topic_id, partitions=[AcknowledgePartition(
                                           partition_index=partition, acknowledgement_batches=[
                                               AcknowledgementBatch(first_offset=f, last_offset=la,
                                                                    acknowledge_types=t)
                                               for f, la, t in acks])])])
        answer = self.call(79, body, ShareAcknowledgeResponse)
        if answer.error_code == 0 and epoch is None:
            self.epoch = use + 1
        return answer

    def close(self) -> None:
        self.sock.close()


def acquired(answer: ShareFetchResponse) -> list[tuple[int, int, int]]:
    assert answer.error_code == 0, answer
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def part(answer: Any) -> Any:
    assert answer.error_code == 0, answer
    return answer.responses[0].partitions[0]


def make_topic(server: LiveServer) -> tuple[str, uuid.UUID]:
    name = f"share-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    with SyncAdminClient(server.bootstrap) as ours:
        for _ in range(100):
            described = ours.describe_topics([name])
            desc = described[name] if isinstance(described, dict) else described.get(name)
            if desc is not None and desc.topic_id is not None:
                return name, desc.topic_id
    raise AssertionError(f"no topic id for {name}")


def produce(server: LiveServer, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=50)
    try:
        for i in range(count):
            producer.send(topic, value=f"v{i}".encode(), partition=0)
        producer.flush()
    finally:
        producer.close()


def fetch_until(member: Member, topic_id: uuid.UUID, **kw: Any) -> list[tuple[int, int, int]]:
    """A long-polling fetch: records produced a moment ago are there once the high watermark reaches them."""
    for _ in range(20):
        got = acquired(member.fetch(topic_id, max_wait_ms=3000, **kw))
        if got:
            return got
    raise AssertionError("nothing acquired")


def test_locked_records_are_not_shared_and_redelivery_counts(server: LiveServer) -> None:
    topic, tid = make_topic(server)
    a, b = Member(server, "g1"), Member(server, "g1")
    try:
        assert acquired(a.fetch(tid)) == [] and acquired(b.fetch(tid)) == []  # sessions open at the log end
        produce(server, topic, 5)
        got: list[tuple[int, int, int]] = []
        for _ in range(20):
            answer = a.fetch(tid, max_wait_ms=3000)
            got = acquired(answer)
            if got:
                break
        assert got == [(0, 4, 1)]
        data = bytes(part(answer).records)
        values = [r.value for pos, h in iter_batches(data) for r in iter_records(data[pos:pos + h.size])]
        assert values == [f"v{i}".encode() for i in range(5)]  # the record data of the acquired offsets
        assert acquired(b.fetch(tid)) == []  # locked to a
        assert part(a.acknowledge(tid, [(0, 4, [RELEASE])])).error_code == 0
        assert fetch_until(b, tid) == [(0, 4, 2)]  # redelivered with a higher count
        # b rejects two and accepts three, piggybacked on its next fetch
        answer = b.fetch(tid, acks=[(0, 4, [REJECT, REJECT, ACCEPT, ACCEPT, ACCEPT])])
        assert part(answer).acknowledge_error_code == 0 and acquired(answer) == []
        assert acquired(a.fetch(tid)) == []  # neither rejected nor accepted records come back
        produce(server, topic, 1)
        assert fetch_until(a, tid) == [(5, 5, 1)]
    finally:
        a.close()
        b.close()


def test_the_delivery_count_limit_archives(server: LiveServer) -> None:
    topic, tid = make_topic(server)
    a = Member(server, "g2")
    try:
        acquired(a.fetch(tid))
        produce(server, topic, 1)
        assert fetch_until(a, tid) == [(0, 0, 1)]
        for count in range(2, 6):  # share.delivery.count.limit: 5 by default
            assert part(a.acknowledge(tid, [(0, 0, [RELEASE])])).error_code == 0
            assert acquired(a.fetch(tid)) == [(0, 0, count)]
        assert part(a.acknowledge(tid, [(0, 0, [RELEASE])])).error_code == 0
        assert acquired(a.fetch(tid)) == []  # archived at the limit
    finally:
        a.close()


def test_closing_a_session_or_its_connection_releases(server: LiveServer) -> None:
    topic, tid = make_topic(server)
    a, b = Member(server, "g3"), Member(server, "g3")
    try:
        acquired(a.fetch(tid))
        acquired(b.fetch(tid))
        produce(server, topic, 3)
        assert fetch_until(a, tid) == [(0, 2, 1)]
        closing = a.fetch(tid, epoch=-1)  # closes the session: nothing fetched, a's records released
        assert closing.error_code == 0 and acquired(closing) == []
        assert a.fetch(tid, epoch=2).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert acquired(b.fetch(tid)) == [(0, 2, 2)]
        b.close()  # the connection goes: b's records released
        c = Member(server, "g3")
        try:
            for _ in range(100):
                got = acquired(c.fetch(tid, epoch=0))
                if got:
                    break
            assert got == [(0, 2, 3)]
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_a_long_poll_answers_when_records_arrive(server: LiveServer) -> None:
    topic, tid = make_topic(server)
    a = Member(server, "g4")
    try:
        acquired(a.fetch(tid))
        result: list[Any] = []
        waiter = threading.Thread(target=lambda: result.append(a.fetch(tid, max_wait_ms=20000)))
        waiter.start()
        produce(server, topic, 2)
        waiter.join(60)
        assert acquired(result[0]) == [(0, 1, 1)]
    finally:
        a.close()


def test_bad_inputs_get_kafka_errors(server: LiveServer) -> None:
    topic, tid = make_topic(server)
    a, b = Member(server, "g5"), Member(server, "g5")
    try:
        # acknowledgements in a request opening a session; ShareAcknowledge opening one; no session yet
        assert a.fetch(tid, acks=[(0, 0, [ACCEPT])]).error_code == ErrorCode.INVALID_REQUEST
        assert a.acknowledge(tid, [(0, 0, [ACCEPT])], epoch=0).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert a.fetch(tid, epoch=1).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert a.acknowledge(tid, [(0, 0, [ACCEPT])], epoch=3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        # member ids: empty, or longer than 36 characters
        for bad in ("", "x" * 37):
            odd = Member(server, "g5", bad)
            try:
                assert odd.fetch(tid).error_code == ErrorCode.INVALID_REQUEST
            finally:
                odd.close()
        acquired(a.fetch(tid))
        acquired(b.fetch(tid))
        produce(server, topic, 4)
        assert fetch_until(a, tid, max_records=2**31 - 1) == [(0, 3, 1)]  # a huge MaxRecords is fine
        assert a.fetch(tid, epoch=7).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH  # wrong epoch
        # b acknowledging a's records; a acknowledging past what was acquired; overlapping batches
        assert part(b.acknowledge(tid, [(0, 0, [ACCEPT])])).error_code == ErrorCode.INVALID_RECORD_STATE
        assert part(a.acknowledge(tid, [(0, 9, [ACCEPT])])).error_code == ErrorCode.INVALID_REQUEST
        assert part(a.acknowledge(tid, [(0, 2, [ACCEPT]), (1, 3, [ACCEPT])])).error_code == ErrorCode.INVALID_REQUEST
        # sharing one offset passes Kafka's request check; the 2nd time the offset is no longer acquired
        assert part(a.acknowledge(tid, [(0, 2, [ACCEPT]), (2, 3, [ACCEPT])])).error_code == \
            ErrorCode.INVALID_RECORD_STATE
        assert part(a.acknowledge(tid, [(0, 1, [ACCEPT, ACCEPT, ACCEPT])])).error_code == ErrorCode.INVALID_REQUEST
        assert part(a.acknowledge(tid, [(0, 0, [7])])).error_code == ErrorCode.INVALID_REQUEST
        # none of that changed a thing: a accepts them all; acknowledgements of records already done with (below
        # the share-partition start offset) are skipped, as in Kafka
        assert part(a.acknowledge(tid, [(0, 3, [ACCEPT])])).error_code == 0
        answer = b.fetch(tid, acks=[(2, 2, [REJECT])])
        assert part(answer).acknowledge_error_code == 0 and acquired(answer) == []
        assert part(b.acknowledge(tid, [(5, 5, [ACCEPT])])).error_code == ErrorCode.INVALID_REQUEST  # never acquired
    finally:
        a.close()
        b.close()


def test_unknown_topic_id(server: LiveServer) -> None:
    a = Member(server, "g6")
    try:
        answer = a.fetch(uuid.uuid4())
        assert part(answer).error_code == ErrorCode.UNKNOWN_TOPIC_ID
    finally:
        a.close()


def test_the_share_session_limit(tmp_path) -> None:
    limited = start_server(tmp_path / "limited", log_dir_count=1,
                           overrides={**SINGLE_NODE, "group.share.max.share.sessions": "1"})
    try:
        _topic, tid = make_topic(limited)
        a, b = Member(limited, "g7"), Member(limited, "g7")
        try:
            assert a.fetch(tid).error_code == 0
            assert b.fetch(tid).error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
            assert a.fetch(tid, epoch=-1).error_code == 0  # a's closes: room for b's
            assert b.fetch(tid).error_code == 0
        finally:
            a.close()
            b.close()
    finally:
        limited.stop()


def test_renew_and_version_1(server: LiveServer) -> None:
    topic, tid = make_topic(server)
    a, old = Member(server, "g8"), Member(server, "g8", version=1)
    try:
        acquired(a.fetch(tid))
        acquired(old.fetch(tid))
        produce(server, topic, 2)
        assert fetch_until(a, tid) == [(0, 1, 1)]
        # v2's renewals: a request carrying them fetches nothing and must say so with zeros (KIP-1222)
        assert a.fetch(tid, acks=[(0, 1, [4])], epoch=a.epoch, is_renew_ack=True).error_code == \
            ErrorCode.INVALID_REQUEST
        renewing = a.fetch(tid, acks=[(0, 1, [4])], is_renew_ack=True, max_wait_ms=0, max_records=0,
                           min_bytes=0, max_bytes=0)
        assert part(renewing).acknowledge_error_code == 0 and acquired(renewing) == []
        # Renew without IsRenewAck is not a type the request may carry
        assert part(a.acknowledge(tid, [(0, 1, [4])])).error_code == ErrorCode.INVALID_REQUEST
        assert acquired(old.fetch(tid)) == []  # still locked to a
        assert part(a.acknowledge(tid, [(0, 1, [RELEASE])])).error_code == 0
        assert acquired(old.fetch(tid)) == [(0, 1, 2)]  # a v1 session gets them
        assert part(old.acknowledge(tid, [(0, 1, [ACCEPT])])).error_code == 0
    finally:
        a.close()
        old.close()


def test_record_limit_mode_never_acquires_past_max_records(server: LiveServer) -> None:
    """ShareFetch v2's ShareAcquireMode 1 (record_limit): at most MaxRecords offsets, the batch split; the rest of
    the batch is acquired by the next fetch."""
    topic, tid = make_topic(server)
    a = Member(server, "g8-limit")
    try:
        acquired(a.fetch(tid))
        produce(server, topic, 5)  # one batch (linger)
        assert fetch_until(a, tid, max_records=2, share_acquire_mode=1) == [(0, 1, 1)]
        assert acquired(a.fetch(tid, max_records=2, share_acquire_mode=1)) == [(2, 3, 1)]
        assert acquired(a.fetch(tid, max_records=2, share_acquire_mode=1)) == [(4, 4, 1)]
        assert part(a.acknowledge(tid, [(0, 4, [ACCEPT])])).error_code == 0
    finally:
        a.close()


def test_renew_is_refused_where_the_group_disables_it(server: LiveServer) -> None:
    """share.renew.acknowledge.enable=false (a group config set as an operator would): a renewal is
    INVALID_RECORD_STATE, as Kafka's, and the records stay the member's to acknowledge."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "g8-no-renew", incremental_configs=[
        ConfigEntry("share.renew.acknowledge.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    topic, tid = make_topic(server)
    a = Member(server, "g8-no-renew")
    try:
        acquired(a.fetch(tid))
        produce(server, topic, 2)
        assert fetch_until(a, tid) == [(0, 1, 1)]
        renewing = a.fetch(tid, acks=[(0, 1, [4])], is_renew_ack=True, max_wait_ms=0, max_records=0,
                           min_bytes=0, max_bytes=0)
        assert part(renewing).acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE
        assert part(a.acknowledge(tid, [(0, 1, [ACCEPT])])).error_code == 0
    finally:
        a.close()


def test_a_lock_that_runs_out_redelivers(server: LiveServer) -> None:
    """share.record.lock.duration.ms is 30 s (Kafka's default): b's long poll is woken when a's lock runs out."""
    topic, tid = make_topic(server)
    a, b = Member(server, "g9"), Member(server, "g9")
    try:
        acquired(a.fetch(tid))
        acquired(b.fetch(tid))
        produce(server, topic, 1)
        first = a.fetch(tid, max_wait_ms=10_000)
        assert first.acquisition_lock_timeout_ms == 30_000 and acquired(first) == [(0, 0, 1)]
        got: list[tuple[int, int, int]] = []
        for _ in range(10):  # a never acknowledges
            got = acquired(b.fetch(tid, max_wait_ms=60_000))
            if got:
                break
        assert got == [(0, 0, 2)]
        assert part(a.acknowledge(tid, [(0, 0, [ACCEPT])])).error_code == ErrorCode.INVALID_RECORD_STATE
    finally:
        a.close()
        b.close()


def test_min_bytes(server: LiveServer) -> None:
    """Records are acquired once MinBytes are available, or when MaxWaitMs is up with what there is."""
    topic, tid = make_topic(server)
    a = Member(server, "g10")
    try:
        acquired(a.fetch(tid))
        produce(server, topic, 2)
        got: list[tuple[int, int, int]] = []
        for _ in range(20):  # a MiB is never there: each fetch waits its 300 ms, then takes what there is
            got = acquired(a.fetch(tid, max_wait_ms=300, min_bytes=1 << 20))
            if got:
                break
        assert got == [(0, 1, 1)]
    finally:
        a.close()


def test_a_session_of_two_partitions_and_forgetting_one(server: LiveServer) -> None:
    name = f"share-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 2, 1)])
    finally:
        admin.close()
    with SyncAdminClient(server.bootstrap) as ours:
        tid = ours.describe_topics([name])[name].topic_id
    a = Member(server, "g11")

    def fetch(partitions: list[int], forget: tuple[int, ...] = (), **kw: Any) -> ShareFetchResponse:
        body = ShareFetchRequest(group_id="g11", member_id=a.member_id, share_session_epoch=a.epoch, min_bytes=1,
                                 max_records=kw.get("max_records", 500), max_wait_ms=kw.get("max_wait_ms", 0),
                                 topics=[FetchTopic(topic_id=tid, partitions=[FetchPartition(partition_index=p)
                                                                              for p in partitions])] if partitions else [],
                                 forgotten_topics_data=[ForgottenTopic(topic_id=tid, partitions=list(forget))]
                                 if forget else [])
        answer = a.call(78, body, ShareFetchResponse)
        assert answer.error_code == 0, answer
        a.epoch += 1
        return answer

    def by_partition(answer: ShareFetchResponse) -> dict[int, list[tuple[int, int, int]]]:
        return {p.partition_index: [(r.first_offset, r.last_offset, r.delivery_count) for r in p.acquired_records]
                for t in answer.responses for p in t.partitions}

    try:
        assert by_partition(fetch([0, 1])) == {0: [], 1: []}
        producer = KafkaProducer(bootstrap_servers=server.bootstrap)
        try:
            for p in (0, 1):
                producer.send(name, value=b"x", partition=p).get(30)
                producer.send(name, value=b"y", partition=p).get(30)
        finally:
            producer.close()
        got = by_partition(fetch([], max_wait_ms=5000, max_records=1))  # the session's partitions, MaxRecords 1
        assert sum(len(v) for v in got.values()) == 1  # one batch of one record, from one partition
        assert by_partition(fetch([], forget=(1,))).keys() == {0}  # partition 1 forgotten: not fetched any more
    finally:
        a.close()
