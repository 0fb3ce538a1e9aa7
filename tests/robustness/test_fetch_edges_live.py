"""Fetch, ListOffsets and Metadata edge cases on a replicated cluster (`kjbod cluster up`: a controller and three
brokers, two log dirs each, short heartbeat and session timeouts), answered as Apache Kafka's KafkaApis and
ReplicaManager answer them, checked with raw requests encoded by kjbod's own codecs (tests/datapath/support.py).

Each test names the Java path it follows and what kjbod answered before.  Every test uses topics of its own; the
one that stops a broker starts it again before it ends.  At the end no node's log may hold a traceback.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AlterReplicaLogDirsRequest,
    DescribeLogDirsRequest,
    FetchRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
)
from kjbod.storage.records import iter_all_records
from tests.cluster.conftest import WAIT_S, Cluster, wait_for
from tests.datapath.support import RawClient, batch, fetch, list_offset, metadata, produce
from tests.robustness.cluster_helpers import create_assigned, lead_from, partition, raw, three_brokers

pytestmark = pytest.mark.slow

LATEST = -1
DEBUGGING = -2  # a replica id that reads any local replica up to its log end
READ_COMMITTED = 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with three_brokers(tmp_path_factory.mktemp("fetch-edges")) as running:
        yield running


def offsets(part) -> list[int]:
    return [r.offset for r in iter_all_records(bytes(part.records or b""))]


def topic_id(client: RawClient, topic: str) -> uuid.UUID:
    (t,) = metadata(client, [topic]).topics
    return t.topic_id


def at(partition: int, offset: int = 0, max_bytes: int = 1 << 20, **fields: Any) -> FetchRequest.FetchPartition:
    return FetchRequest.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes,
                                       **fields)


def fetch_raw(client: RawClient, topics: list[tuple[str | uuid.UUID, list[FetchRequest.FetchPartition]]],
              version: int = 12, **fields: Any) -> Any:
    """A consumer's Fetch of `topics` (names up to v12, ids from v13), max_wait 0 unless `fields` say otherwise;
    returns the whole response."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, **fields}
    entries = [FetchRequest.FetchTopic(topic=t, partitions=parts) if isinstance(t, str)
               else FetchRequest.FetchTopic(topic_id=t, partitions=parts) for t, parts in topics]
    return client.call(FetchRequest(topics=entries, **body), version)


def answered(resp: Any) -> list[tuple[str | uuid.UUID, int, int]]:
    """(topic name, or id from v13, partition, error) of each partition answered, in order."""
    return [(t.topic or t.topic_id, p.partition_index, p.error_code) for t in resp.responses for p in t.partitions]


