"""Three RaftDrivers on 127.0.0.1, each with its own metadata log and quorum-state file in a real directory, talking
Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch over real sockets (the codec on both ends): they elect one
leader, replicate and commit what it writes, elect another when it stops, and a restarted voter catches up.

The drivers run in this process; tests/raft/test_controller_quorum_live.py runs the quorum in `kjbod serve`
controller processes."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from live import free_port

from kjbod.controller.metadata_fetch import METADATA_TOPIC_ID, MetadataFetchService
from kjbod.controller.raft_driver import NotLeaderError
from kjbod.net.controller_channel import SocketControllerChannel
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeQuorumRequest, FetchRequest
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.protocol.generated import fetch_request as fq
from kjbod.protocol.generated.topic_record import TopicRecord
from kjbod.raft.quorum import State
from kjbod.storage import fsio
from kjbod.storage.quorum_state import QUORUM_STATE_FILE

from .quorum_helpers import CLUSTER, FAST, Voter, settled_leader, until, write


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
    # v2: where each voter is reached, on its controller listener
    assert [(n.node_id, [(ln.name, ln.host, ln.port) for ln in n.listeners]) for n in resp.nodes] == [
        (v, [("CONTROLLER", "127.0.0.1", leader.ports[v])]) for v in (1, 2, 3)]


async def test_observers_are_served_committed_batches_by_the_leader_and_pointed_to_it_elsewhere(
        quorum: list[Voter]) -> None:
    leader = await settled_leader(quorum)
    end = await write(leader, "a")
    await until(lambda: all(v.driver is not None and v.driver.high_watermark >= end for v in quorum))
    endpoints = {v.node_id: ("127.0.0.1", v.ports[v.node_id]) for v in quorum}
    services = {v.node_id: MetadataFetchService(v.mlog, cluster_id=CLUSTER, node_id=v.node_id,  # type: ignore[arg-type]
                                                endpoint=endpoints[v.node_id], leadership=v.driver,
                                                endpoints=endpoints) for v in quorum}
    try:
        epoch = leader.driver.epoch  # type: ignore[union-attr]
        request = FetchRequest(cluster_id=CLUSTER, replica_state=fq.ReplicaState(replica_id=7), max_wait_ms=0,
                               max_bytes=1 << 20, topics=[fq.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[
                                   fq.FetchPartition(partition=0, current_leader_epoch=epoch, fetch_offset=0,
                                                     last_fetched_epoch=0, partition_max_bytes=1 << 20)])])
        answer = await services[leader.node_id].fetch(request, 17)
        pd = answer.responses[0].partitions[0]
        assert (pd.error_code, pd.high_watermark, pd.current_leader.leader_id) == (0, end, leader.node_id)
        assert len(pd.records) > 0
        follower = next(v for v in quorum if v is not leader)
        answer = await services[follower.node_id].fetch(request, 17)
        pd = answer.responses[0].partitions[0]
        assert (pd.error_code, pd.current_leader.leader_id, pd.current_leader.leader_epoch) == (
            ErrorCode.NOT_LEADER_OR_FOLLOWER, leader.node_id, epoch)
        assert [(n.node_id, n.port) for n in answer.node_endpoints] == [(leader.node_id, leader.ports[leader.node_id])]
        # the broker that fetched from the leader is one of the quorum's observers in DescribeQuorum
        body = DescribeQuorumRequest(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                                          partitions=[dq.PartitionData(partition_index=0)])])
        described = await leader.driver.handle_request(55, 2, body)  # type: ignore[union-attr]
        observers = described.topics[0].partitions[0].observers
        assert [(o.replica_id, o.log_end_offset) for o in observers] == [(7, 0)]
    finally:
        for s in services.values():
            s.close()


async def test_a_quorum_state_file_that_cannot_be_written_stops_the_voter(tmp_path) -> None:
    """The vote for itself cannot be made durable: the driver stops acting and tells its node, instead of
    standing for election on a vote it could not keep."""
    ports = {v: free_port() for v in (1, 2, 3)}
    voter = Voter(1, str(tmp_path / "c1"), ports)  # alone: it will stand for election
    await voter.start()
    failures: list[BaseException] = []
    assert voter.driver is not None
    voter.driver.on_fatal = failures.append
    rule = fsio.inject(voter.root, ops=["rename"])
    try:
        await until(lambda: bool(failures), what="the failed write reported")
        assert voter.driver.failed is failures[0]
        epoch = voter.driver.epoch
        await asyncio.sleep(1.5)  # longer than the election timeout: no further election
        assert voter.driver.epoch == epoch
    finally:
        rule.release()
        fsio.clear()
        await voter.stop()


@pytest.mark.parametrize("old", [(1, 2, 3), (3,)])
async def test_voters_that_serve_only_vote_v0_1_still_elect_a_leader(tmp_path, old: tuple[int, ...]) -> None:
    """Voters before KIP-996 (ApiVersions says Vote v0-1), all of them or one: a pre-vote cannot be asked of them, so
    a prospective asking one stands at once (Kafka's rule); they only ever get standard votes, at v1."""
    ports = {v: free_port() for v in (1, 2, 3)}
    voters = [Voter(v, str(tmp_path / f"c{v}"), ports) for v in (1, 2, 3)]
    seen: list[tuple[int, int, bool]] = []  # (receiver, version, pre-vote) of every Vote that arrived
    for v in voters:
        if v.node_id in old:
            v.server.api_versions[52] = (0, 1)
        inner = v.server.handler

        async def recording(api_key, version, request, header, inner=inner, me=v.node_id):
            if api_key == 52:
                seen.append((me, version, request.topics[0].partitions[0].pre_vote))
            return await inner(api_key, version, request, header)
        v.server.handler = recording
    for v in voters:
        await v.start()
    try:
        leader = await settled_leader(voters)
        await write(leader, "old-voters")
        assert seen
        assert all(version == 1 and not pre for me, version, pre in seen if me in old)
        assert all(version == 2 for me, version, _pre in seen if me not in old)
    finally:
        for v in voters:
            await v.stop()
