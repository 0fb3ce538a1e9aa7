"""The metadata log: `__cluster_metadata-0` in `metadata.log.dir`, a Kafka partition log, and its snapshots.

Strategy: the log is an ordinary partition log (kjbod.storage.log.PartitionLog: Kafka's segment format with
`.log`, `.index` and `.timeindex` files, rolling at `metadata.log.segment.bytes`, a damaged tail copied aside as
`<segment>.log.<position>-<ms>.corrupt` and truncated) that only this module writes. What it adds:

* **Framing.** Records are framed as Kafka frames them (kjbod.storage.metadata_records): a null key and a value of
  frame version, api key, record version, body. Every batch carries the controller's epoch as its partition
  leader epoch.
* **Epochs.** A writer (the controller) starts a new epoch when it loads the log: epoch = last epoch + 1, and a
  control batch with a LeaderChangeMessage (leader and voters = this node) opens it, as a KRaft leader's first
  write does. An observer (a broker following the controller) appends fetched batches unchanged.
* **Durability.** `append` writes one batch and fsyncs it before it returns; with one controller the committed
  end (the high watermark) is the fsynced end. Listeners added with `add_commit_listener` hear of each commit
  (the Fetch long poll wakes on them).
* **Snapshots** (kjbod.storage.metadata_snapshot): `write_snapshot(records, end_offset)` writes
  `<end offset>-<epoch>.checkpoint`. Old snapshots go as Kafka's metadata log lets them go: oldest first, never
  the newest, while the log and the snapshots together are over `metadata.max.retention.bytes` or the oldest
  snapshot's last record is older than `metadata.max.retention.ms`; with each, the log start moves up to the next
  snapshot (to the start of the segment holding its end offset) and the segments wholly below it are deleted.
  Checked after each snapshot written or installed and at load (Kafka also checks once a minute: here nothing
  can grow between snapshots that a check would find).
  `load` uses the newest snapshot that reads back whole; one with a bad CRC or cut short is logged, renamed to
  `<name>.<ms>.corrupt` and the one before it used.
* **Loading** returns the records to replay: the snapshot's, then the log's after the snapshot's end offset
  (control records are not returned). Every segment is re-validated at load, so a torn tail from a crash, or a
  batch with a bad CRC in mid-file, ends the log there (the rest is copied aside; if the disk has no room for the
  copy the tail is truncated in place and the dropped byte range logged).
* **Migration.** A log written by kjbod 0.1 (one `00000000000000000000.log`, epoch 0, no LeaderChangeMessage, no
  indexes) is the same format minus those: its indexes are rebuilt at load and the first epoch started on it is 1.

* **KIP-853 control records.** KRaftVersionRecord and VotersRecord (in the log, or in a snapshot after its
  header) are kept as (offset, record) pairs, a snapshot's at its last offset: `kraft_version` and `voters` are
  the latest (Kafka's KRaftControlRecordStateMachine: a voter set counts from the moment it is in the log,
  committed or not); a truncation drops those it cuts off, and a snapshot written carries those below its end.

A record of a type this version does not know stops the load with MetadataLogError (the image cannot be built
without it); the node reports it as one line.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

import structlog

from kjbod.protocol.generated.feature_level_record import FeatureLevelRecord
from kjbod.protocol.generated.leader_change_message import LeaderChangeMessage, Voter
from kjbod.protocol.generated.voters_record import VotersRecord
from kjbod.protocol.runtime import DecodeError
from kjbod.storage.checkpoint import PARTITION_METADATA_FILE, render_partition_metadata
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import StorageError, StorageSetupError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import PartitionLog
from kjbod.storage.metadata_records import (
    KRAFT_CONTROL_TYPES,
    LEADER_CHANGE,
    UnknownRecordTypeError,
    control_batch,
    control_batch_of,
    control_type,
    decode_control,
    frame_record,
    kraft_control_records,
    kraft_state,
    record_version,
    records_batch,
    unframe_record,
)
from kjbod.storage.metadata_snapshot import (
    BOOTSTRAP_FILE,
    DELETE_SUFFIX,
    PARTIAL_SUFFIX,
    Snapshot,
    SnapshotFormatError,
    SnapshotId,
    build_snapshot,
    list_snapshots,
    parse_snapshot,
    read_snapshot_range,
    snapshot_timestamp,
    write_snapshot_file,
)
from kjbod.storage.records import iter_batches, iter_records, parse_header
from kjbod.storage.segment import LogSegment

log = structlog.get_logger("kjbod.metadata_log")

TOPIC = "__cluster_metadata"
TOPIC_DIR = "__cluster_metadata-0"
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's Uuid.METADATA_TOPIC_ID, in partition.metadata as Kafka writes it
# Kafka's defaults: metadata.log.segment.bytes 1 GiB, a metadata batch at most 8 MiB.
DEFAULT_SEGMENT_BYTES = 1 << 30
MAX_BATCH_BYTES = 8 << 20
DEFAULT_SNAPSHOT_BYTES = 20 << 20  # metadata.log.max.record.bytes.between.snapshots
DEFAULT_SEGMENT_MS = 7 * 24 * 3_600_000  # metadata.log.segment.ms
DEFAULT_SEGMENT_MIN_BYTES = 8 << 20  # metadata.log.segment.min.bytes (Kafka's internal key)
DEFAULT_RETENTION_BYTES = 100 << 20  # metadata.max.retention.bytes
DEFAULT_RETENTION_MS = 7 * 24 * 3_600_000  # metadata.max.retention.ms
_READ_CHUNK = 8 << 20
# Free space kept when copying a damaged tail aside: below it the tail is truncated in place.
_ASIDE_MARGIN = 1 << 20

__all__ = ["DEFAULT_RETENTION_BYTES", "DEFAULT_RETENTION_MS", "DEFAULT_SEGMENT_BYTES", "DEFAULT_SEGMENT_MS",
           "DEFAULT_SNAPSHOT_BYTES", "TOPIC", "TOPIC_DIR", "MetadataLog", "MetadataLogError", "frame_record",
           "metadata_log_options", "unframe_record"]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class MetadataLogOptions(TypedDict):
    segment_bytes: int
    segment_ms: int
    retention_bytes: int
    retention_ms: int


def metadata_log_options(config: Any) -> MetadataLogOptions:
    """MetadataLog's keyword arguments from a node's config (the metadata.log.segment.* and
    metadata.max.retention.* keys; Kafka's defaults where the config has no such attribute). A segment size below
    metadata.log.segment.min.bytes stops the start, as in Kafka."""
    segment_bytes = int(getattr(config, "metadata_log_segment_bytes", DEFAULT_SEGMENT_BYTES))
    least = int(getattr(config, "metadata_log_segment_min_bytes", DEFAULT_SEGMENT_MIN_BYTES))
    if segment_bytes < least:
        raise MetadataLogError(f"Cannot set metadata.log.segment.bytes below {least}: {segment_bytes}")
    return {"segment_bytes": segment_bytes,
            "segment_ms": int(getattr(config, "metadata_log_segment_ms", DEFAULT_SEGMENT_MS)),
            "retention_bytes": int(getattr(config, "metadata_max_retention_bytes", DEFAULT_RETENTION_BYTES)),
            "retention_ms": int(getattr(config, "metadata_max_retention_ms", DEFAULT_RETENTION_MS))}


class MetadataLogError(StorageSetupError):
    """The metadata log cannot be loaded (an unknown record type, a gap no snapshot covers): one line."""


class _MetadataPartitionLog(PartitionLog):
    """The partition log, except that a damaged tail is truncated in place when there is no room to copy it."""

    def _set_aside_tail(self, seg: LogSegment, valid_bytes: int, bad_bytes: int, reason: str | None,
                        bad_offset: int | None, next_offset: int | None) -> None:
        try:
            usable = self.io.statvfs()[1]
        except StorageError:
            usable = 0
        if usable >= bad_bytes + _ASIDE_MARGIN:
            super()._set_aside_tail(seg, valid_bytes, bad_bytes, reason, bad_offset, next_offset)
            return
        seg.truncate_bytes(valid_bytes)
        self.load_stats.truncated_bytes += bad_bytes
        log.warning("metadata_log_tail_truncated_in_place", partition=self.name,
                    segment=os.path.basename(seg.log_path), dropped_from_byte=valid_bytes,
                    dropped_to_byte=valid_bytes + bad_bytes,
                    offset=next_offset if next_offset is not None else seg.base_offset,
                    reason=reason, why="no room to copy the damaged tail aside", usable_bytes=usable)


class MetadataLog:
    """`<metadata_dir>/__cluster_metadata-0`: load, append (fsynced), read committed batches, snapshots."""

    def __init__(self, metadata_dir: str, *, node_id: int = 1, writer: bool = True,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, clock: Callable[[], int] = _wall_ms,
                 replicated: bool = False, segment_ms: int = DEFAULT_SEGMENT_MS,
                 retention_bytes: int = DEFAULT_RETENTION_BYTES, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.root = os.path.abspath(metadata_dir)
        self.dir = os.path.join(self.root, TOPIC_DIR)
        self.path = os.path.join(self.dir, f"{0:020d}.log")  # the first segment (kjbod 0.1 had only this one)
        self.node_id = node_id
        self.writer = writer
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.retention_bytes = retention_bytes  # negative: no limit (metadata.max.retention.bytes)
        self.retention_ms = retention_ms  # negative: no limit (metadata.max.retention.ms)
        self.clock = clock
        # A voter of a KRaft quorum (kjbod.raft): the quorum, not the fsync, decides what is committed, so a
        # loaded log's tail is not taken as committed and epochs are started by the quorum, not by load().
        self.replicated = replicated
        self.epoch = 0
        self.bytes_since_snapshot = 0
        self.io: LogDirIO | None = None
        self._plog: PartitionLog | None = None
        self._snapshot: Snapshot | None = None
        self._hw = 0
        self._epochs: list[tuple[int, int]] = []
        # After load(): the offset of each record it returned (a snapshot's records: the snapshot's last offset,
        # as Kafka's image provenance after loading a snapshot). Control records take offsets too, so the
        # records are not contiguous: replay with these, not with next_offset - len(records).
        self.loaded_offsets: list[int] = []  # (epoch, its first offset), ascending: the leader epoch cache
        self._listeners: list[Callable[[int], None]] = []
        self._write_lock = threading.Lock()
        self._kraft: list[tuple[int, Any]] = []  # (offset, KRaftVersionRecord | VotersRecord), ascending
        # The cluster's metadata.version as the writer last replayed it (the controller sets it): the version of
        # the partition records written (kjbod.storage.metadata_records.record_version); None: the highest.
        self.metadata_version: int | None = None
        self.bootstrap_levels: dict[str, int] | None = None  # from bootstrap.checkpoint, read by load()

    # ------------------------------------------------------------------------------------------ state

    @property
    def next_offset(self) -> int:
        return self._plog.log_end_offset if self._plog is not None else 0

    @property
    def high_watermark(self) -> int:
        """The committed end: records below it are durable (one controller: fsynced) and may be served."""
        return self._hw

    @property
    def log_start_offset(self) -> int:
        return self._plog.log_start_offset if self._plog is not None else 0

    @property
    def is_open(self) -> bool:
        return self._plog is not None

    @property
    def log(self) -> PartitionLog:
        if self._plog is None:
            raise RuntimeError("metadata log is not open")
        return self._plog

    @property
    def kraft_version(self) -> int:
        """The kraft.version level the log is at: 0 (static voters) unless a KRaftVersionRecord says otherwise."""
        return kraft_state(self._kraft)[0]

    @property
    def voters(self) -> VotersRecord | None:
        """The latest VotersRecord in the log or its snapshot (None: the voter set is the static configuration)."""
        return kraft_state(self._kraft)[1]

    @property
    def kraft_changes(self) -> list[tuple[int, Any]]:
        """(offset, KRaftVersionRecord | VotersRecord) of every KIP-853 control record the log holds, ascending."""
        return list(self._kraft)

    def add_commit_listener(self, fn: Callable[[int], None]) -> None:
        """`fn(high_watermark)` after each commit, on the appending thread."""
        self._listeners.append(fn)

    def remove_commit_listener(self, fn: Callable[[int], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    # ------------------------------------------------------------------------------------------ load

    def load(self) -> list[Any]:
        """Open the log and return the records to replay, in order (see the module doc)."""
        io = LogDirIO(self.root)
        self.io = io
        io.mkdir(self.dir, exist_ok=True, parents=True)
        self.bootstrap_levels = self._read_bootstrap(io)
        for name in io.listdir(self.dir):
            if name.endswith((PARTIAL_SUFFIX, DELETE_SUFFIX)):
                io.unlink(os.path.join(self.dir, name), missing_ok=True)  # an interrupted write or delete
        snapshot = self._load_newest_snapshot(io)
        self._kraft = [(snapshot.id.end_offset - 1, m) for m in snapshot.kraft] if snapshot is not None else []
        config = LogConfig(segment_bytes=self.segment_bytes, segment_ms=self.segment_ms,
                           max_message_bytes=MAX_BATCH_BYTES, retention_ms=-1, file_delete_delay_ms=0)
        plog = _MetadataPartitionLog.load(io, self.dir, TOPIC, 0, config, had_clean_shutdown=False,
                                          recovery_point=0, clock=self.clock)
        self._plog = plog
        try:
            if plog.topic_id != TOPIC_ID:
                io.write_atomic(os.path.join(self.dir, PARTITION_METADATA_FILE),
                                render_partition_metadata(TOPIC_ID).encode())
                plog.topic_id = TOPIC_ID
            start = 0
            if snapshot is not None:
                start = snapshot.id.end_offset
                if plog.log_end_offset < start:
                    # The log ends before the snapshot (an observer that installed a fetched snapshot).
                    plog.truncate_fully_and_start_at(start)
            elif plog.log_start_offset > 0:
                raise MetadataLogError(
                    f"metadata log {self.dir} starts at offset {plog.log_start_offset} but no snapshot covers "
                    "the offsets before it")
            records = list(snapshot.records) if snapshot is not None else []
            self.loaded_offsets = [start - 1] * len(records)
            last_epoch, nbytes = self._replay_log(plog, start, records)
            if last_epoch is None:
                last_epoch = snapshot.id.epoch if snapshot is not None else 0
            self._snapshot = dataclasses.replace(snapshot, records=[]) if snapshot is not None else None
            self.bytes_since_snapshot = nbytes
            plog.flush()
            self._hw = plog.log_end_offset if not self.replicated else start
            self.epoch = last_epoch
            if self.writer and not self.replicated:
                self._start_epoch(last_epoch + 1)
            self._clean_before_snapshot()
        except BaseException:
            plog.close_quietly()
            self._plog = None
            raise
        log.info("metadata_log_loaded", dir=self.dir, records=len(records), log_start_offset=plog.log_start_offset,
                 log_end_offset=plog.log_end_offset, epoch=self.epoch,
                 snapshot=snapshot.id.file_name if snapshot is not None else None,
                 truncated_bytes=plog.load_stats.truncated_bytes)
        return records

    def _read_bootstrap(self, io: LogDirIO) -> dict[str, int] | None:
        """The feature levels of `bootstrap.checkpoint` (what `kjbod format` chose), or None when there is
        none; a damaged one is logged and ignored (the controller then starts at the latest)."""
        data = io.read_bytes_or_none(os.path.join(self.root, BOOTSTRAP_FILE))
        if data is None:
            return None
        try:
            records = parse_snapshot(data)
        except SnapshotFormatError as e:
            log.warning("bootstrap_checkpoint_unreadable", path=os.path.join(self.root, BOOTSTRAP_FILE), error=str(e))
            return None
        return {r.name: int(r.feature_level) for r in records if isinstance(r, FeatureLevelRecord)}

    def _load_newest_snapshot(self, io: LogDirIO) -> Snapshot | None:
        for sid in reversed(list_snapshots(io, self.dir)):
            path = os.path.join(self.dir, sid.file_name)
            data = io.read_bytes_or_none(path)
            if data is None:
                continue
            try:
                kraft: list[Any] = []
                records = parse_snapshot(data, kraft)
                return Snapshot(sid, path, len(data), records, tuple(kraft))
            except SnapshotFormatError as e:
                aside = f"{path}.{self.clock()}.corrupt"
                io.rename(path, aside)
                log.warning("metadata_snapshot_refused", path=path, error=str(e), moved_to=aside)
        return None

    def _replay_log(self, plog: PartitionLog, start: int, out: list[Any]) -> tuple[int | None, int]:
        """Append the log's records from offset `start` to `out` and build the epoch cache from every batch;
        (epoch of the last batch, bytes from `start`)."""
        offset = plog.log_start_offset
        last_epoch: int | None = None
        nbytes = 0
        self._epochs = []
        while offset < plog.log_end_offset:
            data = plog.read_bytes(offset, _READ_CHUNK)
            if not data:
                break
            view = memoryview(data)
            for pos, header in iter_batches(view):
                last_epoch = header.partition_leader_epoch
                self._note_epoch(header.partition_leader_epoch, header.base_offset)
                if header.last_offset < start:
                    offset = header.next_offset
                    continue
                nbytes += header.size
                if not header.is_control:
                    for rec in iter_records(view[pos:pos + header.size]):
                        if rec.offset >= start:
                            out.append(self._decode(rec.offset, rec.value))
                            self.loaded_offsets.append(rec.offset)
                else:
                    for rec in iter_records(view[pos:pos + header.size]):
                        self._note_kraft(rec.offset, rec.key, rec.value)
                offset = header.next_offset
        return last_epoch, nbytes

    def _note_kraft(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        try:
            ctype = control_type(key)
            if ctype in KRAFT_CONTROL_TYPES:
                self._kraft.append((offset, decode_control(ctype, value)))
        except DecodeError as e:
            raise MetadataLogError(f"metadata log {self.dir}: control record at offset {offset} is unreadable: "
                                   f"{e}") from None

    def _note_fetched_kraft(self, data: bytes) -> None:
        """Keep the KIP-853 control records of batches just appended (a follower's or an observer's)."""
        try:
            self._kraft.extend(kraft_control_records(data))
        except DecodeError as e:
            log.warning("metadata_log_control_record_unreadable", dir=self.dir, error=str(e))

    def _note_epoch(self, epoch: int, offset: int) -> None:
        if not self._epochs or epoch > self._epochs[-1][0]:
            self._epochs.append((epoch, offset))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """(end offset, epoch) of the largest epoch <= `epoch` this log holds: the offset where the next epoch
        starts, or the log end for the current one (Kafka's leader epoch cache); None before the first."""
        best = None
        for i, (e, _start) in enumerate(self._epochs):
            if e > epoch:
                break
            end = self._epochs[i + 1][1] if i + 1 < len(self._epochs) else self.next_offset
            best = (end, e)
        return best

    def _decode(self, offset: int, value: bytes | None) -> Any:
        if value is None:
            raise MetadataLogError(f"metadata log {self.dir}: record at offset {offset} has no value")
        try:
            return unframe_record(value)
        except UnknownRecordTypeError as e:
            raise MetadataLogError(
                f"metadata log {self.dir}: record at offset {offset} has unknown type {e.api_key} "
                "(written by a newer version?)") from None
        except DecodeError as e:
            raise MetadataLogError(f"metadata log {self.dir}: record at offset {offset} is unreadable: {e}") from None

    def start_new_epoch(self) -> int:
        """Lead a new epoch (a controller that became leader again): a LeaderChangeMessage opens it. Returns it."""
        with self._write_lock:
            self._start_epoch(self.epoch + 1)
            return self.epoch

    def snapshot_due(self, max_bytes_between: int = DEFAULT_SNAPSHOT_BYTES) -> bool:
        """True once `metadata.log.max.record.bytes.between.snapshots` were written since the last snapshot."""
        return self.bytes_since_snapshot >= max_bytes_between

    def _start_epoch(self, epoch: int) -> None:
        """Become the leader of `epoch`: a LeaderChangeMessage opens it (committed at once: one voter)."""
        self.epoch = epoch
        me = [Voter(voter_id=self.node_id)]
        message = LeaderChangeMessage(version=0, leader_id=self.node_id, voters=me, granting_voters=list(me))
        batch = control_batch(LEADER_CHANGE, message, base_offset=self.next_offset, epoch=epoch,
                              timestamp_ms=self.clock())
        self._commit(batch)
        log.info("metadata_log_epoch_started", epoch=epoch, leader=self.node_id, offset=self.next_offset - 1)

    # ------------------------------------------------------------------------------------------ write

    def append(self, records: Iterable[Any]) -> int:
        """Write `records` as one batch of this epoch and fsync it; returns the offset of its first record."""
        values = [frame_record(r, record_version(r, self.metadata_version)) for r in records]
        with self._write_lock:
            base = self.next_offset
            if not values:
                return base
            if self._plog is None:
                raise RuntimeError("metadata log is not open")
            self._commit(records_batch(values, base_offset=base, epoch=self.epoch, timestamp_ms=self.clock()))
            return base

    def append_fetched(self, data: bytes, high_watermark: int | None = None) -> int:
        """An observer's append: whole batches fetched from the controller, offsets and epochs kept; fsynced.
        Returns the new log end offset. The high watermark is the controller's (at most the local end)."""
        with self._write_lock:
            plog = self.log
            if data:
                plog.append_as_follower(data)
                plog.flush()
                self.bytes_since_snapshot += len(data)
                for _pos, header in iter_batches(data):
                    self._note_epoch(header.partition_leader_epoch, header.base_offset)
                    self.epoch = max(self.epoch, header.partition_leader_epoch)
                self._note_fetched_kraft(data)
            hw = plog.log_end_offset if high_watermark is None else min(high_watermark, plog.log_end_offset)
            if hw > self._hw:
                self._hw = hw
                self._notify(hw)
            return plog.log_end_offset

    def _commit(self, batch: bytes) -> None:
        plog = self.log
        self._note_epoch(self.epoch, plog.log_end_offset)
        plog.append_as_follower(batch)
        plog.flush()
        self.bytes_since_snapshot += len(batch)
        self._hw = plog.log_end_offset
        self._notify(self._hw)

    def _notify(self, hw: int) -> None:
        for fn in list(self._listeners):
            try:
                fn(hw)
            except Exception:  # a listener's bug must not fail a durable append
                log.exception("metadata_commit_listener_failed")

    # ------------------------------------------------------------------------------- a quorum voter's log

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """(epoch, first offset) of every epoch the log holds, ascending (the leader epoch cache)."""
        return list(self._epochs)

    def append_leader_change(self, message: LeaderChangeMessage, epoch: int) -> int:
        """A quorum leader's first write in `epoch`: the LeaderChangeMessage control batch, fsynced, not yet
        committed. Returns the new log end offset."""
        with self._write_lock:
            self.epoch = epoch
            batch = control_batch(LEADER_CHANGE, message, base_offset=self.next_offset, epoch=epoch,
                                  timestamp_ms=self.clock())
            self._write(batch)
            return self.next_offset

    def append_control_as_leader(self, messages: list[tuple[int, Any]], epoch: int) -> int:
        """A quorum leader's control batch of `epoch` ((control type, message) pairs, e.g. a VotersRecord),
        fsynced, not yet committed. Returns the offset of its first record."""
        with self._write_lock:
            base = self.next_offset
            self.epoch = epoch
            self._write(control_batch_of(messages, base_offset=base, epoch=epoch, timestamp_ms=self.clock()))
            for i, (ctype, message) in enumerate(messages):
                if ctype in KRAFT_CONTROL_TYPES:
                    self._kraft.append((base + i, message))
            return base

    def append_as_leader(self, records: Iterable[Any], epoch: int) -> int:
        """A quorum leader's write: `records` as one batch of `epoch`, fsynced, committed only when the quorum
        says so (`advance_high_watermark`). Returns the offset of its first record."""
        values = [frame_record(r, record_version(r, self.metadata_version)) for r in records]
        with self._write_lock:
            base = self.next_offset
            if values:
                self.epoch = epoch
                self._write(records_batch(values, base_offset=base, epoch=epoch, timestamp_ms=self.clock()))
            return base

    def append_replicated(self, data: bytes) -> int:
        """A quorum follower's append: whole batches fetched from the leader, offsets and epochs kept, fsynced,
        not committed by this. Returns the new log end offset."""
        with self._write_lock:
            plog = self.log
            if data:
                plog.append_as_follower(data)
                plog.flush()
                self.bytes_since_snapshot += len(data)
                for _pos, header in iter_batches(data):
                    self._note_epoch(header.partition_leader_epoch, header.base_offset)
                    self.epoch = max(self.epoch, header.partition_leader_epoch)
                self._note_fetched_kraft(data)
            return plog.log_end_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the records at `offset` and after (a follower whose log parted from its leader's). Committed
        records are never dropped: `offset` below the high watermark is refused."""
        with self._write_lock:
            if offset < self._hw:
                raise StorageError(f"metadata log {self.dir}: truncation to offset {offset} would drop committed "
                                   f"records (high watermark {self._hw})")
            plog = self.log
            if offset >= plog.log_end_offset:
                return
            plog.truncate_to(offset)
            self._epochs = [(e, start) for e, start in self._epochs if start < offset]
            self._kraft = [(o, m) for o, m in self._kraft if o < offset]
            self.epoch = self._epochs[-1][0] if self._epochs else (
                self._snapshot.id.epoch if self._snapshot is not None else 0)
            log.info("metadata_log_truncated", dir=self.dir, offset=offset)

    def advance_high_watermark(self, hw: int) -> None:
        """The quorum committed the log up to `hw` (capped at the local end): tell the commit listeners."""
        with self._write_lock:
            hw = min(hw, self.next_offset)
            if hw <= self._hw:
                return
            self._hw = hw
        self._notify(hw)

    def read_uncommitted(self, from_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `from_offset` to the log end, committed or not (what a quorum
        leader sends its voters)."""
        return self.log.read_bytes(from_offset, max_bytes)

    def _write(self, batch: bytes) -> None:
        plog = self.log
        self._note_epoch(self.epoch, plog.log_end_offset)
        plog.append_as_follower(batch)
        plog.flush()
        self.bytes_since_snapshot += len(batch)

    # ------------------------------------------------------------------------------------------ read

    def read(self, from_offset: int, max_bytes: int) -> bytes:
        """Whole committed batches from the one holding `from_offset`, about `max_bytes` (at least one batch).
        Raises OffsetOutOfRangeError outside [log start, log end]."""
        return self.log.read_bytes(from_offset, max_bytes, max_offset=self._hw)

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the batch holding `offset`, or None when the log does not hold it."""
        plog = self.log
        if offset < plog.log_start_offset or offset >= plog.log_end_offset:
            return None
        data = plog.read_bytes(offset, 1)
        return parse_header(data).partition_leader_epoch if data else None

    # ------------------------------------------------------------------------------------------ snapshots

    def latest_snapshot(self) -> SnapshotId | None:
        """The newest snapshot a replica can be sent instead of the log. The bootstrap snapshot (0, 0) of a
        dynamic quorum is never one: it stands for no record, and its voters reach the log in the first leader's
        first batch (as Kafka sends it to nobody either)."""
        if self._snapshot is None or self._snapshot.id.end_offset == 0:
            return None
        return self._snapshot.id

    def snapshot_path(self, snapshot_id: SnapshotId) -> str:
        return os.path.join(self.dir, snapshot_id.file_name)

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[int, bytes] | None:
        """(size, bytes from `position`) of a snapshot this log has, or None (FetchSnapshot)."""
        io = self.io
        if io is None or snapshot_id not in list_snapshots(io, self.dir):
            return None
        return read_snapshot_range(io, self.snapshot_path(snapshot_id), position, max_bytes)

    def write_snapshot(self, records: Iterable[Any], end_offset: int) -> str:
        """Write the image as of `end_offset` (exclusive, at most the high watermark) as a snapshot, then drop
        older snapshots and the segments wholly below it. Returns the snapshot's path."""
        plog = self.log
        io = self.io
        assert io is not None
        if not plog.log_start_offset < end_offset <= self._hw:
            raise ValueError(f"snapshot end offset {end_offset} is outside the committed log "
                             f"[{plog.log_start_offset + 1}, {self._hw}]")
        last = parse_header(plog.read_bytes(end_offset - 1, 1))
        sid = SnapshotId(end_offset, last.partition_leader_epoch)
        if self._snapshot is not None and sid <= self._snapshot.id:
            return self._snapshot.path
        records = list(records)
        kraft_version, voters = kraft_state(self._kraft, before=end_offset)
        data = build_snapshot(records, epoch=sid.epoch, last_contained_timestamp=last.max_timestamp,
                              now_ms=self.clock(), kraft_version=kraft_version, voters=voters)
        path = write_snapshot_file(io, self.dir, sid, data)
        with self._write_lock:  # appends may go on while the snapshot is built; not while the log is cut
            self._snapshot = Snapshot(sid, path, len(data), [])
            after = self.log.read_bytes(end_offset, 1 << 62) if end_offset < self.next_offset else b""
            self.bytes_since_snapshot = len(after)
            self._clean_before_snapshot()
        log.info("metadata_snapshot_written", path=path, records=len(records), bytes=len(data))
        return path

    def install_snapshot(self, data: bytes, snapshot_id: SnapshotId) -> list[Any]:
        """An observer far behind: keep a snapshot fetched from the controller (checked whole), empty the log to
        start at its end offset, and return its records (the image to replace the current one)."""
        kraft: list[Any] = []
        records = parse_snapshot(data, kraft)
        io = self.io
        assert io is not None
        with self._write_lock:
            path = write_snapshot_file(io, self.dir, snapshot_id, data)
            self._snapshot = Snapshot(snapshot_id, path, len(data), [], tuple(kraft))
            self._kraft = [(snapshot_id.end_offset - 1, m) for m in kraft]
            self.log.truncate_fully_and_start_at(snapshot_id.end_offset)
            self.log.flush()
            self._epochs = []
            self._hw = snapshot_id.end_offset
            self.epoch = max(self.epoch, snapshot_id.epoch)
            self.bytes_since_snapshot = 0
            self._clean_before_snapshot()
            self.log.deletions.run_due(1 << 62)
        return records

    def _clean_before_snapshot(self) -> None:
        """Kafka's retention of snapshots (see the module doc): while the oldest snapshot is over a limit and a
        newer one exists, delete it and move the log start up to the next one, deleting the segments wholly below
        that. Stops at a snapshot beyond the committed log (nothing to cut there yet)."""
        io = self.io
        if self._snapshot is None or io is None:
            return
        ids = list_snapshots(io, self.dir)
        sizes = {}
        for sid in ids:
            st = io.stat_or_none(os.path.join(self.dir, sid.file_name))
            sizes[sid] = st.st_size if st is not None else 0
        snapshot_bytes = sum(sizes.values())
        plog = self.log
        now = self.clock()
        while len(ids) > 1:
            oldest, following = ids[0], ids[1]
            over_size = 0 <= self.retention_bytes < plog.size_bytes + snapshot_bytes
            over_age = False
            if not over_size and self.retention_ms >= 0:
                stamp = snapshot_timestamp(io, os.path.join(self.dir, oldest.file_name))
                over_age = stamp is not None and now - stamp > self.retention_ms
            if not (over_size or over_age):
                return
            if following.end_offset > self._hw:
                return
            bases = [seg.base_offset for seg in plog.segments if seg.base_offset <= following.end_offset]
            if bases and bases[-1] > plog.log_start_offset:
                plog.advance_log_start_offset(bases[-1])
                plog.deletions.run_due(1 << 62)
            io.unlink(os.path.join(self.dir, oldest.file_name), missing_ok=True)
            log.info("metadata_snapshot_deleted", snapshot=oldest.file_name,
                     reason="metadata.max.retention.bytes" if over_size else "metadata.max.retention.ms",
                     log_start_offset=plog.log_start_offset)
            snapshot_bytes -= sizes[oldest]
            ids.pop(0)

    # ------------------------------------------------------------------------------------------ close

    def close(self) -> None:
        if self._plog is not None:
            self._plog.close()
            self._plog = None
