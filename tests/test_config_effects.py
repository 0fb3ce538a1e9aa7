"""Each broker key that sets a topic default changes what the storage does, through the node's own path.

For every such key: a LogManager built as the node builds it (``build_config`` → ``broker_log_config`` → the
manager's defaults) runs one small scenario twice, once with the key at Kafka's default and once with it set,
and the outcome differs the way Kafka's documentation of the key says. tests/test_config_audit.py names these
tests as the proof that the keys take effect.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kjbod.broker.storage_glue import broker_log_config, cleaner_config, open_storage
from kjbod.server.config import ConfigError, build_config
from kjbod.server.roles import build_combined_node
from kjbod.storage.errors import StorageError
from kjbod.storage.manager import LogManager
from kjbod.storage.meta import format_dirs
from tests.storage.conftest import T0, FakeClock, kp_batch

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
}
HOUR = 3_600_000
TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"
SMALL_SEGMENTS = {"log.segment.bytes": "300"}


def run(tmp_path: Path, props: dict[str, str], scenario: Callable[[LogManager, Any, FakeClock], Any]) -> Any:
    """``scenario(manager, partition log, clock)`` on a fresh node-built LogManager; its result."""
    dirs = [str(tmp_path / "logs")]
    format_dirs({"log.dirs": dirs[0], "node.id": 1})
    config = build_config({**BASE, "log.dirs": dirs[0], **props})
    clock = FakeClock()
    manager = LogManager(dirs, node_id=1, defaults=broker_log_config(config), clock=clock,
                         retention_check_interval_ms=config.log_retention_check_interval_ms,
                         hw_checkpoint_interval_ms=config.replica_high_watermark_checkpoint_interval_ms,
                         start_checkpoint_interval_ms=config.log_flush_start_offset_checkpoint_interval_ms,
                         producer_id_expiration_ms=config.producer_id_expiration_ms,
                         producer_id_expiration_check_interval_ms=config.producer_id_expiration_check_interval_ms,
                         cleaner=cleaner_config(config))
    manager.open()
    try:
        return scenario(manager, manager.create_partition("t", 0, TOPIC_ID), clock)
    finally:
        manager.close()


def append_small(plog: Any, count: int, *, timestamp: int = T0) -> None:
    for i in range(count):
        plog.append(kp_batch([b"v%03d" % i], timestamp=timestamp))


def segments_after(count: int) -> Callable[[LogManager, Any, FakeClock], int]:
    def scenario(_m: LogManager, plog: Any, _c: FakeClock) -> int:
        append_small(plog, count)
        return len(plog.segments)
    return scenario


def segments_after_a_gap(gap_ms: int) -> Callable[[LogManager, Any, FakeClock], int]:
    def scenario(_m: LogManager, plog: Any, clock: FakeClock) -> int:
        plog.append(kp_batch([b"first"], timestamp=T0))
        clock.advance(gap_ms)
        plog.append(kp_batch([b"later"], timestamp=T0 + gap_ms))
        return len(plog.segments)
    return scenario


def log_start_after_retention(age_ms: int) -> Callable[[LogManager, Any, FakeClock], int]:
    def scenario(manager: LogManager, plog: Any, clock: FakeClock) -> int:
        append_small(plog, 12, timestamp=T0)
        clock.advance(age_ms)
        manager.run_retention()
        return plog.log_start_offset
    return scenario


def accepts_a_big_batch(_m: LogManager, plog: Any, _c: FakeClock) -> bool:
    try:
        plog.append(kp_batch([b"x" * 500]))
    except StorageError:
        return False
    return True


def index_entries(_m: LogManager, plog: Any, _c: FakeClock) -> int:
    append_small(plog, 20)
    return len(plog.active_segment.index)


def recovery_point_after_one(_m: LogManager, plog: Any, _c: FakeClock) -> int:
    plog.append(kp_batch([b"one"]))
    return plog.recovery_point


def recovery_point_after_a_tick(manager: LogManager, plog: Any, clock: FakeClock) -> int:
    plog.append(kp_batch([b"one"]))
    clock.advance(2000)
    manager.tick()
    return plog.recovery_point


def deleted_files_left(manager: LogManager, plog: Any, clock: FakeClock) -> int:
    append_small(plog, 12)
    manager.run_retention()
    clock.advance(1000)
    manager.tick()
    return sum(1 for name in Path(plog.dir).iterdir() if name.name.endswith(".deleted"))


def accepts_a_batch_stamped(offset_ms: int) -> Callable[[LogManager, Any, FakeClock], bool]:
    def scenario(_m: LogManager, plog: Any, clock: FakeClock) -> bool:
        try:
            plog.append(kp_batch([b"x"], timestamp=clock() + offset_ms))
        except StorageError:
            return False
        return True
    return scenario


def stored_timestamp_type(_m: LogManager, plog: Any, clock: FakeClock) -> str:
    plog.append(kp_batch([b"x"], timestamp=clock() - 5000))
    plog.flush()
    attributes = int.from_bytes(Path(plog.active_segment.log_path).read_bytes()[21:23], "big")
    return "LogAppendTime" if attributes & 0x08 else "CreateTime"


PRODUCER_ID = 4242


def producer_known_after(idle_ms: int) -> Callable[[LogManager, Any, FakeClock], bool]:
    """An idempotent producer's batch once the first background round has run, then ``idle_ms`` of silence and a
    round: whether the partition still knows the producer."""

    def scenario(m: LogManager, plog: Any, clock: FakeClock) -> bool:
        clock.advance(31_000)
        m.tick()  # the first round of every timer (log.initial.task.delay.ms is 30 s)
        plog.append(kp_batch([b"x"], timestamp=clock(), producer_id=PRODUCER_ID, producer_epoch=0,
                             base_sequence=0))
        clock.advance(idle_ms)
        m.tick()
        return PRODUCER_ID in plog.producer_state.producers

    return scenario


def checkpointed_high_watermark(m: LogManager, plog: Any, clock: FakeClock) -> int:
    """The partition's entry in replication-offset-checkpoint after the first round and then 2 s and 3 appends."""
    clock.advance(31_000)
    m.tick()
    append_small(plog, 3, timestamp=clock())
    clock.advance(2_000)
    m.tick()
    lines = (Path(plog.log_dir) / "replication-offset-checkpoint").read_text().split("\n")
    return next(int(line.split()[2]) for line in lines[2:] if line.startswith("t 0 "))


