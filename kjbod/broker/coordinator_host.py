"""What the group and transaction coordinators share: hosting keys on the partitions of an internal topic.

A key (a group id, a transactional id) belongs to one partition of the coordinator's topic (the key's Java
String.hashCode made non-negative, modulo the topic's partition count, as Kafka's), and the broker leading that
partition coordinates it.  `CoordinatorHost` keeps, on one 50 ms timer, the set of partitions served here in step
with the metadata image:

* a partition newly led here is loaded from its log on its dir's worker (answered COORDINATOR_LOAD_IN_PROGRESS
  meanwhile, and while the partition's log is still being made here); a partition with an empty log is served at
  once;
* a partition led elsewhere now has its keys dropped (NOT_COORDINATOR from then on);
* the topic is created through the controller on first use, once at a time;
* writes go through the Produce path with acks=all, a failed write answered with the code a client retries.

Subclasses say what their records mean (`_take`, `_loaded_records`), what leaving a partition drops
(`_unload`), the topic's configs, and what runs on each tick (`_tick`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog

from kjbod.broker.dir_work import DirWork
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateTopicsRequest, ProduceRequest
from kjbod.protocol.generated.create_topics_request import CreatableTopic, CreatableTopicConfig
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.storage.records import iter_batches, iter_records
from kjbod.wire.handler import Later

log = structlog.get_logger("kjbod.coordinator")

TICK_S = 0.05
LOAD_CHUNK = 1 << 20  # bytes a load reads at a time where no key says otherwise


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, 32-bit wrap-around, signed."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def now_ms() -> int:
    return int(time.time() * 1000)


async def settle(value: Any) -> Any:
    """The final value of what a handler returned: a plain value, an awaitable, or a Later (maybe chained)."""
    while True:
        if isinstance(value, Later):
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            value.on_done(resolver(fut))
            done = await fut
            value = done.result()
        elif asyncio.isfuture(value) or asyncio.iscoroutine(value):
            value = await value
        else:
            return value


def resolver(fut: asyncio.Future[Any]) -> Callable[[Any], None]:
    """A callback setting `fut`'s result once (later calls are ignored)."""

    def answer(result: Any) -> None:
        if not fut.done():
            fut.set_result(result)

    return answer


class InternalRequest:
    """What the Produce handler reads of a request, for a coordinator's own appends."""

    api_version = 9
    client_id = "kjbod-coordinator"
    ctx = None
    correlation_id = 0
    internal_topics_allowed = True


async def read_chunk(node: Any, plog: Any, offset: int, end: int, chunk: int = LOAD_CHUNK) -> bytes:
    """A chunk of a coordinator's log read on its dir's worker (about ``chunk`` bytes, at least one whole batch,
    below `end`)."""
    out: list[Any] = [b""]

    def fill(slot: Any, result: Any) -> None:
        out[0] = result

    def fail(slot: Any, e: BaseException | None) -> None:
        out[0] = e or TimeoutError("the log dir did not answer")

    work = DirWork(node, fill, fail)
    work.add(plog.log_dir, (plog, offset, end))
    pending = work.run(lambda items: [pl.read_bytes(o, chunk, max_offset=e) for pl, o, e in items], 30.0)
    if pending is not None:
        await settle(pending)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


