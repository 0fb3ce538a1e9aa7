"""The share coordinator on a three-broker cluster (`kjbod cluster up`): `__share_group_state` gets Kafka's default
three replicas, a broker that is not a key's coordinator answers NOT_COORDINATOR, and when the coordinator is
killed (SIGKILL) the broker that takes over its partition of `__share_group_state` serves the same state.

The persister over the RPCs (kjbod.broker.share.rpc_persister) is driven against the same brokers: it runs in a
broker, so here it is given a stand-in for the few things it reads of one (the metadata of `__share_group_state`
and the brokers' addresses, fetched from the live cluster with Metadata requests, and FindCoordinator to have the
topic made); its requests, their routing to each key's coordinator and its retries go to the real brokers."""

from __future__ import annotations

import asyncio
import signal
import time
from types import SimpleNamespace

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from kjbod.broker.coordinator_host import partition_for
from kjbod.broker.share.persister import ACKNOWLEDGED, AVAILABLE, InitializeData, StateBatch, WriteData
from kjbod.broker.share.rpc_persister import RpcPersister
from kjbod.broker.share.state_records import coordinator_key
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, MetadataRequest
from kjbod.protocol.generated.metadata_request import MetadataRequestTopic
from tests.cluster.conftest import running_cluster
from tests.share.test_state_coordinator_live import (
    ACKED,
    TOPIC,
    ask,
    batches_of,
    find,
    initialize,
    read,
    share_key,
    summary,
    topic_id,
    write,
)

pytestmark = pytest.mark.slow

WAIT_S = 90.0
RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class BrokerView:
    """What RpcPersister reads of its broker, kept from Metadata answers of the live brokers named in `ports`."""

    node_id = -1  # never one of the cluster's brokers: every request goes over a socket
    replication = SimpleNamespace(listener_name="PLAINTEXT", ssl_context=None, sasl=None)

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.topic = None
        self.brokers: dict[int, SimpleNamespace] = {}
        self.metadata = SimpleNamespace(topic=lambda name: self.topic if name == "__share_group_state" else None,
                                        brokers=self.brokers)
        self.share_coordinator = SimpleNamespace(ensure_topic=self.ensure_topic)
        self.share_persister = None

    async def ensure_topic(self) -> tuple[int, str | None]:
        for port in self.ports:
            try:
                await ask(port, FindCoordinatorRequest(key_type=2, coordinator_keys=["g:AAAAAAAAAAAAAAAAAAAAAA:0"]), 6)
                md = await ask(port, MetadataRequest(topics=[MetadataRequestTopic(name="__share_group_state")]), 12)
            except OSError:
                continue
            self.brokers.clear()
            for b in md.brokers:
                self.brokers[b.node_id] = SimpleNamespace(
                    endpoint=lambda _listener, b=b: SimpleNamespace(host=b.host, port=b.port))
            t = md.topics[0]
            if t.error_code == 0:
                self.topic = SimpleNamespace(partitions={p.partition_index: SimpleNamespace(leader=p.leader_id)
                                                         for p in t.partitions})
                return 0, None
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no broker answered"