def checkpointed_log_start(m: LogManager, plog: Any, clock: FakeClock) -> int:
    """The partition's entry in log-start-offset-checkpoint (0: none) after its start moved to 2 and 2 s passed
    beyond the first round."""
    append_small(plog, 3, timestamp=clock())
    clock.advance(31_000)
    m.tick()
    plog.advance_log_start_offset(2)  # as DeleteRecords does, without asking for a checkpoint
    clock.advance(2_000)
    m.tick()
    path = Path(plog.log_dir) / "log-start-offset-checkpoint"
    lines = path.read_text().split("\n") if path.exists() else []
    return next((int(line.split()[2]) for line in lines[2:] if line.startswith("t 0 ")), 0)


def stored_codec(_m: LogManager, plog: Any, clock: FakeClock) -> str:
    """The codec of a gzip batch once stored."""
    from kjbod.storage.records import CODEC_NAMES

    plog.append(kp_batch([b"x" * 100], timestamp=clock(), compression=1))
    plog.flush()
    attributes = int.from_bytes(Path(plog.active_segment.log_path).read_bytes()[21:23], "big")
    return CODEC_NAMES[attributes & 0x07]


def stored_level(codec: int, levels: tuple[int, ...]) -> Callable[[LogManager, Any, FakeClock], int | None]:
    """Which of ``levels`` compressed an uncompressed batch stored in ``codec`` (each level's output differs)."""
    from kjbod.storage.records import RECORD_BATCH_OVERHEAD, build_batch, compress

    def scenario(_m: LogManager, plog: Any, clock: FakeClock) -> int | None:
        rnd = random.Random(7)  # text of a few hundred words: each level compresses it differently
        words = [bytes(rnd.choice(b"abcdefghij") for _ in range(rnd.randint(2, 8))) for _ in range(300)]
        sent = build_batch([(None, b" ".join(rnd.choice(words) for _ in range(6000)), [], clock())])
        plog.append(sent)
        plog.flush()
        stored = Path(plog.active_segment.log_path).read_bytes()
        matches = [lv for lv in levels if stored[RECORD_BATCH_OVERHEAD:] ==
                   compress(codec, sent[RECORD_BATCH_OVERHEAD:], lv)]
        return matches[0] if len(matches) == 1 else None

    return scenario


