"""KIP-858 over the controller listener of a real combined node, spoken to as a second broker with three dirs
would: AssignReplicasToDirs places its replicas (and is refused on a broker listener), a heartbeat naming a dir
it never registered gets LOG_DIR_NOT_FOUND, and a failed dir takes the leadership of exactly its partitions
while the broker stays unfenced."""

from __future__ import annotations

import uuid

from datapath.support import RawClient, create_topic, metadata

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import AssignReplicasToDirsRequest, DescribeClusterRequest
from kjbod.protocol.generated.assign_replicas_to_dirs_request import DirectoryData, PartitionData, TopicData

from .test_controller_listener_live import heartbeat, registration


def assignment(broker_epoch, topic_id, placements):
    return AssignReplicasToDirsRequest(broker_id=2, broker_epoch=broker_epoch, directories=[
        DirectoryData(id=d, topics=[TopicData(topic_id=topic_id, partitions=[PartitionData(partition_index=i)
                                                                             for i in parts])])
        for d, parts in placements.items()])


def test_a_three_dir_broker_assigns_its_replicas_and_loses_one_dir(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"broker.session.timeout.ms": "60000"})
    dirs = [uuid.uuid4() for _ in range(3)]
    with RawClient(server.host, server.controller_port) as ctl, RawClient.to(server) as raw:
        reg = ctl.call(registration(server, dirs=dirs), 4)
        assert reg.error_code == 0 and not heartbeat(ctl, reg.broker_epoch).is_fenced
        assert create_topic(raw, "jbod", 8).error_code == 0
        md = metadata(raw, ["jbod"])
        topic_id = md.topics[0].topic_id
        mine = sorted(p.partition_index for p in md.topics[0].partitions if p.leader_id == 2)
        assert len(mine) == 4
        placed = {dirs[0]: mine[:2], dirs[1]: mine[2:3], dirs[2]: mine[3:]}

        # On a broker listener the connection is closed (a controller-only API).
        with RawClient.to(server) as wrong:
            wrong.send(assignment(reg.broker_epoch, topic_id, placed), 0)
            assert wrong.closed_by_server()
        assert ctl.call(assignment(reg.broker_epoch + 1, topic_id, placed), 0).error_code == E.STALE_BROKER_EPOCH
        resp = ctl.call(assignment(reg.broker_epoch, topic_id, placed), 0)
        assert resp.error_code == 0
        assert {(d.id, p.partition_index, p.error_code) for d in resp.directories for t in d.topics
                for p in t.partitions} == {(d, i, 0) for d, parts in placed.items() for i in parts}

        # A dir it never registered: refused, nothing changes.
        assert heartbeat(ctl, reg.broker_epoch, offline_log_dirs=[uuid.uuid4()]).error_code == E.LOG_DIR_NOT_FOUND
        assert [p.leader_id for p in metadata(raw, ["jbod"]).topics[0].partitions].count(2) == 4

        # dirs[0] fails: its two partitions lose their leader, the others keep broker 2, which stays unfenced.
        failed = heartbeat(ctl, reg.broker_epoch, offline_log_dirs=[dirs[0]])
        assert (failed.error_code, failed.is_fenced) == (0, False)
        leaders = {p.partition_index: p.leader_id for p in metadata(raw, ["jbod"]).topics[0].partitions}
        assert [i for i in mine if leaders[i] == -1] == mine[:2]
        assert all(leaders[i] == 2 for i in mine[2:])
        cluster = raw.call(DescribeClusterRequest(include_fenced_brokers=True), 2)
        assert [(b.broker_id, b.is_fenced) for b in cluster.brokers] == [(1, False), (2, False)]
        # Resent with the next heartbeat: accepted, nothing more changes.
        assert heartbeat(ctl, reg.broker_epoch, offline_log_dirs=[dirs[0]]).error_code == 0