def until_served(fn):
    """`fn()` -> {partition: result}, asked again while any result is an error a caller retries."""
    deadline = time.monotonic() + WAIT_S
    while True:
        got = fn()
        if all(r.error_code not in RETRIABLE for r in got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_state_survives_the_loss_of_its_coordinator(tmp_path):
    with running_cluster(tmp_path / "cluster", {"share.coordinator.state.topic.num.partitions": "3"},
                         log_dirs=1) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 3, 3)])
        finally:
            admin.close()
        brokers = cluster.broker_ids
        port = cluster.broker_port(brokers[0])
        tid = topic_id(port, TOPIC)

        (c,) = find(port, [share_key(tid, 0)])
        assert c.error_code == 0 and c.node_id in brokers
        old = c.node_id
        md = asyncio.run(ask(port, MetadataRequest(topics=[MetadataRequestTopic(name="__share_group_state")]), 12))
        assert {len(p.replica_nodes) for p in md.topics[0].partitions} == {3}
        other = next(b for b in brokers if b != old)
        refused = initialize(cluster.broker_port(other), tid, [0])[0]
        assert refused.error_code == ErrorCode.NOT_COORDINATOR and "not the share coordinator" in refused.error_message

        cport = cluster.broker_port(old)
        assert initialize(cport, tid, [0])[0].error_code == 0
        assert write(cport, tid, 0, [(0, 9, 0, 1)], start_offset=0).error_code == 0
        assert write(cport, tid, 0, [(0, 4, ACKED, 1)], leader_epoch=2).error_code == 0
        want = [(0, 4, ACKED, 1), (5, 9, 0, 1)]
        assert batches_of(read(cport, tid, [0], leader_epoch=2)[0]) == want

        # the persister: one call over partitions 0-2, routed to each key's coordinator
        view = BrokerView([cluster.broker_port(b) for b in brokers])
        persister = RpcPersister(view)
        loop = asyncio.new_event_loop()  # the persister's connections live on one loop, as in a broker
        run = loop.run_until_complete
        # a group whose first key shares its partition of __share_group_state (and so its coordinator) with the key
        # above: the kill below moves it too
        group = next(g for g in (f"sg-persisted-{i}" for i in range(1000))
                     if partition_for(coordinator_key(g, tid, 0), 3) == partition_for(share_key(tid, 0), 3))
        keys = [(tid, p) for p in range(3)]
        try:
            assert {k: a.error_code for k, a in run(persister.initialize(
                group, [InitializeData(tid, p, 1, 10 * p) for p in range(3)])).items()} == dict.fromkeys(keys, 0)
            assert {k: a.error_code for k, a in run(persister.write(group, [
                WriteData(tid, p, 1, 3, -1, (StateBatch(10 * p, 10 * p + 2, ACKNOWLEDGED, 1),
                                             StateBatch(10 * p + 3, 10 * p + 5, AVAILABLE, 2)))
                for p in range(3)])).items()} == dict.fromkeys(keys, 0)
            fenced = run(persister.write(group, [WriteData(tid, 1, 0, 3, -1, ())]))
            assert fenced[(tid, 1)].error_code == ErrorCode.FENCED_STATE_EPOCH
            got = run(persister.read(group, [(tid, p, 3) for p in range(3)]))
            assert {k: (a.error_code, a.state_epoch, a.start_offset, a.batches) for k, a in got.items()} == {
                (tid, p): (0, 1, 10 * p, (StateBatch(10 * p, 10 * p + 2, ACKNOWLEDGED, 1),
                                          StateBatch(10 * p + 3, 10 * p + 5, AVAILABLE, 2))) for p in range(3)}
            summaries = run(persister.read_summary(group, [(tid, p, 3) for p in range(3)]))
            assert {k: (a.error_code, a.leader_epoch, a.start_offset) for k, a in summaries.items()} == {
                (tid, p): (0, 3, 10 * p) for p in range(3)}

            # SIGKILL the coordinator of the first key: a survivor takes over its partition and serves the state
            cluster.signal(f"broker-{old}", signal.SIGKILL)
            survivor = next(b for b in brokers if b != old)
            deadline = time.monotonic() + WAIT_S
            while (new := find(cluster.broker_port(survivor), [share_key(tid, 0)])[0].node_id) in (-1, old):
                assert time.monotonic() < deadline, "no new share coordinator"
                time.sleep(0.2)
            got0 = until_served(lambda: read(cluster.broker_port(new), tid, [0], leader_epoch=2))[0]
            assert (got0.error_code, got0.start_offset, batches_of(got0)) == (0, 0, want)
            assert read(cluster.broker_port(new), tid, [0], leader_epoch=1)[0].error_code == \
                ErrorCode.FENCED_LEADER_EPOCH
            s = summary(cluster.broker_port(new), tid, [0])[0]
            assert (s.error_code, s.leader_epoch, s.start_offset) == (0, 2, 0)

            # the persister finds the new coordinators by itself (its first tries may reach the dead broker)
            assert find(cluster.broker_port(survivor), [share_key(tid, 0, group)])[0].node_id == new
            view.ports = [cluster.broker_port(b) for b in brokers if b != old]
            got = run(persister.read(group, [(tid, p, 3) for p in range(3)]))
            assert {k: (a.error_code, a.start_offset) for k, a in got.items()} == {
                (tid, p): (0, 10 * p) for p in range(3)}
            deleted = run(persister.delete(group, keys))
            assert {k: a.error_code for k, a in deleted.items()} == dict.fromkeys(keys, 0)
            gone = run(persister.read(group, [(tid, 0, 3)]))[(tid, 0)]
            assert gone.error_code == ErrorCode.INVALID_REQUEST
        finally:
            persister.close()
            run(asyncio.sleep(0))
            loop.close()