def test_a_follower_serves_consumers_from_fetch_v11_up_to_its_own_high_watermark(cluster):
    """Kafka's FetchParams.fetchOnlyLeader: a consumer's Fetch v11+ carries client metadata (its rack), so any
    replica may serve it (Partition.localLogWithEpochOrThrow with requireLeader false), up to that replica's
    own high watermark, at either isolation level, with no preferred read replica (no replica.selector.class);
    an older Fetch is NOT_LEADER_OR_FOLLOWER there.  The follower here holds records its leader has not
    committed (min.insync.replicas=3, one broker down): a consumer never sees them, at the follower's HW or
    between it and its log end (empty, no error); past the follower's log end is OFFSET_OUT_OF_RANGE.  kjbod once
    answered every consumer fetch on a follower NOT_LEADER_OR_FOLLOWER."""
    topic = "follower-reads"
    create_assigned(cluster, topic, [1, 2, 3], {"min.insync.replicas": "3"})
    with raw(cluster, 1) as client:
        for value in (b"a", b"b"):
            assert produce(client, topic, 0, batch([value])).error_code == 0  # acks=all: every replica has them
    with raw(cluster, 2) as client:
        wait_for(lambda: fetch(client, topic, 0, 0).high_watermark == 2, "follower 2 learns the HW 2")
        assert fetch(client, topic, 0, 0, version=10).error_code == E.NOT_LEADER_OR_FOLLOWER
        ident = topic_id(client, topic)
        for version in (11, 12, 13, 17):
            (t,) = fetch_raw(client, [(topic if version < 13 else ident, [at(0)])], version).responses
            (part,) = t.partitions
            assert (part.error_code, offsets(part), part.preferred_read_replica) == (0, [0, 1], -1), version
    assert cluster.signal("broker-3", signal.SIGTERM) in (0, None)
    try:
        wait_for(lambda: sorted(partition(cluster, topic, 1).isr_nodes) == [1, 2], "the ISR shrinks to 1 and 2")
        with raw(cluster, 1) as client:
            for value in (b"c", b"d", b"e"):
                assert produce(client, topic, 0, batch([value]), acks=1).error_code == 0
            assert list_offset(client, topic, 0, LATEST).offset == 2, "precondition: the HW stays below min ISR"
        with raw(cluster, 2) as client:
            wait_for(lambda: list_offset(client, topic, 0, LATEST, replica_id=DEBUGGING).offset == 5,
                     "follower 2 has the three records the leader has not committed")
            for isolation in (0, READ_COMMITTED):
                part = fetch(client, topic, 0, 0, isolation_level=isolation)
                assert (part.error_code, part.high_watermark, offsets(part)) == (0, 2, [0, 1]), isolation
                for beyond in (2, 3, 5):  # at the HW, past it, at the log end: nothing, no error
                    part = fetch(client, topic, 0, beyond, isolation_level=isolation)
                    assert (part.error_code, offsets(part)) == (0, []), (beyond, isolation)
            assert fetch(client, topic, 0, 6).error_code == E.OFFSET_OUT_OF_RANGE
            assert fetch(client, topic, 0, 2, version=10).error_code == E.NOT_LEADER_OR_FOLLOWER
            # ListOffsets stays the leader's (a consumer's replica id); only the debugging id reads a follower.
            assert list_offset(client, topic, 0, LATEST).error_code == E.NOT_LEADER_OR_FOLLOWER
    finally:
        cluster.start("broker-3")
    with raw(cluster, 2) as client:
        wait_for(lambda: fetch(client, topic, 0, 2).high_watermark == 5, "the follower's HW reaches 5 once broker 3 "
                 "is back in sync", WAIT_S)
        assert offsets(fetch(client, topic, 0, 2)) == [2, 3, 4]


def test_an_unknown_isolation_level_is_an_unknown_server_error_and_sessions_are_kafkas(cluster):
    """IsolationLevel.forId throws for anything but 0 and 1: Kafka's Fetch handler meets it once some partition
    asked for is known (FetchIsolation.of), its ListOffsets handler once some topic is named, and the client
    gets the request's error response: UNKNOWN_SERVER_ERROR at Fetch's top and, before v13, on every partition
    named; on every ListOffsets partition.  kjbod once served 7 as read_uncommitted.  Fetch sessions as
    FetchManager.newContext: epoch 0 or -1 is a full fetch whatever session id it names (once refused), any
    other epoch continues a session, FETCH_SESSION_ID_NOT_FOUND here (once served for -2), before the level is
    looked at."""
    topic = "isolation"
    create_assigned(cluster, topic, [1, 2])
    with raw(cluster, 1) as client:
        assert produce(client, topic, 0, batch([b"x"])).error_code == 0
        ident = topic_id(client, topic)
        for level in (7, -1, 2):
            resp = fetch_raw(client, [(topic, [at(0), at(0)]), ("no-such-topic", [at(1)])], isolation_level=level)
            assert resp.error_code == E.UNKNOWN_SERVER_ERROR
            assert answered(resp) == [(topic, 0, E.UNKNOWN_SERVER_ERROR)] * 2 + [("no-such-topic", 1,
                                                                                   E.UNKNOWN_SERVER_ERROR)]
            assert {(p.high_watermark, p.log_start_offset, bytes(p.records or b"")) for t in resp.responses
                    for p in t.partitions} == {(-1, -1, b"")}
            resp = fetch_raw(client, [(ident, [at(0)])], 13, isolation_level=level)
            assert (resp.error_code, resp.responses) == (E.UNKNOWN_SERVER_ERROR, [])
            # Nothing known asked for: nothing read, the level never looked at.
            resp = fetch_raw(client, [("no-such-topic", [at(0)]), (topic, [at(9)])], isolation_level=level)
            assert resp.error_code == 0 and answered(resp) == [("no-such-topic", 0, E.UNKNOWN_TOPIC_OR_PARTITION),
                                                               (topic, 9, E.UNKNOWN_TOPIC_OR_PARTITION)]
            for version in (2, 7, 11):
                refused = list_offset(client, topic, 0, LATEST, version, isolation_level=level)
                assert (refused.error_code, refused.offset, refused.timestamp) == (E.UNKNOWN_SERVER_ERROR, -1, -1)
        assert list_offset(client, topic, 0, LATEST, 1).offset == 1  # v1 has no isolation level
        for session_id, epoch in ((5, 0), (5, -1), (0, 0)):
            resp = fetch_raw(client, [(topic, [at(0)])], session_id=session_id, session_epoch=epoch)
            assert (resp.error_code, resp.session_id, answered(resp)) == (0, 0, [(topic, 0, 0)]), (session_id, epoch)
        for session_id, epoch in ((0, 1), (5, 1), (0, -2)):
            resp = fetch_raw(client, [(topic, [at(0)])], session_id=session_id, session_epoch=epoch, isolation_level=7)
            assert (resp.error_code, resp.responses) == (E.FETCH_SESSION_ID_NOT_FOUND, []), (session_id, epoch)


