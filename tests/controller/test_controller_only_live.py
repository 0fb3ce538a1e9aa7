"""process.roles=controller: a controller-only `kjbod serve`, configured with Kafka's keys and formatted with
`kjbod format`, serves brokers on its controller listener only, keeps what they registered and created across a
restart (replaying its metadata log), and answers Fetch of the metadata log on that listener."""

from __future__ import annotations

import asyncio
import uuid

from broker_features import SUPPORTED_FEATURES
from datapath.support import RawClient
from live import LiveServer, format_storage, free_port, new_cluster_id

from kjbod.broker.metadata_follower import MetadataFollower
from kjbod.metadata import EMPTY_IMAGE, replay
from kjbod.net.controller_channel import SocketControllerChannel
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DescribeClusterRequest,
    MetadataRequest,
)
from kjbod.protocol.generated.broker_registration_request import Listener


def controller_only(tmp_path, **extra: str) -> LiveServer:
    port = free_port()
    server = LiveServer(node_id=100, cluster_id=new_cluster_id(), port=port, controller_port=port,
                        directory=tmp_path, config=tmp_path / "controller.properties",
                        log_dirs=[tmp_path / "meta"], metadata_dir=tmp_path / "meta",
                        stderr_path=tmp_path / "stderr.log")
    server.config.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "controller", "node.id": "100", "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.voters": f"100@127.0.0.1:{port}",
        "log.dirs": str(tmp_path / "meta"), "broker.session.timeout.ms": "60000", **extra,
    }.items()))
    format_storage(server.config, server.cluster_id)
    server.start()
    return server


def test_controller_only_process(tmp_path):
    server = controller_only(tmp_path)
    try:
        broker_dir = uuid.uuid4()
        with RawClient(server.host, server.port) as ctl:
            reg = ctl.call(BrokerRegistrationRequest(
                features=SUPPORTED_FEATURES, broker_id=1, cluster_id=server.cluster_id, incarnation_id=uuid.uuid4(), log_dirs=[broker_dir],
                listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)]), 4)
            assert reg.error_code == 0
            hb = ctl.call(BrokerHeartbeatRequest(broker_id=1, broker_epoch=reg.broker_epoch,
                                                 current_metadata_offset=1 << 40), 1)
            assert (hb.error_code, hb.is_fenced) == (0, False)
            created = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[CreateTopicsRequest.CreatableTopic(
                name="t", num_partitions=4, replication_factor=-1)]), 7)
            assert created.topics[0].error_code == 0
            rf2 = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[CreateTopicsRequest.CreatableTopic(
                name="u", num_partitions=1, replication_factor=2)]), 7)
            assert rf2.topics[0].error_code == E.INVALID_REPLICATION_FACTOR
            assert "only 1 broker(s) are registered" in rf2.topics[0].error_message
            cluster = ctl.call(DescribeClusterRequest(endpoint_type=2), 1)
            assert [(b.broker_id, b.port) for b in cluster.brokers] == [(100, server.port)]
        with RawClient(server.host, server.port) as ctl:
            ctl.send(MetadataRequest(topics=None), 12)  # a broker API on the controller listener
            assert ctl.closed_by_server()
        assert server.stop() == 0
        server.start()
        with RawClient(server.host, server.port) as ctl:
            again = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[CreateTopicsRequest.CreatableTopic(
                name="t", num_partitions=4, replication_factor=-1)]), 7)
            assert again.topics[0].error_code == E.TOPIC_ALREADY_EXISTS
            # The broker registered before the restart is still known: a stale epoch is told so.
            stale = ctl.call(BrokerHeartbeatRequest(broker_id=1, broker_epoch=reg.broker_epoch + 1,
                                                    current_metadata_offset=0), 1)
            assert stale.error_code == E.STALE_BROKER_EPOCH
            ok = ctl.call(BrokerHeartbeatRequest(broker_id=1, broker_epoch=reg.broker_epoch,
                                                 current_metadata_offset=1 << 40), 1)
            assert (ok.error_code, ok.is_fenced) == (0, False)
    finally:
        server.stop()


async def test_a_broker_follows_the_metadata_log_over_the_controller_listener(tmp_path):
    """Fetch and FetchSnapshot on the controller listener: an observer on a socket channel replays the log into
    an image holding what the controller wrote."""
    server = controller_only(tmp_path)
    try:
        with RawClient(server.host, server.port) as ctl:
            reg = ctl.call(BrokerRegistrationRequest(
                features=SUPPORTED_FEATURES, broker_id=1, cluster_id=server.cluster_id, incarnation_id=uuid.uuid4(), log_dirs=[uuid.uuid4()],
                listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)]), 4)
            ctl.call(BrokerHeartbeatRequest(broker_id=1, broker_epoch=reg.broker_epoch,
                                            current_metadata_offset=1 << 40), 1)
            created = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[CreateTopicsRequest.CreatableTopic(
                name="followed", num_partitions=3, replication_factor=-1)]), 7)
            assert created.topics[0].error_code == 0
        images = [EMPTY_IMAGE]

        def on_batch(batch) -> None:
            images.append(replay(EMPTY_IMAGE if batch.snapshot else images[-1], batch.records, batch.base_offset))

        channel = SocketControllerChannel([(server.host, server.port)], request_timeout=10)
        follower = MetadataFollower(channel, node_id=7, cluster_id=server.cluster_id, on_batch=on_batch)
        follower.start()
        try:
            async with asyncio.timeout(60):
                while images[-1].topic("followed") is None:
                    await follower.wait_for_offset(follower.last_applied_offset + 1)
        finally:
            await follower.close()
            channel.close()
        assert sorted(images[-1].topic("followed").partitions) == [0, 1, 2]
        assert list(images[-1].brokers) == [1]
    finally:
        server.stop()


