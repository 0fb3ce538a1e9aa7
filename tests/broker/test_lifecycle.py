"""The broker's lifecycle against a scripted in-process controller: every state transition and every error."""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kjbod.broker.lifecycle import (
    BrokerLifecycleManager,
    BrokerState,
    LifecycleConfig,
    heartbeat_at,
    registration_at,
)
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import InProcessControllerChannel
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import BrokerHeartbeatRequest, BrokerRegistrationRequest

from .fake_controller import FakeController, Registration, Session

DIRS = [uuid.UUID(int=(i << 64) | 7) for i in (3, 1, 2)]
LISTENERS = [BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)]


class Broker:
    """One lifecycle manager wired to the fake controller, with its metadata offset and shutdown calls."""

    def __init__(self, controller: FakeController, **overrides: Any) -> None:
        options: dict[str, Any] = dict(
            node_id=1, cluster_id="fake-cluster", listeners=LISTENERS, log_dirs=DIRS, rack="r1",
            features={"metadata.version": (7, 21), "kraft.version": (0, 1)}, previous_broker_epoch=41,
            heartbeat_interval=0.02, session_timeout=1.0)
        options.update(overrides)
        self.offset = 0
        self.shutdowns: list[str] = []
        channel = InProcessControllerChannel(controller, backoff=ExponentialBackoff(0.01, 0.05))
        self.manager = BrokerLifecycleManager(LifecycleConfig(**options), channel, lambda: self.offset,
                                              self.shutdowns.append)


@pytest.fixture
async def controller() -> FakeController:
    return FakeController()


@pytest.fixture
async def broker(controller: FakeController) -> AsyncIterator[Broker]:
    b = Broker(controller)
    yield b
    await b.manager.close()


async def _run_to_running(broker: Broker, controller: FakeController) -> BrokerLifecycleManager:
    m = broker.manager
    m.start()
    await controller.wait_until(lambda: m.registered)
    broker.offset = m.broker_epoch
    await asyncio.wait_for(m.initial_catch_up, 60)
    await asyncio.wait_for(m.set_ready_to_unfence(), 60)
    assert m.state == BrokerState.RUNNING
    return m


async def test_registration_carries_the_brokers_identity(broker: Broker, controller: FakeController) -> None:
    m = broker.manager
    m.start()
    await controller.wait_until(lambda: len(controller.heartbeats()) >= 1)
    (r,) = controller.registrations()
    assert (r.broker_id, r.cluster_id, r.incarnation_id, r.rack) == (1, "fake-cluster", m.incarnation_id, "r1")
    assert r.listeners == LISTENERS
    assert r.log_dirs == sorted(DIRS)
    assert r.previous_broker_epoch == 41
    assert {f.name: (f.min_supported_version, f.max_supported_version) for f in r.features} == {
        "metadata.version": (7, 21), "kraft.version": (0, 1)}
    assert m.broker_epoch == controller.brokers[1].epoch
    hb = controller.heartbeats()[0]
    assert (hb.broker_id, hb.broker_epoch, hb.want_fence, hb.want_shut_down) == (1, m.broker_epoch, True, False)


def test_registration_before_v4_leaves_out_features_with_minimum_zero() -> None:
    request = BrokerRegistrationRequest(broker_id=1, features=[
        BrokerRegistrationRequest.Feature(name="metadata.version", min_supported_version=7, max_supported_version=21),
        BrokerRegistrationRequest.Feature(name="kraft.version", min_supported_version=0, max_supported_version=1)])
    v3 = BrokerRegistrationRequest.decode(registration_at(request, 3).encode(3), 3)
    v4 = BrokerRegistrationRequest.decode(registration_at(request, 4).encode(4), 4)
    assert [f.name for f in v3.features] == ["metadata.version"]
    assert [f.name for f in v4.features] == ["metadata.version", "kraft.version"]


