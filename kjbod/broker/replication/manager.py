"""The replica manager: every local replica's replication state, driven by the metadata, follower fetches and
time; the acks=all purgatory; the ISR changes sent to the controller.

Strategy (Kafka's ReplicaManager and Partition, kraft-notes C):

* `sync(image, changed, removed, configs_changed)` after every applied delta: each local replica it changed becomes leader or follower when its leader
  epoch, leader or partition epoch changed (partition.py); a new leader starts its epoch at its LEO in the
  leader epoch cache; a follower's fetcher (fetcher.py) is pointed at its leader.  The log's HW is then ours
  (`auto_high_watermark` off), restored from `replication-offset-checkpoint` the first time.  The new epoch
  is in the cache at once; its file is written on the log's dir worker (no file I/O here: the event loop).
* Leader side of a follower's Fetch: `check_follower_fetch` (epochs, replica id, broker epoch, LastFetchedEpoch
  → DivergingEpoch or OFFSET_OUT_OF_RANGE) before the read, `follower_fetched` after it (the follower's LEO,
  ISR expansion, the HW).
* acks=all: NOT_ENOUGH_REPLICAS before the append when the ISR is below min ISR; then one DelayedProduce per
  request (a future and a timer, no task), each partition completed when the HW passes its last offset (from
  the HW move itself, never polled), NOT_ENOUGH_REPLICAS_AFTER_APPEND
  when the maximal ISR is below min ISR by then, NOT_LEADER_OR_FOLLOWER when leadership goes, REQUEST_TIMED_OUT
  at the request's timeout.
* DeleteRecords (delete_records.py): each follower's log start offset from its fetches (`follower_log_start`),
  for the low watermark; a DeleteRecords waiting on it is looked at again when one moves or the leadership goes.
* Throttles (throttle.py): the leader and follower quotas, refreshed in `sync` (the lists of the topics whose
  configs a delta changed; every topic's in a full sync);
  `leader_throttled` / `leader_sent` for the leader's answer, `follower_throttled` / `follower_appended` for
  the fetchers.
* ISR shrink: a timer every `replica.lag.time.max.ms / 2`.  ISR changes go to the controller as AlterPartition,
  one request in flight for the broker, one pending change per partition (kraft-notes C.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.broker.replication.config import ReplicationConfig
from kjbod.broker.replication.delete_records import DeleteRecordsPurgatory
from kjbod.broker.replication.partition import FOLLOWER, LEADER, PartitionState, PendingIsr
from kjbod.broker.replication.throttle import ReplicationThrottles
from kjbod.metadata import BROKER_RESOURCE
from kjbod.net import trace
from kjbod.net.sasl import client_credentials_of
from kjbod.net.tasks import cancel_and_wait
from kjbod.net.tls import client_context_of
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.alter_partition_request import (
    AlterPartitionRequest,
    BrokerState,
    PartitionData,
    TopicData,
)
from kjbod.wire.handler import Later

log = structlog.get_logger("kjbod.replication")

TopicPartition = tuple[str, int]
AlterPartitionSender = Callable[[Callable[[int], AlterPartitionRequest]], Awaitable[Any]]
# Partition results that leave the change pending until new metadata arrives (kraft-notes C.3)
_WAIT_FOR_METADATA = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                                ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                                ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED})
_ROLL_BACK = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})
ALTER_PARTITION_RETRY_S = 0.05


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class FetchCheck:
    """The leader's verdict on one partition of a follower's fetch, before reading."""

    error_code: int = 0
    diverging: tuple[int, int] | None = None  # (epoch, end offset)


_PASSED = FetchCheck()  # a follower's fetch that may be read (shared: nobody changes a verdict)


class DelayedProduce:
    """One acks=all request in the purgatory: a code per partition (None while it waits), and a future done
    once none waits, or at the request's timeout, which answers the rest: done with the codes, or with what
    `then(codes)` makes of them (the request's answer, so no task or further future stands between the HW move
    and the write). With `later`, the future is a Later (kjbod.wire.handler) whose callbacks run in the HW
    move itself: an asyncio future's run one loop pass later, which a busy loop spends on everything else
    ready in that pass before the answer is written."""

    __slots__ = ("codes", "left", "future", "timer", "partitions", "then")

    def __init__(self, n: int, then: Callable[[list[int]], Any] | None = None, later: bool = False) -> None:
        self.codes: list[int | None] = [None] * n
        self.left = n
        self.future: Any = Later() if later else asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None
        self.partitions: list[TopicPartition] = []  # those it waits on in the purgatory
        self.then = then

    def complete(self, i: int, code: int) -> None:
        if self.codes[i] is not None:
            return
        self.codes[i] = code
        self.left -= 1
        if self.left == 0:
            self._finish()

    def expire(self, code: int) -> None:
        self.codes = [code if c is None else c for c in self.codes]
        self.left = 0
        self._finish()

    def _finish(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.future.done():  # a request whose connection went is cancelled: nobody reads its answer
            return
        codes = [c if c is not None else 0 for c in self.codes]
        then = self.then
        future = self.future
        later = future.__class__ is Later
        try:
            result = codes if then is None else then(codes)
        except Exception as e:  # the caller's bug: its request's answer, not the HW move's
            future.fail(e) if later else future.set_exception(e)
        else:
            future.resolve(result) if later else future.set_result(result)


class ReplicaManager:
    def __init__(self, node: Any, config: ReplicationConfig, alter_partition: AlterPartitionSender | None = None,
                 clock: Callable[[], int] = now_ms) -> None:
        self.node = node
        self.config = config
        self.clock = clock
        self.states: dict[TopicPartition, PartitionState] = {}
        # The acks=all purgatory: per partition, (offset the HW must reach, the request's wait, its index)
        self._waiters: dict[TopicPartition, list[tuple[int, DelayedProduce, int]]] = {}
        self.delete_records = DeleteRecordsPurgatory(self)  # DeleteRecords waiting for followers' log starts
        self._alter_partition = alter_partition
        self._alter_wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # The loop `start` runs on, for the acks=all timers: asyncio.get_running_loop() is a getpid system call
        # each time (CPython checks for a fork), once per acks=all Produce otherwise.
        self._loop: asyncio.AbstractEventLoop | None = None
        from kjbod.broker.replication.fetcher import FetcherManager

        self.fetchers = FetcherManager(self)
        self.listener_name = inter_broker_listener(node.config)
        # The fetchers' client side of a TLS inter-broker listener (this broker's ssl.* keys for it), else None
        self.ssl_context = client_context_of(node.config, self.listener_name)
        # ... and the credentials for a SASL inter-broker listener (this broker's JAAS config for it), else None
        self.sasl = client_credentials_of(node.config, self.listener_name, "sasl.mechanism.inter.broker.protocol")
        # ISR changes this leader made (the controller took them): Kafka's IsrShrinksPerSec / IsrExpandsPerSec
        # as counters, read by the metrics endpoint (kjbod.metrics), which turns them into rates.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.throttles = ReplicationThrottles(
            node.node_id, config.quota_window_num, config.quota_window_size_seconds)
        # Each topic's min.insync.replicas as the image gives it: looked up again once there is a new image (each
        # HW move and acks=all answer asks for it; the image's topic configs change only with a new image).
        self._min_isr_image: Any = None
        self._min_isrs: dict[str, int] = {}
        self._min_isr_dynamic: Mapping[str, str] = {}

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._isr_expiration(), name="isr-expiration"))
        if self._alter_partition is not None:
            self._tasks.append(loop.create_task(self._alter_partition_loop(), name="alter-partition"))

    async def close(self) -> None:
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks.clear()
        self._loop = None
        await self.fetchers.close()
        for tp in list(self._waiters):
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # ------------------------------------------------------------------------------------------ the metadata

    def _local_log(self, topic: str, partition: int) -> Any:
        logs = getattr(self.node, "logs", None)
        if logs is None:
            return None
        plog = logs.manager.find(topic, partition)
        return plog if plog is not None and plog.online else None

    def sync(self, image: Any, changed: Mapping[Any, Iterable[int]] | None = None,
             removed: Iterable[Any] = (), configs_changed: Iterable[str] = ()) -> None:
        """Makes every local replica lead or follow as `image` says (see the module docstring); replicas no
        longer local are forgotten.  With `changed` (topic id -> partition ids: what a delta wrote, see
        MetadataDelta.changed_partitions), `removed` (the topics it deleted) and `configs_changed` (the names
        of the topics whose configs it changed: MetadataDelta.changed_topic_configs) only those partitions,
        and those topics' throttled replica lists, are looked at, so a delta costs what it changed, not the
        size of the topics it touched nor the number of topics."""
        if changed is None:
            self._sync_all(image)
            return
        me = self.node.node_id
        now = self.clock()
        self.throttles.update(image, configs_changed)  # the bounds (two broker configs), and those topics' lists
        for gone in removed:
            for pid in gone.partitions:
                state = self.states.get((gone.name, pid))
                if state is not None and state.topic_id == gone.topic_id:
                    self._forget((gone.name, pid))
        for tid, pids in changed.items():
            topic = image.topic_by_id(tid)
            if topic is None:
                continue
            for pid in pids:
                p = topic.partitions.get(pid)
                if p is None:
                    continue
                if me in p.replicas:
                    self._sync_partition(topic, p, image, now)
                tp = (topic.name, pid)
                state = self.states.get(tp)
                if state is not None and (me not in p.replicas or topic.topic_id != state.topic_id
                                          or self._local_log(*tp) is None):
                    self._forget(tp)

    def _sync_all(self, image: Any) -> None:
        me = self.node.node_id
        now = self.clock()
        self.throttles.update(image)
        for topic in image.topics():
            for p in topic.partitions.values():
                if me in p.replicas:
                    self._sync_partition(topic, p, image, now)
        for tp, state in list(self.states.items()):
            topic = image.topic(tp[0])
            p = topic.partitions.get(tp[1]) if topic is not None else None
            if (p is None or me not in p.replicas or topic.topic_id != state.topic_id
                    or self._local_log(*tp) is None):
                self._forget(tp)

    def _forget(self, tp: TopicPartition) -> None:
        # no role: an append handed over while it led is refused when it comes back (lost_leadership)
        self.states.pop(tp).role = None
        self.fetchers.remove(tp)
        self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.delete_records.check(tp)

    def _sync_partition(self, topic: Any, p: Any, image: Any, now: int) -> None:
        me = self.node.node_id
        tp = (topic.name, p.partition)
        plog = self._local_log(*tp)
        if plog is None:
            return
        state = self.states.get(tp)
        if state is None:
            state = self.states[tp] = PartitionState(topic.name, p.partition, me, topic.topic_id)
            if plog.auto_high_watermark:
                hw = plog.checkpoint_high_watermark
                plog.auto_high_watermark = False
                plog.high_watermark = hw if hw is not None else plog.high_watermark
        if (state.leader_epoch, state.partition_epoch, state.leader_id) == (
                p.leader_epoch, p.partition_epoch, p.leader) and state.role is not None:
            return
        state.topic_id = topic.topic_id
        if p.leader == me:
            if state.make_leader(p, plog.log_end_offset, now):
                if plog.assign_leader_epoch(p.leader_epoch, plog.log_end_offset):
                    self._settle_leader_epoch(plog, p.leader_epoch)
                log.info("became_leader", topic=topic.name, partition=p.partition,
                         leader_epoch=p.leader_epoch, isr=list(p.isr), log_end_offset=plog.log_end_offset)
            self.fetchers.remove(tp)
            self._maybe_increment_hw(state, plog, image)
        else:
            was_leader = state.role == LEADER
            if state.make_follower(p):
                self.fetchers.remove(tp)
                if p.leader >= 0:
                    self.fetchers.add(tp, p.leader, state.leader_epoch)
                log.info("became_follower", topic=topic.name, partition=p.partition, leader=p.leader,
                         leader_epoch=p.leader_epoch)
            if was_leader:
                self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                self.delete_records.check(tp)

    def _settle_leader_epoch(self, plog: Any, epoch: int) -> None:
        """The new epoch, in the log's cache now, placed at the log's end and written to its file on its dir's
        worker, in order with the work handed to it before (a follower's last appends: the same hand-off,
        kjbod.storage.log.settle_leader_epoch); here without workers."""
        worker = self.node.logs.manager.worker(plog.log_dir)
        if worker is None:
            plog.settle_leader_epoch(epoch)
        else:
            worker.submit(functools.partial(plog.settle_leader_epoch, epoch),
                          functools.partial(_epoch_settled, plog))

    def leader_epoch(self, topic: str, partition: int) -> int:
        state = self.states.get((topic, partition))
        return state.leader_epoch if state is not None and state.role == LEADER else -1

    # ------------------------------------------------------------------------------------------ follower fetches

    def check_follower_fetch(self, topic: str, partition: int, replica_id: int, broker_epoch: int,
                             current_leader_epoch: int, fetch_offset: int, last_fetched_epoch: int) -> FetchCheck:
        """Kafka's checks on a follower's fetch of one partition, in its order (kraft-notes C.1): where the
        partition is hosted first (_hosting_error), then the epochs, the leadership and the follower."""
        return self._check(topic, partition, replica_id, broker_epoch, current_leader_epoch, fetch_offset,
                           last_fetched_epoch)[0]

    def follower_fetch(self, topic: str, partition: int, replica_id: int, broker_epoch: int,
                       current_leader_epoch: int, fetch_offset: int, last_fetched_epoch: int) -> FetchCheck:
        """check_follower_fetch, then follower_fetched when the fetch passed: the Fetch handler's one call per
        partition of a follower's fetch, with the partition's log and state looked up once."""
        check, state, plog = self._check(topic, partition, replica_id, broker_epoch, current_leader_epoch,
                                         fetch_offset, last_fetched_epoch)
        if check is _PASSED:
            self._fetched(state, plog, replica_id, broker_epoch, fetch_offset)
        return check

    def _check(self, topic: str, partition: int, replica_id: int, broker_epoch: int, current_leader_epoch: int,
               fetch_offset: int, last_fetched_epoch: int) -> tuple[FetchCheck, Any, Any]:
        """(verdict, the leader's state, the log): see check_follower_fetch; the verdict is _PASSED when the
        fetch may be read."""
        logs = getattr(self.node, "logs", None)
        plog = logs.manager.find(topic, partition) if logs is not None else None
        if plog is None or not plog.online:
            code = self._hosting_error(topic, partition)
            if code:
                return FetchCheck(code), None, None
        state = self.states.get((topic, partition))
        if state is None or state.role != LEADER:
            return FetchCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER), None, None
        if current_leader_epoch >= 0:
            if current_leader_epoch < state.leader_epoch:
                return FetchCheck(ErrorCode.FENCED_LEADER_EPOCH), None, None
            if current_leader_epoch > state.leader_epoch:
                return FetchCheck(ErrorCode.UNKNOWN_LEADER_EPOCH), None, None
        if replica_id not in state.followers:
            return FetchCheck(ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch >= 0
                              else ErrorCode.NOT_LEADER_OR_FOLLOWER), None, None
        registration = self.node.metadata.brokers.get(replica_id)
        if broker_epoch != -1 and (registration is None or registration.epoch > broker_epoch):
            return FetchCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER), None, None  # a stale broker epoch (KRaft fences it)
        if plog is None or not plog.online:  # Kafka's Partition without a log
            return FetchCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER), None, None
        if last_fetched_epoch >= 0:
            epoch, end = plog.leader_epochs.end_offset_for(last_fetched_epoch, plog.log_end_offset)
            if epoch < 0:
                return FetchCheck(ErrorCode.OFFSET_OUT_OF_RANGE), None, None
            if epoch < last_fetched_epoch or end < fetch_offset:
                return FetchCheck(diverging=(epoch, end)), None, None
        if fetch_offset < plog.log_start_offset or fetch_offset > plog.log_end_offset:
            return FetchCheck(ErrorCode.OFFSET_OUT_OF_RANGE), None, None
        return _PASSED, state, plog

    def _hosting_error(self, topic: str, partition: int) -> int:
        """Kafka's ReplicaManager.getPartitionOrError, asked before a follower's fetch is looked at: 0 when the
        replica's log is here and online; KAFKA_STORAGE_ERROR when it is in an offline dir; for one this broker
        has no log for, NOT_LEADER_OR_FOLLOWER when the image has the partition (the follower refreshes its
        metadata), UNKNOWN_TOPIC_OR_PARTITION when it does not."""
        logs = getattr(self.node, "logs", None)
        plog = logs.manager.find(topic, partition) if logs is not None else None
        if plog is not None:
            return 0 if plog.online else ErrorCode.KAFKA_STORAGE_ERROR
        offline = getattr(logs, "partition_offline", None)
        if offline is not None and offline(topic, partition):
            return ErrorCode.KAFKA_STORAGE_ERROR
        t = self.node.metadata.topic(topic)
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if t is not None and partition in t.partitions else (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def follower_fetched(self, topic: str, partition: int, replica_id: int, broker_epoch: int,
                         fetch_offset: int) -> None:
        """After a good read for a follower: its fetch state, ISR expansion, the HW (kraft-notes C.1)."""
        state = self.states.get((topic, partition))
        plog = self._local_log(topic, partition)
        if state is None or state.role != LEADER or plog is None or replica_id not in state.followers:
            return
        self._fetched(state, plog, replica_id, broker_epoch, fetch_offset)

    def _fetched(self, state: PartitionState, plog: Any, replica_id: int, broker_epoch: int,
                 fetch_offset: int, leo: int | None = None) -> None:
        """`leo`: the log's end offset when the caller just read it (the short way: follower_fetch_fast)."""
        if trace.ON:
            trace.event("fetched_by", replica_id, fetch_offset)
        now = self.clock()
        if leo is None:
            leo = plog.log_end_offset
        moved = state.update_follower(replica_id, fetch_offset, broker_epoch, leo, now)
        image = self.node.metadata
        # A follower in the ISR has nothing to join (PartitionState.expansion's first test, without the call).
        expanded = None if replica_id in state.isr else state.expansion(replica_id, plog.high_watermark, image)
        if expanded is not None:
            self._propose(state, expanded, expanding=True)
        if moved or expanded is not None:
            self._maybe_increment_hw(state, plog, image, now, leo)

    def follower_log_start(self, topic: str, partition: int, replica_id: int, log_start_offset: int) -> None:
        """A follower's fetch that passed the checks said where its log starts (Kafka's
        Replica.updateFetchStateOrThrow), by the general way (hooks) or the short way (follower_fetch_fast): kept
        for the low watermark, and a waiting DeleteRecords looks again."""
        state = self.states.get((topic, partition))
        follower = state.followers.get(replica_id) if state is not None and state.role == LEADER else None
        if follower is None or follower.log_start_offset == log_start_offset:
            return
        follower.log_start_offset = log_start_offset
        self.delete_records.check((topic, partition))

    # ------------------------------------------------------------------------------------------ throttles

    def leader_throttled(self, topic: str, partition: int, replica_id: int) -> bool:
        """Whether this leader answers `replica_id`'s fetch of the partition with no records now (throttle.py)."""
        if not self.throttles.leader.throttled:
            return False
        state = self.states.get((topic, partition))
        in_sync = state is not None and replica_id in state.isr
        return self.throttles.leader_throttled(topic, partition, in_sync, self.clock())

    def leader_sent(self, topic: str, partition: int, nbytes: int) -> None:
        """Record bytes sent to a follower: counted against the leader quota when the partition is throttled."""
        quota = self.throttles.leader
        if quota.throttled and quota.is_throttled(topic, partition):
            quota.record(nbytes, self.clock())

    def follower_throttled(self, topic: str, partition: int, in_sync: bool) -> bool:
        return bool(self.throttles.follower.throttled) and self.throttles.follower_throttled(
            topic, partition, in_sync, self.clock())

    def follower_throttle_wait_ms(self) -> int:
        """How long until the follower quota allows a held partition again (0: now)."""
        return self.throttles.follower.ms_until_within(self.clock())

    def follower_appended(self, topic: str, partition: int, nbytes: int) -> None:
        quota = self.throttles.follower
        if quota.throttled and quota.is_throttled(topic, partition):
            quota.record(nbytes, self.clock())

    @property
    def leader_throttled_byte_rate(self) -> float:
        """LeaderReplication byte-rate: throttled bytes this leader sent per second (the metrics endpoint's)."""
        return self.throttles.leader.byte_rate(self.clock())

    @property
    def follower_throttled_byte_rate(self) -> float:
        """FollowerReplication byte-rate: throttled bytes this follower appended per second."""
        return self.throttles.follower.byte_rate(self.clock())

    # ------------------------------------------------------------------------------------------ the HW

    def _min_isr(self, topic: str) -> int:
        image = self.node.metadata
        if image is not self._min_isr_image:
            self._min_isr_image = image
            self._min_isrs = {}
            # this broker's dynamic values over the cluster default's (kjbod.broker.broker_config)
            self._min_isr_dynamic = {**image.resource_configs(BROKER_RESOURCE, ""),
                                     **image.resource_configs(BROKER_RESOURCE, str(self.node.node_id))}
        min_isr = self._min_isrs.get(topic)
        if min_isr is None:
            t = image.topic(topic)
            min_isr = self._min_isrs[topic] = self.config.min_isr(t.configs if t is not None else None,
                                                                  self._min_isr_dynamic)
        return min_isr

    def _maybe_increment_hw(self, state: PartitionState, plog: Any, image: Any, now: int | None = None,
                            leo: int | None = None) -> None:
        """`now` and `leo` when the caller has them (a follower's fetch: `_fetched`)."""
        # `_min_isr`'s kept value looked up here (this runs at every follower fetch that moves its follower).
        min_isr = self._min_isrs.get(state.topic) if self.node.metadata is self._min_isr_image else None
        if min_isr is None:
            min_isr = self._min_isr(state.topic)
        hw = state.new_high_watermark(plog.high_watermark, plog.log_end_offset if leo is None else leo,
                                      self.clock() if now is None else now, self.config.lag_time_max_ms,
                                      min_isr, image)
        if hw is None:
            return
        plog.high_watermark = hw
        if trace.ON:
            trace.event("hw", hw, state.topic)
        self._complete_waiters(state, plog.high_watermark)
        self.node.notify_high_watermark(state.topic, state.partition)  # its consumers' long polls may read now

    def leader_appended(self, topic: str, partition: int) -> None:
        """After a leader append: with no follower in the ISR the HW may move at once."""
        state = self.states.get((topic, partition))
        plog = self._local_log(topic, partition)
        if trace.ON and plog is not None:
            trace.event("appended", plog.log_end_offset, topic)
        if state is not None and state.role == LEADER and plog is not None:
            self._maybe_increment_hw(state, plog, self.node.metadata)

    # ------------------------------------------------------------------------------------------ acks=all

    def check_acks_all(self, topic: str, partition: int) -> int:
        """NOT_ENOUGH_REPLICAS before an acks=all append when the ISR is below min ISR (else 0)."""
        state = self.states.get((topic, partition))
        if state is None or state.role != LEADER:
            return 0  # not replicated here (a lone node): the handler's own checks apply
        if len(state.isr) < state.effective_min_isr(self._min_isr(topic)):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return 0

    def leader_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's replication state as a Produce hands its append to the dir's worker, for
        hooks.lost_leadership to look at once the append is done (None: not replicated here, a lone node's).
        The same object while this broker keeps the replica, whatever the epochs; `_forget` takes its role."""
        return self.states.get((topic, partition))

    def replicated(self, topic: str, partition: int) -> bool:
        state = self.states.get((topic, partition))
        return state is not None and state.role == LEADER

    def must_wait(self, topic: str, partition: int, required_offset: int) -> bool:
        """An acks=all append up to `required_offset` that the HW has not passed yet (or whose outcome is an
        error the waiter reports, such as NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        state = self.states.get((topic, partition))
        if state is None or state.role != LEADER:
            return False
        plog = self._local_log(topic, partition)
        return plog is None or plog.high_watermark < required_offset or self._acks_outcome(state) != 0

    def delay_produce(self, waits: list[tuple[str, int, int]], timeout_s: float,
                      then: Callable[[list[int]], Any] | None = None, *, later: bool = False) -> Any:
        """The acks=all outcome of one Produce request, a code per (topic, partition, offset the HW must reach)
        in order, or `then(codes)`: see the module docstring.  One future (a Later with `later`: see
        DelayedProduce) and one timer per request (Kafka's DelayedProduce in its purgatory), completed from HW
        moves; no task, no polling."""
        op = DelayedProduce(len(waits), then, later)
        for i, (topic, partition, required) in enumerate(waits):
            tp = (topic, partition)
            state = self.states.get(tp)
            plog = self._local_log(topic, partition)
            if state is None or state.role != LEADER or plog is None:
                op.complete(i, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif plog.high_watermark >= required:
                op.complete(i, self._acks_outcome(state))
            else:
                self._waiters.setdefault(tp, []).append((required, op, i))
                op.partitions.append(tp)
        if not op.future.done():
            op.timer = (self._loop or asyncio.get_running_loop()).call_later(max(timeout_s, 0.0), self._expire, op)
        return op.future

    async def wait_for_replicas(self, topic: str, partition: int, required_offset: int, timeout_s: float) -> int:
        """`delay_produce` for one partition."""
        return (await self.delay_produce([(topic, partition, required_offset)], timeout_s))[0]

    def _expire(self, op: DelayedProduce) -> None:
        """The request's timeout.ms passed: what is still waiting answers REQUEST_TIMED_OUT."""
        for tp in op.partitions:
            waiters = self._waiters.get(tp)
            if waiters:
                waiters[:] = [w for w in waiters if w[1] is not op]
        op.expire(ErrorCode.REQUEST_TIMED_OUT)

    def _acks_outcome(self, state: PartitionState) -> int:
        if len(state.maximal_isr) < state.effective_min_isr(self._min_isr(state.topic)):
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return 0

    def _complete_waiters(self, state: PartitionState, hw: int) -> None:
        waiters = self._waiters.get((state.topic, state.partition))
        if not waiters:
            return
        outcome = None
        left = []
        for entry in waiters:
            required, op, i = entry
            if hw >= required:
                if outcome is None:
                    outcome = self._acks_outcome(state)
                op.complete(i, outcome)
            else:
                left.append(entry)
        waiters[:] = left

    def _fail_waiters(self, tp: TopicPartition, code: int) -> None:
        for _required, op, i in self._waiters.pop(tp, []):
            op.complete(i, code)

    # ------------------------------------------------------------------------------------------ ISR changes

    async def _isr_expiration(self) -> None:
        interval = max(self.config.lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            trace.event("isr_expiration")
            self.shrink_isrs()

    def shrink_isrs(self) -> None:
        now = self.clock()
        for state in self.states.values():
            if state.role != LEADER:
                continue
            plog = self._local_log(state.topic, state.partition)
            if plog is None:
                continue
            smaller = state.shrink(plog.log_end_offset, now, self.config.lag_time_max_ms)
            if smaller is not None:
                log.info("isr_shrinking", topic=state.topic, partition=state.partition, isr=list(state.isr),
                         new_isr=list(smaller))
                self._propose(state, smaller, expanding=False)

    def _propose(self, state: PartitionState, isr: tuple[int, ...], *, expanding: bool) -> None:
        if self._alter_partition is None:
            return
        state.pending = PendingIsr(isr, expanding)
        self._alter_wakeup.set()

    def pending_changes(self) -> list[PartitionState]:
        return [s for s in self.states.values() if s.pending is not None and not s.pending.sent]

    async def _alter_partition_loop(self) -> None:
        assert self._alter_partition is not None
        while True:
            await self._alter_wakeup.wait()
            self._alter_wakeup.clear()
            batch = self.pending_changes()
            if not batch:
                continue
            for s in batch:
                assert s.pending is not None
                s.pending.sent = True
            trace.event("alter_partition", len(batch))
            try:
                response = await self._alter_partition(lambda v, b=batch: self._alter_request(b, v))  # type: ignore[misc]
            except Exception as e:  # the controller is away: try again shortly, as Kafka's manager does
                log.warning("alter_partition_failed", error=str(e), partitions=len(batch))
                self._unsend(batch)
                await asyncio.sleep(ALTER_PARTITION_RETRY_S)
                continue
            if response.error_code:
                log.info("alter_partition_refused", error=ErrorCode(response.error_code).name)
                self._unsend(batch)
                await asyncio.sleep(ALTER_PARTITION_RETRY_S)
                continue
            self._alter_partition_done(batch, response)

    def _unsend(self, batch: list[PartitionState]) -> None:
        for s in batch:
            if s.pending is not None:
                s.pending.sent = False
        self._alter_wakeup.set()

    def _alter_request(self, batch: list[PartitionState], version: int) -> AlterPartitionRequest:
        image = self.node.metadata
        topics: dict[str, TopicData] = {}
        for s in batch:  # v2 and v3, the versions Kafka 4.x and kjbod serve, name topics by id
            assert s.pending is not None
            t = topics.setdefault(s.topic, TopicData(topic_id=s.topic_id))

            def epoch_of(r: int, s: PartitionState = s) -> int:
                f = s.followers.get(r)
                if f is not None and f.broker_epoch != -1:
                    return f.broker_epoch
                reg = image.brokers.get(r)
                return reg.epoch if reg is not None and r == self.node.node_id else -1

            t.partitions.append(PartitionData(
                partition_index=s.partition, leader_epoch=s.leader_epoch, partition_epoch=s.partition_epoch,
                new_isr=list(s.pending.isr) if version < 3 else [],
                new_isr_with_epochs=[BrokerState(broker_id=r, broker_epoch=epoch_of(r)) for r in s.pending.isr]
                if version >= 3 else []))
        return AlterPartitionRequest(broker_id=self.node.node_id, broker_epoch=self.node.broker_epoch,
                                     topics=list(topics.values()))

    def _alter_partition_done(self, batch: list[PartitionState], response: Any) -> None:
        by_key = {(s.topic_id, s.partition): s for s in batch}
        for t in response.topics:
            for r in t.partitions:
                s = by_key.get((t.topic_id, r.partition_index))
                if s is None or s.pending is None:
                    continue
                if r.error_code == 0:
                    expanding = s.pending.expanding
                    if s.committed(r.leader_epoch, r.partition_epoch, tuple(r.isr)):
                        if expanding:
                            self.isr_expands += 1
                        else:
                            self.isr_shrinks += 1
                        log.info("isr_changed", topic=s.topic, partition=s.partition, isr=list(r.isr),
                                 partition_epoch=r.partition_epoch)
                        plog = self._local_log(s.topic, s.partition)
                        if plog is not None:
                            self._maybe_increment_hw(s, plog, self.node.metadata)
                elif r.error_code in _ROLL_BACK:
                    s.pending = None
                elif r.error_code in _WAIT_FOR_METADATA:
                    pass  # stays pending (sent) until new metadata for it arrives
                else:
                    s.pending.sent = False
                    self._alter_wakeup.set()
                if r.error_code:
                    log.info("alter_partition_partition_refused", topic=s.topic, partition=s.partition,
                             error=_name(r.error_code))

    # ------------------------------------------------------------------------------------------ reporting

    @property
    def max_lag(self) -> int:
        """ReplicaFetcherManager MaxLag: the most offsets any partition this broker follows is behind its leader."""
        return self.fetchers.max_lag()

    @property
    def failed_partitions(self) -> int:
        """ReplicaFetcherManager FailedPartitionsCount: followed partitions whose fetching stopped on an error."""
        return self.fetchers.failed_partitions()

    @property
    def dead_threads(self) -> int:
        """ReplicaFetcherManager DeadThreadCount: fetchers whose task ended on an error."""
        return self.fetchers.dead_fetchers()

    def follower_lag(self, topic: str, partition: int) -> int | None:
        """How far this follower is behind its leader's end offset, as last heard (None: not a follower)."""
        state = self.states.get((topic, partition))
        if state is None or state.role != FOLLOWER:
            return None
        return self.fetchers.lag(topic, partition)


def _epoch_settled(plog: Any, ok: bool, value: Any) -> None:
    if not ok:  # a failing disk (the seam fails its dir): the epoch is kept in memory
        log.warning("leader_epoch_checkpoint_failed", partition=plog.name, log_dir=plog.log_dir, error=str(value))


def inter_broker_listener(config: Any) -> str:
    """`inter.broker.listener.name`, or (as Kafka's default) the first listener that is not a controller's."""
    name = getattr(config, "inter_broker_listener_name", None)
    if name:
        return str(name)
    controllers = set(getattr(config, "controller_listener_names", ()) or ())
    for ln in getattr(config, "listeners", ()) or ():
        if ln.name not in controllers:
            return str(ln.name)
    return "PLAINTEXT"


def _name(code: int) -> str:
    with contextlib.suppress(ValueError):
        return ErrorCode(code).name
    return f"error {code}"