def keyed_update(plog: Any, key: bytes, value: bytes | None, ts: int = T0) -> None:
    from kjbod.storage.records import build_batch

    plog.append(build_batch([(key, value, [], ts)]))


def records_after_cleaning(keys: int = 2, rounds: int = 6, *, wait_ms: int = 0,
                           tombstone: bool = False) -> Callable[[LogManager, Any, FakeClock], int]:
    """Updates to a few keys (each append its own batch) in closed segments, a cleaner round, then two more after
    ``wait_ms`` (with ``tombstone``, a tombstone for key 0 first); the records the log then holds."""
    def scenario(manager: LogManager, plog: Any, clock: FakeClock) -> int:
        for r in range(rounds):
            for k in range(keys):
                keyed_update(plog, b"k%d" % k, b"v%d" % r, clock())
        if tombstone:
            keyed_update(plog, b"k0", None, clock())
        plog.roll()
        manager.clean_dir(plog.log_dir)
        clock.advance(wait_ms)
        for k in range(1 if tombstone else 0, keys):  # new dirty data, so the log is due again (not for k0)
            keyed_update(plog, b"k%d" % k, b"again", clock())
        plog.roll()
        manager.clean_dir(plog.log_dir)
        manager.clean_dir(plog.log_dir)
        return sum(h.records_count for s in plog.segments for _, h in s.iter_headers(0))
    return scenario


def cleaned_after_backoff(manager: LogManager, plog: Any, clock: FakeClock) -> bool:
    manager.tick()  # nothing to clean yet: the cleaner backs off
    for r in range(6):
        keyed_update(plog, b"k", b"v%d" % r)
    plog.roll()
    clock.advance(1000)
    manager.tick()
    return plog.cleaner_offset is not None


def distinct_keys_cleaned(manager: LogManager, plog: Any, clock: FakeClock) -> bool:
    for i in range(20):
        keyed_update(plog, b"k%d" % i, b"v")
    plog.roll()
    manager.clean_dir(plog.log_dir)
    return plog.cleaner_offset is not None


COMPACT = {**SMALL_SEGMENTS, "log.cleanup.policy": "compact"}
RATIO_1 = {**COMPACT, "log.cleaner.min.cleanable.ratio": "1"}

BIG = {**COMPACT, "log.segment.bytes": "100000"}  # the 20 keys in one segment