def test_older_versions_leave_out_the_fields_they_lack() -> None:
    request = BrokerRegistrationRequest(broker_id=1, log_dirs=DIRS, previous_broker_epoch=9)
    for version, dirs, previous in [(0, [], -1), (1, [], -1), (2, DIRS, -1), (3, DIRS, 9), (4, DIRS, 9)]:
        got = BrokerRegistrationRequest.decode(registration_at(request, version).encode(version), version)
        assert (got.log_dirs, got.previous_broker_epoch) == (dirs, previous)
    heartbeat = BrokerHeartbeatRequest(broker_id=1, offline_log_dirs=DIRS[:1])
    assert BrokerHeartbeatRequest.decode(heartbeat_at(heartbeat, 0).encode(0), 0).offline_log_dirs == []
    assert BrokerHeartbeatRequest.decode(heartbeat_at(heartbeat, 1).encode(1), 1).offline_log_dirs == DIRS[:1]
    cordoned = BrokerHeartbeatRequest(broker_id=1, offline_log_dirs=DIRS[:1], cordoned_log_dirs=DIRS[1:])
    for version, offline, cordons in [(0, [], None), (1, DIRS[:1], None), (2, DIRS[:1], DIRS[1:])]:
        got = BrokerHeartbeatRequest.decode(heartbeat_at(cordoned, version).encode(version), version)
        assert (got.offline_log_dirs, got.cordoned_log_dirs) == (offline, cordons)


async def test_cordoned_dirs_go_out_once_caught_up(broker: Broker, controller: FakeController) -> None:
    """Kafka 4.3's broker: CordonedLogDirs is null until the broker has caught up (RECOVERY), then in every
    heartbeat; a change goes out at once.  Registration never carries it."""
    m = broker.manager
    cordons: list[uuid.UUID] = [DIRS[0]]
    m.cordoned_dirs = lambda: list(cordons)
    m.start()
    await controller.wait_until(lambda: len(controller.heartbeats()) >= 2)
    assert all(h.cordoned_log_dirs is None for h in controller.heartbeats())
    broker.offset = m.broker_epoch
    await asyncio.wait_for(m.initial_catch_up, 60)
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) >= n + 2)
    assert controller.heartbeats()[-1].cordoned_log_dirs == [DIRS[0]]
    assert all(v == 2 for k, v, _ in controller.requests if k == 63)
    await asyncio.wait_for(m.set_ready_to_unfence(), 60)
    cordons.append(DIRS[1])
    m.cordon_changed()
    await controller.wait_until(lambda: controller.heartbeats()[-1].cordoned_log_dirs == DIRS[:2])
    cordons.append(uuid.UUID(int=404))  # no registration carried it: left out, the controller would refuse it
    m.cordon_changed()
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) > n)
    assert controller.heartbeats()[-1].cordoned_log_dirs == DIRS[:2]
    m.cordoned_dirs = lambda: None  # metadata.version below 4.3-IV0: nothing is sent
    m.cordon_changed()
    await controller.wait_until(lambda: controller.heartbeats()[-1].cordoned_log_dirs is None)


async def test_a_controller_serving_old_versions_gets_what_they_carry(controller: FakeController) -> None:
    b = Broker(controller, log_dir_failure_timeout=0.5)
    try:
        channel = b.manager.channel
        original = channel.send

        async def send_at_v0(request: Any, api_key: int, version: int | None = None, **kw: Any) -> Any:
            return await original(request, api_key, 0, **kw)

        channel.send = send_at_v0  # type: ignore[method-assign]
        m = await _run_to_running(b, controller)
        m.propagate_directory_failure(DIRS[0])
        n = len(controller.heartbeats())
        await controller.wait_until(lambda: len(controller.heartbeats()) > n + 1)
        assert [v for k, v, _ in controller.requests] == [0] * len(controller.requests)
        assert controller.registrations()[0].log_dirs == []
        # v0 heartbeats cannot say that a dir failed: the broker shuts down as if the controller were away
        await asyncio.wait_for(m.controlled_shutdown, 60)  # completes when the broker goes down
        assert "could not tell the controller that log dir" in b.shutdowns[0]
    finally:
        await b.manager.close()


async def test_starting_recovery_running(broker: Broker, controller: FakeController) -> None:
    m = broker.manager
    m.start()
    await controller.wait_until(lambda: len(controller.heartbeats()) >= 3)
    # behind its own registration: STARTING, fenced, asking to stay fenced
    assert m.state == BrokerState.STARTING and not m.initial_catch_up.done()
    assert all(h.want_fence and h.current_metadata_offset == 0 for h in controller.heartbeats())
    broker.offset = m.broker_epoch
    await asyncio.wait_for(m.initial_catch_up, 60)
    assert m.state == BrokerState.RECOVERY
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) >= n + 3)
    assert m.state == BrokerState.RECOVERY and controller.brokers[1].state == Session.FENCED
    await asyncio.wait_for(m.set_ready_to_unfence(), 60)
    assert m.state == BrokerState.RUNNING
    assert controller.brokers[1].state == Session.UNFENCED
    last = controller.heartbeats()[-1]
    assert not last.want_fence and last.current_metadata_offset == m.broker_epoch


