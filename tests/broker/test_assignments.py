"""The broker's AssignmentsManager against the real QuorumController (with a metadata log in a temp dir) through
the in-process controller channel: assignments coalesced per partition and batched, confirmed ones done, failures
put back and retried with backoff, assignments the metadata shows dropped, and KIP-858's unfence gate with the
real lifecycle manager."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from broker_features import SUPPORTED_FEATURES

from kjbod.broker.assignments import AssignmentOutcome, AssignmentsManager, unfence_when_assigned
from kjbod.broker.lifecycle import BrokerLifecycleManager, BrokerState, LifecycleConfig
from kjbod.controller import ControllerSettings, QuorumController
from kjbod.metadata import DIR_UNASSIGNED, features
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import InProcessControllerChannel
from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kjbod.protocol.generated.broker_registration_request import Listener
from kjbod.protocol.generated.create_topics_request import CreatableTopic
from kjbod.storage.metadata_log import MetadataLog

CLUSTER = "kjbod-test-cluster-0000"
DIRS = [uuid.UUID(int=(n << 70) + 3) for n in (31, 32, 33)]
INCARNATION = uuid.UUID(int=77 << 90)

SUPPORTED = dict(features.SUPPORTED)  # what a kjbod broker registers with


class Policy:
    def validate_topic(self, overrides: dict[str, str]) -> None:
        pass

    def plan_topic(self, overrides: Any, changes: Any, *, replace: bool) -> dict[str, str]:
        return {}

    def plan_broker(self, current: Any, name: Any, changes: Any, *, replace: bool) -> dict[str, str | None]:
        return {}


class Controller:
    """The real controller, with the requests its channel passed on (held while `hold` is clear)."""

    def __init__(self, path: str) -> None:
        self.c = QuorumController(ControllerSettings(cluster_id=CLUSTER, broker_heartbeat_interval_ms=20,
                                                     broker_session_timeout_ms=60000),
                                  MetadataLog(path), Policy())
        self.c.load()
        self.requests: list[tuple[int, Any]] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.seen = asyncio.Condition()

    async def __call__(self, api_key: int, version: int, request: Any, header: Any) -> Any:
        async with self.seen:
            self.requests.append((api_key, request))
            self.seen.notify_all()
        if api_key == 73:
            await self.hold.wait()
        return await self.c.handle_request(api_key, version, request, header)

    def channel(self) -> InProcessControllerChannel:
        return InProcessControllerChannel(self, backoff=ExponentialBackoff(0.01, 0.05))

    def of(self, api_key: int) -> list[Any]:
        return [r for k, r in self.requests if k == api_key]

    async def wait_for(self, predicate: Any) -> None:
        async with self.seen:
            await asyncio.wait_for(self.seen.wait_for(predicate), 60)

    async def live_broker(self, *, fence_after: bool = False) -> int:
        reg = await self.c.handle_request(62, 4, BrokerRegistrationRequest(
            features=SUPPORTED_FEATURES, broker_id=1, cluster_id=CLUSTER, incarnation_id=INCARNATION, log_dirs=DIRS,
            listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)]))
        hb = await self.c.handle_request(63, 1, BrokerHeartbeatRequest(
            broker_id=1, broker_epoch=reg.broker_epoch, current_metadata_offset=self.c.image.offset))
        assert reg.error_code == 0 and not hb.is_fenced
        resp = await self.c.handle_request(19, 7, CreateTopicsRequest(
            topics=[CreatableTopic(name="t", num_partitions=6, replication_factor=-1)], timeout_ms=1000))
        assert resp.topics[0].error_code == 0
        if fence_after:
            hb = await self.c.handle_request(63, 1, BrokerHeartbeatRequest(
                broker_id=1, broker_epoch=reg.broker_epoch, current_metadata_offset=self.c.image.offset,
                want_fence=True))
            assert hb.is_fenced
        return int(reg.broker_epoch)

    @property
    def topic(self) -> Any:
        return self.c.image.topic("t")

    def dirs(self) -> dict[int, uuid.UUID | None]:
        return {i: p.directory_of(1) for i, p in self.topic.partitions.items()}


@pytest.fixture
async def controller(tmp_path: Any) -> AsyncIterator[Controller]:
    c = Controller(str(tmp_path))
    c.c.start()
    yield c
    await c.c.stop()
    c.c.log.close()


def manager(controller: Controller, epoch: Any, **kw: Any) -> AssignmentsManager:
    m = AssignmentsManager(1, controller.channel(), image=lambda: controller.c.image,
                           broker_epoch=epoch if callable(epoch) else (lambda: epoch),
                           backoff=ExponentialBackoff(0.01, 0.1, jitter=0.02), **kw)
    controller.c.add_listener(lambda _delta, image: m.on_metadata(image))
    return m


async def test_assignments_are_coalesced_per_partition_and_sent_in_one_request(controller: Controller) -> None:
    epoch = await controller.live_broker()
    assert set(controller.dirs().values()) == {DIR_UNASSIGNED}  # three dirs: the broker places them
    tid = controller.topic.topic_id
    m = manager(controller, epoch)
    first = m.assign(tid, 0, DIRS[0], "placed")
    done = [m.assign(tid, i, DIRS[i % 3], "placed") for i in range(1, 6)]
    newest = m.assign(tid, 0, DIRS[2], "moved")  # the newest assignment of a partition wins
    assert m.queued == 6 and first.result() == AssignmentOutcome.SUPERSEDED
    m.start()
    try:
        await asyncio.wait_for(m.drained(), 60)
        assert m.queued == 0
        assert [f.result() for f in [newest, *done]] == [AssignmentOutcome.ASSIGNED] * 6
        assert controller.dirs() == {0: DIRS[2], 1: DIRS[1], 2: DIRS[2], 3: DIRS[0], 4: DIRS[1], 5: DIRS[2]}
        (request,) = controller.of(73)
        assert request.broker_epoch == epoch
        assert sorted((d.id, p.partition_index) for d in request.directories for t in d.topics
                      for p in t.partitions) == sorted((d, i) for i, d in controller.dirs().items())
    finally:
        await m.close()


async def test_a_refused_request_is_put_back_and_retried(controller: Controller) -> None:
    epoch = await controller.live_broker()
    tid = controller.topic.topic_id
    epochs = iter([epoch + 1000, epoch + 1000])  # stale twice, then right
    m = manager(controller, lambda: next(epochs, epoch))
    futures = [m.assign(tid, i, DIRS[0]) for i in range(6)]
    m.start()
    try:
        await asyncio.wait_for(m.drained(), 60)
        assert [f.result() for f in futures] == [AssignmentOutcome.ASSIGNED] * 6
        assert [r.broker_epoch for r in controller.of(73)] == [epoch + 1000, epoch + 1000, epoch]
        assert set(controller.dirs().values()) == {DIRS[0]}
    finally:
        await m.close()


async def test_a_partition_error_is_retried_until_a_newer_assignment_replaces_it(controller: Controller) -> None:
    epoch = await controller.live_broker()
    tid = controller.topic.topic_id
    m = manager(controller, epoch)
    nobodys = uuid.UUID(int=66 << 70)
    wrong = m.assign(tid, 0, nobodys)  # LOG_DIR_NOT_FOUND from the controller, again and again
    m.start()
    try:
        await controller.wait_for(lambda: len(controller.of(73)) >= 3)
        assert m.queued == 1 and not wrong.done() and controller.dirs()[0] == DIR_UNASSIGNED
        right = m.assign(tid, 0, DIRS[1])
        await asyncio.wait_for(m.drained(), 60)
        assert right.result() == AssignmentOutcome.ASSIGNED and controller.dirs()[0] == DIRS[1]
        assert wrong.result() == AssignmentOutcome.SUPERSEDED
    finally:
        await m.close()


async def test_assignments_the_metadata_shows_or_makes_invalid_are_dropped_unsent(controller: Controller) -> None:
    await controller.live_broker()
    tid = controller.topic.topic_id
    await controller.c.assign_directories(1, [(tid, 0, DIRS[0])])
    m = manager(controller, 0)  # not started: nothing can be sent
    # Already what the metadata says: done at the next image.
    shown = m.assign(tid, 0, DIRS[0])
    m.on_metadata(controller.c.image)
    assert shown.result() == AssignmentOutcome.ASSIGNED and m.queued == 0
    # reconcile() queues only the replicas whose dir differs from the metadata's, and each once.
    on_disk = {(tid, i): DIRS[0] for i in range(6)}
    assert m.reconcile(controller.c.image, on_disk) == 5
    assert m.reconcile(controller.c.image, on_disk) == 0 and m.queued == 5
    moved = m.assign(tid, 1, DIRS[1])  # replaces the one reconcile() queued
    # The topic is deleted: the next image makes them invalid.
    resp = await controller.c.handle_request(20, 5, DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000))
    assert resp.responses[0].error_code == 0
    assert m.queued == 0 and controller.of(73) == []
    assert moved.result() == AssignmentOutcome.INVALID
    await asyncio.wait_for(m.drained(), 60)


async def test_a_several_dir_broker_stays_fenced_until_its_assignments_are_confirmed(
        controller: Controller) -> None:
    """KIP-858's gate (Kafka's code has none): the lifecycle manager asks to be unfenced only once the queue is
    empty, so the broker leads nothing before the metadata says where each of its replicas is."""
    epoch = await controller.live_broker(fence_after=True)  # an earlier run of this broker left it fenced
    tid = controller.topic.topic_id
    shutdowns: list[str] = []
    lifecycle = BrokerLifecycleManager(
        LifecycleConfig(node_id=1, cluster_id=CLUSTER, listeners=[Listener(name="PLAINTEXT", host="127.0.0.1",
                                                                            port=9092)],
                        log_dirs=DIRS, heartbeat_interval=0.02, session_timeout=60.0, features=SUPPORTED),
        controller.channel(), lambda: controller.c.image.offset, shutdowns.append, incarnation_id=INCARNATION)
    m = manager(controller, lambda: lifecycle.broker_epoch)
    controller.hold.clear()  # the controller does not answer assignments yet
    lifecycle.start()
    m.start()
    try:
        await asyncio.wait_for(lifecycle.initial_catch_up, 60)
        assert lifecycle.broker_epoch == epoch  # the same incarnation: same epoch, still fenced
        assert m.reconcile(controller.c.image, {(tid, i): DIRS[i % 3] for i in range(6)}) == 6
        gate = asyncio.ensure_future(unfence_when_assigned(lifecycle, m))
        await controller.wait_for(lambda: len(controller.of(73)) >= 1)
        heartbeats = len(controller.of(63))
        await controller.wait_for(lambda: len(controller.of(63)) >= heartbeats + 5)
        assert not gate.done() and m.queued == 6
        assert controller.c.image.broker(1).fenced and lifecycle.state == BrokerState.RECOVERY
        assert all(h.want_fence for h in controller.of(63))
        assert all(p.leader == -1 for p in controller.topic.partitions.values())
        controller.hold.set()
        await asyncio.wait_for(gate, 60)
        assert lifecycle.state == BrokerState.RUNNING and not controller.c.image.broker(1).fenced
        assert controller.dirs() == {i: DIRS[i % 3] for i in range(6)}
        assert all(p.leader == 1 for p in controller.topic.partitions.values())
        assert shutdowns == []
    finally:
        controller.hold.set()
        await m.close()
        await lifecycle.close()


def test_a_request_groups_assignments_by_dir_then_topic() -> None:
    from kjbod.broker.assignments import _Assignment, _request

    loop = asyncio.new_event_loop()
    try:
        t1, t2 = uuid.UUID(int=1 << 80), uuid.UUID(int=2 << 80)
        batch = [((t1, 0), _Assignment(DIRS[0], "", loop.create_future())),
                 ((t2, 4), _Assignment(DIRS[1], "", loop.create_future())),
                 ((t1, 2), _Assignment(DIRS[0], "", loop.create_future()))]
        req = _request(1, 9, batch)
    finally:
        loop.close()
    assert (req.broker_id, req.broker_epoch) == (1, 9)
    assert [(d.id, [(t.topic_id, [p.partition_index for p in t.partitions]) for t in d.topics])
            for d in req.directories] == [(DIRS[0], [(t1, [0, 2])]), (DIRS[1], [(t2, [4])])]


async def test_a_dir_that_failed_before_registration_does_not_stop_the_heartbeats(controller: Controller) -> None:
    """The broker registers its online dirs only, so the controller never knew a dir that failed before: it
    answers LOG_DIR_NOT_FOUND to the heartbeat naming it, and the broker leaves that dir out from then on."""
    shutdowns: list[str] = []
    lifecycle = BrokerLifecycleManager(
        LifecycleConfig(node_id=1, cluster_id=CLUSTER, listeners=[Listener(name="PLAINTEXT", host="127.0.0.1",
                                                                            port=9092)],
                        log_dirs=DIRS, heartbeat_interval=0.02, session_timeout=60.0, features=SUPPORTED),
        controller.channel(), lambda: controller.c.image.offset, shutdowns.append)
    lifecycle.propagate_directory_failure(DIRS[2])
    lifecycle.start()
    try:
        await asyncio.wait_for(lifecycle.initial_catch_up, 60)
        await asyncio.wait_for(lifecycle.set_ready_to_unfence(), 60)
        assert lifecycle.state == BrokerState.RUNNING and not controller.c.image.broker(1).fenced
        assert controller.c.image.broker(1).log_dirs == tuple(sorted(DIRS[:2]))
        sent = [list(h.offline_log_dirs) for h in controller.of(63)]
        assert sent[0] == [DIRS[2]] and all(s == [] for s in sent[1:])
        assert lifecycle.offline_dirs == [DIRS[2]] and shutdowns == []
        # A dir it registered that fails later is reported, and the controller acts on it.
        lifecycle.propagate_directory_failure(DIRS[0])
        await controller.wait_for(lambda: any(DIRS[0] in h.offline_log_dirs for h in controller.of(63)))
        await controller.wait_for(lambda: len(controller.of(63)) >= len(sent) + 3)
        assert controller.c.image.broker(1).log_dirs == (DIRS[1],) and not controller.c.image.broker(1).fenced
        assert shutdowns == []
    finally:
        await lifecycle.close()
