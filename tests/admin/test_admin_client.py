"""AdminClient against fake brokers on 127.0.0.1 that speak Kafka framing and kjbod's generated codecs.

Every public method is exercised for its results and the bytes it sent (decoded back by the fake broker), and
every error path: error codes at the top level and per item, retriable codes retried, a broker that closes the
connection mid-request, a broker that never answers, a broker that is down, an API version the broker does not
serve (negotiated down, or refused with a clear error), and a broker that breaks the protocol.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import pytest
from live import free_port

from kjbod.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    BrokerConnectionError,
    BrokerResponseError,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ErrorCode,
    KafkaError,
    LogDirInfo,
    NewTopic,
    ProtocolViolation,
    ReplicaInfo,
    ReplicaLogDirInfo,
    RequestTimeoutError,
    SyncAdminClient,
    TopicPartitionReplica,
    UnsupportedVersionError,
    parse_bootstrap_servers,
)
from kjbod.protocol.generated import ApiVersionsResponse, CreateTopicsResponse
from kjbod.protocol.headers import encode_response, peek_api
from kjbod.wire.framing import FrameDecoder, encode_frame_size

from .fake_broker import FakeCluster, LogDir, Replica

# A short deadline for calls expected to fail: long enough for a few retries, short enough to keep tests fast.
# Elapsed-time checks allow seconds of slack (the machine may be busy); they prove that no call waits for a
# 30 s default or a slow answer, not exact timings.
FAIL_FAST = 0.6


def admin_for(cluster: FakeCluster, **options) -> AdminClient:
    options.setdefault("retry_backoff", 0.02)
    options.setdefault("retry_backoff_max", 0.1)
    return AdminClient(cluster.bootstrap, **options)


# ================================================================================================ bootstrap


def test_parse_bootstrap_servers():
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["[::1]:9093", "host"]) == [("::1", 9093), ("host", 9092)]
    assert parse_bootstrap_servers("PLAINTEXT://h:7") == [("h", 7)]
    for bad in ("", "h:notaport", "h:0", ":9092"):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)


async def test_start_negotiates_versions_and_discovers_brokers(cluster3):
    async with admin_for(cluster3, client_id="probe") as admin:
        assert sorted(admin.brokers) == [1, 2, 3]
        assert admin.brokers[3].port == cluster3.brokers[3].port
        assert admin.cluster_id == "fake-cluster-0001"
    first = cluster3.brokers[1].received
    # ApiVersions first, at the highest version, then Metadata for brokers only (an empty topic list).
    assert [(r.api_key, r.version) for r in first[:2]] == [(18, 4), (3, 13)]
    assert first[0].message.client_software_name == "kjbod-admin"
    assert first[1].message.topics == [] and first[1].message.allow_auto_topic_creation is False
    assert {r.client_id for r in first} == {"probe"}


async def test_bootstrap_falls_through_to_next_server(cluster):
    dead = await _closed_port()
    async with AdminClient([f"127.0.0.1:{dead}", cluster.bootstrap]) as admin:
        assert list(admin.brokers) == [1]


async def test_unreachable_bootstrap_names_host_and_port():
    dead = await _closed_port()
    admin = AdminClient(f"127.0.0.1:{dead}", retry_backoff=0.02)
    started = time.monotonic()
    with pytest.raises(BrokerConnectionError) as info:
        await admin.start(timeout=FAIL_FAST)
    assert time.monotonic() - started < FAIL_FAST + 2
    assert f"127.0.0.1:{dead}" in str(info.value)
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION and info.value.code.name == "NETWORK_EXCEPTION"
    assert (info.value.host, info.value.port) == ("127.0.0.1", dead)
    await admin.close()


async def test_connect_timeout_when_broker_never_answers_api_versions(cluster):
    cluster.brokers[1].add_script(18, ("delay", 5), ("delay", 5), ("delay", 5))
    admin = admin_for(cluster, connect_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(KafkaError) as info:
        await admin.start(timeout=0.5)
    assert time.monotonic() - started < 3
    assert info.value.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT)
    assert f"127.0.0.1:{cluster.brokers[1].port}" in str(info.value)
    await admin.close()


async def test_api_versions_falls_back_per_kip_511(cluster):
    broker = cluster.brokers[1]
    broker.api_versions[18] = (0, 2)
    async with admin_for(cluster) as admin:
        description = await admin.describe_cluster()
    assert description.cluster_id == "fake-cluster-0001"
    versions = [r.version for r in broker.received if r.api_key == 18]
    assert versions == [2]  # v4 was refused with a v0 answer, then asked again at the broker's highest


async def test_closed_client_refuses_calls(cluster):
    admin = admin_for(cluster)
    await admin.start()
    await admin.close()
    with pytest.raises(RuntimeError, match="closed"):
        await admin.describe_cluster()


# ================================================================================================ cluster


async def test_describe_cluster(cluster3):
    async with admin_for(cluster3) as admin:
        description = await admin.describe_cluster()
    assert description.cluster_id == "fake-cluster-0001"
    assert description.controller_id == 2
    assert [(b.node_id, b.port, b.rack) for b in description.brokers] == [
        (n, cluster3.brokers[n].port, f"rack-{n}") for n in (1, 2, 3)]


async def test_describe_cluster_falls_back_to_metadata_when_not_served(cluster):
    del cluster.brokers[1].api_versions[60]
    async with admin_for(cluster) as admin:
        description = await admin.describe_cluster()
    assert description.controller_id == 1
    assert [b.node_id for b in description.brokers] == [1]
    assert not cluster.requests(60)


async def test_top_level_error_raises_with_code_name_and_broker(cluster):
    broker = cluster.brokers[1]
    broker.add_script(60, ("error", ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_cluster()
    error = info.value
    assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert not error.retriable
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(error) and "injected" in str(error)
    assert error.api == "DescribeCluster" and error.broker == f"127.0.0.1:{broker.port}"
    assert len(cluster.requests(60)) == 1  # not retried


async def test_retriable_top_level_error_is_retried(cluster):
    cluster.brokers[1].add_script(60, ("error", ErrorCode.COORDINATOR_NOT_AVAILABLE),
                                  ("error", ErrorCode.REQUEST_TIMED_OUT))
    async with admin_for(cluster) as admin:
        description = await admin.describe_cluster()
    assert description.controller_id == 1
    assert len(cluster.requests(60)) == 3


async def test_retriable_error_until_the_deadline_raises_the_last_error(cluster):
    cluster.brokers[1].add_script(60, *[("error", ErrorCode.COORDINATOR_NOT_AVAILABLE)] * 100)
    async with admin_for(cluster) as admin:
        started = time.monotonic()
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_cluster(timeout=FAIL_FAST)
        assert time.monotonic() - started < FAIL_FAST + 2
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert len(cluster.requests(60)) >= 3


async def test_describe_topics(cluster):
    async with admin_for(cluster) as admin:
        topics = await admin.describe_topics(["events"])
        everything = await admin.describe_topics()
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_topics(["missing"])
    events = topics["events"]
    assert events.topic_id == cluster.topics["events"]["id"]
    assert [(p.partition, p.leader, p.replicas) for p in events.partitions] == [(0, 1, (1,)), (1, 1, (1,)),
                                                                               (2, 1, (1,))]
    assert sorted(everything) == ["events", "other"]
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "missing" in str(info.value)


# ================================================================================================ describe_log_dirs


async def test_describe_log_dirs_all(cluster):
    broker = cluster.brokers[1]
    async with admin_for(cluster) as admin:
        result = await admin.describe_log_dirs()
    assert list(result) == [1] and result.errors == {}
    a, b, c = result[1]
    assert a == LogDirInfo(1, "/data/a", broker.log_dirs[0].directory_id, None, 1 << 40, 1 << 39, [
        ReplicaInfo("events", 0, 100, 0, False), ReplicaInfo("events", 1, 200, 0, False),
        ReplicaInfo("other", 0, 5, None, False)], is_cordoned=False)  # offset lag -1 (unknown) -> None; v5: not cordoned
    assert b.replicas == [ReplicaInfo("events", 2, 300, 0, False), ReplicaInfo("events", 0, 40, 7, True)]
    assert (c.path, c.error, c.total_bytes, c.usable_bytes, c.replicas) == (
        "/data/c", ErrorCode.KAFKA_STORAGE_ERROR, None, None, [])
    request = cluster.requests(35)[0]
    assert (request.version, request.message.topics) == (5, None)
    with pytest.raises(AttributeError):
        a.replicas[0].size = 1  # results are frozen


async def test_describe_log_dirs_topic_names_are_expanded_to_partitions(cluster):
    async with admin_for(cluster) as admin:
        result = await admin.describe_log_dirs(topics=["events"])
    asked = cluster.requests(35)[0].message.topics
    assert [(t.topic, t.partitions) for t in asked] == [("events", [0, 1, 2])]
    assert {(r.topic, r.partition) for d in result[1] for r in d.replicas} == {
        ("events", 0), ("events", 1), ("events", 2)}


async def test_describe_log_dirs_explicit_partitions(cluster):
    async with admin_for(cluster) as admin:
        pairs = await admin.describe_log_dirs(topics=[("events", 2), ("other", 0), ("events", 0)])
        mapping = await admin.describe_log_dirs(topics={"events": [1]})
        empty = await admin.describe_log_dirs(topics=[])
    requests = cluster.requests(35)
    assert [(t.topic, t.partitions) for t in requests[0].message.topics] == [("events", [0, 2]), ("other", [0])]
    assert [(t.topic, t.partitions) for t in requests[1].message.topics] == [("events", [1])]
    assert requests[2].message.topics == []
    assert sum(len(d.replicas) for d in pairs[1]) == 4  # events-0 twice: current and future
    assert [r.partition for d in mapping[1] for r in d.replicas] == [1]
    assert [d.path for d in empty[1]] == ["/data/a", "/data/b", "/data/c"]
    assert all(not d.replicas for d in empty[1])


async def test_describe_log_dirs_unknown_topic_raises_at_once(cluster):
    async with admin_for(cluster) as admin:
        started = time.monotonic()
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_log_dirs(topics=["nope"])
        assert time.monotonic() - started < 5  # not retried until the (30 s) deadline
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not cluster.requests(35)


async def test_describe_log_dirs_without_directory_id_reports_none(cluster):
    broker = cluster.brokers[1]
    broker.log_dirs = [LogDir("/kafka", directory_id=uuid.UUID(int=0))]  # as an Apache Kafka broker answers
    async with admin_for(cluster) as admin:
        result = await admin.describe_log_dirs()
    assert result[1][0].directory_id is None


async def test_describe_log_dirs_negotiated_down_to_v1(cluster):
    broker = cluster.brokers[1]
    broker.api_versions[35] = (1, 1)
    async with admin_for(cluster) as admin:
        result = await admin.describe_log_dirs(topics=[("events", 0)])
    assert cluster.requests(35)[0].version == 1
    a, b, _ = result[1]
    # v1 has no volume sizes and no directory id: reported as unknown, not as zero.
    assert (a.total_bytes, a.usable_bytes, a.directory_id) == (None, None, None)
    assert a.replicas == [ReplicaInfo("events", 0, 100, 0, False)]
    assert b.replicas == [ReplicaInfo("events", 0, 40, 7, True)]


async def test_api_not_served_at_any_common_version(cluster):
    broker = cluster.brokers[1]
    del broker.api_versions[35]
    broker.api_versions[19] = (8, 9)
    async with admin_for(cluster) as admin:
        with pytest.raises(UnsupportedVersionError) as missing:
            await admin.describe_log_dirs()
        with pytest.raises(UnsupportedVersionError) as too_new:
            await admin.create_topics([NewTopic("x", 1, 1)])
    assert missing.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert "DescribeLogDirs" in str(missing.value)
    assert "v8-v9" in str(too_new.value) and "v2-v7" in str(too_new.value)


async def test_describe_log_dirs_top_level_error(cluster):
    cluster.brokers[1].describe_log_dirs_error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_log_dirs()
        partial = await admin.describe_log_dirs(raise_on_broker_error=False)
    assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert dict(partial) == {} and partial.errors[1].code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_describe_log_dirs_many_brokers_one_down(cluster3):
    async with admin_for(cluster3) as admin:
        full = await admin.describe_log_dirs()
        assert sorted(full) == [1, 2, 3]
        assert [r.partition for r in full[3][0].replicas] == [2]
        down = cluster3.brokers[2]
        await down.stop()
        with pytest.raises(BrokerConnectionError) as info:
            await admin.describe_log_dirs(brokers=[1, 2, 3], timeout=FAIL_FAST)
        assert f"127.0.0.1:{down.port}" in str(info.value)
        partial = await admin.describe_log_dirs(brokers=[1, 2, 3], raise_on_broker_error=False, timeout=FAIL_FAST)
    assert sorted(partial) == [1, 3]
    # Within a short deadline a down broker surfaces as the connection failure, or as the deadline passing while
    # the client was still retrying it (on a loaded machine): both name broker 2 and nothing else.
    assert list(partial.errors) == [2]
    assert partial.errors[2].code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT)


async def test_describe_log_dirs_unknown_broker_id(cluster):
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_log_dirs(brokers=[9])
    assert info.value.code == ErrorCode.BROKER_NOT_AVAILABLE and "broker 9" in str(info.value)


# ================================================================================================ connection faults


async def test_connection_closed_mid_request_is_retried(cluster):
    broker = cluster.brokers[1]
    broker.add_script(35, "close")
    async with admin_for(cluster) as admin:
        result = await admin.describe_log_dirs(brokers=[1])
    assert len(result[1]) == 3
    assert len(cluster.requests(35)) == 2
    assert broker.connections == 2  # the retry went over a new connection


async def test_connection_closed_in_the_middle_of_a_response_is_retried(cluster):
    broker = cluster.brokers[1]
    broker.add_script(35, "truncate")
    async with admin_for(cluster) as admin:
        result = await admin.describe_log_dirs(brokers=[1])
    assert [d.path for d in result[1]] == ["/data/a", "/data/b", "/data/c"]
    assert len(cluster.requests(35)) == 2 and broker.connections == 2


async def test_connection_closed_every_time_gives_a_clear_error(cluster):
    broker = cluster.brokers[1]
    broker.add_script(35, *["close"] * 100)
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerConnectionError) as info:
            await admin.describe_log_dirs(brokers=[1], timeout=FAIL_FAST)
    message = str(info.value)
    assert f"127.0.0.1:{broker.port}" in message and "closed by the broker" in message
    assert info.value.code.name == "NETWORK_EXCEPTION"


async def test_a_deadline_that_runs_out_while_retrying_reports_why_it_retried(cluster):
    # The broker closes the connection, and the retry's metadata refresh then hangs past the call's deadline:
    # the caller hears the connection error that caused the retry, not just that time ran out.
    broker = cluster.brokers[1]
    broker.add_script(3, None, ("delay", 30))
    broker.add_script(35, "close")
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerConnectionError) as info:
            await admin.describe_log_dirs(brokers=[1], timeout=3)
    assert f"127.0.0.1:{broker.port}" in str(info.value) and "closed by the broker" in str(info.value)


async def test_slow_reply_times_out_then_a_retry_succeeds(cluster):
    broker = cluster.brokers[1]
    broker.add_script(60, ("delay", 5))
    async with admin_for(cluster, request_timeout=0.3) as admin:
        started = time.monotonic()
        description = await admin.describe_cluster(timeout=8)
        assert time.monotonic() - started < 4  # did not wait for the 5 s answer
    assert description.controller_id == 1
    assert broker.connections == 2  # the timed-out connection was dropped


async def test_reply_slower_than_the_call_timeout(cluster):
    cluster.brokers[1].add_script(60, ("delay", 5))
    async with admin_for(cluster) as admin:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError) as info:
            await admin.describe_cluster(timeout=0.4)
        assert time.monotonic() - started < 3
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert "DescribeCluster" in str(info.value) and f"127.0.0.1:{cluster.brokers[1].port}" in str(info.value)


async def test_pipelined_requests_share_one_connection(cluster3):
    async with admin_for(cluster3) as admin:
        results = await asyncio.gather(*(admin.describe_log_dirs(brokers=[b]) for b in (1, 2, 3) * 10))
        described = await asyncio.gather(*(admin.describe_cluster() for _ in range(20)))
    assert [r[b][0].path for r, b in zip(results, (1, 2, 3) * 10, strict=True)] == [
        f"/b{b}/d0" for b in (1, 2, 3) * 10]
    assert len({d.cluster_id for d in described}) == 1
    assert [cluster3.brokers[b].connections for b in (1, 2, 3)] == [1, 1, 1]


async def test_wrong_correlation_id_is_a_protocol_violation():
    async def serve(reader, writer):
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            decoder.feed(data)
            for frame in decoder.frames():
                key, version, corr = peek_api(frame)
                if key == 18:
                    body = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(3, 1, 12)])
                    reply = b"".join(encode_response(key, version, corr, body))
                else:
                    reply = struct.pack(">i", corr + 1) + b"\x00" * 8  # a response to some other request
                writer.write(encode_frame_size(len(reply)) + reply)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    admin = AdminClient(f"127.0.0.1:{port}")
    with pytest.raises(ProtocolViolation) as info:
        await admin.start(timeout=2)
    assert "correlation id" in str(info.value) and f"127.0.0.1:{port}" in str(info.value)
    await admin.close()
    server.close()
    await server.wait_closed()


async def test_undecodable_response_is_a_protocol_violation(cluster):
    cluster.brokers[1].add_script(60, lambda message, version: _Garbage())
    async with admin_for(cluster) as admin:
        with pytest.raises(ProtocolViolation) as info:
            await admin.describe_cluster()
        assert not info.value.retriable
        assert "DescribeCluster" in str(info.value)
        # The connection was dropped; the next call opens a new one and works.
        assert (await admin.describe_cluster()).controller_id == 1


class _Garbage:
    def encode_into(self, out, version):
        out.append(b"\x00\x00\x00\x00\xff")


# ================================================================================================ replica log dirs


async def test_describe_replica_log_dirs(cluster3):
    b1 = cluster3.brokers[1]
    b1.log_dirs = [LogDir("/x", replicas=[Replica("t", 0, 500, 0), Replica("u", 1, 9, -1)]),
                   LogDir("/y", replicas=[Replica("t", 0, 200, 30, True)])]
    async with admin_for(cluster3) as admin:
        info = await admin.describe_replica_log_dirs(
            [("t", 0, 1), TopicPartitionReplica("u", 1, 1), ("t", 1, 2), ("t", 5, 3)])
    assert info[("t", 0, 1)] == ReplicaLogDirInfo("/x", 0, 500, "/y", 30, 200)
    assert info[("u", 1, 1)] == ReplicaLogDirInfo("/x", None, 9, None, None, None)
    assert info[("t", 1, 2)] == ReplicaLogDirInfo("/b2/d0", 0, 20, None, None, None)
    assert info[("t", 5, 3)] == ReplicaLogDirInfo(None, None, None, None, None, None)  # not on that broker
    asked = cluster3.brokers[1].received[-1].message.topics
    assert sorted((t.topic, t.partitions) for t in asked) == [("t", [0]), ("u", [1])]


async def test_alter_replica_log_dirs(cluster):
    broker = cluster.brokers[1]
    async with admin_for(cluster) as admin:
        results = await admin.alter_replica_log_dirs({
            ("events", 1, 1): "/data/b",
            ("events", 2, 1): "/data/b",  # already there: accepted, nothing to do
            ("events", 9, 1): "/data/b",  # not hosted here (topic known)
            ("ghost", 0, 1): "/data/a",
            ("events", 0, 1): "/nowhere",
        })
        raised = await admin.alter_replica_log_dirs({("events", 0, 1): "/nowhere"}, raise_on_error=False)
        with pytest.raises(BrokerResponseError) as info:
            await admin.alter_replica_log_dirs({("events", 0, 1): "/nowhere"}, raise_on_error=True)
    codes = {k: (v.error.code if v.error else None) for k, v in results.items()}
    assert codes == {
        ("events", 1, 1): None, ("events", 2, 1): None,
        ("events", 9, 1): ErrorCode.REPLICA_NOT_AVAILABLE,
        ("ghost", 0, 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("events", 0, 1): ErrorCode.LOG_DIR_NOT_FOUND,
    }
    assert results[("events", 1, 1)].path == "/data/b"
    assert set(results.errors()) == {("events", 9, 1), ("ghost", 0, 1), ("events", 0, 1)}
    with pytest.raises(BrokerResponseError) as first:
        results.raise_first()
    assert first.value.code == ErrorCode.REPLICA_NOT_AVAILABLE and "events-9" in str(first.value)
    assert raised[("events", 0, 1)].error.code == ErrorCode.LOG_DIR_NOT_FOUND
    assert info.value.code == ErrorCode.LOG_DIR_NOT_FOUND
    # One request per broker, replicas grouped by target dir then topic.
    request = cluster.requests(34)[0].message
    assert [(d.path, [(t.name, t.partitions) for t in d.topics]) for d in request.dirs] == [
        ("/data/b", [("events", [1, 2, 9])]), ("/data/a", [("ghost", [0])]), ("/nowhere", [("events", [0])])]
    assert any(r.is_future and r.partition == 1 for r in broker.log_dirs[1].replicas)


async def test_alter_replica_log_dirs_broker_down(cluster3):
    async with admin_for(cluster3) as admin:
        await cluster3.brokers[3].stop()
        results = await admin.alter_replica_log_dirs(
            {("t", 0, 1): "/b1/d0", ("t", 2, 3): "/b3/d0", ("t", 1, 3): "/b3/d0"}, timeout=FAIL_FAST)
    assert results[("t", 0, 1)].error is None
    for key in (("t", 2, 3), ("t", 1, 3)):
        assert isinstance(results[key].error, BrokerConnectionError)


# ================================================================================================ topics


async def test_create_topics(cluster3):
    async with admin_for(cluster3) as admin:
        results = await admin.create_topics([
            NewTopic("a", 6, 3, {"retention.ms": "1000", "cleanup.policy": None}),
            NewTopic("b", assignments={0: [3, 1], 1: [1, 3]}),
        ])
        described = await admin.describe_topics(["a", "b"])
    assert results["a"].error is None and results["a"].topic_id == cluster3.topics["a"]["id"]
    assert (results["a"].num_partitions, results["a"].replication_factor) == (6, 3)
    assert len(described["a"].partitions) == 6
    assert [p.replicas for p in described["b"].partitions] == [(3, 1), (1, 3)]
    assert cluster3.topics["a"]["configs"] == {"retention.ms": "1000", "cleanup.policy": None}
    # Sent to the controller (broker 2), at v7, with what is left of the call's deadline as the broker's timeout.
    (request,) = cluster3.requests(19)
    assert request in cluster3.brokers[2].received and request.version == 7
    assert 0 < request.message.timeout_ms <= 30_000
    b = request.message.topics[1]
    assert (b.num_partitions, b.replication_factor) == (-1, -1)
    assert [(a.partition_index, a.broker_ids) for a in b.assignments] == [(0, [3, 1]), (1, [1, 3])]


async def test_create_topics_errors(cluster):
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerResponseError) as info:
            await admin.create_topics([NewTopic("events", 1, 1)])
        results = await admin.create_topics(
            [NewTopic("events", 1, 1), NewTopic("fine", 1, 1), NewTopic("zero", 0, 1), NewTopic("rf", 1, 3)],
            raise_on_error=False)
    assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and "already exists" in str(info.value)
    assert {n: (r.error.code if r.error else None) for n, r in results.items()} == {
        "events": ErrorCode.TOPIC_ALREADY_EXISTS, "fine": None, "zero": ErrorCode.INVALID_PARTITIONS,
        "rf": ErrorCode.INVALID_REPLICATION_FACTOR}


async def test_create_topics_validate_only(cluster):
    async with admin_for(cluster) as admin:
        results = await admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
    assert results["dry"].error is None and results["dry"].topic_id is None
    assert "dry" not in cluster.topics
    assert cluster.requests(19)[0].message.validate_only is True


async def test_create_topics_retries_only_the_topics_that_hit_not_controller(cluster3):
    R = CreateTopicsResponse
    made = []

    def first_answer(message, version):
        # "a" is created; "b" lands on a broker that is no longer the controller.
        cluster3.add_topic("a", 1)
        made.append([t.name for t in message.topics])
        return R(topics=[R.CreatableTopicResult(name="a", topic_id=cluster3.topics["a"]["id"], error_message=None),
                         R.CreatableTopicResult(name="b", error_code=ErrorCode.NOT_CONTROLLER, error_message="moved")])

    cluster3.brokers[2].add_script(19, first_answer)
    async with admin_for(cluster3) as admin:
        results = await admin.create_topics([NewTopic("a", 1, 1), NewTopic("b", 1, 1)])
    assert made == [["a", "b"]]
    assert [t.name for t in cluster3.requests(19)[1].message.topics] == ["b"]
    assert results["a"].error is None and results["b"].error is None and "b" in cluster3.topics


async def test_create_topics_negotiated_down(cluster):
    cluster.brokers[1].api_versions[19] = (2, 4)
    async with admin_for(cluster) as admin:
        results = await admin.create_topics([NewTopic("old", 2, 1)])
    assert cluster.requests(19)[0].version == 4
    # v4 answers carry no topic id nor counts: unknown, not zero.
    assert (results["old"].topic_id, results["old"].num_partitions) == (None, None)
    assert "old" in cluster.topics


@pytest.mark.parametrize("max_version", [6, 5, 1])
async def test_delete_topics(cluster, max_version):
    cluster.brokers[1].api_versions[20] = (1, max_version)
    async with admin_for(cluster) as admin:
        results = await admin.delete_topics(["events", "events"])
        with pytest.raises(BrokerResponseError) as info:
            await admin.delete_topics(["events"])
        quiet = await admin.delete_topics(["gone"], raise_on_error=False)
    assert list(results) == ["events"] and results["events"].error is None
    assert "events" not in cluster.topics
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "events" in str(info.value)
    assert quiet["gone"].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    request = cluster.requests(20)[0]
    assert request.version == max_version
    if max_version >= 6:
        assert [t.name for t in request.message.topics] == ["events"]
    else:
        assert request.message.topic_names == ["events"]


# ================================================================================================ configs


async def test_describe_configs(cluster3):
    cluster3.topics["t"]["configs"] = {"retention.ms": "5", "segment.bytes": "1024"}
    async with admin_for(cluster3) as admin:
        configs = await admin.describe_configs(
            [ConfigResource.topic("t"), ConfigResource.broker(3), (ConfigResourceType.BROKER, "2")])
        filtered = await admin.describe_configs([ConfigResource.topic("t")], keys=["segment.bytes"],
                                                include_synonyms=True, include_documentation=True)
    topic = configs[ConfigResource.topic("t")]
    assert {k: (e.value, e.source) for k, e in topic.items()} == {
        "retention.ms": ("5", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "segment.bytes": ("1024", ConfigSource.DYNAMIC_TOPIC_CONFIG)}
    assert configs[ConfigResource.broker(3)]["num.io.threads"].value == "8"
    assert configs[ConfigResource.broker(2)]["num.io.threads"].source == ConfigSource.STATIC_BROKER_CONFIG
    # A broker's own configs are asked of that broker.
    assert [r.message.resources[0].resource_name for r in cluster3.brokers[3].received if r.api_key == 32] == ["3"]
    assert [r.message.resources[0].resource_name for r in cluster3.brokers[2].received if r.api_key == 32] == ["2"]
    entry = filtered[ConfigResource.topic("t")]["segment.bytes"]
    assert list(filtered[ConfigResource.topic("t")]) == ["segment.bytes"]
    assert entry.documentation == "doc of segment.bytes"
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [("segment.bytes", "1024", 1)]


async def test_describe_configs_errors(cluster):
    async with admin_for(cluster) as admin:
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_configs([ConfigResource.topic("missing")])
        with pytest.raises(ValueError):
            await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "one")])
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "missing" in str(info.value)


async def test_incremental_alter_configs(cluster3):
    async with admin_for(cluster3) as admin:
        results = await admin.incremental_alter_configs({
            ConfigResource.topic("t"): {"retention.ms": "10", "flush.ms": "5"},
            ConfigResource.broker(2): [AlterConfigOp("num.io.threads", "16"),
                                       AlterConfigOp("log.retention.ms", op=AlterConfigOpType.DELETE)],
        })
        await admin.incremental_alter_configs({ConfigResource.topic("t"): {"flush.ms": None}})
        checked = await admin.incremental_alter_configs(
            {ConfigResource.topic("t"): {"retention.ms": "99"}}, validate_only=True)
        bad = await admin.incremental_alter_configs({
            ConfigResource.topic("t"): [AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.APPEND)],
            ConfigResource.topic("nope"): {"a": "b"},
        }, raise_on_error=False)
        with pytest.raises(BrokerResponseError) as info:
            await admin.incremental_alter_configs({ConfigResource.topic("nope"): {"a": "b"}})
    assert all(r.error is None for r in results.values()) and checked.errors() == {}
    assert cluster3.topics["t"]["configs"] == {"retention.ms": "10"}
    assert cluster3.brokers[2].configs == {"num.io.threads": "16"}
    assert bad[ConfigResource.topic("t")].error.code == ErrorCode.INVALID_CONFIG
    assert bad[ConfigResource.topic("nope")].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    sent = [r for r in cluster3.requests(44) if r.message.resources[0].resource_type == 4]
    assert sent and all(r in cluster3.brokers[2].received for r in sent)
    assert [(c.name, c.config_operation, c.value) for c in sent[0].message.resources[0].configs] == [
        ("num.io.threads", 0, "16"), ("log.retention.ms", 1, None)]


# ================================================================================================ sync wrapper


async def test_sync_client(cluster):
    def script() -> tuple:
        with SyncAdminClient(cluster.bootstrap, request_timeout=5) as admin:
            description = admin.describe_cluster()
            dirs = admin.describe_log_dirs(topics=["other"])
            created = admin.create_topics([NewTopic("from-sync", 1, 1)])
            connections = cluster.brokers[1].connections
        return description, dirs, created, connections

    # The sync client runs its own loop; run it in a thread so the fake broker keeps serving on this one.
    description, dirs, created, connections = await asyncio.to_thread(script)
    assert description.cluster_id == "fake-cluster-0001"
    assert [r for d in dirs[1] for r in d.replicas] == [ReplicaInfo("other", 0, 5, None, False)]
    assert created["from-sync"].error is None
    assert connections == 1  # one connection kept across the calls


def test_sync_client_reports_connection_errors():
    port = free_port()  # nothing listens there
    # Refused at once normally; on a loaded machine the short deadline may pass first. Either way the error
    # names the address that could not be reached.
    with pytest.raises((BrokerConnectionError, RequestTimeoutError), match=f"127.0.0.1:{port}"):
        SyncAdminClient(f"127.0.0.1:{port}", request_timeout=0.3).__enter__()


# ================================================================================================ helpers


async def _closed_port() -> int:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port