def test_a_partition_named_twice_in_a_fetch_is_answered_once_where_kafka_answers_it(cluster):
    """Kafka's FetchRequest.fetchData is a map by topic (id from v13, else name) and partition: a partition named
    twice, in one topic entry or two, is read once, in the place it was first named, with what it was last asked
    (its offset here); KafkaApis answers unknown topics and partitions after the partitions it read, and
    FetchResponse.of puts consecutive partitions of one topic in one entry; a topic entry with no partitions
    gets none.  kjbod once read and answered each name, in the request's shape."""
    topic, other = "fetch-twice", "fetch-twice-other"
    create_assigned(cluster, topic, [1, 2])
    create_assigned(cluster, other, [1, 3])
    with raw(cluster, 1) as client:
        for value in (b"a", b"b", b"c"):
            assert produce(client, topic, 0, batch([value])).error_code == 0
        resp = fetch_raw(client, [(topic, [at(0, 0), at(7)]), ("nope", [at(0)]), (topic, [at(0, 2)]),
                                  (other, [at(0)]), (topic, []), (other, [at(0, 5)])])
        assert answered(resp) == [(topic, 0, 0), (other, 0, E.OFFSET_OUT_OF_RANGE), (topic, 7,
                                  E.UNKNOWN_TOPIC_OR_PARTITION), ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION)]
        assert offsets(resp.responses[0].partitions[0]) == [2]  # the last ask: offset 2
        resp = fetch_raw(client, [(topic, [at(0, 1)]), (topic, [at(0, 1)])])
        assert [(t.topic, [p.partition_index for p in t.partitions]) for t in resp.responses] == [(topic, [0])]
        assert offsets(resp.responses[0].partitions[0]) == [1, 2]
        ident, unknown = topic_id(client, topic), uuid.uuid4()
        resp = fetch_raw(client, [(unknown, [at(0)]), (ident, [at(0, 0), at(0, 1)]), (unknown, [at(0)]),
                                  (uuid.UUID(int=0), [at(0)])], 13)
        assert answered(resp) == [(ident, 0, 0), (unknown, 0, E.UNKNOWN_TOPIC_ID),
                                  (uuid.UUID(int=0), 0, E.UNKNOWN_TOPIC_ID)]
        assert offsets(resp.responses[0].partitions[0]) == [1, 2]
        assert fetch_raw(client, [(topic, [])]).responses == []


