"""transaction.version 2 on a three-broker cluster (`kjbod cluster up`): the partition leaders that are not the
transaction's coordinator add their partitions to it over the network (AddPartitionsToTxn v5 without
VerifyOnly), and the coordinator's WriteTxnMarkers v2 reach the other leaders with the bumped epoch; a late batch
of the ended transaction is refused by its leader, and read_committed readers see only the committed records."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.storage.records import build_batch
from tests.cluster.conftest import running_cluster

from .test_txn_cluster_live import read_committed

pytestmark = pytest.mark.slow

WAIT_S = 90.0
TOPIC = "txn-events"  # the name read_committed reads


async def call(port: int, message, version: int):
    conn = await ClientConnection.open("127.0.0.1", port, client_id="tv2-test", connect_timeout=10.0)
    try:
        return await conn.request(message.API_KEY, version, message, 30.0)
    finally:
        conn.close()


def retried(port: int, message, version: int, code_of, busy: tuple[int, ...]):
    deadline = time.monotonic() + WAIT_S
    while True:
        r = asyncio.run(call(port, message, version))
        if code_of(r) not in busy or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def produce_code(r) -> int:
    return r.responses[0].partition_responses[0].error_code


def test_leaders_add_partitions_to_a_remote_coordinator_and_markers_carry_the_bump(tmp_path):
    tid = "tv2-cluster"
    with running_cluster(tmp_path / "cluster", {"transaction.state.log.num.partitions": "3"},
                         log_dirs=1) as cluster:
        done = subprocess.run([sys.executable, "-m", "kjbod", "features", "--bootstrap-server", cluster.bootstrap,
                               "upgrade", "--feature", "transaction.version=2"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 3, 3)])
            deadline = time.monotonic() + WAIT_S
            while True:
                [meta] = admin.describe_topics([TOPIC])
                leaders = {q["partition_index"]: q["leader_id"] for q in meta["partitions"]}
                if len(leaders) == 3 and all(v >= 0 for v in leaders.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            admin.close()
        first = cluster.broker_port(cluster.broker_ids[0])
        # Every broker sees level 2 before the producer starts (the leaders' own decisions do not depend on it).
        deadline = time.monotonic() + WAIT_S
        for b in cluster.broker_ids:
            while True:
                r = asyncio.run(call(cluster.broker_port(b), ApiVersionsRequest(
                    client_software_name="t", client_software_version="1"), 3))
                if {f.name: f.max_version_level for f in r.finalized_features}.get("transaction.version") == 2:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.2)
        found = retried(first, FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]), 4,
                        lambda r: r.coordinators[0].error_code,
                        (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
        coordinator = found.coordinators[0].node_id
        assert coordinator in cluster.broker_ids
        cport = cluster.broker_port(coordinator)
        init = retried(cport, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000), 5,
                       lambda r: r.error_code,
                       (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS))
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        # Leaders other than the coordinator must be among the three (a topic of three partitions over three
        # brokers with replication factor 3 places leaders on each).
        assert any(leader != coordinator for leader in leaders.values())

        def produce(partition: int, value: bytes, epoch_: int, seq: int) -> int:
            batch = build_batch([(None, value, [], int(time.time() * 1000))], producer_id=pid,
                                producer_epoch=epoch_, base_sequence=seq, is_transactional=True)
            request = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
                TopicProduceData(name=TOPIC, partition_data=[PartitionProduceData(index=partition, records=batch)])])
            return produce_code(retried(cluster.broker_port(leaders[partition]), request, 12, produce_code,
                                        (ErrorCode.NOT_ENOUGH_REPLICAS,)))

        def end(commit: bool, epoch_: int):
            return retried(cport, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch_,
                                                committed=commit), 5, lambda r: r.error_code,
                           (ErrorCode.CONCURRENT_TRANSACTIONS,))

        assert [produce(p, f"c{p}".encode(), epoch, 0) for p in range(3)] == [0, 0, 0]
        r = end(True, epoch)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
        assert [produce(p, f"a{p}".encode(), epoch + 1, 0) for p in range(3)] == [0, 0, 0]
        r = end(False, epoch + 1)
        assert (r.error_code, r.producer_epoch) == (0, epoch + 2)
        # A batch of the committed transaction arriving late, at a leader that may not be the coordinator.
        assert [produce(p, b"late", epoch + 1, 1) for p in range(3)] == [ErrorCode.INVALID_PRODUCER_EPOCH] * 3
        assert read_committed(cluster.bootstrap, 3) == [b"c0", b"c1", b"c2"]