def snapshots_after_a_restart(tmp_path, **extra: str) -> tuple[list[str], int, str]:
    """Registers a broker and creates 20 topics on a controller-only process, restarts it; the snapshot files in
    its metadata log, what a repeated create of the last topic answers after the restart, and its log."""
    tmp_path.mkdir()
    server = controller_only(tmp_path, **extra)
    try:
        with RawClient(server.host, server.port) as ctl:
            reg = ctl.call(BrokerRegistrationRequest(
                features=SUPPORTED_FEATURES, broker_id=1, cluster_id=server.cluster_id, incarnation_id=uuid.uuid4(), log_dirs=[uuid.uuid4()],
                listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)]), 4)
            ctl.call(BrokerHeartbeatRequest(broker_id=1, broker_epoch=reg.broker_epoch,
                                            current_metadata_offset=1 << 40), 1)
            for i in range(20):
                created = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[
                    CreateTopicsRequest.CreatableTopic(name=f"s{i}", num_partitions=4, replication_factor=-1)]), 7)
                assert created.topics[0].error_code == 0
        assert server.stop() == 0
        snapshots = sorted(p.name for p in (tmp_path / "meta" / "__cluster_metadata-0").glob("*.checkpoint"))
        server.start()
        with RawClient(server.host, server.port) as ctl:
            again = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[CreateTopicsRequest.CreatableTopic(
                name="s19", num_partitions=4, replication_factor=-1)]), 7)
        return snapshots, again.topics[0].error_code, server.stderr(400)
    finally:
        server.stop()


def test_snapshot_interval_key_makes_the_controller_snapshot_and_a_restart_loads_it(tmp_path):
    # metadata.log.max.record.bytes.between.snapshots at Kafka's default (20 MiB): 20 small topics write no snapshot.
    none, code, _ = snapshots_after_a_restart(tmp_path / "default")
    assert none == [] and code == E.TOPIC_ALREADY_EXISTS
    # At 2 KiB the controller snapshots as it goes, and the restarted one starts from the newest snapshot.
    some, code, logged = snapshots_after_a_restart(
        tmp_path / "small", **{"metadata.log.max.record.bytes.between.snapshots": "2048"})
    assert some and code == E.TOPIC_ALREADY_EXISTS
    loaded = [line for line in logged.splitlines() if "metadata_log_loaded" in line]
    assert loaded and "snapshot=None" not in loaded[-1] and '"snapshot": null' not in loaded[-1], loaded[-1]


def test_a_lone_controller_answers_the_quorum_apis_as_its_quorums_only_voter(tmp_path):
    """Vote, BeginQuorumEpoch, EndQuorumEpoch and DescribeQuorum on the controller listener of a controller that is
    its quorum's only voter: it describes itself, grants no vote and lets no other node lead."""
    from kjbod.protocol.generated import BeginQuorumEpochRequest, DescribeQuorumRequest
    from kjbod.protocol.generated import describe_quorum_request as dq
    from kjbod.raft import messages
    from kjbod.raft.quorum import BeginQuorumEpochRequest as Begin
    from kjbod.raft.quorum import VoteRequest as Vote

    server = controller_only(tmp_path)
    try:
        with RawClient(server.host, server.port) as ctl:
            body = DescribeQuorumRequest(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                                              partitions=[dq.PartitionData(partition_index=0)])])
            described = ctl.call(body, 2)
            part = described.topics[0].partitions[0]
            assert (described.error_code, part.error_code, part.leader_id) == (0, 0, 100)
            assert part.leader_epoch >= 1 and part.high_watermark >= 1
            # the active controller appends a NoOpRecord every metadata.max.idle.interval.ms: one may be on its way
            # to disk, so its log end can be ahead of what is committed
            assert [r.replica_id for r in part.current_voters] == [100]
            assert part.current_voters[0].log_end_offset >= part.high_watermark
            other = ctl.call(DescribeQuorumRequest(topics=[]), 0)
            assert other.error_code == E.INVALID_REQUEST
            epoch = part.leader_epoch
            vote = messages.parse_vote_response(ctl.call(messages.vote_request(
                server.cluster_id, 100, Vote(epoch + 1, 5, epoch, 1 << 30)), 1))
            assert vote is not None and (vote.vote_granted, vote.leader_id, vote.leader_epoch) == (False, 100, epoch)
            begin = ctl.call(messages.begin_quorum_epoch_request(server.cluster_id, 100, Begin(epoch + 1, 5)), 1)
            answered = messages.parse_epoch_response(begin)
            assert answered is not None and answered.error_code == E.INVALID_REQUEST
            wrong = ctl.call(BeginQuorumEpochRequest(cluster_id="another", topics=[]), 0)
            assert wrong.error_code == E.INCONSISTENT_CLUSTER_ID
    finally:
        server.stop()
