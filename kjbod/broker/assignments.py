"""Directory assignments: telling the controller which log dir holds each of this broker's replicas (KIP-858;
Kafka's AssignmentsManager fed by its DirectoryEventHandler).

Strategy:

* `assign(topic_id, partition, dir_id)` queues one replica -> dir assignment.  The queue keeps one entry per
  partition and the newest wins (a replica placed, then moved, is reported once, where it is now).  It returns
  a future that says how that assignment ended: ASSIGNED once the controller has confirmed it (or the metadata
  already shows it), SUPERSEDED when a newer assignment of the same partition replaced it, INVALID when the
  partition is gone or no longer on this broker.  The replica mover waits for ASSIGNED before it swaps a future
  replica in (KIP-858's order: the controller's record comes before the swap).
* One task sends the queue as AssignReplicasToDirs requests through a ControllerChannel of its own: at most one
  request in flight, up to `max_per_request` assignments each (Kafka's 2250), grouped dir -> topic ->
  partitions, with the broker epoch the lifecycle manager holds.  A request waits `batch_delay` (100 ms) so that
  assignments made together go together, unless a full request is ready.  Assignments no longer valid against
  the broker's metadata image are dropped before sending.
* Failures: a request that fails as a whole (the controller unreachable, a timeout, a top-level error code) puts
  every assignment it carried back unless a newer one came meanwhile, and the next request waits an exponential
  backoff (100 ms doubling to 10 s, 2 % jitter, as Kafka's).  A partition answered with an error, or missing
  from the answer, is put back the same way; unlike Kafka (which resends those after the usual 100 ms) it also
  counts as a failure for the backoff, so an error the controller keeps giving is not resent ten times a second.
* `on_metadata(image)` (the broker's metadata publisher calls it with every new image) drops the queued
  assignments the image already shows (done: ASSIGNED) and those it makes invalid.
* `queued` is Kafka's QueuedReplicaToDirAssignments metric: assignments waiting or in flight.  `drained()`
  waits until it is 0.

The unfence gate: KIP-858 says a broker with several log dirs "remains FENCED until it can verify that all
partitions are assigned to the correct log directories in the cluster metadata", by not asking to be unfenced
while QueuedReplicaToDirAssignments is above 0.  Kafka's code has no such gate (its broker asks to be unfenced
once it has caught up and recovered its logs).  kjbod keeps the KIP's rule: `unfence_when_assigned` asks the
lifecycle manager to unfence only once the queue is empty.

How a broker process plugs it in (kjbod/broker/remote.py, the broker-only node, does 1-5; the combined node,
kjbod/broker/node.py, runs one on an InProcessControllerChannel for 4 and 5 and records the dirs of new
partitions through its in-process controller directly):
  1. After registration: `AssignmentsManager(node_id, SocketControllerChannel(...), image=lambda: current image,
     broker_epoch=lambda: lifecycle.broker_epoch)`, `start()`.
  2. The metadata publisher, for every delta: `on_metadata(image)`, then for each local replica whose dir on
     disk differs from `image`'s Directories for this broker (a new partition placed in a dir while the
     metadata says UNASSIGNED, a replica moved while the broker was down): `assign(topic_id, partition, dir)`.
     `reconcile(image, placements)` does that for a whole mapping of (topic id, partition) -> dir on disk.
  3. Instead of `lifecycle.set_ready_to_unfence()` once the logs are recovered:
     `await unfence_when_assigned(lifecycle, assignments)` when the broker has several log dirs.
  4. The mover (kjbod.broker.kip113.mover, through the node's `assign_moved_replica`): after the future replica
     caught up, `await assign(topic_id, partition, destination dir)`; only on ASSIGNED block appends, catch up
     and swap.  A failed destination: `assign(..., source dir)` again (the revert); a failed source:
     `assign(..., DIR_LOST)`.  Meanwhile the node's reconcile treats the destination as the replica's dir.
  5. On shutdown: `await close()`.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from kjbod.metadata import MetadataImage
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import ControllerChannel
from kjbod.net.errors import ClientError
from kjbod.net.tasks import cancel_and_wait
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AssignReplicasToDirsRequest
from kjbod.protocol.generated.assign_replicas_to_dirs_request import DirectoryData, PartitionData, TopicData

__all__ = ["AssignmentOutcome", "AssignmentsManager", "unfence_when_assigned"]

log = structlog.get_logger("kjbod.broker.assignments")

ASSIGN_REPLICAS_TO_DIRS = 73
MAX_ASSIGNMENTS_PER_REQUEST = 2250  # Kafka's AssignmentsManager.MAX_ASSIGNMENTS_PER_REQUEST
BATCH_DELAY = 0.1  # Kafka: 100 ms between an assignment and its request, so assignments made together go together
REQUEST_TIMEOUT = 60.0  # Kafka: the "directory-assignments" channel's retry timeout

Key = tuple[uuid.UUID, int]  # (topic id, partition)


class AssignmentOutcome(enum.Enum):
    ASSIGNED = "assigned"  # the controller confirmed it, or the metadata shows it
    SUPERSEDED = "superseded"  # a newer assignment of the same partition replaced it
    INVALID = "invalid"  # the partition is gone, or no longer on this broker


@dataclass(slots=True)
class _Assignment:
    dir_id: uuid.UUID
    reason: str
    done: asyncio.Future[AssignmentOutcome]


class Lifecycle(Protocol):
    def set_ready_to_unfence(self) -> asyncio.Future[None]: ...


class AssignmentsManager:
    """Queues, batches and sends this broker's replica -> dir assignments; see the module docstring."""

    def __init__(self, broker_id: int, channel: ControllerChannel, *, image: Callable[[], MetadataImage],
                 broker_epoch: Callable[[], int], batch_delay: float = BATCH_DELAY,
                 backoff: ExponentialBackoff | None = None, max_per_request: int = MAX_ASSIGNMENTS_PER_REQUEST,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        if max_per_request < 1:
            raise ValueError("max_per_request must be at least 1")
        self.broker_id = broker_id
        self.channel = channel
        self.image = image
        self.broker_epoch = broker_epoch
        self.batch_delay = batch_delay
        self.max_per_request = max_per_request
        self.request_timeout = request_timeout
        self._backoff = backoff or ExponentialBackoff(0.1, 10.0, jitter=0.02)
        self._failures = 0
        self._ready: dict[Key, _Assignment] = {}
        self._in_flight: dict[Key, _Assignment] = {}
        self._wake = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._task: asyncio.Task[None] | None = None
        self.requests_sent = 0

    # ------------------------------------------------------------------------------------------ the queue

    @property
    def queued(self) -> int:
        """QueuedReplicaToDirAssignments: assignments waiting or in flight."""
        return len(self._ready) + len(self._in_flight)

    def assign(self, topic_id: uuid.UUID, partition: int, dir_id: uuid.UUID,
               reason: str = "") -> asyncio.Future[AssignmentOutcome]:
        """Queues `partition` of `topic_id` -> `dir_id` (the newest assignment of a partition wins)."""
        key = (topic_id, partition)
        done: asyncio.Future[AssignmentOutcome] = asyncio.get_running_loop().create_future()
        old = self._ready.pop(key, None)
        if old is not None:
            _finish(old, AssignmentOutcome.SUPERSEDED)
        self._ready[key] = _Assignment(dir_id, reason, done)
        log.debug("assignment queued", topic_id=str(topic_id), partition=partition, dir=str(dir_id), reason=reason)
        self._changed()
        return done

    def reconcile(self, image: MetadataImage, placements: Mapping[Key, uuid.UUID],
                  reason: str = "replica in another dir than the metadata says") -> int:
        """Queues an assignment for each local replica whose dir differs from the metadata's; returns how many."""
        count = 0
        for (topic_id, partition), dir_id in placements.items():
            topic = image.topic_by_id(topic_id)
            p = topic.partitions.get(partition) if topic is not None else None
            if p is None or self.broker_id not in p.replicas or p.directory_of(self.broker_id) == dir_id:
                continue
            pending = self._ready.get((topic_id, partition)) or self._in_flight.get((topic_id, partition))
            if pending is not None and pending.dir_id == dir_id:
                continue
            self.assign(topic_id, partition, dir_id, reason)
            count += 1
        return count

    def on_metadata(self, image: MetadataImage) -> None:
        """Drops the queued assignments `image` already shows (done) or makes invalid."""
        for key, a in list(self._ready.items()):
            outcome = self._against(image, key, a.dir_id)
            if outcome is not None:
                del self._ready[key]
                _finish(a, outcome)
        self._changed()

    async def drained(self) -> None:
        """Returns once no assignment is waiting or in flight."""
        await self._empty.wait()

    # ------------------------------------------------------------------------------------------ control

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the assignments manager is already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"broker-{self.broker_id}-assignments")

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        for a in [*self._ready.values(), *self._in_flight.values()]:
            if not a.done.done():
                a.done.cancel()
        self._ready.clear()
        self._in_flight.clear()
        self._changed()

    # ------------------------------------------------------------------------------------------ the task

    def _changed(self) -> None:
        if self.queued:
            self._empty.clear()
        else:
            self._empty.set()
        if self._ready:
            self._wake.set()

    def _against(self, image: MetadataImage, key: Key, dir_id: uuid.UUID) -> AssignmentOutcome | None:
        topic = image.topic_by_id(key[0])
        p = topic.partitions.get(key[1]) if topic is not None else None
        if p is None or self.broker_id not in p.replicas:
            return AssignmentOutcome.INVALID
        if p.directory_of(self.broker_id) == dir_id:
            return AssignmentOutcome.ASSIGNED
        return None

    def _delay(self) -> float:
        if self._failures:
            return self._backoff.next()
        return 0.0 if len(self._ready) >= self.max_per_request else self.batch_delay

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self._delay())
            self._wake.clear()
            if not self._ready:
                continue
            try:
                await self._send_one()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: keep the assignments, try again after the backoff
                log.exception("sending directory assignments failed", broker=self.broker_id)
                self._requeue(list(self._in_flight.items()))
                self._failures += 1

    async def _send_one(self) -> None:
        image = self.image()
        batch: list[tuple[Key, _Assignment]] = []
        for key in list(self._ready)[: self.max_per_request]:
            a = self._ready.pop(key)
            outcome = self._against(image, key, a.dir_id)
            if outcome is not None:
                _finish(a, outcome)
                continue
            batch.append((key, a))
            self._in_flight[key] = a
        if not batch:
            self._changed()
            return
        request = _request(self.broker_id, self.broker_epoch(), batch)
        self.requests_sent += 1
        try:
            response = await self.channel.send(request, ASSIGN_REPLICAS_TO_DIRS, 0, timeout=self.request_timeout)
        except ClientError as e:
            log.info("directory assignments not sent", broker=self.broker_id, count=len(batch), error=str(e))
            self._fail(batch)
            return
        if response.error_code:
            log.info("directory assignments refused", broker=self.broker_id, count=len(batch),
                     error=_name(response.error_code))
            self._fail(batch)
            return
        answers = {(t.topic_id, p.partition_index, d.id): p.error_code
                   for d in response.directories for t in d.topics for p in t.partitions}
        retry: list[tuple[Key, _Assignment]] = []
        for key, a in batch:
            code = answers.get((key[0], key[1], a.dir_id))
            if code == ErrorCode.NONE:
                self._in_flight.pop(key, None)
                _finish(a, AssignmentOutcome.ASSIGNED)
            else:
                log.info("directory assignment refused", broker=self.broker_id, topic_id=str(key[0]),
                         partition=key[1], dir=str(a.dir_id),
                         error="missing from the answer" if code is None else _name(code))
                retry.append((key, a))
        if retry:
            self._fail(retry)
        else:
            self._failures = 0
            self._backoff.reset()
        self._changed()

    def _fail(self, sent: list[tuple[Key, _Assignment]]) -> None:
        self._failures += 1
        self._requeue(sent)

    def _requeue(self, sent: Iterable[tuple[Key, _Assignment]]) -> None:
        """Puts assignments back, unless a newer one of the same partition came meanwhile (Kafka's putIfAbsent)."""
        for key, a in sent:
            self._in_flight.pop(key, None)
            if key in self._ready:
                _finish(a, AssignmentOutcome.SUPERSEDED)
            else:
                self._ready[key] = a
        self._changed()


def _request(broker_id: int, epoch: int, batch: list[tuple[Key, _Assignment]]) -> AssignReplicasToDirsRequest:
    by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
    for (topic_id, partition), a in batch:
        by_dir.setdefault(a.dir_id, {}).setdefault(topic_id, []).append(partition)
    return AssignReplicasToDirsRequest(broker_id=broker_id, broker_epoch=epoch, directories=[
        DirectoryData(id=d, topics=[TopicData(topic_id=t, partitions=[PartitionData(partition_index=i) for i in ps])
                                    for t, ps in topics.items()])
        for d, topics in by_dir.items()])


async def unfence_when_assigned(lifecycle: Lifecycle, assignments: AssignmentsManager) -> None:
    """KIP-858's gate: asks to be unfenced only once no assignment is queued, then waits to be unfenced."""
    await assignments.drained()
    await lifecycle.set_ready_to_unfence()


def _finish(a: _Assignment, outcome: AssignmentOutcome) -> None:
    if not a.done.done():
        a.done.set_result(outcome)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
