"""Lifecycle and metadata follower together over real sockets: a broker registers, follows the metadata log up to
its own registration record, is unfenced, and shuts down in a controlled way, against a fake controller served
on 127.0.0.1 through the socket controller channel (one channel each, as Kafka's broker has: a heartbeat must not
wait behind a long-polling Fetch)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from handler_server import HandlerServer

from kjbod.broker.lifecycle import BrokerLifecycleManager, BrokerState, LifecycleConfig
from kjbod.broker.metadata_follower import MetadataBatch, MetadataFollower
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import SocketControllerChannel
from kjbod.protocol.generated import BrokerRegistrationRequest, RegisterBrokerRecord, RequestHeader

from .fake_controller import FakeController
from .fake_metadata_log import FakeMetadataController, leader_change_batch, metadata_batch


class Controller:
    """Registrations and heartbeats from FakeController; each registration also becomes a RegisterBrokerRecord in
    the metadata log, at the offset that is the broker's epoch (as Kafka's controller does)."""

    def __init__(self) -> None:
        self.control = FakeController()
        self.log = FakeMetadataController()

    async def __call__(self, api_key: int, version: int, request: Any, header: RequestHeader) -> Any:
        if api_key == 1:
            return await self.log(api_key, version, request, header)
        self.control.next_offset = self.log.end_offset
        response = await self.control(api_key, version, request, header)
        if api_key == 62 and not response.error_code and response.broker_epoch == self.log.end_offset:
            record = RegisterBrokerRecord(broker_id=request.broker_id, incarnation_id=request.incarnation_id,
                                          broker_epoch=response.broker_epoch, log_dirs=request.log_dirs)
            await self.log.append(metadata_batch([record], self.log.end_offset, 1))
        return response


async def test_a_broker_registers_catches_up_runs_and_shuts_down() -> None:
    controller = Controller()
    await controller.log.append(leader_change_batch(0, 1))
    server = await HandlerServer(controller).start()
    voters = f"3000@127.0.0.1:{server.port}"
    fast = {"backoff": ExponentialBackoff(0.01, 0.1), "request_timeout": 10.0}
    heartbeat_channel = SocketControllerChannel.from_quorum_config(voters, None, **fast)
    fetch_channel = SocketControllerChannel.from_quorum_config(voters, None, **fast)
    applied: list[MetadataBatch] = []
    follower = MetadataFollower(fetch_channel, node_id=1, cluster_id="fake-cluster", on_batch=applied.append)
    dirs = [uuid.uuid4(), uuid.uuid4()]
    config = LifecycleConfig(
        node_id=1, cluster_id="fake-cluster", log_dirs=dirs, heartbeat_interval=0.05, session_timeout=4.0,
        listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)])
    shutdowns: list[str] = []
    lifecycle = BrokerLifecycleManager(config, heartbeat_channel, lambda: follower.last_applied_offset,
                                       shutdowns.append)
    try:
        follower.start()
        lifecycle.start()
        await asyncio.wait_for(lifecycle.initial_catch_up, 60)
        # caught up means the follower applied the broker's own RegisterBrokerRecord (offset = its epoch)
        assert follower.last_applied_offset >= lifecycle.broker_epoch >= 1
        (registration,) = [r for b in applied for r in b.records]
        assert (registration.broker_id, registration.incarnation_id, registration.broker_epoch) == (
            1, lifecycle.incarnation_id, lifecycle.broker_epoch)
        assert sorted(registration.log_dirs) == sorted(dirs)
        await asyncio.wait_for(lifecycle.set_ready_to_unfence(), 60)
        assert lifecycle.state == BrokerState.RUNNING
        await asyncio.wait_for(lifecycle.begin_controlled_shutdown(), 60)
        assert lifecycle.state == BrokerState.SHUTTING_DOWN and shutdowns == []
    finally:
        await lifecycle.close()
        await follower.close()
        heartbeat_channel.close()
        fetch_channel.close()
        await server.stop()