async def test_controlled_shutdown_waits_for_should_shut_down(broker: Broker, controller: FakeController) -> None:
    m = await _run_to_running(broker, controller)
    controller.leads[1] = True
    done = m.begin_controlled_shutdown()
    assert m.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    await controller.wait_until(lambda: sum(h.want_shut_down for h in controller.heartbeats()) >= 3)
    assert not done.done() and controller.brokers[1].state == Session.CONTROLLED_SHUTDOWN
    controller.leads[1] = False  # leadership moved away
    await asyncio.wait_for(done, 60)
    assert m.state == BrokerState.SHUTTING_DOWN and controller.brokers[1].state == Session.SHUTDOWN_NOW
    sent = len(controller.requests)
    await asyncio.sleep(0.1)
    assert len(controller.requests) == sent  # nothing is sent once shutting down
    assert broker.shutdowns == []  # a controlled shutdown is not a failure


async def test_shutdown_before_running_is_immediate(broker: Broker, controller: FakeController) -> None:
    m = broker.manager
    m.start()
    await controller.wait_until(lambda: m.registered)
    await asyncio.wait_for(m.begin_controlled_shutdown(), 60)
    assert m.state == BrokerState.SHUTTING_DOWN
    assert m.initial_catch_up.cancelled() and m.initial_unfence.cancelled()


async def test_stale_broker_epoch_registers_again(broker: Broker, controller: FakeController) -> None:
    m = await _run_to_running(broker, controller)
    first_epoch = m.broker_epoch
    del controller.brokers[1]  # the controller lost this registration
    await controller.wait_until(lambda: len(controller.registrations()) >= 2 and m.registered)
    second = controller.registrations()[1]
    assert second.incarnation_id == m.incarnation_id
    assert m.broker_epoch == controller.brokers[1].epoch != first_epoch
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) >= n + 2)
    assert controller.heartbeats()[-1].broker_epoch == m.broker_epoch


async def test_resend_registration_registers_again_at_once(controller: FakeController) -> None:
    b = Broker(controller, heartbeat_interval=3600.0)  # no heartbeat would come on its own
    try:
        m = await _run_to_running(b, controller)
        m.resend_registration()
        await controller.wait_until(lambda: len(controller.registrations()) == 2 and m.registered)
        assert controller.registrations()[1].incarnation_id == m.incarnation_id
        assert m.broker_epoch == controller.brokers[1].epoch  # same incarnation: same epoch
    finally:
        await b.manager.close()


async def test_duplicate_registration_backs_off_until_the_old_session_ends(
        broker: Broker, controller: FakeController) -> None:
    controller.brokers[1] = Registration(epoch=5, incarnation=uuid.uuid4(), state=Session.UNFENCED)
    m = broker.manager
    m.start()
    await controller.wait_until(lambda: len(controller.registrations()) >= 3)
    assert not m.registered and m.broker_epoch == -1
    assert m._backoff.attempts >= 2  # each refusal waits longer (the backoff counts them)
    controller.brokers[1].state = Session.FENCED  # the old incarnation's session expired
    await controller.wait_until(lambda: m.registered)
    assert m._backoff.attempts == 0
    assert m.broker_epoch == controller.brokers[1].epoch != 5


@pytest.mark.parametrize("code", [ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INVALID_REGISTRATION,
                                  ErrorCode.NOT_CONTROLLER])
async def test_registration_errors_are_retried(broker: Broker, controller: FakeController, code: int) -> None:
    controller.script[62] = deque([code, code])
    m = broker.manager
    m.start()
    await controller.wait_until(lambda: m.registered)
    assert len(controller.registrations()) >= 3


async def test_heartbeat_errors_are_retried_and_do_not_change_state(
        broker: Broker, controller: FakeController) -> None:
    m = await _run_to_running(broker, controller)
    controller.script[63] = deque([ErrorCode.UNKNOWN_SERVER_ERROR] * 3)
    await controller.wait_until(lambda: not controller.script[63])
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) >= n + 2)
    assert m.state == BrokerState.RUNNING and len(controller.registrations()) == 1


async def test_controller_away_then_back(broker: Broker, controller: FakeController) -> None:
    m = await _run_to_running(broker, controller)
    controller.away = True
    await controller.wait_until(lambda: m._backoff.attempts >= 2)  # heartbeats failed (each after its deadline)
    assert m.state == BrokerState.RUNNING
    controller.away = False
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) >= n + 2)
    assert m.state == BrokerState.RUNNING and m._backoff.attempts == 0


