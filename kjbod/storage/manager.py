"""The LogManager: every partition log of this node, across all its log dirs (JBOD).

Strategy:

* **open()** locks every log dir, checks meta.properties (meta.ensure_meta_properties), then loads each dir in
  its own thread (Kafka's recovery threads per data dir): the clean-shutdown marker decides between the cheap
  load and the recovery of everything past the recovery point; ``-delete`` dirs are removed, ``-future`` dirs
  are loaded and kept aside for the replica mover, ``-stray`` dirs are listed and left alone. The marker is
  deleted once the dir is loaded, so a crash from then on is seen as unclean.
* **A failing dir** (any OSError in the fsio seam) goes offline on its own: its partitions raise
  KafkaStorageError, the others keep serving; ``on_dir_offline(path)`` is called once per dir and
  ``on_all_dirs_offline()`` once when none is left (the node should then stop, as Kafka halts). Both callbacks
  may run on the background thread: an asyncio node should hop back with ``loop.call_soon_threadsafe``.
* **Background work** (delayed deletions, flushing rolled segments, ``flush.ms``, checkpoints, retention,
  producer-id expiry, compaction: kjbod.storage.cleaner, one cleaner per dir) is :meth:`tick`, run by the node on a timer or by :meth:`start_background`'s thread.
  Retention and checkpoints follow Kafka's schedule (kjbod.storage.tasks.Periodic): a first run soon after
  :meth:`open`, then one per interval (``log.retention.check.interval.ms``,
  ``log.flush.offset.checkpoint.interval.ms``; high watermarks every 5 s, Kafka's default).
* **A full dir** (ENOSPC, EDQUOT, or usable bytes at or below ``log.dir.reserved.bytes``; see kjbod.storage.fsio)
  stays online: reads, moves off it, retention and deletes go on, appends are refused. Each dir's background
  thread checks its free space every ``space_check_interval_ms`` (``log.dir.space.check.interval.ms``), which
  is what brings a full dir back; placement never picks a full dir. A partition dir with no segment (a creation
  that failed half-way, on a full disk say) is debris: at start it is renamed ``-stray``, never loaded as a
  second copy of the partition.
* **close()** is the clean shutdown: every log flushed and closed, checkpoints written, then the
  ``.kafka_cleanshutdown`` marker, then the locks released.

Partition dir names are Kafka's: ``<topic>-<partition>``, ``<topic>-<partition>.<32 hex>-future``, ``-delete``
and ``-stray``. The metadata log dir is checked (meta.properties) but not locked or loaded unless it is also a
log dir: its owner (the metadata log) locks it when it is not one of ``log.dirs``, as Kafka's raft manager does.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.storage import timeline
from kjbod.storage.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointFormatError,
    parse_clean_shutdown,
    read_offset_checkpoint,
    render_clean_shutdown,
    write_offset_checkpoint,
)
from kjbod.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanAborted,
    Cleaner,
    CleanerConfig,
    CleanerError,
    log_to_clean,
    should_clean,
)
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import (
    CorruptMessageError,
    DuplicateLogError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirFullError,
    LogDirNotFoundError,
    StorageSetupError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kjbod.storage.fsio import FileHandle, LogDirIO
from kjbod.storage.health import DirHealthInfo, DirState, DirWatchdog
from kjbod.storage.log import PartitionLog, _wall_ms
from kjbod.storage.meta import MetaProperties, ensure_meta_properties
from kjbod.storage.placement import MOST_USABLE, POLICIES, DirCandidate, choose_dirs
from kjbod.storage.tasks import DeletionQueue, Periodic
from kjbod.storage.workers import DirWorker, workers_enabled

log = structlog.get_logger("kjbod.storage.manager")

FUTURE_DIR_SUFFIX = "-future"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
METADATA_TOPIC_DIR = "__cluster_metadata-0"
MAX_TOPIC_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_SUFFIXED = re.compile(r"^(\S+)-(\d+)\.([0-9a-f]{32})(-future|-delete|-stray)$")

TopicPartition = tuple[str, int]

# Kafka's log.initial.task.delay.ms: the periodic tasks first run this long after startup (or after one interval
# when that is shorter), so a node restarted more often than an interval still runs them.
INITIAL_TASK_DELAY_MS = 30_000
_MIN_TICK_S = 0.005
# How long a shutdown waits for a dir's background thread stuck in one file operation before failing that dir.
SHUTDOWN_GRACE_S = 5.0


def validate_topic_name(topic: str) -> None:
    if not topic or topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters other than ASCII letters, digits, '.', '_', '-'")


def parse_partition_dir_name(name: str) -> tuple[str, int, str | None] | None:
    """(topic, partition, suffix or None) for a partition dir name, None if it is not one."""
    m = _SUFFIXED.match(name)
    if m:
        return m.group(1), int(m.group(2)), m.group(4)
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part), None


def suffixed_dir_name(topic: str, partition: int, suffix: str) -> str:
    """``<topic>-<partition>.<32 hex>-<suffix>``; -delete and -stray names are capped at 255 characters by
    shortening the topic, as Kafka does."""
    tail = f"-{partition}.{os.urandom(16).hex()}{suffix}"
    if suffix != FUTURE_DIR_SUFFIX:
        topic = topic[: max(1, 255 - len(tail))]
    return topic + tail


@dataclass(frozen=True)
class LogDirInfo:
    path: str
    directory_id: str | None
    online: bool
    total_bytes: int  # -1 when offline or not answering (Kafka's UNKNOWN_VOLUME_BYTES)
    usable_bytes: int
    error: str | None = None
    state: DirState = DirState.ONLINE
    recent_latency_ms: int = 0  # the slowest operation of the last few seconds (kjbod.storage.health)
    failed_at_ms: int = -1  # when an offline dir went offline (wall clock, ms); -1 if online or not known
    reserved_bytes: int = -1  # log.dir.reserved.bytes as applied to this dir's filesystem (-1: not known)
    cordoned: bool = False  # named by cordoned.log.dirs (KIP-1066): keeps its replicas, gets no new ones
    device: int = -1  # st_dev of the dir's filesystem, from the probe just answered (-1: not known)


@dataclass(frozen=True)
class PartitionSpec:
    topic: str
    partition: int
    topic_id: str | None = None
    config: LogConfig | None = None
    dir: str | None = None  # a log dir path or directory id; None: placement decides


class _Dir:
    def __init__(self, io: LogDirIO, timers: tuple[Periodic, Periodic, Periodic, Periodic]) -> None:
        self.io = io
        self.directory_id: str | None = None
        self.lock: FileHandle | None = None
        self.had_clean_shutdown = False
        self.clean_shutdown_epoch = -1
        self.stray: list[str] = []
        # Each dir's background work has its own schedule, thread and checkpoint lock, so a dir whose disk hangs
        # stops only its own flushes, retention, deletions and checkpoints. The checkpoint files are written
        # through one temp name each: two writers (the background tick, a replica move, a deletion) must not
        # interleave, or one renames the other's temp file away.
        self.retention_timer, self.checkpoint_timer, self.hw_checkpoint_timer, self.start_checkpoint_timer = timers
        self.checkpoint_lock = threading.Lock()
        self.thread: threading.Thread | None = None
        # Size and device probes (DescribeLogDirs, placement) run on a daemon thread of their own, so a dir whose
        # disk does not answer holds up only its own probe (and never the process's exit); one still running is
        # not asked again.
        self.probe: Future[tuple[int, int, int]] | None = None
        self.space_timer = Periodic("space-check", 1_000, 0)
        # producer.id.expiration.check.interval.ms: idle producers' state dropped (Kafka's removeExpiredProducers).
        self.producer_expiration_timer = Periodic("producer-expiration", 600_000, INITIAL_TASK_DELAY_MS)
        # The request path's file work (appends, reads, rolls): one FIFO thread, started on first use
        # (kjbod.storage.workers); None when KJBOD_DIR_WORKERS=0 runs it on the event loop.
        self.worker: DirWorker | None = None
        # Compaction (kjbod.storage.cleaner), run by this dir's background thread: its cleaner, when it may look
        # for work again (log.cleaner.backoff.ms after a pass that found none), the partitions it gave up on.
        self.cleaner: Cleaner | None = None
        self.cleaner_next_ms = 0
        self.uncleanable: set[TopicPartition] = set()


def _describe_log(plog: PartitionLog) -> str:
    """What a loaded log holds, for a message naming two copies of one partition."""
    return (f"{len(plog.segments)} segment(s), offsets {plog.log_start_offset} to {plog.log_end_offset}, "
            f"{plog.size_bytes} bytes")


def _probe_dir(io: LogDirIO) -> tuple[int, int, int]:
    total, usable = io.statvfs()
    return total, usable, io.device()


def _start_probe(io: LogDirIO) -> Future[tuple[int, int, int]]:
    probe: Future[tuple[int, int, int]] = Future()

    def run() -> None:
        try:
            probe.set_result(_probe_dir(io))
        except BaseException as e:  # handed to whoever reads the probe
            probe.set_exception(e)

    threading.Thread(target=run, name=f"kjbod-probe {io.path}", daemon=True).start()
    return probe


def probe_answer(probe: Future[tuple[int, int, int]]) -> tuple[int, int, int] | None:
    """A finished probe's answer; None while it runs or when the dir failed (the seam took it offline)."""
    if not probe.done() or probe.cancelled() or probe.exception() is not None:
        return None
    return probe.result()


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[str],
        *,
        metadata_log_dir: str | None = None,
        node_id: int,
        defaults: LogConfig | None = None,
        placement_policy: str = MOST_USABLE,
        on_all_dirs_offline: Callable[[], None] | None = None,
        on_dir_offline: Callable[[str], None] | None = None,
        clock: Callable[[], int] = _wall_ms,
        checkpoint_interval_ms: int = 60_000,
        hw_checkpoint_interval_ms: int = 5_000,
        start_checkpoint_interval_ms: int = 60_000,
        retention_check_interval_ms: int = 300_000,
        initial_task_delay_ms: int = INITIAL_TASK_DELAY_MS,
        producer_id_expiration_ms: int = 86_400_000,
        producer_id_expiration_check_interval_ms: int = 600_000,
        recovery_threads: int | None = None,
        stall_timeout_ms: int = 30_000,
        slow_threshold_ms: int = 1_000,
        reserved_bytes: int = -1,
        space_check_interval_ms: int = 1_000,
        cleaner: CleanerConfig | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        if placement_policy not in POLICIES:
            raise ValueError(f"unknown placement policy {placement_policy!r}; known: {', '.join(POLICIES)}")
        paths = list(dict.fromkeys(os.path.abspath(d) for d in log_dirs))
        self.node_id = node_id
        self.metadata_log_dir = os.path.abspath(metadata_log_dir) if metadata_log_dir else paths[0]
        self.defaults = defaults or LogConfig()
        self.placement_policy = placement_policy
        self.cordoned: frozenset[str] = frozenset()  # cordoned.log.dirs, as absolute paths (see set_cordoned)
        self.on_all_dirs_offline = on_all_dirs_offline
        self.on_dir_offline = on_dir_offline
        self.clock = clock
        self.initial_task_delay_ms = initial_task_delay_ms
        self._intervals = (retention_check_interval_ms, checkpoint_interval_ms, hw_checkpoint_interval_ms)

        def timers() -> tuple[Periodic, Periodic, Periodic, Periodic]:
            return (
                Periodic("retention", retention_check_interval_ms, initial_task_delay_ms),
                Periodic("checkpoint", checkpoint_interval_ms, initial_task_delay_ms),
                Periodic("hw-checkpoint", hw_checkpoint_interval_ms, initial_task_delay_ms),
                Periodic("start-checkpoint", start_checkpoint_interval_ms, initial_task_delay_ms),
            )

        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.recovery_threads = recovery_threads
        if space_check_interval_ms <= 0:
            raise ValueError(f"log.dir.space.check.interval.ms must be positive, not {space_check_interval_ms}")
        self.space_check_interval_ms = space_check_interval_ms
        self._dirs: dict[str, _Dir] = {
            p: _Dir(LogDirIO(p, on_offline=self._dir_failed, reserved_bytes=reserved_bytes), timers()) for p in paths
        }
        self.cleaner_config = cleaner or CleanerConfig()
        for d in self._dirs.values():
            d.space_timer = Periodic("space-check", space_check_interval_ms, 0)
            d.producer_expiration_timer = Periodic("producer-expiration", producer_id_expiration_check_interval_ms,
                                                   initial_task_delay_ms)
            if self.cleaner_config.enable:
                d.cleaner = Cleaner(self.cleaner_config, clock)
        self.watchdog = DirWatchdog(
            [d.io for d in self._dirs.values()],
            stall_timeout_ms=stall_timeout_ms, slow_threshold_ms=slow_threshold_ms,
        )
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._futures: dict[TopicPartition, PartitionLog] = {}
        self._lock = threading.RLock()  # guards the two maps and create/delete
        self.deletions = DeletionQueue()
        self._rolled: set[PartitionLog] = set()
        self._rolled_lock = threading.Lock()
        self._all_offline_reported = False
        self._opened = False
        self._closed = False
        self._arm_timers(clock())
        self._bg_stop = threading.Event()
        self._workers_on = workers_enabled()

    # ------------------------------------------------------------------------------------------ dirs

    def _dir_failed(self, io: LogDirIO, reason: str, exc: BaseException) -> None:
        worker = self._dirs[io.path].worker if io.path in self._dirs else None
        if worker is not None and io.stalled:
            worker.abandon()  # requests queued behind the stuck operation are answered now
        if self.on_dir_offline is not None:
            try:
                self.on_dir_offline(io.path)
            except Exception:  # a callback bug must not hide the disk failure
                log.exception("on_dir_offline_failed", log_dir=io.path)
        if self._opened and not any(d.io.online for d in self._dirs.values()) and not self._all_offline_reported:
            self._all_offline_reported = True
            log.error("all_log_dirs_offline", log_dirs=list(self._dirs))
            if self.on_all_dirs_offline is not None:
                self.on_all_dirs_offline()

    @property
    def dirs(self) -> list[LogDirInfo]:
        """Every configured log dir, with statvfs sizes for the online ones, waiting for each dir's answer."""
        return self.dir_infos(self.probe_dirs(None))

    def dir_infos(self, sizes: dict[str, tuple[int, int, int] | None]) -> list[LogDirInfo]:
        """Every configured log dir with its state, sizes from ``sizes`` (what :meth:`probe_dirs` answered) and,
        when it is not online, why (``error``). Touches no disk.

        An online dir missing from ``sizes``, or None there, did not answer within the request's short wait. It is
        *not answering* only when one of its operations (that probe, or any other) has been outstanding for
        :attr:`not_answering_after_s`; until then it is slow, not silent: *degraded* (or *full*), with the sizes
        the dir's own counts last held."""
        out = []
        now = time.monotonic()  # the clock of the seam's operation stamps
        for path, d in self._dirs.items():
            io = d.io
            total = usable = -1
            health = self.watchdog.health[path].info()
            state, error = health.state, None
            answer = sizes.get(path)
            if not io.online:
                error = io.offline_reason
            elif answer is not None:
                total, usable = answer[0], answer[1]
            else:
                oldest = io.oldest_outstanding()
                waited = now - oldest[2] if oldest is not None else 0.0
                if oldest is not None and waited >= self.not_answering_after_s:
                    state = DirState.NOT_ANSWERING
                    error = (f"no answer for {waited:.1f} s: {oldest[0]} {oldest[1]} has not returned "
                             f"(a hung disk, or one slower than {self.not_answering_after_s:g} s per operation)")
                else:
                    state = DirState.FULL if io.full else DirState.DEGRADED
                    total, usable = io.total_bytes, io.usable_bytes
                    error = (f"slow: its size probe took longer than {self.probe_timeout_s * 1000:.0f} ms; sizes "
                             "as it last counted them")
            if state is DirState.FULL:
                error = io.full_error().message
            reserve = io.reserved_bytes if io.total_bytes >= 0 else -1
            failed_at = io.offline_at_ms
            device = answer[2] if io.online and answer is not None else -1
            out.append(LogDirInfo(path, d.directory_id, io.online, total, usable, error, state,
                                  health.recent_latency_ms, -1 if failed_at is None else failed_at, reserve,
                                  path in self.cordoned, device))
        return out

    def start_probes(self) -> dict[str, Future[tuple[int, int, int]]]:
        """Ask every online dir for (total bytes, usable bytes, st_dev), each on its own probe thread; a dir whose
        previous probe has not answered yet is asked nothing new (its running probe is returned)."""
        out = {}
        for path, d in self._dirs.items():
            if not d.io.online:
                continue
            if d.probe is None or d.probe.done():
                d.probe = _start_probe(d.io)
            out[path] = d.probe
        return out

    def probe_dirs(self, timeout_s: float | None) -> dict[str, tuple[int, int, int] | None]:
        """:meth:`start_probes`, waiting at most ``timeout_s`` (None: as long as it takes) for the answers; a dir
        that did not answer in time, or failed, maps to None."""
        futures = self.start_probes()
        wait_futures(list(futures.values()), timeout=timeout_s)
        return {path: probe_answer(f) for path, f in futures.items()}

    @property
    def probe_timeout_s(self) -> float:
        """How long a request waits for a dir's size probe: the slow threshold (a dir slower than that is not
        waited for), at least 0.2 s and 1 s when the threshold is off."""
        return max(0.2, self.watchdog.slow_threshold_s or 1.0)

    @property
    def not_answering_after_s(self) -> float:
        """How long a dir may leave an operation outstanding before it counts as not answering rather than slow:
        five probe timeouts (5 s with the default 1 s ``log.dir.slow.threshold.ms``). A size probe slower than
        the probe timeout that still answers within this shows its dir degraded."""
        return 5 * self.probe_timeout_s

    def dir_health(self, path: str) -> DirHealthInfo:
        """A dir's state (online, degraded, offline) and recent operation latency, without touching its disk."""
        return self.watchdog.health[os.path.abspath(path)].info()

    def dir_degraded(self, path: str) -> bool:
        """Whether the watchdog last saw this dir slow (cheap: no disk, no lock)."""
        health = self.watchdog.health.get(path)
        return health is not None and health.degraded

    def worker(self, path: str) -> DirWorker | None:
        """The dir's request-path worker (started on first use), or None when workers are off
        (``KJBOD_DIR_WORKERS=0``) or the manager is closed."""
        d = self._dirs[path]
        worker = d.worker
        if worker is None and self._workers_on and not self._closed:
            with self._lock:
                worker = d.worker
                if worker is None:
                    worker = d.worker = DirWorker(d.io)
                    worker.degraded = functools.partial(self.dir_degraded, path)  # no native appends on a slow dir
                    if d.io.stalled:
                        worker.abandon()
        return worker

    @property
    def online_dirs(self) -> list[str]:
        return [p for p, d in self._dirs.items() if d.io.online]

    @property
    def offline_dirs(self) -> list[str]:
        return [p for p, d in self._dirs.items() if not d.io.online]

    def directory_ids(self, *, online_only: bool = True) -> dict[str, str]:
        """{directory id: path} (BrokerRegistration's LogDirs are the online ids)."""
        return {
            d.directory_id: p
            for p, d in self._dirs.items()
            if d.directory_id is not None and (d.io.online or not online_only)
        }

    def clean_shutdown_broker_epoch(self) -> int:
        """The broker epoch the last run wrote in every log dir's clean-shutdown marker, which the broker sends
        as PreviousBrokerEpoch (Kafka's readBrokerEpochFromCleanShutdownFiles); -1 when a dir is offline, has no
        marker, or the dirs disagree: the controller then takes the last run's shutdown as unclean (KIP-966)."""
        epochs = set()
        for d in self._dirs.values():
            if not d.io.online or d.clean_shutdown_epoch < 0:
                return -1
            epochs.add(d.clean_shutdown_epoch)
        return epochs.pop() if len(epochs) == 1 else -1

    def had_clean_shutdown(self, path: str) -> bool:
        return self._dirs[os.path.abspath(path)].had_clean_shutdown

    def stray_dirs(self) -> list[str]:
        return [s for d in self._dirs.values() for s in d.stray]

    def _resolve_dir(self, dir: str) -> _Dir:
        d = self._resolve_dir_entry(dir)
        d.io.ensure_online()
        return d

    # ------------------------------------------------------------------------------------------ open

    def open(self) -> None:
        if self._opened:
            raise RuntimeError("LogManager.open() called twice")
        try:
            for d in self._dirs.values():
                if d.io.stat_or_none(d.io.path) is not None:
                    d.lock = d.io.lock()
            meta_io = [d.io for d in self._dirs.values()]
            if self.metadata_log_dir not in self._dirs:
                meta_io.append(LogDirIO(self.metadata_log_dir))
            metas = ensure_meta_properties(meta_io, metadata_log_dir=self.metadata_log_dir, node_id=self.node_id)
            for path, d in self._dirs.items():
                meta: MetaProperties | None = metas.get(path)
                if meta is not None:
                    d.directory_id = meta.directory_id
            online = [d for d in self._dirs.values() if d.io.online]
            if not online:
                raise StorageSetupError("no log dir could be opened")
            for d in online:
                self._check_space(d)
            started = time.monotonic()
            workers = self.recovery_threads or len(online)
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kjbod-log-load") as pool:
                results = list(pool.map(self._load_dir, online))
            for d, (current, future) in zip(online, results, strict=True):
                for tp, plog in current.items():
                    other = self._logs.get(tp)
                    if other is not None:
                        raise DuplicateLogError(
                            f"partition {tp[0]}-{tp[1]} has a log in {other.log_dir} ({_describe_log(other)}) and in "
                            f"{d.io.path} ({_describe_log(plog)}): a log dir failed while a future replica was "
                            "replacing the current one; remove the stale copy"
                        )
                    self._logs[tp] = plog
                for tp, plog in future.items():
                    if tp in self._futures:
                        raise DuplicateLogError(
                            f"partition {tp[0]}-{tp[1]} has future logs in {self._futures[tp].log_dir} and {d.io.path}"
                        )
                    self._futures[tp] = plog
        except BaseException:
            self._release_everything()
            raise
        self._opened = True
        self._arm_timers(self.clock())  # counted from the end of recovery, as Kafka schedules them at startup
        log.info(
            "log_manager_opened",
            log_dirs=len(self._dirs),
            online=len(self.online_dirs),
            partitions=len(self._logs),
            future_logs=len(self._futures),
            seconds=round(time.monotonic() - started, 3),
        )

    def _release_everything(self) -> None:
        for plog in [*self._logs.values(), *self._futures.values()]:
            plog.close_quietly()
        self._logs.clear()
        self._futures.clear()
        for d in self._dirs.values():
            if d.lock is not None:
                d.lock.close()
                d.lock = None

    def _read_checkpoint(self, io: LogDirIO, name: str) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(io, name) or {}
        except CheckpointFormatError as e:
            log.warning("checkpoint_unreadable", log_dir=io.path, file=name, error=str(e))
            return {}

    def _load_dir(self, d: _Dir) -> tuple[dict[TopicPartition, PartitionLog], dict[TopicPartition, PartitionLog]]:
        io = d.io
        current: dict[TopicPartition, PartitionLog] = {}
        future: dict[TopicPartition, PartitionLog] = {}
        try:
            marker = io.read_bytes_or_none(io.join(CLEAN_SHUTDOWN_FILE))
            clean = marker is not None
            d.had_clean_shutdown = clean
            d.clean_shutdown_epoch = parse_clean_shutdown(marker.decode("utf-8", "replace")) if marker else -1
            recovery = self._read_checkpoint(io, RECOVERY_POINT_CHECKPOINT)
            starts = self._read_checkpoint(io, LOG_START_OFFSET_CHECKPOINT)
            hws = self._read_checkpoint(io, REPLICATION_OFFSET_CHECKPOINT)
            cleaned = self._read_checkpoint(io, CLEANER_OFFSET_CHECKPOINT)
            recovered = 0
            for name, is_dir in sorted(io.list_entries()):
                if not is_dir or name == METADATA_TOPIC_DIR:
                    continue
                parsed = parse_partition_dir_name(name)
                if parsed is None:
                    log.warning("unknown_dir_in_log_dir", log_dir=io.path, name=name)
                    continue
                topic, partition, suffix = parsed
                path = io.join(name)
                if suffix == DELETE_DIR_SUFFIX:
                    io.rmtree(path)
                    continue
                if suffix == STRAY_DIR_SUFFIX:
                    d.stray.append(path)
                    continue
                if suffix is None and self._half_made(io, path):
                    continue
                tp = (topic, partition)
                plog = PartitionLog.load(
                    io,
                    path,
                    topic,
                    partition,
                    self.defaults,
                    had_clean_shutdown=clean,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp),
                    high_watermark=hws.get(tp),
                    is_future=suffix == FUTURE_DIR_SUFFIX,
                    clock=self.clock,
                    deletions=self.deletions,
                    on_roll=self._note_roll,
                )
                recovered += plog.load_stats.recovered_segments
                if not plog.is_future:
                    plog.cleaner_offset = cleaned.get(tp)
                (future if plog.is_future else current)[tp] = plog
            if clean:
                io.unlink(io.join(CLEAN_SHUTDOWN_FILE), missing_ok=True)
                io.fsync_dir()
            log.info(
                "log_dir_loaded",
                log_dir=io.path,
                clean_shutdown=clean,
                partitions=len(current),
                future_logs=len(future),
                recovered_segments=recovered,
            )
        except KafkaStorageError as e:
            log.error("log_dir_load_failed", log_dir=io.path, error=str(e))
            for plog in [*current.values(), *future.values()]:
                plog.close_quietly()
            # A dir that could not be loaded (even for want of space) must not serve as an empty one.
            io.mark_offline("load", io.path, e)
            return {}, {}
        return current, future

    def _half_made(self, io: LogDirIO, path: str) -> bool:
        """A partition dir with no segment (only ``partition.metadata``, or nothing) is what a creation that
        failed half-way leaves (a full disk, a crash): renamed ``-stray``, never loaded as a live copy."""
        names = io.listdir(path)
        if any(n.endswith(".log") for n in names):
            return False
        topic, partition, _ = parse_partition_dir_name(os.path.basename(path)) or ("?", 0, None)
        new_path = io.join(suffixed_dir_name(topic, partition, STRAY_DIR_SUFFIX))
        io.rename(path, new_path)
        io.fsync_dir()
        self._dirs[io.path].stray.append(new_path)
        log.warning("half_made_partition_dir_set_aside", log_dir=io.path, partition=f"{topic}-{partition}",
                    files=sorted(names), renamed_to=os.path.basename(new_path),
                    why="no segment: a creation that failed half-way; not a copy of the partition")
        return True

    def check_space(self) -> None:
        """Check every online dir's free space now (the background threads do it every
        ``space_check_interval_ms``; the next one comes one interval after this)."""
        now = self.clock()
        for d in self._dirs.values():
            d.space_timer.arm_after_run(now)
            self._check_space(d)

    def _check_space(self, d: _Dir) -> None:
        """One statvfs of the dir: corrects its free-space estimate, marks it full or back (see fsio)."""
        if not d.io.online:
            return
        try:
            d.io.refresh_space()
        except KafkaStorageError as e:
            log.debug("space_check_failed", log_dir=d.io.path, error=str(e))

    def _note_roll(self, plog: PartitionLog) -> None:
        with self._rolled_lock:
            self._rolled.add(plog)

    # ------------------------------------------------------------------------------------------ lookup

    def get(self, topic: str, partition: int) -> PartitionLog:
        plog = self._logs.get((topic, partition))
        if plog is None:
            raise UnknownTopicOrPartitionError(f"this node has no log for {topic}-{partition}")
        return plog

    def find(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_future(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.get((topic, partition))

    def partitions(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def future_logs(self) -> list[PartitionLog]:
        return list(self._futures.values())

    def logs_in_dir(self, path: str) -> list[PartitionLog]:
        path = os.path.abspath(path)
        return [p for p in [*self._logs.values(), *self._futures.values()] if p.log_dir == path]

    # ------------------------------------------------------------------------------------------ create

    def set_cordoned(self, paths: Iterable[str]) -> None:
        """The log dirs cordoned.log.dirs names now (checked by :func:`kjbod.storage.placement.cordoned_dirs`):
        placement skips them from the next new partition on; their replicas stay and serve."""
        cordoned = frozenset(os.path.abspath(p) for p in paths)
        if cordoned != self.cordoned:
            log.info("cordoned_log_dirs", cordoned=sorted(cordoned))
        self.cordoned = cordoned

    def assign_dirs(self, count: int, config: LogConfig | None = None, exclude: Iterable[str] = ()) -> list[str]:
        """Log dirs for ``count`` new partitions under the placement policy (see kjbod.storage.placement), none
        of them in ``exclude``."""
        excluded = set(exclude)
        cordoned = self.cordoned
        cfg = config or self.defaults
        counts: dict[str, int] = {p: 0 for p in self._dirs}
        for plog in [*self._logs.values(), *self._futures.values()]:
            counts[plog.log_dir] = counts.get(plog.log_dir, 0) + 1
        candidates = []
        answers = self.probe_dirs(self.probe_timeout_s)  # a dir that does not answer in time gets nothing new
        full = []
        for path, answer in answers.items():
            if answer is None or path in excluded:
                continue
            io = self._dirs[path].io
            if io.full or answer[1] - io.reserved_bytes < cfg.max_message_bytes:
                # Whatever the policy: a full dir, or one without room for one more batch, gets no new partition.
                full.append(path)
                continue
            usable, device = (answer[1], answer[2]) if self.placement_policy == MOST_USABLE else (0, None)
            candidates.append(DirCandidate(path, usable, counts[path], device))
        open_dirs = [c for c in candidates if c.path not in cordoned]
        if open_dirs:
            candidates = open_dirs
        elif candidates:
            # Every dir that could take it is cordoned: the controller places no new replica on such a broker,
            # so this is a replica it was given before it learnt of the cordon (or a reassignment named it).
            # Refusing would leave the partition without this replica; it goes to a cordoned dir, said loudly.
            log.warning("partition_placed_in_cordoned_dir", cordoned=sorted(cordoned), count=count,
                        effect="every online log dir with room is cordoned; placed there anyway")
        if not candidates:
            silent = [p for p, a in answers.items() if a is None]
            why = ([f"{', '.join(silent)} did not answer in time"] if silent else []) + (
                [f"{', '.join(full)} full"] if full else [])
            raise KafkaStorageError("no online log dir with room to create a partition in"
                                    + (f" ({'; '.join(why)})" if why else ""))
        return choose_dirs(candidates, count, policy=self.placement_policy, estimate=cfg.expected_partition_bytes())

    def create_partition(
        self,
        topic: str,
        partition: int,
        topic_id: str | None,
        config: LogConfig | None = None,
        dir: str | None = None,
    ) -> PartitionLog:
        return self.create_partitions([PartitionSpec(topic, partition, topic_id, config, dir)])[0]

    def create_partitions(self, specs: Iterable[PartitionSpec]) -> list[PartitionLog]:
        """Create several partitions, placing those without a dir together (so placement sees them all)."""
        specs = list(specs)
        with self._lock:
            dirs = self.place(specs)
            out = []
            for spec, path in zip(specs, dirs, strict=True):
                tried: list[str] = []
                while True:
                    try:
                        plog = self.create_placed(spec, path)
                        break
                    except LogDirFullError as e:
                        path = self.place_again(spec, path, tried, e)
                self.register_created(plog)
                out.append(plog)
            return out

    def place(self, specs: list[PartitionSpec]) -> list[str]:
        """Check new partitions (name, number, not here yet) and choose each one's log dir: its own, or the
        placement policy's for those without one (placed together, so the policy sees them all). No file I/O
        but the dirs' bounded size probes."""
        for spec in specs:
            validate_topic_name(spec.topic)
            if spec.partition < 0:
                raise UnknownTopicOrPartitionError(f"invalid partition {spec.partition}")
            if (spec.topic, spec.partition) in self._logs:
                raise TopicAlreadyExistsError(f"{spec.topic}-{spec.partition} already has a log on this node")
        unplaced = [s for s in specs if s.dir is None]
        placed = iter(self.assign_dirs(len(unplaced), unplaced[0].config)) if unplaced else iter(())
        return [self._resolve_dir(spec.dir).io.path if spec.dir is not None else next(placed) for spec in specs]

    def place_again(self, spec: PartitionSpec, full_dir: str, tried: list[str], e: LogDirFullError) -> str:
        """The dir chosen for ``spec`` turned out full at the creation (PartitionLog.create removed what it made):
        a partition the policy placed goes to another dir instead (``tried`` grows); one given a dir fails."""
        if spec.dir is not None:
            raise e
        tried.append(full_dir)
        log.warning("partition_placed_again", partition=f"{spec.topic}-{spec.partition}", full_dir=full_dir,
                    error=str(e))
        return self.assign_dirs(1, spec.config, exclude=tried)[0]

    def create_placed(self, spec: PartitionSpec, path: str) -> PartitionLog:
        """The file work of creating a partition in the log dir ``path`` (its dir, partition.metadata, the first
        segment): run by that dir's worker, or inline. The log is not served until :meth:`register_created`."""
        return self._create_in(self._dirs[path], spec)

    def register_created(self, plog: PartitionLog) -> None:
        """Serve a log made by :meth:`create_placed` (no file I/O)."""
        self._logs[(plog.topic, plog.partition)] = plog
        log.info("partition_created", partition=plog.name, log_dir=plog.log_dir, topic_id=plog.topic_id)

    def _create_in(self, d: _Dir, spec: PartitionSpec) -> PartitionLog:
        path = d.io.join(f"{spec.topic}-{spec.partition}")
        if d.io.exists(path):
            raise TopicAlreadyExistsError(f"{path} already exists")
        return PartitionLog.create(
            d.io, path, spec.topic, spec.partition, spec.topic_id, spec.config or self.defaults,
            clock=self.clock, deletions=self.deletions, on_roll=self._note_roll,
        )

    def set_cleaner_config(self, config: CleanerConfig) -> bool:
        """New log.cleaner.* settings (a dynamic broker config changed): each dir's cleaner takes them at its next
        clean (a clean under way finishes with the old ones); False when nothing changed. Whether cleaners run at
        all (log.cleaner.enable) is fixed at start, as in Kafka."""
        if config == self.cleaner_config:
            return False
        self.cleaner_config = config
        for d in self._dirs.values():
            if d.cleaner is not None:
                d.cleaner.config = config
        return True

    def set_config(self, topic: str, config: LogConfig) -> None:
        """Apply a changed topic config to the topic's logs (segment size, retention... take effect at once)."""
        self.set_configs({topic: config})

    def set_configs(self, by_topic: Mapping[str, LogConfig]) -> None:
        """:meth:`set_config` for many topics in one pass over the logs (a changed broker default reaches every
        topic at once)."""
        for (t, _p), plog in [*self._logs.items(), *self._futures.items()]:
            config = by_topic.get(t)
            if config is not None:
                plog.config = config

    # ------------------------------------------------------------------------------------------ delete

    def delete_partition(self, topic: str, partition: int) -> None:
        """Rename the partition's dir (and its future dir, if any) to ``-delete`` and remove it after
        ``file.delete.delay.ms``."""
        with self._lock:
            tp = (topic, partition)
            plog = self._logs.get(tp)
            if plog is None:
                raise UnknownTopicOrPartitionError(f"this node has no log for {topic}-{partition}")
            plog.io.ensure_online()
            future = self._futures.pop(tp, None)
            if future is not None:
                self._delete_log(future)
            del self._logs[tp]
            self._delete_log(plog)

    def detach_partition(self, topic: str, partition: int) -> list[PartitionLog] | None:
        """Take a partition's logs (its future log first, then its current one) out of service now, without file
        I/O, so its name is free at once; :meth:`retire_detached` then renames each to ``-delete`` on its dir's
        worker. None when another thread holds the manager's lock (doing file work there): nothing is taken."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            tp = (topic, partition)
            return [plog for plog in (self._futures.pop(tp, None), self._logs.pop(tp, None)) if plog is not None]
        finally:
            self._lock.release()

    def retire_detached(self, plog: PartitionLog) -> None:
        """The file work of deleting a detached log: closed, renamed to ``-delete`` (left as it is in an offline
        dir), removed after ``file.delete.delay.ms``."""
        self._delete_log(plog)

    def mark_stray(self, topic: str, partition: int) -> list[str]:
        """Take out of service a replica that the cluster metadata does not give this node (its topic was deleted
        while its dir was offline, or the node crashed between creating the dir and recording the topic): as
        Kafka does, its dir (and its future dir, if any) is renamed to ``<topic>-<partition>.<32 hex>-stray`` and
        kept for the operator to inspect or remove; the partition's name is free again at once. Returns the new
        paths."""
        with self._lock:
            tp = (topic, partition)
            logs = [plog for plog in (self._futures.pop(tp, None), self._logs.pop(tp, None)) if plog is not None]
            if not logs:
                raise UnknownTopicOrPartitionError(f"this node has no log for {topic}-{partition}")
            return [new_dir for plog in logs if (new_dir := self.retire_stray(plog)) is not None]

    def retire_stray(self, plog: PartitionLog) -> str | None:
        """The file work of :meth:`mark_stray` for one log taken out of service (:meth:`detach_partition`): its
        new path, None in an offline dir (left as it is)."""
        new_dir = self._retire_log(plog, STRAY_DIR_SUFFIX)
        if new_dir is not None:
            entry = self._dirs.get(plog.io.path)
            if entry is not None:
                entry.stray.append(new_dir)
        return new_dir

    def _delete_log(self, plog: PartitionLog) -> None:
        new_dir = self._retire_log(plog, DELETE_DIR_SUFFIX)
        if new_dir is None:
            return
        io = plog.io
        self.deletions.schedule(
            self.clock() + plog.config.file_delete_delay_ms, new_dir, lambda: io.rmtree(new_dir)
        )
        log.info("partition_deleted", partition=plog.name, log_dir=io.path, renamed_to=os.path.basename(new_dir))

    def _retire_log(self, plog: PartitionLog, suffix: str) -> str | None:
        """Close a log and rename its dir to ``<topic>-<partition>.<32 hex><suffix>``; None when its dir is offline
        (nothing can be renamed there: the dir keeps its name)."""
        io = plog.io
        plog.abort_cleaning()  # a clean in progress stops (and leaves no file) before the dir is renamed
        with plog.lock:
            plog.closed = True
            for seg in plog.segments:
                seg.close_quietly()
            if not io.online:
                return None
            new_dir = io.join(suffixed_dir_name(plog.topic, plog.partition, suffix))
            io.rename(plog.dir, new_dir)
            plog.relocate(new_dir)
        io.fsync_dir()
        self._write_dir_checkpoints(io.path, hw=True)
        return new_dir

    # ------------------------------------------------------------------------------------------ mover hooks

    def dir_io(self, dir: str) -> LogDirIO:
        """The fsio seam of one configured log dir (path or directory id), so the replica mover's file copies are
        checked, fault-injected and failed through the same object as the dir's logs."""
        d = self._resolve_dir_entry(dir)
        return d.io

    def _resolve_dir_entry(self, dir: str) -> _Dir:
        d = self._dirs.get(os.path.abspath(dir)) if os.path.isabs(dir) else None
        if d is None:
            for cand in self._dirs.values():
                if cand.directory_id == dir:
                    return cand
            raise LogDirNotFoundError(f"{dir} is not one of this node's log dirs")
        return d

    def create_future_log(self, topic: str, partition: int, dir: str) -> PartitionLog:
        """A ``-future`` log for moving ``topic-partition`` into ``dir`` (KIP-113)."""
        with self._lock:
            current = self.get(topic, partition)
            d = self._resolve_dir(dir)
            if current.log_dir == d.io.path:
                raise ValueError(f"{topic}-{partition} already lives in {d.io.path}")
            existing = self._futures.get((topic, partition))
            if existing is not None:
                if existing.log_dir == d.io.path:
                    return existing
                self.delete_future_log(topic, partition)
            path = d.io.join(suffixed_dir_name(topic, partition, FUTURE_DIR_SUFFIX))
            plog = PartitionLog.create(
                d.io, path, topic, partition, current.topic_id, current.config,
                is_future=True, clock=self.clock, deletions=self.deletions, on_roll=self._note_roll,
            )
            self._futures[(topic, partition)] = plog
            return plog

    def open_future_log(
        self, topic: str, partition: int, path: str, *, log_start_offset: int | None = None
    ) -> PartitionLog:
        """Load and register a ``-future`` dir that the replica mover filled by copying closed segments (with
        their indexes, each fsynced before it got its final name). The files are trusted as after a clean
        shutdown, so only the tail of the last segment is read."""
        with self._lock:
            tp = (topic, partition)
            current = self.get(topic, partition)
            if tp in self._futures:
                raise ValueError(f"{topic}-{partition} already has a future log in {self._futures[tp].log_dir}")
            parsed = parse_partition_dir_name(os.path.basename(path))
            if parsed != (topic, partition, FUTURE_DIR_SUFFIX):
                raise ValueError(f"{path} is not a -future dir of {topic}-{partition}")
            d = self._resolve_dir(os.path.dirname(os.path.abspath(path)))
            if d.io.path == current.log_dir:
                raise ValueError(f"{topic}-{partition} already lives in {d.io.path}")
            plog = PartitionLog.load(
                d.io, os.path.abspath(path), topic, partition, current.config,
                had_clean_shutdown=True, log_start_offset=log_start_offset, is_future=True,
                clock=self.clock, deletions=self.deletions, on_roll=self._note_roll,
            )
            self._futures[tp] = plog
            return plog

    def delete_future_log(self, topic: str, partition: int, *, keep_files: bool = False) -> None:
        """Drop the partition's future log: renamed to ``-delete`` and removed later, or with ``keep_files``
        only closed and forgotten (its dir stays a ``-future`` dir: the mover continues it, or a restart
        resumes it)."""
        with self._lock:
            plog = self._futures.pop((topic, partition), None)
            if plog is None:
                return
            if not keep_files:
                self._delete_log(plog)
                return
            try:
                plog.close()
            except KafkaStorageError:
                plog.close_quietly()

    def replace_current_with_future(
        self,
        topic: str,
        partition: int,
        *,
        on_step: Callable[[str], None] | None = None,
        write_checkpoints: bool = True,
    ) -> PartitionLog:
        """Swap in a caught-up future log, in KIP-113's order: the current dir is renamed to ``-delete`` first,
        then the future dir to ``<topic>-<partition>``. A crash between the two renames leaves a ``-delete`` and
        a ``-future`` dir: the next startup deletes the first and promotes the second (see
        :meth:`promote_future_log`), so the partition is never present twice. If the second rename fails, the
        first is undone when the source dir still allows it.

        ``on_step`` is called with ``"source_renamed"``, ``"future_renamed"`` and, from the deletion task,
        ``"deleting_old_copy"`` (the replica mover's failpoints). The caller must keep appends away (the node
        runs this on its event loop, where every append happens); both logs' locks are held for the renames."""
        step = on_step or (lambda _name: None)
        with self._lock:
            tp = (topic, partition)
            current = self.get(topic, partition)
            future = self._futures.get(tp)
            if future is None:
                raise UnknownTopicOrPartitionError(f"no future log for {topic}-{partition}")
            with current.lock, future.lock:
                if future.log_end_offset != current.log_end_offset:
                    raise ValueError(
                        f"future log of {topic}-{partition} is at {future.log_end_offset}, "
                        f"current at {current.log_end_offset}"
                    )
                fio, cio = future.io, current.io
                cio.ensure_online()
                fio.ensure_online()
                old_dir = current.dir
                old_new = cio.join(suffixed_dir_name(topic, partition, DELETE_DIR_SUFFIX))
                cio.rename(old_dir, old_new)
                current.relocate(old_new)
                cio.fsync_dir()
                step("source_renamed")
                new_path = fio.join(f"{topic}-{partition}")
                try:
                    fio.rename(future.dir, new_path)
                    future.relocate(new_path)
                    fio.fsync_dir()
                except KafkaStorageError:
                    try:
                        cio.rename(old_new, old_dir)
                        current.relocate(old_dir)
                        cio.fsync_dir()
                    except KafkaStorageError:
                        log.error("log_swap_rollback_failed", partition=f"{topic}-{partition}", source=old_new)
                    raise
                step("future_renamed")
                future.is_future = False
                future._hw = current._hw
                future._log_start = max(future._log_start, current._log_start)
                future.auto_high_watermark = current.auto_high_watermark
                future.take_leader_epochs(current)
                future.cleaner_offset = current.cleaner_offset  # the copy holds what was cleaned before the move
                future.moved_from = current  # before the partition leads here: see produce._serving
                self._logs[tp] = future
                del self._futures[tp]
                current.closed = True
                current.replaced_by = future  # work queued for the old log before the swap finds the new one
                for seg in current.segments:
                    seg.close_quietly()

            def delete_old() -> None:
                step("deleting_old_copy")
                cio.rmtree(old_new)

            self.deletions.schedule(self.clock() + current.config.file_delete_delay_ms, old_new, delete_old)
            if write_checkpoints:
                for path in {fio.path, cio.path}:
                    self._write_dir_checkpoints(path, hw=True)
            return future

    def promote_future_log(self, topic: str, partition: int) -> PartitionLog:
        """Make a future log whose current log is gone the current one (KIP-113 "handle failure": the node
        stopped between the swap's two renames). Refused while any log dir is offline: the current log may be
        in it."""
        with self._lock:
            tp = (topic, partition)
            if tp in self._logs:
                raise ValueError(f"{topic}-{partition} has a current log in {self._logs[tp].log_dir}")
            future = self._futures.get(tp)
            if future is None:
                raise UnknownTopicOrPartitionError(f"no future log for {topic}-{partition}")
            offline = [p for p, d in self._dirs.items() if not d.io.online]
            if offline:
                raise KafkaStorageError(
                    f"cannot promote the future log of {topic}-{partition}: log dirs {offline} are offline and "
                    "may hold its current log"
                )
            fio = future.io
            with future.lock:
                new_path = fio.join(f"{topic}-{partition}")
                fio.rename(future.dir, new_path)
                future.relocate(new_path)
                fio.fsync_dir()
                future.is_future = False
                self._logs[tp] = future
                del self._futures[tp]
            future.rebuild_leader_epochs()
            self._write_dir_checkpoints(fio.path, hw=True)
            log.info("future_log_promoted", partition=future.name, log_dir=fio.path)
            return future

    # ------------------------------------------------------------------------------------------ checkpoints

    def _write_dir_checkpoints(self, path: str, *, hw: bool, starts: bool = True) -> None:
        with self._dirs[path].checkpoint_lock:
            self._write_dir_checkpoints_locked(path, hw=hw, starts=starts)

    def _write_dir_checkpoints_locked(self, path: str, *, hw: bool, starts: bool = True) -> None:
        d = self._dirs[path]
        io = d.io
        if not io.online:
            return
        logs = self.logs_in_dir(path)
        recovery = {(p.topic, p.partition): p.recovery_point for p in logs}
        try:
            write_offset_checkpoint(io, RECOVERY_POINT_CHECKPOINT, recovery)
            if starts:
                self._write_start_checkpoint(io, logs)
            self._write_cleaner_checkpoint(io, logs)
            if hw:
                write_offset_checkpoint(
                    io, REPLICATION_OFFSET_CHECKPOINT, {(p.topic, p.partition): p.high_watermark for p in logs}
                )
        except KafkaStorageError as e:
            log.warning("checkpoint_failed", log_dir=path, error=str(e))

    @staticmethod
    def _write_start_checkpoint(io: LogDirIO, logs: list[PartitionLog]) -> None:
        """``log-start-offset-checkpoint``: the logs whose start is past their first segment's base (DeleteRecords,
        a follower's truncation to the leader's start)."""
        write_offset_checkpoint(io, LOG_START_OFFSET_CHECKPOINT, {
            (p.topic, p.partition): p.log_start_offset
            for p in logs if p.segments and p.log_start_offset > p.first_segment_base_offset})

    def _checkpoint_dir_starts(self, path: str) -> None:
        d = self._dirs[path]
        if d.io.online:
            try:
                with d.checkpoint_lock:
                    self._write_start_checkpoint(d.io, self.logs_in_dir(path))
            except KafkaStorageError as e:
                log.warning("checkpoint_failed", log_dir=path, error=str(e))

    @staticmethod
    def _write_cleaner_checkpoint(io: LogDirIO, logs: list[PartitionLog]) -> None:
        """``cleaner-offset-checkpoint``: where the cleaner stopped, for the compacted logs of this dir (written
        only once a dir has one, as Kafka's is)."""
        offsets = {(p.topic, p.partition): p.cleaner_offset for p in logs
                   if p.cleaner_offset is not None and not p.is_future}
        if offsets or io.exists(io.join(CLEANER_OFFSET_CHECKPOINT)):
            write_offset_checkpoint(io, CLEANER_OFFSET_CHECKPOINT, offsets)

    def checkpoint_dir(self, path: str) -> None:
        """Write one dir's recovery points and log start offsets now, on its worker: DeleteRecords' new log
        start must survive a crash once answered."""
        self._write_dir_checkpoints(path, hw=False)

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every online dir."""
        for path in self._dirs:
            self._write_dir_checkpoints(path, hw=True)

    def checkpoint_high_watermarks(self) -> None:
        for path in self._dirs:
            self._checkpoint_dir_high_watermarks(path)

    def _checkpoint_dir_high_watermarks(self, path: str) -> None:
        d = self._dirs[path]
        if d.io.online:
            logs = self.logs_in_dir(path)
            try:
                with d.checkpoint_lock:
                    write_offset_checkpoint(
                        d.io, REPLICATION_OFFSET_CHECKPOINT,
                        {(p.topic, p.partition): p.high_watermark for p in logs},
                    )
            except KafkaStorageError as e:
                log.warning("checkpoint_failed", log_dir=path, error=str(e))

    # ------------------------------------------------------------------------------------------ background

    def _each_log(self, fn: Callable[[PartitionLog], Any], dir: str | None = None) -> None:
        logs = [*self._logs.values(), *self._futures.values()] if dir is None else self.logs_in_dir(dir)
        for plog in logs:
            if not plog.online:
                continue
            try:
                fn(plog)
            except KafkaStorageError as e:
                log.debug("log_task_skipped", partition=plog.name, error=str(e))
            except Exception:
                # A bug in one log's housekeeping must not stop the others'.
                log.exception("log_task_failed", partition=plog.name)

    def run_retention(self, now_ms: int | None = None, dir: str | None = None) -> int:
        """Apply retention to every log (of ``dir``, or of every dir); returns the number of segments deleted."""
        now = self.clock() if now_ms is None else now_ms
        total = 0

        def one(plog: PartitionLog) -> None:
            nonlocal total
            total += plog.delete_old_segments(now)

        self._each_log(one, dir)
        return total

    def expire_producers(self, now_ms: int | None = None, dir: str | None = None) -> None:
        """Drop the state of every producer whose last batch is older than producer.id.expiration.ms (of ``dir``,
        or of every dir): Kafka's periodic removeExpiredProducers."""
        now = self.clock() if now_ms is None else now_ms
        self._each_log(lambda plog: plog.expire_producers(now, self.producer_id_expiration_ms), dir)

    def flush_rolled(self, dir: str | None = None) -> None:
        """fsync segments that stopped being active (Kafka flushes them asynchronously on roll), advancing
        each log's recovery point to its new active segment."""
        with self._rolled_lock:
            rolled = [p for p in self._rolled if dir is None or p.log_dir == dir]
            self._rolled.difference_update(rolled)
        for plog in rolled:
            self._each_log_one(plog, lambda p: p.flush(p.active_segment.base_offset))

    def _each_log_one(self, plog: PartitionLog, fn: Callable[[PartitionLog], Any]) -> None:
        if not plog.online:
            return
        try:
            fn(plog)
        except KafkaStorageError as e:
            log.debug("log_task_skipped", partition=plog.name, error=str(e))

    # The three periodic tasks: retention, checkpoints, high-watermark checkpoints (one schedule per dir).
    @property
    def retention_check_interval_ms(self) -> int:
        return self._intervals[0]

    @property
    def checkpoint_interval_ms(self) -> int:
        return self._intervals[1]

    @property
    def hw_checkpoint_interval_ms(self) -> int:
        return self._intervals[2]

    @property
    def producer_id_expiration_check_interval_ms(self) -> int:
        return next(iter(self._dirs.values())).producer_expiration_timer.interval_ms

    def _arm_timers(self, now_ms: int) -> None:
        for d in self._dirs.values():
            for timer in (d.retention_timer, d.checkpoint_timer, d.hw_checkpoint_timer, d.start_checkpoint_timer,
                          d.space_timer, d.producer_expiration_timer):
                timer.arm(now_ms)

    def _next_due_in(self, d: _Dir) -> int:
        due = min(d.retention_timer.next_ms, d.checkpoint_timer.next_ms, d.hw_checkpoint_timer.next_ms,
                  d.start_checkpoint_timer.next_ms, d.space_timer.next_ms, d.producer_expiration_timer.next_ms)
        return min(due, d.cleaner_next_ms) if d.cleaner is not None else due

    # ------------------------------------------------------------------------------------------ compaction

    def clean_dir(self, path: str, now_ms: int | None = None) -> bool:
        """One round of this dir's cleaner (on its background thread): the filthiest compacted log that is due is
        cleaned and its checkpoint written; True when a log was cleaned (the next round follows at once),
        otherwise the cleaner waits log.cleaner.backoff.ms."""
        now = self.clock() if now_ms is None else now_ms
        d = self._dirs[path]
        cleaner = d.cleaner
        if cleaner is None:
            return False
        best = None
        for plog in self.logs_in_dir(path):
            tp = (plog.topic, plog.partition)
            if (plog.is_future or not plog.config.compact or plog.closed or not plog.online
                    or plog.clean_paused or tp in self._futures or tp in d.uncleanable):
                continue
            try:
                ltc, reset = log_to_clean(plog, plog.cleaner_offset, now)
            except KafkaStorageError:
                continue
            except Exception:  # one log's problem must not stop its dir's cleaning, flushes or checkpoints
                d.uncleanable.add(tp)
                log.exception("log_cleaning_failed", partition=plog.name, log_dir=path)
                continue
            if reset:
                log.warning("cleaner_checkpoint_reset", partition=plog.name, checkpoint=plog.cleaner_offset,
                            first_dirty=ltc.first_dirty)
                plog.cleaner_offset = ltc.first_dirty
            if should_clean(ltc) and (best is None or ltc.ratio > best.ratio):
                best = ltc
        if best is None:
            d.cleaner_next_ms = now + self.cleaner_config.backoff_ms
            return False
        plog = best.log
        tp = (plog.topic, plog.partition)
        with plog.clean_lock:
            if plog.clean_paused or plog.closed or tp in self._futures:
                return False
            try:
                offset, _stats = cleaner.clean(best, self._bg_stop.is_set)  # a shutdown stops it too
            except CleanAborted as e:
                log.info("log_cleaning_aborted", partition=plog.name, log_dir=path, reason=str(e))
                return False
            except KafkaStorageError:
                return False  # the dir went offline through the fsio seam
            except (CleanerError, CorruptMessageError) as e:
                d.uncleanable.add(tp)
                log.error("log_uncleanable", partition=plog.name, log_dir=path, error=str(e))
                return False
            except Exception:
                d.uncleanable.add(tp)
                log.exception("log_cleaning_failed", partition=plog.name, log_dir=path)
                return False
            plog.cleaner_offset = offset
        self._write_dir_checkpoints(path, hw=False)
        d.cleaner_next_ms = now  # more may be due: the next tick looks again
        return True

    def next_due_ms(self) -> int:
        """When the next periodic task (retention, checkpoints) of any dir is due, on this manager's clock."""
        return min(self._next_due_in(d) for d in self._dirs.values())

    def tick(self, now_ms: int | None = None) -> None:
        """Run every background task that is due, dir after dir. Safe to call often (e.g. every 100 ms to 1 s)."""
        now = self.clock() if now_ms is None else now_ms
        self.deletions.run_due(now)
        for path in self._dirs:
            self.tick_dir(path, now)

    def tick_dir(self, path: str, now_ms: int | None = None) -> None:
        """Run the background tasks of one dir that are due: its deletions, flushes, retention and checkpoints."""
        now = self.clock() if now_ms is None else now_ms
        d = self._dirs[path]
        if d.space_timer.due(now):
            self._check_space(d)  # first: a full dir is seen (and a freed one back) before the other work
        self.deletions.run_due(now, under=path)
        self.flush_rolled(path)
        self._each_log(lambda p: p.flush_if_due(now), path)
        if d.retention_timer.due(now):
            self.run_retention(now, path)
        if d.producer_expiration_timer.due(now):
            self.expire_producers(now, path)
        if d.cleaner is not None and now >= d.cleaner_next_ms and d.io.online:
            self.clean_dir(path, now)
        if d.checkpoint_timer.due(now):
            d.hw_checkpoint_timer.arm_after_run(now)  # a full checkpoint writes the high watermarks too
            self._write_dir_checkpoints(path, hw=True, starts=False)
        elif d.hw_checkpoint_timer.due(now):
            self._checkpoint_dir_high_watermarks(path)
        if d.start_checkpoint_timer.due(now):  # log.flush.start.offset.checkpoint.interval.ms
            self._checkpoint_dir_starts(path)

    def start_background(self, interval_s: float = 1.0) -> None:
        """Run each dir's :meth:`tick_dir` on a daemon thread of its own (so one hung disk stops only its own
        dir's background work), every ``interval_s`` at most and sooner when a periodic task with a shorter
        interval is due (a 100 ms ``log.retention.check.interval.ms`` is kept); and the stall watchdog."""
        if any(d.thread is not None for d in self._dirs.values()):
            return
        self._bg_stop.clear()
        for path, d in self._dirs.items():
            d.thread = threading.Thread(
                target=self._background, args=(path, d, interval_s), name=f"kjbod-log-background {path}",
                daemon=True,
            )
            d.thread.start()
        self.watchdog.start()

    def _background(self, path: str, d: _Dir, interval_s: float) -> None:
        def pause() -> float:
            until_due = (self._next_due_in(d) - self.clock()) / 1000
            return min(interval_s, max(_MIN_TICK_S, until_due))

        while not self._bg_stop.wait(pause()):
            if not d.io.online and d.io.stalled:
                return  # nothing of a stalled dir runs again
            started = time.perf_counter() if timeline.ON else 0.0
            try:
                self.tick_dir(path)
            except Exception:
                log.exception("log_manager_tick_failed", log_dir=path)
            if timeline.ON:
                timeline.span("background tick", started, path)

    def stop_background(self) -> None:
        """Stop the background threads. One stuck in a file operation for longer than :data:`SHUTDOWN_GRACE_S`
        cannot be stopped: its dir is failed as stalled (logged with the operation and file) and the thread left
        behind (a daemon), so a shutdown never hangs on a hung disk, whatever ``log.dir.stall.timeout.ms`` is."""
        self._bg_stop.set()
        self.watchdog.stop()
        for path, d in self._dirs.items():
            thread = d.thread
            if thread is None:
                continue
            self._join_or_fail(path, d, thread)
            d.thread = None

    def _stop_workers(self) -> None:
        """Let each dir's worker finish what is queued; one stuck past the grace fails its dir (as the
        background threads do)."""
        for d in self._dirs.values():
            if d.worker is not None:
                d.worker.stop()
        for path, d in self._dirs.items():
            if d.worker is not None:
                self._join_or_fail(path, d, d.worker)

    @staticmethod
    def _join_or_fail(path: str, d: _Dir, thread: threading.Thread | DirWorker) -> None:
        while thread.is_alive() and not d.io.stalled:
            thread.join(0.1)
            oldest = d.io.oldest_outstanding()
            if oldest is not None and time.monotonic() - oldest[2] > SHUTDOWN_GRACE_S:
                op, file, started = oldest
                log.error("log_dir_stuck_at_shutdown", log_dir=path, op=op, path=file,
                          outstanding_s=round(time.monotonic() - started, 1),
                          effect="taken offline and left behind; the shutdown goes on without it")
                d.io.fail_stalled(op, file, time.monotonic() - started, "stuck at shutdown")
        if thread.is_alive():
            log.warning("log_dir_thread_abandoned", log_dir=path, reason=d.io.offline_reason)

    # ------------------------------------------------------------------------------------------ close

    def close(self, *, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush and close every log, write checkpoints and the clean-shutdown marker in every
        dir whose logs all closed cleanly, release the locks."""
        if self._closed:
            return
        self._closed = True
        self.stop_background()
        self._stop_workers()
        failed_dirs: set[str] = {p for p, d in self._dirs.items() if d.io.stalled}
        for plog in [*self._logs.values(), *self._futures.values()]:
            if plog.log_dir in failed_dirs:
                continue  # a stalled dir's log may be locked by the stuck call: it is not touched again
            try:
                plog.close()
            except KafkaStorageError:
                failed_dirs.add(plog.log_dir)
        for path, d in self._dirs.items():
            if d.io.online and path not in failed_dirs and self._opened:
                self._write_dir_checkpoints(path, hw=True)
                try:
                    d.io.write_atomic(d.io.join(CLEAN_SHUTDOWN_FILE), render_clean_shutdown(broker_epoch).encode())
                except KafkaStorageError as e:
                    log.warning("clean_shutdown_marker_failed", log_dir=path, error=str(e))
            if d.lock is not None and not d.io.stalled:  # a stalled dir's fd is left to the process's exit
                d.lock.close()
                d.lock = None
        log.info("log_manager_closed", offline_dirs=[p for p, d in self._dirs.items() if not d.io.online])

    def __enter__(self) -> LogManager:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