def test_metadata_answers_a_topic_named_twice_once_and_ids_as_kafka(cluster):
    """Kafka's handleTopicMetadataRequest reads the topics asked for as a set: a name (or id) named twice is
    answered once (kjbod once answered each); from v12 a request naming some topic id is answered for its ids
    only, unknown ids UNKNOWN_TOPIC_ID, its entries by name unanswered (kjbod once answered both); a v10-11
    request naming an id or a null name is refused whole, each topic INVALID_REQUEST and no brokers (kjbod once
    looked the id up)."""
    topic = "metadata-twice"
    create_assigned(cluster, topic, [2, 3])
    MRT = MetadataRequest.MetadataRequestTopic

    def ask(entries: list[Any], version: int = 12) -> Any:
        return client.call(MetadataRequest(topics=entries, allow_auto_topic_creation=False), version)

    with raw(cluster, 1) as client:
        ident, unknown = topic_id(client, topic), uuid.uuid4()
        for version in (4, 9, 12, 13):
            resp = ask([MRT(name=topic), MRT(name="nope"), MRT(name=topic), MRT(name="nope")], version)
            assert [(t.name, t.error_code) for t in resp.topics] == [(topic, 0), ("nope",
                                                                                E.UNKNOWN_TOPIC_OR_PARTITION)]
        resp = ask([MRT(topic_id=unknown, name=None), MRT(topic_id=ident, name=None), MRT(name="other"),
                    MRT(topic_id=ident, name=None), MRT(topic_id=unknown, name=None)])
        assert [(t.topic_id, t.name, t.error_code) for t in resp.topics] == [
            (unknown, None, E.UNKNOWN_TOPIC_ID), (ident, topic, 0)]
        assert [p.leader_id for p in resp.topics[1].partitions] == [2]
        for version in (10, 11):
            resp = ask([MRT(topic_id=ident, name=topic), MRT(name=None), MRT(name=topic)], version)
            assert [(t.name, t.topic_id, t.error_code, t.partitions) for t in resp.topics] == [
                (topic, ident, E.INVALID_REQUEST, []), ("", uuid.UUID(int=0), E.INVALID_REQUEST, []),
                (topic, uuid.UUID(int=0), E.INVALID_REQUEST, [])]
            assert resp.brokers == []


def test_partitions_named_twice_in_the_log_dir_and_epoch_apis_are_answered_as_kafka(cluster):
    """What Kafka answers for a partition named twice where the request's shape decides it (pinned, kjbod
    answered these as Kafka already): OffsetForLeaderEpoch answers each entry (its topics are a multi-collection,
    ReplicaManager.lastOffsetForLeaderEpoch maps them one by one); DescribeLogDirs reads the partitions as a set
    (each replica once); AlterReplicaLogDirs keeps the last dir named for a partition (partitionDirs, a map),
    answered once: here the replica's own dir, so nothing moves."""
    topic = "dirs-twice"
    create_assigned(cluster, topic, [1, 2])
    OFE = OffsetForLeaderEpochRequest
    with raw(cluster, 1) as client:
        assert produce(client, topic, 0, batch([b"x"])).error_code == 0
        ask = OFE(replica_id=-2, topics=[OFE.OffsetForLeaderTopic(topic=topic, partitions=[
            OFE.OffsetForLeaderPartition(partition=0, leader_epoch=0)] * 2)] * 2)
        resp = client.call(ask, 4)
        assert [(t.topic, [(p.partition, p.error_code, p.end_offset) for p in t.partitions]) for t in resp.topics] \
            == [(topic, [(0, 0, 1), (0, 0, 1)])] * 2

        def where() -> list[tuple[str, list[tuple[int, bool]]]]:
            described = client.call(DescribeLogDirsRequest(topics=[
                DescribeLogDirsRequest.DescribableLogDirTopic(topic=topic, partitions=[0, 0])] * 2), 4)
            return [(r.log_dir, [(p.partition_index, p.is_future_key) for t in r.topics for p in t.partitions])
                    for r in described.results]

        dirs = where()
        (home,) = [d for d, parts in dirs if parts]
        (other,) = [d for d, parts in dirs if not parts]
        assert dict(dirs)[home] == [(0, False)]
        ARLD = AlterReplicaLogDirsRequest
        move = ARLD(dirs=[ARLD.AlterReplicaLogDir(path=path, topics=[ARLD.AlterReplicaLogDirTopic(
            name=topic, partitions=[0])]) for path in (other, home)])
        results = client.call(move, 2).results
        assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in results] == [
            (topic, [(0, 0)])]
        assert where() == dirs  # the last dir named, its own: no move