class CoordinatorHost:
    """The partitions of `topic` this broker leads, loaded and served; see the module's text."""

    topic: str = ""
    kind = "coordinator"  # names the log events: "group" or "transaction"
    load_chunk = LOAD_CHUNK

    def __init__(self, node: Any, num_partitions: int, replication_factor: int) -> None:
        self.node = node
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.unmade: set[int] = set()  # led here, its log not made here yet
        self._loaded: dict[int, asyncio.Event] = {}
        self._creating: asyncio.Task | None = None
        self._work: set[asyncio.Task] = set()  # loads and writes under way

    # ------------------------------------------------------------------------------------------- to fill in
    def _topic_configs(self) -> list[tuple[str, str]]:
        return []

    def _unload(self, p: int) -> int:
        """Drops what this coordinator holds of partition `p`; how many keys went."""
        return 0

    def _take(self, acc: Any, p: int, header: Any, record: Any) -> None:
        """One record read while loading `p`, added to `acc` (what `_new_load` made)."""

    def _new_load(self) -> Any:
        return []

    def _loaded_records(self, p: int, acc: Any) -> int:
        """Applies what a load of `p` read; how many keys it held (for the log)."""
        return 0

    async def _tick(self, now: int) -> None:
        """Work of each tick after the ownership check (timers of the subclass)."""

    def _stopped(self) -> None:
        """Called once when the node stops."""

    # ------------------------------------------------------------------------------------------- hosting
    def start(self) -> None:
        self.node.spawn(self._run())

    def _spawn(self, coro: Any) -> None:
        """A task of this coordinator's, dropped when done and cancelled when the coordinator stops."""
        task = asyncio.ensure_future(coro)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def _run(self) -> None:
        try:
            while not self.node.stopping:
                try:
                    self._refresh_ownership()
                    await self._tick(now_ms())
                except Exception:  # one bad tick must not stop the timers of every key
                    log.exception("coordinator_tick_failed", kind=self.kind)
                await asyncio.sleep(TICK_S)
        finally:  # the node stops: what is under way stops with it
            for task in list(self._work):
                task.cancel()
            self._stopped()

    def topic_partitions(self) -> int:
        topic = self.node.metadata.topic(self.topic)
        return len(topic.partitions) if topic is not None else self.num_partitions

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.topic_partitions())

    def status(self, key: str) -> int:
        """0 when this broker coordinates `key` now, else the code a request about it answers."""
        self._refresh_ownership()
        p = self.partition_of(key)
        if p in self.owned:
            return ErrorCode.NONE
        if p in self.loading or p in self.unmade:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def _led_here(self) -> set[int]:
        topic = self.node.metadata.topic(self.topic)
        if topic is None:
            return set()
        return {p for p, part in topic.partitions.items() if part.leader == self.node.node_id}

    def _refresh_ownership(self) -> None:
        led = self._led_here()
        self.unmade &= led
        for p in (self.owned | self.loading) - led:
            self.owned.discard(p)
            self.loading.discard(p)
            gone = self._unload(p)
            log.info("coordinator_partition_unloaded", kind=self.kind, topic=self.topic, partition=p, keys=gone)
        for p in led - self.owned - self.loading:
            try:
                plog = self.node.partition_log(self.topic, p)
            except Exception:  # not made here yet: loaded once it is
                self.unmade.add(p)
                continue
            self.unmade.discard(p)
            if plog.log_end_offset == plog.log_start_offset:  # nothing to read (a new topic): served at once
                self.owned.add(p)
                continue
            self.loading.add(p)
            self._loaded.setdefault(p, asyncio.Event()).clear()
            self._spawn(self._load(p))

    async def wait_loaded(self, key: str, timeout_s: float) -> None:
        """Waits (bounded) while the key's partition is loading here, so FindCoordinator's answer is followed by
        requests the coordinator can serve (clients differ in how they take COORDINATOR_LOAD_IN_PROGRESS)."""
        p = self.partition_of(key)
        deadline = time.monotonic() + timeout_s
        while p in self.unmade and time.monotonic() < deadline:  # its log is being made here (a new topic)
            await asyncio.sleep(TICK_S)
            self._refresh_ownership()
        if p in self.loading:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._loaded.setdefault(p, asyncio.Event()).wait(),
                                       max(0.0, deadline - time.monotonic()))

    async def ensure_topic(self) -> tuple[int, str | None]:
        """Creates the topic when missing (once at a time); (code, message) for FindCoordinator."""
        if self.node.metadata.topic(self.topic) is not None:
            return ErrorCode.NONE, None
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_topic())
            self._work.add(self._creating)
            self._creating.add_done_callback(self._work.discard)
        problem = await asyncio.shield(self._creating)
        if self.node.metadata.topic(self.topic) is not None:
            return ErrorCode.NONE, None
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, problem

    async def _create_topic(self) -> str | None:
        body = CreateTopicsRequest(topics=[CreatableTopic(
            name=self.topic, num_partitions=self.num_partitions, replication_factor=self.replication_factor,
            configs=[CreatableTopicConfig(name=k, value=v) for k, v in self._topic_configs()])], timeout_ms=30_000)
        try:
            resp = await self.node.controller_request(body, 7)
        except Exception as e:
            return f"{self.topic} could not be created: {e}"
        t = resp.topics[0]
        if t.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("coordinator_topic_not_created", topic=self.topic, error_code=t.error_code,
                        message=t.error_message)
            return f"{self.topic} could not be created: {t.error_message or t.error_code}"
        return None

    # ------------------------------------------------------------------------------------------- loading
    async def _load(self, p: int) -> None:
        acc = self._new_load()
        count = 0
        try:
            plog = self.node.partition_log(self.topic, p)
            # To the log end, not the high watermark: a new leader's HW can lag what it holds, and every record it
            # holds stays (a leader never truncates its own log), writes acknowledged by the old leader included.
            end = plog.log_end_offset
            offset = plog.log_start_offset
            while offset < end:
                chunk = await read_chunk(self.node, plog, offset, end, self.load_chunk)
                if not chunk:
                    break
                before = offset
                view = memoryview(chunk)
                for pos, header in iter_batches(view):
                    # By batch, not by record: a compacted log has holes and may keep empty batches, and the
                    # next read must start past every batch this one held.
                    for r in iter_records(view[pos:pos + header.size]):
                        if r.offset < end:
                            self._take(acc, p, header, r)
                    offset = max(offset, header.last_offset + 1)
                if offset == before:  # no whole batch in what was read: nothing more can be read from here
                    log.warning("coordinator_load_stopped", topic=self.topic, partition=p, offset=offset,
                                log_end=end)
                    break
            count = self._loaded_records(p, acc)
        except Exception:
            log.exception("coordinator_load_failed", topic=self.topic, partition=p)
            self.loading.discard(p)  # tried again on the next tick while it is still led here
            return
        finally:
            self._loaded.setdefault(p, asyncio.Event()).set()
        if p in self.loading:
            self.loading.discard(p)
            self.owned.add(p)
            log.info("coordinator_partition_loaded", kind=self.kind, topic=self.topic, partition=p, keys=count)

    # ------------------------------------------------------------------------------------------- writing
    async def _produce(self, p: int, batch: bytes, request: Any, timeout_ms: int, key: str) -> int:
        """Appends `batch` to partition `p` with acks=all; the code a coordinator's client should see."""
        body = ProduceRequest(acks=-1, timeout_ms=timeout_ms, topic_data=[
            TopicProduceData(name=self.topic, partition_data=[PartitionProduceData(index=p, records=batch)])])
        from kjbod.broker.handlers import produce  # the handler package imports the coordinators

        resp = await settle(produce.handle(self.node, request, body))
        code = int(resp.responses[0].partition_responses[0].error_code)
        if code:
            log.warning("coordinator_append_failed", topic=self.topic, key=key, partition=p, error_code=code)
        # Kafka maps a failed write to what a client retries against the right broker.
        if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
            return ErrorCode.NOT_COORDINATOR
        if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return code