async def test_a_heartbeat_that_never_returns_times_out_and_is_retried(
        broker: Broker, controller: FakeController) -> None:
    m = await _run_to_running(broker, controller)
    controller.script[63] = deque(["hang"])
    await controller.wait_until(lambda: not controller.script[63])
    n = len(controller.heartbeats())
    await controller.wait_until(lambda: len(controller.heartbeats()) >= n + 2)
    assert m.state == BrokerState.RUNNING


async def test_failed_dirs_go_out_at_once_and_in_every_heartbeat(controller: FakeController) -> None:
    b = Broker(controller, heartbeat_interval=3600.0)  # only wakes send heartbeats once running
    try:
        m = await _run_to_running(b, controller)
        n = len(controller.heartbeats())
        m.propagate_directory_failure(DIRS[0])
        await controller.wait_until(lambda: len(controller.heartbeats()) > n)
        assert controller.heartbeats()[-1].offline_log_dirs == [DIRS[0]]
        m.propagate_directory_failure(DIRS[2])
        await controller.wait_until(lambda: len(controller.heartbeats()) > n + 1)
        assert controller.heartbeats()[-1].offline_log_dirs == [DIRS[0], DIRS[2]]  # cumulative
        # a registration after the failure leaves the failed dirs out
        del controller.brokers[1]
        m._wake.set()
        await controller.wait_until(lambda: len(controller.registrations()) >= 2)
        assert controller.registrations()[-1].log_dirs == [DIRS[1]]
        assert b.shutdowns == []
    finally:
        await b.manager.close()


async def test_a_failed_dir_that_cannot_be_reported_shuts_the_broker_down(controller: FakeController) -> None:
    b = Broker(controller, log_dir_failure_timeout=0.3)
    try:
        m = await _run_to_running(b, controller)
        controller.away = True
        m.propagate_directory_failure(DIRS[1])
        await asyncio.wait_for(b.manager.controlled_shutdown, 60)  # completes when the broker goes down
        assert b.shutdowns == [f"shutting down: could not tell the controller that log dir {DIRS[1]} is offline "
                               "within 0.3s"]
        assert m.state == BrokerState.SHUTTING_DOWN
    finally:
        await b.manager.close()


async def test_an_unreported_failed_dir_the_broker_leads_nothing_in_does_not_shut_it_down_until_it_does(
        controller: FakeController) -> None:
    b = Broker(controller, log_dir_failure_timeout=0.2)
    try:
        m = await _run_to_running(b, controller)
        controller.away = True
        leads = asyncio.Event()
        checks = 0

        def leads_in() -> bool:
            nonlocal checks
            checks += 1
            if checks == 2:
                leads.set()
            return checks > 2  # from the third check on, it leads a partition there

        m.propagate_directory_failure(DIRS[1], leads_in)
        await asyncio.wait_for(leads.wait(), 60)
        assert b.shutdowns == []  # two deadlines passed while it led nothing there
        await asyncio.wait_for(b.manager.controlled_shutdown, 60)
        assert checks == 3 and len(b.shutdowns) == 1 and "log dir" in b.shutdowns[0]
    finally:
        await b.manager.close()


async def test_a_reported_dir_failure_does_not_shut_down(controller: FakeController) -> None:
    b = Broker(controller, log_dir_failure_timeout=2.0)
    try:
        m = await _run_to_running(b, controller)
        m.propagate_directory_failure(DIRS[1])
        timer = m._timers[-1]
        await controller.wait_until(lambda: m._offline_dirs[DIRS[1]])  # a heartbeat carrying it was answered
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(timer.when() - loop.time(), 0) + 0.01)  # wakes after the timer ran
        assert b.shutdowns == [] and m.state == BrokerState.RUNNING
    finally:
        await b.manager.close()


async def test_no_registration_in_time_shuts_down(controller: FakeController) -> None:
    controller.away = True
    b = Broker(controller, initial_registration_timeout=0.3)
    try:
        b.manager.start()
        await asyncio.wait_for(b.manager.controlled_shutdown, 60)  # completes when the broker goes down
        assert b.shutdowns == ["shutting down: could not register with the controller within 0.3s"]
        assert b.manager.initial_catch_up.cancelled()
    finally:
        await b.manager.close()
