"""Three RaftDrivers on 127.0.0.1, each with its own metadata log and quorum-state file in a real directory, talking
Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch over real sockets (the codec on both ends): they elect one
leader, replicate and commit what it writes, elect another when it stops, and a restarted voter catches up.

The drivers run in this process (the controller processes do not run the quorum yet: a controller configured with
several voters is refused at startup)."""

from __future__ import annotations

import json
import os

import pytest
from live import free_port

from kjbod.controller.raft_driver import NotLeaderError
from kjbod.net.controller_channel import SocketControllerChannel
from kjbod.protocol.generated import DescribeQuorumRequest
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.protocol.generated.topic_record import TopicRecord
from kjbod.raft.quorum import State
from kjbod.storage.quorum_state import QUORUM_STATE_FILE

from .quorum_helpers import FAST, Voter, settled_leader, until, write


@pytest.fixture
async def quorum(tmp_path):
    ports = {v: free_port() for v in (1, 2, 3)}
    voters = [Voter(v, str(tmp_path / f"c{v}"), ports) for v in (1, 2, 3)]
    for v in voters:
        await v.start()
    try:
        yield voters
    finally:
        for v in voters:
            await v.stop()


async def test_three_voters_elect_replicate_fail_over_and_catch_up(quorum: list[Voter], tmp_path) -> None:
    first = await settled_leader(quorum)
    end = await write(first, "a", "b")
    await until(lambda: all(v.driver is not None and v.driver.high_watermark >= end for v in quorum), what="commit")
    assert [v.records() for v in quorum] == [["a", "b"]] * 3
    # every voter's quorum-state file names the leader, in Kafka's layout
    for v in quorum:
        with open(os.path.join(v.root, "__cluster_metadata-0", QUORUM_STATE_FILE)) as f:
            state = json.load(f)
        assert (state["leaderId"], state["leaderEpoch"], state["data_version"]) == (
            first.node_id, first.driver.epoch, 0)  # type: ignore[union-attr]

    # the leader stops dead (no resignation): the others elect a new one in a later epoch and go on
    old_epoch = first.driver.epoch  # type: ignore[union-attr]
    await first.stop()
    second = await settled_leader(quorum)
    assert second is not first and second.driver is not None and second.driver.epoch > old_epoch
    with pytest.raises(NotLeaderError):
        other = next(v for v in quorum if v is not first and v is not second)
        assert other.driver is not None
        await other.driver.append([TopicRecord(name="x")])
    end = await write(second, "c")

    # the old leader comes back from its files, follows, and catches up
    await first.start()
    await until(lambda: all(v.driver is not None and v.driver.high_watermark >= end for v in quorum),
                what="catch-up")
    assert first.driver is not None and first.driver.leader_id == second.node_id
    assert [v.records() for v in quorum] == [["a", "b", "c"]] * 3


async def test_a_resigning_leader_hands_over(quorum: list[Voter]) -> None:
    first = await settled_leader(quorum)
    await write(first, "a")
    assert first.driver is not None
    epoch = first.driver.epoch
    await first.driver.resign(timeout=5.0)
    # every other voter heard the EndQuorumEpoch (it may already have voted for the successor it named)
    assert first.driver.quorum.shutdown_complete
    assert first.driver.quorum.state in (State.RESIGNED, State.VOTED, State.FOLLOWER)
    await first.stop()
    second = await settled_leader(quorum)
    assert second.driver is not None and second.driver.epoch > epoch


async def test_describe_quorum_over_the_wire(quorum: list[Voter]) -> None:
    leader = await settled_leader(quorum)
    end = await write(leader, "a")
    channel = SocketControllerChannel([("127.0.0.1", leader.ports[leader.node_id])], **FAST)
    try:
        body = DescribeQuorumRequest(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                                          partitions=[dq.PartitionData(partition_index=0)])])
        await until(lambda: all(v.driver is not None and v.driver.high_watermark >= end for v in quorum))
        resp = await channel.send(body, 55)
    finally:
        channel.close()
    part = resp.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.high_watermark) == (0, leader.node_id, end)
    assert sorted(r.replica_id for r in part.current_voters) == [1, 2, 3]
    assert all(r.log_end_offset >= end - 1 for r in part.current_voters)
