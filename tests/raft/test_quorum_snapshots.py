"""Snapshots in a controller quorum, in this process over real sockets: every voter writes snapshots of its
committed image, the leader's log start moves past a stopped voter, and that voter, restarted, is sent to the
snapshot (SnapshotId in the Fetch answer), fetches it in chunks with FetchSnapshot, installs it, fetches the rest
of the log from its end and holds the same image as the leader. tests/raft/test_controller_quorum_live.py does
the same with `kjbod serve` processes."""

from __future__ import annotations

import os

import pytest
from live import free_port

from kjbod.controller import ControllerSettings, raft_driver
from kjbod.metadata import image_records
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    FetchSnapshotRequest,
)
from kjbod.protocol.generated import fetch_snapshot_request as fsq
from kjbod.server.roles import BrokerConfigPolicy

from .quorum_helpers import CLUSTER, Voter, settled_leader, until
from .test_controller_quorum import send

SNAPSHOT_BYTES = 2048  # metadata.log.max.record.bytes.between.snapshots, small so that a few topics trigger one
SEGMENT_BYTES = 1024  # segments small enough for the log start to move past a snapshot


def controller_for(node_id: int):
    return (ControllerSettings(cluster_id=CLUSTER, node_id=node_id, broker_heartbeat_interval_ms=500,
                               broker_session_timeout_ms=60_000, max_bytes_between_snapshots=SNAPSHOT_BYTES),
            BrokerConfigPolicy(None))


@pytest.fixture
async def voters(tmp_path, monkeypatch):
    monkeypatch.setattr(raft_driver, "MAX_FETCH_BYTES", 700)  # several FetchSnapshot chunks per snapshot
    ports = {v: free_port() for v in (1, 2, 3)}
    # metadata.max.retention.bytes 0: every snapshot but the newest goes, so each one moves the log start up
    out = [Voter(v, str(tmp_path / f"c{v}"), ports, controller=controller_for, segment_bytes=SEGMENT_BYTES,
                 retention_bytes=0) for v in (1, 2, 3)]
    for v in out:
        await v.start()
    try:
        yield out
    finally:
        for v in out:
            await v.stop()


async def write_configs(leader: Voter, count: int, start: int = 0) -> None:
    from kjbod.protocol.generated import IncrementalAlterConfigsRequest
    from kjbod.protocol.generated import incremental_alter_configs_request as iac
    for i in range(start, start + count):
        body = IncrementalAlterConfigsRequest(resources=[iac.AlterConfigsResource(
            resource_type=4, resource_name="", configs=[iac.AlterableConfig(
                name="log.retention.ms", config_operation=0, value=str(3_600_000 + i))])])
        response = await send(leader, body, 44)
        assert response.responses[0].error_code == 0, response


def snapshots(v: Voter) -> list[str]:
    assert v.mlog is not None
    return sorted(n for n in os.listdir(v.mlog.dir) if n.endswith(".checkpoint"))


async def test_a_voter_behind_the_leaders_log_start_catches_up_through_fetch_snapshot(voters: list[Voter]) -> None:
    leader = await settled_leader(voters)
    await until(lambda: leader.controller is not None and leader.controller.active, what="activation")
    behind = next(v for v in voters if v is not leader)
    other = next(v for v in voters if v is not leader and v is not behind)
    await write_configs(leader, 3)
    await until(lambda: behind.controller is not None and behind.controller.applied_end
                == leader.controller.applied_end, what="every voter replayed the first writes")  # type: ignore[union-attr]
    await behind.stop()
    stopped_end = behind.mlog.next_offset  # type: ignore[union-attr]

    # the two others write on, each snapshotting its own committed image, until the leader's log starts after
    # everything the stopped voter has
    for round_ in range(40):
        await write_configs(leader, 5, start=10 + 5 * round_)
        assert leader.mlog is not None
        if leader.mlog.log_start_offset > stopped_end:
            break
    assert leader.mlog is not None and leader.mlog.log_start_offset > stopped_end
    assert snapshots(leader) and snapshots(other)

    await behind.start()
    assert behind.controller is not None and behind.mlog is not None
    await until(lambda: behind.controller.applied_end >= leader.controller.applied_end,  # type: ignore[union-attr]
                what="the restarted voter caught up")
    # it came up through the leader's snapshot: its log starts where that snapshot ends
    installed = behind.mlog.latest_snapshot()
    assert installed is not None and installed.file_name in snapshots(leader)
    assert behind.mlog.log_start_offset >= installed.end_offset > stopped_end
    await until(lambda: image_records(behind.controller.image) == image_records(leader.controller.image),  # type: ignore[union-attr]
                what="the same image as the leader")
    await write_configs(leader, 1, start=1000)  # and it follows new writes from the log
    await until(lambda: image_records(behind.controller.image) == image_records(leader.controller.image),  # type: ignore[union-attr]
                what="the same image after a later write")


async def test_fetch_snapshot_answers_kafkas_errors(voters: list[Voter]) -> None:
    leader = await settled_leader(voters)
    await until(lambda: leader.controller is not None and leader.controller.active, what="activation")
    await write_configs(leader, 30)
    assert leader.mlog is not None and leader.driver is not None
    await until(lambda: leader.mlog.latest_snapshot() is not None, what="a snapshot")  # type: ignore[union-attr]
    sid = leader.mlog.latest_snapshot()
    assert sid is not None
    epoch = leader.driver.epoch

    def ask(end: int, snap_epoch: int, position: int, leader_epoch: int = epoch) -> FetchSnapshotRequest:
        return FetchSnapshotRequest(cluster_id=CLUSTER, replica_id=2, max_bytes=100, topics=[fsq.TopicSnapshot(
            name="__cluster_metadata", partitions=[fsq.PartitionSnapshot(
                partition=0, current_leader_epoch=leader_epoch,
                snapshot_id=fsq.SnapshotId(end_offset=end, epoch=snap_epoch), position=position)])])

    def part(response):
        return response.topics[0].partitions[0]

    got = part(await send(leader, ask(sid.end_offset, sid.epoch, 0), 59))
    assert got.error_code == 0 and got.position == 0 and len(got.unaligned_records) == 100 and got.size > 100
    assert (got.current_leader.leader_id, got.current_leader.leader_epoch) == (leader.node_id, epoch)
    assert part(await send(leader, ask(sid.end_offset + 1, sid.epoch, 0), 59)).error_code \
        == ErrorCode.SNAPSHOT_NOT_FOUND
    assert part(await send(leader, ask(sid.end_offset, sid.epoch, got.size), 59)).error_code \
        == ErrorCode.POSITION_OUT_OF_RANGE
    assert part(await send(leader, ask(sid.end_offset, sid.epoch, 0, epoch - 1), 59)).error_code \
        == ErrorCode.FENCED_LEADER_EPOCH
    follower = next(v for v in voters if v is not leader)
    assert part(await send(follower, ask(sid.end_offset, sid.epoch, 0), 59)).error_code \
        == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (await send(leader, FetchSnapshotRequest(cluster_id="other", topics=[]), 59)).error_code \
        == ErrorCode.INCONSISTENT_CLUSTER_ID
