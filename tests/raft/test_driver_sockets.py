"""Three RaftDrivers on 127.0.0.1, each with its own metadata log and quorum-state file in a real directory, talking
Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch over real sockets (the codec on both ends): they elect one
leader, replicate and commit what it writes, elect another when it stops, and a restarted voter catches up.

The drivers run in this process (the controller processes do not run the quorum yet: a controller configured with
several voters is refused at startup)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest
from handler_server import HandlerServer
from live import free_port

from kjbod.controller.raft_driver import NotLeaderError, RaftDriver
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import SocketControllerChannel
from kjbod.protocol.generated import DescribeQuorumRequest
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.protocol.generated.topic_record import TopicRecord
from kjbod.raft.quorum import RaftConfig, State
from kjbod.storage.metadata_log import MetadataLog, unframe_record
from kjbod.storage.quorum_state import QUORUM_STATE_FILE
from kjbod.storage.records import iter_batches, iter_records

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
# shorter than Kafka's defaults, the fetch timeout still well above the leader's 500 ms long poll
CONFIG = RaftConfig(election_timeout_ms=500, election_backoff_max_ms=300, fetch_timeout_ms=1500,
                    request_timeout_ms=1000, retry_backoff_ms=20)
FAST = {"backoff": ExponentialBackoff(0.01, 0.05)}


class Voter:
    def __init__(self, node_id: int, root: str, ports: dict[int, int]) -> None:
        self.node_id = node_id
        self.root = root
        self.ports = ports
        self.driver: RaftDriver | None = None
        self.mlog: MetadataLog | None = None
        self.server = HandlerServer(self._handle, ports[node_id])

    async def _handle(self, api_key: int, version: int, request: Any, header: Any) -> Any:
        if self.driver is None:
            return None
        return await self.driver.handle_request(api_key, version, request, header)

    async def start(self) -> Voter:
        self.mlog = MetadataLog(self.root, node_id=self.node_id, writer=False, replicated=True)
        self.mlog.load()
        voters = {v: ("127.0.0.1", p) for v, p in self.ports.items()}
        self.driver = RaftDriver(self.node_id, voters, self.mlog, CLUSTER, config=CONFIG, channel_options=FAST)
        await self.server.start()
        await self.driver.start()
        return self

    async def stop(self) -> None:
        await self.server.stop()
        driver, self.driver = self.driver, None
        if driver is not None:
            await driver.stop()
        if self.mlog is not None:
            self.mlog.close()

    def records(self) -> list[str]:
        """The topic names of the committed TopicRecords in this voter's log, in order."""
        assert self.mlog is not None
        out = []
        offset = 0
        data = self.mlog.read(offset, 1 << 20) if self.mlog.high_watermark > 0 else b""
        for pos, header in iter_batches(memoryview(data)):
            if header.is_control:
                continue
            for rec in iter_records(memoryview(data)[pos:pos + header.size]):
                if rec.offset < self.mlog.high_watermark:
                    out.append(unframe_record(rec.value).name)
        return out


async def until(predicate, timeout: float = 15.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {what}")
        await asyncio.sleep(0.02)


def leader_of(voters: list[Voter]) -> Voter | None:
    live = [v for v in voters if v.driver is not None and v.driver.is_leader]
    return max(live, key=lambda v: v.driver.epoch) if live else None  # type: ignore[union-attr]


async def settled_leader(voters: list[Voter], timeout: float = 15.0) -> Voter:
    found: list[Voter] = []

    def settled() -> bool:
        leader = leader_of(voters)
        if leader is None or leader.driver is None or leader.driver.high_watermark == 0:
            return False
        others = [v for v in voters if v.driver is not None and v is not leader]
        if all(v.driver is not None and v.driver.leader_id == leader.node_id for v in others):
            found[:] = [leader]
            return True
        return False

    await until(settled, timeout, "one leader that every running voter follows")
    return found[0]


async def write(leader: Voter, *names: str) -> int:
    assert leader.driver is not None
    _base, end = await leader.driver.append([TopicRecord(name=n, topic_id=uuid.uuid4()) for n in names])
    assert await leader.driver.wait_committed(end, 10.0)
    return end


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