# key, value, other settings both runs share, scenario, outcome at Kafka's default, outcome with the key set.
# The batches are about 75 bytes: four fill a 300-byte segment. Time retention takes every segment (the log rolls
# so an empty one remains); 300 bytes of retention keep the last two segments; an index entry is added for every
# batch but the first once index.interval.bytes is 0; a deleted segment leaves three .deleted files.
CASES: list[tuple[str, str, dict[str, str], Callable[[LogManager, Any, FakeClock], Any], Any, Any]] = [
    ("log.segment.bytes", "300", {}, segments_after(10), 1, 3),
    ("log.roll.ms", "1000", {}, segments_after_a_gap(2000), 1, 2),
    ("log.roll.hours", "1", {}, segments_after_a_gap(2 * HOUR), 1, 2),
    # A gap of exactly segment.ms rolls nothing; with jitter the segment rolls up to that much sooner (drawn from
    # [0, 10**9): it stays put only on a draw of 0).
    ("log.roll.jitter.ms", "1000000000", {"log.roll.ms": "1000000000"}, segments_after_a_gap(10**9), 1, 2),
    ("log.roll.jitter.hours", "1", {"log.roll.ms": str(HOUR)}, segments_after_a_gap(HOUR), 1, 2),
    ("log.retention.ms", "1000", SMALL_SEGMENTS, log_start_after_retention(10_000), 0, 12),
    ("log.retention.minutes", "1", SMALL_SEGMENTS, log_start_after_retention(2 * 60_000), 0, 12),
    ("log.retention.hours", "1", SMALL_SEGMENTS, log_start_after_retention(2 * HOUR), 0, 12),
    ("log.retention.bytes", "300", SMALL_SEGMENTS, log_start_after_retention(0), 0, 4),
    ("message.max.bytes", "100", {}, accepts_a_big_batch, True, False),
    ("log.index.interval.bytes", "0", {}, index_entries, 0, 19),
    ("log.index.size.max.bytes", "16", {"log.index.interval.bytes": "0"}, segments_after(10), 1, 5),
    ("log.flush.interval.messages", "1", {}, recovery_point_after_one, 0, 1),
    ("log.flush.interval.ms", "1000", {}, recovery_point_after_a_tick, 0, 1),
    ("log.segment.delete.delay.ms", "0", {**SMALL_SEGMENTS, "log.retention.bytes": "300"}, deleted_files_left,
     3, 0),
    ("log.message.timestamp.before.max.ms", "1000", {}, accepts_a_batch_stamped(-HOUR), True, False),
    ("log.message.timestamp.after.max.ms", "1000", {}, accepts_a_batch_stamped(HOUR), True, False),
    # Kafka's deprecated key holds both ways where before/after are unset, and gives way to them where they are set.
    ("log.message.timestamp.difference.max.ms", "1000", {}, accepts_a_batch_stamped(-HOUR), True, False),
    ("log.message.timestamp.difference.max.ms", "1000", {"log.message.timestamp.after.max.ms": str(2 * HOUR)},
     accepts_a_batch_stamped(HOUR), True, True),
    ("log.message.timestamp.type", "LogAppendTime", {}, stored_timestamp_type, "CreateTime", "LogAppendTime"),
    ("producer.id.expiration.ms", "1000", {"producer.id.expiration.check.interval.ms": "1000"},
     producer_known_after(5_000), True, False),
    ("producer.id.expiration.check.interval.ms", "1000", {"producer.id.expiration.ms": "1000"},
     producer_known_after(5_000), True, False),
    ("replica.high.watermark.checkpoint.interval.ms", "1000", {}, checkpointed_high_watermark, 0, 3),
    ("log.flush.start.offset.checkpoint.interval.ms", "1000", {}, checkpointed_log_start, 0, 2),
    # Kafka's synonym: log.flush.interval.ms defaults to log.flush.scheduler.interval.ms.
    ("log.flush.scheduler.interval.ms", "1000", {}, recovery_point_after_a_tick, 0, 1),
    ("compression.type", "zstd", {}, stored_codec, "gzip", "zstd"),
    ("compression.gzip.level", "1", {"compression.type": "gzip"}, stored_level(1, (-1, 1)), -1, 1),
    ("compression.lz4.level", "1", {"compression.type": "lz4"}, stored_level(3, (9, 1)), 9, 1),
    ("compression.zstd.level", "1", {"compression.type": "zstd"}, stored_level(4, (3, 1)), 3, 1),
    # Compaction: 12 updates of 2 keys, then 2 more; compacted, only the 2 newest remain.
    ("log.cleanup.policy", "compact", SMALL_SEGMENTS, records_after_cleaning(), 14, 2),
    ("log.cleaner.enable", "false", COMPACT, records_after_cleaning(), 2, 14),
    ("log.cleaner.min.cleanable.ratio", "1", COMPACT, records_after_cleaning(), 2, 14),
    ("log.cleaner.min.compaction.lag.ms", "3600000", COMPACT, records_after_cleaning(), 2, 14),
    ("log.cleaner.max.compaction.lag.ms", "1000", RATIO_1, records_after_cleaning(wait_ms=2000), 14, 2),
    # k0's tombstone stays through the second clean within delete.retention.ms, and goes after it.
    ("log.cleaner.delete.retention.ms", "1000", {**COMPACT, "log.cleaner.min.cleanable.ratio": "0.01"},
     records_after_cleaning(wait_ms=2000, tombstone=True), 2, 1),
    ("log.cleaner.backoff.ms", "500", COMPACT, cleaned_after_backoff, False, True),
    # The key map holds 24 bytes a key at 90%, shared out between the threads: too small for 20 keys, no clean.
    ("log.cleaner.dedupe.buffer.size", "240", BIG, distinct_keys_cleaned, True, False),
    ("log.cleaner.threads", "10", {**BIG, "log.cleaner.dedupe.buffer.size": "2400"}, distinct_keys_cleaned,
     True, False),
    ("log.cleaner.io.buffer.load.factor", "0.05", {**BIG, "log.cleaner.dedupe.buffer.size": "2400"},
     distinct_keys_cleaned, True, False),
]


@pytest.mark.parametrize(("key", "value", "shared", "scenario", "at_default", "when_set"), CASES,
                         ids=[c[0] for c in CASES])
def test_the_key_changes_what_storage_does(tmp_path, key, value, shared, scenario, at_default, when_set):
    assert run(tmp_path / "default", shared, scenario) == at_default
    assert run(tmp_path / "set", {**shared, key: value}, scenario) == when_set


