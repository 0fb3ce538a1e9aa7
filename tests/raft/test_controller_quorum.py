"""Three QuorumControllers, each on its own RaftDriver and metadata log, over real sockets in this process: only the
quorum's leader is the active controller (the others answer NOT_CONTROLLER), every controller's image follows the
committed log, a write is answered once committed, and when the leader stops another becomes active with the
whole image and takes writes; the stopped one comes back and catches up.

In this process, so the images can be looked at; tests/raft/test_controller_quorum_live.py does the same with
`kjbod serve` controller processes."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from broker_features import SUPPORTED_FEATURES
from datapath.support import RawClient
from live import free_port

from kjbod.controller import ControllerSettings
from kjbod.net.controller_channel import SocketControllerChannel, has_error
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import BrokerHeartbeatRequest, BrokerRegistrationRequest, CreateTopicsRequest
from kjbod.protocol.generated.create_topics_request import CreatableTopic
from kjbod.server.roles import BrokerConfigPolicy

from .quorum_helpers import CLUSTER, FAST, Voter, settled_leader, until


def controller_for(node_id: int):
    return (ControllerSettings(cluster_id=CLUSTER, node_id=node_id, broker_heartbeat_interval_ms=500,
                               broker_session_timeout_ms=60_000), BrokerConfigPolicy(None))


@pytest.fixture
async def controllers(tmp_path):
    ports = {v: free_port() for v in (1, 2, 3)}
    voters = [Voter(v, str(tmp_path / f"c{v}"), ports, controller=controller_for) for v in (1, 2, 3)]
    for v in voters:
        await v.start()
    try:
        yield voters
    finally:
        for v in voters:
            await v.stop()


async def send(voter: Voter, body, api_key: int, timeout: float = 10):
    channel = SocketControllerChannel([("127.0.0.1", voter.ports[voter.node_id])], **FAST)
    try:
        return await channel.send(body, api_key, timeout=timeout)
    finally:
        channel.close()


async def refused(voter: Voter, body, api_key: int, version: int, timeout: float = 15) -> None:
    """The controller answers NOT_CONTROLLER (asked once, over a plain connection run off the event loop)."""
    def call():
        with RawClient("127.0.0.1", voter.ports[voter.node_id], timeout=timeout) as c:
            return c.call(body, version)

    response = await asyncio.to_thread(call)
    assert has_error(response, ErrorCode.NOT_CONTROLLER), response


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(broker_id=broker_id, cluster_id=CLUSTER, incarnation_id=uuid.uuid4(),
                                     log_dirs=[uuid.UUID(int=(broker_id << 70) + 1)], features=SUPPORTED_FEATURES)


def create(name: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(name=name, num_partitions=2, replication_factor=1)],
                               timeout_ms=5000)


def running(voters: list[Voter]) -> list[Voter]:
    return [v for v in voters if v.controller is not None]


async def test_only_the_leader_is_active_and_every_image_follows_the_committed_log(controllers: list[Voter]) -> None:
    leader = await settled_leader(controllers)
    await until(lambda: leader.controller is not None and leader.controller.active, what="activation")
    assert [v.controller.active for v in controllers if v is not leader] == [False, False]  # type: ignore[union-attr]

    follower = next(v for v in controllers if v is not leader)
    await refused(follower, registration(7), 62, 4)

    reg = await send(leader, registration(7), 62)
    assert reg.error_code == 0 and reg.broker_epoch > 0
    assert leader.controller is not None and 7 in leader.controller.image.brokers  # answered after replay
    await until(lambda: all(7 in v.controller.image.brokers for v in running(controllers)),  # type: ignore[union-attr]
                what="every controller replayed the registration")
    hb = await send(leader, BrokerHeartbeatRequest(broker_id=7, broker_epoch=reg.broker_epoch,
                                                   current_metadata_offset=reg.broker_epoch, want_fence=False), 63)
    assert hb.error_code == 0 and not hb.is_fenced
    created = await send(leader, create("before"), 19)
    assert created.topics[0].error_code == 0

    # the leader stops dead: another controller becomes active with everything committed, and takes writes
    await leader.stop()
    second = await settled_leader(controllers)
    await until(lambda: second.controller is not None and second.controller.active, what="the new activation")
    assert second.controller is not None
    assert second.controller.image.topic("before") is not None and not second.controller.image.brokers[7].fenced
    created = await send(second, create("after"), 19)
    assert created.topics[0].error_code == 0

    # the old leader comes back, follows, and its image catches up; it is not active
    await leader.start()
    await until(lambda: leader.controller is not None and leader.controller.image.topic("after") is not None,
                what="the restarted controller caught up")
    assert leader.controller is not None and not leader.controller.active
    await refused(leader, create("x"), 19, 7)


async def test_a_write_in_flight_when_leadership_is_lost_gets_not_controller(controllers: list[Voter]) -> None:
    leader = await settled_leader(controllers)
    await until(lambda: leader.controller is not None and leader.controller.active, what="activation")
    for v in controllers:
        if v is not leader:
            await v.stop()
    # the leader appends the registration but no majority can commit it; it resigns (check-quorum after
    # 1.5 fetch timeouts) and the waiting write is answered NOT_CONTROLLER, never applied
    await refused(leader, registration(9), 62, 4)
    assert leader.controller is not None and not leader.controller.active
    assert 9 not in leader.controller.image.brokers
