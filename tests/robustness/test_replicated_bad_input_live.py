"""Bad input against a replicated cluster (`kjbod cluster up`: a controller and three brokers, two log dirs each,
short heartbeat and session timeouts), answered with Apache Kafka's error codes, checked with raw requests
encoded by kjbod's own codecs (tests/datapath/support.py) so each test sees the exact code a client would.

What each test pins is a case that once got another answer (see the test's docstring).  Every test uses topics
of its own; the one that stops a broker starts it again before it ends.  At the end no node's log may hold a
traceback: bad input is answered, never a handler's crash.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListOffsetsRequest,
)
from kjbod.storage.records import build_batch
from tests.cluster.conftest import WAIT_S, Cluster, wait_for
from tests.datapath.support import batch, fetch, list_offset, offset_for_leader_epoch, produce
from tests.robustness.cluster_helpers import create_assigned, lead_from, partition, raw, three_brokers

pytestmark = pytest.mark.slow

BROKER = 4  # config resource type
LATEST, MAX_TIMESTAMP = -1, -3
DEBUGGING = -2  # a replica id that reads any local replica up to its log end (kafka-dump-log's, our CLI's)
READ_COMMITTED = 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with three_brokers(tmp_path_factory.mktemp("robustness")) as running:
        yield running


def test_with_a_follower_down_consumers_find_no_offset_past_the_high_watermark(cluster):
    """The high watermark behind the log end on a replicated partition (min.insync.replicas=3, one of its three
    brokers shut down: the ISR is below it and the HW stays while the leader appends with acks=1).  A consumer's
    latest offset is the HW at either isolation level, and a timestamp lookup or MAX_TIMESTAMP (-3) whose record
    is past the HW answers offset -1 (Kafka's Partition.fetchOffsetForTimestamp); that lookup once answered
    offsets of records not committed yet.  A debugging replica id still sees the log end.  Then leadership moves
    to the other follower, whose epoch starts at 3 while its HW stays 0: Kafka's window where a consumer's latest
    offset, or a lookup that finds nothing below the HW, is OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before
    ListOffsets v5), so that the HW never seems to go back; it once answered 0."""
    topic = "hw-behind"
    now = int(time.time() * 1000)
    create_assigned(cluster, topic, [1, 2, 3], {"min.insync.replicas": "3"})
    assert cluster.signal("broker-3", signal.SIGTERM) in (0, None)
    try:
        wait_for(lambda: sorted(partition(cluster, topic, 1).isr_nodes) == [1, 2], "the ISR shrinks to 1 and 2")
        with raw(cluster, 1) as client:
            for i, value in enumerate((b"a", b"b", b"c")):
                assert produce(client, topic, 0, batch([value], timestamp=now + i), acks=1).error_code == 0
            assert list_offset(client, topic, 0, LATEST, replica_id=DEBUGGING).offset == 3
            assert list_offset(client, topic, 0, LATEST).offset == 0, "precondition: the HW stays below min ISR"
            assert list_offset(client, topic, 0, LATEST, isolation_level=READ_COMMITTED).offset == 0
            for ts in (MAX_TIMESTAMP, 0):
                for isolation in (0, READ_COMMITTED):
                    answer = list_offset(client, topic, 0, ts, isolation_level=isolation)
                    assert (answer.error_code, answer.offset, answer.timestamp) == (0, -1, -1), (ts, isolation)
                found = list_offset(client, topic, 0, ts, replica_id=DEBUGGING)
                assert found.error_code == 0 and 0 <= found.offset < 3, ts
            part = fetch(client, topic, 0, 0)
            assert (part.error_code, part.high_watermark, bytes(part.records or b"")) == (0, 0, b"")
        with raw(cluster, 2) as client:
            wait_for(lambda: list_offset(client, topic, 0, LATEST, replica_id=DEBUGGING).offset == 3,
                     "broker 2 has the three records")
        lead_from(cluster, topic, [2, 1, 3], running=(1, 2))
        with raw(cluster, 2) as client:
            assert list_offset(client, topic, 0, LATEST).error_code == E.OFFSET_NOT_AVAILABLE
            assert list_offset(client, topic, 0, LATEST, version=4).error_code == E.LEADER_NOT_AVAILABLE
            assert list_offset(client, topic, 0, 0).error_code == E.OFFSET_NOT_AVAILABLE  # nothing below the HW
            assert list_offset(client, topic, 0, -2).offset == 0
            assert list_offset(client, topic, 0, LATEST, replica_id=DEBUGGING).offset == 3
    finally:
        cluster.start("broker-3")
    with raw(cluster, 2) as client:
        wait_for(lambda: list_offset(client, topic, 0, LATEST).offset == 3, "the HW reaches the log end once "
                 "broker 3 is back in sync", WAIT_S)
        assert [list_offset(client, topic, 0, ts).offset for ts in (MAX_TIMESTAMP, now + 1)] == [2, 1]


def test_a_consumers_leader_epoch_is_checked_before_leadership(cluster):
    """CurrentLeaderEpoch in a consumer's Fetch, ListOffsets and OffsetForLeaderEpoch (Kafka's
    Partition.localLogWithEpochOrThrow): older than the broker's FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH,
    checked before leadership (a follower asked with a wrong epoch names the epoch).  ListOffsets and
    OffsetForLeaderEpoch take only -1 for "none" (-7 is an epoch like any, older); Fetch takes every negative
    epoch for none (FetchRequest.optionalEpoch), and once answered -7 FENCED_LEADER_EPOCH.  Fetch and ListOffsets
    once ignored the epoch and served any, and OffsetForLeaderEpoch answered a follower NOT_LEADER_OR_FOLLOWER and
    took every negative epoch for none."""
    topic = "epochs"
    create_assigned(cluster, topic, [1, 2, 3])
    with raw(cluster, 1) as client:
        assert produce(client, topic, 0, batch([b"x"])).error_code == 0
    lead_from(cluster, topic, [2, 1, 3])
    with raw(cluster, 2) as client:  # OFFSET_NOT_AVAILABLE until a follower confirms the new epoch's start
        wait_for(lambda: list_offset(client, topic, 0, LATEST).offset == 1, "broker 2's HW reaches its epoch start")
    epoch = partition(cluster, topic, 2).leader_epoch
    assert epoch >= 1 and partition(cluster, topic, 1).leader_epoch == epoch

    def answers(broker: int, current: int) -> tuple[int, int, int]:
        # Fetch v10: from v11 a follower serves consumers (test_fetch_edges_live).
        with raw(cluster, broker) as client:
            return (fetch(client, topic, 0, 0, current_leader_epoch=current, version=10).error_code,
                    list_offset(client, topic, 0, LATEST, current_leader_epoch=current).error_code,
                    offset_for_leader_epoch(client, topic, 0, epoch, current_leader_epoch=current).error_code)

    leader, follower = 2, 1
    for broker in (leader, follower):
        assert answers(broker, epoch - 1) == (E.FENCED_LEADER_EPOCH,) * 3, broker
        assert answers(broker, epoch + 1) == (E.UNKNOWN_LEADER_EPOCH,) * 3, broker
    assert answers(leader, -7) == (0, E.FENCED_LEADER_EPOCH, E.FENCED_LEADER_EPOCH)
    assert answers(follower, -7) == (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH, E.FENCED_LEADER_EPOCH)
    assert answers(leader, epoch) == answers(leader, -1) == (0, 0, 0)
    assert answers(follower, epoch) == answers(follower, -1) == (E.NOT_LEADER_OR_FOLLOWER,) * 3
    with raw(cluster, leader) as client:
        got = fetch(client, topic, 0, 0, current_leader_epoch=epoch)
        assert got.high_watermark == 1 and bytes(got.records) != b""


def test_list_offsets_naming_a_partition_twice_is_answered_once_invalid_request(cluster):
    """Kafka's ReplicaManager.fetchOffset: a partition named twice in one ListOffsets answers INVALID_REQUEST, once;
    each name once got its own offset."""
    topic = "twice"
    create_assigned(cluster, topic, [1, 2])
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)
                                for ts in (LATEST, -2)])])
    with raw(cluster, 1) as client:
        (t,) = client.call(req, 7).topics
        assert [(p.partition_index, p.error_code, p.offset) for p in t.partitions] == [(0, E.INVALID_REQUEST, -1)]
        assert list_offset(client, topic, 0, LATEST).error_code == 0  # named once: answered


def test_an_unknown_election_type_is_named_on_every_partition(cluster):
    """ElectLeaders with an ElectionType that is neither PREFERRED (0) nor UNCLEAN (1): INVALID_REQUEST at the top
    and, with the message "Unknown election type N", on each partition named (Kafka's
    ElectLeadersRequest.getErrorResponse); the partitions were once left out, and nothing said why."""
    topic = "election-type"
    create_assigned(cluster, topic, [2, 3])
    for kind in (2, -1, 127):
        req = ElectLeadersRequest(election_type=kind, timeout_ms=30_000, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0]),
            ElectLeadersRequest.TopicPartitions(topic="no-such-topic", partitions=[3])])
        with raw(cluster, 1) as client:
            resp = client.call(req, 2)
        assert resp.error_code == E.INVALID_REQUEST
        assert [(r.topic, p.partition_id, p.error_code, p.error_message) for r in resp.replica_election_results
                for p in r.partition_result] == [
            (topic, 0, E.INVALID_REQUEST, f"Unknown election type {kind}"),
            ("no-such-topic", 3, E.INVALID_REQUEST, f"Unknown election type {kind}")]
    assert partition(cluster, topic, 1).leader_id == 2  # nothing elected


def throttle_rate(cluster: Cluster, broker: int) -> str | None:
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name=str(broker), configuration_keys=["leader.replication.throttled.rate"])])
    with raw(cluster, broker) as client:
        (result,) = client.call(req, 4).results
    assert result.error_code == 0, result.error_message
    return next((c.value for c in result.configs), None)


def test_broker_configs_of_another_broker_and_null_values_are_refused_by_the_broker_asked(cluster):
    """(Incremental)AlterConfigs checks Kafka's brokers make before forwarding (ConfigAdminManager.preprocess),
    each INVALID_REQUEST naming the problem: a broker resource naming another broker (the controller alone cannot
    tell who forwarded it: broker 1 once set broker 2's throttle, and broker 99's), a null value but for DELETE,
    a resource named twice.  The other resources of the same request still go through, answered in order."""
    topic = "configs"
    create_assigned(cluster, topic, [1, 2])
    IAC = IncrementalAlterConfigsRequest

    def incremental(*resources: tuple[int, str, str, int, str | None]) -> list[tuple[int, str | None]]:
        req = IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
            resource_type=rtype, resource_name=name, configs=[IAC.AlterableConfig(name=key, config_operation=op,
                                                                                  value=value)])
            for rtype, name, key, op, value in resources])
        with raw(cluster, 1) as client:
            return [(r.error_code, r.error_message) for r in client.call(req, 1).responses]

    rate = "leader.replication.throttled.rate"
    before = throttle_rate(cluster, 2)
    assert incremental((BROKER, "2", rate, 0, "1000"), (BROKER, "99", rate, 0, "1000"),
                       (2, topic, "retention.ms", 0, "60000"), (2, "no-such-topic", "segment.ms", 0, None)) == [
        (E.INVALID_REQUEST, "unexpected broker id, expected 1 or empty string, but received 2"),
        (E.INVALID_REQUEST, "unexpected broker id, expected 1 or empty string, but received 99"),
        (0, None),
        (E.INVALID_REQUEST, "Null value not supported for : segment.ms")]
    assert throttle_rate(cluster, 2) == before
    assert incremental((BROKER, "1", rate, 0, "1000"), (BROKER, "", rate, 0, "5000000")) == [(0, None)] * 2
    assert throttle_rate(cluster, 1) == "1000"
    assert incremental((2, topic, "segment.ms", 1, None)) == [(0, None)]  # DELETE takes no value
    twice = incremental((2, topic, "retention.ms", 0, "1"), (2, topic, "retention.ms", 0, "2"))
    assert twice == [(E.INVALID_REQUEST, "Each resource must appear at most once.")] * 2

    legacy = AlterConfigsRequest(validate_only=False, resources=[
        AlterConfigsRequest.AlterConfigsResource(resource_type=BROKER, resource_name="3", configs=[
            AlterConfigsRequest.AlterableConfig(name=rate, value="5")]),
        AlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            AlterConfigsRequest.AlterableConfig(name="retention.ms", value=None)])])
    before = throttle_rate(cluster, 3)
    with raw(cluster, 1) as client:
        answered = [(r.error_code, r.error_message) for r in client.call(legacy, 2).responses]
    assert answered == [(E.INVALID_REQUEST, "unexpected broker id, expected 1 or empty string, but received 3"),
                        (E.INVALID_REQUEST, "Null value not supported for : retention.ms")]
    assert throttle_rate(cluster, 3) == before


def test_a_transactional_batch_without_a_transactional_id_is_refused_and_not_stored(cluster):
    """Kafka's KafkaApis.handleProduceRequest: transactional records in a request without a transactional id
    answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED.  kjbod once stored such a batch (acks=all, replicated), a
    transaction no marker would ever end."""
    topic = "no-transactions"
    create_assigned(cluster, topic, [1, 2, 3])
    transactional = build_batch([(None, b"t", [], int(time.time() * 1000))], producer_id=7, producer_epoch=0,
                                base_sequence=0, is_transactional=True)
    with raw(cluster, 1) as client:
        answer = produce(client, topic, 0, transactional)
        assert answer.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, answer.error_message
        assert "transactional id" in answer.error_message
        assert produce(client, topic, 0, batch([b"plain"])).error_code == 0
        assert list_offset(client, topic, 0, LATEST, replica_id=DEBUGGING).offset == 1


def test_real_admin_clients_show_messages_that_name_the_problem(cluster):
    """What a user of confluent-kafka's and kafka-python's admin clients sees for bad input on a three-broker
    cluster: Kafka's error code, and a message naming what is wrong (a replication factor above the brokers, a
    broker that does not exist, a config value out of range, an election nobody needed)."""
    import warnings

    from confluent_kafka import ElectionType, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
        from kafka.admin import KafkaAdminClient
        from kafka.admin import NewTopic as KafkaNewTopic
        from kafka.errors import InvalidConfigurationError, InvalidReplicationAssignmentError

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    with pytest.raises(KafkaException) as too_many:
        admin.create_topics([NewTopic("rf-four", 1, 4)])["rf-four"].result(30)
    error = too_many.value.args[0]
    assert error.name() == "INVALID_REPLICATION_FACTOR"
    assert "replication factor of 4 cannot be reached because only 3 broker(s) are registered" in error.str()
    create_assigned(cluster, "clients", [1, 2, 3])
    bad_isr = ConfigResource("TOPIC", "clients", incremental_configs=[ConfigEntry(
        "min.insync.replicas", "0", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad_isr])[bad_isr].result(30)
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert "min.insync.replicas" in refused.value.args[0].str() and "at least 1" in refused.value.args[0].str()
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("clients", 0)]).result(30)
    assert [e.name() for e in elected.values()] == ["ELECTION_NOT_NEEDED"]

    legacy = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        with pytest.raises(InvalidReplicationAssignmentError) as unknown:
            legacy.create_topics([KafkaNewTopic("on-99", -1, -1, replica_assignments={0: [1, 99]})])
        assert "broker 99, but no such broker is registered" in str(unknown.value)
        with pytest.raises(InvalidConfigurationError) as garbage:
            legacy.create_topics([KafkaNewTopic("unclean-maybe", 1, 3,
                                                topic_configs={"unclean.leader.election.enable": "maybe"})])
        assert "'maybe' for unclean.leader.election.enable" in str(garbage.value)
    finally:
        legacy.close()