def test_log_cleanup_policy_takes_delete_and_compact_and_nothing_else():
    assert build_config({**BASE, "log.dirs": "/d", "log.cleanup.policy": "delete"}).log_cleanup_policy == "delete"
    assert build_config({**BASE, "log.dirs": "/d",
                         "log.cleanup.policy": "compact, delete"}).log_cleanup_policy == "compact,delete"
    with pytest.raises(ConfigError, match="log.cleanup.policy"):
        build_config({**BASE, "log.dirs": "/d", "log.cleanup.policy": "shred"})


def test_the_cleaner_throttle_reaches_the_cleaner_and_holds_it_to_the_rate(tmp_path, monkeypatch):
    from kjbod.storage import cleaner

    config = build_config({**BASE, "log.dirs": "/d", "log.cleaner.io.max.bytes.per.second": "1000"})
    assert cleaner_config(config).io_max_bytes_per_second == 1000
    assert cleaner_config(build_config({**BASE, "log.dirs": "/d"})).io_max_bytes_per_second > 1e300
    asked: list[float] = []
    monkeypatch.setattr(cleaner.time, "sleep", asked.append)
    monkeypatch.setattr(cleaner.time, "monotonic", lambda: 100.0)  # no time passes: every byte is ahead
    cleaner.Throttler(float("inf"), lambda: None).add(10_000)
    assert asked == []
    with pytest.raises(RuntimeError):  # stops once asked to, while it waits
        cleaner.Throttler(1000, lambda: (_ for _ in ()).throw(RuntimeError()) if asked else None).add(2000)
    assert asked and asked[0] > 0


def test_the_nodes_storage_and_mover_run_as_the_keys_say(tmp_path):
    # The timer keys used to stop here: the node built its LogManager without them (retention every 300 s counted
    # from each start, checkpoints every 60 s). tests/storage/test_manager.py shows the manager following its
    # timers, tests/datapath/test_config_live.py a running node doing it; tests/kip113 shows the throttle and the
    # mover threads at work.
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
    config = build_config({**BASE, "log.dirs": ",".join(dirs), "log.retention.check.interval.ms": "1234",
                           "log.flush.offset.checkpoint.interval.ms": "2345", "log.initial.task.delay.ms": "345",
                           "replica.alter.log.dirs.io.max.bytes.per.second": "5000000",
                           "num.replica.alter.log.dirs.threads": "3", "log.dir.stall.timeout.ms": "4567",
                           "log.dir.slow.threshold.ms": "678", "log.dir.reserved.bytes": "123456",
                           "log.dir.space.check.interval.ms": "789",
                           "replica.high.watermark.checkpoint.interval.ms": "456",
                           "producer.id.expiration.ms": "5678", "producer.id.expiration.check.interval.ms": "6789"})

    async def opened() -> tuple[int, ...]:
        node = build_combined_node(config)
        await open_storage(node)
        try:
            node._start_mover()
            m = node.logs.manager
            return (m.retention_check_interval_ms, m.checkpoint_interval_ms, m.initial_task_delay_ms,
                    node.mover.throttle.rate, node.mover.threads, m.watchdog.stall_timeout_s,
                    m.watchdog.slow_threshold_s, m.dir_io(dirs[0]).reserved_bytes, m.space_check_interval_ms,
                    m.hw_checkpoint_interval_ms, m.producer_id_expiration_ms,
                    m.producer_id_expiration_check_interval_ms)
        finally:
            if node.mover is not None:
                node.mover.stop()
            node.logs.close()
            node.metadata_log.close()

    assert asyncio.run(opened()) == (1234, 2345, 345, 5_000_000, 3, 4.567, 0.678, 123456, 789, 456, 5678, 6789)


def test_segment_jitter_is_drawn_per_segment_below_both_limits():
    from kjbod.storage.config import LogConfig

    assert LogConfig().random_segment_jitter() == 0  # Kafka's default: no jitter
    draws = {LogConfig(segment_ms=100, segment_jitter_ms=1000).random_segment_jitter() for _ in range(500)}
    assert draws <= set(range(100)) and len(draws) > 50  # below segment.ms when the jitter is larger
    draws = {LogConfig(segment_ms=10**6, segment_jitter_ms=10).random_segment_jitter() for _ in range(500)}
    assert draws == set(range(10))
    with pytest.raises(ValueError, match="segment.jitter.ms"):
        LogConfig(segment_jitter_ms=-1)
