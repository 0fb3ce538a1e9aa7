"""AdminClient against a real `kjbod serve` (combined broker+controller, three log dirs) on 127.0.0.1.

Every admin method is exercised here.  Tests that need a server handler not written yet are marked
`xfail(strict=True)`: the moment the handler lands they pass, strict turns that into a failure, and the mark must
be removed (the reason names the handler).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from live import LiveServer, kafka_uuid, read_meta_properties

from kjbod.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    BrokerConnectionError,
    BrokerNode,
    BrokerResponseError,
    ConfigResource,
    ErrorCode,
    NewPartitions,
    NewTopic,
    RequestTimeoutError,
    SyncAdminClient,
)
from tests.datapath.support import RawClient, batch, list_offset, produce

pytestmark = pytest.mark.slow


def _missing(handler: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"server handler for {handler} not implemented yet")


def admin_for(server: LiveServer, **options) -> AdminClient:
    options.setdefault("request_timeout", 15)
    return AdminClient(server.bootstrap, **options)


# ================================================================================================ answered now


async def test_bootstrap_negotiates_versions(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        assert admin.brokers == {1: BrokerNode(1, "127.0.0.1", kjbod_server.port)}
        assert admin.cluster_id == kjbod_server.cluster_id
        (task,) = admin._connections.values()
        conn = task.result()
        # ApiVersions answered: the ranges the client picks from include what it just used.
        assert conn.api_versions[18][1] >= 3 and conn.api_versions[3][0] <= 1 <= conn.api_versions[3][1]
        assert conn.pick_version(18) == min(4, conn.api_versions[18][1])


async def test_describe_cluster(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        description = await admin.describe_cluster()
    assert description.cluster_id == kjbod_server.cluster_id
    assert [(b.node_id, b.host, b.port) for b in description.brokers] == [(1, "127.0.0.1", kjbod_server.port)]
    assert description.controller_id == 1


async def test_metadata_for_unknown_topic(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        with pytest.raises(BrokerResponseError) as info:
            await admin.describe_topics(["no-such-topic"])
        assert "no-such-topic" not in await admin.describe_topics()
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_sync_client(kjbod_server):
    with SyncAdminClient(kjbod_server.bootstrap, request_timeout=15) as admin:
        first = admin.describe_cluster()
        second = admin.describe_cluster()
    assert first == second and first.cluster_id == kjbod_server.cluster_id


async def test_pipelined_calls_on_one_connection(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        answers = await asyncio.gather(*(admin.describe_cluster() for _ in range(50)))
        assert len(admin._connections) == 1
    assert {a.cluster_id for a in answers} == {kjbod_server.cluster_id}


async def test_server_going_away_gives_a_clear_error(kjbod_server):
    async with admin_for(kjbod_server, retry_backoff=0.05) as admin:
        await admin.describe_cluster()
        assert kjbod_server.stop() == 0  # SIGTERM: a clean exit
        started = time.monotonic()
        with pytest.raises(BrokerConnectionError) as info:
            await admin.describe_cluster(timeout=1)
        assert time.monotonic() - started < 5
    assert kjbod_server.bootstrap in str(info.value)
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION


# ================================================================================================ topics


async def test_create_and_describe_topics(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        created = await admin.create_topics([NewTopic("orders", 6, 1, {"retention.ms": "3600000"})])
        topics = await admin.describe_topics(["orders"])
        with pytest.raises(BrokerResponseError) as again:
            await admin.create_topics([NewTopic("orders", 6, 1)])
        checked = await admin.create_topics([NewTopic("dry-run", 2, 1)], validate_only=True)
        assert "dry-run" not in await admin.describe_topics()
        bad = await admin.create_topics([NewTopic("too-many-replicas", 1, 3)], raise_on_error=False)
    result = created["orders"]
    assert result.error is None and result.topic_id == topics["orders"].topic_id
    assert [p.partition for p in topics["orders"].partitions] == list(range(6))
    assert all(p.replicas == (1,) and p.leader == 1 for p in topics["orders"].partitions)
    assert again.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert checked["dry-run"].error is None
    assert bad["too-many-replicas"].error.code == ErrorCode.INVALID_REPLICATION_FACTOR


async def test_delete_topics(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("doomed", 2, 1)])
        deleted = await admin.delete_topics(["doomed"])
        with pytest.raises(BrokerResponseError) as missing:
            await admin.delete_topics(["doomed"])
        assert "doomed" not in await admin.describe_topics()
    assert deleted["doomed"].error is None
    assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_create_partitions(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("growing", 2, 1)])
        grown = await admin.create_partitions({"growing": 4})
        placed = await admin.create_partitions({"growing": NewPartitions(5, [[1]])})
        checked = await admin.create_partitions({"growing": 9}, validate_only=True)
        topics = await admin.describe_topics(["growing"])
        bad = await admin.create_partitions({"growing": 3, "no-such-topic": 2, "too-many": NewPartitions(2, [[1, 7]])},
                                            raise_on_error=False)
        with pytest.raises(BrokerResponseError) as same:
            await admin.create_partitions({"growing": 5})
    assert grown["growing"].error is None and placed["growing"].error is None and checked["growing"].error is None
    assert [(p.partition, p.replicas) for p in topics["growing"].partitions] == [(i, (1,)) for i in range(5)]
    assert list(bad) == ["growing", "no-such-topic", "too-many"]
    assert bad["growing"].error.code == ErrorCode.INVALID_PARTITIONS  # fewer than it has
    assert bad["no-such-topic"].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert bad["too-many"].error is not None
    assert same.value.code == ErrorCode.INVALID_PARTITIONS and same.value.api == "CreatePartitions"


def test_create_partitions_and_delete_records_sync(kjbod_server):
    with SyncAdminClient(kjbod_server.bootstrap, request_timeout=15) as admin:
        admin.create_topics([NewTopic("sync-grown", 1, 1)])
        assert admin.create_partitions({"sync-grown": 2})["sync-grown"].error is None
        assert len(admin.describe_topics(["sync-grown"])["sync-grown"].partitions) == 2
        result = admin.delete_records({("sync-grown", 1): -1})
    assert result[("sync-grown", 1)].low_watermark == 0 and result[("sync-grown", 1)].error is None


async def test_delete_records(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("trimmed", 2, 1)])
        with RawClient.to(kjbod_server) as raw:
            for partition, count in ((0, 10), (1, 3)):
                records = batch([b"v%d" % i for i in range(count)])
                assert produce(raw, "trimmed", partition, records).error_code == 0
            deleted = await admin.delete_records({("trimmed", 0): 4, ("trimmed", 1): -1})
            earliest = [list_offset(raw, "trimmed", p, -2).offset for p in (0, 1)]
            mixed = await admin.delete_records({("trimmed", 0): 6, ("trimmed", 1): 50},
                                               raise_on_error=False)
            with pytest.raises(BrokerResponseError) as beyond:
                await admin.delete_records({("trimmed", 1): 4})
            earliest_after = [list_offset(raw, "trimmed", p, -2).offset for p in (0, 1)]
    assert [(r.topic, r.partition, r.low_watermark, r.error) for r in deleted.values()] == [
        ("trimmed", 0, 4, None), ("trimmed", 1, 3, None)]
    assert earliest == [4, 3]
    assert mixed[("trimmed", 0)].low_watermark == 6 and mixed[("trimmed", 0)].error is None
    assert mixed[("trimmed", 1)].low_watermark is None
    assert mixed[("trimmed", 1)].error.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert beyond.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and beyond.value.api == "DeleteRecords"
    assert earliest_after == [6, 3]


async def test_delete_records_of_a_partition_that_does_not_exist_ends_at_the_deadline(kjbod_server):
    """As Kafka's admin client, a partition Metadata does not know is looked up again (it may be new) until the
    call's deadline; then it gets the code Metadata gave, while the partitions that exist are answered."""
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("present", 1, 1)])
        result = await admin.delete_records({("present", 0): 0, ("present", 3): 0, ("absent", 0): 0},
                                            raise_on_error=False, timeout=2)
        closed = AdminClient(kjbod_server.bootstrap, request_timeout=15)
        await closed.close()
        with pytest.raises(RuntimeError):
            await closed.delete_records({("present", 0): 0})
    assert result[("present", 0)].error is None and result[("present", 0)].low_watermark == 0
    for tp in (("present", 3), ("absent", 0)):
        assert result[tp].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and result[tp].low_watermark is None
    assert not isinstance(result[("absent", 0)].error, RequestTimeoutError)