def test_fetch_sizes_and_waits_are_read_as_kafka_reads_them(cluster):
    """KafkaApis and ReplicaManager.readFromLog on a consumer's sizes and waits: min_bytes is capped at max_bytes
    and 0 or less answers at once (kjbod once waited max_wait_ms for them); max_wait_ms negative answers at once;
    max_bytes 0 still gives the first partition with data one batch (KIP-74) and the next nothing; a negative
    max_bytes is the first partition's budget only: UNKNOWN_SERVER_ERROR there when it has records to read, and
    one batch for the next (kjbod once served both); a negative partition_max_bytes is UNKNOWN_SERVER_ERROR where
    there are records and an empty answer at the high watermark; after the first partition with records, a batch
    over a partition's partition_max_bytes is not sent (kjbod once sent it whole); a consumer's
    OFFSET_OUT_OF_RANGE (an offset of -1, or past the end) carries -1 offsets (kjbod once sent the HW); a log
    start offset from a consumer changes nothing; the longest max_wait_ms (past any request timeout) is a long
    poll like any, ended by an append.  The two partitions may live in one log dir or two (read apart, kept as
    one read would keep them)."""
    topic = "sizes"
    create_assigned(cluster, topic, [1, 2])
    create_assigned(cluster, "sizes-2", [1, 3])
    big = b"x" * 3000
    with raw(cluster, 1) as client:
        for value in (big, b"b", b"c"):
            assert produce(client, topic, 0, batch([value])).error_code == 0
            assert produce(client, "sizes-2", 0, batch([value])).error_code == 0
        both = [(topic, [at(0)]), ("sizes-2", [at(0)])]
        # A long wait that a fetch answered at once never meets (the client's timeout is 30 s).
        for fields in ({"min_bytes": 0}, {"min_bytes": -5}, {"min_bytes": 10 << 20, "max_bytes": 1000}):
            resp = fetch_raw(client, [(topic, [at(0, 3)])] if fields["min_bytes"] <= 0 else both,
                             max_wait_ms=120_000, **fields)
            assert resp.error_code == 0 and all(code == 0 for *_, code in answered(resp)), fields
        assert answered(fetch_raw(client, [(topic, [at(0, 3)])], max_wait_ms=-1)) == [(topic, 0, 0)]

        def got(resp: Any) -> list[tuple[int, list[int]]]:
            return [(p.error_code, offsets(p)) for t in resp.responses for p in t.partitions]

        assert got(fetch_raw(client, both, max_bytes=0)) == [(0, [0]), (0, [])]
        resp = fetch_raw(client, both, max_bytes=-1)
        assert got(resp) == [(E.UNKNOWN_SERVER_ERROR, []), (0, [0])]
        assert resp.responses[0].partitions[0].high_watermark == -1
        assert got(fetch_raw(client, [(topic, [at(0, 3, -1)]), ("sizes-2", [at(0, 0, -1)])])) == [
            (0, []), (E.UNKNOWN_SERVER_ERROR, [])]
        assert got(fetch_raw(client, [(topic, [at(0, 0, 0)]), ("sizes-2", [at(0, 0, 0)])])) == [(0, [0]), (0, [])]
        assert got(fetch_raw(client, [(topic, [at(0, 1)]), ("sizes-2", [at(0, 0, 1000)])])) == [
            (0, [1, 2]), (0, [])]
        assert got(fetch_raw(client, [(topic, [at(0, 0, 1000)]), ("sizes-2", [at(0, 0, 1000)])])) == [
            (0, [0]), (0, [])]
        for offset in (-1, 4):
            part = fetch(client, topic, 0, offset)
            assert (part.error_code, part.high_watermark, part.last_stable_offset, part.log_start_offset) == (
                E.OFFSET_OUT_OF_RANGE, -1, -1, -1), offset
        part = fetch_raw(client, [(topic, [at(0, 1, log_start_offset=2)])]).responses[0].partitions[0]
        assert (part.error_code, part.log_start_offset, offsets(part)) == (0, 0, [1, 2])
        # The longest wait there is (past any request timeout) is a long poll like any: an append ends it.
        parked = FetchRequest(replica_id=-1, max_wait_ms=2**31 - 1, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic=topic, partitions=[at(0, 3)])])
        with raw(cluster, 1) as waiting:
            corr = waiting.send(parked, 12)
            assert produce(client, topic, 0, batch([b"wake"])).error_code == 0
            assert offsets(waiting.receive(parked, 12, corr).responses[0].partitions[0]) == [3]


