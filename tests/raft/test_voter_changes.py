"""AddRaftVoter / RemoveRaftVoter rules on RaftDrivers in this process (real sockets, real logs): a static quorum
(kraft.version 0) refuses with UNSUPPORTED_VERSION, a follower with NOT_LEADER_OR_FOLLOWER, bad voters with
INVALID_REQUEST, and while one change waits to be committed a second is refused with REQUEST_TIMED_OUT.
(tests/raft/test_dynamic_quorum_live.py drives the changes through `kjbod metadata-quorum` on real processes.)"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from live import free_port

from kjbod.protocol.errors import ErrorCode
from kjbod.raft.voters import VoterNode, VoterSet

from .quorum_helpers import Voter, settled_leader, until, write, write_bootstrap

DIRS = {v: uuid.UUID(int=(v << 64) + 1000 + v) for v in (1, 2, 3)}


@pytest.fixture
async def dynamic(tmp_path):
    ports = {v: free_port() for v in (1, 2, 3)}
    voter_set = VoterSet.of([VoterNode(v, DIRS[v], (("CONTROLLER", "127.0.0.1", ports[v]),)) for v in ports])
    voters = []
    for v in ports:
        write_bootstrap(str(tmp_path / f"c{v}"), voter_set)
        voters.append(Voter(v, str(tmp_path / f"c{v}"), ports, dynamic=True))
    for v in voters:
        await v.start()
    try:
        yield voters
    finally:
        for v in voters:
            await v.stop()


async def test_a_static_quorum_refuses_voter_changes(tmp_path) -> None:
    ports = {v: free_port() for v in (1, 2, 3)}
    voters = [Voter(v, str(tmp_path / f"c{v}"), ports) for v in (1, 2, 3)]
    for v in voters:
        await v.start()
    try:
        leader = await settled_leader(voters)
        assert leader.driver is not None
        code, message = await leader.driver.remove_voter(2, uuid.uuid4())
        assert code == ErrorCode.UNSUPPORTED_VERSION
        assert message == "Cluster doesn't support removing voter because the kraft.version feature is 0"
        code, _ = await leader.driver.add_voter(4, uuid.uuid4(), (("CONTROLLER", "127.0.0.1", 1),), 1000)
        assert code == ErrorCode.UNSUPPORTED_VERSION
    finally:
        for v in voters:
            await v.stop()


async def test_dynamic_voters_come_from_the_log_and_one_change_runs_at_a_time(dynamic: list[Voter]) -> None:
    leader = await settled_leader(dynamic)
    driver = leader.driver
    assert driver is not None and driver.dynamic and sorted(driver.voters) == [1, 2, 3]
    await write(leader, "t1")
    follower = next(v for v in dynamic if v is not leader)
    assert follower.driver is not None
    assert (await follower.driver.remove_voter(1, DIRS[1]))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (await driver.remove_voter(2, uuid.UUID(int=0))) == (
        ErrorCode.INVALID_REQUEST, "Remove voter request didn't include a valid voter")
    code, message = await driver.add_voter(4, uuid.uuid4(), (("OTHER", "127.0.0.1", 1),), 1000)
    assert code == ErrorCode.INVALID_REQUEST and "default listener CONTROLLER" in str(message)
    assert (await driver.remove_voter(2, DIRS[3]))[0] == ErrorCode.VOTER_NOT_FOUND
    assert (await driver.add_voter(2, DIRS[2], (("CONTROLLER", "127.0.0.1", 1),), 1000))[0] == \
        ErrorCode.DUPLICATE_VOTER

    # the two followers stop: a removal cannot be committed, and a second change waits for it
    for v in dynamic:
        if v is not leader:
            await v.stop()
    other = next(v.node_id for v in dynamic if v is not leader)
    first = asyncio.get_running_loop().create_task(driver.remove_voter(other, DIRS[other]))
    await until(lambda: driver._pending is not None and driver._pending.offset is not None, 10, "appended")
    assert sorted(driver.voters) == sorted({1, 2, 3} - {other})  # in force from the append on
    code, message = await driver.remove_voter(leader.node_id, DIRS[leader.node_id])
    assert (code, message) == (ErrorCode.REQUEST_TIMED_OUT,
                               "Request timed out waiting for leader to handle previous voter change request")
    code, _ = await first
    assert code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER)