# ================================================================================================ log dirs


async def test_describe_log_dirs_reports_every_configured_dir(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        result = await admin.describe_log_dirs()
    assert list(result) == [1] and result.errors == {}
    dirs = {d.path: d for d in result[1]}
    assert sorted(dirs) == sorted(str(p) for p in kjbod_server.log_dirs)
    for path in kjbod_server.log_dirs:
        info = dirs[str(path)]
        assert info.error is None
        assert info.directory_id == kafka_uuid(read_meta_properties(path)["directory.id"])
        assert info.total_bytes > 0 and 0 <= info.usable_bytes <= info.total_bytes


async def test_describe_log_dirs_with_topics(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("spread", 6, 1), NewTopic("other", 1, 1)])
        result = await admin.describe_log_dirs(topics=["spread"])
        pairs = await admin.describe_log_dirs(topics=[("spread", 0), ("other", 0)])
    replicas = [r for d in result[1] for r in d.replicas]
    assert sorted(r.partition for r in replicas) == list(range(6))
    assert all(r.topic == "spread" and not r.is_future and r.size >= 0 for r in replicas)
    # Six partitions over three empty dirs: placement spreads them.
    assert len({d.path for d in result[1] if d.replicas}) > 1
    assert sorted((r.topic, r.partition) for d in pairs[1] for r in d.replicas) == [("other", 0), ("spread", 0)]