def test_fetch_v16_names_the_leader_with_not_leader_and_fenced_epoch(cluster):
    """KIP-951, as Kafka's KafkaApis.handleFetchRequest: from v16 a partition answered NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH carries the leader and its epoch (CurrentLeader), and the response the leader's endpoint
    on the listener asked (NodeEndpoints), so a client moves without a metadata round trip; kjbod once sent
    -1/-1 and no endpoint."""
    topic = "new-leader"
    create_assigned(cluster, topic, [1, 2])
    lead_from(cluster, topic, [2, 1])
    epoch = partition(cluster, topic, 3).leader_epoch
    assert epoch >= 1
    with raw(cluster, 3) as client:  # not a replica: NOT_LEADER_OR_FOLLOWER
        ident = topic_id(client, topic)
        for version in (16, 17):
            resp = fetch_raw(client, [(ident, [at(0)])], version)
            ((_, _, code),) = answered(resp)
            leader = resp.responses[0].partitions[0].current_leader
            assert (code, leader.leader_id, leader.leader_epoch) == (E.NOT_LEADER_OR_FOLLOWER, 2, epoch)
            assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [
                (2, "127.0.0.1", cluster.broker_port(2))]
        resp = fetch_raw(client, [(ident, [at(0)])], 15)
        assert resp.responses[0].partitions[0].current_leader.leader_id == -1 and resp.node_endpoints == []
    with raw(cluster, 2) as client:  # the leader, asked with an older epoch: FENCED_LEADER_EPOCH
        resp = fetch_raw(client, [(ident, [at(0, current_leader_epoch=epoch - 1)]), ("no-such", [at(0)])], 16)
        assert [code for *_, code in answered(resp)] == [E.FENCED_LEADER_EPOCH, E.UNKNOWN_TOPIC_ID]
        leader = resp.responses[0].partitions[0].current_leader
        assert (leader.leader_id, leader.leader_epoch) == (2, epoch)
        assert [n.node_id for n in resp.node_endpoints] == [2]
        ok = fetch_raw(client, [(ident, [at(0)])], 16)
        assert answered(ok) == [(ident, 0, 0)] and ok.node_endpoints == []


def test_a_consumers_last_fetched_epoch_is_checked_for_divergence(cluster):
    """Kafka's Partition.readRecords checks a LastFetchedEpoch (Fetch v12+) from anyone, a consumer too: an
    epoch that ended before the fetch offset here answers DivergingEpoch (the largest epoch not above it and
    where it ended), no records, at once; an epoch whose end is not known here is OFFSET_OUT_OF_RANGE; one that
    covers the offset reads as usual.  kjbod once ignored a consumer's LastFetchedEpoch."""
    topic = "diverging"
    create_assigned(cluster, topic, [1, 2])
    with raw(cluster, 1) as client:
        for value in (b"a", b"b"):
            assert produce(client, topic, 0, batch([value])).error_code == 0
    lead_from(cluster, topic, [2, 1])
    epoch = partition(cluster, topic, 2).leader_epoch
    with raw(cluster, 2) as client:
        wait_for(lambda: produce(client, topic, 0, batch([b"c"])).error_code == 0, "broker 2 takes a produce")

        def ask(offset: int, last_fetched: int, version: int = 12) -> Any:
            (t,) = fetch_raw(client, [(topic, [at(0, offset, last_fetched_epoch=last_fetched)])], version,
                             max_wait_ms=120_000).responses
            return t.partitions[0]

        for last in (0, epoch - 1):  # epoch 0 ended at 2, before the fetch offset 3
            part = ask(3, last)
            assert (part.error_code, part.diverging_epoch.epoch, part.diverging_epoch.end_offset, offsets(part)) == (
                0, 0, 2, []), last
        assert ask(3, epoch + 5).error_code == E.OFFSET_OUT_OF_RANGE
        part = ask(2, epoch)
        assert (part.error_code, part.diverging_epoch.epoch, offsets(part)) == (0, -1, [2])
        assert offsets(ask(1, 0)) == [1, 2]  # epoch 0 reaches offset 1: read as usual, on past its end
