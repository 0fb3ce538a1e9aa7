"""The controller listener of a real combined node, spoken to as a second broker would: registration and its
errors, heartbeats and session expiry, placement over both brokers, producer id blocks, and the connection
closed when a controller-only API reaches a broker listener (or a broker API the controller listener)."""

from __future__ import annotations

import time
import uuid

from broker_features import SUPPORTED_FEATURES
from datapath.support import RawClient, create_topic, metadata
from live import kafka_uuid, read_meta_properties

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    DescribeClusterRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from kjbod.protocol.generated.broker_registration_request import Listener

SESSION_MS = 1500


def registration(server, *, broker_id=2, cluster_id=None, dirs=None, incarnation=None, port=19092):
    return BrokerRegistrationRequest(
        features=SUPPORTED_FEATURES, broker_id=broker_id, cluster_id=server.cluster_id if cluster_id is None else cluster_id,
        incarnation_id=incarnation or uuid.uuid4(), rack=None,
        listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=port, security_protocol=0)],
        log_dirs=[uuid.uuid4()] if dirs is None else dirs)


def heartbeat(ctl, epoch, *, broker_id=2, offset=1 << 40, **kw):
    return ctl.call(BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset,
                                           **kw), 1)


def test_a_second_broker_registers_on_the_controller_listener(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"broker.session.timeout.ms": str(SESSION_MS),
                                             "broker.heartbeat.interval.ms": "200"})
    node1_dir = kafka_uuid(read_meta_properties(server.log_dirs[0])["directory.id"])
    with RawClient(server.host, server.controller_port) as ctl, RawClient.to(server) as raw:
        # Registration errors, each with nothing recorded.
        assert ctl.call(registration(server, cluster_id="another-cluster-id00000"), 4).error_code == \
            E.INCONSISTENT_CLUSTER_ID
        assert ctl.call(registration(server, dirs=[]), 4).error_code == E.INVALID_REGISTRATION
        assert ctl.call(registration(server, dirs=[uuid.UUID(int=1)]), 4).error_code == E.INVALID_REGISTRATION
        twice = uuid.uuid4()
        assert ctl.call(registration(server, dirs=[twice, twice]), 4).error_code == E.INVALID_REGISTRATION
        assert ctl.call(registration(server, dirs=[node1_dir]), 4).error_code == E.INVALID_REGISTRATION
        # Broker 1 is live in this process: another incarnation of it is refused.
        assert ctl.call(registration(server, broker_id=1), 4).error_code == E.DUPLICATE_BROKER_REGISTRATION

        incarnation, dirs = uuid.uuid4(), [uuid.uuid4()]
        reg = ctl.call(registration(server, incarnation=incarnation, dirs=dirs), 4)
        assert reg.error_code == 0 and reg.broker_epoch > 0
        assert heartbeat(ctl, reg.broker_epoch + 1).error_code == E.STALE_BROKER_EPOCH
        behind = heartbeat(ctl, reg.broker_epoch, offset=0)
        assert (behind.error_code, behind.is_caught_up, behind.is_fenced) == (0, False, True)
        up = heartbeat(ctl, reg.broker_epoch)
        assert (up.error_code, up.is_caught_up, up.is_fenced) == (0, True, False)

        # Placement now spreads over both brokers; Metadata lists both.
        assert create_topic(raw, "spread", 6).error_code == 0
        md = metadata(raw, ["spread"])
        assert sorted((b.node_id, b.port) for b in md.brokers) == [(1, server.port), (2, 19092)]
        leaders = [p.leader_id for p in md.topics[0].partitions]
        assert sorted(set(leaders)) == [1, 2] and leaders.count(2) == 3

        # Producer id blocks: broker 2's block and broker 1's ids never overlap.
        block = ctl.call(AllocateProducerIdsRequest(broker_id=2, broker_epoch=reg.broker_epoch), 0)
        assert block.error_code == 0
        mine = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 4).producer_id
        assert not block.producer_id_start <= mine < block.producer_id_start + block.producer_id_len
        assert ctl.call(AllocateProducerIdsRequest(broker_id=2, broker_epoch=7), 0).error_code == \
            E.STALE_BROKER_EPOCH

        # Broker 2 goes silent: fenced after the session timeout, its partitions without a leader.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            md = metadata(raw, ["spread"])
            if [b.node_id for b in md.brokers] == [1]:
                break
            time.sleep(0.1)
        parts = {p.partition_index: p for p in md.topics[0].partitions}
        assert [b.node_id for b in md.brokers] == [1]
        gone = [i for i, leader in enumerate(leaders) if leader == 2]
        assert all(parts[i].leader_id == -1 and parts[i].error_code == E.LEADER_NOT_AVAILABLE
                   and parts[i].offline_replicas == [2] for i in gone)
        cluster = raw.call(DescribeClusterRequest(include_fenced_brokers=True), 2)
        assert [(b.broker_id, b.is_fenced) for b in cluster.brokers] == [(1, False), (2, True)]

        # Back: the same incarnation registers again (same epoch), heartbeats, is unfenced and leads again.
        again = ctl.call(registration(server, incarnation=incarnation, dirs=dirs), 4)
        assert (again.error_code, again.broker_epoch) == (0, reg.broker_epoch)
        assert not heartbeat(ctl, reg.broker_epoch).is_fenced
        md = metadata(raw, ["spread"])
        assert [p.leader_id for p in md.topics[0].partitions] == leaders


def test_controller_only_apis_close_a_broker_listener_and_broker_apis_the_controller_listener(kjbod_server):
    server = kjbod_server
    with RawClient.to(server) as raw:
        raw.send(registration(server), 4)
        assert raw.closed_by_server()
    with RawClient.to(server) as raw:
        raw.send(BrokerHeartbeatRequest(broker_id=2, broker_epoch=1), 1)
        assert raw.closed_by_server()
    with RawClient(server.host, server.controller_port) as ctl:
        ctl.send(ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 9)
        assert ctl.closed_by_server()