async def test_move_a_replica_between_log_dirs(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("mover", 1, 1)])
        before = (await admin.describe_replica_log_dirs([("mover", 0, 1)]))[("mover", 0, 1)]
        target = next(str(p) for p in kjbod_server.log_dirs if str(p) != before.current_dir)
        moved = await admin.alter_replica_log_dirs({("mover", 0, 1): target})
        assert moved[("mover", 0, 1)].error is None
        deadline = time.monotonic() + 30
        while True:
            now = (await admin.describe_replica_log_dirs([("mover", 0, 1)]))[("mover", 0, 1)]
            if now.current_dir == target and now.future_dir is None:
                break
            assert time.monotonic() < deadline, f"replica still at {now}"
            await asyncio.sleep(0.2)


async def test_alter_replica_log_dirs_errors(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("fixed", 1, 1)])
        results = await admin.alter_replica_log_dirs({
            ("fixed", 0, 1): "/not/a/log/dir",
            ("no-such-topic", 0, 1): str(kjbod_server.log_dirs[0]),
        })
    assert results[("fixed", 0, 1)].error.code == ErrorCode.LOG_DIR_NOT_FOUND
    assert results[("no-such-topic", 0, 1)].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ================================================================================================ configs


async def test_describe_broker_configs(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        configs = await admin.describe_configs([ConfigResource.broker(1)])
        only = await admin.describe_configs([ConfigResource.broker(1)], keys=["log.dirs"])
    broker = configs[ConfigResource.broker(1)]
    assert broker["log.dirs"].value == ",".join(str(p) for p in kjbod_server.log_dirs)
    assert broker["node.id"].value == "1"
    assert list(only[ConfigResource.broker(1)]) == ["log.dirs"]


async def test_describe_topic_configs(kjbod_server):
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("configured", 1, 1, {"retention.ms": "12345"})])
        configs = await admin.describe_configs([ConfigResource.topic("configured")])
        with pytest.raises(BrokerResponseError) as missing:
            await admin.describe_configs([ConfigResource.topic("no-such-topic")])
    assert configs[ConfigResource.topic("configured")]["retention.ms"].value == "12345"
    assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_incremental_alter_configs(kjbod_server):
    topic = ConfigResource.topic("tuned")
    throttle = "replica.alter.log.dirs.io.max.bytes.per.second"
    async with admin_for(kjbod_server) as admin:
        await admin.create_topics([NewTopic("tuned", 1, 1)])
        await admin.incremental_alter_configs({topic: {"retention.ms": "777"}})
        await admin.incremental_alter_configs({ConfigResource.broker(1): [AlterConfigOp(throttle, "1048576")]})
        after = await admin.describe_configs([topic, ConfigResource.broker(1)], keys=["retention.ms", throttle])
        await admin.incremental_alter_configs({topic: [AlterConfigOp("retention.ms", op=AlterConfigOpType.DELETE)]})
        reset = await admin.describe_configs([topic], keys=["retention.ms"])
        bad = await admin.incremental_alter_configs({topic: {"retention.ms": "not-a-number"}}, raise_on_error=False)
    assert after[topic]["retention.ms"].value == "777"
    assert after[ConfigResource.broker(1)][throttle].value == "1048576"
    assert reset[topic]["retention.ms"].value != "777"
    assert bad[topic].error.code == ErrorCode.INVALID_CONFIG
